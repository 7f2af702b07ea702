"""A first real-weight trim (no verdict remembered) copies while transformers checks the plan:
the check child is asked before the copy starts, and the output is promoted only when the copy
verified and the check passed. A check that blocks the plan leaves nothing that looks complete
(the same refusal as when the check came first); a check that widens an automatic selection
or solves a config field gives the output a check-first trim gives."""

from __future__ import annotations

import json
import select
import time

import pytest

from benchmarks.architecture_sweep import make_source
from engine_support import run_cli
from mxtrim_tui.core.checks import cache as check_cache
from mxtrim_tui.core.checks.child import CheckChild
from mxtrim_tui.core.write.leftovers import find_leftovers

FRESH = {check_cache.ENV: "0"}  # no verdict remembered: the check runs in the child, alongside the copy


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    return {m: make_source(m, root / m, data="random") for m in ("gpt_neox_japanese", "kimi_k25", "llama")}


def _events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def _stage(events: list[dict], name: str, status: str) -> int:
    return next(i for i, e in enumerate(events) if e.get("event") == "stage" and e.get("name") == name and e.get("status") == status)


def _nothing_left(out) -> bool:
    siblings = [p.name for p in out.parent.iterdir()]
    return not out.exists() and find_leftovers(out) == [] and siblings == []


def _comparable(doc: dict, out) -> dict:
    """A trim's --json without what differs between two outputs of the same plan (paths, sizes of
    files naming the path)."""
    text = json.dumps(doc).replace(str(out), "OUT")
    doc = json.loads(text)
    doc.pop("files", None)
    doc.get("checks", {}).get("integrity", {}).pop("shards", None)
    return doc


@pytest.mark.slow
def test_the_check_child_is_asked_before_the_copy_and_answers_after_it_started(sources, tmp_path):
    out = tmp_path / "models" / "llama-weights"
    r = run_cli("trim", str(sources["llama"]), "--keep", "0,3", "--mode", "weights", "--out", str(out), "--progress", env=FRESH)
    assert r.returncode == 0, r.stderr
    events = _events(r.stderr)
    asked = _stage(events, "check", "start")
    assert isinstance(events[asked]["pid"], int)
    # asked before the copy starts, answered after it started, and the output written after both
    assert asked < _stage(events, "extract", "start") < _stage(events, "check", "done") < _stage(events, "write", "done")
    assert events[_stage(events, "check", "done")]["result"] == "exact"
    assert json.loads((out / "mxtrim-plan.json").read_text())["transformers_check"]["status"] == "exact"


