"""Explicit, recorded edits of JSON documents (config.json and side files).

The original document is deep-copied and edited in place key by key, so unknown fields and
key order survive; an existing key keeps its position, a new key goes at the end of its
object. ``to_dict()`` of a config class is never used for writing.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


MISSING = _Missing()


@dataclass(frozen=True)
class ConfigEdit:
    file: str  # "config.json", "quantize_config.json", ...
    path: tuple  # keys / list indices from the document root
    before: object
    after: object  # MISSING = delete
    reason: str = ""

    @property
    def dotted(self) -> str:
        out = ""
        for p in self.path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
        return out

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "path": list(self.path),
            "field": self.dotted,
            "before": None if self.before is MISSING else self.before,
            "after": None if self.after is MISSING else self.after,
            "before_absent": self.before is MISSING,
            "after_absent": self.after is MISSING,
            "reason": self.reason,
        }


def short_value(value, limit: int = 48, *, ensure_ascii: bool = True, count_items: bool = False) -> str:
    """A config value as compact JSON for tables: "(absent)" or cut to ``limit`` chars
    (``count_items``: a cut list ends with its length)."""
    if value is MISSING:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    if len(text) <= limit:
        return text
    if count_items and isinstance(value, list):
        return text[: limit - 12] + f"… ({len(value)} items)"
    return text[: limit - 1] + "…"


def get_path(doc, path: tuple, default=MISSING):
    cur = doc
    for p in path:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur):
            cur = cur[p]
        else:
            return default
    return cur


def apply_edits(doc: dict, edits: list[ConfigEdit], file: str) -> dict:
    """A deep copy of ``doc`` with the edits for ``file`` applied in order."""
    out = copy.deepcopy(doc)
    for e in edits:
        if e.file != file:
            continue
        parent = get_path(out, e.path[:-1])
        if parent is MISSING:
            raise KeyError(f"{file}: no parent for {e.dotted}")
        key = e.path[-1]
        if e.after is MISSING:
            if isinstance(parent, dict):
                parent.pop(key, None)
            else:
                raise TypeError(f"{file}: cannot delete list item {e.dotted}; replace the list instead")
        else:
            parent[key] = copy.deepcopy(e.after)
    return out
