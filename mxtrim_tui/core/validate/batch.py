"""Validating many outputs in one go (``mxtrim validate OUT1 OUT2 …`` / ``--all WORKSPACE``):
one server at a time, each output's own validation recorded as a single run records it, and a
matrix of every output × check — markdown and JSON — rewritten after each output, so an
interruption keeps the finished rows.

An output whose last recorded run was made by the same interpreter with the same versions
(Python, vLLM, vLLM-MetaX, transformers, torch), ran every check asked for now and, where a
server is asked for, served with the same settings (``OUTCOME_SETTINGS``: TP/PP, context,
sequences, KV budget or memory share, dtype, device, launcher, extra arguments, the vLLM
variables of its environment) is not validated again unless asked (``--again``): its row is
that run's, marked as reused. Otherwise the row says why it was run again."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .examples import DRIFT_KEYS, is_mxtrim_output, model_dirs, versions_of
from .graph_mode import EAGER, GRAPH, mode_difference
from .record import replace_text
from .run import (DIFFERS, EQUIVALENCE, FAILED, GENERATION, LONG_INPUT, MEMORY, NOT_APPLICABLE, NOT_COMPARABLE, PASSED,
                  SPECULATIVE, START_UP, UNVERIFIED)

SCHEMA = "mxtrim.validation-matrix/1"
MATRIX_JSON, MATRIX_MD = "validation-matrix.json", "validation-matrix.md"
# graph mode (validate --graph) is a matrix of its own: neither mode's rows replace the other's
GRAPH_MATRIX_JSON, GRAPH_MATRIX_MD = "validation-matrix-graph.json", "validation-matrix-graph.md"
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
    node: str = ""  # the Ray node that ran it (validate --ray)

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


# the settings of validation.json's "settings" that change a served run's outcome, each with
# the flag that sets it (how a difference is said); the GPUs a server was placed on are not
# among them (the same output may be placed on other free GPUs)
OUTCOME_SETTINGS = (
    ("device", "--device"), ("tp", "--tp"), ("pp", "--pp"), ("max_model_len", "--max-model-len"),
    ("max_num_seqs", "--max-num-seqs"), ("kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"), ("dtype", "--dtype"), ("kv_cache_dtype", "--kv-cache-dtype"), ("expert_parallel", "--ep"),
    ("distributed_executor_backend", "--distributed-executor-backend"),
    ("speculative", "--speculative"), ("attention_backend", "--attention-backend"), ("enforce_eager", "--enforce-eager"),
    ("entry", "the server's entry point"), ("trust_remote_code", "--trust-remote-code"), ("launcher", "--launcher"),
    ("extra_args", "extra server arguments"),
)
_DEFAULT_PARALLEL = {"tp": 1, "pp": 1}  # a run recorded before TP and PP were kept ran with 1


@dataclass(frozen=True)
class Reuse:
    """Whether an earlier run answers a request, and why (or why it is run again: "" when
    there is no earlier run to speak of)."""
    reused: bool
    why: str = ""


def _setting_text(key: str, value) -> str:
    from ..units import human_bytes

    if value is None or value == [] or value is False:
        return "unset"
    if value is True:
        return "on"
    if key == "kv_cache_memory_bytes" and isinstance(value, int):
        return human_bytes(value)
    if isinstance(value, list):
        import shlex

        return shlex.join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def settings_differences(then: dict, now: dict) -> list[str]:
    """What a server asked for now (``now``: ``run.serve_settings``) would run with that the
    earlier one (``then``: its recorded settings) did not, each as "served before with FLAG
    X, now Y"."""
    found = []
    for key, flag in OUTCOME_SETTINGS:
        if key not in then and key not in _DEFAULT_PARALLEL:
            continue  # not recorded then (a run made before it was kept): unknown is no difference
        before = then.get(key, _DEFAULT_PARALLEL.get(key))
        if before == now.get(key):
            continue
        if key == "enforce_eager":  # eager or graph mode (graph_mode.py): said as the modes
            found.append(mode_difference(before, now.get(key)))
        else:
            found.append(f"served before with {flag} {_setting_text(key, before)}, now {_setting_text(key, now.get(key))}")
    if "env" in then:
        old, new = then.get("env") or {}, now.get("env") or {}
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                was = f"{name}={old[name]}" if name in old else f"{name} unset"
                found.append(f"served before with {was}, now " + (f"{name}={new[name]}" if name in new else "unset"))
    return found


