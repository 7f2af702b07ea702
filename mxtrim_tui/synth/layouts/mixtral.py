"""Mixtral 8x7B (``MixtralForCausalLM``).

Source checked: Mixtral-8x7B-v0.1 ``config.json`` as quoted verbatim in several public
copies (TensorRT-LLM unit test, llm.c port, blog posts): every layer MoE, 8 experts with
separate ``w1``/``w2``/``w3`` per expert, ``sliding_window`` null.
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


def _attention(hidden: int, real_hidden: int, heads: int, kv: int, head_dim: int):
    """(heads, kv_heads, head_dim) for a scaled hidden size; head_dim = hidden // heads."""
    if hidden == real_hidden:
        return heads, kv, head_dim
    hd = max(8, min(head_dim, hidden // 4))
    n = max(1, hidden // hd)
    while hidden % n:
        n -= 1
    k = max(1, n * kv // heads)
    while n % k:
        k -= 1
    return n, k, hidden // n


def mixtral(
    *,
    num_layers: int | None = None,
    num_experts: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> Layout:
    """Mixtral-8x7B-v0.1: 32 layers, each ``block_sparse_moe.{gate, experts.{e}.w1/w2/w3}``."""
    L = 32 if num_layers is None else num_layers
    E = 8 if num_experts is None else num_experts
    H = 4096 if hidden_size is None else hidden_size
    V = 32000 if vocab_size is None else vocab_size
    inter = _width(14336, H, 4096)
    heads, kv, hd = _attention(H, 4096, 32, 8, 128)

    tensors = [("model.embed_tokens.weight", BF16, (V, H))]
    for i in range(L):
        q = f"model.layers.{i}."
        tensors += [
            (q + "self_attn.q_proj.weight", BF16, (heads * hd, H)),
            (q + "self_attn.k_proj.weight", BF16, (kv * hd, H)),
            (q + "self_attn.v_proj.weight", BF16, (kv * hd, H)),
            (q + "self_attn.o_proj.weight", BF16, (H, heads * hd)),
            (q + "block_sparse_moe.gate.weight", BF16, (E, H)),
        ]
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
        _fit_token_ids(config, V)
    return Layout("Mixtral-8x7B-v0.1", config, tensors)


LAYOUTS = {"mixtral": mixtral}
