"""A validation's verdict in a few words, the same for ``mxtrim validate`` and the wizard: the
checks passed or the first that failed, and, when a server ran, the settings it ran at against
those the output was planned for (its ``mxtrim-plan.json`` ``serve`` object). A validation on
CPU at TP 1, context 256 and one sequence proves nothing about TP 2, context 32,768 and 16
sequences: the verdict says so itself, not only the README's "Served with" line."""

from __future__ import annotations

import json
from pathlib import Path

# the settings compared, in the order they are said
_COMPARED = ("tp", "pp", "dp", "expert_parallel", "max_model_len", "max_num_seqs")


def _said(key: str, value) -> str:
    if key == "max_model_len":
        return f"context {value:,}" if isinstance(value, int) else f"context {value}"
    if key == "max_num_seqs":
        return f"{value:,} sequence" + ("" if value == 1 else "s") if isinstance(value, int) else f"{value} sequences"
    if key == "expert_parallel":
        return "expert parallel" if value else "no expert parallel"
    return f"{key.upper()} {value}"


def _value(settings: dict, key: str):
    value = settings.get(key)
    if key == "expert_parallel":
        return bool(value)
    if key in ("tp", "pp", "dp") and value is None:
        return 1  # a server without the flag runs at 1
    return value


def planned_serve(output) -> dict | None:
    """The ``serve`` object of the output's ``mxtrim-plan.json``, or None where it cannot be read."""
    try:
        doc = json.loads((Path(output) / "mxtrim-plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    serve = doc.get("serve") if isinstance(doc, dict) else None
    return serve if isinstance(serve, dict) else None


def served_against_planned(served: dict | None, planned: dict | None) -> str:
    """'' when no server ran; else where it ran, and the planned settings it did not test:
    "served on cpu at TP 1, context 256, 1 sequence; planned TP 2, context 32,768, 16
    sequences: not tested", or "served on cuda at the planned TP 2, context 4,096, 16 sequences"."""
    if not served:
        return ""
    where = f"served on {served['device']}" if served.get("device") else "served"
    where += " in graph mode" if served.get("enforce_eager") is False else ""  # validate --graph: a run of its own
    # TP, context and sequences always; PP, DP and expert parallel where either side has them
    keys = [k for k in _COMPARED if k in ("tp", "max_model_len", "max_num_seqs")
            or _value(served, k) not in (1, False) or (planned and _value(planned, k) not in (1, False))]
    if not planned:
        return f"{where} at " + ", ".join(_said(k, _value(served, k)) for k in keys) + "; no planned settings to compare"
    differ = [k for k in keys if _value(planned, k) is not None and _value(planned, k) != _value(served, k)]
    if not differ:
        return f"{where} at the planned " + ", ".join(_said(k, _value(served, k)) for k in keys)
    return (f"{where} at " + ", ".join(_said(k, _value(served, k)) for k in differ)
            + "; planned " + ", ".join(_said(k, _value(planned, k)) for k in differ) + ": not tested")


def verdict(doc: dict, planned: dict | None = None) -> tuple[bool, list[str]]:
    """(passed, the headline's lines) of a validation record (``mxtrim validate --json``).
    ``planned``: the output's serve settings (default: read from its ``mxtrim-plan.json``).
    A server that stopped during start-up served nothing: "Not served: the server stopped
    during start-up (its reason)", never "Served on ... at the planned ..."."""
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    python = doc.get("python") or "?"
    failed = [r for r in rows if r.get("status") == "failed"]
    if planned is None and doc.get("output"):
        planned = planned_serve(doc["output"])
    served = served_against_planned(doc.get("settings"), planned)
    start = next((r for r in rows if r.get("check") == "start-up"), None)
    if served and start is not None and start.get("status") == "failed":
        # a server was started and stopped before it was healthy: nothing ran at any setting
        served = f"not served: the server stopped during start-up ({start.get('detail') or 'not healthy'})"
    if failed:
        first = failed[0]
        why = f" — {first['verdict']['class']}" if isinstance(first.get("verdict"), dict) else ""
        lines = [f"✗ validation with {python}: {first.get('check')} failed{why} (details in README.md, logs/serve.log)"]
        return False, lines + ([served[0].upper() + served[1:]] if served else [])
    passed = sum(1 for r in rows if r.get("status") == "passed")
    unverified = sum(1 for r in rows if r.get("status") == "unverified")
    differs = [r.get("check") for r in rows if r.get("status") in ("differs", "not comparable")]
    extra = " · loadable by this vLLM" if doc.get("loadable") else ""
    extra += f" · {', '.join(differs)}: see their rows" if differs else ""
    first = f"✓ validated with {python}: {passed} checks passed, {unverified} unverified{extra}"
    return True, [first] + ([served[0].upper() + served[1:]] if served else ["No server ran: the planned serve settings are not tested"])
