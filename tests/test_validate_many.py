"""`mxtrim validate OUT1 OUT2 …` / `--all WORKSPACE`: one real `vllm serve` (the CPU build) at
a time, each output's validation recorded as a single run records it, the output × check
matrix in markdown and JSON, outputs already validated in this environment reused unless
--again, and Ctrl-C half way: the finished rows kept, the rest marked, no server left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv, run_cli
from fixtures.tiny_models import make_servable_llama
from test_validate import VLLM_PYTHON, needs_vllm, servers
from test_validate_parallel import last_run

MISSING = "/nonexistent/models/llama-smoke"
ENV = {"MXTRIM_VLLM_PYTHON": VLLM_PYTHON or ""}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Three mxtrim outputs of a servable Llama — one validated under vLLM 0.31.0 (its
    validation.json says so), one real-weight, one whose source was moved — and a hand-made
    example whose launch script names a path that is gone."""
    root = tmp_path_factory.mktemp("many")
    src = make_servable_llama(root / "llama", layers=4)
    models = root / "tools" / "batched_test" / "models"
    for name, mode, keep in (("a-validated", "dummy", "0"), ("b-weights", "weights", "1,3")):
        r = run_cli("trim", str(src), "--keep", keep, "--mode", mode, "--out", str(models / name))
        assert r.returncode == 0, r.stderr
    moved = shutil.copytree(src, root / "moved-src")
    r = run_cli("trim", str(moved), "--keep", "2", "--mode", "dummy", "--out", str(models / "c-orphan"))
    assert r.returncode == 0, r.stderr
    shutil.move(moved, root / "elsewhere")
    old = {"started": "2026-11-20 10:00:00 UTC", "ok": True, "mode": "dummy", "python": VLLM_PYTHON, "rows": [],
           "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.31.0"}}}}
    (models / "a-validated" / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [old]}))
    hand = models / "hand-made"
    hand.mkdir()
    shutil.copy(src / "config.json", hand / "config.json")
    (hand / "serve.sh").write_text(f"#!/bin/sh\nvllm serve {MISSING} --load-format dummy\n")
    return root, models


# The serial run of the workspace is served once and asserted on by two tests (the matrix, and
# the side-by-side run that must give its verdicts), kept on one worker so it is served once.
SERIAL = pytest.mark.xdist_group("validate_many_serial")


@pytest.fixture(scope="module")
def served_serially(workspace, tmp_path_factory):
    """`validate --all WORKSPACE --serve`: one real server at a time. Returns that answer and a
    copy of two of its outputs (a dummy and a real-weight one) as the run left them."""
    root, models = workspace
    answer = run_cli("validate", "--all", str(models), "--serve", "--device", "cpu", "--json", env=ENV, timeout=900)
    after = tmp_path_factory.mktemp("after-serial") / "models"
    after.mkdir()
    if answer.returncode == 0:
        for name in ("a-validated", "b-weights"):
            shutil.copytree(models / name, after / name)
    return answer, after


def runs_in(out: Path) -> int:
    return len(json.loads((out / "validation.json").read_text())["runs"])


def matrix(models: Path) -> dict:
    return json.loads((models / "validation-matrix.json").read_text())


