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
