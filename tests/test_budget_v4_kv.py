"""DeepSeek-V4's KV rows per layer, against vLLM 0.32.0's own sizing, recomputed here from the
config's numbers (models/deepseek_v4/attention.py, compressor.py,
v1/attention/backends/mla/sparse_swa.py, v1/kv_cache_interface.py):

* a page holds ``states × content`` bytes padded to 576 B (the fp8_ds_mla layout; 512 B else);
* a growing cache holds ``cdiv(context, 256)`` pages of 256 tokens (``256 / ratio`` states);
* a sliding cache (``SlidingWindowSpec``) holds ``cdiv(min(window − 1 + in_flight, context),
  block) + 1`` pages per sequence, ``in_flight`` = 2 × max_num_batched_tokens (async scheduling,
  PP 1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine_support import plan_for, run_cli
from mxtrim_tui.core.plan.budget import BudgetInputs, compute_budget

CONFIG = "tests/fixtures/published_workspace/tools/batched_test/models/DeepSeek-V4-Flash-FP8_sgl_project/config.json"
CONTEXT = 4096


def cdiv(a, b):
    return -(-a // b)


def page(states, content, align=576):
    return cdiv(states * content, align) * align


def sliding(window, block, content, in_flight=2 * CONTEXT, context=CONTEXT):
    return (cdiv(min(window - 1 + in_flight, context), block) + 1) * page(block, content)


def growing(ratio, content, context=CONTEXT):
    p = page(256 // ratio, content)
    return cdiv(p, 256), cdiv(context, 256) * p


def test_every_v4_layer_kind_holds_what_vllm_reserves(tmp_path):
    src = tmp_path / "v4"
    src.mkdir()
    shutil.copy(CONFIG, src / "config.json")
    cfg = json.loads((src / "config.json").read_text())
    head, window, idx = cfg["head_dim"], cfg["sliding_window"], cfg["index_head_dim"]
    row = 448 + 128 + 8  # fp8_ds_mla: NoPE fp8, RoPE bf16, scales
    assert head - cfg["qk_rope_head_dim"] == 448 and cfg["qk_rope_head_dim"] * 2 == 128

    swa = sliding(window, 64, row)
    # ratio 4: compressed rows + compressor state (kv + score, coff 2, float32, window 8, block 4)
    # + indexer keys (fp8 + fp32 scale per 128) + the indexer's compressor state
    c4_token, c4_seq = growing(4, row)
    k4_token, k4_seq = growing(4, idx + idx // 128 * 4)
    c4_state = sliding(2 * 4, 4, 2 * 2 * head * 4)
    k4_state = sliding(2 * 4, 4, 2 * 2 * idx * 4)
    # ratio 128: compressed rows + compressor state (coff 1, window 128, block 8); no indexer
    c128_token, c128_seq = growing(128, row)
    c128_state = sliding(128, 8, 2 * 1 * head * 4)

    plan = plan_for(src)  # the automatic set: layers 0, 2, 3, 4 and the MTP layer
    b = compute_budget(plan, BudgetInputs(max_model_len=CONTEXT, max_num_seqs=1))
    lines = {l.kind: l for l in b.kv_lines}
    only, four, big = lines["sliding window only"], lines["compressed ÷4 + indexer"], lines["compressed ÷128"]
    assert (only.layers, four.layers, big.layers) == (2, 2, 1)  # layer 0 and the MTP layer are window-only
    assert (only.bytes_per_token, only.state_bytes_per_seq) == (0, swa)
    assert (four.bytes_per_token, four.state_bytes_per_seq) == (c4_token + k4_token, swa + c4_state + k4_state)
    assert (big.bytes_per_token, big.state_bytes_per_seq) == (c128_token, swa + c128_state)
    assert b.kv_bytes_for_context == (2 * swa + 2 * (c4_seq + k4_seq + swa + c4_state + k4_state)
                                      + c128_seq + swa + c128_state)
    # the figures a user reads: 147 B per token of compressed rows at ratio 4, 7 at ratio 128
    assert (c4_token, k4_token, c128_token) == (147, 34, 7)
    for line in (only, four, big):
        assert "vLLM 0.32.0" in line.note and f"window {window}" in line.note
        assert "4,096 tokens held per sequence" in line.note  # window − 1 + the batch in flight, capped
    assert "indexer" not in big.note and "compressor state" in big.note and "indexer keys" in four.note


def _served_with(log: list[str]) -> dict:
    """The serve settings of a captured start-up: vLLM's "non-default args" line."""
    import ast

    line = next(line for line in log if "non-default args: " in line)
    return ast.literal_eval(line.split("non-default args: ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("keep, log", [(None, "h100-0.26.0-deepseek-v4-fp8-auto.log"),
                                       ("0,3", "h100-0.26.0-deepseek-v4-keep-0-3-pages.log")])
