"""Child processes: how every child mxtrim starts is started (:func:`start`, :func:`run`: a
program the system refuses to start is one :class:`NotStarted` line), that they end with their
parent (shared by the extraction script's runner and the vLLM server runner), and how they are
stopped (:func:`stop_group`)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

from .errors import InputError


def os_reason(exc: OSError) -> str:
    """An operating-system error as a reason in a sentence: "permission denied", "exec format
    error", "no such file or directory"."""
    text = str(exc.strerror or exc)
    return text[:1].lower() + text[1:]


class NotStarted(InputError):
    """A program the system refused to start (no execute permission, not a program, a folder
    mounted without exec rights, a ``#!`` line naming what is not there...): one line naming
    it and the system's reason, ``PROGRAM: cannot be used: REASON``."""

    def __init__(self, program: str, exc: OSError):
        self.program = str(program)
        self.reason = f"cannot be used: {os_reason(exc)}"
        super().__init__(self.program, self.reason)


def start(argv: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)``: every child mxtrim starts (a judging interpreter,
    vLLM's, a server, the extraction script) is started here, so that a start the system
    refuses is a :class:`NotStarted`, never an ``OSError`` from deep in subprocess."""
    try:
        return subprocess.Popen(argv, **kwargs)
    except OSError as exc:
        raise NotStarted(kwargs.get("executable") or argv[0], exc) from None


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, **kwargs)`` whose refused start is a :class:`NotStarted` (as
    :func:`start`); a timeout is still ``subprocess.TimeoutExpired``."""
    try:
        return subprocess.run(argv, **kwargs)
    except OSError as exc:
        raise NotStarted(kwargs.get("executable") or argv[0], exc) from None


def parent_death_signal(sig: signal.Signals = signal.SIGTERM):
    """A ``preexec_fn`` (Linux; None elsewhere): the child gets ``sig`` when the thread that
    started it ends — the mxtrim killed with SIGKILL included. Only the child itself (a
    server's pid record covers its own children). Only in a single-threaded process (the
    CLI's: the thread that starts the child outlives it); with other threads running, a
    killed run's leftovers are found by the next run instead."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return None  # preexec_fn after fork in a process with threads may deadlock
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    PR_SET_PDEATHSIG = 1

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # it died before the prctl took effect
            os.kill(os.getpid(), sig)

    return preexec


KILL_WAIT = 10.0  # seconds a SIGKILLed group is waited for


def stop_group(pid: int, steps=((signal.SIGTERM, 5.0),), *, exited, hurry=lambda: False, also=None) -> str | None:
    """Stop the process group ``pid`` leads (every child mxtrim starts leads its own session):
    each ``(signal, seconds)`` of ``steps`` in turn while it runs, then SIGKILL. ``exited(seconds,
    hurry)`` waits up to that long, giving up early once ``hurry()`` is true, and says whether
    it has exited; with ``hurry()`` true the steps before SIGKILL are skipped. ``also(sig)``
    signals what the group does not hold (a recorded server's processes). Returns the name of
    the last signal sent (None: it had exited already). Used for every child that has something
    to clean up: the trim the wizard runs, the extraction script, the vLLM server, a leftover
    server (the transformers check child holds nothing and is killed outright)."""
    never = lambda: False  # noqa: E731 - the SIGKILL wait is not cut short
    used = None
    for sig, seconds in (*steps, (signal.SIGKILL, KILL_WAIT)):
        if exited(0, never):
            break
        if sig != signal.SIGKILL and hurry():
            continue
        used = sig.name
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:  # not ours to signal as a group: the leader alone
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if also is not None:
            also(sig)
        if exited(seconds, hurry if sig != signal.SIGKILL else never):
            break
    return used


def terminate(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the child's process group (it cleans up), SIGKILL if it has not exited within
    ``grace`` seconds."""
    stop_group(proc.pid, ((signal.SIGTERM, grace),), exited=popen_exited(proc))


def popen_exited(proc):
    """``exited(seconds, hurry)`` for :func:`stop_group` of a ``subprocess.Popen``."""

    def exited(seconds: float, hurry) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if proc.poll() is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or hurry():
                return False
            try:
                proc.wait(timeout=min(0.2, left))
                return True
            except subprocess.TimeoutExpired:
                continue

    return exited
