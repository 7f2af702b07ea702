"""The shape of family knowledge.

A :class:`Family` says, as data, where a model's stacks of numbered layers live in the
checkpoint and in the config, how MTP / draft heads are named, and which small rules turn
(config, layer index) into the kind of layer the runtime builds. The generic engine
(:mod:`mxtrim_tui.core.inventory`) applies them; it knows no family by name.
"""

from __future__ import annotations

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
    attention: KindRule | None = None
    mlp: KindRule | None = None


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
    experts = first_int(cfg, "num_experts", default=0) or 0
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
