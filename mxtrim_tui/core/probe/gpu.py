"""GPU occupancy probes: NVML on NVIDIA (``pynvml`` from nvidia-ml-py), ``pymxml`` on MetaX.

Every probe returns data or a reason, never raises: no driver, no library, a container
without devices, MIG, UMA devices without dedicated memory... all read as "not available"
with the reason, like nvitop does. Process names come from psutil when the PID is visible.

Visible devices: NVML lists every device of the machine whatever ``CUDA_VISIBLE_DEVICES``
says (checked on an H200, tests/fixtures/nvml_h200.json), and MetaX's NVML-compatible
``pymxml`` is treated the same with ``MACA_VISIBLE_DEVICES``: the indices are the machine's
(the ones the server's visible-devices variable takes), and the probed vendor's variable is
recorded in ``GpuProbe.visible_devices`` as the user set it (None when unset).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: int | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    utilization_pct: int | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuProbe:
    vendor: str  # "nvidia", "metax", "none"
    available: bool
    reason: str = ""
    gpus: tuple[GpuInfo, ...] = ()
    driver: str = ""
    visible_devices: str | None = field(default=None)


def _process_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another namespace, gone, or no permission
        return "?"


# the variable that selects the devices a process of each vendor's runtime sees
VISIBLE_DEVICES_ENV = {"nvidia": "CUDA_VISIBLE_DEVICES", "metax": "MACA_VISIBLE_DEVICES"}


def _nvml_probe(nv, vendor: str = "nvidia") -> GpuProbe:
    """Any module with NVML's Python surface (pynvml, pymxml); ``vendor`` names the result
    and which visible-devices variable it records."""
    nv.nvmlInit()
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                total, used, free = int(mem.total), int(mem.used), int(mem.free)
            except nv.NVMLError:  # UMA devices (GB10) have no dedicated framebuffer
                total = used = free = None
            try:
                util = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except nv.NVMLError:
                util = None
            procs = []
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    for p in getattr(nv, getter)(h):
                        used_mem = getattr(p, "usedGpuMemory", None)
                        procs.append(GpuProcess(int(p.pid), _process_name(int(p.pid)), int(used_mem) if used_mem else None))
                except (nv.NVMLError, AttributeError):
                    pass
            gpus.append(GpuInfo(i, name, total, used, free, util, tuple(procs)))
        return GpuProbe(vendor, True, "", tuple(gpus), driver, os.environ.get(VISIBLE_DEVICES_ENV[vendor]))
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def probe_nvidia() -> GpuProbe:
    try:
        import pynvml as nv
    except ImportError:
        return GpuProbe("nvidia", False, "pynvml (nvidia-ml-py) is not installed")
    except Exception as exc:  # noqa: BLE001 - a broken install
        return GpuProbe("nvidia", False, f"pynvml failed to import: {exc}")
    try:
        return _nvml_probe(nv)
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return GpuProbe("nvidia", False, f"NVML unavailable: {exc}")


def probe_metax() -> GpuProbe:
    """vLLM-MetaX machines ship ``pymxml``, an NVML-style binding of the MetaX management
    library (functions prefixed ``mxSml``/``nvml``-compatible depending on the release)."""
    try:
        import pymxml as mx  # type: ignore[import-not-found]
    except ImportError:
        return GpuProbe("metax", False, "pymxml is not installed")
    except Exception as exc:  # noqa: BLE001 - a broken install (its library loaded at import)
        return GpuProbe("metax", False, f"pymxml failed to import: {exc}")
    try:
        # Releases expose an NVML-compatible surface; use it when present.
        if hasattr(mx, "nvmlInit"):
            return _nvml_probe(mx, "metax")
        return GpuProbe("metax", False, "pymxml found but its API is not recognised")
    except Exception as exc:  # noqa: BLE001
        return GpuProbe("metax", False, f"pymxml unavailable: {exc}")


def probe_gpus() -> GpuProbe:
    """NVIDIA first, then MetaX; the first that answers wins."""
    nvidia = probe_nvidia()
    if nvidia.available and nvidia.gpus:
        return nvidia
    metax = probe_metax()
    if metax.available and metax.gpus:
        return metax
    return GpuProbe("none", False, f"{nvidia.reason}; {metax.reason}")
