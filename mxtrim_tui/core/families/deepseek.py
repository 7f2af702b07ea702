"""DeepSeek-V2 / V3 / V3.1 and Kimi-K2 (``DeepseekV2/V3ForCausalLM``), and DeepSeek-V3.2 (DSA).

MoE placement: vLLM ``deepseek_v2.py`` (``first_k_dense_replace``, ``moe_layer_freq``).
MTP: stored as decoder layers ``model.layers.{num_hidden_layers + k}`` (absolute).
V3.2 adds a lightning indexer per layer (``self_attn.indexer``); which layers run it comes
from ``index_topk_pattern`` or ``index_topk_freq``/``index_skip_topk_offset``.
"""

from .base import DSA_FULL, DSA_SHARED, FULL, MLA, MOE, Family, Mtp, Stack, deepseek_moe_mlp, first_int

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
)

DEEPSEEK_V32 = Family(
    key="deepseek_v32",
    display="DeepSeek-V3.2 (MLA + DSA indexer + MoE)",
    model_types=("deepseek_v32",),
    architectures=("DeepseekV32ForCausalLM",),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=dsa_attention,
            mlp=deepseek_moe_mlp,
            experts_fields=("n_routed_experts",),
        ),
    ),
    # MTP layers always build a full indexer (vLLM deepseek_v32/attention.py).
    mtp=Mtp("absolute", ("num_nextn_predict_layers",), attention=lambda c, k: DSA_FULL, mlp=_moe_mtp),
    shared=SHARED,
)

FAMILIES = (DEEPSEEK_V3, DEEPSEEK_V32)
