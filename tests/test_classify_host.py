"""Failures of the host and its devices are not the trim's: NUMA nodes, too few GPUs, a device
another process holds, what the CPU build does not run — each classed *host or device limit*,
with advice about the settings or the host. NaN / Inf in a served answer is the weights'
numerics. Every class the classifier can give is explained in docs/validation.md.

The log lines are vLLM 0.32.0's own (a real CPU log, and messages quoted from its sources:
each names the file it is raised in) and CUDA's texts as torch raises them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mxtrim_tui.core.validate.classify import CONFIGURATION, ENVIRONMENT, HOST, NUMERICS, UNKNOWN, classes, classify
from test_validate import VLLM_PYTHON, needs_vllm, servers

FAILURES = Path(__file__).parent / "fixtures" / "vllm_failures"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "validation.md"
TRIM_ADVICE = re.compile(r"(?i)change the trim|kept layers")


def engine(message: str) -> list[str]:
    """A message as vLLM's engine core logs the exception it failed with."""
    return ["(EngineCore pid=7050) ERROR 12-05 08:09:57 [core.py:1510] EngineCore failed to start.",
            "(EngineCore pid=7050) ERROR 12-05 08:09:57 [core.py:1510] Traceback (most recent call last):",
            f"(EngineCore pid=7050) ERROR 12-05 08:09:57 [core.py:1510] {message}"]


def verdict(lines: list[str], reason: str = "the server exited with status 1 before it was healthy", dummy: bool = True):
    return classify(lines, 1, stopped_by_us=False, reason=reason, dummy=dummy)


def test_tp_2_on_a_host_with_one_numa_node_is_a_host_limit_not_the_trim():
    """vLLM 0.32.0's CPU build served with --tp 2 on a host with one NUMA node (the real log)."""
    v = verdict((FAILURES / "cpu-0.32.0-tp2-numa.log").read_text(encoding="utf-8").splitlines())
    assert v.category == HOST != CONFIGURATION
    assert v.evidence[0].startswith("AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers")
    assert "--tp 1 --pp 1" in v.advice and "2 workers" in v.advice and "VLLM_CPU_OMP_THREADS_BIND" in v.advice
    assert not TRIM_ADVICE.search(v.advice) and "not of the trim" in v.advice


@pytest.mark.parametrize("lines, advice", [
    # vllm/config/parallel.py (ParallelConfig.__post_init__, wrapped by pydantic)
    (engine("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig")
     + ["  Value error, World size (2) is larger than the number of available GPUs (1) in this node. If this is "
        "intentional and you are using: [type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]"],
     "--tp / --pp"),
    # CUDA's words for a device index past the visible ones, as torch raises them
    (engine("RuntimeError: CUDA error: invalid device ordinal"), "--tp / --pp"),
    # vllm/v1/executor/ray_utils.py: vLLM's Ray executor cannot place its workers
    (engine("ValueError: Cannot provide a placement group requiring 4 GPUs (placement_group_specs=[{'GPU': 1.0}, "
            "{'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}]) within 1800 seconds."), "ray status"),
    (engine("ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
            "group. Required number of devices: 4. Total number of devices: 2."), "ray status"),
    (engine("ValueError: Current node has no GPU available. current_node_resource={'CPU': 8.0}. vLLM engine cannot "
            "start without GPU. Make sure you have at least 1 GPU available in a node current_node_id='8f0c' "
            "current_ip='10.0.0.7'."), "start from a node with a GPU"),
    # vllm/platforms/interface.py
    (engine("IndexError: visible device ordinal 1 is out of range for CUDA_VISIBLE_DEVICES=0"), "--tp / --pp"),
    # CUDA's words for a device in exclusive use by another process
    (engine("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"), "idle devices"),
    # vllm/v1/worker/utils.py: the start-up check of free memory
    (engine("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
     "--gpu-memory-utilization"),
    # vllm/platforms/cpu.py
    (engine("NotImplementedError: Sparse Attention is not supported on CPU."), "GPU build"),
])
def test_vllm_and_cuda_words_for_a_host_or_device_limit(lines, advice):
    v = verdict(lines)
    assert v.category == HOST and advice in v.advice and not TRIM_ADVICE.search(v.advice), v
    assert v.evidence and all(not e.startswith("EngineCore failed") for e in v.evidence)


@pytest.mark.parametrize("lines, advice", [
    # vllm/v1/executor/ray_utils.py: Ray missing from the vLLM environment
    (engine("ValueError: Failed to import Ray: No module named 'ray'.Please install Ray with `pip install ray`."),
     "same Ray version"),
    # ray/_private/utils.py: a process of another Ray or Python version joining the cluster
    (engine("RuntimeError: Version mismatch: The cluster was started with:")
     + ["    Ray: 2.60.0", "    Python: 3.11.7", "This process on node 10.0.0.8 was started with:", "    Ray: 2.49.1"],
     "same Ray version"),
    # a worker of vLLM's Ray executor on a node whose environment has no vLLM (or another one)
    (engine("ray.exceptions.RayTaskError(ModuleNotFoundError): ray::RayWorkerWrapper.__init__()")
     + ["(RayWorkerWrapper pid=4121, ip=10.0.0.8) ModuleNotFoundError: No module named 'vllm'"], "same vLLM"),
])
def test_a_ray_cluster_without_the_same_ray_or_vllm_on_every_node_is_the_environment(lines, advice):
    v = verdict(lines)
    assert v.category == ENVIRONMENT and advice in v.advice and not TRIM_ADVICE.search(v.advice), v
    assert v.evidence and all(not e.startswith("EngineCore failed") for e in v.evidence)


def test_nan_in_a_completion_answer_is_the_weights_numerics():
    """The completion is answered HTTP 400 with the JSON encoder's words for NaN / Inf
    (vLLM returns a ValueError as BadRequestError: vllm/entrypoints/serve/exception_handling/
    error_response.py); the server's log holds no error line."""
    answer = ('{"error":{"message":"Out of range float values are not JSON compliant","type":"BadRequestError",'
              '"param":null,"code":400}}')
    log = ['(APIServer pid=6766) INFO 12-05 08:10:37 [launcher.py:46] Route: /v1/completions, Methods: POST',
           '(APIServer pid=6766) INFO:     127.0.0.1:40122 - "POST /v1/completions HTTP/1.1" 400 Bad Request']
    v = classify(log, None, stopped_by_us=False, reason=f"completion: HTTP 400: {answer}", dummy=True)
    assert v.category == NUMERICS != UNKNOWN
    assert v.evidence == [f"completion: HTTP 400: {answer}"]
    assert "Dummy weights" in v.advice and "dtype" in v.advice and "--equivalence" in v.advice
    # the answer alone (a chat beside a completion that passed) is enough
    v = classify([], None, stopped_by_us=False, reason=f"chat: HTTP 400: {answer}")
    assert v.category == NUMERICS


def test_every_class_the_classifier_gives_is_explained_in_the_docs():
    text = " ".join(DOCS.read_text(encoding="utf-8").split())  # a name may be wrapped over lines
    assert HOST in classes() and NUMERICS in classes() and UNKNOWN in classes()
    missing = [c for c in classes() if f"*{c}*" not in text]
    assert missing == [], f"classes not explained in docs/validation.md: {missing}"


def _numa_nodes() -> int:
    return len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))) or 1


