"""The environment variable names a vLLM environment knows: the names vLLM's and vLLM-MetaX's
``envs`` modules define, read as text from the files that environment would import (found by
``importlib.util.find_spec`` in that Python, which imports nothing of them).

A launch script setting a ``VLLM_*`` / ``VLLM_METAX_*`` name that neither knows sets nothing: vLLM
reads its settings by these names only.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..write.launch_text import read_text

# names of vLLM's family: checked against the known ones (others — CUDA_VISIBLE_DEVICES,
# HF_HUB_OFFLINE, FLASHINFER_* — belong to other programs and are listed only)
VLLM_FAMILY = re.compile(r"(VLLM_|MACA_VLLM_)\w+")
PACKAGES = ("vllm", "vllm_metax")
_QUOTED_NAME = re.compile(r"""["']([A-Z][A-Z0-9_]{2,})["']""")
_ENVS_LIMIT = 4 << 20
# run in the vLLM Python with -I: where each package's files are, nothing of them imported
_LOCATE = (
    "import importlib.util as u, json\n"
    "out = {}\n"
    "for n in %r:\n"
    "    try:\n"
    "        s = u.find_spec(n)\n"
    "    except Exception:\n"
    "        s = None\n"
    "    out[n] = list(s.submodule_search_locations or []) if s is not None else None\n"
    "print(json.dumps(out))\n"
) % (PACKAGES,)


@dataclass(frozen=True)
class KnownEnv:
    names: frozenset[str]
    # package -> the envs file(s) read (None: the package is not installed there)
    sources: dict[str, list[str] | None] = field(default_factory=dict)

    def judge(self, name: str) -> bool | None:
        """True: a name vLLM / vLLM-MetaX knows; False: one of vLLM's family neither knows;
        None: not theirs to know, or not checkable (vLLM-MetaX's own names without it)."""
        if name in self.names:
            return True
        if not VLLM_FAMILY.fullmatch(name):
            return None
        if name.startswith("VLLM_METAX_") and not self.sources.get("vllm_metax"):
            return None
        return False

    def where(self) -> str:
        return " and ".join(f"{pkg}'s envs" for pkg, files in self.sources.items() if files)


def names_in(files: list[Path]) -> set[str]:
    """Every quoted upper-case name in the files (the keys of ``environment_variables`` and the
    names given to ``os.getenv``)."""
    found: set[str] = set()
    for path in files:
        text = read_text(path, _ENVS_LIMIT)
        if text:
            found |= set(_QUOTED_NAME.findall(text))
    return found


def envs_files(locations: list[str]) -> list[Path]:
    """A package's ``envs.py``, or the modules of its ``envs/`` package."""
    out: list[Path] = []
    for loc in locations:
        base = Path(loc)
        if (base / "envs.py").is_file():
            out.append(base / "envs.py")
        elif (base / "envs").is_dir():
            out += sorted((base / "envs").glob("*.py"))
    return out


def known_from_locations(locations: dict[str, list[str] | None]) -> KnownEnv | None:
    """KnownEnv from each package's locations (None: vLLM is not there, nothing to check)."""
    files = {pkg: envs_files(locs) if locs else None for pkg, locs in locations.items()}
    if not files.get("vllm"):
        return None
    names = names_in([p for pkg_files in files.values() if pkg_files for p in pkg_files])
    return KnownEnv(frozenset(names), {pkg: [str(p) for p in f] if f else None for pkg, f in files.items()})


def known_env_names(python: str, timeout: float = 30.0) -> KnownEnv | None:
    """The names ``python``'s vLLM and vLLM-MetaX know (None: no vLLM there, or it does not
    answer)."""
    try:
        proc = subprocess.run([python, "-I", "-c", _LOCATE], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        locations = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    return known_from_locations(locations) if isinstance(locations, dict) else None
