"""The installed mxtrim's version, as generated files and plan files record it."""

from __future__ import annotations

import importlib.metadata


def mxtrim_version() -> str:
    try:
        return importlib.metadata.version("mxtrim-tui")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "dev"
