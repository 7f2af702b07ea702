"""The ``README.md`` written into every output directory: what was trimmed, how, what is
covered and what is not, the files, the environment, how to serve it, and validation status
(``unverified`` until a check is actually executed)."""

from __future__ import annotations

import json
import os
import re
import shlex
from datetime import datetime, timezone
from pathlib import Path

from ..plan.config_edit import MISSING, short_value
from ..probe.environment import environment
from ..plan.budget import DEFAULT_GPU_MEMORY_UTILIZATION, BudgetInputs, default_serve, served_kv_cache_dtype
from ..plan.build import TrimPlan
from ..plan.check_result import judge_line
from ..read.source import FileKind
from ..units import human_bytes, shown_bytes
from .launch_text import output_warnings


VALIDATION_CHECKS = (
    "config loads offline (AutoConfig, local files only)",
    "tokenizer loads offline",
    "vllm serve starts (health endpoint)",
    "generation: prefill + multi-step decode",
    "target-path requests (long prompt / image / speculative)",
)


def _short(value) -> str:
    """A config value in a Markdown table cell."""
    if value is MISSING:
        return "*(absent)*"
    return "`" + short_value(value, 70, ensure_ascii=False, count_items=True).replace("|", "\\|") + "`"


MTP_SPECULATIVE = {"method": "mtp", "num_speculative_tokens": 1}


def _serve_args(plan: TrimPlan, serve: BudgetInputs | None) -> list[str]:
    """The parallelism and memory flags: ``serve``'s values, else the defaults with TP and the
    utilisation left as shell variables."""
    s = serve or default_serve(plan)
    tp = str(s.tp) if serve else "${TP:-1}"
    utilization = f"{s.gpu_memory_utilization:g}" if serve else f"${{GPU_MEMORY_UTILIZATION:-{DEFAULT_GPU_MEMORY_UTILIZATION}}}"
    args = ["--tensor-parallel-size", tp]
    if s.pp > 1:
        args += ["--pipeline-parallel-size", str(s.pp)]
    if s.dp > 1:
        args += ["--data-parallel-size", str(s.dp)]
    if s.expert_parallel:
        args.append("--enable-expert-parallel")
    args += [
        "--max-model-len", str(s.max_model_len),
        "--max-num-seqs", str(s.max_num_seqs),
        "--max-num-batched-tokens", str(s.max_num_batched_tokens or s.max_model_len),
        "--gpu-memory-utilization", utilization,
    ]
    kv_cache_dtype = served_kv_cache_dtype(plan, s.kv_cache_dtype)
    if kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", kv_cache_dtype]
    return args


def serve_command(plan: TrimPlan, out_dir: Path | str, mode: str, serve: BudgetInputs | None = None) -> str:
    """The ``vllm serve`` command of the report; ``serve``: literal settings (else TP and the
    memory utilisation are shell variables with defaults). ``out_dir`` may be a shell word
    already (``"$MODEL_DIR"`` in serve.sh)."""
    args = ["vllm", "serve", str(out_dir), "--host", "127.0.0.1", "--port", "${PORT:-8000}"]
    if mode == "dummy":
        args[3:3] = ["--load-format", "dummy"]
    args += _serve_args(plan, serve) + ["--enforce-eager"]
    if plan.mtp_kept and "mtp" in plan.inventory.submodels:
        # the kept MTP layer runs only as the drafter of speculative decoding
        args += ["--speculative-config", json.dumps(MTP_SPECULATIVE, separators=(",", ":"))]
    if plan.inventory.source.custom_code_present and plan.inventory.source.config.get("auto_map"):
        args.append("--trust-remote-code")
    quoted = " ".join(a if a.startswith(("${", '"$')) else shlex.quote(a) for a in args)  # shell words kept as written
    default = default_devices(serve)
    env = (
        f'CUDA_VISIBLE_DEVICES="${{CUDA_VISIBLE_DEVICES:-${{MACA_VISIBLE_DEVICES:-{default}}}}}" '
        f'MACA_VISIBLE_DEVICES="${{MACA_VISIBLE_DEVICES:-${{CUDA_VISIBLE_DEVICES:-{default}}}}}" \\\n'
        "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \\\n"
    )
    return env + quoted


