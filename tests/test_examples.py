"""`mxtrim examples`: the workspace's reduced models as they are now — source there and
unchanged, last validation and the environment it ran in against now, stale paths, shards
against their manifest — from JSON, text and sizes, never weights."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from engine_support import cli_argv, run_cli
from mxtrim_tui.demo.build import build_demo

MISSING = "/nonexistent/models/Qwen3-8B-smoke"


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_examples")]  # slow: its module fixture takes 15 to 20 s here; built once, on one worker (make's --dist loadgroup)

@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Three mxtrim outputs (one validated under vLLM 0.31.0, one whose source was moved away)
    and a hand-made example whose launch script names a path that is gone."""
    root = tmp_path_factory.mktemp("ws")
    demo = build_demo(root / "demo")
    models = root / "tools" / "batched_test" / "models"
    for name, mode in (("validated", "dummy"), ("weights", "weights")):
        r = run_cli("trim", str(demo), "--keep", "0,2", "--mode", mode, "--out", str(models / name))
        assert r.returncode == 0, r.stderr
    moved = root / "moved-src"
    shutil.copytree(demo, moved)
    r = run_cli("trim", str(moved), "--keep", "0", "--mode", "dummy", "--out", str(models / "orphan"))
    assert r.returncode == 0, r.stderr
    shutil.move(moved, root / "elsewhere")
    run = {"started": "2026-11-20T10:00:00+00:00", "ok": True, "mode": "dummy", "rows": [],
           "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.31.0"}, "transformers": {"version": "5.20.0"}}}}
    (models / "validated" / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [run]}))
    hand = models / "qwen3-hand"
    hand.mkdir()
    shutil.copy(demo / "config.json", hand / "config.json")
    shutil.copy(demo / "tokenizer_config.json", hand / "tokenizer_config.json")
    (hand / "serve.sh").write_text(f"#!/bin/sh\nvllm serve {MISSING} --load-format dummy\n")
    return root, models


