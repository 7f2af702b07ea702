"""Qwen3-Next (``Qwen3NextForCausalLM``): Gated DeltaNet + full attention, MoE, relative MTP.

vLLM reads ``layer_types[idx]`` (qwen3_next.py); transformers derives it from
``full_attention_interval`` when absent (full iff ``(idx + 1) % interval == 0``). MTP lives
under ``mtp.*`` with layers ``mtp.layers.{k}`` and is never renumbered; vLLM assumes one MTP
layer when ``num_nextn_predict_layers`` is absent.
"""

from .base import DENSE, FULL, LINEAR, MOE, VISION_FULL, Family, Mtp, Stack, first_int, layer_types_rule, qwen_moe_mlp, qwen_moe_placement, write_layer_types
from .qwen_vl import SHARED as VL_SHARED
from .qwen_vl import TEXT_PREFIXES as VL_TEXT_PREFIXES
from .qwen_vl import _vision_stack


def next_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    interval = first_int(cfg, "full_attention_interval", default=4) or 4
    return FULL if (idx + 1) % interval == 0 else LINEAR


QWEN3_NEXT = Family(
    key="qwen3_next",
    display="Qwen3-Next (Gated DeltaNet hybrid + MoE)",
    model_types=("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"),
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

def _mlp(cfg: dict, idx: int) -> str:
    """Qwen3.5 dense text has no experts; Qwen3.5-MoE places them as Qwen3-MoE does."""
    return qwen_moe_mlp(cfg, idx) if first_int(cfg, "num_experts", "num_local_experts") else DENSE


# Qwen3.5 / Qwen3.5-MoE: the same hybrid text stack inside a VLM wrapper (text_config), the
# Qwen3-VL vision tower, MTP at mtp.layers.{k} counted by text_config.mtp_num_hidden_layers.
QWEN3_5 = Family(
    key="qwen3_5",
    display="Qwen3.5 / Qwen3.5-MoE (Gated DeltaNet hybrid VLM)",
    model_types=("qwen3_5", "qwen3_5_moe"),
    architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
    stacks=(
        Stack(
            "text",
            VL_TEXT_PREFIXES,
            config_path=("text_config",),
            attention=next_attention,
            mlp=_mlp,
            experts_fields=("num_experts",),
        ),
        _vision_stack(lambda c, i: VISION_FULL),
    ),
    mtp=Mtp(
        "relative",
        ("mtp_num_hidden_layers", "num_nextn_predict_layers"),
        prefixes=("mtp.layers.",),
        shared_prefixes=("mtp.",),
        attention=lambda c, k: FULL,
        mlp=lambda c, k: _mlp(c, 0),
    ),
    shared=VL_SHARED,
    trim=(write_layer_types, qwen_moe_placement),
)

FAMILIES = (QWEN3_NEXT, QWEN3_5)
