"""Ctrl-C and SIGTERM that are never lost.

Python raises KeyboardInterrupt from a signal handler wherever the main thread happens to be;
when that is inside a finalizer (a file or a mapping being closed by the garbage collector),
the exception is printed as "ignored" and the run carries on. So the CLI's handlers also
record the signal, and the steps that publish a result call :func:`check` first: an
interruption swallowed that way still stops the run before anything is renamed into place,
and its "ignored" traceback is not printed.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

_received: list[int] = []


def _handler(signum, frame):
    _received.append(signum)
    raise KeyboardInterrupt


def _unraisable(info) -> None:
    if isinstance(info.exc_value, KeyboardInterrupt):
        return  # recorded by _handler; check() raises it again where it cannot be lost
    sys.__unraisablehook__(info)


def install() -> None:
    """SIGTERM unwinds like Ctrl-C; Ctrl-C keeps being ignored when it was (nohup, a
    background job)."""
    signal.signal(signal.SIGTERM, _handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
    sys.unraisablehook = _unraisable


def check() -> None:
    """Raise KeyboardInterrupt if a signal arrived whose exception may have been swallowed."""
    if _received:
        raise KeyboardInterrupt


@contextmanager
def deferred():
    """Ctrl-C and SIGTERM held back, not lost, for a step that must not be cut in two (a file
    created and removed): a signal that arrives meanwhile raises KeyboardInterrupt once the
    step is done. Only in the main thread, where handlers can be set; a signal being ignored
    (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        if previous is not signal.SIG_IGN:
            held[sig] = previous
            signal.signal(sig, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    if arrived:
        _received.extend(arrived)
        raise KeyboardInterrupt
