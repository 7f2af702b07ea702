"""`mxtrim validate … --jobs N|auto`: servers side by side.

On GPUs, with a stand-in of NVML's documented Python surface (``pynvml``: devices, memory,
running processes) and a stand-in server that behaves as vLLM does where it matters here: it
takes its share of the GPU it is given, and its start fails ("No available memory for the
cache blocks") when another server on that GPU allocates or frees memory while it profiles.
On the CPU, the real vLLM CPU build: Ctrl-C stops every server running side by side (that two
outputs side by side give the verdicts of a serial run: tests/test_validate_many.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv, run_cli, small_llama_output
from test_validate import VLLM_PYTHON, needs_vllm, servers
from test_validate_flow import STAND_IN
from test_vllm_discovery import make_env

GIB = 2**30

# NVML as pynvml exposes it; the devices are a JSON file ($STANDIN_GPU_DIR/gpus.json) and the
# processes using them are the files gpu<INDEX>-<PID> (bytes used) that servers write there
STANDIN_PYNVML = r'''
import json, os
from types import SimpleNamespace as NS

class NVMLError(Exception):
    pass

_DIR = os.environ["STANDIN_GPU_DIR"]

def _gpus():
    with open(os.path.join(_DIR, "gpus.json")) as f:
        return json.load(f)

def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False

def _processes(index):
    found = [NS(pid=p["pid"], usedGpuMemory=p["bytes"]) for p in _gpus()[index].get("processes", [])]
    for name in os.listdir(_DIR):
        if name.startswith(f"gpu{index}-"):
            pid = int(name.split("-")[1])
            if _alive(pid):
                found.append(NS(pid=pid, usedGpuMemory=int(open(os.path.join(_DIR, name)).read() or 0)))
    return found

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "550.00"
def nvmlDeviceGetCount(): return len(_gpus())
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return "Stand-in H200"
def nvmlDeviceGetMemoryInfo(h):
    total = _gpus()[h]["total"]
    used = min(total, 512 * 2**20 + sum(p.usedGpuMemory for p in _processes(h)))
    return NS(total=total, used=used, free=total - used)
def nvmlDeviceGetUtilizationRates(h): return NS(gpu=0)
def nvmlDeviceGetComputeRunningProcesses(h): return _processes(h)
def nvmlDeviceGetGraphicsRunningProcesses(h): return []
'''

# a server on the stand-in GPU: profiles for PROFILE seconds (failing as vLLM does when a
# neighbour's memory changes meanwhile), logs vLLM's "init engine" line, then answers as the
# stand-in of test_validate_flow does (its first argument: the mode, here one that just serves);
# with vLLM's Ray executor, it places its ranks in the Ray cluster as that executor does
STANDIN_GPU = r'''
import json, os, signal, sys, time
PROFILE = 1.5
DIR = os.environ["STANDIN_GPU_DIR"]
model = sys.argv[sys.argv.index("--model") + 1]

def flag(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

if flag("--distributed-executor-backend") == "ray":
    # vLLM's Ray executor, as vllm/v1/executor/ray_utils.py places its workers: it joins the
    # cluster at $RAY_ADDRESS and waits for a placement group of one GPU per rank, the first on
    # this node (PACK), failing in vLLM's words when the cluster cannot hold it
    import ray
    from ray.util.placement_group import placement_group, placement_group_table
    world = int(flag("--tensor-parallel-size", 1)) * int(flag("--pipeline-parallel-size", 1))
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False, configure_logging=False)
    specs = [{"GPU": 1.0} for _ in range(world)]
    specs[0][f"node:{ray.util.get_node_ip_address()}"] = 0.001
    group = placement_group(specs, strategy="PACK")
    if not ray.wait([group.ready()], timeout=20)[0]:
        print(f"ValueError: Cannot provide a placement group requiring {world} GPUs "
              f"(placement_group_specs={specs}) within 20 seconds.", flush=True)
        sys.exit(1)
    nodes = sorted(placement_group_table(group)["bundles_to_node_id"].values())

    def event(what):
        with open(os.path.join(DIR, "events.log"), "a") as f:
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "gpu": None, "model": model, "what": what,
                                "ray_address": os.environ["RAY_ADDRESS"], "bundle_nodes": nodes}) + "\n")

    def stop(signum, frame):
        event("stop")
        os._exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    event("start")
    print("INFO 12-04 20:00:00 [core.py:403] init engine (profile, create kv cache, warmup model) took 1.00 s", flush=True)
else:
    gpu = int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0])
    share = float(sys.argv[sys.argv.index("--gpu-memory-utilization") + 1])
    total = json.load(open(os.path.join(DIR, "gpus.json")))[gpu]["total"]
    me = os.path.join(DIR, f"gpu{gpu}-{os.getpid()}")

    def event(what):
        with open(os.path.join(DIR, "events.log"), "a") as f:
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "gpu": gpu, "model": model, "what": what}) + "\n")

    def neighbours():
        return sorted(n for n in os.listdir(DIR) if n.startswith(f"gpu{gpu}-") and n != os.path.basename(me))

    def stop(signum, frame):
        event("stop")
        os.unlink(me)
        os._exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    event("start")
    time.sleep(1.0)  # imports, config, tokenizer: CPU work
    print("(EngineCore pid=1) INFO 12-04 20:00:00 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: model=...", flush=True)
    time.sleep(0.3)  # the device's context: then the memory baseline is taken
    event("window")
    before = neighbours()
    with open(me, "w") as f:
        f.write(str(int(share * total)))
    time.sleep(PROFILE)
    if neighbours() != before:
        print("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", flush=True)
        event("failed")
        os.unlink(me)
        sys.exit(1)
    event("kv-ready")  # the KV cache is allocated before vLLM says so (and a neighbour may go on at once)
    print(f"INFO 12-04 20:00:00 [core.py:403] init engine (profile, create kv cache, warmup model) took {PROFILE:.2f} s", flush=True)
'''
STANDIN_SERVER = STANDIN_GPU + STAND_IN


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel")
    out = small_llama_output(root, "dummy")
    models = root / "models"
    models.mkdir()
    for name in ("a-llama", "b-llama", "c-llama"):
        shutil.copytree(out, models / name)
    (root / "standin").mkdir()
    (root / "standin" / "pynvml.py").write_text(STANDIN_PYNVML)
    (root / "server.py").write_text(STANDIN_SERVER)
    return {"root": root, "models": models, "python": make_env(root / "env", vllm="0.32.0")}


@pytest.fixture
def gpus(tmp_path, built):
    """Two stand-in 140 GiB GPUs; GPU 0 holds 10 GiB of a process of someone else."""
    other = subprocess.Popen(["sleep", "300"])
    state = tmp_path / "gpus"
    state.mkdir()
    (state / "gpus.json").write_text(json.dumps([
        {"total": 140 * GIB, "processes": [{"pid": other.pid, "bytes": 10 * GIB}]},
        {"total": 140 * GIB, "processes": []},
    ]))
    yield state, other
    other.kill()
    other.wait()


def batch(built, state: Path, models: Path, *extra: str, visible: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "MXTRIM_VLLM_PYTHON")}
    env.update(STANDIN_GPU_DIR=str(state), PYTHONPATH=os.pathsep.join([str(built["root"] / "standin"), str(REPO)]))
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    launcher = f"{sys.executable} {built['root'] / 'server.py'} serve"
    return subprocess.run(cli_argv("validate", "--all", str(models), "--serve", "--again", "--python", built["python"],
                                   "--launcher", launcher, "--timeout", "30", "--json", *extra),
                          capture_output=True, text=True, env=env, timeout=300)


def events(state: Path) -> list[dict]:
    path = state / "events.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_servers_share_a_free_gpu_one_profiling_at_a_time_and_never_a_gpu_held_by_another(built, gpus, tmp_path):
    state, other = gpus
    models = shutil.copytree(built["models"], tmp_path / "models")
    r = batch(built, state, models, "--jobs", "auto", "--gpu-memory-utilization", "0.3")
    doc = json.loads(r.stdout)  # (the offline checks fail in the stand-in environment, which has no transformers)
    assert [row["state"] for row in doc["rows"]] == ["validated"] * 3 and doc["complete"], r.stderr[-3000:]
    assert all(row["cells"]["start-up"]["status"] == row["cells"]["generation"]["status"] == "passed" for row in doc["rows"])
    seen = events(state)
    # all three on GPU 1, side by side: GPU 0 holds another's memory
    assert {e["gpu"] for e in seen} == {1} and not any(e["what"] == "failed" for e in seen)
    starts = [e["t"] for e in seen if e["what"] == "start"]
    windows = sorted((e["t"], e["pid"]) for e in seen if e["what"] == "window")
    ready = {e["pid"]: e["t"] for e in seen if e["what"] == "kv-ready"}
    stops = [e["t"] for e in seen if e["what"] == "stop"]
    assert len(starts) == len(windows) == len(stops) == 3
    # side by side: every server started before the first had its KV cache
    assert max(starts) < min(ready.values())
    # one memory window at a time on the GPU (from taking the device to its KV cache) ...
    for (_, before), (after, _) in zip(windows, windows[1:]):
        assert ready[before] <= after
    # ... and no server stopped inside another's
    assert not any(start < stop < ready[pid] for start, pid in windows for stop in stops)
    assert "on GPU 1 (share 0.3)" in r.stderr and "paused while another server on GPU 1 measures its memory" in r.stderr
    # each output's own record is a single run's: the server ran on GPU 1 with its share
    for row in doc["rows"]:
        run = json.loads((Path(row["output"]) / "validation.json").read_text())["runs"][-1]
        assert run["settings"]["gpus"] == "1" and run["settings"]["gpu_memory_utilization"] == 0.3
        assert "shared with its other servers" in run["environment"]["devices"] or "idle" in run["environment"]["devices"]


@pytest.mark.slow
def test_starting_lets_the_next_server_start_only_once_the_previous_engine_announced_itself(built, gpus, tmp_path):
    """``--starting 1``: one server at a time in its CPU start-up. The stand-in's engine line
    comes 1 s after its start, so each start follows the previous one by at least that; the
    outputs still share GPU 1 and are all validated, one memory window at a time."""
    state, other = gpus
    models = shutil.copytree(built["models"], tmp_path / "models")
    r = batch(built, state, models, "--jobs", "auto", "--starting", "1", "--gpu-memory-utilization", "0.3")
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["validated"] * 3, r.stderr[-3000:]
    seen = events(state)
    assert {e["gpu"] for e in seen} == {1} and not any(e["what"] == "failed" for e in seen)
    starts = sorted(e["t"] for e in seen if e["what"] == "start")
    assert len(starts) == 3 and all(b - a >= 1.0 for a, b in zip(starts, starts[1:]))
    windows = sorted((e["t"], e["pid"]) for e in seen if e["what"] == "window")
    ready = {e["pid"]: e["t"] for e in seen if e["what"] == "kv-ready"}
    for (_, before), (after, _) in zip(windows, windows[1:]):
        assert ready[before] <= after


def test_a_gpu_holding_another_process_memory_is_refused_and_nothing_starts(built, gpus, tmp_path):
    state, other = gpus
    models = shutil.copytree(built["models"], tmp_path / "models")
    r = batch(built, state, models, "--jobs", "2", "--gpu-memory-utilization", "0.3", visible="0")
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["refused"] * 3 and not any(row["ok"] for row in doc["rows"])
    assert f"GPU 0 holds memory of sleep[{other.pid}], not started by this batch" in doc["rows"][0]["note"]
    assert events(state) == []  # no server started
    assert "refused" in (models / "validation-matrix.md").read_text()


@pytest.mark.slow
def test_a_share_too_large_to_share_runs_one_server_per_gpu_in_turn(built, gpus, tmp_path):
    """Shares of 0.6 do not fit twice on a GPU: one server at a time on GPU 1, never beside
    another's memory on GPU 0."""
    state, other = gpus
    models = shutil.copytree(built["models"], tmp_path / "models")
    shutil.rmtree(models / "c-llama")
    r = batch(built, state, models, "--jobs", "auto", "--gpu-memory-utilization", "0.6")
    doc = json.loads(r.stdout)
    assert all(row["cells"]["start-up"]["status"] == "passed" for row in doc["rows"]), r.stderr[-3000:]
    seen = events(state)
    first, second = [e for e in seen if e["what"] == "start"]
    stops = {e["pid"]: e["t"] for e in seen if e["what"] == "stop"}
    assert first["gpu"] == second["gpu"] == 1 and second["t"] >= stops[first["pid"]]
    assert "paused" not in r.stderr


