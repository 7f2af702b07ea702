"""transformers' own checkpoint loading, run on meta tensors, on every transformers from 4.56.

The checks hand transformers' loader the names and shapes a checkpoint holds (meta tensors, no
data) and read back what ``from_pretrained`` would report: missing, unexpected and mis-shaped
tensors after the version's own key renamings (VLM prefixes, per-expert weights fused into one
parameter). The loader is internal to transformers and has changed shape three times in the
range users run; each shape is recognised by what the installed version has, not by its number:

* **4.56 – 4.57** (vLLM-MetaX 0.17 stacks, vLLM 0.17 – 0.22): no weight conversions. Keys are
  renamed by ``_get_key_renaming_mapping`` (the class's ``_checkpoint_conversion_mapping``, the
  base-model prefix), then ``_find_missing_and_unexpected_keys`` (tied parameters, non-persistent
  buffers, the class's ignore patterns) and ``_find_mismatched_keys`` judge them.
* **5.0**: ``convert_and_load_state_dict_in_model(model, state_dict, load_config, tp_plan,
  dtype_plan)`` returns a 5-tuple; ``_adjust_missing_and_unexpected_keys(missing, unexpected)``.
* **5.1 – 5.15** (vLLM-MetaX's 5.5.3 floor): the same with ``tp_plan`` required, a
  ``LoadStateDictInfo`` returned and adjusted in place.
* **5.16 and newer**: ``tp_plan`` gone from the call.

A version whose internals match none of these raises :class:`LoaderUnavailable`, naming the
version and what was missing: the checks then say *not checked*, never a mismatch.
"""

from __future__ import annotations

import inspect


class LoaderUnavailable(Exception):
    """transformers' loading internals are not usable in this version (message: why, with the
    version); the tensor comparison is not checked."""


def transformers_version() -> str:
    try:
        import transformers
    except ImportError:
        return "(not installed)"
    return getattr(transformers, "__version__", "?")


def load_with_transformers(model, feed: dict):
    """(missing, unexpected, mis-shaped [(name, checkpoint shape, model shape)], how) when
    transformers' own loader loads ``feed`` (name -> meta tensor) into ``model`` (on meta)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import convert_and_load_state_dict_in_model
        from transformers.modeling_utils import LoadStateDictConfig
    except ImportError:
        return _load_4x(model, feed)
    try:
        return _load_5x(model, feed, get_model_conversion_mapping, convert_and_load_state_dict_in_model, LoadStateDictConfig)
    except LoaderUnavailable:
        raise
    except TypeError as exc:  # a signature this module does not know
        raise LoaderUnavailable(f"transformers {transformers_version()}'s loader has another signature ({exc})") from exc


HOW = "through transformers' loader (its key conversions applied)"


def _load_5x(model, feed, get_mapping, convert_and_load, LoadStateDictConfig):
    mapping = get_mapping(model, None, None)
    config = LoadStateDictConfig(device_map={"": "meta"}, weight_mapping=mapping)
    params = inspect.signature(convert_and_load).parameters
    extra = {}
    if "tp_plan" in params:  # 5.0 - 5.15: required; no tensor parallelism here
        extra["tp_plan"] = None
    if "dtype_plan" in params:  # 5.0 only: the plan moved into the load config in 5.1
        extra["dtype_plan"] = {}
    result = convert_and_load(model, feed, config, **extra)
    if len(result) == 5:  # 5.0: (missing, unexpected, mismatched, offload index, conversion errors)
        missing, unexpected, mismatched_raw, _, errors = result
        if errors:
            raise RuntimeError(f"conversion errors: {errors}")
        missing, unexpected = set(missing), set(unexpected)
        model.tie_weights(missing_keys=missing, recompute_mapping=False)
        missing, unexpected = model._adjust_missing_and_unexpected_keys(missing, unexpected)
    else:
        info = result[0]
        if info.conversion_errors:
            raise RuntimeError(f"conversion errors: {info.conversion_errors}")
        # What from_pretrained does next: tie weights (a tied head is not missing), then drop
        # the keys the model class declares ignorable (and legacy rotary/position_ids buffers).
        model.tie_weights(missing_keys=info.missing_keys, recompute_mapping=False)
        model._adjust_missing_and_unexpected_keys(info)
        missing, unexpected, mismatched_raw = info.missing_keys, info.unexpected_keys, info.mismatched_keys
    mismatched = sorted((n, tuple(a), tuple(b)) for n, a, b in mismatched_raw)
    return set(missing), set(unexpected), mismatched, HOW


def _load_4x(model, feed):
    """transformers 4.56 - 4.57: ``_load_pretrained_model``'s own steps, without loading."""
    try:
        from transformers import modeling_utils as mu

        find_missing = mu._find_missing_and_unexpected_keys
        find_mismatched = mu._find_mismatched_keys
        renaming = model._get_key_renaming_mapping
    except (ImportError, AttributeError) as exc:
        raise LoaderUnavailable(f"transformers {transformers_version()} has neither the 5.x loader nor the 4.56 - 4.57 "
                                f"one ({type(exc).__name__}: {exc})") from exc
    keys = list(feed)
    prefix = model.base_model_prefix
    has_prefix_module = any(k.startswith(prefix) for k in keys) if prefix else False
    expects_prefix_module = hasattr(model, prefix) if prefix else False
    task_from_base = not has_prefix_module and expects_prefix_module
    base_from_task = has_prefix_module and not expects_prefix_module
    # from_pretrained renames with the class's conversion mapping (VLMs) when given none
    key_mapping = getattr(model, "_checkpoint_conversion_mapping", None) or None
    try:
        rename = renaming(keys, key_mapping, base_from_task, task_from_base)
        checkpoint_keys = list(rename.values())
        wanted = inspect.signature(find_missing).parameters
        args = {"model": model, "original_checkpoint_keys": keys, "checkpoint_keys": checkpoint_keys,
                "loading_base_model_from_task_state_dict": base_from_task, "hf_quantizer": None}
        if "cls" in wanted:  # 4.56: the class's ignore patterns applied inside
            args["cls"] = type(model)
        if "device_map" in wanted:
            args["device_map"] = {"": "meta"}
        missing, unexpected = find_missing(**{k: v for k, v in args.items() if k in wanted})
        names, shapes = find_mismatched(model, feed, None, True, rename, False, True)
        adjust = getattr(model, "_adjust_missing_and_unexpected_keys", None)
        if adjust is not None:  # 4.57: the class's ignore patterns applied here
            missing, unexpected = adjust(list(missing), list(unexpected), task_from_base)
    except TypeError as exc:
        raise LoaderUnavailable(f"transformers {transformers_version()}'s loader has another signature ({exc})") from exc
    mismatched = sorted((n, tuple(a), tuple(b)) for n, (a, b) in zip(names, shapes))
    return set(missing), set(unexpected), mismatched, HOW
