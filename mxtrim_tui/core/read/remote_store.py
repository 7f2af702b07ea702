"""A remote repository held on local disk while a trim reads it: the header mirror
(read/remote.py) plus, for a real-weight trim, exactly the byte ranges of the kept tensors.

The store is a hidden folder beside the output (``.mxtrim-remote-ORG--NAME@<commit12>``), on
the output's own file system, so the disk it takes is counted where the output goes. Its
shards are sparse files of their full size: the header, and the kept tensors' bytes at their
own offsets; every other byte is a hole that takes no disk. The local reader, the extraction
script and its verification then read the store as they read a downloaded repository.

Fetching: the kept tensors' ranges are coalesced per shard (tensors that lie back to back are
one range) and cut into pieces of at most 64 MiB; several pieces are in flight; each answer is
checked (206, its Content-Range, exactly the bytes asked for: read/remote.py) and written at
its offset as it arrives. A piece is recorded in ``.mxtrim-ranges.jsonl`` only once its bytes
are on disk (fdatasync), so a run that is interrupted, or fails on one answer, leaves a store
the same command resumes from: only the pieces not recorded are fetched again. A successful
trim removes the store.

The store is named by its commit: a branch that moved since an interrupted run is found out
(its store holds another commit's bytes) and refused, naming both commits.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .remote import IN_FLIGHT, RangedRepo, RemoteError, header_mirror
from .source import MIRROR_RECORD

STORE_PREFIX = ".mxtrim-remote-"
RANGES_RECORD = ".mxtrim-ranges.jsonl"
PIECE = 64 * 2**20  # bytes of one range request at most: the unit of resuming


def store_name(repo: str, commit: str) -> str:
    return f"{STORE_PREFIX}{repo.replace('/', '--')}@{commit[:12]}"


@dataclass(frozen=True)
class ByteRange:
    file: str  # the shard's path in the repository
    begin: int  # absolute offsets in the shard, end exclusive
    end: int

    @property
    def size(self) -> int:
        return self.end - self.begin

    def key(self) -> tuple[str, int, int]:
        return (self.file, self.begin, self.end)


def coalesce(ranges, piece: int = PIECE) -> list[ByteRange]:
    """``ranges`` ((file, begin, end), end exclusive) merged where they touch or overlap, per
    file, then cut into pieces of at most ``piece`` bytes; ordered by file and offset."""
    merged: list[list] = []
    for file, begin, end in sorted(ranges):
        if end <= begin:
            continue
        if merged and merged[-1][0] == file and begin <= merged[-1][2]:
            merged[-1][2] = max(merged[-1][2], end)
        else:
            merged.append([file, begin, end])
    out = []
    for file, begin, end in merged:
        for at in range(begin, end, piece):
            out.append(ByteRange(file, at, min(at + piece, end)))
    return out


def _record(folder: Path) -> dict:
    try:
        return json.loads((folder / MIRROR_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def open_store(repo: RangedRepo, parent: Path) -> tuple[Path, bool]:
    """The store of ``repo`` at its commit in ``parent``: the one an earlier run left (reused:
    True) or a new header mirror. Refused when a store of the same repository and revision
    holds another commit (the branch moved since that run)."""
    commit = repo.commit
    folder = parent / store_name(repo.ref.repo, commit)
    if folder.is_dir() and _record(folder).get("source") == repo.source:
        return folder, True
    if repo.ref.revision != commit and parent.is_dir():
        for other in sorted(parent.glob(f"{STORE_PREFIX}{repo.ref.repo.replace('/', '--')}@*")):
            rec = _record(other)
            was = str(rec.get("source", "")).rpartition("@")[2]
            fetched = fetched_bytes(other) if rec.get("asked") == str(repo.ref) and was and was != commit else 0
            if fetched:
                raise RemoteError(
                    f"{repo.ref}: the revision moved: it named commit {was} when an interrupted trim began "
                    f"({fetched:,} bytes of kept tensors fetched into {other}), it names {commit} now. "
                    f"Finish that trim with {repo.ref.scheme}://{repo.ref.repo}@{was}, or remove {other} to trim the new commit")
    parent.mkdir(parents=True, exist_ok=True)
    header_mirror(repo, folder)
    return folder, False


def fetched_pieces(folder: Path) -> set[tuple[str, int, int]]:
    """The pieces already on disk, as the record lists them (a torn last line is ignored)."""
    done = set()
    try:
        lines = (folder / RANGES_RECORD).read_text(encoding="utf-8").splitlines()
    except OSError:
        return done
    for line in lines:
        try:
            doc = json.loads(line)
            done.add((doc["file"], int(doc["begin"]), int(doc["end"])))
        except (ValueError, KeyError, TypeError):
            continue
    return done


def fetched_bytes(folder: Path) -> int:
    return sum(end - begin for _, begin, end in fetched_pieces(folder))


def fetch_ranges(repo: RangedRepo, folder: Path, ranges: list[ByteRange], done: set | None = None) -> None:
    """Fetch the pieces of ``ranges`` the store lacks (``done``: those it holds, as
    :func:`fetched_pieces` reads them) into its sparse shards. The first piece is fetched alone
    (a server that ignores Range is found out by one answer), then several at once; after a
    failure nothing more starts."""
    done = fetched_pieces(folder) if done is None else done
    todo = [r for r in ranges if r.key() not in done]
    stop = threading.Event()
    lock = threading.Lock()
    fds: dict[str, int] = {}
    for r in todo:
        path = folder / r.file
        if not path.is_file():
            raise RemoteError(f"{repo.ref}: {r.file}: not in the store {folder}: remove the store and run again")
    record = open(folder / RANGES_RECORD, "a", encoding="utf-8")

    def fd_of(file: str) -> int:
        with lock:
            if file not in fds:
                fds[file] = os.open(folder / file, os.O_WRONLY)
            return fds[file]

    def fetch(r: ByteRange) -> None:
        if stop.is_set():
            return
        fd = fd_of(r.file)
        repo.read_into(r.file, r.begin, r.size, fd, stop)
        os.fdatasync(fd)  # the bytes are on disk before the record says so
        with lock:
            record.write(json.dumps({"file": r.file, "begin": r.begin, "end": r.end}) + "\n")
            record.flush()

    try:
        if todo:
            fetch(todo[0])
        with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            futures = [pool.submit(fetch, r) for r in todo[1:]]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()
                for pending in futures:
                    pending.cancel()
                raise
    finally:
        record.close()
        for fd in fds.values():
            os.close(fd)


def kept_ranges(extraction) -> list[ByteRange]:
    """The source ranges a real-weight output copies, coalesced and cut into pieces."""
    return coalesce((t.source_file, t.source_begin, t.source_end) for t in extraction.tensors)
