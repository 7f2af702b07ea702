"""The extraction of a real-weight trim, as data and as a standalone script.

:func:`build_extraction` turns a plan into the exact output: which source byte range goes
to which output shard under which name, in which order, and every output header byte for
byte. :func:`render_script` writes that into ``extract_weights.py``: a Python-standard-
library-only program that pins the source shards' header hashes and copies the ranges.
mxtrim performs every real-weight trim by running that script, so the script a user keeps
is the one that produced their checkpoint, and re-running it on the same source gives
byte-identical shards.

Output order (and so sharding): embeddings, text layers in their new order, MTP / draft
heads, then everything else (final norm, lm head, vision tower, projectors). Inside each
part, tensors keep their source order (file, offset): reads are sequential, and a run of
tensors contiguous in the source stays contiguous in the output, so one choice of header
padding per shard puts most of the copied bytes at the same offset modulo the page size as
in the source. Such page-congruent ranges go through os.copy_file_range (in-kernel, and
block-sharing on filesystems that can); the script copies the others through a small
buffer, which measured faster than copy_file_range between page-straddling offsets. With
``--hash`` (how mxtrim runs it) every range is mapped instead, hashed from the map and
written from it: the bytes pass through user space once, which measured faster than both
while giving each tensor's digest of exactly the bytes written.
"""

from __future__ import annotations

import json

from ..plan.layout import Extraction
from ..read.source import INDEX_NAME
from ..read.source_pins import ShardPin
from ..version import mxtrim_version

SCRIPT_NAME = "extract_weights.py"
# ---------------------------------------------------------------------------------------
def _lit(value) -> str:
    """A Python literal for strings, ints and lists of them: JSON text is exactly that
    (json.dumps never writes escapes Python reads differently, and no true/false/null
    appear here)."""
    return json.dumps(value, ensure_ascii=True)


def render_script(extraction: Extraction, digests: dict[str, ShardPin], *, model_name: str,
                  tensor_digests: tuple[str, dict[str, str]] | None = None) -> str:
    """The text of ``extract_weights.py``. Deterministic: the same plan and source give
    the same script. ``tensor_digests``: (hash name, output tensor name -> digest) of the
    shards mxtrim wrote; a re-run checks every tensor against them. Without it (the script
    mxtrim runs) the table is empty."""
    lines = []
    add = lines.append
    add("SOURCE_SHARDS = {")
    add("    # file: [sha256 of the header bytes (8-byte length + JSON), header bytes, file bytes]: the shards it reads")
    for rel, d in digests.items():
        add(f"    {_lit(rel)}: [{_lit(d.sha256)}, {d.header_bytes}, {d.file_bytes}],")
    add("}")
    add("")
    add(f"METADATA = {_lit(extraction.metadata)}")
    add(f"WRITE_INDEX = {'True' if len(extraction.shards) > 1 else 'False'}")
    add("")
    add("OUTPUT_SHARDS = [")
    for shard in extraction.shards:
        add("    {")
        add(f"        \"file\": {_lit(shard.file)},")
        # repr: the JSON stays readable (single quotes outside, no escaped double quotes)
        add(f"        \"header\": {shard.header[8:].decode('utf-8')!r},")
        add("        \"tensors\": [")
        add("            # [new name, source file, source name, dtype, shape, source begin, source end]  (absolute file offsets)")
        for t in shard.tensors:
            add(
                "            ["
                + ", ".join([_lit(t.name), _lit(t.source_file), _lit(t.source_name), _lit(t.dtype), _lit(list(t.shape)), str(t.source_begin), str(t.source_end)])
                + "],"
            )
        add("        ],")
        add("    },")
    add("]")
    add("")
    add("# Each output tensor's digest, recorded by mxtrim from the shards it wrote with this file. A run")
    add("# hashes every tensor as it copies it and refuses a difference (--skip-digest-check: do not).")
    hash_name, table = tensor_digests or (None, {})
    add(f"TENSOR_DIGEST_HASH = {_lit(hash_name) if hash_name else 'None'}")
    add("TENSOR_DIGESTS = {")
    for t in extraction.tensors:
        if t.name in table:
            add(f"    {_lit(t.name)}: {_lit(table[t.name])},")
    add("}")
    data = "\n".join(lines)
    header = _SCRIPT_HEAD.format(
        model=model_name,
        source=str(extraction.source_root),
        version=mxtrim_version(),
        shards=len(extraction.shards),
        tensors=len(extraction.tensors),
        nbytes=extraction.tensor_bytes,
        index_note=f" and {INDEX_NAME}" if len(extraction.shards) > 1 else " (no index: one shard)",
    )
    return header + "\n" + data + "\n" + _SCRIPT_BODY


