"""A source directory pinned: what a plan file records so that it runs only on the source it
was made for, and what the kept ``extract_weights.py`` pins of the shards it reads.

A shard is pinned by the SHA-256 of its header bytes (the 8-byte length and the JSON, as
stored) and its size: a changed header, a renamed tensor or a shard of another length shows;
the tensor data is not read (the weights writer digests it as it copies). Every other file of
the directory (config, index, tokenizer and template files, side files) is pinned by the
SHA-256 of its content, up to FILE_HASH_LIMIT bytes, and by its size above that.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .source import ModelSource

FILE_HASH_LIMIT = 64 << 20  # files hashed whole up to this size; larger ones pinned by size


@dataclass(frozen=True)
class ShardPin:
    sha256: str  # of the 8-byte length + the JSON header, as stored
    header_bytes: int
    file_bytes: int

    def to_json(self) -> list:
        return [self.sha256, self.header_bytes, self.file_bytes]


def shard_pins(src: ModelSource, files) -> dict[str, ShardPin]:
    """The pins of the source shards ``files`` (relative paths of shards on disk)."""
    out = {}
    for rel in files:
        header = src.shards[rel]
        sha, read = _header_sha256(src.root / rel, header.data_start)
        out[rel] = ShardPin(sha, read, header.file_size)
    return out


def _header_sha256(path: Path, header_bytes: int) -> tuple[str, int]:
    """(SHA-256 of the first ``header_bytes`` of ``path``, how many bytes were there)."""
    with open(path, "rb") as fh:
        raw = fh.read(header_bytes)
    return hashlib.sha256(raw).hexdigest(), len(raw)


def _file_pin(path: Path, size: int) -> str:
    if size > FILE_HASH_LIMIT:
        return f"size:{size}"
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def source_pins(src: ModelSource) -> dict:
    """The whole directory pinned: ``{"shards": {rel: [sha256, header bytes, file bytes]},
    "absent_shards": [rel...], "files": {rel: "sha256:..." | "size:N"}}``."""
    shards = {rel: pin.to_json() for rel, pin in shard_pins(src, sorted(src.shards)).items()}
    # never_copy marks what is not a readable regular file (broken links, fifos...)
    files = {f.path: _file_pin(src.root / f.path, f.size) for f in src.files if f.path not in src.shards and not f.never_copy}
    return {"shards": shards, "absent_shards": sorted(src.absent_shards), "files": dict(sorted(files.items()))}


def pin_differences(root: Path, pins: dict) -> list[str]:
    """What differs between the directory at ``root`` and its ``pins`` (empty: the same
    source), each as one phrase naming the file (relative to ``root``)."""
    if not root.is_dir():
        return ["the directory is not there"]
    found = []
    for rel, (sha, header_bytes, file_bytes) in pins.get("shards", {}).items():
        path = root / rel
        if not path.is_file():
            found.append(f"{rel}: missing")
            continue
        size = path.stat().st_size
        if _header_sha256(path, header_bytes)[0] != sha:
            found.append(f"{rel}: its header differs")
        elif size != file_bytes:
            found.append(f"{rel}: {size} bytes, pinned {file_bytes}")
    for rel in pins.get("absent_shards", []):
        if (root / rel).exists():
            found.append(f"{rel}: now present (absent when pinned)")
    for rel, pin in pins.get("files", {}).items():
        path = root / rel
        if not path.is_file():
            found.append(f"{rel}: missing")
        elif _file_pin(path, path.stat().st_size) != pin:
            found.append(f"{rel}: its content differs")
    return found
