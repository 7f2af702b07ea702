"""The workspace's reduced models on the source step, and the dialog that opens one.

What is listed is what `mxtrim examples` reads (``core.validate.examples``), scanned in a thread
worker by the source screen; the environment now is not probed here, so drift is not checked.
The dialog shows one example's plan, problems, last validation and launch scripts (their first
lines, never run) and answers with what the user chose: "use" (its source), "validate" or None.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

LIST_ROWS = 5  # models shown at once (the list scrolls beyond): room for the panes above at 80×24
COLUMNS = ("model", "mode", "layers", "source", "validated", "problems")
SOURCE_STYLE = {"missing": "red", "changed": "red", "unchanged": "green", "present": "green"}


def when(started: str | None) -> str:
    """The day a validation ran, from its ISO start time."""
    return (started or "")[:10]


def _verdict_word(validation: dict) -> tuple[str, str]:
    return {True: ("ok", "green"), False: ("failed", "bold red")}.get(validation.get("ok"), ("unknown", "yellow"))


def verdict(example) -> Text:
    """The last validation as a word and its day: "ok 2026-11-20", "failed …", "never"."""
    v = example.validation
    if v is None:
        return Text("never", style="dim")
    word, style = _verdict_word(v)
    return Text(f"{word} {when(v.get('started'))}".strip(), style=style)


def row_cells(example) -> list:
    """One example as the list's cells (the name is added by the caller, cut to fit)."""
    state = example.source.get("state", "")
    mode = example.mode if example.made_by == "mxtrim" else "hand"
    problems = len(example.problems)
    return [
        mode,
        Text("—" if example.layers is None else str(example.layers), justify="right"),
        Text("—" if state == "not recorded" else state, style=SOURCE_STYLE.get(state, "dim")),
        verdict(example),
        Text(str(problems) if problems else "—", style="yellow" if problems else "dim", justify="right"),
    ]


def cut_middle(name: str, width: int) -> str:
    """``name`` in ``width`` columns, cut in the middle: an output's name ends with what tells
    it from its siblings (``-dummy-2layers``)."""
    if len(name) <= width:
        return name
    width = max(width, 9)
    head = (width - 1) // 2
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def _width(cell) -> int:
    return len(cell.plain if isinstance(cell, Text) else str(cell))


def fill_table(table: DataTable, examples: list, width: int) -> None:
    """The rows of ``examples`` in ``table``, the model column given what ``width`` leaves."""
    rows = [row_cells(e) for e in examples]
    widths = [max([len(name)] + [_width(r[i]) for r in rows]) for i, name in enumerate(COLUMNS[1:])]
    padding = 2 * table.cell_padding * len(COLUMNS)
    scroll_bar = 2 if len(examples) > LIST_ROWS else 0
    longest = max([len(COLUMNS[0])] + [len(e.name) for e in examples])
    name_width = min(longest, max(12, width - sum(widths) - padding - scroll_bar))
    table.clear(columns=True)
    table.add_column(COLUMNS[0], width=name_width, key="model")
    for name, w in zip(COLUMNS[1:], widths):
        table.add_column(name, width=w, key=name)
    for e, cells in zip(examples, rows):
        table.add_row(Text(cut_middle(e.name, name_width), style="bold"), *cells, key=e.path)
    # an explicit height: an automatic one is measured before the rows are in
    table.styles.height = 1 + min(len(examples), LIST_ROWS)


def output_plan(example) -> dict | None:
    """The plan an mxtrim output was written from (its mxtrim-plan.json, as `mxtrim validate`
    reads it), or None."""
    if example.made_by != "mxtrim":
        return None
    from ...core.errors import InputError
    from ...core.validate.run import read_output

    try:
        return read_output(Path(example.path))
    except InputError:
        return None


def had_mtp(plan: dict | None) -> bool:
    """The output's source had MTP / draft heads (kept, or dropped: its coverage lists them)."""
    if not plan:
        return False
    coverage = plan.get("coverage") if isinstance(plan.get("coverage"), list) else []
    return plan.get("mtp_kept") is True or any(isinstance(c, dict) and c.get("submodel") == "mtp" for c in coverage)


def plan_selection(plan: dict | None) -> tuple[dict, bool | None, str | None]:
    """(layers kept per submodel, MTP kept or not, mode) an output was written with: what `u`
    loads with its source (a submodel chosen automatically stays automatic)."""
    if not plan:
        return {}, None, None
    kept = plan.get("kept") if isinstance(plan.get("kept"), dict) else {}
    auto = plan.get("auto") if isinstance(plan.get("auto"), dict) else {}
    keep = {sub: tuple(idx) for sub, idx in kept.items()
            if isinstance(idx, list) and idx and all(type(i) is int for i in idx) and not auto.get(sub)}
    mtp = plan.get("mtp_kept") if had_mtp(plan) and isinstance(plan.get("mtp_kept"), bool) else None
    mode = plan.get("mode") if plan.get("mode") in ("dummy", "weights") else None
    return keep, mtp, mode


def failed_checks(example) -> list[str]:
    """The last validation's failed checks, each with the class of its failure."""
    from ...core.validate.examples import last_run

    run = last_run(Path(example.path)) or {}
    found = []
    for row in run.get("rows") or []:
        if isinstance(row, dict) and row.get("status") == "failed":
            verdict = row.get("verdict") if isinstance(row.get("verdict"), dict) else {}
            found.append(f"{row.get('check')}" + (f" — {verdict['class']}" if verdict.get("class") else ""))
    return found


