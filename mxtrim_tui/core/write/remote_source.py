"""A remote source (``hf://ORG/NAME[@REVISION]``, ``ms://…``) as `inspect`, `plan`, `trim` and
the wizard read it: held on local disk while they run (read/remote_store.py), said as it
happens, let go after.

Offline first: a Hub repository whose snapshot is complete in huggingface_hub's cache (or
whatever the snapshot holds, with ``HF_HUB_OFFLINE``) is read there, nothing asked of the Hub.
Otherwise `inspect`, `plan` and the wizard read into a temporary folder, removed when they end;
`trim` reads into a hidden store beside its output, which a real-weight trim fills with the
kept tensors' byte ranges before it copies them. The store is removed once the output is
written, and kept when the trim fails or is interrupted with fetched bytes in it, so that the
same command resumes there."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ..units import human_bytes


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


class RemoteSources:
    """The remote source of one command. ``beside_output``: `trim`'s store, kept beside the
    output (in ``workspace``'s models folder when no output is named); else a temporary folder.
    ``say``: where what is read and fetched is said (None: nowhere, the wizard)."""

    def __init__(self, beside_output: bool = False, workspace: Path | None = None, say=_stderr):
        self._beside_output, self._workspace = beside_output, workspace
        self._say = say or (lambda line: None)
        self._temp: Path | None = None
        self.repo = None
        self.store: Path | None = None
        self.cache: Path | None = None  # the snapshot of huggingface_hub's cache read instead
        self.shown: str | None = None  # the source as read: SCHEME://ORG/NAME@<commit>

    def local(self, text: str, out: Path | None = None) -> Path | None:
        """The local folder that holds ``text``'s files (None: ``text`` is not remote);
        ``out``: the output a trim writes, whose folder the store goes in."""
        from ..read.remote import cached_snapshot, not_cached_offline, offline, parse_remote
        from ..read.remote_hubs import open_repo
        from ..read.remote_store import open_store
        from ..read.source import open_source

        ref = parse_remote(str(text))
        if ref is None:
            return None
        if ref.scheme == "hf":  # offline first: a snapshot in huggingface_hub's cache is read there
            cached = cached_snapshot(ref)
            if cached is not None and (offline() or open_source(cached).state == "complete"):
                self.cache, self.shown = cached, f"hf://{ref.repo}@{cached.name}"
                self._say(f"{self.shown}: read from huggingface_hub's cache ({cached}); nothing downloaded")
                return cached
            if offline():
                raise not_cached_offline(ref)
        self.repo = open_repo(ref)
        self.store, reused = open_store(self.repo, self._parent(out))
        self.shown = self.repo.source
        if reused:
            self._say(f"{self.shown}: resuming from {self.store} (left by an earlier run)")
        else:
            record = self.record()
            self._say(f"{self.shown}: read {human_bytes(self.repo.bytes_read)} by {self.repo.requests} range requests "
                      f"(every shard's header, the small files) of a {human_bytes(record['repository_bytes'])} repository")
        return self.store

    def _parent(self, out: Path | None) -> Path:
        if not self._beside_output:  # one temporary folder for every source read (the wizard reads several)
            if self._temp is None:
                self._temp = Path(tempfile.mkdtemp(prefix="mxtrim-remote-"))
            return self._temp
        if out is not None:
            return Path(out).absolute().parent
        from .writer import DEFAULT_MODELS_DIR

        return Path(self._workspace or ".").resolve() / DEFAULT_MODELS_DIR

    def record(self) -> dict:
        """What the store's header mirror says of the read (read/remote.py)."""
        import json

        from ..read.source import MIRROR_RECORD

        return json.loads((self.store / MIRROR_RECORD).read_text(encoding="utf-8"))

    def fetch_kept(self, plan, max_shard_bytes: int) -> None:
        """A real-weight trim: the kept tensors' byte ranges into the store, before the copy."""
        if self.store is None:
            return
        from ..plan.layout import build_extraction
        from ..read.remote_store import fetch_ranges, fetched_pieces, kept_ranges
        from .writer import check_free_bytes, nearest_directory

        ranges = kept_ranges(build_extraction(plan, max_shard_bytes))
        done = fetched_pieces(self.store)
        wanted = sum(r.size for r in ranges)
        missing = sum(r.size for r in ranges if r.key() not in done)
        # the fetched ranges and the output are both on this file system
        check_free_bytes(self.store, nearest_directory(self.store), missing + wanted)
        self._say(f"{self.shown}: fetching the kept tensors: {human_bytes(missing)} by ranges"
                  + (f" ({human_bytes(wanted - missing)} already fetched)" if missing < wanted else "")
                  + f", of {human_bytes(plan.inventory.source.present_tensor_bytes)} of weights in the repository")
        before = (self.repo.bytes_read, self.repo.requests)
        fetch_ranges(self.repo, self.store, ranges, done)
        self._say(f"{self.shown}: fetched {human_bytes(self.repo.bytes_read - before[0])} by "
                  f"{self.repo.requests - before[1]} range requests")

    def close(self, written: bool) -> None:
        """Let go of the source: a temporary folder always; a trim's store once its output is
        written, or when it holds nothing worth resuming from."""
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            return
        if self.store is None or not self.store.exists():
            return
        from ..read.remote_store import fetched_bytes

        kept = fetched_bytes(self.store)
        if written or not kept:
            shutil.rmtree(self.store, ignore_errors=True)
        else:
            self._say(f"mxtrim: kept {human_bytes(kept)} of fetched tensor bytes in {self.store}: the same command resumes "
                      "from there (remove it to start over)")
