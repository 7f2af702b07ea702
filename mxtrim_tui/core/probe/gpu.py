"""GPU occupancy probes: NVML on NVIDIA (``pynvml`` from nvidia-ml-py); on MetaX, in order,
``pymxml``, ``pymxsml`` and the ``mx-smi`` command.

Every probe returns data or a reason, never raises: no driver, no library, a container
without devices, MIG, UMA devices without dedicated memory... all read as "not available"
with the reason, like nvitop does. Process names come from psutil when the PID is visible.

MetaX sources, the first that lists a GPU wins (``GpuProbe.source`` names it):

1. ``pymxml``: the NVML-style ctypes binding of ``libmxsml.so`` (``nvmlInit``,
   ``nvmlDeviceGetMemoryInfo``... on top of the library's ``mxSmlEx*`` functions) that
   vLLM-MetaX's batch harness ships as ``tools/batched_test/pymxml.py``. Importable, or else
   that file in the current folder or one of its parents (the user's own vLLM-MetaX
   checkout), loaded by path.
2. ``pymxsml``: MetaX's SDK binding. ``mxSmlInit``, ``mxSmlGetDeviceCount``,
   ``mxSmlGetDeviceInfo(i).deviceName``, ``mxSmlGetMemoryInfo(i).vramTotal/.vramUse`` in KiB;
   utilisation and processes through ``pymxsml.mxsml_extension`` (``mxSmlExInit``,
   ``mxSmlExDeviceGetHandleByIndex``, ``mxSmlExDeviceGetComputeRunningProcesses``, NVML-style
   records in bytes). Importable, or else from the SDK's wheel
   ``$MACA_PATH/share/mxsml/pymxsml-*.whl`` (``MACA_PATH`` defaults to ``/opt/maca``).
3. ``mx-smi``: ``$MXTRIM_MXDRIVER_PATH/bin/mx-smi`` (default ``/opt/mxdriver``) or the one on
   ``PATH``; its default table (name, ``used/total MiB``, processes, and the ``Sliced GPU``
   section of an sGPU instance, whose memory quota is then the GPU's total), else
   ``mx-smi --show-memory`` (``vis_vram total/used`` in KB).

Visible devices: NVML lists every device of the machine whatever ``CUDA_VISIBLE_DEVICES``
says (checked on an H200, tests/fixtures/nvml_h200.json), and the MetaX management library
behind all three MetaX sources is treated the same with ``MACA_VISIBLE_DEVICES``: the indices
are the machine's (the ones the server's visible-devices variable takes), and the probed
vendor's variable is recorded in ``GpuProbe.visible_devices`` as the user set it (None when
unset).
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


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
    sliced: bool = False  # a sliced (sGPU) instance: total_bytes is its memory quota


@dataclass(frozen=True)
class GpuProbe:
    vendor: str  # "nvidia", "metax", "none"
    available: bool
    reason: str = ""
    gpus: tuple[GpuInfo, ...] = ()
    driver: str = ""
    visible_devices: str | None = field(default=None)
    source: str = ""  # what answered: "pynvml", "pymxml", "pymxsml", "mx-smi"


def _process_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another namespace, gone, or no permission
        return "?"


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# the variable that selects the devices a process of each vendor's runtime sees
VISIBLE_DEVICES_ENV = {"nvidia": "CUDA_VISIBLE_DEVICES", "metax": "MACA_VISIBLE_DEVICES"}

# where MetaX installs its SDK (the pymxsml wheel) and its driver tools (mx-smi)
MACA_PATH_ENV = "MACA_PATH"
DEFAULT_MACA_PATH = "/opt/maca"
MXDRIVER_PATH_ENV = "MXTRIM_MXDRIVER_PATH"
DEFAULT_MXDRIVER_PATH = "/opt/mxdriver"
# vLLM-MetaX's batch harness keeps its binding here, relative to the checkout
HARNESS_PYMXML = Path("tools") / "batched_test" / "pymxml.py"
MX_SMI_TIMEOUT_S = 10


def _nvml_probe(nv, vendor: str = "nvidia", source: str = "pynvml") -> GpuProbe:
    """Any module with NVML's Python surface (pynvml, pymxml); ``vendor`` names the result
    and which visible-devices variable it records."""
    nv.nvmlInit()
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = _text(nv.nvmlDeviceGetName(h))
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
            for kind in ("Compute", "Graphics"):
                for p in _nvml_processes(nv, h, kind):
                    used_mem = getattr(p, "usedGpuMemory", None)
                    procs.append(GpuProcess(int(p.pid), _process_name(int(p.pid)), int(used_mem) if used_mem else None))
            gpus.append(GpuInfo(i, name, total, used, free, util, tuple(procs)))
        return GpuProbe(vendor, True, "", tuple(gpus), driver, os.environ.get(VISIBLE_DEVICES_ENV[vendor]), source)
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _nvml_processes(nv, handle, kind: str) -> list:
    """The versioned getter first (vLLM-MetaX's harness calls ``..._v3``; pymxml's unversioned
    one raises a library-mismatch error, not an NVMLError, when its library lacks it)."""
    for name in (f"nvmlDeviceGet{kind}RunningProcesses_v3", f"nvmlDeviceGet{kind}RunningProcesses"):
        getter = getattr(nv, name, None)
        if getter is None:
            continue
        try:
            return list(getter(handle))
        except Exception:  # noqa: BLE001 - not supported, no permission, version mismatch
            continue
    return []


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


# --- MetaX 1: pymxml (vLLM-MetaX's harness binding) ---------------------------------------------
def _harness_pymxml(cwd: Path) -> Path | None:
    for folder in (cwd, *cwd.parents):
        candidate = folder / HARNESS_PYMXML
        if candidate.is_file():
            return candidate
    return None


def _load_module_file(name: str, path: Path):
    """``path`` imported as module ``name``. It is registered in ``sys.modules`` before it
    runs: pymxml builds its error classes through ``sys.modules[__name__]``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _probe_pymxml(cwd: Path) -> GpuProbe:
    label = "pymxml"
    try:
        import pymxml as mx  # type: ignore[import-not-found]
    except ImportError:
        found = _harness_pymxml(cwd)
        if found is None:
            return GpuProbe("metax", False, f"pymxml is not installed and no {HARNESS_PYMXML} in {cwd} or its parents")
        label = f"pymxml ({found})"
        try:
            mx = _load_module_file("pymxml", found)
        except Exception as exc:  # noqa: BLE001 - the harness file of another release, a syntax error...
            return GpuProbe("metax", False, f"{label} failed to load: {exc}")
    except Exception as exc:  # noqa: BLE001 - a broken install (its library loaded at import)
        return GpuProbe("metax", False, f"pymxml failed to import: {exc}")
    if not hasattr(mx, "nvmlInit"):
        return GpuProbe("metax", False, f"{label} found but its API is not recognised")
    try:
        return _nvml_probe(mx, "metax", "pymxml")
    except Exception as exc:  # noqa: BLE001 - MXSMLEX Shared Library Not Found, Driver Not Loaded...
        return GpuProbe("metax", False, f"{label} unavailable: {exc}")


