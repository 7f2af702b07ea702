"""Inventory: the model as a user thinks of it, built from a ModelSource without weights.

Submodels (text backbone, vision tower, MTP / draft heads), each with its numbered layers;
each layer with the kind the runtime builds (attention kind, MLP kind, expert count, special
modules), its tensors, exact bytes and quantization; non-layer tensors grouped by role; layers
of equal signature grouped. Every tensor lands in exactly one place or in ``unassigned``.

Kinds come from two sources that are compared: the family's config rules (what vLLM will
build at that index) and the tensor names (what the checkpoint holds). Disagreements are
reported per layer and in ``warnings``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from operator import itemgetter, methodcaller
from operator import sub as minus

from .families import family_for
from .families.base import (
    DENSE,
    DSA_FULL,
    DSA_SHARED,
    FULL,
    HASH_MOE,
    KV_SHARED,
    LINEAR,
    MAMBA,
    MLA,
    MOE,
    NO_ATTENTION,
    NO_MLP,
    Family,
    Stack,
    compression_ratio,
    first_int,
    layer_types_rule,
)
from .quant import Quantization, detect_quantization, estimated_weight_dtypes
from ..errors import InputError
from ..read.source import ModelSource, gc_paused
from ..read.safetensors_io import ABSENT_DTYPE
from ..units import index_ranges, plural


# ---------------------------------------------------------------------------------------
SCALE_SUFFIXES = (
    "weight_scale_inv",
    "weight_scale",
    "weight_scale_2",
    "input_scale",
    "weight_global_scale",
    "input_global_scale",
    "weight_zero_point",
    "qzeros",
    "scales",
    "g_idx",
    "k_scale",
    "v_scale",
)
LINEAR_WEIGHT_LEAVES = ("weight", "qweight", "weight_packed")
MLP_CONTAINERS = ("mlp", "block_sparse_moe", "feed_forward", "ffn", "mixer")
DENSE_MLP_PARTS = frozenset(
    ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "fc1", "fc2", "w1", "w2", "w3", "c_fc", "c_proj", "linear_fc1", "linear_fc2")
)
NORM_HINTS = ("norm", "layernorm", "ln_")


@dataclass(frozen=True)
class LayerKind:
    """What distinguishes one layer type from another (a group's signature)."""

    attention: str
    mlp: str
    experts: int | None = None
    special: tuple[str, ...] = ()
    weight_dtypes: tuple[str, ...] = ()

    @property
    def mlp_label(self) -> str:
        """The MLP kind, with the expert count for MoE layers (the only ones that have one)."""
        return f"{self.mlp}×{self.experts}" if self.experts else self.mlp

    @property
    def label(self) -> str:
        parts = [self.attention, self.mlp_label]
        if self.weight_dtypes:
            parts.append("/".join(self.weight_dtypes))
        return " · ".join(parts)

    def to_json(self) -> dict:
        return {
            "attention": self.attention,
            "mlp": self.mlp,
            "experts": self.experts,
            "special": list(self.special),
            "weight_dtypes": list(self.weight_dtypes),
            "label": self.label,
        }


@dataclass
class Layer:
    submodel: str
    index: int  # original index within the submodel (MTP: 0..k-1)
    stored_index: int  # the number in the tensor names (absolute MTP: num_hidden_layers + k)
    prefix: str  # tensor-name prefix before the number
    kind: LayerKind
    tensors: list[str] = field(default_factory=list)
    nbytes: int = 0
    dtype_bytes: dict[str, int] = field(default_factory=dict)
    scale_tensors: int = 0
    unquantized: list[str] = field(default_factory=list)
    quant_ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    group: int = -1
    absent_tensors: int = 0  # tensors in shards not on disk: their bytes are not in nbytes

    @property
    def name(self) -> str:
        return f"{self.prefix}{self.stored_index}"

    @property
    def bytes_known(self) -> bool:
        return not self.absent_tensors

    def to_json(self, with_tensors: bool = False) -> dict:
        doc = {
            "index": self.index,
            "stored_as": self.name,
            "group": self.group,
            "kind": self.kind.to_json(),
            "tensors": len(self.tensors),
            "bytes": self.nbytes if self.bytes_known else None,
            "bytes_present": self.nbytes,
            "tensors_not_present": self.absent_tensors,
            "dtype_bytes": dict(sorted(self.dtype_bytes.items())),
            "scale_tensors": self.scale_tensors,
            "unquantized_modules": self.unquantized,
            "quant_ignored": self.quant_ignored,
            "notes": self.notes,
        }
        if with_tensors:
            doc["tensor_names"] = self.tensors
        return doc


@dataclass
class Part:
    """Non-layer tensors with one role (embeddings, lm head, vision patch embed, ...)."""

    submodel: str
    label: str
    tensors: list[str] = field(default_factory=list)
    nbytes: int = 0
    absent_tensors: int = 0

    @property
    def bytes_known(self) -> bool:
        return not self.absent_tensors


@dataclass
class Submodel:
    name: str  # "text", "vision", "mtp", ...
    role: str
    config_path: str  # "" (top level), "text_config", ...
    declared_depth: int | None
    layers: list[Layer] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(l.nbytes for l in self.layers) + sum(p.nbytes for p in self.parts)

    @property
    def tensor_count(self) -> int:
        return sum(len(l.tensors) for l in self.layers) + sum(len(p.tensors) for p in self.parts)

    @property
    def bytes_known(self) -> bool:
        return all(l.bytes_known for l in self.layers) and all(p.bytes_known for p in self.parts)


@dataclass
class Group:
    id: int
    submodel: str
    kind: LayerKind
    layers: list[int] = field(default_factory=list)
    nbytes: int = 0
    symbol: str = "?"
    bytes_known: bool = True


@dataclass
class Inventory:
    source: ModelSource
    family: Family
    model_name: str
    submodels: dict[str, Submodel]
    shared: list[Part]
    groups: list[Group]
    quantization: Quantization | None
    unassigned: list[str]
    warnings: list[str]
    # How names were split: the stacks used (family or discovered), the layer-name regex
    # (groups: prefix, number, rest) and the MTP count the runtime will assume.
    stacks: tuple = ()
    layer_name_pattern: re.Pattern | None = None
    mtp_count: int = 0
    # Where config.json contradicts the checkpoint so that no plan can be trusted (a depth
    # missing or unlike the layers held, a per-layer list of the wrong length): (problem, fix).
    # Also among ``warnings`` (inspect describes them); every plan is blocked by them.
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def text(self) -> Submodel | None:
        return self.submodels.get("text")

    @property
    def mtp(self) -> Submodel | None:
        return self.submodels.get("mtp")

    @property
    def total_bytes(self) -> int | None:
        """All tensor bytes (None: shards are absent and the index gives no total_size)."""
        return self.source.tensor_bytes

    @property
    def total_tensors(self) -> int:
        return self.source.tensor_count

    def strip(self, submodel: str = "text") -> str:
        """One symbol per layer, the symbol of its group."""
        sm = self.submodels.get(submodel)
        if sm is None:
            return ""
        sym = {g.id: g.symbol for g in self.groups}
        return "".join(sym.get(l.group, "?") for l in sm.layers)


# ---------------------------------------------------------------------------------------
def stack_config(config: dict, stack: Stack) -> tuple[dict, str]:
    """The sub-config a stack reads, and its path; the text stack falls back to the top level
    (Qwen2.5-VL's release keeps text fields at the top)."""
    cfg = config
    path = []
    for key in stack.config_path:
        sub = cfg.get(key)
        if isinstance(sub, dict):
            cfg = sub
            path.append(key)
        elif stack.submodel == "text":
            break
        else:
            return {}, ".".join(stack.config_path)
    return cfg, ".".join(path)


def _declared_depth(cfg: dict, stack: Stack) -> int | None:
    if stack.depth_rule is not None:
        d = stack.depth_rule(cfg)
        if d is not None:
            return d
    return first_int(cfg, *stack.depth_fields)


def _mtp_count(config: dict, text_cfg: dict, fam: Family) -> int:
    if fam.mtp is None:
        return 0
    if fam.mtp.count_rule is not None:
        n = fam.mtp.count_rule(text_cfg)
        if n is not None:
            return n
    for cfg in (text_cfg, config):
        n = first_int(cfg, *fam.mtp.count_fields)
        if n is not None:
            return n
    return fam.mtp.default_count


_GENERIC_STACK = re.compile(r"^((?:[A-Za-z0-9_]+\.)*?(?:layers|blocks|h|layer))\.(\d+)\.")


def _generic_stacks(names) -> tuple[Stack, ...]:
    counts: dict[str, set[int]] = {}
    for n in names:
        m = _GENERIC_STACK.match(n)
        if m:
            counts.setdefault(m.group(1) + ".", set()).add(int(m.group(2)))
    stacks = []
    text_done = False
    for prefix in sorted(counts, key=lambda p: (_text_rank(p), -len(counts[p]), p)):
        low = prefix.lower()
        if low.startswith("mtp"):
            continue
        if "vision" in low or "visual" in low:
            sub = "vision" if not any(s.submodel == "vision" for s in stacks) else prefix.rstrip(".")
        elif "audio" in low:
            sub = "audio"
        elif not text_done:
            sub, text_done = "text", True
        else:
            sub = prefix.rstrip(".")
        cfg_path = {"vision": ("vision_config",), "audio": ("audio_config",), "text": ("text_config",)}.get(sub, ())
        stacks.append(Stack(sub, (prefix,), config_path=cfg_path, depth_fields=GENERIC_DEPTH_FIELDS,
                            depth_aliases=GENERIC_DEPTH_ALIASES, attention=layer_types_rule if sub == "text" else None))
    return tuple(stacks)


# The depth under the names transformers' config classes give it (their attribute_map:
# GPT-2 / BLOOM / MPT n_layer, CodeGen n_layer, DBRX n_layers, ...).
GENERIC_DEPTH_FIELDS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "depth")
# Counts that are the depth when they equal it (xLSTM builds num_blocks blocks beside its
# num_hidden_layers); rewritten with it, never read as it.
GENERIC_DEPTH_ALIASES = ("num_blocks", "n_blocks")


