"""Verification that keeps pace with the copy.

The extraction script hashes every tensor's source bytes as it copies them (``--hash``), so
each source byte is read once. Meanwhile :class:`OutputFollower` reads the shards being
written, a few megabytes behind the script, and hashes each written range; the two digests
must agree for every tensor. Independently of the script, the follower compares the first
and last :data:`EDGE` bytes of every tensor with the source at the *planned* offsets, so a
copy from the wrong place cannot agree with itself. :class:`SourceSnapshot` takes each
source shard's identity and times before the copy and compares them after: a shard written
to while it was read fails the trim, and its retained ranges are hashed again to name the
tensors that changed.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import xxhash

from ..plan.layout import Extraction, TensorCopy
from ..units import DEFAULT_HASH, HASHES

READ_BUFFER = 1 << 20  # per reading thread
EDGE = 4096  # bytes at each end of every tensor compared with the source by mxtrim itself
POLL = 0.002  # seconds between looks at a shard the script is still writing


def new_hash(name: str):
    if name == "sha256":
        return hashlib.sha256()
    if name == "xxh3_128":
        return xxhash.xxh3_128()
    raise ValueError(f"unknown hash {name!r} (one of {', '.join(HASHES)})")


def hash_range(path: Path, begin: int, end: int, hash_name: str = DEFAULT_HASH) -> str:
    """The digest of bytes [begin, end) of a file, read in bounded chunks (thread-safe)."""
    view = memoryview(bytearray(min(READ_BUFFER, max(end - begin, 1))))
    h = new_hash(hash_name)
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = begin
        while pos < end:
            n = os.preadv(fd, [view[: min(len(view), end - pos)]], pos)
            if n == 0:
                raise OSError(f"{path}: ends at byte {pos}, expected {end}")
            h.update(view[:n])  # both hashes release the GIL on large updates
            pos += n
    finally:
        os.close(fd)
    return h.hexdigest()


# --- the source does not change under the copy ------------------------------------------
@dataclass(frozen=True)
class FileState:
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> "FileState":
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SourceSnapshot:
    """Identity, size and times of the source shards a copy reads, taken before it starts."""

    def __init__(self, root: Path, files):
        self.root = root
        self.before = {rel: FileState.of(root / rel) for rel in files}

    def changed(self) -> list[str]:
        """The shards whose identity, size or times differ now (gone ones included)."""
        out = []
        for rel, state in self.before.items():
            try:
                now = FileState.of(self.root / rel)
            except OSError:
                now = None
            if now != state:
                out.append(rel)
        return out


# --- the written shards, read as they are written -----------------------------------------
class VerifyFailed(Exception):
    """What the follower found wrong: (path, message)."""

    def __init__(self, path: Path, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


class OutputFollower(threading.Thread):
    """Hash every written tensor range of ``extraction`` while the script writes the shards.

    ``where()`` returns the directories a shard may be in (the script's partial directory
    while it writes, then the renamed one), or ``()`` while unknown. The follower reads only
    below a shard's current size, so it never reads what is not written yet; it stops early
    when :meth:`stop` is called (the script failed or was interrupted)."""

    def __init__(self, extraction: Extraction, source_root: Path, where, hash_name: str = DEFAULT_HASH):
        super().__init__(name="mxtrim-verify", daemon=True)
        self.extraction = extraction
        self.source_root = source_root
        self.where = where
        self.hash_name = hash_name
        self.digests: dict[str, str] = {}  # output tensor name -> digest of its written range
        self.done_bytes = 0
        self.edges_compared = 0
        self.error: VerifyFailed | BaseException | None = None
        self._halt = threading.Event()
        self.writer_done = threading.Event()  # set once the script has exited: nothing grows any more
        self._view = memoryview(bytearray(READ_BUFFER))

    def stop(self) -> None:
        self._halt.set()

    @property
    def stopped(self) -> bool:
        return self._halt.is_set()

    def run(self) -> None:
        sources: dict[str, int] = {}
        try:
            for shard in self.extraction.shards:
                fd = self._open(shard.file)
                if fd is None:
                    return
                try:
                    for t, begin, end in shard.output_ranges():
                        if not self._hash_tensor(fd, t, begin, end, shard.file):
                            return
                        self._compare_edges(fd, t, begin, sources, shard.file)
                finally:
                    os.close(fd)
        except BaseException as exc:  # reported by the writer on the calling thread
            self.error = exc
        finally:
            for fd in sources.values():
                os.close(fd)

    def _open(self, file: str) -> int | None:
        """The shard's file descriptor, once the script has created it (None: stopped)."""
        while not self.stopped:
            done = self.writer_done.is_set()  # read before looking: a last look after the end
            for folder in self.where():
                try:
                    return os.open(Path(folder) / file, os.O_RDONLY)
                except FileNotFoundError:
                    continue
            if done:
                raise VerifyFailed(Path(file), "planned shard was not written")
            time.sleep(POLL)
        return None

    def _wait_for(self, fd: int, end: int, shard: str) -> bool:
        """Until the file holds byte ``end - 1`` (False: stopped first)."""
        while True:
            done = self.writer_done.is_set()
            size = os.fstat(fd).st_size
            if size >= end:
                return True
            if self.stopped:
                return False
            if done:
                raise VerifyFailed(Path(shard), f"written shard ends at byte {size}, planned at least {end}")
            time.sleep(POLL)

    def _hash_tensor(self, fd: int, t: TensorCopy, begin: int, end: int, shard: str) -> bool:
        h = new_hash(self.hash_name)
        pos = begin
        view = self._view
        while pos < end:
            want = min(len(view), end - pos)
            if not self._wait_for(fd, pos + want, shard):
                return False
            n = os.preadv(fd, [view[:want]], pos)
            if n == 0:  # pragma: no cover - the size said the bytes were there
                raise VerifyFailed(Path(shard), f"tensor {t.name!r}: the written shard ends at byte {pos}, expected {end}")
            h.update(view[:n])
            pos += n
            self.done_bytes += n
        self.digests[t.name] = h.hexdigest()
        return True

    def _compare_edges(self, fd: int, t: TensorCopy, begin: int, sources: dict[str, int], shard: str) -> None:
        """The first and last EDGE bytes of the written tensor against the source read at the
        planned offsets (by mxtrim, not the script)."""
        if t.source_file not in sources:
            sources[t.source_file] = os.open(self.source_root / t.source_file, os.O_RDONLY)
        src = sources[t.source_file]
        n = t.nbytes
        for offset in sorted({0, max(0, n - EDGE)}):
            size = min(EDGE, n - offset)
            if size <= 0:
                continue
            written = os.pread(fd, size, begin + offset)
            source = os.pread(src, size, t.source_begin + offset)
            if written != source:
                where = "first" if offset == 0 else "last"
                raise VerifyFailed(Path(shard), f"tensor {t.name!r}: its {where} {size} bytes differ from the source's "
                                                f"{t.source_file} bytes {t.source_begin + offset}-{t.source_begin + offset + size}")
        self.edges_compared += 1
