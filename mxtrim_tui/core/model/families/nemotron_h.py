"""Nemotron-H (``NemotronHForCausalLM``): Mamba2 / attention / MLP / MoE blocks.

vLLM builds ``len(hybrid_override_pattern)`` layers, kind ``pattern[idx]``: ``M`` Mamba2,
``*`` attention, ``-`` MLP, ``E`` MoE (nemotron_h.py). MTP under ``mtp.layers.{k}``.

transformers 5 describes the same layers with ``layers_block_type`` (``linear_attention`` is
the Mamba2 mixer, ``full_attention``, ``mlp``, ``moe``) and saves them under ``model.layers.``
(``model.embeddings``, ``model.norm_f``) instead of the original ``backbone.`` names.
"""

from .base import DENSE, FULL, MAMBA, MOE, NO_ATTENTION, NO_MLP, Family, Mtp, Stack

ATTN = {"M": MAMBA, "*": FULL, "-": NO_ATTENTION, "E": NO_ATTENTION}
MLP = {"M": NO_MLP, "*": NO_MLP, "-": DENSE, "E": MOE}


BLOCK_TYPES = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}


def _char(cfg: dict, idx: int):
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and idx < len(pattern):
        return pattern[idx]
    types = cfg.get("layers_block_type")
    if isinstance(types, list) and idx < len(types):
        return BLOCK_TYPES.get(types[idx])
    return None


def _depth(cfg: dict):
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return len(pattern)
    types = cfg.get("layers_block_type")
    return len(types) if isinstance(types, list) else None


NEMOTRON_H = Family(
    key="nemotron_h",
    display="Nemotron-H (Mamba2 hybrid)",
    model_types=("nemotron_h",),
    architectures=("NemotronHForCausalLM",),
    stacks=(
        Stack(
            "text",
            ("backbone.layers.", "model.layers."),
            attention=lambda c, i: ATTN.get(_char(c, i)),
            mlp=lambda c, i: MLP.get(_char(c, i)),
            experts_fields=("n_routed_experts",),
            depth_rule=_depth,
        ),
    ),
    mtp=Mtp("relative", ("num_nextn_predict_layers",), prefixes=("mtp.layers.",), shared_prefixes=("mtp.",)),
    shared=(
        ("backbone.embeddings.", "embeddings"),
        ("model.embeddings.", "embeddings"),
        ("backbone.norm_f.", "final norm"),
        ("model.norm_f.", "final norm"),
        ("lm_head.", "lm head"),
    ),
)

FAMILIES = (NEMOTRON_H,)
