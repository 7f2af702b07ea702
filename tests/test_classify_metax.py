"""Failures reported from vLLM-MetaX runs on MetaX C500 GPUs, classed with the line they rest on
and the advice that line supports (issue 32, item 6). No server, no GPU: logs only.

The logs under fixtures/metax_logs/ are reconstructed from the reported runs (vLLM 0.17 with
the vllm_metax platform plugin): the first line is the `$ COMMAND` mxtrim writes, then vLLM's
own lines, the traceback and the error in vLLM's and the libraries' wording; long tracebacks
are shortened. They are not byte-for-byte captures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mxtrim_tui.core.probe.environment import PackageInfo
from mxtrim_tui.core.validate.classify import (
    CONFIGURATION, DEFECT, ENVIRONMENT, QUANT_BUILD, RESOURCES, classify,
)

LOGS = Path(__file__).parent / "fixtures" / "metax_logs"
PUBLIC_TORCH = {"packages": {"torch": {"version": "2.8.0+cu128",
                                       "origin": "/opt/conda/lib/python3.10/site-packages/torch/__init__.py"}}}


def log(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def verdict(lines: list[str], **kw):
    return classify(lines, 1, stopped_by_us=False, reason="exited", **kw)


# --- 1. MACA_PATH unset -------------------------------------------------------------------------
def test_maca_path_unset_is_environment_with_the_maca_exports():
    v = verdict(log("c500-maca-path-unset.log"))
    assert v.category == ENVIRONMENT
    assert v.evidence[0] == "TypeError: expected str, bytes or os.PathLike object, not NoneType"
    assert not any("File " in e or "Engine core initialization failed" in e for e in v.evidence)
    for needed in ("MACA_PATH=/opt/maca", "LD_LIBRARY_PATH=$MACA_PATH/lib", "mxgpu_llvm/lib",
                   "MACA_CLANG_PATH=/opt/maca/mxgpu_llvm/bin", ".bashrc", "non-interactive SSH"):
        assert needed in v.advice, needed


def test_the_same_typeerror_outside_the_maca_backend_is_not_environment():
    """The generic TypeError counts as MACA_PATH only where the traceback that raised it runs
    through the MetaX backend: a vLLM-MetaX log (the plugin named) is not enough."""
    head = [line for line in log("c500-maca-path-unset.log") if "ERROR" not in line and "Traceback" not in line][:12]
    assert any("Platform plugin metax is activated" in line for line in head)
    tag = "(EngineCore_DP0 pid=30602) ERROR 12-02 20:23:19 [core.py:708] "
    lines = head + [tag + text for text in (
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/vllm/transformers_utils/config.py", line 412, in get_config',
        "    config_path = os.path.join(model, revision)",
        '  File "/opt/conda/lib/python3.10/posixpath.py", line 90, in join',
        "    genericpath._check_arg_types('join', a, *p)",
        "TypeError: expected str, bytes or os.PathLike object, not NoneType")]
    v = verdict(lines)
    assert v.category != ENVIRONMENT and "MACA_PATH" not in v.advice
    # nor a bare TypeError with no traceback at all
    assert verdict(["TypeError: expected str, bytes or os.PathLike object, not NoneType"]).category == DEFECT


def test_a_maca_frame_in_another_processes_traceback_does_not_count():
    """Tracebacks are read per process: the MetaX frames of one do not explain another's error."""
    lines = [
        "(EngineCore_DP0 pid=1) Traceback (most recent call last):",
        '(EngineCore_DP0 pid=1)   File "/site-packages/vllm/config/model.py", line 10, in f',
        "(APIServer pid=2) Traceback (most recent call last):",
        '(APIServer pid=2)   File "/site-packages/triton/backends/metax/driver.py", line 29, in libmaca_dir',
        "(APIServer pid=2) ValueError: something else",
        "(EngineCore_DP0 pid=1) TypeError: expected str, bytes or os.PathLike object, not NoneType",
    ]
    assert verdict(lines).category != ENVIRONMENT


# --- 2. MACA_CLANG_PATH naming the mxcc file ----------------------------------------------------
def test_maca_clang_path_to_the_mxcc_file_is_environment():
    v = verdict(log("c500-maca-clang-path-file.log"), environment={"variables": {"MACA_CLANG_PATH": "/opt/maca/mxgpu_llvm/bin/mxcc"}})
    assert v.category == ENVIRONMENT
    assert v.evidence[0] == "NotADirectoryError: [Errno 20] Not a directory: '/opt/maca/mxgpu_llvm/bin/mxcc/mxcc'"
    assert "MACA_CLANG_PATH must be the directory" in v.advice and "/opt/maca/mxgpu_llvm/bin" in v.advice
    assert "(it is /opt/maca/mxgpu_llvm/bin/mxcc)" in v.advice


# --- 3. FP8 on a C500 / build without it --------------------------------------------------------
def test_fp8_on_metax_is_a_build_limitation_naming_the_setting_never_the_trim():
    v = verdict(log("c500-fp8-unsupported.log"))
    assert v.category == QUANT_BUILD != CONFIGURATION
    assert v.evidence[0].startswith("Value error, fp8 quantization is currently not supported in maca.")
    assert not any("validation error for ModelConfig" in e for e in v.evidence)
    assert "VLLM_METAX_SUPPORTS_FP8" in v.advice and "VLLM_METAX_USE_FP8_WO_A" in v.advice
    advice = v.advice.lower()
    assert "trim" not in advice and "kept layers" not in advice