def reuse(run: dict | None, python: str, now: dict | None, serve: bool, equivalence: bool, speculative: bool,
          out: Path | None = None, parallel: tuple[int, int] = (1, 1), settings: dict | None = None) -> Reuse:
    """Whether ``run`` already answers this request: made for this very folder (``out``), by
    the same interpreter and versions, every check asked for executed then, and a server asked
    for served with the same ``parallel`` sizes (TP, PP) and, where ``settings`` (what a server
    would run with now, ``run.serve_settings``) are given, the same outcome settings."""
    if run is None:
        return Reuse(False)
    if now is None:
        return Reuse(False, "run again: the versions of this environment are unknown")
    if run.get("python") != python:
        return Reuse(False, f"run again: validated before with {run.get('python')}, now {python}")
    if out is not None and recorded_elsewhere(run, out):
        return Reuse(False, f"run again: its last run was made for {recorded_elsewhere(run, out)}")
    then = versions_of(run.get("environment") or {})
    drift = [f"{k} {then.get(k) or 'absent'} before, {now.get(k) or 'absent'} now" for k in DRIFT_KEYS if then.get(k) != now.get(k)]
    if drift:
        return Reuse(False, "run again: " + "; ".join(drift))
    executed = {PASSED, FAILED, DIFFERS, NOT_COMPARABLE, NOT_APPLICABLE}
    asked = [(serve, START_UP), (equivalence, EQUIVALENCE), (speculative, SPECULATIVE)]
    missing = [check for wanted, check in asked if wanted and _row_status(run, check) not in executed]
    if missing:
        return Reuse(False, "run again: not run before: " + ", ".join(missing))
    recorded = run.get("settings") or {}
    if speculative and not recorded.get("speculative"):
        return Reuse(False, "run again: served before without --speculative")
    if serve or equivalence or speculative:
        if settings is None:  # the parallel sizes only
            recorded = {key: recorded.get(key) or 1 for key in _DEFAULT_PARALLEL}
            settings = {"tp": parallel[0], "pp": parallel[1]}
        differ = settings_differences(recorded, settings)
        if differ:
            return Reuse(False, "run again: " + "; ".join(differ))
    return Reuse(True, f"validated {run.get('started')} with these versions and settings; --again runs it anew")


def covers(run: dict | None, python: str, now: dict | None, serve: bool, equivalence: bool, speculative: bool,
           out: Path | None = None, parallel: tuple[int, int] = (1, 1), settings: dict | None = None) -> str | None:
    """Why ``run`` already answers this request (None: it does not): :func:`reuse`."""
    decision = reuse(run, python, now, serve, equivalence, speculative, out, parallel, settings)
    return decision.why if decision.reused else None


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


def matrix_document(rows: list[MatrixRow], python: str, now: dict | None, hand_made: list[Path], complete: bool,
                    execution: str | None = None) -> dict:
    """``execution``: how the servers ran, "eager" or "graph" (graph_mode.py); None: no server asked."""
    return {"schema": SCHEMA, "complete": complete, "python": python, "versions": now, "execution": execution,
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
    on_nodes = any(row.get("node") for row in doc["rows"])
    lines = ["# Validation matrix" + (": graph mode" if doc.get("execution") == GRAPH else ""), "", f"With `{doc['python']}` ({env})."
             + ("" if doc["complete"] else " **Interrupted**: the rows below \"interrupted\" were not run."), "",
             *_execution_lines(doc.get("execution")),
             "| output | run | " + " | ".join(doc["columns"]) + " | ok |" + (" node |" if on_nodes else ""),
             "| --- | --- | " + " | ".join("---" for _ in doc["columns"]) + " | --- |" + (" --- |" if on_nodes else "")]
    for row in doc["rows"]:
        run = row["state"] + (f" ({row['started']})" if row["started"] and row["state"] == REUSED else "")
        cells = " | ".join(_shown(row["cells"].get(c)) for c in doc["columns"])
        ok = {True: "yes", False: "**no**", None: ""}[row["ok"]]
        lines.append(f"| {Path(row['output']).name} | {run} | {cells} | {ok} |" + (f" {row.get('node') or ''} |" if on_nodes else ""))
    notes = [f"- {Path(r['output']).name}: {r['note']}" for r in doc["rows"] if r["note"]]
    notes += [f"- {Path(h['path']).name}: {h['note']}" for h in doc["hand_made"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _execution_lines(execution: str | None) -> list[str]:
    """What the markdown says of the mode its servers ran in, and where the other mode's are."""
    if execution == GRAPH:
        return [f"Served without `--enforce-eager` (vLLM's compilation; CUDA graphs on a GPU). Eager runs "
                f"have their own matrix, `{MATRIX_MD}`.", ""]
    if execution == EAGER:
        return [f"Served eager (`--enforce-eager`). Graph-mode runs (`--graph`) have their own matrix, `{GRAPH_MATRIX_MD}`.", ""]
    return []


def write_matrix(folder: Path, doc: dict) -> tuple[Path, Path]:
    """Both files, each replaced atomically; graph mode's under names of their own."""
    graph = doc.get("execution") == GRAPH
    paths = folder / (GRAPH_MATRIX_JSON if graph else MATRIX_JSON), folder / (GRAPH_MATRIX_MD if graph else MATRIX_MD)
    replace_text(paths[0], json.dumps(doc, indent=2) + "\n")
    replace_text(paths[1], matrix_markdown(doc))
    return paths
