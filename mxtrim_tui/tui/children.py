"""The children the wizard runs: the command line of a write, and how one is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys

from ..core.child_process import popen_exited, stop_group


def terminate(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the child's process group (it cleans up), SIGKILL if it does not exit."""
    stop_group(proc.pid, ((signal.SIGTERM, grace),), exited=popen_exited(proc))


def trim_argv(plan_file, out) -> list[str]:
    """`mxtrim trim --plan FILE`: the wizard's write runs the plan file it saved."""
    return [sys.executable, "-m", "mxtrim_tui", "trim", "--plan", str(plan_file), "--out", str(out), "--progress", "--json"]
