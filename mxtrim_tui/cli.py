"""``mxtrim``: the headless command line, on the same engine as the wizard.

Exit codes: 0 success, 1 bad input (one line on stderr naming the file and the problem),
2 usage errors. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from .core.errors import InputError
from .core.units import DEFAULT_HASH, DEFAULT_MAX_SHARD_BYTES, HASHES

# --flag -> parse_budget_inputs key: the serve settings written into the report's command.
SERVE_FLAGS = {
    "--tp": "tp",
    "--pp": "pp",
    "--dp": "dp",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--gpu-memory": "gpu_gib",
    "--enable-expert-parallel": "expert_parallel",
}


class UsageError(Exception):
    """A malformed option value (exit status 2)."""


def validation_args(sp) -> None:
    """What `validate` takes, and `trim --validate` with it."""
    sp.add_argument("--serve", action="store_true", help="start vllm serve on the output, send requests, stop it")
    sp.add_argument("--python", metavar="PY", help="interpreter of the environment holding vLLM (default: $MXTRIM_VLLM_PYTHON, "
                    "the wizard's kept setting, .venv-vllm/bin/python of this checkout, then of the current directory, "
                    "the interpreter of a vllm command on PATH, this interpreter: the first that has vLLM)")
    sp.add_argument("--launcher", metavar="CMD", help="server command instead of 'PY -m vllm.entrypoints.cli.main serve' (split like a shell; gets --model OUT)")
    sp.add_argument("--device", choices=["auto", "cpu", "cuda", "maca"], default="auto", help="where the server runs (auto: idle GPUs, else the CPU)")
    sp.add_argument("--gpus", metavar="IDS", help="devices for the server, e.g. 0,1 (refused when another process uses one)")
    sp.add_argument("--kv-cache-memory-bytes", type=parse_size, metavar="SIZE", help="KV cache budget (CPU default 64MB)")
    sp.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="seconds the starting server may go without progress (no new log line) before it is given up; a start that keeps logging may take up to an hour")
    sp.add_argument("--equivalence", action="store_true", help="with --serve (implied): greedy tokens of the served real-weight trim against the original model run in transformers with only the kept layers")
    sp.add_argument("--speculative", action="store_true", help="serve with speculative decoding through the kept MTP layer (method mtp, 1 token)")
    sp.add_argument("--trust-remote-code", action="store_true", help="allow code from the output directory (auto_map) to run")


def _selection_args(sp) -> None:
    """SRC, the selection and the serve settings: what `plan` and `trim` share."""
    sp.add_argument("source", metavar="SRC", nargs="?", help="Hugging Face-layout model directory")
    sp.add_argument(
        "--keep",
        action="append",
        metavar="SPEC",
        help="layers to keep, [SUBMODEL=]i,j,a-b in original indices (default submodel: text; "
        "repeatable; 'auto' = minimal covering set). No --keep: automatic.",
    )
    mtp = sp.add_mutually_exclusive_group()
    mtp.add_argument("--mtp", dest="mtp", action="store_true", default=None, help="keep MTP / draft heads (default when present)")
    mtp.add_argument("--no-mtp", dest="mtp", action="store_false", help="drop MTP / draft heads")
    sp.add_argument("--json", action="store_true", help="print the plan as JSON (schema mxtrim.plan/1)")
    sp.add_argument(
        "--force",
        action="store_true",
        help="write even when transformers builds other layers from the output config than the kept ones "
        "(the report says so)",
    )
    sp.add_argument("--repo", metavar="OWNER/NAME",
                    help="the Hub repository of the source, for the download command of missing shards "
                    "(default: config.json's _name_or_path when it is one)")
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    serve = sp.add_argument_group("serve settings", "written into the report's vllm serve command; checked against the model")
    serve.add_argument("--tp", metavar="N", help="tensor-parallel size (must divide the attention heads)")
    serve.add_argument("--pp", metavar="N", help="pipeline-parallel size (at most the kept text layers)")
    serve.add_argument("--dp", metavar="N", help="data-parallel size (with --ep: experts spread over TP × DP ranks)")
    serve.add_argument("--ep", "--enable-expert-parallel", dest="expert_parallel", action="store_true", default=None,
                       help="expert parallelism: whole experts over TP × DP ranks instead of splitting each")
    serve.add_argument("--max-model-len", metavar="N", help="context length")
    serve.add_argument("--max-num-seqs", metavar="N", help="concurrent sequences")
    serve.add_argument("--max-num-batched-tokens", metavar="N", help="tokens per scheduler step (default: the context length)")
    serve.add_argument("--gpu-memory-utilization", metavar="F", help="fraction of GPU memory vLLM may use, in (0, 1]")
    serve.add_argument("--kv-cache-dtype", metavar="DTYPE", help="auto (the model's dtype), fp8, fp8_e4m3, fp8_e5m2, ...")
    serve.add_argument("--gpu-memory", dest="gpu_gib", metavar="GIB",
                       help="memory of one GPU for the budget (default: the first visible GPU, when one is)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mxtrim",
        description="Trim huge LLM checkpoints to a few layers for vLLM smoke tests.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ins = sub.add_parser("inspect", help="describe a model directory without loading weights")
    ins.add_argument("source", metavar="SRC", help="Hugging Face-layout model directory")
    ins.add_argument("--json", action="store_true", help="print the inventory as JSON (schema mxtrim.inventory/1)")
    ins.add_argument("--tensors", action="store_true", help="with --json: list every tensor name per layer/part")
    ins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    pl = sub.add_parser("plan", help="show what a trim would do; writes nothing but the plan file asked for (--save)")
    _selection_args(pl)
    pl.add_argument("--save", type=Path, metavar="FILE",
                    help="write the plan file (schema mxtrim.plan-file/1: source pinned, selection, serve settings, "
                    "mode, output) for mxtrim trim --plan FILE; never over an existing file")
    pl.add_argument("--mode", choices=["dummy", "weights"], help="with --save: the mode the plan file's trim writes")
    pl.add_argument("--out", type=Path, help="with --save: the output directory the plan file's trim writes")
    pl.add_argument("--tensors", action="store_true", help="with --json: list every tensor rename and drop")
    pl.add_argument("--fetch-list", action="store_true",
                    help="print only the source shards a real-weight trim reads, one file name per line: every one "
                    "of them, those already on disk included (stderr says how many are missing)")
    pl.add_argument("--python", metavar="PY",
                    help="the interpreter of the environment that will run the output: the transformers checks run in it "
                    "(default: $MXTRIM_VLLM_PYTHON, the wizard's kept setting, else this interpreter)")

    _add_trim(sub)

    _add_others(sub)
    return p


def _add_trim(sub) -> None:
    tr = sub.add_parser("trim", help="write a trimmed output directory")
    _selection_args(tr)
    tr.add_argument("--plan", type=Path, metavar="FILE",
                    help="run the plan file FILE (mxtrim plan ... --save): its source (refused if it changed), selection, "
                    "serve settings, mode and output; SRC, --keep, --mtp and the serve settings are not given then")
    tr.add_argument(
        "--mode",
        choices=["dummy", "weights"],
        help="dummy: config + tokenizer assets for --load-format dummy; weights: a real checkpoint of the kept tensors "
        "(required unless the plan file names it)",
    )
    tr.add_argument("--max-shard-size", type=parse_size, metavar="SIZE", help="weights mode: largest output shard (default 5GB)")
    tr.add_argument("--hash", choices=HASHES,
                    help="weights mode: the digest every copied tensor is verified with and recorded under in manifest.json "
                         "(default xxh3_128, about 9x faster than sha256 here)")
    tr.add_argument("--progress", action="store_true", help="print progress events as JSON lines on stderr")
    tr.add_argument("--out", type=Path, help="output directory (must not exist)")
    tr.add_argument("--validate", action="store_true", help="validate the output once written (offline checks; with --serve a real vllm serve)")
    tr.add_argument("--batched-test-config", type=Path, metavar="FILE",
                    help="append the output's batched_test harness entry to the model YAML FILE (created if absent; "
                    "other entries never rewritten; refused before writing when FILE is malformed or has the name)")
    validation_args(tr)
    tr.add_argument(
        "--workspace",
        type=Path,
        default=Path("."),
        help="root for the default output tools/batched_test/models/<model>-<mode>-<N>layers (default: .)",
    )


def _add_others(sub) -> None:
    """validate, leftovers, tui and demo."""
    va = sub.add_parser("validate", help="prove an output: offline loads, then (--serve) a real vllm serve with requests")
    va.add_argument("output", metavar="OUT", nargs="*", type=Path,
                    help="directories written by mxtrim trim; several: one after the other, with a matrix of every output × check")
    va.add_argument("--all", metavar="FOLDER", nargs="?", const="", dest="all_in",
                    help="every mxtrim output in FOLDER (default: ./tools/batched_test/models/)")
    va.add_argument("--again", action="store_true",
                    help="with several outputs: also those already validated with the same interpreter and versions")
    va.add_argument("--matrix", metavar="DIR", type=Path,
                    help="where validation-matrix.md / .json go (default: the --all folder, else the current directory)")
    va.add_argument("--jobs", type=_jobs, default=1, metavar="N|auto",
                    help="with several outputs: up to N servers side by side (auto: as many as the GPUs take), each on "
                    "GPUs free of other workloads, small ones sharing a GPU by their --gpu-memory-utilization shares, "
                    "never two profiling memory on one GPU at once (default 1: one after the other)")
    va.add_argument("--starting", type=_jobs, metavar="N",
                    help="with --jobs: at most N servers in their CPU start-up at once (before their engine takes the GPU), "
                    "so the first reach their memory measurement sooner (default, or auto: no limit)")
    va.add_argument("--gpu-memory-utilization", type=_share, metavar="F",
                    help="the share of a GPU's memory each server may use, in (0, 1] (default: the output's serve settings)")
    validation_args(va)
    va.add_argument("--tp", type=_ranks, default=1, metavar="N", help="tensor parallel size (default 1)")
    va.add_argument("--pp", type=_ranks, default=1, metavar="N",
                    help="pipeline parallel size (default 1); the server takes TP × PP GPUs")
    va.add_argument("--ep", "--enable-expert-parallel", dest="expert_parallel", action="store_true", default=None,
                    help="serve with expert parallelism (default: the output's serve settings)")
    va.add_argument("--max-model-len", type=int, metavar="N", help="context of the server (default: 256 on CPU, the output's serve settings on GPU)")
    va.add_argument("--json", action="store_true", help="print the validation as JSON (schema mxtrim.validation/1)")
    va.add_argument("--progress", action="store_true", help="print events (checks, server log lines, requests) as JSON lines on stderr")
    va.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    ex = sub.add_parser("examples", help="the reduced models of a workspace: source, last validation, environment drift, "
                        "stale paths (reads JSON and sizes, never weights)")
    ex.add_argument("folder", metavar="FOLDER", nargs="?", type=Path,
                    help="the folder of models (default: ./tools/batched_test/models/)")
    ex.add_argument("--python", metavar="PY", help="the environment to compare with (default: the vLLM interpreter "
                    "mxtrim validate would use, else this one)")
    ex.add_argument("--json", action="store_true", help="print the examples as JSON (schema mxtrim.examples/1)")
    ex.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    be = sub.add_parser("batched-test-entry", help="append the batched_test harness entries of existing outputs to a "
                        "model YAML (read from each output's mxtrim-plan.json)")
    be.add_argument("output", metavar="OUT", nargs="*", type=Path, help="directories written by mxtrim trim")
    be.add_argument("--config", type=Path, metavar="FILE", required=True,
                    help="the batched_test model YAML to append to (created if absent); model_path is written relative "
                    "to its folder")
    be.add_argument("--all", metavar="FOLDER", nargs="?", const="", dest="all_in",
                    help="every mxtrim output in FOLDER (default: ./tools/batched_test/models/); those whose name the "
                    "file already has are left as they are")
    be.add_argument("--json", action="store_true", help="print what was appended as JSON")
    be.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    lo = sub.add_parser("leftovers", help="servers left running by an mxtrim that was killed: list them (--stop stops them)")
    lo.add_argument("--stop", action="store_true", help="stop them: SIGTERM to each server's process group, SIGKILL after 5 s")
    lo.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    tui = sub.add_parser("tui", help="open the wizard (default: on the bundled demo model)")
    tui.add_argument("source", metavar="SRC", nargs="?", help="model directory to open")
    tui.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    demo = sub.add_parser("demo", help="build the bundled demo model (if needed) and print its path")
    demo.add_argument("--fp8", action="store_true",
                      help="the block-FP8 demo instead (vLLM's CPU build serves it only with AMX; no GPU MLA kernel takes its sizes)")
    demo.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def cmd_inspect(args) -> int:
    from .core.model.inventory import build_inventory
    from .core.read.source import open_source

    inv = build_inventory(open_source(args.source))
    if args.json:
        from .core.model.inventory_json import inventory_to_json

        json.dump(inventory_to_json(inv, with_tensors=args.tensors), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from .render import render_inventory

        render_inventory(inv, Console())
    return 0


def _plan(request):
    return _plan_check(request).result()


def _plan_check(request):
    """The plan of ``request``, its transformers check started: in a child process (torch's
    memory goes back with it), or the verdict kept for these very inputs. ``.plan`` is the
    plan unchecked, ``.result()`` the checked one."""
    from .core.model.inventory import build_inventory
    from .core.plan.build import Selection, build_plan
    from .core.read.source import open_source

    from .core.checks.plan_outcome import start_plan_check

    inv = build_inventory(open_source(request.source))
    plan = build_plan(inv, Selection.parse(request.keep_list, request.mtp))
    return start_plan_check(plan, force=request.force, request=request)


def _serve_raw(args) -> dict[str, str]:
    """The serve settings given on the command line, as typed; malformed ones are usage errors."""
    from .core.plan.budget import BudgetInputs, parse_budget_inputs

    raw = {key: getattr(args, key) for key in SERVE_FLAGS.values() if getattr(args, key) is not None}
    _, errors = parse_budget_inputs(raw, BudgetInputs())
    flag = {key: name for name, key in SERVE_FLAGS.items()}
    if errors:
        raise UsageError("\n".join(f"mxtrim: error: {flag[key]}: {message}" for key, message in errors.items()))
    return raw


def _request(args):
    """What the command is asked to plan or write: its flags, or (trim --plan) the plan file,
    whose source must be the one it was made for."""
    from .core.checks.judge import set_runtime_python
    from .core.plan.plan_file import TrimRequest, load_plan_document, refuse_changed_source

    # the transformers checks run in the runtime's interpreter when it is named (core/checks/judge.py)
    set_runtime_python(getattr(args, "python", None))
    plan_file = getattr(args, "plan", None)
    if plan_file is None:
        if args.source is None:
            raise UsageError(f"mxtrim {args.command}: error: the source directory SRC is required" +
                             (" (or --plan FILE)" if args.command == "trim" else ""))
        return TrimRequest(
            # absolute, as a plan file records it: the output says the same whichever way it was asked
            source=Path(os.path.abspath(args.source)), keep=tuple(args.keep) if args.keep else None, mtp=args.mtp, force=args.force,
            mode=args.mode, out=args.out, serve=_serve_raw(args), repo=args.repo,
            max_shard_bytes=getattr(args, "max_shard_size", None) or DEFAULT_MAX_SHARD_BYTES,
            hash_name=getattr(args, "hash", None) or DEFAULT_HASH,
        )
    given = [flag for flag, present in (("SRC", args.source), ("--keep", args.keep), ("--mtp/--no-mtp", args.mtp is not None),
                                        ("--force", args.force), ("--max-shard-size", args.max_shard_size), ("--hash", args.hash))
             if present] + [flag for flag, key in SERVE_FLAGS.items() if getattr(args, key) is not None]
    if given:
        raise UsageError(f"mxtrim trim: error: --plan holds the source, selection, serve settings and options: "
                         f"not {', '.join(given)} too (make another plan with mxtrim plan ... --save)")
    request, pins = load_plan_document(plan_file)
    if args.mode is not None and request.mode is not None and args.mode != request.mode:
        raise UsageError(f"mxtrim trim: error: --mode {args.mode}: the plan file's mode is {request.mode}")
    refuse_changed_source(plan_file, request, pins)
    from dataclasses import replace

    from .core.plan.budget import BudgetInputs, parse_budget_inputs

    _, errors = parse_budget_inputs(request.serve, BudgetInputs())
    if errors:
        raise InputError(plan_file, "serve." + "; serve.".join(f"{k}: {m}" for k, m in errors.items()))
    return replace(request, mode=args.mode or request.mode, out=args.out or request.out, repo=args.repo or request.repo)


def _serve_inputs(plan, raw: dict[str, str]):
    """The serve settings (the report's defaults where not given), or None when none given
    (``--gpu-memory`` alone is a budget figure, not a serve setting)."""
    if not set(raw) - {"gpu_gib"}:
        return None
    from .core.plan.budget import default_serve, parse_budget_inputs

    return parse_budget_inputs(raw, default_serve(plan))[0]


def _budget_inputs(plan, raw: dict[str, str], probe=None):
    """What the budget is computed for: the serve settings given (the report's defaults
    elsewhere) and the GPU memory: --gpu-memory, else the first visible GPU's (``probe``: the
    GPUs already read, else read here)."""
    from dataclasses import replace

    from .core.plan.budget import default_serve, parse_budget_inputs

    inputs = parse_budget_inputs(raw, default_serve(plan))[0]
    if inputs.gpu_total_bytes is None:
        from .core.probe.gpu import probe_gpus

        probe = probe if probe is not None else probe_gpus()
        if probe.available and probe.gpus and probe.gpus[0].total_bytes:
            inputs = replace(inputs, gpu_total_bytes=probe.gpus[0].total_bytes)
    return inputs


def cmd_plan(args) -> int:
    request = _request(args)
    raw = request.serve
    plan = _plan(request)
    from .core.plan.blockers import write_blockers

    blocking = write_blockers(plan, _serve_inputs(plan, raw), None)
    if args.fetch_list:
        from .core.plan.needed_shards import needed_shards

        needed = needed_shards(plan)
        for shard in needed:  # one name per line, for a downloader (which skips what it already has)
            print(shard.file)
        missing = sum(1 for shard in needed if not shard.present)
        sys.stdout.flush()
        print(f"mxtrim: {len(needed)} shard(s) listed, those on disk included: {len(needed) - missing} on disk, "
              f"{missing} missing", file=sys.stderr)
    elif args.json:
        from .core.plan.plan_json import plan_to_json
        from .core.probe.gpu import probe_gpus, probe_json

        probe = probe_gpus()  # the GPUs read: what the budget's memory figure comes from
        doc = plan_to_json(plan, with_tensors=args.tensors, serve=_budget_inputs(plan, raw, probe)) | {"gpus": probe_json(probe)}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from .core.plan.budget import compute_budget
        from .core.probe.gpu import probe_gpus
        from .render import render_budget, render_gpus, render_plan

        console = Console()
        # a selection that keeps nothing is no plan to show: its error line below says why; the
        # errors of a plan shown are said once, by that line
        if not (blocking and plan.errors and plan.new_depth == 0):
            render_plan(plan, console, repo=args.repo, errors=not blocking)
            probe = probe_gpus()
            render_gpus(probe, console, gpu_memory_flag="gpu_gib" in raw)
            render_budget(compute_budget(plan, _budget_inputs(plan, raw, probe)), console)
    if blocking:
        print(_blocking_line(blocking, "; no plan file saved" if args.save else ""), file=sys.stderr)
        return 1
    if args.save is not None:
        _save_plan(request, plan, args.save)
    return 0


def _save_plan(request, plan, path: Path) -> None:
    from .core.plan.plan_file import plan_document, save_plan_document

    save_plan_document(plan_document(request, plan), path)
    print(f"saved the plan to {path} (run it: mxtrim trim --plan {path})", file=sys.stderr)


def _blocking_line(blocking: list[str], then: str = "") -> str:
    """What blocks the write (core/plan/blockers.py), as the one error line every failure gets."""
    from .core.errors import one_line

    return "mxtrim: error: " + one_line("; ".join(blocking) + then)


def cmd_trim(args) -> int:
    from .core.write.writer import default_output_dir

    request = _request(args)
    if request.mode is None:
        raise UsageError("mxtrim trim: error: --mode is required (dummy or weights) unless the plan file names it")
    raw = request.serve
    from .core.plan.blockers import write_blockers

    pending = _plan_check(request)
    plan = pending.plan
    serve = _serve_inputs(plan, raw)
    # A real-weight trim copies while transformers checks the plan: the copy starts on the
    # plan as built, and is kept only if the checked plan writes the same tensors and can be
    # written (core/write/weights_writer.py); otherwise it runs as below on the checked plan.
    alongside = request.mode == "weights" and pending.pending and not write_blockers(plan, serve, request.mode, request.repo)
    if not alongside:
        plan = pending.result()
        serve = _serve_inputs(plan, raw)
    blocking = write_blockers(plan, serve, request.mode, request.repo)
    if blocking:
        return _refuse_blocked(args, plan, blocking)
    out = request.out if request.out is not None else default_output_dir(plan, args.workspace.resolve(), request.mode)
    from .core.write.batched_test_entry import check_config
    from .core.write.weights_writer import PlanChanged

    if args.batched_test_config is not None:  # refused now rather than after the write
        check_config(args.batched_test_config, [Path(os.path.abspath(out)).name])
    try:
        result = _write(args, request, plan, out, serve, pending if alongside else None)
    except PlanChanged as changed:
        # the check made the plan another (an automatic selection widened) or blocked it: the
        # copy is gone, and the trim runs as it would have run had the check come first
        plan = changed.plan
        serve = _serve_inputs(plan, raw)
        blocking = write_blockers(plan, serve, request.mode, request.repo)
        if blocking:
            return _refuse_blocked(args, plan, blocking)
        if request.out is None:
            out = default_output_dir(plan, args.workspace.resolve(), request.mode)
            if args.batched_test_config is not None:
                check_config(args.batched_test_config, [Path(os.path.abspath(out)).name])
        result = _write(args, request, plan, out, serve)
    if getattr(result, "plan", None) is not None:
        plan = result.plan  # checked alongside the copy
    harness = _append_harness_entry(args.batched_test_config, result.path) if args.batched_test_config is not None else None
    validation = None
    if args.validate or args.serve or args.equivalence:
        _leftover_servers_notice(args)
        validation = run_validation(result.path, args, quiet=args.json)
    if args.json:
        _print_trim_json(request, plan, result, serve, validation, harness)
    else:
        _print_trim_text(request, plan, result, validation, harness)
    if harness is not None and "error" in harness:
        print(f"mxtrim: error: {harness['error']}; the output was written (append its entry later: "
              f"mxtrim batched-test-entry {result.path} --config {args.batched_test_config})", file=sys.stderr)
    return 0 if (validation is None or validation[2]) and not (harness and "error" in harness) else 1


def _refuse_blocked(args, plan, blocking: list[str]) -> int:
    from .core.plan.plan_json import plan_to_json

    if args.json:
        json.dump(plan_to_json(plan) | {"output": None}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    print(_blocking_line(blocking, "; nothing written"), file=sys.stderr)
    return 1


def _append_harness_entry(config: Path, output: Path) -> dict:
    """The batched_test entry of the output just written, appended to ``config``: what was
    appended, or why it was not (the output stays written)."""
    from .core.write.batched_test_entry import append_entries, entry_for_output

    try:
        return append_entries(config, [entry_for_output(output, config)]).to_json()
    except InputError as exc:
        return {"config": str(config), "error": str(exc)}


def _print_harness_text(appended: dict) -> None:
    names = ", ".join(repr(n) for n in appended["appended"])
    if names:
        config = appended["config"]
        print(f"batched_test: created {config} with {names}:" if appended["created"] else f"batched_test: {names} appended to {config}:")
        print(appended["text"], end="")
    if appended["already_present"]:
        print(f"batched_test: already in {appended['config']} (left as they are): {', '.join(appended['already_present'])}")


def _write(args, request, plan, out: Path, serve, plan_check=None):
    """Write the output of ``plan`` at ``out`` (progress events on stderr with --progress);
    ``plan_check``: the plan's transformers check, under way while a real-weight trim copies."""
    from .core.write.writer import write_dummy

    # a real-weight copy takes minutes on a large source: on a terminal it says how it goes
    progress = _progress_printer() if args.progress else WeightsProgress() if request.mode == "weights" else _leftover_notices
    if args.progress:
        progress({"event": "stage", "name": "plan", "status": "done", "kept": plan.kept, "output": str(out)})
    if request.mode == "weights":
        from .core.write.weights_writer import write_weights

        def accept(checked) -> bool:  # the checked plan is written only if it writes as the copied one
            from .core.plan.blockers import write_blockers

            return _serve_inputs(checked, request.serve) == serve and not write_blockers(checked, serve, request.mode, request.repo)

        result = write_weights(plan, out, max_shard_bytes=request.max_shard_bytes, progress=progress, serve=serve,
                               hash_name=request.hash_name, plan_check=plan_check, accept=accept if plan_check is not None else None)
    else:
        result = write_dummy(plan, out, progress=progress, serve=serve)
    from .core.checks.child import CheckChild

    CheckChild.release()  # the checks are done: their memory goes back before any validation
    if args.progress:
        progress({"event": "result", "output": str(result.path), "files": len(result.files)})
    return result


