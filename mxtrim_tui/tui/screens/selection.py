"""Step 3: choose layers; the plan (warnings, coverage, mapping, config diff) follows live."""

from __future__ import annotations


from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from ...core.plan.config_edit import short_value
from ...core.plan.build import SelectionError, build_plan, parse_keep_spec
from ...core.plan.needed_shards import missing_shards, needed_summary
from ...core.units import human_bytes, index_ranges, shown_bytes
from ...render import group_style
from ..wording import in_wizard_terms
from .base import WizardScreen, focus_now

TABS = ("issues", "coverage", "mapping", "diff", "shards")


def spec_example(inv) -> str:
    """A spec the loaded model takes, for the spec box's placeholder: the first text layer and
    the last two ("0,6-7" of 8 layers, "0,1" of 2, "0" of 1)."""
    text = inv.submodels.get("text")
    indices = sorted(layer.index for layer in text.layers) if text is not None else []
    if len(indices) < 3:
        return ",".join(map(str, indices)) or "0"
    last = f"{indices[-2]}-{indices[-1]}" if indices[-1] == indices[-2] + 1 else f"{indices[-2]},{indices[-1]}"
    return f"{indices[0]},{last}"


class SelectionScreen(WizardScreen):
    STEP = "selection"
    HELP = (
        "Space toggles the highlighted layer; `a` returns to the automatic minimal set (every "
        "distinct layer type, dependencies satisfied); `m` keeps or drops the MTP / draft heads; "
        "`e` edits the kept set as a spec (`0,6-7`, `vision=0,26`; Enter applies, Escape leaves the "
        "box). Warnings and blocking errors, the coverage table, the old→new mapping and the config "
        "diff follow every change: `t` shows the next tab (Issues, Coverage, Mapping, Config diff, "
        "Shards), Ctrl+G the Issues."
    )
    BINDINGS = [
        Binding("space", "toggle", "Keep", id="selection.toggle"),  # keep or drop the highlighted layer
        Binding("a", "auto", "Auto", id="selection.auto"),
        Binding("m", "toggle_mtp", "MTP", id="selection.mtp"),
        Binding("e", "edit_spec", "Spec", id="selection.edit"),
        Binding("t", "next_tab", "Tab", id="selection.tabs"),  # the next tab below (80 columns: one word)
        Binding("ctrl+g", "show_tab('issues')", "Issues", show=False, id="selection.issues", priority=True),
        Binding("escape", "leave_spec", "Leave the spec box", show=False, id="selection.leave_spec"),
    ]

    HOME = "#keep-table"

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Vertical(id="selection-body"):
            with Horizontal(id="selection-top"):
                yield Static("", id="selection-summary")
                yield Input(placeholder="spec 0,6-7 (Enter applies)", id="spec")
            yield Static("", id="needed-line")
            yield DataTable(id="keep-table", cursor_type="row", zebra_stripes=True)
            with TabbedContent(initial="issues", id="selection-tabs"):
                with TabPane("Issues", id="issues"):
                    yield Static("", id="issues-view")
                with TabPane("Coverage", id="coverage"):
                    yield Static("", id="coverage-view")
                with TabPane("Mapping", id="mapping"):
                    yield Static("", id="mapping-view")
                with TabPane("Config diff", id="diff"):
                    yield Static("", id="diff-view")
                with TabPane("Shards", id="shards"):
                    yield Static("", id="shards-view")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.query_one("#keep-table", DataTable).add_columns("keep", "", "sub", "#", "bytes", "kind")

    def refresh_view(self) -> None:
        st = self.app.state
        if st.inventory is None:
            self.query_one("#selection-summary", Static).update("Load a source first (step 1).")
            return
        if st.plan is None or st.plan.inventory is not st.inventory:
            self.replan()
        else:
            self.show_plan(st.plan)
        focus_now(self.query_one("#keep-table", DataTable))

    # --- plan in a worker: never block the UI ------------------------------------------
    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def replan(self) -> None:
        st = self.app.state
        plan = build_plan(st.inventory, st.selection())
        self.app.call_from_thread(self._planned, plan)

    def _planned(self, plan) -> None:
        self.app.state.plan = plan
        self.show_plan(plan)
        shown = self.app.screen
        if shown is not self and isinstance(shown, WizardScreen) and shown.id in ("budget", "output") and shown.is_mounted:
            shown.refresh_view()  # left before the plan was made (a step key right after Enter): its figures follow
        if not plan.errors:
            self.app.check_plan(plan)

    def show_plan(self, plan) -> None:
        inv = plan.inventory
        self.query_one("#spec", Input).placeholder = f"spec {spec_example(inv)} (Enter applies)"
        table = self.query_one("#keep-table", DataTable)
        row = table.cursor_row
        table.clear()
        for sm in inv.submodels.values():
            for layer in sm.layers:
                on_ = layer.index in (plan.kept.get(sm.name, ())) if sm.name != "mtp" else plan.mtp_kept
                g = inv.groups[layer.group]
                k = layer.kind
                mlp = k.mlp_label
                table.add_row(
                    Text("[x]" if on_ else "[ ]", style="bold green" if on_ else "dim"),
                    Text(g.symbol, style=f"bold {group_style(g.id)}"),
                    sm.name,
                    Text(str(layer.index), justify="right"),
                    Text(shown_bytes(layer.nbytes, layer.bytes_known), justify="right"),
                    f"{k.attention} · {mlp}",
                    key=f"{sm.name}:{layer.index}",
                )
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))
        auto = " (auto)" if plan.auto.get("text") else ""
        errors, warnings = self._show_issues(plan)  # the summary counts what the Issues tab lists
        status = Text()
        status.append(f"{plan.new_depth} text layer(s){auto}: {index_ranges(plan.kept.get('text', []))}")
        if "mtp" in inv.submodels:
            status.append(f" · MTP {'kept' if plan.mtp_kept else 'dropped'}")
        status.append(f" · {shown_bytes(plan.retained_bytes, plan.retained_bytes_known)}")
        check = plan.transformers_check
        if not plan.errors:
            if check is None:
                status.append(" · checking against transformers…", style="dim")
            else:
                style = {"exact": "green", "mismatch": "bold red"}.get(check.status, "dim")
                status.append(f" · transformers: {check.status}", style=style)
        if errors:
            status.append(f" · ✗{errors} blocking", style="bold red")
        if warnings:
            status.append(f" · ⚠{warnings}", style="yellow")  # one word: the count never wraps away
        self.query_one("#selection-summary", Static).update(status)
        spec = self.query_one("#spec", Input)
        if plan.auto.get("text") and not spec.has_focus:
            spec.value = ""  # the automatic set: a spec typed earlier no longer applies

        cov = Table(box=None, pad_edge=False, expand=True)
        for col in ("", "kind", "kept", "request"):
            cov.add_column(col, overflow="fold")
        for c in plan.coverage:
            kept_txt = ", ".join(f"{a}←{b}" for a, b in c.kept) if c.kept else Text("not covered", style="bold red")
            cov.add_row(Text(c.group, style="bold"), f"{c.submodel}: {c.kind}", kept_txt, c.request)
        self.query_one("#coverage-view", Static).update(cov)

        mp = Table(box=None, pad_edge=False, expand=True)
        for col in ("sub", "new ← orig", "stored as"):
            mp.add_column(col, overflow="fold")
        for m in plan.mappings:
            mp.add_row(m.submodel, f"{m.new} ← {m.old}", f"{m.new_name} ← {m.old_name}")
        self.query_one("#mapping-view", Static).update(mp)

        diff = Table(box=None, pad_edge=False, expand=True)
        for col in ("field", "before", "after"):
            diff.add_column(col, overflow="fold")
        for e in plan.edits:
            field = e.dotted if e.file == "config.json" else f"{e.file}:{e.dotted}"
            diff.add_row(field, Text(short_value(e.before), style="red"), Text(short_value(e.after), style="green"))
        self.query_one("#diff-view", Static).update(diff if plan.edits else "no field changes")
        self._show_needed(plan)

    def _show_issues(self, plan) -> tuple[int, int]:
        """The Issues tab: every blocking error and warning, each with its fix; returns how many
        of each it lists (what the summary counts)."""
        issues = Text()
        errors = warnings = 0
        for i in plan.issues:
            errors, warnings = errors + (i.level == "error"), warnings + (i.level != "error")
            message = in_wizard_terms(i.message)  # the wizard's keys, not the CLI's flags
            issues.append(("✗ " if i.level == "error" else "⚠ ") + message + "\n", style="bold red" if i.level == "error" else "yellow")
            if i.fix:
                issues.append(f"   fix: {in_wizard_terms(i.fix)}\n", style="dim")
        for c in plan.omitted:
            issues.append(f"⚠ not covered: {c.submodel} {c.kind} ({shown_bytes(c.bytes_dropped)})\n", style="yellow")
        warnings += len(plan.omitted)
        blocker = self.app.state.weights_blocker() if self.app.state.plan is plan else None
        if blocker:  # a partial download: real weights cannot be written for this selection
            issues.append(f"⚠ real weights: {blocker}\n", style="yellow")
            warnings += 1
        self.query_one("#issues-view", Static).update(issues if issues.plain else Text("✓ no warnings", style="green"))
        return errors, warnings

    def _show_needed(self, plan) -> None:
        """The source shards a real-weight trim of this selection reads (only for a source cut
        in shards): one line above the layers, every shard in the Shards tab."""
        src = plan.inventory.source
        line = self.query_one("#needed-line", Static)
        tabs = self.query_one("#selection-tabs", TabbedContent)
        line.display = src.index_file is not None or len(src.all_headers) > 1
        if not line.display:
            tabs.hide_tab("shards")
            return
        tabs.show_tab("shards")
        needed = self.app.state.needed_shards(plan)
        missing = missing_shards(needed)
        text = Text("real-weight trim " + needed_summary(needed, len(src.all_headers)))
        if missing:
            text.append(f" · missing: {', '.join(missing)}", style="yellow")
        line.update(text)
        table = Table(box=None, pad_edge=False)
        for col in ("", "shard", "kept tensors", "size"):
            table.add_column(col, overflow="fold")
        for s in needed:
            size = "unknown" if s.download_bytes is None else ("" if s.present else "≈ ") + human_bytes(s.download_bytes)
            table.add_row(
                Text("✓" if s.present else "✗", style="green" if s.present else "bold red"),
                s.file if s.present else Text(f"{s.file} (missing)", style="yellow"),
                Text(str(s.retained_tensors), justify="right"),
                size,
            )
        self.query_one("#shards-view", Static).update(table)

    # --- actions -------------------------------------------------------------------------
    def _current(self) -> tuple[str, int] | None:
        table = self.query_one("#keep-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        sub, idx = key.split(":")
        return sub, int(idx)

    def action_toggle(self) -> None:
        st = self.app.state
        cur = self._current()
        if cur is None or st.plan is None:
            return
        sub, idx = cur
        if sub == "mtp":
            self.action_toggle_mtp()
            return
        kept = set(st.plan.kept.get(sub, ()))
        kept ^= {idx}
        st.keep[sub] = tuple(sorted(kept))
        self.replan()

    def action_auto(self) -> None:
        self.app.state.keep = {}
        self.replan()

    def action_toggle_mtp(self) -> None:
        st = self.app.state
        if st.plan is None or "mtp" not in st.plan.inventory.submodels:
            self.notify("this model has no MTP / draft heads", severity="warning")
            return
        st.mtp = not st.plan.mtp_kept
        self.replan()

    def action_edit_spec(self) -> None:
        spec = self.query_one("#spec", Input)
        plan = self.app.state.plan
        if plan is not None and not spec.value:
            spec.value = ",".join(map(str, plan.kept.get("text", [])))
        focus_now(spec)

    def action_next_tab(self) -> None:
        tabs = self.query_one("#selection-tabs", TabbedContent)
        shown = [t for t in TABS if tabs.get_tab(t).display]
        at = shown.index(tabs.active) if tabs.active in shown else -1
        self.action_show_tab(shown[(at + 1) % len(shown)])

    def action_leave_spec(self) -> None:
        focus_now(self.query_one("#keep-table", DataTable))

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#selection-tabs", TabbedContent).active = tab
        focus_now(self.query_one("#keep-table", DataTable))

    @on(Input.Submitted, "#spec")
    def _apply_spec(self, event: Input.Submitted) -> None:
        st = self.app.state
        try:
            for part in event.value.split():
                sub, idx = parse_keep_spec(part)
                st.keep[sub] = None if idx == "auto" else idx
        except SelectionError as exc:
            self.app.show_error("Keep spec", str(exc))
            return
        focus_now(self.query_one("#keep-table", DataTable))
        self.replan()
