"""GLM-4.5 (``Glm4MoeForCausalLM``) and GLM-5.x DSA (``GlmMoeDsaForCausalLM``, ``glm_moe_dsa``).

GLM-5.x reuses the DeepSeek MLA + DeepSeekMoE stack (see :mod:`.deepseek`) plus the DSA
lightning indexer with IndexShare ("full" layers run the indexer, "shared" layers reuse the
previous top-k).
"""

from __future__ import annotations

from ..checkpoint import Layout, TensorSpec
from .common import fit_token_ids, heads_for, kv_heads_for, pick, scaled, set_existing
from .deepseek import (
    FP8_BLOCK,
    PLAIN_BF16,
    IndexerDims,
    LinearStore,
    MlaDims,
    deepseek_moe,
    gated_mlp,
    mla_attention,
    mtp_head_tensors,
    router_groups,
)


# ---------------------------------------------------------------------------------------------
# GLM-4.5
# ---------------------------------------------------------------------------------------------


def _glm45_config() -> dict:
    """zai-org/GLM-4.5 ``config.json`` (key order as released)."""
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "pad_token_id": 151329,
        "eos_token_id": [151329, 151336, 151338],
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "partial_rotary_factor": 0.5,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 131072,
        "model_type": "glm4_moe",
        "moe_intermediate_size": 1536,
        "norm_topk_prob": True,
        "num_attention_heads": 96,
        "n_group": 1,
        "topk_group": 1,
        "n_routed_experts": 160,
        "n_shared_experts": 1,
        "routed_scaling_factor": 2.5,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "num_hidden_layers": 92,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.54.0",
        "use_cache": True,
        "use_qk_norm": True,
        "vocab_size": 151552,
    }


def _glm45_layer(p: str, *, hidden: int, heads: int, kv_heads: int, head_dim: int, qk_norm: bool,
                 moe: bool, inter: int, moe_inter: int, shared_inter: int, experts: int,
                 lin: LinearStore) -> list[TensorSpec]:
    a = p + "self_attn."
    t: list[TensorSpec] = [(p + "input_layernorm.weight", "BF16", (hidden,))]
    t += lin(a + "q_proj", heads * head_dim, hidden, bias=True)
    t += lin(a + "k_proj", kv_heads * head_dim, hidden, bias=True)
    t += lin(a + "v_proj", kv_heads * head_dim, hidden, bias=True)
    t += lin(a + "o_proj", hidden, heads * head_dim)
    if qk_norm:
        t.append((a + "q_norm.weight", "BF16", (head_dim,)))
        t.append((a + "k_norm.weight", "BF16", (head_dim,)))
    t.append((p + "post_attention_layernorm.weight", "BF16", (hidden,)))
    if moe:
        t += deepseek_moe(p, hidden, experts, moe_inter, shared_inter, lin, bias_dtype="F32")
    else:
        t += gated_mlp(p + "mlp.", hidden, inter, lin)
    return t