# ---------------------------------------------------------------------------------------
# The script. Standard library only; it never imports mxtrim, torch or safetensors.
_SCRIPT_HEAD = '''#!/usr/bin/env python3
"""Extract the trimmed real-weight checkpoint of {model} from its source shards.

Generated by mxtrim {version}; mxtrim ran this file to write the shards beside it, then
recorded each tensor's digest in TENSOR_DIGESTS (at the end of the tables below).
Source when generated: {source}
Output: {shards} shard(s){index_note}; {tensors} tensors, {nbytes} tensor bytes.

    python -I extract_weights.py --source SRC --out DIR [--progress] [--hash NAME] [--skip-digest-check]

-I (isolated mode) is the safest way to run it; without it the script still removes its
own folder, which holds the model's *.py files, from the import path before importing
anything, so a model file named json.py or argparse.py is never run in place of Python's.

Every tensor's bytes are copied unchanged from its source range (os.copy_file_range where
offsets are page-congruent, a 512 KiB buffer otherwise): no dtype is converted, no tensor
is loaded whole. The source shards' header hashes are pinned below; a changed source is
refused. Each tensor is hashed as it is copied and checked against its recorded digest, so a
source whose tensor data changed under an intact header is refused too, naming the tensor
(the recorded digests are xxh3_128 unless mxtrim was told --hash sha256; xxh3_128 needs the
xxhash package; --skip-digest-check copies without the check). DIR must not exist: the output is written to a hidden sibling and renamed into
place at the end, and removed on error or interruption (Ctrl-C, SIGTERM). Re-running on
the same source gives byte-identical shards. With --progress, JSON lines on stderr:
start, shard, tensor, done, error events. With --hash xxh3_128 (needs the xxhash package) or
--hash sha256, every tensor is copied through the buffer and hashed on the way, so each
source byte is read once; each tensor's digest is a digest event (mxtrim verifies the
written shards against them).

Python standard library only, plus xxhash for xxh3_128 digests.
"""

import os
import sys

# `python extract_weights.py` puts this file's folder first on the import path (and '.' may
# be it too): drop it before any other import. os and sys are loaded with the interpreter.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]

import argparse  # noqa: E402  (after the path guard above)
import errno
import hashlib
import json
import mmap
import shutil
import signal
import time

'''

