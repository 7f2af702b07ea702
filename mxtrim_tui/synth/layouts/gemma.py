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

BF16 = "BF16"


def _fit_token_ids(config: dict, vocab: int) -> dict:
    """With a scaled-down vocabulary, move special token ids (``*_token_id``,
    ``*_token_index``) that fall outside it to distinct ids at its top, so the config stays
    loadable (e.g. ``pad_token_id`` must index the embedding)."""
    big: set[int] = set()

    def walk(d: dict, fn) -> None:
        for key, value in d.items():
            if isinstance(value, dict):
                walk(value, fn)
            elif key.endswith(("_token_id", "_token_index")):
                d[key] = fn(value)

    def collect(value):
        for x in value if isinstance(value, list) else [value]:
            if isinstance(x, int) and x >= vocab:
                big.add(x)
        return value

    walk(config, collect)
    remap = {old: vocab - 1 - i for i, old in enumerate(sorted(big))}
    walk(config, lambda v: [remap.get(x, x) for x in v] if isinstance(v, list) else remap.get(v, v))
    return config


def _width(real: int, hidden: int, real_hidden: int, multiple: int = 8) -> int:
    """Scale a width with the hidden size (unchanged at full size), rounded up to ``multiple``."""
    if hidden == real_hidden:
        return real
    value = max(multiple, real * hidden // real_hidden)
    return -(-value // multiple) * multiple


def _attention(hidden: int, real_hidden: int, heads: int, kv: int, head_dim: int, *, implicit: bool):
    """(heads, kv_heads, head_dim) for a scaled hidden size (GQA ratio kept where possible)."""
    if hidden == real_hidden:
        return heads, kv, head_dim
    hd = max(8, min(head_dim, hidden // 4))
    n = max(1, hidden // hd)
    if implicit:
        while hidden % n:
            n -= 1
        hd = hidden // n
    k = max(1, n * kv // heads)
    while n % k:
        k -= 1
    return n, k, hd


class _Tensors(list):
    def add(self, name: str, shape, dtype: str = BF16) -> None:
        self.append((name, dtype, tuple(int(d) for d in shape)))


def _gemma_layers(t: _Tensors, p: str, layers: int, h: int, inter: int, heads: int, kv: int, hd: int, qk_norm: bool):
    for i in range(layers):
        q = f"{p}layers.{i}."
        t.add(q + "self_attn.q_proj.weight", (heads * hd, h))
        t.add(q + "self_attn.k_proj.weight", (kv * hd, h))
        t.add(q + "self_attn.v_proj.weight", (kv * hd, h))
        t.add(q + "self_attn.o_proj.weight", (h, heads * hd))
        if qk_norm:
            t.add(q + "self_attn.q_norm.weight", (hd,))
            t.add(q + "self_attn.k_norm.weight", (hd,))
        t.add(q + "mlp.gate_proj.weight", (inter, h))
        t.add(q + "mlp.up_proj.weight", (inter, h))
        t.add(q + "mlp.down_proj.weight", (h, inter))
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
    L = 42 if num_layers is None else num_layers
    H = 3584 if hidden_size is None else hidden_size
    V = 256000 if vocab_size is None else vocab_size
    inter = _width(14336, H, 3584)
    heads, kv, hd = _attention(H, 3584, 16, 8, 256, implicit=False)

    t = _Tensors()
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
        _fit_token_ids(config, V)
    return Layout("gemma-2-9b-it", config, list(t))


# --------------------------------------------------------------------------- Gemma 3


def _siglip(t: _Tensors, p: str, depth: int, vh: int, vi: int) -> None:
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
    L = 62 if num_layers is None else num_layers
    D = 27 if vision_depth is None else vision_depth
    H = 5376 if hidden_size is None else hidden_size
    V = 262208 if vocab_size is None else vocab_size
    VH = vision_hidden_size or (1152 if H == 5376 else H)
    inter = _width(21504, H, 5376)
    heads, kv, hd = _attention(H, 5376, 32, 16, 128, implicit=False)
    vi = _width(4304, VH, 1152)
    vheads, _, _ = _attention(VH, 1152, 16, 16, 72, implicit=True)
    qpas = H // heads  # 168 in the release: hidden_size / num_attention_heads

    if original_layout:
        text_p, vis_p, mmp_p = "language_model.model.", "vision_tower.vision_model.", "multi_modal_projector."
    else:
        text_p, vis_p, mmp_p = "model.language_model.", "model.vision_tower.vision_model.", "model.multi_modal_projector."

    t = _Tensors()
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
            _fit_token_ids(config, V)
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
        _fit_token_ids(config, V)
    return Layout("gemma-3-27b-it (transformers>=4.52 layout)", config, list(t))


def gemma3_text(*, num_layers: int | None = None, hidden_size: int | None = None, vocab_size: int | None = None) -> Layout:
    """gemma-3-1b-it (``Gemma3ForCausalLM``, text only): 26 layers, ``model.layers.*``,
    ``sliding_window_pattern`` 6 in the config (no ``layer_types``), tied embeddings."""
    L = 26 if num_layers is None else num_layers
    H = 1152 if hidden_size is None else hidden_size
    V = 262144 if vocab_size is None else vocab_size
    inter = _width(6912, H, 1152)
    heads, kv, hd = _attention(H, 1152, 4, 1, 256, implicit=False)

    t = _Tensors()
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
        _fit_token_ids(config, V)
    return Layout("gemma-3-1b-it", config, list(t))


LAYOUTS = {
    "gemma2": gemma2,
    "gemma3": gemma3,
    "gemma3_text": gemma3_text,
}
