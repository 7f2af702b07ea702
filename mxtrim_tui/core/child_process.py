"""Child processes that end with their parent: shared by the extraction script's runner and
the vLLM server runner."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading


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
