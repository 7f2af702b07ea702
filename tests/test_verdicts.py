"""The verdict logic of a validation, on real vLLM logs and worked numbers (no server): the
failure class and the line it quotes, the equivalence judgement, the memory comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from mxtrim_tui.core.validate.classify import CONFIGURATION, QUANT_BUILD, classify
from mxtrim_tui.core.validate.equivalence import DIFFERENT, EQUAL, RELATIVE_TOLERANCE, WITHIN, judge, tolerance_key
from mxtrim_tui.core.validate.memory_check import compare, summary
from mxtrim_tui.core.validate.vllm_log import StartupFigures, parse_startup, served_dtype, spec_counts_from_log

FAILURES = Path(__file__).parent / "fixtures" / "vllm_failures"
LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# --- failure classes ---------------------------------------------------------------------------
def test_fp8_in_float32_is_a_build_limitation_quoting_the_root_line():
    """vLLM 0.32.0 CPU, the FP8 demo served in float32: pydantic wraps the cause; the verdict
    quotes the cause, not the wrapper, and never blames the trim."""
    v = classify(lines(FAILURES / "cpu-0.32.0-fp8-float32.log"), 1, stopped_by_us=False, reason="exited", dummy=True)
    assert v.category == QUANT_BUILD != CONFIGURATION
    assert v.evidence[0].startswith("Value error, torch.float32 is not supported for quantization method fp8")
    assert not any("validation error for VllmConfig" in e for e in v.evidence)
    assert "change the trim" not in v.advice and "not the cause" in v.advice


def test_fp8_without_amx_is_a_build_limitation_with_each_kernels_reason():
    v = classify(lines(FAILURES / "cpu-0.32.0-fp8-bf16-no-amx.log"), 1, stopped_by_us=False, reason="exited", dummy=False)
    assert v.category == QUANT_BUILD
    assert v.evidence[0].startswith("ValueError: Failed to find a kernel that can implement the ScaledMM linear layer")
    assert any("requires AMX tile support" in e for e in v.evidence[1:])


def test_a_configuration_error_inside_a_wrapper_is_still_configuration():
    log = ["pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
           "  Value error, Sliding window for some but all layers is not supported. [type=value_error]",
           "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"]
    v = classify(log, 1, stopped_by_us=False, reason="exited")
    assert v.category == CONFIGURATION and v.evidence[0].startswith("Value error, Sliding window")


# --- equivalence -------------------------------------------------------------------------------
def logits_with(top: int, second: int, margin: float, vocab: int = 8, scale: float = 4.0) -> list[float]:
    row = [-scale + 0.01 * i for i in range(vocab)]
    row[top] = scale
    row[second] = scale - margin
    return row


def test_equal_tokens_are_equal():
    j = judge([[3, 5]], [[logits_with(3, 1, 1.0), logits_with(5, 1, 1.0)]], RELATIVE_TOLERANCE["float32"])
    assert j.verdict == EQUAL and j.equal == j.total == 2


def test_a_near_tie_broken_by_bf16_is_equal_within_tolerance_but_not_in_float32():
    """The served (bf16) engine took the original's second choice where the two are 0.02 apart
    on logits of magnitude 4: within bf16's rounding (2^-6 x 4 = 0.0625), beyond float32's."""
    served = [[1, 5]]
    ref = [[logits_with(3, 1, 0.02), logits_with(5, 1, 1.0)]]
    within = judge(served, ref, RELATIVE_TOLERANCE["bfloat16"])
    assert within.verdict == WITHIN and within.worst.step == 0 and within.worst.margin == pytest.approx(0.02)
    assert judge(served, ref, RELATIVE_TOLERANCE["float32"]).verdict == DIFFERENT


def test_a_clear_difference_names_the_step_and_both_tokens():
    j = judge([[3, 2, 5]], [[logits_with(3, 1, 1.0), logits_with(7, 2, 2.0), logits_with(5, 1, 1.0)]], RELATIVE_TOLERANCE["fp8"])
    assert j.verdict == DIFFERENT
    w = j.worst
    assert (w.step, w.served, w.top, w.margin) == (1, 2, 7, pytest.approx(2.0))


def test_the_tolerance_follows_what_the_server_ran():
    assert tolerance_key("float32", False) == "float32"
    assert tolerance_key("bfloat16", False) == "bfloat16" and tolerance_key("half", False) == "float16"
    assert tolerance_key("bfloat16", True) == "fp8"
    assert served_dtype(lines(LOGS / "cpu-0.32.0-llama.log")) == "float32"
    assert served_dtype(lines(FAILURES / "cpu-0.32.0-fp8-bf16-no-amx.log")) == "bfloat16"


# --- memory ------------------------------------------------------------------------------------
def test_a_figure_logged_to_two_decimals_agrees_within_its_rounding():
    """vLLM prints 0.06 GiB for a 64 MiB budget and 0.00 GiB for 2 MB of weights."""
    actual = parse_startup(["INFO 12-03 08:36:07 [cpu_worker.py:260] Explicitly set (0.06/23.54) GiB for KV cache on node 0.",
                            "INFO 12-03 08:36:07 [gpu_model_runner.py:1] Model loading took 0.00 GiB memory and 0.1 seconds"])
    check = compare({"weights_bytes": 2_023_184, "available_kv_bytes": 64 * 2**20}, actual)
    assert check["figures"]["weights_bytes"]["agrees"] is True  # 1.9 MiB is within 0.005 GiB of 0.00 GiB
    assert check["figures"]["available_kv_bytes"]["agrees"] is True
    assert check["agree"] is True


def test_a_disagreement_is_said_in_the_summary():
    check = compare({"kv_tokens": 65_536}, StartupFigures(kv_tokens=52_428))
    assert check["agree"] is False
    assert "KV tokens 65,536 predicted / 52,428 logged (1.25×, DISAGREES)" in summary(check)


# --- speculative decoding counts from the log ----------------------------------------------------
def test_speculative_counts_are_read_from_the_log():
    log = ["(APIServer pid=1) INFO 12-04 03:00:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 1.25, "
           "Accepted throughput: 0.10 tokens/s, Drafted throughput: 0.80 tokens/s, Accepted: 2 tokens, Drafted: 8 tokens, "
           "Per-position acceptance rate: 0.250"]
    assert spec_counts_from_log(log) == {"drafted": 8, "accepted": 2, "source": "log"}
    assert spec_counts_from_log(["nothing"]) is None


def test_a_kernel_without_the_models_head_sizes_is_a_build_limitation_not_a_dummy_one():
    """vLLM 0.26.0 on an H200, the demo's small MLA sizes (nope / rope / v 32): no MLA prefill
    kernel takes them. Seen classed as a dummy-initialisation limit (a traceback frame said
    load_dummy_weights) and, with real weights, as an implementation defect."""
    log = lines(FAILURES / "gpu-0.26.0-mla-dims-dummy.log")
    for dummy in (True, False):
        v = classify(log, 1, stopped_by_us=False, reason="exited", dummy=dummy)
        assert v.category == QUANT_BUILD, v
        assert v.evidence[0].startswith("ValueError: No valid MLA prefill backend found")


def test_each_workers_weights_against_its_own_prediction():
    """TP=2 with expert parallelism: both workers log "Model loading took"; each is compared
    with the prediction for its ranks, and one that disagrees fails the memory check."""
    tag = "(Worker_TP{0}_EP{0} pid=1{0}) INFO 12-04 10:00:00 [gpu_model_runner.py:5150] Model loading took {1} GiB memory and 3.0 seconds"
    actual = parse_startup([tag.format(0, "0.42"), tag.format(1, "0.61")])
    predicted = {"weights_bytes": int(0.42 * 2**30), "weights_by_rank": {"TP0_EP0": int(0.42 * 2**30), "TP1_EP1": int(0.42 * 2**30)}}
    check = compare(predicted, actual)
    assert check["weights_by_rank"]["TP0_EP0"]["agrees"] is True and check["weights_by_rank"]["TP1_EP1"]["agrees"] is False
    assert check["agree"] is False and check["compared"] == 3
    assert ("weights per worker: TP0_EP0 430 MiB predicted / 0.42 ± 0.005 GiB logged (1.00×, agrees), "
            "TP1_EP1 430 MiB predicted / 0.61 ± 0.005 GiB logged (0.69×, DISAGREES)") in summary(check)
    # one worker: its line is the weights row, no per-worker rows
    assert compare(predicted, parse_startup([tag.format(0, "0.42")]))["weights_by_rank"] == {}


def test_a_tp_size_that_cuts_fp8_blocks_is_a_configuration_verdict():
    from mxtrim_tui.core.validate.classify import CONFIGURATION, classify

    log = ["(Worker_TP1 pid=7) ERROR 12-04 10:00:00 [multiproc_executor.py:700] ValueError: The output_size of gate's and up's "
           "weight = 192 is not divisible by weight quantization block_n = 128."]
    verdict = classify(log, 1, stopped_by_us=False)
    assert verdict.category == CONFIGURATION and "smaller --tensor-parallel-size" in verdict.advice and "192" in verdict.evidence[0]
