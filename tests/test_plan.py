"""Trim planning and dummy output, per family, at real shapes (sparse fixtures)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine_support import plan_for, run_cli, tree_digest
from mxtrim_tui.core.model.inventory import build_inventory, stack_config
from mxtrim_tui.core.plan.build import Selection, SelectionError, build_plan, parse_keep_spec
from mxtrim_tui.core.read.source import open_source
from mxtrim_tui.core.plan.budget import BudgetInputs
from mxtrim_tui.core.write.writer import OutputError, default_output_dir, estimate_dummy_bytes, write_dummy
from synth.checkpoint import write_checkpoint
from synth.layouts import all_layouts

LAYOUTS = all_layouts()
# transformers has no built-in config class for these (the real repos need remote code)
NOT_BUILT_IN = {"kimi_k2"}


@pytest.fixture(scope="module")
def sparse_models(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(key, **kw):
        name = key + "".join(f"-{k}{v}" for k, v in sorted(kw.items()))
        if name not in cache:
            cache[name] = write_checkpoint(tmp_path_factory.mktemp("src") / name, LAYOUTS[key](**kw), data="sparse")
        return cache[name]

    return get


def inventory_and_plan(root, keep=None, mtp=None):
    plan = plan_for(root, keep, mtp)
    return plan.inventory, plan


# --- keep specs -------------------------------------------------------------------------
def test_keep_spec_parsing():
    assert parse_keep_spec("0,6-7") == ("text", (0, 6, 7))
    assert parse_keep_spec("vision=0,26") == ("vision", (0, 26))
    assert parse_keep_spec("vision=auto") == ("vision", "auto")
    assert Selection.parse(["0", "5-6", "text=2"]).keep == {"text": (0, 2, 5, 6)}
    for bad in ("", "1-x", "3-1", "a=b=c"):
        with pytest.raises(SelectionError):
            parse_keep_spec(bad)


# --- the public GLM-5.2 hand trim -------------------------------------------------------
def test_glm5_reproduces_the_public_hand_trim(sparse_models, tmp_path):
    root = sparse_models("glm_moe_dsa")
    inv, plan = inventory_and_plan(root, ["0,6,7"])
    assert not plan.errors
    out = write_dummy(plan, tmp_path / "GLM-5-dummy-3layers").path
    cfg = json.loads((out / "config.json").read_text())
    src = json.loads((root / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 3
    assert cfg["index_topk_pattern"] == "FFS"
    assert cfg["first_k_dense_replace"] == 1
    assert cfg["mlp_layer_types"] == ["dense", "sparse", "sparse"]
    assert cfg["indexer_types"] == ["full", "full", "shared"]
    assert cfg["layer_types"] == src["layer_types"][:3]
    assert cfg["num_nextn_predict_layers"] == 1
    assert cfg["index_topk_freq"] == src["index_topk_freq"] and cfg["index_skip_topk_offset"] == src["index_skip_topk_offset"]
    # compressed-tensors ignore list renumbered 0->0, 6->1, 7->2, MTP 78->3; dropped layers gone
    assert cfg["compression_config"]["ignore"] == [
        "lm_head",
        "model.layers.0.self_attn.indexer.weights_proj",
        "model.layers.1.mlp.gate",
        "model.layers.1.self_attn.indexer.weights_proj",
        "model.layers.2.mlp.gate",
        "model.layers.3.eh_proj",
        "model.layers.3.mlp.gate",
        "model.layers.3.self_attn.indexer.weights_proj",
    ]
    # everything else, including unknown fields, identical and in the same order
    assert list(cfg) == list(src)
    changed = {"num_hidden_layers", "index_topk_pattern", "first_k_dense_replace", "mlp_layer_types",
               "indexer_types", "layer_types", "compression_config"}
    assert {k: v for k, v in cfg.items() if k not in changed} == {k: v for k, v in src.items() if k not in changed}
    mapping = [(m.submodel, m.new, m.old, m.new_name) for m in plan.mappings]
    assert mapping == [("text", 0, 0, "model.layers.0"), ("text", 1, 6, "model.layers.1"),
                       ("text", 2, 7, "model.layers.2"), ("mtp", 0, 0, "model.layers.3")]


# --- every family: auto plan, output obeys the family's own runtime rules ---------------
@pytest.mark.parametrize("key", sorted(LAYOUTS))
@pytest.mark.slow
def test_auto_trim_output_config_builds_the_kept_kinds(sparse_models, tmp_path, key):
    root = sparse_models(key)
    before = tree_digest(root, 1 << 16)
    inv, plan = inventory_and_plan(root)
    assert not plan.errors, [i.message for i in plan.errors]
    out = write_dummy(plan, tmp_path / "out").path
    src_cfg = json.loads((root / "config.json").read_text())
    cfg = json.loads((out / "config.json").read_text())

    # every distinct text signature is covered
    text_groups = [c for c in plan.coverage if c.submodel == "text"]
    assert text_groups and all(c.covered for c in text_groups)
    # the family's rules, evaluated on the written config, give the kept layers' kinds
    stack = next(s for s in inv.stacks if s.submodel == "text")
    new_text_cfg, _ = stack_config(cfg, stack)
    kept = plan.kept["text"]
    src_layers = {l.index: l for l in inv.submodels["text"].layers}
    for new, old in enumerate(kept):
        want = src_layers[old].kind
        if stack.attention:
            assert stack.attention(new_text_cfg, new) == want.attention, (new, old)
        if stack.mlp:
            assert stack.mlp(new_text_cfg, new) == want.mlp, (new, old)
    depth_field = next(f for f in stack.depth_fields if f in new_text_cfg)
    assert new_text_cfg[depth_field] == len(kept)
    # unknown fields and key order survive: same keys, same order (new keys only appended)
    assert list(cfg)[: len(src_cfg)] == list(src_cfg)
    edited_roots = {e.path[0] for e in plan.edits if e.file == "config.json"}
    for k, v in src_cfg.items():
        if k not in edited_roots:
            assert cfg[k] == v, k
    # quantization kept as it was (modulo renumbered module lists)
    for qkey in ("quantization_config", "compression_config"):
        if qkey in src_cfg:
            assert {k: v for k, v in cfg[qkey].items() if k not in ("ignore", "modules_to_not_convert", "ignored_layers")} == {
                k: v for k, v in src_cfg[qkey].items() if k not in ("ignore", "modules_to_not_convert", "ignored_layers")
            }
    # dummy output: tokenizer assets, no weights, no index, a report that says unverified
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "README.md", "mxtrim-plan.json"} <= names
    assert not any(n.endswith(".safetensors") or n.endswith(".index.json") for n in names)
    readme = (out / "README.md").read_text()
    assert "unverified" in readme and "--load-format dummy" in readme and "MACA_VISIBLE_DEVICES" in readme
    assert str(out) in readme
    # the source is byte-for-byte unchanged
    assert tree_digest(root, 1 << 16) == before
    # transformers builds the config offline without remote code
    if key not in NOT_BUILT_IN:
        from transformers import AutoConfig

        conf = AutoConfig.from_pretrained(out, local_files_only=True, trust_remote_code=False)
        text_conf = conf.get_text_config() if hasattr(conf, "get_text_config") else conf
        assert text_conf.num_hidden_layers == len(kept)


def test_no_mtp_drops_heads_and_their_quant_entries(sparse_models, tmp_path):
    root = sparse_models("glm_moe_dsa")
    inv, plan = inventory_and_plan(root, ["0,6,7"], mtp=False)
    cfg = plan.new_documents["config.json"]
    assert cfg["num_nextn_predict_layers"] == 0
    assert not any("layers.3." in e for e in cfg["compression_config"]["ignore"])
    assert not any("layers.78" in e for e in cfg["compression_config"]["ignore"])
    assert any(w.message.startswith("MTP / draft heads dropped") for w in plan.warnings)
    assert [m.submodel for m in plan.mappings] == ["text"] * 3
    assert all(r == "MTP dropped" for t, r in plan.dropped if t.startswith("model.layers.78."))


def test_deepseek_fp8_mtp_moves_to_new_depth(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("deepseek_v3"), ["0,5,60"])
    assert plan.new_documents["config.json"]["first_k_dense_replace"] == 1
    renamed = dict(plan.renames)
    assert renamed["model.layers.61.eh_proj.weight"] == "model.layers.3.eh_proj.weight"
    assert renamed["model.layers.60.mlp.experts.7.down_proj.weight_scale_inv"] == "model.layers.2.mlp.experts.7.down_proj.weight_scale_inv"
    assert renamed["lm_head.weight"] == "lm_head.weight"
    assert len(plan.renames) + len(plan.dropped) == inv.total_tensors


def test_qwen3_next_relative_mtp_is_not_renamed(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("qwen3_next"), ["3,4"])
    renamed = dict(plan.renames)
    assert renamed["mtp.layers.0.mlp.gate.weight"] == "mtp.layers.0.mlp.gate.weight"
    assert renamed["mtp.fc.weight"] == "mtp.fc.weight"
    assert plan.new_documents["config.json"]["layer_types"] == ["full_attention", "linear_attention"]


# --- manual selections: warnings and blocking errors ------------------------------------
def test_dropping_the_only_instance_of_a_path_is_named(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("qwen3_next"), ["0,1"])  # linear only: no full attention
    assert not plan.errors
    lost = [c for c in plan.omitted if c.submodel == "text"]
    assert lost and lost[0].kind.startswith("full") and lost[0].bytes_dropped > 0


def test_gpt_oss_parity_is_a_blocking_error_with_a_fix(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("gpt_oss"), ["1,2"])
    assert plan.errors
    assert "even" in plan.errors[0].fix and "new layer 0 (original 1" in plan.errors[0].message


def test_dsa_shared_layer_needs_an_earlier_full_one(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("glm_moe_dsa"), ["7"])
    msgs = " ".join(i.message for i in plan.errors)
    assert "reuses the previous layer's top-k" in msgs
    assert "keep an earlier full-indexer layer (e.g. 6)" in " ".join(i.fix for i in plan.errors)


def test_dense_after_moe_is_refused(tmp_path):
    """With moe_layer_freq 2, dense layers interleave with MoE ones; first_k_dense_replace
    can only express a dense prefix, so a kept dense layer after a kept MoE layer is refused."""
    cfg = dict(LAYOUTS["deepseek_v3"](num_layers=6, num_experts=4, hidden_size=256).config)
    cfg.update(first_k_dense_replace=1, moe_layer_freq=2)
    root = tmp_path / "cfg-only"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(cfg))
    inv, plan = inventory_and_plan(root, ["2,3"])  # 2 is MoE, 3 is dense
    assert any("dense layer 3 would follow an MoE layer" in i.message for i in plan.errors)
    inv, plan = inventory_and_plan(root, ["1,2,4"])  # dense, MoE, MoE: expressible with freq reset to 1
    assert not plan.errors
    assert plan.new_documents["config.json"]["moe_layer_freq"] == 1
    assert plan.new_documents["config.json"]["first_k_dense_replace"] == 1


def test_moe_required_families(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("glm4_moe"), ["0,1"])
    assert any("no MoE layer kept" in i.message for i in plan.errors)


def test_jamba_period_rule_solved_or_refused(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("jamba"), ["3,4,12"])  # attention would sit at new 1 and 2
    assert any("no period/offset" in i.message for i in plan.errors)
    inv, plan = inventory_and_plan(sparse_models("jamba"), ["0,1,4"])
    cfg = plan.new_documents["config.json"]
    assert not plan.errors and (cfg["attn_layer_period"], cfg["attn_layer_offset"]) == (3, 2)


def test_unknown_layers_and_submodels(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("qwen3"), ["0,99"])
    assert any("layer(s) 99 do not exist" in i.message for i in plan.errors)
    inv, plan = inventory_and_plan(sparse_models("qwen3"), ["vision=0"])
    assert any("no submodel named 'vision'" in i.message for i in plan.errors)


def test_qwen3_vl_deepstack_needs_enough_text_layers(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("qwen3_vl"))
    assert len(plan.kept["text"]) == 3 and not plan.warnings  # auto keeps one per deepstack level
    inv, plan = inventory_and_plan(sparse_models("qwen3_vl"), ["0"])
    assert any("deepstack" in w.message and "keep at least 3" in w.fix for w in plan.warnings)


def test_vision_depth_trim_remaps_index_lists(sparse_models):
    inv, plan = inventory_and_plan(sparse_models("qwen2_5_vl"), ["0", "vision=0,7,8,31"])
    vc = plan.new_documents["config.json"]["vision_config"]
    assert vc["depth"] == 4 and vc["fullatt_block_indexes"] == [1, 3]
    inv, plan = inventory_and_plan(sparse_models("qwen3_vl"), ["vision=0,8,16"])
    assert any("deepstack blocks [24]" in i.message for i in plan.errors)


# --- quantization forms -----------------------------------------------------------------
def _with_quant(tmp_path, key, quant: dict | None = None, side: dict | None = None, **kw):
    layout = LAYOUTS[key](**kw)
    if quant is not None:
        layout.config["quantization_config"] = quant
    layout.extra_files.update(side or {})
    return write_checkpoint(tmp_path / key, layout, data="sparse", tokenizer=False)


def test_fp8_modules_to_not_convert_and_regex_warning(tmp_path):
    quant = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "modules_to_not_convert": ["lm_head", "model.layers.0.mlp.gate", "model.layers.5.mlp.gate", "re:.*layers\\.1[0-9]\\..*"],
    }
    root = _with_quant(tmp_path, "qwen3_moe", quant, num_layers=8, num_experts=4, hidden_size=256)
    inv, plan = inventory_and_plan(root, ["2,5"])
    after = plan.new_documents["config.json"]["quantization_config"]["modules_to_not_convert"]
    assert after == ["lm_head", "model.layers.1.mlp.gate", "re:.*layers\\.1[0-9]\\..*"]
    assert any("contains digits" in w.message for w in plan.warnings)


def test_side_files_are_rewritten_and_copied(tmp_path):
    side = {
        "hf_quant_config.json": {
            "producer": {"name": "modelopt"},
            "quantization": {
                "quant_algo": "MIXED_PRECISION",
                "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": "FP8"}, "model.layers.3.self_attn.o_proj": {"quant_algo": "NVFP4"}},
                "exclude_modules": ["lm_head", "model.layers.2.mlp.gate"],
            },
        }
    }
    root = _with_quant(tmp_path, "qwen3_moe", None, side, num_layers=4, num_experts=4, hidden_size=256)
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}, "normalizer": None, "added_tokens": []}))
    inv, plan = inventory_and_plan(root, ["2,3"])
    out = write_dummy(plan, tmp_path / "out").path
    doc = json.loads((out / "hf_quant_config.json").read_text())
    assert doc["quantization"]["quantized_layers"] == {"model.layers.1.self_attn.o_proj": {"quant_algo": "NVFP4"}}
    assert doc["quantization"]["exclude_modules"] == ["lm_head", "model.layers.0.mlp.gate"]
    assert inv.quantization.location == "hf_quant_config.json"


def test_awq_substring_entries(tmp_path):
    """AWQ matches modules_to_not_convert by substring: "model.layers.1" also hits layers
    10-13. Renumbering keeps the entry on its layer and warns about such collisions."""
    quant = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["model.layers.11"]}
    root = _with_quant(tmp_path, "qwen3", quant, num_layers=14, hidden_size=256)
    inv, plan = inventory_and_plan(root, ["0,11"])
    assert plan.new_documents["config.json"]["quantization_config"]["modules_to_not_convert"] == ["model.layers.1"]
    assert not any("substring" in w.message for w in plan.warnings)
    inv, plan = inventory_and_plan(root, ["0-10,11,12"])  # 11 stays 11; 12 layers: no collision
    assert plan.new_documents["config.json"]["quantization_config"]["modules_to_not_convert"] == ["model.layers.11"]
    inv, plan = inventory_and_plan(root, ["2"])
    assert plan.new_documents["config.json"]["quantization_config"]["modules_to_not_convert"] == []
    root2 = _with_quant(tmp_path / "b", "qwen3", dict(quant, modules_to_not_convert=["model.layers.1"]), num_layers=14, hidden_size=256)
    inv, plan = inventory_and_plan(root2, ["0-12"])  # "model.layers.1" now also matches 10, 11, 12
    assert any("also matches model.layers.10" in w.message for w in plan.warnings)


# --- writing: never overwrite, never inside the source, never partial ------------------
def test_existing_output_is_never_overwritten(sparse_models, tmp_path):
    root = sparse_models("qwen3")
    inv, plan = inventory_and_plan(root)
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="already exists"):
        write_dummy(plan, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # the default name moves aside instead
    first = write_dummy(plan, default_output_dir(plan, tmp_path, "dummy")).path
    second = default_output_dir(plan, tmp_path, "dummy")
    assert first.name == "qwen3-dummy-1layers" and second.name == "qwen3-dummy-1layers-2"
    assert first.parent == tmp_path / "tools" / "batched_test" / "models"


def test_output_inside_source_is_refused(sparse_models):
    root = sparse_models("qwen3")
    inv, plan = inventory_and_plan(root)
    with pytest.raises(OutputError, match="inside the source"):
        write_dummy(plan, root / "trimmed")
    assert not (root / "trimmed").exists()


def test_failure_mid_write_leaves_nothing(tmp_path):
    root = write_checkpoint(tmp_path / "src", LAYOUTS["qwen3"](num_layers=2, hidden_size=256), data="sparse")
    os.symlink(tmp_path / "vanished", root / "merges.txt")  # a tokenizer asset that cannot be read
    src = open_source(root)
    from mxtrim_tui.core.read.source import FileKind, SourceFile

    src.files.append(SourceFile("merges.txt", FileKind.TOKENIZER, 0))
    plan = build_plan(build_inventory(src))
    with pytest.raises(OutputError, match="writing failed, partial output removed: .*merges.txt"):
        write_dummy(plan, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_symlinked_assets_are_dereferenced(tmp_path):
    root = write_checkpoint(tmp_path / "src", LAYOUTS["qwen3"](num_layers=2, hidden_size=256), data="sparse")
    blob = tmp_path / "blob"
    (root / "tokenizer_config.json").rename(blob)
    os.symlink(blob, root / "tokenizer_config.json")
    inv, plan = inventory_and_plan(root)
    out = write_dummy(plan, tmp_path / "out").path
    assert not (out / "tokenizer_config.json").is_symlink()
    assert (out / "tokenizer_config.json").read_bytes() == blob.read_bytes()
    assert "dereferenced" in (out / "README.md").read_text()


@pytest.mark.parametrize("serve", [None, BudgetInputs(tp=2, max_model_len=2048, max_num_seqs=2)])
def test_dummy_size_estimate_is_exact(sparse_models, tmp_path, serve):
    root = sparse_models("deepseek_v3")
    plan = plan_for(root, ["0,3"])
    out = tmp_path / "models" / "trimmed"
    estimate = estimate_dummy_bytes(plan, out, serve)
    assert not out.exists()  # estimating writes nothing
    written = write_dummy(plan, out, serve=serve).path
    sizes = [p.stat().st_size for p in written.rglob("*") if p.is_file()]
    assert len(sizes) > 3 and estimate == sum(sizes)


# --- CLI --------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_plan_writes_nothing_and_trim_reports_json(sparse_models, tmp_path):
    root = sparse_models("deepseek_v3")
    before = set(tmp_path.iterdir())
    out = run_cli("plan", str(root), "--keep", "0,3", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "mxtrim.plan/1" and doc["kept"] == {"text": [0, 3]} and doc["ok"]
    assert set(tmp_path.iterdir()) == before
    out = run_cli("trim", str(root), "--mode", "dummy", "--workspace", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    path = Path(doc["output"])
    assert path.exists() and path.name == "deepseek_v3-dummy-2layers"
    assert [(m["new"], m["old"]) for m in doc["mapping"] if m["submodel"] == "text"] == [(0, 0), (1, 3)]
    assert json.loads((path / "mxtrim-plan.json").read_text())["kept"] == {"text": [0, 3]}


@pytest.mark.slow
def test_cli_blocking_errors_and_bad_specs(sparse_models, tmp_path):
    root = sparse_models("gpt_oss")
    out = run_cli("trim", str(root), "--mode", "dummy", "--keep", "1,2", "--out", str(tmp_path / "o"))
    assert out.returncode == 1 and "nothing written" in out.stderr and not (tmp_path / "o").exists()
    out = run_cli("plan", str(root), "--keep", "1-x")
    assert out.returncode == 2 and "not an index" in out.stderr
    out = run_cli("plan", str(root), "--keep", "0,1")
    assert out.returncode == 0 and "Coverage" in out.stdout


@pytest.mark.slow
def test_fetch_list_names_exactly_the_shards_a_weights_trim_reads(tmp_path):
    """--fetch-list: the shards holding layers 0 and 3 and the non-layer tensors, from the
    index; the real-weight trim's manifest reads from exactly those."""
    root = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=6, hidden_size=64, vocab_size=128),
                            data="random", max_shard_bytes=40_000)
    weight_map = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
    expected = sorted({shard for name, shard in weight_map.items()
                       if ".layers." not in name or ".layers.0." in name or ".layers.3." in name})
    assert 1 < len(expected) < len(set(weight_map.values()))
    listed = run_cli("plan", str(root), "--keep", "0,3", "--fetch-list")
    assert listed.returncode == 0 and listed.stdout.splitlines() == expected, listed.stderr
    doc = json.loads(run_cli("plan", str(root), "--keep", "0,3", "--json").stdout)
    assert [s["file"] for s in doc["needed_shards"]] == expected
    assert all(s["present"] and s["file_bytes"] == (root / s["file"]).stat().st_size for s in doc["needed_shards"])
    out = tmp_path / "out"
    assert run_cli("trim", str(root), "--mode", "weights", "--keep", "0,3", "--out", str(out)).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted({row["source_file"] for row in manifest["tensors"]}) == expected