@pytest.mark.slow
def test_pipeline_parallel_servers_take_tp_times_pp_gpus_free_of_others(built, gpus, tmp_path):
    """``--pp 2``: each server needs two GPUs. With GPU 0 holding another's memory there is one
    free GPU, so the batch refuses and starts nothing; with three more GPUs free each server
    gets two of them, never GPU 0, and is served with TP 1 and PP 2."""
    state, other = gpus
    models = shutil.copytree(built["models"], tmp_path / "models")
    shutil.rmtree(models / "c-llama")
    r = batch(built, state, models, "--jobs", "auto", "--pp", "2", "--gpu-memory-utilization", "0.3")
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["refused", "refused"] and not events(state)
    assert "1 GPU free of other processes' memory, 2 needed" in doc["rows"][0]["note"]

    held = json.loads((state / "gpus.json").read_text())[0]
    (state / "gpus.json").write_text(json.dumps([held] + [{"total": 140 * GIB, "processes": []}] * 3))
    r = batch(built, state, models, "--jobs", "auto", "--pp", "2", "--gpu-memory-utilization", "0.3")
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["validated"] * 2, r.stderr[-3000:]
    for row in doc["rows"]:
        run = last_run(Path(row["output"]))
        gpus = run["settings"]["gpus"].split(",")
        assert run["settings"]["tp"] == 1 and run["settings"]["pp"] == 2 and len(gpus) == 2 and "0" not in gpus
        assert "--pipeline-parallel-size 2" in " ".join(run["serve_command"])


