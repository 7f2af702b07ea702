"""Which transformers judges the checks: the runtime's when it is named, and never a stand-in
that is not a working interpreter (core/checks/judge.py, core/checks/child.py)."""

from __future__ import annotations

import json
import sys

import pytest

from engine_support import run_cli
from fixtures.tiny_models import make_tiny_llama

pytestmark = pytest.mark.slow

# an "interpreter" that answers anything with one JSON line of its own and exits (as a
# wrapper script or a stand-in of another tool may)
NOT_A_JUDGE = "#!/bin/sh\necho '{\"origin\": \"/stand-in/vllm/__init__.py\", \"version\": \"0.0\"}'\n"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("judge") / "llama")


@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "stand-in-python"
    path.write_text(NOT_A_JUDGE)
    path.chmod(0o755)
    return path


def test_an_environment_interpreter_without_transformers_is_passed_over_and_said(llama, stand_in, tmp_path):
    r = run_cli("plan", str(llama), "--json", env={"MXTRIM_VLLM_PYTHON": str(stand_in), "XDG_CACHE_HOME": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout)["transformers_check"]
    assert check["status"] == "exact"
    assert check["judge"]["python"] == sys.executable
    assert f"$MXTRIM_VLLM_PYTHON {stand_in} has no transformers" in check["judge"]["chosen_by"]


def test_a_named_interpreter_that_cannot_judge_is_not_checked_and_blocks_nothing(llama, stand_in, tmp_path):
    out = tmp_path / "out"
    r = run_cli("trim", str(llama), "--mode", "dummy", "--out", str(out), "--python", str(stand_in), "--json",
                env={"XDG_CACHE_HOME": str(tmp_path / "c")}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout)["transformers_check"]
    assert check["status"] == "not checked" and "process failed" in check["summary"]
    assert check["judge"]["python"] == str(stand_in) and check["judge"]["chosen_by"] == "--python"
    assert (out / "config.json").is_file()
