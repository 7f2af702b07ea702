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


def _solve_period(members: list[int], n: int):
    """Smallest (period, offset), offset < period, with {i < n : i % period == offset} == members."""
    for period in range(1, n + 2):
        for offset in range(period):
            if [i for i in range(n) if i % period == offset] == members:
                return period, offset
    return None


def jamba_trim(ctx) -> None:
    """``layers_block_type`` and ``layers_num_experts`` are derived properties, not storable
    lists: rewrite period/offset so the new indices reproduce the kept kinds, or refuse."""
    n = ctx.new_n
    attn = [j for j, k in enumerate(ctx.kinds) if k.attention == FULL]
    moe = [j for j, k in enumerate(ctx.kinds) if k.mlp == MOE]
    for members, pfield, ofield, what in (
        (attn, "attn_layer_period", "attn_layer_offset", "attention"),
        (moe, "expert_layer_period", "expert_layer_offset", "MoE"),
    ):
        if not members:
            # a period longer than the stack puts no layer of this kind in it
            sol = (n + 1, n)
        else:
            sol = _solve_period(members, n)
        if sol is None:
            ctx.error(
                f"Jamba places {what} layers at i % period == offset; no period/offset gives new indices {members}",
                "keep layers whose kinds repeat with one period (e.g. consecutive original layers)",
            )
            continue
        ctx.set(pfield, sol[0], f"{what} layers at their new indices")
        ctx.set(ofield, sol[1], f"{what} layers at their new indices")


JAMBA = Family(
    key="jamba",
    display="Jamba (Mamba hybrid + MoE)",
    model_types=("jamba",),
    architectures=("JambaForCausalLM",),
    stacks=(Stack("text", ("model.layers.",), attention=jamba_attention, mlp=jamba_mlp, experts_fields=("num_experts",)),),
    shared=(("model.embed_tokens.", "embeddings"), ("model.final_layernorm.", "final norm"), ("lm_head.", "lm head")),
    trim=(jamba_trim,),
    formula_fix="Jamba's period/offset rule cannot express this set; choose layers whose kinds repeat with one period",
)

FAMILIES = (JAMBA,)