# --- the CPU build -------------------------------------------------------------------------------

ENV = {"MXTRIM_VLLM_PYTHON": VLLM_PYTHON or ""}


def last_run(out: Path) -> dict:
    return json.loads((out / "validation.json").read_text())["runs"][-1]


@needs_vllm
@pytest.mark.slow
def test_ctrl_c_stops_every_server_running_side_by_side(built, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    for name in ("a-llama", "b-llama", "c-llama"):
        shutil.copytree(built["models"] / name, models / name)
    proc = subprocess.Popen(cli_argv("validate", "--all", str(models), "--serve", "--device", "cpu", "--jobs", "2"),
                            cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = [models / name / "logs" / "serve.log" for name in ("a-llama", "b-llama")]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if all(log.exists() and log.stat().st_size > 2000 for log in logs):
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted; finished rows kept in" in err
    doc = json.loads((models / "validation-matrix.json").read_text())
    assert doc["complete"] is False
    assert [row["state"] for row in doc["rows"]] == ["interrupted", "interrupted", "not run"]
    assert servers(tmp_path) == []  # no vllm serve (nor any of its workers) outlives the Ctrl-C
    assert "no server left running" in run_cli("leftovers").stdout


# a validation child as the batch reads it: progress events on stderr, its JSON on stdout;
# beside a neighbour, output "a"'s server logs vLLM's KV-sizing error once it is up and exits 1
# ({late}: that line comes after the JSON, once stdout is closed)
MEMORY_CHILD = r'''
import json, os, sys, time
alone, name, late = sys.argv[1] == "alone", sys.argv[2], sys.argv[3] == "late"
def log(line):
    print(json.dumps({"event": "log", "stream": "stdout", "line": line}), file=sys.stderr, flush=True)
log("INFO init engine (profile, create kv cache, warmup model) took 0.10 s")
time.sleep(0.5)
failed = not alone and name == "a"
def fail():
    if failed:
        log("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`")
if not late:
    time.sleep(0.5)
    fail()
print(json.dumps({"ok": not failed, "rows": [], "name": name}), flush=True)
if late:
    os.close(1)  # stdout read to its end, stderr not yet
    time.sleep(0.5)
    fail()
sys.exit(1 if failed else 0)
'''


def _memory_batch(tmp_path, when: str) -> list[tuple]:
    """Outputs "a" and "b" side by side on one stand-in GPU: what the batch reported, in order."""
    from mxtrim_tui.core.probe.gpu import GpuInfo, GpuProbe
    from mxtrim_tui.core.validate.parallel import Job, ParallelBatch

    gpu = GpuProbe("nvidia", True, gpus=(GpuInfo(0, "Stand-in H200", 140 * GIB, 0, 140 * GIB),))
    jobs = [Job(0, tmp_path / "a", 1, 0.3), Job(1, tmp_path / "b", 1, 0.3)]
    seen = []
    ParallelBatch(jobs, lambda job: [sys.executable, "-c", MEMORY_CHILD, "alone" if job.alone else "beside", job.output.name, when],
                  lambda: gpu, None, on_start=lambda job: seen.append(("start", job.output.name, job.alone)),
                  on_done=lambda job, doc, code, retried: seen.append(("done", job.output.name, code, retried)),
                  on_refused=lambda job, why: seen.append(("refused", why)), poll=0.05).run()
    return seen


@pytest.mark.slow
def test_the_failure_is_judged_on_every_line_even_those_written_after_the_result(tmp_path):
    """The child's last log lines may come after its JSON (a loaded machine; seen once in a
    loaded full run): the batch reads both streams to the end before it decides whether the
    failure was the neighbour's."""
    seen = _memory_batch(tmp_path, "late")
    assert ("done", "a", 1, True) in seen and seen[-1] == ("done", "a", 0, False), seen


@pytest.mark.slow
def test_a_start_that_fails_on_memory_beside_a_neighbour_is_run_again_alone(tmp_path):
    """Not the output's failure: the batch runs it again with the GPU to itself, and only that
    run makes its row."""
    seen = _memory_batch(tmp_path, "in order")
    assert seen[:2] == [("start", "a", False), ("start", "b", False)]  # side by side
    assert ("done", "a", 1, True) in seen and ("start", "a", True) in seen and seen[-1] == ("done", "a", 0, False)
    assert ("done", "b", 0, False) in seen
