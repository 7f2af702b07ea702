"""A new file, written whole or not at all, and never over one that exists.

The bytes go to a hidden temporary file beside ``path`` first, then are hard-linked into place:
a reader never sees half of the file, and a name that appeared meanwhile is not overwritten
(``os.link`` fails on it). The temporary file is removed whatever happens.
"""

from __future__ import annotations

import os
from pathlib import Path


def temporary_beside(path: Path) -> Path:
    """The hidden temporary name a file is written under before it takes ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_bytes(path: Path, data: bytes, *, sync: bool = False) -> None:
    """``data`` into ``path`` (created or truncated); ``sync``: on disk (fsync) on return."""
    with open(path, "wb") as fh:
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def write_new_file(path: Path, data: bytes, *, sync: bool = False) -> None:
    """``data`` at ``path``; ``sync``: on disk before it is linked. Raises FileExistsError
    when ``path`` exists, OSError when it cannot be written."""
    tmp = temporary_beside(path)
    try:
        write_bytes(tmp, data, sync=sync)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
