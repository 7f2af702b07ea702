"""Step 1: choose a model directory; show what reading it found (nothing is executed)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import Suggester
from textual.widgets import DirectoryTree, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ...core.read.source import COMPLETE, FileKind
from ...core.units import human_bytes, shown_bytes
from ..settings import load_recent
from .base import WizardScreen


class PathSuggester(Suggester):
    """Completes the last path component from the file system (directories only)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        if not value:
            return None
        path = Path(os.path.expanduser(value))
        parent, stem = (path, "") if value.endswith("/") else (path.parent, path.name)
        try:
            names = sorted(e.name for e in os.scandir(parent) if e.is_dir() and not e.name.startswith("."))
        except OSError:
            return None
        for name in names:
            if name.startswith(stem) and name != stem:
                return value + name[len(stem):] + "/"
        return None


class PathInput(Input):
    """A path box where Tab (like →) accepts the completion shown; with nothing to complete,
    Tab moves on as everywhere else."""

    BINDINGS = [Binding("tab", "complete", "Complete", show=False)]

    def action_complete(self) -> None:
        if self.cursor_at_end and self._suggestion and self._suggestion != self.value:
            self.action_cursor_right()
        else:
            self.app.action_focus_next()


def recent_label(path: str) -> Text:
    """A recent source as one line: the model's name first, then where it lives (cut, not
    wrapped, when the pane is narrow)."""
    p = Path(path)
    text = Text(p.name or path, style="bold", no_wrap=True, overflow="ellipsis")
    text.append(f"  {p.parent}", style="dim")
    return text


class ModelTree(DirectoryTree):
    """Directories only, no hidden ones: models are directories."""

    def filter_paths(self, paths):
        return [p for p in paths if p.is_dir() and not p.name.startswith(".")]


def source_summary(inv) -> Table:
    src = inv.source
    t = Table.grid(padding=(0, 1))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    t.add_row("model", inv.model_name)
    t.add_row("architecture", f"{', '.join(src.architectures) or '—'} [dim]({inv.family.display})[/]")
    t.add_row(
        "submodels",
        ", ".join(f"{sm.name} {len(sm.layers)}" for sm in inv.submodels.values()) or "—",
    )
    listed, present = len(src.all_headers), len(src.shards)
    t.add_row("source", Text(src.state_detail, style="" if src.state == COMPLETE else "yellow"))
    if src.absent_shards:
        shards = (f"{inv.total_tensors:,} tensors listed, total {shown_bytes(inv.total_bytes)} per the index; "
                  f"{human_bytes(src.present_tensor_bytes)} on disk")
        index = f"lists {listed} shards, {present} present"
    elif present:
        shards = f"{present} readable, {inv.total_tensors:,} tensors, {shown_bytes(inv.total_bytes)}"
        index = "consistent with the shards" if src.index_file is not None else "not needed (one file)"
    else:
        shards, index = "none (config-only directory)", "—"
    t.add_row("shards", shards)
    t.add_row("index", index)
    t.add_row("quantization", inv.quantization.summary() if inv.quantization else "none")
    kinds: dict[str, int] = {}
    for f in src.files:
        kinds[f.kind.value] = kinds.get(f.kind.value, 0) + 1
    assets = ", ".join(
        f"{k} {n}" for k, n in kinds.items() if k not in (FileKind.WEIGHTS.value, FileKind.CONFIG.value, FileKind.INDEX.value)
    )
    t.add_row("assets", assets or "none")
    if src.custom_code_present:
        t.add_row(Text("custom code", style="bold red"), Text("present, listed only, NOT executed", style="red"))
    symlinks = sum(1 for f in src.files if f.symlink_target)
    if symlinks:
        t.add_row("symlinks", f"{symlinks} followed for reading")
    if inv.warnings:
        t.add_row("warnings", Text("\n".join("⚠ " + w for w in inv.warnings[:6]), style="yellow"))
    return t


class SourceScreen(WizardScreen):
    STEP = "source"
    HELP = (
        "Type a model directory path (Tab or → accepts the completion shown) and press Enter, "
        "or pick a directory in the tree, or a recent source. mxtrim reads config.json, every "
        "safetensors header and the index — never the weights, never code from the directory. "
        "Once a source is read, the focus leaves the path box so that the step keys work; "
        "Ctrl+L returns to it."
    )
    BINDINGS = [
        Binding("ctrl+l", "focus_path", "Path", id="source.focus_path"),
        Binding("ctrl+r", "focus_recent", "Recent", id="source.focus_recent"),
        Binding("ctrl+t", "focus_tree", "Tree", id="source.focus_tree"),
    ]

    def __init__(self, tree_root: Path | None = None) -> None:
        super().__init__()
        self.tree_root = tree_root or Path.cwd()

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Vertical(id="source-body"):
            yield Label("Model directory")
            yield PathInput(placeholder="/path/to/model  (Tab/→ completes, Enter reads)", id="path", suggester=PathSuggester())
            with Horizontal(id="source-panes"):
                with Vertical(id="source-left"):
                    yield Label("Recent", classes="pane-title")
                    yield OptionList(id="recent")
                    yield Label("Browse", classes="pane-title")
                    yield ModelTree(self.tree_root, id="tree")
                with VerticalScroll(id="source-right", can_focus=False):
                    yield Label("What was read", classes="pane-title")
                    yield Static("No source loaded yet.", id="summary")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self._show_recent()
        self.query_one("#path", Input).focus()

    def _show_recent(self) -> None:
        """The recent sources as remembered now (a source read in this session comes first)."""
        recent = self.query_one("#recent", OptionList)
        items = load_recent()
        if getattr(self, "_recent_shown", None) == items:
            return
        self._recent_shown = items
        recent.clear_options()
        recent.add_options([Option(recent_label(p), id=p) for p in items] or [Option("(none yet)", disabled=True)])

    def refresh_view(self) -> None:
        self._show_recent()
        st = self.app.state
        summary = self.query_one("#summary", Static)
        if st.inventory is not None:
            summary.update(source_summary(st.inventory))
            path = self.query_one("#path", Input)
            if not path.value:
                path.value = str(st.source_path)
            if path.has_focus:
                # a source is read: leave the text box, so that digits jump and ^n goes on
                self.query_one("#tree", ModelTree).focus()

    def show_loading(self, path: Path) -> None:
        if self.is_mounted:
            self.query_one("#summary", Static).update(Text(f"Reading {path} …", style="italic"))

    def show_failure(self, message: str) -> None:
        if self.is_mounted:
            self.query_one("#summary", Static).update(Text("✗ " + message, style="bold red"))

    @on(Input.Submitted, "#path")
    def _submit(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.app.load_source(Path(os.path.expanduser(event.value.strip())))

    @on(OptionList.OptionSelected, "#recent")
    def _recent(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.query_one("#path", Input).value = event.option.id
            self.app.load_source(Path(event.option.id))

    @on(DirectoryTree.DirectorySelected, "#tree")
    def _tree(self, event: DirectoryTree.DirectorySelected) -> None:
        self.query_one("#path", Input).value = str(event.path)
        if (event.path / "config.json").exists():
            self.app.load_source(event.path)

    def action_focus_path(self) -> None:
        self.query_one("#path", Input).focus()

    def action_focus_recent(self) -> None:
        self.query_one("#recent", OptionList).focus()

    def action_focus_tree(self) -> None:
        self.query_one("#tree", ModelTree).focus()
