"""`mxtrim` as a user runs it: a real subprocess, exit codes, stderr, JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys

from engine_support import REPO, run_cli
from mxtrim_tui.synth.checkpoint import write_checkpoint
from mxtrim_tui.synth.layouts.deepseek import deepseek_v3


def test_inspect_json_on_sparse_deepseek_v3(tmp_path):
    root = write_checkpoint(tmp_path / "DeepSeek-V3", deepseek_v3(), data="sparse")
    out = run_cli("inspect", str(root), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "mxtrim.inventory/1"
    assert doc["model"]["family"] == "deepseek_v3"
    subs = {s["name"]: s for s in doc["submodels"]}
    assert subs["text"]["declared_depth"] == 61 and subs["text"]["layers_found"] == 61
    assert subs["mtp"]["layers_found"] == 1 and subs["mtp"]["layers"][0]["stored_as"] == "model.layers.61"
    # 3 dense then 58 MoE layers: two groups in the backbone strip
    strip = subs["text"]["strip"]
    assert strip == strip[0] * 3 + strip[3] * 58 and strip[0] != strip[3]
    # every tensor is somewhere, exactly once
    placed = sum(s["tensors"] for s in doc["submodels"]) + sum(p["tensors"] for p in doc["shared"])
    assert placed + len(doc["unassigned"]) == doc["totals"]["tensors"]
    assert doc["unassigned"] == []
    assert doc["quantization"]["method"] == "fp8"
    total = sum(s["bytes"] for s in doc["submodels"]) + sum(p["bytes"] for p in doc["shared"])
    assert total == doc["totals"]["bytes"]


def test_inspect_rich_summary_names_the_essentials(tmp_path):
    root = write_checkpoint(tmp_path / "DeepSeek-V3", deepseek_v3(), data="sparse")
    out = run_cli("inspect", str(root), env={"COLUMNS": "160"})
    assert out.returncode == 0, out.stderr
    for text in ("DeepSeek-V2/V3", "text backbone", "MTP", "mla", "moe", "fp8", "Layer types", "tokenizer"):
        assert text in out.stdout, text


def test_bad_input_is_one_line_on_stderr_with_exit_1(tmp_path):
    root = tmp_path / "broken"
    root.mkdir()
    (root / "config.json").write_text("{")
    out = run_cli("inspect", str(root))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.json" in lines[0] and "not valid JSON" in lines[0]
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_debug_shows_the_traceback(tmp_path):
    out = run_cli("--debug", "inspect", str(tmp_path / "missing"))
    assert out.returncode == 1 and "Traceback" in out.stderr and "model directory not found" in out.stderr


def test_usage_errors_exit_2():
    out = run_cli("inspect")
    assert out.returncode == 2 and "usage:" in out.stderr
    out = run_cli("frobnicate")
    assert out.returncode == 2


def test_wizard_starts_without_torch_or_transformers():
    code = "import sys, mxtrim_tui.tui.app\nprint(','.join(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_engine_never_imports_textual_and_startup_stays_light():
    """The engine is headless (no Textual), and `inspect` pulls in neither torch nor
    transformers: they are imported lazily, where used."""
    code = (
        "import sys, mxtrim_tui.core.inventory, mxtrim_tui.core.source, mxtrim_tui.core.inventory_json, mxtrim_tui.cli\n"
        "import pkgutil, importlib, mxtrim_tui.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'mxtrim_tui.core.'): importlib.import_module(m.name)\n"
        "bad = [m for m in ('textual', 'torch', 'transformers') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
