"""The effective configuration of a served output: what vLLM built (quantization method, attention
and MoE backends and kernels, KV cache, speculative method, eager or compiled), read from real
start-up logs of vLLM 0.32's CPU build, 0.26's CUDA build and vLLM-MetaX and from the engine's own
record where mxtrim's probe ran, against what the output's config and serve settings plan. A
served path that differs is a failure of its own class, quoting its line — shown for real on the
CPU build, where an override passed through ``--launcher`` drops a W8A8 output's quantization."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.tiny_models import make_servable_llama
from mxtrim_tui.core.validate.classify import SERVED_PATH, classes
from mxtrim_tui.core.validate.effective import EFFECTIVE, effective_row, parse_log
from mxtrim_tui.core.validate.vllm_log import last_run

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")

# compressed-tensors W8A8 int8 (channel-wise weights, dynamic per-token activations)
W8A8 = {"config_groups": {"group_0": {
    "targets": ["Linear"],
    "input_activations": {"dynamic": True, "group_size": None, "num_bits": 8, "observer": None, "strategy": "token",
                          "symmetric": True, "type": "int"},
    "weights": {"dynamic": False, "group_size": None, "num_bits": 8, "observer": "minmax", "strategy": "channel",
                "symmetric": True, "type": "int"}}},
    "format": "int-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors"}
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
# the demo's plan: its coverage (DeepSeek-style: A MLA dense, B MLA MoE, C the MTP layer), two text layers
# kept, and the names its layers are stored under (the MTP layer as model.layers.2)
DEMO_TEXT = {"kv_lora_rank": 512, "num_hidden_layers": 2}
DEMO_PLAN = {"coverage": [
    {"submodel": "text", "group": "A", "kind": "mla · dense · BF16", "kept": [{"new": 0, "old": 0}]},
    {"submodel": "text", "group": "B", "kind": "mla · moe×8 · BF16 + shared expert, router bias", "kept": [{"new": 1, "old": 2}]},
    {"submodel": "mtp", "group": "C", "kind": "mla · moe×8 · BF16 + shared expert, router bias, mtp head", "kept": [{"new": 0, "old": 0}]},
], "mapping": [
    {"submodel": "text", "new": 0, "old": 0, "old_name": "model.layers.0", "new_name": "model.layers.0"},
    {"submodel": "text", "new": 1, "old": 2, "old_name": "model.layers.2", "new_name": "model.layers.1"},
    {"submodel": "mtp", "new": 0, "old": 0, "old_name": "model.layers.6", "new_name": "model.layers.2"},
]}
LLAMA_PLAN = {"coverage": [{"submodel": "text", "group": "A", "kind": "full · dense · F32", "kept": [{"new": 0, "old": 1}, {"new": 1, "old": 2}]}]}
CPU = {"dtype": "float32", "kv_cache_dtype": None, "attention_backend": None, "speculative": 0, "enforce_eager": True}


def log(*parts: str) -> list[str]:
    return last_run((FIXTURES.joinpath(*parts)).read_text(encoding="utf-8").splitlines())


# --- each build's wording -------------------------------------------------------------------------
@pytest.mark.parametrize("parts, want", [
    # vLLM 0.32.0 CPU: the demo-style DeepSeek-V3 (MLA, MoE) on CPU_MLA
    (("vllm_logs", "cpu-0.32.0-deepseek-v3.log"),
     {"vllm": "0.32.0", "quantization": None, "dtype": "float32", "kv_cache_dtype": "auto", "enforce_eager": True,
      "compilation_mode": 0, "cudagraph_mode": "NONE", "speculative_method": None, "attention_backends": ["CPU_MLA"],
      "mla_prefill_backend": "CPU_SDPA_MLA", "moe_backends": ["CPU Unquantized"], "moe_experts": ["CPUUnquantizedExperts"],
      "linear_kernels": {}, "kv_cache_layout": "LBNHC"}),
    # vLLM 0.32.0 CPU: a W8A8 int8 (compressed-tensors) Llama, its int8 kernel
    (("effective_logs", "cpu-0.32.0-llama-w8a8.log"),
     {"quantization": "compressed-tensors", "dtype": "bfloat16", "attention_backends": [], "moe_backends": [],
      "linear_kernels": {"CompressedTensorsW8A8Int8": "CPUInt8ScaledMMLinearKernel"}, "kv_cache_layout": "LBHNC"}),
    # the same output with an override that drops its quantization
    (("effective_logs", "cpu-0.32.0-llama-w8a8-hf-overrides-drop-quantization.log"),
     {"quantization": None, "dtype": "bfloat16", "linear_kernels": {}}),
    # vLLM 0.32.0 CPU, speculative decoding through the MTP layer, engine and worker in their own processes
    (("effective_logs", "cpu-0.32.0-deepseek-v3-mtp-speculative.log"),
     {"speculative_method": "mtp", "num_speculative_tokens": 1, "attention_backends": ["CPU_MLA"], "enforce_eager": True}),
    # vLLM 0.32.0 CPU without --enforce-eager: compiled (DYNAMO_TRACE_ONCE)
    (("effective_logs", "cpu-0.32.0-qwen3-moe-compiled.log"),
     {"enforce_eager": False, "compilation_mode": 2, "cudagraph_mode": "NONE", "moe_backends": ["CPU Unquantized"]}),
    # vLLM 0.26.0 CUDA (H100): DeepSeek-V4 FP8, DeepGEMM block kernels, Triton FP8 MoE, FP8 KV cache
    (("gpu_logs", "h100-0.26.0-deepseek-v4-dummy-mhc.log"),
     {"vllm": "0.26.0", "quantization": "deepseek_v4_fp8", "dtype": "bfloat16", "kv_cache_dtype": "fp8",
      "moe_backends": ["TRITON Fp8"], "linear_kernels": {"Fp8LinearMethod": "DeepGemmFp8BlockScaledMMKernel"},
      "kv_cache_format": "fp8_ds_mla"}),
    # vLLM 0.26.0 CUDA: DeepSeek-V3 FP8 with its MTP drafter, TRITON_MLA, CUTLASS block kernels
    (("vllm_failures", "gpu-0.26.0-mla-dims-dummy.log"),
     {"quantization": "fp8", "speculative_method": "mtp", "num_speculative_tokens": 1, "attention_backends": ["TRITON_MLA"],
      "linear_kernels": {"Fp8LinearMethod": "CutlassFp8BlockScaledMMKernel"}}),
    # vLLM-MetaX (vLLM 0.17 on MACA): its Triton attention backend, GPTQ, compiled
    (("metax_logs", "c500-maca-path-unset.log"),
     {"vllm": "0.17.0", "quantization": None, "dtype": "bfloat16", "enforce_eager": False, "attention_backends": ["Triton"]}),
    (("metax_logs", "c500-gptq-shards-compile.log"),
     {"quantization": "gptq", "dtype": "float16", "enforce_eager": False, "compilation_mode": 3}),
])
def test_a_captured_start_up_log_gives_the_effective_configuration(parts, want):
    got = parse_log(log(*parts))
    assert got["engine_logged"] is True
    assert {k: got[k] for k in want} == want
    if got["quantization"] is not None:
        assert "quantization=" in got["evidence"]["quantization"] and got["evidence"]["quantization"].startswith("Initializing a V1")


# --- passed: served as planned ------------------------------------------------------------------
def test_the_demo_served_on_the_cpu_build_is_its_planned_path():
    row, record = effective_row(log("vllm_logs", "cpu-0.32.0-deepseek-v3.log"), None, DEMO_TEXT,
                                {**CPU, "attention_backend": "CPU_MLA"}, DEMO_PLAN)
    assert row["check"] == EFFECTIVE and row["status"] == "passed", row
    assert row["detail"].startswith("as planned: quantization none")
    assert "attention CPU_MLA (MLA prefill CPU_SDPA_MLA)" in row["detail"] and "MoE CPU Unquantized, CPUUnquantizedExperts" in row["detail"]
    assert "no speculative decoding" in row["detail"] and "eager" in row["detail"]
    kinds = {k["row"]: k for k in record["kinds"]}
    assert kinds["A"]["attention_backend"] == "CPU_MLA" and kinds["A"]["moe_backend"] is None
    assert kinds["B"]["moe_backend"] == "CPU Unquantized/CPUUnquantizedExperts"
    assert kinds["C"]["layers"] == ["drafter:model.layers.2"] and kinds["C"]["speculative_method"] is None
    assert kinds["C"]["note"] == "not built: served without speculative decoding" and kinds["C"]["attention_backend"] is None
    assert record["differences"] == [] and record["source"] == "log"


def test_fp8_block_on_the_cuda_build_is_served_as_fp8_block_with_its_drafter():
    row, record = effective_row(log("vllm_failures", "gpu-0.26.0-mla-dims-dummy.log"), FP8_BLOCK, DEMO_TEXT,
                                {"dtype": None, "kv_cache_dtype": None, "speculative": 1, "enforce_eager": True}, DEMO_PLAN)
    assert row["status"] == "passed", row
    assert "quantization fp8 (FP8 block 128×128), CutlassFp8BlockScaledMMKernel for Fp8LinearMethod" in row["detail"]
    assert "attention TRITON_MLA" in row["detail"] and "speculative mtp" in row["detail"]


def test_deepseek_v4_fp8_on_the_cuda_build_is_its_own_fp8_method():
    row, _ = effective_row(log("gpu_logs", "h100-0.26.0-deepseek-v4-dummy-mhc.log"), FP8_BLOCK, {"num_hidden_layers": 2},
                           {"dtype": None, "kv_cache_dtype": "fp8", "speculative": 0, "enforce_eager": True}, {})
    assert row["status"] == "passed", row
    assert "deepseek_v4_fp8" in row["detail"] and "KV cache fp8 (fp8_ds_mla)" in row["detail"]


# --- failed: a served path that differs -----------------------------------------------------------
def test_a_quantization_dropped_by_an_override_is_its_own_failure_quoting_the_engine_line():
    row, record = effective_row(log("effective_logs", "cpu-0.32.0-llama-w8a8-hf-overrides-drop-quantization.log"), W8A8,
                                {"num_hidden_layers": 2}, {**CPU, "dtype": "bfloat16"}, LLAMA_PLAN)
    assert row["status"] == "failed" and row["verdict"]["class"] == SERVED_PATH, row
    assert row["detail"] == "served path differs from the plan: quantization none (planned W8A8 int8 (compressed-tensors))"
    assert any(e.startswith("Initializing a V1 LLM engine (v0.32.0) with config: … ") and "quantization=None" in e
               for e in row["verdict"]["evidence"])
    assert "--hf-overrides" in row["verdict"]["advice"]
    assert record["differences"][0]["what"] == "quantization"
    # the same output without the override: served as its config says
    row, record = effective_row(log("effective_logs", "cpu-0.32.0-llama-w8a8.log"), W8A8, {"num_hidden_layers": 2},
                                {**CPU, "dtype": "bfloat16"}, LLAMA_PLAN)
    assert row["status"] == "passed", row
    assert ("quantization compressed-tensors (W8A8 int8 (compressed-tensors)), CPUInt8ScaledMMLinearKernel for "
            "CompressedTensorsW8A8Int8") in row["detail"]


def test_a_w8a8_output_served_by_a_weight_only_scheme_differs():
    """The real W8A8 start-up with vLLM's kernel choice for a weight-only scheme in its place (the
    wording of "Selected %s for %s", vllm/model_executor/kernels/linear): int8 activations dropped."""
    lines = [line.replace("Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8",
                          "Selected CPUWNA16LinearKernel for CompressedTensorsWNA16")
             for line in log("effective_logs", "cpu-0.32.0-llama-w8a8.log")]
    row, _ = effective_row(lines, W8A8, {"num_hidden_layers": 2}, {**CPU, "dtype": "bfloat16"}, LLAMA_PLAN)
    assert row["status"] == "failed" and row["verdict"]["class"] == SERVED_PATH, row
    assert "quantization scheme CompressedTensorsWNA16 (planned W8A8 int8 (compressed-tensors))" in row["detail"]
    assert row["verdict"]["evidence"] == ["Selected CPUWNA16LinearKernel for CompressedTensorsWNA16"]


def test_a_compiled_engine_where_eager_was_planned_differs():
    row, _ = effective_row(log("effective_logs", "cpu-0.32.0-qwen3-moe-compiled.log"), None, {"num_hidden_layers": 4}, CPU, {})
    assert row["status"] == "failed" and row["verdict"]["class"] == SERVED_PATH
    assert "eager / graph mode compiled (planned eager)" in row["detail"]
    assert any("enforce_eager=False" in e for e in row["verdict"]["evidence"])


def test_another_attention_backend_than_asked_and_a_missing_drafter_differ():
    # the demo's log, planned with another backend and with speculative decoding it was not served with
    row, record = effective_row(log("vllm_logs", "cpu-0.32.0-deepseek-v3.log"), None, DEMO_TEXT,
                                {**CPU, "attention_backend": "FLASHMLA", "speculative": 1}, DEMO_PLAN)
    assert row["status"] == "failed", row
    what = {d["what"]: d for d in record["differences"]}
    assert what["attention backend"]["served"] == "CPU_MLA" and what["attention backend"]["evidence"] == "Using CPU_MLA backend."
    assert what["speculative method"]["served"] == "none"
    assert any("speculative_config=None" in e for e in row["verdict"]["evidence"])


def test_an_mla_model_on_a_backend_without_mla_differs():
    lines = ["(EngineCore pid=1) INFO 12-03 08:38:15 [cuda.py:483] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']."]
    row, _ = effective_row(lines, None, DEMO_TEXT, {**CPU, "dtype": None}, DEMO_PLAN)
    assert row["status"] == "failed" and "attention backend FLASH_ATTN (planned an MLA backend" in row["detail"]


# --- the engine's own record (mxtrim's probe), per kept layer --------------------------------------
def _probe(moe_method="UnquantizedFusedMoEMethod", linear="UnquantizedLinearMethod", backend="CPU_MLA", quantization=None):
    """A probe record of the demo as the contract gives it (effective_from_probe)."""
    def layer(moe: bool) -> dict:
        return {"attention_class": "MLAAttention", "attention_backend": backend, "attention_impl": "CPUMLAImpl",
                "moe_class": "MoERunner" if moe else None, "moe_quant_method": moe_method if moe else None,
                "moe_kernel": "CPUUnquantizedExperts" if moe else None,
                "linear_quant_methods": {"self_attn.o_proj": linear, "mlp.gate_up_proj": linear}}
    return {"quantization": quantization, "dtype": "torch.bfloat16", "kv_cache_dtype": "auto", "speculative_method": None,
            "compilation_mode": 0, "cudagraph_mode": "NONE", "enforce_eager": True,
            "layers": {"model.layers.0": layer(False), "model.layers.1": layer(True)}}


FP8_DEMO = {**DEMO_PLAN, "coverage": [dict(c, kind=c["kind"].replace("BF16", "F8_E4M3/BF16")) for c in DEMO_PLAN["coverage"]]}


def test_the_probe_shows_a_quantized_kind_served_by_an_unquantized_fallback():
    settings = {**CPU, "dtype": "bfloat16", "attention_backend": "CPU_MLA"}
    # as planned: each kept layer built with the FP8 methods
    row, record = effective_row([], FP8_BLOCK, DEMO_TEXT, settings, FP8_DEMO,
                                _probe("Fp8MoEMethod", "Fp8LinearMethod", quantization="fp8"))
    assert row["status"] == "passed", row
    assert record["source"] == "probe and log" and {k["row"]: k["source"] for k in record["kinds"]} == {"A": "probe", "B": "probe", "C": "log"}
    assert record["kinds"][1]["moe_backend"] == "Fp8MoEMethod (CPUUnquantizedExperts)"
    # the engine says fp8, but the MoE layer's experts were built unquantized: a fallback
    row, record = effective_row([], FP8_BLOCK, DEMO_TEXT, settings, FP8_DEMO,
                                _probe("UnquantizedFusedMoEMethod", "Fp8LinearMethod", quantization="fp8"))
    assert row["status"] == "failed" and row["verdict"]["class"] == SERVED_PATH, row
    assert row["detail"] == "served path differs from the plan: row B experts unquantized (planned FP8 block 128×128)"
    assert row["verdict"]["evidence"] == ["the engine's own record (mxtrim's probe): model.layers.1 moe_quant_method=UnquantizedFusedMoEMethod"]


def test_the_probe_shows_another_attention_backend_per_layer():
    row, record = effective_row([], None, DEMO_TEXT, {**CPU, "dtype": "bfloat16", "attention_backend": "CPU_MLA"}, DEMO_PLAN,
                                _probe(backend="TRITON_MLA"))
    assert row["status"] == "failed"
    assert [d["what"] for d in record["differences"]] == ["row A attention backend", "row B attention backend"]


def test_without_a_log_line_or_a_probe_the_row_is_unverified():
    row, _ = effective_row(["INFO nothing about the engine"], None, {}, CPU, {})
    assert row["status"] == "unverified" and row["verdict"] is None


def test_the_class_is_one_the_classifier_lists():
    assert SERVED_PATH in classes()


# --- for real, on the CPU build ---------------------------------------------------------------------
def mxtrim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, cwd=cwd, timeout=900)


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                    reason="real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON")
def test_a_w8a8_output_served_without_its_quantization_fails_with_its_own_class(tmp_path):
    """A W8A8 int8 (compressed-tensors) Llama, trimmed in dummy mode: served as it is, the row
    passes and names the int8 kernel; served through a launcher whose ``--hf-overrides`` drops
    the quantization, generation still passes but the validation fails on the served path."""
    src = make_servable_llama(tmp_path / "llama-w8a8", layers=4)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "quantization_config": W8A8}, indent=2))
    out = tmp_path / "out"
    proc = mxtrim("trim", str(src), "--mode", "dummy", "--keep", "1,2", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

    def validate(*extra: str) -> tuple[int, dict, dict]:
        proc = mxtrim("validate", str(out), "--serve", "--python", VLLM_PYTHON, "--device", "cpu", "--json", *extra, cwd=tmp_path)
        assert proc.stdout.strip(), proc.stderr
        doc = json.loads(proc.stdout)
        return proc.returncode, doc, {r["check"]: r for r in doc["rows"]}

    code, doc, rows = validate()
    assert code == 0, json.dumps(doc["rows"], indent=1)[:3000]
    eff = rows[EFFECTIVE]
    assert eff["status"] == "passed", eff
    assert "quantization compressed-tensors (W8A8 int8 (compressed-tensors)), CPUInt8ScaledMMLinearKernel" in eff["detail"]
    assert doc["effective"]["engine"]["quantization"] == "compressed-tensors"

    launcher = f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --hf-overrides '{{\"quantization_config\": null}}'"
    code, doc, rows = validate("--launcher", launcher)
    assert rows["start-up"]["status"] == "passed" and rows["generation"]["status"] == "passed"  # the tokens alone look fine
    eff = rows[EFFECTIVE]
    assert code == 1 and eff["status"] == "failed", eff
    assert eff["verdict"]["class"] == SERVED_PATH and "quantization none (planned W8A8 int8 (compressed-tensors))" in eff["detail"]
    assert any("quantization=None" in e for e in eff["verdict"]["evidence"])
    assert doc["effective"]["engine"]["quantization"] is None and doc["effective"]["differences"][0]["what"] == "quantization"
    # kept with the run, and the README's row names the class
    history = json.loads((out / "validation.json").read_text())
    assert history["runs"][-1]["effective"] == doc["effective"] and len(history["runs"]) == 2
    assert f"| {EFFECTIVE} | failed: {SERVED_PATH} |" in (out / "README.md").read_text()


# --- the kept layers' names: the same in both records ------------------------------------------------
def test_the_effective_record_names_each_row_s_layers_as_the_paths_record_does(tmp_path):
    """A dummy DeepSeek-V4 output (its MTP layer stored as ``mtp.0``, the small published
    layout): ``effective.kinds`` of validate --json names each coverage row's layers as
    ``paths`` does; a hand-edited plan whose kept entries are malformed gives the same row
    names, not a traceback."""
    import dsv4_support as v4
    from engine_support import plan_for
    from mxtrim_tui.core.validate.effective import output_row
    from mxtrim_tui.core.validate.paths import unserved_paths
    from mxtrim_tui.core.validate.run import read_output
    from mxtrim_tui.core.write.writer import write_dummy

    out = write_dummy(plan_for(v4.published_source(tmp_path / "src"), ["0,3"]), tmp_path / "out").path
    plan = read_output(out)
    settings = {"dtype": None, "kv_cache_dtype": "fp8", "speculative": 1, "enforce_eager": True}

    def names(doc: dict) -> tuple[dict, dict]:
        _, record = output_row(out, doc, settings)
        paths = {p["row"]: p["layers"] for p in unserved_paths(doc, "not run") if p["layers"]}
        return {k["row"]: k["layers"] for k in record["kinds"]}, paths

    effective, paths = names(plan)
    assert any(row["submodel"] == "mtp" and row["kept"] for row in plan["coverage"])
    assert effective == paths and any(n.startswith("drafter:") for layers in paths.values() for n in layers)
    edited = json.loads(json.dumps(plan))
    for row in edited["coverage"]:
        if row["kept"]:
            row["kept"] += [{"new": "one", "old": 1}, {"old": 2}, "3"]
    assert names(edited) == (effective, paths)
