"""Step 6: run the trim as a real child process (`mxtrim trim ... --progress`), stream its
log, show progress; cancel with Escape (the child removes its partial output)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Label, ProgressBar, RichLog, Static

from ...core.progress import (
    Check, Event, FileWritten, Memory, Request, Result, Serve, ServerLog, ShardWritten, Stage, TensorCopied, Verifying,
    parse_line,
)
from ...core.units import human_bytes
from .base import WizardScreen

# what the status line says while a stage of the write runs
STAGE_WORDS = {
    "budget": "checking the disk budget", "files": "writing config and assets", "extract": "copying tensors",
    "verify": "verifying hashes", "structure": "checking the structure against transformers", "write": "writing",
}
clock = time.monotonic  # a module name, so that a snapshot test can pin the elapsed times
LOG_LINES = 2000
LINE_LIMIT = 400  # very long lines are cut, the rest of the log stays readable


@dataclass
class RunProgress:
    done: int = 0
    total: int = 0
    unit: str = "files"
    current: str = ""
    started: float = 0.0
    bytes_copied: int = 0  # the largest byte count the extraction reported


class ResultsBox(VerticalScroll):
    """The validation's rows, the executed paths of the coverage rows and the serve command:
    scrolls, and `r` gives it the whole screen."""

    ALLOW_MAXIMIZE = True


class ChildLine(Message):
    def __init__(self, stream: str, line: str) -> None:
        super().__init__()
        self.stream = stream
        self.line = line


class ChildExited(Message):
    def __init__(self, returncode: int, stdout: str, cancelled: bool) -> None:
        super().__init__()
        self.returncode = returncode
        self.stdout = stdout
        self.cancelled = cancelled


class RunScreen(WizardScreen):
    STEP = "run"
    HELP = (
        "The trim runs as a child process — the same `mxtrim trim` the CLI offers — and its "
        "progress and log stream here (stdout plain, stderr yellow; the log follows the end only "
        "while you are at the bottom; `l` gives the log the whole screen and back). Escape cancels "
        "a running trim: the child is terminated and removes its partial output; with nothing "
        "running, Escape goes back to the output step. After a write, the serve command of the "
        "output's README is shown here (`c` copies it, after a validation too). The line over the "
        "results says what they hold; they scroll, and `r` gives them the whole screen and back.\n\n"
        "`v` opens the validate dialog: the output to validate (the one just written, or any other "
        "directory mxtrim wrote), the vLLM interpreter, and the checks — vllm serve, speculative "
        "decoding through a kept MTP layer, equivalence with the original model (real weights). "
        "vLLM is found by the same rule as `mxtrim validate`: --python (the CLI's flag), "
        "$MXTRIM_VLLM_PYTHON, the interpreter typed in the dialog (kept for next time), a `vllm` "
        "command on PATH, this interpreter; the dialog shows which one will run and where it came "
        "from, and when none holds vLLM it says where it looked and nothing is started. "
        "The validation runs offline loads in that interpreter, then a real `vllm serve` (its log "
        "streams here) with health, completion and chat requests; each check fills in as it "
        "completes and a failure is classified with its evidence. After the checks, a served "
        "validation lists the coverage rows as the engine built and executed them, one line each: "
        "✓ executed (the experts that received tokens), ○ not executed (the request that would "
        "reach it), · unverified (why). Escape stops the validation and "
        "its server; quitting never leaves a server behind."
    )
    BINDINGS = [
        Binding("v", "validate", "Validate", id="run.validate"),
        Binding("l", "toggle_log", "Log on the whole screen", id="run.log", show=False),  # the log title says it
        Binding("r", "toggle_results", "Results on the whole screen", id="run.results", show=False),  # their title says it
        Binding("c", "copy_command", "Copy command", id="run.copy"),
        Binding("escape", "cancel", "Cancel", id="run.cancel"),
        Binding("escape", "back", "Back", id="run.back", show=False),  # ^b Back is shown
        Binding("ctrl+s", "start", "Write", id="run.start"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.process: subprocess.Popen | None = None
        self.progress = RunProgress()
        self._cancelled = False
        self._starting = False
        self._last_error = ""
        self.kind = "trim"
        self.validation = ValidationView()
        self.serve_command = ""  # the output's serve command shown under the log, as a person types it
        self.worked_on = None  # the output this step wrote or validated last: what `v` offers
        self._wrote_nothing = False  # the last trim was cancelled or failed: no output to offer

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Vertical(id="run-body"):
            yield Static("Nothing started. Ctrl+S writes the output chosen in step 5; v validates an output.", id="run-status")
            yield ProgressBar(id="run-progress", show_eta=False)
            yield Static("", id="run-stats")
            yield Label("Log (l: whole screen)", classes="pane-title")
            # auto_scroll off: the anchor below follows the tail, and lets go while the user reads
            # higher up (a per-write "am I at the bottom?" check misses bursts of lines written
            # before the pending scroll has happened, and then stops following for good).
            # Long lines wrap: nothing of a server's error is cut off at 80 columns. They wrap at
            # the width the log has beside its scrollbar (its gutter is kept while the log is still
            # short, app.tcss), not at RichLog's 78 columns at least.
            yield RichLog(id="run-log", max_lines=LOG_LINES, wrap=True, markup=False, highlight=False, auto_scroll=False,
                          min_width=1)
            # what a run leaves: the validation's rows and the output's serve command, in one box
            # that scrolls, under a line saying what it holds (r: the whole screen)
            yield Static("", id="run-results-title")
            with ResultsBox(id="run-validation-box"):
                yield Static("", id="run-validation")
                yield Static("", id="run-serve")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.query_one("#run-log", RichLog).anchor()
        self.query_one("#run-progress", ProgressBar).display = False  # no bar until something runs
        self._show_results_title()

    def action_toggle_log(self) -> None:
        """The log takes the whole screen (a validation's server log at 80×24), and back."""
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.query_one("#run-log", RichLog), container=False)

    def action_toggle_results(self) -> None:
        """The validation's rows, paths and the serve command take the whole screen, and back."""
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.query_one("#run-validation-box", VerticalScroll), container=False)

    def _show_results_title(self) -> None:
        """One line over the results: how many rows and coverage rows' paths, whether a serve
        command follows, and how to see them all (the box scrolls; r gives it the whole screen).
        Hidden while it is empty."""
        title = self.query_one("#run-results-title", Static)
        rows, paths = self.validation.rows, self.validation.paths
        parts = []
        if rows:
            parts.append(f"{len(rows)} checks ({_counted(rows)})")
        if paths:
            parts.append(f"the paths of {len(paths)} coverage rows ({_counted(paths)})")
        if self.serve_command:
            parts.append("the serve command")
        title.display = bool(parts)
        if parts:
            title.update(Text("Below: " + ", then ".join(parts) + " · r: whole screen", style="bold"))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def busy(self) -> bool:
        """A run is starting, running, or has exited with its result not yet read: `v`, `Ctrl+S`
        and a new start wait until what it wrote is known (the dialog offers that output)."""
        return self._starting or self.process is not None

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # Escape is "Cancel" while a child runs and "Back" otherwise; the footer shows the one
        # that applies
        if action == "cancel":
            return self.busy
        if action == "validate":
            # after a trim that wrote nothing, `v` is not offered unless an output written before is
            # there to validate (the dialog would offer nothing that exists)
            return not self.busy and not (self._wrote_nothing and not _is_output(self.worked_on))
        if action == "copy_command":
            return bool(self.serve_command)
        if action == "back":
            return not self.busy
        return True

    def action_back(self) -> None:
        self.app.action_previous_step()

    def action_start(self) -> None:
        self.app.start_run()

    def _show_command(self, title: str, command: str) -> None:
        self.serve_command = command
        self.query_one("#run-serve", Static).update(Text(f"{title} (c copies it):\n{command}", style="cyan"))
        self._show_results_title()
        self.refresh_bindings()

    def _show_output_command(self, output, title: str = "the output's serve command (its serve.sh does the same)") -> None:
        """The output's own serve command (its README's, from mxtrim-plan.json) as a person types
        it: the devices listed, port and TP written out (README.md and serve.sh follow what the
        user sets). What `c` copies, after a validation too: never the CPU command the
        validation's server ran with."""
        from ...core.validate.headline import planned_serve
        from ...core.write.report import typed_serve_command

        command = typed_serve_command(planned_serve(output) or {}) if output else None
        if command:
            self._show_command(title, command)

    def action_copy_command(self) -> None:
        if self.serve_command:
            # OSC 52: the terminal puts it on the clipboard, over SSH too
            self.app.copy_to_clipboard(self.serve_command)
            self.notify("serve command copied to the clipboard (where the terminal allows it)", timeout=3)

    def action_validate(self) -> None:
        """The validate dialog: which output, which vLLM, which checks; nothing starts without vLLM."""
        if self.busy:
            return
        from .validate_dialog import ValidateDialog

        self.app.push_screen(ValidateDialog(self.worked_on), self.start_validation)

    def start_validation(self, request) -> None:
        """Run what the validate dialog chose (None: it was cancelled)."""
        if request is None:
            return
        from ...core.user_settings import set_setting
        from ...core.probe.vllm_python import SETTING

        set_setting(SETTING, request.typed_python or None)
        self.worked_on = request.output
        # no --python: the child finds the interpreter by the same rule as the dialog did (the
        # setting was just kept), so the record says where it came from, not "--python"
        argv = [sys.executable, "-m", "mxtrim_tui", "validate", str(request.output), "--json", "--progress"]
        argv += ["--serve"] if request.serve else []
        argv += ["--speculative"] if request.speculative else []
        argv += ["--equivalence"] if request.equivalence else []
        argv += ["--graph"] if request.graph else []  # graph mode: served without --enforce-eager
        self.validation = ValidationView()
        self.query_one("#run-validation", Static).update(Text(f"validating {request.output} with {request.python} …", style="bold"))
        self.start(argv, kind="validate")

    def start(self, argv: list[str], kind: str = "trim") -> None:
        if self.busy:
            self.notify("a run is already in progress", severity="warning")
            return
        self.kind = kind
        self._cancelled = False
        self._starting = True
        self._last_error = ""
        self.progress = RunProgress(started=clock())
        log = self.query_one("#run-log", RichLog)
        log.clear()
        log.anchor()  # a log scrolled up in the last run follows this one's tail again
        shown = ["mxtrim"] + argv[3:] if argv[1:3] == ["-m", "mxtrim_tui"] else argv
        log.write(Text("$ " + shlex.join(shown), style="bold"))
        out = argv[argv.index("--out") + 1] if "--out" in argv else None
        status = f"writing {out} …" if out else ("validating (offline checks, then vllm serve) …" if kind == "validate" else "running…")
        self.query_one("#run-status", Static).update(Text(status, style="bold"))
        bar = self.query_one("#run-progress", ProgressBar)
        bar.display = True
        bar.update(total=None, progress=0)
        self.query_one("#run-stats", Static).update("")
        self.query_one("#run-serve", Static).update("")
        self.serve_command = ""
        self._wrote_nothing = False
        self.query_one("#run-body").remove_class("-finished")
        if kind != "validate":
            self.validation = ValidationView()
            self.query_one("#run-validation", Static).update("")
        else:
            self._show_output_command(_validated_output(argv))
        self._show_results_title()
        self.refresh_bindings()
        self._run(argv)

    @work(thread=True, exclusive=True, group="run", exit_on_error=False)
    def _run(self, argv: list[str]) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        except OSError as exc:  # the interpreter went away: said, and the step is free again
            self.post_message(ChildLine("stderr", f"mxtrim: error: cannot start {argv[0]}: {exc}"))
            self.post_message(ChildExited(127, "", False))
            return
        self.process = proc
        self._starting = False
        # a validation stops its server before it exits: give it the time to
        self.app.register_child(proc, grace=45.0 if self.kind == "validate" else 5.0)
        out_chunks: list[str] = []

        def pump_stdout() -> None:
            for line in proc.stdout:
                out_chunks.append(line)

        reader = threading.Thread(target=pump_stdout, daemon=True)
        reader.start()
        for line in proc.stderr:
            self.post_message(ChildLine("stderr", line.rstrip("\n")))
        proc.wait()
        reader.join(timeout=5)
        self.app.unregister_child(proc)
        self.post_message(ChildExited(proc.returncode, "".join(out_chunks), self._cancelled))

    def _log(self, text: Text) -> None:
        self.query_one("#run-log", RichLog).write(text)

    def on_child_line(self, message: ChildLine) -> None:
        line = message.line
        event = parse_line(line)
        if event is not None:
            self._on_event(event)
            return
        if line.startswith("mxtrim: error: "):
            self._last_error = line[len("mxtrim: error: "):]
        shown = line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT] + " …"
        self._log(Text(shown, style="yellow" if message.stream == "stderr" else ""))

    def _on_event(self, event: Event) -> None:
        if self.kind == "validate":
            self._on_validation_event(event)
            return
        p = self.progress
        if isinstance(event, FileWritten):
            p.unit, p.done, p.total, p.current = "files", event.done_files, event.total_files, event.path
            self._log(Text(f"wrote {event.path} ({event.bytes:,} B)", style="green"))
        elif isinstance(event, TensorCopied):
            p.unit, p.done, p.total, p.current = "bytes", event.done_bytes, event.total_bytes, event.name
            p.bytes_copied = max(p.bytes_copied, p.done)
        elif isinstance(event, Verifying):
            p.unit, p.done, p.total = "bytes", event.done_bytes, event.total_bytes
            if not p.current.startswith(STAGE_WORDS["structure"]):
                p.current = STAGE_WORDS["verify"]
        elif isinstance(event, ShardWritten):
            if event.status == "done":
                self._log(Text(f"shard {event.shard} written ({event.bytes:,} B)", style="green"))
        elif isinstance(event, Stage):
            if event.status == "start" and event.name in STAGE_WORDS:
                p.current = STAGE_WORDS[event.name]
            elif event.status == "done" and event.name in STAGE_WORDS:
                p.current = f"{STAGE_WORDS[event.name]}: done"
            if event.status != "running":
                self._log(Text(f"[{event.name}] {event.status}" + (f": {event.summary}" if event.summary else ""), style="cyan"))
        elif isinstance(event, Result):
            self._log(Text(f"output: {event.output}", style="bold green"))
        else:
            self._log(Text(json.dumps(event.raw), style="dim"))
        self._show_progress(force=isinstance(event, (Stage, Result, FileWritten)))

    def _show_progress(self, force: bool = False) -> None:
        p = self.progress
        now = clock()
        # thousands of tensor events: repaint at most ten times a second
        if not force and p.done != p.total and now - getattr(self, "_painted", 0.0) < 0.1:
            return
        self._painted = now
        bar = self.query_one("#run-progress", ProgressBar)
        if p.total:
            bar.update(total=p.total, progress=p.done)
        elapsed = max(1e-6, clock() - p.started)
        if p.unit == "bytes" and p.total:
            rate = p.done / elapsed
            eta = (p.total - p.done) / rate if rate > 0 else 0
            stats = f"{human_bytes(p.done)} / {human_bytes(p.total)} · {human_bytes(rate)}/s · ETA {eta:4.0f} s · {p.current}"
        else:
            stats = f"{p.done} / {p.total} {p.unit} · {p.current}"
        self.query_one("#run-stats", Static).update(stats)

    def _on_validation_event(self, event: Event) -> None:
        if isinstance(event, Stage) and event.status == "running":
            self.query_one("#run-stats", Static).update(f"running: {event.name}")
            return
        if isinstance(event, ServerLog):
            shown = event.line if len(event.line) <= LINE_LIMIT else event.line[:LINE_LIMIT] + " …"
            self._log(Text(shown, style="yellow" if event.stream == "stderr" else ""))
        elif isinstance(event, Check):
            self.validation.add(event.raw)
            self._show_rows()
        elif isinstance(event, Serve) and event.status == "starting":
            # the validation's own server (on CPU: small context, one sequence) is in the log; `c`
            # copies the output's serve command, shown below the rows
            self._log(Text("[serve] starting: " + shlex.join(event.command), style="cyan"))
        elif isinstance(event, Serve) and event.status == "retrying":
            self._log(Text(f"[serve] starting again: {event.reason}", style="cyan"))
        elif isinstance(event, Serve):
            self._log(Text(f"[serve] {event.status} ({event.signal or 'exited'}, status {event.returncode})", style="cyan"))
        elif isinstance(event, Memory) and "figures" in event.raw:
            from ...core.validate.memory_check import summary

            self._log(Text(f"[memory] predicted / logged: {summary(event.raw)}", style="cyan"))
        elif isinstance(event, Request):
            mark = "✓" if event.passed else "✗"
            self._log(Text(f"{mark} {event.name}: HTTP {event.status} in {event.seconds} s — {event.detail}",
                           style="green" if event.passed else "red"))

    def _validation_exited(self, message: ChildExited) -> None:
        status = self.query_one("#run-status", Static)
        if message.cancelled:
            status.update(Text("validation stopped — its server was shut down", style="bold yellow"))
            self._show_rows()
            return
        try:
            doc = json.loads(message.stdout)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            status.update(Text(f"✗ validation could not run (exit {message.returncode}): {self._last_error or 'see the log'}", style="bold red"))
            self._show_rows()
            return
        self.validation = ValidationView.from_json(doc)
        self._show_rows()
        status.update(self.validation.headline(doc))

    def _show_rows(self) -> None:
        self.query_one("#run-validation", Static).update(self.validation.render() if self.validation.rows else "")
        self._show_results_title()

    def on_child_exited(self, message: ChildExited) -> None:
        self.process = None
        self._starting = False
        self.query_one("#run-body").add_class("-finished")
        self.refresh_bindings()
        status = self.query_one("#run-status", Static)
        stats = self.query_one("#run-stats", Static)
        bar = self.query_one("#run-progress", ProgressBar)
        elapsed = clock() - self.progress.started
        if self.kind == "validate":
            # stopped (Escape): said as a cancelled trim says it, never as a full bar
            stats.update(f"stopped after {elapsed:.1f} s" if message.cancelled else f"finished in {elapsed:.1f} s")
            bar.update(total=1, progress=0 if message.cancelled else 1)
            self._validation_exited(message)
            return
        if message.cancelled:
            self._wrote_nothing = True
            self.refresh_bindings()
            status.update(Text("cancelled — the partial output was removed; nothing was written", style="bold yellow"))
            stats.update(f"stopped after {elapsed:.1f} s")
            bar.update(total=1, progress=0)
            return
        doc = _json_doc(message.stdout)
        if message.returncode != 0 and not _written_despite_harness(doc):
            reason = self._last_error or "see the log above"
            self._wrote_nothing = True
            self.refresh_bindings()
            status.update(Text(f"✗ failed (exit {message.returncode}): {reason}", style="bold red"))
            stats.update(f"stopped after {elapsed:.1f} s; nothing was written")
            bar.update(total=1, progress=0)
            self._log(Text(f"exit {message.returncode}", style="bold red"))
            return
        out = doc.get("output")
        self.app.state.last_output = out
        self.worked_on = out or self.worked_on
        status.update(Text(f"✓ written: {out}" if out else "✓ finished (exit 0)", style="bold green"))
        files = doc.get("files") or []
        stats.update(f"{len(files)} file(s) written in {elapsed:.1f} s" if files else f"finished in {elapsed:.1f} s")
        checks = doc.get("checks")
        if checks:
            integ = checks.get("integrity", {})
            self._log(Text(
                f"verified: {integ.get('tensors')} tensors in {len(integ.get('shards', []))} shard(s), "
                f"{integ.get('hashes_matched')} {integ.get('hash')} hashes matched, index {integ.get('index')}",
                style="bold green",
            ))
            structure = checks.get("structure") or {}
            self._log(Text(f"structure: {structure.get('status')} — {structure.get('summary')}", style="green"))
            self._log(Text("vLLM load: unverified (run the serve command below)", style="yellow"))
        if bar.total is None:
            bar.update(total=1, progress=1)
        else:
            bar.update(progress=bar.total)
        self._log(Text(f"done (exit {message.returncode})", style="bold green" if message.returncode == 0 else "bold yellow"))
        self._show_output_command(out, "serve it with (the output's serve.sh does the same; v validates it here)")
        self._show_batched_test(doc.get("batched_test"), status, out)

    def _show_batched_test(self, harness, status: Static, out) -> None:
        """The harness entry appended to the model YAML (its text in the log), or why not."""
        if not isinstance(harness, dict):
            return
        if "error" in harness:
            status.update(Text.assemble((f"✓ written: {out}", "bold green"), "\n",
                                        (f"✗ batched_test entry not appended: {harness['error']}", "bold red")))
            self._log(Text(f"batched_test entry not appended: {harness['error']}", style="bold red"))
            return
        names = ", ".join(repr(n) for n in harness.get("appended") or [])
        config = harness.get("config")
        said = (f"created {config} with the batched_test entry {names}" if harness.get("created")
                else f"batched_test entry {names} appended to {config}")
        status.update(Text.assemble((f"✓ written: {out}", "bold green"), "\n", (said, "green")))
        self._log(Text(said + ":", style="bold green"))
        for line in str(harness.get("text") or "").splitlines():
            self._log(Text(line))

    def action_cancel(self) -> None:
        if not self.running:
            return
        self._cancelled = True
        self.app.terminate_child(self.process)
        self.query_one("#run-status", Static).update(Text("cancelling…", style="yellow"))


