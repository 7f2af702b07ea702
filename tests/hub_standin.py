"""A stand-in of the Hugging Face Hub's HTTP surface, serving local folders as repositories.

What huggingface_hub's own client asks (read in huggingface_hub 2.4.0: hf_api.py, file_download.py):
``GET /api/models/{repo}/revision/{rev}`` (model info: ``id``, ``sha``, ``siblings``),
``GET /api/models/{repo}/tree/{rev}?recursive=true`` (``type``, ``path``, ``oid``, ``size``)
and ``GET|HEAD /{repo}/resolve/{rev}/{file}`` with ``Range`` (206 and ``Content-Range``,
``X-Repo-Commit``, ``ETag``). A revision is a branch name or the commit itself. Every body byte
served is counted, per file; ``ignore_range`` makes it answer 200 with the whole file, as some
mirrors do, and ``short_answers`` one byte short of what its Content-Range says (all, or those
a test picks). ``commit`` may be changed between requests: a branch that moved.

Everything is counted before the answer it counts goes out (a body's bytes as each piece is
handed to the connection), so the counts are whole by the time a client has its answer: a
test reads them as soon as its read returns, with nothing to wait for."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from http_support import JsonHandler


class HubStandIn:
    def __init__(self, repos: dict[str, Path], commit: str = "0" * 39 + "1", ignore_range: bool = False,
                 short_answers=False, gated: frozenset[str] = frozenset(), rate: float | None = None,
                 redirect: bool = False):
        # short_answers: a ranged answer one byte short of its Content-Range (a cut-off proxy);
        # True for every answer, or a test of (file, start, end) for some
        self.repos, self.commit, self.ignore_range, self.short_answers = repos, commit, ignore_range, short_answers
        self.gated = gated  # repositories that need their terms accepted (403, X-Error-Code: GatedRepo)
        # rate: bytes per second for all answers together (a link of that speed), None: as fast as loopback
        self.rate, self._sent_at, self._rate_lock = rate, 0.0, threading.Lock()
        # redirect: a shard's GET answered 302 to another address serving its bytes (the Hub's
        # large files, ModelScope's object storage); counted in ``redirects``
        self.redirect, self.redirects = redirect, 0
        self.served: Counter = Counter()  # file path -> body bytes sent
        self.ranges: list[tuple[str, int, int]] = []  # (file, start, end exclusive) of every ranged answer sent
        self.old_commits: set[str] = set()  # earlier commits still served by their hash (main moved on)
        self.revisions: Counter = Counter()  # revision -> requests that named it
        self.counting = threading.Lock()  # the accounting above, updated by every answering thread
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HubStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _pace(self, n: int) -> None:
        """Hold an answer's next ``n`` bytes until the link (``rate``) has room for them."""
        if not self.rate:
            return
        with self._rate_lock:
            now = time.monotonic()
            self._sent_at = max(self._sent_at, now) + n / self.rate
            wait = self._sent_at - now
        if wait > 0:
            time.sleep(wait)

    def files(self, repo: str) -> list[Path]:
        root = self.repos[repo]
        return sorted(p for p in root.rglob("*") if p.is_file())

    def _handler(self):
        hub = self

        class Handler(JsonHandler):
            def _missing(self, code: str, status: int = 404) -> None:
                self.send_json({"error": code}, status, headers={"X-Error-Code": code})

            def _repo_and_rest(self, parts: list[str]):
                if "/".join(parts[:2]) in hub.gated:
                    self._missing("GatedRepo", 403)
                    return None, "answered"
                if len(parts) < 2 or "/".join(parts[:2]) not in hub.repos:
                    return None, None
                return "/".join(parts[:2]), parts[2:]

            def _revision_ok(self, rev: str) -> bool:
                with hub.counting:
                    hub.revisions[rev] += 1
                return rev in ("main", hub.commit) or rev in hub.old_commits

            def do_HEAD(self) -> None:
                self._resolve(head=True)

            def do_GET(self) -> None:
                path = unquote(urlsplit(self.path).path).strip("/")
                parts = path.split("/")
                if parts[0] == "cdn":
                    return self._cdn()
                if parts[:2] == ["api", "models"]:
                    repo, rest = self._repo_and_rest(parts[2:])
                    if repo is None:
                        return None if rest == "answered" else self._missing("RepoNotFound")
                    if not rest or not self._revision_ok(rest[1] if len(rest) > 1 else ""):
                        return self._missing("RevisionNotFound")
                    root = hub.repos[repo]
                    if rest[0] == "revision":
                        asked = rest[1] if len(rest) > 1 else "main"  # a commit names itself, main the newest
                        return self.send_json({"id": repo, "sha": hub.commit if asked == "main" else asked,
                                           "siblings": [{"rfilename": str(p.relative_to(root))} for p in hub.files(repo)]})
                    if rest[0] == "tree":
                        return self.send_json([{"type": "file", "path": str(p.relative_to(root)), "size": p.stat().st_size,
                                            "oid": hashlib.sha1(str(p).encode()).hexdigest()} for p in hub.files(repo)])
                    return self._missing("EntryNotFound")
                self._resolve(head=False)

            def _resolve(self, head: bool) -> None:
                parts = unquote(urlsplit(self.path).path).strip("/").split("/")
                repo, rest = self._repo_and_rest(parts)
                if rest == "answered":
                    return None
                if repo is None or len(rest) < 3 or rest[0] != "resolve":
                    return self._missing("RepoNotFound")
                if not self._revision_ok(rest[1]):
                    return self._missing("RevisionNotFound")
                name = "/".join(rest[2:])
                file = hub.repos[repo] / name
                if not file.is_file():
                    return self._missing("EntryNotFound")
                if hub.redirect and name.endswith(".safetensors") and not head:
                    # as the Hub answers for a large file: a redirect to where its bytes are served
                    return self._redirect(f"/cdn/{repo}/{rest[1]}/{name}")
                self._send_file(file, name, head)

            def _redirect(self, where: str) -> None:
                with hub.counting:
                    hub.redirects += 1
                self.send_response(302)
                self.send_header("Location", hub.endpoint + where)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _cdn(self) -> None:
                """Where a redirect points: ``/cdn/ORG/NAME/REVISION/FILE``, ranges served as by resolve."""
                parts = unquote(urlsplit(self.path).path).strip("/").split("/")
                repo, name = "/".join(parts[1:3]), "/".join(parts[4:])
                self._send_file(hub.repos[repo] / name, name, head=False)

            def _send_file(self, file, name: str, head: bool) -> None:
                size = file.stat().st_size
                wanted = self.headers.get("Range")
                status, begin, count, span = 200, 0, size, None
                if wanted and not hub.ignore_range:
                    first, _, last = wanted.removeprefix("bytes=").partition("-")
                    start, end = int(first), min(int(last) if last else size - 1, size - 1)
                    status, begin, count, span = 206, start, end + 1 - start, f"bytes {start}-{end}/{size}"
                    if hub.short_answers is True or (callable(hub.short_answers) and hub.short_answers(name, start, end)):
                        count -= 1
                    if not head:
                        with hub.counting:
                            hub.ranges.append((name, start, end + 1))
                self.send_response(status)
                self.send_header("X-Repo-Commit", hub.commit)
                # a file's identity, cheap for a sparse file of hundreds of GB (its content is not hashed)
                stat = file.stat()
                self.send_header("ETag", f'"{hashlib.sha256(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()}"')
                self.send_header("Accept-Ranges", "none" if hub.ignore_range else "bytes")
                self.send_header("Content-Length", str(count))
                if span:
                    self.send_header("Content-Range", span)
                self.end_headers()
                if not head:
                    sent = 0
                    with open(file, "rb") as fh:  # read as it is sent: whole shards are never held in memory
                        fh.seek(begin)
                        while sent < count:
                            chunk = fh.read(min(2**20, count - sent))
                            if not chunk:
                                break
                            hub._pace(len(chunk))
                            with hub.counting:  # counted first: the client may have it the instant it is written
                                hub.served[name] += len(chunk)
                            try:
                                self.wfile.write(chunk)
                            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                                with hub.counting:
                                    hub.served[name] -= len(chunk)
                                break
                            sent += len(chunk)

        return Handler


def sharded_llama(folder: Path) -> Path:
    """The repository the remote-source tests serve: a Llama of four layers in several shards
    (1 MiB each) with its index, tokenizer and config, written under ``folder``."""
    from synth.checkpoint import write_checkpoint
    from synth.layouts.llama import llama3

    root = write_checkpoint(folder / "tiny-llama", llama3(num_layers=4, hidden_size=256, vocab_size=512), data="random",
                            max_shard_bytes=2**20)
    assert len(list(root.glob("*.safetensors"))) >= 3
    return root


def header_bytes(shard: Path) -> int:
    """A safetensors file's 8 + N header bytes."""
    with open(shard, "rb") as fh:
        return 8 + int.from_bytes(fh.read(8), "little")
