"""The shape of family knowledge.

A :class:`Family` says, as data, where a model's stacks of numbered layers live in the
checkpoint and in the config, how MTP / draft heads are named, and which small rules turn
(config, layer index) into the kind of layer the runtime builds. The generic engine
(:mod:`mxtrim_tui.core.model.inventory`) applies them; it knows no family by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

# A rule maps (the stack's config dict, layer index) to a kind string, or None when the
# config does not decide (then the kind is read from the tensor names).
KindRule = Callable[[dict, int], "str | None"]

# --- attention kinds -------------------------------------------------------------------
FULL = "full"
SLIDING = "sliding"
CHUNKED = "chunked"
NOPE_GLOBAL = "full (NoPE)"
MLA = "mla"
DSA_FULL = "dsa (full indexer)"
DSA_SHARED = "dsa (shared indexer)"
LINEAR = "linear"  # Gated DeltaNet / lightning / KDA
MAMBA = "mamba"
KV_SHARED = "kv-shared"
VISION_FULL = "vision full"
VISION_WINDOW = "vision windowed"
NO_ATTENTION = "none"
# DeepSeek-V4 (vLLM ``models/deepseek_v4/attention.py``): every layer keeps a sliding window;
# ``compress_ratios[i]`` > 1 adds a cache of one compressed entry per that many tokens, and
# ratio 4 adds the lightning indexer. Ratio 0 or 1: the sliding window only.
SLIDING_ONLY = "sliding window only"
COMPRESSED_PREFIX = "compressed ÷"


def compressed_kind(ratio: int) -> str:
    """The attention kind of a DeepSeek-V4 layer with compression ratio ``ratio``."""
    if ratio <= 1:
        return SLIDING_ONLY
    return f"{COMPRESSED_PREFIX}{ratio}" + (" + indexer" if ratio == 4 else "")


def compression_ratio(kind: str) -> int | None:
    """The ratio a kind made by :func:`compressed_kind` stands for (1: sliding window only),
    None for every other kind."""
    if kind == SLIDING_ONLY:
        return 1
    if kind.startswith(COMPRESSED_PREFIX):
        digits = kind[len(COMPRESSED_PREFIX):].split(" ", 1)[0]
        return int(digits) if digits.isdigit() else None
    return None


@dataclass(frozen=True)
class Boundary:
    """A prompt length from which a layer kind takes a path that shorter prompts do not: a
    prompt of more than ``tokens`` tokens crosses it (validation's long input must). ``what``
    names it ("the sliding window 512"), ``source`` says where it comes from in the config."""

    what: str
    tokens: int
    source: str


# attention kind -> (config field, what its boundary is called)
_LENGTH_FIELDS = {
    SLIDING: ("sliding_window", "the sliding window"),  # vLLM attends to the last that many positions
    CHUNKED: ("attention_chunk_size", "the attention chunk"),  # a longer prompt opens a second chunk
    # DeepSeek-V3.2 / GLM-5 DSA: the indexer selects index_topk tokens, a choice only among more
    DSA_FULL: ("index_topk", "the index top-k"),
    DSA_SHARED: ("index_topk", "the index top-k"),
}


def length_boundaries(cfg: dict, attention: str) -> list[Boundary]:
    """The boundaries of the common attention kinds (a family's ``long_input`` unless it has
    its own), from the text config: the sliding window, the attention chunk, the sparse
    indexer's top-k."""
    field_name, what = _LENGTH_FIELDS.get(attention, (None, ""))
    value = first_int(cfg, field_name) if field_name else None
    return [Boundary(f"{what} {value}", value, f"{field_name}={value}")] if value and value > 0 else []


# --- MLP kinds -------------------------------------------------------------------------
DENSE = "dense"
MOE = "moe"
HASH_MOE = "hash-moe"
NO_MLP = "none"


@dataclass(frozen=True)
class Stack:
    """A stack of numbered layers: ``<prefix><index>.<rest>`` in tensor names."""

    submodel: str  # "text", "vision", "audio", ...
    prefixes: tuple[str, ...]
    config_path: tuple[str, ...] = ()  # () = top-level config, ("text_config",) ...
    depth_fields: tuple[str, ...] = ("num_hidden_layers",)
    # Counts rewritten with the depth only when they equal it (xLSTM's num_blocks: the number of
    # blocks where that is the depth, something else where it is not)
    depth_aliases: tuple[str, ...] = ()
    attention: KindRule | None = None
    mlp: KindRule | None = None
    experts_fields: tuple[str, ...] = ()
    # How a depth is derived when no depth field is authoritative (Nemotron-H pattern).
    depth_rule: Callable[[dict], "int | None"] | None = None


@dataclass(frozen=True)
class Mtp:
    """Multi-token-prediction / draft heads stored in the checkpoint.

    ``absolute``: stored as text layers ``num_hidden_layers + k`` (DeepSeek, GLM, Kimi-Linear,
    MiniMax-M2); renumbered with the backbone. ``relative``: stored under their own prefix
    (``mtp.layers.{k}``, ``mtp.{k}``) and never renumbered.
    """

    style: str  # "absolute" | "relative"
    count_fields: tuple[str, ...] = ("num_nextn_predict_layers",)
    prefixes: tuple[str, ...] = ()  # relative style: layer prefixes, e.g. "mtp.layers."
    shared_prefixes: tuple[str, ...] = ()  # relative style: non-layer MTP tensors, e.g. "mtp."
    default_count: int = 0  # when the config has no count field (Qwen3-Next: vLLM assumes 1)
    # The number of heads the runtime builds from the config, when more than the count fields
    # say (DeepSeek-V4's DSpark drafter builds ``n_mtp_layers`` or 3 heads beside the one MTP
    # layer num_nextn_predict_layers declares); None: the count fields decide.
    count_rule: Callable[[dict], "int | None"] | None = None
    attention: KindRule | None = None
    mlp: KindRule | None = None


@dataclass(frozen=True)
class LoadStage:
    """What one GPU builds at load time, for a family's ``load_buffers``: the attention kinds of
    its layers (the MTP layers too where they are served as the drafter), whether it is the
    last pipeline stage, the serve batch (``--max-num-batched-tokens``) and whether it runs the
    MTP drafter."""

    kinds: tuple[str, ...]
    last: bool
    batched_tokens: int
    drafter: bool = False


def release(version: str | None) -> tuple[int, ...] | None:
    """The release numbers a version string starts with (``0.28.1.dev3+g12ab`` -> (0, 28, 1));
    None when it starts with none."""
    m = re.match(r"\d+(?:\.\d+)*", version or "")
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


@dataclass(frozen=True)
class RuntimeLimit:
    """A known limitation of some vLLM releases for an output of this family: releases from
    ``since`` up to (not including) ``until`` cannot serve an output of ``mode`` ("dummy" or
    "weights"), because of ``problem``. `mxtrim plan` / `trim` say it when they make such an
    output and the vLLM in use is one of those releases, or unknown."""

    mode: str
    since: str
    until: str
    problem: str

    def affects(self, version: str | None) -> bool | None:
        """Whether vLLM ``version`` is one of the releases; None when the version is unknown."""
        numbers = release(version)
        if numbers is None:
            return None
        return release(self.since) <= numbers < release(self.until)

    def warning(self, version: str | None, where: str = "", weights_possible: bool = True) -> str:
        """The one line said: the releases, the problem, the vLLM in use and what to do."""
        if version:
            found = f"the vLLM in use ({where}) is {version}" if where else f"the vLLM in use is {version}"
        elif where:
            found = f"the vLLM in use ({where}) does not say its version"
        else:
            found = "no vLLM was found to tell whether the one in use is affected"
        todo = f"serve the output with vLLM {self.until} or later"
        if self.mode == "dummy" and weights_possible:
            todo += ", or trim with --mode weights"
        return f"vLLM {self.since} up to {self.until} (not included) {self.problem}; {found}: {todo}"


@dataclass(frozen=True)
class Family:
    key: str
    display: str
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    stacks: tuple[Stack, ...] = ()
    mtp: Mtp | None = None
    # (prefix, label) for non-layer tensors; matched in order, first wins.
    shared: tuple[tuple[str, str], ...] = ()
    # Config fields the runtime and transformers both read, checked for disagreement:
    # (field, rule kind) -> a callable returning a list of messages.
    checks: tuple[Callable[[dict], list[str]], ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = ()
    # --- trimming knowledge ---
    # Rewrite hooks run on a TrimContext (see core/plan/build.py) after the generic per-layer
    # list / index-list handling: recompute scalar rules, write explicit patterns.
    trim: tuple[Callable, ...] = ()
    # Dense layers must precede MoE layers (``first_k_dense_replace``-style rules).
    dense_prefix: bool = False
    # vLLM raises when no MoE layer is built (Qwen3-MoE, GLM-4.5, Mixtral, Qwen3-Next).
    requires_moe: bool = False
    # transformers hard-codes the original MTP index in _keys_to_ignore_on_load_unexpected.
    mtp_ignored_by_transformers: bool = False
    # vLLM-MetaX builds layer N of an N-layer model as a dense MTP layer at exactly this N
    # (the JoyAI hack in vllm_metax/models/deepseek_v2.py).
    metax_dense_mtp_depth: int | None = None
    # What to do when the renumbered config cannot express the kept kinds.
    formula_fix: str = "choose layers whose kinds the family's rules can express at the new indices"
    # Structure fields the runtime reads as whole numbers, with their least value (null is
    # allowed): checked when the inventory is built (config_values checks the common ones).
    whole_fields: tuple[tuple[str, int], ...] = ()
    # Config lists of text-layer indices that the draft heads read (DeepSeek-V4's
    # ``dspark_target_layer_ids``): remapped to the new numbering, kept by the automatic
    # selection while the heads are kept, and a target not kept is said (the heads' input
    # projection is sized for every target, so a shorter list no longer loads).
    target_lists: tuple[str, ...] = ()
    # The --kv-cache-dtype vLLM's GPU path requires of this family where it takes no other
    # (None: any); the serve command and validation's server pass it unless one is chosen.
    kv_cache_dtype: str | None = None
    # What vLLM allocates while it loads the model beside the checkpoint's tensors (buffers,
    # caches, workspaces), counted in the weights per GPU: (the text config, one GPU's
    # LoadStage) -> [(what, bytes)]; None: nothing beside the tensors.
    load_buffers: Callable[[dict, LoadStage], list[tuple[str, int]]] | None = None
    # Known limitations of vLLM releases for this family's outputs (RuntimeLimit)
    runtime_limits: tuple[RuntimeLimit, ...] = ()
    # The prompt lengths from which a kept attention kind takes a path shorter prompts do not:
    # (the text config, the attention kind) -> [Boundary]; validation's long input crosses them.
    long_input: Callable[[dict, str], list[Boundary]] = length_boundaries


# --- small helpers shared by family modules -------------------------------------------
def list_entry(cfg: dict, key: str, idx: int):
    """``cfg[key][idx]`` when ``cfg[key]`` is a list long enough, else None."""
    value = cfg.get(key)
    if isinstance(value, list) and 0 <= idx < len(value):
        return value[idx]
    return None


def first_int(cfg: dict, *keys: str, default: int | None = None) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return default


LAYER_TYPE_NAMES = {
    "full_attention": FULL,
    "attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
    "mamba": MAMBA,
    "indexed_attention": DSA_FULL,
    "deepseek_sparse_attention": DSA_FULL,
}


def layer_types_rule(cfg: dict, idx: int) -> str | None:
    """Read the transformers-style ``layer_types`` list when present."""
    value = list_entry(cfg, "layer_types", idx)
    if value is None:
        return None
    return LAYER_TYPE_NAMES.get(value, str(value))


def qwen_moe_mlp(cfg: dict, idx: int) -> str:
    """Qwen2/3-MoE rule (vLLM qwen3_moe.py, qwen2_moe.py): MoE iff not in mlp_only_layers,
    experts > 0 and (idx + 1) % decoder_sparse_step == 0."""
    only = cfg.get("mlp_only_layers") or []
    # transformers 5 saves the count as num_local_experts (num_experts is its attribute alias)
    experts = first_int(cfg, "num_experts", "num_local_experts", default=0) or 0
    step = first_int(cfg, "decoder_sparse_step", default=1) or 1
    if idx not in only and experts > 0 and (idx + 1) % step == 0:
        return MOE
    return DENSE


def deepseek_moe_mlp(cfg: dict, idx: int) -> str:
    """DeepSeek-V2/V3 rule (vLLM deepseek_v2.py): MoE iff n_routed_experts is set,
    idx >= first_k_dense_replace and idx % moe_layer_freq == 0."""
    if cfg.get("n_routed_experts") is None:
        return DENSE
    k = first_int(cfg, "first_k_dense_replace", default=0) or 0
    freq = first_int(cfg, "moe_layer_freq", default=1) or 1
    return MOE if idx >= k and idx % freq == 0 else DENSE


# --- trimming hooks shared by several families ------------------------------------------
# Each hook takes the plan's TrimContext (core/plan/build.py): ctx.kept (original indices),
# ctx.kinds (their LayerKinds), ctx.get(field), ctx.set(field, value, reason), ctx.error/warn.
ATTENTION_TO_LAYER_TYPE = {
    FULL: "full_attention",
    SLIDING: "sliding_attention",
    CHUNKED: "chunked_attention",
    LINEAR: "linear_attention",
    NOPE_GLOBAL: "full_attention",
}


def set_first_k_dense(ctx) -> None:
    """``first_k_dense_replace`` = number of kept dense layers (they form the prefix);
    ``moe_layer_freq`` = 1 so every later layer stays MoE at its new index."""
    if ctx.get("first_k_dense_replace") is None and not any(k.mlp == DENSE for k in ctx.kinds):
        return
    dense = sum(1 for k in ctx.kinds if k.mlp == DENSE)
    ctx.set("first_k_dense_replace", min(dense, ctx.new_n), "number of kept dense layers (the dense prefix)")
    freq = ctx.get("moe_layer_freq")
    if isinstance(freq, int) and freq != 1:
        ctx.set("moe_layer_freq", 1, "kept MoE layers are consecutive after the dense prefix")


def write_layer_types(ctx, *, only_if_absent: bool = False) -> None:
    """Write an explicit ``layer_types`` list for the kept layers (replacing formula rules
    such as parity, ``sliding_window_pattern`` or ``full_attention_interval``)."""
    if only_if_absent and isinstance(ctx.get("layer_types"), list):
        return
    if isinstance(ctx.get("layer_types"), list):
        return  # the generic re-slice already wrote the kept entries
    types = [ATTENTION_TO_LAYER_TYPE.get(k.attention) for k in ctx.kinds]
    if None in types:
        return
    ctx.set("layer_types", types, "explicit per-layer attention types (the formula would change after renumbering)")


def qwen_moe_placement(ctx) -> None:
    """With ``decoder_sparse_step`` != 1 the step rule cannot follow arbitrary renumbering:
    set step 1 and list the kept dense layers in ``mlp_only_layers``."""
    step = ctx.get("decoder_sparse_step")
    if isinstance(step, int) and step != 1:
        ctx.set("decoder_sparse_step", 1, "MoE placement made explicit")
        ctx.set(
            "mlp_only_layers",
            [j for j, k in enumerate(ctx.kinds) if k.mlp == DENSE],
            "kept dense layers, at their new indices",
        )


def require_moe(ctx) -> None:
    if not ctx.kinds:
        return
    src = ctx.inventory.submodels["text"].layers
    if any(l.kind.mlp in (MOE, HASH_MOE) for l in src) and not any(k.mlp in (MOE, HASH_MOE) for k in ctx.kinds):
        first = next(l.index for l in src if l.kind.mlp in (MOE, HASH_MOE))
        ctx.error(
            "no MoE layer kept: vLLM raises for this architecture when the model has no MoE layer",
            f"keep at least one MoE layer (e.g. {first})",
        )
