"""Llama 3.1 / 3.2 (``LlamaForCausalLM``) and Llama 4 Maverick (``Llama4ForConditionalGeneration``).

Sources checked (public copies of the released files):

* Llama-3.1-8B ``config.json`` reproduced byte for byte in a public test (826 bytes), and
  the Instruct variant's three-id ``eos_token_id``; the 3.2-1B geometry (head_dim 64, 16
  layers, tied, rope factor 32) and its 146-tensor count from a public test.
* Llama-4-Maverick-17B-128E ``config.json`` as copied into TensorRT-LLM's unit test (only
  ``num_hidden_layers`` and ``no_rope_layers`` were edited there), the Scout config as
  re-saved by transformers (explicit 48-entry ``no_rope_layers``), vision/adapter/projector
  tensor names and shapes from public converters (``vision_adapter.mlp.fc1`` ``[4096, 5632]``,
  ``fc2`` ``[4096, 4096]``, fused ``feed_forward.experts.gate_up_proj`` ``[E, 5120, 16384]``).
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import Tensors, attention_dims, fit_token_ids_at_top, pick, width


def _llama_tensors(L: int, H: int, inter: int, heads: int, kv: int, hd: int, V: int, tied: bool) -> list:
    t = Tensors()
    t.add("model.embed_tokens.weight", (V, H))
    for i in range(L):
        q = f"model.layers.{i}."
        t.attention(q, H, heads, kv, hd)
        t.gate_up_down(q + "mlp.", H, inter)
        t.add(q + "input_layernorm.weight", (H,))
        t.add(q + "post_attention_layernorm.weight", (H,))
    t.add("model.norm.weight", (H,))
    if not tied:
        t.add("lm_head.weight", (V, H))
    return list(t)


# --------------------------------------------------------------------------- Llama 3


def llama3(*, num_layers: int | None = None, hidden_size: int | None = None, vocab_size: int | None = None) -> Layout:
    """Llama-3.1-8B-Instruct: 32 layers, GQA with 8 KV heads, untied ``lm_head``."""
    L = pick(num_layers, 32)
    H = pick(hidden_size, 4096)
    V = pick(vocab_size, 128256)
    inter = width(14336, H, 4096)
    heads, kv, hd = attention_dims(H, 4096, 32, 8, 128, implicit=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Llama-3.1-8B-Instruct", config, _llama_tensors(L, H, inter, heads, kv, hd, V, tied=False))


def llama3_2_1b(*, num_layers: int | None = None, hidden_size: int | None = None, vocab_size: int | None = None) -> Layout:
    """Llama-3.2-1B-Instruct: 16 layers, explicit ``head_dim`` 64, tied embeddings (no
    ``lm_head`` tensor), one ``model.safetensors``."""
    L = pick(num_layers, 16)
    H = pick(hidden_size, 2048)
    V = pick(vocab_size, 128256)
    inter = width(8192, H, 2048)
    heads, kv, hd = attention_dims(H, 2048, 32, 8, 64, implicit=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Llama-3.2-1B-Instruct", config, _llama_tensors(L, H, inter, heads, kv, hd, V, tied=True))


# --------------------------------------------------------------------------- Llama 4


def llama4_no_rope_layers(num_layers: int, interval: int = 4) -> list[int]:
    """transformers' default: 1 (RoPE, chunked attention) unless (i + 1) % interval == 0."""
    return [int((i + 1) % interval != 0) for i in range(num_layers)]


