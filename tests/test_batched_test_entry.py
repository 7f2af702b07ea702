"""The batched_test harness entry of an output (``mxtrim trim --batched-test-config FILE``,
``mxtrim batched-test-entry OUT... --config FILE`` / ``--all``), read back as the harness
reads it: with a YAML library, its ``model_path`` from the folder ``launch.py`` is started in
(``tools/batched_test``), and served from there by the harness's own command line. The
hand-written part of the file stays byte for byte; a name already there or a malformed file is
refused, the file untouched."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

import harness_standin
from engine_support import run_cli
from mxtrim_tui.core.errors import InputError
from mxtrim_tui.core.write import batched_test_entry
from mxtrim_tui.core.write.batched_test_entry import append_entries, entry_for_output
from test_validate import VLLM_PYTHON, needs_vllm

HAND_WRITTEN = """\
# smoke tests of the trimmed models (kept by hand)
- name: "hand-made-smoke"   # the first one
  model_path: /data/models/hand-made
  serve_config:
    tp: 1
    dp: 1
    pp: 1
    extra_args:
      --dtype: bfloat16
  infer_type:
    - text-only
  extra_env:
# end of the hand-written part
"""
SPECULATIVE = {"method": "mtp", "num_speculative_tokens": 1}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_batched_test_entry")]  # slow: its module fixture takes 15 to 20 s here; built once, on one worker (make's --dist loadgroup)

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A workspace whose models folder holds a dummy and a real-weight trim of a Llama (each
    written with --batched-test-config into a hand-written YAML) and a dummy DeepSeek-V3
    trim keeping its MTP layer (written without)."""
    from fixtures.tiny_models import make_servable_llama, make_tiny_deepseek_v3_mtp

    root = tmp_path_factory.mktemp("harness")
    ws = root / "ws"
    models, configs = ws / "tools" / "batched_test" / "models", ws / "tools" / "batched_test" / "configs"
    configs.mkdir(parents=True)
    smoke = configs / "smoke.yaml"
    smoke.write_text(HAND_WRITTEN)
    llama = make_servable_llama(root / "src" / "llama", layers=2)
    runs = {}
    for mode, serve in (("dummy", ["--max-model-len", "128", "--max-num-seqs", "2", "--gpu-memory-utilization", "0.7"]),
                        ("weights", [])):
        runs[mode] = run_cli("trim", str(llama), "--mode", mode, "--keep", "0", "--out", str(models / f"llama-{mode}-1layers"),
                             *serve, "--batched-test-config", str(smoke))
        assert runs[mode].returncode == 0, runs[mode].stderr
    ds = make_tiny_deepseek_v3_mtp(root / "src" / "DeepSeek-V3-tiny")
    r = run_cli("trim", str(ds), "--mode", "dummy", "--mtp", "--out", str(models / "dsv3-mtp-dummy"))
    assert r.returncode == 0, r.stderr
    return {"ws": ws, "models": models, "smoke": smoke, "runs": runs, "smoke_text": smoke.read_bytes(),
            "llama": llama, "harness": ws / "tools" / "batched_test"}


def entries(path: Path) -> dict[str, dict]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, list)
    return {e["name"]: e for e in doc}


def resolved(harness: Path, model_path: str) -> Path:
    """The output a model_path names, as the harness's server reads it: from the folder
    ``launch.py`` is started in (``tools/batched_test``), where its ``vllm serve`` runs."""
    assert model_path.startswith("./") or os.path.isabs(model_path), model_path  # a local path, never a Hub id
    return Path(os.path.normpath(os.path.join(harness, model_path)))


def read_from(harness: Path) -> str:
    return f"model_path is read from {harness}, the folder launch.py is started in"