def glm4_moe(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
             moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
             num_key_value_heads=None, head_dim=None, first_k_dense_replace=None,
             num_nextn_predict_layers=None, use_qk_norm=None) -> Layout:
    """GLM-4.5 (355B-A32B), BF16: 92 layers (0-2 dense), 160 routed + 1 shared experts,
    GQA 96/8 heads of 128 with q/k/v bias and per-head q_norm/k_norm (``use_qk_norm: true`` in
    the 355B release; GLM-4.5-Air has none), noaux_tc router with an F32
    ``e_score_correction_bias``. MTP layer ``model.layers.92``: ``embed_tokens``, ``enorm``,
    ``hnorm``, ``eh_proj``, a full MoE decoder block, ``shared_head.{head,norm}``.
    Released as 93 shards."""
    cfg = _glm45_config()
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    experts = pick(num_experts, cfg["n_routed_experts"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    kv_heads = pick(num_key_value_heads, kv_heads_for(heads, cfg["num_key_value_heads"]))
    hd = pick(head_dim, cfg["head_dim"])
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    moe_inter = pick(moe_intermediate_size, scaled(cfg["moe_intermediate_size"], hidden, full_hidden, 128))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    first_dense = min(pick(first_k_dense_replace, cfg["first_k_dense_replace"]), layers)
    num_mtp = pick(num_nextn_predict_layers, cfg["num_nextn_predict_layers"])
    qk_norm = pick(use_qk_norm, cfg["use_qk_norm"])
    n_group, topk_group, top_k = router_groups(experts, cfg["n_group"], cfg["topk_group"],
                                               cfg["num_experts_per_tok"])
    set_existing(cfg, hidden_size=hidden, num_hidden_layers=layers, n_routed_experts=experts,
                 num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hd,
                 intermediate_size=inter, moe_intermediate_size=moe_inter, vocab_size=vocab,
                 first_k_dense_replace=first_dense, num_nextn_predict_layers=num_mtp,
                 use_qk_norm=qk_norm, n_group=n_group, topk_group=topk_group,
                 num_experts_per_tok=top_k)
    lin = PLAIN_BF16
    shared_inter = cfg["n_shared_experts"] * moe_inter

    def layer(idx: int) -> list[TensorSpec]:
        moe = experts > 0 and (idx >= layers or idx >= first_dense)
        return _glm45_layer(f"model.layers.{idx}.", hidden=hidden, heads=heads, kv_heads=kv_heads,
                            head_dim=hd, qk_norm=qk_norm, moe=moe, inter=inter, moe_inter=moe_inter,
                            shared_inter=shared_inter, experts=experts, lin=lin)

    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (vocab, hidden))]
    for i in range(layers):
        t += layer(i)
    t.append(("model.norm.weight", "BF16", (hidden,)))
    t.append(("lm_head.weight", "BF16", (vocab, hidden)))
    for k in range(num_mtp):
        idx = layers + k
        before, after = mtp_head_tensors(f"model.layers.{idx}.", hidden, vocab, norm_dtype="BF16",
                                         embed_dtype="BF16", eh_proj_dtype="BF16")
        t += before + layer(idx) + after
    return Layout(name="glm4_moe", config=cfg, tensors=t, max_shard_bytes=7_750_000_000)


# ---------------------------------------------------------------------------------------------
# GLM-5.x DSA (glm_moe_dsa)
# ---------------------------------------------------------------------------------------------


def indexer_is_full(idx: int, freq: int, offset: int) -> bool:
    """vLLM's IndexShare rule when no ``index_topk_pattern`` is set:
    ``skip = max(idx - offset + 1, 0) % freq != 0``; a full layer is one that does not skip."""
    return max(idx - offset + 1, 0) % max(freq, 1) == 0


def _glm5_config() -> dict:
    """GLM-5.2 W8A8 (MetaX ``GLM-5_2-W8A8``) ``config.json`` before trimming: the key set and
    order of the trimmed ``GLM-5_2-W8A8-dummy-3layers/config.json`` in MetaX-MACA/vLLM-metax
    (saved by transformers 5.12, keys sorted, ``compression_config`` appended), with the
    original 78-layer values its README states. Per-layer lists are filled in by the caller."""
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "dtype": "bfloat16",
        "eos_token_id": [154820, 154827, 154829],
        "ep_size": 1,
        "first_k_dense_replace": 3,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 6144,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "index_share_for_mtp_iteration": True,
        "index_skip_topk_offset": 3,
        "index_topk": 2048,
        "index_topk_freq": 4,
        "index_topk_pattern": None,
        "indexer_rope_interleave": True,
        "indexer_types": [],
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "kv_lora_rank": 512,
        "layer_types": [],
        "max_position_embeddings": 1048576,
        "mlp_bias": False,
        "mlp_layer_types": [],
        "model_type": "glm_moe_dsa",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 64,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 78,
        "num_key_value_heads": 64,
        "num_nextn_predict_layers": 1,
        "pad_token_id": 154820,
        "pretraining_tp": 1,
        "q_lora_rank": 2048,
        "qk_head_dim": 256,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-05,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 8000000, "rope_type": "default"},
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "transformers_version": "5.12.0",
        "use_cache": True,
        "v_head_dim": 256,
        "vocab_size": 154880,
    }


