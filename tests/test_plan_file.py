"""The plan as a document: `mxtrim plan --save FILE` writes it, `mxtrim trim --plan FILE` runs
exactly it, and a source that changed since is refused with nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine_support import REPO, run_cli
from mxtrim_tui.demo.build import build_demo

SERVE = ["--dp", "2", "--ep", "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "512", "--max-model-len", "1024"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["weights", "dummy"])
def test_a_saved_plan_writes_byte_for_byte_what_the_flags_write(demo, tmp_path, mode):
    plan_file = tmp_path / "p.json"
    saved = run_cli("plan", str(demo), "--keep", "0,2", *SERVE, "--mode", mode, "--save", str(plan_file))
    assert saved.returncode == 0, saved.stderr
    doc = json.loads(plan_file.read_text())
    assert doc["schema"] == "mxtrim.plan-file/1" and doc["mode"] == mode
    assert doc["selection"] == {"keep": ["0,2"], "mtp": None, "force": False}
    assert doc["serve"] == {"dp": "2", "expert_parallel": True, "kv_cache_dtype": "fp8", "max_num_batched_tokens": "512",
                            "max_model_len": "1024"}
    assert doc["review"]["kept"]["text"] == [0, 2] and doc["review"]["ok"] is True
    assert set(doc["source"]["pins"]["shards"]) == {p.name for p in demo.glob("*.safetensors")}
    assert "config.json" in doc["source"]["pins"]["files"]

    out = tmp_path / "out"
    same_minute = {"SOURCE_DATE_EPOCH": "1796342400"}  # the README's "Made by mxtrim on" line
    from_plan = run_cli("trim", "--plan", str(plan_file), "--out", str(out), env=same_minute)
    assert from_plan.returncode == 0, from_plan.stderr
    written = _tree(out)
    assert "Made by mxtrim on 2026-12-04 00:00 UTC." in written["README.md"].decode()
    shutil.rmtree(out)
    relative = os.path.relpath(demo, REPO)  # run_cli runs in the repository: SRC as a user types it
    from_flags = run_cli("trim", relative, "--keep", "0,2", *SERVE, "--mode", mode, "--out", str(out), env=same_minute)
    assert from_flags.returncode == 0, from_flags.stderr
    assert _tree(out) == written  # every file, byte for byte
    readme = written["README.md"].decode()
    for literal in ("--data-parallel-size 2", "--enable-expert-parallel", "--kv-cache-dtype fp8", "--max-num-batched-tokens 512"):
        assert literal in readme, literal


@pytest.mark.slow
def test_a_changed_source_is_refused_naming_what_changed(demo, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(demo, src)
    plan_file = tmp_path / "p.json"
    assert run_cli("plan", str(src), "--keep", "0", "--mode", "dummy", "--save", str(plan_file)).returncode == 0

    shard = sorted(src.glob("*.safetensors"))[0]
    raw = bytearray(shard.read_bytes())
    pos = raw.index(b'"format":"pt"') + len(b'"format":"p')
    raw[pos] = ord("T")  # one header byte: same length, still a valid file
    shard.write_bytes(bytes(raw))
    out = tmp_path / "out"
    r = run_cli("trim", "--plan", str(plan_file), "--out", str(out))
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert str(plan_file) in r.stderr and "source changed" in r.stderr and f"{shard.name}: its header differs" in r.stderr
    assert not out.exists()

    shard.write_bytes(bytes(raw).replace(b'"format":"pT"', b'"format":"pt"'))  # restored
    config = json.loads((src / "config.json").read_text())
    config["rope_theta"] = 1234.0
    (src / "config.json").write_text(json.dumps(config))
    r = run_cli("trim", "--plan", str(plan_file), "--out", str(out))
    assert r.returncode == 1 and "config.json: its content differs" in r.stderr and not out.exists()

    shutil.rmtree(src)
    r = run_cli("trim", "--plan", str(plan_file), "--out", str(out))
    assert r.returncode == 1 and "the directory is not there" in r.stderr and not out.exists()


def test_plan_files_are_never_overwritten_nor_saved_blocked(demo, tmp_path):
    plan_file = tmp_path / "p.json"
    plan_file.write_text("mine\n")
    cache = tmp_path.parent / f"{tmp_path.name}-cache"
    # refused at once: one line, no plan shown, no transformers check of it run (a check run
    # leaves its verdict in the cache)
    r = run_cli("plan", str(demo), "--keep", "0", "--save", str(plan_file), env={"XDG_CACHE_HOME": str(cache)})
    assert r.returncode == 1 and "already exists" in r.stderr and plan_file.read_text() == "mine\n"
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and not (cache / "mxtrim" / "checks").exists()
    r = run_cli("plan", str(demo), "--keep", "0", "--save", str(tmp_path / "no-such-folder" / "p.json"))
    assert r.returncode == 1 and r.stdout == "" and f"{tmp_path / 'no-such-folder'}: directory not found" in r.stderr
    blocked = tmp_path / "blocked.json"
    r = run_cli("plan", str(demo), "--keep", "99", "--save", str(blocked))
    assert r.returncode == 1 and "no plan file saved" in r.stderr and not blocked.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary left


@pytest.mark.parametrize("extra, message", [
    (["SRC"], "not SRC too"),
    (["--keep", "0"], "not --keep too"),
    (["--tp", "1"], "not --tp too"),
    (["--mode", "weights"], "--mode weights: the plan file's mode is dummy"),
])
@pytest.mark.slow
def test_a_plan_file_is_run_as_it_is(demo, tmp_path, extra, message):
    plan_file = tmp_path / "p.json"
    assert run_cli("plan", str(demo), "--keep", "0", "--mode", "dummy", "--save", str(plan_file)).returncode == 0
    extra = [str(demo) if e == "SRC" else e for e in extra]
    r = run_cli("trim", *extra, "--plan", str(plan_file), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema="mxtrim.plan/1"), "not a plan file of schema mxtrim.plan-file/1"),
    (lambda d: d["selection"].update(keep="0"), "selection.keep must be a list of --keep specs or null"),
    (lambda d: d.update(mode="fast"), "mode must be one of dummy, weights or null"),
    (lambda d: d["serve"].update(tp="two"), "serve.tp:"),
    (lambda d: d["serve"].update(speed="1"), "serve must be an object of"),
])
def test_a_malformed_plan_file_is_one_line_naming_it(demo, tmp_path, edit, message):
    plan_file = tmp_path / "p.json"
    assert run_cli("plan", str(demo), "--keep", "0", "--mode", "dummy", "--tp", "1", "--save", str(plan_file)).returncode == 0
    doc = json.loads(plan_file.read_text())
    edit(doc)
    plan_file.write_text(json.dumps(doc))
    r = run_cli("trim", "--plan", str(plan_file), "--out", str(tmp_path / "out"))
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and str(plan_file) in r.stderr and message in r.stderr, r.stderr


@pytest.mark.parametrize("typed", [[], ["--kv-cache-dtype", "auto"]])
def test_a_v4_output_records_the_kv_cache_dtype_its_command_passes(tmp_path, typed):
    """vLLM serves DeepSeek-V4 with an fp8 cache only, so the serve command passes
    --kv-cache-dtype fp8 (none typed, or auto): the output's plan file (mxtrim-plan.json) and
    its budget say the same, not "auto"."""
    import dsv4_support as v4

    src = v4.published_source(tmp_path / "v4")
    plan_file = tmp_path / "p.json"
    saved = run_cli("plan", str(src), "--keep", "0,2", *typed, "--mode", "dummy", "--save", str(plan_file))
    assert saved.returncode == 0, saved.stderr
    out = tmp_path / "out"
    trimmed = run_cli("trim", "--plan", str(plan_file), "--out", str(out))
    assert trimmed.returncode == 0, trimmed.stderr
    doc = json.loads((out / "mxtrim-plan.json").read_text())
    assert "--kv-cache-dtype fp8" in doc["serve"]["command"]
    assert doc["serve"]["kv_cache_dtype"] == "fp8" and doc["budget"]["inputs"]["kv_cache_dtype"] == "fp8"
    assert "--kv-cache-dtype fp8" in (out / "README.md").read_text()
