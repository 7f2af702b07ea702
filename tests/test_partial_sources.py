"""Trimming from what the user has downloaded: config-only, index-only and partial sources.

DeepSeek-V3- and GLM-5-shaped checkpoints (every tensor name of the release, 61 + MTP and
78 + MTP layers, 256 experts; small dimensions, random bytes) cut into 163 shards (as
DeepSeek-V3's release) and 141. From each: the JSON files alone (config-only), plus the index (index-only), plus
exactly the shards a ``--keep 0,3`` real-weight trim needs (symlinked, as a Hub cache does),
and those less one. Each is driven through the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from engine_support import run_cli, tree_digest

from synth.checkpoint import plan_shards, write_checkpoint
from synth.layouts.deepseek import deepseek_v3
from synth.layouts.glm import glm_moe_dsa

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_partial_sources")]  # full-size sparse releases (GLM-5, DeepSeek-V3) in five download states

INDEX = "model.safetensors.index.json"
KEEP = ["--keep", "0,3"]
# Files of the dummy output that describe the source rather than the trim: README rows and
# plan fields that say what the source holds (its state, the bytes known, the path).
STATE_ROWS = ("# ", "Made by mxtrim", "| source", "| stored tensors", "| `mxtrim-plan.json`", "vllm serve ", "`mxtrim validate ")
SIZE = re.compile(r"(≥ )?\d[\d.,]* (B|KiB|MiB|GiB|TiB)\b|unknown")  # a size, known or not
STATE_FIELDS = ("source", "source_state", "needed_shards", "output", "serve", "budget")  # budget: weights per GPU need bytes


def shards_like_the_release(layout, count: int) -> int:
    """The largest shard size that cuts ``layout`` into ``count`` shards."""
    lo, hi = 1, layout.total_bytes
    while lo < hi:  # fewest shards at the largest size: find the smallest size giving <= count
        mid = (lo + hi) // 2
        if len(plan_shards(layout.tensors, mid)) <= count:
            hi = mid
        else:
            lo = mid + 1
    assert len(plan_shards(layout.tensors, lo)) == count
    return lo


MODELS = {
    # 91,991 tensors in 163 shards, as DeepSeek-V3's release
    "DeepSeek-V3": (lambda: deepseek_v3(hidden_size=64, moe_intermediate_size=16, intermediate_size=64, vocab_size=256,
                                        q_lora_rank=32, kv_lora_rank=32), 163),
    "GLM-5": (lambda: glm_moe_dsa(hidden_size=64, moe_intermediate_size=16, intermediate_size=64, vocab_size=256,
                                  q_lora_rank=32, kv_lora_rank=32), 141),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def sources(request, tmp_path_factory):
    """{state: source directory} for one model; every source dir is named alike, so outputs
    differ only by what the source holds."""
    make, count = MODELS[request.param]
    layout = make()
    base = tmp_path_factory.mktemp(request.param)
    complete = write_checkpoint(base / "complete" / request.param, layout, data="random",
                                max_shard_bytes=shards_like_the_release(layout, count))
    assert len(list(complete.glob("*.safetensors"))) == count
    listed = run_cli("plan", str(complete), *KEEP, "--fetch-list")
    assert listed.returncode == 0, listed.stderr
    needed = listed.stdout.split()
    dirs = {"complete": complete}
    for state in ("config-only", "index-only", "partial", "missing-one"):
        d = base / state / request.param
        d.mkdir(parents=True)
        for f in complete.iterdir():
            if f.suffix != ".safetensors" and (f.name != INDEX or state != "config-only"):
                shutil.copy2(f, d / f.name)
        wanted = needed if state == "partial" else needed[:1] + needed[2:] if state == "missing-one" else []
        for name in wanted:
            os.symlink(complete / name, d / name)  # as a Hub cache snapshot does
        dirs[state] = d
    dirs["needed"] = needed
    dirs["count"] = count
    return dirs


def sizeless(doc):
    """``doc`` without its byte counts (known or not depending on the shards present)."""
    if isinstance(doc, dict):
        return {k: sizeless(v) for k, v in doc.items() if "bytes" not in k}
    if isinstance(doc, list):
        return [sizeless(v) for v in doc]
    return doc


def inspect_json(root: Path) -> dict:
    out = run_cli("inspect", str(root), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_inspect_says_what_the_source_holds_and_keeps_every_layer_kind(sources):
    whole = inspect_json(sources["complete"])
    count, needed = sources["count"], sources["needed"]
    expect = {
        "complete": ("complete", count, f"complete: all {count} shard(s) present"),
        "config-only": ("config only", 0, "config only: no weights and no index"),
        "index-only": ("index only", 0, f"index only: {INDEX} lists {count} shard(s), none present"),
        "partial": ("partial", len(needed), f"partial download: {len(needed)} of {count} shards present"),
    }
    for state, (name, present, detail) in expect.items():
        doc = inspect_json(sources[state])
        assert (doc["source_state"]["state"], doc["totals"]["shards"], doc["source_state"]["detail"]) == (name, present, detail)
        # the layer kinds and groups (weight dtypes estimated from names and config where no
        # header was read) are the complete source's, so the same layers cover the same paths
        shown = [(g["symbol"], g["submodel"], g["layers"], g["kind"]["label"]) for g in doc["groups"]]
        if state != "config-only":  # without an index no tensor name is known
            assert shown == [(g["symbol"], g["submodel"], g["layers"], g["kind"]["label"]) for g in whole["groups"]]
            assert doc["totals"]["tensors"] == whole["totals"]["tensors"]
            assert doc["totals"]["bytes"] == whole["totals"]["bytes"]  # the index's total_size
        else:
            assert [s[:3] for s in shown] == [s[:3] for s in [(g["symbol"], g["submodel"], g["layers"]) for g in whole["groups"]]]
    index_only = inspect_json(sources["index-only"])
    assert all(g["bytes"] is None for g in index_only["groups"])  # unknown, never 0
    partial = inspect_json(sources["partial"])
    layer = {l["index"]: l for l in partial["submodels"][0]["layers"]}
    assert layer[3]["bytes"] == {l["index"]: l for l in whole["submodels"][0]["layers"]}[3]["bytes"]
    assert layer[5]["bytes"] is None and layer[5]["tensors_not_present"] == layer[5]["tensors"]
    text = run_cli("inspect", str(sources["index-only"]))
    assert text.returncode == 0 and "index only" in text.stdout and "unknown" in text.stdout


def test_every_source_state_gives_the_same_dummy_trim(sources, tmp_path):
    outputs = {}
    for state in ("complete", "config-only", "index-only", "partial", "missing-one"):
        out = tmp_path / state / sources["complete"].name
        res = run_cli("trim", str(sources[state]), *KEEP, "--mode", "dummy", "--out", str(out))
        assert res.returncode == 0, res.stderr
        outputs[state] = out
    whole = outputs["complete"]
    runtime_files = sorted(p.name for p in whole.iterdir() if p.name not in ("README.md", "mxtrim-plan.json"))
    assert "config.json" in runtime_files and "tokenizer.json" in runtime_files
    plan_whole = json.loads((whole / "mxtrim-plan.json").read_text())
    for state, out in outputs.items():
        # what vLLM reads is byte for byte the complete source's trim
        assert sorted(p.name for p in out.iterdir() if p.name not in ("README.md", "mxtrim-plan.json")) == runtime_files
        for name in runtime_files:
            assert (out / name).read_bytes() == (whole / name).read_bytes(), (state, name)
        # the report differs only in the lines about what the source holds
        plan = json.loads((out / "mxtrim-plan.json").read_text())
        differ = {k for k in plan_whole.keys() | plan.keys() if sizeless(plan_whole.get(k)) != sizeless(plan.get(k))}
        if state == "config-only":  # no tensor names: kinds without dtypes, nothing to retain
            differ -= {"mapping", "coverage", "tensors", "omitted"}
        assert differ <= set(STATE_FIELDS), (state, differ)
        ours = [SIZE.sub("<size>", l) for l in (out / "README.md").read_text().splitlines() if not l.startswith(STATE_ROWS)]
        theirs = [SIZE.sub("<size>", l) for l in (whole / "README.md").read_text().splitlines() if not l.startswith(STATE_ROWS)]
        changed = [l for l in set(ours) ^ set(theirs) if "not copied" not in l and "chat_template" not in l]
        if state != "config-only":
            assert changed == [], (state, changed)
    readme = (outputs["index-only"] / "README.md").read_text()
    assert f"| source state | index only: {INDEX} lists {sources['count']} shard(s), none present |" in readme


def test_a_partial_download_gives_the_byte_identical_real_weight_trim(sources, tmp_path):
    whole = tmp_path / "whole" / sources["complete"].name
    part = tmp_path / "part" / sources["complete"].name
    before = tree_digest(sources["partial"])
    for src, out in ((sources["complete"], whole), (sources["partial"], part)):
        res = run_cli("trim", str(src), *KEEP, "--mode", "weights", "--out", str(out))
        assert res.returncode == 0, res.stderr
    assert tree_digest(sources["partial"]) == before
    shards = sorted(p.name for p in whole.glob("*.safetensors"))
    assert shards and shards == sorted(p.name for p in part.glob("*.safetensors"))
    for name in [*shards, "config.json"] + ([INDEX] if len(shards) > 1 else []):
        assert (part / name).read_bytes() == (whole / name).read_bytes(), name
    # the kept script pins only the shards it reads, so it is the same script
    script = lambda d: (d / "extract_weights.py").read_text().split("SOURCE_SHARDS = {", 1)[1]
    assert script(part) == script(whole)
    manifest = json.loads((part / "manifest.json").read_text())
    assert sorted(manifest["source_headers"]) == sources["needed"]
    not_present = [d for d in manifest["dropped"] if d["source_file"] not in sources["needed"]]
    assert not_present and all(d["reason"].endswith("dropped; shard not present") for d in not_present)
    whole_manifest = json.loads((whole / "manifest.json").read_text())
    assert [d["name"] for d in manifest["dropped"]] == [d["name"] for d in whole_manifest["dropped"]]


def test_a_missing_needed_shard_is_refused_before_anything_is_written(sources, tmp_path):
    src = sources["missing-one"]
    missing = sources["needed"][1]
    before = tree_digest(src)
    out = tmp_path / "out"
    res = run_cli("trim", str(src), *KEEP, "--mode", "weights", "--out", str(out), "--repo", "example-org/example-model")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0] and "nothing written" in lines[0]
    assert f"hf download example-org/example-model --include {missing} --local-dir {src}" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert tree_digest(src) == before
    # the plan names it with the command, and --fetch-list is the same list as for the whole source
    plan = run_cli("plan", str(src), *KEEP, "--repo", "example-org/example-model")
    assert plan.returncode == 0
    assert f"needs {len(sources['needed'])} of {sources['count']} shards" in " ".join(plan.stdout.split())
    assert f"{len(sources['needed']) - 1} present" in plan.stdout
    for state in ("index-only", "missing-one"):
        listed = run_cli("plan", str(sources[state]), *KEEP, "--fetch-list")
        assert listed.stdout.split() == sources["needed"]
    doc = json.loads(run_cli("plan", str(src), *KEEP, "--json").stdout)
    absent = [s for s in doc["needed_shards"] if not s["present"]]
    assert [s["file"] for s in absent] == [missing] and absent[0]["file_bytes"] is None
    assert absent[0]["estimated_file_bytes"] > 0 and doc["tensors"]["retained_bytes"] is None