_SCRIPT_BODY = r'''

INDEX_NAME = "model.safetensors.index.json"
CHUNK = 64 << 20  # bytes per copy step: bounds each syscall and paces progress events
BUFFER = 512 << 10  # copy buffer (the only tensor bytes ever held in memory); see Copier
WINDOW = 8 << 20  # with --hash: source bytes mapped at a time (hashed, then written from the map)
PAGE = 4096
PROGRESS_INTERVAL = 0.1  # seconds between tensor progress events
PROG = "extract_weights"


class Refusal(Exception):
    """Input this script will not work with; one line, exit status 1."""


class Interrupted(BaseException):
    """SIGTERM, handled like Ctrl-C so the partial output is removed."""


class Progress:
    def __init__(self, enabled, total_bytes, total_tensors):
        self.enabled = enabled
        self.total_bytes = total_bytes
        self.total_tensors = total_tensors
        self.done_bytes = 0
        self.done_tensors = 0
        self.last = 0.0

    def emit(self, event, **fields):
        if self.enabled:
            sys.stderr.write(json.dumps(dict({"event": event}, **fields)) + "\n")
            sys.stderr.flush()

    def tensor(self, name, shard, force=False):
        now = time.monotonic()
        if self.enabled and (force or now - self.last >= PROGRESS_INTERVAL):
            self.last = now
            self.emit(
                "tensor",
                name=name,
                shard=shard,
                done_bytes=self.done_bytes,
                total_bytes=self.total_bytes,
                done_tensors=self.done_tensors,
                total_tensors=self.total_tensors,
            )


def new_hash(name, why="--hash xxh3_128"):
    """A fresh hash object for --hash NAME (``why``: what asked for it, for the refusal)."""
    if name == "sha256":
        return hashlib.sha256()
    try:
        import xxhash
    except ImportError:
        raise Refusal(f"{why} needs the xxhash package (pip install xxhash)") from None
    return xxhash.xxh3_128()


class Digests:
    """The hash objects one tensor's bytes feed: --hash's (digest events) and the recorded
    digest's check; one object where both use the same hash."""

    def __init__(self, event_hash, check_hash):
        self.objects = {name: new_hash(name) for name in {event_hash, check_hash} if name}

    def update(self, data):
        for obj in self.objects.values():
            obj.update(data)

    def hexdigest(self, name):
        return self.objects[name].hexdigest()


class Copier:
    """Copy byte ranges into the destination at its current position.

    Ranges that sit at the same offset modulo the page size in both files go through
    os.copy_file_range: the kernel copies page for page with no user-space buffer, and
    filesystems that can share blocks (reflinks, server-side copy) do so. Other ranges are
    read and written through one 512 KiB buffer: measured on ext4, copy_file_range between
    page-straddling offsets runs about 40 % slower than that, while a buffer that fits the
    CPU's L2 cache keeps up with aligned copy_file_range (8 MiB buffers were 4x slower)."""

    def __init__(self, kernel=True):
        self.kernel = kernel and hasattr(os, "copy_file_range")
        self.buffer = None
        self.bytes = {"copy_file_range": 0, "buffered": 0}

    @property
    def method(self):
        used = [m for m, n in self.bytes.items() if n]
        if used:
            return " + ".join(used)
        return "copy_file_range" if self.kernel else "buffered"

    def copy_hashed(self, src_fd, dst_fd, offset, length, digest):
        """Copy up to WINDOW of the length bytes at offset, feeding digest (Digests) every byte
        on the way: the source is mapped (no read into a buffer), hashed from the map and written
        from it, so its bytes are touched once. Returns the bytes copied."""
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        end = min(offset + length, start + WINDOW)
        if os.fstat(src_fd).st_size < end:
            raise Refusal(f"source ends before byte {end} (truncated shard?)")
        with mmap.mmap(src_fd, end - start, prot=mmap.PROT_READ, offset=start) as window:
            view = memoryview(window)
            try:
                pos = offset - start
                while pos < end - start:
                    piece = view[pos : min(pos + BUFFER, end - start)]
                    digest.update(piece)
                    write_all(dst_fd, piece)
                    piece.release()
                    pos += BUFFER
            finally:
                view.release()
        self.bytes["mapped"] = self.bytes.get("mapped", 0) + end - offset
        return end - offset

    def copy(self, src_fd, dst_fd, offset, length, dst_offset, digest=None):
        """Copy up to CHUNK of the length bytes at offset to dst_offset (the destination's
        current position); returns the bytes copied. digest: a hash object fed every byte
        copied (copy_hashed)."""
        if digest is not None:
            return self.copy_hashed(src_fd, dst_fd, offset, length, digest)
        step = min(length, CHUNK)
        if self.kernel and (offset - dst_offset) % PAGE == 0:
            try:
                n = os.copy_file_range(src_fd, dst_fd, step, offset)
            except OSError as exc:
                # Not supported here (old kernel, cross-device, special filesystem): use the
                # buffer from now on; any other error is real.
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM, errno.EBADF):
                    raise
                self.kernel = False
                n = 0
            if n > 0:
                self.bytes["copy_file_range"] += n
                return n
            self.kernel = False  # 0 at a valid offset: let plain reads tell EOF from a quirk
        if self.buffer is None:
            self.buffer = memoryview(bytearray(BUFFER))
        done = 0
        while done < step:
            view = self.buffer[: min(step - done, BUFFER)]
            n = os.preadv(src_fd, [view], offset + done) if hasattr(os, "preadv") else _pread_into(src_fd, view, offset + done)
            if n == 0:
                raise Refusal(f"source ends at byte {offset + done} while {length - done} more bytes were expected (truncated shard?)")
            write_all(dst_fd, view[:n])
            done += n
        self.bytes["buffered"] += done
        return done


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _pread_into(fd, view, offset):
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


def check_source(source):
    """Refuse unless every shard this script reads has the pinned header and size (shards
    it does not read may be absent: a partial download is enough)."""
    if not os.path.isdir(source):
        raise Refusal(f"{source}: source directory not found")
    for rel, (digest, header_bytes, file_bytes) in SOURCE_SHARDS.items():
        path = os.path.join(source, rel)
        if not os.path.exists(path):
            raise Refusal(f"{path}: source shard is missing")
        with open(path, "rb") as fh:
            raw = fh.read(header_bytes)
            size = os.fstat(fh.fileno()).st_size
        if hashlib.sha256(raw).hexdigest() != digest:
            raise Refusal(
                f"{path}: header differs from the one this script was made for (sha256 {hashlib.sha256(raw).hexdigest()[:16]}..., "
                f"pinned {digest[:16]}...): the source changed; regenerate the script with mxtrim"
            )
        if size != file_bytes:
            raise Refusal(f"{path}: file is {size} bytes, the pinned source shard is {file_bytes} bytes: the source changed")


def check_plan():
    """The embedded headers and tensor lists must agree (a hand-edited script is refused)."""
    for shard in OUTPUT_SHARDS:
        header = json.loads(shard["header"])
        entries = [(k, v) for k, v in header.items() if k != "__metadata__"]
        if header.get("__metadata__") != METADATA or len(entries) != len(shard["tensors"]):
            raise Refusal(f"{shard['file']}: embedded header does not match the tensor list")
        pos = 0
        for (hname, info), (name, src_file, src_name, dtype, shape, begin, end) in zip(entries, shard["tensors"]):
            if (hname, info["dtype"], info["shape"], info["data_offsets"]) != (name, dtype, shape, [pos, pos + end - begin]):
                raise Refusal(f"{shard['file']}: embedded header entry {hname!r} does not match tensor {name!r}")
            pos += end - begin
    names = {t[0] for shard in OUTPUT_SHARDS for t in shard["tensors"]}
    if TENSOR_DIGESTS and (set(TENSOR_DIGESTS) != names or TENSOR_DIGEST_HASH not in ("xxh3_128", "sha256")):
        raise Refusal("the recorded tensor digests (TENSOR_DIGESTS) do not match the tensor list")


def check_digest(source, tensor, digests):
    """Refuse a tensor whose copied bytes are not those mxtrim wrote (its recorded digest)."""
    new_name, src_file, src_name = tensor[:3]
    got, want = digests.hexdigest(TENSOR_DIGEST_HASH), TENSOR_DIGESTS[new_name]
    if got != want:
        raise Refusal(
            f"{os.path.join(source, src_file)}: tensor {src_name!r} (output {new_name!r}) is not the one mxtrim copied "
            f"({TENSOR_DIGEST_HASH} {got[:16]}..., recorded {want[:16]}...): the source's tensor data changed; nothing written "
            f"(--skip-digest-check writes it anyway)"
        )


def write_output(source, tmp, progress, hash_name=None, check_digests=False):
    check_hash = TENSOR_DIGEST_HASH if check_digests else None
    copier = Copier(kernel=hash_name is None and check_hash is None)
    progress.emit("start", total_bytes=progress.total_bytes, total_tensors=progress.total_tensors, shards=len(OUTPUT_SHARDS), method=copier.method,
                  partial=tmp)
    sources = {}
    files = []
    try:
        for i, shard in enumerate(OUTPUT_SHARDS, 1):
            name = shard["file"]
            header = shard["header"].encode("utf-8")
            progress.emit("shard", shard=name, index=i, of=len(OUTPUT_SHARDS), status="start")
            fd = os.open(os.path.join(tmp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_all(fd, len(header).to_bytes(8, "little") + header)
                position = 8 + len(header)
                for tensor in shard["tensors"]:
                    new_name, src_file, _src_name, _dtype, _shape, begin, end = tensor
                    if src_file not in sources:
                        sources[src_file] = os.open(os.path.join(source, src_file), os.O_RDONLY)
                    src_fd = sources[src_file]
                    progress.tensor(new_name, name, force=progress.done_tensors == 0)
                    digest = Digests(hash_name, check_hash) if hash_name or check_hash else None
                    offset = begin
                    while offset < end:
                        n = copier.copy(src_fd, fd, offset, end - offset, position, digest)
                        offset += n
                        position += n
                        progress.done_bytes += n
                        if offset < end:
                            progress.tensor(new_name, name)
                    progress.done_tensors += 1
                    if check_hash:
                        check_digest(source, tensor, digest)
                    if hash_name:
                        progress.emit("digest", name=new_name, shard=name, hash=hash_name, digest=digest.hexdigest(hash_name))
                expected = 8 + len(header) + sum(t[6] - t[5] for t in shard["tensors"])
                if os.lseek(fd, 0, os.SEEK_CUR) != expected:
                    raise OSError(errno.EIO, f"{name}: wrote {os.lseek(fd, 0, os.SEEK_CUR)} bytes, expected {expected}")
            finally:
                os.close(fd)
            progress.tensor(name=shard["tensors"][-1][0] if shard["tensors"] else "", shard=name, force=True)
            progress.emit("shard", shard=name, index=i, of=len(OUTPUT_SHARDS), status="done", bytes=expected)
            files.append(name)
    finally:
        for fd in sources.values():
            os.close(fd)
    if WRITE_INDEX:
        weight_map = {t[0]: s["file"] for s in OUTPUT_SHARDS for t in s["tensors"]}
        doc = {"metadata": {"total_size": progress.total_bytes}, "weight_map": weight_map}
        with open(os.path.join(tmp, INDEX_NAME), "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        files.append(INDEX_NAME)
    return files, copier


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description="Extract the trimmed checkpoint's shards from the source shards.")
    parser.add_argument("--source", required=True, help="the source model directory")
    parser.add_argument("--out", required=True, help="output directory (must not exist)")
    parser.add_argument("--progress", action="store_true", help="JSON-lines progress events on stderr")
    parser.add_argument("--hash", choices=("xxh3_128", "sha256"), help="hash every tensor while copying it (digest events)")
    parser.add_argument("--skip-digest-check", action="store_true",
                        help="copy without checking each tensor against the digest mxtrim recorded")
    args = parser.parse_args(argv)
    check_digests = bool(TENSOR_DIGESTS) and not args.skip_digest_check
    total_bytes = sum(t[6] - t[5] for s in OUTPUT_SHARDS for t in s["tensors"])
    total_tensors = sum(len(s["tensors"]) for s in OUTPUT_SHARDS)
    progress = Progress(args.progress, total_bytes, total_tensors)
    out = os.path.abspath(args.out)
    tmp = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".partial-" + str(os.getpid()))

    def on_sigterm(signum, frame):
        raise Interrupted()

    signal.signal(signal.SIGTERM, on_sigterm)
    started = time.monotonic()
    try:
        check_plan()
        if args.hash:
            new_hash(args.hash)  # refuse a hash this Python cannot make before writing anything
        if check_digests:
            new_hash(TENSOR_DIGEST_HASH, f"checking the recorded {TENSOR_DIGEST_HASH} tensor digests (--skip-digest-check: do not)")
        check_source(args.source)
        if os.path.lexists(out):
            raise Refusal(f"{out}: already exists; refusing to overwrite (choose another --out)")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        os.mkdir(tmp)
        try:
            files, copier = write_output(args.source, tmp, progress, args.hash, check_digests)
            if os.path.lexists(out):
                raise Refusal(f"{out}: appeared while writing; not overwritten")
            os.rename(tmp, out)
        except BaseException:
            remove_uninterrupted(tmp)
            raise
    except Refusal as exc:
        return fail(progress, str(exc), 1)
    except (KeyboardInterrupt, Interrupted):
        return fail(progress, "interrupted; partial output removed", 130)
    except OSError as exc:
        return fail(progress, f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", 1)
    seconds = time.monotonic() - started
    progress.emit("done", output=out, files=files, total_bytes=total_bytes, seconds=round(seconds, 3), method=copier.method,
                  bytes_by_method=copier.bytes)
    if not args.progress:
        print(f"wrote {out}: {len(OUTPUT_SHARDS)} shard(s), {total_tensors} tensors, {total_bytes} tensor bytes "
              f"in {seconds:.1f} s ({copier.method})")
    return 0


def remove_uninterrupted(tmp):
    """Remove the partial output with Ctrl-C and SIGTERM held off, so a second signal cannot
    leave half of it behind."""
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def fail(progress, message, status):
    progress.emit("error", message=message)
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
'''
