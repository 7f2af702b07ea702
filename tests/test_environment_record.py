"""The environment record beside the versions (offline probe, --versions too): torch's build tag,
the MACA and MetaX driver versions read from files, the MACA / visible-device variables as set, a
warning when CUDA_VISIBLE_DEVICES and MACA_VISIBLE_DEVICES select different GPUs (shown where the
validation shows its warning), and `mxtrim examples` comparing them with an output's last run.
No vLLM: the probe runs in this interpreter, MACA is a folder with a Version.txt."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import run_cli
from mxtrim_tui.core.probe import OFFLINE_PROBE
from mxtrim_tui.core.probe import offline_probe as probe

TORCH = md.version("torch")
TORCH_BUILD = TORCH.partition("+")[2] or None
VARIABLES = ("MACA_PATH", "MACA_CLANG_PATH", "CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES", "VLLM_PLUGINS")


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(extra)
    return env


@pytest.fixture
def maca(tmp_path) -> Path:
    """A MACA root as installed: Version.txt with its label."""
    root = tmp_path / "maca-3.3.0"
    root.mkdir()
    (root / "Version.txt").write_text("Version:3.3.0.15\n")
    return root


def versions(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-I", str(OFFLINE_PROBE), "--versions"], capture_output=True, text=True,
                          env=clean_env(**env), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_torch_build_maca_and_variables_are_recorded(maca):
    doc = versions(MACA_PATH=str(maca), MACA_CLANG_PATH=str(maca / "mxgpu_llvm" / "bin"), CUDA_VISIBLE_DEVICES="0,1",
                   MACA_VISIBLE_DEVICES="0, 1")
    assert doc["packages"]["torch"]["version"] == TORCH and doc["torch_build"] == TORCH_BUILD
    assert doc["maca"] == {"root": str(maca), "version": "3.3.0.15", "source": str(maca / "Version.txt")}
    assert doc["variables"] == {"MACA_PATH": str(maca), "MACA_CLANG_PATH": str(maca / "mxgpu_llvm" / "bin"),
                                "CUDA_VISIBLE_DEVICES": "0,1", "MACA_VISIBLE_DEVICES": "0, 1"}
    assert "warnings" not in doc  # the same GPUs, spaced differently
    assert set(doc["driver"]) == {"version", "source"}  # whatever this machine has, read without failing


def test_unset_variables_and_no_maca_are_none(tmp_path):
    doc = versions(MACA_PATH=str(tmp_path / "absent"))
    assert doc["maca"] == {"root": str(tmp_path / "absent"), "version": None, "source": None}
    assert doc["variables"]["CUDA_VISIBLE_DEVICES"] is None and doc["variables"]["MACA_VISIBLE_DEVICES"] is None
    assert "warnings" not in doc


def test_visible_devices_that_differ_are_warned_of(maca):
    doc = versions(CUDA_VISIBLE_DEVICES="0,1", MACA_VISIBLE_DEVICES="1")
    assert doc["warnings"] == ["CUDA_VISIBLE_DEVICES='0,1' and MACA_VISIBLE_DEVICES='1' select different GPUs: "
                               "set both to the same list"]
    assert "warnings" not in versions(CUDA_VISIBLE_DEVICES="2")  # one of them set: nothing to compare


def test_version_files_are_read_and_never_fail(tmp_path):
    (tmp_path / "sys_version").write_text("3.4.4\n")
    (tmp_path / "Version.txt").write_text("\n  MACA Version: 3.2.1.10-c600u \nsecond line\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "a-dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # would block a reader: not a regular file, not opened
    assert probe.read_version(str(tmp_path / "Version.txt")) == "3.2.1.10-c600u"
    for name in ("missing", "a-dir", "fifo"):
        assert probe.read_version(str(tmp_path / name)) is None
    assert isinstance(probe.read_version(str(tmp_path / "binary")), str)
    found = probe.driver_record((str(tmp_path / "missing"), str(tmp_path / "sys_version"), str(tmp_path / "Version.txt")))
    assert found == {"version": "3.4.4", "source": str(tmp_path / "sys_version")}
    assert probe.driver_record(()) == {"version": None, "source": None}
    assert probe.maca_record({})["root"] == "/opt/maca"
    assert [probe.build_tag(v) for v in ("2.13.0+cpu", "2.8.0+cu128", "2.10.0+metax3.8.2.2", "2.6.0", None)] == [
        "cpu", "cu128", "metax3.8.2.2", None, None]


@pytest.mark.slow
def test_the_warning_and_the_record_reach_the_validation_report(tmp_path, maca, monkeypatch):
    """offline_checks puts the probe's warning where the validation keeps its own; the README
    section shows it and the environment record."""
    from mxtrim_tui.core.validate.record import render_section
    from mxtrim_tui.core.validate.run import Validation, offline_checks, workspace_warning
    from mxtrim_tui.demo.tokenizer import write_tokenizer

    out = tmp_path / "out"
    out.mkdir()
    write_tokenizer(out, generation_config=False)
    (out / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                                 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300}))
    for k in VARIABLES:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MACA_PATH", str(maca))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("MACA_VISIBLE_DEVICES", "3")
    env, rows = offline_checks(out, sys.executable, trust_remote_code=False)
    assert env["warning"] == "CUDA_VISIBLE_DEVICES='0' and MACA_VISIBLE_DEVICES='3' select different GPUs: set both to the same list"
    assert workspace_warning(env, tmp_path) == env["warning"]  # validate() sets it again, unchanged
    v = Validation(out, "dummy", "2026-12-01 10:00:00 UTC", sys.executable, environment=env, rows=rows)
    text = render_section(v, 1, [])
    assert f"⚠ {env['warning']}" in text
    assert (f"Environment: torch {TORCH} (build tag {TORCH_BUILD or 'none'}), MACA 3.3.0.15 ({maca}), `MACA_PATH={maca}`, "
            "`CUDA_VISIBLE_DEVICES=0`, `MACA_VISIBLE_DEVICES=3`") in text
    # a run recorded before the environment record was kept: no such line
    assert "Environment:" not in render_section(Validation(out, "dummy", "then", "py", environment={"packages": {}}), 1, [])


def _example(folder: Path, name: str, environment: dict) -> None:
    path = folder / name
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (path / "tokenizer_config.json").write_text("{}")
    run = {"started": "2026-11-20T10:00:00+00:00", "ok": True, "mode": "dummy", "rows": [], "environment": environment}
    (path / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [run]}))


def test_examples_shows_drift_of_torch_build_maca_and_driver(tmp_path, maca):
    now_driver = probe.driver_record()["version"]  # this machine's, if any
    python = "%d.%d.%d" % sys.version_info[:3]
    folder = tmp_path / "models"
    _example(folder, "on-metax", {"python": python, "packages": {"torch": {"version": TORCH.partition("+")[0] + "+metax3.2.1.3"}},
                                  "torch_build": "metax3.2.1.3", "maca": {"version": "3.2.1.10"}, "driver": {"version": "3.0.11"}})
    # recorded before MACA and the driver were kept, on this very torch: nothing to compare there
    _example(folder, "older", {"python": python, "packages": {"torch": {"version": TORCH}}})
    r = run_cli("examples", str(folder), "--json", "--python", sys.executable, env=clean_env(MACA_PATH=str(maca)))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    now = doc["environment_now"]["versions"]
    assert (now["torch_build"], now["maca"], now["driver"]) == (TORCH_BUILD, "3.3.0.15", now_driver)
    by = {e["name"]: e for e in doc["examples"]}
    drift = by["on-metax"]["drift"]
    assert drift["torch_build"] == {"then": "metax3.2.1.3", "now": TORCH_BUILD}
    assert drift["maca"] == {"then": "3.2.1.10", "now": "3.3.0.15"}
    assert drift["driver"] == {"then": "3.0.11", "now": now_driver}
    assert by["on-metax"]["validation"]["versions"]["maca"] == "3.2.1.10"
    older = by["older"]["drift"]
    assert "maca" not in older and "driver" not in older and "torch_build" not in older and "torch" not in older
    shown = run_cli("examples", str(folder), "--python", sys.executable, env=clean_env(MACA_PATH=str(maca), COLUMNS="400"))
    assert "maca 3.2.1.10 → 3.3.0.15" in shown.stdout and f"torch_build metax3.2.1.3 → {TORCH_BUILD}" in shown.stdout
