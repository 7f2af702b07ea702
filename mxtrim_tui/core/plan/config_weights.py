"""Weights derived from the config, for the parts of the output whose tensors have no
safetensors header here (a config-only folder, an index-only or partial download).

vLLM's dummy load (``--load-format dummy``) allocates every parameter the config makes it
build, headers or not, so the budget cannot count such parts as 0 B. The tensors come from
transformers' ``meta`` build of the output config, made in the check child beside the plan
check (core/checks/meta_weights.py) and carried by the plan's ``TransformersCheck``; this module
turns them into checkpoint tensors:

* the parts: each kept text layer, each kept MTP layer, and what lies outside the layers
  (embeddings, final norm, head). A part whose retained tensors are all in shards on disk is
  counted from their headers; any other part entirely from the config;
* quantization, as the config declares it. Block FP8 (``quant_method: fp8`` with
  ``weight_block_size``): every ``nn.Linear`` weight and fused routed-expert tensor is one byte
  per element plus float32 block scales of ``ceil(out/bn) × ceil(in/bk)`` (a fused gate/up pair
  per half), except embeddings, LM heads, router gates, the quantization config's
  ``modules_to_not_convert`` / ``ignored_layers`` and the family's 16-bit modules (DeepSeek-V4:
  the compressors' projections and the indexer's ``weights_proj``, built with no quantization
  in vLLM); other parameters keep their dtype, except that a float32 ``.weight`` (transformers
  builds routers and some norms in float32) is counted in the model's dtype, as the release
  and vLLM hold it. DeepSeek-V4's ``expert_dtype: fp4``
  makes routed experts MXFP4 (half a byte per element, one scale byte per 32);
* MTP layers: the decoder layer transformers builds past the backbone, plus the family's MTP
  projections (DeepSeek-V3 style: ``embed_tokens``, ``enorm``, ``hnorm``, ``eh_proj``,
  ``shared_head``; DeepSeek-V4: ``e_proj`` / ``h_proj`` (quantized), ``enorm``, ``hnorm``,
  ``norm``, the hyper-connection head).

Names follow transformers (``model.layers.N.mlp.experts.gate_up_proj``), placed under the kept
layer's output name so the partitioning of core/plan/partition.py applies.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..model.families.base import first_int
from ..model.quant import config_dtype
from ..read.safetensors_io import tensor_nbytes
from .build import text_config

TEXT, MTP, OUTSIDE = "text", "mtp", "outside"
_UNQUANTIZED = re.compile(r"(^|\.)(embed_tokens|lm_head|embed|head|shared_head)\.|\.(mlp|block_sparse_moe|feed_forward)\.(gate|router)\.")
# modules a family builds without quantization in vLLM, whatever the config says (DeepSeek-V4:
# both compressors' projections, the attention's and the indexer's own, transformers'
# ``compressor.indexer.kv_proj``: DeepseekCompressor's fused_wkv_wgate has quant_config=None,
# models/deepseek_v4/compressor.py:260 at v0.26.0)
FAMILY_16BIT = {"deepseek_v4": re.compile(r"\.compressor\.(indexer\.)?(kv_proj|gate_proj)\.|\.weights_proj\.")}
# parameters a family holds in float32 in vLLM whatever dtype transformers builds them in
# (DeepSeek-V4's hyper-connection parameters, attention sinks, compressors' position biases
# (vLLM's ``ape``) and router score-correction biases: nvidia/model.py, attention.py,
# compressor.py; transformers 5.19 builds them in the model's dtype, 5.25 most in float32)
FAMILY_32BIT = {"deepseek_v4": re.compile(r"(^|\.)(attn_hc|ffn_hc|hc_head)\.|\.(sinks|position_bias|e_score_correction_bias)$")}


@dataclass
class ConfigWeights:
    """The tensors derived from the config for the parts without headers."""

    parts: list[str] = field(default_factory=list)  # "text layer 3", "MTP layer 0", "embeddings, norm and head"
    tensors: list[tuple[str, str, tuple, int]] = field(default_factory=list)  # (output name, dtype, shape, bytes)
    skipped: set[str] = field(default_factory=set)  # output names of header tensors the config replaces
    problem: str = ""  # why some part could not be derived ("" when all were)

    @property
    def nbytes(self) -> int:
        return sum(t[3] for t in self.tensors)


def _part_of(name: str, prefixes: list[tuple[str, str]]) -> str:
    for prefix, part in prefixes:
        if name.startswith(prefix):
            return part
    return OUTSIDE


def parts_without_headers(plan) -> tuple[list[tuple[str, str]], set[str]]:
    """((output layer prefix, part), the parts whose tensors are not all on disk)."""
    src = plan.inventory.source
    prefixes = [(m.new_name + ".", f"{m.submodel}:{m.new}") for m in plan.mappings if m.submodel in (TEXT, MTP)]
    held: dict[str, bool] = {}
    for old, new in plan.renames:
        part = _part_of(new, prefixes)
        held[part] = held.get(part, True) and src.is_present(old)
    parts = {p for _, p in prefixes} | {OUTSIDE}
    return prefixes, {p for p in parts if not held.get(p, False)}


def config_weights(plan) -> ConfigWeights:
    """The config-derived tensors of the plan's parts without headers (empty when every part
    has them)."""
    prefixes, missing = parts_without_headers(plan)
    out = ConfigWeights()
    if not missing:
        return out
    out.parts = [_part_label(p) for p in sorted(missing, key=_part_order)]
    check = plan.transformers_check
    table = getattr(check, "config_tensors", None) if check is not None else None
    if not table:
        why = getattr(check, "config_tensors_problem", "") if check is not None else ""
        out.problem = why or "transformers' meta build of the output config is not at hand (the plan was not checked)"
        return out
    cfg = text_config(plan)
    new_name = {p: pre[:-1] for pre, p in prefixes}
    rows = []
    for name, dtype, shape, role in table.get("tensors") or []:
        m = None if re.search(r"vision|visual|audio", name) else re.search(r"(^|\.)layers\.(\d+)\.", name)
        part = f"{TEXT}:{m.group(2)}" if m else OUTSIDE
        if part in missing:
            rows.append((new_name[part] + "." + name[m.end():] if m else name, dtype, tuple(shape), role))
    mtp_rows = table.get("mtp")
    mtp_missing = sorted(p for p in missing if p.startswith(MTP + ":"))
    if mtp_missing and mtp_rows is None:
        out.problem = table.get("mtp_problem") or "the MTP layers could not be built"
        missing -= set(mtp_missing)
        mtp_missing = []
    # the header tensors of the parts derived here are replaced by the derived ones
    out.skipped = {new for _, new in plan.renames if _part_of(new, prefixes) in missing}
    for part in mtp_missing:
        k = int(part.split(":")[1])
        base = new_name[part] + "."
        rows += [(base + name.split(".", 2)[2], dtype, tuple(shape), role)
                 for name, dtype, shape, role in mtp_rows or [] if name.startswith(f"mtp.{k}.")]
        rows += [(base + rest, dtype, shape, role) for rest, dtype, shape, role in mtp_extras(plan, cfg)]
    for name, dtype, shape, role in rows:
        for t in quantized(plan, cfg, name, dtype, shape, role):
            out.tensors.append(t)
    return out


def _part_order(part: str) -> tuple:
    sub, _, n = part.partition(":")
    return ({TEXT: 0, MTP: 1}.get(sub, 2), int(n) if n else 0)


def _part_label(part: str) -> str:
    sub, _, n = part.partition(":")
    return {TEXT: f"text layer {n}", MTP: f"MTP layer {n}"}.get(sub, "embeddings, final norm and head")


def mtp_extras(plan, cfg: dict) -> list[tuple[str, str, tuple, str]]:
    """The projections of an MTP layer beside its decoder, by family (empty for others)."""
    h = first_int(cfg, "hidden_size", default=0)
    vocab = first_int(cfg, "vocab_size", default=0)
    dtype = "BF16"
    family = plan.inventory.family.key
    if family == "deepseek_v4":
        hc = first_int(cfg, "hc_mult", default=1)
        return [("e_proj.weight", dtype, (h, h), "linear"), ("h_proj.weight", dtype, (h, h), "linear"),
                ("enorm.weight", dtype, (h,), "other"), ("hnorm.weight", dtype, (h,), "other"),
                ("norm.weight", dtype, (h,), "other"), ("hc_head_fn", "F32", (hc, hc * h), "other"),
                ("hc_head_base", "F32", (hc,), "other"), ("hc_head_scale", "F32", (1,), "other")]
    if family in ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa"):
        # the release keeps eh_proj in 16 bits ("other": never quantized)
        return [("embed_tokens.weight", dtype, (vocab, h), "embedding"), ("enorm.weight", dtype, (h,), "other"),
                ("hnorm.weight", dtype, (h,), "other"), ("eh_proj.weight", dtype, (h, 2 * h), "other"),
                ("shared_head.norm.weight", dtype, (h,), "other"), ("shared_head.head.weight", dtype, (vocab, h), "other")]
    return []


def _fp8_block(plan) -> tuple[int, int] | None:
    q = plan.inventory.quantization
    qc = q.config if q is not None else {}
    block = qc.get("weight_block_size")
    if str(qc.get("quant_method", "")).startswith("fp8") and isinstance(block, list) and len(block) == 2 \
            and all(type(x) is int and x > 0 for x in block):
        return block[0], block[1]
    return None


def _not_converted(plan, name: str) -> bool:
    q = plan.inventory.quantization
    qc = q.config if q is not None else {}
    listed = [x for key in ("modules_to_not_convert", "ignored_layers") for x in (qc.get(key) or []) if isinstance(x, str)]
    family = FAMILY_16BIT.get(plan.inventory.family.key)
    return bool(_UNQUANTIZED.search(name) or (family and family.search(name)) or any(x and x in name for x in listed))


def quantized(plan, cfg: dict, name: str, dtype: str, shape: tuple, role: str) -> list[tuple[str, str, tuple, int]]:
    """The checkpoint tensors of one built parameter under the config's quantization."""
    if dtype == "F32" and name.endswith(".weight"):
        # transformers builds some weights (routers, DeepSeek-V4's norms) in float32; the
        # checkpoint and vLLM hold every module weight in the model's dtype
        dtype = config_dtype(cfg) or "BF16"
    if dtype == "I64" and name.endswith(".tid2eid"):
        dtype = "I32"  # DeepSeek-V4's hash table: int32 in the release and in vLLM
    float32 = FAMILY_32BIT.get(plan.inventory.family.key)
    if float32 and float32.search(name):
        dtype = "F32"
    block = _fp8_block(plan)
    if block is None or role not in ("linear", "experts") or _not_converted(plan, name):
        return [(name, dtype, shape, tensor_nbytes(dtype, shape))]
    *lead, rows, cols = shape
    if role == "experts" and str(cfg.get("expert_dtype", "")).lower() == "fp4":  # MXFP4 experts
        packed, scales = (*lead, rows, cols // 2), (*lead, rows, math.ceil(cols / 32))
        return [(name, "U8", packed, tensor_nbytes("U8", packed)), (name + "_scale", "U8", scales, tensor_nbytes("U8", scales))]
    bn, bk = block
    halves = 2 if role == "experts" and name.endswith("gate_up_proj") else 1
    scale = (*lead, halves * math.ceil(rows // halves / bn), math.ceil(cols / bk))
    scale_name = name[: -len("weight")] + "weight_scale_inv" if name.endswith(".weight") else name + "_scale_inv"
    return [(name, "F8_E4M3", tuple(shape), tensor_nbytes("F8_E4M3", shape)), (scale_name, "F32", scale, tensor_nbytes("F32", scale))]
