"""Llama 3.x (``LlamaForCausalLM``), Llama 4 (``Llama4ForConditionalGeneration``) and EXAONE 3.x.

Llama 4 MoE placement in vLLM: ``interleave_moe_layer_step > 0 and (idx + 1) % step == 0``
(llama4.py; transformers' ``moe_layers`` list is ignored by vLLM). ``no_rope_layers[idx] == 0``
marks a NoPE global-attention layer; the others use chunked local attention.
"""

from .base import CHUNKED, DENSE, FULL, MOE, NOPE_GLOBAL, VISION_FULL, Family, Stack, first_int, layer_types_rule


def llama_attention(cfg: dict, idx: int) -> str:
    return layer_types_rule(cfg, idx) or FULL


def dense(cfg: dict, idx: int) -> str:
    return DENSE


def llama4_attention(cfg: dict, idx: int) -> str:
    nope = cfg.get("no_rope_layers")
    if isinstance(nope, list) and idx < len(nope):
        rope = bool(nope[idx])
    else:
        interval = first_int(cfg, "no_rope_layer_interval", default=4) or 4
        rope = (idx + 1) % interval != 0
    if not rope:
        return NOPE_GLOBAL
    return CHUNKED if cfg.get("attention_chunk_size") else FULL


def llama4_mlp(cfg: dict, idx: int) -> str:
    step = first_int(cfg, "interleave_moe_layer_step", default=1) or 0
    return MOE if step > 0 and (idx + 1) % step == 0 else DENSE


def llama4_trim(ctx) -> None:
    """vLLM places MoE by ``interleave_moe_layer_step`` (transformers' ``moe_layers`` list is
    ignored there): find a step that reproduces the kept MoE layers at their new indices, and
    keep ``moe_layers`` consistent. ``no_rope_layers`` is written explicitly (vLLM indexes it)."""
    moe = [j for j, k in enumerate(ctx.kinds) if k.mlp == MOE]
    n = ctx.new_n
    if not moe:
        step = 0
    else:
        step = next((s for s in range(1, n + 1) if [j for j in range(n) if (j + 1) % s == 0] == moe), None)
    if step is None:
        ctx.error(
            f"no interleave_moe_layer_step reproduces MoE at new indices {moe} (vLLM places MoE at (i+1) % step == 0)",
            "keep dense/MoE layers alternating from a dense layer (e.g. 0,1 or 0,1,2,3), or only MoE layers",
        )
    elif step != ctx.get("interleave_moe_layer_step"):
        ctx.set("interleave_moe_layer_step", step, "MoE step reproducing the kept layers' placement")
    if isinstance(ctx.get("moe_layers"), list) or step is None or step != ctx.get("interleave_moe_layer_step"):
        if ctx.get("moe_layers") is not None:
            ctx.set("moe_layers", moe, "transformers' explicit MoE layer list")
    nope = ctx.get("no_rope_layers")
    if not isinstance(nope, list) or not nope:
        ctx.set(
            "no_rope_layers",
            [0 if k.attention == NOPE_GLOBAL else 1 for k in ctx.kinds],
            "explicit RoPE/NoPE flags for the kept layers (the interval rule would change after renumbering)",
        )


def _moe_layers_check(cfg: dict) -> list[str]:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    moe_layers = text.get("moe_layers")
    n = first_int(text, "num_hidden_layers", default=0) or 0
    if isinstance(moe_layers, list):
        vllm = [i for i in range(n) if llama4_mlp(text, i) == MOE]
        if sorted(moe_layers) != vllm:
            return ["moe_layers (read by transformers) differs from interleave_moe_layer_step (read by vLLM)"]
    return []


LLAMA = Family(
    key="llama",
    display="Llama 2/3",
    model_types=("llama",),
    architectures=("LlamaForCausalLM",),
    stacks=(
        Stack("text", ("model.layers.",), attention=llama_attention, mlp=dense),
    ),
    shared=(("model.embed_tokens.", "embeddings"), ("model.norm.", "final norm"), ("lm_head.", "lm head")),
)

LLAMA4 = Family(
    key="llama4",
    display="Llama 4",
    model_types=("llama4", "llama4_text"),
    architectures=("Llama4ForConditionalGeneration", "Llama4ForCausalLM"),
    stacks=(
        Stack(
            "text",
            ("language_model.model.layers.", "model.language_model.layers.", "model.layers."),
            config_path=("text_config",),
            attention=llama4_attention,
            mlp=llama4_mlp,
            experts_fields=("num_local_experts",),
        ),
        Stack(
            "vision",
            ("vision_model.model.layers.", "model.vision_model.model.layers."),
            config_path=("vision_config",),
            attention=lambda c, i: VISION_FULL,
            mlp=dense,
        ),
    ),
    shared=(
        ("language_model.model.embed_tokens.", "embeddings"),
        ("model.language_model.embed_tokens.", "embeddings"),
        ("language_model.model.norm.", "final norm"),
        ("model.language_model.norm.", "final norm"),
        ("language_model.lm_head.", "lm head"),
        ("lm_head.", "lm head"),
        ("multi_modal_projector.", "multimodal projector"),
        ("model.multi_modal_projector.", "multimodal projector"),
        ("vision_model.", "vision embeddings"),
        ("model.vision_model.", "vision embeddings"),
    ),
    checks=(_moe_layers_check,),
    trim=(llama4_trim,),
    formula_fix="vLLM places MoE by interleave_moe_layer_step; choose kept layers so MoE layers recur with one step",
)

# EXAONE 3.x (``ExaoneForCausalLM``, vLLM's exaone.py): Llama layers stored as
# ``transformer.h.N`` with ``num_layers`` for the depth. transformers 5 loads it as
# ``LlamaForCausalLM``, renaming the tensors (conversion_mapping.py), so a checkpoint it saved
# again holds ``model.layers.N`` under the same model type: both are read.
EXAONE = Family(
    key="exaone",
    display="EXAONE 3.x",
    model_types=("exaone",),
    architectures=("ExaoneForCausalLM",),
    stacks=(
        Stack("text", ("transformer.h.", "model.layers."), depth_fields=("num_layers", "num_hidden_layers"),
              attention=llama_attention, mlp=dense),
    ),
    shared=(("transformer.wte.", "embeddings"), ("transformer.ln_f.", "final norm"), ("model.embed_tokens.", "embeddings"),
            ("model.norm.", "final norm"), ("lm_head.", "lm head")),
)

FAMILIES = (LLAMA, LLAMA4, EXAONE)