def _text_rank(prefix: str) -> int:
    """Which discovered stack is the text decoder: a language-model path first, an encoder
    or Q-Former last, otherwise the longest stack."""
    low = prefix.lower()
    if any(w in low for w in ("encoder", "qformer", "q_former", "connector", "projector")):
        return 2
    return 0 if any(w in low for w in ("language_model", "text_model", "llm", "decoder")) else 1


_GENERIC_SHARED = (
    ("embed", "embeddings"),
    ("wte", "embeddings"),
    ("lm_head", "lm head"),
    ("norm", "final norm"),
)


def _generic_shared_label(name: str) -> str | None:
    low = name.lower()
    for hint, label in _GENERIC_SHARED:
        if hint in low:
            return label
    return None


# ---------------------------------------------------------------------------------------
def tensor_kinds(rests: list[str], shapes: list[tuple[int, ...]], expert_ids: set[int] | None = None):
    """Kinds from the names inside one layer (``rest`` = the name after ``<prefix><i>.``).

    ``expert_ids``: given when numbered segments of ``rests`` were already collapsed to "*"
    (see _analyse_tensors); the experts' numbers then come from there.
    Returns (attention class, mlp class, expert count or None, special modules)."""
    has = set()
    experts: set[int] = set() if expert_ids is None else expert_ids
    fused_experts = None
    for rest, shape in zip(rests, shapes):
        parts = rest.split(".")
        head = parts[0]
        if head in MLP_CONTAINERS and len(parts) > 1:
            sub = parts[1]
            if sub == "experts":
                has.add("moe")
                if len(parts) > 2 and parts[2].isdigit():
                    experts.add(int(parts[2]))
                elif len(parts) > 2 and parts[2] == "*" and expert_ids is not None:
                    pass
                elif len(shape) >= 3 and fused_experts is None:
                    fused_experts = shape[0]
            elif sub in ("shared_experts", "shared_expert", "shared_mlp"):
                has.add("shared expert")
            elif sub == "gate" and len(parts) > 2 and parts[2] == "tid2eid":
                has.add("hash")
            elif sub == "gate" and len(parts) > 2 and parts[2] == "e_score_correction_bias":
                has.add("router bias")
            elif sub in DENSE_MLP_PARTS:
                has.add("dense")
            elif head == "mixer" and sub in ("A_log", "conv1d", "in_proj", "dt_bias", "D"):
                has.add("mamba")
            elif head == "mixer" and sub in ("q_proj", "k_proj", "qkv_proj"):
                has.add("attn")
                if sub == "q_proj":
                    has.add("q")
            if head == "ffn" and sub == "gate" and "bias" in parts[-1:]:
                has.add("router bias")
        elif head in ("self_attn", "attn", "attention", "self_attention"):
            sub = parts[1] if len(parts) > 1 else ""
            if sub == "compressor":  # DeepSeek-V4: compressed cache (its indexer nested in it, transformers' names)
                has.add("compressor")
                if len(parts) > 2 and parts[2] == "indexer":
                    has.add("indexer")
            elif sub == "indexer":
                has.add("indexer")
            elif sub in ("kv_a_proj_with_mqa", "kv_b_proj", "wkv", "kv_a_layernorm"):
                has.add("mla")
            elif sub in ("q_proj", "qkv_proj", "qkv", "query_key_value", "q", "wq_a", "wq_b"):
                has.add("attn")
                if sub == "q_proj":
                    has.add("q")
                    if parts[-1] == "bias":
                        has.add("qkv bias")
            elif sub in ("k_proj", "v_proj", "kv_proj"):
                has.add("kv")
            elif sub in ("q_norm", "k_norm", "query_layernorm", "key_layernorm"):
                has.add("qk-norm")
            elif sub in ("sinks", "attn_sink"):
                has.add("attention sinks")
            elif sub in ("o_proj", "proj", "dense", "out_proj"):
                has.add("attn")
        elif head in ("linear_attn", "lightning_attn"):
            has.add("linear")
        elif head == "mamba":
            has.add("mamba")
        elif head in ("eh_proj", "e_proj", "h_proj"):
            has.add("mtp head")
        elif head == "main_proj":  # DSpark: the target layers' hidden states projected
            has.add("dspark main_proj")
        elif head in ("markov_head", "confidence_head"):
            has.add("dspark markov head")
    n_exp = len(experts) if experts else fused_experts
    special = tuple(
        s for s in ("shared expert", "router bias", "indexer", "qk-norm", "attention sinks", "qkv bias", "mtp head",
                    "dspark main_proj", "dspark markov head") if s in has
    )
    return _attention_class(has), _mlp_class(has), n_exp, special


