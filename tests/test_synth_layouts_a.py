"""Synthetic layouts of the DeepSeek, GLM, Qwen and Qwen3-Next families.

Full size: exact tensor counts and byte totals (several checked against real releases, see the
module docstrings), sparse checkpoints whose every shard passes the strict header reader.
Scaled down: random-byte checkpoints that read back, and configs that agree with the shapes.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from mxtrim_tui.core.read.safetensors_io import read_header, tensor_nbytes
from synth.checkpoint import plan_shards, write_checkpoint
from synth.layouts import deepseek, glm, qwen, qwen_next

LAYOUTS = {**deepseek.LAYOUTS, **glm.LAYOUTS, **qwen.LAYOUTS, **qwen_next.LAYOUTS}

# key: (tensor count, total bytes, shard count) at full size.
FULL = {
    "deepseek_v2": (29_102, 471_482_869_760, 55),
    "deepseek_v3": (91_991, 688_574_839_360, 163),
    "deepseek_v32": (92_425, 689_471_107_200, 163),
    "kimi_k2": (139_583, 1_029_173_249_888, 61),
    "glm4_moe": (44_691, 716_675_611_392, 93),
    "glm_moe_dsa": (118_629, 755_842_617_728, 141),
    "qwen2": (339, 15_231_233_024, 4),
    "qwen3": (399, 16_381_470_720, 5),
    "qwen3_small_tied": (310, 1_192_099_840, 1),
    "qwen2_moe": (4_659, 28_631_568_384, 8),
    "qwen3_moe": (18_867, 61_064_245_248, 16),
    "qwen2_5_awq": (729, 5_671_264_256, 2),
    "qwen3_next": (75_944, 162_649_727_744, 41),
}

DENSE = {"qwen2", "qwen3", "qwen3_small_tied", "qwen2_5_awq"}


def small_kwargs(key: str) -> dict:
    kw = {"num_layers": 4, "hidden_size": 256, "vocab_size": 1024}
    if key not in DENSE:
        kw["num_experts"] = 4
    return kw


def layer_index(name: str) -> int | None:
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def test_every_layout_has_an_expectation():
    assert set(LAYOUTS) == set(FULL)


# ---------------------------------------------------------------------------------------------
# Full size
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(FULL))
def test_full_size_counts(key):
    layout = LAYOUTS[key]()
    count, total, shards = FULL[key]
    names = [n for n, _, _ in layout.tensors]
    assert len(names) == count
    assert len(set(names)) == count, "tensor names must be unique"
    assert layout.total_bytes == total
    assert len(plan_shards(layout.tensors, layout.max_shard_bytes)) == shards
    assert layout.config["num_hidden_layers"] == max(
        i for i in map(layer_index, names) if i is not None
    ) + 1 - layout.config.get("num_nextn_predict_layers", 0)


@pytest.mark.parametrize("key", sorted(FULL))
@pytest.mark.slow
def test_full_size_sparse_checkpoint_headers(key, tmp_path):
    layout = LAYOUTS[key]()
    root = write_checkpoint(tmp_path / key, layout, data="sparse", tokenizer=False)
    files = sorted(root.glob("*.safetensors"))
    count, total, shards = FULL[key]
    assert len(files) == shards
    seen: dict[str, str] = {}
    for f in files:
        header = read_header(f)
        for name in header.tensors:
            seen[name] = f.name
    assert len(seen) == count
    expected = {n: (d, tuple(s)) for n, d, s in layout.tensors}
    for f in files[:1] + files[-1:]:
        for name, info in read_header(f).tensors.items():
            assert (info.dtype, info.shape) == expected[name]
    config = json.loads((root / "config.json").read_text())
    assert config == layout.config
    if shards > 1:
        index = json.loads((root / "model.safetensors.index.json").read_text())
        assert index["metadata"]["total_size"] == total
        assert index["weight_map"] == seen
    else:
        assert [f.name for f in files] == ["model.safetensors"]


# ---------------------------------------------------------------------------------------------
# Scaled down, random bytes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(FULL))
def test_scaled_random_checkpoint(key, tmp_path):
    layout = LAYOUTS[key](**small_kwargs(key))
    cfg = layout.config
    names = [n for n, _, _ in layout.tensors]
    assert len(names) == len(set(names))
    assert cfg["num_hidden_layers"] == 4
    assert cfg["hidden_size"] == 256
    assert cfg["vocab_size"] == 1024
    assert layout.total_bytes < 200_000_000
    shapes = {n: s for n, _, s in layout.tensors}
    assert shapes["model.embed_tokens.weight"] == (1024, 256)
    if "lm_head.weight" in shapes:
        assert shapes["lm_head.weight"] == (1024, 256)
    backbone = {i for i in map(layer_index, names) if i is not None}
    mtp = cfg.get("num_nextn_predict_layers", 0)
    assert backbone == set(range(4 + mtp))
    for key_ in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = cfg.get(key_)
        for i in ids if isinstance(ids, list) else [ids]:
            assert i is None or 0 <= i < 1024

    root = write_checkpoint(tmp_path / key, layout, data="random", max_shard_bytes=4_000_000,
                            tokenizer=False)
    seen = {}
    for f in sorted(root.glob("*.safetensors")):
        for name, info in read_header(f).tensors.items():
            seen[name] = (info.dtype, info.shape)
    assert seen == {n: (d, tuple(s)) for n, d, s in layout.tensors}


@pytest.mark.parametrize("key", ["deepseek_v3", "qwen3_small_tied", "glm_moe_dsa", "qwen3_next"])
def test_scaled_checkpoint_reads_with_safetensors(key, tmp_path):
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors")
    layout = LAYOUTS[key](**small_kwargs(key))
    root = write_checkpoint(tmp_path / key, layout, data="random", tokenizer=False)
    torch_dtypes = {
        "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I8": torch.int8,
        "I32": torch.int32, "F8_E4M3": torch.float8_e4m3fn,
    }
    expected = {n: (d, s) for n, d, s in layout.tensors}
    read = 0
    for f in sorted(root.glob("*.safetensors")):
        with safetensors.safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                dtype, shape = expected[name]
                assert tuple(tensor.shape) == shape
                assert tensor.dtype == torch_dtypes[dtype]
                read += 1
    assert read == len(layout.tensors)


# ---------------------------------------------------------------------------------------------
# Family-specific structure
# ---------------------------------------------------------------------------------------------


def fp8_pairs_ok(layout):
    tensors = {n: (d, s) for n, d, s in layout.tensors}
    fp8 = [n for n, (d, _) in tensors.items() if d == "F8_E4M3"]
    assert fp8
    for name in fp8:
        scale = name[: -len("weight")] + "weight_scale_inv"
        out, in_ = tensors[name][1]
        assert tensors[scale] == ("F32", (math.ceil(out / 128), math.ceil(in_ / 128))), name
    scales = [n for n in tensors if n.endswith("weight_scale_inv")]
    assert len(scales) == len(fp8)
    return tensors


@pytest.mark.parametrize("key", ["deepseek_v3", "deepseek_v32", "kimi_k2"])
@pytest.mark.parametrize("small", [False, True])
def test_fp8_block_scales(key, small):
    layout = LAYOUTS[key](**(small_kwargs(key) if small else {}))
    tensors = fp8_pairs_ok(layout)
    assert layout.config["quantization_config"]["weight_block_size"] == [128, 128]
    n = layout.config["num_hidden_layers"]
    moe = f"model.layers.{n - 1}.mlp."
    # Routers, norms, embeddings and heads stay unquantized.
    assert tensors[moe + "gate.weight"][0] == "BF16"
    assert tensors[moe + "gate.e_score_correction_bias"][0] == "F32"
    assert tensors["lm_head.weight"][0] == "BF16"
    assert tensors["model.embed_tokens.weight"][0] == "BF16"
    assert tensors["model.layers.0.self_attn.kv_a_layernorm.weight"][0] in ("BF16", "F32")


def test_deepseek_v3_structure():
    layout = deepseek.deepseek_v3()
    cfg = layout.config
    tensors = {n: (d, s) for n, d, s in layout.tensors}
    assert cfg["quantization_config"] == {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
    # First 3 layers dense, then 256 routed experts + shared experts.
    assert "model.layers.2.mlp.gate_proj.weight" in tensors
    assert "model.layers.3.mlp.gate.weight" in tensors
    assert "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv" in tensors
    assert "model.layers.60.mlp.shared_experts.up_proj.weight" in tensors
    assert tensors["model.layers.3.mlp.experts.0.down_proj.weight"] == ("F8_E4M3", (7168, 2048))
    assert tensors["model.layers.3.mlp.experts.0.down_proj.weight_scale_inv"] == ("F32", (56, 16))
    assert tensors["model.layers.0.self_attn.kv_b_proj.weight_scale_inv"] == ("F32", (256, 4))
    # MTP layer 61: its own embed/head copies, BF16 eh_proj, a full MoE block.
    for suffix in ("embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight",
                   "shared_head.norm.weight", "shared_head.head.weight", "mlp.gate.weight",
                   "mlp.experts.255.up_proj.weight", "self_attn.q_b_proj.weight"):
        assert f"model.layers.61.{suffix}" in tensors
    assert tensors["model.layers.61.eh_proj.weight"] == ("BF16", (7168, 14336))
    assert not any(n.startswith("model.layers.62.") for n in tensors)
    # The MTP layer comes last (after lm_head), as in the release's last shards.
    names = [n for n, _, _ in layout.tensors]
    assert names.index("lm_head.weight") < names.index("model.layers.61.embed_tokens.weight")
    params = sum(math.prod(s) for _, _, s in layout.tensors)
    assert params == 684_531_386_000


def test_deepseek_v32_matches_release_listing():
    layout = deepseek.deepseek_v32()
    tensors = {n: (d, s) for n, d, s in layout.tensors}
    assert layout.config["model_type"] == "deepseek_v32"
    assert (layout.config["index_topk"], layout.config["index_n_heads"],
            layout.config["index_head_dim"]) == (2048, 64, 128)
    for i in (0, 30, 61):
        p = f"model.layers.{i}.self_attn.indexer."
        assert tensors[p + "wq_b.weight"] == ("F8_E4M3", (8192, 1536))
        assert tensors[p + "wq_b.weight_scale_inv"] == ("F32", (64, 12))
        assert tensors[p + "wk.weight"] == ("F8_E4M3", (128, 7168))
        assert tensors[p + "wk.weight_scale_inv"] == ("F32", (1, 56))
        assert tensors[p + "k_norm.weight"] == ("F32", (128,))
        assert tensors[p + "k_norm.bias"] == ("F32", (128,))
        assert tensors[p + "weights_proj.weight"] == ("BF16", (64, 7168))
    assert tensors["model.norm.weight"] == ("F32", (7168,))
    assert sum(math.prod(s) for _, _, s in layout.tensors) == 685_396_921_376


def test_deepseek_v2_and_kimi_k2_structure():
    v2 = {n: (d, s) for n, d, s in deepseek.deepseek_v2().tensors}
    assert "model.layers.0.mlp.gate_proj.weight" in v2
    assert "model.layers.1.mlp.experts.159.down_proj.weight" in v2
    assert v2["model.layers.1.mlp.shared_experts.gate_proj.weight"] == ("BF16", (3072, 5120))
    assert not any("e_score_correction_bias" in n or "scale" in n for n in v2)
    assert not any(n.startswith("model.layers.60.") for n in v2)

    k2 = deepseek.kimi_k2()
    cfg = k2.config
    assert (cfg["architectures"], cfg["model_type"], cfg["num_nextn_predict_layers"]) == (
        ["DeepseekV3ForCausalLM"], "kimi_k2", 0)
    tensors = {n: (d, s) for n, d, s in k2.tensors}
    assert "model.layers.0.mlp.down_proj.weight" in tensors
    assert "model.layers.1.mlp.experts.383.gate_proj.weight" in tensors
    assert tensors["model.layers.1.self_attn.q_b_proj.weight"] == ("F8_E4M3", (64 * 192, 1536))
    assert tensors["lm_head.weight"] == ("BF16", (163840, 7168))
    assert not any(n.startswith("model.layers.61.") for n in tensors)


def test_scaled_deepseek_router_stays_valid():
    cfg = deepseek.deepseek_v3(num_experts=4, num_layers=4, hidden_size=256).config
    assert cfg["n_routed_experts"] == 4
    assert cfg["n_routed_experts"] % cfg["n_group"] == 0
    assert cfg["topk_group"] <= cfg["n_group"]
    assert cfg["num_experts_per_tok"] <= cfg["n_routed_experts"]
    assert cfg["hidden_size"] % cfg["num_attention_heads"] == 0
    assert cfg["first_k_dense_replace"] == 3


def test_glm4_moe_structure():
    layout = glm.glm4_moe()
    cfg = layout.config
    tensors = {n: (d, s) for n, d, s in layout.tensors}
    assert cfg["num_nextn_predict_layers"] == 1 and cfg["first_k_dense_replace"] == 3
    a = "model.layers.0.self_attn."
    assert tensors[a + "q_proj.weight"] == ("BF16", (12288, 5120))
    assert tensors[a + "q_proj.bias"] == ("BF16", (12288,))
    assert tensors[a + "k_proj.bias"] == ("BF16", (1024,))
    assert tensors[a + "q_norm.weight"] == ("BF16", (128,))
    assert "model.layers.2.mlp.down_proj.weight" in tensors
    assert tensors["model.layers.3.mlp.gate.e_score_correction_bias"] == ("F32", (160,))
    assert "model.layers.91.mlp.experts.159.up_proj.weight" in tensors
    assert "model.layers.91.mlp.shared_experts.down_proj.weight" in tensors
    for suffix in ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight",
                   "mlp.gate.weight", "self_attn.q_proj.bias"):
        assert f"model.layers.92.{suffix}" in tensors
    assert not any(n.startswith("model.layers.93.") for n in tensors)
    no_norm = {n for n, _, _ in glm.glm4_moe(use_qk_norm=False, num_layers=2).tensors}
    assert not any("q_norm" in n for n in no_norm)


def glm5_full_layers(n: int) -> list[int]:
    # vLLM: skip = max(idx - offset + 1, 0) % freq != 0 with offset 3, freq 4.
    return [i for i in range(n) if max(i - 3 + 1, 0) % 4 == 0]


def test_glm_moe_dsa_config_and_ignore_list():
    layout = glm.glm_moe_dsa()
    cfg = layout.config
    assert cfg["architectures"] == ["GlmMoeDsaForCausalLM"]
    assert cfg["model_type"] == "glm_moe_dsa"
    assert (cfg["num_hidden_layers"], cfg["first_k_dense_replace"], cfg["hidden_size"]) == (78, 3, 6144)
    assert (cfg["index_topk"], cfg["index_topk_freq"], cfg["index_skip_topk_offset"]) == (2048, 4, 3)
    assert cfg["index_topk_pattern"] is None
    full = glm5_full_layers(78)
    assert full == [0, 1, 2] + list(range(6, 78, 4))
    assert len(full) == 21
    assert [i for i, t in enumerate(cfg["indexer_types"]) if t == "full"] == full
    assert cfg["mlp_layer_types"] == ["dense"] * 3 + ["sparse"] * 75
    assert "quantization_config" not in cfg
    cc = cfg["compression_config"]
    assert cc["format"] == "int-quantized" and cc["quant_method"] == "compressed-tensors"
    group = cc["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"]
    assert (group["weights"]["num_bits"], group["weights"]["strategy"], group["weights"]["symmetric"]) == (8, "channel", True)
    assert (group["input_activations"]["num_bits"], group["input_activations"]["strategy"],
            group["input_activations"]["dynamic"]) == (8, "token", True)
    expected = ["lm_head"]
    for i in range(79):
        layer = []
        if i == 78:
            layer.append(f"model.layers.{i}.eh_proj")
        if i >= 3:
            layer.append(f"model.layers.{i}.mlp.gate")
        if i in full or i == 78:
            layer.append(f"model.layers.{i}.self_attn.indexer.weights_proj")
        expected += layer
    assert cc["ignore"] == expected


def test_glm_moe_dsa_tensors_follow_the_ignore_list():
    layout = glm.glm_moe_dsa()
    tensors = {n: (d, s) for n, d, s in layout.tensors}
    ignore = set(layout.config["compression_config"]["ignore"])
    full = set(glm5_full_layers(78)) | {78}
    indexed = {layer_index(n) for n in tensors if ".indexer." in n}
    assert indexed == full
    for name, (dtype, shape) in tensors.items():
        module = name.rsplit(".", 1)[0]
        if module in ignore:
            assert module + ".weight_scale" not in tensors, name
            if name.endswith(".weight"):
                assert dtype == "BF16", name
        if dtype == "I8":
            assert module not in ignore
            assert tensors[module + ".weight_scale"] == ("BF16", (shape[0], 1))
    assert tensors["model.layers.6.self_attn.indexer.wq_b.weight"] == ("I8", (4096, 2048))
    assert tensors["model.layers.6.self_attn.indexer.weights_proj.weight"] == ("BF16", (32, 6144))
    assert tensors["model.layers.6.self_attn.kv_b_proj.weight"] == ("I8", (28672, 512))
    assert tensors["model.layers.78.eh_proj.weight"] == ("BF16", (6144, 12288))
    assert "model.layers.78.embed_tokens.weight" not in tensors
    assert "model.layers.78.shared_head.head.weight" not in tensors
    assert tensors["model.layers.78.shared_head.norm.weight"] == ("BF16", (6144,))
    # Every ignore entry names a module that exists.
    modules = {n.rsplit(".", 1)[0] for n in tensors}
    assert ignore <= modules


def test_glm_moe_dsa_variants():
    # The official FP8 layout reproduces the GLM-5.x FP8 index totals exactly.
    fp8 = glm.glm_moe_dsa(quant="fp8")
    assert len(fp8.tensors) == 118_629
    assert fp8.total_bytes == 755_617_140_416
    fp8_pairs_ok(fp8)
    everywhere = glm.glm_moe_dsa(indexer_on_shared_layers=True)
    indexed = {layer_index(n) for n, _, _ in everywhere.tensors if ".indexer." in n}
    assert indexed == set(range(79))
    assert everywhere.config["compression_config"]["ignore"] == \
        glm.glm_moe_dsa().config["compression_config"]["ignore"]
    f32 = {n: d for n, d, _ in glm.glm_moe_dsa(num_layers=2, scale_dtype="F32").tensors}
    assert f32["model.layers.0.self_attn.o_proj.weight_scale"] == "F32"


def test_glm_moe_dsa_scaled_ignore_list():
    layout = glm.glm_moe_dsa(num_layers=8, num_experts=4, hidden_size=256, vocab_size=1024)
    cfg = layout.config
    assert cfg["indexer_types"] == ["full", "full", "full", "shared", "shared", "shared", "full", "shared"]
    assert len(cfg["layer_types"]) == len(cfg["mlp_layer_types"]) == 8
    assert cfg["compression_config"]["ignore"] == [
        "lm_head",
        "model.layers.0.self_attn.indexer.weights_proj",
        "model.layers.1.self_attn.indexer.weights_proj",
        "model.layers.2.self_attn.indexer.weights_proj",
        "model.layers.3.mlp.gate",
        "model.layers.4.mlp.gate",
        "model.layers.5.mlp.gate",
        "model.layers.6.mlp.gate",
        "model.layers.6.self_attn.indexer.weights_proj",
        "model.layers.7.mlp.gate",
        "model.layers.8.eh_proj",
        "model.layers.8.mlp.gate",
        "model.layers.8.self_attn.indexer.weights_proj",
    ]


def test_qwen_dense_structure():
    q2 = {n: (d, s) for n, d, s in qwen.qwen2().tensors}
    assert q2["model.layers.0.self_attn.q_proj.bias"] == ("BF16", (3584,))
    assert q2["model.layers.0.self_attn.k_proj.weight"] == ("BF16", (512, 3584))
    assert not any("q_norm" in n for n in q2)
    cfg2 = qwen.qwen2().config
    assert (cfg2["use_sliding_window"], cfg2["max_window_layers"], cfg2["tie_word_embeddings"]) == (False, 28, False)

    q3 = {n: (d, s) for n, d, s in qwen.qwen3().tensors}
    assert q3["model.layers.35.self_attn.q_norm.weight"] == ("BF16", (128,))
    assert not any(n.endswith(".bias") for n in q3)
    assert "lm_head.weight" in q3

    small = qwen.qwen3_small_tied()
    assert small.config["tie_word_embeddings"] is True
    names = {n for n, _, _ in small.tensors}
    assert "lm_head.weight" not in names
    shapes = {n: s for n, _, s in small.tensors}
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (2048, 1024)


def test_qwen_moe_structure():
    q2m = qwen.qwen2_moe()
    t = {n: (d, s) for n, d, s in q2m.tensors}
    assert q2m.config["decoder_sparse_step"] == 1
    assert "mlp_only_layers" not in q2m.config
    assert t["model.layers.0.mlp.gate.weight"] == ("BF16", (60, 2048))
    assert t["model.layers.23.mlp.experts.59.down_proj.weight"] == ("BF16", (2048, 1408))
    assert t["model.layers.0.mlp.shared_expert.up_proj.weight"] == ("BF16", (5632, 2048))
    assert t["model.layers.0.mlp.shared_expert_gate.weight"] == ("BF16", (1, 2048))
    with_dense = {n for n, _, _ in qwen.qwen2_moe(num_layers=3, mlp_only_layers=[1]).tensors}
    assert "model.layers.1.mlp.gate_proj.weight" in with_dense
    assert "model.layers.1.mlp.gate.weight" not in with_dense
    assert qwen.qwen2_moe(num_layers=3, mlp_only_layers=[1]).config["mlp_only_layers"] == [1]

    q3m = qwen.qwen3_moe()
    t = {n: (d, s) for n, d, s in q3m.tensors}
    assert q3m.config["mlp_only_layers"] == []
    assert t["model.layers.47.mlp.experts.127.gate_proj.weight"] == ("BF16", (768, 2048))
    assert not any("shared_expert" in n for n in t)
    assert t["model.layers.0.self_attn.q_proj.weight"] == ("BF16", (4096, 2048))


def test_qwen2_5_awq_structure():
    layout = qwen.qwen2_5_awq()
    q = layout.config["quantization_config"]
    assert (q["quant_method"], q["bits"], q["group_size"], q["zero_point"], q["version"]) == (
        "awq", 4, 128, True, "gemm")
    assert q["modules_to_not_convert"] == ["model.layers.0.mlp.down_proj"]
    t = {n: (d, s) for n, d, s in layout.tensors}
    assert t["model.layers.0.mlp.down_proj.weight"] == ("F16", (3584, 18944))
    assert "model.layers.0.mlp.down_proj.qweight" not in t
    assert t["model.layers.1.mlp.down_proj.qweight"] == ("I32", (18944, 448))
    assert t["model.layers.1.mlp.down_proj.qzeros"] == ("I32", (148, 448))
    assert t["model.layers.1.mlp.down_proj.scales"] == ("F16", (148, 3584))
    assert t["model.layers.0.self_attn.k_proj.qweight"] == ("I32", (3584, 64))
    assert t["model.layers.0.self_attn.k_proj.bias"] == ("F16", (512,))
    assert t["lm_head.weight"] == ("F16", (152064, 3584))
    assert not any(d == "BF16" for d, _ in t.values())
    small = qwen.qwen2_5_awq(num_layers=4, hidden_size=256, vocab_size=1024,
                             not_convert=("model.layers.3.mlp.up_proj",))
    st = {n: s for n, _, s in small.tensors}
    assert "model.layers.3.mlp.up_proj.weight" in st
    assert small.config["quantization_config"]["modules_to_not_convert"] == ["model.layers.3.mlp.up_proj"]
    with pytest.raises(ValueError):
        qwen.qwen2_5_awq(num_layers=4, not_convert=("model.layers.9.mlp.up_proj",))


def test_qwen3_next_structure():
    layout = qwen_next.qwen3_next()
    cfg = layout.config
    assert "layer_types" not in cfg and "num_nextn_predict_layers" not in cfg
    assert cfg["full_attention_interval"] == 4
    t = {n: (d, s) for n, d, s in layout.tensors}
    for i in range(48):
        full = (i + 1) % 4 == 0
        assert (f"model.layers.{i}.self_attn.q_proj.weight" in t) == full
        assert (f"model.layers.{i}.linear_attn.in_proj_qkvz.weight" in t) == (not full)
        assert f"model.layers.{i}.mlp.shared_expert_gate.weight" in t
        assert f"model.layers.{i}.mlp.experts.511.down_proj.weight" in t
    la = "model.layers.0.linear_attn."
    assert t[la + "in_proj_qkvz.weight"][1] == (12288, 2048)
    assert t[la + "in_proj_ba.weight"][1] == (64, 2048)
    assert t[la + "conv1d.weight"][1] == (8192, 1, 4)
    assert t[la + "A_log"][1] == (32,)
    assert t[la + "dt_bias"][1] == (32,)
    assert t[la + "norm.weight"][1] == (128,)
    assert t[la + "out_proj.weight"][1] == (2048, 4096)
    sa = "model.layers.3.self_attn."
    assert t[sa + "q_proj.weight"][1] == (8192, 2048)
    assert t[sa + "k_proj.weight"][1] == (512, 2048)
    assert t[sa + "o_proj.weight"][1] == (2048, 4096)
    assert t[sa + "q_norm.weight"][1] == (256,)
    for name in ("mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                 "mtp.norm.weight", "mtp.layers.0.self_attn.q_proj.weight",
                 "mtp.layers.0.mlp.experts.511.up_proj.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"):
        assert name in t
    assert t["mtp.fc.weight"][1] == (2048, 4096)
    assert not any(n.startswith("mtp.layers.1.") for n in t)


def test_total_bytes_agree_with_tensor_nbytes():
    for key in FULL:
        layout = LAYOUTS[key](**small_kwargs(key))
        assert layout.total_bytes == sum(tensor_nbytes(d, s) for _, d, s in layout.tensors)
