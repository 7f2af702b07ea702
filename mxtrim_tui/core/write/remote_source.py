"""A remote source (``hf://ORG/NAME[@REVISION]``) as `plan`, `trim` and the wizard read it: held
on local disk while they run (read/remote_store.py), said as it happens, let go after.

`plan` and the wizard read into a temporary folder, removed when they end. `trim` reads into a
hidden store beside its output, which a real-weight trim fills with the kept tensors' byte
ranges before it copies them; the store is removed once the output is written, and kept when
the trim fails or is interrupted with fetched bytes in it, so that the same command resumes
there."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ..units import human_bytes


class RemoteSources:
    """The remote source of one command. ``parent``: where `trim` keeps its store (a callable
    giving the folder, as the output's is known only once the request is read); None: a
    temporary folder, removed at the end (`plan`)."""

    def __init__(self, parent=None, say=print):
        self._parent = parent
        # what is read and fetched, said as it happens (stderr); None: nothing said (the wizard)
        self._say = (lambda line: print(line, file=sys.stderr)) if say is print else (say or (lambda line: None))
        self._temp: Path | None = None
        self.repo = None
        self.store: Path | None = None
        self.fetched = False

    def local(self, text: str) -> Path | None:
        """The local folder that holds ``text``'s files (None: ``text`` is not remote)."""
        from ..read.remote import parse_remote
        from ..read.remote_hubs import open_repo
        from ..read.remote_store import open_store

        ref = parse_remote(str(text))
        if ref is None:
            return None
        from ..read.remote import cached_snapshot, not_cached_offline, offline
        from ..read.source import open_source

        if ref.scheme == "hf":  # offline first: a snapshot in huggingface_hub's cache is read there
            cached = cached_snapshot(ref)
            if cached is not None and (offline() or open_source(cached).state == "complete"):
                self._say(f"hf://{ref.repo}@{cached.name}: read from huggingface_hub's cache ({cached}); nothing downloaded")
                return cached
            if offline():
                raise not_cached_offline(ref)
        self.repo = open_repo(ref)
        if self._parent is None:
            self._temp = Path(tempfile.mkdtemp(prefix="mxtrim-remote-"))
            parent = self._temp
        else:
            parent = Path(self._parent())
        self.store, reused = open_store(self.repo, parent)
        source = self.repo.source
        if reused:
            self._say(f"{source}: resuming from {self.store} (left by an earlier run)")
        else:
            self._say(f"{source}: read {human_bytes(self.repo.bytes_read)} by {self.repo.requests} range requests (every "
                  "shard's header, the small files)")
        return self.store

    def fetch_kept(self, plan, max_shard_bytes: int) -> None:
        """A real-weight trim: the kept tensors' byte ranges into the store, before the copy."""
        if self.store is None:
            return
        from ..plan.layout import build_extraction
        from ..read.remote_store import fetch_ranges, kept_ranges
        from .writer import check_free_bytes, nearest_directory

        ranges = kept_ranges(build_extraction(plan, max_shard_bytes))
        wanted = sum(r.size for r in ranges)
        from ..read.remote_store import fetched_pieces

        missing = sum(r.size for r in ranges if r.key() not in fetched_pieces(self.store))
        # the fetched ranges and the output are both on this file system
        check_free_bytes(self.store, nearest_directory(self.store), missing + wanted)
        self._say(f"{plan.inventory.source.shown}: fetching the kept tensors: {human_bytes(missing)} by ranges"
              + (f" ({human_bytes(wanted - missing)} already fetched)" if missing < wanted else "")
              + f", of {human_bytes(plan.inventory.source.present_tensor_bytes)} of weights in the repository")
        self.fetched = True
        report = fetch_ranges(self.repo, self.store, ranges)
        self._say(f"{plan.inventory.source.shown}: fetched {human_bytes(report.fetched_bytes)} by {report.requests} range "
              f"requests")

    def close(self, written: bool) -> None:
        """Let go of the source: a temporary folder always; a trim's store once its output is
        written, or when it holds nothing worth resuming from."""
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            return
        if self.store is None or not self.store.exists():
            return
        from ..read.remote_store import fetched_bytes, remove_store

        kept = fetched_bytes(self.store)
        if written or not kept:
            remove_store(self.store)
        else:
            self._say(f"mxtrim: kept {human_bytes(kept)} of fetched tensor bytes in {self.store}: the same command resumes "
                  "from there (remove it to start over)")
