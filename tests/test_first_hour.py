"""A newcomer's first hour with the command line (issue 34): what `mxtrim` prints for a plan
that keeps nothing, a validation's terminal (progress, not vLLM's log; the log's last lines on
a failure; the memory line once), the interpreter and paths recorded as absolute paths, the
workspace view without a vLLM and at 80 columns, the environment an output's README names, and
one wording for a path that is not a directory. No vLLM needed: servers are stand-ins started
through --launcher, the offline checks run in a small environment holding a package named vllm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import cli_argv, run_cli, small_llama_output
from test_validate_flow import STAND_IN
from test_vllm_discovery import make_env

# before the stand-in of test_validate_flow: "chatty" logs 200 lines (and the memory figures
# the CPU build logs) then serves; "crash" logs 200 lines and exits 1
CHATTY = r'''
import sys
if sys.argv[1] in ("chatty", "crash"):
    for i in range(200):
        print(f"INFO 12-04 18:00:00 [loader.py:1] loading step {i}", flush=True)
    print("INFO 12-04 18:00:00 [cpu_worker.py:1] Explicitly set (0.06/31.0) GiB for KV cache on node 0", flush=True)
    print("INFO 12-04 18:00:00 [kv_cache_utils.py:1] CPU KV cache size: 2,048 tokens, "
          "Maximum concurrency for 256 tokens per request: 8.00x", flush=True)
if sys.argv[1] == "crash":
    print("ERROR 12-04 18:00:01 [core.py:1] RuntimeError: the last words of a crashing server", flush=True)
    sys.exit(1)
'''


def clean_env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MXTRIM_VLLM_PYTHON", "COLUMNS")}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    return env | extra


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("first-hour")
    script = root / "stand_in.py"
    script.write_text(CHATTY + STAND_IN)
    return {"root": root, "out": small_llama_output(root, "dummy"), "script": script,
            "python": make_env(root / "vllm-env", vllm="0.32.0")}


def validate_text(setup, tmp_path, mode: str, out: Path | None = None) -> subprocess.CompletedProcess:
    launcher = f"{sys.executable} {setup['script']} {mode}"
    return subprocess.run(cli_argv("validate", str(out or setup["out"]), "--serve", "--python", setup["python"], "--device", "cpu",
                                   "--timeout", "20", "--launcher", launcher),
                          capture_output=True, text=True, timeout=180, env=clean_env(tmp_path))


# --- plan ------------------------------------------------------------------------------------
def test_a_selection_that_keeps_nothing_is_one_error_and_no_plan(setup):
    source = setup["root"] / "llama"
    r = run_cli("plan", str(source), "--keep", "99")
    assert r.returncode == 1
    assert r.stdout == "", r.stdout[:2000]  # no plan of 0 layers
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mxtrim: error: text: layer(s) 99 do not exist"), r.stderr
    assert r.stderr.count("99 do not exist") == 1
    # a plan that can be shown, but not written (TP not dividing the heads): shown, its error said once
    r = run_cli("plan", str(source), "--keep", "0", "--tp", "3", env={"COLUMNS": "200"})
    assert r.returncode == 1 and "Layer mapping" in r.stdout
    assert "does not divide" not in r.stdout and len(r.stderr.strip().splitlines()) == 1, r.stdout[-2000:] + r.stderr
    assert r.stderr.startswith("mxtrim: error: --tp: TP=3 does not divide the 4 attention heads")


# --- validate's terminal ---------------------------------------------------------------------
@pytest.mark.slow
def test_validate_shows_progress_not_the_server_log_and_the_memory_line_once(setup, tmp_path):
    r = validate_text(setup, tmp_path, "chatty")
    assert "start-up: passed" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "loading step" not in r.stderr and "loading step" not in r.stdout  # kept in the log file
    log = (setup["out"] / "logs" / "serve.log").read_text()
    assert "loading step 199" in log
    assert f"(its log: {setup['out'] / 'logs' / 'serve.log'})" in r.stderr and "… start-up" in r.stderr
    assert len(r.stderr.splitlines()) < 20, r.stderr
    assert r.stdout.count("KV tokens") == 1, r.stdout  # the memory row, not a second memory line


@pytest.mark.slow
def test_a_failed_start_shows_the_last_lines_of_the_log(setup, tmp_path):
    r = validate_text(setup, tmp_path, "crash")
    assert r.returncode == 1 and "start-up: failed" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "the last words of a crashing server" in r.stderr
    assert "loading step 150" not in r.stderr and "loading step 199" in r.stderr  # the tail, not all of it
    assert "start-up failed; the server's last 15 log lines" in r.stderr


# --- absolute paths --------------------------------------------------------------------------
def test_a_relative_python_is_recorded_as_an_absolute_path(setup, tmp_path):
    """validation.json, the README and the matrix name the interpreter so that it can be found
    from anywhere; the matrix's rows are absolute paths though the folder was given relative."""
    models = tmp_path / "ws" / "models"
    models.mkdir(parents=True)
    a = Path(shutil.copytree(setup["out"], models / "a"))
    for stale in ("validation.json", "logs"):
        if (a / stale).is_dir():
            shutil.rmtree(a / stale)
        elif (a / stale).exists():
            (a / stale).unlink()
    shutil.copytree(a, models / "b")
    relative = os.path.relpath(setup["python"], tmp_path)
    env = clean_env(tmp_path)
    r = subprocess.run(cli_argv("validate", "--all", "ws/models", "--python", relative, "--json"),
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    # (the offline loads fail in the stand-in environment: its vllm is a name only)
    assert r.stdout.strip(), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["python"] == setup["python"]
    assert [row["output"] for row in doc["rows"]] == [str(models / "a"), str(models / "b")]
    assert f"With `{setup['python']}`" in (models / "validation-matrix.md").read_text()
    run = json.loads((a / "validation.json").read_text())["runs"][-1]
    assert run["python"] == setup["python"]
    readme = (a / "README.md").read_text()
    assert f"with `{setup['python']}`" in readme and f"with `{relative}`" not in readme


@pytest.mark.slow
def test_a_copied_output_is_validated_anew_saying_why(setup, tmp_path):
    """Its validation.json came with the copy: the run it holds was made for the folder copied
    from, so it does not answer for the copy."""
    env = clean_env(tmp_path)
    a = Path(shutil.copytree(setup["out"], tmp_path / "a"))
    r = run_cli("validate", str(a), "--python", setup["python"], env=env)
    assert "recorded in" in r.stdout, r.stderr[-2000:]
    b = Path(shutil.copytree(a, tmp_path / "b"))
    r = subprocess.run(cli_argv("validate", str(a), str(b), "--python", setup["python"], "--matrix", str(tmp_path), "--json"),
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.stdout.strip(), r.stderr[-2000:]
    states = {Path(row["output"]).name: row["state"] for row in json.loads(r.stdout)["rows"]}
    assert states == {"a": "reused", "b": "validated"}
    assert f"{b}: its last recorded run was made for {a} (copied or moved since): validated anew" in r.stderr


# --- examples --------------------------------------------------------------------------------
@pytest.fixture()
def workspace(setup, tmp_path):
    models = tmp_path / "tools" / "batched_test" / "models"
    names = ["deepseek-v3-0324-dummy-4layers-mtp", "qwen3-235b-a22b-instruct-2507-weights-2layers"]
    for name in names:
        out = Path(shutil.copytree(setup["out"], models / name))
        run = {"started": "2026-11-20 10:00:00 UTC", "ok": True, "mode": "dummy", "python": "/gone/bin/python", "output": str(out),
               "rows": [], "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.32.0"}}}}
        (out / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [run]}))
    return models, names


