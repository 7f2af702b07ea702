"""The README's coverage table keeps an "executed" column from the latest eager served run: the
probe counts layer calls only in eager mode, so a later graph-mode run or an offline run (no
server) records its own rows in validation.json but leaves that column as the eager run left it.
The demo (DeepSeek-style: A MLA dense, B MLA MoE, C the MTP layer), dummy, recorded as
``mxtrim validate`` records it."""

from __future__ import annotations

import json

from engine_support import plan_for
from mxtrim_tui.core.validate.paths import unserved_paths
from mxtrim_tui.core.validate.record import HISTORY, record
from mxtrim_tui.core.validate.run import Validation, read_output, serve_settings
from mxtrim_tui.core.validate.serve import ServeOptions
from mxtrim_tui.core.write.writer import write_dummy
from mxtrim_tui.demo import build_demo

OFFLINE = "not run (validate --serve starts vllm serve)"
GRAPH = "unverified in graph mode (compilation mode 3, CUDA graph mode FULL_AND_PIECEWISE): a zero says nothing"


def executed_column(out) -> dict[str, str]:
    """The README's coverage table: group -> its "executed" cell."""
    readme = (out / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Coverage"):]
    section = section[: section.index("\n## ", 3)]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    col = rows[0].index("executed")
    return {cells[0]: cells[col] for cells in rows[2:]}


def run(out, *, eager: bool | None, statuses: dict[str, str] | None = None, why: str = OFFLINE) -> None:
    """One validation recorded: served eagerly (``eager`` True) or in graph mode (False), its
    rows with ``statuses``; or offline (None), every row unverified with ``why``."""
    plan = read_output(out)
    paths = unserved_paths(plan, why)
    for p in paths:
        status = (statuses or {}).get(p["row"])
        if status:
            p.update(status=status, reason=None if status == "executed" else f"{status}: no request reached it")
    settings = {} if eager is None else serve_settings(ServeOptions(python="python", device="cpu", enforce_eager=eager))
    record(Validation(out, "dummy", "2025-01-01 00:00:00 UTC", "python", settings=settings, paths=paths))


def test_only_an_eager_served_run_rewrites_the_executed_column(tmp_path):
    out = write_dummy(plan_for(build_demo(tmp_path / "demo"), ["0,2"]), tmp_path / "out").path
    run(out, eager=True, statuses={"A": "executed", "B": "executed", "C": "not executed"})
    eager = executed_column(out)
    assert eager["A"] == "executed" and eager["B"] == "executed" and eager["C"].startswith("not executed")

    run(out, eager=None)  # validate OUT: offline checks only
    assert executed_column(out) == eager
    run(out, eager=False, why=GRAPH)  # validate OUT --serve --graph
    assert executed_column(out) == eager
    runs = json.loads((out / HISTORY).read_text(encoding="utf-8"))["runs"]
    assert len(runs) == 3 and {p["status"] for p in runs[-1]["paths"]} == {"unverified"}  # each run's own rows kept

    run(out, eager=True, statuses={"A": "executed", "B": "not executed", "C": "executed"})  # the next eager run
    assert executed_column(out)["B"].startswith("not executed") and executed_column(out)["C"] == "executed"
