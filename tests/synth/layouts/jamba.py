"""Jamba (``JambaForCausalLM``): Mamba / attention hybrid with MoE on alternate layers.

Sources checked: the Jamba geometry quoted from ai21labs/Jamba-v0.1's ``config.json`` in
public tests (32 layers, attention at ``i % 8 == 4``, MoE at ``i % 2 == 1``, 16 experts,
vocabulary 65536) and the full AI21-Jamba-1.5-Mini ``config.json`` (same architecture and
field set) for the remaining fields and their order. Layer types are derived from
period/offset only: ``layers_block_type`` is a read-only property, never in config.json.
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import BF16, Tensors, attention_dims, ceil_div, fit_token_ids_at_top, pick, width


def jamba_layer_kinds(num_layers: int, attn_period: int = 8, attn_offset: int = 4,
                      expert_period: int = 2, expert_offset: int = 1) -> list[tuple[str, bool]]:
    """(mixer, is_moe) per layer: mixer ``attention`` iff i % attn_period == attn_offset,
    MoE iff i % expert_period == expert_offset (transformers' ``layers_block_type`` /
    ``layers_num_experts``)."""
    return [
        ("attention" if i % attn_period == attn_offset else "mamba", i % expert_period == expert_offset)
        for i in range(num_layers)
    ]


def jamba(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    attn_layer_period: int = 8,
    attn_layer_offset: int = 4,
    expert_layer_period: int = 2,
    expert_layer_offset: int = 1,
) -> Layout:
    """Jamba-v0.1 (52B): 32 layers -- 4 attention (4, 12, 20, 28), 28 Mamba; 16 MoE layers
    (odd indices) with 16 experts each, dense MLP elsewhere."""
    L = pick(num_layers, 32)
    E = pick(num_experts, 16)
    H = pick(hidden_size, 4096)
    V = pick(vocab_size, 65536)
    if not (0 <= attn_layer_offset < attn_layer_period and 0 <= expert_layer_offset < expert_layer_period):
        raise ValueError("layer offsets must be smaller than their periods")
    inter = width(14336, H, 4096)
    heads, kv, hd = attention_dims(H, 4096, 32, 8, 128, implicit=True)
    d_state, d_conv, expand = 16, 4, 2
    inner = expand * H
    dt_rank = ceil_div(H, 16)  # "auto": ceil(hidden / 16) = 256 in the release

    t = Tensors([("model.embed_tokens.weight", BF16, (V, H))])
    kinds = jamba_layer_kinds(L, attn_layer_period, attn_layer_offset, expert_layer_period, expert_layer_offset)
    for i, (mixer, moe) in enumerate(kinds):
        q = f"model.layers.{i}."
        if mixer == "attention":
            t.attention(q, H, heads, kv, hd)
        else:
            m = q + "mamba."
            t += [
                (m + "A_log", BF16, (inner, d_state)),
                (m + "D", BF16, (inner,)),
                (m + "conv1d.weight", BF16, (inner, 1, d_conv)),
                (m + "conv1d.bias", BF16, (inner,)),
                (m + "in_proj.weight", BF16, (2 * inner, H)),
                (m + "x_proj.weight", BF16, (dt_rank + 2 * d_state, inner)),
                (m + "dt_proj.weight", BF16, (inner, dt_rank)),
                (m + "dt_proj.bias", BF16, (inner,)),
                (m + "out_proj.weight", BF16, (H, inner)),
                (m + "dt_layernorm.weight", BF16, (dt_rank,)),
                (m + "b_layernorm.weight", BF16, (d_state,)),
                (m + "c_layernorm.weight", BF16, (d_state,)),
            ]
        if moe:
            t.append((q + "feed_forward.router.weight", BF16, (E, H)))
            for e in range(E):
                t.gate_up_down(f"{q}feed_forward.experts.{e}.", H, inter)
        else:
            t.gate_up_down(q + "feed_forward.", H, inter)
        t += [
            (q + "input_layernorm.weight", BF16, (H,)),
            (q + "pre_ff_layernorm.weight", BF16, (H,)),
        ]
    t += [("model.final_layernorm.weight", BF16, (H,)), ("lm_head.weight", BF16, (V, H))]

    config = {
        "architectures": ["JambaForCausalLM"],
        "attention_dropout": 0.0,
        "attn_layer_offset": attn_layer_offset,
        "attn_layer_period": attn_layer_period,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "expert_layer_offset": expert_layer_offset,
        "expert_layer_period": expert_layer_period,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "mamba_conv_bias": True,
        "mamba_d_conv": d_conv,
        "mamba_d_state": d_state,
        "mamba_dt_rank": dt_rank,
        "mamba_expand": expand,
        "mamba_proj_bias": False,
        "max_position_embeddings": 262144,
        "model_type": "jamba",
        "num_attention_heads": heads,
        "num_experts": E,
        "num_experts_per_tok": min(2, E),
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "num_logits_to_keep": 1,
        "output_router_logits": False,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1",
        "use_cache": True,
        "use_mamba_kernels": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Jamba-v0.1", config, list(t))


LAYOUTS = {"jamba": jamba}