def _w8a8_compression_config(ignore: list[str]) -> dict:
    """compressed-tensors W8A8 int8 (channel-wise symmetric weights, dynamic per-token
    activations), as in the MetaX GLM-5.2 W8A8 config."""
    return {
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "input_activations": {
                    "dynamic": True,
                    "group_size": None,
                    "num_bits": 8,
                    "observer": "minmax",
                    "observer_kwargs": {},
                    "strategy": "token",
                    "symmetric": True,
                    "type": "int",
                },
                "weights": {
                    "dynamic": False,
                    "group_size": None,
                    "num_bits": 8,
                    "observer": "minmax",
                    "observer_kwargs": {},
                    "strategy": "channel",
                    "symmetric": True,
                    "type": "int",
                },
            }
        },
        "format": "int-quantized",
        "ignore": ignore,
        "quant_method": "compressed-tensors",
    }


def glm_moe_dsa(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
                moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
                q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None,
                num_nextn_predict_layers=None, index_n_heads=None, index_head_dim=None,
                quant: str = "w8a8", scale_dtype: str = "BF16",
                indexer_on_shared_layers: bool = False) -> Layout:
    """GLM-5.2 (``glm_moe_dsa``) as the MetaX W8A8 int8 checkpoint: 78 layers (0-2 dense),
    hidden 6144, 64 heads MLA (q_lora 2048, kv_lora 512, nope 192 / rope 64 / v 256), 256
    routed + 1 shared experts top-8, DSA indexer (32 heads x 128) with IndexShare
    ``index_topk_freq 4``, ``index_skip_topk_offset 3`` and ``index_topk_pattern: null``:
    full layers 0, 1, 2, 6, 10, ..., 74 (21 of 78). MTP at ``model.layers.78`` (``enorm``,
    ``hnorm``, ``eh_proj``, full MoE block with a full indexer, ``shared_head.norm``; no MTP
    embed/head copies, as in the official GLM-5.x releases).

    ``quant``: ``"w8a8"`` (default; top-level ``compression_config``, every Linear I8 with a
    ``weight_scale [out, 1]`` of ``scale_dtype`` except the ``ignore`` list: ``lm_head``, each
    MoE layer's ``mlp.gate``, each indexer ``weights_proj`` and the MTP ``eh_proj``, all BF16),
    ``"fp8"`` (official GLM-5.2-FP8 style: ``quantization_config`` fp8 block, F32
    ``weight_scale_inv``) or ``"bf16"``.

    The official GLM-5.2/5.3 checkpoints ship indexer tensors only on full layers (and the MTP
    layer); ``indexer_on_shared_layers=True`` adds them to the shared layers too (the case vLLM's
    loader tolerates by dropping them), with no ``ignore`` entry for those layers.
    """
    cfg = _glm5_config()
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    experts = pick(num_experts, cfg["n_routed_experts"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    moe_inter = pick(moe_intermediate_size, scaled(cfg["moe_intermediate_size"], hidden, full_hidden, 128))
    q_rank = pick(q_lora_rank, scaled(cfg["q_lora_rank"], hidden, full_hidden, 64))
    kv_rank = pick(kv_lora_rank, scaled(cfg["kv_lora_rank"], hidden, full_hidden, 64))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    first_dense = min(pick(first_k_dense_replace, cfg["first_k_dense_replace"]), layers)
    num_mtp = pick(num_nextn_predict_layers, cfg["num_nextn_predict_layers"])
    ih = pick(index_n_heads, scaled(cfg["index_n_heads"], hidden, full_hidden, 1))
    ihd = pick(index_head_dim, cfg["index_head_dim"])
    n_group, topk_group, top_k = router_groups(experts, cfg["n_group"], cfg["topk_group"],
                                               cfg["num_experts_per_tok"])
    freq, offset = cfg["index_topk_freq"], cfg["index_skip_topk_offset"]
    full = [indexer_is_full(i, freq, offset) for i in range(layers)]
    set_existing(
        cfg, hidden_size=hidden, num_hidden_layers=layers, n_routed_experts=experts, num_experts=experts,
        num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=inter,
        moe_intermediate_size=moe_inter, q_lora_rank=q_rank, kv_lora_rank=kv_rank, vocab_size=vocab,
        first_k_dense_replace=first_dense, num_nextn_predict_layers=num_mtp, index_n_heads=ih,
        index_head_dim=ihd, n_group=n_group, topk_group=topk_group, num_experts_per_tok=top_k,
        indexer_types=["full" if f else "shared" for f in full],
        layer_types=["deepseek_sparse_attention"] * layers,
        mlp_layer_types=["dense"] * first_dense + ["sparse"] * (layers - first_dense),
        qk_head_dim=cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"],
    )

    if quant == "w8a8":
        lin = LinearStore("int8_channel", "BF16", scale_dtype)
    elif quant == "fp8":
        lin = FP8_BLOCK
    elif quant == "bf16":
        lin = PLAIN_BF16
    else:
        raise ValueError(f"quant must be 'w8a8', 'fp8' or 'bf16', got {quant!r}")

    mla = MlaDims(hidden, heads, q_rank, kv_rank, cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                  cfg["v_head_dim"])
    idx_dims = IndexerDims(ih, ihd)
    shared_inter = cfg["n_shared_experts"] * moe_inter
    ignore: list[str] = ["lm_head"]

    def layer(idx: int) -> list[TensorSpec]:
        p = f"model.layers.{idx}."
        is_mtp = idx >= layers
        moe = experts > 0 and (is_mtp or idx >= first_dense)
        has_indexer = is_mtp or full[idx] or indexer_on_shared_layers
        if moe:
            ignore.append(p + "mlp.gate")
        # MTP layers always build a full indexer; shared layers build none.
        if is_mtp or full[idx]:
            ignore.append(p + "self_attn.indexer.weights_proj")
        t: list[TensorSpec] = [(p + "input_layernorm.weight", "BF16", (hidden,))]
        t += mla_attention(p, mla, lin, "BF16", idx_dims if has_indexer else None,
                           indexer_norm_dtype="BF16")
        t.append((p + "post_attention_layernorm.weight", "BF16", (hidden,)))
        if moe:
            t += deepseek_moe(p, hidden, experts, moe_inter, shared_inter, lin, bias_dtype="F32")
        else:
            t += gated_mlp(p + "mlp.", hidden, inter, lin)
        return t

    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (vocab, hidden))]
    for i in range(layers):
        t += layer(i)
    t.append(("model.norm.weight", "BF16", (hidden,)))
    t.append(("lm_head.weight", "BF16", (vocab, hidden)))
    for k in range(num_mtp):
        idx = layers + k
        p = f"model.layers.{idx}."
        ignore.append(p + "eh_proj")
        before, after = mtp_head_tensors(p, hidden, vocab, norm_dtype="BF16", embed_dtype="BF16",
                                         eh_proj_dtype="BF16", with_embed=False, with_head=False)
        t += before + layer(idx) + after

    # Ignore entries in layer order, names sorted within a layer (as in the MetaX config).
    def order(name: str):
        parts = name.split(".")
        return (-1, name) if name == "lm_head" else (int(parts[2]), ".".join(parts[3:]))

    ignore.sort(key=order)
    if quant == "w8a8":
        cfg["compression_config"] = _w8a8_compression_config(ignore)
    elif quant == "fp8":
        # GLM-5.2-FP8 keeps its quantization config in the usual place.
        cfg["quantization_config"] = {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ignore,
        }
    return Layout(name="glm_moe_dsa" if quant == "w8a8" else f"glm_moe_dsa_{quant}", config=cfg, tensors=t, max_shard_bytes=5_400_000_000)


LAYOUTS = {
    "glm4_moe": glm4_moe,
    "glm_moe_dsa": glm_moe_dsa,
}
