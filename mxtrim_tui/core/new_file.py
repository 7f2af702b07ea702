"""A new file, written whole or not at all, and never over one that exists.

The bytes go to a hidden temporary file beside ``path`` first (a fresh name, created
exclusively, with the modes a plain new file gets), then are hard-linked into place: a reader
never sees half of the file, and a name that appeared meanwhile is not overwritten
(``os.link`` fails on it). The temporary file is removed whatever happens.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_beside(path: Path, data: bytes, *, sync: bool = False) -> Path:
    """``data`` in a new hidden file beside ``path``, never one another writer uses; its name.
    ``sync``: on disk (fsync) on return. Nothing is left behind when the write fails."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_new_file(path: Path, data: bytes, *, sync: bool = False) -> None:
    """``data`` at ``path``; ``sync``: on disk before it is linked. Raises FileExistsError
    when ``path`` exists, OSError when it cannot be written."""
    tmp = write_beside(path, data, sync=sync)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
