"""Opening files of a model directory safely: regular files only, JSON read within a limit.

A FIFO named ``config.json`` would block ``open()`` forever and ``/dev/zero`` linked as an
index would be read until memory runs out. Every file mxtrim reads from a source goes through
:func:`open_regular`, which opens without blocking, refuses anything that is not a regular
file (with an ``OSError`` naming what it is), and hands back an ordinary binary file.
"""

from __future__ import annotations

import os
import stat

# Largest JSON document read from a source: a 163-shard DeepSeek-V3 index is ~8 MiB.
JSON_LIMIT_BYTES = 256 * 2**20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFile(OSError):
    """The path is a FIFO, device, socket or directory: never read."""


def open_regular(path):
    """``open(path, "rb")`` for a regular file (symlinks followed); anything else raises
    :class:`NotRegularFile` before a byte is read, without blocking."""
    fd, _ = open_regular_fd(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_regular_fd(path) -> tuple[int, os.stat_result]:
    """:func:`open_regular` as a bare descriptor and its ``fstat`` (the caller closes it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = next((label for test, label in _KINDS if test(st.st_mode)), "not a regular file")
            raise NotRegularFile(f"is {what}, not a regular file")
        # (O_NONBLOCK, which kept a FIFO from blocking the open, changes nothing for a regular file)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def pread_exactly(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset``, fewer only where the file ends first."""
    data = os.pread(fd, size, offset)
    while len(data) < size:
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


def read_limited(path, limit: int = JSON_LIMIT_BYTES) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise TooLarge(f"is {size:,} bytes, over the {limit // 2**20} MiB read limit for this kind of file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"grew past the {limit // 2**20} MiB read limit while being read")
    return data


class TooLarge(OSError):
    """A file over the size mxtrim reads for its kind."""
