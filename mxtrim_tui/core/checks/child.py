"""One child process for both transformers checks, so torch is imported once per run.

``mxtrim plan`` / ``trim`` check the plan against transformers (before any byte is written)
and a real-weight trim checks the planned output's structure (while the script copies). Both
import torch and transformers, seconds of work and a few hundred MB. They run in one child
(``python -I -m mxtrim_tui.core.checks.child``), started on the first check a run needs and
kept for the next: requests and answers are JSON lines on its stdin / stdout. This module is
the asking half (start, send, receive); the child's half, which answers each request with the
check it names, is :mod:`.child_dispatch`, so the checks that ask import this module and the
dispatcher imports them, never the other way round. The child is in
its own session (a terminal's Ctrl-C reaches mxtrim, which stops it), gets a parent-death
signal where mxtrim can set one, and is stopped when mxtrim exits. Verdicts already
remembered (:mod:`.cache`) need no child at all. A judging interpreter the system refuses to
start is a child that answers nothing: each check it was asked is "not checked", with the
interpreter and the system's reason as the child's last words.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..child_process import NotStarted, parent_death_signal, start

LIMIT = 900.0  # seconds one check may take (the largest sources take well under a minute)


PACKAGE = Path(__file__).resolve().parents[2]  # mxtrim_tui/
# How the child starts in any interpreter: mxtrim_tui is loaded from this very package by its
# path (the judging interpreter may have no mxtrim, or another version of it) and nothing else
# of mxtrim's environment is put on the path, so the judge's own transformers and torch are the
# ones imported. The engine needs only the standard library beside them.
BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('mxtrim_tui', {init!r}, submodule_search_locations=[{pkg!r}])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules['mxtrim_tui'] = module\n"
    "spec.loader.exec_module(module)\n"
    "from mxtrim_tui.core.checks.child_dispatch import main\n"
    "sys.exit(main())\n"
)


class CheckChild:
    _shared: "CheckChild | None" = None

    @classmethod
    def shared(cls) -> "CheckChild":
        """The run's child in the judging interpreter (:mod:`.judge`), started now if there is
        none, it died, or the judge changed."""
        from .judge import current_judge

        judge = current_judge()
        if cls._shared is not None and (not cls._shared.running or cls._shared.judge != judge):
            cls._shared.close()
        if cls._shared is None:
            cls._shared = cls(judge)
            atexit.register(cls._shared.close)
        return cls._shared

    @classmethod
    def release(cls) -> None:
        """Stop the run's child, if any (its memory is better spent on what follows)."""
        if cls._shared is not None:
            cls._shared.close()

    def __init__(self, judge=None):
        from .judge import Judge

        self.judge = judge or Judge(sys.executable, "mxtrim's own")
        self._err = tempfile.TemporaryFile()  # whatever it says on stderr, never a full pipe
        boot = BOOT.format(init=str(PACKAGE / "__init__.py"), pkg=str(PACKAGE))
        self.not_started = ""  # why the system refused to start it ("PY: cannot be used: ...")
        try:
            self.proc = start(
                [self.judge.python, "-I", "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                start_new_session=True, preexec_fn=parent_death_signal(),
            )
        except NotStarted as exc:
            self.proc = None
            self.not_started = str(exc)
        # What the child said and was not read yet: answers are read from the pipe's fd here,
        # never through a buffered reader, whose buffer select() cannot see (two answers
        # arriving together, a plan verdict and a structure check asked behind it, would
        # leave the second one waiting in that buffer forever).
        self._said = bytearray()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def send(self, request: dict) -> bool:
        if self.proc is None:
            return False
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def receive(self, limit: float = LIMIT, interrupt=None) -> dict | None:
        """The answer to the oldest request not answered yet (None: it failed, or the child died
        or ran out of time); ``interrupt()`` is called every 0.1 s while waiting and may raise."""
        if self.proc is None:
            return None
        deadline = time.monotonic() + limit
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._said:
            if not select.select([fd], [], [], 0.1)[0]:
                if interrupt is not None:
                    interrupt()
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    return None
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the child closed its end: it is gone
                self.close()
                return None
            self._said += chunk
        end = self._said.index(b"\n")
        line = bytes(self._said[:end])
        del self._said[: end + 1]
        try:
            answer = json.loads(line)
        except ValueError:
            self.close()
            return None
        if isinstance(answer, dict) and "error" in answer:
            return None  # the request failed; the child answers the next one
        # every answer of mxtrim's child names its judge: anything else is not one (an
        # interpreter that printed something of its own and exited)
        if not isinstance(answer, dict) or "judge" not in answer:
            self.close()
            return None
        return answer

    def last_words(self) -> str:
        if self.not_started:
            return self.not_started
        self._err.seek(0)
        lines = self._err.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:200] if lines else "no message"

    def close(self) -> None:
        if self.running:
            # nothing to save in it, and torch takes seconds to tear down: stopped outright
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.kill()
            self.proc.wait()
        if CheckChild._shared is self:
            CheckChild._shared = None
