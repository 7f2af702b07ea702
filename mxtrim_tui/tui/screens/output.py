"""Step 5: what to write and where (never over an existing directory)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, RadioButton, RadioSet, Static

from ...core.plan.needed_shards import missing_shards
from ...core.units import human_bytes
from ...core.plan.layout import asset_files
from .base import TailInput, WizardScreen, focus_now

WEIGHTS_LABEL = "[w] Real weights (byte-exact shards + extraction script)"
DUMMY_LABEL = "[d] Dummy (config + tokenizer, --load-format dummy)"


class OutputScreen(WizardScreen):
    STEP = "output"
    HELP = (
        "Dummy: config + tokenizer assets for `vllm serve --load-format dummy`. Real weights: the "
        "kept tensors copied byte-exact into new shards with a reproducible extraction script; "
        "they read every source shard holding a kept tensor, so from a partial or index-only "
        "download they stay unavailable until the missing shards named here are fetched. "
        "Type any output directory (relative paths are taken from the workspace); what you type is "
        "kept until you change it. Left empty, the default "
        "tools/batched_test/models/<model>-<mode>-<N>layers under the workspace follows the layers "
        "and mode you choose, and never names an existing directory. d chooses dummy, w real weights (outside the path box) "
        "(the chosen mode is shown in bold with ●). Ctrl+L goes to the path box; spaces around what you type are "
        "dropped (and said so). The location is "
        "checked as you type (exists, inside the source, writable, free space). Ctrl+S writes.\n\n"
        "batched_test model YAML (optional, relative paths from the workspace): the write appends the "
        "output's harness entry to it (tools/batched_test/launch.py --model-config FILE): model_path "
        "as the harness reads it, from the tools/batched_test folder launch.py is started in (the "
        "YAML's, else the output's; absolute for an output outside it), the serve settings, "
        "extra_args (null for switches), infer_type, "
        "tags, extra_env. The file is created if absent; its other entries are never rewritten; a file "
        "that is not a YAML list of entries, or already has an entry of the output's name, is refused "
        "here, before anything is written. Empty: no entry."
    )
    BINDINGS = [
        Binding("ctrl+s", "write", "Write", id="output.write"),
        Binding("ctrl+l", "focus_path", "Path", id="output.focus_path"),
        # shown in the mode labels themselves: the footer has no room at 80 columns
        Binding("d", "mode('dummy')", "Dummy mode", id="output.dummy", show=False),
        Binding("w", "mode('weights')", "Real weights mode", id="output.weights", show=False),
    ]
    AUTO_FOCUS = HOME = "#mode"  # Tab goes on to the path box; the body scrolls (shift+Tab) at 80x24

    def __init__(self) -> None:
        super().__init__()
        self._default_shown: str | None = None

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with VerticalScroll(id="output-body"):
            with RadioSet(id="mode"):  # titled "Mode" in its border: the step fits 80x24 unscrolled
                yield RadioButton(Text(DUMMY_LABEL), value=True, id="mode-dummy")
                yield RadioButton(Text(WEIGHTS_LABEL), id="mode-weights")
            yield Label("Output directory")
            yield TailInput(id="out-path")
            yield Static("", id="output-summary")
            with Horizontal(id="batched-test-row"):  # a box with a border and focus style, as the path box
                yield Label("batched_test YAML ")
                yield Input(placeholder="model list to append the harness entry to (empty: none)", id="batched-test")
            yield Static("", id="batched-test-summary")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.query_one("#mode", RadioSet).border_title = "Mode"
        # the wizard's state follows a box the moment it changes (a step key or Ctrl+S typed
        # right after the path meets it), the summaries when its Changed message arrives
        self.watch(self.query_one("#out-path", Input), "value", self._path_typed, init=False)
        self.watch(self.query_one("#batched-test", Input), "value", self._batched_test_typed, init=False)

    def refresh_view(self) -> None:
        st = self.app.state
        summary = self.query_one("#output-summary", Static)
        if st.plan is None:
            summary.update("Choose layers first (step 3).")
            return
        chosen = self.query_one(f"#mode-{st.mode}", RadioButton)
        if not chosen.value:  # a mode chosen elsewhere (an output's plan loaded from the workspace)
            chosen.value = True
        self._show_path()
        self._summarise()

    def _summarise_batched_test(self) -> None:
        """What the write will append to the model YAML, or why it cannot (checked as typed)."""
        st = self.app.state
        shown = self.query_one("#batched-test-summary", Static)
        config, out = st.batched_test_config, st.output_path
        if config is None or out is None or st.plan is None:
            shown.update("")
            return
        problem = st.batched_test_problem()
        if problem:
            shown.update(Text(f"✗ {problem}", style="bold red"))
            return
        from ...core.write.batched_test_entry import model_path_for

        entry = (repr(out.name), "bold green")
        said = ("appends the entry ", entry, f" to {config} ") if config.exists() else (f"creates {config} with the entry ", entry, " ")
        model_path = model_path_for(out, config)
        shown.update(Text.assemble(*said, f"(model_path {model_path.path}, {model_path.said.removeprefix('model_path is ')})"))

    def _batched_test_typed(self, value: str) -> None:
        self.app.state.batched_test_text = value.strip() or None

    @on(Input.Changed, "#batched-test")
    def _batched_test(self, event: Input.Changed) -> None:
        self._summarise_batched_test()

    def _show_path(self) -> None:
        """The box shows what the user typed, or else the current default (kept up to date)."""
        st = self.app.state
        path_input = self.query_one("#out-path", Input)
        if st.output_text is not None:
            wanted = st.output_text
        else:
            wanted = self._default_shown = str(st.output_path)
        if path_input.value != wanted:
            path_input.value = wanted

    def _summarise(self) -> None:
        st = self.app.state
        plan = st.plan
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column(overflow="fold")  # paths and reasons wrap, never cut
        problem = st.location_problem()
        if problem:
            t.add_row(Text("writes to", style="bold red"), Text(f"✗ {problem}", style="bold red"))
        else:
            t.add_row("writes to", Text(str(st.output_path), style="bold green"))
        if getattr(self, "_stripped", False):
            t.add_row("", Text("spaces around the path you typed are not part of it", style="yellow"))
        t.add_row("layers", f"{plan.new_depth} text layer(s) {plan.kept.get('text')}" + (f", MTP {'kept' if plan.mtp_kept else 'dropped'}" if "mtp" in plan.inventory.submodels else ""))
        files = ["config.json (rewritten)", *[f for f in plan.new_documents if f != "config.json"]]
        assets = [f.path for f in asset_files(plan)]
        t.add_row("files", ", ".join(files + assets[:6]) + (f" +{len(assets) - 6}" if len(assets) > 6 else ""))
        blocker = st.weights_blocker()
        self._offer_weights(blocker)
        if st.mode == "weights":
            from ...core.plan.disk_budget import check_free_space

            t.add_row("weights", f"{len(plan.renames):,} tensors copied byte-exact, extract_weights.py, manifest.json")
            if not blocker and not plan.errors:
                est = st.disk_estimate()
                ok, free, message = check_free_space(est, st.output_path)
                t.add_row("disk", Text(message, style="" if ok else "bold red"))
                t.add_row("", Text(f"{est.shards} shard(s): " + est.breakdown(), style="dim"))
        else:
            t.add_row("weights", "none (dummy load allocates random parameters)")
            t.add_row("size", f"{human_bytes(st.output_bytes())} (README.md and mxtrim-plan.json included)")
        if blocker:  # chosen, the write is blocked; else why it is not offered
            if st.mode == "weights":
                t.add_row(Text("blocked", style="bold red"), Text(blocker, style="red"))
            else:
                t.add_row("", Text(blocker, style="yellow"))
            missing = missing_shards(st.needed_shards())
            if any(name not in blocker for name in missing):  # the reason names only the first ones
                t.add_row("fetch", ", ".join(missing))
        t.add_row("report", "README.md + mxtrim-plan.json in the output")
        if st.budget_chosen:
            b = st.budget_inputs
            t.add_row("serve", f"TP={b.tp}" + (f" PP={b.pp}" if b.pp != 1 else "") + f", context {b.max_model_len}, {b.max_num_seqs} seq(s), utilisation {b.gpu_memory_utilization:g} (from step 4)")
        if st.budget_errors:
            t.add_row(Text("blocked", style="bold red"), Text("budget (step 4): " + "; ".join(st.budget_errors.values()), style="red"))
        if plan.errors:
            t.add_row(Text("blocked", style="bold red"), Text("; ".join(i.message for i in plan.errors), style="red"))
        self.query_one("#output-summary", Static).update(t)
        self._summarise_batched_test()  # the entry's name follows the output directory

    def _offer_weights(self, blocker: str | None) -> None:
        """Real weights cannot be chosen while they are blocked (once chosen, the choice stays
        on screen, blocked, until the user picks dummy: never switched behind their back). The
        chosen mode reads differently from the other: bold, marked ●, "(chosen)"."""
        button = self.query_one("#mode-weights", RadioButton)
        button.disabled = bool(blocker) and self.app.state.mode != "weights"
        labels = {"dummy": DUMMY_LABEL, "weights": "[w] Real weights — unavailable, see below" if blocker else WEIGHTS_LABEL}
        for mode, label in labels.items():
            chosen = self.app.state.mode == mode
            self.query_one(f"#mode-{mode}", RadioButton).label = Text(
                f"{label}" + ("  ● chosen" if chosen else ""), style="bold" if chosen else "dim")

    def action_mode(self, mode: str) -> None:
        button = self.query_one(f"#mode-{mode}", RadioButton)
        if button.disabled:
            self.notify(self.app.state.weights_blocker() or "not available", severity="warning")
            return
        # the state now: a Ctrl+S in the same burst of keys writes this mode (the radio's own
        # Changed message, which refreshes the step, comes after it)
        self.app.state.mode = mode
        button.value = True

    @on(RadioSet.Changed, "#mode")
    def _mode(self, event: RadioSet.Changed) -> None:
        st = self.app.state
        st.mode = "weights" if event.pressed.id == "mode-weights" else "dummy"
        if st.plan is not None:
            self._show_path()  # only the default name changes with the mode
            self._summarise()

    def _path_typed(self, value: str) -> None:
        st = self.app.state
        if value != value.strip() and value.strip():
            # " x" would name a directory called " x": what is meant is "x"
            self._stripped = True
            value = value.strip()
        else:
            self._stripped = False
        if value == self._default_shown or not value.strip():
            st.output_text = None  # the default (shown by the screen, or typed back), or nothing
        else:
            self._default_shown = None
            st.output_text = value

    @on(Input.Changed, "#out-path")
    def _path(self, event: Input.Changed) -> None:
        if self.app.state.plan is not None:
            self._summarise()

    def action_focus_path(self) -> None:
        focus_now(self.query_one("#out-path", Input))

    def action_write(self) -> None:
        self.app.start_run()
