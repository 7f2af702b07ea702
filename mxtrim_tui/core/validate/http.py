"""Plain HTTP against the server on loopback (standard library only): status, body, seconds."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


def _call(request: urllib.request.Request, timeout: float) -> tuple[int | None, str, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace"), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace"), time.monotonic() - started
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return None, str(getattr(exc, "reason", exc)), time.monotonic() - started


def get(url: str, timeout: float = 10.0) -> tuple[int | None, str, float]:
    return _call(urllib.request.Request(url), timeout)


def post_json(url: str, doc: dict, timeout: float = 120.0) -> tuple[int | None, str, float]:
    request = urllib.request.Request(
        url, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    return _call(request, timeout)
