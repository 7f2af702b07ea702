"""Validating a workspace across a Ray cluster (``mxtrim validate --all --ray [ADDRESS]``).

Each output's validation is one Ray task, placed by Ray on a node with the GPUs its server
needs (``num_gpus`` = TP × PP, whole devices; none on the CPU, which ``--device auto`` takes where
no node declares a GPU, as a local run does where none is visible). The task runs on that node the
very child a side-by-side batch runs, ``mxtrim validate OUT --json --progress``, in the node's
interpreter (the one its Ray workers run), so the output's ``validation.json``, logs and
README are what a local run writes, and the vLLM interpreter is resolved on that node
(``--python`` as given, else the node's ``$MXTRIM_VLLM_PYTHON``, settings and checkouts). The
devices Ray assigned the task are passed on as ``--gpus``: no two tasks hold one GPU, so no two
servers measure their memory on one device at once. A server that takes more GPUs than any one
node holds runs with vLLM's own Ray executor (``--distributed-executor-backend ray``), which
places its TP × PP workers over the nodes with a placement group of this cluster: its task
holds no GPU and starts the server on the node with the most; one the whole cluster cannot
hold is refused before anything starts, with each node's GPUs as the evidence. The outputs
must lie on a filesystem every node mounts at the same path: a node that cannot read one
refuses its row and says so.

Faults: a task whose node died or whose worker was killed leaves its row "interrupted (node
lost)", submitted once more (Ray places it on a node still alive) for each ``--retries``.
Ctrl-C cancels every task: Ray interrupts each one, which interrupts its child as a terminal's
Ctrl-C would (the child stops its server and records the interruption); a task that does not
end within ``CANCEL_GRACE`` seconds is killed with its worker, and its child, which gets a
parent-death signal, stops its server in turn. Ray's own APIs place and cancel: nothing here
schedules.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PLAN_FILE = "mxtrim-plan.json"

CANCEL_GRACE = 60.0  # seconds a cancelled task has to stop its child before it is killed
LOST = "interrupted (node lost)"
# The task's child gets SIGTERM (which it takes as Ctrl-C: it stops its server) when the worker
# that started it dies, killed by a forced cancel or with its node: set in the child itself,
# then exec'd into mxtrim, as a Ray worker has threads that make a preexec_fn unsafe (Linux).
BOUND_TO_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(143)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class RayUnavailable(Exception):
    """Ray cannot be used: not installed, or no cluster at the address (the message says which)."""


def ray_module():
    """The ``ray`` package, or RayUnavailable saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            f"Ray is not installed in mxtrim's interpreter ({sys.executable}): install mxtrim with its Ray extra, "
            "pip install 'mxtrim-tui[ray]' (or pip install ray), the same Ray version as the cluster; nothing was started"
        ) from None
    return ray


