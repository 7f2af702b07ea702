"""A model repository on ModelScope (``ms://ORG/NAME[@REVISION]``), read by range requests
through the ModelScope SDK's hub client (``modelscope_hub``, installed by modelscope 1.40 and
newer: ``pip install 'mxtrim-tui[modelscope]'``).

What it uses of the SDK: its configuration (the endpoint: ``MODELSCOPE_ENDPOINT``, or the older
``MODELSCOPE_DOMAIN``; the token: ``MODELSCOPE_API_TOKEN`` or ``modelscope login``), its
listing of a repository's files at a revision (``GET /api/v1/models/ORG/NAME/repo/files``:
path, size, SHA-256 and the commit that last changed each file), and its download address of
a file at a revision (``/api/v1/models/ORG/NAME/repo?Revision=&FilePath=``). The ranged
requests are mxtrim's own, checked as for the Hub (read/remote.py), with the SDK's token sent
the two ways its own client sends it (an ``Authorization: Bearer`` header and the
``m_session_id`` cookie).

Where nothing answers: the endpoint is asked once, by a plain request of mxtrim's own with a
short connect timeout, before the SDK is asked anything, so a refused, cut or unreachable
connection is one error at once (the SDK's listing would try four times, with back-offs,
logging each try). The SDK's log lines and warnings are kept off the terminal during mxtrim's
calls: what went wrong is told in mxtrim's one line.

Pinning: ModelScope names no head commit for a branch, but every listed file carries the
commit that last changed it; the newest of them is the commit whose tree the listing shows,
and every file is then read at that commit, so a branch that moves meanwhile cannot mix two
commits. A revision given as a commit id is read as it is.
"""

from __future__ import annotations

import logging
import re
import warnings
from contextlib import contextmanager
from datetime import datetime

from .remote import RangedRepo, RemoteError, RemoteFile, RemoteRef

CONNECT_S = 5  # seconds to open a connection: an endpoint that takes no connection is told at once
NEEDS = "ms:// sources need the ModelScope SDK 1.40 or newer: pip install 'mxtrim-tui[modelscope]' (or 'modelscope>=1.40')"


def _sdk():
    try:
        from modelscope_hub.api import HubApi
        from modelscope_hub.config import get_default_config
    except ImportError:
        raise RemoteError(NEEDS) from None
    return HubApi, get_default_config


@contextmanager
def _quiet():
    """The SDK's log lines (its own handler on ``modelscope_hub``, retries logged as WARNING)
    and warnings (MODELSCOPE_DOMAIN's deprecation) kept off the terminal for one call."""
    logger = logging.getLogger("modelscope_hub")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _reason(exc: BaseException) -> str:
    """The innermost reason of a failed connection, as the system gave it ("[Errno 111]
    Connection refused", "[Errno -2] Name or service not known"), found through the chain of
    wrappers that requests, urllib3 and the SDK put around it: the deepest exception with a
    message of its own."""
    said, depth, todo, seen = "", -1, [(exc, 0)], set()
    while todo:
        e, d = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        inner = [x for x in (*e.args, getattr(e, "reason", None), e.__cause__, e.__context__) if isinstance(x, BaseException)]
        text = (str(e).strip().splitlines() or [""])[0]
        if text and not any(isinstance(a, BaseException) for a in e.args) and d > depth:
            said, depth = text, d
        todo += [(x, d + 1) for x in inner]
    return said or type(exc).__name__


def _when(value) -> float:
    """A listing's CommittedDate (epoch seconds or milliseconds, or ISO text) as seconds."""
    if isinstance(value, (int, float)):
        return value / 1000 if value > 9_999_999_999 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