def _weights_checks(result) -> dict:
    return {
        "integrity": result.integrity,
        "structure": result.structure.to_json(),
        "disk_bytes": result.estimate.total,
        "copy_method": result.copy_method,
        "vllm_load": "unverified",
    }


def _print_trim_json(request, plan, result, serve, validation, harness=None) -> None:
    from .core.plan.plan_json import plan_to_json
    from .core.write.report import serve_command

    command = serve_command(plan, result.path, request.mode, serve)
    doc = plan_to_json(plan, serve=_budget_inputs(plan, request.serve)) | {
        "mode": request.mode, "output": str(result.path), "files": result.files, "serve_command": command,
        "warnings": list(result.warnings)}
    if request.mode == "weights":
        doc["checks"] = _weights_checks(result)
    if validation is not None:
        doc["validation"] = validation[0].to_json()
    if harness is not None:
        doc["batched_test"] = harness
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _print_trim_text(request, plan, result, validation, harness=None) -> None:
    from rich.console import Console
    from rich.text import Text

    from .render import render_plan

    console = Console()
    render_plan(plan, console, repo=request.repo)
    # paths and check summaries are text, never markup: "[checks]" or a bracket in a path stays as written
    console.print(Text.assemble(("wrote", "bold green"), f" {result.path} ({len(result.files)} files; see README.md there)"))
    for warning in result.warnings:  # also under Warnings in the output's README
        console.print(Text(f"warning: {warning}", style="yellow"))
    if request.mode == "weights":
        integ = result.integrity
        console.print(
            f"checkpoint: {integ['tensors']} tensors in {len(integ['shards'])} shard(s), "
            f"{integ['hashes_matched']} {integ['hash']} hashes matched; index {integ['index']}", markup=False,
        )
        console.print(f"structure: {result.structure.headline}", markup=False)
        if validation is None:
            console.print("vLLM load: unverified (mxtrim validate OUT --serve, or the serve command in README.md)")
    if harness is not None and "error" not in harness:
        _print_harness_text(harness)
    if validation is not None:
        print_validation(*validation[:2])