@needs_vllm
@pytest.mark.slow
@SERIAL
def test_all_outputs_of_a_workspace_into_one_matrix(workspace, served_serially):
    root, models = workspace
    r, _ = served_serially
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc == matrix(models) and doc["schema"] == "mxtrim.validation-matrix/1" and doc["complete"] is True
    rows = {Path(row["output"]).name: row for row in doc["rows"]}
    assert list(rows) == ["a-validated", "b-weights", "c-orphan"]
    # the one validated under vLLM 0.31.0 is validated again here, under 0.32.0
    assert all(row["state"] == "validated" and row["ok"] for row in rows.values())
    assert runs_in(models / "a-validated") == 2 and runs_in(models / "b-weights") == 1
    for row in rows.values():
        assert row["cells"]["offline"]["status"] == "passed"
        assert row["cells"]["start-up"]["status"] == row["cells"]["generation"]["status"] == "passed"
    assert rows["a-validated"]["cells"]["equivalence"]["status"] == "not applicable"  # dummy weights
    assert [h["path"] for h in doc["hand_made"]] == [str(models / "hand-made")]
    text = (models / "validation-matrix.md").read_text()
    assert "| a-validated | validated | passed | passed | passed |" in text and "hand-made: not written by mxtrim" in text

    # again: every output was validated with these versions, so none is served; --again serves
    logs = {name: (models / name / "logs" / "serve.log").read_bytes() for name in rows}
    r = run_cli("validate", "--all", str(models), "--serve", "--device", "cpu", "--json", env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(r.stdout)
    assert [row["state"] for row in again["rows"]] == ["reused"] * 3
    # no server started: each output's server log is the one its served run left
    assert {name: (models / name / "logs" / "serve.log").read_bytes() for name in rows} == logs
    assert all("--again runs it anew" in row["note"] for row in again["rows"])
    assert runs_in(models / "a-validated") == 2 and runs_in(models / "b-weights") == 1
    # asking for more than was run (equivalence) is not answered by the earlier runs
    r = run_cli("validate", str(models / "a-validated"), str(models / "b-weights"), "--equivalence", "--device", "cpu",
                "--matrix", str(root), "--json", env=ENV, timeout=900)
    doc = json.loads(r.stdout)
    assert [row["state"] for row in doc["rows"]] == ["reused", "validated"], r.stderr[-2000:]  # a dummy: not applicable
    assert doc["rows"][1]["cells"]["equivalence"]["status"] == "passed" and (root / "validation-matrix.md").exists()


def verdicts(run: dict) -> dict:
    return {r["check"]: r["status"] for r in run["rows"]}


@needs_vllm
@pytest.mark.slow
@SERIAL
def test_two_outputs_side_by_side_on_the_cpu_build_give_the_serial_verdicts(served_serially):
    """`--jobs 2`: a dummy and a real-weight output served side by side give the verdicts and
    the KV figures the serial run gave each of them."""
    serial, models = served_serially
    assert serial.returncode == 0, serial.stderr[-3000:]
    names = ("a-validated", "b-weights")
    alone = {name: last_run(models / name) for name in names}
    side = run_cli("validate", "--all", str(models), "--serve", "--device", "cpu", "--again", "--jobs", "2", "--json",
                   env=ENV, timeout=900)
    assert side.returncode == 0, side.stderr[-3000:]
    doc = json.loads(side.stdout)
    assert [row["state"] for row in doc["rows"]] == ["validated", "validated"]
    serial_rows = {Path(row["output"]).name: row for row in json.loads(serial.stdout)["rows"]}
    assert [row["cells"] for row in doc["rows"]] == [serial_rows[name]["cells"] for name in names]
    for name in names:
        run = last_run(models / name)
        assert run["started"] != alone[name]["started"] and verdicts(run) == verdicts(alone[name])
        kv = lambda r: r["memory"]["figures"]["kv_tokens"]["actual"]  # noqa: E731
        assert kv(run) == kv(alone[name]) and kv(run) > 0
    # side by side: both servers were started before either finished
    lines = side.stderr.splitlines()
    started = [i for i, line in enumerate(lines) if line.startswith("[") and line.endswith(names)]
    finished = [i for i, line in enumerate(lines) if ": ok (recorded in validation.json)" in line]
    assert len(started) == 2 and len(finished) == 2 and max(started) < min(finished), side.stderr[-3000:]


@needs_vllm
@pytest.mark.slow
def test_ctrl_c_half_way_keeps_the_finished_rows_and_leaves_no_server(workspace):
    root, models = workspace
    proc = subprocess.Popen(cli_argv("validate", "--all", str(models), "--serve", "--device", "cpu", "--again"),
                            cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = models / "b-weights" / "logs" / "serve.log"
    before = second.stat().st_size if second.exists() else 0
    deadline = time.monotonic() + 600
    # half way: the first output's row is in the matrix, the second output's server is logging
    while time.monotonic() < deadline and proc.poll() is None:
        done = (models / "validation-matrix.json").exists() and matrix(models)["rows"][0]["state"] == "validated" \
            and not matrix(models)["complete"]
        if done and second.exists() and second.stat().st_size > before + 2000:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the foreground mxtrim
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted; finished rows kept in" in err
    doc = matrix(models)
    assert doc["complete"] is False
    assert [row["state"] for row in doc["rows"]] == ["validated", "interrupted", "not run"]
    assert doc["rows"][0]["cells"]["start-up"]["status"] == "passed"
    assert "**Interrupted**" in (models / "validation-matrix.md").read_text()
    assert servers(root) == []  # no vllm serve (nor any of its workers) outlives the Ctrl-C
    leftovers = run_cli("leftovers")
    assert "no server left running" in leftovers.stdout


def test_validate_needs_an_output_or_all(tmp_path):
    r = run_cli("validate")
    assert r.returncode == 2 and "give an output directory (OUT), several, or --all [FOLDER]" in r.stderr
    r = run_cli("validate", "--all", str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "no such folder of models" in r.stderr and str(tmp_path / "nowhere") in r.stderr


def test_outputs_and_hand_made_examples_of_a_folder(tmp_path):
    from mxtrim_tui.core.validate.batch import outputs_in

    for name, files in (("b-out", ["mxtrim-plan.json", "config.json"]), ("a-hand", ["config.json"]), ("notes", ["x.txt"]),
                        (".hidden", ["mxtrim-plan.json"])):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("{}")
    mine, hand = outputs_in(tmp_path)  # .hidden holds no config.json: not a model directory
    assert [p.name for p in mine] == ["b-out"] and [p.name for p in hand] == ["a-hand"]


def test_an_earlier_run_is_reused_only_for_the_same_interpreter_versions_and_checks():
    from mxtrim_tui.core.validate.batch import covers

    env = {"python": "3.12.3", "packages": {"vllm": {"version": "0.32.0"}, "torch": {"version": "2.13.0"}}}
    now = {"python": "3.12.3", "vllm": "0.32.0", "vllm_metax": None, "transformers": None, "torch": "2.13.0"}
    served = {"python": "/v/bin/python", "started": "then", "environment": env, "settings": {},
              "rows": [{"check": "start-up", "status": "failed"}, {"check": "equivalence with the original (greedy tokens)",
                                                                     "status": "unverified"}]}
    assert covers(served, "/v/bin/python", now, serve=True, equivalence=False, speculative=False)  # a failure is an answer
    assert covers(served, "/other/python", now, serve=True, equivalence=False, speculative=False) is None
    assert covers(served, "/v/bin/python", {**now, "vllm": "0.33.0"}, serve=True, equivalence=False, speculative=False) is None
    assert covers(served, "/v/bin/python", now, serve=True, equivalence=True, speculative=False) is None
    offline = {**served, "rows": [{"check": "start-up", "status": "unverified"}]}
    assert covers(offline, "/v/bin/python", now, serve=True, equivalence=False, speculative=False) is None
    assert covers(offline, "/v/bin/python", now, serve=False, equivalence=False, speculative=False)
    assert covers(None, "/v/bin/python", now, serve=False, equivalence=False, speculative=False) is None
    assert covers(served, "/v/bin/python", None, serve=False, equivalence=False, speculative=False) is None
    # a server asked for at other parallel sizes than the run's (TP 1, PP 1 when not recorded)
    assert covers(served, "/v/bin/python", now, serve=True, equivalence=False, speculative=False, parallel=(1, 2)) is None
    on_two = {**served, "settings": {"tp": 1, "pp": 2}}
    assert covers(on_two, "/v/bin/python", now, serve=True, equivalence=False, speculative=False, parallel=(1, 2))
    assert covers(on_two, "/v/bin/python", now, serve=True, equivalence=False, speculative=False) is None
    assert covers(on_two, "/v/bin/python", now, serve=False, equivalence=False, speculative=False)  # offline: no server


@needs_vllm
def test_a_serve_refused_for_want_of_a_device_is_not_ok_in_the_matrix(tmp_path):
    """As for one output (exit 1), an output that was to be served on a GPU and could not be
    (none here) is not ok in the matrix, with the reason beside it."""
    from engine_support import small_llama_output

    out = small_llama_output(tmp_path, "dummy")
    copy = shutil.copytree(out, tmp_path / "llama-dummy-2")
    r = run_cli("validate", str(out), str(copy), "--serve", "--device", "cuda", "--matrix", str(tmp_path), "--json", env=ENV)
    assert r.returncode == 1, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert [row["ok"] for row in doc["rows"]] == [False, False]
    assert all(row["cells"]["start-up"]["status"] == "unverified" and row["note"] for row in doc["rows"])
