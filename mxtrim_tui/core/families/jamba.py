"""Jamba (``JambaForCausalLM``): attention iff ``idx % attn_layer_period == attn_layer_offset``
(else Mamba), MoE iff ``idx % expert_layer_period == expert_layer_offset`` (transformers
``configuration_jamba.py`` properties, consumed by vLLM jamba.py)."""

from .base import DENSE, FULL, MAMBA, MOE, Family, Stack, first_int


def jamba_attention(cfg: dict, idx: int) -> str:
    period = first_int(cfg, "attn_layer_period", default=8) or 8
    offset = first_int(cfg, "attn_layer_offset", default=4) or 0
    return FULL if idx % period == offset else MAMBA


def jamba_mlp(cfg: dict, idx: int) -> str:
    period = first_int(cfg, "expert_layer_period", default=2) or 2
    offset = first_int(cfg, "expert_layer_offset", default=1) or 0
    experts = first_int(cfg, "num_experts", default=16) or 0
    return MOE if experts > 1 and idx % period == offset else DENSE


JAMBA = Family(
    key="jamba",
    display="Jamba (Mamba hybrid + MoE)",
    model_types=("jamba",),
    architectures=("JambaForCausalLM",),
    stacks=(Stack("text", ("model.layers.",), attention=jamba_attention, mlp=jamba_mlp, experts_fields=("num_experts",)),),
    shared=(("model.embed_tokens.", "embeddings"), ("model.final_layernorm.", "final norm"), ("lm_head.", "lm head")),
)

FAMILIES = (JAMBA,)