def _leftover_notices(event: dict) -> None:
    """Without --progress, the one event a user should still hear of: a leftover of an
    interrupted run removed."""
    from .core.progress import LeftoverRemoved, parse_event

    typed = parse_event(event)
    if isinstance(typed, LeftoverRemoved):
        print(f"mxtrim: removed {typed.path}, left by an interrupted run", file=sys.stderr)


def _progress_printer():
    """JSON lines on stderr, one per event, flushed: what the wizard's run screen reads."""

    from .core.progress import event_line

    stream = sys.stderr  # this one, even while a library's output is redirected (equivalence)

    def emit(event: dict) -> None:
        stream.write(event_line(event) + "\n")
        stream.flush()

    return emit


MAX_SHARD_LIMIT = 10**12


def _count(text: str, what: str) -> int:
    """A whole number of at least 1, else the usage error naming ``what`` it should be."""
    if text.strip().isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not {what}")


def _jobs(text: str) -> int | None:
    """``--jobs``: a count, or ``auto`` (None: as many as the GPUs take)."""
    if text.strip().lower() == "auto":
        return None
    return _count(text, "a number of servers (1, 2, …) or auto")


def _ranks(text: str) -> int:
    """``--tp`` / ``--pp`` of validate: a size of at least 1."""
    return _count(text, "a parallel size (1, 2, …)")


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of GPU memory in (0, 1]")
    return value


