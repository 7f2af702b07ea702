"""Stand-ins for the three MetaX occupancy sources, written into tmp folders by the tests of
``mxtrim_tui.core.probe.gpu`` (tests/test_probe_metax_sources.py). Each one reproduces the
surface mxtrim reads, as it was read in public sources (reference only, nothing copied):

* ``pymxml.py`` in a fake vLLM-MetaX checkout (``tools/batched_test/``): the NVML-style ctypes
  binding of MetaX-MACA/vLLM-metax ``tools/batched_test/pymxml.py`` (read at commit
  3aadf0845da8045577ef6761c25c55265e7b5fde) and how the harness's ``gpu_manager.py`` uses it.
* ``pymxsml`` (with ``pymxsml.mxsml_extension``) in a wheel under a fake ``$MACA_PATH/share/mxsml/``:
  the SDK binding as vLLM-metax's Dockerfile installs it (``/opt/maca/share/mxsml/pymxsml-*.whl``),
  its calls as gpustack's MetaX detector, ray's MetaX accelerator manager and
  linkedlist771/metax-mxtop (``src/mxtop/backends/pymxsml.py`` and ``typings/pymxsml``, commit
  ba4bf4769daf9bbfd70116b8945e904be9f9e626) make them.
* ``mx-smi``: an executable printing the real tool's default table (public captures of mx-smi
  2.1.6 and 2.2.4: a DocFlowAI README, a PaddleNLP guide), its process table (mxtop's tests) and
  ``--show-memory`` (scripts reading ``vis_vram total/used : N KB`` under ``GPU#0  MXC500  BDF``
  headers, mx-smi 2.2.9 captures). The ``Sliced GPU`` section of an sGPU instance is NOT in any
  public capture found: only that it sits between the GPU table and the process table (a
  public script prints ``mx-smi | sed -n '/Sliced GPU/,/Process/p'``) and that an instance is
  created with a ``--vram`` quota; its layout below is an assumption the parser is tolerant of.
"""

from __future__ import annotations

import json
import stat
import sys
import zipfile
from pathlib import Path

GiB = 2**30
MiB = 2**20

