"""`mxtrim` as a user runs it: a real subprocess, exit codes, stderr, JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, run_cli
from mxtrim_tui.demo import build_demo
from synth.checkpoint import write_checkpoint
from synth.layouts.deepseek import deepseek_v3


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo", "fp8")  # the block-FP8 demo: its TP rules


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
    assert out.returncode == 1 and "Traceback" in out.stderr and "missing: no such directory" in out.stderr


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
        "import sys, mxtrim_tui.core.model.inventory, mxtrim_tui.core.read.source, mxtrim_tui.core.model.inventory_json, mxtrim_tui.cli\n"
        "import pkgutil, importlib, mxtrim_tui.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'mxtrim_tui.core.'): importlib.import_module(m.name)\n"
        "bad = [m for m in ('textual', 'torch', 'transformers') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# --- serve settings: from the flags into README.md, mxtrim-plan.json and --json ---------------
@pytest.mark.slow
def test_trim_writes_the_chosen_serve_settings(demo, tmp_path):
    out = tmp_path / "out"
    flags = ["--dp", "2", "--ep", "--max-model-len", "1024", "--max-num-seqs", "4", "--max-num-batched-tokens", "512",
             "--gpu-memory-utilization", "0.5", "--kv-cache-dtype", "fp8", "--gpu-memory", "24"]
    result = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out), "--json", *flags)
    assert result.returncode == 0, result.stderr
    readme = (out / "README.md").read_text()
    for literal in ("--tensor-parallel-size 1", "--data-parallel-size 2", "--enable-expert-parallel", "--max-model-len 1024",
                    "--max-num-seqs 4", "--max-num-batched-tokens 512", "--gpu-memory-utilization 0.5", "--kv-cache-dtype fp8"):
        assert literal in readme, literal
    assert "${TP:-1}" not in readme and "GPU_MEMORY_UTILIZATION" not in readme
    assert "--pipeline-parallel-size" not in readme  # PP 1: not spelled out
    doc = json.loads(result.stdout)
    command = doc["serve_command"]
    assert command in readme and "--data-parallel-size 2" in command
    plan_doc = json.loads((out / "mxtrim-plan.json").read_text())
    assert plan_doc["serve"] == {"tp": 1, "pp": 1, "max_model_len": 1024, "max_num_seqs": 4, "max_num_batched_tokens": 512,
                                 "dp": 2, "expert_parallel": True, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.5,
                                 "command": command}
    # the budget is computed for the same settings: experts over EP = 2 ranks, an FP8 KV cache
    budget = doc["budget"]
    assert budget["inputs"]["dp"] == 2 and budget["ranks"]["ep"] == 2 and budget["inputs"]["kv_cache_dtype"] == "fp8"
    assert budget["inputs"]["gpu_total_bytes"] == 24 * 2**30 and budget["budget_bytes"] == int(24 * 2**30 * 0.5)
    assert budget["weights_bytes"] == doc["tensors"]["retained_bytes"] > budget["weights_per_gpu_bytes"]
    # TP=2 splits the 384-wide FP8 MLP into 192 rows, which vLLM refuses (block_n 128): refused here first
    refused = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(tmp_path / "tp2"), "--tp", "2")
    assert refused.returncode == 1 and not (tmp_path / "tp2").exists()
    assert "model.layers.N.mlp.gate_proj: 384 output rows / TP=2 = 192, not whole 128×128 blocks" in refused.stderr
    # and the attention: 4 heads × v_head_dim 32 = 128 columns, 64 per rank (vLLM refuses o_proj too)
    assert "model.layers.N.self_attn.o_proj: 128 input columns / TP=2 = 64" in refused.stderr


@pytest.mark.slow
def test_trim_without_serve_flags_keeps_the_shell_defaults(demo, tmp_path):
    out = tmp_path / "out"
    result = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out), "--json", "--keep", "0,2,3")
    assert result.returncode == 0, result.stderr
    readme = (out / "README.md").read_text()
    assert "--tensor-parallel-size ${TP:-1}" in readme and "${GPU_MEMORY_UTILIZATION:-0.8}" in readme
    serve = json.loads((out / "mxtrim-plan.json").read_text())["serve"]
    assert serve["tp"] == 1 and serve["pp"] == 1 and serve["gpu_memory_utilization"] == 0.8
    assert serve["command"] == json.loads(result.stdout)["serve_command"] and serve["command"] in readme
    # PP given: spelled out, and at most the kept text layers
    out3 = tmp_path / "pp3"
    assert run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out3), "--keep", "0,2,3", "--pp", "3").returncode == 0
    assert "--pipeline-parallel-size 3" in (out3 / "README.md").read_text()


@pytest.mark.parametrize("flag, value, message", [
    ("--tp", "0", "mxtrim: error: --tp: must be at least 1"),
    ("--gpu-memory-utilization", "7", "mxtrim: error: --gpu-memory-utilization: must be a number greater than 0 and at most 1"),
    ("--max-model-len", "1.5", "mxtrim: error: --max-model-len: must be a whole number"),
])
def test_malformed_serve_settings_are_usage_errors(demo, tmp_path, flag, value, message):
    for command in ("plan", "trim"):
        args = [command, str(demo), flag, value] + (["--mode", "dummy", "--out", str(tmp_path / "out")] if command == "trim" else [])
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().startswith(message) and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_parallelism_vllm_would_refuse_blocks_the_trim(demo, tmp_path):
    # the demo has 4 attention heads and 6 layers; --keep 0,2 keeps 2
    result = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(tmp_path / "out"), "--keep", "0,2", "--tp", "3", "--pp", "3")
    assert result.returncode == 1
    # one line: both problems, then what happened
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("mxtrim: error: --tp: TP=3 does not divide the 4 attention heads")
    assert "; --pp: PP=3 exceeds the 2 kept text layers" in result.stderr
    assert result.stderr.rstrip().endswith("; nothing written") and list(tmp_path.iterdir()) == []
    plan = run_cli("plan", str(demo), "--tp", "3")
    assert plan.returncode == 1 and "TP=3 does not divide the 4 attention heads" in plan.stderr


# --- the report and the progress events -------------------------------------------------------
@pytest.mark.slow
def test_dummy_report_summarises_the_weight_shards(tmp_path):
    from synth.layouts import all_layouts

    root = write_checkpoint(tmp_path / "DeepSeek-V3", all_layouts()["deepseek_v3"](), data="sparse")
    shards = sorted(root.glob("*.safetensors"))
    assert len(shards) > 100
    out = tmp_path / "out"
    result = run_cli("trim", str(root), "--mode", "dummy", "--out", str(out))
    assert result.returncode == 0, result.stderr
    readme = (out / "README.md").read_text()
    section = readme.split("Not copied from the source:")[1].split("##")[0]
    summary = [line for line in section.splitlines() if "weight shards" in line]
    assert len(summary) == 1 and summary[0].startswith(f"- {len(shards)} weight shards (")
    assert "model.safetensors.index.json" in summary[0] and "not copied (dummy mode)" in summary[0]
    assert not any(s.name in readme for s in shards)  # no line per shard
    assert len([line for line in section.splitlines() if line.startswith("- ")]) < 10


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dummy", "weights"])
def test_progress_counts_every_written_file(demo, tmp_path, mode):
    out = tmp_path / "out"
    result = run_cli("trim", str(demo), "--mode", mode, "--out", str(out), "--progress")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    files = [e for e in events if e["event"] == "file"]
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(e["path"] for e in files) == written  # one event per file
    assert [e["done_files"] for e in files] == list(range(1, len(written) + 1))
    assert {e["total_files"] for e in files} == {len(written)}
