"""Step 2: the model as a user thinks of it — layers, kinds, groups, parts, bytes."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from ...core.units import index_ranges, shown_bytes
from ...render import group_style, layer_strip
from .base import WizardScreen, focus_now


def strip_text(inv, width: int = 64) -> Text:
    """Every submodel's layer strip under its name."""
    text = Text()
    for sm in inv.submodels.values():
        if not sm.layers:
            continue
        text.append(f"{sm.name:>6} ", style="bold")
        text.append(layer_strip(inv, sm.name, width, indent=" " * 7))
        text.append("\n")
    text.rstrip()
    return text


class InventoryScreen(WizardScreen):
    STEP = "inventory"
    HELP = (
        "Every layer with the kind the runtime builds (attention · MLP), special modules, weight "
        "dtypes, tensor count and exact bytes. The strip shows one symbol per layer (its group). "
        "`/` goes to the filter: type to show matching layers (e.g. 'moe', 'sliding', 'vision'); "
        "Enter or Escape leaves it for the table (digits type into the filter while it has the "
        "focus). The pane below lists the highlighted layer's tensors with shapes and dtypes."
    )
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", id="inventory.filter"),
        Binding("ctrl+g", "show_tab('groups')", "Groups", id="inventory.groups", priority=True),
        Binding("ctrl+y", "show_tab('layers')", "Layers", id="inventory.layers", priority=True),
        Binding("escape", "leave_filter", "Leave the filter", show=False, id="inventory.leave_filter"),
    ]

    HOME = "#layer-table"

    def __init__(self) -> None:
        super().__init__()
        self._shown_for = None

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Vertical(id="inventory-body"):
            yield Static("Load a source first (step 1).", id="strip")
            with TabbedContent(initial="layers", id="inventory-tabs"):
                with TabPane("Layers", id="layers"):
                    yield Input(placeholder="filter: kind, submodel, dtype…", id="filter")
                    yield DataTable(id="layer-table", cursor_type="row", zebra_stripes=True)
                    yield Static("", id="layer-detail")
                with TabPane("Groups", id="groups"):
                    yield DataTable(id="group-table", cursor_type="row")
                with TabPane("Parts & heads", id="parts"):
                    yield DataTable(id="part-table", cursor_type="row")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        t = self.query_one("#layer-table", DataTable)
        # numbers and dtypes first: at 80 columns the free text on the right is what gets cut
        t.add_columns("", "sub", "#", "bytes", "tensors", "weights", "attention", "mlp", "special")
        g = self.query_one("#group-table", DataTable)
        g.add_columns("", "sub", "n", "bytes", "layers", "kind", "special")
        p = self.query_one("#part-table", DataTable)
        p.add_columns("submodel", "part", "tensors", "bytes")

    def refresh_view(self) -> None:
        inv = self.app.state.inventory
        if inv is not None and not self.query_one("#filter", Input).has_focus:
            focus_now(self.query_one("#layer-table", DataTable))
        if inv is None or inv is self._shown_for:
            return
        self._shown_for = inv
        self.query_one("#strip", Static).update(strip_text(inv, width=max(16, self.size.width - 12)))
        self._fill_layers("")
        groups = self.query_one("#group-table", DataTable)
        groups.clear()
        for grp in inv.groups:
            k = grp.kind
            mlp = k.mlp_label
            groups.add_row(
                Text(grp.symbol, style=f"bold {group_style(grp.id)}"),
                grp.submodel,
                Text(str(len(grp.layers)), justify="right"),
                Text(shown_bytes(grp.nbytes, grp.bytes_known), justify="right"),
                index_ranges(grp.layers),
                f"{k.attention} · {mlp}",
                ", ".join(k.special) or "—",
            )
        parts = self.query_one("#part-table", DataTable)
        parts.clear()
        for part in inv.shared:
            parts.add_row("shared", part.label, str(len(part.tensors)), shown_bytes(part.nbytes, part.bytes_known))
        for sm in inv.submodels.values():
            for part in sm.parts:
                parts.add_row(sm.name, part.label, str(len(part.tensors)), shown_bytes(part.nbytes, part.bytes_known))
            if sm.name == "mtp":
                for layer in sm.layers:
                    parts.add_row("mtp", f"head {layer.index} ({layer.name})", str(len(layer.tensors)), shown_bytes(layer.nbytes, layer.bytes_known))
        if inv.unassigned:
            parts.add_row("—", Text("unassigned", style="yellow"), str(len(inv.unassigned)), "")

    def _fill_layers(self, needle: str) -> None:
        inv = self.app.state.inventory
        table = self.query_one("#layer-table", DataTable)
        table.clear()
        needle = needle.strip().lower()
        for sm in inv.submodels.values():
            for layer in sm.layers:
                k = layer.kind
                mlp = k.mlp_label
                row = (sm.name, str(layer.index), k.attention, mlp, ", ".join(k.special), "/".join(k.weight_dtypes))
                if needle and not any(needle in str(c).lower() for c in row):
                    continue
                g = inv.groups[layer.group]
                table.add_row(
                    Text(g.symbol, style=f"bold {group_style(g.id)}"),
                    sm.name,
                    Text(str(layer.index), justify="right"),
                    Text(shown_bytes(layer.nbytes, layer.bytes_known), justify="right"),
                    Text(str(len(layer.tensors)), justify="right"),
                    row[5] or "—",
                    k.attention,
                    mlp,
                    row[4] or "—",
                    key=f"{sm.name}:{layer.index}",
                )
        self._show_detail()

    @on(Input.Changed, "#filter")
    def _filter(self, event: Input.Changed) -> None:
        if self.app.state.inventory is not None:
            self._fill_layers(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.action_leave_filter()

    def action_leave_filter(self) -> None:
        """Back to the table, the filter kept: the digits jump between steps again."""
        if self.query_one(TabbedContent).active == "layers":
            focus_now(self.query_one("#layer-table", DataTable))

    @on(DataTable.RowHighlighted, "#layer-table")
    def _highlight(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.row_key.value if event.row_key else None)

    def _show_detail(self, key: str | None = None) -> None:
        inv = self.app.state.inventory
        detail = self.query_one("#layer-detail", Static)
        if inv is None:
            return
        table = self.query_one("#layer-table", DataTable)
        if key is None and table.row_count:
            key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        if not key:
            detail.update("")
            return
        sub, idx = key.split(":")
        layer = next(l for l in inv.submodels[sub].layers if l.index == int(idx))
        src = inv.source
        text = Text()
        text.append(f"{layer.name}: {len(layer.tensors)} tensors, {shown_bytes(layer.nbytes, layer.bytes_known)}", style="bold")
        if layer.absent_tensors:
            text.append(f"  {layer.absent_tensors} in shards not on disk", style="yellow")
        if layer.quant_ignored:
            text.append(f"  quantization-ignored: {', '.join(layer.quant_ignored)}", style="dim")
        if layer.notes:
            text.append("\n" + "\n".join("⚠ " + n for n in layer.notes), style="yellow")
        shown = 0
        for name in layer.tensors:
            if shown >= 40:
                text.append(f"\n… {len(layer.tensors) - shown} more")
                break
            info = src.tensor(name)
            shape = list(info.shape) if src.is_present(name) else ""
            text.append(f"\n  {name[len(layer.name) + 1:]:<48} {info.dtype:<8} {shape}")
            shown += 1
        detail.update(text)

    def action_focus_filter(self) -> None:
        self.query_one(TabbedContent).active = "layers"
        focus_now(self.query_one("#filter", Input))

    def action_show_tab(self, tab: str) -> None:
        # the focus goes with the tab: a focused widget left in the hidden pane would pull the
        # tabs back to it
        self.query_one(TabbedContent).active = tab
        table = {"layers": "#layer-table", "groups": "#group-table", "parts": "#part-table"}[tab]
        focus_now(self.query_one(table, DataTable))
