"""DeepSeek-V4 (issue 33, items 1-7): sources shaped like the published
``DeepSeek-V4-Flash-0731-smq-w8a8`` example (7 layers, ``compress_ratios`` with three
prediction slots, ``num_hash_layers=3``, draft heads ``mtp.0..2``, DSpark targets ``[4,5,6]``),
at a small width, under the release's names and under transformers' (built on ``meta``).
Each test asserts what a user of ``plan`` / ``trim`` / ``validate`` sees."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

import dsv4_support as v4
from engine_support import plan_for, run_cli
from mxtrim_tui.core.checks import transformers_plan
from mxtrim_tui.core.checks.imports import checks_unavailable
from mxtrim_tui.core.checks.transformers_plan import checked_plan
from mxtrim_tui.core.model.families.deepseek_v4 import v4_attention, v4_mlp
from mxtrim_tui.core.model.inventory import build_inventory
from mxtrim_tui.core.plan.budget import BudgetInputs, compute_budget
from mxtrim_tui.core.plan.check_result import EXACT, NOT_CHECKED
from mxtrim_tui.core.plan.config_edit import MISSING
from mxtrim_tui.core.plan.plan_json import plan_to_json
from mxtrim_tui.core.read.source import open_source
from mxtrim_tui.core.validate import requests as rq
from mxtrim_tui.core.validate.run import SPECULATIVE, applicability
from mxtrim_tui.core.write.writer import write_dummy


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("dsv4")
    return {
        "published": v4.published_source(root / "published"),
        "transformers": v4.transformers_source(root / "transformers"),
        # the example folder as published: config says 7 layers, the index names 0..42
        "held43": v4.published_source(root / "held43", held=43),
        "held43-index": v4.published_source(root / "held43-index", held=43, index_only=True),
    }


def edits(plan) -> dict:
    return {".".join(map(str, e.path)): e.after for e in plan.edits if e.file == "config.json"}


def warnings(plan) -> list[str]:
    return [i.message for i in plan.issues if i.level == "warning"]


def output_config(plan) -> dict:
    return plan.new_documents["config.json"]


@pytest.fixture
def no_transformers(monkeypatch):
    """The tool install: torch / transformers cannot be imported by the check."""
    monkeypatch.setattr(transformers_plan, "import_torch_transformers", lambda: (None, None, checks_unavailable("torch")))
    transformers_plan._describe_source_cached.cache_clear()
    yield
    transformers_plan._describe_source_cached.cache_clear()


# --- item 1: the MTP / DSpark heads are heads ---------------------------------------------
@pytest.mark.parametrize("style", ["published", "transformers"])
def test_the_draft_heads_are_an_mtp_submodel_not_other_tensors(sources, style):
    inv = build_inventory(open_source(sources[style]))
    mtp = inv.submodels["mtp"]
    assert [l.name for l in mtp.layers] == ["mtp.0", "mtp.1", "mtp.2"]
    held = {n for l in mtp.layers for n in l.tensors}
    assert held == {t.name for t in inv.source.iter_tensors() if t.name.startswith("mtp.")}
    shared = {p.label: p.tensors for p in inv.shared}
    assert not any(n.startswith("mtp.") for names in shared.values() for n in names)
    assert "other (kept unchanged)" not in shared and inv.unassigned == []
    assert shared["final norm"] in (["norm.weight"], ["model.norm.weight"])
    assert "dspark main_proj" in mtp.layers[0].kind.special and "dspark markov head" in mtp.layers[2].kind.special
    # three heads, as DSpark builds them, beside the one MTP layer the config declares: no false alarm
    assert not any("MTP layer(s)" in w for w in inv.warnings), inv.warnings


def test_the_heads_are_kept_and_speculative_decoding_applies(sources, tmp_path):
    plan = plan_for(sources["published"])
    assert plan.mtp_kept and not plan.errors
    kept = {new for _, new in plan.renames}
    assert "mtp.0.main_proj.weight" in kept and "mtp.2.markov_head.markov_w1.weight" in kept
    assert applicability(tmp_path, plan_to_json(plan), SPECULATIVE, False) is None  # was "no MTP layer kept"
    out = write_dummy(plan, tmp_path / "out").path
    assert "| MTP / draft heads | kept |" in (out / "README.md").read_text()


def test_no_mtp_drops_the_heads_and_says_so(sources):
    plan = plan_for(sources["published"], mtp=False)
    assert not plan.mtp_kept
    dropped = {t for t, why in plan.dropped if why == "MTP dropped"}
    assert dropped and all(t.startswith("mtp.") for t in dropped)
    assert not any(new.startswith("mtp.") for _, new in plan.renames)
    assert edits(plan)["num_nextn_predict_layers"] == 0
    message = next(w for w in warnings(plan) if w.startswith("MTP / draft heads dropped"))
    assert "DSpark" in message
    # the output declares no head: inspecting it raises no "declared but absent" alarm
    out_cfg = output_config(plan)
    assert out_cfg["num_nextn_predict_layers"] == 0


# --- item 2: DSpark targets follow the mapping, and a target not kept is said ------------------
def test_the_automatic_set_keeps_dspark_targets_while_the_heads_are_kept(sources):
    plan = plan_for(sources["published"])
    assert {4, 5, 6} <= set(plan.kept["text"])
    pos = {old: new for new, old in enumerate(plan.kept["text"])}
    assert output_config(plan)["dspark_target_layer_ids"] == [pos[4], pos[5], pos[6]]
    assert not any("DSpark" in w for w in warnings(plan))
    # without the heads nothing reads them: the minimal set
    assert not {5, 6} <= set(plan_for(sources["published"], mtp=False).kept["text"])


@pytest.mark.parametrize("keep, remain, missing", [("0,3", [], "4, 5, 6"), ("0,2,3,4,5", [3, 4], "6")])
def test_a_dspark_target_not_kept_is_said_never_hidden(sources, keep, remain, missing):
    plan = plan_for(sources["published"], [keep])
    assert output_config(plan)["dspark_target_layer_ids"] == remain
    message = next(w for w in warnings(plan) if "DSpark is no longer fully covered" in w)
    assert f"target layer(s) {missing} not kept" in message
    assert ("no target remains" in message) if not remain else "become layer(s) 3, 4" in message
    assert "3 target layers (mtp.0.main_proj)" in message  # the heads' contract, read from the checkpoint
    # dropping the heads drops the question
    assert not any("DSpark is no longer" in w for w in warnings(plan_for(sources["published"], [keep], mtp=False)))


# --- item 3: the hash boundary is right without transformers -------------------------------
@pytest.mark.parametrize("keep", [None, ["0,3"], ["1,2,5"], ["0,4"]])
def test_num_hash_layers_follows_the_kept_hash_layers_without_transformers(sources, keep, no_transformers):
    plan = checked_plan(plan_for(sources["published"], keep))
    assert plan.transformers_check.status == NOT_CHECKED and not plan.errors
    kept = plan.kept["text"]
    hashed = sum(1 for i in kept if i < 3)
    cfg = output_config(plan)
    assert cfg["num_hash_layers"] == hashed
    # vLLM's rules on the output config build exactly the kept kinds, the ratios follow the
    # kept layers and the three prediction slots stay
    src = plan.inventory.submodels["text"].layers
    for new, old in enumerate(kept):
        assert (v4_attention(cfg, new), v4_mlp(cfg, new)) == (src[old].kind.attention, src[old].kind.mlp)
    assert cfg["compress_ratios"] == [v4.RATIOS[i] for i in kept] + [0, 0, 0]
    assert not any("may decide which layers" in w for w in warnings(plan))


@pytest.mark.parametrize("keep", [None, ["0,3"], ["1,2,5"]])
def test_transformers_builds_exactly_what_the_family_rule_wrote(sources, keep):
    plan = plan_for(sources["transformers"], keep)
    checked = checked_plan(plan)
    assert checked.transformers_check.status == EXACT, checked.transformers_check
    assert checked.transformers_check.solved == ()  # nothing left for the solver: the rule did it
    assert edits(checked) == edits(plan) and checked.kept == plan.kept


def test_a_generic_index_field_nothing_checked_is_said(tmp_path, no_transformers):
    """An architecture without a family module, whose num_hash_layers transformers' solver
    would have fixed: without transformers the plan says the field was not checked."""
    src = v4.published_source(tmp_path / "generic", v4.config(model_type="foo_v4", architectures=["FooV4ForCausalLM"]))
    plan = checked_plan(plan_for(src, ["0,3"]))
    assert plan.inventory.family.key == "generic"
    message = next(w for w in warnings(plan) if "may decide which layers" in w)
    assert message.startswith("num_hash_layers=3 ")
    # a prefix keeps every index: nothing can have moved
    assert not any("may decide which layers" in w for w in warnings(checked_plan(plan_for(src, ["0-3"]))))


@pytest.mark.slow
def test_a_check_process_that_dies_says_the_unchecked_index_field_too(tmp_path):
    """A judging interpreter that answers nothing a check can use (its process ends): the plan
    is not checked, and the index field nothing checked is said as without transformers."""
    src = v4.published_source(tmp_path / "generic", v4.config(model_type="foo_v4", architectures=["FooV4ForCausalLM"]))
    dies = tmp_path / "python-that-exits"
    dies.write_text("#!/bin/sh\nexit 3\n")
    dies.chmod(dies.stat().st_mode | stat.S_IXUSR)
    proc = run_cli("plan", str(src), "--keep", "0,3", "--json", "--python", str(dies), env={"XDG_CACHE_HOME": str(tmp_path / "c")})
    doc = json.loads(proc.stdout)
    assert doc["transformers_check"]["status"] == NOT_CHECKED and "process failed" in doc["transformers_check"]["summary"]
    unchecked = [i["message"] for i in doc["issues"] if i["level"] == "warning" and "may decide which layers" in i["message"]]
    assert len(unchecked) == 1 and unchecked[0].startswith("num_hash_layers=3 ")
    assert "the check's process failed" in unchecked[0]


@pytest.mark.slow
def test_the_cli_plans_the_same_with_and_without_transformers(sources, tmp_path):
    """The tool install simulated: the check's interpreter cannot import torch (-S)."""
    nosite = tmp_path / "python-without-site"
    nosite.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    nosite.chmod(nosite.stat().st_mode | stat.S_IXUSR)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with_tf = json.loads(run_cli("plan", str(sources["transformers"]), "--json", env=env).stdout)
    proc = run_cli("plan", str(sources["transformers"]), "--json", "--python", str(nosite), env=env)
    without = json.loads(proc.stdout)
    assert with_tf["transformers_check"]["status"] == EXACT
    assert without["transformers_check"]["status"] == NOT_CHECKED
    assert "torch" in without["transformers_check"]["summary"]
    assert with_tf["kept"] == without["kept"] and with_tf["config_edits"] == without["config_edits"]


