"""Step 5: what to write and where (never over an existing directory)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Label, RadioButton, RadioSet, Static

from ...core.units import human_bytes
from ...core.writer import asset_files, default_output_dir
from .base import WizardScreen
from .budget import output_bytes


class OutputScreen(WizardScreen):
    STEP = "output"
    HELP = (
        "Dummy: config + tokenizer assets for `vllm serve --load-format dummy`. Real weights: the "
        "kept tensors copied byte-exact into new shards with a reproducible extraction script. "
        "The default path follows tools/batched_test/models/<model>-<mode>-<N>layers under the "
        "workspace and never names an existing directory. Ctrl+S writes (on the run screen)."
    )
    BINDINGS = [Binding("ctrl+s", "write", "Write", id="output.write")]

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Vertical(id="output-body"):
            yield Label("Mode")
            with RadioSet(id="mode"):
                yield RadioButton("Dummy (config + tokenizer, --load-format dummy)", value=True, id="mode-dummy")
                yield RadioButton("Real weights (byte-exact shards + extraction script)", id="mode-weights")
            yield Label("Output directory")
            yield Input(id="out-path")
            yield Static("", id="output-summary")
        yield from self.compose_footer()

    def refresh_view(self) -> None:
        st = self.app.state
        summary = self.query_one("#output-summary", Static)
        if st.plan is None:
            summary.update("Choose layers first (step 3).")
            return
        path_input = self.query_one("#out-path", Input)
        if st.output_path is None or st.output_path.exists():
            st.output_path = default_output_dir(st.plan, st.workspace.resolve(), st.mode)
        if path_input.value != str(st.output_path):
            path_input.value = str(st.output_path)
        self._summarise()

    def _summarise(self) -> None:
        st = self.app.state
        plan = st.plan
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        t.add_row("layers", f"{plan.new_depth} text layer(s) {plan.kept.get('text')}" + (f", MTP {'kept' if plan.mtp_kept else 'dropped'}" if "mtp" in plan.inventory.submodels else ""))
        files = ["config.json (rewritten)", *[f for f in plan.new_documents if f != "config.json"]]
        assets = [f.path for f in asset_files(plan)]
        t.add_row("files", ", ".join(files + assets[:6]) + (f" +{len(assets) - 6}" if len(assets) > 6 else ""))
        if st.mode == "weights":
            from ...core.disk_budget import check_free_space

            t.add_row("weights", f"{len(plan.renames):,} tensors copied byte-exact, extract_weights.py, manifest.json")
            if plan.inventory.source.shards and not plan.errors:
                est = st.disk_estimate()
                ok, free, message = check_free_space(est, st.output_path or st.workspace)
                t.add_row("disk", Text(message, style="" if ok else "bold red"))
                t.add_row("", Text(f"{est.shards} shard(s): " + est.breakdown(), style="dim"))
            elif not plan.inventory.source.shards:
                t.add_row(Text("blocked", style="bold red"), Text("the source has no weights: only dummy mode applies", style="red"))
        else:
            t.add_row("weights", "none (dummy load allocates random parameters)")
            t.add_row("size", f"≈ {human_bytes(output_bytes(st))}")
        t.add_row("report", "README.md + mxtrim-plan.json in the output")
        if st.output_path is not None and st.output_path.exists():
            t.add_row(Text("path", style="bold red"), Text("exists: choose another (never overwritten)", style="red"))
        if plan.errors:
            t.add_row(Text("blocked", style="bold red"), Text("; ".join(i.message for i in plan.errors), style="red"))
        self.query_one("#output-summary", Static).update(t)

    @on(RadioSet.Changed, "#mode")
    def _mode(self, event: RadioSet.Changed) -> None:
        st = self.app.state
        st.mode = "weights" if event.pressed.id == "mode-weights" else "dummy"
        if st.plan is not None:
            st.output_path = default_output_dir(st.plan, st.workspace.resolve(), st.mode)
            self.query_one("#out-path", Input).value = str(st.output_path)
            self._summarise()

    @on(Input.Changed, "#out-path")
    def _path(self, event: Input.Changed) -> None:
        if event.value.strip():
            self.app.state.output_path = Path(event.value.strip()).expanduser()
            if self.app.state.plan is not None:
                self._summarise()

    def action_write(self) -> None:
        self.app.start_run()
