"""Nemotron-H (``NemotronHForCausalLM``): hybrid Mamba-2 / attention / MLP blocks.

Source checked: the nvidia/Nemotron-H-8B-Base-8K ``config.json`` as copied into
Megatron-Bridge's unit test (two fields marked there as test additions, ``hidden_act`` and
``n_routed_experts``, are left out) and cross-checked against two other public copies of
the same 52-character ``hybrid_override_pattern``:
``M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-`` (24 Mamba-2, 4 attention, 24 MLP).

Tensor names: ``backbone.embeddings.weight``, ``backbone.layers.{i}.norm.weight`` plus a
``mixer`` that depends on the pattern character -- Mamba-2 (``A_log``, ``D``, ``dt_bias``,
``conv1d``, ``in_proj``, ``norm``, ``out_proj``), attention (``q/k/v/o_proj``) or a
squared-ReLU MLP (``up_proj``, ``down_proj``); ``backbone.norm_f.weight``, ``lm_head.weight``.
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import BF16, Tensors, attention_dims, fit_token_ids_at_top, pick, width

NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def nemotron_h(
    *,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    pattern: str | None = None,
) -> Layout:
    """Nemotron-H-8B-Base-8K.

    ``pattern`` overrides ``hybrid_override_pattern`` (characters ``M``, ``*``, ``-``); without
    it a scaled ``num_layers`` keeps the first ``num_layers`` characters of the real pattern
    (8 layers give ``M-M-M-M*``, which has all three block types). ``num_hidden_layers``
    always equals ``len(hybrid_override_pattern)``. A scaled ``hidden_size`` also writes
    ``head_dim`` (transformers 5 reads ``head_dim``, default 128, and ignores the released
    ``attention_head_dim``; both are 128 at full size)."""
    if pattern is None:
        pattern = NEMOTRON_H_8B_PATTERN if num_layers is None else NEMOTRON_H_8B_PATTERN[:num_layers]
    elif num_layers is not None and num_layers != len(pattern):
        raise ValueError(f"num_layers {num_layers} != len(pattern) {len(pattern)}")
    if num_layers is not None and num_layers > len(NEMOTRON_H_8B_PATTERN) and len(pattern) != num_layers:
        raise ValueError("num_layers beyond 52 needs an explicit pattern")
    bad = set(pattern) - set("M*-")
    if bad:
        raise ValueError(f"unsupported block characters {sorted(bad)} in pattern {pattern!r}")
    H = pick(hidden_size, 4096)
    V = pick(vocab_size, 131072)
    heads, kv, hd = attention_dims(H, 4096, 32, 8, 128, implicit=True)
    if H == 4096:
        m_heads, m_hd, groups, state = 128, 64, 8, 128
    else:
        m_hd = max(8, min(64, H // 8))
        m_heads = max(1, 2 * H // m_hd)  # expand 2: heads * head_dim = 2 * hidden
        groups = 8 if m_heads % 8 == 0 else 1
        state = max(8, min(128, H // 4))
    inter = width(21504, H, 4096)
    m_inner = m_heads * m_hd
    conv_dim = m_inner + 2 * groups * state

    t = Tensors([("backbone.embeddings.weight", BF16, (V, H))])
    for i, kind in enumerate(pattern):
        q = f"backbone.layers.{i}."
        t.append((q + "norm.weight", BF16, (H,)))
        if kind == "M":
            t += [
                (q + "mixer.A_log", BF16, (m_heads,)),
                (q + "mixer.D", BF16, (m_heads,)),
                (q + "mixer.dt_bias", BF16, (m_heads,)),
                (q + "mixer.conv1d.weight", BF16, (conv_dim, 1, 4)),
                (q + "mixer.conv1d.bias", BF16, (conv_dim,)),
                (q + "mixer.in_proj.weight", BF16, (m_inner + conv_dim + m_heads, H)),
                (q + "mixer.norm.weight", BF16, (m_inner,)),
                (q + "mixer.out_proj.weight", BF16, (H, m_inner)),
            ]
        elif kind == "*":
            t.attention(q, H, heads, kv, hd, module="mixer")
        else:
            t += [
                (q + "mixer.up_proj.weight", BF16, (inter, H)),
                (q + "mixer.down_proj.weight", BF16, (H, inter)),
            ]
    t += [("backbone.norm_f.weight", BF16, (H,)), ("lm_head.weight", BF16, (V, H))]

    config = {
        "architectures": ["NemotronHForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_head_dim": hd,
        "auto_map": {
            "AutoConfig": "configuration_nemotron_h.NemotronHConfig",
            "AutoModelForCausalLM": "modeling_nemotron_h.NemotronHForCausalLM",
        },
        "bos_token_id": 1,
        "chunk_size": 128,
        "conv_kernel": 4,
        "eos_token_id": 2,
        "expand": 2,
        **({} if H == 4096 else {"head_dim": hd}),
        "hidden_dropout": 0.0,
        "hidden_size": H,
        "hybrid_override_pattern": pattern,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_epsilon": 1e-05,
        "mamba_head_dim": m_hd,
        "mamba_hidden_act": "silu",
        "mamba_num_heads": m_heads,
        "mamba_proj_bias": False,
        "max_position_embeddings": 8192,
        "mlp_bias": False,
        "mlp_hidden_act": "relu2",
        "model_type": "nemotron_h",
        "n_groups": groups,
        "num_attention_heads": heads,
        "num_hidden_layers": len(pattern),
        "num_key_value_heads": kv,
        "num_logits_to_keep": 1,
        "pad_token_id": 0,
        "rescale_prenorm_residual": True,
        "residual_in_fp32": False,
        "rms_norm_eps": 1e-05,
        "ssm_state_size": state,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.48.0.dev0",
        "use_bias": False,
        "use_cache": True,
        "use_conv_bias": True,
        "use_mamba_kernels": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Nemotron-H-8B-Base-8K", config, list(t))


LAYOUTS = {"nemotron_h": nemotron_h}
