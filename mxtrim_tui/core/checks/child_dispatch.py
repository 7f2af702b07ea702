"""The check child's own half: it reads JSON requests on stdin, one per line, answers each with
the check it names (a plan verdict, :mod:`.plan_outcome`; a planned output's structure,
:mod:`.structure`) and the interpreter that judged, and writes the answers on stdout. Started
by :class:`.child.CheckChild` in the judging interpreter; nothing imports this module but that
boot line."""

from __future__ import annotations

import json
import sys


def _answer(request: dict) -> dict:
    if request.get("op") == "plan":
        from .plan_outcome import outcome_for_request

        return outcome_for_request(request)
    if request.get("op") == "structure":
        from .structure import check_planned

        return check_planned(request).to_json()
    return {"error": f"unknown request {request.get('op')!r}"}


def main() -> int:
    from .judge import _versions_here

    judge = _versions_here()  # what judges here: every answer names it
    for line in sys.stdin:
        try:
            answer = dict(_answer(json.loads(line)), judge=judge)
        except Exception as exc:  # noqa: BLE001 - the asker reports it in one line
            answer = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":  # python -m mxtrim_tui.core.checks.child_dispatch (by hand)
    sys.exit(main())
