"""Qwen3-Next (``Qwen3NextForCausalLM``): Gated DeltaNet + full attention, MoE, relative MTP.

vLLM reads ``layer_types[idx]`` (qwen3_next.py); transformers derives it from
``full_attention_interval`` when absent (full iff ``(idx + 1) % interval == 0``). MTP lives
under ``mtp.*`` with layers ``mtp.layers.{k}`` and is never renumbered; vLLM assumes one MTP
layer when ``num_nextn_predict_layers`` is absent.
"""

from .base import FULL, LINEAR, MOE, Family, Mtp, Stack, first_int, layer_types_rule, qwen_moe_mlp, qwen_moe_placement, write_layer_types


def next_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    interval = first_int(cfg, "full_attention_interval", default=4) or 4
    return FULL if (idx + 1) % interval == 0 else LINEAR


QWEN3_NEXT = Family(
    key="qwen3_next",
    display="Qwen3-Next (Gated DeltaNet hybrid + MoE)",
    model_types=("qwen3_next", "qwen3_5", "qwen3_5_moe"),
    architectures=("Qwen3NextForCausalLM",),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=next_attention,
            mlp=qwen_moe_mlp,
            experts_fields=("num_experts",),
        ),
    ),
    mtp=Mtp(
        "relative",
        ("num_nextn_predict_layers", "mtp_num_hidden_layers"),
        prefixes=("mtp.layers.",),
        shared_prefixes=("mtp.",),
        default_count=1,
        attention=lambda c, k: FULL,
        mlp=lambda c, k: MOE,
    ),
    shared=(
        ("model.embed_tokens.", "embeddings"),
        ("model.norm.", "final norm"),
        ("lm_head.", "lm head"),
    ),
    trim=(write_layer_types, qwen_moe_placement),
    requires_moe=True,
)

FAMILIES = (QWEN3_NEXT,)
