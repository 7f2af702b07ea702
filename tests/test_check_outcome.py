"""The transformers checks run out of process and are remembered: the plan rebuilt from a
check's outcome equals the checked plan for every kind of outcome (exact, solved, widened or
extended automatic set, mismatch, forced), a remembered verdict is used only for the very
same inputs, and the CLI gives the same answer whether the verdict was remembered or not."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.architecture_sweep import make_source
from engine_support import plan_for, run_cli
from mxtrim_tui.core.checks import cache as check_cache
from mxtrim_tui.core.checks.plan_outcome import apply_outcome, checked_plan_cached, outcome_of, plan_key
from mxtrim_tui.core.plan.plan_json import plan_to_json
from mxtrim_tui.core.checks.transformers_plan import checked_plan

CASES = [
    ("gpt_neox_japanese", ["0,1,4,5"], False),  # mismatch, with the nearest selection as fix
    ("gpt_neox_japanese", ["0,1,4,5"], True),  # mismatch written anyway (--force)
    ("gpt_neox_japanese", ["auto"], False),
    ("kimi_k25", ["0,4,5"], False),  # a field solved against transformers
    ("recurrent_gemma", ["auto"], False),  # the automatic set extended by transformers' kinds
    ("llama", ["0,1,4,5"], False),  # exact
]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    return {m: make_source(m, root / m) for m in {c[0] for c in CASES}}


@pytest.mark.slow
@pytest.mark.parametrize("model_type, keep, force", CASES, ids=[f"{m}-{k[0]}-{'force' if f else 'plain'}" for m, k, f in CASES])
def test_the_plan_rebuilt_from_an_outcome_is_the_checked_plan(sources, model_type, keep, force):
    plan = plan_for(sources[model_type], keep)
    checked = checked_plan(plan, force=force)
    outcome = json.loads(json.dumps(outcome_of(plan, checked)))  # as stored
    rebuilt = apply_outcome(plan_for(sources[model_type], keep), outcome)
    assert plan_to_json(rebuilt, with_tensors=True) == plan_to_json(checked, with_tensors=True)
    assert rebuilt.transformers_check == checked.transformers_check


def test_the_kinds_of_outcome_are_all_exercised(sources):
    """The cases above cover a changed selection, solved fields, a mismatch and exact."""
    seen = set()
    for model_type, keep, force in CASES:
        plan = plan_for(sources[model_type], keep)
        outcome = outcome_of(plan, checked_plan(plan, force=force))
        seen.add(outcome["check"]["status"])
        if outcome["text"] is not None:
            seen.add("selection changed")
        if outcome["check"]["solved"]:
            seen.add("solved")
    assert {"exact", "mismatch", "selection changed", "solved"} <= seen, seen


@pytest.mark.slow
def test_a_verdict_is_remembered_only_for_the_same_inputs(sources, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = sources["kimi_k25"]
    plan = plan_for(src, ["0,4,5"])
    first = checked_plan_cached(plan)
    entries = list((tmp_path / "cache" / "mxtrim" / "checks").glob("plan-*.json"))
    assert len(entries) == 1
    # a remembered verdict gives the same plan without transformers (the entry is what is read)
    again = checked_plan_cached(plan_for(src, ["0,4,5"]))
    assert plan_to_json(again) == plan_to_json(first)
    # other layers, --force or another config: other keys
    assert plan_key(plan_for(src, ["0,5"]), False) != plan_key(plan, False)
    assert plan_key(plan, True) != plan_key(plan, False)
    config = json.loads((src / "config.json").read_text())
    changed = tmp_path / "changed"
    changed.mkdir()
    for p in src.iterdir():
        (changed / p.name).symlink_to(p)
    (changed / "config.json").unlink()
    (changed / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    assert plan_key(plan_for(changed, ["0,4,5"]), False) != plan_key(plan, False)
    # a damaged entry is checked again, not trusted
    entries[0].write_text('{"text": 5}')
    assert plan_to_json(checked_plan_cached(plan_for(src, ["0,4,5"]))) == plan_to_json(first)
    # turned off: nothing read or stored
    monkeypatch.setenv(check_cache.ENV, "0")
    for p in entries[0].parent.glob("*.json"):
        p.unlink()
    checked_plan_cached(plan_for(src, ["0,4,5"]))
    assert list(entries[0].parent.glob("*.json")) == []


@pytest.mark.slow
def test_the_cli_answers_the_same_with_and_without_the_remembered_verdict(sources, tmp_path):
    """`plan` then `trim` of the same selection: the trim's verdict and plan are the plan's;
    with the cache off (a fresh check in a child process) they are the same again."""
    src = sources["gpt_neox_japanese"]
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = run_cli("plan", str(src), "--keep", "0,1,4,5", "--json", env=env)
    remembered = run_cli("plan", str(src), "--keep", "0,1,4,5", "--json", env=env)
    fresh = run_cli("plan", str(src), "--keep", "0,1,4,5", "--json", env={**env, check_cache.ENV: "0"})
    assert first.returncode == remembered.returncode == fresh.returncode == 1
    docs = [json.loads(r.stdout) for r in (first, remembered, fresh)]
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["transformers_check"]["status"] == "mismatch"
    assert len(os.listdir(tmp_path / "cache" / "mxtrim" / "checks")) == 1
