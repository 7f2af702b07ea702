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

NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def _width(real: int, hidden: int, real_hidden: int, multiple: int = 8) -> int:
    """Scale a width with the hidden size (unchanged at full size), rounded up to ``multiple``."""
    if hidden == real_hidden:
        return real
    value = max(multiple, real * hidden // real_hidden)
    return -(-value // multiple) * multiple


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
    H = 4096 if hidden_size is None else hidden_size
    V = 131072 if vocab_size is None else vocab_size
    if H == 4096:
        heads, kv, hd = 32, 8, 128
        m_heads, m_hd, groups, state = 128, 64, 8, 128
    else:
        hd = max(8, min(128, H // 4))
        heads = max(1, H // hd)
        while H % heads:
            heads -= 1
        hd = H // heads
        kv = max(1, heads // 4)
        while heads % kv:
            kv -= 1
        m_hd = max(8, min(64, H // 8))
        m_heads = max(1, 2 * H // m_hd)  # expand 2: heads * head_dim = 2 * hidden
        groups = 8 if m_heads % 8 == 0 else 1
        state = max(8, min(128, H // 4))
    inter = _width(21504, H, 4096)
    m_inner = m_heads * m_hd
    conv_dim = m_inner + 2 * groups * state

    t: list = [("backbone.embeddings.weight", BF16, (V, H))]
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
            t += [
                (q + "mixer.q_proj.weight", BF16, (heads * hd, H)),
                (q + "mixer.k_proj.weight", BF16, (kv * hd, H)),
                (q + "mixer.v_proj.weight", BF16, (kv * hd, H)),
                (q + "mixer.o_proj.weight", BF16, (H, heads * hd)),
            ]
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
        _fit_token_ids(config, V)
    return Layout("Nemotron-H-8B-Base-8K", config, t)


LAYOUTS = {"nemotron_h": nemotron_h}
