"""Predicted against actual: the budget mxtrim computes for a served output, side by side with
the figures vLLM logs at start-up (model weights memory, KV cache memory, KV cache size in
tokens, maximum concurrency), each with its ratio.

The prediction is the budget of the output itself (every layer it holds) for the settings the
server ran with: TP, PP, context, sequences, the KV budget (``--kv-cache-memory-bytes``, as the
CPU build is given) or the GPU's memory and utilisation, and the dtype it serves in. vLLM logs
GiB figures rounded to two decimals; tokens come in whole blocks.
"""

from __future__ import annotations

from pathlib import Path

from .vllm_log import StartupFigures

BLOCK_SIZE = 16  # vLLM's default KV block: the cache holds whole blocks of tokens
WITHIN = 0.10  # a prediction within 10 % of the logged figure agrees


def predict(out: Path, opts, gpu_total_bytes: int | None = None) -> dict:
    """What the budget predicts for ``out`` served with ``opts`` (a ServeOptions)."""
    from ..model.inventory import build_inventory
    from ..plan.budget import BudgetInputs, compute_budget
    from ..plan.build import Selection, build_plan
    from ..read.source import open_source

    inv = build_inventory(open_source(out))
    text = inv.text
    depth = len(text.layers) if text else 0
    plan = build_plan(inv, Selection({"text": tuple(range(depth))}, mtp=bool(opts.speculative_mtp)))
    inputs = BudgetInputs(tp=opts.tp, pp=opts.pp, max_model_len=opts.max_model_len, max_num_seqs=opts.max_num_seqs,
                          max_num_batched_tokens=max(opts.max_model_len, 256),
                          gpu_memory_utilization=opts.gpu_memory_utilization or 0.9, gpu_total_bytes=gpu_total_bytes,
                          kv_cache_dtype=opts.dtype if opts.dtype == "float32" else "auto")
    b = compute_budget(plan, inputs)
    available = opts.kv_cache_memory_bytes if opts.kv_cache_memory_bytes is not None else b.available_kv_bytes
    tokens = None
    if available is not None and b.kv_per_token:
        tokens = max(0, available - b.state_bytes_per_seq * opts.max_num_seqs) // b.kv_per_token // BLOCK_SIZE * BLOCK_SIZE
    # weights as stored (the CPU build, which serves float32, logs no weights figure)
    return {"weights_bytes": b.weights_per_gpu, "available_kv_bytes": available, "kv_tokens": tokens,
            "max_concurrency": tokens / opts.max_model_len if tokens is not None else None,
            "kv_bytes_per_token": b.kv_per_token}


def compare(predicted: dict, actual: StartupFigures) -> dict:
    """``{figure: {predicted, actual, ratio, agrees}}`` and an overall verdict."""
    rows = {}
    for key in ("weights_bytes", "available_kv_bytes", "kv_tokens", "max_concurrency"):
        p, a = predicted.get(key), getattr(actual, key)
        ratio = (p / a) if (p is not None and a) else None
        rows[key] = {"predicted": p, "actual": a, "ratio": round(ratio, 4) if ratio is not None else None,
                     "agrees": None if ratio is None else abs(ratio - 1) <= WITHIN}
    compared = [r["agrees"] for r in rows.values() if r["agrees"] is not None]
    return {"figures": rows, "device": actual.device, "kv_bytes_per_token": predicted.get("kv_bytes_per_token"),
            "compared": len(compared), "agree": all(compared) if compared else None, "log_lines": list(actual.source_lines)}


def summary(check: dict) -> str:
    """One line: each compared figure, predicted / actual and the ratio."""
    names = {"weights_bytes": "weights", "available_kv_bytes": "KV memory", "kv_tokens": "KV tokens", "max_concurrency": "concurrency"}
    parts = []
    for key, row in check["figures"].items():
        if row["actual"] is None:
            continue
        parts.append(f"{names[key]} {_shown(key, row['predicted'])} predicted / {_shown(key, row['actual'])} logged"
                     + (f" ({row['ratio']:.2f}×)" if row["ratio"] is not None else ""))
    missing = [names[k] for k, r in check["figures"].items() if r["actual"] is None]
    return "; ".join(parts) + (f"; not logged by this vLLM: {', '.join(missing)}" if missing else "")


def _shown(key: str, value) -> str:
    from ..units import human_bytes

    if value is None:
        return "—"
    if key.endswith("bytes"):
        return human_bytes(value)
    if key == "max_concurrency":
        return f"{value:.2f}×"
    return f"{value:,}"