def _counted(entries: list[dict]) -> str:
    """``9 passed · 2 not applicable``: how many of each status, in the order they come."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.get("status", "?")] = counts.get(e.get("status", "?"), 0) + 1
    return " · ".join(f"{n} {status}" for status, n in counts.items())


def _validated_output(argv: list[str]) -> str | None:
    """The output a `mxtrim validate OUT …` child validates."""
    return argv[argv.index("validate") + 1] if "validate" in argv[:-1] else None


def _is_output(path) -> bool:
    return path is not None and (Path(path) / "mxtrim-plan.json").is_file()


def _json_doc(stdout: str) -> dict:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _written_despite_harness(doc: dict) -> bool:
    """A trim that failed only at appending the harness entry: the output is written."""
    harness = doc.get("batched_test")
    return bool(doc.get("output")) and isinstance(harness, dict) and "error" in harness


class ValidationView:
    """The validation rows as they fill in, one line each; once it is done, the coverage rows'
    executed paths (``paths``), one line each, as `mxtrim validate` prints them."""

    MARKS = {"passed": ("✓", "green"), "failed": ("✗", "bold red"), "unverified": ("·", "yellow"), "not applicable": ("-", "dim"),
             "not comparable": ("≠", "yellow"), "differs": ("≠", "bold yellow")}
    PATH_STYLES = {"executed": "green", "not executed": "yellow", "unverified": "dim"}

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.paths: list[dict] = []

    @classmethod
    def from_json(cls, doc: dict) -> "ValidationView":
        view = cls()
        view.rows = list(doc.get("rows", []))
        view.paths = [p for p in doc.get("paths") or [] if isinstance(p, dict)]
        return view

    def add(self, row: dict) -> None:
        self.rows = [r for r in self.rows if r.get("check") != row.get("check")] + [row]

    def render(self) -> Text:
        text = Text()
        for r in self.rows:
            mark, style = self.MARKS.get(r.get("status"), ("?", ""))
            text.append(f"{mark} {r.get('check')}: {r.get('status')}", style=style)
            if r.get("status") in ("differs", "not comparable") or (r.get("check", "").startswith("equivalence") and r.get("status") == "passed"):
                text.append(f" — {r.get('detail', '')[:300]}", style=style)
            verdict = r.get("verdict")
            if verdict:
                text.append(f" — {verdict['class']}", style="bold red")
                for line in verdict.get("evidence", [])[:2]:
                    text.append(f"\n    {line[:300]}", style="red")
            text.append("\n")
        if self.paths:
            from ...core.write.report import PATHS_TITLE, path_line

            text.append("\n" + PATHS_TITLE + "\n", style="bold")
            for p in self.paths:
                text.append(path_line(p) + "\n", style=self.PATH_STYLES.get(p.get("status"), ""))
        text.rstrip()
        return text

    @staticmethod
    def headline(doc: dict) -> Text:
        """The engine's verdict (as `mxtrim validate` prints it): passed or the first failure, and
        the settings served against those the output was planned for."""
        from ...core.validate.headline import verdict

        passed, lines = verdict(doc)
        text = Text(lines[0], style="bold green" if passed else "bold red")
        for line in lines[1:]:
            text.append("\n" + line, style="yellow" if "not tested" in line else "green")
        return text
