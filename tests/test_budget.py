"""Budget arithmetic (exact bytes, vLLM's KV formulas) and the GPU probe's failure mode."""

from __future__ import annotations

from engine_support import plan_for
from mxtrim_tui.core.budget import BudgetInputs, compute_budget
from mxtrim_tui.core.gpu import probe_gpus, probe_metax
from mxtrim_tui.synth.checkpoint import write_checkpoint
from mxtrim_tui.synth.layouts import all_layouts

GiB = 2**30


def plan_of(tmp_path, key, keep=None, **kw):
    return plan_for(write_checkpoint(tmp_path / key, all_layouts()[key](**kw), data="sparse", tokenizer=False), keep)


def test_mla_kv_is_the_latent_and_ignores_tp(tmp_path):
    plan = plan_of(tmp_path, "deepseek_v3", ["0,3"])
    for tp in (1, 8):
        b = compute_budget(plan, BudgetInputs(tp=tp, max_model_len=4096, gpu_total_bytes=141 * GiB))
        # (kv_lora_rank 512 + qk_rope_head_dim 64) * 2 bytes, for 2 layers + the MTP layer
        assert b.kv_per_token == 3 * (512 + 64) * 2
        assert b.weights_bytes == plan.retained_bytes and b.weights_per_gpu == plan.retained_bytes // tp


def test_gqa_kv_divides_by_tp_until_heads_run_out(tmp_path):
    plan = plan_of(tmp_path, "llama3", ["0,1"])  # 8 KV heads, head_dim 128
    per_layer = {tp: compute_budget(plan, BudgetInputs(tp=tp)).kv_per_token // 2 for tp in (1, 2, 8, 16)}
    assert per_layer == {1: 2 * 8 * 128 * 2, 2: 2 * 4 * 128 * 2, 8: 2 * 1 * 128 * 2, 16: 2 * 1 * 128 * 2}


def test_sliding_layers_are_capped_at_the_window(tmp_path):
    plan = plan_of(tmp_path, "gemma2", ["0,1"])  # sliding (4096 window) + full
    b = compute_budget(plan, BudgetInputs(max_model_len=8192))
    per_layer = b.kv_per_token // 2
    assert b.kv_bytes_for_context == per_layer * 4096 + per_layer * 8192


def test_vllm_arithmetic_and_advice_order(tmp_path):
    plan = plan_of(tmp_path, "qwen3", ["0"])
    b = compute_budget(plan, BudgetInputs(max_model_len=4096, gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.9))
    assert b.budget_bytes == int(24 * GiB * 0.9)
    assert b.available_kv_bytes == b.budget_bytes - b.weights_per_gpu - b.activation_bytes
    assert b.kv_tokens == b.available_kv_bytes // b.kv_per_token and b.fits
    tight = compute_budget(plan, BudgetInputs(max_model_len=10**7, gpu_total_bytes=4 * GiB))
    assert tight.fits is False
    assert tight.advice[0].startswith("lower --max-model-len") and "never fewer experts" in tight.advice[-1]


def test_gpu_probe_never_raises_without_a_gpu():
    p = probe_gpus()
    assert p.available in (True, False)
    if not p.available:
        assert p.reason and p.gpus == ()
    m = probe_metax()
    assert not m.available and "pymxml" in m.reason
