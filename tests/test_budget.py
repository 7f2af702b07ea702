"""Budget arithmetic (exact bytes, vLLM's KV formulas) and the GPU probe's failure mode."""

from __future__ import annotations

import pytest

from engine_support import plan_for
from mxtrim_tui.core.plan.budget import BudgetInputs, check_parallelism, compute_budget, parse_budget_inputs
from mxtrim_tui.core.probe.gpu import probe_gpus, probe_metax
from synth.checkpoint import write_checkpoint
from synth.layouts import all_layouts

GiB = 2**30


def plan_of(tmp_path, key, keep=None, **kw):
    return plan_for(write_checkpoint(tmp_path / key, all_layouts()[key](**kw), data="sparse", tokenizer=False), keep)


def test_mla_kv_is_the_latent_and_ignores_tp(tmp_path):
    plan = plan_of(tmp_path, "deepseek_v3", ["0,3"])
    for tp in (1, 8):
        b = compute_budget(plan, BudgetInputs(tp=tp, max_model_len=4096, gpu_total_bytes=141 * GiB))
        # (kv_lora_rank 512 + qk_rope_head_dim 64) * 2 bytes, for 2 layers + the MTP layer
        assert b.kv_per_token == 3 * (512 + 64) * 2
        assert b.weights_bytes == plan.retained_bytes
        # replicated MLA latent projections, norms and routers: more than an even share per GPU
        assert (b.weights_per_gpu == plan.retained_bytes) if tp == 1 else (plan.retained_bytes // tp < b.weights_per_gpu < plan.retained_bytes // 4)


def test_gqa_kv_divides_by_tp_until_heads_run_out(tmp_path):
    plan = plan_of(tmp_path, "llama3", ["0,1"])  # 8 KV heads, head_dim 128
    per_layer = {tp: compute_budget(plan, BudgetInputs(tp=tp)).kv_per_token // 2 for tp in (1, 2, 8, 16)}
    assert per_layer == {1: 2 * 8 * 128 * 2, 2: 2 * 4 * 128 * 2, 8: 2 * 1 * 128 * 2, 16: 2 * 1 * 128 * 2}


def test_sliding_layers_are_capped_at_the_window(tmp_path):
    plan = plan_of(tmp_path, "gemma2", ["0,1"])  # sliding (4096 window) + full
    b = compute_budget(plan, BudgetInputs(max_model_len=8192, max_num_batched_tokens=2048))
    per_layer = b.kv_per_token // 2
    # vLLM's SlidingWindowSpec: min(window - 1 + max_num_batched_tokens, max_model_len) tokens
    assert b.kv_bytes_for_context == per_layer * (4096 - 1 + 2048) + per_layer * 8192


def test_vllm_arithmetic_and_advice_order(tmp_path):
    plan = plan_of(tmp_path, "qwen3", ["0"])
    b = compute_budget(plan, BudgetInputs(max_model_len=4096, gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.9))
    assert b.budget_bytes == int(24 * GiB * 0.9)
    assert b.available_kv_bytes == b.budget_bytes - b.weights_per_gpu - b.activation_bytes
    assert b.kv_tokens == b.available_kv_bytes // b.kv_per_token and b.fits
    tight = compute_budget(plan, BudgetInputs(max_model_len=10**7, max_num_batched_tokens=8192, gpu_total_bytes=4 * GiB,
                                              gpu_memory_utilization=0.9))
    assert tight.fits is False
    assert tight.advice[0].startswith("lower --max-model-len") and "never fewer experts" in tight.advice[-1]
    # without a GPU figure the advice names the flag the CLI takes (and the wizard's field)
    blind = compute_budget(plan, BudgetInputs(max_model_len=4096))
    assert any("--gpu-memory" in a and "GPU memory field" in a for a in blind.advice)


def test_gpu_probe_never_raises_without_a_gpu():
    p = probe_gpus()
    assert p.available in (True, False)
    if not p.available:
        assert p.reason and p.gpus == ()
    m = probe_metax()
    assert not m.available and "pymxml" in m.reason


# --- typed serve settings: the wizard's fields and the CLI's flags -----------------------------
def test_parse_budget_inputs_accepts_plain_values():
    base = BudgetInputs(gpu_total_bytes=24 * GiB)
    raw = {"tp": "7", "pp": " 2 ", "max_model_len": "1024", "max_num_seqs": "4", "gpu_memory_utilization": "1.0", "gpu_gib": ""}
    inputs, errors = parse_budget_inputs(raw, base)
    assert errors == {}
    assert (inputs.tp, inputs.pp, inputs.max_model_len, inputs.max_num_seqs) == (7, 2, 1024, 4)
    assert inputs.gpu_memory_utilization == 1.0
    assert inputs.gpu_total_bytes == 24 * GiB  # empty GPU memory keeps what was known
    inputs, errors = parse_budget_inputs({"gpu_gib": "80", "gpu_memory_utilization": ".5"}, base)
    assert errors == {} and inputs.gpu_total_bytes == 80 * GiB and inputs.gpu_memory_utilization == 0.5
    # what f"{0.00001:g}" writes (the wizard's flags) reads back
    inputs, errors = parse_budget_inputs({"gpu_memory_utilization": f"{0.00001:g}"}, base)
    assert errors == {} and inputs.gpu_memory_utilization == 0.00001


@pytest.mark.parametrize("typed, message", [
    ("0", "at least 1"),
    ("", "required"),
    ("1.5", "whole number"),
    ("７", "digits 0-9"),  # full-width seven: int() would take it, vLLM's argparse would not
    ("-2", "whole number"),
])
def test_parse_budget_inputs_refuses_bad_counts(typed, message):
    base = BudgetInputs(tp=2, max_num_seqs=3)
    inputs, errors = parse_budget_inputs({"tp": typed, "max_num_seqs": typed}, base)
    assert message in errors["tp"] and message in errors["max_num_seqs"]
    assert inputs == base  # invalid fields keep the previous value


@pytest.mark.parametrize("typed", ["7", "0", "", "nan", "inf", "-0.5", "1e400", "０.５"])
def test_parse_budget_inputs_refuses_bad_utilization(typed):
    inputs, errors = parse_budget_inputs({"gpu_memory_utilization": typed}, BudgetInputs())
    assert set(errors) == {"gpu_memory_utilization"} and inputs.gpu_memory_utilization == BudgetInputs().gpu_memory_utilization == 0.8


@pytest.mark.parametrize("typed", ["0", "-8", "nan", "1e400", "lots"])
def test_parse_budget_inputs_refuses_bad_gpu_memory(typed):
    inputs, errors = parse_budget_inputs({"gpu_gib": typed}, BudgetInputs(gpu_total_bytes=GiB))
    assert "GiB" in errors["gpu_gib"] and inputs.gpu_total_bytes == GiB


def test_check_parallelism_names_the_numbers(tmp_path):
    plan = plan_of(tmp_path, "qwen3", ["0,1"], num_layers=4, hidden_size=256, num_attention_heads=12, num_key_value_heads=4, head_dim=32)
    ok = [tp for tp in (1, 2, 3, 4, 6, 12) if not check_parallelism(plan, BudgetInputs(tp=tp))]
    assert ok == [1, 2, 4, 12]
    assert check_parallelism(plan, BudgetInputs(tp=3)) == {"tp": "TP=3 does not divide the 4 KV heads"}
    assert "TP=6 is not a multiple of the 4 KV heads" in check_parallelism(plan, BudgetInputs(tp=6))["tp"]
    assert check_parallelism(plan, BudgetInputs(tp=5))["tp"].startswith("TP=5 does not divide the 12 attention heads")
    assert check_parallelism(plan, BudgetInputs(pp=2)) == {}
    assert check_parallelism(plan, BudgetInputs(pp=3)) == {"pp": "PP=3 exceeds the 2 kept text layers"}
