"""Structure fields of a config checked for sense before anything is planned.

A depth of ``"6"``, ``6.5``, ``true`` or ``NaN``, a period of 0 or a sub-config that is a list
would otherwise be read as "absent" or divide by zero later, and be written into the output
unchanged. Each is one clear error naming ``config.json`` and the field.
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


def _describe(value) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (not a number)"
    if isinstance(value, float):
        return f"{value} (not a whole number)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return f"{value!r} (a {type(value).__name__})"


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config_values(config: dict, path, where: str = "") -> None:
    """Raise :class:`InputError` for the first structure field without sense."""
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
    for key in SUB_CONFIGS:
        if key in config and config[key] is not None and not isinstance(config[key], dict):
            raise InputError(path, f"{where}{key} is {_describe(config[key])}; it must be an object")
        if isinstance(config.get(key), dict):
            check_config_values(config[key], path, f"{where}{key}.")
    _check_quantization(config, path, where)


def _check_quantization(config: dict, path, where: str) -> None:
    if where.endswith("quantization_config."):
        block = config.get("weight_block_size")
        if block is not None and (not isinstance(block, list) or not all(_whole(b) and b >= 1 for b in block)):
            raise InputError(path, f"{where}weight_block_size is {_describe(block)}; it must list whole numbers of at least 1")
        group = config.get("group_size")
        if group is not None and not (_whole(group) and (group >= 1 or group == -1)):
            raise InputError(path, f"{where}group_size is {_describe(group)}; it must be a whole number of at least 1 (or -1)")