class MsRepo(RangedRepo):
    """A repository of ModelScope at one commit."""

    def __init__(self, ref: RemoteRef, endpoint: str | None = None, token: str | None = None):
        HubApi, get_default_config = _sdk()
        with _quiet():
            config = get_default_config()
        super().__init__(ref, (endpoint or config.endpoint).rstrip("/"), token or config.token)
        self._client = HubApi(endpoint=self.endpoint, token=self.token).legacy
        self._session = None
        self._reached = False
        self._listing: list[dict] | None = None

    def _failed(self, exc: Exception, what: str) -> RemoteError:
        """The SDK's exceptions in one sentence, with what to do."""
        name = type(exc).__name__
        said = (str(exc).strip().splitlines() or [name])[0][:300]
        network = "Network" in name or "Timeout" in name or "Connect" in name
        if network:
            said = _reason(exc)
        if name == "NotExistError":
            advice = (f"no such repository, or no revision {self.ref.revision!r} in it: check the name and the revision "
                      "(ModelScope's default branch is master)")
        elif name in ("PermissionDeniedError", "AuthenticationError"):
            advice = ("the repository is private or needs its terms accepted: accept them on ModelScope and give a token "
                      "(MODELSCOPE_API_TOKEN, or modelscope login)")
        elif network:
            advice = (f"no answer from {self.endpoint}: check the network, or point MODELSCOPE_ENDPOINT at one you can "
                      "reach, or download the repository and give its local folder")
        else:
            advice = "see the message; the source was not read"
        return RemoteError(f"{self.ref}: {what}: {said} ({advice})")

    def _http(self):
        """mxtrim's own HTTP session with the endpoint (no retries), with the SDK's token."""
        import requests

        if self._session is None:
            self._session = requests.Session()
            if self.token:
                self._session.cookies.set("m_session_id", self.token)
        return self._session

    def _reach(self) -> None:
        """Ask the endpoint once whether it answers at all (any HTTP answer will do); where it
        takes no connection, or cuts it, one error now rather than the SDK's retries."""
        if self._reached:
            return
        try:
            self._http().head(self.endpoint + "/", timeout=(CONNECT_S, 30), allow_redirects=False).close()
        except Exception as exc:  # noqa: BLE001 - refused, cut, unreachable, timed out, a bad address
            raise self._failed(exc, "its files could not be listed") from None
        self._reached = True

    def _list(self, revision: str) -> list[dict]:
        self._reach()
        try:
            with _quiet():
                entries = self._client.list_repo_files(repo_id=self.ref.repo, repo_type="model", revision=revision,
                                                       recursive=True)
        except Exception as exc:  # noqa: BLE001 - every SDK failure becomes one RemoteError
            raise self._failed(exc, "its files could not be listed") from None
        return [e for e in entries if isinstance(e, dict) and (e.get("Type") or "blob") != "tree"]

    @property
    def commit(self) -> str:
        if self._commit is None:
            if re.fullmatch(r"[0-9a-f]{40}", self.ref.revision):  # a commit id: read as it is
                self._commit = self.ref.revision
                return self._commit
            listing = self._list(self.ref.revision)
            stamped = [e for e in listing if isinstance(e.get("Revision"), str) and e["Revision"]]
            if not stamped:
                raise RemoteError(f"{self.ref}: {self.endpoint} listed no commit with the files of revision "
                                  f"{self.ref.revision!r}: mxtrim reads a repository at one commit; name a commit id")
            self._commit = max(stamped, key=lambda e: _when(e.get("CommittedDate")))["Revision"]
            self._listing = listing  # the commit's tree, as listed: not asked for again
        return self._commit

    def files(self) -> list[RemoteFile]:
        """Every file of the repository at its commit, with its size."""
        listing = self._listing if self._listing is not None else self._list(self.commit)
        self._listing = listing
        found = []
        for e in listing:
            path = e.get("Path") or e.get("Name")
            if isinstance(path, str) and path and e.get("Size") is not None:
                found.append(RemoteFile(path, int(e["Size"])))
        return sorted(found, key=lambda f: f.path)

    def _auth_headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @contextmanager
    def _stream(self, path: str, headers: dict):
        url = self._client.get_download_url(self.ref.repo, "model", path, self.commit)
        with self._http().get(url, headers=headers, stream=True, timeout=(CONNECT_S, 120)) as answer:
            yield answer.status_code, answer.headers, answer.iter_content(2**20)
