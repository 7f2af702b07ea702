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

from engine_support import plan_for
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
