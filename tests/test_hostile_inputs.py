"""Hostile model directories and arguments: FIFOs, devices, link loops, oversized or odd
--keep values. Each gets one clear error naming the file and the problem, without blocking."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine_support import run_cli
from synth.checkpoint import write_checkpoint
from synth.layouts.llama import llama3


@pytest.fixture
def source(tmp_path) -> Path:
    return write_checkpoint(tmp_path / "src", llama3(num_layers=2, hidden_size=64, vocab_size=128), data="random")


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "model.safetensors"])
def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(source, name):
    target = source / name
    if not target.exists():
        pytest.skip(f"{name} not written by the layout")
    _replace_with_fifo(target)
    r = run_cli("inspect", str(source), timeout=60)
    if name == "tokenizer_config.json":  # an asset: reported, never read or copied
        assert r.returncode == 0, r.stderr
        assert f"{name}: not a regular file" in r.stdout + r.stderr
    else:
        assert r.returncode == 1
        assert name in r.stderr and "FIFO" in r.stderr
        assert r.stderr.count("\n") == 1  # one line
        assert "Traceback" not in r.stderr


def test_dev_zero_as_config_is_refused(source):
    (source / "config.json").unlink()
    (source / "config.json").symlink_to("/dev/zero")
    r = run_cli("inspect", str(source), timeout=60)
    assert r.returncode == 1 and "config.json" in r.stderr and "character device" in r.stderr


def test_a_symlink_loop_is_named_not_a_traceback(source):
    (source / "loop.json").symlink_to(source / "loop.json")
    r = run_cli("inspect", str(source), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "loop.json: unreadable" in r.stdout + r.stderr
    (source / "x.safetensors").symlink_to(source / "x.safetensors")
    r = run_cli("inspect", str(source), timeout=60)
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("spec, says", [
    ("0-999999999", "past any model's depth"),
    ("١", "ASCII digits"),  # an Arabic-Indic digit one: int() would take it
    ("0-1-2", "ASCII digits"),
])
def test_keep_values_are_bounded_and_ascii(source, spec, says):
    r = run_cli("plan", str(source), "--keep", spec, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr


@pytest.mark.parametrize("field, value, says", [
    ("num_hidden_layers", "6", "'6' (a string)"),
    ("num_hidden_layers", 6.5, "6.5 (not a whole number)"),
    ("num_hidden_layers", True, "true (a boolean)"),
    ("num_hidden_layers", None, "null"),
    ("num_hidden_layers", float("nan"), "nan (not a number)"),
    ("num_attention_heads", 0, "0"),
    ("text_config", [1, 2], "(a list); it must be an object"),
    ("quantization_config", {"quant_method": "fp8", "weight_block_size": [0, 0]}, "weight_block_size"),
    ("quantization_config", {"quant_method": "awq", "group_size": 0}, "group_size"),
])
def test_nonsense_config_values_are_one_clear_error(source, field, value, says):
    import json

    cfg = json.loads((source / "config.json").read_text())
    cfg[field] = value
    (source / "config.json").write_text(json.dumps(cfg))  # NaN written as JSON's NaN, as Python reads it
    r = run_cli("plan", str(source), "--keep", "0", timeout=60)
    assert r.returncode == 1, r.stdout
    assert "config.json" in r.stderr and field in r.stderr and says in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("size", ["0", "1e400GB", "nanGB", "-5MB", "2TB"])
def test_max_shard_size_out_of_range_is_a_usage_error(source, tmp_path, size):
    r = run_cli("trim", str(source), "--mode", "weights", "--keep", "0", "--out", str(tmp_path / "o"), "--max-shard-size", size, timeout=60)
    assert r.returncode == 2 and "--max-shard-size" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_a_newline_in_a_file_name_keeps_the_error_on_one_line(tmp_path):
    src = write_checkpoint(tmp_path / "bad\nname", llama3(num_layers=2, hidden_size=64, vocab_size=128), data="random")
    (src / "config.json").write_text("{not json")
    r = run_cli("inspect", str(src), timeout=60)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "bad\\nname" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dummy", "weights"])
def test_a_file_name_that_is_not_utf8_is_copied_and_reported(source, tmp_path, mode):
    """A side file whose name is not UTF-8 (bytes 0xff 0xfe): copied under its exact name,
    listed with escapes in the report and the plan, which stay valid UTF-8 and JSON."""
    raw = b"recipe-\xff\xfe.yaml"
    (Path(os.fsdecode(os.fsencode(source) + b"/" + raw))).write_bytes(b"scheme: none\n")
    out = tmp_path / "out"
    r = run_cli("trim", str(source), "--mode", mode, "--keep", "0", "--out", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    assert raw in os.listdir(os.fsencode(out))
    readme = (out / "README.md").read_bytes().decode("utf-8")  # valid UTF-8
    assert "recipe-\\udcff\\udcfe.yaml" in readme
    plan = json.loads((out / "mxtrim-plan.json").read_bytes().decode("utf-8"))
    assert plan["output"] == str(out)


@pytest.mark.parametrize("bad", ["model-00001\x00.safetensors", "model-00001\n.safetensors"], ids=["NUL", "newline"])
def test_a_shard_name_no_file_can_have_is_refused_naming_the_index(tmp_path, bad):
    """Not taken for a partial download ("needs 1 shard that is not in the source"): a name with
    a NUL or a newline names no checkpoint file, and the index holding it is at fault."""
    src = write_checkpoint(tmp_path / "llama", llama3(num_layers=2, hidden_size=64, vocab_size=128), data="random",
                           max_shard_bytes=60_000, tokenizer=False)
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = bad
    index_path.write_text(json.dumps(index))
    for command in ("inspect", "plan"):
        proc = run_cli(command, str(src))
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert str(index_path) in proc.stderr and "names no checkpoint file" in proc.stderr, proc.stderr
        assert "not in the source" not in proc.stderr + proc.stdout