def mxtrim_without_vllm(tmp_path: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess:
    """``mxtrim ARGS`` from a copy of mxtrim that is no checkout (no .venv-vllm beside it) in a
    folder without one: no vLLM anywhere."""
    from test_vllm_discovery import copy_of_mxtrim, mxtrim_from

    copy = copy_of_mxtrim(tmp_path / "installed", checkout=False)
    return mxtrim_from(copy, *args, cwd=tmp_path, env=clean_env(tmp_path, COLUMNS=str(columns)))


def test_examples_without_a_vllm_reports_no_drift_to_nothing(workspace, tmp_path):
    models, names = workspace
    r = mxtrim_without_vllm(tmp_path, "examples", str(models))
    assert r.returncode == 0, r.stderr
    assert "None" not in r.stdout and "→" not in r.stdout, r.stdout
    assert "no vLLM environment found: drift not compared" in r.stdout
    doc = json.loads(mxtrim_without_vllm(tmp_path, "examples", str(models), "--json").stdout)
    assert all(e["drift"] == {} for e in doc["examples"]) and doc["environment_now"]["versions"] is None


def test_examples_at_80_columns_keeps_each_name_on_one_line(workspace, tmp_path):
    models, names = workspace
    r = mxtrim_without_vllm(tmp_path, "examples", str(models), columns=80)
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), r.stdout
    for name in names:
        assert any(line.strip() == name for line in lines), r.stdout
    # wide enough, the table
    r = mxtrim_without_vllm(tmp_path, "examples", str(models), columns=200)
    assert any(line.strip().startswith(names[1]) and "dummy" in line for line in r.stdout.splitlines()), r.stdout


