"""The children the wizard runs: the command line of a write (stopped by
``core.child_process.terminate``)."""

from __future__ import annotations

import sys


def trim_argv(plan_file, out) -> list[str]:
    """`mxtrim trim --plan FILE`: the wizard's write runs the plan file it saved."""
    return [sys.executable, "-m", "mxtrim_tui", "trim", "--plan", str(plan_file), "--out", str(out), "--progress", "--json"]
