"""What a validation leaves in the output directory: ``validation.json`` (every run, appended,
never lost) and the README's "Validation" section rewritten from the latest run. Both are
replaced atomically (written beside, then renamed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..probe.vllm_python import origin_words
from .run import FAILED, UNVERIFIED, Validation

HISTORY = "validation.json"
SECTION = "## Validation"


def replace_text(path: Path, text: str) -> None:
    """``path`` holds ``text``: written beside it, then renamed over it."""
    tmp = path.with_name(f".{path.name}.mxtrim-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def append_history(v: Validation) -> int:
    """Add this run to validation.json; returns how many runs it now holds."""
    path = v.output / HISTORY
    runs = []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs = doc.get("runs", []) if isinstance(doc, dict) else []
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        # an unreadable history is kept under another name, never overwritten
        os.replace(path, path.with_name(HISTORY + ".unreadable"))
    runs.append(v.to_json())
    replace_text(path, json.dumps({"schema": "mxtrim.validation-history/1", "runs": runs}, indent=2, ensure_ascii=False) + "\n")
    return len(runs)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _status_cell(r) -> str:
    if r.status == FAILED and r.verdict:
        return f"failed: {r.verdict['class']}"
    if r.status == UNVERIFIED:
        return "not run (unverified)" if r.detail.startswith(("not run", "skipped")) else "unverified"
    return r.status


def environment_lines(env: dict) -> list[str]:
    """The environment record in words (empty for a run recorded before it was kept): torch and
    its build tag, MACA and the MetaX driver, the device variables set; the vLLM platform and the
    plugins loaded."""
    if not any(k in env for k in ("torch_build", "maca", "driver", "variables", "vllm_plugins")):
        return []
    torch = (env.get("packages", {}).get("torch") or {}).get("version")
    maca, driver = env.get("maca") or {}, env.get("driver") or {}
    variables = env.get("variables") or {}
    parts = [f"torch {torch} (build tag {env.get('torch_build') or 'none'})" if torch else "torch absent"]
    if maca.get("version") or variables.get("MACA_PATH") is not None:  # said only where MACA is meant to be
        parts.append(f"MACA {maca['version']} ({maca.get('root')})" if maca.get("version") else f"no MACA version under {maca.get('root')}")
    if driver.get("version"):
        parts.append(f"MetaX driver {driver['version']}")
    parts += [f"{k}={val}" for k, val in variables.items() if val is not None]
    lines = ["Environment: " + ", ".join(f"`{p}`" if "=" in p else p for p in parts) + "."]
    loaded = [f"{p.get('name')} ({p.get('distribution') or '?'})" for p in env.get("vllm_plugins") or []
              if p.get("group") == "vllm.general_plugins" and p.get("status") == "loaded"
              and str(p.get("value") or "").split(":")[0].split(".")[0] != "vllm"]  # vLLM's own (LoRA resolvers) unsaid
    failed = [f"{p.get('name')} failed ({p.get('error')})" for p in env.get("vllm_plugins") or [] if p.get("status") == "failed"]
    if env.get("vllm_platform") or loaded or failed:
        lines.append(f"vLLM platform `{env.get('vllm_platform') or '?'}`; plugins outside vLLM loaded: "
                     + (", ".join(loaded + failed) or "none") + ".")
    return lines


def render_section(v: Validation, runs: int, integrity_rows: list[str]) -> str:
    import shlex

    vllm = (v.environment.get("packages", {}).get("vllm") or {}).get("version")
    lines = [SECTION, "", f"Last run {v.started} with `{v.python}`" + (f" (vLLM {vllm}" if vllm else " (")
             + (f", {origin_words(v.python_origin)})" if v.python_origin else ")")
             + f"; {runs} run(s) in `{HISTORY}`; server log in `logs/serve.log`.", ""]
    env_lines = environment_lines(v.environment)
    if env_lines:
        lines += [" ".join(env_lines), ""]
    if v.settings:
        lines += [f"Served with: {v.settings_line()}.", ""]
    if v.serve_command:
        lines += ["```", shlex.join(v.serve_command), "```", ""]
    lines += ["| check | status | detail |", "| --- | --- | --- |"]
    lines += integrity_rows
    for r in v.rows:
        lines.append(f"| {_cell(r.check)} | {_status_cell(r)} | {_cell(r.detail)} |")
    lines.append("")
    for r in v.rows:
        if r.status == FAILED and r.verdict:
            lines += [f"**{r.check}** — {r.verdict['class']}: {r.verdict['summary']}", ""]
            lines += [f"    {e}" for e in r.verdict["evidence"]]
            lines += ["", f"Suggested: {r.verdict['advice']}", ""]
    where = f" with the settings above ({v.settings_line()})" if v.settings else ""
    if v.mode == "weights":
        lines.append(f"This checkpoint is **loadable** by this vLLM{where}: a real-weight start-up and generation passed."
                     if v.loadable else
                     "This checkpoint is **not shown loadable**: a real-weight start-up and generation must both pass first.")
    else:
        lines.append("Dummy weights: a start-up and generation here exercise loading, kernels and execution paths, not accuracy.")
    unverified = [r.check for r in v.rows if r.status == UNVERIFIED]
    if unverified:
        lines += ["", "Not executed, so **unverified**: " + ", ".join(unverified) + "."]
    if v.environment.get("warning"):
        lines += ["", f"⚠ {v.environment['warning']}"]
    other = other_mode_section(v)  # the latest run of the other mode (eager / graph), kept apart
    if other:
        lines += [""] + other
    return "\n".join(lines) + "\n"


def other_mode_section(v: Validation) -> list[str]:
    """The lines of the latest run of the other execution mode than ``v``'s (eager or graph:
    graph_mode.py), under a heading of their own: its date, settings, command and server
    checks, so that the latest eager and the latest graph-mode results both stay in the README,
    labelled; [] where ``v`` ran no server or no run of the other mode is recorded."""
    import shlex

    from .examples import last_run
    from .graph_mode import served_in_graph_mode
    from .run import SERVER_CHECKS, Row

    graph = served_in_graph_mode({"settings": v.settings})
    other = None if graph is None else last_run(v.output, keep=lambda run: served_in_graph_mode(run) is (not graph))
    if other is None:
        return []
    then = Validation(v.output, other.get("mode") or "", other.get("started") or "?", other.get("python") or "?",
                      settings=other.get("settings") or {})
    title = "Eager mode (`--enforce-eager`)" if graph else "Graph mode (without `--enforce-eager`)"
    lines = [f"### {title}: last run {then.started}", "",
             f"Kept apart from the run above (`{HISTORY}` holds both): served with {then.settings_line()}.", ""]
    if other.get("serve_command"):
        lines += ["```", shlex.join(str(a) for a in other["serve_command"]), "```", ""]
    lines += ["| check | status | detail |", "| --- | --- | --- |"]
    for r in other.get("rows") or []:
        if isinstance(r, dict) and r.get("check") in SERVER_CHECKS:
            row = Row(r["check"], r.get("status") or "", r.get("detail") or "", r.get("verdict"))
            lines.append(f"| {_cell(row.check)} | {_status_cell(row)} | {_cell(row.detail)} |")
    return lines


def integrity_rows(readme: str) -> list[str]:
    """The rows mxtrim established at write time (checkpoint integrity, structure) are kept."""
    start = readme.find(SECTION)
    if start < 0:
        return []
    keep = []
    for line in readme[start:].splitlines():
        if line.startswith("| checkpoint integrity") or line.startswith("| structure against"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            keep.append(f"| {cells[0]} | {cells[1]} | established when the checkpoint was written |" if len(cells) == 2 else line)
    return keep


def update_readme(v: Validation, runs: int) -> None:
    path = v.output / "README.md"
    try:
        readme = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        readme = f"# {v.output.name}\n\n"
    from ..write.report import coverage_with_executed
    from .graph_mode import served_in_graph_mode

    if served_in_graph_mode({"settings": v.settings}) is False:
        # the coverage table's "executed" column, from an eager served run only (the probe counts
        # in eager mode): a graph-mode or offline run leaves the last eager run's column
        readme = coverage_with_executed(readme, v.paths)
    section = render_section(v, runs, integrity_rows(readme))
    start = readme.find("\n" + SECTION + "\n")
    if start < 0:
        new = readme.rstrip("\n") + "\n\n" + section
    else:
        end = readme.find("\n## ", start + 1 + len(SECTION))
        new = readme[: start + 1] + section + ("\n" + readme[end + 1 :] if end >= 0 else "")
    replace_text(path, new)


def record(v: Validation) -> int:
    runs = append_history(v)
    update_readme(v, runs)
    return runs