# --- MetaX 2: pymxsml (the SDK's binding) --------------------------------------------------------
def _maca_root(maca_root: Path | str | None) -> Path:
    return Path(maca_root or os.environ.get(MACA_PATH_ENV) or DEFAULT_MACA_PATH)


def _version_key(wheel: str) -> tuple:
    """``pymxsml-2.2.9-py3-none-any.whl`` sorts by its version, numbers as numbers."""
    parts = Path(wheel).name.split("-")
    version = parts[1] if len(parts) > 1 else ""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+_]", version))


def _sdk_wheels(maca_root: Path) -> list[str]:
    return sorted(glob.glob(str(maca_root / "share" / "mxsml" / "pymxsml-*.whl")), key=_version_key, reverse=True)


def _wheel_path_entry(wheel: str) -> str:
    """What goes on ``sys.path`` for ``wheel``: the wheel itself when it is pure Python
    (zipimport reads it), else a copy unpacked in mxtrim's cache (native files cannot be
    loaded from inside a zip)."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if not any(re.search(r"\.(so|pyd|dylib)(\.|$)", n) for n in names):
            return wheel
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        stat = os.stat(wheel)
        target = Path(base) / "mxtrim" / "pymxsml" / f"{Path(wheel).stem}-{stat.st_size}-{int(stat.st_mtime)}"
        done = target / ".unpacked"
        if not done.exists():
            target.mkdir(parents=True, exist_ok=True)
            zf.extractall(target)  # zipfile drops absolute and ".." parts of member names
            done.write_text(wheel, encoding="utf-8")
        return str(target)


def _import_pymxsml(maca_root: Path):
    """(pymxsml, its mxsml_extension or None, label); ``LookupError`` with the reason when
    there is none, the import's own error when an installed one is broken."""
    try:
        return importlib.import_module("pymxsml"), _import_extension(), "pymxsml"
    except ImportError:
        pass
    wheels = _sdk_wheels(maca_root)
    if not wheels:
        raise LookupError(f"pymxsml is not installed and no pymxsml-*.whl in {maca_root / 'share' / 'mxsml'}")
    wheel = wheels[0]
    label = f"pymxsml ({wheel})"
    try:
        entry = _wheel_path_entry(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise LookupError(f"{label} cannot be read: {exc}") from None
    sys.path.insert(0, entry)
    importlib.invalidate_caches()
    try:
        return importlib.import_module("pymxsml"), _import_extension(), label
    except Exception as exc:  # noqa: BLE001 - libmxsml.so missing at import, another Python...
        raise LookupError(f"{label} failed to import: {exc}") from None
    finally:
        # the package keeps its own __path__: the wheel is not left on everyone's sys.path
        if entry in sys.path:
            sys.path.remove(entry)


def _import_extension():
    try:
        return importlib.import_module("pymxsml.mxsml_extension")
    except Exception:  # noqa: BLE001 - older SDKs: memory without utilisation and processes
        return None


def _first_answer(*reads) -> object | None:
    """The first of ``reads`` (calls) that returns something, errors read as nothing."""
    for read in reads:
        try:
            value = read()
        except Exception:  # noqa: BLE001 - not in this release, not supported by this device
            continue
        if value is not None and value != "":
            return value
    return None


def _pymxsml_device(mx, ext, index: int) -> GpuInfo | None:
    """Device ``index`` through pymxsml (memory) and its extension when it is up (``ext``:
    utilisation and processes); None for an SR-IOV card's physical function (its VFs are the
    devices, gpustack's MetaX detector skips it the same way)."""
    info = mx.mxSmlGetDeviceInfo(index)
    pf_mode = getattr(mx, "MXSML_VIRTUALIZATION_MODE_PF", None)
    if pf_mode is not None and getattr(info, "mode", None) == pf_mode:
        return None
    try:
        mem = mx.mxSmlGetMemoryInfo(index)
        total, used = int(mem.vramTotal) * 1024, int(mem.vramUse) * 1024  # KiB
        free = total - used
    except Exception:  # noqa: BLE001
        total = used = free = None
    handle = _first_answer(lambda: ext.mxSmlExDeviceGetHandleByIndex(index)) if ext is not None else None
    util = _first_answer(lambda: int(ext.mxSmlExDeviceGetUtilizationRates(handle).gpu) if handle is not None else None,
                         lambda: int(mx.mxSmlGetDeviceIpUsage(index, mx.MXSML_USAGE_XCORE)))
    procs = []
    if handle is not None:
        try:
            for p in ext.mxSmlExDeviceGetComputeRunningProcesses(handle):
                used_mem = getattr(p, "usedGpuMemory", None)  # bytes, as NVML's
                procs.append(GpuProcess(int(p.pid), _process_name(int(p.pid)), int(used_mem) if used_mem else None))
        except Exception:  # noqa: BLE001 - not readable here: occupancy still is
            pass
    return GpuInfo(index, _text(info.deviceName), total, used, free, util, tuple(procs))


def _pymxsml_probe(mx, ext) -> GpuProbe:
    mx.mxSmlInit()
    if ext is not None and _first_answer(lambda: ext.mxSmlExInit() or True) is None:
        ext = None  # the extension's library is not there: memory only
    try:
        driver = _first_answer(lambda: ext.mxSmlExSystemGetDriverVersion() if ext is not None else None,
                               lambda: mx.mxSmlGetDeviceVersion(0, mx.MXSML_VERSION_DRIVER))
        gpus = [g for i in range(int(mx.mxSmlGetDeviceCount())) if (g := _pymxsml_device(mx, ext, i)) is not None]
        return GpuProbe("metax", True, "", tuple(gpus), _text(driver or ""),
                        os.environ.get(VISIBLE_DEVICES_ENV["metax"]), "pymxsml")
    finally:
        for shutdown in (getattr(ext, "mxSmlExShutdown", None), getattr(mx, "mxSmlShutdown", None)):
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:  # noqa: BLE001
                    pass


def _probe_pymxsml(maca_root: Path) -> GpuProbe:
    try:
        mx, ext, label = _import_pymxsml(maca_root)
    except LookupError as exc:
        return GpuProbe("metax", False, str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken install (libmxsml.so loaded at import)
        return GpuProbe("metax", False, f"pymxsml failed to import: {exc}")
    try:
        return _pymxsml_probe(mx, ext)
    except Exception as exc:  # noqa: BLE001 - MXSMLError: no driver, no device node...
        return GpuProbe("metax", False, f"{label} unavailable: {exc}")


# --- MetaX 3: mx-smi ------------------------------------------------------------------------------
_UNITS = {"B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}
_SIZE = r"(\d+(?:\.\d+)?)\s*([KMGT]?i?B|[KMGT])?"
_PAIR = re.compile(rf"(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*/\s*{_SIZE}", re.IGNORECASE)
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_GPU_BLOCK = re.compile(r"^GPU#(\d+)\s+(\S+)")
_PROCESS_ROW = re.compile(r"^(\d+)\s+(\d+)\s+(.*?)\s+(\d+)$")


def _bytes(number: str, unit: str | None, default_unit: str = "MIB") -> int:
    """mx-smi's sizes are binary whatever they are called: ``KB`` lines add up to the
    ``MiB`` of its table (64 GiB = 67108864 KB = 65536 MiB on a C500)."""
    return int(float(number) * _UNITS[(unit or default_unit).upper()])


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if not line.startswith("|"):
        return None
    return [c.strip() for c in line.strip("|").split("|")]


class _MxSmiReading:
    """mx-smi's output read line by line: the default table (a row pair per GPU, then the
    ``Sliced GPU`` and ``Process:`` sections) or the ``--show-memory`` listing (``GPU#N`` blocks
    of ``key : value`` lines)."""

    def __init__(self) -> None:
        self.gpus: dict[int, dict] = {}  # in the order mx-smi lists them
        self.current: int | None = None
        self.section = "gpus"
        self.sliced: dict[int, list[tuple[int, int]]] = {}
        self.sliced_unit: str | None = None

    def gpu(self, index: int, name: str = "") -> dict:
        entry = self.gpus.setdefault(index, {"name": "", "total": None, "used": None, "util": None, "procs": [], "quota": None})
        entry["name"] = entry["name"] or name
        return entry

    def read(self, line: str) -> None:
        if re.search(r"\bSliced GPU", line, re.IGNORECASE):
            self.section, self.sliced_unit = "sliced", None
        elif re.search(r"\bProcess(es)?\s*:", line):
            self.section = "process"
        elif block := _GPU_BLOCK.match(line):  # --show-memory: "GPU#0  MXC500  0000:08:00.0"
            self.current, self.section = int(block.group(1)), "gpus"
            self.gpu(self.current, block.group(2))
        elif self.current is not None and ":" in line and not line.startswith("|"):
            self.memory_line(line)
        elif cells := _cells(line):
            {"process": self.process_row, "sliced": self.sliced_row}.get(self.section, self.table_row)(line, cells)

    def memory_line(self, line: str) -> None:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        size = re.match(rf"^\s*{_SIZE}\s*$", value)
        if not size:
            return
        figure = _bytes(size.group(1), size.group(2), "KB")
        if key == "vis_vram total":
            self.gpu(self.current)["total"] = figure
        elif key == "vis_vram used":
            self.gpu(self.current)["used"] = figure
        elif "quota" in key and ("vram" in key or "mem" in key):
            # a sliced instance's quota line: its wording is not in any public capture
            self.gpu(self.current)["quota"] = figure

    def process_row(self, line: str, cells: list[str]) -> None:
        m = _PROCESS_ROW.match(" ".join(cells).strip())
        if m:
            pid, name = int(m.group(2)), m.group(3).strip()
            # mx-smi's own name: in a container its PIDs may be the host's, so psutil here
            # could name another process; psutil only when mx-smi gives none
            self.gpu(int(m.group(1)))["procs"].append(GpuProcess(pid, name or _process_name(pid), int(m.group(4)) * 2**20))

    def sliced_row(self, line: str, cells: list[str]) -> None:
        # The sGPU table's layout is not in any public capture (only that the section sits
        # between the GPU table and the process table, and that an instance has a --vram
        # quota): a row is read as "<GPU> ... <used>/<quota> [unit]", the unit from the pair,
        # else from the header's "(MiB)", else MiB.
        header = re.search(r"\(([KMGT]i?B)\)", line, re.IGNORECASE)
        if header and not re.match(r"^\d", cells[0]):
            self.sliced_unit = header.group(1)
        first = re.match(r"^(\d+)\b", cells[0])
        pair = _PAIR.search(line)
        if first and pair:
            unit = pair.group(4) or pair.group(2) or self.sliced_unit
            self.sliced.setdefault(int(first.group(1)), []).append(
                (_bytes(pair.group(1), pair.group(2) or unit), _bytes(pair.group(3), unit)))

    def table_row(self, line: str, cells: list[str]) -> None:
        # "| 0   MetaX C500 | 0000:01:00.0 | 0% |", then "| 45C  48W / 350W | 858/65536 MiB | Available |"
        head = re.match(r"^(\d+)\s+(\S.*)$", cells[0])
        if head and len(cells) > 1 and _BDF.match(cells[1]):
            self.current = int(head.group(1))
            util = re.match(r"^(\d+)\s*%", cells[2]) if len(cells) > 2 else None
            self.gpu(self.current, head.group(2).strip())["util"] = int(util.group(1)) if util else None
        elif self.current is not None and len(cells) > 1 and (pair := _PAIR.fullmatch(cells[1])):
            unit = pair.group(4) or pair.group(2)
            entry = self.gpu(self.current)
            entry["used"], entry["total"] = _bytes(pair.group(1), pair.group(2) or unit), _bytes(pair.group(3), unit)

    def result(self) -> list[GpuInfo]:
        out = []
        for index, g in self.gpus.items():
            total, used, sliced = g["total"], g["used"], False
            instances = self.sliced.get(index, [])
            if len(instances) == 1:  # this instance's own budget; several = the host's view of the card
                (used, total), sliced = instances[0], True
            elif g["quota"] is not None:
                total, sliced = g["quota"], True
            free = total - used if total is not None and used is not None else None
            out.append(GpuInfo(index, g["name"] or "MetaX GPU", total, used, free, g["util"], tuple(g["procs"]), sliced))
        return out


def parse_mx_smi(text: str) -> tuple[str, list[GpuInfo]]:
    """(driver, GPUs) from ``mx-smi`` or ``mx-smi --show-memory``; tolerant of what it does not
    know (columns added by another release, a translated header, full-width colons)."""
    text = text.replace("\uff1a", ":")  # mx-smi in a Chinese locale writes "："
    m = re.search(r"Driver Version:\s*(\S+)", text)
    reading = _MxSmiReading()
    for line in text.splitlines():
        reading.read(line.strip())
    return (m.group(1) if m else ""), reading.result()


def _mx_smi_command(driver_root: Path | str | None) -> tuple[str | None, str]:
    root = Path(driver_root or os.environ.get(MXDRIVER_PATH_ENV) or DEFAULT_MXDRIVER_PATH)
    bundled = root / "bin" / "mx-smi"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled), ""
    return shutil.which("mx-smi"), f"mx-smi not found ({bundled}, PATH)"


def _run_mx_smi(command: str, *args: str) -> str:
    done = subprocess.run([command, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=MX_SMI_TIMEOUT_S)
    if done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise RuntimeError(f"exit {done.returncode}" + (f": {why[0]}" if why else ""))
    return done.stdout


def _probe_mx_smi(driver_root: Path | str | None) -> GpuProbe:
    command, missing = _mx_smi_command(driver_root)
    if command is None:
        return GpuProbe("metax", False, missing)
    try:
        driver, gpus = parse_mx_smi(_run_mx_smi(command))
        if not any(g.total_bytes for g in gpus):  # an unknown table: the memory listing instead
            driver2, gpus2 = parse_mx_smi(_run_mx_smi(command, "--show-memory"))
            if gpus2:
                driver, gpus = driver or driver2, gpus2
    except subprocess.TimeoutExpired:
        return GpuProbe("metax", False, f"mx-smi ({command}) timed out after {MX_SMI_TIMEOUT_S} s")
    except Exception as exc:  # noqa: BLE001 - no driver loaded, no device node, no permission
        return GpuProbe("metax", False, f"mx-smi ({command}) failed: {exc}")
    if not gpus:
        return GpuProbe("metax", False, f"mx-smi ({command}) lists no GPU")
    return GpuProbe("metax", True, "", tuple(gpus), driver, os.environ.get(VISIBLE_DEVICES_ENV["metax"]), "mx-smi")


# --- MetaX: the three in order ----------------------------------------------------------------------
def probe_metax(*, cwd: Path | str | None = None, maca_root: Path | str | None = None,
                driver_root: Path | str | None = None) -> GpuProbe:
    """pymxml, then pymxsml, then mx-smi: the first that lists a GPU answers; when none does,
    the reason names all three. ``cwd`` (where vLLM-MetaX's harness file is looked for, with
    its parents), ``maca_root`` ($MACA_PATH) and ``driver_root`` ($MXTRIM_MXDRIVER_PATH) point
    elsewhere than this process's folder and MetaX's install folders."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    reasons = []
    for attempt in (lambda: _probe_pymxml(here), lambda: _probe_pymxsml(_maca_root(maca_root)),
                    lambda: _probe_mx_smi(driver_root)):
        probe = attempt()
        if probe.available and probe.gpus:
            return probe
        reasons.append(probe.reason or f"{probe.source} lists no GPU")
    return GpuProbe("metax", False, "; ".join(reasons))


def probe_gpus(**metax) -> GpuProbe:
    """NVIDIA first, then MetaX; the first that answers wins. ``metax``: probe_metax's roots."""
    nvidia = probe_nvidia()
    if nvidia.available and nvidia.gpus:
        return nvidia
    metax_probe = probe_metax(**metax)
    if metax_probe.available and metax_probe.gpus:
        return metax_probe
    return GpuProbe("none", False, f"{nvidia.reason}; {metax_probe.reason}")



# what each source is called where a user reads which probe answered
SOURCE_WORDS = {"pynvml": "NVML (pynvml)", "pymxml": "pymxml", "pymxsml": "pymxsml", "mx-smi": "mx-smi"}
TRIED = "NVML (pynvml), pymxml, pymxsml, mx-smi"


def probe_json(probe: GpuProbe) -> dict:
    """The probe as ``mxtrim plan --json`` gives it: which source answered and each GPU's name
    and memory, or that none was found and why (every source tried)."""
    doc = {"found": bool(probe.available and probe.gpus), "vendor": probe.vendor,
           "source": probe.source or None, "driver": probe.driver or None,
           "visible_devices": probe.visible_devices}
    if not doc["found"]:
        return doc | {"tried": TRIED.split(", "), "reason": probe.reason}
    doc["devices"] = [{"index": g.index, "name": g.name, "used_bytes": g.used_bytes, "total_bytes": g.total_bytes,
                       "free_bytes": g.free_bytes, "processes": len(g.processes), "sliced": g.sliced}
                      for g in probe.gpus]
    return doc
