"""What the suite must leave untouched: the user's real home and XDG folders, as they were
before the tests pointed them elsewhere (conftest.py checks them when a run ends).

Other programs may write there while the suite runs (a shell's history, pip run in another
terminal): a change is the suite's when it lies in the folder of a program the suite runs
(mxtrim, vLLM, Hugging Face, torch, Triton, Ray, Textual) or when its path or its first bytes
name something of this run (the checkout's environments, pytest's temporary folders, the
run's own); the others are listed, not counted."""

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


# folders of the programs the suite runs, wherever they lie under the watched folders
PROGRAMS = ("mxtrim", "vllm", "huggingface", "torch", "triton", "ray", "textual", "transformers")


def attribute(paths: list[str], folders: dict[str, str], marks: list[str], head: int = 65536) -> tuple[list[str], list[str]]:
    """(the suite's, others'): ``paths`` (under the watched ``folders``) split by whether they
    lie in a program's folder of the suite or name one of ``marks`` (folders of this run) in their
    path or first ``head`` bytes."""
    marks = [m for m in marks if m]
    roots = sorted(folders.values(), key=len, reverse=True)
    ours, others = [], []
    for path in paths:
        root = next((r for r in roots if path.startswith(r + os.sep)), "")
        parts = {p.lower().lstrip(".") for p in path[len(root):].split(os.sep)}
        named = any(m in path for m in marks)
        if not named and os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    text = f.read(head).decode("utf-8", "replace")
            except OSError:
                text = ""
            named = any(m in text for m in marks)
        (ours if named or parts & set(PROGRAMS) else others).append(path)
    return ours, others
