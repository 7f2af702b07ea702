"""A workspace of N stand-in outputs validated with ``mxtrim validate --all --ray`` over 1, 2
and 4 nodes of a local Ray cluster (``ray.cluster_utils.Cluster``), each node with one
stand-in GPU, against the same workspace on one node (the baseline, run in the same session).

The stand-in server (tests/test_validate_parallel.py) spends its start-up mostly waiting, as a
GPU server's start-up is mostly spent away from the driver's machine, so the ratio measures
what Ray's placement gives and what the per-task overhead (a worker, the child ``mxtrim
validate``, its offline checks) costs. All nodes share this machine's cores.

    python benchmarks/ray_nodes.py [--outputs 8] [--nodes 1,2,4] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from engine_support import cli_argv, small_llama_output  # noqa: E402
from test_validate_parallel import STANDIN_PYNVML, STANDIN_SERVER  # noqa: E402
from test_vllm_discovery import make_env  # noqa: E402


def workspace(root: Path, n: int) -> tuple[Path, Path, str]:
    out = small_llama_output(root, "dummy")
    models = root / "models"
    models.mkdir()
    for i in range(n):
        shutil.copytree(out, models / f"out-{i:02d}")
    (root / "standin").mkdir()
    (root / "standin" / "pynvml.py").write_text(STANDIN_PYNVML)
    (root / "server.py").write_text(STANDIN_SERVER)
    return models, root / "server.py", make_env(root / "env", vllm="0.32.0")


def one_run(root: Path, models: Path, server: Path, python: str, nodes: int, label: str) -> dict:
    from ray.cluster_utils import Cluster

    saved = dict(os.environ)
    os.environ.pop("MXTRIM_VLLM_PYTHON", None)
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root / "standin"), str(ROOT)])
    c = Cluster()
    try:
        c.add_node(num_cpus=0, num_gpus=0, include_dashboard=False)
        for i in range(nodes):
            gpus = root / f"{label}-node{i}"
            gpus.mkdir()
            (gpus / "gpus.json").write_text(json.dumps([{"total": 140 * 2**30, "processes": []}]))
            os.environ["STANDIN_GPU_DIR"] = str(gpus)
            c.add_node(num_cpus=1, num_gpus=1)
        c.wait_for_nodes()
        env = {k: v for k, v in saved.items() if k not in ("CUDA_VISIBLE_DEVICES", "MXTRIM_VLLM_PYTHON", "RAY_ADDRESS")}
        argv = cli_argv("validate", "--all", str(models), "--serve", "--again", "--python", python, "--launcher",
                        f"{sys.executable} {server} serve", "--timeout", "120", "--device", "cuda", "--json", "--ray", c.address)
        started = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
        wall = time.monotonic() - started
        doc = json.loads(r.stdout)
        states = [row["state"] for row in doc["rows"]]
        nodes_used = len({row["node"] for row in doc["rows"]})
        startups = [row["cells"]["start-up"]["status"] for row in doc["rows"]]
        return {"nodes": nodes, "wall_s": wall, "states": states, "nodes_used": nodes_used, "startups": startups}
    finally:
        c.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--outputs", type=int, default=8)
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="mxtrim-ray-bench-") as tmp:
        root = Path(tmp)
        models, server, python = workspace(root, args.outputs)
        results = []
        for rep in range(args.repeat):
            for n in counts:
                results.append(one_run(root, models, server, python, n, f"r{rep}-n{n}"))
                print(json.dumps(results[-1]), flush=True)
    one = min((r["wall_s"] for r in results if r["nodes"] == 1), default=float("nan"))
    print(f"\n{args.outputs} stand-in outputs, one GPU per node, baseline: 1 node ({one:.1f} s)\n")
    print("| nodes | wall clock | × one node | rows validated | nodes used |")
    print("| ---: | ---: | ---: | --- | ---: |")
    for r in results:
        ok = sum(s == "validated" for s in r["states"])
        print(f"| {r['nodes']} | {r['wall_s']:.1f} s | {one / r['wall_s']:.2f}× | {ok}/{len(r['states'])} | {r['nodes_used']} |")


if __name__ == "__main__":
    main()