def gpus_needed(serve: BudgetInputs) -> int:
    """The devices one ``vllm serve`` of these settings takes on its host: TP × PP × DP."""
    return max(1, serve.tp) * max(1, serve.pp) * max(1, serve.dp)


def default_devices(serve: BudgetInputs | None) -> str:
    """The device list the serve command exposes when neither CUDA_VISIBLE_DEVICES nor
    MACA_VISIBLE_DEVICES is set: the first TP × PP × DP GPUs (a shell expression of ``$TP``
    where TP is left to the shell). A variable the user set is passed on unchanged, and one
    of the two names the same GPUs for the other."""
    if serve is None:
        return "$(seq -s, 0 $((${TP:-1} - 1)))"
    return ",".join(str(i) for i in range(gpus_needed(serve)))


_SHELL_DEFAULT = re.compile(r"\$\{[A-Za-z_]\w*:-([^${}]*)\}")  # ${PORT:-8000}: what the shell uses when PORT is unset


def typed_serve_command(serve: dict) -> str | None:
    """The serve command of an output as a person types it, on one line (what the wizard shows
    and copies): ``serve`` is ``mxtrim-plan.json``'s object, whose ``command`` is the README's;
    the devices are listed (the first TP × PP × DP GPUs, :func:`default_devices`) and PORT, TP
    and the memory utilisation written out. README.md and serve.sh keep the command that
    follows the visible devices, PORT and TP a user has set. None: no such command in ``serve``."""
    command = serve.get("command")
    start = command.find("vllm serve ") if isinstance(command, str) else -1
    counts = [serve.get(k, 1) for k in ("tp", "pp", "dp")]
    if start < 0 or not all(type(n) is int and n > 0 for n in counts):
        return None
    devices = default_devices(BudgetInputs(tp=counts[0], pp=counts[1], dp=counts[2]))
    try:  # the command's other variables (HF_HUB_OFFLINE=1 …), kept as they are
        env = shlex.split(command[:start].replace("\\\n", " "))
    except ValueError:
        return None
    env = [f"{name}={devices}" for name in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES")] + [
        shlex.quote(word) for word in env if not word.startswith(("CUDA_VISIBLE_DEVICES=", "MACA_VISIBLE_DEVICES="))]
    return " ".join(env) + " " + _SHELL_DEFAULT.sub(r"\1", command[start:])


def devices_assumed(serve: BudgetInputs | None) -> str:
    """Which GPUs the serve command takes when no visible-device variable is set, in words."""
    if serve is None:
        return "GPUs 0 to TP-1 (TP unset: GPU 0)"
    n = gpus_needed(serve)
    factors = f"TP {serve.tp}, PP {serve.pp}" + (f", DP {serve.dp}" if serve.dp > 1 else "")
    listed = default_devices(serve)
    return f"GPU {listed} ({factors})" if n == 1 else f"GPUs {listed} ({factors}: {n} devices)"


SERVE_SCRIPT = "serve.sh"


def serve_script(plan: TrimPlan, mode: str, serve: BudgetInputs | None = None) -> str:
    """``serve.sh``: the report's serve command with its environment, serving the folder the
    script is in (it survives a move of the output)."""
    command = serve_command(plan, '"$MODEL_DIR"', mode, serve)
    assumed = devices_assumed(serve)
    return (
        "#!/bin/sh\n"
        "# Serve this reduced model with vLLM: the command of README.md, for the folder this script is in.\n"
        "# Written by mxtrim. PORT, TP, GPU_MEMORY_UTILIZATION (where the command leaves them to the shell),\n"
        "# CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES override; arguments are passed on to vllm serve.\n"
        f"# Devices: with neither CUDA_VISIBLE_DEVICES nor MACA_VISIBLE_DEVICES set, it serves on {assumed}.\n"
        "set -e\n"
        'MODEL_DIR=$(cd "$(dirname "$0")" && pwd)\n'
        'if [ -z "${CUDA_VISIBLE_DEVICES:-}${MACA_VISIBLE_DEVICES:-}" ]; then\n'
        f"  echo {shlex.quote(f'serve.sh: CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES unset: serving on {assumed}')} >&2\n"
        "fi\n"
        f'{command} "$@"\n'
    )


