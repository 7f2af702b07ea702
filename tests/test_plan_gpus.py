"""`mxtrim plan` says which GPUs it read (name, memory used / total, the probe that answered)
before it takes the first one's memory for the budget, or that none was found and what was
tried. The GPUs are the MetaX stand-ins of tests/metax_standins.py: vLLM-MetaX's harness
``pymxml.py`` in the checkout the user works in, NVML failing (no library), so the same answer
comes on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv
from metax_standins import pymxml_data, workspace_with_pymxml, write_failing_pynvml
from mxtrim_tui.demo import build_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def _plan(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``mxtrim plan ARGS`` on a machine whose only GPU source is what ``cwd`` holds."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES")}
    (tmp_path / "bin").mkdir(exist_ok=True)
    env.update(PYTHONPATH=os.pathsep.join([str(write_failing_pynvml(tmp_path / "no-nvml")), str(REPO)]),
               PATH=str(tmp_path / "bin"), MACA_PATH=str(tmp_path / "opt-maca"),
               MXTRIM_MXDRIVER_PATH=str(tmp_path / "opt-mxdriver"), COLUMNS="200")
    proc = subprocess.run(cli_argv("plan", *args), capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_plan_names_the_gpus_it_read_and_the_probe_that_answered(demo, tmp_path):
    checkout = workspace_with_pymxml(tmp_path / "vLLM-metax", pymxml_data(os.getpid()))
    text = _plan(tmp_path, checkout, str(demo)).stdout
    assert "GPUs (metax driver 2.14.8, read through pymxml):" in text
    assert "GPU 0  MetaX C500  858 MiB / 64.0 GiB used  ← the budget's GPU memory" in text
    assert "GPU 1  MetaX C500  49.0 GiB / 64.0 GiB used, 1 process(es)" in text
    assert "51.2 GiB = 64.0 GiB × 0.8" in text  # the budget took GPU 0's total, as said

    doc = json.loads(_plan(tmp_path, checkout, str(demo), "--json").stdout)
    gpus = doc["gpus"]
    assert (gpus["found"], gpus["vendor"], gpus["source"], gpus["driver"]) == (True, "metax", "pymxml", "2.14.8")
    assert [(d["index"], d["name"], d["used_bytes"], d["total_bytes"]) for d in gpus["devices"]] == [
        (0, "MetaX C500", 858 * 2**20, 64 * 2**30), (1, "MetaX C500", 49 * 2**30, 64 * 2**30)]
    assert doc["budget"]["inputs"]["gpu_total_bytes"] == 64 * 2**30


def test_plan_without_a_gpu_says_none_was_found_and_what_was_tried(demo, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    text = " ".join(_plan(tmp_path, home, str(demo)).stdout.split())
    assert "GPUs: none found (tried NVML (pynvml), pymxml, pymxsml, mx-smi): NVML unavailable:" in text
    assert "pymxml is not installed and no tools/batched_test/pymxml.py in" in text
    assert "mx-smi not found" in text

    gpus = json.loads(_plan(tmp_path, home, str(demo), "--json").stdout)["gpus"]
    assert (gpus["found"], gpus["tried"]) == (False, ["NVML (pynvml)", "pymxml", "pymxsml", "mx-smi"])
    assert gpus["reason"].startswith("NVML unavailable") and "mx-smi not found" in gpus["reason"]