def _attention_class(has: set[str]) -> str:
    """The attention class the module features found in one layer's names point to."""
    if "linear" in has:
        return LINEAR
    if "mamba" in has:
        return MAMBA
    if "compressor" in has:
        return COMPRESSED_TENSORS_INDEXER if "indexer" in has else COMPRESSED_TENSORS
    if "mla" in has:
        return DSA_FULL if "indexer" in has else MLA
    if "q" in has and "kv" not in has and "qkv bias" not in has and "attn" in has:
        return KV_SHARED
    if "attn" in has or "kv" in has:
        return FULL
    return NO_ATTENTION


def _mlp_class(has: set[str]) -> str:
    """The MLP class the module features found in one layer's names point to."""
    if "hash" in has:
        return HASH_MOE
    if "moe" in has:
        return MOE
    if "dense" in has:
        return DENSE
    return NO_MLP


# What DeepSeek-V4 layers with a compressor look like by their tensors (their kinds come from
# compress_ratios: see families.base.compressed_kind).
COMPRESSED_TENSORS = "compressed"
COMPRESSED_TENSORS_INDEXER = "compressed + indexer"

# Which tensor-derived attention classes fit which runtime kinds.
_ATTN_FITS = {
    MLA: {MLA, DSA_FULL},  # a DSA checkpoint run as plain MLA is still MLA tensors
    DSA_FULL: {DSA_FULL},
    DSA_SHARED: {DSA_FULL, MLA},  # IndexCache: checkpoints may or may not ship the indexer
    LINEAR: {LINEAR},
    MAMBA: {MAMBA},
    KV_SHARED: {KV_SHARED, FULL},
    NO_ATTENTION: {NO_ATTENTION},
}
_ATTN_DEFAULT_FIT = {FULL, KV_SHARED}
_MLP_FITS = {DENSE: {DENSE}, MOE: {MOE}, HASH_MOE: {HASH_MOE, MOE}, NO_MLP: {NO_MLP}}


def _attention_fits(rule: str, tensors: str) -> bool:
    ratio = compression_ratio(rule)
    if ratio is not None:  # DeepSeek-V4: a compressor where the ratio is > 1, its indexer at ratio 4
        if ratio <= 1:
            return tensors in (MLA, FULL, KV_SHARED, NO_ATTENTION)
        return tensors == (COMPRESSED_TENSORS_INDEXER if ratio == 4 else COMPRESSED_TENSORS)
    if rule.startswith("vision"):
        return tensors in (FULL, NO_ATTENTION)
    return tensors in _ATTN_FITS.get(rule, _ATTN_DEFAULT_FIT)


def _is_linear_weight(rest: str, shape: tuple[int, ...] | None) -> bool:
    """A linear layer's weight. ``shape`` None: a tensor only the index names (its shard is not
    on disk), judged by its name alone: a ``weight`` leaf outside norms and embeddings, or a
    fused expert tensor."""
    leaf = rest.rsplit(".", 1)[-1]
    if leaf in LINEAR_WEIGHT_LEAVES and (shape is not None or leaf == "weight"):
        if shape is not None and len(shape) < 2:
            return False
        low = rest.lower()
        return not any(h in low for h in NORM_HINTS) and "embed" not in low
    # fused expert tensors (gpt-oss / Llama4 / Qwen3-VL-MoE): "...experts.gate_up_proj[_blocks]"
    return ".experts." in rest and (shape is None or len(shape) >= 3) and not leaf.endswith(("_scales", "_bias", "bias"))


def _collapse_module(rest: str) -> str:
    """``mlp.experts.17.down_proj.weight`` -> ``mlp.experts.*.down_proj``."""
    parts = rest.split(".")
    if parts[-1] in LINEAR_WEIGHT_LEAVES:
        parts = parts[:-1]
    return ".".join("*" if p.isdigit() else p for p in parts)


# ---------------------------------------------------------------------------------------
def build_inventory(source: ModelSource) -> Inventory:
    with gc_paused():
        return _build_inventory(source)


