"""The default demo is one vLLM serves: what `make run` → write → `v` does, on this machine's
CPU build of vLLM (one server start). It is also the dummy DeepSeek-V3 (MLA, MTP kept)
served of tests/test_validate.py's families."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mxtrim_tui.demo import build_demo

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                    reason="real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON")
def test_the_wizards_default_write_of_the_demo_validates_with_a_real_server(tmp_path):
    demo = build_demo(tmp_path / "mxtrim-demo-moe")

    def mxtrim(*args: str) -> subprocess.CompletedProcess:
        # as a user's validation runs: TorchDynamo on (the suite's other servers run without it,
        # tests/conftest.py), so vLLM compiles its logprobs op on the first completion
        env = {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"}
        return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=900, env=env)

    # the wizard's defaults: dummy mode, the automatic selection (a dense layer, an MoE layer, the MTP layer)
    out = tmp_path / "out"
    trim = mxtrim("trim", str(demo), "--mode", "dummy", "--out", str(out))
    assert trim.returncode == 0, trim.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] == 576 and "quantization_config" not in cfg

    proc = mxtrim("validate", str(out), "--serve", "--python", VLLM_PYTHON, "--device", "cpu", "--json")
    doc = json.loads(proc.stdout)
    rows = {r["check"]: r for r in doc["rows"]}
    failed = {name: r for name, r in rows.items() if r["status"] == "failed"}
    # the wizard's ✓: no check failed
    assert proc.returncode == 0 and not failed, json.dumps(failed or doc["rows"], indent=1)[:4000]
    assert rows["start-up"]["status"] == "passed" and "dummy weights" in rows["start-up"]["detail"]
    assert rows["generation"]["status"] == "passed"
    cmd = doc["serve_command"]
    assert cmd[cmd.index("--load-format") + 1] == "dummy"
    assert doc["server_exit"]["survivors"] == []
    assert doc["loadable"] is None  # a dummy output is never called a loadable checkpoint
    # the budget's prediction agrees with what vLLM logged for MLA's one latent row per token
    memory = doc["memory"]
    assert memory["agree"] is True and rows["memory: predicted against logged"]["status"] == "passed", memory
    assert memory["figures"]["kv_tokens"]["predicted"] == memory["figures"]["kv_tokens"]["actual"]
    # a dummy output holds no weights: they are predicted from the kept tensors of its source
    assert memory["figures"]["weights_bytes"]["predicted"] > 0
