"""gpt-oss (``GptOssForCausalLM``).

vLLM hard-codes the attention kind by parity (gpt_oss.py: sliding iff ``idx % 2 == 0``) and
ignores ``layer_types``, which transformers reads; both views are reported.
"""

from .base import FULL, MOE, SLIDING, Family, Stack, first_int, layer_types_rule


def parity_attention(cfg: dict, idx: int) -> str:
    return SLIDING if idx % 2 == 0 else FULL


def _layer_types_check(cfg: dict) -> list[str]:
    n = first_int(cfg, "num_hidden_layers", default=0) or 0
    for i in range(n):
        t = layer_types_rule(cfg, i)
        if t is not None and t != parity_attention(cfg, i):
            return [f"layer_types[{i}] is {t} (transformers) but vLLM's parity rule builds {parity_attention(cfg, i)}"]
    return []


GPT_OSS = Family(
    key="gpt_oss",
    display="gpt-oss",
    model_types=("gpt_oss",),
    architectures=("GptOssForCausalLM",),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=parity_attention,
            mlp=lambda c, i: MOE,
            experts_fields=("num_local_experts", "num_experts"),
        ),
    ),
    shared=(("model.embed_tokens.", "embeddings"), ("model.norm.", "final norm"), ("lm_head.", "lm head")),
    checks=(_layer_types_check,),
    formula_fix="vLLM hard-codes sliding attention on even indices: keep originally even layers at even new positions (e.g. pairs 2k, 2k+1)",
)

FAMILIES = (GPT_OSS,)