def test_a_v4_dummy_loads_the_weights_per_gpu_that_vllm_logged(tmp_path, keep, log):
    """The published V4 FP8 config alone, dummy, served by vLLM 0.26.0 on an H100 (the automatic
    set, then --keep 0,3; no MTP drafter, as served): the weights per GPU of `mxtrim plan` and of
    validation's prediction are what vLLM logged as "Model loading took", to its printed
    precision (0.01 GiB: half of it the print's rounding, half the caching allocator's whole-block
    remainders, 2.55 MiB for the automatic set when its allocation order was replayed on an H100).
    They fell 0.67 GiB short, the same both times: the load buffers vLLM builds beside the
    tensors (two rotary caches, the indexer's top-k buffer, the MTP hidden-state buffer,
    DeepGEMM's workspace) were not counted, nor the indexer compressor's 16-bit projections."""
    from mxtrim_tui.core.validate.memory_check import predict
    from mxtrim_tui.core.validate.serve import ServeOptions
    from mxtrim_tui.core.validate.vllm_log import parse_startup

    lines = (Path(__file__).parent / "fixtures" / "gpu_logs" / log).read_text().splitlines()
    logged, args = parse_startup(lines), _served_with(lines)
    precision = 2 * logged.rounding_bytes["weights_bytes"]  # one unit of the last printed decimal
    src = tmp_path / "v4"
    src.mkdir()
    shutil.copy(CONFIG, src / "config.json")
    keep_flags = ["--keep", keep] if keep else []
    serve = ["--max-model-len", str(args["max_model_len"]), "--max-num-seqs", str(args["max_num_seqs"]),
             "--max-num-batched-tokens", str(args["max_num_batched_tokens"]), "--kv-cache-dtype", args["kv_cache_dtype"],
             "--gpu-memory-utilization", str(args["gpu_memory_utilization"])]
    shown = run_cli("plan", str(src), *keep_flags, "--no-mtp", *serve, "--json")
    assert shown.returncode == 0, shown.stderr
    planned = json.loads(shown.stdout)["budget"]["weights_per_gpu_bytes"]
    assert abs(planned - logged.weights_bytes) < precision, (planned / 2**30, logged.weights_bytes / 2**30)

    out = tmp_path / "out"
    trimmed = run_cli("trim", str(src), *keep_flags, "--mode", "dummy", "--out", str(out))
    assert trimmed.returncode == 0, trimmed.stderr
    opts = ServeOptions(python="python", device="cuda", max_model_len=args["max_model_len"], kv_cache_dtype="fp8",
                        gpu_memory_utilization=args["gpu_memory_utilization"])
    assert predict(out, opts)["weights_bytes"] == planned


@pytest.mark.parametrize("context", [256, 8192])
def test_a_v4_dummy_is_predicted_at_the_batch_it_is_served_with(tmp_path, context):
    """A dummy V4 output (the small published layout, layers 0 and 3) served at a context other
    than its serve command's default: validation's prediction of the weights per GPU is the
    budget `mxtrim plan` gives for the same context and batch (the load buffers, the indexer's
    top-k indices and the MTP hidden states, are sized by the served batch)."""
    import dsv4_support as v4
    from mxtrim_tui.core.plan.build import default_context
    from mxtrim_tui.core.validate.memory_check import predict
    from mxtrim_tui.core.validate.serve import ServeOptions, batched_tokens
    from mxtrim_tui.core.write.writer import write_dummy

    src = v4.published_source(tmp_path / "src")
    out = write_dummy(plan_for(src, ["0,3"]), tmp_path / "out").path
    served = plan_for(src, ["0,3"], mtp=False)  # served without speculative decoding: no MTP weights loaded
    assert context != default_context(served)
    opts = ServeOptions(python="python", device="cuda", max_model_len=context, gpu_memory_utilization=0.9)
    budget = compute_budget(served, BudgetInputs(max_model_len=context, max_num_batched_tokens=batched_tokens(opts)))
    assert predict(out, opts, 80 * 2**30)["weights_bytes"] == budget.weights_per_gpu