def examples(folder, *extra) -> dict:
    r = run_cli("examples", str(folder), "--json", "--python", sys.executable, *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_each_reduced_model_is_reported_with_its_facts(workspace):
    root, models = workspace
    doc = examples(models)
    assert doc["schema"] == "mxtrim.examples/1"
    by = {e["name"]: e for e in doc["examples"]}
    assert sorted(by) == ["orphan", "qwen3-hand", "validated", "weights"]
    now = doc["environment_now"]["versions"]
    assert now["vllm"] is None and now["python"] == "%d.%d.%d" % sys.version_info[:3]

    validated = by["validated"]
    assert (validated["made_by"], validated["mode"], validated["layers"]) == ("mxtrim", "dummy", 2)
    assert validated["validation"]["started"] == "2026-11-20T10:00:00+00:00" and validated["validation"]["versions"]["vllm"] == "0.31.0"
    assert validated["drift"]["vllm"] == {"then": "0.31.0", "now": None}
    assert validated["drift"]["transformers"]["then"] == "5.20.0"
    assert validated["source"]["state"] == "present" and validated["problems"] == []

    weights = by["weights"]
    assert weights["mode"] == "weights" and weights["source"]["state"] == "unchanged" and weights["problems"] == []
    assert weights["validation"] is None and weights["drift"] == {}

    orphan = by["orphan"]
    assert orphan["source"]["state"] == "missing" and orphan["source"]["path"] == str(root / "moved-src")
    assert any(p.startswith("README.md: names ") and str(root / "moved-src") in p for p in orphan["problems"])

    hand = by["qwen3-hand"]
    assert hand["made_by"] == "hand" and hand["mode"] == "unknown" and hand["launch_scripts"] == ["serve.sh"]
    assert hand["problems"] == [f"serve.sh: names {MISSING}, which does not exist"]
    assert hand["layers"] == json.loads((models / "qwen3-hand" / "config.json").read_text())["num_hidden_layers"]


def test_a_changed_shard_or_source_shows(workspace, tmp_path):
    root, models = workspace
    folder = tmp_path / "models"
    shutil.copytree(models / "weights", folder / "weights")
    shard = sorted((folder / "weights").glob("*.safetensors"))[0]
    with open(shard, "ab") as fh:
        fh.write(b"\0")
    e = examples(folder)["examples"][0]
    assert e["problems"] == [f"{shard.name}: {shard.stat().st_size} bytes, manifest.json says {shard.stat().st_size - 1}"]


def test_a_deleted_asset_is_named_and_an_intact_output_has_none(workspace, tmp_path):
    """A file the output's report lists as written (README.md, "Files") and that is gone is a
    problem naming it; a weight shard gone is named once, by the manifest check."""
    root, models = workspace
    folder = tmp_path / "models"
    for name in ("validated", "weights"):
        shutil.copytree(models / name, folder / name)
        shutil.copytree(models / name, folder / f"{name}-intact")
    (folder / "validated" / "tokenizer.json").unlink()
    (folder / "weights" / "model.safetensors").unlink()
    (folder / "weights" / "chat_template.jinja").unlink()
    by = {e["name"]: e for e in examples(folder)["examples"]}
    assert by["validated"]["problems"] == ["missing asset: tokenizer.json (listed in README.md)"]
    assert by["weights"]["problems"] == ["model.safetensors: missing (manifest.json lists it)",
                                         "missing asset: chat_template.jinja (listed in README.md)"]
    assert by["validated-intact"]["problems"] == [] and by["weights-intact"]["problems"] == []
    r = run_cli("examples", str(folder), "--python", sys.executable, env={"COLUMNS": "200"})
    assert "validated: missing asset: tokenizer.json (listed in README.md)" in r.stdout


def test_a_hand_made_example_without_a_tokenizer(workspace, tmp_path):
    root, models = workspace
    hand = tmp_path / "models" / "bare"
    hand.mkdir(parents=True)
    shutil.copy(models / "qwen3-hand" / "config.json", hand / "config.json")
    e = examples(hand.parent)["examples"][0]
    assert e["problems"] == ["no tokenizer files: none of tokenizer.json, tokenizer.model, vocab.json, tokenizer_config.json "
                             "beside config.json"]
    (hand / "tokenizer.model").write_bytes(b"\0")
    assert examples(hand.parent)["examples"][0]["problems"] == []


def test_the_default_folder_and_the_text_view(workspace, tmp_path):
    root, models = workspace
    # run where there is no models folder (not the checkout: `make run` writes its outputs there)
    r = subprocess.run(cli_argv("examples", "--python", sys.executable), capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 1 and "tools/batched_test/models" in r.stderr and len(r.stderr.splitlines()) == 1
    r = run_cli("examples", str(models), "--python", sys.executable, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "orphan" in r.stdout and "missing" in r.stdout and "vllm 0.31.0 → absent" in r.stdout and "None" not in r.stdout
    assert "launch script (shown, not run): serve.sh" in r.stdout


def test_every_output_has_a_serve_script_that_survives_a_move(workspace, tmp_path):
    """serve.sh runs the README's command for the folder it is in: moved, it serves the new
    place (a stand-in `vllm` on PATH records what it was started with)."""
    root, models = workspace
    moved = tmp_path / "moved"
    shutil.copytree(models / "weights", moved)
    script = moved / "serve.sh"
    assert os.access(script, os.X_OK)
    readme = (moved / "README.md").read_text()
    command = script.read_text().splitlines()[-1]
    assert command.replace('"$MODEL_DIR"', str(models / "weights")).removesuffix(' "$@"') in readme
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"; echo "$CUDA_VISIBLE_DEVICES $HF_HUB_OFFLINE" >> "$RECORD"\n')
    (bin_dir / "vllm").chmod(0o755)
    record = tmp_path / "args"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RECORD=str(record), PORT="8123", CUDA_VISIBLE_DEVICES="3")
    r = subprocess.run([str(script), "--seed", "7"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    args = record.read_text().splitlines()
    assert args[:2] == ["serve", str(moved)] and args[args.index("--port") + 1] == "8123"
    assert args[-3:] == ["--seed", "7", "3 1"]
