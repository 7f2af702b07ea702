"""A model on the Hugging Face Hub (or a mirror of it: ``$HF_ENDPOINT``), read by byte ranges.

``hf://ORG/NAME[@REVISION]`` names a repository at a branch, tag or commit. The revision is
pinned to its commit first (``HfApi.model_info``), and every file is then read at that commit,
so a branch that moves meanwhile cannot mix two commits. Of each safetensors shard only the
header is read: its first 8 bytes (the header's length N, little-endian) and the N bytes of
JSON after them, two range requests. The small files an inventory needs (config, index,
tokenizer and template files, generation config) are read whole.

:func:`header_mirror` writes what was read into a folder laid out as the repository: the small
files as they are, and each shard as a sparse file of its full size holding only its header
(the rest reads as zeros and takes no disk), so the local reader builds the same inventory
from it as from a download of the whole repository (tensor names, dtypes, shapes, offsets,
exact bytes). The mirror says so in ``.mxtrim-remote.json``: the source, its commit and the
bytes read.

Offline first: a snapshot of the revision already in huggingface_hub's cache is read there
(:func:`cached_snapshot`) when it is complete, or whatever it holds when ``HF_HUB_OFFLINE`` is
set; nothing is asked of the Hub then.

Every ranged answer is checked: a server that ignores ``Range`` (answers 200 with the whole
file) is refused rather than read (huggingface_hub's own file system does not check, and would
hand back the wrong bytes); an answer shorter than asked, or for other bytes
(``Content-Range``), is refused too. Each error names the repository, the file and what to do.
Tokens are huggingface_hub's (``HF_TOKEN``, the token file); nothing is written to its cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .source import MIRROR_RECORD

REMOTE = re.compile(r"^(hf|ms)://([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?$")
DEFAULT_REVISION = {"hf": "main", "ms": "master"}  # each hub's default branch
# files read whole: what an inventory and a dummy output need (never weights)
SMALL_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".py", ".md", ".yaml", ".yml")
SMALL_LIMIT = 64 * 2**20  # bytes: a larger "small" file (a huge tokenizer.json) is still read, up to this
HEADER_LIMIT = 100 * 2**20  # a safetensors header longer than this is refused (the format's readers cap it too)
IN_FLIGHT = 8  # range requests at once (a release of 163 shards is 326 requests)


class RemoteError(InputError):
    """A remote source cannot be read: one message naming the repository, the file and what to do."""

    def __init__(self, message: str):
        super().__init__(None, message)


def _hub():
    """huggingface_hub, or one line saying how to get it (it comes with transformers)."""
    try:
        import huggingface_hub
    except ImportError:
        raise RemoteError("hf:// sources need huggingface_hub, which comes with transformers: "
                          "pip install 'mxtrim-tui[checks]' (or pip install huggingface_hub)") from None
    return huggingface_hub


@dataclass(frozen=True)
class RemoteRef:
    repo: str
    revision: str = "main"
    scheme: str = "hf"  # hf: the Hugging Face Hub (or a mirror), ms: ModelScope

    def __str__(self) -> str:
        return f"{self.scheme}://{self.repo}@{self.revision}"


def parse_remote(text: str) -> RemoteRef | None:
    """``hf://ORG/NAME[@REVISION]`` or ``ms://ORG/NAME[@REVISION]`` as a reference (None: not a
    remote source)."""
    m = REMOTE.match(str(text).strip())
    if not m:
        return None
    return RemoteRef(m.group(2), m.group(3) or DEFAULT_REVISION[m.group(1)], m.group(1))


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int


class RangedRepo:
    """One repository at one commit, read by checked range requests; counts what it reads.
    A hub's client (a subclass) pins the revision to a commit, lists the files and opens a
    ranged answer; everything else is shared."""

    def __init__(self, ref: RemoteRef, endpoint: str | None = None, token: str | None = None):
        self.ref, self.token = ref, token
        self.endpoint = endpoint
        self.bytes_read = 0
        self.requests = 0
        self._commit: str | None = None
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """``SCHEME://ORG/NAME@<commit>``: the repository as read, pinned."""
        return f"{self.ref.scheme}://{self.ref.repo}@{self.commit}"

    @property
    def commit(self) -> str:
        raise NotImplementedError

    def files(self) -> list["RemoteFile"]:
        raise NotImplementedError

    def _stream(self, path: str, headers: dict):
        """A context manager giving (status, headers, iterator of body chunks) of one GET."""
        raise NotImplementedError

    def _auth_headers(self) -> dict:
        return {}

    def _failed(self, exc: Exception, what: str) -> "RemoteError":
        raise NotImplementedError



    def read(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``path`` from ``start``, by one range request, checked."""
        pieces: list[bytes] = []
        self._ranged(path, start, length, pieces.append)
        return b"".join(pieces)

    def read_into(self, path: str, start: int, length: int, fd: int, stop: threading.Event | None = None) -> None:
        """``length`` bytes of ``path`` from ``start``, written at the same offset of the open
        file ``fd`` as they arrive (one range request, checked; nothing is held in memory).
        ``stop`` set meanwhile abandons the answer."""
        pos = start

        def sink(chunk: bytes) -> None:
            nonlocal pos
            if stop is not None and stop.is_set():
                raise RemoteError(f"{self.ref}: {path}: stopped")
            view = memoryview(chunk)
            while view:
                n = os.pwrite(fd, view, pos)
                pos += n
                view = view[n:]

        self._ranged(path, start, length, sink)

    def _ranged(self, path: str, start: int, length: int, sink) -> None:
        """One range request for bytes ``start`` .. ``start + length - 1`` of ``path``, each
        chunk handed to ``sink`` as it arrives. Refused: an answer that ignores the range (200),
        any other status, a Content-Range for other bytes, fewer or more bytes than asked."""
        if length <= 0:
            return
        end = start + length - 1
        headers = {**self._auth_headers(), "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        got = 0
        try:
            with self._stream(path, headers) as (status, answer_headers, chunks):
                if status == 200:  # the whole file is coming: stop before reading it
                    raise RemoteError(
                        f"{self.ref}: {path}: {self.endpoint} ignored the byte range asked for (it answered with the "
                        "whole file): mxtrim reads shards by ranges and does not download them whole; use a mirror "
                        "that serves Range requests (the Hub does), or download the files and give the folder")
                if status != 206:
                    raise RemoteError(f"{self.ref}: {path}: {self.endpoint} answered HTTP {status} to a range request "
                                      "(the source was not read)")
                span = answer_headers.get("Content-Range", "")
                m = re.match(r"bytes (\d+)-(\d+)/", span)
                if not m or (int(m.group(1)), int(m.group(2))) != (start, end):
                    raise RemoteError(f"{self.ref}: {path}: asked for bytes {start}-{end}, the answer says "
                                      f"{span or 'nothing'} (Content-Range): refused")
                for chunk in chunks:
                    got += len(chunk)
                    if got > length:
                        break
                    sink(chunk)
        except RemoteError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._failed(exc, f"{path} could not be read") from None
        if got != length:
            raise RemoteError(f"{self.ref}: {path}: bytes {start}-{end} came truncated ({got} of {length} bytes): "
                              "read it again" if got < length else
                              f"{self.ref}: {path}: bytes {start}-{end}: the answer ran past the range asked for: refused")
        with self._lock:
            self.bytes_read += length
            self.requests += 1


class HfRepo(RangedRepo):
    """A repository of the Hugging Face Hub (or a mirror: ``$HF_ENDPOINT``), through huggingface_hub."""

    def __init__(self, ref: RemoteRef, endpoint: str | None = None, token: str | None = None):
        constants = _hub().constants
        super().__init__(ref, (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"), token)

    def _api(self):
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def _auth_headers(self) -> dict:
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token)

    @contextmanager
    def _stream(self, path: str, headers: dict):
        from huggingface_hub import get_session, hf_hub_url

        url = hf_hub_url(self.ref.repo, path, revision=self.commit, endpoint=self.endpoint)
        with get_session().stream("GET", url, headers=headers) as answer:
            yield answer.status_code, answer.headers, answer.iter_bytes()

    def _failed(self, exc: Exception, what: str) -> RemoteError:
        """huggingface_hub's exceptions in one sentence, with what to do."""
        name = type(exc).__name__
        said = (str(exc).strip().splitlines() or [name])[0][:300]
        if name == "GatedRepoError":
            advice = "the repository is gated: accept its terms on the Hub and give a token (HF_TOKEN, or hf auth login)"
        elif name == "RepositoryNotFoundError":
            advice = "no such repository, or it is private: check the name, or give a token that can read it (HF_TOKEN)"
        elif name == "RevisionNotFoundError":
            advice = f"no revision {self.ref.revision!r} in it: name a branch, tag or commit it has"
        elif name == "OfflineModeIsEnabled":
            advice = "HF_HUB_OFFLINE is set: unset it, or give a local folder"
        elif "Connect" in name or "Timeout" in name or "Network" in name:
            advice = f"no answer from {self.endpoint}: check the network, or point HF_ENDPOINT at a mirror you can reach"
        else:
            advice = "see the message; the source was not read"
        return RemoteError(f"{self.ref}: {what}: {said} ({advice})")

    @property
    def commit(self) -> str:
        """The commit the revision names now (asked once; every read is at this commit)."""
        if self._commit is None:
            try:
                info = self._api().model_info(self.ref.repo, revision=self.ref.revision)
            except Exception as exc:  # noqa: BLE001 - every hub failure becomes one RemoteError
                raise self._failed(exc, "its revision could not be resolved") from None
            if not getattr(info, "sha", None):
                raise RemoteError(f"{self.ref}: {self.endpoint} gave no commit for revision {self.ref.revision!r}: "
                                  "a mirror must answer the Hub's model-info API with the commit (sha)")
            self._commit = info.sha
        return self._commit

    def files(self) -> list[RemoteFile]:
        """Every file of the repository at its commit, with its size."""
        try:
            entries = list(self._api().list_repo_tree(self.ref.repo, recursive=True, revision=self.commit))
        except Exception as exc:  # noqa: BLE001
            raise self._failed(exc, "its files could not be listed") from None
        return sorted((RemoteFile(e.path, int(e.size)) for e in entries if getattr(e, "size", None) is not None),
                      key=lambda f: f.path)


def cached_snapshot(ref: RemoteRef) -> Path | None:
    """The repository's snapshot at this revision in huggingface_hub's cache
    (``$HF_HUB_CACHE``, ``$HF_HOME/hub``), named by its commit; None where it is not cached."""
    snapshot_download = _hub().snapshot_download

    try:
        return Path(snapshot_download(ref.repo, revision=ref.revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (LocalEntryNotFoundError), or an unreadable cache
        return None


def offline() -> bool:
    """huggingface_hub's offline mode (``HF_HUB_OFFLINE``, read when it is imported)."""
    constants = _hub().constants

    return bool(constants.HF_HUB_OFFLINE)


def not_cached_offline(ref: RemoteRef) -> RemoteError:
    from huggingface_hub import constants

    return RemoteError(f"{ref}: HF_HUB_OFFLINE is set and the repository is not in huggingface_hub's cache "
                       f"({constants.HF_HUB_CACHE}): unset HF_HUB_OFFLINE to read it by ranges, or download it first "
                       "(hf download) and give its folder")


def shard_header(repo: RangedRepo, f: RemoteFile) -> bytes:
    """The first 8 + N bytes of a safetensors shard: its header's length and the header."""
    if f.size < 8:
        raise RemoteError(f"{repo.ref}: {f.path}: {f.size} bytes, too short for a safetensors file")
    head = repo.read(f.path, 0, 8)
    (n,) = struct.unpack("<Q", head)
    if n > HEADER_LIMIT or 8 + n > f.size:
        raise RemoteError(f"{repo.ref}: {f.path}: its header claims {n:,} bytes in a file of {f.size:,}: not a "
                          "safetensors file, or a damaged one")
    return head + repo.read(f.path, 8, n)


@dataclass
class MirrorReport:
    folder: Path
    source: str  # SCHEME://ORG/NAME@<commit>
    bytes_read: int
    requests: int
    repository_bytes: int  # every file of the repository, whole
    shards: int
    skipped: list[str]  # files neither read nor needed (other weights, large files)


def header_mirror(repo: RangedRepo, dest: Path) -> MirrorReport:
    """Write ``dest`` (which must not exist): the repository's small files, and its shards as
    sparse files holding only their headers. Written beside ``dest`` first and renamed into
    place only when complete: a failure leaves nothing."""
    if dest.exists():
        raise RemoteError(f"{dest}: already exists; give a new folder for the mirror")
    files = repo.files()
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    skipped: list[str] = []
    shards = [f for f in files if f.path.endswith(".safetensors")]

    def fetch(f: RemoteFile) -> None:
        target = work / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.path.endswith(".safetensors"):
            header = shard_header(repo, f)
            with open(target, "wb") as out:
                out.write(header)
                out.truncate(f.size)  # the tensors' bytes: a hole, never read here
        else:
            target.write_bytes(repo.read(f.path, 0, f.size))

    try:
        wanted = []
        for f in files:
            if ".." in Path(f.path).parts or Path(f.path).is_absolute():
                raise RemoteError(f"{repo.ref}: {f.path}: a file name outside the repository: refused")
            if f.path.endswith(".safetensors") or (f.path.lower().endswith(SMALL_SUFFIXES) and f.size <= SMALL_LIMIT):
                wanted.append(f)
            else:
                skipped.append(f.path)
        # one file first, alone: a server that ignores Range is found out by one answer, not by
        # one per request in flight; then several requests in flight
        first = next((f for f in wanted if f.path.endswith(".safetensors")), wanted[0] if wanted else None)
        if first is not None:
            fetch(first)
        with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            futures = [pool.submit(fetch, f) for f in wanted if f is not first]
            try:
                for done in futures:
                    done.result()
            except BaseException:
                for pending in futures:  # nothing more starts after the first failure
                    pending.cancel()
                raise
        report = MirrorReport(dest, repo.source, repo.bytes_read, repo.requests,
                              sum(f.size for f in files), len(shards), skipped)
        record = {"schema": "mxtrim.remote-mirror/1", "source": report.source, "asked": str(repo.ref),
                  "endpoint": repo.endpoint, "bytes_read": report.bytes_read, "requests": report.requests,
                  "repository_bytes": report.repository_bytes, "shards_header_only": len(shards), "not_read": skipped}
        (work / MIRROR_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return report