def test_a_declared_mtp_layer_without_tensors_is_not_claimed(sparse_models):
    """Qwen3-Next shape: the config declares an MTP layer, the checkpoint holds none of its
    tensors. No head is kept, the plan says why, and the output config declares none."""
    root = sparse_models("qwen3_next", mtp_layers=0)
    inv, plan = inventory_and_plan(root, ["3,4"])
    assert inv.mtp_count == 1 and not inv.submodels["mtp"].layers
    assert plan.mtp_kept is False
    assert any("declares 1 MTP layer" in i.message and "no MTP" in i.message for i in plan.warnings)
    assert plan.new_documents["config.json"]["num_nextn_predict_layers"] == 0
    assert not any(c.submodel == "mtp" and c.kept for c in plan.coverage)
    # with the tensors present the head is kept, as before
    _, with_mtp = inventory_and_plan(sparse_models("qwen3_next"), ["3,4"])
    assert with_mtp.mtp_kept is True


@pytest.mark.slow
def test_the_reports_serve_command_runs_a_kept_mtp_layer(sparse_models, tmp_path):
    """A kept MTP layer runs only as speculative decoding's drafter: the README's command says so."""
    _, plan = inventory_and_plan(sparse_models("deepseek_v3"), ["0,5"])
    assert plan.mtp_kept
    readme = (write_dummy(plan, tmp_path / "with-mtp").path / "README.md").read_text()
    assert """--speculative-config '{"method":"mtp","num_speculative_tokens":1}'""" in readme
    from mxtrim_tui.core.write.report import serve_command

    _, without = inventory_and_plan(sparse_models("deepseek_v3"), ["0,5"], mtp=False)
    assert "--speculative-config" in serve_command(plan, tmp_path / "x", "dummy")
    assert "--speculative-config" not in serve_command(without, tmp_path / "x", "dummy")


