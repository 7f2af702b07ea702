"""GLM-4.5/4.6/4.7 MoE (``Glm4MoeForCausalLM``, ``Glm4MoeLiteForCausalLM``) and GLM-5.x DSA
(``GlmMoeDsaForCausalLM``, model_type ``glm_moe_dsa``).

GLM-4.5: MoE iff ``n_routed_experts`` is set and ``idx >= first_k_dense_replace`` (vLLM
``glm4_moe.py``, no ``moe_layer_freq``). GLM-5.x uses the DeepSeek-V3.2 stack (MLA, DSA
indexer with IndexCache 'shared' layers) and the DeepSeek MoE rule. Both store MTP at
``model.layers.{num_hidden_layers + k}``.
"""

from .base import DENSE, DSA_FULL, FULL, MOE, Family, Mtp, Stack, deepseek_moe_mlp, first_int, set_first_k_dense
from .deepseek import DSA_MTP, DSA_STACKS, DSA_TRIM, SHARED, WHOLE_FIELDS, dsa_attention, mla_attention


def glm4_moe_mlp(cfg: dict, idx: int) -> str:
    if cfg.get("n_routed_experts") is None:
        return DENSE
    return MOE if idx >= (first_int(cfg, "first_k_dense_replace", default=0) or 0) else DENSE


def _indexer_types_check(cfg: dict) -> list[str]:
    """transformers reads ``indexer_types``/``mlp_layer_types``; vLLM reads the pattern and
    ``first_k_dense_replace``. Say where the two views differ."""
    out = []
    n = first_int(cfg, "num_hidden_layers", default=0) or 0
    it = cfg.get("indexer_types")
    if isinstance(it, list):
        for i, v in enumerate(it[:n]):
            vllm = "shared" if dsa_attention(cfg, i) != DSA_FULL else "full"
            if v != vllm:
                out.append(
                    f"indexer_types[{i}] is {v!r} (transformers) but vLLM's pattern/freq rule gives {vllm!r}"
                )
                break
    mt = cfg.get("mlp_layer_types")
    if isinstance(mt, list):
        for i, v in enumerate(mt[:n]):
            vllm = "sparse" if deepseek_moe_mlp(cfg, i) == MOE else "dense"
            if v != vllm:
                out.append(
                    f"mlp_layer_types[{i}] is {v!r} (transformers) but first_k_dense_replace gives {vllm!r} (vLLM)"
                )
                break
    return out


GLM4_MOE = Family(
    key="glm4_moe",
    display="GLM-4.5/4.6/4.7 MoE",
    model_types=("glm4_moe", "glm4_moe_lite"),
    architectures=("Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM"),
    stacks=(
        Stack(
            "text",
            ("model.layers.",),
            attention=lambda c, i: mla_attention(c, i) if c.get("kv_lora_rank") else FULL,
            mlp=glm4_moe_mlp,
            experts_fields=("n_routed_experts",),
        ),
    ),
    mtp=Mtp("absolute", ("num_nextn_predict_layers",), mlp=lambda c, k: MOE),
    shared=SHARED,
    trim=(set_first_k_dense,),
    dense_prefix=True,
    requires_moe=True,
    mtp_ignored_by_transformers=True,
    whole_fields=WHOLE_FIELDS,
)

GLM_MOE_DSA = Family(
    key="glm_moe_dsa",
    display="GLM-5.x (MLA + DSA IndexCache + MoE)",
    model_types=("glm_moe_dsa",),
    architectures=("GlmMoeDsaForCausalLM",),
    stacks=DSA_STACKS,
    mtp=DSA_MTP,
    shared=SHARED,
    checks=(_indexer_types_check,),
    trim=DSA_TRIM,
    dense_prefix=True,
    mtp_ignored_by_transformers=True,
    metax_dense_mtp_depth=40,
    whole_fields=WHOLE_FIELDS,
)

FAMILIES = (GLM4_MOE, GLM_MOE_DSA)
