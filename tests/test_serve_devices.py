"""The devices an output's launch file and README command expose: TP × PP (× DP) GPUs when
the user set neither CUDA_VISIBLE_DEVICES nor MACA_VISIBLE_DEVICES, the user's list when set
(one of the two naming the same GPUs for the other), and a line saying which were assumed.
A stand-in ``vllm`` on PATH records the environment serve.sh started it with."""

from __future__ import annotations

import os
import subprocess

import pytest

from engine_support import run_cli
from mxtrim_tui.demo.build import build_demo

VISIBLE = ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The demo trimmed to one dummy output per serve setting (none: TP left to the shell)."""
    root = tmp_path_factory.mktemp("devices")
    demo = build_demo(root / "demo")
    made = {}
    for name, flags in (("tp2", ["--tp", "2"]), ("tp2pp2", ["--tp", "2", "--pp", "2"]), ("tp1", ["--tp", "1"]), ("shell", [])):
        out = root / name
        r = run_cli("trim", str(demo), "--keep", "0,2", "--mode", "dummy", "--out", str(out), *flags)
        assert r.returncode == 0, r.stderr
        made[name] = out
    return made


def serve(out, tmp_path, **env) -> tuple[dict, str]:
    """Run the output's serve.sh with a recording ``vllm``: (the visible-device variables it
    saw, what serve.sh said on stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "vllm").write_text('#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES|$MACA_VISIBLE_DEVICES" > "$RECORD"\n')
    (bin_dir / "vllm").chmod(0o755)
    record = tmp_path / "seen"
    base = {k: v for k, v in os.environ.items() if k not in VISIBLE + ("TP",)}
    r = subprocess.run([str(out / "serve.sh")], capture_output=True, text=True, timeout=60,
                       env={**base, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(record), **env})
    assert r.returncode == 0, r.stderr
    cuda, maca = record.read_text().strip().split("|")
    return {"CUDA_VISIBLE_DEVICES": cuda, "MACA_VISIBLE_DEVICES": maca}, r.stderr


def test_a_two_gpu_output_exposes_two_gpus_when_none_are_named(outputs, tmp_path):
    seen, said = serve(outputs["tp2"], tmp_path)
    assert seen == {"CUDA_VISIBLE_DEVICES": "0,1", "MACA_VISIBLE_DEVICES": "0,1"}
    assert "GPUs 0,1 (TP 2, PP 1: 2 devices)" in said
    readme = (outputs["tp2"] / "README.md").read_text()
    assert "${CUDA_VISIBLE_DEVICES:-${MACA_VISIBLE_DEVICES:-0,1}}" in readme and "serves on GPUs 0,1" in readme


@pytest.mark.slow
def test_pipeline_stages_count_too(outputs, tmp_path):
    seen, said = serve(outputs["tp2pp2"], tmp_path)
    assert seen == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "MACA_VISIBLE_DEVICES": "0,1,2,3"}
    assert "TP 2, PP 2: 4 devices" in said
    assert "GPUs 0,1,2,3" in (outputs["tp2pp2"] / "serve.sh").read_text().splitlines()[4]


def test_one_gpu_output_keeps_gpu_zero(outputs, tmp_path):
    seen, said = serve(outputs["tp1"], tmp_path)
    assert seen == {"CUDA_VISIBLE_DEVICES": "0", "MACA_VISIBLE_DEVICES": "0"} and "GPU 0 (TP 1, PP 1)" in said


@pytest.mark.parametrize("named", VISIBLE)
def test_a_list_the_user_set_is_left_alone_and_followed(outputs, tmp_path, named):
    """Either variable set: both name the user's GPUs, and nothing is said about an assumption."""
    seen, said = serve(outputs["tp2"], tmp_path, **{named: "5,6"})
    assert seen == {"CUDA_VISIBLE_DEVICES": "5,6", "MACA_VISIBLE_DEVICES": "5,6"}
    assert said == ""


@pytest.mark.slow
def test_tp_left_to_the_shell_takes_that_many_gpus(outputs, tmp_path):
    seen, said = serve(outputs["shell"], tmp_path, TP="3")
    assert seen["CUDA_VISIBLE_DEVICES"] == "0,1,2" == seen["MACA_VISIBLE_DEVICES"]
    seen, said = serve(outputs["shell"], tmp_path)
    assert seen["CUDA_VISIBLE_DEVICES"] == "0" and "GPUs 0 to TP-1" in said
