"""Where a model's quantization config lives and which of its entries name modules.

Lookup order follows vLLM's ``get_quant_config``: ``quantization_config``, then
``text_config.quantization_config``, then ``compression_config`` (compressed-tensors), then
side files (``quantize_config.json``, ``quant_config.json``, ``hf_quant_config.json``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..read.source import ModelSource

# Keys whose values name modules (lists of names/patterns, or dicts keyed by name/pattern).
MODULE_LIST_KEYS = ("ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules", "exclude")
MODULE_DICT_KEYS = ("quantized_layers", "dynamic")
_DIGIT_IN_REGEX = re.compile(r"\d")


@dataclass(frozen=True)
class ModuleEntry:
    """One module-naming entry: where it sits (JSON path as a tuple) and its text."""

    path: tuple[str | int, ...]
    value: str

    @property
    def is_regex(self) -> bool:
        v = self.value
        return v.startswith(("re:", "+:", "-:")) or any(c in v for c in "*?[]()^$\\|")


@dataclass
class Quantization:
    method: str
    location: str  # "config.json:quantization_config", "hf_quant_config.json", ...
    config: dict
    entries: list[ModuleEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # (message, fix) of what mxtrim cannot rewrite safely: the plan refuses until it is fixed
    problems: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        cfg = self.config
        bits = []
        for k in ("fmt", "bits", "weight_block_size", "group_size", "format", "quant_algo"):
            v = cfg.get(k)
            if v is None and isinstance(cfg.get("quantization"), dict):
                v = cfg["quantization"].get(k)
            if v is not None:
                bits.append(f"{k}={v}")
        return f"{self.method} ({', '.join(bits)})" if bits else self.method


def _collect(obj, path, out: list[ModuleEntry], problems: list[tuple[str, str]], file: str = "config.json"):
    """The module names under ``obj`` (at ``path``; a side file's paths start with its name)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in MODULE_LIST_KEYS and isinstance(v, str):
                # module names given as one string: which layers it names is unclear, and a
                # runtime iterating it would walk its characters; refused, never ignored
                inner = path[1:] if path and path[0] == file else path
                where = f"{file}: " + ".".join(map(str, (*inner, k)))
                problems.append((
                    f"{where} is a string ({v[:80]!r}), not a list of module names: mxtrim cannot tell which layers it names, "
                    "nor could a runtime that iterates it",
                    f"write it as a list, e.g. {json.dumps([v])[:100]}, in the source's copy of that file",
                ))
            elif k in MODULE_LIST_KEYS and isinstance(v, list):
                for i, e in enumerate(v):
                    if isinstance(e, str):
                        out.append(ModuleEntry((*path, k, i), e))
            elif k in MODULE_DICT_KEYS and isinstance(v, dict):
                for name in v:
                    out.append(ModuleEntry((*path, k, name), name))
            elif isinstance(v, (dict, list)):
                _collect(v, (*path, k), out, problems, file)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, (dict, list)):
                _collect(v, (*path, i), out, problems, file)


def _method(cfg: dict, fallback: str) -> str:
    m = cfg.get("quant_method") or cfg.get("quantization_method")
    if not m and isinstance(cfg.get("quantization"), dict):
        m = cfg["quantization"].get("quant_algo")
        if m:
            m = f"modelopt {m}"
    if not m and isinstance(cfg.get("producer"), dict):
        m = cfg["producer"].get("name")
    if not m and "bits" in cfg:
        m = f"gptq/awq ({cfg.get('bits')}-bit)"
    return str(m or fallback)


def detect_quantization(source: ModelSource) -> Quantization | None:
    config = source.config
    found: list[tuple[str, tuple, dict]] = []
    if isinstance(config.get("quantization_config"), dict):
        found.append(("config.json:quantization_config", ("quantization_config",), config["quantization_config"]))
    text = config.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("quantization_config"), dict):
        found.append(
            ("config.json:text_config.quantization_config", ("text_config", "quantization_config"), text["quantization_config"])
        )
    if isinstance(config.get("compression_config"), dict):
        found.append(("config.json:compression_config", ("compression_config",), config["compression_config"]))
    for fname, cfg in source.side_quant_configs.items():
        found.append((fname, (fname,), cfg))
    if not found:
        return None
    location, root_path, cfg = found[0]
    q = Quantization(_method(cfg, "compressed-tensors" if "compression" in location else "unknown"), location, cfg)
    for loc, path, c in found:
        _collect(c, path, q.entries, q.problems, loc.partition(":")[0])
    if len(found) > 1:
        q.warnings.append(
            "quantization configured in more than one place: "
            + ", ".join(l for l, _, _ in found)
            + f"; vLLM uses {found[0][0]}"
        )
    for e in q.entries:
        if e.value.startswith("re:") and _DIGIT_IN_REGEX.search(e.value):
            q.warnings.append(f"quantization regex {e.value!r} contains digits: check whether it names layer numbers")
    return q


_TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32"}


def config_dtype(*configs) -> str | None:
    """The safetensors dtype (BF16, F16, F32) the first of ``configs`` declaring one gives as
    ``torch_dtype`` / ``dtype``; None when none does."""
    for cfg in configs:
        if isinstance(cfg, dict):
            value = cfg.get("torch_dtype", cfg.get("dtype"))
            if isinstance(value, str) and value.removeprefix("torch.") in _TORCH_DTYPES:
                return _TORCH_DTYPES[value.removeprefix("torch.")]
    return None


def estimated_weight_dtypes(config: dict, quant: Quantization | None) -> tuple[str | None, str | None]:
    """``(unquantized, quantized)``: the safetensors dtypes a checkpoint stores linear weights
    in, as far as config.json says, for tensors only the index names (shards not on disk).
    Unquantized: ``torch_dtype`` / ``dtype``. Quantized (a weight with a scale beside it): FP8
    formats -> F8_E4M3 / F8_E5M2, 8-bit integer compressed-tensors -> I8; None where the
    config does not say."""
    base = config_dtype(config, config.get("text_config"))
    quantized = None
    if quant is not None:
        cfg = quant.config
        fmt = str(cfg.get("fmt") or cfg.get("activation_scheme_fmt") or "").lower()
        if quant.method == "fp8":
            quantized = "F8_E5M2" if "e5m2" in fmt else "F8_E4M3"
        groups = cfg.get("config_groups")
        if isinstance(groups, dict):
            kinds = {(w.get("type"), w.get("num_bits")) for g in groups.values() if isinstance(g, dict)
                     for w in [g.get("weights")] if isinstance(w, dict)}
            if len(kinds) == 1:
                quantized = {("int", 8): "I8", ("float", 8): "F8_E4M3"}.get(next(iter(kinds)))
    return base, quantized