# --- pymxml -------------------------------------------------------------------------------
PYMXML = '''"""Stand-in for vLLM-MetaX's tools/batched_test/pymxml.py (an NVML-style ctypes binding of
libmxsml.so's mxSmlEx* functions). Follows what that file does where mxtrim depends on it:

* error classes are generated per error code through ``sys.modules[__name__]`` (so the module
  must be registered under its name while it runs, as an import does);
* ``nvmlDeviceGetName`` / ``nvmlSystemGetDriverVersion`` return ``str`` (its convertStrBytes);
* ``c_nvmlMemory_t`` has free / total / used in bytes;
* ``nvmlDeviceGetComputeRunningProcesses_v3`` is what the harness's gpu_manager.py calls; the
  unversioned getter is wrapped in throwOnVersionMismatch, which raises
  MXSMLEXLibraryMismatchError (not an NVMLError) when the library lacks the symbol: this
  stand-in is such a library;
* calls before nvmlInit or after the last nvmlShutdown fail with "Uninitialized".
Figures: DATA below, written by the test.
"""

import sys
import string

MXSMLEX_SUCCESS = 0
MXSMLEX_ERROR_UNINITIALIZED = 1
MXSMLEX_ERROR_INVALID_ARGUMENT = 2
MXSMLEX_ERROR_DRIVER_NOT_LOADED = 9
MXSMLEX_ERROR_FUNCTION_NOT_FOUND = 13


class NVMLError(Exception):
    _valClassMapping = dict()
    _errcode_to_string = {
        MXSMLEX_ERROR_UNINITIALIZED: "Uninitialized",
        MXSMLEX_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        MXSMLEX_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        MXSMLEX_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, "MXSMLEX Error with code %d" % self.value)


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]  # fails unless the module is registered under its name
    for err_name in [x for x in dir(this_module) if x.startswith("MXSMLEX_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("MXSMLEX_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ):
                return NVMLError.__new__(typ, val)
            return new

        cls = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        cls.__module__ = __name__
        setattr(this_module, class_name, cls)
        NVMLError._valClassMapping[err_val] = cls


_extractNVMLErrorsAsClasses()


class MXSMLEXLibraryMismatchError(Exception):
    pass


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class c_nvmlMemory_t(_Struct):
    pass


class c_nvmlUtilization_t(_Struct):
    pass


class c_nvmlProcessInfo_v3_t(_Struct):
    pass


class _Handle:
    def __init__(self, index):
        self.index = index


_refcount = 0


def _live():
    if _refcount <= 0:
        raise NVMLError(MXSMLEX_ERROR_UNINITIALIZED)
    return DATA


def _device(handle):
    if not isinstance(handle, _Handle):
        raise NVMLError(MXSMLEX_ERROR_INVALID_ARGUMENT)
    return _live()["devices"][handle.index]


def nvmlInit():
    global _refcount
    if DATA.get("fail") == "init":
        raise NVMLError(MXSMLEX_ERROR_DRIVER_NOT_LOADED)
    _refcount += 1


def nvmlShutdown():
    global _refcount
    if _refcount <= 0:
        raise NVMLError(MXSMLEX_ERROR_UNINITIALIZED)
    _refcount -= 1


def nvmlSystemGetDriverVersion():
    return _live()["driver"]


def nvmlDeviceGetCount():
    return len(_live()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_live()["devices"]):
        raise NVMLError(MXSMLEX_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetName(handle):
    return _device(handle)["name"]


def nvmlDeviceGetMemoryInfo(handle, version=None):
    d = _device(handle)
    return c_nvmlMemory_t(free=d["total"] - d["used"], total=d["total"], used=d["used"])


def nvmlDeviceGetUtilizationRates(handle):
    return c_nvmlUtilization_t(gpu=_device(handle)["util"], memory=0)


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return [c_nvmlProcessInfo_v3_t(pid=pid, usedGpuMemory=used, gpuInstanceId=0, computeInstanceId=0)
            for pid, used in _device(handle)["procs"]]


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle):
    _device(handle)
    return []


def nvmlDeviceGetComputeRunningProcesses(handle):
    _device(handle)
    raise MXSMLEXLibraryMismatchError("Unversioned function called and the pyMXSMLEX version does not match")


nvmlDeviceGetGraphicsRunningProcesses = nvmlDeviceGetComputeRunningProcesses
'''


def pymxml_data(pid: int, driver: str = "2.14.8", fail: str | None = None) -> dict:
    """Two C500s, 64 GiB each; GPU 1 busy with ``pid`` (48 GiB)."""
    return {"driver": driver, "fail": fail, "devices": [
        {"name": "MetaX C500", "total": 64 * GiB, "used": 858 * MiB, "util": 0, "procs": []},
        {"name": "MetaX C500", "total": 64 * GiB, "used": 49 * GiB, "util": 87, "procs": [[pid, 48 * GiB]]},
    ]}