def _kept_line(details: dict, layers: int | None, mtp_known: bool) -> str:
    kept = ", ".join(f"{sub} {', '.join(map(str, idx)) or 'none'}" for sub, idx in details.get("kept", {}).items())
    # a model that never had MTP heads did not drop any
    mtp = {True: " · MTP kept", False: " · MTP dropped"}.get(details.get("mtp_kept"), "") if mtp_known else ""
    count = "" if layers is None else f"{layers} layer{'s' * (layers != 1)}: "
    return count + (kept or "not recorded") + mtp + " (original numbers)"


def _validation_line(example) -> Text:
    v = example.validation
    if v is None:
        return Text("never validated", style="dim")
    word, style = _verdict_word(v)
    line = Text(word, style=style)
    if v.get("ok") is False:  # which check failed, and why (the class of the failure)
        failed = failed_checks(example)
        if failed:
            line.append(": " + "; ".join(failed), style=style)
    line.append(f", started {v.get('started') or '?'}")
    versions = ", ".join(f"{k} {val}" for k, val in (v.get("versions") or {}).items() if val)
    if versions:
        line.append(f"\nwith {versions}", style="dim")
    return line


def _scripts(example, details: dict) -> Text:
    """A hand-made example's launch scripts with their first lines; an output's by name."""
    shown = Text()
    for name, lines in (details.get("scripts") or {}).items():
        shown.append(name, style="bold")
        if example.made_by == "hand":
            shown.append("".join(f"\n  {line}" for line in lines), style="dim")
        shown.append("\n")
    shown.rstrip()
    shown.append(" (shown, never run)", style="dim")
    return shown


def details_table(example, details: dict) -> Table:
    """The dialog's body: plan, source, last validation, problems, a tokenizer that is not
    usable, the environment its launch scripts set, the results its README records (history),
    launch scripts."""
    t = Table.grid(padding=(0, 1))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row("folder", Text(example.path))
    if example.made_by == "mxtrim":
        t.add_row("made by", Text(f"mxtrim, from {details.get('model') or 'a model'}: {example.mode} output"))
        t.add_row("kept", Text(_kept_line(details, example.layers, had_mtp(details.get("output_plan")))))
    else:
        t.add_row("made by", "hand (no mxtrim plan)")
        t.add_row("layers", "—" if example.layers is None else f"{example.layers} (config.json)")
    src = example.source
    t.add_row("source", Text(f"{src.get('path') or '—'}\n{src.get('state')}: {src.get('detail')}",
                             style=SOURCE_STYLE.get(src.get("state"), "")))
    t.add_row("validated", _validation_line(example))
    t.add_row("drift", Text("not checked here (mxtrim examples compares with a vLLM environment)", style="dim"))
    problems = Text("\n".join("⚠ " + p for p in example.problems), style="yellow") if example.problems else Text("none", style="dim")
    t.add_row(f"problems ({len(example.problems)})" if example.problems else "problems", problems)
    tok = example.tokenizer or {}
    if tok.get("usable") is False and tok.get("files"):
        t.add_row("tokenizer", Text(f"⚠ not usable: {tok.get('detail')}", style="yellow"))
    if example.made_by == "hand" and example.env:
        t.add_row("environment", Text("\n".join(f"{v['name']}={v['value']} ({v['file']})" for v in example.env), style="dim"))
    history = example.history
    if history:
        shown = Text(f"{history['status']} ({', '.join(history['sections'])}"
                     + (f"; {', '.join(history['dates'])}" if history["dates"] else "") + ")", style="cyan")
        shown.append("".join(f"\n  {r}" for r in history["results"]), style="dim")
        t.add_row("README results", shown)
    if details.get("scripts"):
        t.add_row("scripts", _scripts(example, details))
    return t


class ExampleDialog(ModalScreen["str | None"]):
    """One example of the workspace: what it is, and what can be done with it."""

    BINDINGS = [
        Binding("u", "answer('use')", "Load its source and plan", id="example.use"),
        Binding("v", "answer('validate')", "Re-validate", id="example.validate"),
        Binding("escape", "answer(None)", "Close", id="example.close"),
    ]

    def __init__(self, example, details: dict) -> None:
        super().__init__()
        self.example = example
        self.details = details
        self.can_use = bool(example.source.get("path")) and example.source.get("state") != "missing"
        self.can_validate = example.made_by == "mxtrim"

    def compose(self) -> ComposeResult:
        e = self.example
        with Vertical(id="example-box"):
            yield Static(Text(e.name, style="bold"), id="example-title")
            with VerticalScroll(id="example-body"):
                yield Static(details_table(e, self.details), id="example-details")
            with Horizontal(id="example-buttons"):
                yield Button("Load its plan (u)", id="example-use", variant="primary", disabled=not self.can_use)
                yield Button("Re-validate (v)", id="example-validate", disabled=not self.can_validate)
                yield Button("Close (Esc)", id="example-close")

    def on_mount(self) -> None:
        first = next(b for b in self.query(Button) if not b.disabled)
        first.focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_answer({"example-use": "use", "example-validate": "validate"}.get(event.button.id))

    def action_answer(self, choice: str | None) -> None:
        if choice == "use" and not self.can_use:
            self.notify("its source is not there (or not recorded): nothing to read", severity="warning")
            return
        if choice == "validate" and not self.can_validate:
            self.notify("only an mxtrim output can be validated (this one has no mxtrim-plan.json)", severity="warning")
            return
        self.dismiss(choice)
