"""Which devices a validation server may use: on a shared GPU box, only devices nobody else
is using. Explicit ``--gpus`` are checked the same way; a busy device is never taken."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..probe.gpu import VISIBLE_DEVICES_ENV
from ..units import plural


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # cpu | cuda | maca
    gpus: str | None  # the value for CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES
    note: str  # what was found and decided, for the report
    refused: str | None = None  # why no server can start (busy devices), else None


def others_on(gpu, ours, unseen_are_ours: bool) -> list:
    """The processes using ``gpu`` that are not in ``ours`` (a batch's own). With
    ``unseen_are_ours``, a pid of another namespace (NVML in a container) is taken for one of
    ours: it cannot be told apart while ours run there."""
    return [p for p in gpu.processes if p.pid not in ours and not (unseen_are_ours and not pid_exists(p.pid))]


def _busy(gpu, neighbours: frozenset[int] = frozenset()) -> str | None:
    """Why ``gpu`` is another workload's. ``neighbours``: the processes of the batch this
    server runs in (``validate --jobs``), which placed it beside them."""
    others = others_on(gpu, neighbours, unseen_are_ours=bool(neighbours))
    if others:
        names = ", ".join(f"{p.name}[{p.pid}]" for p in others[:3])
        return f"GPU {gpu.index} is in use by {names}"
    return None


def pid_exists(pid: int) -> bool:
    """Whether ``pid`` names a process of this pid namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def choose_devices(requested: str, probe, count: int, gpus: str | None = None,
                   neighbours: frozenset[int] = frozenset()) -> DeviceChoice:
    """``requested``: auto | cpu | cuda | maca; ``count``: devices the server needs (TP x PP);
    ``neighbours``: the batch's own processes, which may share the GPUs ``gpus`` names."""
    if requested == "cpu":
        return DeviceChoice("cpu", None, "CPU (asked for)")
    visible = list(probe.gpus) if probe is not None and probe.available else []
    if not visible:
        if requested == "auto":
            return DeviceChoice("cpu", None, f"CPU: no GPU visible ({probe.reason if probe is not None else 'not probed'})")
        return DeviceChoice(requested, gpus, "no GPU visible", refused=f"--device {requested}: no GPU visible ({probe.reason})")
    kind = requested if requested != "auto" else ("maca" if probe.vendor == "metax" else "cuda")
    allowed = _user_visible(probe.visible_devices)
    if allowed is not None:
        # NVML lists every GPU whatever CUDA_/MACA_VISIBLE_DEVICES say: keep to the user's
        # (the server's own variable is then set to physical indices among them)
        env = VISIBLE_DEVICES_ENV.get(probe.vendor, "CUDA_VISIBLE_DEVICES")
        visible = [g for g in visible if g.index in allowed]
        if not visible:
            why = f"{env}={probe.visible_devices} names no GPU of this machine"
            if requested == "auto":
                return DeviceChoice("cpu", None, f"CPU: {why}")
            return DeviceChoice(requested, gpus, why, refused=f"--device {requested}: {why}")
    by_index = {g.index: g for g in visible}
    if gpus is not None:
        wanted = [int(x) for x in gpus.split(",") if x.strip()]
        unknown = [i for i in wanted if i not in by_index]
        if unknown:
            return DeviceChoice(kind, gpus, "", refused=f"--gpus {gpus}: no GPU {unknown[0]} among the visible ones")
        busy = [b for b in (_busy(by_index[i], neighbours) for i in wanted) if b]
        if busy:
            return DeviceChoice(kind, gpus, "", refused="; ".join(busy) + ": never shared with another workload")
        shared = [i for i in wanted if by_index[i].processes]
        if shared:
            return DeviceChoice(kind, gpus, f"GPU {gpus} (placed by the batch, shared with its other servers)")
        return DeviceChoice(kind, gpus, f"GPU {gpus} (asked for, idle)")
    free = [g.index for g in visible if not g.processes]
    if len(free) < count:
        busy = [b for b in (_busy(g) for g in visible) if b]
        return DeviceChoice(kind, None, "", refused=f"{plural(len(free), 'idle GPU')} of {len(visible)}, {count} needed; " + "; ".join(busy))
    chosen = ",".join(str(i) for i in free[:count])
    return DeviceChoice(kind, chosen, f"GPU {chosen}: idle ({len(visible) - len(free)} busy left alone)")


def _user_visible(value: str | None) -> set[int] | None:
    """The GPU indices a user's CUDA_/MACA_VISIBLE_DEVICES allows (None: unset, or not a plain
    list of indices, such as UUIDs or MIG names, which are left to the runtime)."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return {int(p) for p in parts}


def across_ray_cluster(requested: str, probe, count: int) -> DeviceChoice:
    """The devices of a server whose TP x PP workers vLLM's Ray executor places over the Ray
    cluster (``--distributed-executor-backend ray``): Ray assigns every worker its GPU, so none
    is named here and this host's GPUs are not counted against ``count`` (vLLM needs one GPU on
    the node it starts on, and says so when there is none)."""
    where = os.environ.get("RAY_ADDRESS") or "the cluster running here"
    if requested == "cpu":
        return DeviceChoice("cpu", None, f"CPU, {count} worker(s) placed by vLLM's Ray executor ({where})")
    kind = requested if requested != "auto" else ("maca" if probe is not None and probe.vendor == "metax" else "cuda")
    return DeviceChoice(kind, None, f"{plural(count, 'GPU')} across the Ray cluster at {where}, placed by vLLM's Ray executor")
