"""A stand-in of ModelScope's HTTP surface, serving local folders as model repositories.

What the ModelScope SDK's hub client asks (read in modelscope-hub 0.5.1, ``_legacy_api.py``):
``GET /api/v1/models/ORG/NAME/repo/files?Revision=&Recursive=`` answered
``{"Code": 200, "Data": {"Files": [...]}, "Success": true}``, each file with ``Path``,
``Name``, ``Size``, ``Sha256``, ``Type`` and the commit that last changed it (``Revision``,
``CommittedDate``); and ``GET /api/v1/models/ORG/NAME/repo?Revision=&FilePath=``, which for a
shard redirects to object storage (``/oss/…``) as ModelScope does, ranges served there. Errors
as its API gives them: 404 for an absent repository or revision, 403 for a private one. Every
body byte served is counted, per file (``tests/hub_standin.py`` serves the bytes); like the rest
of the accounting, before the answer goes out, so a test reads it as soon as its read returns."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, unquote, urlsplit

from hub_standin import HubStandIn


class ModelScopeStandIn(HubStandIn):
    def __init__(self, repos, commit: str = "a" * 40, private: frozenset[str] = frozenset(), **kw):
        super().__init__(repos, commit=commit, **kw)
        self.private = private
        self.listed_at: list[str] = []  # the Revision of every listing asked for
        self.files_at: list[str] = []  # the Revision of every file download asked for

    def _handler(self):
        hub = self
        Base = super()._handler()

        class Handler(Base):
            def _api_error(self, status: int, message: str) -> None:
                self.send_json({"Code": status, "Message": message, "Success": False, "RequestId": "standin"}, status)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                parts = unquote(url.path).strip("/").split("/")
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if parts[0] == "oss":  # object storage: /oss/ORG/NAME/COMMIT/FILE
                    return self._cdn()
                if parts[:3] != ["api", "v1", "models"] or len(parts) < 6:
                    return self._api_error(404, "not found")
                repo, action = "/".join(parts[3:5]), "/".join(parts[5:])
                if repo in hub.private:
                    return self._api_error(403, f"access denied to model {repo}")
                if repo not in hub.repos:
                    return self._api_error(404, f"model {repo} not found")
                revision = query.get("Revision", "master")
                if not self._revision_ok(revision):
                    return self._api_error(404, f"revision {revision} not found in {repo}")
                root = hub.repos[repo]
                if action == "repo/files":
                    hub.listed_at.append(revision)
                    files = [{"Name": p.name, "Path": str(p.relative_to(root)), "Size": p.stat().st_size, "Type": "blob",
                              "Sha256": hashlib.sha256(str(p).encode()).hexdigest(), "Revision": hub.commit,
                              "CommittedDate": 1764979200} for p in hub.files(repo)]
                    return self.send_json({"Code": 200, "Data": {"Files": files}, "Message": "success", "Success": True})
                if action == "repo":
                    name = query.get("FilePath", "")
                    file = root / name
                    if not name or not file.is_file():
                        return self._api_error(404, f"file {name} not found")
                    hub.files_at.append(revision)
                    if name.endswith(".safetensors"):
                        return self._redirect(f"/oss/{repo}/{revision}/{name}")
                    return self._send_file(file, name, head=False)
                return self._api_error(404, "not found")

            def _revision_ok(self, rev: str) -> bool:
                with hub.counting:
                    hub.revisions[rev] += 1
                return rev in ("master", hub.commit) or rev in hub.old_commits

        return Handler
