"""An interpreter (or server command) mxtrim would start that the system refuses to start: the
judge of the transformers checks named by --python or $MXTRIM_VLLM_PYTHON, mxtrim's own
interpreter, vLLM's interpreter, a --launcher. `plan` and `trim` say which one could not be
used and why, in one line, and go on unchecked; `validate` reports the server as not started.
Never a traceback.

The refusals are the kernel's own, and hold for root too: a file that is neither a program nor
a ``#!`` script is refused with "exec format error" (ENOEXEC), a file with no execute bit for
anyone with "permission denied" (EACCES)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv, small_llama_output
from mxtrim_tui.demo import build_demo
from test_vllm_discovery import make_env


def _not_a_program(path: Path) -> Path:
    """An executable file the kernel will not run: no ELF header, no ``#!`` line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this file is no program and no script\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def refused_python(tmp_path) -> Path:
    return _not_a_program(tmp_path / "judge" / "bin" / "python")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def _run(*args: str, env: dict | None = None, argv0: str | None = None) -> subprocess.CompletedProcess:
    """``mxtrim ARGS``; ``argv0``: the interpreter runs under that name, which becomes its
    ``sys.executable`` (the name mxtrim starts itself again by)."""
    argv = cli_argv(*args)
    if argv0 is not None:
        argv[0] = argv0
    # wide lines: rich would break a long temporary path with a space
    # only the interpreters each test names: none from the suite's environment
    base = {k: v for k, v in os.environ.items() if k != "MXTRIM_VLLM_PYTHON"}
    return subprocess.run(argv, executable=sys.executable, capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**base, "COLUMNS": "400", "MXTRIM_CHECK_CACHE": "0", **(env or {})})


def _said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def _trim_args(demo: Path, command: str, out: Path) -> list[str]:
    return ["plan", str(demo)] if command == "plan" else ["trim", str(demo), "--mode", command, "--out", str(out)]


@pytest.mark.parametrize("command", ["plan", "dummy", "weights"])
def test_a_named_judge_the_system_will_not_start_is_passed_over(demo, refused_python, tmp_path, command):
    out = tmp_path / "out"
    proc = _run(*_trim_args(demo, command, out), "--python", str(refused_python))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert f"--python {refused_python} cannot be used: exec format error" in said, said[-3000:]
    assert "checked against transformers: exact" in said  # mxtrim's own transformers judged instead
    if command != "plan":
        assert (out / "README.md").is_file() and (out / "config.json").is_file()
        assert f"{refused_python} cannot be used: exec format error" in (out / "README.md").read_text()


def test_an_environment_judge_the_system_will_not_start_says_why(demo, refused_python, tmp_path):
    out = tmp_path / "out"
    proc = _run("trim", str(demo), "--mode", "dummy", "--out", str(out), env={"MXTRIM_VLLM_PYTHON": str(refused_python)})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    # why it was passed over, not a guess at what it holds
    assert f"$MXTRIM_VLLM_PYTHON {refused_python} cannot be used: exec format error" in said, said[-3000:]
    assert (out / "config.json").is_file()


