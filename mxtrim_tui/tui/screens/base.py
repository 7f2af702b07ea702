"""Shared parts of the wizard's screens: the step bar, step jumps, F1 help."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.strip import Strip
from textual.css.query import NoMatches
from textual.widgets import Checkbox, Footer, Header, Input, Markdown, Static

from ..settings import keymap_path

STEPS = (
    ("source", "Source"),
    ("inventory", "Inventory"),
    ("selection", "Selection"),
    ("budget", "Budget"),
    ("output", "Output"),
    ("run", "Run"),
)


class StepBar(Static):
    """1 Source › 2 Inventory › ... with the current step highlighted."""

    def __init__(self, current: str) -> None:
        super().__init__(id="stepbar")
        self.current = current

    def on_mount(self) -> None:
        text = Text()
        for n, (name, label) in enumerate(STEPS, 1):
            if n > 1:
                text.append(" › ", style="dim")
            style = "bold reverse" if name == self.current else ""
            text.append(f" {n} {label} ", style=style)
        self.update(text)


def focus_now(widget) -> None:
    """Focus ``widget`` at once: ``Widget.focus`` waits its turn in the app's queue, behind keys
    typed already (a burst), which would then go to the widget focused before."""
    widget.refresh()
    if widget.screen.focused is not widget:
        widget.screen.set_focus(widget)


class TailInput(Input):
    """A path box that, without the focus, shows the end of a path too long for it after a
    "…" (what tells an output from its siblings is its end: ``…-dummy-2layers-2``)."""

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        value = self.value
        if self.has_focus or y != 0 or not value or cell_len(value) <= width:
            return super().render_line(y)
        tail = ""
        for ch in reversed(value):
            if cell_len(tail) + cell_len(ch) > width - 1:
                break
            tail = ch + tail
        shown = Text("…" + tail, end="")
        strip = Strip(list(self.app.console.render(shown, self.app.console_options.update_width(width + 1))))
        return strip.crop(0, width + 1).extend_cell_length(width + 1).apply_style(self.rich_style)


class MarkedCheckbox(Checkbox):
    """A check box whose state reads without colour: ▐X▌ ticked, ▐ ▌ cleared (Textual's shows
    ▐X▌ either way, told apart by colour only)."""

    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 (Textual's name, read when the box is drawn)
        return "X" if self.value else " "


class WizardScreen(Screen):
    """A step of the wizard. Subclasses set STEP and HELP and implement ``refresh_view``,
    which runs each time the screen is shown (the first time included); the screen's id is
    its STEP and its title the step's label."""

    STEP = "source"
    TITLE_TEXT = "Source"
    HELP = ""
    # the widget a step key lands on when the step was left in one of its text boxes: the
    # digits then jump again instead of typing into a box behind the user's back
    HOME: str | None = None
    BINDINGS = [
        Binding("1", "app.goto('source')", "Source", show=False, id="step.source"),
        Binding("2", "app.goto('inventory')", "Inventory", show=False, id="step.inventory"),
        Binding("3", "app.goto('selection')", "Selection", show=False, id="step.selection"),
        Binding("4", "app.goto('budget')", "Budget", show=False, id="step.budget"),
        Binding("5", "app.goto('output')", "Output", show=False, id="step.output"),
        Binding("6", "app.goto('run')", "Run", show=False, id="step.run"),
        Binding("ctrl+n", "app.next_step", "Next", id="step.next"),
        Binding("ctrl+b", "app.previous_step", "Back", id="step.back"),
    ]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.TITLE_TEXT = dict(STEPS)[cls.STEP]

    def __init__(self) -> None:
        super().__init__(id=self.STEP)

    def compose_header(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield StepBar(self.STEP)

    def compose_footer(self) -> ComposeResult:
        yield Footer(compact=True)

    def on_screen_resume(self) -> None:
        self.refresh_view()

    def leave_text_boxes(self) -> None:
        """Entered by a step key (or Ctrl+N / Ctrl+B): start outside the text boxes. Done before
        the switch, so that a key typed right after the step key already meets the new focus."""
        if not isinstance(self.focused, Input) or not self.is_mounted:
            return
        self.leave_box()

    def leave_box(self) -> None:
        """The focus leaves the text box for the step itself (its HOME widget where it can take
        the focus, else nothing): the step's keys work again. Escape in a box does this."""
        try:
            home = self.query_one(self.HOME) if self.HOME else None
        except NoMatches:
            home = None
        self.set_focus(home if home is not None and home.focusable else None)

    def refresh_view(self) -> None:  # pragma: no cover - overridden
        pass


class HelpScreen(ModalScreen[None]):
    """F1: what this screen is for and every key it answers to."""

    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close")]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.target = screen

    def compose(self) -> ComposeResult:
        # "<model>" would be taken for HTML and vanish: help texts are prose, shown literally
        help_text = getattr(self.target, "HELP", "").replace("<", "\\<")
        lines = [f"# {getattr(self.target, 'TITLE_TEXT', type(self.target).__name__)}", "", help_text]
        lines += ["", "**Keys**", ""]
        seen = set()
        step = getattr(self.target, "STEP", "")

        def rank(b) -> int:
            bid = b.id or ""
            return 0 if bid.startswith(step + ".") else 1 if bid.startswith("step.") else 2 if bid.startswith("app.") else 3

        jumps = []
        for binding in sorted(_all_bindings(self.target), key=rank):
            if not binding.description or binding.action == "help_quit":
                continue  # Textual's internal bindings (a key shown twice, one of them meaningless)
            if (binding.id or "").startswith("step.") and binding.key.isdigit():
                jumps.append(binding)
                continue
            key = self.app.get_key_display(binding)
            if (key, binding.description) in seen or (binding.id is None and any(k == key for k, _ in seen)):
                continue
            seen.add((key, binding.description))
            lines.append(f"- `{key}` {binding.description}" + (f" *(id `{binding.id}`)*" if binding.id else ""))
        if jumps:
            keys = " ".join(self.app.get_key_display(b) for b in jumps)
            lines.append(f"- `{keys}` jump to step 1–6 when no text box has focus *(ids `step.source` … `step.run`)*")
        lines += ["", f"Keys can be remapped by id in `{keymap_path()}`."]  # the file read ($XDG_CONFIG_HOME)
        problems = getattr(self.app, "keymap_problems", [])
        if problems:
            lines += ["", "**Key map problems** (those entries are not applied)", ""]
            lines += [f"- {p}" for p in problems]
        with Vertical(id="help-box"):
            with VerticalScroll():
                yield Markdown("\n".join(lines))
            yield Static("Esc / F1 closes", id="help-hint")


def _all_bindings(screen: Screen):
    """The screen's and the app's bindings (remapped keys included), not those of the focused
    widget (a table's cursor keys); also those a focused text box takes while it has the focus
    (the step digits): they work again once it is left, as the help says."""
    app = screen.app
    found = []
    for node in (screen, app):
        bindings = node._bindings.copy()
        if app._keymap:
            bindings.apply_keymap(app._keymap)
        for _key, binding in bindings:
            if app._check_action_state(binding.action, node) is not False:
                found.append(binding)
    return found
