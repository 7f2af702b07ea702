"""`mxtrim validate --all --ray ADDRESS`: a workspace validated as tasks of a real Ray cluster.

The cluster is Ray's own local one (``ray.cluster_utils.Cluster``): a head node and a worker
node on this machine, each a real raylet declaring its GPUs, each with its own stand-in GPUs
(the NVML stand-in and the stand-in server of tests/test_validate_parallel.py, pointed at a
folder of that node's). The batch is a real ``mxtrim`` driver joining the cluster by its
address; each validation is a Ray task that runs ``mxtrim validate OUT`` on its node."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine_support import REPO, cli_argv, run_cli, small_llama_output
from test_validate import VLLM_PYTHON, needs_vllm, servers
from test_validate_parallel import GIB, built  # noqa: F401 - the module fixture: outputs, stand-ins

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_validate_ray")]  # one cluster, on one worker


def _gpu_folder(path: Path, count: int) -> Path:
    path.mkdir(parents=True)
    (path / "gpus.json").write_text(json.dumps([{"total": 140 * GIB, "processes": []}] * count))
    return path


@contextlib.contextmanager
def node_environment(built, python: str | None = None):  # noqa: F811
    """What the raylets started inside see (and pass on to their tasks): the stand-ins on the
    path (``python``, the real vLLM: none, only mxtrim), no GPUs named, each node's own vLLM
    interpreter; the test process's own restored after."""
    saved = {k: os.environ.get(k) for k in ("STANDIN_GPU_DIR", "PYTHONPATH", "MXTRIM_VLLM_PYTHON", "CUDA_VISIBLE_DEVICES")}
    os.environ["MXTRIM_VLLM_PYTHON"] = python or built["python"]
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ.pop("STANDIN_GPU_DIR", None)
    os.environ["PYTHONPATH"] = os.pathsep.join(([] if python else [str(built["root"] / "standin")]) + [str(REPO)])
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def driver_env(**extra) -> dict:
    """The batch's environment: none of the test process's GPU, vLLM or Ray settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "MXTRIM_VLLM_PYTHON", "RAY_ADDRESS")}
    return env | extra


@pytest.fixture(scope="module")
def cluster(built, tmp_path_factory):  # noqa: F811
    """Head: 1 stand-in GPU; worker: 2. Each raylet (and so each task and its validation) has
    its own STANDIN_GPU_DIR, taken from the environment it was started in."""
    root = tmp_path_factory.mktemp("ray")
    dirs = {}
    c = Cluster()
    with node_environment(built):
        os.environ["STANDIN_GPU_DIR"] = str(_gpu_folder(root / "head", 1))
        head = c.add_node(num_cpus=2, num_gpus=1, include_dashboard=False)
        dirs[head.node_id] = root / "head"
        os.environ["STANDIN_GPU_DIR"] = str(_gpu_folder(root / "worker", 2))
        worker = c.add_node(num_cpus=2, num_gpus=2)
        dirs[worker.node_id] = root / "worker"
        c.wait_for_nodes()
    yield {"cluster": c, "head": head, "worker": worker, "dirs": dirs, "root": root}
    c.shutdown()


def argv(built, models: Path, address: str, *extra: str, python: bool = True) -> list[str]:  # noqa: F811
    launcher = f"{sys.executable} {built['root'] / 'server.py'} serve"
    named = ["--python", built["python"]] if python else []
    return cli_argv("validate", "--all", str(models), "--serve", "--again", *named,
                    "--launcher", launcher, "--timeout", "60", "--device", "cuda", "--json", "--ray", address, *extra)


def run_batch(built, models, address, *extra, python: bool = True, env_extra=None) -> subprocess.CompletedProcess:  # noqa: F811
    return subprocess.run(argv(built, models, address, *extra, python=python), capture_output=True, text=True,
                          env=driver_env(**(env_extra or {})), timeout=300)


def events(folder: Path) -> list[dict]:
    path = folder / "events.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def clear_events(cluster) -> None:
    for d in cluster["dirs"].values():
        (d / "events.log").unlink(missing_ok=True)


def standin_servers(built) -> list[int]:  # noqa: F811
    server = str(built["root"] / "server.py")
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if server in " ".join(p.info["cmdline"] or []):
                found.append(p.info["pid"])
        except psutil.Error:
            continue
    return found


def workspace(built, tmp_path, names) -> Path:  # noqa: F811
    models = tmp_path / "models"
    models.mkdir()
    for name in names:
        shutil.copytree(built["models"] / "a-llama", models / name)
    return models


def test_each_output_runs_on_a_node_with_its_gpus_and_lands_as_a_local_run(built, cluster, tmp_path):  # noqa: F811
    clear_events(cluster)
    models = workspace(built, tmp_path, ["a", "b", "c", "d"])
    # no --python, and no vLLM where the batch starts ($MXTRIM_VLLM_PYTHON there names a folder
    # without one): each node validates with its own ($MXTRIM_VLLM_PYTHON of its raylet)
    r = run_batch(built, models, cluster["cluster"].address, "--gpu-memory-utilization", "0.3", python=False,
                  env_extra={"MXTRIM_VLLM_PYTHON": str(tmp_path / "no-vllm-here" / "python")})
    doc = json.loads(r.stdout)  # (the offline checks fail in the stand-in environment, which has no transformers)
    assert [row["state"] for row in doc["rows"]] == ["validated"] * 4 and doc["complete"], r.stderr[-3000:]
    assert all(row["cells"]["start-up"]["status"] == row["cells"]["generation"]["status"] == "passed" for row in doc["rows"])
    # the matrix names the node of every row; the three GPUs of the cluster took the four outputs
    hosts = {row["node"] for row in doc["rows"]}
    assert len(hosts) == 2, doc["rows"]
    assert "| node |" in (models / "validation-matrix.md").read_text()
    head, worker = (events(cluster["dirs"][cluster[n].node_id]) for n in ("head", "worker"))
    assert {e["gpu"] for e in head} == {0} and {e["gpu"] for e in worker} <= {0, 1} and worker
    assert sum(e["what"] == "start" for e in head + worker) == 4
    # each output's own record is what a local run writes: the GPU Ray gave it, its share
    for row in doc["rows"]:
        run = json.loads((Path(row["output"]) / "validation.json").read_text())["runs"][-1]
        assert run["settings"]["gpus"] in ("0", "1") and run["settings"]["gpu_memory_utilization"] == 0.3
        assert {r["check"]: r["status"] for r in run["rows"]}["start-up"] == "passed"
        assert run["python"] == built["python"], run["python"]
    assert doc["python"].startswith("each Ray node's own vLLM interpreter")
    assert standin_servers(built) == []


def test_a_server_of_two_gpus_goes_to_the_node_that_has_two_and_four_fit_nowhere(built, cluster, tmp_path):  # noqa: F811
    clear_events(cluster)
    models = workspace(built, tmp_path, ["a", "b"])
    r = run_batch(built, models, cluster["cluster"].address, "--tp", "2")
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["validated"] * 2, r.stderr[-3000:]
    assert not events(cluster["dirs"][cluster["head"].node_id])  # one GPU: never chosen
    runs = [json.loads((Path(row["output"]) / "validation.json").read_text())["runs"][-1] for row in doc["rows"]]
    assert all(run["settings"]["gpus"] == "0,1" for run in runs)
    r = run_batch(built, models, cluster["cluster"].address, "--tp", "4")
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["refused"] * 2 and r.returncode == 1
    note = doc["rows"][0]["note"]
    assert "takes 4 GPUs (TP 4 × PP 1): not enough GPUs in the Ray cluster: 4 needed, 3 in all (" in note, note
    assert ": 2, " in note and note.endswith(": 1); to serve on the CPU instead: --device cpu")  # each node's GPUs, the most first
    assert not events(cluster["dirs"][cluster["head"].node_id]) and standin_servers(built) == []


def test_a_server_larger_than_any_node_spans_nodes_with_vllms_ray_executor(built, cluster, tmp_path):  # noqa: F811
    """TP 3 on nodes of 1 and 2 GPUs: the task holds no GPU and starts the server on the node
    with two; the server, given --distributed-executor-backend ray and the cluster's address,
    places its three ranks over both nodes (the stand-in does as vLLM's Ray executor does)."""
    clear_events(cluster)
    models = workspace(built, tmp_path, ["wide"])
    r = run_batch(built, models, cluster["cluster"].address, "--tp", "3")
    doc = json.loads(r.stdout)
    # (the offline checks fail in the stand-in environment, which has no transformers)
    assert [row["state"] for row in doc["rows"]] == ["validated"], r.stderr[-3000:]
    assert doc["rows"][0]["cells"]["start-up"]["status"] == doc["rows"][0]["cells"]["generation"]["status"] == "passed"
    assert "submitted (3 GPUs across nodes: vLLM's Ray executor, started on " in r.stderr
    head, worker = cluster["head"].node_id, cluster["worker"].node_id
    assert not events(cluster["dirs"][head])  # started on the node with the most GPUs
    (start,) = [e for e in events(cluster["dirs"][worker]) if e["what"] == "start"]
    assert sorted(start["bundle_nodes"]) == sorted([head, worker, worker])  # three ranks, both nodes
    assert start["ray_address"].endswith(cluster["cluster"].address.rpartition(":")[2])
    run = json.loads((models / "wide" / "validation.json").read_text())["runs"][-1]
    assert run["settings"]["distributed_executor_backend"] == "ray" and run["settings"]["gpus"] is None
    assert run["settings"]["tp"] == 3
    assert run["serve_command"][run["serve_command"].index("--distributed-executor-backend") + 1] == "ray"
    assert {r["check"]: r["status"] for r in run["rows"]}["start-up"] == "passed"
    assert standin_servers(built) == []


def test_ray_with_jobs_is_one_clear_usage_error(tmp_path):
    r = subprocess.run(cli_argv("validate", "--all", str(tmp_path), "--ray", "127.0.0.1:1", "--jobs", "2"),
                       capture_output=True, text=True, env=driver_env(), timeout=60)
    assert r.returncode == 2 and "--jobs (side by side on this host) does not go with it" in r.stderr, r.stderr


def test_without_ray_the_flag_says_how_to_get_it_and_starts_nothing(tmp_path):
    hide = "import sys; sys.modules['ray'] = None; from mxtrim_tui.entry import main; sys.argv[0] = 'mxtrim'; sys.exit(main())"
    (tmp_path / "models").mkdir()
    r = subprocess.run([sys.executable, "-c", hide, "validate", "--all", str(tmp_path / "models"), "--ray"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Ray is not installed" in r.stderr and "pip install 'mxtrim-tui[ray]'" in r.stderr
    assert not (tmp_path / "models" / "validation-matrix.json").exists()


def test_no_cluster_at_the_address_is_one_clear_error(tmp_path):
    (tmp_path / "models").mkdir()
    r = subprocess.run(cli_argv("validate", "--all", str(tmp_path / "models"), "--ray", "127.0.0.1:9"),
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "no Ray cluster to join at 127.0.0.1:9" in r.stderr, r.stderr[-2000:]


def started_on(folder: Path) -> bool:
    return any(e["what"] == "start" for e in events(folder))


def wait_for(condition, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def two_single_gpu_nodes(built, tmp_path):  # noqa: F811
    """A cluster of its own (a node of it is removed): a head without GPUs, nodes A and B with
    one stand-in GPU each, so that two outputs run one on each."""
    c = Cluster()
    nodes = {}
    with node_environment(built):
        c.add_node(num_cpus=1, num_gpus=0, include_dashboard=False)
        for name in ("a", "b"):
            os.environ["STANDIN_GPU_DIR"] = str(_gpu_folder(tmp_path / f"node-{name}", 1))
            nodes[name] = (c.add_node(num_cpus=1, num_gpus=1), tmp_path / f"node-{name}")
        c.wait_for_nodes()
    yield c, nodes
    c.shutdown()


@pytest.mark.parametrize("retries", [0, 1])
def test_a_node_lost_mid_validation_leaves_its_row_interrupted_or_retried_elsewhere(built, two_single_gpu_nodes, tmp_path, retries):  # noqa: F811
    c, nodes = two_single_gpu_nodes
    models = workspace(built, tmp_path, ["a", "b"])
    env = driver_env()
    proc = subprocess.Popen(argv(built, models, c.address, "--retries", str(retries)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    (node_a, folder_a), (_, folder_b) = nodes["a"], nodes["b"]
    assert wait_for(lambda: started_on(folder_a)), proc.communicate(timeout=60)[1][-3000:]
    c.remove_node(node_a)  # its raylet and workers die, as with the machine
    out, err = proc.communicate(timeout=300)
    doc = json.loads(out)
    said = json.dumps(doc["rows"], indent=1) + "\n" + err[-3000:]
    lost = next((row for row in doc["rows"] if "node lost" in row["note"]), None)
    assert lost is not None, said
    other = next(row for row in doc["rows"] if row is not lost)
    assert other["state"] == "validated" and other["cells"]["start-up"]["status"] == "passed", said
    if retries:
        assert lost["state"] == "validated" and lost["cells"]["start-up"]["status"] == "passed", said
        assert lost["node"] == other["node"] and "validated again" in lost["note"]
        assert sum(e["what"] == "start" for e in events(folder_b)) == 2
    else:
        assert lost["state"] == "interrupted" and lost["note"].startswith("interrupted (node lost)")
        assert proc.returncode == 1
    # no server outlives the lost node: its validation stops it on its worker's death (or, on a
    # loaded machine, Ray's clean-up of the dead worker's children kills it first)
    assert wait_for(lambda: standin_servers(built) == [], 30), standin_servers(built)


def test_ctrl_c_cancels_every_task_and_leaves_no_server_on_any_node(built, cluster, tmp_path):  # noqa: F811
    clear_events(cluster)
    models = workspace(built, tmp_path, ["a", "b", "c"])
    env = driver_env()
    proc = subprocess.Popen(argv(built, models, cluster["cluster"].address), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    folders = list(cluster["dirs"].values())
    assert wait_for(lambda: sum(started_on(f) for f in folders) == 2), proc.communicate(timeout=60)[1][-3000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    doc = json.loads((models / "validation-matrix.json").read_text())
    assert doc["complete"] is False and "interrupted" in [row["state"] for row in doc["rows"]]
    assert wait_for(lambda: standin_servers(built) == [], 30), standin_servers(built)
    # each interrupted validation stopped its own server, as a terminal's Ctrl-C does
    starts = sum(e["what"] == "start" for f in folders for e in events(f))
    assert sum(e["what"] == "stop" for f in folders for e in events(f)) == starts


@needs_vllm
def test_a_real_cpu_build_validation_as_a_ray_task_gives_the_verdicts_of_a_local_run(cluster, tmp_path):
    """The real vLLM CPU build: one output validated here, then as a Ray task on a node of the
    cluster (the node's interpreter, a real vllm serve there): the same verdicts and KV figures."""
    models = tmp_path / "models"
    models.mkdir()
    out = shutil.copytree(small_llama_output(tmp_path / "src", "dummy"), models / "llama-dummy")
    local = run_cli("validate", str(out), "--serve", "--device", "cpu", "--python", VLLM_PYTHON, "--json", timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    here = json.loads(local.stdout)
    r = subprocess.run(cli_argv("validate", "--all", str(models), "--serve", "--again", "--device", "cpu", "--python",
                                VLLM_PYTHON, "--json", "--ray", cluster["cluster"].address),
                       capture_output=True, text=True, env=driver_env(), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = json.loads(r.stdout)["rows"]
    assert row["state"] == "validated" and row["ok"] and row["node"], row
    history = json.loads((out / "validation.json").read_text())["runs"]
    assert len(history) == 2
    there = history[-1]
    assert {x["check"]: x["status"] for x in there["rows"]} == {x["check"]: x["status"] for x in here["rows"]}
    kv = lambda run: run["memory"]["figures"]["kv_tokens"]["actual"]  # noqa: E731
    assert kv(there) == kv(here) > 0
    assert there["settings"] == here["settings"] and there["python"] == VLLM_PYTHON
    assert servers(tmp_path) == []


@pytest.fixture(scope="module")
def cpu_cluster(built):  # noqa: F811
    """A cluster of the CPU build: one node declaring no GPU, whose validations find the real
    vLLM CPU build ($MXTRIM_VLLM_PYTHON of its raylet) and no stand-in GPU."""
    c = Cluster()
    with node_environment(built, python=VLLM_PYTHON or sys.executable):
        c.add_node(num_cpus=2, num_gpus=0, include_dashboard=False)
        c.wait_for_nodes()
    yield c
    c.shutdown()


@needs_vllm
def test_without_device_a_cluster_without_gpus_serves_on_the_cpu_as_a_local_run_does(cpu_cluster, tmp_path):
    """No --device: a cluster whose nodes declare no GPU serves each output on the CPU (the real
    vLLM CPU build), as `validate --all` does on a machine without GPUs, instead of refusing it."""
    models = tmp_path / "models"
    models.mkdir()
    out = shutil.copytree(small_llama_output(tmp_path / "src", "dummy"), models / "llama-dummy")
    r = subprocess.run(cli_argv("validate", "--all", str(models), "--serve", "--again", "--python", VLLM_PYTHON,
                                "--json", "--ray", cpu_cluster.address),
                       capture_output=True, text=True, env=driver_env(), timeout=900)
    assert "not enough GPUs" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = json.loads(r.stdout)["rows"]
    assert row["state"] == "validated" and row["ok"] and row["node"], row
    assert row["cells"]["start-up"]["status"] == row["cells"]["generation"]["status"] == "passed", row
    run = json.loads((out / "validation.json").read_text())["runs"][-1]
    assert run["settings"]["device"] == "cpu" and run["settings"]["gpus"] is None, run["settings"]
    assert servers(tmp_path) == []


def test_a_gpu_device_on_a_cluster_without_gpus_is_refused_naming_the_cpu(built, cpu_cluster, tmp_path):  # noqa: F811
    models = workspace(built, tmp_path, ["a"])
    r = subprocess.run(cli_argv("validate", "--all", str(models), "--serve", "--again", "--device", "cuda", "--json",
                                "--ray", cpu_cluster.address),
                       capture_output=True, text=True, env=driver_env(), timeout=300)
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["refused"] and r.returncode == 1, r.stderr[-3000:]
    note = doc["rows"][0]["note"]
    assert "its server takes 1 GPU (TP 1 × PP 1): not enough GPUs in the Ray cluster: 1 needed, 0 in all (" in note, note
    assert note.endswith("--device cpu"), note  # the fix, last
    assert f"not started: {note}" in r.stderr
