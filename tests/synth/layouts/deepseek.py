"""DeepSeek-V2, DeepSeek-V3, DeepSeek-V3.2 and Kimi-K2 (MLA attention + DeepSeekMoE).

Full-size defaults mirror the released checkpoints (see each function for what was checked
against a real listing and what is assumed). Every function also takes keyword arguments that
shrink the model for fixtures with real bytes; shapes, FP8 block scales and the config are
recomputed together so a scaled layout stays self-consistent.

The building blocks here (how a linear is stored, the MLA block, the MoE block) are shared with
the GLM layouts, which use the same MLA stack for GLM-5.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checkpoint import Layout, TensorSpec
from .common import ceil_div, fit_token_ids, heads_for, pick, scaled, set_existing

# ---------------------------------------------------------------------------------------------
# Storage of one linear layer
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearStore:
    """How a checkpoint stores a ``nn.Linear``.

    ``kind``:
      * ``"plain"``: ``weight`` in ``dtype`` (and ``bias``);
      * ``"fp8_block"``: ``weight`` F8_E4M3 plus ``weight_scale_inv`` (``scale_dtype``) of shape
        ``ceil(out/block) x ceil(in/block)`` (DeepSeek / GLM official FP8);
      * ``"int8_channel"``: ``weight`` I8 plus ``weight_scale`` ``[out, 1]`` (compressed-tensors
        W8A8 int-quantized, channel strategy);
      * ``"awq"``: ``qweight`` I32 ``[in, out/8]``, ``qzeros`` I32 ``[in/g, out/8]``, ``scales``
        ``[in/g, out]`` in ``dtype`` (AutoAWQ GEMM, 4 bit).

    A module passed ``quantized=False`` is stored plain in ``dtype`` whatever the kind.
    """

    kind: str = "plain"
    dtype: str = "BF16"
    scale_dtype: str = "F32"
    block: int = 128
    group_size: int = 128

    def __call__(self, name: str, out: int, in_: int, *, bias: bool = False,
                 quantized: bool = True) -> list[TensorSpec]:
        kind = self.kind if quantized else "plain"
        specs: list[TensorSpec]
        if kind == "plain":
            specs = [(f"{name}.weight", self.dtype, (out, in_))]
        elif kind == "fp8_block":
            specs = [
                (f"{name}.weight", "F8_E4M3", (out, in_)),
                (f"{name}.weight_scale_inv", self.scale_dtype,
                 (ceil_div(out, self.block), ceil_div(in_, self.block))),
            ]
        elif kind == "int8_channel":
            specs = [
                (f"{name}.weight", "I8", (out, in_)),
                (f"{name}.weight_scale", self.scale_dtype, (out, 1)),
            ]
        elif kind == "awq":
            if out % 8 or in_ % self.group_size:
                raise ValueError(f"{name}: AWQ needs out % 8 == 0 and in % {self.group_size} == 0, "
                                 f"got out={out}, in={in_}")
            groups = in_ // self.group_size
            specs = [
                (f"{name}.qweight", "I32", (in_, out // 8)),
                (f"{name}.qzeros", "I32", (groups, out // 8)),
                (f"{name}.scales", self.dtype, (groups, out)),
            ]
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown linear storage {self.kind!r}")
        if bias:
            specs.append((f"{name}.bias", self.dtype, (out,)))
        return specs


PLAIN_BF16 = LinearStore("plain", "BF16")
FP8_BLOCK = LinearStore("fp8_block", "BF16", "F32", 128)


# ---------------------------------------------------------------------------------------------
# Scaling helpers (the generic ones, shared with the other families, live in .common)
# ---------------------------------------------------------------------------------------------


def router_groups(num_experts: int, n_group: int, topk_group: int, top_k: int) -> tuple[int, int, int]:
    """Keep grouped routing valid when the expert count shrinks: ``n_group`` divides the experts,
    ``topk_group <= n_group`` and ``top_k`` fits in the selected groups."""
    g = max(d for d in range(1, min(n_group, num_experts) + 1) if num_experts % d == 0)
    tg = min(topk_group, g)
    k = min(top_k, tg * (num_experts // g))
    return g, tg, k


# ---------------------------------------------------------------------------------------------
# MLA stack and DeepSeekMoE
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MlaDims:
    hidden: int
    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int
    v_head: int


@dataclass(frozen=True)
class IndexerDims:
    heads: int
    head_dim: int


def mla_attention(p: str, d: MlaDims, lin: LinearStore, norm_dtype: str,
                  indexer: IndexerDims | None = None, indexer_norm_dtype: str = "F32") -> list[TensorSpec]:
    """``{p}self_attn.*`` of one MLA layer (DeepSeek-V2/V3, Kimi-K2, GLM-5), with the DSA
    lightning indexer when ``indexer`` is given. The indexer's ``weights_proj`` is never
    quantized in these releases (BF16 next to FP8/I8 ``wq_b``/``wk``)."""
    a = f"{p}self_attn."
    qk = d.qk_nope + d.qk_rope
    t: list[TensorSpec] = []
    if d.q_lora_rank:
        t += lin(a + "q_a_proj", d.q_lora_rank, d.hidden)
        t.append((a + "q_a_layernorm.weight", norm_dtype, (d.q_lora_rank,)))
        t += lin(a + "q_b_proj", d.heads * qk, d.q_lora_rank)
    else:
        t += lin(a + "q_proj", d.heads * qk, d.hidden)
    t += lin(a + "kv_a_proj_with_mqa", d.kv_lora_rank + d.qk_rope, d.hidden)
    t.append((a + "kv_a_layernorm.weight", norm_dtype, (d.kv_lora_rank,)))
    t += lin(a + "kv_b_proj", d.heads * (d.qk_nope + d.v_head), d.kv_lora_rank)
    t += lin(a + "o_proj", d.hidden, d.heads * d.v_head)
    if indexer is not None:
        i = a + "indexer."
        q_in = d.q_lora_rank or d.hidden
        t += lin(i + "wq_b", indexer.heads * indexer.head_dim, q_in)
        t += lin(i + "wk", indexer.head_dim, d.hidden)
        t.append((i + "k_norm.weight", indexer_norm_dtype, (indexer.head_dim,)))
        t.append((i + "k_norm.bias", indexer_norm_dtype, (indexer.head_dim,)))
        t += lin(i + "weights_proj", indexer.heads, d.hidden, quantized=False)
    return t


def gated_mlp(prefix: str, hidden: int, inter: int, lin: LinearStore, *,
              quantized: bool = True) -> list[TensorSpec]:
    """``{prefix}{gate,up,down}_proj`` of a SwiGLU MLP."""
    return (lin(prefix + "gate_proj", inter, hidden, quantized=quantized)
            + lin(prefix + "up_proj", inter, hidden, quantized=quantized)
            + lin(prefix + "down_proj", hidden, inter, quantized=quantized))


def deepseek_moe(p: str, hidden: int, num_experts: int, moe_inter: int, shared_inter: int,
                 lin: LinearStore, *, gate_dtype: str = "BF16",
                 bias_dtype: str | None = "F32") -> list[TensorSpec]:
    """``{p}mlp.*`` of a DeepSeekMoE block: router (``gate.weight``, and
    ``gate.e_score_correction_bias`` for noaux_tc routing when ``bias_dtype`` is set), routed
    experts, shared experts (``shared_inter = n_shared_experts * moe_intermediate_size``)."""
    m = f"{p}mlp."
    # The router is never quantized (BF16 weight), whatever the experts are.
    t: list[TensorSpec] = [(m + "gate.weight", gate_dtype, (num_experts, hidden))]
    if bias_dtype:
        t.append((m + "gate.e_score_correction_bias", bias_dtype, (num_experts,)))
    for e in range(num_experts):
        t += gated_mlp(f"{m}experts.{e}.", hidden, moe_inter, lin)
    if shared_inter:
        t += gated_mlp(m + "shared_experts.", hidden, shared_inter, lin)
    return t


def mtp_head_tensors(p: str, hidden: int, vocab: int, *, norm_dtype: str, embed_dtype: str,
                     eh_proj_dtype: str, with_embed: bool = True,
                     with_head: bool = True) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """DeepSeek/GLM MTP extras at ``model.layers.{N}.``: returned as (before the decoder block,
    after it). ``eh_proj`` maps ``[enorm(emb); hnorm(h)]`` (2*hidden) back to hidden."""
    before: list[TensorSpec] = []
    if with_embed:
        before.append((p + "embed_tokens.weight", embed_dtype, (vocab, hidden)))
    before += [
        (p + "enorm.weight", norm_dtype, (hidden,)),
        (p + "hnorm.weight", norm_dtype, (hidden,)),
        (p + "eh_proj.weight", eh_proj_dtype, (hidden, 2 * hidden)),
    ]
    after: list[TensorSpec] = []
    if with_head:
        after.append((p + "shared_head.head.weight", embed_dtype, (vocab, hidden)))
    after.append((p + "shared_head.norm.weight", norm_dtype, (hidden,)))
    return before, after


@dataclass(frozen=True)
class DeepseekGeometry:
    """Everything that decides a DeepSeek-style checkpoint's tensor list."""

    mla: MlaDims
    num_layers: int
    first_dense: int
    moe_layer_freq: int
    num_experts: int
    intermediate: int
    moe_intermediate: int
    shared_intermediate: int
    vocab: int
    num_mtp: int
    lin: LinearStore
    norm_dtype: str
    embed_dtype: str = "BF16"
    bias_dtype: str | None = "F32"  # e_score_correction_bias; None for greedy routing (V2)
    indexer: IndexerDims | None = None
    indexer_norm_dtype: str = "F32"
    eh_proj_dtype: str = "BF16"


