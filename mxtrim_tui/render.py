"""Rich rendering of an Inventory for ``mxtrim inspect`` (the TUI has its own widgets)."""

from __future__ import annotations


from rich import box
from rich.console import Console, Group as RichGroup
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .core.model.inventory import Inventory
from .core.read.source import FileKind
from .core.units import human_bytes, index_ranges, plural, shown_bytes

PALETTE = (
    "bright_blue", "bright_magenta", "bright_green", "bright_yellow", "bright_cyan", "bright_red",
    "blue", "magenta", "green", "yellow", "cyan", "red",
)


def group_style(group_id: int) -> str:
    return PALETTE[group_id % len(PALETTE)]


def layer_strip(inv: Inventory, submodel: str, width: int = 64, indent: str = "") -> Text:
    """One symbol per layer, coloured by group, ``width`` to a line (``indent`` before each
    line after the first)."""
    sm = inv.submodels[submodel]
    text = Text()
    for n, layer in enumerate(sm.layers):
        if n and n % width == 0:
            text.append("\n" + indent)
        g = inv.groups[layer.group]
        text.append(g.symbol, style=f"bold {group_style(g.id)}")
    return text


def _groups_table(inv: Inventory) -> Table:
    """The layer types: one row per group of equal signature."""
    groups = Table(title="Layer types (groups of equal signature)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, just in (("", "left"), ("kind", "left"), ("weights", "left"), ("n", "right"), ("layers", "left"), ("bytes", "right")):
        groups.add_column(col, justify=just, overflow="fold")
    for g in inv.groups:
        k = g.kind
        mlp = k.mlp_label
        kind = Text.assemble((f"{g.submodel}: ", "dim"), f"{k.attention} · {mlp}")
        if k.special:
            kind.append("\n+ " + ", ".join(k.special), style="dim")
        groups.add_row(
            Text(g.symbol, style=f"bold {group_style(g.id)}"),
            kind,
            ("/".join(k.weight_dtypes) or "—") + ("" if g.bytes_known or not k.weight_dtypes else " [dim](estimated)[/]"),
            str(len(g.layers)),
            index_ranges(g.layers),
            shown_bytes(g.nbytes, g.bytes_known),
        )
    return groups


def _files_table(src) -> Table:
    """The directory's files by kind (the shards counted, not listed)."""
    assets = Table(title="Files", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kind", "files"):
        assets.add_column(col)
    by_kind: dict[FileKind, list[str]] = {}
    for f in src.files:
        if f.kind is FileKind.WEIGHTS and f.path in src.shards:
            continue
        label = f.path + (f" → {f.symlink_target}" if f.symlink_target else "")
        if f.detail:
            label += f" [dim]({f.detail})[/]"
        by_kind.setdefault(f.kind, []).append(label)
    if src.shards:
        by_kind.setdefault(FileKind.WEIGHTS, []).insert(0, f"{len(src.shards)} safetensors shard(s)")
    for kind, items in by_kind.items():
        style = "bold red" if kind is FileKind.CUSTOM_CODE else ""
        assets.add_row(Text(kind.value, style=style), "\n".join(items[:12]) + (f"\n… {len(items) - 12} more" if len(items) > 12 else ""))
    return assets


def render_inventory(inv: Inventory, console: Console, shown_as: str | None = None) -> None:
    src = inv.source
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("model", inv.model_name)
    head.add_row("family", f"{inv.family.display} [dim]({inv.family.key})[/]")
    head.add_row("architecture", ", ".join(src.architectures) or "—")
    head.add_row("model_type", src.model_type or "—")
    head.add_row("weights", weights_line(inv))
    head.add_row("source", src.state_detail)
    head.add_row("quantization", inv.quantization.summary() + f" [dim]from {inv.quantization.location}[/]" if inv.quantization else "none")
    console.print(Panel(head, title=f"[b]{shown_as or src.origin or src.root}[/]", expand=False))

    subs = Table(title="Submodels", title_justify="left", box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
    for col in ("submodel", "layers cfg/ckpt", "tensors", "bytes"):
        subs.add_column(col, justify="right" if col != "submodel" else "left")
    for sm in inv.submodels.values():
        declared = "—" if sm.declared_depth is None else str(sm.declared_depth)
        where = f" ({sm.config_path})" if sm.config_path else ""
        subs.add_row(
            Text.assemble((sm.name, "bold"), (f" {sm.role}{where}", "dim")),
            f"{declared}/{len(sm.layers)}",
            f"{sm.tensor_count:,}",
            shown_bytes(sm.nbytes, sm.bytes_known),
        )
    console.print(subs)
    for sm in inv.submodels.values():
        if sm.layers:
            console.print(Text.assemble((f"{sm.name:>8} ", "bold"), layer_strip(inv, sm.name, width=max(16, console.width - 10))))

    console.print(_groups_table(inv))

    parts = Table(title="Non-layer tensors", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("submodel", "part", "tensors", "bytes"):
        parts.add_column(col, justify="right" if col in ("tensors", "bytes") else "left")
    for p in inv.shared:
        parts.add_row("shared", p.label, str(len(p.tensors)), shown_bytes(p.nbytes, p.bytes_known))
    for sm in inv.submodels.values():
        for p in sm.parts:
            parts.add_row(sm.name, p.label, str(len(p.tensors)), shown_bytes(p.nbytes, p.bytes_known))
    if parts.row_count:
        console.print(parts)

    console.print(_files_table(src))
    if src.custom_code_present:
        console.print("[bold red]custom code present[/] — listed only, never executed")

    if inv.unassigned:
        console.print(f"[yellow]{len(inv.unassigned)} unassigned tensor(s):[/] " + escape(", ".join(inv.unassigned[:5])))
    if inv.warnings:
        console.print(RichGroup(*[Text("⚠ " + w, style="yellow") for w in inv.warnings]))


def weights_line(inv: Inventory) -> str:
    """Total tensor bytes, tensor and shard counts, and what of it is on disk."""
    src = inv.source
    if not src.all_headers:
        return "none: no shards and no index (dummy trims only)"
    total = inv.total_bytes
    size = f"{human_bytes(total)} ({total:,} B)" if total is not None else "size unknown (the index gives no total_size)"
    line = f"{size} in {inv.total_tensors:,} tensors, {len(src.all_headers)} shard(s){' + index' if src.index_file is not None else ''}"
    if src.absent_shards:
        line += f"; {len(src.shards)} on disk ({human_bytes(src.present_tensor_bytes)})"
    return line


def _print_needed_shards(plan, console: Console, repo: str | None = None) -> None:
    """Which source shards a real-weight trim reads (what to download for it), and the
    command that fetches those not on disk."""
    from .core.plan.needed_shards import download_command, missing_shards, needed_shards, needed_summary, repo_id

    needed = needed_shards(plan)
    src = plan.inventory.source
    total = len(src.all_headers)
    if not needed or (total < 2 and not src.absent_shards):
        return
    names = ", ".join(s.file for s in needed[:6]) + (f", … ({len(needed) - 6} more)" if len(needed) > 6 else "")
    console.print(f"a real-weight trim {escape(needed_summary(needed, total))}: {escape(names)}  [dim](--fetch-list prints them one per line)[/]")
    missing = missing_shards(needed)
    if missing:
        repo = repo_id(src.config, repo)
        if repo:
            console.print(f"   fetch the {len(missing)} missing:", style="dim")
            # one line whatever the width, so it can be copied and run as it is
            console.print(Text(download_command(repo, missing, str(src.root))), soft_wrap=True)
        else:
            console.print(Text(f"   {len(missing)} not on disk; --repo OWNER/NAME shows the command that fetches them", style="dim"))


def render_plan(plan, console: Console, repo: str | None = None, errors: bool = True) -> None:
    """The plan as `mxtrim plan` prints it (``errors`` False: without its blocking errors,
    which the caller says in its one error line)."""
    from .core.plan.config_edit import short_value

    inv = plan.inventory
    auto = " (automatic covering set)" if plan.auto.get("text") else ""
    console.print(
        f"[b]{inv.model_name}[/]: keep {plan.new_depth} of {inv.text.declared_depth if inv.text else '?'} text layers{auto}"
        + (f"; MTP {'kept' if plan.mtp_kept else 'dropped'}" if "mtp" in inv.submodels else "")
        + f"; retained tensors {shown_bytes(plan.retained_bytes, plan.retained_bytes_known)} of {shown_bytes(inv.total_bytes)}"
    )
    _print_needed_shards(plan, console, repo)
    mapping = Table(title="Layer mapping (new ← original)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("", "submodel", "new ← orig", "stored as", "kind"):
        mapping.add_column(col, overflow="fold")
    sym = {g.symbol: g.id for g in inv.groups}
    for m in plan.mappings:
        mapping.add_row(
            Text(m.group, style=f"bold {group_style(sym.get(m.group, 0))}"),
            m.submodel,
            f"{m.new} ← {m.old}",
            f"{m.new_name} ← {m.old_name}",
            m.kind.label,
        )
    console.print(mapping)

    cov = Table(title="Coverage", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("", "kind", "kept", "request that exercises it"):
        cov.add_column(col, overflow="fold")
    for c in plan.coverage:
        kept = ", ".join(f"{a}←{b}" for a, b in c.kept) if c.kept else Text("not covered", style="bold red")
        cov.add_row(Text(c.group, style=f"bold {group_style(sym.get(c.group, 0))}"), f"{c.submodel}: {c.kind}", kept, c.request)
    console.print(cov)

    edits = Table(title="Configuration changes", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("field", "before", "after"):
        edits.add_column(col, overflow="fold")

    for e in plan.edits:
        field = e.dotted if e.file == "config.json" else f"{e.file}:{e.dotted}"
        edits.add_row(field, short_value(e.before, 60), short_value(e.after, 60))
    # every layer kept (or nothing to rewrite): said, not an empty table
    console.print(edits if plan.edits else Text("no configuration changes: the configuration is written as it is"))
    check = plan.transformers_check
    if check is not None:
        style = {"exact": "green", "mismatch": "bold red"}.get(check.status, "dim")
        console.print(Text(f"checked against transformers: {check.status} — {check.summary}", style=style))
        if check.judge_line:
            console.print(Text(f"   {check.judge_line}", style="dim"))
    for warning in plan.inventory.source.warnings:  # what reading the source found
        console.print(Text("⚠ " + warning, style="yellow"))
    for i in plan.issues:
        if i.level == "error" and not errors:
            continue
        style = "bold red" if i.level == "error" else "yellow"
        console.print(Text(("✗ " if i.level == "error" else "⚠ ") + i.message, style=style))
        if i.fix:
            console.print(Text("   fix: " + i.fix, style="dim"))


def render_budget(b, console: Console) -> None:
    """The GPU memory budget as `mxtrim plan` prints it: weights per GPU, KV per token by
    layer kind, vLLM's start-up arithmetic, bars against the GPU budget, advice."""
    from rich.progress_bar import ProgressBar

    i = b.inputs
    layout = f"TP={i.tp}" + (f" PP={i.pp}" if i.pp > 1 else "") + (f" DP={i.dp}" if i.dp > 1 else "") + (" EP" if i.expert_parallel else "")
    t = Table(title=f"Budget ({layout}, context {i.max_model_len:,}, {i.max_num_seqs} sequence(s), "
                    f"utilisation {i.gpu_memory_utilization:g}, KV {i.kv_cache_dtype})",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_header=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_column(no_wrap=True)
    known = b.ranks is None or not b.ranks.unknown_tensors
    budget = b.budget_bytes

    def bar(n):
        return ProgressBar(total=budget, completed=min(max(n, 0), budget), width=24) if budget else ""

    t.add_row("disk", f"a real-weight trim writes {shown_bytes(b.weights_bytes, known)} of tensors", "")
    split = ", ".join(f"{k} {human_bytes(v)}" for k, v in (b.ranks.by_kind.items() if b.ranks else ()) if v)
    origin = b.weights_origin()
    t.add_row("weights / GPU", f"{shown_bytes(b.weights_per_gpu, known)}" + (f" [dim]({split})[/]" if split else "")
              + (f"\n[yellow]{escape(origin)}[/]" if origin else ""), bar(b.weights_per_gpu))
    if b.ranks and b.ranks.pp > 1:
        t.add_row("", "[dim]per stage: " + ", ".join(human_bytes(x) for x in b.ranks.stage_bytes) + "[/]", "")
    for line in b.kv_lines:
        if line.state_bytes_per_seq and line.bytes_per_token:  # DeepSeek-V4: compressed per token + a window per sequence
            what = f"{line.bytes_per_token:,} B per token + {human_bytes(line.state_bytes_per_seq)} per sequence, per layer"
        elif line.state_bytes_per_seq:
            what = f"{human_bytes(line.state_bytes_per_seq)} state per sequence per layer"
        else:
            what = f"{line.bytes_per_token:,} B per token per layer" + (f", up to {line.tokens_per_seq:,} tokens" if line.tokens_per_seq and line.tokens_per_seq < i.max_model_len else "")
        t.add_row("KV", f"{line.kind} ×{line.layers}: {what}" + (f" [dim]({line.note})[/]" if line.note else ""), "")
    t.add_row("KV / token", f"{b.kv_per_token:,} B per GPU; one sequence of {i.max_model_len:,} tokens: {human_bytes(b.kv_bytes_for_context)}", "")
    if budget:
        t.add_row("vLLM budget", f"{human_bytes(budget)} = {human_bytes(i.gpu_total_bytes)} × {i.gpu_memory_utilization:g}", bar(budget))
        t.add_row("activations", f"≈ {human_bytes(b.activation_bytes)} (rough peak of the profiling pass)", bar(b.activation_bytes))
        t.add_row("KV cache", f"{human_bytes(max(0, b.available_kv_bytes))} available"
                  + (f" → {b.kv_tokens:,} tokens, {b.max_concurrency:,.1f}× concurrency at {i.max_model_len:,}" if b.kv_tokens is not None else ""),
                  bar(b.available_kv_bytes))
    for n, advice in enumerate(b.advice, 1):
        t.add_row("advice" if n == 1 else "", f"{n}. {advice}", "")
    console.print(t)


def render_gpus(probe, console: Console, gpu_memory_flag: bool = False) -> None:
    """The GPUs `mxtrim plan` read (name, memory used / total, the probe that answered), or
    that none was found and what was tried; ``gpu_memory_flag``: the budget's GPU memory is
    --gpu-memory's, not the first GPU's."""
    from .core.probe.gpu import SOURCE_WORDS, TRIED

    if not (probe.available and probe.gpus):
        console.print(Text(f"GPUs: none found (tried {TRIED}): {probe.reason}", style="dim"))
        return
    source = SOURCE_WORDS.get(probe.source, probe.source or "?")
    variable = {"nvidia": "CUDA_VISIBLE_DEVICES", "metax": "MACA_VISIBLE_DEVICES"}.get(probe.vendor)
    head = f"GPUs ({probe.vendor}" + (f" driver {probe.driver}" if probe.driver else "") + f", read through {source}"
    head += f"; {variable}={probe.visible_devices}" if variable and probe.visible_devices is not None else ""
    console.print(Text(head + "):", style="bold"))
    for n, g in enumerate(probe.gpus):
        memory = (f"{human_bytes(g.used_bytes or 0)} / {human_bytes(g.total_bytes)} used" if g.total_bytes
                  else "no dedicated memory (UMA)")
        busy = f", {len(g.processes)} process(es)" if g.processes else ""
        budget = "  ← the budget's GPU memory" if n == 0 and g.total_bytes and not gpu_memory_flag else ""
        console.print(Text(f"  GPU {g.index}  {g.name}  {memory}{busy}{' (sliced instance)' if g.sliced else ''}{budget}"))


def render_examples(folder, examples, python: str | None, now: dict | None, console: Console, note: str | None = None) -> None:
    """`mxtrim examples`: one row per reduced model (on a terminal too narrow for the table
    beside the whole names, a block per model), then each one's problems."""
    rows = []
    for e in examples:
        v = e.validation
        validated = "never" if v is None else f"{'ok' if v.get('ok') else 'failed'} {v.get('started') or ''}".rstrip()
        if v is not None and now is None:
            drift = "not compared"
        else:
            drift = ", ".join(f"{k} {d['then'] or 'absent'} → {d['now'] or 'absent'}" for k, d in e.drift.items()) or ("—" if v else "")
        source = e.source.get("state", "")
        mode = e.mode + ("" if e.made_by == "mxtrim" else " (hand-made)")
        layers = "—" if e.layers is None else str(e.layers)
        rows.append((e, mode, layers, source, validated, drift))
    names = max((len(e.name) for e in examples), default=0)
    if console.width >= names + 64:
        t = Table(title=f"Reduced models in {folder}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("model", no_wrap=True)  # whole, to be copied
        for col in ("mode", "layers", "source", "last validation", "drift"):
            t.add_column(col, overflow="fold")
        for e, mode, layers, source, validated, drift in rows:
            t.add_row(Text(e.name, style="bold"), mode, layers, Text(source, style="red" if source in ("missing", "changed") else ""),
                      validated, Text(drift, style="yellow" if e.drift else ""))
        console.print(t)
    else:
        console.print(Text(f"Reduced models in {folder}", style="italic"))
        for e, mode, layers, source, validated, drift in rows:
            console.print(Text(e.name, style="bold"), soft_wrap=True)
            count = "— layers" if e.layers is None else plural(e.layers, "layer")
            line = Text.assemble("  ", mode, f" · {count} · source ",
                                 (source, "red" if source in ("missing", "changed") else ""), f" · last validation: {validated}")
            if drift:
                line.append(f" · drift: {drift}", style="yellow" if e.drift else "")
            console.print(line)
    if python is None:
        console.print(Text(note or "environment now: unknown", style="dim"))
    else:
        shown = ", ".join(f"{k} {now.get(k) or 'absent'}" for k in ("python", "vllm", "transformers", "torch")) if now else "unknown"
        console.print(Text(f"environment now ({python}): {shown}", style="dim"))
    for e in examples:
        for line, style in example_lines(e):
            console.print(Text(f"{e.name}: {line}", style=style))


def example_lines(e) -> list[tuple[str, str]]:
    """(line, style) of what `mxtrim examples` says of one example below the table: its
    problems, a tokenizer that is not usable, the environment its launch scripts set, the
    optional files its README lists and lacks, the results its README records (history, not
    rechecked), its launch scripts."""
    lines = [(p, "yellow") for p in e.problems]
    tok = e.tokenizer or {}
    if tok.get("usable") is False and tok.get("files"):
        lines.append((f"tokenizer not usable: {tok.get('detail')}", "yellow"))
    by_file: dict[str, list[str]] = {}
    for v in e.env:
        by_file.setdefault(v["file"], []).append(f"{v['name']}={v['value']}" + (" (unknown to vLLM)" if v["known"] is False else ""))
    unchecked = any(v["known"] is None and v["name"].startswith("VLLM_") for v in e.env)
    for name, settings in by_file.items():
        lines.append((f"environment ({name}): " + ", ".join(settings)
                      + (" — VLLM_* names not checked against a vLLM environment" if unchecked else ""), "dim"))
    for a in e.readme_assets:
        if not a["required"] and not a["present"]:
            lines.append((f"README.md lists {a['file']} as optional: absent ({a['note']})", "dim"))
    h = e.history
    if h:
        env = ", ".join(x["name"] + (f" {x['version']}" if x["version"] else " (no version given)") for x in h["environment"]) or "none named"
        when = ", ".join(h["dates"]) or "no date given"
        lines.append((f"README.md records results ({h['status']}; {', '.join(h['sections'])}; {when}; environment: {env}):", "cyan"))
        lines += [(f"  {r}", "dim") for r in h["results"]]
        if h.get("more"):
            lines.append((f"  … {h['more']} more in README.md", "dim"))
    lines += [(f"launch script (shown, not run): {s}", "dim") for s in e.launch_scripts]
    return lines