# --- item 4: a config that says fewer layers than the checkpoint holds ------------------------
@pytest.mark.parametrize("key", ["held43", "held43-index"])
def test_a_config_shallower_than_its_checkpoint_stops_plan_and_trim(sources, key, tmp_path):
    plan = plan_for(sources[key])
    assert any("num_hidden_layers is 7 but the checkpoint holds text layers 0..42" in i.message for i in plan.errors)
    assert max(plan.kept["text"]) < 7  # the automatic set chooses among the config's layers
    proc = run_cli("trim", str(sources[key]), "--mode", "dummy", "--out", str(tmp_path / "out"))
    assert proc.returncode != 0 and not (tmp_path / "out").exists()
    assert "num_hidden_layers is 7 but the checkpoint holds text layers 0..42" in proc.stderr


# --- item 5: a config-only folder --------------------------------------------------------------
def test_a_config_only_folder_reads_its_depth_from_the_config(tmp_path):
    src = tmp_path / "config-only"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(v4.config()))
    plan = plan_for(src)
    assert not plan.errors and len(plan.inventory.submodels["text"].layers) == 7
    n = len(plan.kept["text"])
    assert n > 0 and output_config(plan)["num_hidden_layers"] == n
    out = write_dummy(plan, tmp_path / "out").path
    assert (out / "README.md").read_text().splitlines()[0].endswith(f"{n}-layer dummy trim")
    keep = plan_for(src, ["0,2,3"])
    assert not keep.errors and output_config(keep)["num_hidden_layers"] == 3