def _build_inventory(source: ModelSource) -> Inventory:
    config = source.config
    fam = family_for(config)
    warnings: list[str] = []
    stacks = fam.stacks or _generic_stacks(n for h in source.all_headers.values() for n in h.names)

    # text config (for MTP count and absolute-MTP depth)
    text_stack = next((s for s in stacks if s.submodel == "text"), None)
    text_cfg = stack_config(config, text_stack)[0] if text_stack else config
    _check_whole_fields(source, fam, text_stack, config)
    mtp_n = _mtp_count(config, text_cfg, fam)
    quant = detect_quantization(source)
    quantized = quant is not None

    prefix_owner, mtp_prefixes, all_prefixes, splitter = _layer_splitter(source, fam, stacks, mtp_n)
    submodels, depth, st_cfg = _declared_submodels(source, fam, config, stacks, mtp_n)
    stack_of = {st.submodel: st for st in stacks}

    text_depth = depth.get("text")
    absolute_mtp = fam.mtp is not None and fam.mtp.style == "absolute" and text_depth is not None
    sub_of_prefix = {p: ("mtp" if p in mtp_prefixes else prefix_owner[p].submodel) for p in all_prefixes}
    layer_tensors, layer_prefix, leftovers = _assign_layer_tensors(
        source, splitter, all_prefixes, sub_of_prefix, absolute_mtp, text_depth
    )
    if any(k[0] == "mtp" for k in layer_tensors):
        submodels.setdefault("mtp", Submodel("mtp", "MTP / draft heads", "", mtp_n))
    shared_parts, unassigned = _assign_shared_tensors(leftovers, fam, submodels)
    if any(o == "mtp" for o, _ in shared_parts):
        submodels.setdefault("mtp", Submodel("mtp", "MTP / draft heads", "", mtp_n))

    # --- build layers (layers with the same tensor set share one analysis)
    memo: list[_Analysed] = []
    absent_dtypes = estimated_weight_dtypes(config, quant) if source.absent_shards else None
    _build_layers(fam, submodels, layer_tensors, layer_prefix, stack_of, st_cfg, text_cfg, text_depth, quantized, memo, absent_dtypes)
    _add_declared_layers(
        source, fam, submodels, depth, mtp_n, stack_of, st_cfg, text_cfg, text_depth, text_stack, quantized, memo, warnings
    )
    problems = _depth_problems(source, fam, submodels.get("text"), text_stack, st_cfg.get("text", text_cfg), text_depth, warnings)
    _check_mtp_layer_count(source, fam, submodels, mtp_n, warnings)
    if quant is not None:
        problems += quant.problems
        _mark_quant_ignored(quant, submodels, splitter, mtp_prefixes, prefix_owner)
    shared = _attach_parts(submodels, shared_parts)
    groups = _group_layers(submodels)
    warnings = _final_warnings(source, fam, config, text_cfg, submodels, unassigned, quant, warnings)

    return Inventory(
        source=source,
        family=fam,
        model_name=_model_name(config, source),
        submodels=submodels,
        shared=shared,
        groups=groups,
        quantization=quant,
        unassigned=unassigned,
        warnings=warnings,
        stacks=tuple(stacks),
        layer_name_pattern=splitter,
        mtp_count=mtp_n,
        problems=problems,
    )


def _layer_splitter(source: ModelSource, fam: Family, stacks, mtp_n: int):
    """The layer prefixes' owners, the MTP prefixes, all prefixes and the name-splitting regex."""
    prefix_owner: dict[str, Stack] = {}
    for st in stacks:
        for p in st.prefixes:
            prefix_owner.setdefault(p, st)
    mtp_prefixes = fam.mtp.prefixes if fam.mtp and fam.mtp.style == "relative" else ()
    if not fam.stacks and mtp_n and _any_name_starts(source, ("mtp.layers.",)):
        mtp_prefixes = ("mtp.layers.",)
    all_prefixes = sorted(set(prefix_owner) | set(mtp_prefixes), key=len, reverse=True)
    alternation = "|".join(re.escape(p) for p in all_prefixes) if all_prefixes else r"(?!x)x"
    # Matches every name: group 1/2 = layer prefix and number (None for non-layer tensors).
    splitter = re.compile(r"^(?:(" + alternation + r")(\d+)\.)?(.+)$", re.DOTALL)
    return prefix_owner, mtp_prefixes, all_prefixes, splitter


def _declared_submodels(source: ModelSource, fam: Family, config: dict, stacks, mtp_n: int):
    """The submodels the stacks (and MTP) declare, with each stack's declared depth and config."""
    submodels: dict[str, Submodel] = {}
    depth: dict[str, int | None] = {}
    st_cfg: dict[str, dict] = {}
    for st in stacks:
        if st.submodel in submodels:
            continue
        cfg, path = stack_config(config, st)
        st_cfg[st.submodel] = cfg
        depth[st.submodel] = _declared_depth(cfg, st)
        role = {"text": "text backbone", "vision": "vision tower", "audio": "audio encoder"}.get(st.submodel, "layer stack")
        submodels[st.submodel] = Submodel(st.submodel, role, path, depth[st.submodel])
    if fam.mtp is not None and (mtp_n or _any_name_starts(source, fam.mtp.shared_prefixes)):
        submodels["mtp"] = Submodel("mtp", "MTP / draft heads", "", mtp_n)
    return submodels, depth, st_cfg


def _assign_layer_tensors(source: ModelSource, splitter, all_prefixes, sub_of_prefix, absolute_mtp, text_depth):
    """Every header's tensors as column slices per (submodel, stored index), plus the leftovers."""
    # A layer's tensors are (almost always) adjacent in a header, so each header is cut into
    # runs of one layer key (see _layer_runs) and a run moves into its layer as column
    # slices; Python runs once per run, not per tensor.
    layer_tensors: dict[tuple[str, int], _Columns] = {}  # (submodel, stored idx) -> columns
    layer_prefix: dict[tuple[str, int], str] = {}
    leftovers = _Columns()
    match = splitter.match
    # With nested prefixes ("a.layers." inside "a.layers.3.b.layers.") a run's leading text is
    # not enough: every name is matched on its own.
    nested = any(a != b and a.startswith(b) for a in all_prefixes for b in all_prefixes)
    for header in source.all_headers.values():
        for prefix, idx_s, start, stop in _layer_runs(header.names, match, nested, getattr(header, "plain_names", False)):
            if prefix is None:
                leftovers.add(header, start, stop, None)
            else:
                idx = int(idx_s)
                sub = sub_of_prefix[prefix]
                if absolute_mtp and sub == "text" and idx >= text_depth:
                    sub = "mtp"
                key = (sub, idx)
                bucket = layer_tensors.get(key)
                if bucket is None:
                    bucket = layer_tensors[key] = _Columns()
                    layer_prefix[key] = prefix
                bucket.add(header, start, stop, len(prefix) + len(idx_s) + 1)
    return layer_tensors, layer_prefix, leftovers


def _assign_shared_tensors(leftovers: _Columns, fam: Family, submodels: dict[str, Submodel]):
    """Non-layer tensors grouped into parts by role, and the names no role claims."""
    shared_parts: dict[tuple[str, str], Part] = {}
    unassigned: list[str] = []
    mtp_shared = fam.mtp.shared_prefixes if fam.mtp and fam.mtp.style == "relative" else ()
    for name, dtype, begin, end in zip(leftovers.names, leftovers.dtypes, leftovers.begins, leftovers.ends):
        label = None
        owner = "shared"
        for p in mtp_shared:
            if name.startswith(p):
                label, owner = "mtp shared", "mtp"
                break
        if label is None:
            for p, lab in fam.shared:
                if name.startswith(p):
                    label = lab
                    break
        if label is None and not fam.stacks:
            label = _generic_shared_label(name)
        if label is None and not _GENERIC_STACK.match(name):
            # Outside every layer stack and not numbered like one: kept as is.
            label = "other (kept unchanged)"
        if label is None:
            unassigned.append(name)
            continue
        if label.startswith("vision"):
            owner = "vision" if "vision" in submodels else "shared"
        part = shared_parts.get((owner, label))
        if part is None:
            part = shared_parts[(owner, label)] = Part(owner, label)
        part.tensors.append(name)
        part.nbytes += end - begin
        if dtype == ABSENT_DTYPE:
            part.absent_tensors += 1
    return shared_parts, unassigned