def is_moe_layer(g: DeepseekGeometry, idx: int) -> bool:
    return g.num_experts > 0 and idx >= g.first_dense and idx % g.moe_layer_freq == 0


def deepseek_decoder_layer(g: DeepseekGeometry, idx: int) -> list[TensorSpec]:
    p = f"model.layers.{idx}."
    h = g.mla.hidden
    t: list[TensorSpec] = [(p + "input_layernorm.weight", g.norm_dtype, (h,))]
    t += mla_attention(p, g.mla, g.lin, g.norm_dtype, g.indexer, g.indexer_norm_dtype)
    t.append((p + "post_attention_layernorm.weight", g.norm_dtype, (h,)))
    # MTP layers are always MoE layers (a full copy of a backbone MoE block).
    if idx >= g.num_layers or is_moe_layer(g, idx):
        t += deepseek_moe(p, h, g.num_experts, g.moe_intermediate, g.shared_intermediate, g.lin,
                          bias_dtype=g.bias_dtype)
    else:
        t += gated_mlp(p + "mlp.", h, g.intermediate, g.lin)
    return t


def deepseek_tensors(g: DeepseekGeometry) -> list[TensorSpec]:
    """Checkpoint order of the official releases: embeddings, backbone layers, final norm and
    head, then the MTP layers (the V3/V3.2 releases put ``model.layers.61`` in the last shards)."""
    h = g.mla.hidden
    t: list[TensorSpec] = [("model.embed_tokens.weight", g.embed_dtype, (g.vocab, h))]
    for i in range(g.num_layers):
        t += deepseek_decoder_layer(g, i)
    t.append(("model.norm.weight", g.norm_dtype, (h,)))
    t.append(("lm_head.weight", g.embed_dtype, (g.vocab, h)))
    for k in range(g.num_mtp):
        idx = g.num_layers + k
        before, after = mtp_head_tensors(f"model.layers.{idx}.", h, g.vocab, norm_dtype=g.norm_dtype,
                                         embed_dtype=g.embed_dtype, eh_proj_dtype=g.eh_proj_dtype)
        t += before + deepseek_decoder_layer(g, idx) + after
    return t