@pytest.mark.slow
def test_a_remembered_verdict_asks_no_check_alongside(sources, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert run_cli("plan", str(sources["llama"]), "--keep", "0,3", env=env).returncode == 0
    r = run_cli("trim", str(sources["llama"]), "--keep", "0,3", "--mode", "weights", "--out", str(tmp_path / "out"), "--progress", env=env)
    assert r.returncode == 0, r.stderr
    assert not [e for e in _events(r.stderr) if e.get("name") == "check"]


@pytest.mark.slow
def test_a_check_that_blocks_the_plan_during_the_copy_leaves_nothing(sources, tmp_path):
    """transformers builds other layers than the kept ones: the copy already ran, and is gone."""
    out = tmp_path / "models" / "neox-weights"
    out.parent.mkdir()
    args = ("trim", str(sources["gpt_neox_japanese"]), "--keep", "0,1,4,5", "--mode", "weights", "--out", str(out))
    r = run_cli(*args, "--progress", "--json", env=FRESH)
    assert r.returncode == 1
    events = _events(r.stderr)
    assert _stage(events, "extract", "start") < _stage(events, "check", "done")
    assert events[_stage(events, "check", "done")]["result"] == "mismatch"
    assert not [e for e in events if e.get("name") == "write" and e.get("status") == "done"]
    assert _nothing_left(out)
    # the same refusal, word for word, as when the verdict is remembered and comes first
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert run_cli("plan", str(sources["gpt_neox_japanese"]), "--keep", "0,1,4,5", env=cache).returncode == 1
    first = run_cli(*args, "--json", env=cache)
    assert first.returncode == 1 and _nothing_left(out)
    assert json.loads(first.stdout) == json.loads(r.stdout)
    assert first.stderr.splitlines()[-1] == [line for line in r.stderr.splitlines() if not line.startswith("{")][-1]
    assert "nothing written" in first.stderr


@pytest.mark.slow
@pytest.mark.parametrize("model_type, keep", [("gpt_neox_japanese", "auto"), ("kimi_k25", "0,4,5")],
                         ids=["selection-widened", "field-solved"])
def test_a_check_that_changes_the_plan_gives_the_check_first_output(sources, tmp_path, model_type, keep):
    """Widened: the copy of the unchecked selection is thrown away and the checked one written.
    Solved: the copy is kept, the solved config written and the structure judged on it."""
    src = sources[model_type]
    fresh_out, first_out = tmp_path / "a" / "out", tmp_path / "b" / "out"
    fresh = run_cli("trim", str(src), "--keep", keep, "--mode", "weights", "--out", str(fresh_out), "--json", "--progress", env=FRESH)
    assert fresh.returncode == 0, fresh.stderr
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert run_cli("plan", str(src), "--keep", keep, env=cache).returncode == 0
    first = run_cli("trim", str(src), "--keep", keep, "--mode", "weights", "--out", str(first_out), "--json", env=cache)
    assert first.returncode == 0, first.stderr
    a, b = json.loads(fresh.stdout), json.loads(first.stdout)
    assert _comparable(a, fresh_out) == _comparable(b, first_out)
    assert "process failed" not in a["checks"]["structure"]["summary"]
    for name in ("config.json", "model.safetensors"):
        assert (fresh_out / name).read_bytes() == (first_out / name).read_bytes()
    assert [p.name for p in fresh_out.parent.iterdir()] == ["out"]  # nothing of a discarded copy left
    events = _events(fresh.stderr)
    copies = len([e for e in events if e.get("name") == "extract" and e.get("status") == "start"])
    if model_type == "kimi_k25":  # solved: one copy, the solved value in the written config
        config = json.loads((fresh_out / "config.json").read_text())
        assert a["transformers_check"]["solved"] and copies == 1
        for solved in a["transformers_check"]["solved"]:
            value = config
            for key in solved["path"].split("."):
                value = value[key]
            assert value == solved["after"]
    else:  # widened: two copies, the first thrown away
        assert a["auto"]["text"] and copies == 2


def test_answers_that_arrive_together_are_each_read():
    """The plan check and the structure check are asked one behind the other: when both answers
    are in the pipe before the first is read, the second is still read (not left in a buffer
    that select() cannot see until the time limit closes the child)."""
    child = CheckChild()
    try:
        assert child.send({"op": "nothing"}) and child.send({"op": "nothing either"})
        fd = child.proc.stdout.fileno()
        assert select.select([fd], [], [], 60)[0]
        time.sleep(0.5)  # setup, not a measure: the second answer follows the first at once
        assert child.receive(limit=60) is None  # an unknown request: answered with an error
        assert child.receive(limit=60) is None
        assert child.proc.poll() is None  # answered, not given up on and stopped
        assert child.send({"op": "nothing"}) and child.receive(limit=60) is None and child.proc.poll() is None
    finally:
        child.close()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_wizard_checks_a_loaded_source_so_its_write_finds_the_verdict(sources, tmp_path, monkeypatch):
    """The check child starts once a source is read in the wizard: by the output step the verdict
    is remembered, and the write (`mxtrim trim --plan FILE`) copies without a check beside it."""
    from mxtrim_tui.core.plan.plan_file import keep_plan_file
    from tui_support import make_app, wait_for

    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app, ws = make_app(tmp_path, sources["llama"])
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: app.state.plan is not None and app.state.plan.transformers_check is not None,
                              timeout=120)
        assert app.state.plan.transformers_check.status == "exact"
        app.state.mode = "weights"
        plan_file = keep_plan_file(app.state.trim_request(), app.state.plan)
    out = tmp_path / "out"
    r = run_cli("trim", "--plan", str(plan_file), "--out", str(out), "--progress", env=env)
    assert r.returncode == 0, r.stderr
    assert not [e for e in _events(r.stderr) if e.get("name") == "check"]  # remembered: nothing checked alongside
    assert json.loads((out / "mxtrim-plan.json").read_text())["transformers_check"]["status"] == "exact"
