"""Qwen2 / Qwen2.5 / Qwen3 dense and Qwen2-MoE / Qwen3-MoE.

Sliding window: transformers derives ``layer_types`` (sliding iff ``use_sliding_window`` and
``idx >= max_window_layers``); MoE placement: ``mlp_only_layers`` and
``decoder_sparse_step`` (vLLM ``qwen2_moe.py``, ``qwen3_moe.py``).
"""

from .base import DENSE, FULL, SLIDING, Family, Stack, first_int, layer_types_rule, qwen_moe_mlp, qwen_moe_placement, require_moe


def qwen_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        mwl = first_int(cfg, "max_window_layers", default=0) or 0
        return SLIDING if idx >= mwl else FULL
    return FULL


def sliding_window_layers(ctx) -> None:
    """With sliding windows on, transformers derives sliding iff ``idx >= max_window_layers``:
    write the count of kept leading full layers so that it derives the kept kinds. vLLM's
    Qwen2 model (Qwen3's too) refuses ``layer_types`` that mix sliding and full attention
    unless ``max_window_layers == num_hidden_layers`` (an assertion in ``Qwen2Model``), which
    the source itself cannot satisfy either: such a mix is warned about, not silently written."""
    if not (ctx.get("use_sliding_window") and ctx.get("sliding_window")):
        return
    kinds = [k.attention for k in ctx.kinds]
    full = 0
    while full < len(kinds) and kinds[full] == FULL:
        full += 1
    if any(k == FULL for k in kinds[full:]):
        ctx.error("a full-attention layer would follow a sliding one: max_window_layers cannot express it",
                  "keep full-attention layers before sliding ones")
    ctx.set("max_window_layers", full, "number of kept leading full-attention layers")
    if 0 < full < len(kinds):
        ctx.warn(
            "vLLM's Qwen2/Qwen3 refuse layer_types mixing sliding and full attention (\"Sliding window for some "
            "but all layers is not supported\"): this output, like its source, will not start there",
            "keep only full-attention or only sliding layers to serve one path at a time",
        )


def qwen3_moe_requires_moe(ctx) -> None:
    """Qwen3-MoE raises without an MoE layer; Qwen2-MoE only warns."""
    if ctx.inventory.source.model_type == "qwen3_moe":
        require_moe(ctx)


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
    trim=(sliding_window_layers,),
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
            experts_fields=("num_experts", "num_local_experts"),
        ),
    ),
    shared=SHARED,
    trim=(qwen_moe_placement, qwen3_moe_requires_moe, sliding_window_layers),
)

FAMILIES = (QWEN_DENSE, QWEN_MOE)
