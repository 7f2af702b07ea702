"""Qwen2 / Qwen2.5 / Qwen3 dense and Qwen2-MoE / Qwen3-MoE.

Sliding window: transformers derives ``layer_types`` (sliding iff ``use_sliding_window`` and
``idx >= max_window_layers``); MoE placement: ``mlp_only_layers`` and
``decoder_sparse_step`` (vLLM ``qwen2_moe.py``, ``qwen3_moe.py``).
"""

from .base import DENSE, FULL, SLIDING, Family, Stack, first_int, layer_types_rule, qwen_moe_mlp


def qwen_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        mwl = first_int(cfg, "max_window_layers", default=0) or 0
        return SLIDING if idx >= mwl else FULL
    return FULL


SHARED = (
    ("model.embed_tokens.", "embeddings"),
    ("model.norm.", "final norm"),
    ("lm_head.", "lm head"),
)

QWEN_DENSE = Family(
    key="qwen_dense",
    display="Qwen2/2.5/3 dense",
    model_types=("qwen2", "qwen3"),
    architectures=("Qwen2ForCausalLM", "Qwen3ForCausalLM"),
    stacks=(Stack("text", ("model.layers.",), attention=qwen_attention, mlp=lambda c, i: DENSE),),
    shared=SHARED,
)

QWEN_MOE = Family(
    key="qwen_moe",
    display="Qwen2-MoE / Qwen3-MoE",
    model_types=("qwen2_moe", "qwen3_moe"),
    architectures=("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=qwen_attention,
            mlp=qwen_moe_mlp,
            experts_fields=("num_experts",),
        ),
    ),
    shared=SHARED,
)

FAMILIES = (QWEN_DENSE, QWEN_MOE)
