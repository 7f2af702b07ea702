"""The budget's worked numbers: KV per token of public models, weights per GPU under TP / PP / EP
tensor by tensor, and the GLM-5 hand estimate, on full-size sparse checkpoints (real names,
shapes and dtypes; no data)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from engine_support import plan_for
from mxtrim_tui.core.plan.budget import BudgetInputs, check_parallelism, compute_budget, recurrent_state_bytes, text_config
from mxtrim_tui.core.plan.partition import pp_stages, rank_weights
from synth.checkpoint import Layout, write_checkpoint
from synth.layouts import all_layouts

LAYOUTS = all_layouts()
GiB = 1 << 30


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    cache = {}

    def get(key, layout=None):
        if key not in cache:
            cache[key] = write_checkpoint(tmp_path_factory.mktemp("src") / key, layout or LAYOUTS[key](), data="sparse")
        return cache[key]

    return get


def llama3_70b() -> Layout:
    """Llama-3.1-70B-Instruct's names, shapes and dtypes: 80 layers, hidden 8192, 64 heads,
    8 KV heads of 128, intermediate 28672, vocabulary 128256, BF16."""
    H, L, I, V, KV = 8192, 80, 28672, 128256, 1024
    t = [("model.embed_tokens.weight", "BF16", (V, H))]
    for i in range(L):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", "BF16", (H,)), (p + "self_attn.q_proj.weight", "BF16", (H, H)),
              (p + "self_attn.k_proj.weight", "BF16", (KV, H)), (p + "self_attn.v_proj.weight", "BF16", (KV, H)),
              (p + "self_attn.o_proj.weight", "BF16", (H, H)), (p + "post_attention_layernorm.weight", "BF16", (H,)),
              (p + "mlp.gate_proj.weight", "BF16", (I, H)), (p + "mlp.up_proj.weight", "BF16", (I, H)),
              (p + "mlp.down_proj.weight", "BF16", (H, I))]
    t += [("model.norm.weight", "BF16", (H,)), ("lm_head.weight", "BF16", (V, H))]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "num_hidden_layers": L,
           "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": I, "vocab_size": V,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    return Layout("llama3_70b", cfg, t)


# --- KV per token --------------------------------------------------------------------------
def test_llama3_8b_gqa_holds_131072_bytes_per_token(sparse):
    plan = plan_for(sparse("llama3"), ["0-31"])
    b = compute_budget(plan, BudgetInputs())
    assert b.kv_per_token == 131_072 and [l.bytes_per_token for l in b.kv_lines] == [4_096]
    assert compute_budget(plan, BudgetInputs(kv_cache_dtype="fp8")).kv_per_token == 65_536  # fp8 halves it
    assert compute_budget(plan, BudgetInputs(tp=4)).kv_per_token == 131_072 // 4
    assert compute_budget(plan, BudgetInputs(tp=16)).kv_per_token == 131_072 // 8  # 8 KV heads replicated


@pytest.mark.slow
def test_deepseek_v3_mla_holds_70272_bytes_per_token_for_61_layers(sparse):
    plan = plan_for(sparse("deepseek_v3"), ["0-60"], mtp=False)
    b = compute_budget(plan, BudgetInputs(tp=8))
    assert b.kv_per_token == 70_272 and b.kv_lines[0].bytes_per_token == 1_152  # (512 + 64) × 2, every TP rank
    assert b.to_json()["kv_bytes_per_token"] == 70_272
    assert compute_budget(plan, BudgetInputs(kv_cache_dtype="fp8")).kv_per_token == 61 * 576


def test_sliding_layers_hold_at_most_the_window(sparse):
    for key in ("gemma2", "gemma3_text"):
        plan = plan_for(sparse(key), ["0-5"])
        window = text_config(plan)["sliding_window"]
        b = compute_budget(plan, BudgetInputs(max_model_len=131_072, max_num_batched_tokens=2048))
        kinds = {l.kind: l for l in b.kv_lines}
        assert kinds["sliding"].tokens_per_seq == window - 1 + 2048 < 131_072
        assert kinds["full"].tokens_per_seq == 131_072
        per = {k: l.bytes_per_token for k, l in kinds.items()}
        assert b.kv_bytes_for_context == sum(l.layers * l.bytes_per_token * l.tokens_per_seq for l in kinds.values())
        assert per["sliding"] == per["full"]  # same cost per token, fewer tokens


def test_qwen3_next_counts_full_attention_per_token_and_linear_state_per_sequence(sparse):
    plan = plan_for(sparse("qwen3_next"), ["0-7"], mtp=False)
    b = compute_budget(plan, BudgetInputs(max_model_len=4096, max_num_seqs=4, gpu_total_bytes=80 * GiB))
    kinds = {l.kind: l for l in b.kv_lines}
    assert kinds["full"].layers == 2 and kinds["linear"].layers == 6
    # 2 full-attention layers: 2 KV heads of 256, BF16
    assert b.kv_per_token == 2 * (2 * 2 * 256 * 2)
    # gated delta net state per sequence: conv (4 − 1) × (2·16·128 + 32·128) + recurrent 32 × 128 × 128, BF16
    assert kinds["linear"].state_bytes_per_seq == (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2 == 1_097_728
    assert b.state_bytes_per_seq == 6 * 1_097_728
    assert b.kv_tokens == (b.available_kv_bytes - 4 * b.state_bytes_per_seq) // b.kv_per_token
    assert recurrent_state_bytes("linear", text_config(plan), 2) == (3 * (2 * 16 * 128 + 32 * 128) // 2 + 16 * 128 * 128) * 2


# --- weights per GPU ----------------------------------------------------------------------
def expected_share(name: str, shape: tuple, nbytes: int, tp: int, kv_heads: int) -> int:
    """The bytes of one tensor on one TP rank, by the role its name gives it (written out
    here per model family, independently of the partition table)."""
    leaf = name.rsplit(".", 2)[-2] if name.endswith((".weight", ".weight_scale_inv", ".bias")) else name
    replicated = ("layernorm", "norm", "q_a_proj", "kv_a_proj_with_mqa", "eh_proj", "enorm", "hnorm", "e_score_correction_bias")
    if any(r in name for r in replicated) or name.endswith(".mlp.gate.weight"):
        return nbytes
    if leaf in ("embed_tokens", "lm_head", "head"):
        return nbytes // shape[0] * math.ceil(math.ceil(shape[0] / 64) * 64 / tp)
    if leaf in ("k_proj", "v_proj") and kv_heads < tp:
        return nbytes // kv_heads
    if leaf in ("q_proj", "k_proj", "v_proj", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj"):
        return nbytes // shape[0] * math.ceil(shape[0] / tp)
    if leaf in ("o_proj", "down_proj"):
        return nbytes // shape[1] * math.ceil(shape[1] / tp)
    raise AssertionError(f"no role for {name}")


@pytest.mark.parametrize("model", ["llama3_70b", "deepseek_v3"])
def test_tp_splits_match_each_tensors_partitioning(sparse, model):
    root = sparse(model, llama3_70b() if model == "llama3_70b" else None)
    plan = plan_for(root, ["0-79"] if model == "llama3_70b" else ["0,3"])
    src = plan.inventory.source
    kv_heads = text_config(plan).get("num_key_value_heads", 128)
    for tp in (2, 4, 8):
        want = sum(expected_share(old, src.tensor(old).shape, src.tensor(old).nbytes, tp, kv_heads) for old, _ in plan.renames)
        got = rank_weights(plan, tp=tp)
        assert got.per_gpu == want and got.total_bytes == plan.retained_bytes
    if model == "llama3_70b":  # 141.1 GB in BF16; everything but the norms splits 8 ways
        norms = (2 * 80 + 1) * 8192 * 2
        assert rank_weights(plan, tp=8).per_gpu == (plan.retained_bytes - norms) // 8 + norms
        assert 16.4 * GiB < rank_weights(plan, tp=8).per_gpu < 16.5 * GiB


@pytest.mark.slow
def test_expert_parallel_puts_whole_experts_on_each_rank_and_pp_splits_layers(sparse):
    plan = plan_for(sparse("deepseek_v3"), ["0,3,4,5"], mtp=False)
    src = plan.inventory.source
    expert_bytes = sum(src.tensor(o).nbytes for o, _ in plan.renames if ".mlp.experts." in o)
    plain = rank_weights(plan, tp=8)
    ep = rank_weights(plan, tp=4, dp=2, expert_parallel=True)
    assert ep.ep == 8 and ep.by_kind["expert"] == expert_bytes // 8  # 256 experts, 32 per rank
    assert plain.by_kind["expert"] == expert_bytes // 8  # split 8 ways on the intermediate size
    # each worker, named as vLLM tags its log lines: its TP share plus its EP rank's experts
    workers = rank_weights(plan, tp=2, expert_parallel=True).by_worker()
    non_expert = rank_weights(plan, tp=2, expert_parallel=True).plain_stage_bytes[0]
    assert list(workers) == ["TP0_EP0", "TP1_EP1"] and all(w == non_expert + expert_bytes // 2 for w in workers.values())
    assert list(rank_weights(plan, tp=2, pp=2).by_worker()) == ["PP0_TP0", "PP0_TP1", "PP1_TP0", "PP1_TP1"]
    assert rank_weights(plan).by_worker() == {"0": plan.retained_bytes}
    # PP: vLLM's get_pp_indices gives the remainder to the stages before the last
    assert [list(r) for r in pp_stages(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [len(r) for r in pp_stages(7, 4)] == [2, 2, 2, 1] and [len(r) for r in pp_stages(6, 4)] == [1, 2, 2, 1]
    two = rank_weights(plan, pp=2)
    embed = src.tensor("model.embed_tokens.weight").nbytes
    head = src.tensor("lm_head.weight").nbytes
    first = embed + sum(src.tensor(o).nbytes for o, n in plan.renames if n.startswith(("model.layers.0.", "model.layers.1.")))
    assert two.stage_bytes == [first, plan.retained_bytes - first] and head < two.stage_bytes[1]
    errors = check_parallelism(plan, BudgetInputs(tp=3, expert_parallel=True))
    assert "256 routed experts do not split over EP = TP × DP = 3 ranks" in errors["ep"]
    assert check_parallelism(plan, BudgetInputs(tp=4, dp=2, expert_parallel=True)) == {}
    # 2048 / 32 = 64 rows per rank cannot hold whole 128 × 128 FP8 blocks, nor 18432 / 32 = 576
    tp32 = check_parallelism(plan, BudgetInputs(tp=32))["tp"]
    assert "model.layers.N.mlp.experts.E.gate_proj: 2048 output rows / TP=32 = 64, not whole 128×128 blocks" in tp32
    assert "model.layers.N.mlp.experts.E.down_proj: 2048 input columns / TP=32 = 64" in tp32
    assert "model.layers.N.mlp.down_proj: 18432 input columns / TP=32 = 576" in tp32
    # the dense MLP fails too, which expert parallelism does not change: not offered
    assert "self_attn" not in tp32 and tp32.endswith("fix: a smaller TP")
    # expert parallelism keeps routed experts whole; the shared experts and dense MLPs still split
    ep32 = check_parallelism(plan, BudgetInputs(tp=32, expert_parallel=True))["tp"]
    assert ".experts.E." not in ep32 and "model.layers.N.mlp.shared_experts.up_proj: 2048 output rows / TP=32 = 64" in ep32


@pytest.mark.slow
def test_expert_parallelism_is_offered_only_where_routed_experts_alone_fail_to_split(sparse):
    """EP keeps whole routed experts on each rank, nothing else: a fix only when they are all
    that does not split into whole FP8 blocks."""
    from synth.layouts.deepseek import FP8_BLOCK, _build, _v3_config

    # two shared experts (4096 rows: 128 per rank at TP=32) beside routed ones of 2048 (64 per rank)
    layout = _build("deepseek_v3", {**_v3_config(), "n_shared_experts": 2}, lin=FP8_BLOCK, norm_dtype="BF16", bias_dtype="F32",
                    max_shard_bytes=4_250_000_000, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
                    moe_intermediate_size=None, vocab_size=None, num_attention_heads=None, q_lora_rank=None, kv_lora_rank=None,
                    first_k_dense_replace=None, num_nextn_predict_layers=None)
    src = sparse("deepseek_v3_two_shared", layout)
    moe_only = check_parallelism(plan_for(src, ["3,4"], mtp=False), BudgetInputs(tp=32))["tp"]
    assert ".experts.E." in moe_only and "shared_experts" not in moe_only and "mlp.down_proj" not in moe_only
    assert moe_only.endswith("fix: a smaller TP, or expert parallelism")
    assert check_parallelism(plan_for(src, ["3,4"], mtp=False), BudgetInputs(tp=32, expert_parallel=True)) == {}
    # a dense layer kept: its MLP fails as well, which EP leaves split
    with_dense = check_parallelism(plan_for(src, ["0,3"], mtp=False), BudgetInputs(tp=32))["tp"]
    assert "model.layers.N.mlp.down_proj" in with_dense and with_dense.endswith("fix: a smaller TP")
    # shared experts failing too (4096 / 64 = 64 rows): not offered either
    tp64 = check_parallelism(plan_for(src, ["3,4"], mtp=False), BudgetInputs(tp=64))["tp"]
    assert "shared_experts" in tp64 and tp64.endswith("fix: a smaller TP")


def test_with_only_the_config_expert_parallelism_is_offered_only_for_routed_experts(sparse, tmp_path):
    """No tensors to read (a config-only download): the config's widths decide, and EP is the
    fix only when the routed experts' width alone fails; the shared experts' width (two shared
    experts of 2048) and a kept dense MLP are split under EP too."""
    import shutil

    from synth.layouts.deepseek import FP8_BLOCK, _build, _v3_config

    def config_only(name, **cfg):
        layout = _build("deepseek_v3", {**_v3_config(), **cfg}, lin=FP8_BLOCK, norm_dtype="BF16", bias_dtype="F32",
                        max_shard_bytes=4_250_000_000, num_layers=None, num_experts=None, hidden_size=None,
                        intermediate_size=None, moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
                        q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None, num_nextn_predict_layers=None)
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(sparse(name, layout) / "config.json", folder)
        return folder

    one = config_only("v3_one_shared", n_shared_experts=1)
    # MoE layers only: 2048 / 32 = 64 is not whole 128-blocks, for routed and the one shared expert
    moe_only = check_parallelism(plan_for(one, ["3,4"], mtp=False), BudgetInputs(tp=32))["tp"]
    assert "moe_intermediate_size 2048 / TP=32 = 64" in moe_only and "shared experts' width 2048 / TP=32 = 64" in moe_only
    assert "intermediate_size 18432" not in moe_only and moe_only.endswith("fix: a smaller TP")
    # two shared experts (4096 / 32 = 128): the routed experts alone fail, which EP fixes
    two = config_only("v3_two_shared", n_shared_experts=2)
    routed = check_parallelism(plan_for(two, ["3,4"], mtp=False), BudgetInputs(tp=32))["tp"]
    assert "shared" not in routed and routed.endswith("fix: a smaller TP, or expert parallelism")
    assert check_parallelism(plan_for(two, ["3,4"], mtp=False), BudgetInputs(tp=32, expert_parallel=True)) == {}
    # a dense layer kept: 18432 / 32 = 576 fails as well, and EP leaves it split
    dense = check_parallelism(plan_for(two, ["0,3"], mtp=False), BudgetInputs(tp=32))["tp"]
    assert "intermediate_size 18432 / TP=32 = 576" in dense and dense.endswith("fix: a smaller TP")


@pytest.mark.slow
def test_a_dummy_output_is_predicted_as_vllm_serves_it(sparse, tmp_path):
    """A dummy output holds no weights: its prediction is its source's kept tensors as served —
    the MTP layer only with speculative decoding (vLLM loads no MTP weights without it), plus
    the 16-bit MLA copies vLLM makes of each quantized kv_b_proj, as for a real-weight output."""
    from engine_support import run_cli
    from mxtrim_tui.core.validate.memory_check import mla_runtime_copies, predict
    from mxtrim_tui.core.validate.serve import ServeOptions

    src = sparse("deepseek_v3")
    out = tmp_path / "dummy"
    r = run_cli("trim", str(src), "--keep", "0,3", "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "mxtrim-plan.json").read_text())["mtp_kept"]
    served, with_mtp = plan_for(src, ["0,3"], mtp=False), plan_for(src, ["0,3"], mtp=True)
    assert mla_runtime_copies(served, 1) > 0 and with_mtp.retained_bytes > served.retained_bytes

    def weights(speculative: int) -> int:
        opts = ServeOptions(python=sys.executable, device="cuda", gpu_memory_utilization=0.9, speculative_mtp=speculative)
        return predict(out, opts, 141 * GiB)["weights_bytes"]

    assert weights(0) == served.retained_bytes + mla_runtime_copies(served, 1)
    assert weights(1) == with_mtp.retained_bytes + mla_runtime_copies(with_mtp, 1)


def test_glm5_trim_reproduces_the_public_hand_estimate(sparse):
    """3 backbone layers + embeddings / head about 22.32 GiB, one MTP layer about 9.35 GiB."""
    plan = plan_for(sparse("glm_moe_dsa"), ["0,6,7"])
    inv = plan.inventory
    mtp = inv.submodels["mtp"]
    mtp_names = {t for l in mtp.layers for t in l.tensors} | {t for p in mtp.parts for t in p.tensors}
    backbone = sum(inv.source.tensor(o).nbytes for o, _ in plan.renames if o not in mtp_names)
    assert round(backbone / GiB, 2) == 22.32 and round(mtp.nbytes / GiB, 2) == 9.35
    b = compute_budget(plan, BudgetInputs())
    assert b.weights_bytes == backbone + mtp.nbytes == plan.retained_bytes


def test_vllm_keeps_16_bit_copies_of_a_quantized_mla_kv_b_proj(sparse):
    """What "Model loading took" counts beyond the tensors (seen on an H200: 12 MiB for three
    MLA layers): W_UK_T and W_UV dequantized from each block-FP8 kv_b_proj, its heads per rank."""
    from mxtrim_tui.core.validate.memory_check import mla_runtime_copies

    plan = plan_for(sparse("deepseek_v3"), ["0,3"], mtp=False)
    per_layer = 128 * (128 + 128) * 512 * 2  # heads × (nope + v) × kv_lora_rank × 2 bytes: 32 MiB
    assert mla_runtime_copies(plan, 1) == 2 * per_layer and mla_runtime_copies(plan, 8) == 2 * per_layer // 8
    llama = plan_for(sparse("llama3_70b", llama3_70b()), ["0,1"])
    assert mla_runtime_copies(llama, 1) == 0  # no MLA