def serve_settings(plan: TrimPlan, out_dir: Path, mode: str, serve: BudgetInputs | None = None) -> dict:
    """The ``serve`` object of ``mxtrim-plan.json``: the settings and the command the report shows."""
    s = serve or default_serve(plan)
    return {
        "tp": s.tp,
        "pp": s.pp,
        "max_model_len": s.max_model_len,
        "max_num_seqs": s.max_num_seqs,
        "max_num_batched_tokens": s.max_num_batched_tokens or s.max_model_len,
        "dp": s.dp,
        "expert_parallel": s.expert_parallel,
        "kv_cache_dtype": served_kv_cache_dtype(plan, s.kv_cache_dtype),  # what the command passes
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "command": serve_command(plan, out_dir, mode, serve),
    }


def _not_copied_lines(plan: TrimPlan, mode: str, not_copied: list[dict]) -> list[str]:
    """One line per file, except weight shards (and their index): one line for all of them."""
    shards = [f for f in not_copied if f["kind"] == FileKind.WEIGHTS.value]
    index = [f for f in not_copied if f["kind"] == FileKind.INDEX.value]
    absent = len(plan.inventory.source.absent_shards)
    summarised = {id(f) for f in shards + index} if shards or absent else {id(f) for f in shards}
    lines = []
    if index and not shards and absent:
        reason = "dummy mode" if mode == "dummy" else "replaced by the extracted shards"
        lines.append(f"- `{index[0]['path']}` not copied ({reason}); the {absent} shards it lists are not in the source")
    if shards:
        sizes = {f.path: f.size for f in plan.inventory.source.files}
        total = sum(sizes.get(f["path"], 0) for f in shards)
        noun = "weight shard" if len(shards) == 1 else "weight shards"
        with_index = f" and their index `{index[0]['path']}`" if index else ""
        reason = "dummy mode" if mode == "dummy" else "replaced by the extracted shards"
        lines.append(f"- {len(shards)} {noun} ({human_bytes(total)}){with_index} not copied ({reason})")
    for f in not_copied:
        if id(f) not in summarised:
            lines.append(f"- `{f['path']}` ({f['kind']}{': ' + f['detail'] if f.get('detail') else ''})")
    return lines


def render_report(
    plan: TrimPlan,
    out_dir: Path,
    mode: str,
    files: list[dict],
    not_copied: list[dict],
    weights: dict | None = None,
    *,
    serve: BudgetInputs | None = None,
    warnings: list[str] | None = None,
) -> str:
    """``weights`` (real-weight mode): what the weights writer established — ``integrity``,
    ``structure`` (a StructureResult), ``copy_method``, ``script``, ``manifest``. ``serve``:
    the serve settings chosen (None: the command's defaults, TP as a shell variable).
    ``warnings``: the output's own (:func:`.launch_text.output_warnings`), when the writer
    has them already."""
    lines: list[str] = []
    add = lines.append
    _summary_section(add, plan, mode, weights)
    _mapping_and_coverage_sections(add, plan)
    _config_section(add, plan)
    if weights:
        _weights_sections(add, weights)
    _files_section(lines, plan, mode, files, not_copied)
    _environment_section(add)
    _serve_section(add, plan, out_dir, mode, serve)
    _validation_section(add, out_dir, weights)
    _warnings_section(add, plan, output_warnings(plan, out_dir, files) if warnings is None else warnings)
    return "\n".join(lines)