def test_a_config_only_folder_without_a_family_module_is_refused(tmp_path):
    src = tmp_path / "config-only"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "foo_bar", "architectures": ["FooBarForCausalLM"], "num_hidden_layers": 4}))
    plan = plan_for(src)
    assert any("no text layers to keep" in i.message and "4 layers" in i.message for i in plan.errors)
    proc = run_cli("trim", str(src), "--mode", "dummy", "--out", str(tmp_path / "out"))
    assert proc.returncode != 0 and not (tmp_path / "out").exists()


# --- item 6: the KV budget knows the compressed caches ------------------------------------------
def test_the_budget_counts_compressed_caches_and_says_it_is_unverified(sources):
    plan = plan_for(sources["published"], ["0,2,3"])
    b = compute_budget(plan, BudgetInputs(max_model_len=4096))
    lines = {l.kind: l for l in b.kv_lines}
    assert "mla" not in lines
    # vLLM 0.32.0 pages of 256 tokens padded to 576 B: 64 rows of 584 B -> 37,440 B (147 B a token);
    # the indexer's 64 keys of 32 B (no whole 128 for a scale) -> 2,304 B (9 B a token)
    assert lines["compressed ÷4 + indexer"].bytes_per_token == 147 + 9
    assert lines["compressed ÷128"].bytes_per_token == 7  # 2 rows of 584 B -> 1,728 B per 256 tokens
    assert lines["sliding window only"].bytes_per_token == 0
    window = 65 * 37440  # cdiv(min(16 − 1 + 2 × 4096, 4096), 64) + 1 pages of 64 rows
    assert lines["sliding window only"].state_bytes_per_seq == window
    assert lines["compressed ÷128"].state_bytes_per_seq > window  # + the compressor's state
    assert all("unverified" in l.note for l in lines.values())
    sixteen = {l.kind: l for l in compute_budget(plan, BudgetInputs(kv_cache_dtype="bfloat16")).kv_lines}
    assert sixteen["compressed ÷128"].bytes_per_token == 2  # 2 rows of 64 × 2 B, padded to 512 B per 256 tokens


