"""Live MetaX occupancy from its three sources, in order: vLLM-MetaX's ``pymxml`` (installed, or
the harness file of the checkout the user works in), MetaX's SDK binding ``pymxsml`` (installed,
or the SDK's wheel under ``$MACA_PATH/share/mxsml``), then the ``mx-smi`` command (the driver's,
else the one on PATH). The stand-ins (tests/metax_standins.py says what each follows) live in
tmp folders; the probe runs in a fresh interpreter whose cwd, PATH, PYTHONPATH, ``MACA_PATH``
and ``MXTRIM_MXDRIVER_PATH`` point at them only, so nothing of this machine takes part and no
import leaks into the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from metax_standins import (GiB, MiB, mx_smi_config, pymxml_data, pymxsml_data, workspace_with_pymxml,
                            write_failing_pynvml, write_mx_smi, write_pymxml, write_pymxsml_package,
                            write_sdk_wheel)

ROOT = Path(__file__).resolve().parent.parent
ME = os.getpid()  # the stand-ins report this process, so that psutil names it in the child
MY_NAME = psutil.Process(ME).name()

CHILD = r"""
import dataclasses, json, sys
from mxtrim_tui.core.probe import gpu
kwargs = json.loads(sys.argv[1])
probe = gpu.probe_gpus(**kwargs) if kwargs.pop("__all__", False) else gpu.probe_metax(**kwargs)
out = dataclasses.asdict(probe)
out["files"] = {n: getattr(sys.modules.get(n), "__file__", None) for n in ("pymxml", "pymxsml")}
out["wheels_on_sys_path"] = [p for p in sys.path if p.endswith(".whl") or "/mxtrim/pymxsml/" in p]
out["pymxml_open"] = getattr(sys.modules.get("pymxml"), "_refcount", None)
out["mxsmlex_open"] = getattr(sys.modules.get("pymxsml.mxsml_extension"), "_open", None)
print(json.dumps(out))
"""


class Machine:
    """A fake MetaX machine in ``tmp``: what is put there is all the probe can find."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.cwd = tmp / "home"  # where the user runs mxtrim
        self.cwd.mkdir()
        self.maca = tmp / "opt-maca"
        self.mxdriver = tmp / "opt-mxdriver"
        self.path = tmp / "path-bin"
        self.path.mkdir()
        self.site = [write_failing_pynvml(tmp / "no-nvml")]

    def probe(self, everything: bool = False, **kwargs) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES", "PYTHONPATH", "MACA_PATH")}
        env.update(PYTHONPATH=os.pathsep.join([*map(str, self.site), str(ROOT)]), PATH=str(self.path),
                   MACA_PATH=str(self.maca), MXTRIM_MXDRIVER_PATH=str(self.mxdriver),
                   XDG_CACHE_HOME=str(self.tmp / "cache"), PYTHONDONTWRITEBYTECODE="1")
        args = json.dumps({**({"__all__": True} if everything else {}), **kwargs})
        done = subprocess.run([sys.executable, "-c", CHILD, args], env=env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def installed(self, name: str) -> Path:
        folder = self.tmp / f"site-{name}"
        folder.mkdir(exist_ok=True)
        self.site.insert(0, folder)
        return folder


@pytest.fixture
def machine(tmp_path) -> Machine:
    return Machine(tmp_path)


def memory(probe: dict) -> list[tuple]:
    return [(g["index"], g["name"], g["total_bytes"], g["used_bytes"], g["free_bytes"]) for g in probe["gpus"]]


def processes(probe: dict) -> list[tuple]:
    return [(g["index"], p["pid"], p["name"], p["used_bytes"]) for g in probe["gpus"] for p in g["processes"]]


# --- 1. pymxml -------------------------------------------------------------------------------
def test_pymxml_of_the_harness_in_the_checkout_the_user_works_in(machine):
    """Not importable: found as tools/batched_test/pymxml.py of the current folder's parents."""
    checkout = workspace_with_pymxml(machine.cwd / "vLLM-metax", pymxml_data(ME))
    machine.cwd = checkout / "vllm_metax"
    out = machine.probe()
    assert (out["vendor"], out["available"], out["source"], out["driver"]) == ("metax", True, "pymxml", "2.14.8")
    assert memory(out) == [(0, "MetaX C500", 64 * GiB, 858 * MiB, 64 * GiB - 858 * MiB),
                           (1, "MetaX C500", 64 * GiB, 49 * GiB, 15 * GiB)]
    assert [g["utilization_pct"] for g in out["gpus"]] == [0, 87]
    # the harness's versioned process getter (the unversioned one raises a mismatch error)
    assert processes(out) == [(1, ME, MY_NAME, 48 * GiB)]
    assert out["files"]["pymxml"] == str(checkout / "tools" / "batched_test" / "pymxml.py")
    assert out["pymxml_open"] == 0  # nvmlInit / nvmlShutdown balanced


def test_an_installed_pymxml_comes_before_the_checkouts_file(machine):
    workspace_with_pymxml(machine.cwd, pymxml_data(ME, driver="from-checkout"))
    installed = write_pymxml(machine.installed("pymxml"), pymxml_data(ME, driver="installed"))
    out = machine.probe()
    assert (out["source"], out["driver"], out["files"]["pymxml"]) == ("pymxml", "installed", str(installed))


# --- 2. pymxsml --------------------------------------------------------------------------------
def test_pymxsml_from_the_sdk_wheel(machine):
    """No pymxml, no pymxsml installed: the newest SDK wheel is read in place (pure Python), the
    KiB figures come out as bytes, processes through mxsml_extension."""
    newest = write_sdk_wheel(machine.maca, pymxsml_data(ME, pf=True), version="2.2.10")
    write_sdk_wheel(machine.maca, {}, version="2.2.9", broken=True)  # sorts after 2.2.10 as text
    out = machine.probe()
    assert (out["available"], out["source"], out["driver"]) == (True, "pymxsml", "2.14.9")
    # vramTotal / vramUse are KiB; the SR-IOV physical function (index 2) is not a device
    assert memory(out) == [(0, "MetaX C500", 64 * GiB, 1 * GiB, 63 * GiB), (1, "MetaX C500", 64 * GiB, 32 * GiB, 32 * GiB)]
    assert [g["utilization_pct"] for g in out["gpus"]] == [0, 55]
    assert processes(out) == [(1, ME, MY_NAME, 30 * GiB)]
    assert out["files"]["pymxsml"] == str(newest / "pymxsml" / "__init__.py")
    assert out["wheels_on_sys_path"] == []  # imported, then taken off sys.path again
    assert out["mxsmlex_open"] == 0


def test_a_wheel_with_native_files_is_unpacked_in_mxtrims_cache(machine):
    wheel = write_sdk_wheel(machine.maca, pymxsml_data(ME), native=True)
    out = machine.probe()
    assert out["source"] == "pymxsml" and memory(out)[1][3] == 32 * GiB
    unpacked = Path(out["files"]["pymxsml"]).parent.parent
    assert unpacked.parent == machine.tmp / "cache" / "mxtrim" / "pymxsml" and unpacked.name.startswith(wheel.stem)
    assert (unpacked / "pymxsml" / "_native.so").is_file() and out["wheels_on_sys_path"] == []


def test_an_installed_pymxsml_and_the_sdk_root_given_as_a_parameter(machine):
    write_pymxsml_package(machine.installed("pymxsml"), pymxsml_data(ME))
    out = machine.probe()
    assert out["source"] == "pymxsml" and out["files"]["pymxsml"].startswith(str(machine.tmp / "site-pymxsml"))
    # and the wheel by the root given to probe_metax (MACA_PATH points elsewhere)
    elsewhere = machine.tmp / "elsewhere-maca"
    write_sdk_wheel(elsewhere, pymxsml_data(ME, driver="from-parameter"))
    machine.site = [p for p in machine.site if p.name != "site-pymxsml"]
    out = machine.probe(maca_root=str(elsewhere))
    assert (out["source"], out["driver"]) == ("pymxsml", "from-parameter")


# --- 3. mx-smi ---------------------------------------------------------------------------------
def test_mx_smi_of_the_driver_a_plain_gpu_and_a_sliced_instance(machine):
    write_mx_smi(machine.mxdriver / "bin", mx_smi_config(ME))
    out = machine.probe()
    assert (out["available"], out["source"], out["driver"]) == (True, "mx-smi", "2.14.8")
    # GPU 1 is an sGPU instance: its 16 GiB quota is the total, its own 2 GiB the use
    assert memory(out) == [(0, "MetaX C500", 64 * GiB, 858 * MiB, 64 * GiB - 858 * MiB),
                           (1, "MetaX C500", 16 * GiB, 2 * GiB, 14 * GiB)]
    assert [g["sliced"] for g in out["gpus"]] == [False, True]
    assert [g["utilization_pct"] for g in out["gpus"]] == [0, 37]
    # the name mx-smi gives (its PIDs may be another namespace's), MiB as bytes
    assert processes(out) == [(1, ME, "vllm-worker", 2000 * MiB)]


def test_mx_smi_on_path_and_the_drivers_one_first(machine):
    write_mx_smi(machine.path, mx_smi_config(ME, driver="on-path"))
    assert machine.probe()["driver"] == "on-path"
    write_mx_smi(machine.mxdriver / "bin", mx_smi_config(ME, driver="bundled"))
    assert machine.probe()["driver"] == "bundled"


def test_mx_smi_memory_listing_when_its_table_is_not_understood(machine):
    write_mx_smi(machine.path, mx_smi_config(ME, scenario="memory"))
    out = machine.probe()
    assert out["source"] == "mx-smi"
    # vis_vram total / used in KB, the short names of that listing
    assert memory(out) == [(0, "MXC500", 64 * GiB, 858 * MiB, 64 * GiB - 858 * MiB), (1, "MXC500", 64 * GiB, 20 * GiB, 44 * GiB)]


# --- order, and nothing at all -----------------------------------------------------------------
def test_pymxml_wins_when_all_three_answer_and_each_failure_hands_on(machine):
    workspace_with_pymxml(machine.cwd, pymxml_data(ME))
    write_sdk_wheel(machine.maca, pymxsml_data(ME))
    write_mx_smi(machine.mxdriver / "bin", mx_smi_config(ME))
    assert machine.probe()["source"] == "pymxml"
    write_pymxml(machine.cwd / "tools" / "batched_test", pymxml_data(ME, fail="init"))
    assert machine.probe()["source"] == "pymxsml"
    write_sdk_wheel(machine.maca, pymxsml_data(ME, fail="init"))
    out = machine.probe()
    assert out["source"] == "mx-smi" and out["gpus"][1]["sliced"]


def test_nothing_answers_the_reason_names_all_three_and_nvml(machine):
    out = machine.probe(everything=True)
    assert (out["vendor"], out["available"], out["gpus"], out["source"]) == ("none", False, [], "")
    assert out["reason"] == "; ".join([
        "NVML unavailable: NVML Shared Library Not Found",
        f"pymxml is not installed and no tools/batched_test/pymxml.py in {machine.cwd} or its parents",
        f"pymxsml is not installed and no pymxsml-*.whl in {machine.maca / 'share' / 'mxsml'}",
        f"mx-smi not found ({machine.mxdriver / 'bin' / 'mx-smi'}, PATH)",
    ])


def test_each_source_present_and_failing_says_why(machine):
    pymxml = write_pymxml(machine.cwd / "tools" / "batched_test", pymxml_data(ME, fail="init"))
    wheel = write_sdk_wheel(machine.maca, pymxsml_data(ME, fail="init"))
    mx_smi = write_mx_smi(machine.path, mx_smi_config(ME, scenario="fail"))
    out = machine.probe(everything=True)
    assert out["vendor"] == "none" and out["reason"].split("; ") == [
        "NVML unavailable: NVML Shared Library Not Found",
        f"pymxml ({pymxml}) unavailable: Driver Not Loaded",
        f"pymxsml ({wheel}) unavailable: Failed to open /dev/mxcd: No such file or directory",
        f"mx-smi ({mx_smi}) failed: exit 1: Failed to initialize mxsml: driver not loaded",
    ]