# ---------------------------------------------------------------------------------------------
# Released configs
# ---------------------------------------------------------------------------------------------

_YARN_40 = {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}

_AUTO_MAP_V3 = {
    "AutoConfig": "configuration_deepseek.DeepseekV3Config",
    "AutoModel": "modeling_deepseek.DeepseekV3Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
}


def _v3_config() -> dict:
    """deepseek-ai/DeepSeek-V3 ``config.json`` (key order as released)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": dict(_AUTO_MAP_V3),
        "aux_loss_alpha": 0.001,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "pretraining_tp": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(_YARN_40),
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }


def _v32_config() -> dict:
    """deepseek-ai/DeepSeek-V3.2 ``config.json`` (key order as released; no auto_map)."""
    return {
        "architectures": ["DeepseekV32ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "index_head_dim": 128,
        "index_n_heads": 64,
        "index_topk": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v32",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(_YARN_40),
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.44.2",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }


def _v2_config() -> dict:
    """deepseek-ai/DeepSeek-V2 (236B) ``config.json``."""
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_deepseek.DeepseekV2Config",
            "AutoModel": "modeling_deepseek.DeepseekV2Model",
            "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM",
        },
        "aux_loss_alpha": 0.001,
        "bos_token_id": 100000,
        "eos_token_id": 100001,
        "ep_size": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v2",
        "moe_intermediate_size": 1536,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "norm_topk_prob": False,
        "num_attention_heads": 128,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 60,
        "num_key_value_heads": 128,
        "pretraining_tp": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(_YARN_40),
        "rope_theta": 10000,
        "routed_scaling_factor": 16.0,
        "scoring_func": "softmax",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 3,
        "topk_method": "group_limited_greedy",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.39.3",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 102400,
    }


def _kimi_k2_config() -> dict:
    """moonshotai/Kimi-K2-Instruct ``config.json``."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": dict(_AUTO_MAP_V3),
        "aux_loss_alpha": 0.001,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "ep_size": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 131072,
        "model_type": "kimi_k2",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 384,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 64,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 64,
        "num_nextn_predict_layers": 0,
        "pretraining_tp": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 50000.0,
        "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.48.3",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 163840,
    }