def write_pymxml(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pymxml.py"
    path.write_text(PYMXML + f"\nDATA = {data!r}\n", encoding="utf-8")
    return path


def workspace_with_pymxml(root: Path, data: dict) -> Path:
    """A vLLM-MetaX checkout holding the harness binding; returns the checkout."""
    write_pymxml(root / "tools" / "batched_test", data)
    (root / "vllm_metax").mkdir(exist_ok=True)
    return root


# --- pymxsml (SDK wheel) --------------------------------------------------------------------
PYMXSML_INIT = '''"""Stand-in for MetaX's SDK binding pymxsml (shipped as /opt/maca/share/mxsml/pymxsml-*.whl).
What mxtrim reads, as gpustack's MetaX detector and metax-mxtop call it: mxSmlInit();
mxSmlGetDeviceCount(); mxSmlGetDeviceInfo(i) with deviceName, bdfId, uuid and mode (the
MXSML_VIRTUALIZATION_MODE_* enum: NONE 0 bare metal, PF 1 physical function, VF 2 virtual);
mxSmlGetMemoryInfo(i) with vramTotal / vramUse in KiB; mxSmlGetDeviceVersion(i, MXSML_VERSION_DRIVER)
(the _mxSmlVersionUnit_t enum: BIOS 0, DRIVER 1). Errors are MXSMLError. No shutdown call is
known for this layer (neither gpustack nor mxtop makes one). Figures: DATA below.
"""

MXSML_VIRTUALIZATION_MODE_NONE = 0
MXSML_VIRTUALIZATION_MODE_PF = 1
MXSML_VIRTUALIZATION_MODE_VF = 2
MXSML_VERSION_BIOS = 0
MXSML_VERSION_DRIVER = 1


class MXSMLError(Exception):
    pass


class _Info:
    def __init__(self, **fields):
        self.__dict__.update(fields)


_initialised = False


def _live():
    if not _initialised:
        raise MXSMLError("mxsml is not initialised")
    return DATA


def mxSmlInit():
    global _initialised
    if DATA.get("fail") == "init":
        raise MXSMLError("Failed to open /dev/mxcd: No such file or directory")
    _initialised = True


def mxSmlGetDeviceCount():
    return len(_live()["devices"])


def _device(index):
    devices = _live()["devices"]
    if not 0 <= index < len(devices):
        raise MXSMLError("invalid device id %d" % index)
    return devices[index]


def mxSmlGetDeviceInfo(index):
    d = _device(index)
    return _Info(deviceName=d["name"], bdfId=d["bdf"], uuid=d["uuid"], mode=d["mode"])


def mxSmlGetMemoryInfo(index):
    d = _device(index)
    return _Info(vramTotal=d["total_kib"], vramUse=d["used_kib"])


def mxSmlGetDeviceVersion(index, unit):
    _device(index)
    return DATA["driver"] if unit == MXSML_VERSION_DRIVER else "1.24.4.0"


def mxSmlGetMacaVersion():
    _live()
    return "2.33.0.5"
'''

PYMXSML_EXTENSION = '''"""Stand-in for pymxsml.mxsml_extension: the NVML-style layer (mxSmlExInit / mxSmlExShutdown,
mxSmlExDeviceGetCount, mxSmlExDeviceGetHandleByIndex, mxSmlExDeviceGetUtilizationRates(h).gpu,
mxSmlExDeviceGetComputeRunningProcesses(h) records with pid / usedGpuMemory in bytes,
mxSmlExSystemGetDriverVersion), as ray's MetaX accelerator manager and metax-mxtop call it.
Errors are MXSMLEXError; calls outside init/shutdown fail.
"""

from pymxsml import DATA

_open = 0


class MXSMLEXError(Exception):
    pass


class _Record:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def _live():
    if _open <= 0:
        raise MXSMLEXError("Uninitialized")
    return DATA


def mxSmlExInit():
    global _open
    _open += 1


def mxSmlExShutdown():
    global _open
    if _open <= 0:
        raise MXSMLEXError("Uninitialized")
    _open -= 1


def mxSmlExSystemGetDriverVersion():
    return _live()["driver"]


def mxSmlExDeviceGetCount():
    return len(_live()["devices"])


def mxSmlExDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_live()["devices"]):
        raise MXSMLEXError("Invalid Argument")
    return ("handle", index)


def mxSmlExDeviceGetUtilizationRates(handle):
    return _Record(gpu=_live()["devices"][handle[1]]["util"], memory=0)


def mxSmlExDeviceGetComputeRunningProcesses(handle):
    return [_Record(pid=pid, usedGpuMemory=used, gpuInstanceId=0, computeInstanceId=0)
            for pid, used in _live()["devices"][handle[1]]["procs"]]
'''


def pymxsml_data(pid: int, driver: str = "2.14.9", fail: str | None = None, pf: bool = False) -> dict:
    """GPU 0 a C500 with 1 GiB used; GPU 1 32 GiB used by ``pid``; with ``pf``, a third
    device that is an SR-IOV physical function (not a usable device)."""
    devices = [
        {"name": "MetaX C500", "bdf": "0000:08:00.0", "uuid": "GPU-0", "mode": 0,
         "total_kib": 64 * 2**20, "used_kib": 2**20, "util": 0, "procs": []},
        {"name": "MetaX C500", "bdf": "0000:09:00.0", "uuid": "GPU-1", "mode": 0,
         "total_kib": 64 * 2**20, "used_kib": 32 * 2**20, "util": 55, "procs": [[pid, 30 * GiB]]},
    ]
    if pf:
        devices.append({"name": "MetaX C500", "bdf": "0000:0a:00.0", "uuid": "GPU-PF", "mode": 1,
                        "total_kib": 64 * 2**20, "used_kib": 0, "util": 0, "procs": []})
    return {"driver": driver, "fail": fail, "devices": devices}


def pymxsml_files(data: dict) -> dict[str, str]:
    return {
        "pymxsml/__init__.py": PYMXSML_INIT + f"\nDATA = {data!r}\n",
        "pymxsml/mxsml_extension/__init__.py": PYMXSML_EXTENSION,
    }


def write_pymxsml_package(folder: Path, data: dict) -> Path:
    """An installed pymxsml (site-packages style folder to put on PYTHONPATH)."""
    for name, text in pymxsml_files(data).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def write_sdk_wheel(maca_root: Path, data: dict, version: str = "2.2.10", native: bool = False,
                    broken: bool = False) -> Path:
    """``$MACA_PATH/share/mxsml/pymxsml-<version>-py3-none-any.whl``; ``native`` adds a shared
    object (which zipimport cannot load, so mxtrim unpacks it); ``broken`` one that fails at import."""
    folder = maca_root / "share" / "mxsml"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"pymxsml-{version}-py3-none-any.whl"
    files = pymxsml_files(data)
    if broken:
        files["pymxsml/__init__.py"] = "raise OSError('libmxsml.so: cannot open shared object file')\n"
    if native:
        files["pymxsml/_native.so"] = "not a real library: never loaded\n"
    dist = f"pymxsml-{version}.dist-info"
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: pymxsml\nVersion: {version}\n"
    files[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


# --- mx-smi ----------------------------------------------------------------------------------
MX_SMI = r'''"""Stand-in for MetaX's mx-smi. Prints, like the real tool:
* no argument: the default table (header with "Kernel Mode Driver Version", one row pair per
  GPU: "index  name | bus id | util%" then "temp  power | used/total MiB | state"), a
  "Sliced GPU" section when a GPU is sliced (layout ASSUMED, see tests/metax_standins.py),
  then the process table (GPU, PID, name, usage in MiB);
* --show-memory: "GPU#N  MXC500  BDF" blocks with "vis_vram total / used / usage" lines in KB.
Scenario in CONFIG below: "table" (the default), "memory" (a default table of an unknown
layout: the memory listing is then needed) or "fail" (no driver: exit 1).
"""
import sys

CONFIG = __CONFIG__
HEAD = """mx-smi  version: 2.2.4

=================== MetaX System Management Interface Log ===================
Timestamp                                         : Tue Jun 17 08:51:52 2025

Attached GPUs                                     : %d
"""


def table():
    out = [HEAD % len(CONFIG["gpus"]),
           "+---------------------------------------------------------------------------------+",
           "| MX-SMI 2.2.4                        Kernel Mode Driver Version: %-12s|" % CONFIG["driver"],
           "| MACA Version: 2.33.0.5              BIOS Version: 1.24.4.0                      |",
           "|------------------------------------+---------------------+----------------------+",
           "| GPU         NAME                   | Bus-id              | GPU-Util             |",
           "| Temp        Pwr:Usage/Cap          | Memory-Usage        | GPU-State            |",
           "|====================================+=====================+======================|"]
    for g in CONFIG["gpus"]:
        out.append("| %-11d %-22s | %-19s | %-20s |" % (g["index"], g["name"], g["bdf"], "%d%%" % g["util"]))
        out.append("| %-11s %-22s | %-19s | %-20s |" % ("45C", "48W / 350W", "%d/%d MiB" % (g["used_mib"], g["total_mib"]), "Available"))
        out.append("+------------------------------------+---------------------+----------------------+")
    sliced = [g for g in CONFIG["gpus"] if g.get("sgpu")]
    if sliced:
        out += ["",
                "+---------------------------------------------------------------------------------+",
                "| Sliced GPU:                                                                     |",
                "|  GPU    sGPU-ID    Alias              Compute    Memory-Usage(MiB)              |",
                "|=================================================================================|"]
        for g in sliced:
            s = g["sgpu"]
            out.append("|  %-6d %-10d %-18s %-10s %-30s |" % (g["index"], s["id"], s["alias"], "%d%%" % s["compute"], "%d/%d" % (s["used_mib"], s["quota_mib"])))
        out.append("+---------------------------------------------------------------------------------+")
    out += ["",
            "+---------------------------------------------------------------------------------+",
            "| Process:                                                                        |",
            "|  GPU                    PID         Process Name                 GPU Memory     |",
            "|                                                                  Usage(MiB)     |",
            "|=================================================================================|"]
    procs = [(g["index"], p) for g in CONFIG["gpus"] for p in g["procs"]]
    if not procs:
        out.append("|  no process found                                                               |")
    for index, (pid, name, mib) in procs:
        out.append("|  %-20d %-11d %-28s %-15d|" % (index, pid, name, mib))
    out += ["+---------------------------------------------------------------------------------+", "", "End of Log"]
    return "\n".join(out)


def memory():
    out = [HEAD % len(CONFIG["gpus"])]
    for g in CONFIG["gpus"]:
        out += ["GPU#%d  %s  %s" % (g["index"], g["short"], g["bdf"]), "",
                "\tMemory",
                "\t    vis_vram total                            : %d KB" % (g["total_mib"] * 1024),
                "\t    vis_vram used                             : %d KB" % (g["used_mib"] * 1024),
                "\t    vis_vram usage                            : %d %%" % (100 * g["used_mib"] // g["total_mib"]), ""]
    out.append("End of Log")
    return "\n".join(out)


if CONFIG["scenario"] == "fail":
    sys.stderr.write("Failed to initialize mxsml: driver not loaded\n")
    sys.exit(1)
if "--show-memory" in sys.argv[1:]:
    print(memory())
elif CONFIG["scenario"] == "memory":
    print(HEAD % len(CONFIG["gpus"]) + "| a layout of another release, without a memory column |\nEnd of Log")
else:
    print(table())
'''


def mx_smi_config(pid: int, scenario: str = "table", driver: str = "2.14.8") -> dict:
    """GPU 0 a plain C500; GPU 1 sliced: one sGPU instance with a 16 GiB quota, 2 GiB used,
    busy with ``pid`` (a name mx-smi reports, 2000 MiB)."""
    return {"scenario": scenario, "driver": driver, "gpus": [
        {"index": 0, "name": "MetaX C500", "short": "MXC500", "bdf": "0000:08:00.0", "util": 0,
         "used_mib": 858, "total_mib": 65536, "procs": []},
        {"index": 1, "name": "MetaX C500", "short": "MXC500", "bdf": "0000:09:00.0", "util": 37,
         "used_mib": 20480, "total_mib": 65536, "procs": [[pid, "vllm-worker", 2000]],
         "sgpu": {"id": 2, "alias": "sgpu-test", "compute": 20, "used_mib": 2048, "quota_mib": 16384}},
    ]}


def write_mx_smi(folder: Path, config: dict) -> Path:
    """An executable ``mx-smi`` in ``folder`` (``bin/`` of a fake driver root, or a PATH entry)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mx-smi"
    path.write_text(f"#!{sys.executable}\n" + MX_SMI.replace("__CONFIG__", json.dumps(config)), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


NVML_NO_LIBRARY = """
class NVMLError(Exception):
    pass
def nvmlInit():
    raise NVMLError("NVML Shared Library Not Found")
"""


def write_failing_pynvml(folder: Path) -> Path:
    """A pynvml without its library, so that probe_gpus() reaches MetaX on any machine."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(NVML_NO_LIBRARY, encoding="utf-8")
    return folder

