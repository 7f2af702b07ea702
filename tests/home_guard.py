"""What the suite must leave untouched: the user's real home and XDG folders, as they were
before the tests pointed them elsewhere (conftest.py checks them when a run ends)."""

from __future__ import annotations

import os


def watched_folders(environ: dict) -> dict[str, str]:
    """{what: folder} of the real home: its top level, and the XDG config, cache, state and data
    folders (their variables where set, else their defaults under HOME)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
        "XDG_CACHE_HOME": environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
        "XDG_STATE_HOME": environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state"),
        "XDG_DATA_HOME": environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"),
    }


def changed_under(folders: dict[str, str], since: float, exclude: list[str]) -> list[str]:
    """Paths made or modified after ``since``: the XDG folders walked whole, the home's top level
    only (other programs keep their own folders there), nothing under ``exclude``."""
    skip = [os.path.realpath(p) for p in exclude]

    def excluded(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == s or real.startswith(s + os.sep) for s in skip)

    def changed(path: str) -> bool:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return max(st.st_mtime, st.st_ctime) > since

    found = []
    for what, folder in folders.items():
        if not os.path.isdir(folder) or excluded(folder):
            continue
        if what == "HOME":
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if excluded(path) or path in folders.values():
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    if _made_during(path, since):  # a folder the run made
                        found.append(path)
                elif changed(path):
                    found.append(path)
            continue
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not excluded(os.path.join(root, d))]
            found += [os.path.join(root, f) for f in files if changed(os.path.join(root, f))]
    return sorted(set(found))


def _made_during(path: str, since: float) -> bool:
    """A folder all of whose entries are newer than ``since`` (made by the run, not one that
    another program keeps and touched)."""
    try:
        return os.lstat(path).st_ctime > since and all(os.lstat(os.path.join(path, n)).st_mtime > since for n in os.listdir(path))
    except OSError:
        return False
