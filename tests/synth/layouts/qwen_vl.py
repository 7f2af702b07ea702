"""Qwen vision-language families: Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE.

Sources checked (public copies of the released files):

* Qwen2.5-VL-7B-Instruct: the original ``config.json`` field set and order (the 3B release
  reproduced verbatim in a public README, the 7B values in a transformers-4.53 re-save that
  also gives the ``text_config`` form used for ``new_layout=True``); tensor names and shapes
  from a 1446-key dump of the 7B checkpoint (``visual.*`` / ``model.*`` / ``lm_head``).
* Qwen3-VL-8B-Instruct and Qwen3-VL-30B-A3B-Instruct: model reports listing the released
  ``config.json`` verbatim and every tensor with shape, dtype and shard (750 and 882
  tensors; the vision tower, ``model.language_model.norm`` and ``lm_head`` sit in the last
  shard, ``embed_tokens`` in the first).
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import Tensors, attention_dims, fit_token_ids_at_top, pick, width


# --------------------------------------------------------------------------- scaling helpers


def _mrope(section: list[int], head_dim: int, real_head_dim: int) -> list[int]:
    """M-RoPE sections sum to head_dim / 2; scale them with the head size."""
    if head_dim == real_head_dim:
        return list(section)
    half = head_dim // 2
    out = [max(1, s * head_dim // real_head_dim) for s in section]
    out[0] += half - sum(out)
    return out


# --------------------------------------------------------------------------- Qwen2.5-VL


def _qwen2_5_vision(t: Tensors, p: str, depth: int, vh: int, vi: int, out: int) -> None:
    """Qwen2.5-VL ViT: RMSNorm blocks, fused qkv with bias, gated MLP with biases."""
    t.add(f"{p}patch_embed.proj.weight", (vh, 3, 2, 14, 14))
    for b in range(depth):
        q = f"{p}blocks.{b}."
        t.add(q + "norm1.weight", (vh,))
        t.add(q + "norm2.weight", (vh,))
        t.add(q + "attn.qkv.weight", (3 * vh, vh))
        t.add(q + "attn.qkv.bias", (3 * vh,))
        t.add(q + "attn.proj.weight", (vh, vh))
        t.add(q + "attn.proj.bias", (vh,))
        t.gate_up_down(q + "mlp.", vh, vi, bias=True)
    merged = 4 * vh  # spatial_merge_size 2 -> 2x2 patches
    t.add(f"{p}merger.ln_q.weight", (vh,))
    t.add(f"{p}merger.mlp.0.weight", (merged, merged))
    t.add(f"{p}merger.mlp.0.bias", (merged,))
    t.add(f"{p}merger.mlp.2.weight", (out, merged))
    t.add(f"{p}merger.mlp.2.bias", (out,))


def _qwen2_text(t: Tensors, p: str, layers: int, h: int, inter: int, heads: int, kv: int, hd: int, vocab: int):
    """Qwen2 decoder (q/k/v biases) under prefix ``p`` (``model.`` or ``model.language_model.``)."""
    t.add(f"{p}embed_tokens.weight", (vocab, h))
    for i in range(layers):
        q = f"{p}layers.{i}."
        t.attention(q, h, heads, kv, hd, qkv_bias=True)
        t.gate_up_down(q + "mlp.", h, inter)
        t.add(q + "input_layernorm.weight", (h,))
        t.add(q + "post_attention_layernorm.weight", (h,))
    t.add(f"{p}norm.weight", (h,))


def qwen2_5_vl(
    *,
    num_layers: int | None = None,
    vision_depth: int | None = None,
    hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
    vocab_size: int | None = None,
    fullatt_block_indexes: list[int] | None = None,
    new_layout: bool = False,
) -> Layout:
    """Qwen2.5-VL-7B-Instruct (``Qwen2_5_VLForConditionalGeneration``).

    Default: the original release (transformers 4.41-era config without ``text_config``,
    tensors ``visual.*``, ``model.layers.*``, ``lm_head``). ``new_layout=True``: the same model
    re-saved by transformers >= 4.52 (``text_config`` with ``layer_types``, tensors
    ``model.visual.*``, ``model.language_model.*``, ``lm_head``)."""
    L = pick(num_layers, 28)
    D = pick(vision_depth, 32)
    H = pick(hidden_size, 3584)
    V = pick(vocab_size, 152064)
    VH = vision_hidden_size or (1280 if H == 3584 else H)
    inter = width(18944, H, 3584)
    heads, kv, hd = attention_dims(H, 3584, 28, 4, 128, implicit=True)
    vi = width(3420, VH, 1280)
    vheads, _, _ = attention_dims(VH, 1280, 16, 16, 80, implicit=True)
    if fullatt_block_indexes is None:
        fullatt_block_indexes = [b for b in range(D) if b % 8 == 7] or [D - 1]
    mrope = _mrope([16, 24, 24], hd, 128)
    window_layers = 28 if L == 28 else L  # released value equals the depth

    t = Tensors()
    if new_layout:
        _qwen2_5_vision(t, "model.visual.", D, VH, vi, H)
        _qwen2_text(t, "model.language_model.", L, H, inter, heads, kv, hd, V)
    else:
        _qwen2_5_vision(t, "visual.", D, VH, vi, H)
        _qwen2_text(t, "model.", L, H, inter, heads, kv, hd, V)
    t.add("lm_head.weight", (V, H))

    vision = {
        "depth": D,
        "hidden_act": "silu",
        "hidden_size": VH,
        "intermediate_size": vi,
        "num_heads": vheads,
        "in_chans": 3,
        "out_hidden_size": H,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": list(fullatt_block_indexes),
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    }
    if not new_layout:
        config = {
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "vision_token_id": 151654,
            "image_token_id": 151655,
            "video_token_id": 151656,
            "hidden_act": "silu",
            "hidden_size": H,
            "initializer_range": 0.02,
            "intermediate_size": inter,
            "max_position_embeddings": 128000,
            "max_window_layers": window_layers,
            "model_type": "qwen2_5_vl",
            "num_attention_heads": heads,
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.41.2",
            "use_cache": True,
            "use_sliding_window": False,
            "vision_config": vision,
            "rope_scaling": {"type": "mrope", "mrope_section": mrope},
            "vocab_size": V,
        }
        if vocab_size is not None:
            fit_token_ids_at_top(config, V)
        return Layout("Qwen2.5-VL-7B-Instruct", config, list(t), max_shard_bytes=4_000_000_000)

    rope = {"mrope_section": mrope, "rope_type": "default", "type": "default"}
    text = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": H,
        "image_token_id": None,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": ["full_attention"] * L,
        "max_position_embeddings": 128000,
        "max_window_layers": window_layers,
        "model_type": "qwen2_5_vl_text",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(rope),
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "video_token_id": None,
        "vision_end_token_id": 151653,
        "vision_start_token_id": 151652,
        "vision_token_id": 151654,
        "vocab_size": V,
    }
    vision_new = {
        "depth": D,
        "fullatt_block_indexes": list(fullatt_block_indexes),
        "hidden_act": "silu",
        "hidden_size": VH,
        "in_channels": 3,
        "in_chans": 3,
        "initializer_range": 0.02,
        "intermediate_size": vi,
        "model_type": "qwen2_5_vl",
        "num_heads": vheads,
        "out_hidden_size": H,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
        "torch_dtype": "float32",
        "window_size": 112,
    }
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": H,
        "image_token_id": 151655,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 128000,
        "max_window_layers": window_layers,
        "model_type": "qwen2_5_vl",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(rope),
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "text_config": text,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.53.1",
        "use_cache": True,
        "use_sliding_window": False,
        "video_token_id": 151656,
        "vision_config": vision_new,
        "vision_end_token_id": 151653,
        "vision_start_token_id": 151652,
        "vision_token_id": 151654,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Qwen2.5-VL-7B-Instruct (transformers>=4.52 layout)", config, list(t), max_shard_bytes=4_000_000_000)


# --------------------------------------------------------------------------- Qwen3-VL


def _qwen3_vision(t: Tensors, depth: int, vh: int, vi: int, out: int, n_deepstack: int) -> None:
    """Qwen3-VL ViT under ``model.visual.``: LayerNorm blocks, learned ``pos_embed``, a
    patch merger and one deepstack merger per entry of ``deepstack_visual_indexes``."""
    p = "model.visual."
    t.add(p + "patch_embed.proj.weight", (vh, 3, 2, 16, 16))
    t.add(p + "patch_embed.proj.bias", (vh,))
    t.add(p + "pos_embed.weight", (2304, vh))
    for b in range(depth):
        q = f"{p}blocks.{b}."
        t.add(q + "norm1.weight", (vh,))
        t.add(q + "norm1.bias", (vh,))
        t.add(q + "norm2.weight", (vh,))
        t.add(q + "norm2.bias", (vh,))
        t.add(q + "attn.qkv.weight", (3 * vh, vh))
        t.add(q + "attn.qkv.bias", (3 * vh,))
        t.add(q + "attn.proj.weight", (vh, vh))
        t.add(q + "attn.proj.bias", (vh,))
        t.add(q + "mlp.linear_fc1.weight", (vi, vh))
        t.add(q + "mlp.linear_fc1.bias", (vi,))
        t.add(q + "mlp.linear_fc2.weight", (vh, vi))
        t.add(q + "mlp.linear_fc2.bias", (vh,))
    merged = 4 * vh
    # The patch merger normalises before the 2x2 shuffle, the deepstack mergers after it.
    for q, norm in [(p + "merger.", vh)] + [(f"{p}deepstack_merger_list.{k}.", merged) for k in range(n_deepstack)]:
        t.add(q + "norm.weight", (norm,))
        t.add(q + "norm.bias", (norm,))
        t.add(q + "linear_fc1.weight", (merged, merged))
        t.add(q + "linear_fc1.bias", (merged,))
        t.add(q + "linear_fc2.weight", (out, merged))
        t.add(q + "linear_fc2.bias", (out,))


def _deepstack_default(depth: int) -> list[int]:
    if depth >= 25:
        return [8, 16, 24]
    return sorted({max(0, min(depth - 1, k * depth // 4)) for k in (1, 2, 3)})


def _qwen3_vl_vision_config(model_type: str, depth: int, vh: int, vi: int, vheads: int, out: int, deepstack: list[int]):
    return {
        "deepstack_visual_indexes": list(deepstack),
        "depth": depth,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": vh,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": vi,
        "model_type": model_type,
        "num_heads": vheads,
        "num_position_embeddings": 2304,
        "out_hidden_size": out,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }


def qwen3_vl(
    *,
    num_layers: int | None = None,
    vision_depth: int | None = None,
    hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
    vocab_size: int | None = None,
    deepstack_visual_indexes: list[int] | None = None,
) -> Layout:
    """Qwen3-VL-8B-Instruct (``Qwen3VLForConditionalGeneration``): 36 text layers, 27 ViT
    blocks, deepstack taps at blocks 8/16/24. Checkpoint order as released: language model
    first, then the vision tower and ``lm_head`` (both in the last shard)."""
    L = pick(num_layers, 36)
    D = pick(vision_depth, 27)
    H = pick(hidden_size, 4096)
    V = pick(vocab_size, 151936)
    VH = vision_hidden_size or (1152 if H == 4096 else H)
    inter = width(12288, H, 4096)
    heads, kv, hd = attention_dims(H, 4096, 32, 8, 128, implicit=False)
    vi = width(4304, VH, 1152)
    vheads, _, _ = attention_dims(VH, 1152, 16, 16, 72, implicit=True)
    deepstack = _deepstack_default(D) if deepstack_visual_indexes is None else list(deepstack_visual_indexes)

    t = Tensors()
    p = "model.language_model."
    t.add(p + "embed_tokens.weight", (V, H))
    for i in range(L):
        q = f"{p}layers.{i}."
        t.attention(q, H, heads, kv, hd, qk_norm=True)
        t.gate_up_down(q + "mlp.", H, inter)
        t.add(q + "input_layernorm.weight", (H,))
        t.add(q + "post_attention_layernorm.weight", (H,))
    t.add(p + "norm.weight", (H,))
    _qwen3_vision(t, D, VH, vi, H, len(deepstack))
    t.add("lm_head.weight", (V, H))

    config = {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": 151655,
        "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "dtype": "bfloat16",
            "eos_token_id": 151645,
            "head_dim": hd,
            "hidden_act": "silu",
            "hidden_size": H,
            "initializer_range": 0.02,
            "intermediate_size": inter,
            "max_position_embeddings": 262144,
            "model_type": "qwen3_vl_text",
            "num_attention_heads": heads,
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "mrope_interleaved": True,
                "mrope_section": _mrope([24, 20, 20], hd, 128),
                "rope_type": "default",
            },
            "rope_theta": 5000000,
            "use_cache": True,
            "vocab_size": V,
        },
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": 151656,
        "vision_config": _qwen3_vl_vision_config("qwen3_vl", D, VH, vi, vheads, H, deepstack),
        "vision_end_token_id": 151653,
        "vision_start_token_id": 151652,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Qwen3-VL-8B-Instruct", config, list(t))


def qwen3_vl_moe(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    vision_depth: int | None = None,
    hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
    vocab_size: int | None = None,
    deepstack_visual_indexes: list[int] | None = None,
    mlp_only_layers: list[int] | None = None,
) -> Layout:
    """Qwen3-VL-30B-A3B-Instruct (``Qwen3VLMoeForConditionalGeneration``): 48 text layers,
    128 experts stored fused and transposed per layer (``mlp.experts.gate_up_proj``
    ``[E, hidden, 2*moe_inter]``, ``mlp.experts.down_proj`` ``[E, moe_inter, hidden]``),
    router ``mlp.gate``. ``mlp_only_layers`` (released: ``[]``) makes those layers dense."""
    L = pick(num_layers, 48)
    E = pick(num_experts, 128)
    D = pick(vision_depth, 27)
    H = pick(hidden_size, 2048)
    V = pick(vocab_size, 151936)
    VH = vision_hidden_size or (1152 if H == 2048 else H)
    inter = width(6144, H, 2048)
    moe_inter = width(768, H, 2048)
    heads, kv, hd = attention_dims(H, 2048, 32, 4, 128, implicit=False)
    vi = width(4304, VH, 1152)
    vheads, _, _ = attention_dims(VH, 1152, 16, 16, 72, implicit=True)
    deepstack = _deepstack_default(D) if deepstack_visual_indexes is None else list(deepstack_visual_indexes)
    dense = set(mlp_only_layers or [])

    t = Tensors()
    p = "model.language_model."
    t.add(p + "embed_tokens.weight", (V, H))
    for i in range(L):
        q = f"{p}layers.{i}."
        t.attention(q, H, heads, kv, hd, qk_norm=True)
        if i in dense:
            t.gate_up_down(q + "mlp.", H, inter)
        else:
            t.add(q + "mlp.gate.weight", (E, H))
            t.add(q + "mlp.experts.gate_up_proj", (E, H, 2 * moe_inter))
            t.add(q + "mlp.experts.down_proj", (E, moe_inter, H))
        t.add(q + "input_layernorm.weight", (H,))
        t.add(q + "post_attention_layernorm.weight", (H,))
    t.add(p + "norm.weight", (H,))
    _qwen3_vision(t, D, VH, vi, H, len(deepstack))
    t.add("lm_head.weight", (V, H))

    config = {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"],
        "image_token_id": 151655,
        "model_type": "qwen3_vl_moe",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "decoder_sparse_step": 1,
            "dtype": "bfloat16",
            "eos_token_id": 151645,
            "head_dim": hd,
            "hidden_act": "silu",
            "hidden_size": H,
            "initializer_range": 0.02,
            "intermediate_size": inter,
            "max_position_embeddings": 262144,
            "mlp_only_layers": sorted(dense),
            "model_type": "qwen3_vl_moe_text",
            "moe_intermediate_size": moe_inter,
            "norm_topk_prob": True,
            "num_attention_heads": heads,
            "num_experts": E,
            "num_experts_per_tok": min(8, E),
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "mrope_interleaved": True,
                "mrope_section": _mrope([24, 20, 20], hd, 128),
                "rope_type": "default",
            },
            "rope_theta": 5000000,
            "use_cache": True,
            "vocab_size": V,
        },
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": 151656,
        "vision_config": _qwen3_vl_vision_config("qwen3_vl_moe", D, VH, vi, vheads, H, deepstack),
        "vision_end_token_id": 151653,
        "vision_start_token_id": 151652,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Qwen3-VL-30B-A3B-Instruct", config, list(t))


LAYOUTS = {
    "qwen2_5_vl": qwen2_5_vl,
    "qwen3_vl": qwen3_vl,
    "qwen3_vl_moe": qwen3_vl_moe,
}
