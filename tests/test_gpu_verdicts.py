"""What a validation says of a GPU server that stopped during start-up, from the logs vLLM
0.26.0's CUDA build wrote on an H100 (tests/fixtures/gpu_logs/): the published DeepSeek-V4 FP8
config trimmed to layers 0 and 3 (a config-only source, dummy weights), served at context
4,096, one sequence, ``--gpu-memory-utilization 0.8``, ``--kv-cache-dtype fp8``, eager.

No GPU here: the server is a stand-in process that writes the captured log as vLLM wrote it
and exits with vLLM's status (1), started through ``--launcher`` by the same code that starts
vLLM; the offline checks run in a small environment holding a package named vllm 0.26.0.
Expected figures are copied from the fixtures' text."""

from __future__ import annotations

import json
import os
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from engine_support import run_cli
from mxtrim_tui.core.validate.classify import CONFIGURATION, DUMMY_LIMIT, classify
from mxtrim_tui.core.validate.memory_check import compare, summary
from mxtrim_tui.core.validate.vllm_log import parse_startup
from test_vllm_discovery import make_env

GPU_LOGS = Path(__file__).parent / "fixtures" / "gpu_logs"
V4_FP8_CONFIG = (Path(__file__).parent / "fixtures/published_workspace/tools/batched_test/models"
                 / "DeepSeek-V4-Flash-FP8_sgl_project/config.json")
GIB, MIB = 2**30, 2**20
H100 = 81559 * MIB  # the GPU's memory as nvidia-smi gave it on that machine
MEMORY = "memory: predicted against logged"

# the captured server: its log line by line (mxtrim's own "$ COMMAND" and "[mxtrim]" lines left
# out: mxtrim writes them), then vLLM's exit status
REPLAY = r'''
import sys
with open(sys.argv[1], encoding="utf-8") as log:
    for line in log:
        if not line.startswith(("$ ", "[mxtrim] ")):
            sys.stdout.write(line)
sys.stdout.flush()
sys.exit(1)
'''


def log_lines(name: str) -> list[str]:
    return (GPU_LOGS / name).read_text(encoding="utf-8").splitlines()


def gib(text: str) -> int:
    return int((Decimal(text) * GIB).to_integral_value())


# --- the assertion a class rests on -------------------------------------------------------------
@pytest.mark.parametrize("log, category, statement, frame", [
    ("h100-0.26.0-deepseek-v4-dummy-mhc.log", DUMMY_LIMIT, "assert self.hc_attn_fn_broadcast is not None",
     "/tmp/mxb/site/vllm/models/deepseek_v4/nvidia/model.py:882 in forward"),
    ("h100-0.26.0-deepseek-v4-keep-0-3-pages.log", CONFIGURATION, "assert max(sm_page_sizes) <= max(all_page_sizes)",
     "/tmp/mxb/site/vllm/v1/core/kv_cache_utils.py:1659 in _get_kv_cache_groups_uniform_groups"),
])
def test_an_assertion_without_a_message_is_quoted_with_its_statement_and_frame(log, category, statement, frame):
    """``AssertionError`` alone says nothing: the evidence is the assert statement that raised it
    and where (file:line, function), read from the traceback in the log."""
    v = classify(log_lines(log), 1, stopped_by_us=False, reason="the server exited with status 1 before it was healthy")
    assert v.category == category
    assert "AssertionError" not in v.evidence, v.evidence
    assert f"AssertionError: {statement} — {frame}" in v.evidence, v.evidence


