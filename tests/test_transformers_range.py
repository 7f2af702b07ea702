"""The transformers checks on the transformers versions of users' environments.

vLLM-MetaX 0.17 stacks (and vLLM 0.17 - 0.22) hold transformers 4.56 - 4.57; vLLM-MetaX on vLLM
0.26 needs 5.5.3 or newer; development runs the newest tested 5.x. `make test` makes one venv per
version (.venv-transformers-4.57.1, .venv-transformers-5.5.3) and names their interpreters in
$MXTRIM_TRANSFORMERS_RANGE; each check here runs in that interpreter (`--python`), as it runs in
the runtime's interpreter for a user, and must give a verdict on models that version knows:
exact, never a mismatch that blocks the trim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import run_cli

RANGE = [p for p in os.environ.get("MXTRIM_TRANSFORMERS_RANGE", "").split() if p]
pytestmark = pytest.mark.slow


def _version(python: str) -> str:
    out = subprocess.run([python, "-I", "-c", "import importlib.metadata as m; print(m.version('transformers'))"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


# the development version judges every other test of the suite
JUDGES = [pytest.param(p, id=f"transformers-{Path(p).parents[1].name.removeprefix('.venv-transformers-')}") for p in RANGE]
if not RANGE:  # make test-fast, or pytest by hand: said, not silently passed
    JUDGES.append(pytest.param(None, id="range", marks=pytest.mark.skip(
        reason="no $MXTRIM_TRANSFORMERS_RANGE: `make test` makes the transformers 4.57 / 5.5 venvs and names them")))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    from fixtures.tiny_models import make_servable_qwen3_moe, make_tiny_deepseek_v3_mtp, make_tiny_llama
    from mxtrim_tui.demo.build import build_demo

    root = tmp_path_factory.mktemp("range-sources")
    return {
        "demo": build_demo(root / "demo"),
        "llama": make_tiny_llama(root / "llama"),
        "qwen3_moe": make_servable_qwen3_moe(root / "qwen3_moe"),
        "deepseek_v3": make_tiny_deepseek_v3_mtp(root / "deepseek_v3"),
    }


@pytest.mark.parametrize("model", ["demo", "llama", "qwen3_moe", "deepseek_v3"])
@pytest.mark.parametrize("python", JUDGES)
def test_a_real_weight_trim_is_judged_exact_by_every_transformers_in_the_range(python, model, sources, tmp_path):
    """The plan check and the structure check both run in ``python``'s transformers: the trim is
    written, the verdict is exact and names the version that judged it."""
    out = tmp_path / "out"
    r = run_cli("trim", str(sources[model]), "--mode", "weights", "--keep", "0,1", "--out", str(out), "--python", python, "--json",
                env={"MXTRIM_CHECK_CACHE": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    check = doc["transformers_check"]
    version = _version(python)
    assert check["status"] == "exact", check
    assert check["judge"]["transformers"] == version and check["judge"]["chosen_by"] == "--python", check["judge"]
    assert Path(check["judge"]["origin"]).resolve().is_relative_to(Path(python).parents[1].resolve()), check["judge"]
    structure = doc["checks"]["structure"]
    assert structure["status"] in ("checked", "partially checked"), structure
    assert not structure["missing"] and not structure["unexpected"] and not structure["mismatched"], structure
    assert structure["judge"]["transformers"] == version
    readme = (out / "README.md").read_text()
    assert f"Judged by transformers {version}" in readme


@pytest.mark.parametrize("python", JUDGES)
def test_the_plan_names_the_runtime_transformers_and_mxtrims_own(python, sources):
    """A tool install's own transformers is not the runtime's: the plan says which one judged."""
    r = run_cli("plan", str(sources["llama"]), "--python", python, env={"MXTRIM_CHECK_CACHE": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    text = " ".join(r.stdout.split())
    assert "checked against transformers: exact" in text
    own = _version(sys.executable)
    assert f"judged by transformers {_version(python)}" in text and f"mxtrim's own is {own}" in text, text


@pytest.mark.parametrize("python", JUDGES)
def test_the_offline_loads_run_on_every_transformers_in_the_range(python, sources, tmp_path):
    """The validation's offline probe (config, tokenizer round trip, chat template) in that
    version's interpreter, on a trimmed output; vLLM is not installed there, and it says so."""
    from mxtrim_tui.core.validate.run import offline_checks

    out = tmp_path / "out"
    r = run_cli("trim", str(sources["deepseek_v3"]), "--mode", "dummy", "--keep", "0,1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    environment, rows = offline_checks(out, python, trust_remote_code=False)
    status = {row.check.split(" ")[0]: row.status for row in rows}
    assert environment["packages"]["transformers"]["version"] == _version(python)
    assert status["config"] == status["tokenizer"] == status["chat"] == "passed", [(r.check, r.status, r.detail) for r in rows]
    assert status["architecture"] == "failed" and "vLLM is not installed" in rows[-1].detail


@pytest.mark.parametrize("python", JUDGES)
def test_the_solver_and_the_nearest_fix_work_on_every_transformers_in_the_range(python, tmp_path):
    """Architectures without a family module: ERNIE-4.5-MoE's first MoE index is solved against
    that version's class, and GPT-NeoX-Japanese's last-layer rule refused with a selection that
    builds exactly, as on the development version."""
    from benchmarks.architecture_sweep import make_source

    ernie = make_source("ernie4_5_moe", tmp_path / "ernie")
    r = run_cli("plan", str(ernie), "--keep", "1,2", "--python", python, "--json", env={"MXTRIM_CHECK_CACHE": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout)["transformers_check"]
    assert check["status"] == "exact" and check["judge"]["transformers"] == _version(python)
    assert check["solved"] == [{"path": "moe_layer_start_index", "before": 1, "after": 0}]
    neox = make_source("gpt_neox_japanese", tmp_path / "neox")
    r = run_cli("plan", str(neox), "--keep", "0,1,4,5", "--python", python, env={"MXTRIM_CHECK_CACHE": "0"})
    assert r.returncode == 1 and "--keep 0-1,4-5,7 builds exactly" in r.stderr  # the one error line