# --- item 7: the long-input request crosses the largest kept compression block -------------------
def test_the_long_input_crosses_the_largest_kept_compression_block(sources):
    cfg = v4.config()

    def longest(cfg: dict, *kinds: str) -> int | None:
        """The longest boundary the long input must cross, kept layers 0, 1, ... of ``kinds``."""
        bounds = rq.kept_boundaries(cfg, [{"submodel": "text", "kind": k, "kept": [{"new": i, "old": i}]}
                                          for i, k in enumerate(kinds)])
        return bounds[-1]["tokens"] if bounds else None

    # ratio 128: one compressed entry once the prompt holds 128 tokens
    assert longest(cfg, "compressed ÷128 · moe×8", "sliding window only · hash-moe×8") == 127
    # ratio 4: the indexer selects among the compressed entries only past its top-k of them
    # (vLLM: max_seq_len // 4 > index_topk), from 4 × (16 + 1) tokens
    assert longest(cfg, "compressed ÷4 + indexer · moe×8") == 67
    assert longest(cfg, "sliding window only · moe×8") == 16
    assert longest({"sliding_window": 4096}, "full · dense") is None
    # the plan's coverage rows say the same length
    plan = plan_for(sources["published"], ["0,3"])
    assert any("longer than 127 tokens" in c.request for c in plan.coverage if c.kept)


@pytest.mark.parametrize("tokens_per_word", [3, 0.5, 1])
def test_the_long_prompt_is_counted_with_the_served_tokenizer(tokens_per_word):
    counted = []

    def count(base, model, prompt):
        n = int(len(prompt.split()) * tokens_per_word)
        counted.append(n)
        return n

    prompt, n = rq.long_prompt("http://x", "m", 128, count=count)
    assert n == counted[-1] and n > 128
    assert rq.long_prompt("http://x", "m", 128, count=lambda *a: None) == (" ".join(["fox"] * 144), None)


@pytest.mark.parametrize("tokens_per_word", [3, 2, 1.3])
def test_the_long_prompt_stays_within_the_context(tokens_per_word):
    """A word of several tokens must not carry the prompt past the context: V4's top-k path
    needs 2,048 tokens, and "fox" counted as two tokens each gave a 4,128-token prompt that a
    4,096 context refused (HTTP 400, seen on an H100)."""
    def count(base, model, prompt):
        return int(len(prompt.split()) * tokens_per_word)

    prompt, n = rq.long_prompt("http://x", "m", 2048, count=count, limit=4096 - 4)
    assert 2048 < n <= 4092 and n == count(None, None, prompt)