@pytest.mark.slow
def test_gpt2_of_identical_layers_keeps_one_layer(tmp_path):
    """A string the length of the stack ("gelu_new", 8 characters at 8 layers) is one value, not
    a per-layer list: GPT-2's eight identical layers are one kind, and the automatic set is one
    layer (it was all eight, each "activation_function=<one letter>")."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=8, n_embd=32, n_head=2, n_positions=64, vocab_size=128)
    assert len(cfg.activation_function) == 8
    src = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(cfg).save_pretrained(src)
    proc = run_cli("plan", str(src), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kept"]["text"] == [0], doc["kept"]
    assert "activation_function=" not in proc.stdout


def test_a_module_list_given_as_a_string_is_refused_naming_where(tmp_path):
    """quantization_config.modules_to_not_convert as "lm_head" (not ["lm_head"]): never ignored."""
    from synth.layouts.llama import llama3

    src = write_checkpoint(tmp_path / "src", llama3(num_layers=4, hidden_size=64, vocab_size=128), data="sparse")
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "modules_to_not_convert": "model.layers.1.mlp"}
    (src / "config.json").write_text(json.dumps(cfg))
    proc = run_cli("plan", str(src))
    assert proc.returncode != 0, proc.stdout[-2000:]
    shown = proc.stdout + proc.stderr
    assert "config.json: quantization_config.modules_to_not_convert is a string" in shown and '["model.layers.1.mlp"]' in shown, shown[-2000:]


def _exaone(root: Path, config: dict) -> Path:
    """The original EXAONE 3.x layout: Llama layers stored as transformer.h.N."""
    from synth.checkpoint import Layout

    H, V, L, I = 64, 128, 4, 128
    tensors = [("transformer.wte.weight", "BF16", (V, H))]
    for i in range(L):
        p = f"transformer.h.{i}."
        tensors += [(p + "ln_1.weight", "BF16", (H,)), (p + "ln_2.weight", "BF16", (H,))]
        tensors += [(p + f"attn.attention.{n}.weight", "BF16", (H, H)) for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
        tensors += [(p + "mlp.c_fc_0.weight", "BF16", (I, H)), (p + "mlp.c_fc_1.weight", "BF16", (I, H)), (p + "mlp.c_proj.weight", "BF16", (H, I))]
    tensors += [("transformer.ln_f.weight", "BF16", (H,)), ("lm_head.weight", "BF16", (V, H))]
    cfg = {"hidden_size": H, "num_layers": L, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": I,
           "vocab_size": V, **config}
    return write_checkpoint(root, Layout("exaone", cfg, tensors), data="sparse", tokenizer=False)


@pytest.mark.slow
def test_the_original_exaone_layout_is_read_and_a_layout_mismatch_names_where_layers_were_sought(tmp_path):
    src = _exaone(tmp_path / "exaone", {"architectures": ["ExaoneForCausalLM"], "model_type": "exaone"})
    doc = json.loads(run_cli("plan", str(src), "--keep", "0,2", "--json").stdout)
    assert doc["kept"]["text"] == [0, 2]
    assert {e["field"]: e["after"] for e in doc["config_edits"]}.get("num_layers") == 2, doc["config_edits"]
    # the same tensors under a Llama config: no model.layers.N. tensor; the refusal says so, and
    # never prints an empty list of layers or an empty fix
    llama = _exaone(tmp_path / "as-llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    for keep in ([], ["--keep", "0,1"]):
        proc = run_cli("plan", str(llama), *keep)
        assert proc.returncode != 0
        shown = " ".join((proc.stdout + proc.stderr).split())
        assert "no tensor of the checkpoint is named model.layers.N." in shown, shown[-1500:]
        assert "choose indices in )" not in shown and "this model has: )" not in shown and "layers none" not in shown
