"""The validate dialog (`v` on the run screen): which output, which vLLM, which checks.

The vLLM interpreter is found by the engine's one rule (``core.probe.vllm_python``); what the
user types here is kept (``settings.json``) and passed on as ``--python``. With no vLLM found,
Start is refused with that one line and nothing is started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Static

from ...core.errors import InputError
from ...core.user_settings import get_setting
from ...core.validate.run import read_output
from ...core.probe.vllm_python import SETTING, VllmNotFound, VllmPython, find_vllm_python, origin_words
from .base import MarkedCheckbox, TailInput


@dataclass
class ValidateRequest:
    output: Path
    python: str  # the interpreter found, passed as --python
    typed_python: str  # what the user typed (kept as the setting; blank removes it)
    serve: bool
    speculative: bool
    equivalence: bool
    graph: bool = False  # graph mode: served without --enforce-eager, a run of its own


def output_problem(text: str) -> tuple[dict | None, str]:
    """(the output's plan, "") or (None, why it cannot be validated): what `mxtrim validate`
    reads first (``read_output``)."""
    if not text.strip():
        return None, "type the output directory to validate"
    try:
        return read_output(Path(text.strip()).expanduser()), ""
    except InputError as exc:
        return None, str(exc)


class ValidateDialog(ModalScreen["ValidateRequest | None"]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="validate.cancel"),
        Binding("ctrl+s", "start", "Start", id="validate.start"),
    ]

    def __init__(self, output: Path | None) -> None:
        super().__init__()
        self.initial_output = str(output) if output else ""
        self.found: VllmPython | None = None
        self.found_for: str | None = None  # the interpreter box's text ``found`` answers
        self.not_found = ""
        self.plan: dict | None = None
        self._speculative_chosen = False  # the user ticked or cleared it: their choice stays

    def compose(self) -> ComposeResult:
        # 80×24 holds it all: the title and the boxes' names are on their frames, a check box
        # takes one line; the buttons are docked at the bottom, in sight while the rest scrolls
        # (a long "vLLM not found" on a short terminal)
        with VerticalScroll(id="validate-box") as box:
            box.border_title = "Validate an output"
            output = TailInput(self.initial_output, id="validate-output")
            output.border_title = "Output directory"
            yield output
            yield Static("", id="validate-output-note")
            python = Input(get_setting(SETTING) or "", id="validate-python", placeholder="e.g. ~/vllm-env/bin/python")
            python.border_title = "vLLM interpreter (kept for next time)"
            yield python
            yield Static("$MXTRIM_VLLM_PYTHON comes first when set; empty: a vllm on PATH, then this interpreter",
                         id="validate-python-rule")
            yield Static("looking for vLLM …", id="validate-found")
            yield MarkedCheckbox("start vllm serve (health, completion, chat, long input)", True, id="validate-serve", compact=True)
            yield MarkedCheckbox("speculative decoding through the kept MTP layer", False, id="validate-speculative", compact=True)
            yield MarkedCheckbox("equivalence with the original model (real weights)", False, id="validate-equivalence", compact=True)
            yield MarkedCheckbox("graph mode: serve without --enforce-eager (a run of its own)", False, id="validate-graph",
                                 compact=True)
            with Horizontal(id="validate-buttons"):
                yield Button("Start (Enter / Ctrl+S)", id="validate-start", variant="primary")
                yield Button("Cancel (Esc)", id="validate-cancel")

    def on_mount(self) -> None:
        self._check_output(self.initial_output)
        self._find(self.query_one("#validate-python", Input).value)
        self.query_one("#validate-output", Input).focus()

    # --- the output ------------------------------------------------------------------------
    @on(Input.Changed, "#validate-output")
    def _output_changed(self, event: Input.Changed) -> None:
        self._check_output(event.value)

    def _check_output(self, text: str) -> None:
        self.plan, why = output_problem(text)
        note = self.query_one("#validate-output-note", Static)
        spec = self.query_one("#validate-speculative", Checkbox)
        equiv = self.query_one("#validate-equivalence", Checkbox)
        if self.plan is None:
            note.update(Text(why, style="red"))
            spec.disabled = equiv.disabled = True
            return
        mode = self.plan["mode"]
        mtp = bool(self.plan.get("mtp_kept"))
        note.update(Text(f"{mode} output" + (", keeps an MTP layer" if mtp else ""), style="green"))
        spec.disabled = not mtp
        equiv.disabled = mode != "weights"
        if spec.disabled:
            spec.value = False
        elif not self._speculative_chosen:
            spec.value = True  # an MTP layer is kept: what it is kept for is checked too, unless cleared
        if equiv.disabled:
            equiv.value = False

    @on(Checkbox.Changed, "#validate-serve")
    def _serve_changed(self, event: Checkbox.Changed) -> None:
        graph = self.query_one("#validate-graph", Checkbox)
        graph.disabled = not event.value  # graph mode is a way of serving
        if graph.disabled:
            graph.value = False

    @on(Checkbox.Changed, "#validate-speculative")
    def _speculative_changed(self, event: Checkbox.Changed) -> None:
        if event.checkbox.has_focus:  # the user's choice, not the one made for the output typed
            self._speculative_chosen = True

    # --- vLLM ------------------------------------------------------------------------------
    @on(Input.Changed, "#validate-python")
    def _python_changed(self, event: Input.Changed) -> None:
        self._find(event.value)

    @work(thread=True, exclusive=True, group="find-vllm", exit_on_error=False)
    def _find(self, typed: str) -> None:
        try:
            # what is typed here is the kept setting: third in the rule, after --python (none in
            # the wizard) and $MXTRIM_VLLM_PYTHON; the line below the box says which one won
            found, why = find_vllm_python(None, typed.strip() or None), ""
        except VllmNotFound as exc:
            found, why = None, str(exc)
        self.app.call_from_thread(self._show_found, typed, found, why)

    def _show_found(self, typed: str, found: VllmPython | None, why: str) -> None:
        if typed != self.query_one("#validate-python", Input).value:
            return  # typed on since: its own search follows
        self.found, self.found_for, self.not_found = found, typed, why
        line = self.query_one("#validate-found", Static)
        if found is None:
            line.update(Text("✗ " + why, style="bold red"))
        else:
            line.update(Text(f"✓ vLLM {found.version or '?'} at {found.python} ({origin_words(found.origin)})", style="green"))

    # --- answer ----------------------------------------------------------------------------
    @on(Button.Pressed, "#validate-start")
    def _start_pressed(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#validate-cancel")
    def _cancel_pressed(self) -> None:
        self.action_cancel()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_start()

    def action_start(self) -> None:
        # what the boxes hold now (Ctrl+S may come right behind the last key typed)
        self._check_output(self.query_one("#validate-output", Input).value)
        if self.plan is None:
            self.notify(self.query_one("#validate-output-note", Static).render().plain or "choose an output", severity="error")
            return
        if self.found_for != self.query_one("#validate-python", Input).value:
            self.notify("still looking for vLLM (the interpreter typed)", severity="warning", timeout=4)
            return
        if self.found is None:
            self.notify(self.not_found or "still looking for vLLM", severity="error", timeout=8)
            return
        self.dismiss(ValidateRequest(
            output=Path(self.query_one("#validate-output", Input).value.strip()).expanduser().resolve(),
            python=self.found.python,
            typed_python=self.query_one("#validate-python", Input).value.strip(),
            serve=self.query_one("#validate-serve", Checkbox).value,
            speculative=self.query_one("#validate-speculative", Checkbox).value,
            equivalence=self.query_one("#validate-equivalence", Checkbox).value,
            graph=self.query_one("#validate-graph", Checkbox).value,
        ))

    def action_cancel(self) -> None:
        self.dismiss(None)
