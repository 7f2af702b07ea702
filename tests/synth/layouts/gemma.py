"""Gemma 2 and Gemma 3 (multimodal 27B and text-only 1B).

Sources checked (public copies of the released files):

* gemma-2-9b-it ``config.json``, quoted verbatim in a vLLM issue: no ``layer_types`` (the
  parity rule even = sliding / odd = full is transformers' default), ``sliding_window`` and
  the legacy ``sliding_window_size`` both 4096, no ``tie_word_embeddings`` key (tied, so no
  ``lm_head`` tensor).
* gemma-3-27b-it ``config.json`` (TensorRT-LLM test copy, and the 4B sibling quoted as "the
  original gemma-3-4b-it config"): a sparse ``text_config`` with neither
  ``sliding_window_pattern`` nor ``layer_types`` -- the 5:1 local/global pattern comes from
  transformers' default ``sliding_window_pattern=6``. The ``original_layout=False`` config
  follows a transformers-4.57 re-save of Gemma 3 (``_sliding_window_pattern``,
  ``sliding_window_pattern`` *and* an explicit ``layer_types``).
* gemma-3-1b-it ``config.json``: ``sliding_window`` 512 with ``sliding_window_pattern`` 6,
  vocabulary 262144 (the multimodal text tower uses 262208).
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import Tensors, attention_dims, fit_token_ids_at_top, pick, width


def _gemma_layers(t: Tensors, p: str, layers: int, h: int, inter: int, heads: int, kv: int, hd: int, qk_norm: bool):
    for i in range(layers):
        q = f"{p}layers.{i}."
        t.attention(q, h, heads, kv, hd, qk_norm=qk_norm)
        t.gate_up_down(q + "mlp.", h, inter)
        t.add(q + "input_layernorm.weight", (h,))
        t.add(q + "post_attention_layernorm.weight", (h,))
        t.add(q + "pre_feedforward_layernorm.weight", (h,))
        t.add(q + "post_feedforward_layernorm.weight", (h,))


def gemma3_layer_types(num_layers: int, pattern: int = 6) -> list[str]:
    """transformers' default for Gemma 3: full attention iff (i + 1) % pattern == 0."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]


# --------------------------------------------------------------------------- Gemma 2


