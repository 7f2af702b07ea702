"""DeepSeek-V2 / V3 / V3.1 and Kimi-K2 (``DeepseekV2/V3ForCausalLM``), and DeepSeek-V3.2 (DSA).

MoE placement: vLLM ``deepseek_v2.py`` (``first_k_dense_replace``, ``moe_layer_freq``).
MTP: stored as decoder layers ``model.layers.{num_hidden_layers + k}`` (absolute).
V3.2 adds a lightning indexer per layer (``self_attn.indexer``); which layers run it comes
from ``index_topk_pattern`` or ``index_topk_freq``/``index_skip_topk_offset``.
"""

from .base import DSA_FULL, DSA_SHARED, FULL, MLA, MOE, Family, Mtp, Stack, deepseek_moe_mlp, first_int, set_first_k_dense

# What vLLM's deepseek_v2.py reads as whole numbers (null: absent), with the least sensible
# value; a string here used to reach transformers, and the plan said "not checked".
WHOLE_FIELDS = (
    ("kv_lora_rank", 0),
    ("q_lora_rank", 0),
    ("qk_nope_head_dim", 0),
    ("qk_rope_head_dim", 0),
    ("v_head_dim", 0),
    ("n_shared_experts", 0),
    ("n_group", 1),
    ("topk_group", 1),
    ("index_n_heads", 1),
    ("index_head_dim", 1),
    ("index_topk", 1),
)

SHARED = (
    ("model.embed_tokens.", "embeddings"),
    ("model.norm.", "final norm"),
    ("lm_head.", "lm head"),
)


def mla_attention(cfg: dict, idx: int) -> str:
    return MLA if cfg.get("kv_lora_rank") else FULL


def dsa_attention(cfg: dict, idx: int) -> str:
    """vLLM ``deepseek_v2.py`` / ``deepseek_v32/attention.py``: an explicit
    ``index_topk_pattern`` wins ('S' = reuse the previous top-k, no indexer); otherwise
    ``skip = max(idx - offset + 1, 0) % freq != 0``. Out-of-range pattern -> full."""
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, str) and pattern:
        if idx < len(pattern):
            return DSA_SHARED if pattern[idx] == "S" else DSA_FULL
        return DSA_FULL
    freq = first_int(cfg, "index_topk_freq", default=1) or 1
    offset = first_int(cfg, "index_skip_topk_offset", default=2)
    skip = max(idx - offset + 1, 0) % freq != 0
    return DSA_SHARED if skip else DSA_FULL


def _moe_mtp(cfg: dict, k: int) -> str:
    return MOE


def write_index_topk_pattern(ctx) -> None:
    """vLLM (and vLLM-MetaX) read ``index_topk_pattern`` first: write it explicitly for the
    kept layers ('F' runs the indexer, 'S' reuses the previous top-k). A shared layer needs
    an earlier full one in the kept stack; the first layer must be 'F'."""
    if not ctx.kinds or not any(k.attention in (DSA_FULL, DSA_SHARED) for k in ctx.kinds):
        return
    pattern = "".join("S" if k.attention == DSA_SHARED else "F" for k in ctx.kinds)
    if pattern[0] == "S":
        src = ctx.inventory.submodels["text"].layers
        earlier = [l.index for l in src if l.index < ctx.kept[0] and l.kind.attention == DSA_FULL]
        ctx.error(
            f"layer {ctx.kept[0]} reuses the previous layer's top-k (shared indexer) but no earlier kept layer runs the indexer",
            f"also keep an earlier full-indexer layer (e.g. {earlier[-1]})" if earlier else "keep a full-indexer layer first",
        )
    has_rule = any(ctx.get(k) is not None for k in ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern"))
    if has_rule or "S" in pattern:
        ctx.set("index_topk_pattern", pattern, "explicit indexer pattern for the kept layers (vLLM reads it before freq/offset)")
    if isinstance(ctx.get("indexer_types"), list) or "S" in pattern:
        if ctx.get("indexer_types") is not None or ctx.inventory.family.key == "glm_moe_dsa":
            ctx.set(
                "indexer_types",
                ["shared" if c == "S" else "full" for c in pattern],
                "transformers' view of the same pattern",
            )


def write_mlp_layer_types(ctx) -> None:
    if isinstance(ctx.get("mlp_layer_types"), list):
        ctx.set(
            "mlp_layer_types",
            ["sparse" if k.mlp == MOE else "dense" for k in ctx.kinds],
            "transformers' view of the dense prefix",
        )


DEEPSEEK_V3 = Family(
    key="deepseek_v3",
    display="DeepSeek-V2/V3 (MLA + MoE)",
    model_types=("deepseek_v2", "deepseek_v3", "kimi_k2"),
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=mla_attention,
            mlp=deepseek_moe_mlp,
            experts_fields=("n_routed_experts",),
        ),
    ),
    mtp=Mtp("absolute", ("num_nextn_predict_layers", "num_mtp_layers"), mlp=_moe_mtp),
    shared=SHARED,
    trim=(set_first_k_dense,),
    dense_prefix=True,
    mtp_ignored_by_transformers=True,
    metax_dense_mtp_depth=40,
    whole_fields=WHOLE_FIELDS,
)

# The DeepSeek-V3.2 stack, shared with GLM-5.x: MLA + DSA indexer + DeepSeek MoE placement.
DSA_STACKS = (
    Stack("text", ("model.layers.",), attention=dsa_attention, mlp=deepseek_moe_mlp, experts_fields=("n_routed_experts",)),
)
# MTP layers always build a full indexer (vLLM deepseek_v32/attention.py).
DSA_MTP = Mtp("absolute", ("num_nextn_predict_layers",), attention=lambda c, k: DSA_FULL, mlp=_moe_mtp)
DSA_TRIM = (set_first_k_dense, write_index_topk_pattern, write_mlp_layer_types)

DEEPSEEK_V32 = Family(
    key="deepseek_v32",
    display="DeepSeek-V3.2 (MLA + DSA indexer + MoE)",
    model_types=("deepseek_v32",),
    architectures=("DeepseekV32ForCausalLM",),
    stacks=DSA_STACKS,
    mtp=DSA_MTP,
    shared=SHARED,
    trim=DSA_TRIM,
    dense_prefix=True,
    mtp_ignored_by_transformers=True,
    metax_dense_mtp_depth=40,
    whole_fields=WHOLE_FIELDS,
)

FAMILIES = (DEEPSEEK_V3, DEEPSEEK_V32)
