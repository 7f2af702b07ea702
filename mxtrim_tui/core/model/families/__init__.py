"""Family registry: one small module per family, looked up by model_type then architecture."""

from __future__ import annotations

from . import deepseek, deepseek_v4, gemma, glm, gpt_oss, jamba, llama, mixtral, nemotron_h, qwen, qwen_next, qwen_vl
from .base import Family
from .generic import GENERIC

ALL_FAMILIES: tuple[Family, ...] = (
    *deepseek.FAMILIES,
    *deepseek_v4.FAMILIES,
    *glm.FAMILIES,
    *qwen.FAMILIES,
    *qwen_next.FAMILIES,
    *qwen_vl.FAMILIES,
    *gemma.FAMILIES,
    *llama.FAMILIES,
    *mixtral.FAMILIES,
    *gpt_oss.FAMILIES,
    *nemotron_h.FAMILIES,
    *jamba.FAMILIES,
)


def family_for(config: dict) -> Family:
    """The family of a config: by ``model_type`` first (Kimi-K2 ships a DeepSeek-V3
    architecture with its own model_type), then by architecture name, else generic."""
    model_type = config.get("model_type")
    for fam in ALL_FAMILIES:
        if model_type in fam.model_types:
            return fam
    archs = config.get("architectures") or []
    for fam in ALL_FAMILIES:
        if any(a in fam.architectures for a in archs):
            return fam
    return GENERIC
