"""ModelSource: configs, index cross-checks, path escapes, file classification, symlinks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine_support import load_index
from mxtrim_tui.core.errors import IndexConsistencyError, InputError, SafetensorsFormatError
from mxtrim_tui.core.read.source import FileKind, open_source
from synth.checkpoint import Layout, write_checkpoint

CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8}


def small_llama(tmp_path, name="m", shards=3, **kw):
    tensors = [("model.embed_tokens.weight", "BF16", (16, 8))]
    for i in range(2):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", "BF16", (8,)),
            (p + "self_attn.q_proj.weight", "BF16", (8, 8)),
            (p + "self_attn.k_proj.weight", "BF16", (8, 8)),
            (p + "self_attn.v_proj.weight", "BF16", (8, 8)),
            (p + "self_attn.o_proj.weight", "BF16", (8, 8)),
            (p + "mlp.gate_proj.weight", "BF16", (16, 8)),
            (p + "mlp.up_proj.weight", "BF16", (16, 8)),
            (p + "mlp.down_proj.weight", "BF16", (8, 16)),
        ]
    tensors += [("model.norm.weight", "BF16", (8,)), ("lm_head.weight", "BF16", (16, 8))]
    layout = Layout("tiny-llama", dict(CFG), tensors)
    total = layout.total_bytes
    return write_checkpoint(tmp_path / name, layout, data="random", max_shard_bytes=total // shards + 1, tokenizer=False, **kw)


def save_index(root, doc):
    (root / "model.safetensors.index.json").write_text(json.dumps(doc))


def test_reads_sharded_checkpoint_and_classifies_files(tmp_path):
    root = small_llama(tmp_path)
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}, "normalizer": None, "added_tokens": []}))
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    (root / "generation_config.json").write_text("{}")
    (root / "chat_template.jinja").write_text("{{ messages }}")
    (root / "preprocessor_config.json").write_text("{}")
    (root / "README.md").write_text("# model")
    (root / "notes.xyz").write_text("?")
    src = open_source(root)
    kinds = {f.path: f.kind for f in src.files}
    assert len(src.shards) == 3 and src.index_file is not None
    assert src.tensor_count == 19
    assert kinds["tokenizer.json"] is FileKind.TOKENIZER
    assert kinds["tokenizer_config.json"] is FileKind.TOKENIZER_CONFIG
    assert kinds["generation_config.json"] is FileKind.GENERATION_CONFIG
    assert kinds["chat_template.jinja"] is FileKind.CHAT_TEMPLATE
    assert kinds["preprocessor_config.json"] is FileKind.PROCESSOR_CONFIG
    assert kinds["README.md"] is FileKind.DOCUMENTATION
    assert kinds["notes.xyz"] is FileKind.UNKNOWN
    assert all(kinds[s] is FileKind.WEIGHTS for s in src.shards)


def test_missing_config_is_one_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty/config.json: config.json not found"):
        open_source(tmp_path / "empty")


def test_config_not_json(tmp_path):
    root = small_llama(tmp_path)
    (root / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="config.json is not valid JSON"):
        open_source(root)


def test_config_nested_too_deeply_is_one_clear_error(tmp_path):
    root = small_llama(tmp_path)
    (root / "config.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(InputError, match=r"config\.json: config\.json is nested too deeply to parse"):
        open_source(root)
    (root / "config.json").write_text(json.dumps(CFG))
    (root / "generation_config.json").write_text("[" * 5000 + "]" * 5000)  # only classified
    assert next(f for f in open_source(root).files if f.path == "generation_config.json").kind is FileKind.UNKNOWN


def test_index_naming_a_missing_shard_is_a_partial_source_not_an_error(tmp_path):
    root = small_llama(tmp_path)
    whole = open_source(root)
    shard = sorted(root.glob("model-*.safetensors"))[1]
    shard.unlink()
    src = open_source(root)
    assert src.state == "partial" and list(src.absent_shards) == [shard.name]
    assert src.state_detail == f"partial download: {len(whole.shards) - 1} of {len(whole.shards)} shards present"
    # every name the index gives is still known, with its shard; only bytes are not
    assert src.tensor_shard == whole.tensor_shard and src.tensor_count == whole.tensor_count
    assert src.tensor_bytes == whole.tensor_bytes  # the index's total_size
    absent_names = [t for t, r in whole.tensor_shard.items() if r == shard.name]
    assert not any(map(src.is_present, absent_names)) and src.tensor(absent_names[0]).nbytes == 0
    assert any(shard.name not in w and "not present" in w for w in src.warnings)


def test_index_with_no_shard_present_is_an_index_only_source(tmp_path):
    root = small_llama(tmp_path)
    for shard in root.glob("model-*.safetensors"):
        shard.unlink()
    src = open_source(root)
    assert src.state == "index only" and not src.shards and src.tensor_count > 0
    assert not any("config-only" in w for w in src.warnings)
    (root / "model.safetensors.index.json").unlink()
    assert open_source(root).state == "config only" and open_source(root).tensor_bytes is None


def test_partial_source_still_refuses_a_broken_present_shard_and_a_short_total(tmp_path):
    root = small_llama(tmp_path)
    shards = sorted(root.glob("model-*.safetensors"))
    shards[0].unlink()
    data = shards[1].read_bytes()
    shards[1].write_bytes(data[: len(data) - 4])  # truncated: an error for anything that reads it
    with pytest.raises(InputError, match=shards[1].name):
        open_source(root)
    shards[1].write_bytes(data)
    doc = load_index(root)
    doc["metadata"]["total_size"] = 8  # less than the shards present hold
    (root / "model.safetensors.index.json").write_text(json.dumps(doc))
    with pytest.raises(IndexConsistencyError, match="the shards present already hold"):
        open_source(root)


def test_index_maps_tensor_the_shard_does_not_hold(tmp_path):
    root = small_llama(tmp_path)
    doc = load_index(root)
    doc["weight_map"]["model.layers.9.mlp.up_proj.weight"] = next(iter(doc["weight_map"].values()))
    save_index(root, doc)
    with pytest.raises(IndexConsistencyError, match=r"'model.layers.9.mlp.up_proj.weight' is mapped to .* does not hold it"):
        open_source(root)


def test_index_points_tensor_at_the_wrong_shard(tmp_path):
    root = small_llama(tmp_path)
    doc = load_index(root)
    files = sorted(set(doc["weight_map"].values()))
    doc["weight_map"]["lm_head.weight"] = files[0]
    save_index(root, doc)
    with pytest.raises(IndexConsistencyError, match=r"'lm_head.weight' .* \(it is in model-00003"):
        open_source(root)


def test_shard_tensor_missing_from_index(tmp_path):
    root = small_llama(tmp_path)
    doc = load_index(root)
    del doc["weight_map"]["model.norm.weight"]
    save_index(root, doc)
    with pytest.raises(IndexConsistencyError, match="'model.norm.weight' is in the shard but not in the index"):
        open_source(root)


def test_total_size_mismatch(tmp_path):
    root = small_llama(tmp_path)
    doc = load_index(root)
    doc["metadata"]["total_size"] += 2
    save_index(root, doc)
    with pytest.raises(IndexConsistencyError, match="metadata.total_size"):
        open_source(root)


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside.safetensors", "sub/../../x.safetensors"])
def test_shard_path_escaping_the_directory_is_refused(tmp_path, bad):
    root = small_llama(tmp_path)
    (tmp_path / "outside.safetensors").write_bytes((root / "model-00001-of-00003.safetensors").read_bytes())
    doc = load_index(root)
    doc["weight_map"]["model.embed_tokens.weight"] = bad
    save_index(root, doc)
    with pytest.raises(IndexConsistencyError, match="absolute|escapes"):
        open_source(root)


def test_corrupt_shard_names_shard_and_problem(tmp_path):
    root = small_llama(tmp_path)
    shard = root / "model-00002-of-00003.safetensors"
    with open(shard, "r+b") as fh:
        fh.truncate(shard.stat().st_size - 3)
    with pytest.raises(SafetensorsFormatError, match="model-00002-of-00003.safetensors: file is truncated"):
        open_source(root)


def test_unindexed_single_file_and_stray_files(tmp_path):
    root = small_llama(tmp_path, shards=1)
    assert (root / "model.safetensors").exists()
    src = open_source(root)
    assert src.index_file is None and list(src.shards) == ["model.safetensors"]


def test_stray_safetensors_next_to_index_is_reported(tmp_path):
    root = small_llama(tmp_path)
    (root / "extra.safetensors").write_bytes((root / "model-00001-of-00003.safetensors").read_bytes())
    src = open_source(root)
    assert "extra.safetensors" not in src.shards
    assert any("extra.safetensors" in w and "not referenced" in w for w in src.warnings)


def test_sentencepiece_model_is_a_tokenizer_by_content_not_suffix(tmp_path):
    root = small_llama(tmp_path)
    # A real SentencePiece ModelProto starts: field 1 (pieces) -> nested field 1 (piece string).
    piece = b"\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02"
    (root / "tokenizer.model").write_bytes(b"\x0a" + bytes([len(piece)]) + piece)
    (root / "draft.model").write_bytes(b"PK\x03\x04 definitely not sentencepiece")
    kinds = {f.path: (f.kind, f.detail) for f in open_source(root).files}
    assert kinds["tokenizer.model"] == (FileKind.TOKENIZER, "SentencePiece model")
    assert kinds["draft.model"][0] is FileKind.UNKNOWN


def test_custom_code_is_listed_and_never_executed(tmp_path):
    root = small_llama(tmp_path)
    marker = tmp_path / "executed"
    (root / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (root / "helper.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    cfg = json.loads((root / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (root / "config.json").write_text(json.dumps(cfg))
    # the CLI path too, in a real subprocess
    out = subprocess.run([sys.executable, "-m", "mxtrim_tui", "inspect", str(root), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    files = {f["path"]: f for f in json.loads(out.stdout)["files"]}
    assert files["modeling_evil.py"]["kind"] == "custom code"
    assert "referenced by auto_map" in files["modeling_evil.py"]["detail"]
    assert "not referenced" in files["helper.py"]["detail"]
    assert not marker.exists()


def test_symlinked_assets_are_followed_and_reported(tmp_path):
    root = small_llama(tmp_path)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "abc123").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    os.symlink(blobs / "abc123", root / "tokenizer_config.json")
    shard = root / "model-00001-of-00003.safetensors"
    (blobs / "shard1").write_bytes(shard.read_bytes())
    shard.unlink()
    os.symlink(blobs / "shard1", shard)
    src = open_source(root)
    files = {f.path: f for f in src.files}
    assert files["tokenizer_config.json"].kind is FileKind.TOKENIZER_CONFIG
    assert files["tokenizer_config.json"].symlink_target == str(blobs / "abc123")
    assert files[shard.name].is_symlink and shard.name in src.shards


def test_broken_symlinked_shard_is_an_error(tmp_path):
    root = small_llama(tmp_path)
    shard = root / "model-00003-of-00003.safetensors"
    shard.unlink()
    os.symlink(tmp_path / "gone", shard)
    with pytest.raises(InputError, match="broken symlink"):
        open_source(root)


def test_nested_and_side_quant_configs(tmp_path):
    root = small_llama(tmp_path)
    cfg = json.loads((root / "config.json").read_text())
    cfg["text_config"] = {"num_hidden_layers": 2}
    cfg["vision_config"] = {"depth": 4}
    (root / "config.json").write_text(json.dumps(cfg))
    (root / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128}))
    src = open_source(root)
    assert set(src.nested_configs) == {"text_config", "vision_config"}
    assert src.side_quant_configs["quantize_config.json"]["bits"] == 4
    assert {f.path: f.kind for f in src.files}["quantize_config.json"] is FileKind.QUANT_CONFIG


def test_source_is_never_modified(tmp_path):
    root = small_llama(tmp_path)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}
    open_source(root)
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}
    assert before == after


def test_a_stray_copy_beside_the_shards_is_never_an_error(tmp_path):
    """A corrupt file the index does not name ("consolidated.safetensors", or a leftover
    numbered shard) is not read as a shard; it is listed, with a warning."""
    root = small_llama(tmp_path)
    (root / "consolidated.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
    (root / "model-00009-of-00009.safetensors").write_bytes(b"\xff" * 16)
    src = open_source(root)
    assert sorted(src.shards) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert any("consolidated.safetensors" in w and "not referenced" in w for w in src.warnings)
    assert src.tensor_count == 19 and src.tensor_shard["lm_head.weight"] in src.shards


def test_a_tensor_held_by_two_shards_is_named(tmp_path):
    root = small_llama(tmp_path)
    first, second = sorted(root.glob("model-*.safetensors"))[:2]
    second.write_bytes(first.read_bytes())  # the second shard now repeats the first one's tensors
    with pytest.raises(InputError, match=rf"{second.name}: tensor 'model.embed_tokens.weight' also appears in {first.name} \(duplicate across shards\)"):
        open_source(root)


def _compact_shard(path, names):
    """A shard spelled as the reference writer spells it, one U8 byte per name, the names as
    given (a name may repeat)."""
    body = ",".join(f'"{n}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}' for i, n in enumerate(names))
    raw = ("{" + body + "}").encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(len(names)))


@pytest.mark.parametrize("names", [["a.weight", "b.weight", "a.weight"], ["a.weight", "__metadata__"]])
def test_a_shard_holding_a_name_twice_fails_reading_the_directory_as_it_fails_alone(tmp_path, names):
    """The readers check each header's names for repeats together, by one set of every shard's
    names: a shard whose own names repeat still gets the error reading it alone gives."""
    from mxtrim_tui.core.read.safetensors_io import read_header

    root = small_llama(tmp_path)
    shard = sorted(root.glob("model-*.safetensors"))[-1]
    kept = read_header(shard).names
    _compact_shard(shard, names)
    index = load_index(root)
    index["weight_map"] = {n: s for n, s in index["weight_map"].items() if n not in kept} | {n: shard.name for n in names}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    with pytest.raises(InputError) as alone:
        read_header(shard)
    with pytest.raises(InputError) as raised:
        open_source(root)
    assert str(raised.value) == str(alone.value) and shard.name in str(raised.value)


def test_a_stray_copy_holding_the_same_names_as_a_shard_is_not_read_as_one(tmp_path):
    """An unindexed copy of a shard repeats its names: the shards the index names are read as
    before, and the copy is listed with a warning."""
    root = small_llama(tmp_path)
    before = open_source(root)
    first = sorted(root.glob("model-*.safetensors"))[0]
    (root / "consolidated.safetensors").write_bytes(first.read_bytes())
    src = open_source(root)
    assert list(src.shards) == list(before.shards) and src.tensor_shard == before.tensor_shard
    assert any("consolidated.safetensors" in w and "not referenced" in w for w in src.warnings)
