"""Qwen2 / Qwen2.5 / Qwen3 dense, Qwen2-MoE / Qwen3-MoE and Qwen2.5 AWQ layouts."""

from __future__ import annotations

from ..checkpoint import Layout, TensorSpec
from .common import fit_token_ids, heads_for, kv_heads_for, pick, scaled, set_existing
from .deepseek import PLAIN_BF16, LinearStore, gated_mlp


def qwen_attention(p: str, *, hidden: int, heads: int, kv_heads: int, head_dim: int,
                   lin: LinearStore, bias: bool, qk_norm: bool, norm_dtype: str,
                   q_gate: bool = False) -> list[TensorSpec]:
    """``{p}self_attn.*``. ``q_gate`` doubles ``q_proj`` (Qwen3-Next gated attention)."""
    a = p + "self_attn."
    t = lin(a + "q_proj", heads * head_dim * (2 if q_gate else 1), hidden, bias=bias)
    t += lin(a + "k_proj", kv_heads * head_dim, hidden, bias=bias)
    t += lin(a + "v_proj", kv_heads * head_dim, hidden, bias=bias)
    t += lin(a + "o_proj", hidden, heads * head_dim)
    if qk_norm:
        t.append((a + "q_norm.weight", norm_dtype, (head_dim,)))
        t.append((a + "k_norm.weight", norm_dtype, (head_dim,)))
    return t


def qwen_moe(p: str, *, hidden: int, experts: int, moe_inter: int, shared_inter: int,
             lin: LinearStore, gate_dtype: str = "BF16") -> list[TensorSpec]:
    """``{p}mlp.*`` of a Qwen MoE block: router ``gate``, ``experts.{e}``, and for Qwen2-MoE /
    Qwen3-Next a ``shared_expert`` with its sigmoid ``shared_expert_gate`` (``[1, hidden]``)."""
    m = p + "mlp."
    t: list[TensorSpec] = [(m + "gate.weight", gate_dtype, (experts, hidden))]
    for e in range(experts):
        t += gated_mlp(f"{m}experts.{e}.", hidden, moe_inter, lin)
    if shared_inter:
        t += gated_mlp(m + "shared_expert.", hidden, shared_inter, lin)
        t.append((m + "shared_expert_gate.weight", gate_dtype, (1, hidden)))
    return t


