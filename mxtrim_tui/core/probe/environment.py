"""The environment seen: versions and import origins, read without importing the packages
(importing vLLM takes seconds and may initialise accelerators). The reading itself is the one
the validation's offline probe makes in another interpreter (standard library only)."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from functools import cache, lru_cache

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


def validation_environment() -> dict:
    """The interpreter ``mxtrim validate`` (and the wizard's validation) would use now, by the
    rule of :mod:`.vllm_python`: ``{"python", "origin", "version"}``, or ``{"error"}`` when no
    place holds vLLM. Asked once per setting, variable and folder (the wizard renders the
    report on every keystroke)."""
    from ..user_settings import get_setting
    from .vllm_python import ENV_VAR, SETTING

    try:
        here = os.getcwd()
    except OSError:
        here = ""
    return dict(_validation_environment(get_setting(SETTING), os.environ.get(ENV_VAR), here))


@lru_cache(maxsize=8)
def _validation_environment(setting: str | None, variable: str | None, cwd: str) -> tuple:
    from .vllm_python import ENV_VAR, VllmNotFound, find_vllm_python, local_places

    try:  # exactly what the cache is keyed on
        found = find_vllm_python(None, setting, environ={ENV_VAR: variable} if variable is not None else {},
                                 local=local_places(cwd or None))
    except VllmNotFound as exc:
        return (("error", str(exc)),)
    return (("python", found.python), ("origin", found.origin), ("version", found.version))
