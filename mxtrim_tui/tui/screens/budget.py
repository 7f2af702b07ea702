"""Step 4: disk and GPU memory budget — exact bytes, KV per token, vLLM's start-up arithmetic,
live GPU occupancy (refreshed in a worker, never blocking)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Checkbox, DataTable, Input, Label, Static

from ...core.plan.budget import check_parallelism, compute_budget, parse_budget_inputs
from ...core.write.report import default_serve
from ...core.units import human_bytes, shown_bytes
from .base import MarkedCheckbox, WizardScreen

GPU_REFRESH_SECONDS = 5.0


def bar(used: int, total: int, width: int = 30) -> Text:
    frac = 0.0 if total <= 0 else min(1.0, used / total)
    full = int(round(frac * width))
    style = "green" if frac < 0.7 else ("yellow" if frac < 0.95 else "red")
    text = Text("█" * full, style=style)
    text.append("░" * (width - full), style="dim")
    text.append(f" {frac * 100:5.1f}%")
    return text


class BudgetScreen(WizardScreen):
    STEP = "budget"
    HELP = (
        "Disk: what the output will take against the free space where it goes. GPU: each visible "
        "device's memory and the processes using it (NVML on NVIDIA, pymxml on MetaX; refreshed "
        "every few seconds). Edit TP, PP, DP and expert parallelism, context length, concurrency, "
        "tokens per step, memory utilisation and the KV cache dtype to see weights per GPU, KV "
        "cache per token and vLLM's predicted KV budget; what you change is written into the "
        "output's serve command. Advice follows the "
        "trimming rules: reduce context, concurrency and cache budgets before anything else."
    )
    BINDINGS = [Binding("ctrl+r", "refresh_gpus", "Refresh GPUs", id="budget.refresh")]
    # the digits jump between steps: start outside the text boxes (Tab moves into them)
    AUTO_FOCUS = HOME = "#budget-body"
    # two rows of boxes (80 columns hold five), then expert parallelism as a checkbox
    FIELDS = (
        ("tp", "TP"),
        ("pp", "PP"),
        ("dp", "DP"),
        ("max_model_len", "context"),
        ("max_num_seqs", "seqs"),
        ("max_num_batched_tokens", "batch tokens"),
        ("gpu_memory_utilization", "util"),
        ("kv_cache_dtype", "KV dtype"),
        ("gpu_gib", "GPU GiB"),
    )
    ROW_SPLIT = 5
    EP = "expert_parallel"

    def __init__(self) -> None:
        super().__init__()
        self.probe = None
        self._filled: dict[str, str] = {}  # what the screen put in each box

    def _defaults(self) -> dict[str, str]:
        """What the report's serve command uses when nothing is chosen (context long enough
        for the kept paths' triggering prompts)."""
        st = self.app.state
        b = default_serve(st.plan) if st.plan is not None else st.budget_inputs
        return {
            "tp": str(b.tp), "pp": str(b.pp), "dp": str(b.dp), "max_model_len": str(b.max_model_len),
            "max_num_seqs": str(b.max_num_seqs), "max_num_batched_tokens": "",  # blank: the context length
            "gpu_memory_utilization": f"{b.gpu_memory_utilization:g}", "kv_cache_dtype": b.kv_cache_dtype, "gpu_gib": "",
        }

    def _fill_inputs(self) -> None:
        """Each box shows what the user typed there, else the default for the current plan."""
        typed = self.app.state.budget_text
        for name, value in self._defaults().items():
            box = self.query_one(f"#in-{name}", Input)
            wanted = typed.get(name, value)
            if name not in typed:
                self._filled[name] = wanted
            if box.value != wanted:
                box.value = wanted
        ep = self.query_one(f"#in-{self.EP}", Checkbox)
        if ep.value != bool(typed.get(self.EP)):
            ep.value = bool(typed.get(self.EP))

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with VerticalScroll(id="budget-body"):
            for row, fields in (("budget-inputs", self.FIELDS[:self.ROW_SPLIT]), ("budget-inputs-2", self.FIELDS[self.ROW_SPLIT:])):
                with Horizontal(id=row, classes="budget-row"):
                    for name, label in fields:
                        with Vertical(classes="budget-field"):
                            yield Label(label)
                            # marked invalid by this screen (the core's rules), not by Input itself
                            yield Input(id=f"in-{name}", validate_on=())
                    if row == "budget-inputs-2":
                        with Vertical(classes="budget-field"):
                            yield Label("EP")
                            yield MarkedCheckbox("experts", id=f"in-{self.EP}")  # ▐X▌ on, ▐ ▌ off
            yield Static("", id="budget-errors")
            yield Static("", id="disk-view")
            yield Label("GPUs", classes="pane-title")
            yield Static("probing…", id="gpu-status")
            yield DataTable(id="gpu-table", cursor_type="row")
            yield Static("", id="budget-view")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.query_one("#gpu-table", DataTable).add_columns("#", "name", "memory used / total", "free", "processes")
        # what a box holds is the wizard's state the moment it changes (not when its Changed
        # message arrives): a step key right after a burst of typing meets the new value
        for name, _ in self.FIELDS:
            self.watch(self.query_one(f"#in-{name}", Input), "value", partial(self._typed, name), init=False)
        self.watch(self.query_one(f"#in-{self.EP}", Checkbox), "value", self._expert_parallel_typed, init=False)
        self.refresh_gpus()
        self.set_interval(GPU_REFRESH_SECONDS, self.refresh_gpus)

    def refresh_view(self) -> None:
        st = self.app.state
        disk = self.query_one("#disk-view", Static)
        view = self.query_one("#budget-view", Static)
        if st.plan is None:
            disk.update("Choose layers first (step 3).")
            view.update("")
            return
        self._fill_inputs()
        self._update_budget()

    def _show_disk(self) -> None:
        """The output's exact size against the free space where it goes (follows the serve
        settings too: they are spelled out in the README)."""
        from ...core.plan.disk_budget import existing_ancestor  # psutil and the extraction planner: when first needed

        st = self.app.state
        probe_dir = existing_ancestor(st.output_path)
        free = self.app.disk_usage(probe_dir).free
        need = st.output_bytes()
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold")
        t.add_column()
        mode = "weights" if st.writes_weights() else "dummy"
        t.add_row("disk", f"{mode} output {human_bytes(need)} ({need:,} B); free {human_bytes(free)} at {probe_dir}")
        t.add_row("", bar(need, free))
        if st.mode == "weights" and mode == "dummy":
            t.add_row("", Text(f"✗ {st.weights_blocker()}", style="bold red"))
        self.query_one("#disk-view", Static).update(t)

    def _read_boxes(self):
        """The typed fields, parsed and checked by the core (the CLI's flags use the same
        rules): (inputs, {field: message})."""
        st = self.app.state
        raw = {name: self.query_one(f"#in-{name}", Input).value for name, _ in self.FIELDS}
        if not raw["max_num_batched_tokens"].strip():
            del raw["max_num_batched_tokens"]  # blank: vLLM's default, the context length
        raw[self.EP] = self.query_one(f"#in-{self.EP}", Checkbox).value

        inputs, errors = parse_budget_inputs(raw, replace(st.budget_inputs, gpu_total_bytes=None))
        # TP/PP against the model, for the fields that parsed (an invalid one kept the old value)
        if st.plan is not None:
            errors = check_parallelism(st.plan, inputs) | errors
        if inputs.gpu_total_bytes is None and self.probe is not None and self.probe.gpus:
            inputs = replace(inputs, gpu_total_bytes=self.probe.gpus[0].total_bytes)  # the first visible device
        return inputs, errors

    def _sync_state(self):
        """The wizard's serve settings and their errors from what the boxes hold now."""
        st = self.app.state
        inputs, errors = self._read_boxes()
        labels = dict(self.FIELDS, **{self.EP: "EP"})
        st.budget_inputs = inputs
        st.budget_errors = {labels[k]: v for k, v in errors.items()}
        return inputs, errors

    def _inputs(self):
        """The state synced with the boxes; invalid boxes are marked and their messages listed
        under the boxes."""
        inputs, errors = self._sync_state()
        for name, _ in self.FIELDS:
            box = self.query_one(f"#in-{name}", Input)
            box.set_class(name in errors, "-invalid")
            box.set_class(name not in errors, "-valid")
        labels = dict(self.FIELDS, **{self.EP: "EP"})
        self.query_one("#budget-errors", Static).update(
            Text("\n".join(f"✗ {labels[k]}: {v}" for k, v in errors.items()), style="bold red") if errors else ""
        )
        return inputs

    def _update_budget(self) -> None:
        st = self.app.state
        if st.plan is None:
            return
        inputs = self._inputs()
        self._show_disk()
        b = compute_budget(st.plan, inputs)
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        known = st.plan.retained_bytes_known
        t.add_row("weights", f"{shown_bytes(b.weights_bytes, known)} retained; {shown_bytes(b.weights_per_gpu, known)} per GPU at TP={inputs.tp}")
        origin = b.weights_origin()
        if origin:
            t.add_row("", Text(f"weights per GPU {origin}", style="yellow"))
        elif not known:
            t.add_row("", Text("tensors in shards not on disk count as 0 B in the figures below", style="yellow"))
        for line in b.kv_lines:
            note = f" [dim]({line.note})[/]" if line.note else ""
            t.add_row("", f"{line.layers} × {line.kind}: {line.bytes_per_token:,} B/token per layer{note}")
        t.add_row("KV / token", f"{b.kv_per_token:,} B per GPU (all kept layers)")
        t.add_row("KV / sequence", f"{human_bytes(b.kv_bytes_for_context)} at max_model_len={inputs.max_model_len}")
        if b.state_layers:
            t.add_row("", Text(f"{b.state_layers} linear/Mamba layer(s): per-sequence state not estimated", style="dim"))
        if b.budget_bytes is not None:
            t.add_row("vLLM budget", f"{human_bytes(b.budget_bytes)} = total × {inputs.gpu_memory_utilization}")
            t.add_row("activations", f"≈ {human_bytes(b.activation_bytes)} (rough profile-run peak)")
            t.add_row("available KV", f"{human_bytes(max(0, b.available_kv_bytes))}" + (" (negative: does not fit)" if b.available_kv_bytes < 0 else ""))
            t.add_row("KV tokens", f"{b.kv_tokens:,}" if b.kv_tokens is not None else "—")
            t.add_row("max concurrency", f"{b.max_concurrency:.1f} × {inputs.max_model_len} tokens" if b.max_concurrency is not None else "—")
        else:
            t.add_row("vLLM budget", Text("not available: no GPU memory figure (no GPU visible; type GPU GiB)", style="dim"))
        t.add_row("advice", Text("\n".join(f"{n}. {a}" for n, a in enumerate(b.advice, 1)), style="cyan"))
        self.query_one("#budget-view", Static).update(t)

    def _typed(self, name: str, value: str) -> None:
        """A box changed (typed, or filled by the screen): the state follows at once."""
        if name in self._filled:
            typed = self.app.state.budget_text
            if value == self._filled[name]:
                typed.pop(name, None)  # the default again (shown by the screen, or typed back)
            else:
                typed[name] = value  # typed by the user: kept
        self._sync_state()

    def _expert_parallel_typed(self, value: bool) -> None:
        typed = self.app.state.budget_text
        if value:
            typed[self.EP] = True
        else:
            typed.pop(self.EP, None)  # off: the default
        self._sync_state()

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        if event.input.id and event.input.id.startswith("in-"):
            self._update_budget()

    @on(Checkbox.Changed, "#in-expert_parallel")
    def _expert_parallel(self, event: Checkbox.Changed) -> None:
        self._update_budget()

    # --- GPU probe in a worker ------------------------------------------------------------
    def action_refresh_gpus(self) -> None:
        self.refresh_gpus()

    @work(thread=True, exclusive=True, group="gpu-probe", exit_on_error=False)
    def refresh_gpus(self) -> None:
        probe = self.app.gpu_probe()
        self.app.call_from_thread(self._show_probe, probe)

    def _show_probe(self, probe) -> None:
        self.probe = probe
        table = self.query_one("#gpu-table", DataTable)
        table.clear()
        status = self.query_one("#gpu-status", Static)
        table.display = bool(probe.available and probe.gpus)
        if table.display:
            source = probe.source
            status.update(Text(f"{probe.vendor} driver {probe.driver}" + (f" (read through {source})" if source else "")
                               + (f", visible: {probe.visible_devices}" if probe.visible_devices else ""), style="dim"))
        else:
            status.update(Text(f"not available: {probe.reason}", style="dim"))
        for g in probe.gpus:
            used = f"{human_bytes(g.used_bytes)} / {human_bytes(g.total_bytes)}" if g.total_bytes else "n/a (UMA)"
            procs = ", ".join(f"{p.name}[{p.pid}]" for p in g.processes[:3]) or "idle"
            if len(g.processes) > 3:
                procs += f" +{len(g.processes) - 3}"
            table.add_row(str(g.index), g.name, used, human_bytes(g.free_bytes) if g.free_bytes is not None else "—", procs)
        self._update_budget()
