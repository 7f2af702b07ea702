"""Code in a model directory runs only when the user asks (--trust-remote-code).

The source carries *.py files named by its config's auto_map, each writing a marker file when
imported; every command runs as a real process on it and on its outputs, and the markers
directory must stay empty. The control, --trust-remote-code, proves the markers work."""

from __future__ import annotations

import json

import pytest

from engine_support import run_cli, tree_digest
from synth.checkpoint import write_checkpoint
from synth.layouts.llama import llama3

MARKER_CODE = "import os\nopen(os.path.join(os.environ['MXTRIM_MARKERS'], __name__ + '.ran'), 'w').close()\n"
MODULES = ("configuration_marker", "modeling_marker", "tokenization_marker", "__init__", "setup", "conftest")


@pytest.fixture(scope="module")
def armed(tmp_path_factory):
    """(source, markers directory, environment) for a source whose code leaves markers."""
    base = tmp_path_factory.mktemp("armed")
    src = write_checkpoint(base / "src", llama3(num_layers=4, hidden_size=64, vocab_size=128), data="random")
    for name in MODULES:
        (src / f"{name}.py").write_text(MARKER_CODE)
    config = json.loads((src / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "configuration_marker.MarkerConfig",
        "AutoModelForCausalLM": "modeling_marker.MarkerForCausalLM",
    }
    (src / "config.json").write_text(json.dumps(config, indent=2))
    tok = src / "tokenizer_config.json"
    if tok.exists():
        doc = json.loads(tok.read_text())
        doc["auto_map"] = {"AutoTokenizer": ["tokenization_marker.MarkerTokenizer", None]}
        tok.write_text(json.dumps(doc, indent=2))
    markers = base / "markers"
    markers.mkdir()
    return src, markers, {"MXTRIM_MARKERS": str(markers)}


@pytest.mark.slow
def test_no_command_runs_the_models_code_unless_asked(armed, tmp_path):
    src, markers, env = armed
    before = tree_digest(src)
    runs = {
        "inspect": ["inspect", str(src)],
        "inspect --json": ["inspect", str(src), "--json"],
        "plan": ["plan", str(src), "--keep", "0,2"],
        "trim dummy": ["trim", str(src), "--mode", "dummy", "--keep", "0,2", "--out", str(tmp_path / "dummy")],
        "trim weights": ["trim", str(src), "--mode", "weights", "--keep", "0,2", "--out", str(tmp_path / "weights")],
        "validate dummy": ["validate", str(tmp_path / "dummy")],
        "validate weights": ["validate", str(tmp_path / "weights")],
    }
    for what, argv in runs.items():
        r = run_cli(*argv, env=env)
        assert "Traceback" not in r.stderr, f"{what}: {r.stderr}"
        assert r.returncode in (0, 1), f"{what}: {r.stderr}"
        assert sorted(p.name for p in markers.iterdir()) == [], f"{what} ran the model's code"
    # the outputs carry the code (the runtime needs it with --trust-remote-code)...
    assert (tmp_path / "weights" / "modeling_marker.py").exists()
    assert tree_digest(src) == before
    # ...and asking for it does run it: the markers would have shown any run above
    r = run_cli("validate", str(tmp_path / "dummy"), "--trust-remote-code", env=env)
    assert "Traceback" not in r.stderr
    assert any(p.name.endswith("configuration_marker.ran") for p in markers.iterdir())
