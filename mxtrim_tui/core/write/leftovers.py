"""Hidden temporaries of interrupted runs, recognised by name and removed by the next run.

Every output ``OUT`` is written as ``.OUT.partial-PID`` (and, for real weights, the
extraction script as ``.OUT.extract-PID.py``, which writes its shards into
``..OUT.partial-PID.partial-PID2``) and renamed into place only when complete. A run that
is killed outright (SIGKILL, power loss) cannot remove them; the next run for the same
output does, once no process of that PID is alive. A temporary whose process still runs
is another run in progress and is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path


def _patterns(name: str) -> tuple[re.Pattern, ...]:
    n = re.escape(name)
    return (
        re.compile(rf"\.{n}\.partial-(\d+)"),
        re.compile(rf"\.{n}\.extract-(\d+)\.py"),
        re.compile(rf"\.\.{n}\.partial-(\d+)\.partial-(\d+)"),
    )


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OverflowError:
        return False
    return True


def find_leftovers(out: Path) -> list[Path]:
    """Hidden temporaries of ``out`` left by runs whose processes are gone."""
    out = Path(os.path.abspath(out))
    try:
        names = os.listdir(out.parent)
    except OSError:
        return []
    found = []
    for entry in sorted(names):
        for pattern in _patterns(out.name):
            m = pattern.fullmatch(entry)
            if m and not any(pid_alive(int(pid)) for pid in m.groups()):
                found.append(out.parent / entry)
                break
    return found


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def remove_leftovers(out: Path, emit=None) -> list[Path]:
    """Remove what :func:`find_leftovers` finds; one ``leftover`` event per path."""
    removed = []
    for path in find_leftovers(out):
        remove_path(path)
        if not os.path.lexists(path):
            removed.append(path)
            if emit is not None:
                emit({"event": "leftover", "path": str(path), "status": "removed"})
    return removed


@contextmanager
def signals_held():
    """Ctrl-C and SIGTERM ignored while partial output is removed, so a second signal cannot
    cut the removal short (only in the main thread, where handlers can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
