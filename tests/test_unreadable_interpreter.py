"""An interpreter mxtrim is pointed at (the judge of the transformers checks, vLLM's) whose link
leads through a folder this user may not search: `plan` and `trim` say it cannot be used and go
on, never a traceback.

The user is a real unprivileged process: as root (which ignores permissions) the CLI runs with
the two capabilities that let root read anywhere dropped (setpriv), so the kernel refuses it
exactly as it refuses another user; as any other user it runs as it is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv
from mxtrim_tui.demo import build_demo

DROP = "-dac_override,-dac_read_search"


def _unprivileged(locked: Path) -> list[str]:
    """The prefix that runs a command as a process the permissions apply to (skip when there is
    no such way here)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to run as a process permissions apply to")
    prefix = [setpriv, f"--bounding-set={DROP}", f"--inh-caps={DROP}"]
    probe = subprocess.run(prefix + [sys.executable, "-c", f"import os; os.listdir({str(locked)!r})"],
                           capture_output=True, text=True, timeout=60)
    if "PermissionError" not in probe.stderr:
        pytest.skip(f"setpriv could not drop root's read-anywhere capabilities here: {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def locked_python(tmp_path):
    """``env/bin/python``, a link to ``locked/python3`` (a link to this interpreter) in a folder
    of mode 000: it may be named, but where it points cannot be read."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "python3").symlink_to(sys.executable)
    (tmp_path / "env" / "bin").mkdir(parents=True)
    python = tmp_path / "env" / "bin" / "python"
    python.symlink_to(Path("..") / ".." / "locked" / "python3")
    locked.chmod(0)
    yield python, locked
    locked.chmod(0o755)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def _run(prefix: list[str], *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # wide lines: rich breaks a word longer than the line (a temporary path under pytest-xdist's
    # per-worker folder) with a space, which no joining of the words undoes
    return subprocess.run(prefix + cli_argv(*args), capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "COLUMNS": "400", **(env or {})}, timeout=600)


def _said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def test_plan_says_the_named_judge_cannot_be_used_and_checks_with_its_own(demo, locked_python):
    python, locked = locked_python
    proc = _run(_unprivileged(locked), "plan", str(demo), "--python", str(python))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert f"--python {python} cannot be used: permission denied" in said


@pytest.mark.parametrize("mode", ["dummy", "weights"])
def test_trim_with_an_unreadable_vllm_interpreter_writes_and_says_so(demo, locked_python, tmp_path, mode):
    python, locked = locked_python
    out = tmp_path / "out"
    proc = _run(_unprivileged(locked), "trim", str(demo), "--mode", mode, "--out", str(out),
                env={"MXTRIM_VLLM_PYTHON": str(python)})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert (out / "README.md").is_file() and (out / "config.json").is_file()
    said = _said(proc)
    assert f"$MXTRIM_VLLM_PYTHON {python} cannot be used: permission denied" in said