def test_trim_appends_after_the_hand_written_text_left_byte_for_byte(built):
    smoke, models = built["smoke"], built["models"]
    text = built["smoke_text"]
    assert text.startswith(HAND_WRITTEN.encode())
    # the dummy entry follows the hand-written part, the real-weight one follows it
    assert text.index(b"llama-dummy-1layers") < text.index(b"llama-weights-1layers")
    found = entries(smoke)
    assert list(found) == ["hand-made-smoke", "llama-dummy-1layers", "llama-weights-1layers"]
    assert found["hand-made-smoke"]["serve_config"]["extra_args"] == {"--dtype": "bfloat16"}
    # what the CLI said it appended is what the file holds
    out = built["runs"]["dummy"].stdout
    assert "batched_test: 'llama-dummy-1layers' appended to" in out and str(smoke) in out
    # the folder model_path is read from is said, on the command's output and above the entry
    assert f"batched_test: {read_from(built['harness'])}" in out
    assert f"# {read_from(built['harness'])}\n- name: 'llama-dummy-1layers'" in smoke.read_text()


def test_the_dummy_entry_serves_the_output_as_its_report_does(built):
    smoke, models = built["smoke"], built["models"]
    e = entries(smoke)["llama-dummy-1layers"]
    assert e["model_path"] == "./models/llama-dummy-1layers"
    assert resolved(built["harness"], e["model_path"]) == models / "llama-dummy-1layers"
    serve = json.loads((models / "llama-dummy-1layers" / "mxtrim-plan.json").read_text())["serve"]
    assert e["serve_config"] == {
        "tp": 1, "pp": 1, "dp": 1, "gpu_memory_utilization": 0.7, "max_model_len": 128,
        "extra_args": {"--load-format": "dummy", "--max-num-seqs": 2, "--max-num-batched-tokens": 128,
                       "--enforce-eager": None},
    }
    assert serve["max_model_len"] == 128 and serve["max_num_seqs"] == 2 and serve["gpu_memory_utilization"] == 0.7
    assert e["infer_type"] == ["text-only"]
    assert e["tags"] == ["dummy-smoke", "dense"]
    assert e["extra_env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_the_real_weight_entry_loads_the_weights(built):
    e = entries(built["smoke"])["llama-weights-1layers"]
    assert e["tags"] == ["weights-smoke", "dense"]
    args = e["serve_config"]["extra_args"]
    assert "--load-format" not in args and args["--enforce-eager"] is None
    assert "--speculative-config" not in args


def test_a_kept_mtp_layer_is_served_with_speculative_decoding(built, tmp_path):
    config = tmp_path / "mtp.yaml"
    r = run_cli("batched-test-entry", str(built["models"] / "dsv3-mtp-dummy"), "--config", str(config))
    assert r.returncode == 0, r.stderr
    e = entries(config)["dsv3-mtp-dummy"]
    assert json.loads(e["serve_config"]["extra_args"]["--speculative-config"]) == SPECULATIVE
    assert e["tags"] == ["dummy-smoke", "moe"]
    # a model YAML outside the harness folder: model_path is read from the output's one
    assert resolved(built["harness"], e["model_path"]) == built["models"] / "dsv3-mtp-dummy"
    assert f"batched_test: {read_from(built['harness'])}" in r.stdout
    # the file was created: it is the entry alone
    assert yaml.safe_load(config.read_text()) == [e]


def test_an_output_outside_the_harness_folder_is_entered_by_its_absolute_path(built, tmp_path):
    harness = tmp_path / "vLLM-metax" / "tools" / "batched_test"
    config = harness / "configs" / "smoke.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(HAND_WRITTEN)
    out = tmp_path / "elsewhere" / "llama-dummy-1layers"
    shutil.copytree(built["models"] / "llama-dummy-1layers", out)
    r = run_cli("batched-test-entry", str(out), "--config", str(config))
    assert r.returncode == 0, r.stderr
    e = entries(config)["llama-dummy-1layers"]
    assert e["model_path"] == str(out) and resolved(harness, e["model_path"]) == out
    said = f"model_path is absolute: the output is outside {harness}, the folder launch.py is started in"
    assert f"batched_test: {said}" in r.stdout and f"# {said}\n" in config.read_text()
    assert config.read_text().startswith(HAND_WRITTEN)


@needs_vllm
def test_the_harness_started_in_its_folder_serves_the_entry(built, tmp_path, monkeypatch):
    """The harness's own command line for the entry ``trim --batched-test-config`` wrote, run
    from the folder launch.py is started in: the server finds the output and answers. On the
    CPU build of vLLM: its OpenAI server module for the ``vllm`` command (which cannot start
    there), and the KV budget and dtype a CPU validation gives it, added to ``extra_args``."""
    from mxtrim_tui.core.validate.serve import (API_SERVER_MODULE, Server, ServeOptions, cpu_serve_dtype, free_port,
                                                serve_env)

    harness, out = built["harness"], built["models"] / "llama-dummy-1layers"
    entry = harness_standin.entry_named(built["smoke"], "llama-dummy-1layers")
    entry["serve_config"]["extra_args"] |= {"--kv-cache-memory-bytes": 64 << 20, "--dtype": cpu_serve_dtype(out)}
    port = free_port()
    argv = harness_standin.serve_argv(entry, port)
    assert argv[:3] == ["vllm", "serve", entry["model_path"]]
    argv = [VLLM_PYTHON, "-m", API_SERVER_MODULE, "--model", argv[2], *argv[3:]]
    env = serve_env(ServeOptions(python=VLLM_PYTHON, device="cpu")) | harness_standin.serve_env(entry)
    monkeypatch.chdir(harness)  # launch.py's folder: its servers inherit it
    server = Server(argv, env, tmp_path / "serve.log")
    server.start()
    try:
        healthy, why = server.wait_healthy(f"http://{harness_standin.HARNESS_HOST}:{port}", timeout=600)
    finally:
        stopped = server.stop()
    assert healthy, f"{why}\n" + "\n".join(list(server.tail)[-15:])
    assert stopped.survivors == []


def test_a_duplicate_name_is_refused_and_the_file_untouched(built, tmp_path):
    config = tmp_path / "smoke.yaml"
    config.write_bytes(built["smoke_text"])
    before = config.read_bytes()
    r = run_cli("batched-test-entry", str(built["models"] / "llama-dummy-1layers"), "--config", str(config))
    assert r.returncode == 1
    assert r.stderr.strip() == (f"mxtrim: error: {config}: already has an entry named 'llama-dummy-1layers'; nothing "
                                "appended (remove that entry or rename the output)")
    assert config.read_bytes() == before
    # all or none: with a new output beside it, nothing is appended either
    r = run_cli("batched-test-entry", str(built["models"] / "dsv3-mtp-dummy"), str(built["models"] / "llama-dummy-1layers"),
                "--config", str(config))
    assert r.returncode == 1 and config.read_bytes() == before


def test_trim_refuses_a_taken_name_before_writing_anything(built, tmp_path):
    config = tmp_path / "smoke.yaml"
    config.write_bytes(built["smoke_text"])
    out = tmp_path / "llama-dummy-1layers"  # the name the file has already
    r = run_cli("trim", str(built["llama"]), "--mode", "dummy", "--keep", "0", "--out", str(out),
                "--batched-test-config", str(config))
    assert r.returncode == 1
    assert f"mxtrim: error: {config}: already has an entry named 'llama-dummy-1layers'" in r.stderr
    assert not out.exists() and config.read_bytes() == built["smoke_text"]


@pytest.mark.parametrize("text, problem", [
    ("- name: a\n  serve_config: [1, 2\n", "not valid YAML"),
    ("name: a\nmodel_path: ./a\n", "not a batched_test model list"),
    ("- just a string\n", "entry 1 is not a mapping"),
])
def test_a_malformed_model_yaml_is_refused_naming_the_file(built, tmp_path, text, problem):
    config = tmp_path / "broken.yaml"
    config.write_text(text)
    r = run_cli("batched-test-entry", str(built["models"] / "llama-dummy-1layers"), "--config", str(config))
    assert r.returncode == 1
    assert r.stderr.startswith(f"mxtrim: error: {config}: {problem}") and len(r.stderr.strip().splitlines()) == 1
    assert config.read_text() == text


def test_an_indented_list_is_refused_rather_than_broken(built, tmp_path):
    """Appended at column 0 the entry would not be an item of an indented list: refused."""
    config = tmp_path / "indented.yaml"
    text = "  - name: a\n    model_path: ./a\n"
    config.write_text(text)
    with pytest.raises(InputError, match="would not read as a new list item"):
        append_entries(config, [entry_for_output(built["models"] / "llama-dummy-1layers", config)])
    assert config.read_text() == text


def test_a_file_without_a_final_newline_gets_one_before_the_entry(built, tmp_path):
    config = tmp_path / "no-newline.yaml"
    config.write_bytes(b"- name: a\n  model_path: ./a")
    append_entries(config, [entry_for_output(built["models"] / "llama-weights-1layers", config)])
    assert config.read_bytes().startswith(b"- name: a\n  model_path: ./a\n")
    assert list(entries(config)) == ["a", "llama-weights-1layers"]


def test_all_enters_every_mxtrim_output_of_the_workspace_once(built, tmp_path):
    hand = built["models"] / "hand-made"
    hand.mkdir(exist_ok=True)
    (hand / "config.json").write_text("{}")
    config = built["ws"] / "tools" / "batched_test" / "configs" / "all.yaml"
    env_cwd = built["ws"]
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, cwd=env_cwd,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}, timeout=120)

    r = run("batched-test-entry", "--all", "--config", str(config))  # default folder: ./tools/batched_test/models/
    assert r.returncode == 0, r.stderr
    found = entries(config)
    assert sorted(found) == ["dsv3-mtp-dummy", "llama-dummy-1layers", "llama-weights-1layers"]
    assert all(resolved(built["harness"], e["model_path"]) == built["models"] / name for name, e in found.items())
    assert "left out (not written by mxtrim): hand-made" in r.stdout
    # again: every name is there already, left as it is
    before = config.read_bytes()
    r = run("batched-test-entry", "--all", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert "already in" in r.stdout and config.read_bytes() == before


def test_a_directory_that_is_no_mxtrim_output_is_refused(built, tmp_path):
    hand = tmp_path / "hand"
    hand.mkdir()
    r = run_cli("batched-test-entry", str(hand), "--config", str(tmp_path / "x.yaml"))
    assert r.returncode == 1 and r.stderr.strip() == f"mxtrim: error: {hand}: not an mxtrim output (no mxtrim-plan.json)"
    assert not (tmp_path / "x.yaml").exists()


def test_without_pyyaml_the_file_is_read_line_by_line(built, tmp_path, monkeypatch):
    """An environment without PyYAML: names found, duplicates refused, what is appended reads
    as YAML all the same, and a file that is no top-level list refused."""
    monkeypatch.setattr(batched_test_entry, "_yaml_module", lambda: None)
    config = tmp_path / "smoke.yaml"
    config.write_text(HAND_WRITTEN)
    dummy = entry_for_output(built["models"] / "llama-dummy-1layers", config)
    append_entries(config, [dummy])
    with pytest.raises(InputError, match="already has an entry named 'llama-dummy-1layers'"):
        append_entries(config, [dummy])
    hand = HAND_WRITTEN.replace('"hand-made-smoke"', "'llama-weights-1layers'")
    config.write_text(hand)
    weights = entry_for_output(built["models"] / "llama-weights-1layers", config)
    with pytest.raises(InputError, match="already has an entry named 'llama-weights-1layers'"):
        append_entries(config, [weights])
    assert config.read_text() == hand
    config.write_text(HAND_WRITTEN)
    append_entries(config, [dummy, weights])
    assert config.read_text().startswith(HAND_WRITTEN)
    assert list(entries(config)) == ["hand-made-smoke", "llama-dummy-1layers", "llama-weights-1layers"]
    config.write_text("name: a\n")
    with pytest.raises(InputError, match="not a batched_test model list"):
        append_entries(config, [dummy])


def test_strings_that_yaml_would_misread_are_quoted(tmp_path):
    """Names are output directory names: whatever they hold reads back as written."""
    odd = ["yes", "null", "1e3", "a: b", "# not a comment", "it's", "tab\there", "line\nbreak", "中文", "-", "[x]"]
    fields = {"name": "odd", "values": odd, "map": {k: k for k in odd}, "floats": [0.8, 1.0, 1e-05]}
    entry = batched_test_entry.Entry("odd", fields)
    assert yaml.safe_load(entry.yaml()) == [fields]