def test_served_with_the_fp8_cache_vllm_requires_of_v4(sources, tmp_path):
    """vLLM 0.26.0 refuses DeepSeek-V4 with the default cache dtype ("DeepseekV4 fp8_ds_mla
    layout only supports fp8 kv-cache, got auto", seen on an H100): the output's serve command
    and validation's GPU server ask for fp8; another model's do not; a chosen dtype stays."""
    from mxtrim_tui.core.validate.serve import ServeOptions, required_kv_cache_dtype, serve_argv

    out = write_dummy(plan_for(sources["published"], ["0,3"]), tmp_path / "out").path
    assert "--kv-cache-dtype fp8" in (out / "serve.sh").read_text()
    assert "--kv-cache-dtype fp8" in (out / "README.md").read_text()
    assert required_kv_cache_dtype(out) == "fp8"
    argv = serve_argv(out, "dummy", ServeOptions(python="python", device="cuda", kv_cache_dtype=required_kv_cache_dtype(out)), 8000)
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    from mxtrim_tui.demo.build import build_demo

    demo = build_demo(tmp_path / "demo")
    other = write_dummy(plan_for(demo, ["0"]), tmp_path / "demo-out").path
    assert required_kv_cache_dtype(other) is None and "--kv-cache-dtype" not in (other / "serve.sh").read_text()


@pytest.mark.slow
def test_a_dummy_output_says_which_vllm_releases_cannot_start_it(sources, tmp_path):
    """vLLM 0.26.0 to 0.28.0 cannot start a dummy DeepSeek-V4 output (the first layer's mHC
    broadcast weights are set only while real weights load: "assert self.hc_attn_fn_broadcast
    is not None", tests/fixtures/gpu_logs/h100-0.26.0-deepseek-v4-dummy-mhc.log). `trim` and
    `plan` say it in one line with what to do, beside "fits", when the vLLM in use (found as
    validation finds it) is one of those releases or none is found; not with a later vLLM, not
    for a real-weight output."""
    from test_vllm_discovery import make_env

    old, new, none = (make_env(tmp_path / name, vllm=version) for name, version in
                      (("old", "0.26.0"), ("new", "0.32.0"), ("none", None)))
    src = sources["published"]

    def said(python, *args):
        proc = run_cli(*args, env={"MXTRIM_VLLM_PYTHON": python})
        assert proc.returncode == 0, proc.stderr
        return [line for line in (proc.stdout + proc.stderr).splitlines() if "hc_attn_fn_broadcast" in line]

    lines = said(old, "trim", str(src), "--keep", "0,3", "--mode", "dummy", "--out", str(tmp_path / "dummy-old"))
    assert len(lines) == 1, lines
    assert "vLLM 0.26.0 up to 0.29.0 (not included) cannot start a dummy DeepSeek-V4 output" in lines[0]
    assert "(named by $MXTRIM_VLLM_PYTHON) is 0.26.0" in lines[0]
    assert "serve the output with vLLM 0.29.0 or later, or trim with --mode weights" in lines[0]
    assert said(new, "trim", str(src), "--keep", "0,3", "--mode", "dummy", "--out", str(tmp_path / "dummy-new")) == []
    assert said(old, "trim", str(src), "--keep", "0,3", "--mode", "weights", "--out", str(tmp_path / "weights")) == []

    planned = said(old, "plan", str(src), "--keep", "0,3", "--mode", "dummy")
    assert len(planned) == 1 and "is 0.26.0" in planned[0]
    # a config alone makes only a dummy output (no --mode needed to know it), and no real-weight
    # trim is offered; a vLLM that cannot be found may be one of those releases
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((src / "config.json").read_text())
    unknown = said(none, "plan", str(bare), "--keep", "0,3")
    assert len(unknown) == 1 and "no vLLM was found to tell whether the one in use is affected" in unknown[0]
    assert "--mode weights" not in unknown[0]
    assert said(new, "plan", str(bare), "--keep", "0,3", "--json") == []
