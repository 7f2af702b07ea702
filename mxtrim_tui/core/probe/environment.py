"""The environment seen: versions and import origins, read without importing the packages
(importing vLLM takes seconds and may initialise accelerators). The reading itself is the one
the validation's offline probe makes in another interpreter (standard library only)."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from functools import cache

from .offline_probe import PACKAGES as DISTRIBUTIONS
from .offline_probe import package


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str | None
    origin: str | None  # where the import system would load it from


def package_info(module: str) -> PackageInfo:
    found = package(module, DISTRIBUTIONS.get(module, (module,)))
    return PackageInfo(module, found["version"], found["origin"])


@cache
def environment() -> dict:
    """Constant for the process: read once (the wizard renders the report on every keystroke
    in the output path to show its exact size)."""
    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "packages": {m: package_info(m) for m in DISTRIBUTIONS},
    }