# ---------------------------------------------------------------------------------------------
# Shared builder
# ---------------------------------------------------------------------------------------------


def _build(name: str, config: dict, *, lin: LinearStore, norm_dtype: str, bias_dtype: str | None,
           max_shard_bytes: int, num_layers, num_experts, hidden_size, intermediate_size,
           moe_intermediate_size, vocab_size, num_attention_heads, q_lora_rank, kv_lora_rank,
           first_k_dense_replace, num_nextn_predict_layers, index_n_heads=None,
           index_head_dim=None) -> Layout:
    cfg = config
    full_hidden = cfg["hidden_size"]
    hidden = pick(hidden_size, full_hidden)
    layers = pick(num_layers, cfg["num_hidden_layers"])
    experts = pick(num_experts, cfg["n_routed_experts"])
    heads = pick(num_attention_heads, heads_for(hidden, cfg["num_attention_heads"], full_hidden))
    inter = pick(intermediate_size, scaled(cfg["intermediate_size"], hidden, full_hidden, 128))
    moe_inter = pick(moe_intermediate_size, scaled(cfg["moe_intermediate_size"], hidden, full_hidden, 128))
    q_rank = cfg["q_lora_rank"]
    q_rank = pick(q_lora_rank, scaled(q_rank, hidden, full_hidden, 64) if q_rank else q_rank)
    kv_rank = pick(kv_lora_rank, scaled(cfg["kv_lora_rank"], hidden, full_hidden, 64))
    vocab = pick(vocab_size, cfg["vocab_size"])
    fit_token_ids(cfg, cfg["vocab_size"], vocab)
    first_dense = min(pick(first_k_dense_replace, cfg["first_k_dense_replace"]), layers)
    num_mtp = pick(num_nextn_predict_layers, cfg.get("num_nextn_predict_layers", 0))
    n_group, topk_group, top_k = router_groups(experts, cfg["n_group"], cfg["topk_group"],
                                               cfg["num_experts_per_tok"])
    set_existing(cfg, hidden_size=hidden, num_hidden_layers=layers, n_routed_experts=experts,
                 num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=inter,
                 moe_intermediate_size=moe_inter, q_lora_rank=q_rank, kv_lora_rank=kv_rank,
                 vocab_size=vocab, first_k_dense_replace=first_dense, n_group=n_group,
                 topk_group=topk_group, num_experts_per_tok=top_k)
    if "num_nextn_predict_layers" in cfg:
        cfg["num_nextn_predict_layers"] = num_mtp
    elif num_mtp:
        raise ValueError(f"{name} has no MTP layers")
    indexer = None
    if "index_topk" in cfg:
        ih = pick(index_n_heads, scaled(cfg["index_n_heads"], hidden, full_hidden, 1))
        ihd = pick(index_head_dim, cfg["index_head_dim"])
        set_existing(cfg, index_n_heads=ih, index_head_dim=ihd)
        indexer = IndexerDims(ih, ihd)
    geom = DeepseekGeometry(
        mla=MlaDims(hidden, heads, q_rank, kv_rank, cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                    cfg["v_head_dim"]),
        num_layers=layers,
        first_dense=first_dense,
        moe_layer_freq=cfg["moe_layer_freq"],
        num_experts=experts,
        intermediate=inter,
        moe_intermediate=moe_inter,
        shared_intermediate=cfg["n_shared_experts"] * moe_inter,
        vocab=vocab,
        num_mtp=num_mtp,
        lin=lin,
        norm_dtype=norm_dtype,
        bias_dtype=bias_dtype,
        indexer=indexer,
    )
    return Layout(name=name, config=cfg, tensors=deepseek_tensors(geom), max_shard_bytes=max_shard_bytes)


# ---------------------------------------------------------------------------------------------
# Public layouts
# ---------------------------------------------------------------------------------------------