def made_at() -> datetime:
    """When the output is said to be made: now, or ``$SOURCE_DATE_EPOCH`` where it is set (the
    reproducible-builds convention: the same trim then writes the same bytes)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), timezone.utc)
    return datetime.now(timezone.utc)


def _summary_section(add, plan: TrimPlan, mode: str, weights: dict | None) -> None:
    """Title, the table of what was trimmed, and what the mode means."""
    inv = plan.inventory
    src = inv.source
    n = plan.new_depth
    title_mode = "dummy (config + tokenizer, no weights)" if mode == "dummy" else "real weights"
    add(f"# {inv.model_name} — {n}-layer {mode} trim")
    add("")
    add(f"Made by mxtrim on {made_at().strftime('%Y-%m-%d %H:%M UTC')}.")
    add("")
    add("| | |")
    add("| --- | --- |")
    add(f"| source | `{src.shown}` |")
    add(f"| source state | {src.state_detail} |")
    add(f"| architecture | {', '.join(src.architectures) or '—'} (`model_type` {src.model_type or '—'}; family {inv.family.display}) |")
    add(f"| mode | {title_mode} |")
    add(f"| text layers | {n} of {inv.text.declared_depth if inv.text else '—'} ({'automatic covering set' if plan.auto.get('text') else 'chosen by hand'}) |")
    mtp = inv.submodels.get("mtp")
    add(f"| MTP / draft heads | {'kept' if plan.mtp_kept else ('dropped' if mtp else 'none in the source')} |")
    add(f"| quantization | {inv.quantization.summary() + ' (kept as is)' if inv.quantization else 'none'} |")
    if weights:
        integ = weights["integrity"]
        add(f"| stored tensors written | {human_bytes(plan.retained_bytes)} of {shown_bytes(inv.total_bytes)} ({integ['tensors']:,} tensors in {len(integ['shards'])} shard(s)) |")
    else:
        add(f"| stored tensors retained | {shown_bytes(plan.retained_bytes, plan.retained_bytes_known)} of {shown_bytes(inv.total_bytes)} (estimate of what a real-weight trim would hold) |")
    add("")
    if mode == "dummy":
        add(
            "Dummy loading (`--load-format dummy`) skips checkpoint reads but still allocates every parameter, "
            "runs quantization post-processing and uses GPU memory. It exercises loading, kernels and execution "
            "paths; it says nothing about accuracy, routing distributions or performance."
        )
        add("")
    if weights:
        add(
            f"Real weights: every retained tensor's bytes were copied unchanged from its source range "
            f"({weights['copy_method']}; no dtype conversion, no tensor loaded whole) by `{weights['script']}`, which mxtrim "
            f"generated and ran. It is kept here and reproduces the shards byte for byte from the same source: "
            f"{_rerun(src, weights['script'], weights.get('source_files') or sorted(src.shards))}. "
            f"It refuses a source whose shard headers changed. `{weights['manifest']}` lists every tensor's source "
            f"and output byte ranges with their {weights['integrity']['hash']} hashes."
        )
        add("")


def _mapping_and_coverage_sections(add, plan: TrimPlan) -> None:
    """Old → new layers, and which request exercises each kept kind."""
    add("## Layer mapping (new ← original)")
    add("")
    add("| submodel | new | original | stored as | kind | group |")
    add("| --- | ---: | ---: | --- | --- | :---: |")
    for m in plan.mappings:
        special = f" + {', '.join(m.kind.special)}" if m.kind.special else ""
        add(f"| {m.submodel} | {m.new} | {m.old} | `{m.new_name}` ← `{m.old_name}` | {m.kind.label}{special} | {m.group} |")
    add("")

    add("## Coverage")
    add("")
    add("| group | kind | kept (new ← original) | request that exercises it |")
    add("| :---: | --- | --- | --- |")
    for c in plan.coverage:
        kept = ", ".join(f"{a} ← {b}" for a, b in c.kept) or "**not covered**"
        add(f"| {c.group} | {c.submodel}: {c.kind} | {kept} | {c.request} |")
    add("")
    if plan.omitted:
        add("### Paths no longer covered")
        add("")
        for c in plan.omitted:
            add(f"- {c.submodel}: {c.kind} — {c.available} layer(s), {shown_bytes(c.bytes_dropped)} of stored tensors")
        add("")


COVERAGE_SECTION = "## Coverage"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a Markdown table's cell borders (an escaped \| is text)
PATHS_TITLE = "coverage rows, as the engine built and executed them:"
PATH_MARKS = {"executed": "✓", "not executed": "○", "unverified": "·"}  # readable without colour, beside the word


def executed_words(path: dict) -> str:
    """A coverage row's ``paths`` entry (``mxtrim validate``'s) in short: the status, the
    experts that received tokens, or why it is not executed / unverified."""
    status = str(path.get("status") or "unverified")
    if status == "executed":
        hit, experts = path.get("experts_hit"), path.get("experts")
        text = status + (f" ({hit} of {experts} experts received tokens)" if hit is not None and experts else "")
    else:
        reason = str(path.get("reason") or "")
        text = reason if reason.startswith(status) else f"{status}: {reason}" if reason else status
    return text.replace("\n", " ")


def executed_cell(path: dict) -> str:
    """A coverage row's "executed" cell of the README's coverage table."""
    return executed_words(path).replace("|", "\\|")


def path_line(path: dict) -> str:
    """One coverage row's line, as `mxtrim validate` prints it and the wizard shows it: its mark,
    letter, kind and layers as vLLM names them, then its status and evidence in short."""
    layers = ", ".join(str(n) for n in path.get("layers") or [])
    return (f"{PATH_MARKS.get(str(path.get('status')), '?')} {path.get('row')} {path.get('kind')}"
            + (f" [{layers}]" if layers else "") + f": {executed_words(path)}")


def coverage_with_executed(readme: str, paths: list[dict] | None) -> str:
    """``readme`` with its coverage table's "executed" column from a validation's ``paths``
    (added, or the latest run's in place of the one before); unchanged without either."""
    start = readme.find("\n" + COVERAGE_SECTION + "\n")
    if not paths or start < 0:
        return readme
    end = readme.find("\n## ", start + 1)
    end = len(readme) if end < 0 else end
    cells = {str(p.get("row")): executed_cell(p) for p in paths if isinstance(p, dict)}
    lines, has_column = readme[start:end].split("\n"), False
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        parts = _CELL_SPLIT.split(line)[1:-1]
        first = parts[0].strip() if parts else ""
        if first == "group":
            has_column = parts[-1].strip() == "executed"
            value = "executed"
        elif set(first) <= set(":-") and first:
            value = "---"
        else:
            value = cells.get(first, "—")
        parts = (parts[:-1] if has_column else parts) + [f" {value} "]
        lines[i] = "|" + "|".join(parts) + "|"
    return readme[:start] + "\n".join(lines) + readme[end:]


def _config_section(add, plan: TrimPlan) -> None:
    """Every field the plan changed, with the reason."""
    add("## Configuration changes")
    add("")
    if plan.edits:
        add("| file | field | before | after | why |")
        add("| --- | --- | --- | --- | --- |")
        for e in plan.edits:
            add(f"| {e.file} | `{e.dotted}` | {_short(e.before)} | {_short(e.after)} | {e.reason} |")
    else:
        add("No field needed a change.")
    add("")
    add("Width, expert counts, head/LoRA dimensions and quantization are unchanged; only depth was reduced. "
        "Every other field of the source configuration is preserved as it was, in its original order.")
    add("")
    check = plan.transformers_check
    if check is not None:
        add(f"**Checked against transformers before writing: {check.status}.** {check.summary}."
            + (f" {check.judge_line[0].upper()}{check.judge_line[1:]}." if check.judge_line else ""))
        for problem in check.problems[:10]:
            add(f"- {problem}")
        add("")


def _files_section(lines: list[str], plan: TrimPlan, mode: str, files: list[dict], not_copied: list[dict]) -> None:
    """What the output holds, and what of the source it does not."""
    lines.append("## Files")
    lines.append("")
    lines.append("| file | kind | bytes | from |")
    lines.append("| --- | --- | ---: | --- |")
    for f in files:
        origin = f["from"]
        lines.append(f"| `{f['path']}` | {f['kind']} | {f['bytes']:,} | {origin} |")
    lines.append("")
    if mode == "dummy":
        lines.append("No weight shards and no `model.safetensors.index.json`: an index that names absent shards would only "
            "mislead loaders, and no configuration consumer here needs one.")
        lines.append("")
    if not_copied:
        lines.append("Not copied from the source:")
        lines.append("")
        lines += _not_copied_lines(plan, mode, not_copied)
        lines.append("")


def _environment_section(add) -> None:
    """Versions and import origins of the environment that wrote the output, and the one
    validation will use (vLLM is often in another environment than mxtrim)."""
    from ..probe.environment import validation_environment
    from ..probe.vllm_python import ENV_VAR, origin_words

    add("## Environment seen")
    add("")
    env = environment()
    add(f"Written by mxtrim in Python {env['python']}, {env['platform']}:")
    add("")
    for name, info in env["packages"].items():
        if info.version is None and name.startswith("vllm"):
            continue  # vLLM is the validation environment's, below
        where = f" from `{info.origin}`" if info.origin else ""
        add(f"- {name}: {info.version or 'not installed'}{where}")
    add("")
    found = validation_environment()
    if "error" in found:
        add(f"Validation environment: none found — no vLLM in the places `mxtrim validate` looks (`mxtrim validate OUT` "
            f"lists them); name one with `--python PY`, `{ENV_VAR}=PY` or the wizard's validate dialog.")
    else:
        version = f"vLLM {found['version']}" if found["version"] else "vLLM"
        add(f"Validation environment (`mxtrim validate`): {version} at `{found['python']}` ({origin_words(found['origin'])}); "
            "a validation records its full versions in `validation.json`.")
    add("")


def _serve_section(add, plan: TrimPlan, out_dir: Path, mode: str, serve: BudgetInputs | None) -> None:
    """The vllm serve command for this output."""
    add("## Serve")
    add("")
    add("```bash")
    add(serve_command(plan, out_dir, mode, serve))
    add("```")
    add("")
    add(f"With neither `CUDA_VISIBLE_DEVICES` nor `MACA_VISIBLE_DEVICES` set, it serves on {devices_assumed(serve)}; "
        "set either to choose others (the other follows it). `serve.sh` runs the same command for the folder it is in.")
    add("")
    if plan.mtp_kept and "mtp" in plan.inventory.submodels:
        add("MTP runs only with speculative decoding: the command above serves it with "
            "`--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'` "
            "(leave that out to serve without the MTP layer).")
        add("")
    add("Requests that exercise the kept paths are listed in the coverage table; send a prompt and ask for "
        "several decode steps (`max_tokens` ≥ 8) to cover prefill and decode.")
    add("")


def _validation_section(add, out_dir: Path, weights: dict | None) -> None:
    """What was checked at write time; every vLLM check unverified until `mxtrim validate` runs it."""
    add("## Validation")
    add("")
    add("| check | status |")
    add("| --- | --- |")
    if weights:
        add(f"| checkpoint integrity: strict headers, index, {weights['integrity']['hash']} of every tensor | passed (checked by mxtrim) |")
        add(f"| structure against the reduced model transformers builds | {weights['structure'].headline} |")
    for check in VALIDATION_CHECKS:
        status = "unverified"
        if weights and check.startswith("vllm serve"):
            check = "vllm serve loads the real weights and starts (health endpoint)"
        if weights and check.startswith("config loads offline") and weights["structure"].config_loaded:
            status = "passed (during the structure check)"
        add(f"| {check} | {status} |")
    add("")
    if weights:
        add("The vLLM checks have not been executed: until they are, this checkpoint is **unverified** for vLLM — "
            "intact and complete as a file set, but not shown to load.")
    else:
        add("Nothing above has been executed yet: every check is **unverified** until it is run.")
    add("")
    add(f"`mxtrim validate {shlex.quote(str(out_dir))} --serve --python PATH/TO/VLLM/ENV/python` runs them "
        "(offline loads, then a real `vllm serve` with requests) and rewrites this section with the results; "
        "`validation.json` keeps every run.")
    add("")


def _warnings_section(add, plan: TrimPlan, output: list[str]) -> None:
    """The plan's warnings, then the output's own (no usable tokenizer, a source's launch
    script copied with paths it will not find)."""
    if plan.issues or output:
        add("## Warnings")
        add("")
        for i in plan.issues:
            add(f"- {i.message}" + (f" — {i.fix}" if i.fix else ""))
        for line in output:
            add(f"- {line}")
        add("")


def _weights_sections(add, weights: dict) -> None:
    """Checkpoint integrity, tensor coverage and structure check of a real-weight output."""
    integ = weights["integrity"]
    add("## Checkpoint integrity")
    add("")
    add("| shard | tensors | bytes |")
    add("| --- | ---: | ---: |")
    for s in integ["shards"]:
        add(f"| `{s['file']}` | {s['tensors']:,} | {s['bytes']:,} |")
    add("")
    add(f"- headers: {integ['headers']}")
    add(f"- index: {integ['index']}")
    add(f"- hashes: {integ['hashes_matched']:,} of {integ['tensors']:,} written ranges have the {integ['hash']} of their source range")
    if "edges_compared" in integ:
        add(f"- source read {integ['source_read']}; the first and last 4 KiB of {integ['edges_compared']:,} tensors "
            "compared with the source at the planned offsets by mxtrim's own reads")
        add(f"- source unchanged during the copy: {integ['source_unchanged']}")
    add(f"- tensor bytes: {integ['tensor_bytes']:,}")
    add("")
    add("## Tensor coverage")
    add("")
    add("| retained | renamed | dropped | dropped bytes |")
    add("| ---: | ---: | ---: | ---: |")
    add(f"| {integ['retained']:,} | {integ['renamed']:,} | {integ['dropped']:,} | {human_bytes(integ['dropped_bytes'])} |")
    add("")
    if integ["dropped_reasons"]:
        add("Dropped, by reason:")
        add("")
        for reason, n in integ["dropped_reasons"].items():
            add(f"- {reason}: {n:,}")
        add("")
    add(f"Every source tensor is either retained under its new name or dropped with a reason; every kept layer "
        f"({integ['layers_complete']}) holds the same tensors as its source layer.")
    add("")
    st = weights["structure"]
    add("## Structure check")
    add("")
    said = judge_line(st.judge)
    add(f"**{st.status}** — {st.summary}" + (f" {said[0].upper()}{said[1:]}." if said else ""))
    add("")
    add("The reduced model is built from the output `config.json` on the `meta` device (no weights) and the written "
        "tensors' names and shapes are fed to transformers' own loader, with its key conversions. This checks names and "
        "shapes against transformers' implementation, not vLLM's.")
    add("")
    for line in st.details:
        add(f"- {line}")
    if st.details:
        add("")


def _rerun(src, script: str, shards: list[str]) -> str:
    """How the kept extraction script is run again: on the source folder, or, for a remote
    source (read by ranges into a store that is gone), on the repository itself or a
    download of its shards."""
    if not src.origin:
        return f"`python -I {script} --source {shlex.quote(str(src.root.resolve()))} --out NEW_DIR`"
    scheme, rest = src.origin.split("://", 1)
    repo, _, commit = rest.rpartition("@")
    names = " ".join(shlex.quote(name) for name in shards)
    download = (f"modelscope download --model {repo} {names} --revision {commit} --local_dir SRC" if scheme == "ms" else
                f"hf download {repo} {names} --revision {commit} --local-dir SRC")
    return (f"`python -I {script} --source {src.origin} --out NEW_DIR` reads the kept tensors' byte ranges from the "
            f"repository itself (the endpoint and token variables of its hub apply), or, from a download of the shards it "
            f"reads at that commit (`{download}`), `python -I {script} --source SRC --out NEW_DIR`")
