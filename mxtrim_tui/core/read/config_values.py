"""Structure fields of a config checked for sense before anything is planned.

A depth of ``"6"``, ``6.5``, ``true`` or ``NaN``, a period of 0 or a sub-config that is a list
would otherwise be read as "absent" or divide by zero later, and be written into the output
unchanged. Each is one clear error naming ``config.json`` and the field.

So are the fields the family rules and the plan index or iterate (found by
``tests/test_fuzz_readers.py``): a ``model_type`` that is not a string, ``architectures`` that
is not a list of names, a layer-index list (``mlp_only_layers``, ``moe_layers``...) that is not
a list of layer indices, a per-layer type list (``layer_types``...) holding lists or objects,
and a depth past any model's (``num_hidden_layers: 1e12`` would be counted to, layer by layer).
"""

from __future__ import annotations

import math

from ..errors import InputError

# Whole numbers >= 1 when present (null allowed where the runtime reads null as "default").
POSITIVE = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "hidden_size", "num_attention_heads",
    "vocab_size", "moe_layer_freq", "decoder_sparse_step", "sliding_window_pattern", "index_topk_freq",
    "full_attention_interval", "attn_layer_period", "expert_layer_period", "interleave_moe_layer_step",
)
# Whole numbers >= 0 or null when present (0 / null: "absent" or "derived" for some configs).
POSITIVE_OR_NULL = (
    "num_key_value_heads", "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_experts",
    "num_local_experts", "num_experts_per_tok", "head_dim", "first_k_dense_replace", "num_nextn_predict_layers",
    "mtp_num_hidden_layers", "attn_layer_offset", "expert_layer_offset",
)
NON_NEGATIVE = POSITIVE_OR_NULL
# Never per-layer lists.
SCALAR_ONLY = frozenset({"num_hidden_layers", "n_layer", "n_layers", "num_layers", "hidden_size", "vocab_size"})
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "language_config", "llm_config", "quantization_config")
# Layer counts the inventory and the plan count to, layer by layer (and, for a config-only
# directory, list): a count past any model's (the deepest published have ~1,000 layers)
# would hang them. The plan's own --keep bound (build.MAX_LAYER_INDEX) is 10x this.
MAX_LAYERS = 10_000
LAYER_COUNTS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "depth", "num_nextn_predict_layers", "mtp_num_hidden_layers",
)
# Lists of layer indices (null or absent allowed): remapped, sorted and searched by the plan.
INDEX_LISTS = (
    "mlp_only_layers", "moe_layers", "dspark_target_layer_ids", "fullatt_block_indexes", "deepstack_visual_indexes",
    "intermediate_layers_indices",
)
# 1-based layer indices inside ``linear_attn_config`` (Kimi-Linear).
INDEX_LISTS_1BASED = ("kda_layers", "full_attn_layers")
# Per-layer lists of type names (null or absent allowed): their entries are looked up by name.
TYPE_NAME_LISTS = ("layer_types", "mlp_layer_types", "indexer_types", "layers_block_type")


def _describe(value) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (not a number)"
    if isinstance(value, float):
        return f"{value} (not a whole number)"
    if isinstance(value, str):
        return f"{value[:60]!r}{'...' if len(value) > 60 else ''} (a string)"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 200 else f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    shown = repr(value)
    if len(shown) > 80:  # a 10,000-entry list stays a readable one-line error
        shown = shown[:77] + "..."
    return f"{shown} (a {type(value).__name__})"


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Nesting a config may have: real ones nest a handful of levels; a document ~330 levels deep
# (json.loads reads up to ~1000) exhausts the stack of the plan's deep copy.
MAX_NESTING = 64


def check_nesting(document, path, what: str = "config.json", limit: int = MAX_NESTING) -> None:
    """Raise :class:`InputError` when ``document`` (parsed JSON) nests arrays and objects
    more than ``limit`` levels deep. Iterative: no recursion to exhaust."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if type(value) is dict:
            children = value.values()
        elif type(value) is list:
            children = value
        else:
            continue
        if depth > limit:
            raise InputError(path, f"{what} nests arrays and objects more than {limit} levels deep")
        stack.extend((v, depth + 1) for v in children if type(v) in (dict, list))


def check_config_values(config: dict, path, where: str = "") -> None:
    """Raise :class:`InputError` for the first structure field without sense."""
    if not where:
        check_nesting(config, path)
    for key in POSITIVE + POSITIVE_OR_NULL + NON_NEGATIVE:
        if key not in config:
            continue
        value = config[key]
        if value is None and key in POSITIVE_OR_NULL:
            continue
        least = 0 if key in NON_NEGATIVE else 1
        if isinstance(value, list) and key not in SCALAR_ONLY:  # per-layer values (MiniMax, Gemma 3n...)
            if all(_whole(v) and v >= 0 for v in value) or all(v is None or _whole(v) for v in value):
                continue
        if not _whole(value) or value < least:
            need = "a whole number" + (" of at least 1" if least else ", 0 or more")
            raise InputError(path, f"{where}{key} is {_describe(value)}; it must be {need}")
    _check_structure_fields(config, path, where)
    for key in SUB_CONFIGS:
        if key in config and config[key] is not None and not isinstance(config[key], dict):
            raise InputError(path, f"{where}{key} is {_describe(config[key])}; it must be an object")
        if isinstance(config.get(key), dict):
            check_config_values(config[key], path, f"{where}{key}.")
    _check_quantization(config, path, where)


def _check_structure_fields(config: dict, path, where: str) -> None:
    for key in LAYER_COUNTS:
        value = config.get(key)
        if _whole(value) and value > MAX_LAYERS:
            raise InputError(path, f"{where}{key} is {_describe(value)}; no model has more than {MAX_LAYERS:,} layers")
    if where.endswith("quantization_config."):
        return
    value = config.get("model_type")
    if value is not None and not isinstance(value, str):
        raise InputError(path, f"{where}model_type is {_describe(value)}; it must be a string")
    value = config.get("architectures")
    if value is not None and not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
        raise InputError(path, f"{where}architectures is {_describe(value)}; it must be a list of class names")
    for key in INDEX_LISTS:
        _check_index_list(config.get(key), path, f"{where}{key}", 0)
    linear = config.get("linear_attn_config")
    if isinstance(linear, dict):
        for key in INDEX_LISTS_1BASED:
            _check_index_list(linear.get(key), path, f"{where}linear_attn_config.{key}", 1)
    for key in TYPE_NAME_LISTS:
        value = config.get(key)
        if value is not None and not (isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)):
            raise InputError(path, f"{where}{key} is {_describe(value)}; it must be a list of layer type names")


def _check_index_list(value, path, name: str, least: int) -> None:
    if value is None:
        return
    if not (isinstance(value, list) and all(_whole(v) and v >= least for v in value)):
        what = "layer indices" if not least else "1-based layer indices"
        raise InputError(path, f"{name} is {_describe(value)}; it must be a list of {what} (whole numbers, {least} or more)")


def _check_quantization(config: dict, path, where: str) -> None:
    if where.endswith("quantization_config."):
        block = config.get("weight_block_size")
        if block is not None and (not isinstance(block, list) or not all(_whole(b) and b >= 1 for b in block)):
            raise InputError(path, f"{where}weight_block_size is {_describe(block)}; it must list whole numbers of at least 1")
        group = config.get("group_size")
        if group is not None and not (_whole(group) and (group >= 1 or group == -1)):
            raise InputError(path, f"{where}group_size is {_describe(group)}; it must be a whole number of at least 1 (or -1)")
