"""Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE.

Text stack: ``model.language_model.layers.`` (transformers >= 4.52) or ``model.layers.``
(original Qwen2.5-VL release). Vision blocks: ``model.visual.blocks.`` / ``visual.blocks.``.
Qwen2.5-VL vision blocks are windowed except ``fullatt_block_indexes``; Qwen3-VL feeds the
outputs of ``deepstack_visual_indexes`` blocks into text layers 0..len-1.
"""

from .base import DENSE, FULL, VISION_FULL, VISION_WINDOW, Family, Stack, qwen_moe_mlp, qwen_moe_placement
from .qwen import qwen_attention

TEXT_PREFIXES = ("model.language_model.layers.", "model.layers.")
VISION_PREFIXES = ("model.visual.blocks.", "visual.blocks.")
SHARED = (
    ("model.language_model.embed_tokens.", "embeddings"),
    ("model.embed_tokens.", "embeddings"),
    ("model.language_model.norm.", "final norm"),
    ("model.norm.", "final norm"),
    ("lm_head.", "lm head"),
    ("model.visual.deepstack_merger_list.", "vision deepstack mergers"),
    ("visual.deepstack_merger_list.", "vision deepstack mergers"),
    ("model.visual.merger.", "vision merger (projector)"),
    ("visual.merger.", "vision merger (projector)"),
    ("model.visual.", "vision embeddings"),
    ("visual.", "vision embeddings"),
)


def windowed_vision(cfg: dict, idx: int) -> str:
    full = cfg.get("fullatt_block_indexes")
    if isinstance(full, list):
        return VISION_FULL if idx in full else VISION_WINDOW
    return VISION_FULL


def _vision_stack(attention):
    return Stack(
        "vision",
        VISION_PREFIXES,
        config_path=("vision_config",),
        depth_fields=("depth", "num_hidden_layers"),
        attention=attention,
        mlp=lambda c, i: DENSE,
    )


QWEN2_5_VL = Family(
    key="qwen2_5_vl",
    display="Qwen2.5-VL",
    model_types=("qwen2_5_vl", "qwen2_vl"),
    architectures=("Qwen2_5_VLForConditionalGeneration", "Qwen2VLForConditionalGeneration"),
    stacks=(
        Stack("text", TEXT_PREFIXES, config_path=("text_config",), attention=qwen_attention, mlp=lambda c, i: DENSE),
        _vision_stack(windowed_vision),
    ),
    shared=SHARED,
)

QWEN3_VL = Family(
    key="qwen3_vl",
    display="Qwen3-VL / Qwen3-VL-MoE",
    model_types=("qwen3_vl", "qwen3_vl_moe"),
    architectures=("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"),
    stacks=(
        Stack(
            "text",
            TEXT_PREFIXES,
            config_path=("text_config",),
            attention=lambda c, i: FULL,
            mlp=lambda c, i: qwen_moe_mlp(c, i) if c.get("num_experts") or c.get("num_local_experts") else DENSE,
            experts_fields=("num_experts", "num_local_experts"),
        ),
        _vision_stack(lambda c, i: VISION_FULL),
    ),
    shared=SHARED,
    trim=(qwen_moe_placement,),
)

FAMILIES = (QWEN2_5_VL, QWEN3_VL)