# --- advice that can be followed ----------------------------------------------------------------
def test_the_v4_dummy_advice_follows_what_the_source_holds():
    """vLLM 0.26.0 cannot start a dummy DeepSeek-V4 output. A real-weight trim is advised only
    where the source has weights; a config alone has none to trim."""
    log = log_lines("h100-0.26.0-deepseek-v4-dummy-mhc.log")
    env = {"packages": {"vllm": {"version": "0.26.0"}}}

    def advice(state):
        return classify(log, 1, stopped_by_us=False, reason="exited", environment=env, source_state=state).advice

    bare = advice("config only")
    assert "vLLM 0.26.0 cannot start a dummy DeepSeek-V4 output" in bare
    assert "holds no weights (config only)" in bare and "real-weight trim of this source" not in bare
    assert "a vLLM that finishes the dummy load (0.32.0 does)" in bare
    assert "holds no weights (index only)" in advice("index only")
    assert "a real-weight trim of this source (--mode weights)" in advice("complete")
    assert "once the source holds the kept layers' shards" in advice("partial")


# --- the rounding of logged figures -------------------------------------------------------------
def loaded(figure: str, wording: str = "Model loading took {} GiB memory and 4.578386 seconds") -> list[str]:
    return [f"(EngineCore pid=2796) INFO 12-05 09:04:09 [gpu_model_runner.py:5347] {wording.format(figure)}"]


def test_a_figure_vllm_printed_as_zero_is_under_half_a_hundredth():
    """vLLM prints GiB as ``str(round(x, 2))`` (``format_gib``; trailing zeros dropped): "0.0"
    is any figure under 0.005 GiB, not 0 B, and not anything under 0.05 GiB."""
    zero = parse_startup(loaded("0.0"))
    near = compare({"weights_bytes": 3 * MIB}, zero)  # 3 MiB prints 0.0
    assert near["figures"]["weights_bytes"]["agrees"] is True
    assert "3.00 MiB predicted / under 0.005 GiB logged (agrees within the log's rounding)" in summary(near)
    far = compare({"weights_bytes": 40 * MIB}, zero)  # 40 MiB prints 0.04
    assert far["figures"]["weights_bytes"]["agrees"] is False
    assert "0 B" not in summary(far) and "under 0.005 GiB logged (DISAGREES)" in summary(far)


def test_a_figure_with_its_trailing_zero_dropped_keeps_two_decimals():
    """"0.2" is 0.20 ± 0.005 GiB: 0.24 GiB predicted disagrees (it printed 0.24)."""
    check = compare({"weights_bytes": gib("0.24")}, parse_startup(loaded("0.2")))
    assert check["figures"]["weights_bytes"]["agrees"] is False
    assert "/ 0.20 ± 0.005 GiB logged (1.20×, DISAGREES)" in summary(check)
    # earlier builds printed four decimals ("%.4f"): their own rounding
    older = parse_startup(loaded("0.2000", "Model loading took {} GiB and 4.578386 seconds"))
    assert "/ 0.2000 ± 0.00005 GiB logged" in summary(compare({"weights_bytes": gib("0.24")}, older))