@needs_vllm
@pytest.mark.skipif(_numa_nodes() > 1, reason="this host has NUMA nodes for two CPU workers")
def test_validate_tp_2_on_the_cpu_build_blames_the_host_not_the_trim(tmp_path):
    """The real flow: `validate OUT --serve --tp 2` with vLLM's CPU build on a one-node host, the
    user's own VLLM_CPU_OMP_THREADS_BIND=auto kept (vLLM then binds a NUMA node per worker;
    unset, mxtrim gives each worker cores of its own: tests/test_served_tp2.py)."""
    from engine_support import small_llama_output

    out = small_llama_output(tmp_path, "dummy")
    proc = subprocess.run([sys.executable, "-m", "mxtrim_tui", "validate", str(out), "--serve", "--tp", "2", "--device", "cpu",
                           "--python", VLLM_PYTHON], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "auto"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "start-up: failed" in proc.stdout and f"    {HOST}: " in proc.stdout
    assert "Not enough allowed NUMA nodes" in proc.stdout and "--tp 1 --pp 1" in proc.stdout
    assert "leave VLLM_CPU_OMP_THREADS_BIND unset" in proc.stdout
    assert CONFIGURATION not in proc.stdout and "change the trim" not in proc.stdout
    start = next(r for r in json.loads((out / "validation.json").read_text())["runs"][-1]["rows"] if r["check"] == "start-up")
    assert start["verdict"]["class"] == HOST
    assert servers(tmp_path) == []


GPU_LOGS = Path(__file__).parent / "fixtures" / "gpu_logs"


@pytest.mark.parametrize("log, category, said", [
    # vLLM 0.26.0 on an H100, the published V4 FP8 config's --keep 0,3 dummy trim: the dummy load
    # leaves the mHC broadcast weights unset (generic rules: "change the trim")
    ("h100-0.26.0-deepseek-v4-dummy-mhc.log", "dummy initialisation or quantization post-processing limitation",
     "--mode weights"),
    # the same trim with that load finished: its KV groups cannot be paged together
    ("h100-0.26.0-deepseek-v4-keep-0-3-pages.log", CONFIGURATION, "compress ratio 4"),
])
def test_what_vllm_0_26_refuses_of_deepseek_v4_is_said_with_its_reason(log, category, said):
    v = verdict((GPU_LOGS / log).read_text(encoding="utf-8").splitlines())
    assert v.category == category and said in v.advice, v
    # the assert without a message is quoted with its statement and where it raised
    assert any(e.startswith("AssertionError: assert ") and ".py:" in e for e in v.evidence), v.evidence


@needs_vllm
def test_vllms_ray_executor_without_ray_in_its_environment_is_the_environment_not_the_trim(tmp_path):
    """The real flow: `validate OUT --serve --distributed-executor-backend ray` with vLLM's CPU
    build, whose environment has no Ray (as a node set up without it would be)."""
    from engine_support import small_llama_output

    out = small_llama_output(tmp_path, "dummy")
    proc = subprocess.run([sys.executable, "-m", "mxtrim_tui", "validate", str(out), "--serve", "--device", "cpu",
                           "--distributed-executor-backend", "ray", "--python", VLLM_PYTHON, "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["serve_command"][doc["serve_command"].index("--distributed-executor-backend") + 1] == "ray"
    start = next(r for r in doc["rows"] if r["check"] == "start-up")
    assert start["status"] == "failed" and start["verdict"]["class"] == ENVIRONMENT, start
    assert any("Failed to import Ray" in line for line in start["verdict"]["evidence"])
    assert "same Ray version as the cluster" in start["verdict"]["advice"] and "not of the trim" in start["verdict"]["advice"]
    assert doc["settings"]["distributed_executor_backend"] == "ray"
    assert servers(tmp_path) == []
