"""The mxtrim wizard: source → inventory → selection → budget → output → run.

The app only orchestrates: every read, plan and write is done by ``mxtrim_tui.core`` (in
thread workers, reporting back through messages) or by a ``mxtrim trim`` child process.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import subprocess
import threading
import time
from functools import partial
from pathlib import Path

from textual import events, work
from textual.app import App
from textual.binding import Binding
from textual.command import Hit, Hits, Provider
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static
from textual.containers import Vertical
from textual.worker import Worker, WorkerState

from ..core.errors import InputError
from ..core.probe.gpu import probe_gpus
from .screens.base import STEPS, HelpScreen, WizardScreen
from .screens.budget import BudgetScreen
from .screens.inventory import InventoryScreen
from .screens.output import OutputScreen
from .screens.run import RunScreen
from ..core.child_process import terminate
from .children import trim_argv
from .screens.selection import SelectionScreen
from .screens.source import SourceScreen
from .keymap import binding_scopes, check_keymap
from .settings import keymap_path, remember_source
from .state import WizardState

EXIT_GRACE = 5.0  # seconds the app has to finish exiting once its children are stopped


class ErrorScreen(ModalScreen[None]):
    """The one place errors are shown."""

    BINDINGS = [Binding("escape,enter", "dismiss", "Close", id="error.close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text = title
        self.message = message

    def compose(self):
        with Vertical(id="error-box"):
            yield Static(f"[b red]✗ {self.title_text}[/]", id="error-title")
            yield Static(self.message, id="error-message", markup=False)
            yield Button("Close (Esc)", id="error-close", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()


class ConfirmQuitScreen(ModalScreen[bool]):
    """Quitting while a trim or a validation runs: say what will happen and ask."""

    BINDINGS = [
        Binding("y", "answer(True)", "Quit", id="quit.yes"),
        Binding("n,escape", "answer(False)", "Stay", id="quit.no"),
    ]
    TEXTS = {
        "trim": ("A trim is still running.",
                 "Quit now? The trim is stopped and its partial output removed; nothing is left half-written.",
                 "keep it running"),
        "validate": ("A validation is still running.",
                     "Quit now? The validation is stopped and its vLLM server shut down first; nothing is left "
                     "running. The output itself is not touched.",
                     "let it finish"),
    }

    def __init__(self, kind: str = "trim") -> None:
        super().__init__()
        self.kind = kind if kind in self.TEXTS else "trim"

    def compose(self):
        title, body, stay = self.TEXTS[self.kind]
        with Vertical(id="confirm-box"):
            yield Static(f"[b yellow]{title}[/]", id="confirm-title")
            yield Static(f"{body}\n\n[b]y[/] quit and stop it · [b]n[/] / Esc {stay}", id="confirm-message")

    def action_answer(self, quit_now: bool) -> None:
        self.dismiss(quit_now)


class WizardCommands(Provider):
    """Command palette (ctrl+p): the main actions by name."""

    def _commands(self):
        app = self.app
        yield "Open a model directory", partial(app.action_goto, "source"), "step 1"
        yield "Show the inventory", partial(app.action_goto, "inventory"), "step 2"
        yield "Choose layers", partial(app.action_goto, "selection"), "step 3"
        yield "Automatic layer selection", app.action_auto_select, "fewest layers covering every layer type"
        yield "Show the budget", partial(app.action_goto, "budget"), "step 4"
        yield "Choose the output", partial(app.action_goto, "output"), "step 5"
        yield "Write the output", app.start_run, "run mxtrim trim"
        yield "Help for this screen", app.action_help, "F1"

    async def discover(self) -> Hits:
        for name, cb, help_text in self._commands():
            yield Hit(1.0, name, cb, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, cb, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), cb, help=help_text)


class MxtrimApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "mxtrim"
    SUB_TITLE = "trim checkpoints for vLLM smoke tests"
    COMMANDS = App.COMMANDS | {WizardCommands}
    BINDINGS = [
        Binding("f1", "help", "Help", id="app.help"),
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
    ]

    def __init__(
        self,
        source: Path | str | None = None,
        *,
        tree_root: Path | None = None,
        gpu_probe=probe_gpus,
        disk_usage=shutil.disk_usage,
        workspace: Path | None = None,
        handle_signals: bool = False,
    ):
        super().__init__()
        self.handle_signals = handle_signals  # the real terminal (run_app): SIGTERM / SIGHUP / SIGINT stop the children
        self.disk_usage = disk_usage
        self.state = WizardState()
        if workspace is not None:
            self.state.workspace = workspace
        from ..core.write.remote_source import RemoteSources

        # remote sources (hf://…) read into temporary folders, removed when the wizard ends
        self._remote_sources = RemoteSources(say=None)
        self.initial_source = source
        self.tree_root = tree_root
        self.gpu_probe = gpu_probe
        self._children: dict[subprocess.Popen, float] = {}  # child -> seconds it may take to stop
        self._stopping: int | None = None  # the signal being handled
        self._loop = None
        self.keymap_problems: list[str] = []
        self._key_focus = None  # what had the focus when the last key was handled
        self._pointer_used = False  # a click since the last key
        atexit.register(self._kill_children)

    def on_mount(self) -> None:
        if self.handle_signals:
            self._install_signal_handlers()
        self._apply_keymap()
        self.install_screen(SourceScreen(self.tree_root), "source")
        self.install_screen(InventoryScreen(), "inventory")
        self.install_screen(SelectionScreen(), "selection")
        self.install_screen(BudgetScreen(), "budget")
        self.install_screen(OutputScreen(), "output")
        self.install_screen(RunScreen(), "run")
        self.push_screen("source")
        self.call_after_refresh(self._mark, "first_frame")
        if self.initial_source is not None:
            self.call_after_refresh(self.load_source, self.initial_source)
        self.call_after_refresh(self._report_leftovers)

    def _install_signal_handlers(self) -> None:
        """Killed politely (SIGTERM), its terminal closed (SIGHUP) or interrupted (SIGINT): the
        children are stopped first (a validation stops its server before it exits), then the
        app exits with 128 + the signal. Python-level handlers, not the event loop's: they run
        even while the loop is busy or blocked, and the stopping happens in a thread of its own;
        if the normal exit has not happened a few seconds after the children are gone (a
        hung-up terminal that cannot be drawn on, a stuck loop), the process exits anyway. A
        second signal kills the children at once."""
        self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # e.g. nohup: the user asked for the wizard to outlive the terminal
            try:
                signal.signal(sig, self._signalled)
            except (ValueError, OSError):
                pass

    def _signalled(self, sig: int, frame=None) -> None:
        if self._stopping is not None:  # again: no more waiting
            self._kill_children(hard=True)
            os._exit(128 + self._stopping)
        self._stopping = sig
        threading.Thread(target=self._stop_and_exit, args=(sig,), name="mxtrim-signal", daemon=True).start()

    def _stop_and_exit(self, sig: int, grace: float = EXIT_GRACE) -> None:
        self._kill_children()
        try:
            self._loop.call_soon_threadsafe(partial(self.exit, return_code=128 + sig))
        except RuntimeError:  # the loop is closed: the app is exiting already
            pass
        time.sleep(grace)
        os._exit(128 + sig)  # the app did not finish exiting: nothing of it is worth waiting for

    @work(thread=True, group="leftovers", exit_on_error=False)
    def _report_leftovers(self) -> None:
        """Servers a killed mxtrim left running (pid records): one notification, how to stop them."""
        from ..core.validate import leftovers

        found = leftovers.scan()
        if found:
            self.call_from_thread(self.notify, leftovers.notice(found).removeprefix("mxtrim: "), title="Servers left running",
                                  severity="warning", timeout=30)

    def _apply_keymap(self) -> None:
        """The user's keymap.json: applied entry by entry; each mistake reported once, here and
        in F1 help."""
        screens = {cls.STEP: cls.BINDINGS for cls in (SourceScreen, InventoryScreen, SelectionScreen, BudgetScreen, OutputScreen, RunScreen)}
        from .screens.validate_dialog import ValidateDialog
        from .screens.workspace import ExampleDialog

        screens |= {"help": HelpScreen.BINDINGS, "error": ErrorScreen.BINDINGS, "confirm quit": ConfirmQuitScreen.BINDINGS,
                    "validate dialog": ValidateDialog.BINDINGS, "example dialog": ExampleDialog.BINDINGS}
        check = check_keymap(keymap_path(), binding_scopes(self.BINDINGS, WizardScreen.BINDINGS, screens))
        self.keymap_problems = check.problems
        if check.keymap:
            self.set_keymap(check.keymap)
        if check.problems:
            self.notify("\n".join(check.problems) + "\n(F1 lists them again)", title="keymap.json", severity="warning", timeout=20)

    # --- keys, one after another ------------------------------------------------------------
    async def on_event(self, event: events.Event) -> None:
        """Keys are handled here, each to its end before the next one, in the order typed.

        Textual hands a key to the focused widget's queue; a text box types a character at once
        but an editing key (End, Backspace, Ctrl+K) or a step key (Ctrl+N) goes back up to the
        app first. When keys arrive in one burst (SSH, a paste of keystrokes) the characters
        then overtake the editing keys (`End, Backspace×4, 2041` left 8192) and land in a box
        the previous key had already left. Here the bindings and the focused text box are asked
        in turn, in the app's own queue, so the next key meets what the previous one did."""
        if isinstance(event, events.MouseDown):
            self._pointer_used = True
        if isinstance(event, events.Key) and not event.is_forwarded and not (
                self.screen.maximized is not None and event.key == "escape" and self.escape_to_minimize):
            self.app_focus = True
            await self._key_in_order(event)
            return
        if isinstance(event, events.Paste) and not event.is_forwarded and isinstance(self.focused, Input):
            self.focused._on_paste(event)  # in order with the keys around it
            return
        await super().on_event(event)

    async def _key_in_order(self, event: events.Key) -> None:
        focused = self.focused
        if focused is not self._key_focus:
            self._focus_arrived(focused)
        try:
            if await self._check_bindings(event.key, priority=True):
                return
            if isinstance(focused, Input) and event.is_printable:
                await focused._on_key(event)  # typed into the box, never a binding
                return
            if event.key == "escape" and isinstance(focused, Input) and isinstance(self.screen, WizardScreen):
                # Escape leaves a step's text box (the next key is a step key again); outside a
                # box it keeps its meaning (cancel a run, back), and in a dialog it closes it
                self.screen.leave_box()
                return
            if await self._check_bindings(event.key):  # the focused widget's bindings, then up to the app's
                return
            (focused or self.screen)._forward_event(event)  # anything else the widget does with a key
        finally:
            # the next key sees whether the focus moved since this one began (by this key or not)
            self._key_focus, self._pointer_used = focused, False

    def _focus_arrived(self, box) -> None:
        """The first key since a text box got the focus (by the key before, or by the program):
        its whole value is selected now, so that typing replaces it, as Textual's Focus event
        does. That event is turned off for the box: arriving behind keys already typed, it
        would select what they typed. Not after a click, which placed the cursor."""
        if not isinstance(box, Input) or self._pointer_used:
            return
        if box.select_on_focus:
            box.select_on_focus = False
            box._selects_on_focus = True  # done here from now on
        if getattr(box, "_selects_on_focus", False):
            from textual.widgets.input import Selection

            box.selection = Selection(0, len(box.value))

    # --- navigation ------------------------------------------------------------------------
    def action_goto(self, step: str) -> None:
        if self.screen.id != step:
            screen = self.get_screen(step)
            if isinstance(screen, WizardScreen):
                screen.leave_text_boxes()  # a step entered by a key starts outside its text boxes
            self.switch_screen(step)

    def _step_index(self) -> int:
        names = [s for s, _ in STEPS]
        return names.index(self.screen.id) if self.screen.id in names else 0

    def action_next_step(self) -> None:
        i = self._step_index()
        if i + 1 < len(STEPS):
            self.action_goto(STEPS[i + 1][0])

    def action_previous_step(self) -> None:
        i = self._step_index()
        if i > 0:
            self.action_goto(STEPS[i - 1][0])

    def action_help(self) -> None:
        if not isinstance(self.screen, (HelpScreen, ModalScreen)):
            self.push_screen(HelpScreen(self.screen))

    def action_auto_select(self) -> None:
        self.state.keep = {}
        self.action_goto("selection")
        sel = self.get_screen("selection")
        if self.state.inventory is not None:
            sel.replan()

    # --- loading a source (thread worker) --------------------------------------------------
    def load_source(self, path: Path | str, chosen: tuple | None = None) -> None:
        """Read ``path`` (a folder, or ``hf://ORG/NAME[@REVISION]`` as text); ``chosen`` = (keep
        per submodel, MTP, mode) to plan it with (an output's plan, `u` in the workspace
        dialog), else the automatic selection."""
        screen = self.get_screen("source")
        screen.show_loading(path)
        self._load(path, chosen)

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load(self, path: Path, chosen: tuple | None = None):
        from ..core.model.inventory import build_inventory
        from ..core.read.source import open_source

        from ..core.plan.build import Selection, build_plan

        if isinstance(path, str):  # a remote source: its headers and small files, by range requests
            path = self._remote_sources.local(path)
        inv = build_inventory(open_source(path))
        keep, mtp, mode = chosen or ({}, None, None)
        # a plan straight away: every later step has one to show (checked against transformers
        # next, in its own worker)
        return path, inv, build_plan(inv, Selection(dict(keep), mtp)), (dict(keep), mtp, mode)

    # --- the plan checked against transformers (thread worker, check child) --------------
    def check_plan(self, plan) -> None:
        """Check ``plan`` (the current one) as `mxtrim trim` will: in the check child, as the
        CLI does (torch never enters the wizard's process); the result replaces the plan if it
        is still current, and is remembered for the trim's own check."""
        self._check_plan(plan, self.state.trim_request())

    @work(thread=True, exclusive=True, group="check", exit_on_error=False)
    def _check_plan(self, plan, request) -> None:
        from ..core.checks.plan_outcome import checked_plan_cached

        checked = checked_plan_cached(plan, request=request)
        self.call_from_thread(self._plan_checked, plan, checked)

    def _plan_checked(self, plan, checked) -> None:
        if self.state.plan is not plan:
            return  # the selection changed meanwhile; its own check follows
        self.state.plan = checked
        selection = self.get_screen("selection")
        if selection.is_mounted:
            selection.show_plan(checked)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.SUCCESS and worker.group == "load":
            path, inv, plan, (keep, mtp, mode) = worker.result
            self.state = WizardState(source_path=path, inventory=inv, plan=plan, workspace=self.state.workspace,
                                     keep=keep, mtp=mtp, mode=mode or "dummy")
            # a remote source is remembered as its repository at the commit read
            remember_source(inv.source.origin or path.resolve())
            # every step names the model it works on (the header); no toast over the workspace list
            self.sub_title = f"model: {inv.model_name}"
            self.get_screen("source").refresh_view()
            self.call_after_refresh(self._mark, "inventory_ready")
            # after the loaded source is on screen: the check imports torch and transformers
            self.call_after_refresh(self.check_plan, plan)
        elif event.state == WorkerState.ERROR:
            err = worker.error
            message = str(err)
            if worker.group == "load":
                kept = self.state.inventory
                if kept is not None:  # never silently: the steps go on with the model read before
                    message += f"\n\nStill loaded: {kept.model_name} (from {self.state.source_path}); steps 2–6 use it."
                self.get_screen("source").show_failure(message)
            title = "Bad input" if isinstance(err, InputError) else f"{type(err).__name__} in {worker.group or 'worker'}"
            self.show_error(title, message)

    def _mark(self, event: str) -> None:
        """Timing marks for benchmarks/tui_startup.py (only when MXTRIM_TIMING_FILE is set)."""
        target = os.environ.get("MXTRIM_TIMING_FILE")
        if not target:
            return
        with open(target, "a") as fh:
            fh.write(f"{event} {time.time():.6f}\n")
        if event == "inventory_ready" and os.environ.get("MXTRIM_EXIT_WHEN_READY"):
            self.exit()

    def show_error(self, title: str, message: str) -> None:
        self.push_screen(ErrorScreen(title, message))

    # --- the run: a child process owned by the app ---------------------------------------
    def start_run(self) -> None:
        st = self.state
        if st.plan is None:
            self.show_error("Nothing to write", "Load a source and choose layers first.")
            return
        if st.budget_errors:  # what the boxes hold does not parse: named per box
            self.show_error("The budget has invalid values", "\n".join(f"{k}: {v}" for k, v in st.budget_errors.items()) + "\n\nCorrect them in step 4.")
            return
        from ..core.plan.blockers import write_blockers

        blocking = write_blockers(st.plan, st.budget_inputs if st.budget_chosen else None, st.mode)  # as `mxtrim trim` decides
        if blocking:
            self.show_error("This cannot be written", "\n".join(blocking))
            return
        problem = st.location_problem()
        if problem:
            self.show_error("Cannot write there", problem)
            return
        problem = st.batched_test_problem()
        if problem:
            self.show_error("The batched_test entry cannot be appended", problem + "\n\nChange the model YAML in step 5, or empty it.")
            return
        from ..core.plan.plan_file import keep_plan_file

        try:
            plan_file = keep_plan_file(st.trim_request(), st.plan)
        except (OSError, InputError) as exc:
            self.show_error("The plan file cannot be written", str(exc))
            return
        self.action_goto("run")
        # the run screen composes on first show: start once it is on screen
        self.call_after_refresh(self.get_screen("run").start, trim_argv(plan_file, st.output_path, st.batched_test_config))

    def validate_output(self, output: Path) -> None:
        """The validate dialog on ``output`` (a workspace model); what is chosen there runs on the
        run step, as `v` there does."""
        if self.children_running():
            self.show_error("Something is running", "A trim or a validation is running; wait for it (step 6) or cancel it first.")
            return
        from .screens.validate_dialog import ValidateDialog

        self.push_screen(ValidateDialog(output), self._validation_chosen)

    def _validation_chosen(self, request) -> None:
        if request is None:
            return
        self.action_goto("run")
        # the run screen composes on first show: start once it is on screen
        self.call_after_refresh(self.get_screen("run").start_validation, request)

    def register_child(self, proc: subprocess.Popen, grace: float = 5.0) -> None:
        self._children[proc] = grace

    def unregister_child(self, proc: subprocess.Popen) -> None:
        self._children.pop(proc, None)

    def terminate_child(self, proc: subprocess.Popen | None) -> None:
        if proc is not None:
            grace = self._children.get(proc, 5.0)
            self.run_worker(partial(terminate, proc, grace), thread=True, group="cancel", exit_on_error=False)

    def _kill_children(self, hard: bool = False) -> None:
        for proc, grace in list(self._children.items()):
            if hard:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            else:
                terminate(proc, grace=grace)
        self._children.clear()

    def children_running(self) -> bool:
        return any(proc.poll() is None for proc in self._children)

    async def action_quit(self) -> None:
        if self.children_running() and not isinstance(self.screen, ConfirmQuitScreen):
            self.push_screen(ConfirmQuitScreen(getattr(self.get_screen("run"), "kind", "trim")), self._quit_answered)
            return
        self._quit_now()

    def _quit_answered(self, quit_now: bool | None) -> None:
        if quit_now:
            self._quit_now()

    def _quit_now(self) -> None:
        self._kill_children()
        self._remote_sources.close(written=False)  # the remote sources' temporary folders
        self.exit()


def run_app(source: str | None = None) -> int:
    if source is None:
        from ..demo.build import ensure_demo_model

        path = ensure_demo_model()
    else:
        from ..core.read.remote import parse_remote

        path = source if parse_remote(source) else Path(source)  # hf://… stays text: read by the wizard
    app = MxtrimApp(path, handle_signals=True)
    try:
        app.run(headless=bool(os.environ.get("MXTRIM_HEADLESS")))
    finally:
        app._remote_sources.close(written=False)
    return app.return_code or 0
