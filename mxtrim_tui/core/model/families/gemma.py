"""Gemma 2 and Gemma 3 (text-only and multimodal, both tensor layouts).

Gemma 2 default: even index sliding, odd full (transformers ``configuration_gemma2.py``).
Gemma 3 legacy ``sliding_window_pattern`` (default 6): full iff ``(idx + 1) % pattern == 0``.
vLLM reads ``layer_types`` (gemma2.py, gemma3.py). Multimodal Gemma 3 was released with
``language_model.model.layers.`` / ``vision_tower.vision_model.encoder.layers.``; transformers
>= 4.52 saves ``model.language_model.layers.`` / ``model.vision_tower...``.
"""

from .base import DENSE, FULL, SLIDING, VISION_FULL, Family, Stack, first_int, layer_types_rule, write_layer_types


def gemma2_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    return SLIDING if idx % 2 == 0 else FULL


def gemma3_attention(cfg: dict, idx: int) -> str:
    explicit = layer_types_rule(cfg, idx)
    if explicit is not None:
        return explicit
    pattern = first_int(cfg, "sliding_window_pattern", "_sliding_window_pattern", default=6) or 6
    return FULL if (idx + 1) % pattern == 0 else SLIDING


TEXT_PREFIXES = ("model.language_model.layers.", "language_model.model.layers.", "model.layers.")
VISION_PREFIXES = (
    "model.vision_tower.vision_model.encoder.layers.",
    "vision_tower.vision_model.encoder.layers.",
    "model.vision_tower.encoder.layers.",  # transformers 5 module path
)
SHARED = (
    ("model.language_model.embed_tokens.", "embeddings"),
    ("language_model.model.embed_tokens.", "embeddings"),
    ("model.embed_tokens.", "embeddings"),
    ("model.language_model.norm.", "final norm"),
    ("language_model.model.norm.", "final norm"),
    ("model.norm.", "final norm"),
    ("language_model.lm_head.", "lm head"),
    ("lm_head.", "lm head"),
    ("model.multi_modal_projector.", "multimodal projector"),
    ("multi_modal_projector.", "multimodal projector"),
    ("model.vision_tower.", "vision embeddings"),
    ("vision_tower.", "vision embeddings"),
)

GEMMA2 = Family(
    key="gemma2",
    display="Gemma 2",
    model_types=("gemma2",),
    architectures=("Gemma2ForCausalLM",),
    stacks=(Stack("text", TEXT_PREFIXES, attention=gemma2_attention, mlp=lambda c, i: DENSE),),
    shared=SHARED,
    trim=(write_layer_types,),
)

GEMMA3 = Family(
    key="gemma3",
    display="Gemma 3",
    model_types=("gemma3", "gemma3_text"),
    architectures=("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"),
    stacks=(
        Stack("text", TEXT_PREFIXES, config_path=("text_config",), attention=gemma3_attention, mlp=lambda c, i: DENSE),
        Stack(
            "vision",
            VISION_PREFIXES,
            config_path=("vision_config",),
            attention=lambda c, i: VISION_FULL,
            mlp=lambda c, i: DENSE,
        ),
    ),
    shared=SHARED,
    trim=(write_layer_types,),
)

FAMILIES = (GEMMA2, GEMMA3)
