"""Tensor parallelism served for real on vLLM's CPU build: two workers on this machine's cores.

The CPU build binds each worker's OpenMP threads to cores of its own. Left to itself
(``VLLM_CPU_OMP_THREADS_BIND=auto``) it gives every worker a NUMA node, and a host with one
node refuses TP 2; mxtrim splits the cores it may use among the workers instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv, small_llama_output
from mxtrim_tui.core.validate.serve import ServeOptions, serve_env

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")
BIND = "VLLM_CPU_OMP_THREADS_BIND"
_no_vllm = pytest.mark.skipif(
    not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
    reason="real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON")


def needs_vllm(test):
    """A test that starts the real vLLM: marked `vllm` (make test-fast leaves it out)."""
    return pytest.mark.vllm(_no_vllm(test))


def cores_of(bind: str) -> list[set[int]]:
    """``"0-1,4|2-3"`` -> [{0, 1, 4}, {2, 3}]: one set of cores per worker, as vLLM reads it."""
    ranks = []
    for text in bind.split("|"):
        cores: set[int] = set()
        for part in text.split(","):
            first, _, last = part.partition("-")
            cores.update(range(int(first), int(last or first) + 1))
        ranks.append(cores)
    return ranks


def validate_tp2(out: Path, cores: set[int] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """``mxtrim validate OUT --serve --tp 2`` on the CPU build (``cores``: the only cores mxtrim may use)."""
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.run(cli_argv("validate", str(out), "--serve", "--tp", "2", "--device", "cpu", "--python", VLLM_PYTHON,
                                   "--json"), capture_output=True, text=True, cwd=REPO, timeout=900, preexec_fn=pin)
    assert proc.stdout.strip(), proc.stderr
    return proc, json.loads(proc.stdout)


def test_each_cpu_worker_gets_cores_of_its_own_and_a_binding_the_user_set_is_kept(monkeypatch):
    monkeypatch.delenv(BIND, raising=False)
    usable = os.sched_getaffinity(0)
    if len(usable) < 2:
        pytest.skip("one usable core: two workers cannot each get one")
    bind = serve_env(ServeOptions(python=sys.executable, device="cpu", tp=2))[BIND]
    first, second = cores_of(bind)
    assert first and second and not first & second and first | second <= usable
    assert len(first) == len(second)  # an even split
    # one worker, a GPU server, or vLLM's Ray executor (which places its own workers): no binding
    assert BIND not in serve_env(ServeOptions(python=sys.executable, device="cpu"))
    assert BIND not in serve_env(ServeOptions(python=sys.executable, device="cuda", tp=2, gpus="0,1"))
    assert BIND not in serve_env(ServeOptions(python=sys.executable, device="cpu", tp=2, executor_backend="ray"))
    # the user's own binding is theirs
    monkeypatch.setenv(BIND, "nobind")
    assert serve_env(ServeOptions(python=sys.executable, device="cpu", tp=2))[BIND] == "nobind"


@needs_vllm
def test_tp2_is_served_on_the_cpu_build_and_each_worker_is_predicted(tmp_path, monkeypatch):
    monkeypatch.delenv(BIND, raising=False)
    out = small_llama_output(tmp_path, "dummy")
    proc, doc = validate_tp2(out)
    rows = {r["check"]: r for r in doc["rows"]}
    assert proc.returncode == 0, json.dumps(doc["rows"], indent=1)[:4000]
    assert rows["start-up"]["status"] == "passed" and rows["generation"]["status"] == "passed"
    assert doc["server_exit"]["survivors"] == []
    # two workers, each on cores of its own among those mxtrim may use
    settings = doc["settings"]
    assert settings["tp"] == 2 and settings["pp"] == 1
    first, second = cores_of(settings["env"][BIND])
    assert not first & second and first | second <= os.sched_getaffinity(0)
    cmd = doc["serve_command"]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    # each worker's KV budget, as it logged it, against the prediction for one rank
    memory = doc["memory"]
    per_worker = memory["available_kv_by_rank"]
    assert set(per_worker) == {"TP0", "TP1"}, memory
    assert all(r["agrees"] and r["predicted"] == 64 * 2**20 for r in per_worker.values()), per_worker
    # a rank holds half the KV heads: the cache holds the tokens the prediction for one rank says
    tokens = memory["figures"]["kv_tokens"]
    assert tokens["predicted"] == tokens["actual"] and memory["agree"] is True, memory
    assert "per worker" in rows["memory: predicted against logged"]["detail"]
    # what ran, read inside the engine from both workers: TP ranks see every token, so they agree
    assert doc["paths"] and all(p["status"] == "executed" for p in doc["paths"]), doc["paths"]
    assert all(p["ranks"] == {"seen": ["TP0", "TP1"], "agree": True} for p in doc["paths"]), doc["paths"]
    # the record and the report say TP 2
    history = json.loads((out / "validation.json").read_text())
    assert history["runs"][-1]["settings"]["tp"] == 2
    assert "TP 2 PP 1" in (out / "README.md").read_text()


@needs_vllm
def test_fewer_usable_cores_than_workers_is_refused_before_any_server_starts(tmp_path, monkeypatch):
    monkeypatch.delenv(BIND, raising=False)
    out = small_llama_output(tmp_path, "dummy")
    one = {min(os.sched_getaffinity(0))}
    proc, doc = validate_tp2(out, cores=one)
    rows = {r["check"]: r for r in doc["rows"]}
    assert proc.returncode != 0
    start = rows["start-up"]
    assert start["status"] == "unverified", start
    # one line: what is short, and what to do
    assert "\n" not in start["detail"] and "2 workers" in start["detail"] and "1 core" in start["detail"]
    assert "--tp" in start["detail"] and BIND in start["detail"]
    assert doc["serve_command"] is None and not (out / "logs" / "serve.log").exists()
    assert "Traceback" not in proc.stderr


def test_each_cpu_workers_logged_kv_budget_is_compared_with_its_prediction():
    from mxtrim_tui.core.validate.memory_check import compare, summary
    from mxtrim_tui.core.validate.vllm_log import parse_startup

    # what the two workers of a TP 2 server on the CPU build log, one budget each
    line = "(Worker_TP{0} pid=85{0}) INFO 12-07 16:18:47 [cpu_worker.py:260] Explicitly set ({1}/23.54) GiB for KV cache on node 0."
    logged = parse_startup([line.format(0, "0.06"), line.format(1, "0.5")])
    check = compare({"available_kv_bytes": 64 * 2**20}, logged)
    per_worker = check["available_kv_by_rank"]
    assert set(per_worker) == {"TP0", "TP1"}
    # the first worker's budget is the one given; the second logged another: it disagrees
    assert per_worker["TP0"]["agrees"] is True and per_worker["TP1"]["agrees"] is False and check["agree"] is False
    assert "KV memory per worker: TP0" in summary(check)