def _build_layers(fam, submodels, layer_tensors, layer_prefix, stack_of, st_cfg, text_cfg, text_depth, quantized, memo, absent_dtypes) -> None:
    """Append a Layer to its submodel for every (submodel, stored index) the checkpoint holds."""
    for (sub, stored), columns in sorted(layer_tensors.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        sm = submodels[sub]
        prefix = layer_prefix[(sub, stored)]
        if sub == "mtp" and fam.mtp is not None and fam.mtp.style == "absolute":
            index = stored - (text_depth or 0)
        else:
            index = stored
        cfg = st_cfg.get(sub, text_cfg)
        layer = _make_layer(fam, stack_of.get(sub), cfg, sub, index, stored, prefix, columns, quantized, memo, absent_dtypes)
        if not fam.stacks and sub == "text":
            traits = _config_traits(cfg, sm.declared_depth or text_depth)
            if traits:
                layer.kind = replace(layer.kind, special=layer.kind.special + traits(index))
        sm.layers.append(layer)


def _config_traits(cfg: dict, depth: int | None):
    """For a family without a module: a function index -> what the config alone says is
    particular about that layer (its entry in every per-layer list whose entries differ,
    its membership of every list of layer indices), or None when nothing does."""
    if not depth:
        return None
    indices = {k: set(v) for k, v in cfg.items() if is_layer_index_list(k, v, depth)}
    # a list of layer indices naming every layer (full_attn_idxs [0..n-1]) is as long as the
    # depth, but it is membership, not one value per layer
    lists = {k: v for k, v in cfg.items() if isinstance(v, list) and len(v) == depth and k != "layer_types"
             and k not in indices and len({json.dumps(x, sort_keys=True) for x in v}) > 1}
    # a string is a per-layer list only when its name says it is a pattern (hybrid_override_pattern:
    # one letter per layer); "gelu_new" or "bfloat16" at 8 layers is one value, not 8
    patterns = {k: v for k, v in cfg.items()
                if isinstance(v, str) and "pattern" in k.lower() and len(v) == depth and len(set(v)) > 1}
    if not (lists or patterns or indices):
        return None

    def traits(i: int) -> tuple[str, ...]:
        out = [f"{k}={v[i]}" for k, v in lists.items() if i < len(v)]
        out += [f"{k}={v[i]}" for k, v in patterns.items() if i < len(v)]
        out += [f"in {k}" for k, members in indices.items() if i in members]
        return tuple(out)

    return traits


_INDEX_LIST_NAME = re.compile(r"(^|_)(layers|idx|idxs|indices|indexes|ids)$|layer_(indices|ids|idx)$", re.I)


def is_layer_index_list(key: str, value, depth: int) -> bool:
    """A config list naming layers by index (``attn_layer_indices``, ``cross_attention_layers``):
    ascending distinct non-negative ints, the first below the depth (defaults may name layers
    past it), under a name that says so."""
    return (
        isinstance(value, list) and len(value) > 0 and _INDEX_LIST_NAME.search(key) is not None
        and all(type(x) is int and x >= 0 for x in value) and value == sorted(set(value))
        and value[0] < depth
    )


def _add_declared_layers(
    source, fam, submodels, depth, mtp_n, stack_of, st_cfg, text_cfg, text_depth, text_stack, quantized, memo, warnings
) -> None:
    """Compare declared and held depths; list declared layers of a config-only directory."""
    # Layers the config declares but the checkpoint lacks (config-only directories) are still
    # listed, with kinds from the config rules alone.
    for sub, sm in submodels.items():
        want = depth.get(sub) if sub != "mtp" else (mtp_n if (fam.mtp and fam.mtp.style == "absolute") or not sm.layers else None)
        have = {l.index for l in sm.layers}
        if want is None:
            continue
        if source.all_headers and have and sub != "mtp":
            top = max(have) + 1
            if top != want:
                warnings.append(
                    f"{sub}: the config declares {plural(want, 'layer')} but the checkpoint has layers 0..{top - 1}"
                )
            missing = sorted(set(range(min(want, top))) - have)
            if missing:
                warnings.append(f"{sub}: checkpoint has no tensors for layers {index_ranges(missing)}")
        if not source.all_headers:
            st = stack_of.get(sub)
            cfg = st_cfg.get(sub, text_cfg)
            for i in range(want):
                if i not in have:
                    stored = i + (text_depth or 0) if sub == "mtp" and fam.mtp and fam.mtp.style == "absolute" else i
                    prefix = (st.prefixes[0] if st else (fam.mtp.prefixes[0] if fam.mtp and fam.mtp.prefixes else (text_stack.prefixes[0] if text_stack else "layers.")))
                    sm.layers.append(_make_layer(fam, st, cfg, sub, i, stored, prefix, _Columns(), quantized, memo))
            sm.layers.sort(key=lambda l: l.index)


# Lists with one entry per text layer (the generic catalogue the plan re-slices).
PER_LAYER_LISTS = (
    "layer_types",
    "mlp_layer_types",
    "indexer_types",
    "no_rope_layers",
    "activation_sparsity_pattern",
    "attn_type_list",
    "decoder_attention_types",
    "layers_block_type",
    "block_configs",
    "compress_ratios",
)


def _depth_problems(
    source, fam: Family, text: Submodel | None, stack: Stack | None, cfg: dict, depth: int | None, warnings: list[str]
) -> list[tuple[str, str]]:
    """Where the text stack's config contradicts the checkpoint: (problem, fix) each, those
    not already among ``warnings`` added there. Only with weights present (a config-only
    directory has nothing to contradict)."""
    if text is None or stack is None or not source.all_headers or not text.layers:
        return []
    where = f"{text.config_path}." if text.config_path else ""
    held = sorted(l.index for l in text.layers)
    top = held[-1] + 1
    field_name = next((f for f in stack.depth_fields if first_int(cfg, f) is not None), stack.depth_fields[0])
    problems = []
    if depth is None:
        if fam.stacks:  # a family module knows the field; the generic reader only guesses names
            problems.append((
                f"config.json: {where}{field_name} is missing, and the checkpoint holds text layers 0..{top - 1}",
                f"add \"{field_name}\": {top} to config.json",
            ))
            warnings.append(problems[-1][0])
        return problems
    # More layers held than declared may be MTP heads stored as layers for an architecture
    # without a family module: only a family module can call that a contradiction. (The
    # disagreement itself is already a warning: see _add_declared_layers.)
    if depth > top or (depth < top and fam.stacks):
        if first_int(cfg, field_name) == depth:
            said, fix = f"{field_name} is {depth}", f"make {field_name} {top}"
        else:  # the family's depth rule read it elsewhere (Nemotron-H: the pattern's length)
            source_field = next(
                (k for k in ("hybrid_override_pattern", *PER_LAYER_LISTS) if isinstance(cfg.get(k), (str, list)) and len(cfg[k]) == depth),
                None,
            )
            said = f"{source_field} describes {depth} layer(s)" if source_field else f"the config declares {depth} layer(s)"
            fix = f"give {source_field} one entry per layer ({top})" if source_field else f"declare {plural(top, 'layer')}"
        problems.append((
            f"config.json: {where}{said} but the checkpoint holds text layers 0..{top - 1}",
            f"{fix}, or give the checkpoint the layers the config declares"
            if depth > top else f"{fix}, or drop the tensors of layers {depth}..{top - 1}",
        ))
        return problems
    for key in PER_LAYER_LISTS:
        value = cfg.get(key)
        if isinstance(value, list) and len(value) < depth:
            problems.append((
                f"config.json: {where}{key} has {len(value)} entries but {field_name} is {depth} (one entry per layer)",
                f"give {key} one entry per layer",
            ))
            warnings.append(problems[-1][0])
    return problems


def _whole_number_problem(value, least: int) -> str | None:
    """Why ``value`` is not a whole number >= ``least`` (null allowed), or None."""
    if value is None or (type(value) is int and value >= least):
        return None
    if isinstance(value, bool):
        shown = f"{str(value).lower()} (a boolean)"
    elif isinstance(value, str):
        shown = f"{value!r} (a string)"
    elif isinstance(value, int):
        shown = str(value)
    elif isinstance(value, float):
        shown = f"{value} (not a whole number)" if value == value and abs(value) != float("inf") else f"{value} (not a number)"
    else:
        shown = f"{json.dumps(value)[:60]} (a {type(value).__name__})"
    return f"{shown}; it must be a whole number" + (f" of at least {least}" if least else ", 0 or more")


def _check_whole_fields(source, fam: Family, stack: Stack | None, config: dict) -> None:
    """The family's structure fields that the runtime reads as whole numbers (DeepSeek's
    ``n_group``, ``kv_lora_rank``...): a string or a fraction there is one error naming the
    field, not a model that "needs its own code" or a config transformers cannot build."""
    if not fam.whole_fields:
        return
    cfg, path = stack_config(config, stack) if stack is not None else (config, "")
    where = f"{path}." if path else ""
    for key, least in fam.whole_fields:
        if key in cfg:
            problem = _whole_number_problem(cfg[key], least)
            if problem:
                raise InputError(source.root / "config.json", f"{where}{key} is {problem}")


def _check_mtp_layer_count(source, fam, submodels, mtp_n: int, warnings: list[str]) -> None:
    """Warn when the checkpoint's MTP layer count differs from the configured one."""
    mtp_sm = submodels.get("mtp")
    if mtp_sm is not None and source.all_headers:
        have = len(mtp_sm.layers)
        if have != mtp_n:
            if have > mtp_n:
                warnings.append(
                    f"mtp: the checkpoint holds {have} MTP layer(s) but the config declares {mtp_n}"
                    + (" (vLLM's default when the field is absent)" if fam.mtp and fam.mtp.default_count == mtp_n else "")
                )
            else:
                warnings.append(f"mtp: the config declares {mtp_n} MTP layer(s) but the checkpoint holds {have}")


def _mark_quant_ignored(quant: Quantization, submodels, splitter, mtp_prefixes, prefix_owner) -> None:
    """Record on each layer the quantization ignore entries that name it by number."""
    by_key = {(sm.name, l.stored_index): l for sm in submodels.values() for l in sm.layers}
    for e in quant.entries:
        if e.is_regex:
            continue
        prefix, idx_s, _ = splitter.match(e.value + ".#").groups()
        if prefix is None:
            continue
        idx = int(idx_s)
        sub = "mtp" if prefix in mtp_prefixes else prefix_owner[prefix].submodel
        layer = by_key.get((sub, idx)) or by_key.get(("mtp", idx))
        if layer is not None:
            layer.quant_ignored.append(e.value)


def _attach_parts(submodels: dict[str, Submodel], shared_parts: dict[tuple[str, str], Part]) -> list[Part]:
    """Drop empty undeclared submodels, give each its parts and return the shared parts."""
    # A stack the family knows but this model lacks (Gemma 3 text-only has no vision tower).
    for name in [n for n, sm in submodels.items() if not sm.layers and not sm.parts and not sm.declared_depth]:
        if not any(o == name for o, _ in shared_parts):
            del submodels[name]

    for (owner, _), part in shared_parts.items():
        if owner in submodels and owner != "shared":
            submodels[owner].parts.append(part)
    return [p for (owner, _), p in shared_parts.items() if owner == "shared" or owner not in submodels]


def _group_layers(submodels: dict[str, Submodel]) -> list[Group]:
    """Group layers of equal (submodel, kind), one symbol per group, and set each layer's group."""
    groups: list[Group] = []
    by_sig: dict[tuple, Group] = {}
    symbols = iter("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789" + "?" * 1000)
    for sm in submodels.values():
        for layer in sm.layers:
            sig = (sm.name, layer.kind)
            g = by_sig.get(sig)
            if g is None:
                g = by_sig[sig] = Group(len(groups), sm.name, layer.kind, symbol=next(symbols))
                groups.append(g)
            g.layers.append(layer.index)
            g.nbytes += layer.nbytes
            g.bytes_known = g.bytes_known and layer.bytes_known
            layer.group = g.id
    return groups


def _final_warnings(source, fam, config, text_cfg, submodels, unassigned, quant, warnings: list[str]) -> list[str]:
    """The source's warnings, then these with family checks, layer notes, unassigned and quantization added."""
    # --- config-level checks and disagreements
    for check in fam.checks:
        warnings.extend(check(text_cfg if text_cfg is not config else config))
    for sm in submodels.values():
        for layer in sm.layers:
            for note in layer.notes:
                warnings.append(f"{sm.name} layer {layer.index}: {note}")
    if unassigned:
        warnings.append(
            f"{len(unassigned)} tensor(s) belong to no layer or known part, e.g. {unassigned[0]!r}"
        )
    if fam.key == "generic":
        warnings.insert(0, "no family module for this architecture: layer kinds come from tensor names only")
    if quant is not None:
        warnings.extend(quant.warnings)
    return source.warnings + warnings


def _model_name(config: dict, source: ModelSource) -> str:
    """The model's name: the config's ``_name_or_path`` tail, else the directory's name (of a
    snapshot in huggingface_hub's cache, ``models--ORG--NAME/snapshots/<commit>``, or of a
    remote repository's mirror: NAME)."""
    name = config.get("_name_or_path") if isinstance(config.get("_name_or_path"), str) else ""
    root = source.root.resolve()
    if source.origin:  # a mirror of a remote repository (hf://ORG/NAME@<commit>): NAME
        return (name.rstrip("/").rsplit("/", 1)[-1] if name else "") or source.origin.split("://", 1)[1].split("@")[0].rsplit("/", 1)[-1]
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        return (name.rstrip("/").rsplit("/", 1)[-1] if name else "") or root.parent.parent.name.split("--", 2)[-1]
    return (name.rstrip("/").rsplit("/", 1)[-1] if name else "") or root.name


# a numbered segment with the dot before it (replaced by ".*"; a literal first character lets
# the search skip ahead, where a look-behind tried every position)
_NUMBER_SEGMENT = re.compile(r"\.\d+(?=\.|$)", re.MULTILINE)
_EXPERT_NUMBER = re.compile(r"^(?:" + "|".join(MLP_CONTAINERS) + r")\.experts\.(\d+)(?:\.|$)", re.MULTILINE)


def _estimated_dtype(rest: str, listed, absent_dtypes) -> str | None:
    """The stored dtype of a tensor only the index names: quantized when a scale sits beside
    it (``weight_scale_inv``, ``weight_scale``), else the config's dtype."""
    base, quantized = absent_dtypes
    if any(rest + suffix in listed for suffix in ("_scale_inv", "_scale")):
        return quantized
    return base


def _analyse_tensors(rests: tuple[str, ...], dtypes: tuple[str, ...], shapes: tuple, quantized: bool, absent_dtypes=None):
    """Kinds, weight dtypes, scale count and unquantized modules of one layer's tensors.

    An MoE layer repeats a few tensors per expert (DeepSeek-V3: 6 × 256); with numbered
    segments collapsed to "*" (one regex pass over the joined names) each distinct
    (name, dtype, shape) is analysed once and counted as often as it occurs."""
    expert_ids = None
    lines = "\n".join(rests)
    if lines.count("\n") == len(rests) - 1:  # no name holds a newline itself
        expert_ids = set(map(int, _EXPERT_NUMBER.findall(lines)))
        counts = Counter(zip(_NUMBER_SEGMENT.sub(".*", lines).split("\n"), dtypes, shapes))
    else:
        counts = Counter(zip(rests, dtypes, shapes))
    unique = list(counts)
    t_att, t_mlp, t_exp, special = tensor_kinds([u[0] for u in unique], [u[2] for u in unique], expert_ids)
    weight_dtypes: set[str] = set()
    scales = 0
    unquant: dict[str, None] = {}
    listed = {u[0] for u in unique} if absent_dtypes is not None else ()
    for (rest, dtype, shape), count in counts.items():
        leaf = rest.rsplit(".", 1)[-1]
        if leaf in SCALE_SUFFIXES or leaf.endswith("_scales"):
            scales += count
            continue
        if dtype == ABSENT_DTYPE:  # only the index names it: estimated from the names and the config
            dtype = _estimated_dtype(rest, listed, absent_dtypes)
            linear = dtype is not None and _is_linear_weight(rest, None)
        else:
            linear = _is_linear_weight(rest, shape)
        if linear:
            weight_dtypes.add(dtype)
            if quantized and dtype in ("BF16", "F16", "F32"):
                unquant[_collapse_module(rest)] = None
    return t_att, t_mlp, t_exp, special, tuple(sorted(weight_dtypes)), scales, list(unquant)


def _any_name_starts(source: ModelSource, prefixes: tuple[str, ...]) -> bool:
    test = methodcaller("startswith", prefixes)
    return bool(prefixes) and any(any(map(test, h.names)) for h in source.all_headers.values())


def _layer_runs(names: list[str], match, nested: bool, plain: bool = False):
    """Yield ``(prefix, index text, start, stop)`` for each run of names with one layer key
    (prefix None: names outside any layer stack).

    The key of a run's first name comes from the splitter regex. The names are joined once,
    one per line; a run then reaches the last line that starts with the same ``<prefix><i>.``,
    and it is a run when every line up to there starts so (one C-level count). Names holding
    a newline (only an escape in the header can make one; ``plain``: the header's reader
    ruled them out), nested prefixes, and a layer's names interleaved with others are matched
    one name at a time instead."""
    n = len(names)
    text = "\n" + "\n".join(names)
    if nested or (not plain and text.count("\n") != n):
        yield from _layer_runs_by_name(names, match, 0, n)
        return
    start = 0
    pos = 0  # text[pos] is the newline before names[start]
    while start < n:
        prefix, idx_s = match(names[start]).group(1, 2)
        if prefix is None:
            stop = start + 1
            while stop < n and match(names[stop]).group(1) is None:
                stop += 1
            yield None, None, start, stop
            pos += sum(map(len, names[start:stop])) + stop - start
            start = stop
            continue
        needle = f"\n{prefix}{idx_s}."
        last = text.rfind(needle, pos)  # at least names[start]'s own line, at pos
        end = text.find("\n", last + 1)
        if end < 0:
            end = len(text)
        # The needle starts lines only: ``held`` of them. The lines up to ``end`` are those
        # ``held`` names exactly when the first ``held`` names from here fill the text up to
        # ``end``; with names known to be unique (``plain``: the canonical reader checked),
        # when the last line is the held-th name (another line in between would make the
        # last line a later name).
        held = text.count(needle, pos, end)
        if last < pos or not (_ends_with_line(text, end, names[start + held - 1]) if plain
                                          else sum(map(len, names[start : start + held])) + held == end - pos):
            prefix, idx_s, _, stop = next(_layer_runs_by_name(names, match, start, n))
            yield prefix, idx_s, start, stop
            pos += sum(map(len, names[start:stop])) + stop - start
            start = stop
            continue
        yield prefix, idx_s, start, start + held
        start += held
        pos = end


def _ends_with_line(text: str, end: int, name: str) -> bool:
    """``text[:end]`` ends with the line ``"\n" + name``."""
    at = end - len(name) - 1
    return at >= 0 and text[at] == "\n" and text.startswith(name, at + 1, end)


def _layer_runs_by_name(names: list[str], match, start: int, n: int):
    """:func:`_layer_runs` by matching every name of ``names[start:n]`` on its own."""
    while start < n:
        key = match(names[start]).group(1, 2)
        stop = start + 1
        while stop < n and match(names[stop]).group(1, 2) == key:
            stop += 1
        yield key[0], key[1], start, stop
        start = stop


class _Columns:
    """One layer's tensors (or the non-layer ones) as columns gathered from header slices.

    Only the names are kept (the layer keeps them); the other columns are sliced from the
    headers when asked for and dropped after use, so the memory they take is reused instead
    of freshly mapped for every layer at once."""

    __slots__ = ("names", "cut", "runs")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.cut = 0  # len("<prefix><i>."): a name's rest is name[cut:]
        self.runs: list[tuple] = []  # (header, start, stop)

    def add(self, header, start: int, stop: int, cut: int | None) -> None:
        self.cut = cut or 0
        self.runs.append((header, start, stop))
        if len(self.runs) == 1:  # its slice is the column (one copy, not two)
            self.names = header.names[start:stop]
        else:
            self.names += header.names[start:stop]

    def _column(self, field: str) -> list:
        if len(self.runs) == 1:
            header, start, stop = self.runs[0]
            return getattr(header, field)[start:stop]
        out: list = []
        for header, start, stop in self.runs:
            out += getattr(header, field)[start:stop]
        return out

    @property
    def dtypes(self) -> list[str]:
        return self._column("dtypes")

    @property
    def shapes(self) -> list:
        return self._column("shapes")

    @property
    def begins(self) -> list[int]:
        return self._column("begins")

    @property
    def ends(self) -> list[int]:
        return self._column("ends")


class _Analysed:
    """A layer's tensor analysis, reused for every layer with the same names after the layer
    prefix, dtypes and shapes (then bytes are equal too)."""

    __slots__ = ("rests", "single_lines", "dtypes", "shapes", "result")

    def __init__(self, rests, dtypes, shapes, result) -> None:
        self.rests = rests
        self.single_lines = "\n".join(rests).count("\n") == len(rests) - 1  # no rest holds a newline
        self.dtypes = dtypes
        self.shapes = shapes
        self.result = result

    def fits(self, names: list[str], cut: int, dtypes: list[str], shapes: list) -> bool:
        if len(names) != len(self.rests) or dtypes != self.dtypes or shapes != self.shapes:
            return False
        if not names:  # layers a config-only directory declares
            return True
        # Every name starts with its layer's "<prefix><i>."; the names are the rests with
        # that lead in front exactly when the two spellings below agree, one name per line
        # (two C-level joins and one comparison; no string per name).
        lead = names[0][:cut]
        lines = "\n".join(names)
        if self.single_lines and lines.count("\n") == len(names) - 1:
            return lines == lead + ("\n" + lead).join(self.rests)
        return all(map(str.__eq__, names, map(lead.__add__, self.rests)))


def _make_layer(fam, stack, cfg, sub, index, stored, prefix, columns: _Columns, quantized, memo: list, absent_dtypes=None) -> Layer:
    """``absent_dtypes``: (unquantized, quantized) dtypes estimated for tensors only the index names."""
    dtype_column, shape_column = columns.dtypes, columns.shapes  # each sliced from the headers once
    analysed = next((a.result for a in memo if a.fits(columns.names, columns.cut, dtype_column, shape_column)), None)
    if analysed is None:
        rests = tuple(map(itemgetter(slice(columns.cut, None)), columns.names))
        dtypes = tuple(dtype_column)
        shapes = tuple(map(tuple, shape_column))
        sizes = list(map(minus, columns.ends, columns.begins))
        dtype_bytes: dict[str, int] = {}
        for dtype, n in zip(dtypes, sizes):
            dtype_bytes[dtype] = dtype_bytes.get(dtype, 0) + n
        if rests:
            estimate = absent_dtypes if ABSENT_DTYPE in dtype_bytes else None
            analysed = _analyse_tensors(rests, dtypes, shapes, quantized, estimate) + (sum(sizes), dtype_bytes)
        else:
            analysed = (None, None, None, (), (), 0, [], 0, {})
        memo.append(_Analysed(rests, dtype_column, shape_column, analysed))
    t_att, t_mlp, t_exp, special, weight_dtypes, scales, unquant, nbytes, dtype_bytes = analysed
    dtype_bytes = dict(dtype_bytes)
    absent = dtype_column.count(ABSENT_DTYPE) if ABSENT_DTYPE in dtype_bytes else 0
    dtype_bytes.pop(ABSENT_DTYPE, None)
    if sub == "mtp" and fam.mtp is not None:
        r_att = fam.mtp.attention(cfg, index) if fam.mtp.attention else None
        r_mlp = fam.mtp.mlp(cfg, index) if fam.mtp.mlp else None
        if r_att is None and fam.stacks and fam.stacks[0].attention is not None:
            r_att = fam.stacks[0].attention(cfg, stored)
    else:
        r_att = stack.attention(cfg, index) if stack and stack.attention else None
        r_mlp = stack.mlp(cfg, index) if stack and stack.mlp else None
    notes: list[str] = []
    if r_att is not None and t_att is not None and not _attention_fits(r_att, t_att):
        notes.append(f"config builds {r_att} attention but the tensors look like {t_att}")
    if r_mlp is not None and t_mlp is not None and t_mlp not in _MLP_FITS.get(r_mlp, {r_mlp}):
        notes.append(f"config builds a {r_mlp} MLP but the tensors look like {t_mlp}")
    att = r_att or t_att or "unknown"
    mlp = r_mlp or t_mlp or "unknown"
    experts = None
    if mlp in (MOE, HASH_MOE):
        cfg_exp = first_int(cfg, *(stack.experts_fields if stack else ()), "n_routed_experts", "num_experts", "num_local_experts")
        experts = t_exp if t_exp is not None else cfg_exp
        if t_exp is not None and cfg_exp is not None and t_exp != cfg_exp:
            notes.append(f"config says {cfg_exp} experts but the checkpoint has {t_exp}")
    if att == DSA_SHARED:
        special = tuple(s for s in special if s != "indexer")
    kind = LayerKind(att, mlp, experts, tuple(special), weight_dtypes)
    return Layer(
        submodel=sub,
        index=index,
        stored_index=stored,
        prefix=prefix,
        kind=kind,
        tensors=columns.names,
        nbytes=nbytes,
        dtype_bytes=dtype_bytes,
        scale_tensors=scales,
        unquantized=list(unquant),
        notes=notes,
        absent_tensors=absent,
    )