# --- the whole validation of a server that stopped during start-up ------------------------------
@pytest.fixture(scope="module")
def v4(tmp_path_factory):
    root = tmp_path_factory.mktemp("v4")
    src = root / "v4"
    src.mkdir()
    shutil.copy(V4_FP8_CONFIG, src / "config.json")
    out = root / "out"
    proc = run_cli("trim", str(src), "--mode", "dummy", "--keep", "0,3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    script = root / "replay.py"
    script.write_text(REPLAY)
    return {"root": root, "out": out, "script": script, "python": make_env(root / "env", vllm="0.26.0")}


def served(v4, log: str, tmp_path: Path):
    """``validate OUT --serve`` on one GPU at the settings of the captured run, the server
    replaying ``log``; recorded as the CLI records it."""
    from mxtrim_tui.core.validate.record import record
    from mxtrim_tui.core.validate.run import validate
    from mxtrim_tui.core.validate.serve import ServeOptions

    out = tmp_path / "out"
    shutil.copytree(v4["out"], out)
    opts = ServeOptions(python=v4["python"], device="cuda", gpus="0", max_model_len=4096, max_num_seqs=1,
                        gpu_memory_utilization=0.8, kv_cache_dtype="fp8", gpu_total_bytes=H100,
                        launcher=[sys.executable, str(v4["script"]), str(GPU_LOGS / log)], startup_timeout=120)
    v = validate(out, opts, serve=True)
    record(v)
    return out, v.to_json()


@pytest.mark.slow
def test_a_v4_dummy_that_vllm_0_26_cannot_start(v4, tmp_path):
    from mxtrim_tui.core.validate.headline import verdict

    out, doc = served(v4, "h100-0.26.0-deepseek-v4-dummy-mhc.log", tmp_path)
    rows = {r["check"]: r for r in doc["rows"]}
    start = rows["start-up"]
    assert start["status"] == "failed" and start["verdict"]["class"] == DUMMY_LIMIT, start
    assert any("assert self.hc_attn_fn_broadcast is not None" in e for e in start["verdict"]["evidence"])
    # the source was a config alone: no real-weight trim can be made from it
    assert "holds no weights (config only)" in start["verdict"]["advice"]
    # the weights vLLM logged before it stopped are compared; the rest was never logged
    memory = doc["memory"]
    assert memory is not None and memory["stopped_during_startup"] is True, doc
    weights = memory["figures"]["weights_bytes"]
    assert weights["actual"] == gib("14.91") and weights["predicted"] is not None and weights["agrees"] is not None
    assert memory["figures"]["available_kv_bytes"]["actual"] is None
    assert rows[MEMORY]["status"] in ("passed", "differs"), rows[MEMORY]
    assert "/ 14.91 ± 0.005 GiB logged" in rows[MEMORY]["detail"]
    assert "the server stopped during start-up before it logged: KV memory, KV tokens, concurrency" in rows[MEMORY]["detail"]
    # nothing was served: the verdict does not say it was
    passed, lines = verdict(doc)
    assert not passed and lines[0].startswith("✗")
    assert lines[1].startswith("Not served: the server stopped during start-up ("), lines
    assert not any(line.lower().startswith("served") for line in lines), lines
    # the server died by itself: mxtrim did not ask it to stop
    assert doc["server_exit"]["returncode"] == 1 and doc["server_exit"]["requested"] is False
    assert doc["server_exit"]["signal"] is None
    recorded = json.loads((out / "validation.json").read_text(encoding="utf-8"))["runs"][-1]
    assert recorded["memory"] == memory and recorded["server_exit"] == doc["server_exit"]
    assert "14.91 ± 0.005 GiB logged" in (out / "README.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_start_that_stopped_after_the_kv_budget_compares_both(v4, tmp_path):
    """The same trim with the dummy load finished: vLLM logged the weights and the KV memory,
    then failed on its KV grouping."""
    _out, doc = served(v4, "h100-0.26.0-deepseek-v4-keep-0-3-pages.log", tmp_path)
    rows = {r["check"]: r for r in doc["rows"]}
    assert rows["start-up"]["verdict"]["class"] == CONFIGURATION
    figures = doc["memory"]["figures"]
    assert figures["weights_bytes"]["actual"] == gib("14.91") and figures["available_kv_bytes"]["actual"] == gib("46.95")
    assert figures["available_kv_bytes"]["agrees"] is not None and figures["kv_tokens"]["actual"] is None
    detail = rows[MEMORY]["detail"]
    assert "KV memory " in detail and "/ 46.95 ± 0.005 GiB logged" in detail
    assert "before it logged: KV tokens, concurrency" in detail


def test_a_server_is_asked_to_stop_only_while_it_runs(tmp_path):
    """``requested``: mxtrim stopped a running server; one that had exited by itself was not."""
    from mxtrim_tui.core.validate.serve import Server

    died = Server([sys.executable, "-c", "import sys; print('engine failed', flush=True); sys.exit(1)"], dict(os.environ),
                  tmp_path / "died.log")
    died.start()
    died.proc.wait(timeout=300)
    gone = died.stop()
    assert (gone.returncode, gone.requested, gone.signal_used) == (1, False, None)
    running = Server([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), tmp_path / "running.log")
    running.start()
    stopped = running.stop()
    assert stopped.requested is True and stopped.signal_used is not None