def connect(address: str | None):
    """Join the cluster at ``address`` (None or ``auto``: ``$RAY_ADDRESS``, else the cluster
    running on this machine) as a driver, never starting one; the ``ray`` module."""
    ray = ray_module()
    where = address or "auto"
    if ray.is_initialized():
        return ray
    unreachable = _unreachable(where)
    if unreachable:  # Ray itself would retry for minutes
        raise RayUnavailable(f"no Ray cluster to join at {where} ({unreachable}): start one (ray start --head) or give "
                             "its address (--ray HOST:PORT, or $RAY_ADDRESS); nothing was started")
    try:
        ray.init(address=where, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayUnavailable(f"no Ray cluster to join at {where} ({said}): start one (ray start --head) or give its "
                             "address (--ray HOST:PORT, or $RAY_ADDRESS); nothing was started") from None
    return ray


def _unreachable(address: str) -> str | None:
    """Why nothing answers at a HOST:PORT address (None: something does, or it is not one)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


@dataclass(frozen=True)
class RayNode:
    id: str
    address: str  # the node's IP as Ray knows it
    gpus: int  # whole GPUs it declares

    def __str__(self) -> str:
        return f"{self.address} ({self.id[:8]})"


def gpu_nodes(ray) -> list[RayNode]:
    """The live nodes of the cluster and the GPUs each declares, most first."""
    nodes = [RayNode(n["NodeID"], n.get("NodeManagerAddress", "?"), int(n.get("Resources", {}).get("GPU", 0)))
             for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: -n.gpus)


def cluster_device(requested: str, nodes: list[RayNode]) -> str:
    """The device the batch's servers run on (cpu | cuda | maca), chosen as a local run chooses
    it (devices.choose_devices), the GPUs the live nodes declare standing for the visible ones:
    ``auto`` is the CPU where no node declares a GPU. Ray places each server's GPUs, so none is
    counted here."""
    from ..probe.gpu import GpuInfo, GpuProbe
    from .devices import choose_devices

    gpus = tuple(GpuInfo(i, str(node), None, None, None)
                 for i, node in enumerate(n for n in nodes for _ in range(n.gpus)))
    return choose_devices(requested, GpuProbe("ray", bool(gpus), "no node of the Ray cluster declares a GPU", gpus),
                          count=0).device


def across_nodes_refusal(gpus: int, nodes: list[RayNode]) -> str | None:
    """Why a server of ``gpus`` GPUs cannot run even across the nodes (None: together they hold
    enough), with the evidence (each node's GPUs) and the fix that needs none."""
    total = sum(n.gpus for n in nodes)
    if gpus <= total:
        return None
    each = ", ".join(f"{n}: {n.gpus}" for n in nodes) or "no live node"
    return f"not enough GPUs in the Ray cluster: {gpus} needed, {total} in all ({each}); to serve on the CPU instead: --device cpu"


@dataclass
class RayJob:
    index: int
    output: Path
    gpus: int  # whole devices its server takes (TP × PP; 0 on the CPU)
    # more GPUs than one node holds: vLLM's Ray executor places the workers across nodes, and
    # the task (holding no GPU itself) starts the server on this node, the one with the most
    across: RayNode | None = None
    attempts: int = 0
    losses: list[str] = field(default_factory=list)  # what Ray said each time it was lost


def validate_on_node(output: str, argv: list[str], across: bool = False) -> dict:
    """The body of a task, on the node Ray chose: the child ``mxtrim validate OUT`` with the
    GPUs Ray assigned (``across``: none; the server's own Ray executor places its workers in
    this cluster); its JSON, exit status and last lines, with the node that ran it."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    # the host, and Ray's node id (several nodes may share a host)
    node = {"host": f"{socket.gethostname()} ({node_id[:8]})", "id": node_id}
    plan = Path(output) / PLAN_FILE
    if not os.access(plan, os.R_OK):
        return {"node": node, "unreadable": f"node {node['host']} cannot read {plan}: the outputs must lie on a "
                                            "filesystem every node mounts at the same path"}
    cmd = [sys.executable, "-m", "mxtrim_tui", "validate", output, *argv]
    if sys.platform.startswith("linux"):
        cmd = [sys.executable, "-c", BOUND_TO_PARENT, str(os.getpid()), *cmd]
    gpus = [str(g) for g in ray.get_gpu_ids()]
    env = dict(os.environ)
    if gpus or across:
        if gpus:
            cmd += ["--gpus", ",".join(gpus)]
        else:  # the server joins this very cluster; Ray hid every GPU from a task holding none
            cmd += ["--distributed-executor-backend", "ray"]
            env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        # the child names the devices itself (--gpus): Ray's numbering of them is not passed on
        for name in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES"):
            env.pop(name, None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt:  # ray.cancel: what a terminal's Ctrl-C does to a validation
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=CANCEL_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise
    try:
        doc = json.loads(out) if out.strip() else None
    except ValueError:
        doc = None
    return {"node": node, "code": proc.returncode, "doc": doc, "tail": err.splitlines()[-40:]}


class RayBatch:
    """Submit every job, collect each result as it lands (``done(job, result)``), resubmit a job
    lost with its node while ``retries`` allow (``lost(job, node, retried)``), and on Ctrl-C
    cancel what is still running (``cancelled(job)``) before the interrupt goes on."""

    def __init__(self, ray, jobs: list[RayJob], argv_for, retries: int, done, lost, cancelled, started=None):
        self.ray, self.jobs, self.argv_for, self.retries = ray, jobs, argv_for, retries
        self.done, self.lost, self.cancelled, self.started = done, lost, cancelled, started or (lambda job: None)
        self.remote = ray.remote(validate_on_node)
        self.pending: dict = {}

    def _submit(self, job: RayJob) -> None:
        job.attempts += 1
        placement = {"num_gpus": job.gpus}
        if job.across is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            placement = {"num_gpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(job.across.id, soft=False)}
        ref = self.remote.options(**placement, num_cpus=1, max_retries=0, name=f"mxtrim validate {job.output.name}"
                                  ).remote(str(job.output), self.argv_for(job), job.across is not None)
        self.pending[ref] = job
        self.started(job)

    def _lost(self, exc: BaseException) -> bool:
        """A failure of the node or of the worker, not of the validation's own code."""
        e = self.ray.exceptions
        kinds = tuple(k for k in (getattr(e, n, None) for n in (
            "NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError",
            "RaySystemError", "TaskUnschedulableError")) if k is not None)
        return isinstance(exc, kinds)

    def run(self) -> None:
        for job in self.jobs:
            self._submit(job)
        try:
            while self.pending:
                ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    job = self.pending.pop(ref)
                    try:
                        result = self.ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - told apart below
                        if not self._lost(exc):
                            self.done(job, {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"})
                            continue
                        retried = job.attempts <= self.retries
                        self.lost(job, str(exc).strip().splitlines()[0][:200], retried)
                        if retried:
                            self._submit(job)
                        continue
                    self.done(job, result)
        except KeyboardInterrupt:
            self._cancel_all()
            raise

    def _cancel_all(self) -> None:
        refs = list(self.pending)
        for ref in refs:
            self.ray.cancel(ref, force=False)
        deadline = time.monotonic() + CANCEL_GRACE + 5
        waiting = refs
        while waiting and time.monotonic() < deadline:
            _, waiting = self.ray.wait(waiting, num_returns=len(waiting), timeout=1.0)
        for ref in waiting:
            self.ray.cancel(ref, force=True)
        for ref in refs:
            self.cancelled(self.pending.pop(ref))