def llama4(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    vision_depth: int | None = None,
    hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
    vocab_size: int | None = None,
    interleave_moe_layer_step: int = 2,
    explicit_no_rope_layers: bool = True,
) -> Layout:
    """Llama-4-Maverick-17B-128E-Instruct (``Llama4ForConditionalGeneration``).

    48 text layers under ``language_model.model.layers.*``; with ``interleave_moe_layer_step``
    2 the odd layers are MoE (``feed_forward.router``, fused 3-D
    ``feed_forward.experts.gate_up_proj`` / ``down_proj``, ``feed_forward.shared_expert.*``)
    and the even layers dense (``feed_forward.{gate,up,down}_proj`` of
    ``intermediate_size_mlp``). Vision encoder ``vision_model.model.layers.*`` (34 layers),
    ``vision_model.vision_adapter.*`` and ``multi_modal_projector.linear_1``.

    ``explicit_no_rope_layers`` (default) writes the per-layer 0/1 list as transformers
    re-saves it; ``False`` writes ``[]`` (recomputed from ``no_rope_layer_interval`` 4)."""
    L = pick(num_layers, 48)
    E = pick(num_experts, 128)
    D = pick(vision_depth, 34)
    H = pick(hidden_size, 5120)
    V = pick(vocab_size, 202048)
    VH = vision_hidden_size or (1408 if H == 5120 else H)
    inter = width(8192, H, 5120)  # experts and shared expert
    inter_mlp = width(16384, H, 5120)  # dense layers
    heads, kv, hd = attention_dims(H, 5120, 40, 8, 128, implicit=False)
    vheads, _, _ = attention_dims(VH, 1408, 16, 16, 88, implicit=True)
    vi = 4 * VH  # pixel shuffle 0.5 turns 2x2 patches of VH into the adapter input (5632 = 4 * 1408)
    proj = width(4096, VH, 1408)  # projector_input_dim == projector_output_dim == vision_output_dim
    patches = (336 // 14) ** 2 + 1

    t = Tensors()
    p = "vision_model."
    t.add(p + "class_embedding", (VH,))
    t.add(p + "positional_embedding_vlm", (patches, VH))
    t.add(p + "patch_embedding.linear.weight", (VH, 3 * 14 * 14))
    t.add(p + "layernorm_pre.weight", (VH,))
    t.add(p + "layernorm_pre.bias", (VH,))
    t.add(p + "layernorm_post.weight", (VH,))
    t.add(p + "layernorm_post.bias", (VH,))
    for j in range(D):
        q = f"{p}model.layers.{j}."
        t.attention(q, VH, vheads, vheads, VH // vheads, qkv_bias=True, o_bias=True)
        t.add(q + "mlp.fc1.weight", (vi, VH))
        t.add(q + "mlp.fc1.bias", (vi,))
        t.add(q + "mlp.fc2.weight", (VH, vi))
        t.add(q + "mlp.fc2.bias", (VH,))
        t.add(q + "input_layernorm.weight", (VH,))
        t.add(q + "input_layernorm.bias", (VH,))
        t.add(q + "post_attention_layernorm.weight", (VH,))
        t.add(q + "post_attention_layernorm.bias", (VH,))
    t.add(p + "vision_adapter.mlp.fc1.weight", (proj, vi))
    t.add(p + "vision_adapter.mlp.fc2.weight", (proj, proj))
    t.add("multi_modal_projector.linear_1.weight", (H, proj))

    p = "language_model.model."
    t.add(p + "embed_tokens.weight", (V, H))
    for i in range(L):
        q = f"{p}layers.{i}."
        t.attention(q, H, heads, kv, hd)
        if interleave_moe_layer_step > 0 and (i + 1) % interleave_moe_layer_step == 0:
            t.add(q + "feed_forward.experts.gate_up_proj", (E, H, 2 * inter))
            t.add(q + "feed_forward.experts.down_proj", (E, inter, H))
            t.add(q + "feed_forward.router.weight", (E, H))
            t.gate_up_down(q + "feed_forward.shared_expert.", H, inter)
        else:
            t.gate_up_down(q + "feed_forward.", H, inter_mlp)
        t.add(q + "input_layernorm.weight", (H,))
        t.add(q + "post_attention_layernorm.weight", (H,))
    t.add(p + "norm.weight", (H,))
    t.add("language_model.lm_head.weight", (V, H))

    config = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "boi_token_index": 200080,
        "eoi_token_index": 200081,
        "image_token_index": 200092,
        "model_type": "llama4",
        "text_config": {
            "_attn_implementation_autoset": True,
            "attention_bias": False,
            "attention_chunk_size": 8192,
            "attention_dropout": 0.0,
            "bos_token_id": 200000,
            "eos_token_id": [200001, 200007, 200008],
            "for_llm_compressor": False,
            "head_dim": hd,
            "hidden_act": "silu",
            "hidden_size": H,
            "initializer_range": 0.02,
            "interleave_moe_layer_step": interleave_moe_layer_step,
            "intermediate_size": inter,
            "intermediate_size_mlp": inter_mlp,
            "max_position_embeddings": 1048576,
            "model_type": "llama4_text",
            "no_rope_layers": llama4_no_rope_layers(L) if explicit_no_rope_layers else [],
            "num_attention_heads": heads,
            "num_experts_per_tok": 1,
            "num_hidden_layers": L,
            "num_key_value_heads": kv,
            "num_local_experts": E,
            "output_router_logits": False,
            "pad_token_id": 200018,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 500000.0,
            "router_aux_loss_coef": 0.001,
            "router_jitter_noise": 0.0,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "use_qk_norm": False,
            "vocab_size": V,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0.dev0",
        "vision_config": {
            "_attn_implementation_autoset": True,
            "attention_dropout": 0.0,
            "hidden_act": "gelu",
            "hidden_size": VH,
            "image_size": 336,
            "initializer_range": 0.02,
            "intermediate_size": vi,
            "model_type": "llama4_vision_model",
            "multi_modal_projector_bias": False,
            "norm_eps": 1e-05,
            "num_attention_heads": vheads,
            "num_channels": 3,
            "num_hidden_layers": D,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "projector_dropout": 0.0,
            "projector_input_dim": proj,
            "projector_output_dim": proj,
            "rope_theta": 10000,
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
            "vision_output_dim": proj,
        },
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Llama-4-Maverick-17B-128E-Instruct", config, list(t))


LAYOUTS = {
    "llama3": llama3,
    "llama3_2_1b": llama3_2_1b,
    "llama4": llama4,
}
