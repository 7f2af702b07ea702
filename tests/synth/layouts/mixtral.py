"""Mixtral 8x7B (``MixtralForCausalLM``).

Source checked: Mixtral-8x7B-v0.1 ``config.json`` as quoted verbatim in several public
copies (TensorRT-LLM unit test, llm.c port, blog posts): every layer MoE, 8 experts with
separate ``w1``/``w2``/``w3`` per expert, ``sliding_window`` null.
"""

from __future__ import annotations

from ..checkpoint import Layout
from .common import BF16, Tensors, attention_dims, fit_token_ids_at_top, pick, width


def mixtral(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> Layout:
    """Mixtral-8x7B-v0.1: 32 layers, each ``block_sparse_moe.{gate, experts.{e}.w1/w2/w3}``."""
    L = pick(num_layers, 32)
    E = pick(num_experts, 8)
    H = pick(hidden_size, 4096)
    V = pick(vocab_size, 32000)
    inter = width(14336, H, 4096)
    heads, kv, hd = attention_dims(H, 4096, 32, 8, 128, implicit=True)

    tensors = Tensors([("model.embed_tokens.weight", BF16, (V, H))])
    for i in range(L):
        q = f"model.layers.{i}."
        tensors.attention(q, H, heads, kv, hd)
        tensors.append((q + "block_sparse_moe.gate.weight", BF16, (E, H)))
        for e in range(E):
            x = f"{q}block_sparse_moe.experts.{e}."
            tensors += [
                (x + "w1.weight", BF16, (inter, H)),
                (x + "w2.weight", BF16, (H, inter)),
                (x + "w3.weight", BF16, (inter, H)),
            ]
        tensors += [
            (q + "input_layernorm.weight", BF16, (H,)),
            (q + "post_attention_layernorm.weight", BF16, (H,)),
        ]
    tensors += [("model.norm.weight", BF16, (H,)), ("lm_head.weight", BF16, (V, H))]

    config = {
        "architectures": ["MixtralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 32768,
        "model_type": "mixtral",
        "num_attention_heads": heads,
        "num_experts_per_tok": min(2, E),
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "num_local_experts": E,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.36.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if vocab_size is not None:
        fit_token_ids_at_top(config, V)
    return Layout("Mixtral-8x7B-v0.1", config, list(tensors))


LAYOUTS = {"mixtral": mixtral}
