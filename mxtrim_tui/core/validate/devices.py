"""Which devices a validation server may use: on a shared GPU box, only devices nobody else
is using. Explicit ``--gpus`` are checked the same way; a busy device is never taken."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # cpu | cuda | maca
    gpus: str | None  # the value for CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES
    note: str  # what was found and decided, for the report
    refused: str | None = None  # why no server can start (busy devices), else None


def _busy(gpu) -> str | None:
    if gpu.processes:
        names = ", ".join(f"{p.name}[{p.pid}]" for p in gpu.processes[:3])
        return f"GPU {gpu.index} is in use by {names}"
    return None


def choose_devices(requested: str, probe, count: int, gpus: str | None = None) -> DeviceChoice:
    """``requested``: auto | cpu | cuda | maca; ``count``: devices the server needs (TP x PP)."""
    if requested == "cpu":
        return DeviceChoice("cpu", None, "CPU (asked for)")
    visible = list(probe.gpus) if probe is not None and probe.available else []
    if not visible:
        if requested == "auto":
            return DeviceChoice("cpu", None, f"CPU: no GPU visible ({probe.reason if probe is not None else 'not probed'})")
        return DeviceChoice(requested, gpus, "no GPU visible", refused=f"--device {requested}: no GPU visible ({probe.reason})")
    kind = requested if requested != "auto" else ("maca" if probe.vendor == "metax" else "cuda")
    by_index = {g.index: g for g in visible}
    if gpus is not None:
        wanted = [int(x) for x in gpus.split(",") if x.strip()]
        unknown = [i for i in wanted if i not in by_index]
        if unknown:
            return DeviceChoice(kind, gpus, "", refused=f"--gpus {gpus}: no GPU {unknown[0]} among the visible ones")
        busy = [b for b in (_busy(by_index[i]) for i in wanted) if b]
        if busy:
            return DeviceChoice(kind, gpus, "", refused="; ".join(busy) + ": never shared with another workload")
        return DeviceChoice(kind, gpus, f"GPU {gpus} (asked for, idle)")
    free = [g.index for g in visible if not g.processes]
    if len(free) < count:
        busy = [b for b in (_busy(g) for g in visible) if b]
        return DeviceChoice(kind, None, "", refused=f"{len(free)} idle GPU(s) of {len(visible)}, {count} needed; " + "; ".join(busy))
    chosen = ",".join(str(i) for i in free[:count])
    return DeviceChoice(kind, chosen, f"GPU {chosen}: idle ({len(visible) - len(free)} busy left alone)")
