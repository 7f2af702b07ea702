"""The children the wizard runs: the command line of a write (stopped by
``core.child_process.terminate``)."""

from __future__ import annotations

import sys


def trim_argv(plan_file, out, batched_test_config=None) -> list[str]:
    """`mxtrim trim --plan FILE`: the wizard's write runs the plan file it saved (with
    ``batched_test_config``: its harness entry appended to that model YAML)."""
    argv = [sys.executable, "-m", "mxtrim_tui", "trim", "--plan", str(plan_file), "--out", str(out), "--progress", "--json"]
    return argv + (["--batched-test-config", str(batched_test_config)] if batched_test_config is not None else [])