@pytest.fixture
def refused_own(tmp_path) -> str:
    """An environment of this interpreter whose ``bin/python`` has no execute bit for anyone:
    mxtrim runs under that name (``argv0``) but cannot start it again, as with an interpreter
    run through the dynamic loader from a folder mounted without exec rights."""
    env = tmp_path / "own"
    python = env / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_bytes(b"")
    python.chmod(0o644)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (env / "pyvenv.cfg").write_text(f"home = {os.path.dirname(os.path.realpath(sys.executable))}\n"
                                    f"include-system-site-packages = false\nversion = {sys.version.split()[0]}\n")
    (env / "lib" / f"python{version}").mkdir(parents=True)
    (env / "lib" / f"python{version}" / "site-packages").symlink_to(sysconfig.get_paths()["purelib"])
    seen = subprocess.run([str(python), "-c", "import sys, mxtrim_tui; print(sys.executable)"], executable=sys.executable,
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert seen.stdout.strip() == str(python), seen.stderr  # mxtrim would start this name again
    return str(python)


@pytest.mark.parametrize("command", ["plan", "dummy"])
def test_mxtrims_own_interpreter_the_system_will_not_start_leaves_the_plan_unchecked(demo, refused_own, tmp_path, command):
    out = tmp_path / "out"
    proc = _run(*_trim_args(demo, command, out), argv0=refused_own)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert f"{refused_own}: cannot be used: permission denied" in said, said[-3000:]
    assert "not checked" in said
    if command != "plan":
        assert (out / "config.json").is_file()
        assert f"{refused_own}: cannot be used: permission denied" in (out / "README.md").read_text()


def test_a_real_weight_copy_whose_interpreter_will_not_start_is_one_error(demo, refused_own, tmp_path):
    """The copy runs in a process of mxtrim's own interpreter: refused, it is one error line
    naming that interpreter, and nothing is left behind."""
    out = tmp_path / "out"
    proc = _run("trim", str(demo), "--mode", "weights", "--out", str(out), argv0=refused_own)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mxtrim: error:")]
    assert errors == [f"mxtrim: error: extract_weights.py could not be started: {refused_own}: cannot be used: permission denied"], \
        proc.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_vllms_named_interpreter_the_system_will_not_start_is_one_error(tmp_path, refused_python):
    out = small_llama_output(tmp_path, "dummy")
    proc = _run("validate", str(out), "--python", str(refused_python))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{refused_python}: cannot be used: exec format error (from --python)" in lines[0], proc.stderr


def test_a_launcher_the_system_will_not_start_is_a_server_that_did_not_start(tmp_path):
    out = small_llama_output(tmp_path, "dummy")
    python = make_env(tmp_path / "vllm-env", vllm="0.32.0")  # a stand-in: the offline checks only import it
    launcher = _not_a_program(tmp_path / "launcher" / "serve")
    proc = _run("validate", str(out), "--serve", "--python", python, "--device", "cpu", "--timeout", "20",
                "--launcher", str(launcher), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    rows = {row["check"]: row for row in json.loads(proc.stdout)["rows"]}
    start = rows["start-up"]
    assert start["status"] == "failed" and f"{launcher}: cannot be used: exec format error" in start["detail"], start
    assert rows["generation"]["status"] == "unverified", rows["generation"]


def test_outputs_validated_side_by_side_by_an_interpreter_that_will_not_start_are_not_started(tmp_path, refused_own):
    """``validate --jobs`` runs each output in a child of mxtrim's own interpreter: refused, each
    output's row says it was not started and why, and the matrix is written."""
    first = small_llama_output(tmp_path, "dummy")
    second = tmp_path / "copy" / first.name
    shutil.copytree(first, second)
    python = make_env(tmp_path / "vllm-env", vllm="0.32.0")
    proc = _run("validate", str(first), str(second), "--jobs", "2", "--python", python, "--device", "cpu", "--json",
                "--matrix", str(tmp_path), argv0=refused_own)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert len(rows) == 2 and all(f"{refused_own}: cannot be used: permission denied" in json.dumps(row) for row in rows), rows
    for out in (first, second):
        assert f"{out}: not started: {refused_own}: cannot be used: permission denied" in proc.stderr, proc.stderr
    assert (tmp_path / "validation-matrix.json").is_file()


def test_the_offline_probe_of_an_interpreter_refused_since_it_was_found_is_a_failed_row(tmp_path, refused_python):
    from mxtrim_tui.core.validate.run import offline_checks

    out = small_llama_output(tmp_path, "dummy")
    environment, rows = offline_checks(out, str(refused_python), False)
    assert environment == {} and len(rows) == 1 and rows[0].status == "failed", rows
    assert f"{refused_python}: cannot be used: exec format error" in rows[0].detail


def _validate_with_no_temporary_folder(tmp_path: Path, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    """``mxtrim validate ARGS`` in a process whose temporary folder, once chosen, refuses every
    folder made in it (as a full or read-only one does): it is a file."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("the temporary folder mxtrim was given is this file\n")
    code = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]; "
            "from mxtrim_tui.cli.main import main; sys.exit(main(sys.argv[2:]))")
    proc = subprocess.run([sys.executable, "-c", code, str(blocker), "validate", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600, env={k: v for k, v in os.environ.items() if k != "MXTRIM_VLLM_PYTHON"})
    assert "Traceback" not in proc.stderr, proc.stderr
    return blocker, proc


def test_outputs_validated_side_by_side_with_no_temporary_folder_are_one_error(tmp_path):
    first = small_llama_output(tmp_path, "dummy")
    second = tmp_path / "copy" / first.name
    shutil.copytree(first, second)
    python = make_env(tmp_path / "vllm-env", vllm="0.32.0")
    blocker, proc = _validate_with_no_temporary_folder(tmp_path, str(first), str(second), "--jobs", "2",
                                                       "--python", python, "--device", "cpu", "--matrix", str(tmp_path))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mxtrim: error: {blocker}: cannot make the folder") and lines[0].endswith(
        "not a directory"), proc.stderr


def test_a_server_whose_temporary_folder_cannot_be_made_did_not_start(tmp_path):
    """A temporary folder mxtrim cannot make anything in (full, read-only, or not a folder):
    the server's own scratch folder is refused, so the server is not started, the start-up row
    says where and why, and there is no traceback."""
    out = small_llama_output(tmp_path, "dummy")
    python = make_env(tmp_path / "vllm-env", vllm="0.32.0")
    blocker, proc = _validate_with_no_temporary_folder(tmp_path, str(out), "--serve", "--python", python,
                                                       "--device", "cpu", "--timeout", "20", "--json")
    assert proc.returncode == 1, proc.stderr
    rows = {row["check"]: row for row in json.loads(proc.stdout)["rows"]}
    start = rows["start-up"]
    assert start["status"] == "failed", start
    assert f"temporary folder could not be made in {blocker}: not a directory" in start["detail"], start
    assert rows["generation"]["status"] == "unverified", rows["generation"]
    # the server's log says so too, under the command that was not run
    log = (out / "logs" / "serve.log").read_text()
    assert "[mxtrim] the server could not be started: its temporary folder could not be made" in log, log