def _dense(name: str, cfg: dict, *, lin: LinearStore, dtype: str, bias: bool, qk_norm: bool,
           max_shard_bytes: int, num_layers, hidden_size, intermediate_size, vocab_size,
           num_attention_heads, num_key_value_heads, head_dim, not_convert: tuple[str, ...] = ()
           ) -> Layout:
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    kv = pick(num_key_value_heads, kv_heads_for(heads, cfg["num_key_value_heads"]))
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    if "head_dim" in cfg:
        hd = pick(head_dim, cfg["head_dim"])
        cfg["head_dim"] = hd
    else:  # Qwen2: head_dim is hidden_size / num_attention_heads
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not a multiple of {heads} heads")
        hd = hidden // heads
        if head_dim is not None and head_dim != hd:
            raise ValueError("Qwen2 configs have no head_dim; it is hidden_size // num_attention_heads")
    set_existing(cfg, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                 num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab)
    if "max_window_layers" in cfg and num_layers is not None and cfg["max_window_layers"] > layers:
        # The releases set max_window_layers == num_hidden_layers; keep that relation when scaled.
        cfg["max_window_layers"] = layers
    tied = cfg.get("tie_word_embeddings", False)
    t: list[TensorSpec] = [("model.embed_tokens.weight", dtype, (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", dtype, (hidden,)))
        t += qwen_attention(p, hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, lin=lin,
                            bias=bias, qk_norm=qk_norm, norm_dtype=dtype)
        t.append((p + "post_attention_layernorm.weight", dtype, (hidden,)))
        m = p + "mlp."
        for proj, out, in_ in (("gate_proj", inter, hidden), ("up_proj", inter, hidden),
                               ("down_proj", hidden, inter)):
            t += lin(m + proj, out, in_, quantized=(m + proj) not in not_convert)
    t.append(("model.norm.weight", dtype, (hidden,)))
    if not tied:
        t.append(("lm_head.weight", dtype, (vocab, hidden)))
    return Layout(name=name, config=cfg, tensors=t, max_shard_bytes=max_shard_bytes)


# ---------------------------------------------------------------------------------------------
# Released configs
# ---------------------------------------------------------------------------------------------


def _qwen25_7b_config() -> dict:
    """Qwen/Qwen2.5-7B-Instruct ``config.json``."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 3584,
        "initializer_range": 0.02,
        "intermediate_size": 18944,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "model_type": "qwen2",
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 152064,
    }


def _qwen3_config(*, hidden: int, inter: int, layers: int, heads: int, kv: int, tied: bool,
                  max_window_layers: int) -> dict:
    """Qwen/Qwen3-* dense ``config.json`` (same key set for every size)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 40960,
        "max_window_layers": max_window_layers,
        "model_type": "qwen3",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def _qwen15_moe_config() -> dict:
    """Qwen/Qwen1.5-MoE-A2.7B-Chat ``config.json`` (no ``mlp_only_layers`` key in the release;
    transformers defaults it to ``[]``)."""
    return {
        "architectures": ["Qwen2MoeForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 5632,
        "max_position_embeddings": 32768,
        "max_window_layers": 21,
        "model_type": "qwen2_moe",
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "num_key_value_heads": 16,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.0.dev0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts_per_tok": 4,
        "num_experts": 60,
        "norm_topk_prob": False,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    }


def _qwen3_30b_a3b_config() -> dict:
    """Qwen/Qwen3-30B-A3B ``config.json``."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "max_window_layers": 48,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "num_attention_heads": 32,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def _qwen25_7b_awq_config() -> dict:
    """Qwen/Qwen2.5-7B-Instruct-AWQ ``config.json`` (float16; ``modules_to_not_convert`` is
    ``null`` in the release, filled in by :func:`qwen2_5_awq`)."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 3584,
        "initializer_range": 0.02,
        "intermediate_size": 18944,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "model_type": "qwen2",
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "quantization_config": {
            "bits": 4,
            "group_size": 128,
            "modules_to_not_convert": None,
            "quant_method": "awq",
            "version": "gemm",
            "zero_point": True,
        },
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.41.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 152064,
    }


# ---------------------------------------------------------------------------------------------
# Public layouts
# ---------------------------------------------------------------------------------------------


def qwen2(*, num_layers=None, hidden_size=None, intermediate_size=None, vocab_size=None,
          num_attention_heads=None, num_key_value_heads=None, head_dim=None, num_experts=None) -> Layout:
    """Qwen2.5-7B-Instruct: 28 layers, GQA 28/4, q/k/v bias, BF16, untied head,
    ``use_sliding_window: false`` with ``max_window_layers 28``. 339 tensors, 4 shards.
    ``num_experts`` is accepted for a uniform signature and must be None."""
    if num_experts is not None:
        raise ValueError("qwen2 is dense")
    return _dense("qwen2", _qwen25_7b_config(), lin=PLAIN_BF16, dtype="BF16", bias=True, qk_norm=False,
                  max_shard_bytes=4_000_000_000, num_layers=num_layers, hidden_size=hidden_size,
                  intermediate_size=intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                  head_dim=head_dim)


def qwen3(*, num_layers=None, hidden_size=None, intermediate_size=None, vocab_size=None,
          num_attention_heads=None, num_key_value_heads=None, head_dim=None, num_experts=None) -> Layout:
    """Qwen3-8B: 36 layers, GQA 32/8 of head_dim 128, per-head q_norm/k_norm, no bias, BF16,
    untied. 399 tensors, 5 shards."""
    if num_experts is not None:
        raise ValueError("qwen3 is dense")
    cfg = _qwen3_config(hidden=4096, inter=12288, layers=36, heads=32, kv=8, tied=False,
                        max_window_layers=36)
    return _dense("qwen3", cfg, lin=PLAIN_BF16, dtype="BF16", bias=False, qk_norm=True,
                  max_shard_bytes=4_000_000_000, num_layers=num_layers, hidden_size=hidden_size,
                  intermediate_size=intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                  head_dim=head_dim)


def qwen3_small_tied(*, num_layers=None, hidden_size=None, intermediate_size=None, vocab_size=None,
                     num_attention_heads=None, num_key_value_heads=None, head_dim=None,
                     num_experts=None) -> Layout:
    """Qwen3-0.6B: 28 layers, hidden 1024, GQA 16/8 of head_dim 128 (q_proj wider than hidden),
    ``tie_word_embeddings: true`` and no ``lm_head.weight`` tensor; one ``model.safetensors``."""
    if num_experts is not None:
        raise ValueError("qwen3 is dense")
    cfg = _qwen3_config(hidden=1024, inter=3072, layers=28, heads=16, kv=8, tied=True,
                        max_window_layers=28)
    return _dense("qwen3_small_tied", cfg, lin=PLAIN_BF16, dtype="BF16", bias=False, qk_norm=True,
                  max_shard_bytes=5_000_000_000, num_layers=num_layers, hidden_size=hidden_size,
                  intermediate_size=intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                  head_dim=head_dim)


def _moe(name: str, cfg: dict, *, bias: bool, qk_norm: bool, max_shard_bytes: int, num_layers,
         num_experts, hidden_size, intermediate_size, moe_intermediate_size,
         shared_expert_intermediate_size, vocab_size, num_attention_heads, num_key_value_heads,
         head_dim, mlp_only_layers, decoder_sparse_step) -> Layout:
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    experts = pick(num_experts, cfg["num_experts"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    kv = pick(num_key_value_heads, kv_heads_for(heads, cfg["num_key_value_heads"]))
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    moe_inter = pick(moe_intermediate_size, scaled(cfg["moe_intermediate_size"], hidden, full_hidden, 64))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    step = pick(decoder_sparse_step, cfg["decoder_sparse_step"])
    if "head_dim" in cfg:
        hd = pick(head_dim, cfg["head_dim"])
        cfg["head_dim"] = hd
    else:
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not a multiple of {heads} heads")
        hd = hidden // heads
    shared = cfg.get("shared_expert_intermediate_size", 0)
    if shared:
        shared = pick(shared_expert_intermediate_size, scaled(shared, hidden, full_hidden, 128))
        cfg["shared_expert_intermediate_size"] = shared
    elif shared_expert_intermediate_size:
        raise ValueError(f"{name} has no shared expert")
    top_k = min(cfg["num_experts_per_tok"], experts)
    set_existing(cfg, hidden_size=hidden, num_hidden_layers=layers, num_experts=experts,
                 num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
                 moe_intermediate_size=moe_inter, vocab_size=vocab, decoder_sparse_step=step,
                 num_experts_per_tok=top_k)
    if "max_window_layers" in cfg and num_layers is not None and cfg["max_window_layers"] > layers:
        cfg["max_window_layers"] = layers
    dense_layers = list(cfg.get("mlp_only_layers", [])) if mlp_only_layers is None else list(mlp_only_layers)
    if mlp_only_layers is not None:
        cfg["mlp_only_layers"] = dense_layers  # Qwen1.5-MoE's release has no such key
    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", "BF16", (hidden,)))
        t += qwen_attention(p, hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, lin=PLAIN_BF16,
                            bias=bias, qk_norm=qk_norm, norm_dtype="BF16")
        t.append((p + "post_attention_layernorm.weight", "BF16", (hidden,)))
        sparse = i not in dense_layers and experts > 0 and (i + 1) % step == 0
        if sparse:
            t += qwen_moe(p, hidden=hidden, experts=experts, moe_inter=moe_inter, shared_inter=shared,
                          lin=PLAIN_BF16)
        else:
            t += gated_mlp(p + "mlp.", hidden, inter, PLAIN_BF16)
    t.append(("model.norm.weight", "BF16", (hidden,)))
    t.append(("lm_head.weight", "BF16", (vocab, hidden)))
    return Layout(name=name, config=cfg, tensors=t, max_shard_bytes=max_shard_bytes)


def qwen2_moe(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
              moe_intermediate_size=None, shared_expert_intermediate_size=None, vocab_size=None,
              num_attention_heads=None, num_key_value_heads=None, mlp_only_layers=None,
              decoder_sparse_step=None) -> Layout:
    """Qwen1.5-MoE-A2.7B(-Chat): 24 layers, all sparse (``decoder_sparse_step 1``), 60 experts
    top-4 plus a ``shared_expert`` (5632) gated by ``shared_expert_gate``, q/k/v bias, BF16.
    ``mlp_only_layers`` (absent from the release config) is written only when given; listed
    layers get a dense ``mlp.{gate,up,down}_proj`` of ``intermediate_size``."""
    return _moe("qwen2_moe", _qwen15_moe_config(), bias=True, qk_norm=False,
                max_shard_bytes=4_000_000_000, num_layers=num_layers, num_experts=num_experts,
                hidden_size=hidden_size, intermediate_size=intermediate_size,
                moe_intermediate_size=moe_intermediate_size,
                shared_expert_intermediate_size=shared_expert_intermediate_size, vocab_size=vocab_size,
                num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                head_dim=None, mlp_only_layers=mlp_only_layers, decoder_sparse_step=decoder_sparse_step)


def qwen3_moe(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
              moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
              num_key_value_heads=None, head_dim=None, mlp_only_layers=None,
              decoder_sparse_step=None) -> Layout:
    """Qwen3-30B-A3B: 48 layers, 128 experts top-8, no shared expert, GQA 32/4 with q/k norm,
    ``mlp_only_layers: []``, BF16. 18,867 tensors, 16 shards."""
    return _moe("qwen3_moe", _qwen3_30b_a3b_config(), bias=False, qk_norm=True,
                max_shard_bytes=4_000_000_000, num_layers=num_layers, num_experts=num_experts,
                hidden_size=hidden_size, intermediate_size=intermediate_size,
                moe_intermediate_size=moe_intermediate_size, shared_expert_intermediate_size=None,
                vocab_size=vocab_size, num_attention_heads=num_attention_heads,
                num_key_value_heads=num_key_value_heads, head_dim=head_dim,
                mlp_only_layers=mlp_only_layers, decoder_sparse_step=decoder_sparse_step)


def qwen2_5_awq(*, num_layers=None, hidden_size=None, intermediate_size=None, vocab_size=None,
                num_attention_heads=None, num_key_value_heads=None, num_experts=None,
                not_convert: tuple[str, ...] = ("model.layers.0.mlp.down_proj",)) -> Layout:
    """Qwen2.5-7B-Instruct-AWQ (AutoAWQ GEMM, 4 bit, group 128, zero point): every decoder linear
    stored as ``qweight`` I32 ``[in, out/8]``, ``qzeros`` I32 ``[in/128, out/8]``, ``scales`` F16
    ``[in/128, out]`` (+ F16 ``bias`` on q/k/v); embeddings, norms and ``lm_head`` F16.

    The release's ``modules_to_not_convert`` is ``null``; here the MLP modules named in
    ``not_convert`` stay plain F16 ``weight`` tensors and are listed there, so the layout
    exercises the (substring-matched) AWQ skip list."""
    if num_experts is not None:
        raise ValueError("qwen2.5 is dense")
    cfg = _qwen25_7b_awq_config()
    cfg["quantization_config"]["modules_to_not_convert"] = list(not_convert) or None
    layers = pick(num_layers, cfg["num_hidden_layers"])
    for name in not_convert:
        parts = name.split(".")
        if (len(parts) != 5 or parts[:2] != ["model", "layers"] or parts[3] != "mlp"
                or not parts[2].isdigit() or int(parts[2]) >= layers):
            raise ValueError(f"not_convert entries must be model.layers.<i>.mlp.<proj> "
                             f"of an existing layer, got {name!r}")
    lin = LinearStore("awq", "F16", group_size=cfg["quantization_config"]["group_size"])
    return _dense("qwen2_5_awq", cfg, lin=lin, dtype="F16", bias=True, qk_norm=False,
                  max_shard_bytes=4_000_000_000, num_layers=num_layers, hidden_size=hidden_size,
                  intermediate_size=intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                  head_dim=None, not_convert=tuple(not_convert))


LAYOUTS = {
    "qwen2": qwen2,
    "qwen3": qwen3,
    "qwen3_small_tied": qwen3_small_tied,
    "qwen2_moe": qwen2_moe,
    "qwen3_moe": qwen3_moe,
    "qwen2_5_awq": qwen2_5_awq,
}
