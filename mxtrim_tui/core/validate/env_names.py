"""The environment variable names a vLLM environment knows: the names vLLM's and vLLM-MetaX's
``envs`` modules define, read as text from the files that environment would import (found by
``importlib.util.find_spec`` in that Python, which imports nothing of them: the probe's
``--versions`` record says where each package is).

A launch script setting a ``VLLM_*`` / ``VLLM_METAX_*`` name that neither knows sets nothing: vLLM
reads its settings by these names only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..write.launch_text import read_text

# names of vLLM's family: checked against the known ones (others — CUDA_VISIBLE_DEVICES,
# HF_HUB_OFFLINE, FLASHINFER_* — belong to other programs and are listed only)
VLLM_FAMILY = re.compile(r"(VLLM_|MACA_VLLM_)\w+")
PACKAGES = ("vllm", "vllm_metax")
_QUOTED_NAME = re.compile(r"""["']([A-Z][A-Z0-9_]{2,})["']""")
_ENVS_LIMIT = 4 << 20


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


def known_from_record(environment: dict | None) -> KnownEnv | None:
    """KnownEnv of a vLLM environment from its probe record (``offline_probe.py --versions``,
    which finds each package with ``importlib.util.find_spec`` and imports none): each
    package's folders. None: no record, or no vLLM in it."""
    packages = (environment or {}).get("packages")
    packages = packages if isinstance(packages, dict) else {}
    locations: dict[str, list[str] | None] = {}
    for pkg in PACKAGES:
        record = packages.get(pkg) if isinstance(packages.get(pkg), dict) else {}
        found = record.get("locations")
        locations[pkg] = [str(x) for x in found] if isinstance(found, list) and found else None
    return known_from_locations(locations)
