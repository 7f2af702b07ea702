"""What several commands take: the selection and serve settings (`plan`, `trim`), the
validation flags (`validate`, `trim --validate`), the hidden ``--debug`` after a command, and
the parsers of their values. A malformed value is a usage error (exit status 2)."""

from __future__ import annotations

import argparse
import math

# --flag -> parse_budget_inputs key: the serve settings written into the report's command.
SERVE_FLAGS = {
    "--tp": "tp",
    "--pp": "pp",
    "--dp": "dp",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--gpu-memory": "gpu_gib",
    "--enable-expert-parallel": "expert_parallel",
}


class UsageError(Exception):
    """A malformed option value (exit status 2)."""


def hidden_debug(sp) -> None:
    """``--debug`` after the command as well as before it, left out of the command's help."""
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def validation_args(sp) -> None:
    """What `validate` takes, and `trim --validate` with it."""
    sp.add_argument("--serve", action="store_true", help="start vllm serve on the output, send requests, stop it")
    sp.add_argument("--python", metavar="PY", help="interpreter of the environment holding vLLM (default: $MXTRIM_VLLM_PYTHON, "
                    "the wizard's kept setting, .venv-vllm/bin/python of this checkout, then of the current directory, "
                    "the interpreter of a vllm command on PATH, this interpreter: the first that has vLLM)")
    sp.add_argument("--launcher", metavar="CMD", help="server command instead of 'PY -m vllm.entrypoints.cli.main serve' (split like a shell; gets --model OUT)")
    sp.add_argument("--device", choices=["auto", "cpu", "cuda", "maca"], default="auto", help="where the server runs (auto: idle GPUs, else the CPU)")
    sp.add_argument("--gpus", metavar="IDS", help="devices for the server, e.g. 0,1 (refused when another process uses one)")
    sp.add_argument("--kv-cache-memory-bytes", type=parse_size, metavar="SIZE", help="KV cache budget (CPU default 64MB)")
    sp.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="seconds the starting server may go without progress (no new log line) before it is given up; a start that keeps logging may take up to an hour")
    sp.add_argument("--equivalence", action="store_true", help="with --serve (implied): greedy tokens of the served real-weight trim against the original model run in transformers with only the kept layers")
    sp.add_argument("--speculative", action="store_true", help="serve with speculative decoding through the kept MTP layer (method mtp, 1 token)")
    sp.add_argument("--graph", action=_ServeToo, nargs=0, default=False,
                    help="with --serve (implied): graph mode, a run of its own: serve without --enforce-eager (vLLM's "
                    "default compilation, CUDA graphs on a GPU) and record the compile / capture time it logs")
    sp.add_argument("--trust-remote-code", action="store_true", help="allow code from the output directory (auto_map) to run")


class _ServeToo(argparse.Action):
    """A flag that asks for a server: it sets itself and ``--serve``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True)
        namespace.serve = True


def selection_args(sp) -> None:
    """SRC, the selection and the serve settings: what `plan` and `trim` share."""
    sp.add_argument("source", metavar="SRC", nargs="?",
                    help="Hugging Face-layout model directory, or hf://ORG/NAME[@REVISION] (the Hub, $HF_ENDPOINT) or "
                    "ms://ORG/NAME[@REVISION] (ModelScope), read by range requests ("
                    "headers and small files; a real-weight trim then fetches only the kept tensors' bytes)")
    sp.add_argument(
        "--keep",
        action="append",
        metavar="SPEC",
        help="layers to keep, [SUBMODEL=]i,j,a-b in original indices (default submodel: text; "
        "repeatable; 'auto' = minimal covering set). No --keep: automatic.",
    )
    mtp = sp.add_mutually_exclusive_group()
    mtp.add_argument("--mtp", dest="mtp", action="store_true", default=None, help="keep MTP / draft heads (default when present)")
    mtp.add_argument("--no-mtp", dest="mtp", action="store_false", help="drop MTP / draft heads")
    sp.add_argument("--json", action="store_true", help="print the plan as JSON (schema mxtrim.plan/1)")
    sp.add_argument(
        "--force",
        action="store_true",
        help="write even when transformers builds other layers from the output config than the kept ones "
        "(the report says so)",
    )
    sp.add_argument("--repo", metavar="OWNER/NAME",
                    help="the Hub repository of the source, for the download command of missing shards "
                    "(default: config.json's _name_or_path when it is one)")
    hidden_debug(sp)
    serve = sp.add_argument_group("serve settings", "written into the report's vllm serve command; checked against the model")
    serve.add_argument("--tp", metavar="N", help="tensor-parallel size (must divide the attention heads)")
    serve.add_argument("--pp", metavar="N", help="pipeline-parallel size (at most the kept text layers)")
    serve.add_argument("--dp", metavar="N", help="data-parallel size (with --ep: experts spread over TP × DP ranks)")
    serve.add_argument("--ep", "--enable-expert-parallel", dest="expert_parallel", action="store_true", default=None,
                       help="expert parallelism: whole experts over TP × DP ranks instead of splitting each")
    serve.add_argument("--max-model-len", metavar="N", help="context length")
    serve.add_argument("--max-num-seqs", metavar="N", help="concurrent sequences")
    serve.add_argument("--max-num-batched-tokens", metavar="N", help="tokens per scheduler step (default: the context length)")
    serve.add_argument("--gpu-memory-utilization", metavar="F", help="fraction of GPU memory vLLM may use, in (0, 1]")
    serve.add_argument("--kv-cache-dtype", metavar="DTYPE", help="auto (the model's dtype), fp8, fp8_e4m3, fp8_e5m2, ...")
    serve.add_argument("--gpu-memory", dest="gpu_gib", metavar="GIB",
                       help="memory of one GPU for the budget (default: the first visible GPU, when one is)")


MAX_SHARD_LIMIT = 10**12


def parse_size(text: str) -> int:
    """'5GB' -> 5_000_000_000 (decimal units, as huggingface_hub); plain integers are bytes."""
    units = {"TB": 10**12, "GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
    t = text.strip().upper()
    value = None
    for unit, mult in units.items():
        if t.endswith(unit):
            try:
                number = float(t[: -len(unit)])
            except ValueError:
                break
            if math.isfinite(number) and number * mult < 2**63:
                value = int(number * mult)
            break
    else:
        if t.isascii() and t.isdigit():
            value = int(t)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MB or 123456") from None
    if not 1 <= value <= MAX_SHARD_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard size is between 1 byte and 1 TB")
    return value
