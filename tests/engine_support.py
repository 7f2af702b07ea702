"""Helpers shared by the engine tests: the repository, the CLI as a child process, a plan
of a source, and a digest of a directory tree (to prove a source was left as it was)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from mxtrim_tui.core.model.inventory import build_inventory
from mxtrim_tui.core.plan.build import Selection, TrimPlan, build_plan
from mxtrim_tui.core.read.source import INDEX_NAME, open_source

REPO = Path(__file__).resolve().parent.parent


def cli_argv(*args: str) -> list[str]:
    """``mxtrim ARGS`` as this interpreter runs it."""
    return [sys.executable, "-m", "mxtrim_tui", *args]


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout
    )


def small_llama_output(root: Path, mode: str) -> Path:
    """A 2-layer servable Llama under ``root`` trimmed to layer 0 by the CLI (``llama-MODE``)."""
    from fixtures.tiny_models import make_servable_llama

    src = make_servable_llama(root / "llama", layers=2)
    out = root / f"llama-{mode}"
    proc = run_cli("trim", str(src), "--mode", mode, "--keep", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def load_index(root: Path) -> dict:
    return json.loads((root / INDEX_NAME).read_text())


def plan_for(root, keep=None, mtp=None) -> TrimPlan:
    return build_plan(build_inventory(open_source(root)), Selection.parse(keep, mtp))


def tree_digest(root: Path, limit: int = -1) -> dict:
    """Relative path -> (digest of the first ``limit`` bytes (-1: all), size, mtime) of every
    file below ``root``. Sparse shards: the first 64 KiB hold the header, all that can change."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as fh:
                digest = hashlib.blake2b(fh.read(limit), digest_size=16).hexdigest()
            st = p.stat()
            out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out


def mount_tmpfs(where: Path, options: str) -> str | None:
    """Mount a tmpfs with ``options`` at ``where``; None when mounted, else why it could not be
    (not root, no mount command, a container without the right): the caller skips with it."""
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if r.returncode == 0 else (r.stderr.strip() or f"mount exited with {r.returncode}")
