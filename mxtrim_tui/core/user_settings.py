"""The user's own files under ``$XDG_CONFIG_HOME/mxtrim`` that the CLI reads as well as the
wizard: ``settings.json`` (e.g. the vLLM interpreter typed in the wizard's validate dialog);
and where the wizard keeps its plan files (``$XDG_STATE_HOME/mxtrim/plans``).
A missing or unreadable file is no settings; a read-only home never breaks a run."""

from __future__ import annotations

import json
import os
from pathlib import Path

SETTINGS = "settings.json"
VLLM_PYTHON = "vllm_python"  # the vLLM interpreter typed in the wizard's validate dialog


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mxtrim"


def state_dir() -> Path:
    """``$XDG_STATE_HOME/mxtrim`` (``~/.local/state/mxtrim``): what the wizard keeps of its
    runs, such as the plan file of every write (``plans/``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mxtrim"


def load_settings() -> dict:
    try:
        doc = json.loads((config_dir() / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def get_setting(key: str) -> str | None:
    value = load_settings().get(key)
    return value if isinstance(value, str) and value.strip() else None


def set_setting(key: str, value: str | None) -> bool:
    """Keep ``value`` (None or blank removes it); False when the file cannot be written."""
    doc = load_settings()
    if value is None or not value.strip():
        doc.pop(key, None)
    else:
        doc[key] = value.strip()
    path = config_dir() / SETTINGS
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SETTINGS}.{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return False
    return True
