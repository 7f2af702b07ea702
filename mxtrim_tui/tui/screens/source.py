"""Step 1: choose a model directory; show what reading it found (nothing is executed), and
the workspace's reduced models (read in a worker; opening one shows it and can read its source
or validate it)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import Suggester
from textual.widgets import DataTable, DirectoryTree, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ...core.read.source import COMPLETE, FileKind
from ...core.units import human_bytes, shown_bytes
from ..settings import load_recent
from .base import WizardScreen, focus_now
from .workspace import ExampleDialog, cut_middle, fill_table, output_plan, plan_selection


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
    if "://" in path:  # a remote repository: NAME, then where (hf://ORG/NAME@<commit>)
        text = Text(path.split("://", 1)[1].split("@")[0].rsplit("/", 1)[-1], style="bold", no_wrap=True, overflow="ellipsis")
        text.append(f"  {path}", style="dim")
        return text
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
    if src.origin:  # a remote repository: where it was read, pinned to its commit
        t.add_row("repository", Text(f"{src.origin} (read by range requests: headers and small files)"))
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
        "Ctrl+L returns to it.\n\n"
        "Below, the workspace's reduced models (tools/batched_test/models/ of the workspace, as "
        "`mxtrim examples` lists them): mode, layers kept, whether the source is still there, the "
        "last validation and the problems found. Ctrl+O goes to the list; Enter opens a model: its "
        "plan, problems, last validation and launch scripts (shown, never run), with `u` to read "
        "its source with the output's plan (its layers, MTP and mode; then on to the next step) and `v` to validate "
        "it again (the validate dialog, then the run step)."
    )
    BINDINGS = [
        Binding("ctrl+l", "focus_path", "Path", id="source.focus_path"),
        Binding("ctrl+r", "focus_recent", "Recent", id="source.focus_recent"),
        Binding("ctrl+t", "focus_tree", "Tree", id="source.focus_tree"),
        # shown in the list's title (the footer is full at 80 columns)
        Binding("ctrl+o", "focus_workspace", "Workspace", id="source.focus_workspace", show=False),
    ]

    HOME = "#tree"

    def __init__(self, tree_root: Path | None = None) -> None:
        super().__init__()
        self.tree_root = tree_root or Path.cwd()
        self.examples: dict = {}  # row key (the example's path) -> the example
        self._advance_to: Path | None = None  # a source read from the workspace list: go on once read
        self._workspace_scan: tuple | None = None  # (folder, examples, why none) last shown
        self._workspace_stamp: tuple | None = None  # the folder as it was when last scanned
        self._workspace_note = ""
        self._failure: Text | None = None  # the last read, when it failed

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
            with Vertical(id="workspace-pane"):
                yield Label("Workspace", classes="pane-title", id="workspace-title")
                yield DataTable(id="workspace", cursor_type="row", zebra_stripes=False)
                yield Static("", id="workspace-note")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self._show_recent()
        self.query_one("#workspace-title").display = False
        self.query_one("#workspace", DataTable).display = False
        self.query_one("#path", Input).focus()

    def leave_text_boxes(self) -> None:
        if self.app.state.inventory is not None:  # before a source is read, the path box is the step
            super().leave_text_boxes()

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
            shown = source_summary(st.inventory)
            # a later read that failed stays said above what is still loaded
            summary.update(Group(self._failure, shown) if self._failure is not None else shown)
            path = self.query_one("#path", Input)
            if not path.value:
                path.value = st.inventory.source.origin or str(st.source_path)
            if path.has_focus:
                # a source is read: leave the text box, so that digits jump and ^n goes on
                focus_now(self.query_one("#tree", ModelTree))
            if self._advance_to is not None and self._advance_to == st.source_path:
                self._advance_to = None
                self.app.action_next_step()

    def show_loading(self, path: Path) -> None:
        self._failure = None
        if self.is_mounted:
            self.query_one("#summary", Static).update(Text(f"Reading {path} …", style="italic"))

    def show_failure(self, message: str) -> None:
        self._advance_to = None
        self._failure = Text("✗ " + message, style="bold red")
        if self.is_mounted:
            self.query_one("#summary", Static).update(self._failure)

    @on(Input.Submitted, "#path")
    def _submit(self, event: Input.Submitted) -> None:
        self._read_typed(event.value)

    def _read_typed(self, value: str, chosen: tuple | None = None) -> Path | None:
        """What Enter in the path box does: read the directory typed (``~`` expanded); with
        ``chosen``, the layers, MTP and mode to plan it with."""
        if not value.strip():
            return None
        from ...core.read.remote import parse_remote

        if parse_remote(value):  # hf://ORG/NAME[@REVISION]: read by range requests
            self.app.load_source(value.strip(), chosen)
            return None
        path = Path(os.path.expanduser(value.strip()))
        self.app.load_source(path, chosen)
        return path

    @on(OptionList.OptionSelected, "#recent")
    def _recent(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.query_one("#path", Input).value = event.option.id
            self._read_typed(event.option.id)

    @on(DirectoryTree.DirectorySelected, "#tree")
    def _tree(self, event: DirectoryTree.DirectorySelected) -> None:
        self.query_one("#path", Input).value = str(event.path)
        if (event.path / "config.json").exists():
            self.app.load_source(event.path)

    def action_focus_path(self) -> None:
        focus_now(self.query_one("#path", Input))

    def action_focus_recent(self) -> None:
        focus_now(self.query_one("#recent", OptionList))

    def action_focus_tree(self) -> None:
        focus_now(self.query_one("#tree", ModelTree))

    def action_focus_workspace(self) -> None:
        table = self.query_one("#workspace", DataTable)
        if table.display:
            focus_now(table)
        else:
            self.notify(self._workspace_note or "the workspace is still being read", timeout=4)

    # --- the workspace's reduced models (thread worker) --------------------------------------
    @on(events.ScreenResume)
    def _rescan_workspace(self) -> None:
        """Each time the step is shown (a dialog closed over it too): read again only when the
        folder changed since (a write or a validation of this session landed in it)."""
        from ...core.validate.examples import workspace_folder

        self._scan_workspace(workspace_folder(None, Path(os.path.abspath(self.app.state.workspace))))

    @work(thread=True, exclusive=True, group="workspace", exit_on_error=False)
    def _scan_workspace(self, folder: Path) -> None:
        from ...core.validate.examples import folder_stamp, scan

        stamp = (folder, folder_stamp(folder))
        if stamp == self._workspace_stamp and self._workspace_scan is not None:
            return
        try:
            # the environment now is not probed (it starts the vLLM interpreter): no drift here
            found, why = scan(folder, None), ""
        except OSError as exc:
            found, why = [], f"cannot read {folder}: {exc.strerror or exc}"
        self._workspace_stamp = stamp
        self.app.call_from_thread(self._show_workspace, folder, found, why)

    @on(events.Resize)
    def _fit_workspace(self) -> None:
        """The list's columns and the lines above it fit the new width."""
        if self._workspace_scan is not None:
            self._show_workspace(*self._workspace_scan, force=True)

    def _show_workspace(self, folder: Path, found: list, why: str, force: bool = False) -> None:
        table = self.query_one("#workspace", DataTable)
        note = self.query_one("#workspace-note", Static)
        if not force and self._workspace_scan is not None and found == self._workspace_scan[1] and table.row_count == len(found):
            return  # unchanged: keep the cursor where it is
        self._workspace_scan = (folder, found, why)
        self.examples = {e.path: e for e in found}
        table.display = self.query_one("#workspace-title").display = bool(found)
        note.display = not found
        width = self.app.size.width - 2
        if not found:
            where = "no models in {}" if folder.is_dir() else "no workspace: looked in {}"
            looked = why or where.format(cut_middle(str(folder), width - len(where) + 2))
            self._workspace_note = why or where.format(folder)
            note.update(Text(looked, style="dim", no_wrap=True, overflow="ellipsis"))
            return
        title = f"Workspace (^o): {len(found)} model{'s' * (len(found) != 1)}, Enter opens one · {{}}"
        self.query_one("#workspace-title", Label).update(Text(title.format(cut_middle(str(folder), width - len(title) + 2))))
        row = table.cursor_row
        fill_table(table, found, width)
        table.move_cursor(row=min(row, len(found) - 1))

    @on(DataTable.RowSelected, "#workspace")
    def _open_example(self, event: DataTable.RowSelected) -> None:
        from ...core.validate.examples import example_details

        example = self.examples.get(event.row_key.value)
        if example is not None:  # its plan and scripts read now, for the one opened
            details = dict(example_details(example), output_plan=output_plan(example))
            self.app.push_screen(ExampleDialog(example, details), lambda choice: self._example_chosen(example, details, choice))

    def _example_chosen(self, example, details: dict, choice: str | None) -> None:
        if choice == "use":
            # what typing the path and Enter does, with the layers, MTP and mode the output was
            # written with (not the automatic set); once it is read, on to the next step
            path_box = self.query_one("#path", Input)
            path_box.value = example.source["path"]
            self._advance_to = self._read_typed(path_box.value, plan_selection(details.get("output_plan"))) or self._advance_to
        elif choice == "validate":
            self.app.validate_output(Path(example.path))