def deepseek_v2(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
                moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
                q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None) -> Layout:
    """DeepSeek-V2 (236B): 60 layers, layer 0 dense, 160 routed + 2 shared experts, MLA with
    q_lora_rank 1536, greedy group routing (no ``e_score_correction_bias``), all BF16, no MTP.
    Released as 55 shards of ~8.6 GB."""
    return _build("deepseek_v2", _v2_config(), lin=PLAIN_BF16, norm_dtype="BF16", bias_dtype=None,
                  max_shard_bytes=8_700_000_000, num_layers=num_layers, num_experts=num_experts,
                  hidden_size=hidden_size, intermediate_size=intermediate_size,
                  moe_intermediate_size=moe_intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, q_lora_rank=q_lora_rank,
                  kv_lora_rank=kv_lora_rank, first_k_dense_replace=first_k_dense_replace,
                  num_nextn_predict_layers=None)


def deepseek_v3(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
                moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
                q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None,
                num_nextn_predict_layers=None) -> Layout:
    """DeepSeek-V3 official FP8 release: 61 layers (0-2 dense), 256 routed + 1 shared experts,
    MTP layer ``model.layers.61`` (embed_tokens, enorm, hnorm, eh_proj, full MoE block,
    shared_head.{head,norm}). Every linear except the routers and ``eh_proj`` is F8_E4M3 with an
    F32 ``weight_scale_inv`` of ``ceil(out/128) x ceil(in/128)``; norms, embeddings, lm_head,
    router weights and ``eh_proj`` BF16, ``e_score_correction_bias`` F32. 91,991 tensors in 163
    shards."""
    return _build("deepseek_v3", _v3_config(), lin=FP8_BLOCK, norm_dtype="BF16", bias_dtype="F32",
                  max_shard_bytes=4_250_000_000, num_layers=num_layers, num_experts=num_experts,
                  hidden_size=hidden_size, intermediate_size=intermediate_size,
                  moe_intermediate_size=moe_intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, q_lora_rank=q_lora_rank,
                  kv_lora_rank=kv_lora_rank, first_k_dense_replace=first_k_dense_replace,
                  num_nextn_predict_layers=num_nextn_predict_layers)


def deepseek_v32(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
                 moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
                 q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None,
                 num_nextn_predict_layers=None, index_n_heads=None, index_head_dim=None) -> Layout:
    """DeepSeek-V3.2: V3 plus the DSA indexer on every layer (MTP included):
    ``self_attn.indexer.{wq_b, wk}`` FP8 with scales, ``k_norm.{weight,bias}`` F32,
    ``weights_proj`` BF16. Unlike V3, every RMSNorm weight is F32 in this release.
    92,425 tensors in 163 shards."""
    return _build("deepseek_v32", _v32_config(), lin=FP8_BLOCK, norm_dtype="F32", bias_dtype="F32",
                  max_shard_bytes=4_250_000_000, num_layers=num_layers, num_experts=num_experts,
                  hidden_size=hidden_size, intermediate_size=intermediate_size,
                  moe_intermediate_size=moe_intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, q_lora_rank=q_lora_rank,
                  kv_lora_rank=kv_lora_rank, first_k_dense_replace=first_k_dense_replace,
                  num_nextn_predict_layers=num_nextn_predict_layers, index_n_heads=index_n_heads,
                  index_head_dim=index_head_dim)


def kimi_k2(*, num_layers=None, num_experts=None, hidden_size=None, intermediate_size=None,
            moe_intermediate_size=None, vocab_size=None, num_attention_heads=None,
            q_lora_rank=None, kv_lora_rank=None, first_k_dense_replace=None) -> Layout:
    """Kimi-K2-Instruct: ``DeepseekV3ForCausalLM`` with ``model_type kimi_k2``, 61 layers
    (layer 0 dense), 384 routed + 1 shared experts, 64 heads, vocab 163840, no MTP, FP8 block
    quantization like DeepSeek-V3."""
    return _build("kimi_k2", _kimi_k2_config(), lin=FP8_BLOCK, norm_dtype="BF16", bias_dtype="F32",
                  max_shard_bytes=17_000_000_000, num_layers=num_layers, num_experts=num_experts,
                  hidden_size=hidden_size, intermediate_size=intermediate_size,
                  moe_intermediate_size=moe_intermediate_size, vocab_size=vocab_size,
                  num_attention_heads=num_attention_heads, q_lora_rank=q_lora_rank,
                  kv_lora_rank=kv_lora_rank, first_k_dense_replace=first_k_dense_replace,
                  num_nextn_predict_layers=None)


LAYOUTS = {
    "deepseek_v2": deepseek_v2,
    "deepseek_v3": deepseek_v3,
    "deepseek_v32": deepseek_v32,
    "kimi_k2": kimi_k2,
}