def gemma2(*, num_layers: int | None = None, hidden_size: int | None = None, vocab_size: int | None = None) -> Layout:
    """gemma-2-9b-it (``Gemma2ForCausalLM``): 42 layers, sliding/full by index parity (no
    ``layer_types`` in the released config), pre/post feed-forward norms, tied embeddings."""
    L = pick(num_layers, 42)
    H = pick(hidden_size, 3584)
    V = pick(vocab_size, 256000)
    inter = width(14336, H, 3584)
    heads, kv, hd = attention_dims(H, 3584, 16, 8, 256, implicit=False)

    t = Tensors()
    t.add("model.embed_tokens.weight", (V, H))
    _gemma_layers(t, "model.", L, H, inter, heads, kv, hd, qk_norm=False)
    t.add("model.norm.weight", (H,))

    config = {
        "architectures": ["Gemma2ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": 50.0,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": 1,
        "final_logit_softcapping": 30.0,
        "head_dim": hd,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 8192,
        "model_type": "gemma2",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pad_token_id": 0,
        "query_pre_attn_scalar": hd,  # 256 == head_dim in the release
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "sliding_window_size": 4096,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.42.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("gemma-2-9b-it", config, list(t))


# --------------------------------------------------------------------------- Gemma 3


def _siglip(t: Tensors, p: str, depth: int, vh: int, vi: int) -> None:
    """SigLIP-So400m/14 at 896 px (``vision_use_head`` false) under prefix ``p``
    (``...vision_tower.vision_model.``)."""
    positions = (896 // 14) ** 2
    t.add(p + "embeddings.patch_embedding.weight", (vh, 3, 14, 14))
    t.add(p + "embeddings.patch_embedding.bias", (vh,))
    t.add(p + "embeddings.position_embedding.weight", (positions, vh))
    for j in range(depth):
        q = f"{p}encoder.layers.{j}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            t.add(q + f"self_attn.{proj}.weight", (vh, vh))
            t.add(q + f"self_attn.{proj}.bias", (vh,))
        t.add(q + "layer_norm1.weight", (vh,))
        t.add(q + "layer_norm1.bias", (vh,))
        t.add(q + "mlp.fc1.weight", (vi, vh))
        t.add(q + "mlp.fc1.bias", (vi,))
        t.add(q + "mlp.fc2.weight", (vh, vi))
        t.add(q + "mlp.fc2.bias", (vh,))
        t.add(q + "layer_norm2.weight", (vh,))
        t.add(q + "layer_norm2.bias", (vh,))
    t.add(p + "post_layernorm.weight", (vh,))
    t.add(p + "post_layernorm.bias", (vh,))


def gemma3(
    *,
    num_layers: int | None = None,
    vision_depth: int | None = None,
    hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
    vocab_size: int | None = None,
    original_layout: bool = True,
) -> Layout:
    """gemma-3-27b-it (``Gemma3ForConditionalGeneration``): 62 text layers (5 sliding : 1
    full), SigLIP vision tower of 27 layers, tied embeddings.

    ``original_layout=True`` (as released, transformers 4.50): ``language_model.model.*``,
    ``vision_tower.vision_model.*``, ``multi_modal_projector.*`` and a sparse config without
    ``layer_types``. ``original_layout=False``: the transformers >= 4.52 layout
    ``model.language_model.*``, ``model.vision_tower.vision_model.*``,
    ``model.multi_modal_projector.*`` with a fully expanded config (explicit ``layer_types``)."""
    L = pick(num_layers, 62)
    D = pick(vision_depth, 27)
    H = pick(hidden_size, 5376)
    V = pick(vocab_size, 262208)
    VH = vision_hidden_size or (1152 if H == 5376 else H)
    inter = width(21504, H, 5376)
    heads, kv, hd = attention_dims(H, 5376, 32, 16, 128, implicit=False)
    vi = width(4304, VH, 1152)
    vheads, _, _ = attention_dims(VH, 1152, 16, 16, 72, implicit=True)
    qpas = H // heads  # 168 in the release: hidden_size / num_attention_heads

    if original_layout:
        text_p, vis_p, mmp_p = "language_model.model.", "vision_tower.vision_model.", "multi_modal_projector."
    else:
        text_p, vis_p, mmp_p = "model.language_model.", "model.vision_tower.vision_model.", "model.multi_modal_projector."

    t = Tensors()
    _siglip(t, vis_p, D, VH, vi)
    t.add(mmp_p + "mm_input_projection_weight", (VH, H))
    t.add(mmp_p + "mm_soft_emb_norm.weight", (VH,))
    t.add(text_p + "embed_tokens.weight", (V, H))
    _gemma_layers(t, text_p, L, H, inter, heads, kv, hd, qk_norm=True)
    t.add(text_p + "norm.weight", (H,))

    if original_layout:
        text_config = {
            "head_dim": hd,
            "hidden_size": H,
            "intermediate_size": inter,
            "model_type": "gemma3_text",
            "num_attention_heads": heads,
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "query_pre_attn_scalar": qpas,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        }
        if V != 262208:
            text_config["vocab_size"] = V
        vision_config = {
            "hidden_size": VH,
            "image_size": 896,
            "intermediate_size": vi,
            "model_type": "siglip_vision_model",
            "num_attention_heads": vheads,
            "num_hidden_layers": D,
            "patch_size": 14,
            "vision_use_head": False,
        }
        config = {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "boi_token_index": 255999,
            "eoi_token_index": 256000,
            "eos_token_id": [1, 106],
            "image_token_index": 262144,
            "initializer_range": 0.02,
            "mm_tokens_per_image": 256,
            "model_type": "gemma3",
            "text_config": text_config,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.50.0.dev0",
            "vision_config": vision_config,
        }
        if vocab_size is not None:
            fit_token_ids_at_top(config, V)
        return Layout("gemma-3-27b-it", config, list(t))

    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": 255999,
        "dtype": "bfloat16",
        "eoi_token_index": 256000,
        "eos_token_id": [1, 106],
        "image_token_index": 262144,
        "initializer_range": 0.02,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "_sliding_window_pattern": 6,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "attn_logit_softcapping": None,
            "cache_implementation": "hybrid",
            "dtype": "bfloat16",
            "final_logit_softcapping": None,
            "head_dim": hd,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": H,
            "initializer_range": 0.02,
            "intermediate_size": inter,
            "layer_types": gemma3_layer_types(L),
            "max_position_embeddings": 131072,
            "model_type": "gemma3_text",
            "num_attention_heads": heads,
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "query_pre_attn_scalar": qpas,
            "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "rope_theta": 1000000,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "use_bidirectional_attention": False,
            "use_cache": True,
            "vocab_size": V,
        },
        "transformers_version": "4.57.3",
        "vision_config": {
            "attention_dropout": 0.0,
            "dtype": "bfloat16",
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": VH,
            "image_size": 896,
            "intermediate_size": vi,
            "layer_norm_eps": 1e-06,
            "model_type": "siglip_vision_model",
            "num_attention_heads": vheads,
            "num_channels": 3,
            "num_hidden_layers": D,
            "patch_size": 14,
            "vision_use_head": False,
        },
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("gemma-3-27b-it (transformers>=4.52 layout)", config, list(t))


def gemma3_text(*, num_layers: int | None = None, hidden_size: int | None = None, vocab_size: int | None = None) -> Layout:
    """gemma-3-1b-it (``Gemma3ForCausalLM``, text only): 26 layers, ``model.layers.*``,
    ``sliding_window_pattern`` 6 in the config (no ``layer_types``), tied embeddings."""
    L = pick(num_layers, 26)
    H = pick(hidden_size, 1152)
    V = pick(vocab_size, 262144)
    inter = width(6912, H, 1152)
    heads, kv, hd = attention_dims(H, 1152, 4, 1, 256, implicit=False)

    t = Tensors()
    t.add("model.embed_tokens.weight", (V, H))
    _gemma_layers(t, "model.", L, H, inter, heads, kv, hd, qk_norm=True)
    t.add("model.norm.weight", (H,))

    config = {
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": [1, 106],
        "final_logit_softcapping": None,
        "head_dim": hd,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pad_token_id": 0,
        "query_pre_attn_scalar": hd,  # 256 == head_dim in the release
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("gemma-3-1b-it", config, list(t))


LAYOUTS = {
    "gemma2": gemma2,
    "gemma3": gemma3,
    "gemma3_text": gemma3_text,
}
