"""gpt-oss (``GptOssForCausalLM``), MXFP4 experts as released.

Source checked: a model report of gpt-oss-20b listing its released ``config.json`` verbatim
and all 459 tensors with shape, dtype and shard. The 120b differs in depth (36), experts
(128) and nothing else in the config. Released facts reproduced here:

* ``layer_types`` alternating ``sliding_attention`` / ``full_attention`` (vLLM ignores it and
  uses index parity), ``sliding_window`` 128, YaRN ``rope_scaling``;
* ``quantization_config {"modules_to_not_convert": [...], "quant_method": "mxfp4"}`` with
  index-free globs;
* experts ``mlp.experts.{gate_up_proj,down_proj}_{blocks,scales}`` as U8 (blocks
  ``[E, out, in/32, 16]`` -- 32 FP4 values in 16 bytes per block -- and one E8M0 scale byte
  per block ``[E, out, in/32]``), ``_bias`` BF16 ``[E, out]``; ``self_attn.sinks``;
  ``mlp.router.{weight,bias}``; everything else BF16;
* the released shards put ``model.embed_tokens``, ``model.norm`` and ``lm_head`` in the *last*
  file (the real files are also named ``model-0000i-of-0000n`` counting from 00000, which the
  writer here does not imitate).
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import BF16, Tensors, attention_dims, ceil_div, fit_token_ids_at_top, pick

U8 = "U8"


def gpt_oss_layer_types(num_layers: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]


def gpt_oss(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> Layout:
    """gpt-oss-120b: 36 layers, 128 experts (top-4), MXFP4 expert weights.

    A scaled ``hidden_size`` is rounded up to a multiple of 32 (the MXFP4 block size)."""
    L = pick(num_layers, 36)
    E = pick(num_experts, 128)
    H = 2880 if hidden_size is None else ceil_div(hidden_size, 32) * 32
    V = pick(vocab_size, 201088)
    inter = 2880 if H == 2880 else H  # intermediate_size == hidden_size in the release
    heads, kv, hd = attention_dims(H, 2880, 64, 8, 64, implicit=False)
    if H % 32 or inter % 32:
        raise ValueError("gpt-oss MXFP4 layouts need hidden and intermediate sizes divisible by 32")

    t = Tensors()
    for i in range(L):
        q = f"model.layers.{i}."
        t.append((q + "self_attn.sinks", BF16, (heads,)))
        t.attention(q, H, heads, kv, hd, qkv_bias=True, o_bias=True)
        t += [
            (q + "mlp.router.weight", BF16, (E, H)),
            (q + "mlp.router.bias", BF16, (E,)),
            (q + "mlp.experts.gate_up_proj_blocks", U8, (E, 2 * inter, H // 32, 16)),
            (q + "mlp.experts.gate_up_proj_scales", U8, (E, 2 * inter, H // 32)),
            (q + "mlp.experts.gate_up_proj_bias", BF16, (E, 2 * inter)),
            (q + "mlp.experts.down_proj_blocks", U8, (E, H, inter // 32, 16)),
            (q + "mlp.experts.down_proj_scales", U8, (E, H, inter // 32)),
            (q + "mlp.experts.down_proj_bias", BF16, (E, H)),
            (q + "input_layernorm.weight", BF16, (H,)),
            (q + "post_attention_layernorm.weight", BF16, (H,)),
        ]
    t += [
        ("model.embed_tokens.weight", BF16, (V, H)),
        ("model.norm.weight", BF16, (H,)),
        ("lm_head.weight", BF16, (V, H)),
    ]

    config = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "experts_per_token": min(4, E),
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": H,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": gpt_oss_layer_types(L),
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": heads,
        "num_experts_per_tok": min(4, E),
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "num_local_experts": E,
        "output_router_logits": False,
        "pad_token_id": 199999,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("gpt-oss-120b", config, list(t))


LAYOUTS = {"gpt_oss": gpt_oss}