def test_the_fp8_setting_the_log_names_comes_first():
    lines = log("c500-fp8-unsupported.log")
    lines[0] = "$ VLLM_METAX_USE_FP8_WO_A=1 " + lines[0][2:]
    v = verdict(lines)
    assert v.category == QUANT_BUILD and "settings involved: VLLM_METAX_USE_FP8_WO_A, VLLM_METAX_SUPPORTS_FP8" in v.advice


def test_the_fp8_rule_needs_a_metax_run():
    v = verdict(["ValueError: fp8 quantization is currently not supported in ROCm."])
    assert "VLLM_METAX" not in v.advice


# --- 4. a public torch in place of MetaX's --------------------------------------------------------
def test_a_public_torch_is_environment_carrying_its_build_tag():
    v = verdict(log("c500-public-torch.log"), environment=PUBLIC_TORCH)
    assert v.category == ENVIRONMENT
    assert v.evidence[0].startswith("RuntimeError: Found no NVIDIA driver on your system")
    assert v.facts == {"torch": "2.8.0+cu128", "torch_build": "cu128"}
    assert v.to_json()["facts"]["torch_build"] == "cu128"
    assert "torch 2.8.0+cu128" in v.advice and "+metax" in v.advice and "public build" in v.advice


def test_the_torch_version_a_log_line_shows_is_quoted():
    lines = ["PyTorch version: 2.8.0+cu128",
             "INFO 12-05 16:12:03 [__init__.py:235] Platform plugin metax is activated",
             "(APIServer pid=7) RuntimeError: Failed to infer device type, please set the environment variable "
             "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."]
    v = verdict(lines)
    assert v.category == ENVIRONMENT
    assert v.evidence[0].startswith("RuntimeError: Failed to infer device type")  # the process tag left out
    assert "PyTorch version: 2.8.0+cu128" in v.evidence
    assert v.facts["torch_build"] == "cu128" and "public build" in v.advice


def test_the_environment_read_by_the_probe_may_hold_package_infos():
    env = {"packages": {"torch": PackageInfo("torch", "2.8.0+metax3.7.2.0", None)}}
    v = verdict(["RuntimeError: No CUDA GPUs are available"], environment=env)
    assert v.category == ENVIRONMENT and v.facts == {"torch": "2.8.0+metax3.7.2.0", "torch_build": "metax3.7.2.0"}
    assert "MetaX's build but sees no device" in v.advice and "MACA_VISIBLE_DEVICES" in v.advice


def test_without_a_version_the_advice_says_how_to_read_it():
    v = verdict(log("c500-public-torch.log"))
    assert v.category == ENVIRONMENT and v.facts == {} and "facts" not in v.to_json()
    assert "torch.__version__" in v.advice and "+metax" in v.advice


# --- 5. out of memory while torch.compile autotunes ------------------------------------------------
def test_an_autotuning_oom_at_start_up_is_resources_with_room_or_eager():
    v = verdict(log("c500-autotune-oom.log"))
    assert v.category == RESOURCES
    assert v.evidence[0].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB.")
    assert "--gpu-memory-utilization 0.8" in v.advice and "--enforce-eager" in v.advice


def test_an_oom_elsewhere_keeps_the_generic_resources_advice():
    lines = [line for line in log("c500-autotune-oom.log") if not any(w in line for w in ("_inductor", "autotune", "benchmark"))]
    v = verdict(lines)
    assert v.category == RESOURCES and "--enforce-eager" not in v.advice and "--max-num-seqs" in v.advice


# --- 6. vllm_metax's compile-mode check on fused GPTQ layers ---------------------------------------
def test_some_but_not_all_shards_quantized_is_a_runtime_defect_served_eager():
    v = verdict(log("c500-gptq-shards-compile.log"))
    assert v.category == DEFECT
    assert v.evidence[0].startswith("ValueError: Detected some but not all shards of model.layers.0.self_attn.qkv_proj are quantized.")
    assert "--enforce-eager" in v.advice and "report it" not in v.advice


def test_the_shards_message_without_vllm_metax_gets_no_eager_advice():
    v = verdict(["ValueError: Detected some but not all shards of model.layers.0.mlp.gate_up_proj are quantized. "
                 "All shards of fused layers to have the same precision."])
    assert "--enforce-eager" not in v.advice


# --- 7. the KV cache too small for max_model_len ----------------------------------------------------
def test_a_kv_cache_too_small_names_the_longest_context_that_fits():
    v = verdict(log("c500-kv-cache-max-model-len.log"))
    assert v.category == RESOURCES
    assert v.evidence[0].startswith("ValueError: To serve at least one request with the models's max seq len (131072)")
    assert "--max-model-len 36752" in v.advice and "131072" in v.advice


def test_a_kv_message_without_vllms_estimate_keeps_the_generic_advice():
    line = ("ValueError: To serve at least one request with the model's max seq len (4096), (0.50 GiB KV cache is needed, "
            "which is larger than the available KV cache memory (0.01 GiB). Try increasing `gpu_memory_utilization`")
    v = verdict([line])
    assert v.category == RESOURCES and not re.search(r"--max-model-len \d", v.advice) and "kv-cache-memory-bytes" in v.advice


# --- the old callers ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_fixture_classes_without_the_new_keyword(name):
    v = classify(log(name), 1, stopped_by_us=False)
    assert v is not None and v.category and v.evidence and v.advice
    assert set(v.to_json()) <= {"class", "summary", "evidence", "advice", "facts"}
