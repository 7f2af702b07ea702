"""Mixtral (``MixtralForCausalLM``): every layer MoE (``block_sparse_moe``), global sliding
window when ``sliding_window`` is set."""

from .base import FULL, MOE, SLIDING, Family, Stack

MIXTRAL = Family(
    key="mixtral",
    display="Mixtral",
    model_types=("mixtral",),
    architectures=("MixtralForCausalLM",),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=lambda c, i: SLIDING if c.get("sliding_window") else FULL,
            mlp=lambda c, i: MOE,
            experts_fields=("num_local_experts",),
        ),
    ),
    shared=(("model.embed_tokens.", "embeddings"), ("model.norm.", "final norm"), ("lm_head.", "lm head")),
    requires_moe=True,
)

FAMILIES = (MIXTRAL,)
