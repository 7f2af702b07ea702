"""The MetaX probe without a MetaX GPU: a fake ``pymxml`` (tests/fixtures/pymxml_nvml) serves
figures NVML returned on a real NVIDIA H200 (tests/fixtures/nvml_h200.json), and the probe runs
in a fresh interpreter whose PYTHONPATH holds the fake, so ``import pymxml`` goes through the
real import machinery as on a vLLM-MetaX machine. The other MetaX sources (pymxsml, mx-smi:
tests/test_probe_metax_sources.py) are pointed at empty folders, so only the fake answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FAKE = FIXTURES / "pymxml_nvml"
CAPTURE = json.loads((FIXTURES / "nvml_h200.json").read_text(encoding="utf-8"))
BUSY = CAPTURE["snapshots"]["busy"]
IDLE = CAPTURE["snapshots"]["idle"]

# What the child prints: every probe, the device choice the CLI makes from probe_gpus() and the
# visible-devices variables the server would get.
CHILD = r"""
import dataclasses, json, sys
from mxtrim_tui.core.probe import gpu
from mxtrim_tui.core.validate.devices import choose_devices
from mxtrim_tui.core.validate.serve import ServeOptions, serve_env

out = {"metax": dataclasses.asdict(gpu.probe_metax()), "nvidia": dataclasses.asdict(gpu.probe_nvidia())}
probe = gpu.probe_gpus()
out["gpus"] = dataclasses.asdict(probe)
choice = choose_devices("auto", probe, count=1)
out["choice"] = dataclasses.asdict(choice)
env = serve_env(ServeOptions(python=sys.executable, device=choice.device, gpus=choice.gpus))
out["server_env"] = {k: env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES")}
mx = sys.modules.get("pymxml")
out["pymxml_file"] = getattr(mx, "__file__", None)
out["pymxml_open_inits"] = getattr(mx, "_init_count", None)
print(json.dumps(out))
"""


def run_child(*path: Path, **env: str) -> dict:
    """The probes in a fresh interpreter; ``path``: folders put before the repository on
    PYTHONPATH; ``env``: variables set for it (the visible-devices ones are cleared first).
    It runs in an empty folder with an empty PATH and MetaX's install folders pointing nowhere:
    no harness pymxml.py, SDK wheel or mx-smi of this machine takes part."""
    child_env = {
        k: v for k, v in os.environ.items()
        if k not in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES", "PYTHONPATH", "MACA_PATH")
        and not k.startswith("PYMXML_FAKE")
    }
    child_env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in path), str(ROOT)])
    with tempfile.TemporaryDirectory(prefix="mxtrim-metax-") as nowhere:
        child_env.update(PATH=nowhere, MACA_PATH=str(Path(nowhere, "maca")), MXTRIM_MXDRIVER_PATH=str(Path(nowhere, "mxdriver")))
        child_env.update(env)
        done = subprocess.run([sys.executable, "-c", CHILD], env=child_env, cwd=nowhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def other_metax_reasons(reason: str) -> list[str]:
    """What the MetaX reason says after pymxml's: pymxsml's, then mx-smi's (none of them here)."""
    rest = reason.split("; ")[1:]
    assert [r.split(" ")[0] for r in rest] == ["pymxsml", "mx-smi"], reason
    assert rest[0].startswith("pymxsml is not installed and no pymxsml-*.whl in ") and rest[1].startswith("mx-smi not found (")
    return rest


def stub(tmp_path: Path, name: str, source: str) -> Path:
    """A folder holding one module ``name`` (put before the fake to shadow a package)."""
    folder = tmp_path / f"stub_{name}"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    return folder


NVML_NO_LIBRARY = """
class NVMLError(Exception):
    pass
def nvmlInit():
    raise NVMLError("NVML Shared Library Not Found")
"""
# the captured figures served as pynvml too: an NVIDIA machine with the same devices
PYNVML_FROM_CAPTURE = "from pymxml import *\nfrom pymxml import NVMLError\n"


def expected_gpus(snapshot: dict) -> list[dict]:
    return [
        {
            "index": d["index"],
            "name": d["name"],
            "total_bytes": d["memory"]["total"],
            "used_bytes": d["memory"]["used"],
            "free_bytes": d["memory"]["free"],
            "utilization_pct": d["utilization"]["gpu"],
            "pids": [(p["pid"], p["usedGpuMemory"]) for p in d["compute_processes"] + d["graphics_processes"]],
        }
        for d in snapshot["devices"]
    ]


def seen_gpus(probe: dict) -> list[dict]:
    return [
        {**{k: g[k] for k in ("index", "name", "total_bytes", "used_bytes", "free_bytes", "utilization_pct")},
         "pids": [(p["pid"], p["used_bytes"]) for p in g["processes"]]}
        for g in probe["gpus"]
    ]


# --- the capture itself ---------------------------------------------------------------------
def test_capture_is_a_real_h200_reading():
    captured = CAPTURE["captured"]
    assert captured["date_utc"].startswith("20") and "python c.py" in captured["command"] and captured["script"]
    assert "nvidia-ml-py" in captured["tool"]
    (device,) = BUSY["devices"]
    assert device["name"] == "NVIDIA H200" and device["memory"]["total"] == 150754820096
    # nvidia-smi of the same run: the same device, total in MiB, the same driver
    name, total_mib, _used, driver = (c.strip() for c in captured["nvidia_smi"][1].split(","))
    assert name == device["name"] and driver == BUSY["driver"] == IDLE["driver"]
    assert int(total_mib.split()[0]) * 2**20 == device["memory"]["total"]
    for snap in (IDLE, BUSY):
        for d in snap["devices"]:
            assert d["memory"]["used"] + d["memory"]["free"] == d["memory"]["total"]
    # the busy snapshot holds the 1 GiB allocation of the capture's child process
    (proc,) = device["compute_processes"]
    assert proc["usedGpuMemory"] >= 2**30
    assert device["memory"]["used"] - IDLE["devices"][0]["memory"]["used"] >= 2**30


# --- probe_metax on the captured figures ----------------------------------------------------
def test_probe_metax_reports_the_captured_devices():
    out = run_child(FAKE)
    assert out["pymxml_file"] == str(FAKE / "pymxml.py")  # the real import found the fake
    metax = out["metax"]
    assert (metax["vendor"], metax["available"], metax["reason"]) == ("metax", True, "")
    assert metax["driver"] == "580.159.04" == BUSY["driver"]
    assert seen_gpus(metax) == expected_gpus(BUSY)
    (g,) = metax["gpus"]
    assert (g["name"], g["total_bytes"], g["used_bytes"], g["free_bytes"]) == ("NVIDIA H200", 150754820096, 2271084544, 148483735552)
    assert [(p["pid"], p["used_bytes"]) for p in g["processes"]] == [(471, 1616904192)]
    assert metax["visible_devices"] is None
    assert out["pymxml_open_inits"] == 0  # every probe shut the library down again


def test_probe_metax_idle_snapshot_has_no_processes():
    metax = run_child(FAKE, PYMXML_FAKE_SNAPSHOT="idle")["metax"]
    assert metax["available"] and seen_gpus(metax) == expected_gpus(IDLE)
    assert metax["gpus"][0]["processes"] == [] and metax["gpus"][0]["used_bytes"] == 644939776


def test_bytes_from_an_older_binding_read_as_text():
    metax = run_child(FAKE, PYMXML_FAKE_BYTES="1")["metax"]
    assert metax["driver"] == "580.159.04" and metax["gpus"][0]["name"] == "NVIDIA H200"


def test_a_busy_metax_gpu_names_its_process_and_is_never_taken(tmp_path):
    """The captured process (pid 471 of the capture's machine) reported as a live process
    here, so that its name is looked up as on the real machine."""
    import psutil

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        name = psutil.Process(holder.pid).name()
        out = run_child(stub(tmp_path, "pynvml", NVML_NO_LIBRARY), FAKE, PYMXML_FAKE_PIDS=f"471={holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    (proc,) = out["metax"]["gpus"][0]["processes"]
    assert (proc["pid"], proc["name"], proc["used_bytes"]) == (holder.pid, name, 1616904192) and name.startswith("python")
    assert out["gpus"]["vendor"] == "metax" and out["choice"]["gpus"] is None
    refused = out["choice"]["refused"]
    assert refused == f"0 idle GPUs of 1, 1 needed; GPU 0 is in use by {name}[{holder.pid}]"


def test_driver_not_loaded_is_a_reason_not_a_crash():
    metax = run_child(FAKE, PYMXML_FAKE_FAIL="init")["metax"]
    assert (metax["vendor"], metax["available"], metax["gpus"]) == ("metax", False, [])
    assert metax["reason"].split("; ")[0] == "pymxml unavailable: Driver Not Loaded"
    other_metax_reasons(metax["reason"])  # the next two sources were asked too


def test_a_broken_pymxml_install_is_a_reason_not_a_crash(tmp_path):
    broken = stub(tmp_path, "pymxml", "raise OSError('libmxsml.so: cannot open shared object file')\n")
    out = run_child(broken, stub(tmp_path, "pynvml", NVML_NO_LIBRARY))
    assert out["metax"]["available"] is False and "libmxsml.so" in out["metax"]["reason"]
    assert out["gpus"]["vendor"] == "none" and out["choice"]["device"] == "cpu"


def test_without_pymxml_the_probe_says_so(tmp_path):
    out = run_child(stub(tmp_path, "pynvml", NVML_NO_LIBRARY))
    assert out["metax"]["available"] is False
    first = out["metax"]["reason"].split("; ")[0]
    assert first.startswith("pymxml is not installed and no tools/batched_test/pymxml.py in ") and first.endswith(" or its parents")
    other_metax_reasons(out["metax"]["reason"])


# --- probe_gpus: NVIDIA first, MetaX when NVML has nothing ----------------------------------
def test_probe_gpus_falls_back_to_metax_with_this_machines_pynvml():
    """CI: nvidia-ml-py installed, no NVIDIA driver; the real pynvml answers 'not available'."""
    out = run_child(FAKE)
    if out["nvidia"]["available"]:
        pytest.skip("this machine has a working NVML: the fallback is checked with a stub pynvml")
    assert out["nvidia"]["reason"].startswith(("NVML unavailable", "pynvml (nvidia-ml-py) is not installed"))
    probe = out["gpus"]
    assert (probe["vendor"], probe["available"], probe["driver"]) == ("metax", True, "580.159.04")
    assert seen_gpus(probe) == expected_gpus(BUSY)


@pytest.mark.parametrize("pynvml_source, reason", [
    (NVML_NO_LIBRARY, "NVML unavailable: NVML Shared Library Not Found"),
    ("raise ImportError('No module named pynvml')\n", "pynvml (nvidia-ml-py) is not installed"),
    ("raise OSError('libnvidia-ml.so.1: broken')\n", "pynvml failed to import: libnvidia-ml.so.1: broken"),
], ids=["no-nvml-library", "no-pynvml", "broken-pynvml"])
def test_probe_gpus_falls_back_to_metax_when_nvml_is_unavailable(tmp_path, pynvml_source, reason):
    out = run_child(stub(tmp_path, "pynvml", pynvml_source), FAKE, PYMXML_FAKE_SNAPSHOT="idle")
    assert out["nvidia"]["reason"] == reason
    probe = out["gpus"]
    assert (probe["vendor"], probe["available"]) == ("metax", True) and seen_gpus(probe) == expected_gpus(IDLE)
    # what the user gets: the idle MetaX GPU 0, served through MACA_VISIBLE_DEVICES
    assert (out["choice"]["device"], out["choice"]["gpus"], out["choice"]["refused"]) == ("maca", "0", None)
    assert out["server_env"]["MACA_VISIBLE_DEVICES"] == "0"


def test_nvidia_wins_when_nvml_answers(tmp_path):
    out = run_child(stub(tmp_path, "pynvml", PYNVML_FROM_CAPTURE), FAKE, PYMXML_FAKE_SNAPSHOT="idle")
    assert out["gpus"]["vendor"] == "nvidia" and out["choice"]["device"] == "cuda"
    assert out["server_env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_nothing_answers_gives_every_reason(tmp_path):
    out = run_child(stub(tmp_path, "pynvml", NVML_NO_LIBRARY), FAKE, PYMXML_FAKE_FAIL="init")
    probe = out["gpus"]
    assert (probe["vendor"], probe["available"], probe["gpus"]) == ("none", False, [])
    assert probe["reason"].startswith("NVML unavailable: NVML Shared Library Not Found; pymxml unavailable: Driver Not Loaded; ")
    other_metax_reasons(probe["reason"].split("; ", 1)[1])
    assert out["choice"]["device"] == "cpu" and out["server_env"]["CUDA_VISIBLE_DEVICES"] == ""


# --- MACA_VISIBLE_DEVICES is to MetaX what CUDA_VISIBLE_DEVICES is to NVIDIA -----------------
@pytest.mark.parametrize("value", [None, "0", "", "0,1"])
def test_maca_visible_devices_is_treated_like_cuda_visible_devices(tmp_path, value):
    """The same figures through pynvml with CUDA_VISIBLE_DEVICES and through pymxml with
    MACA_VISIBLE_DEVICES give the same probe, device choice and server variable; the other
    vendor's variable is ignored by each."""
    nvml = tmp_path / "working_nvml"
    nvml.mkdir()
    (nvml / "pynvml.py").write_text(PYNVML_FROM_CAPTURE, encoding="utf-8")
    env_nv = {"PYMXML_FAKE_SNAPSHOT": "idle", "MACA_VISIBLE_DEVICES": "7"}
    env_mx = {"PYMXML_FAKE_SNAPSHOT": "idle", "CUDA_VISIBLE_DEVICES": "7"}
    if value is not None:
        env_nv["CUDA_VISIBLE_DEVICES"] = value
        env_mx["MACA_VISIBLE_DEVICES"] = value
    else:
        del env_nv["MACA_VISIBLE_DEVICES"], env_mx["CUDA_VISIBLE_DEVICES"]
    nv = run_child(nvml, FAKE, **env_nv)
    mx = run_child(stub(tmp_path, "pynvml", NVML_NO_LIBRARY), FAKE, **env_mx)
    assert nv["gpus"]["vendor"] == "nvidia" and mx["gpus"]["vendor"] == "metax"
    assert mx["gpus"]["visible_devices"] == value == nv["gpus"]["visible_devices"]
    assert (mx["gpus"]["source"], nv["gpus"]["source"]) == ("pymxml", "pynvml")
    assert {**mx["gpus"], "vendor": "nvidia", "source": "pynvml"} == nv["gpus"]
    # the device list keeps the machine's indices: the ones the server's variable takes
    assert [g["index"] for g in mx["gpus"]["gpus"]] == [0]
    if value == "":  # an empty variable hides every GPU from the runtime: the choice keeps to it
        assert (mx["choice"]["device"], nv["choice"]["device"]) == ("cpu", "cpu")
        assert mx["choice"]["gpus"] is None is nv["choice"]["gpus"]
        return
    assert (mx["choice"]["device"], nv["choice"]["device"]) == ("maca", "cuda")
    assert mx["choice"]["gpus"] == nv["choice"]["gpus"] == "0"
    assert mx["server_env"]["MACA_VISIBLE_DEVICES"] == nv["server_env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_metax_probe_records_maca_not_cuda_visible_devices():
    metax = run_child(FAKE, MACA_VISIBLE_DEVICES="0", CUDA_VISIBLE_DEVICES="3")["metax"]
    assert metax["visible_devices"] == "0"
    metax = run_child(FAKE, CUDA_VISIBLE_DEVICES="3")["metax"]
    assert metax["visible_devices"] is None and metax["available"]