def test_an_explicit_python_without_vllm_shows_absent_not_none(workspace, tmp_path):
    models, _ = workspace
    r = run_cli("examples", str(models), "--python", sys.executable, env={"COLUMNS": "200"})
    assert "vllm 0.32.0 → absent" in r.stdout and "None" not in r.stdout, r.stdout


# --- the output's README ---------------------------------------------------------------------
def test_the_readme_names_the_environment_validation_will_use(setup, tmp_path):
    """Run from a checkout whose .venv-vllm holds vLLM (mxtrim's own interpreter has none): the
    README names that environment, not mxtrim's lack of vLLM."""
    from test_vllm_discovery import copy_of_mxtrim, mxtrim_from

    copy = copy_of_mxtrim(tmp_path / "checkout", checkout=True)
    python = make_env(copy / ".venv-vllm", vllm="0.32.0")
    out = tmp_path / "out"
    r = mxtrim_from(copy, "trim", str(setup["root"] / "llama"), "--keep", "0", "--mode", "dummy", "--out", str(out),
                    cwd=tmp_path, env=clean_env(tmp_path))
    assert r.returncode == 0, r.stderr
    section = (out / "README.md").read_text().partition("## Environment seen")[2].split("\n## ", 1)[0]
    assert f"Validation environment (`mxtrim validate`): vLLM 0.32.0 at `{python}` (found as .venv-vllm of this checkout)" in section, section
    assert "vllm: not installed" not in section


# --- errors ----------------------------------------------------------------------------------
def test_a_path_that_is_not_a_directory_gets_one_wording_everywhere(setup, tmp_path):
    missing, a_file = tmp_path / "missing", tmp_path / "file"
    a_file.write_text("x")
    for command in (["inspect"], ["plan"], ["validate"]):
        for path, problem in ((missing, "no such directory"), (a_file, "is not a directory")):
            r = run_cli(*command, str(path))
            assert r.returncode == 1 and r.stderr == f"mxtrim: error: {path}: {problem}\n", (command, r.stderr)


@pytest.mark.slow
def test_a_weights_trim_of_a_source_without_weights_names_the_source(setup, tmp_path):
    src = tmp_path / "config-only"
    src.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (setup["root"] / "llama" / name).exists():
            shutil.copy(setup["root"] / "llama" / name, src / name)
    r = run_cli("trim", str(src), "--keep", "0", "--mode", "weights", "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(f"mxtrim: error: the source {src} has no weights"), r.stderr
    assert not (tmp_path / "out").exists()


def test_transformers_says_nothing_on_the_terminal_while_the_original_loads(setup, capfd):
    from mxtrim_tui.core.validate.equivalence import reference_logits

    plan = json.loads((setup["out"] / "mxtrim-plan.json").read_text())
    logits = reference_logits(Path(plan["source"]), [0], [[1, 2, 3]], [[4, 5]])
    assert len(logits[0]) == 2
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
