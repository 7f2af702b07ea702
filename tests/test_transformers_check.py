"""The plan checked against transformers: architectures without a family module trim to
exactly the kept layers (names, shapes, per-layer modules, per-layer config entries) or are
refused with the evidence and a selection that works; scalar fields are solved."""

from __future__ import annotations

import json
import warnings

import pytest

from benchmarks.architecture_sweep import architectures_map, make_source, run_one
from engine_support import plan_for, run_cli
from mxtrim_tui.core.checks.transformers_plan import EXACT, MISMATCH, checked_plan

warnings.simplefilter("ignore")

# A fast share of benchmarks/architecture_sweep.py: one architecture per way a trim went wrong
# before the check existed (depth alias, tensors outside the stacks, dense prefix, index lists,
# config-only layer kinds, cyclic patterns, VLM wrappers, transformers 5 layouts of known
# families, a seq2seq decoder's own depth field).
EXACT_ARCHITECTURES = [
    "llama", "gpt2", "bloom", "ernie4_5_moe", "kimi_k25", "cohere2", "granite_swa", "laguna",
    "recurrent_gemma", "llava", "mistral3", "gemma3", "qwen3_moe", "mllama", "lfm2", "llama4_text",
    "nemotron_h", "qwen3_5", "qwen3_5_moe", "blenderbot-small", "exaone4", "zamba",
    "exaone",  # as transformers 5 saves it: model.layers.N under model type exaone
    "apertus1p5",  # an audio encoder kept whole keeps its layer numbering (its gaps)
    "xlstm",  # num_blocks rewritten with the depth
]


@pytest.mark.parametrize("model_type", EXACT_ARCHITECTURES)
@pytest.mark.slow
def test_sweep_share_builds_exactly_the_kept_layers(model_type, tmp_path):
    row = run_one(model_type, architectures_map()[model_type], tmp_path)
    assert row.outcome == "exact", (row.detail, [c.__dict__ for c in row.cases])


# Architectures whose automatic set once kept more layers than they have kinds: GPT-2 (a string
# as long as the depth read per layer), LFM2 and Molmo2 (an index list naming every layer read as
# one value per layer), GPT-NeoX-Japanese (the last layer differs: the set was widened to the
# whole stack, one boundary layer is enough), at two depths.
@pytest.mark.parametrize("model_type, depth, kept", [
    ("gpt2", 8, [0]), ("lfm2", 8, [0]), ("lfm2", 12, [0]), ("molmo2", 8, [0]),
    ("gpt_neox_japanese", 8, [0, 7]), ("gpt_neox_japanese", 12, [0, 11]),
])
@pytest.mark.slow
def test_the_automatic_set_keeps_one_layer_per_kind(model_type, depth, kept, tmp_path):
    row = run_one(model_type, architectures_map()[model_type], tmp_path, depth=depth)
    auto = next(c for c in row.cases if c.selection == "auto")
    assert auto.outcome == "exact", auto.detail
    assert auto.kept == kept and row.auto_size == row.kinds == len(kept), (row.kinds, auto.kept)


@pytest.mark.slow
def test_a_rule_about_the_last_layer_is_refused_with_a_selection_that_works(tmp_path):
    src = make_source("gpt_neox_japanese", tmp_path / "src")
    r = run_cli("plan", str(src), "--keep", "0,1,4,5")
    assert r.returncode == 1
    assert "output layer 3 differs from source layer 5" in r.stderr  # the one error line
    assert "--keep 0-1,4-5,7 builds exactly" in r.stderr
    assert run_cli("plan", str(src), "--keep", "0-1,4-5,7").returncode == 0


@pytest.mark.slow
def test_refused_weights_trim_writes_nothing_and_force_writes_a_marked_output(tmp_path):
    src = make_source("gpt_neox_japanese", tmp_path / "src", data="random")
    out = tmp_path / "out"
    r = run_cli("trim", str(src), "--mode", "weights", "--keep", "0,1,4,5", "--out", str(out))
    assert r.returncode == 1 and "nothing written" in r.stderr
    assert "attention.dense_bias" in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    r = run_cli("trim", str(src), "--mode", "weights", "--keep", "0,1,4,5", "--out", str(out), "--force", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["transformers_check"]["status"] == "mismatch"
    assert any("written despite the check (--force)" in i["message"] for i in doc["issues"])
    assert "written despite the check" in (out / "README.md").read_text()


def test_a_dense_prefix_field_is_solved_against_transformers(tmp_path):
    """Kimi-K2.5 (DeepSeek-V3 text inside a VLM wrapper, no family module): keeping dense layer 0
    and MoE layers 4-5 needs first_k_dense_replace = 1 at the new indices."""
    src = make_source("kimi_k25", tmp_path / "src")
    plan = checked_plan(plan_for(src, ["0,4,5"]))
    assert plan.transformers_check.status == EXACT
    edit = next(e for e in plan.edits if e.path[-1] == "first_k_dense_replace")
    assert edit.after == 1 and "solved against transformers' Kimi_K25ForConditionalGeneration" in edit.reason
    assert plan.new_documents["config.json"]["text_config"]["first_k_dense_replace"] == 1


def test_the_automatic_set_covers_kinds_only_transformers_distinguishes(tmp_path):
    """RecurrentGemma's layer kinds come from a cyclic block_types pattern; the checkpoint
    names alone would give one kind."""
    src = make_source("recurrent_gemma", tmp_path / "src")
    plan = checked_plan(plan_for(src, ["auto"]))
    assert plan.transformers_check.status == EXACT
    assert plan.kept["text"] == [0, 2]
    assert plan.new_documents["config.json"]["block_types"] == ["recurrent", "attention"]


def test_the_check_can_fail(tmp_path):
    """A plan whose config rewrite is undone builds 8 layers where 4 are kept: mismatch."""
    import dataclasses

    from mxtrim_tui.core.checks.transformers_plan import check_plan

    src = make_source("llama", tmp_path / "src")
    plan = plan_for(src, ["0,1,4,5"])
    undone = dataclasses.replace(plan, new_documents={"config.json": plan.inventory.source.config})
    _, check = check_plan(undone)
    assert check.status == MISMATCH
    assert "the output config builds 8 text layers, 4 are kept" in check.problems[0]


@pytest.mark.parametrize("failure", ["internals", "other"])
def test_a_loader_this_version_does_not_have_is_not_checked_and_blocks_nothing(tmp_path, monkeypatch, failure):
    """transformers' loader is internal and changes between versions: where it cannot be run, the
    verdict is *not checked* with the version and the reason, never a mismatch with a --keep fix
    (transformers 4.57 once blocked every plan this way)."""
    import transformers

    from mxtrim_tui.core.checks import loader
    from mxtrim_tui.core.checks.transformers_plan import NOT_CHECKED

    def unknown(model, feed):
        if failure == "internals":
            raise loader.LoaderUnavailable(f"transformers {transformers.__version__} has neither the 5.x loader nor the 4.56 - 4.57 one")
        raise TypeError("convert_and_load_state_dict_in_model() missing 1 required positional argument: 'tp_plan'")

    monkeypatch.setattr(loader, "load_with_transformers", unknown)
    src = make_source("llama", tmp_path / "src")
    plan = checked_plan(plan_for(src, ["0,5"]))
    check = plan.transformers_check
    assert check.status == NOT_CHECKED, check
    assert "has exactly the kept layers" in check.summary and "tensor names were not checked" in check.summary
    assert f"transformers {transformers.__version__}" in check.summary
    assert not plan.errors and plan.kept["text"] == [0, 5]
    assert not any("--keep" in (i.fix or "") for i in plan.issues)
