"""`mxtrim validate --all` reuses an output's last run only when it answers the request as
asked now: the same interpreter and versions, and, where a server is asked for, the same serve
settings (TP/PP, context, KV budget, dtype, device, launcher, extra arguments, the vLLM
variables of the environment). A run made with other settings is run again, and the matrix and
the CLI say why.

With a stand-in server (a real process answering real HTTP, started through ``--launcher`` by
the code that starts vLLM) that refuses a KV budget under 1 MiB with vLLM's own words, and a
small environment that holds a package named vllm; and once with the real vLLM CPU build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import cli_argv, run_cli
from fixtures.tiny_models import make_servable_llama
from test_validate import VLLM_PYTHON, needs_vllm, servers
from test_validate_flow import STAND_IN
from test_vllm_discovery import make_env

# vLLM 0.32.0's refusal of a KV cache that cannot hold one sequence
# (vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory), as its engine logs it
KV_REFUSAL = ("(EngineCore pid=1) ERROR 12-05 08:09:57 [core.py:1510] ValueError: To serve at least one request with the "
              "model's max seq len (256), (0.01 GiB KV cache is needed, which is larger than the available KV cache memory "
              "(0.00 GiB). Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
              "decreasing `max_model_len` when initializing the engine.")
KV_CHECK = f'''
import sys
if "--kv-cache-memory-bytes" in sys.argv and int(sys.argv[sys.argv.index("--kv-cache-memory-bytes") + 1]) < 2**20:
    print({KV_REFUSAL!r}, flush=True)
    sys.exit(1)
'''


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder of models holding one mxtrim output, a stand-in server and an environment."""
    root = tmp_path_factory.mktemp("reuse")
    src = make_servable_llama(root / "llama", layers=2)
    models = root / "models"
    out = models / "llama-dummy"
    r = run_cli("trim", str(src), "--keep", "0", "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr
    script = root / "stand_in.py"
    script.write_text(KV_CHECK + STAND_IN)
    return {"root": root, "models": models, "out": out, "python": make_env(root / "env", vllm="0.32.0"),
            "launcher": f"{sys.executable} {script} serve"}


def mxtrim(ws: dict, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(cli_argv("validate", *args, "--serve", "--device", "cpu", "--python", ws["python"], "--launcher",
                                   ws["launcher"], "--timeout", "30", "--json"),
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def runs_in(out: Path) -> list[dict]:
    return json.loads((out / "validation.json").read_text())["runs"]


@pytest.mark.slow
def test_a_run_made_with_other_serve_settings_is_run_again_and_says_why(workspace):
    ws = workspace
    out, models = ws["out"], ws["models"]
    # a 4 KB KV budget: the start fails for want of memory, and the run records its settings
    proc, doc = mxtrim(ws, str(out), "--kv-cache-memory-bytes", "4KB")
    start = next(r for r in doc["rows"] if r["check"] == "start-up")
    assert proc.returncode == 1 and start["status"] == "failed" and start["verdict"]["class"] == "insufficient resources"
    recorded = runs_in(out)[-1]["settings"]
    assert recorded["kv_cache_memory_bytes"] == 4000 and recorded["launcher"] == ws["launcher"].split()
    assert recorded["max_model_len"] == 256 and recorded["tp"] == recorded["pp"] == 1 and "env" in recorded

    # the workspace without the flag: that failure does not answer it; served anew, and why
    proc, doc = mxtrim(ws, "--all", str(models))
    (row,) = doc["rows"]
    why = "run again: served before with --kv-cache-memory-bytes 3.91 KiB, now 64.0 MiB"
    assert row["state"] == "validated" and row["cells"]["start-up"]["status"] == "passed", proc.stderr[-2000:]
    assert why in row["note"] and why in proc.stderr
    assert why in (models / "validation-matrix.md").read_text()
    assert len(runs_in(out)) == 2

    # asked the same way again: that run answers it
    proc, doc = mxtrim(ws, "--all", str(models))
    (row,) = doc["rows"]
    assert row["state"] == "reused" and row["cells"]["start-up"]["status"] == "passed" and "--again runs it anew" in row["note"]
    assert len(runs_in(out)) == 2

    # a vLLM variable of the environment changes what the server does: run again
    proc, doc = mxtrim(ws, "--all", str(models), env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    (row,) = doc["rows"]
    assert row["state"] == "validated", proc.stderr[-2000:]
    assert "run again: served before with VLLM_CPU_OMP_THREADS_BIND unset, now VLLM_CPU_OMP_THREADS_BIND=0" in row["note"]
    # another context: run again, naming it
    proc, doc = mxtrim(ws, "--all", str(models), "--max-model-len", "128", env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert "run again: served before with --max-model-len 256, now 128" in doc["rows"][0]["note"]
    assert len(runs_in(out)) == 4
    assert servers(ws["root"]) == []


def test_settings_an_earlier_run_did_not_record_are_not_compared():
    """A run recorded before the launcher, extra arguments and variables were kept is judged on
    what it recorded; TP and PP unrecorded mean 1."""
    from mxtrim_tui.core.validate.batch import settings_differences

    now = {"device": "cpu", "tp": 1, "pp": 1, "max_model_len": 256, "kv_cache_memory_bytes": 64 * 2**20, "launcher": None,
           "extra_args": [], "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}
    old = {"device": "cpu", "max_model_len": 256, "kv_cache_memory_bytes": 64 * 2**20}
    assert settings_differences(old, now) == []
    assert settings_differences(old, {**now, "tp": 2}) == ["served before with --tp 1, now 2"]
    assert settings_differences({**old, "env": {}}, now) == [
        "served before with VLLM_ENABLE_V1_MULTIPROCESSING unset, now VLLM_ENABLE_V1_MULTIPROCESSING=0"]
    assert settings_differences({**old, "device": "cuda", "gpu_memory_utilization": 0.5}, now) == [
        "served before with --device cuda, now cpu", "served before with --gpu-memory-utilization 0.5, now unset"]


def test_a_secret_looking_variable_is_recorded_as_a_digest_only():
    from mxtrim_tui.core.validate.serve import outcome_env

    got = outcome_env({"VLLM_API_KEY": "hunter2", "VLLM_CPU_KVCACHE_SPACE": "4", "HOME": "/root"})
    assert got["VLLM_CPU_KVCACHE_SPACE"] == "4" and "HOME" not in got
    assert got["VLLM_API_KEY"].startswith("sha256:") and "hunter2" not in json.dumps(got)


@needs_vllm
@pytest.mark.slow
def test_the_real_cpu_build_failing_on_a_4kb_kv_budget_is_not_reused_without_it(tmp_path):
    """The real vLLM CPU build: a 4 KB KV budget fails (insufficient resources, with vLLM's
    words and advice about the KV budget); the workspace
    validated without it serves the output again (its default 64 MiB) instead of showing that
    failure as reused."""
    src = make_servable_llama(tmp_path / "llama", layers=2)
    models = tmp_path / "models"
    out = models / "llama-dummy"
    assert run_cli("trim", str(src), "--keep", "0", "--mode", "dummy", "--out", str(out)).returncode == 0
    env = {"MXTRIM_VLLM_PYTHON": VLLM_PYTHON}
    r = run_cli("validate", str(out), "--serve", "--device", "cpu", "--kv-cache-memory-bytes", "4KB", "--json", env=env, timeout=900)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False
    # the failure itself: insufficient resources, quoting vLLM, advising the KV budget
    (start,) = [row for row in json.loads(r.stdout)["rows"] if row["check"] == "start-up"]
    assert start["verdict"]["class"] == "insufficient resources", start
    assert any("memory" in line.lower() for line in start["verdict"]["evidence"])
    assert "kv-cache-memory-bytes" in start["verdict"]["advice"]
    r = run_cli("validate", "--all", str(models), "--serve", "--device", "cpu", "--json", env=env, timeout=900)
    (row,) = json.loads(r.stdout)["rows"]
    assert r.returncode == 0 and row["state"] == "validated" and row["ok"] is True, r.stderr[-3000:]
    assert "run again: served before with --kv-cache-memory-bytes 3.91 KiB, now 64.0 MiB" in row["note"]
    assert servers(tmp_path) == []
