"""Which vLLM modules a served validation built and which the requests executed, per row of
the plan's coverage table (``paths`` of ``validate --json``), read from inside the running
engine by mxtrim's worker extension on vLLM's CPU build. The bundled demo (DeepSeek-style:
A MLA dense, B MLA MoE, C the MTP layer) is served with and without speculative decoding; a
server that cannot load the extension still validates, its rows unverified."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mxtrim_tui.demo import build_demo

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                       reason="real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON"),
    pytest.mark.xdist_group("test_paths_served"),  # the demo's trim, made once (make's --dist loadgroup)
]


def mxtrim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def demo_trim(tmp_path_factory) -> Path:
    """The demo trimmed as the wizard's defaults do: dummy, a dense layer, an MoE layer, the MTP layer."""
    root = tmp_path_factory.mktemp("paths")
    demo = build_demo(root / "mxtrim-demo-moe")
    out = root / "demo-dummy"
    proc = mxtrim("trim", str(demo), "--mode", "dummy", "--out", str(out), cwd=root)
    assert proc.returncode == 0, proc.stderr
    return out


def validate(demo_trim: Path, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``mxtrim validate OUT --serve`` on a copy of the demo's trim (each test its own record)."""
    out = tmp_path / "demo-dummy"
    shutil.copytree(demo_trim, out)
    proc = mxtrim("validate", str(out), "--serve", "--python", VLLM_PYTHON, "--device", "cpu", "--json", *extra, cwd=tmp_path)
    assert proc.stdout.strip(), proc.stderr
    return proc, json.loads(proc.stdout), out


def by_row(doc: dict) -> dict[str, dict]:
    return {p["row"]: p for p in doc["paths"]}


def coverage_table(readme: str) -> dict[str, list[str]]:
    """The README's coverage table: group -> its cells."""
    section = readme[readme.index("## Coverage"):]
    section = section[: section.index("\n## ", 3)]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return {"header": header, **{cells[0]: cells for cells in
                                 ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}}


def test_without_speculative_decoding_the_dense_and_moe_rows_ran_and_the_mtp_row_names_its_request(demo_trim, tmp_path):
    proc, doc, out = validate(demo_trim, tmp_path)
    rows = {r["check"]: r for r in doc["rows"]}
    assert proc.returncode == 0 and rows["generation"]["status"] == "passed", json.dumps(doc["rows"], indent=1)[:3000]
    paths = by_row(doc)
    assert set(paths) == {"A", "B", "C"}, doc["paths"]
    dense, moe, mtp = paths["A"], paths["B"], paths["C"]
    assert dense["status"] == "executed" and moe["status"] == "executed", json.dumps(doc["paths"], indent=1)[:4000]
    assert dense["layers"] == ["model.layers.0"] and moe["layers"] == ["model.layers.1"]
    # built: what vLLM constructed, read from the engine (MLA on the CPU build's MLA backend)
    assert "MLAAttention" in dense["evidence"] and "CPU_MLA" in dense["evidence"]
    assert dense["built"][0]["attention"]["backend"] == "CPU_MLA"
    assert "UnquantizedFusedMoEMethod" in moe["evidence"] and moe["built"][0]["moe"]["quant_method"] == "UnquantizedFusedMoEMethod"
    # executed: the generation request went through prefill and decode of each kept layer
    gen = dense["executed"]["generation"]["model.layers.0"]
    assert gen["calls"] > 0 and gen["prefill_tokens"] > 0 and gen["decode_tokens"] > 0, dense["executed"]
    # the MoE row says how many of its 8 experts received tokens
    assert moe["experts"] == 8 and 1 <= moe["experts_hit"] <= 8
    assert f"{moe['experts_hit']} of 8 experts received tokens" in moe["evidence"]
    assert "experts" not in dense["evidence"]
    # the MTP layer: never built without speculative decoding, and the row names the request that reaches it
    assert mtp["status"] == "not executed" and mtp["layers"] == ["drafter:model.layers.2"], mtp
    assert "served without speculative decoding" in mtp["evidence"] and "--speculative" in mtp["evidence"]
    # the effective configuration, as the engine built it
    eff = doc["effective_probe"]
    assert eff["quantization"] is None and eff["enforce_eager"] is True and eff["compilation_mode"] == 0
    assert eff["speculative_method"] is None and eff["cudagraph_mode"] == "NONE"
    assert eff["layers"]["model.layers.1"]["moe_quant_method"] == "UnquantizedFusedMoEMethod"
    assert eff["layers"]["model.layers.0"]["attention_backend"] == "CPU_MLA" and eff["layers"]["model.layers.0"]["moe_class"] is None
    # kept with the run, and shown in the README's coverage table
    history = json.loads((out / "validation.json").read_text())
    assert history["runs"][-1]["paths"] == doc["paths"]
    table = coverage_table((out / "README.md").read_text())
    col = table["header"].index("executed")
    assert table["A"][col].startswith("executed") and table["B"][col].startswith("executed")
    assert table["C"][col].startswith("not executed")
    # the command recorded is one a person can run as it is: the extension is mxtrim's own
    assert "--worker-extension-cls" not in doc["serve_command"]


def test_with_speculative_decoding_every_row_ran_the_mtp_row_through_the_drafter(demo_trim, tmp_path):
    proc, doc, out = validate(demo_trim, tmp_path, "--speculative")
    assert proc.returncode == 0, json.dumps(doc["rows"], indent=1)[:3000]
    paths = by_row(doc)
    assert [paths[r]["status"] for r in "ABC"] == ["executed"] * 3, json.dumps(doc["paths"], indent=1)[:4000]
    mtp = paths["C"]
    assert mtp["layers"] == ["drafter:model.layers.2"]
    spec = mtp["executed"]["speculative decoding (MTP)"]["drafter:model.layers.2"]
    assert spec["calls"] > 0 and spec["prefill_tokens"] > 0, mtp["executed"]
    assert "drafter" in mtp["evidence"] and mtp["built"][0]["attention"]["backend"] == "CPU_MLA"
    assert mtp["experts"] == 8 and f"{mtp['experts_hit']} of 8 experts received tokens" in mtp["evidence"]
    assert doc["effective_probe"]["speculative_method"] == "mtp"
    assert "drafter:model.layers.2" in doc["effective_probe"]["layers"]


def test_a_server_that_cannot_import_the_probe_is_served_again_without_it_and_its_rows_are_unverified(demo_trim, tmp_path):
    # a launcher that runs vLLM in isolated mode: it ignores PYTHONPATH, where mxtrim puts its probe
    launcher = f"{VLLM_PYTHON} -I -m vllm.entrypoints.openai.api_server"
    proc, doc, out = validate(demo_trim, tmp_path, "--launcher", launcher)
    rows = {r["check"]: r for r in doc["rows"]}
    # the probe's failure is mxtrim's own: the output still starts, generates and passes
    assert proc.returncode == 0, json.dumps(doc["rows"], indent=1)[:3000]
    assert rows["start-up"]["status"] == "passed" and rows["generation"]["status"] == "passed"
    assert "Traceback" not in proc.stderr
    paths = by_row(doc)
    assert set(paths) == {"A", "B", "C"}
    for p in paths.values():
        assert p["status"] == "unverified", p
        assert "mxtrim_probe_ext" in p["evidence"] and "without" in p["evidence"], p["evidence"]
    log = (out / "logs" / "serve.log").read_text()
    assert "No module named 'mxtrim_probe_ext'" in log
    assert sum(line.startswith("$ ") for line in log.splitlines()) == 2  # served a second time, without the probe
    assert doc["effective_probe"] is None