def parse_size(text: str) -> int:
    """'5GB' -> 5_000_000_000 (decimal units, as huggingface_hub); plain integers are bytes."""
    units = {"TB": 10**12, "GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
    t = text.strip().upper()
    value = None
    for unit, mult in units.items():
        if t.endswith(unit):
            try:
                number = float(t[: -len(unit)])
            except ValueError:
                break
            if math.isfinite(number) and number * mult < 2**63:
                value = int(number * mult)
            break
    else:
        if t.isascii() and t.isdigit():
            value = int(t)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MB or 123456") from None
    if not 1 <= value <= MAX_SHARD_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard size is between 1 byte and 1 TB")
    return value


def _serve_options(args, out: Path, plan_doc: dict, vllm=None):
    import shlex

    from .core.user_settings import get_setting
    from .core.validate.devices import choose_devices
    from .core.probe.vllm_python import SETTING, find_vllm_python
    from .core.plan.budget import DEFAULT_GPU_MEMORY_UTILIZATION
    from .core.validate.serve import ServeOptions, cpu_attention_backend, cpu_serve_dtype, required_kv_cache_dtype

    # before anything starts: which interpreter holds vLLM (one line naming every place tried if none)
    vllm = vllm or find_vllm_python(args.python, get_setting(SETTING))
    probe = None
    if args.device != "cpu":
        from .core.probe.gpu import probe_gpus

        probe = probe_gpus()
    serve = plan_doc.get("serve") or {}
    tp, pp = _parallel_sizes(args, serve)
    from .core.validate.parallel import batch_pids

    choice = choose_devices(args.device, probe, count=tp * pp, gpus=args.gpus, neighbours=frozenset(batch_pids()))
    device = choice.device
    cpu = device == "cpu"
    if args.speculative and not plan_doc.get("mtp_kept"):
        raise InputError(out / "mxtrim-plan.json", "the output keeps no MTP layer: --speculative has nothing to run")
    return ServeOptions(
        python=vllm.python,
        python_origin=vllm.origin,
        entry=vllm.entry,
        device=device,
        gpus=choice.gpus,
        device_note=choice.note,
        refused=choice.refused,
        tp=tp,
        pp=pp,
        expert_parallel=bool(getattr(args, "expert_parallel", None) or serve.get("expert_parallel")),
        max_model_len=int(getattr(args, "max_model_len", None) or (256 if cpu else serve.get("max_model_len") or 4096)),
        gpu_memory_utilization=None if cpu else float(getattr(args, "gpu_memory_utilization", None)
                                                      or serve.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION),
        kv_cache_memory_bytes=args.kv_cache_memory_bytes or (64 * 2**20 if cpu else None),
        dtype=cpu_serve_dtype(out) if cpu else None,
        # the output's chosen cache dtype, else what the family requires on a GPU (the CPU
        # build picks its own)
        kv_cache_dtype=(serve.get("kv_cache_dtype") if serve.get("kv_cache_dtype") not in (None, "auto") else None)
        or (None if cpu else required_kv_cache_dtype(out)),
        attention_backend=cpu_attention_backend(out) if cpu else None,
        trust_remote_code=args.trust_remote_code,
        speculative_mtp=1 if args.speculative else 0,
        launcher=shlex.split(args.launcher) if args.launcher else None,
        startup_timeout=args.timeout,
        gpu_total_bytes=_chosen_gpu_memory(probe, choice.gpus) if not cpu else None,
    )


def _parallel_sizes(args, serve: dict) -> tuple[int, int]:
    """(TP, PP) a server of this output runs at: the flags' (trim's are text, already checked),
    else the output's serve settings, else 1."""
    return tuple(int(getattr(args, key, None) or serve.get(key) or 1) for key in ("tp", "pp"))


def _chosen_gpu_memory(probe, gpus: str | None) -> int | None:
    """Memory of the first GPU the server gets (what vLLM's budget is taken from)."""
    if probe is None or not gpus:
        return None
    first = gpus.split(",")[0].strip()
    return next((g.total_bytes for g in probe.gpus if str(g.index) == first), None)


def run_validation(out: Path, args, quiet: bool, vllm=None):
    """Validate ``out`` as the flags say (``vllm``: the interpreter already found, else found
    here); the result is recorded in the output directory."""
    from .core.validate.record import record
    from .core.validate.run import read_output, validate

    opts = _serve_options(args, out, read_output(out), vllm)
    progress = _progress_printer() if getattr(args, "progress", False) else None
    if progress is None and not quiet:
        progress = ValidationProgress()

    serve = args.serve or args.equivalence
    v = validate(out, opts, serve=serve, equivalence=args.equivalence, on_event=progress)
    runs = record(v)
    # asked to serve and could not (busy or absent devices): not a success
    ok = v.ok and not (serve and opts.refused)
    return v, runs, ok


class _LiveLines:
    """Lines on a stream (stderr), where on a terminal one line may be shown in place
    (``live``) and is cleared before the next line."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.live = False  # a line shown in place, to be cleared before the next line

    def _say(self, line: str) -> None:
        self._clear()
        print(line, file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
            self.live = False


class WeightsProgress(_LiveLines):
    """What a real-weight trim shows on stderr without --progress when stderr is a terminal
    (over SSH too): a line when the copy starts, one per shard written, the bytes copied
    rewritten in place as they go, and the verification. Written to a log or a pipe, only the
    notice of a leftover removed (as for a dummy trim); stdout (--json) is never touched."""

    def __init__(self, stream=None) -> None:
        super().__init__(stream)
        self.shard = ("", 0, 0)  # the shard being written: name, its number, of how many


    def _copying(self, done: int, total: int, eta) -> None:
        import shutil

        from .core.units import human_bytes

        name, n, of = self.shard
        where = f"shard {n}/{of} {name}: " if name else ""
        left = f", about {eta:.0f} s left" if isinstance(eta, (int, float)) and done < total else ""
        line = f"  {where}{human_bytes(done)} / {human_bytes(total)} ({done * 100 // max(total, 1)}%){left}"
        self._clear()
        self.stream.write(line[:max(10, shutil.get_terminal_size().columns - 1)])
        self.stream.flush()
        self.live = True

    def __call__(self, event: dict) -> None:
        from .core.progress import LeftoverRemoved, ShardWritten, Stage, TensorCopied, parse_event
        from .core.units import human_bytes

        typed = parse_event(event)
        raw = typed.raw
        if isinstance(typed, LeftoverRemoved):
            self._say(f"mxtrim: removed {typed.path}, left by an interrupted run")
        elif not self.tty:
            return
        elif isinstance(typed, Stage) and typed.name == "extract" and typed.status == "running":
            self._say(f"copying {human_bytes(raw.get('total_bytes') or 0)} in {raw.get('total_tensors', '?')} tensors "
                      f"into {raw.get('shards', '?')} shard(s)")
        elif isinstance(typed, ShardWritten) and typed.status == "start":
            self.shard = (typed.shard, raw.get("index", 0), raw.get("of", 0))
        elif isinstance(typed, TensorCopied):
            self._copying(typed.done_bytes, typed.total_bytes, raw.get("eta_s"))
        elif isinstance(typed, ShardWritten) and typed.status == "done":
            name, n, of = self.shard if self.shard[0] == typed.shard else (typed.shard, raw.get("index", 0), raw.get("of", 0))
            self._say(f"  ✓ shard {n}/{of} {name} written ({human_bytes(typed.bytes)})")
        elif isinstance(typed, Stage) and typed.name == "verify" and typed.status == "start":
            self._say(f"verifying the copied tensors ({human_bytes(raw.get('total_bytes') or 0)})")
        elif isinstance(typed, Stage) and typed.name == "verify" and typed.status == "done":
            self._say(f"  ✓ {raw.get('hashes_matched', '?')} of {raw.get('tensors', '?')} tensors verified")
        elif isinstance(typed, Stage) and typed.status == "done" and typed.name in ("extract", "write"):
            self._clear()


class ValidationProgress(_LiveLines):
    """What a validation shows on stderr as it goes: the server command and where its log
    goes, a line per stage, on a terminal the server's latest log line (rewritten in place);
    the log itself stays in the file. When a server check fails, the last lines of the log."""

    TAIL = 15

    def __init__(self, stream=None) -> None:
        from collections import deque

        super().__init__(stream)
        self.tail: deque[str] = deque(maxlen=self.TAIL)
        self.log = ""


    def __call__(self, event: dict) -> None:
        import shutil

        from .core.progress import Check, Serve, ServerLog, Stage, parse_event

        typed = parse_event(event)
        if isinstance(typed, Serve) and typed.status == "starting":
            self.tail.clear()
            self.log = typed.log
            self._say("$ " + " ".join(typed.command))
            if typed.log:
                self._say(f"  (its log: {typed.log})")
        elif isinstance(typed, Serve):
            self._clear()
        elif isinstance(typed, ServerLog):
            self.tail.append(typed.line)
            if self.tty:
                width = shutil.get_terminal_size().columns
                self._clear()
                self.stream.write(("  | " + typed.line)[:max(10, width - 1)])
                self.stream.flush()
                self.live = True
        elif isinstance(typed, Stage) and typed.status == "running":
            self._say(f"… {typed.name}")
        elif isinstance(typed, Check) and typed.status == "failed" and self.tail and not typed.check.startswith("memory"):
            where = f" (all of it in {self.log})" if self.log else ""
            self._say(f"{typed.check} failed; the server's last {len(self.tail)} log lines{where}:")
            for line in self.tail:
                self._say("  | " + line)
            self.tail.clear()


def print_validation(v, runs: int) -> None:
    marks = {"passed": "✓", "failed": "✗", "unverified": "·", "not applicable": "-", "not comparable": "≠", "differs": "≠"}
    version = (v.environment.get("packages", {}).get("vllm") or {}).get("version")
    from .core.probe.vllm_python import origin_words

    print(f"vLLM {version + ' ' if version else ''}at {v.python} ({origin_words(v.python_origin)})")
    if v.settings:
        print(f"served with: {v.settings_line()}")
    for r in v.rows:
        print(f"{marks.get(r.status, '?')} {r.check}: {r.status}" + (f" — {r.detail}" if r.detail else ""))
        if r.verdict:
            print(f"    {r.verdict['class']}: {r.verdict['summary']}")
            for line in r.verdict["evidence"]:
                print(f"      {line}")
            print(f"    suggested: {r.verdict['advice']}")
    if v.environment.get("warning"):
        print(f"⚠ {v.environment['warning']}")
    if v.mode == "weights":
        print("loadable by this vLLM" if v.loadable else "not shown loadable (needs a real-weight start-up and generation)")
    from .core.validate.headline import verdict

    for line in verdict(v.to_json())[1]:  # the verdict, and what the server ran at against the planned settings
        print(line)
    print(f"recorded in {v.output / 'validation.json'} (run {runs}) and README.md")


def _leftover_servers_notice(args) -> None:
    """Before serving: servers a killed mxtrim left, said in one line (records of gone ones
    removed)."""
    if args.serve or args.equivalence:
        from .core.validate import leftovers

        found = leftovers.scan()
        if found:
            print(leftovers.notice(found), file=sys.stderr, flush=True)


def cmd_validate(args) -> int:
    if args.all_in is not None or len(args.output) > 1:
        return cmd_validate_many(args)
    if len(args.output) != 1:
        raise UsageError("mxtrim validate: error: give an output directory (OUT), several, or --all [FOLDER]")
    _leftover_servers_notice(args)
    v, runs, ok = run_validation(args.output[0], args, quiet=args.json)
    if args.json:
        json.dump(v.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_validation(v, runs)
    return 0 if ok else 1


def _many_outputs(args) -> tuple[list[Path], list[Path], Path]:
    """(mxtrim outputs, hand-made examples, matrix folder) of ``validate OUT1 OUT2 …`` / ``--all``."""
    from .core.validate.batch import outputs_in
    from .core.validate.examples import workspace_folder

    outputs, hand_made = [Path(os.path.abspath(o)) for o in args.output], []
    folder = None
    if args.all_in is not None:
        folder = Path(os.path.abspath(workspace_folder(Path(args.all_in) if args.all_in else None, Path.cwd())))
        if not folder.is_dir():
            raise InputError(folder, "no such folder of models (give one: mxtrim validate --all FOLDER)")
        mine, hand_made = outputs_in(folder)
        outputs += [o for o in mine if o not in outputs]
    matrix = Path(os.path.abspath(args.matrix or folder or Path.cwd()))
    if not matrix.is_dir():
        raise InputError(matrix, "no such folder for the validation matrix")
    return outputs, hand_made, matrix


def cmd_validate_many(args) -> int:
    """One output after the other, one server at a time; the matrix rewritten after each, so
    Ctrl-C keeps the finished rows (and stops the running server, as a single validation does)."""
    from .core.user_settings import get_setting
    from .core.validate import batch
    from .core.validate.examples import now_versions
    from .core.probe.vllm_python import SETTING, find_vllm_python

    outputs, hand_made, folder = _many_outputs(args)
    vllm = find_vllm_python(args.python, get_setting(SETTING))
    now = now_versions(vllm.python)
    rows = [batch.MatrixRow(str(o), batch.NOT_RUN) for o in outputs]
    _leftover_servers_notice(args)
    i = 0

    def publish(complete: bool) -> tuple[dict, tuple[Path, Path]]:
        doc = batch.matrix_document(rows, vllm.python, now, hand_made, complete)
        return doc, batch.write_matrix(folder, doc)

    running: list[int] = []  # the rows being validated now
    try:
        if getattr(args, "jobs", 1) == 1:
            for i, out in enumerate(outputs):
                running[:] = [i]
                rows[i] = _validate_one_of_many(args, out, vllm, now, f"[{i + 1}/{len(outputs)}]")
                publish(False)
        else:
            _validate_side_by_side(args, outputs, rows, vllm, now, lambda: publish(False), running)
    except KeyboardInterrupt:
        for i in running:
            if rows[i].state == batch.NOT_RUN:
                rows[i].state = batch.INTERRUPTED
        _, paths = publish(False)
        print(f"mxtrim: interrupted; finished rows kept in {paths[1]}", file=sys.stderr)
        raise
    doc, paths = publish(True)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(batch.matrix_markdown(doc))
        print(f"matrix: {paths[1]} and {paths[0].name}")
    return 0 if all(r.ok for r in rows) else 1


def _settings_now(args, out: Path, vllm) -> dict | None:
    """The settings a server of ``out`` would run with now (run.serve_settings), None when the
    output or the flags are refused (its validation says why)."""
    from .core.validate.run import read_output, serve_settings

    try:
        return serve_settings(_serve_options(args, out, read_output(out), vllm))
    except InputError:
        return None


def _reused_row(args, out: Path, vllm, now: dict | None, counter: str):
    """The row of the run recorded earlier that answers this request (reused), else a row not
    run yet whose note says why the earlier run does not (empty: there is none)."""
    from .core.validate import batch
    from .core.validate.examples import last_run

    serve = args.serve or args.equivalence
    earlier = None if args.again else last_run(out)
    elsewhere = batch.recorded_elsewhere(earlier, out)
    if elsewhere:
        print(f"{counter} {out}: its last recorded run was made for {elsewhere} (copied or moved since): validated anew",
              file=sys.stderr, flush=True)
    settings = _settings_now(args, out, vllm) if serve and earlier is not None else None
    if serve and earlier is not None and settings is None:
        return batch.MatrixRow(str(out), batch.NOT_RUN)
    decision = batch.reuse(earlier, vllm.python, now, serve, args.equivalence, args.speculative, out,
                           parallel=(args.tp, args.pp), settings=settings)
    if decision.why and not elsewhere:
        print(f"{counter} {out}: {decision.why}", file=sys.stderr, flush=True)
    if decision.reused:
        return batch.row_for_run(out, earlier, batch.REUSED, decision.why)
    return batch.MatrixRow(str(out), batch.NOT_RUN, note=decision.why)


def _validated_row(out: Path, doc: dict, ok: bool):
    """The matrix row of a validation just run (``doc``: its JSON)."""
    from .core.validate import batch

    row = batch.row_for_run(out, doc, batch.VALIDATED)
    row.ok = ok  # asked to serve and could not (no free device): not ok, as for a single output
    if ok != doc.get("ok"):  # the start-up row says why
        row.note = next((r.get("detail") or "" for r in doc.get("rows") or [] if r.get("check") == batch.START_UP), "")
    return row


def _validate_one_of_many(args, out: Path, vllm, now: dict | None, counter: str):
    from .core.validate import batch

    earlier = _reused_row(args, out, vllm, now, counter)
    if earlier.state == batch.REUSED:
        return earlier
    print(f"{counter} {out}", file=sys.stderr, flush=True)
    try:
        v, runs, ok = run_validation(out, args, quiet=True, vllm=vllm)
    except InputError as exc:
        print(f"mxtrim: error: {exc}", file=sys.stderr, flush=True)
        return batch.MatrixRow(str(out), batch.REFUSED, False, note=str(exc))
    print(f"{counter} {out}: {'ok' if ok else 'failed'} (recorded in validation.json, run {runs})", file=sys.stderr, flush=True)
    return _with_note(_validated_row(out, v.to_json(), ok), earlier.note)


def _with_note(row, note: str):
    """``row`` with ``note`` (why an earlier run was not reused) before its own."""
    row.note = "; ".join(n for n in (note, row.note) if n)
    return row


def _validate_side_by_side(args, outputs: list[Path], rows: list, vllm, now: dict | None, publish, running: list[int]) -> None:
    """``validate --jobs N|auto``: each output in a child ``mxtrim validate OUT`` (what a serial
    run writes), side by side as core.validate.parallel places them; ``rows`` filled and
    ``publish()`` called as each finishes; ``running`` names the rows under way."""
    from .core.plan.budget import DEFAULT_GPU_MEMORY_UTILIZATION
    from .core.validate import batch
    from .core.validate.devices import _user_visible
    from .core.validate.parallel import Job, ParallelBatch
    from .core.validate.run import read_output

    probe_gpus = None
    if args.device != "cpu":
        from .core.probe.gpu import probe_gpus
    first = probe_gpus() if probe_gpus is not None else None
    on_gpu = first is not None and first.available and bool(first.gpus)
    jobs = []
    for i, out in enumerate(outputs):
        rows[i] = _reused_row(args, out, vllm, now, f"[{i + 1}/{len(outputs)}]")
        if rows[i].state == batch.REUSED:
            continue
        try:
            serve = read_output(out).get("serve") or {}
        except InputError as exc:
            print(f"mxtrim: error: {exc}", file=sys.stderr, flush=True)
            rows[i] = batch.MatrixRow(str(out), batch.REFUSED, False, note=str(exc))
            continue
        share = (args.gpu_memory_utilization or float(serve.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
                 if on_gpu else None)
        tp, pp = _parallel_sizes(args, serve)
        jobs.append(Job(i, out, tp, share, pp=pp))
    publish()
    report = _SideBySideReport(rows, publish, running, len(outputs))
    vendor = first.vendor if on_gpu else None
    allowed = _user_visible(first.visible_devices) if on_gpu else None
    # auto on the CPU: a server per 8 cores (each runs its own threads on all of them)
    limit = args.jobs if args.jobs is not None or on_gpu else max(1, (os.cpu_count() or 1) // 8)
    ParallelBatch(jobs, lambda job: _side_by_side_argv(args, vllm.python, job, vendor), probe_gpus if on_gpu else None,
                  limit, report.start, report.done, report.refused, allowed, on_pause=report.pause, starting=args.starting).run()


def _side_by_side_argv(args, python: str, job, vendor: str | None) -> list[str]:
    """The child ``mxtrim validate OUT`` of one output of a side-by-side batch: this batch's
    flags, with the GPUs and the share it was placed on."""
    argv = [sys.executable, "-m", "mxtrim_tui", "validate", str(job.output), "--python", python, "--json", "--progress",
            "--timeout", f"{args.timeout:g}", "--tp", str(job.tp), "--pp", str(job.pp)]
    if job.gpus:
        device = args.device if args.device != "auto" else ("maca" if vendor == "metax" else "cuda")
        argv += ["--device", device, "--gpus", ",".join(map(str, job.gpus)), "--gpu-memory-utilization", f"{job.share:g}"]
    else:
        argv += ["--device", args.device]
    flags = (("--serve", args.serve), ("--speculative", args.speculative), ("--equivalence", args.equivalence),
             ("--trust-remote-code", args.trust_remote_code), ("--ep", args.expert_parallel))
    argv += [flag for flag, on in flags if on]
    for flag, value in (("--launcher", args.launcher), ("--kv-cache-memory-bytes", args.kv_cache_memory_bytes),
                        ("--max-model-len", args.max_model_len)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


class _SideBySideReport:
    """What a side-by-side batch says on stderr and puts in the matrix as its servers go."""

    def __init__(self, rows: list, publish, running: list[int], total: int) -> None:
        self.rows, self.publish, self.running, self.total = rows, publish, running, total

    def _say(self, job, text: str) -> None:
        print(f"[{job.index + 1}/{self.total}] {job.output}{text}", file=sys.stderr, flush=True)

    def start(self, job) -> None:
        self.running.append(job.index)
        where = f" on GPU {','.join(map(str, job.gpus))} (share {job.share:g})" if job.gpus else ""
        self._say(job, where + (" again, alone" if job.alone else ""))

    def done(self, job, doc: dict | None, code: int, retried: bool) -> None:
        from .core.validate import batch

        self.running.remove(job.index)
        if retried:
            self._say(job, ": its start failed on memory beside another server of this batch (not the output's failure): "
                      "validated again alone")
            return
        if doc is None:
            why = next((line[len("mxtrim: error: "):] for line in reversed(job.tail) if line.startswith("mxtrim: error: ")),
                       f"the validation exited with status {code} without a result")
            print(f"mxtrim: error: {why}", file=sys.stderr, flush=True)
            self.rows[job.index] = batch.MatrixRow(str(job.output), batch.REFUSED, False, note=why)
        else:
            row = self.rows[job.index] = _with_note(_validated_row(job.output, doc, code == 0), self.rows[job.index].note)
            if job.alone:
                row.note = (row.note + "; " if row.note else "") + "validated alone: its start beside another server failed on memory"
            self._say(job, f": {'ok' if code == 0 else 'failed'} (recorded in validation.json)")
        self.publish()

    def refused(self, job, why: str) -> None:
        from .core.validate import batch

        self._say(job, f": not started: {why}")
        self.rows[job.index] = batch.MatrixRow(str(job.output), batch.REFUSED, False, note=why)
        self.publish()

    def pause(self, job, paused: bool) -> None:
        gpus = ",".join(map(str, job.gpus))
        self._say(job, f": paused while another server on GPU {gpus} measures its memory" if paused else ": continued")


def cmd_examples(args) -> int:
    from .core.user_settings import get_setting
    from .core.validate.examples import SCHEMA, now_environment, scan, versions_of, workspace_folder
    from .core.probe.vllm_python import SETTING, VllmNotFound, absolute_interpreter, find_vllm_python

    folder = Path(os.path.abspath(workspace_folder(args.folder, Path.cwd())))
    if not folder.is_dir():
        raise InputError(folder, "no such folder of models (give one: mxtrim examples FOLDER)")
    python, note = absolute_interpreter(args.python) if args.python is not None else None, None
    if python is None:
        try:
            python = find_vllm_python(None, get_setting(SETTING)).python
        except VllmNotFound:
            # no vLLM anywhere: nothing to compare the validations with (mxtrim's own
            # interpreter is not where they ran)
            note = "no vLLM environment found: drift not compared (name one: mxtrim examples --python PY)"
    environment = now_environment(python) if python is not None else None  # one start of that interpreter
    now = versions_of(environment) if environment is not None else None
    examples = scan(folder, now, environment=environment)
    if args.json:
        doc = {"schema": SCHEMA, "folder": str(folder),
               "environment_now": {"python_executable": python, "versions": now} | ({"note": note} if note else {}),
               "examples": [e.to_json() for e in examples]}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    from .render import render_examples

    render_examples(folder, examples, python, now, Console(), note=note)
    return 0


def cmd_leftovers(args) -> int:
    """`mxtrim leftovers [--stop]`: the servers whose mxtrim was killed before it could stop
    them (pid records in $XDG_STATE_HOME/mxtrim/servers)."""
    from .core.validate import leftovers

    found = leftovers.scan()
    if not found:
        print("no server left running by an earlier mxtrim")
        return 0
    failed = 0
    for item in found:
        if not args.stop:
            print(f"{leftovers.describe(item)}\n  $ {' '.join(item.record.command)}")
            continue
        survivors = leftovers.stop(item)
        if survivors:
            failed += 1
            print(f"could not stop pid(s) {', '.join(map(str, survivors))} (serving {item.record.output})", file=sys.stderr)
        else:
            print(f"stopped pid {item.record.pid} (serving {item.record.output}): {len(item.pids)} process(es)")
    if not args.stop:
        print("stop them with: mxtrim leftovers --stop")
    return 1 if failed else 0


def cmd_batched_test_entry(args) -> int:
    """`mxtrim batched-test-entry OUT... --config FILE` / `--all [FOLDER]`: the harness entries
    of existing outputs appended to FILE, all or none (a name already there refuses them all;
    with --all those already there are left out)."""
    from .core.write.batched_test_entry import append_entries, entry_for_output

    outputs = [Path(os.path.abspath(o)) for o in args.output]
    hand_made: list[Path] = []
    if args.all_in is not None:
        from .core.validate.examples import is_mxtrim_output, model_dirs, workspace_folder

        folder = workspace_folder(Path(args.all_in) if args.all_in else None, Path.cwd())
        if not folder.is_dir():
            raise InputError(folder, "no such folder of models (give one: mxtrim batched-test-entry --all FOLDER)")
        found = [Path(os.path.abspath(p)) for p in model_dirs(folder)]
        hand_made = [p for p in found if not is_mxtrim_output(p)]
        outputs += [p for p in found if p not in hand_made and p not in outputs]
        if not outputs:
            raise InputError(folder, "holds no mxtrim output (directories with mxtrim-plan.json); nothing appended")
    if not outputs:
        raise UsageError("mxtrim batched-test-entry: error: give an output directory (OUT), several, or --all [FOLDER]")
    entries = [entry_for_output(o, args.config) for o in outputs]
    appended = append_entries(args.config, entries, skip_present=args.all_in is not None).to_json()
    appended["not_mxtrim_outputs"] = [str(p) for p in hand_made]
    if args.json:
        json.dump(appended, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _print_harness_text(appended)
    if not appended["appended"] and not appended["already_present"]:
        print("batched_test: nothing to append")
    if hand_made:
        print(f"left out (not written by mxtrim): {', '.join(p.name for p in hand_made)}")
    return 0


def cmd_tui(args) -> int:
    from .tui.app import run_app

    return run_app(args.source)


def cmd_demo(args) -> int:
    from .demo.build import ensure_demo_model

    print(ensure_demo_model("fp8" if args.fp8 else None))
    return 0


def main(argv: list[str] | None = None) -> int:
    from .core import interrupts
    from .entry import exit_interrupted

    interrupts.install()  # SIGTERM unwinds like Ctrl-C, so writers remove their partial output
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, even while the engine is still importing
        print("mxtrim: interrupted", file=sys.stderr)
        if argv is None:  # the command line, not a caller in the same process
            exit_interrupted()
        return 130


def _run(argv: list[str]) -> int:
    from .core.plan.build import SelectionError

    args = _parser().parse_args(argv)
    try:
        if args.command is None:
            args = _parser().parse_args(["tui"] + (["--debug"] if args.debug else []))
        commands = {"inspect": cmd_inspect, "plan": cmd_plan, "trim": cmd_trim, "validate": cmd_validate,
                    "leftovers": cmd_leftovers, "examples": cmd_examples, "batched-test-entry": cmd_batched_test_entry,
                    "tui": cmd_tui, "demo": cmd_demo}
        return commands[args.command](args)
    except SelectionError as exc:
        print(f"mxtrim: error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except InputError as exc:
        if args.debug:
            raise
        print(f"mxtrim: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
