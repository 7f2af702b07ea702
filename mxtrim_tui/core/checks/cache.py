"""Verdicts of the transformers checks, kept between runs.

Both checks (the plan against transformers, and the planned output's structure) import
torch and transformers, several seconds before any byte is copied. Their results are pure
functions of what they are given: the plan's inputs (source config, tensor names, dtypes and
shapes, selection, rewritten documents) or the planned output (config, tensors), plus the
code that judges them (mxtrim's own source files, the transformers and torch of the
interpreter that judges: :mod:`.judge`).
So each result is stored under a SHA-256 of exactly that, in
``$XDG_CACHE_HOME/mxtrim/checks/`` (else ``~/.cache/mxtrim/checks/``): ``mxtrim plan`` then
``mxtrim trim`` of the same selection, or a trim repeated, checks once. Any change to any
input, to mxtrim or to transformers is a different key. ``MXTRIM_CHECK_CACHE=0`` turns it
off; an unreadable or unwritable cache is simply not used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

ENV = "MXTRIM_CHECK_CACHE"
KEEP = 512  # entries kept; older ones are removed when a new one is stored
PACKAGE = Path(__file__).resolve().parents[2]  # mxtrim_tui/


def enabled() -> bool:
    return os.environ.get(ENV, "1") not in ("0", "off", "no", "false")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mxtrim" / "checks"


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """mxtrim's own code and the versions of what judges: any change makes new keys."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("transformers", "torch"):
        try:
            h.update(f"{dist}={importlib.metadata.version(dist)}\0".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{dist}=none\0".encode())
    return h.hexdigest()


def judge_identity() -> str:
    """The interpreter that judges now (:mod:`.judge`) and its transformers and torch: a verdict
    of the runtime's transformers is never reused for another's."""
    from .judge import current_judge, versions

    python = current_judge().python
    found = versions(python)
    return f"{os.path.abspath(python)}\0{found.get('transformers')}\0{found.get('torch')}\0{found.get('origin')}"


def key(kind: str, payload) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=list)
    return hashlib.sha256(f"{kind}\0{fingerprint()}\0{judge_identity()}\0{text}".encode()).hexdigest()


def load(kind: str, digest: str) -> dict | None:
    if not enabled():
        return None
    try:
        with open(cache_dir() / f"{kind}-{digest}.json", encoding="utf-8") as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def store(kind: str, digest: str, value: dict) -> None:
    """Write atomically (a reader sees the whole entry or none); failures are ignored."""
    if not enabled():
        return
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".entry-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(value, fh)
        os.replace(tmp, folder / f"{kind}-{digest}.json")
        _prune(folder)
    except OSError:
        return


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in entries[:-KEEP]:
        old.unlink(missing_ok=True)
