"""User files under $XDG_CONFIG_HOME/mxtrim: recent sources (here), the key map
(``keymap.json``, checked by ``tui.keymap``) and the settings the CLI shares (``core.user_settings``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.user_settings import config_dir


def keymap_path() -> Path:
    """The user's key map, ``keymap.json`` under ``$XDG_CONFIG_HOME/mxtrim`` (``~/.config/mxtrim``)."""
    return config_dir() / "keymap.json"


def load_recent(limit: int = 8) -> list[str]:
    from ..core.read.remote import parse_remote

    try:
        items = json.loads((config_dir() / "recent.json").read_text())
        # sources that were moved or deleted since are not offered again; a remote repository
        # (hf://ORG/NAME@<commit>) is offered as it was read
        return [str(i) for i in items if isinstance(i, str) and (parse_remote(i) is not None or Path(i).is_dir())][:limit]
    except (OSError, ValueError, RecursionError):
        return []


def remember_source(path: Path | str, limit: int = 8) -> None:
    items = [str(path)] + [p for p in load_recent(limit) if p != str(path)]
    try:
        config_dir().mkdir(parents=True, exist_ok=True)
        (config_dir() / "recent.json").write_text(json.dumps(items[:limit], indent=1))
    except OSError:
        pass  # a read-only home must not break the wizard
