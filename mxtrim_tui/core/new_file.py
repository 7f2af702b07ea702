"""A new file, written whole or not at all, and never over one that exists.

The bytes go to a hidden temporary file beside ``path`` first (a fresh name, created
exclusively), then are hard-linked into place: a reader never sees half of the file, and a name
that appeared meanwhile is not overwritten (``os.link`` fails on it). The temporary file is
removed whatever happens.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def temporary_beside(path: Path) -> Path:
    """A new, empty hidden file beside ``path`` (created exclusively, so never one another
    writer uses, with the modes a plain new file gets), for bytes that are to take ``path``."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


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
