"""Validating many outputs in one go (``mxtrim validate OUT1 OUT2 …`` / ``--all WORKSPACE``):
one server at a time, each output's own validation recorded as a single run records it, and a
matrix of every output × check — markdown and JSON — rewritten after each output, so an
interruption keeps the finished rows.

An output whose last recorded run was made by the same interpreter with the same versions
(Python, vLLM, vLLM-MetaX, transformers, torch) and ran every check asked for now is not
validated again unless asked (``--again``): its row is that run's, marked as reused."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .examples import DRIFT_KEYS, is_mxtrim_output, model_dirs, versions_of
from .record import replace_text
from .run import (DIFFERS, EQUIVALENCE, FAILED, GENERATION, LONG_INPUT, MEMORY, NOT_APPLICABLE, NOT_COMPARABLE, PASSED,
                  SPECULATIVE, START_UP, UNVERIFIED)

SCHEMA = "mxtrim.validation-matrix/1"
MATRIX_JSON, MATRIX_MD = "validation-matrix.json", "validation-matrix.md"
# (column, the check of validation.json it shows)
COLUMNS = (("start-up", START_UP), ("generation", GENERATION), ("long input", LONG_INPUT),
           ("speculative", SPECULATIVE), ("equivalence", EQUIVALENCE), ("memory", MEMORY))
OFFLINE = "offline"
# what happened to an output in this run
VALIDATED, REUSED, INTERRUPTED, NOT_RUN, REFUSED = "validated", "reused", "interrupted", "not run", "refused"


@dataclass
class MatrixRow:
    output: str
    state: str  # VALIDATED / REUSED / INTERRUPTED / NOT_RUN / REFUSED
    ok: bool | None = None
    started: str | None = None  # when the run shown was made
    cells: dict = field(default_factory=dict)  # column -> {"status", "class"?}
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def outputs_in(folder: Path) -> tuple[list[Path], list[Path]]:
    """(mxtrim outputs, hand-made examples) among the model directories of ``folder``, by
    name, told apart as ``mxtrim examples`` tells them."""
    mine, hand_made = [], []
    for path in model_dirs(folder):
        (mine if is_mxtrim_output(path) else hand_made).append(path)
    return mine, hand_made


def _row_status(run: dict, check: str) -> str | None:
    row = next((r for r in run.get("rows") or [] if isinstance(r, dict) and r.get("check") == check), None)
    return row.get("status") if row else None


def recorded_elsewhere(run: dict | None, out: Path) -> str | None:
    """The folder ``run`` was recorded for when it is not ``out`` (a copied or moved output
    carries its validation.json along), else None."""
    then = run.get("output") if isinstance(run, dict) else None
    if not isinstance(then, str) or Path(then) == Path(out).resolve():
        return None
    return then


def covers(run: dict | None, python: str, now: dict | None, serve: bool, equivalence: bool, speculative: bool,
           out: Path | None = None, parallel: tuple[int, int] = (1, 1)) -> str | None:
    """Why ``run`` already answers this request (None: it does not): made for this very folder
    (``out``), by the same interpreter and versions, every check asked for executed then, and a
    server asked for served with the same ``parallel`` sizes (TP, PP)."""
    if run is None or now is None or run.get("python") != python:
        return None
    if out is not None and recorded_elsewhere(run, out):
        return None
    then = versions_of(run.get("environment") or {})
    if any(then.get(k) != now.get(k) for k in DRIFT_KEYS):
        return None
    executed = {PASSED, FAILED, DIFFERS, NOT_COMPARABLE, NOT_APPLICABLE}
    asked = [(serve, START_UP), (equivalence, EQUIVALENCE), (speculative, SPECULATIVE)]
    if any(wanted and _row_status(run, check) not in executed for wanted, check in asked):
        return None
    settings = run.get("settings") or {}
    if speculative and not settings.get("speculative"):
        return None
    if (serve or equivalence or speculative) and (settings.get("tp") or 1, settings.get("pp") or 1) != tuple(parallel):
        return None
    return f"validated {run.get('started')} with these versions; --again runs it anew"


def cells_of(run: dict) -> dict:
    """Column -> {"status", "class"} of one recorded run (the failure class where one failed)."""
    rows = {r.get("check"): r for r in run.get("rows") or [] if isinstance(r, dict)}
    server = {check for _, check in COLUMNS}
    offline = [r for name, r in rows.items() if name not in server]
    failed = [r for r in offline if r.get("status") == FAILED]
    out = {OFFLINE: {"status": FAILED if failed else (PASSED if offline else UNVERIFIED)}}
    if failed:
        out[OFFLINE]["failed"] = [r.get("check") for r in failed]
    for column, check in COLUMNS:
        row = rows.get(check) or {}
        cell = {"status": row.get("status") or UNVERIFIED}
        if row.get("status") == FAILED and row.get("verdict"):
            cell["class"] = row["verdict"].get("class")
        out[column] = cell
    return out


def row_for_run(out: Path, run: dict, state: str, note: str = "") -> MatrixRow:
    return MatrixRow(str(out), state, run.get("ok"), run.get("started"), cells_of(run), note)


def matrix_document(rows: list[MatrixRow], python: str, now: dict | None, hand_made: list[Path], complete: bool) -> dict:
    return {"schema": SCHEMA, "complete": complete, "python": python, "versions": now,
            "columns": [OFFLINE, *(c for c, _ in COLUMNS)], "rows": [r.to_json() for r in rows],
            "hand_made": [{"path": str(p), "note": "not written by mxtrim: listed, its launch scripts not run"} for p in hand_made]}


def _shown(cell: dict | None) -> str:
    if not cell:
        return ""
    status = cell["status"]
    if cell.get("class"):
        return f"failed: {cell['class']}"
    if cell.get("failed"):
        return "failed: " + ", ".join(cell["failed"])
    return status


def matrix_markdown(doc: dict) -> str:
    versions = doc.get("versions") or {}
    env = ", ".join(f"{k} {v}" for k, v in versions.items() if v) or "versions unknown"
    lines = ["# Validation matrix", "", f"With `{doc['python']}` ({env})."
             + ("" if doc["complete"] else " **Interrupted**: the rows below \"interrupted\" were not run."), "",
             "| output | run | " + " | ".join(doc["columns"]) + " | ok |",
             "| --- | --- | " + " | ".join("---" for _ in doc["columns"]) + " | --- |"]
    for row in doc["rows"]:
        run = row["state"] + (f" ({row['started']})" if row["started"] and row["state"] == REUSED else "")
        cells = " | ".join(_shown(row["cells"].get(c)) for c in doc["columns"])
        ok = {True: "yes", False: "**no**", None: ""}[row["ok"]]
        lines.append(f"| {Path(row['output']).name} | {run} | {cells} | {ok} |")
    notes = [f"- {Path(r['output']).name}: {r['note']}" for r in doc["rows"] if r["note"]]
    notes += [f"- {Path(h['path']).name}: {h['note']}" for h in doc["hand_made"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def write_matrix(folder: Path, doc: dict) -> tuple[Path, Path]:
    """Both files, each replaced atomically."""
    paths = folder / MATRIX_JSON, folder / MATRIX_MD
    replace_text(paths[0], json.dumps(doc, indent=2) + "\n")
    replace_text(paths[1], matrix_markdown(doc))
    return paths
