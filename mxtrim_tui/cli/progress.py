"""How a trim or a validation shows its progress on stderr: JSON lines (``--progress``, what
the wizard reads), or lines for a person, one of them rewritten in place on a terminal."""

from __future__ import annotations

import sys


def progress_printer():
    """JSON lines on stderr, one per event, flushed: what the wizard's run screen reads."""

    from ..core.progress import event_line

    stream = sys.stderr  # this one, even while a library's output is redirected (equivalence)

    def emit(event: dict) -> None:
        stream.write(event_line(event) + "\n")
        stream.flush()

    return emit


class _LiveLines:
    """Lines on a stream (stderr), where on a terminal one line may be shown in place
    (``live``) and is cleared before the next line."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.live = False  # a line shown in place, to be cleared before the next line

    def _say(self, line: str) -> None:
        self._clear()
        print(line, file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
            self.live = False


class WeightsProgress(_LiveLines):
    """What a real-weight trim shows on stderr without --progress when stderr is a terminal
    (over SSH too): a line when the copy starts, one per shard written, the bytes copied
    rewritten in place as they go, and the verification. Written to a log or a pipe, only the
    notice of a leftover removed (as for a dummy trim); stdout (--json) is never touched."""

    def __init__(self, stream=None) -> None:
        super().__init__(stream)
        self.shard = ("", 0, 0)  # the shard being written: name, its number, of how many
        self.checking = False  # the plan's transformers check runs beside the copy, not answered yet

    def _copying(self, done: int, total: int, eta) -> None:
        import shutil

        from ..core.units import human_bytes

        name, n, of = self.shard
        where = f"shard {n}/{of} {name}: " if name else ""
        left = f", about {eta:.0f} s left" if isinstance(eta, (int, float)) and done < total else ""
        line = f"  {where}{human_bytes(done)} / {human_bytes(total)} ({done * 100 // max(total, 1)}%){left}"
        self._clear()
        self.stream.write(line[:max(10, shutil.get_terminal_size().columns - 1)])
        self.stream.flush()
        self.live = True

    def __call__(self, event: dict) -> None:
        from ..core.progress import LeftoverRemoved, ShardWritten, Stage, TensorCopied, parse_event
        from ..core.units import human_bytes

        typed = parse_event(event)
        raw = typed.raw
        if isinstance(typed, LeftoverRemoved):
            self._say(f"mxtrim: removed {typed.path}, left by an interrupted run")
        elif not self.tty:
            return
        elif isinstance(typed, Stage) and typed.name == "extract" and typed.status == "running":
            self._say(f"copying {human_bytes(raw.get('total_bytes') or 0)} in {raw.get('total_tensors', '?')} tensors "
                      f"into {raw.get('shards', '?')} shard(s)")
        elif isinstance(typed, ShardWritten) and typed.status == "start":
            self.shard = (typed.shard, raw.get("index", 0), raw.get("of", 0))
        elif isinstance(typed, TensorCopied):
            self._copying(typed.done_bytes, typed.total_bytes, raw.get("eta_s"))
        elif isinstance(typed, ShardWritten) and typed.status == "done":
            name, n, of = self.shard if self.shard[0] == typed.shard else (typed.shard, raw.get("index", 0), raw.get("of", 0))
            self._say(f"  ✓ shard {n}/{of} {name} written ({human_bytes(typed.bytes)})")
        elif isinstance(typed, Stage) and typed.name == "check":
            self.checking = typed.status == "start"
        elif isinstance(typed, Stage) and typed.name == "extract" and typed.status == "done" and self.checking:
            # the copy is kept only on the check's verdict: a wait of seconds (the check child
            # imports torch), said before it starts
            self._say("checking the plan and the output's structure against transformers")
        elif isinstance(typed, Stage) and typed.name == "verify" and typed.status == "start":
            self._say(f"verifying the copied tensors ({human_bytes(raw.get('total_bytes') or 0)})")
        elif isinstance(typed, Stage) and typed.name == "verify" and typed.status == "done":
            self._say(f"  ✓ {raw.get('hashes_matched', '?')} of {raw.get('tensors', '?')} tensors verified")
        elif isinstance(typed, Stage) and typed.status == "done" and typed.name in ("extract", "write"):
            self._clear()


class ValidationProgress(_LiveLines):
    """What a validation shows on stderr as it goes: the server command and where its log
    goes, a line per stage, on a terminal the server's latest log line (rewritten in place);
    the log itself stays in the file. When a server check fails, the last lines of the log."""

    TAIL = 15

    def __init__(self, stream=None) -> None:
        from collections import deque

        super().__init__(stream)
        self.tail: deque[str] = deque(maxlen=self.TAIL)
        self.log = ""


    def __call__(self, event: dict) -> None:
        import shutil

        from ..core.progress import Check, Serve, ServerLog, Stage, parse_event

        typed = parse_event(event)
        if isinstance(typed, Serve) and typed.status == "starting":
            self.tail.clear()
            self.log = typed.log
            self._say("$ " + " ".join(typed.command))
            if typed.log:
                self._say(f"  (its log: {typed.log})")
        elif isinstance(typed, Serve) and typed.status == "retrying":
            self._clear()
            self._say(f"  starting again: {typed.reason}")
        elif isinstance(typed, Serve):
            self._clear()
        elif isinstance(typed, ServerLog):
            self.tail.append(typed.line)
            if self.tty:
                width = shutil.get_terminal_size().columns
                self._clear()
                self.stream.write(("  | " + typed.line)[:max(10, width - 1)])
                self.stream.flush()
                self.live = True
        elif isinstance(typed, Stage) and typed.status == "running":
            self._say(f"… {typed.name}")
        elif isinstance(typed, Check) and typed.status == "failed" and self.tail and not typed.check.startswith("memory"):
            where = f" (all of it in {self.log})" if self.log else ""
            self._say(f"{typed.check} failed; the server's last {len(self.tail)} log lines{where}:")
            for line in self.tail:
                self._say("  | " + line)
            self.tail.clear()
