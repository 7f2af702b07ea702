"""Qwen3-Next (``Qwen3NextForCausalLM``): hybrid Gated-DeltaNet / gated full attention, every
layer MoE with a shared expert, and an MTP block under the relative ``mtp.*`` prefix."""

from __future__ import annotations

from ..checkpoint import Layout, TensorSpec
from .common import fit_token_ids, heads_for, kv_heads_for, pick, scaled, set_existing
from .deepseek import PLAIN_BF16
from .qwen import qwen_attention, qwen_moe


def _qwen3_next_config() -> dict:
    """Qwen/Qwen3-Next-80B-A3B-Instruct ``config.json`` (no ``layer_types``: the layer kinds come
    from ``full_attention_interval``; no ``num_nextn_predict_layers``: vLLM assumes one MTP layer)."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_next",
        "moe_intermediate_size": 512,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def is_full_attention(idx: int, interval: int) -> bool:
    """transformers' default when ``layer_types`` is absent: ``(i + 1) % interval == 0``."""
    return (idx + 1) % interval == 0


def gated_deltanet(p: str, *, hidden: int, k_heads: int, k_dim: int, v_heads: int, v_dim: int,
                   conv_kernel: int, a_log_dtype: str = "F32") -> list[TensorSpec]:
    """``{p}linear_attn.*`` of a Gated DeltaNet layer as the Qwen3-Next release stores it:
    ``in_proj_qkvz`` ``[2*Kd + 2*Vd, hidden]``, ``in_proj_ba`` ``[2*v_heads, hidden]``, depthwise
    ``conv1d`` ``[2*Kd + Vd, 1, kernel]``, per-value-head ``A_log`` / ``dt_bias``, the gated
    RMSNorm ``norm`` over one value head and ``out_proj`` ``[hidden, Vd]``."""
    a = p + "linear_attn."
    key_dim, value_dim = k_heads * k_dim, v_heads * v_dim
    return [
        (a + "in_proj_qkvz.weight", "BF16", (2 * key_dim + 2 * value_dim, hidden)),
        (a + "in_proj_ba.weight", "BF16", (2 * v_heads, hidden)),
        (a + "conv1d.weight", "BF16", (2 * key_dim + value_dim, 1, conv_kernel)),
        (a + "A_log", a_log_dtype, (v_heads,)),
        (a + "dt_bias", "BF16", (v_heads,)),
        (a + "norm.weight", "BF16", (v_dim,)),
        (a + "out_proj.weight", "BF16", (hidden, value_dim)),
    ]


def qwen3_next(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
               moe_intermediate_size=None, shared_expert_intermediate_size=None, vocab_size=None,
               num_attention_heads=None, num_key_value_heads=None, head_dim=None,
               linear_num_key_heads=None, linear_num_value_heads=None, linear_key_head_dim=None,
               linear_value_head_dim=None, full_attention_interval=None, mtp_layers: int = 1,
               a_log_dtype: str = "F32") -> Layout:
    """Qwen3-Next-80B-A3B: 48 layers, ``full_attention_interval 4`` (layers 3, 7, ..., 47 full
    attention, the rest Gated DeltaNet), gated full attention (``q_proj`` 2 x heads x 256) with
    q/k norm, every layer MoE: 512 experts top-10 + ``shared_expert`` + ``shared_expert_gate``.
    MTP under ``mtp.``: ``fc`` ``[hidden, 2*hidden]``, ``pre_fc_norm_embedding``,
    ``pre_fc_norm_hidden``, ``layers.{k}`` (full attention + MoE), ``norm``. 41 shards."""
    cfg = _qwen3_next_config()
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    experts = pick(num_experts, cfg["num_experts"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    kv = pick(num_key_value_heads, kv_heads_for(heads, cfg["num_key_value_heads"]))
    hd = pick(head_dim, cfg["head_dim"])
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    moe_inter = pick(moe_intermediate_size, scaled(cfg["moe_intermediate_size"], hidden, full_hidden, 64))
    shared = pick(shared_expert_intermediate_size,
                  scaled(cfg["shared_expert_intermediate_size"], hidden, full_hidden, 64))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    kh = pick(linear_num_key_heads, scaled(cfg["linear_num_key_heads"], hidden, full_hidden, 1))
    # Value heads are a multiple of key heads (grouped value heads): keep the release's ratio.
    vh = pick(linear_num_value_heads, kh * cfg["linear_num_value_heads"] // cfg["linear_num_key_heads"])
    kd = pick(linear_key_head_dim, cfg["linear_key_head_dim"])
    vd = pick(linear_value_head_dim, cfg["linear_value_head_dim"])
    interval = pick(full_attention_interval, cfg["full_attention_interval"])
    set_existing(cfg, hidden_size=hidden, num_hidden_layers=layers, num_experts=experts,
                 num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd,
                 intermediate_size=inter, moe_intermediate_size=moe_inter,
                 shared_expert_intermediate_size=shared, vocab_size=vocab,
                 linear_num_key_heads=kh, linear_num_value_heads=vh, linear_key_head_dim=kd,
                 linear_value_head_dim=vd, full_attention_interval=interval,
                 num_experts_per_tok=min(cfg["num_experts_per_tok"], experts))
    conv_kernel = cfg["linear_conv_kernel_dim"]

    def block(p: str, full: bool) -> list[TensorSpec]:
        t: list[TensorSpec] = [(p + "input_layernorm.weight", "BF16", (hidden,))]
        if full:
            t += qwen_attention(p, hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, lin=PLAIN_BF16,
                                bias=False, qk_norm=True, norm_dtype="BF16", q_gate=True)
        else:
            t += gated_deltanet(p, hidden=hidden, k_heads=kh, k_dim=kd, v_heads=vh, v_dim=vd,
                                conv_kernel=conv_kernel, a_log_dtype=a_log_dtype)
        t.append((p + "post_attention_layernorm.weight", "BF16", (hidden,)))
        t += qwen_moe(p, hidden=hidden, experts=experts, moe_inter=moe_inter, shared_inter=shared,
                      lin=PLAIN_BF16)
        return t

    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (vocab, hidden))]
    for i in range(layers):
        t += block(f"model.layers.{i}.", is_full_attention(i, interval))
    t.append(("model.norm.weight", "BF16", (hidden,)))
    t.append(("lm_head.weight", "BF16", (vocab, hidden)))
    if mtp_layers:
        t += [
            ("mtp.fc.weight", "BF16", (hidden, 2 * hidden)),
            ("mtp.pre_fc_norm_embedding.weight", "BF16", (hidden,)),
            ("mtp.pre_fc_norm_hidden.weight", "BF16", (hidden,)),
        ]
        for k in range(mtp_layers):
            t += block(f"mtp.layers.{k}.", True)
        t.append(("mtp.norm.weight", "BF16", (hidden,)))
    return Layout(name="qwen3_next", config=cfg, tensors=t, max_shard_bytes=4_000_000_000)


LAYOUTS = {"qwen3_next": qwen3_next}
