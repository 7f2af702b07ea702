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
    weights = source_weights(out, opts) if not inv.source.shards else None
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
    weights_bytes = b.weights_per_gpu if inv.source.shards else weights
    return {"weights_bytes": weights_bytes, "available_kv_bytes": available, "kv_tokens": tokens,
            "max_concurrency": tokens / opts.max_model_len if tokens is not None else None,
            "kv_bytes_per_token": b.kv_per_token}


def source_weights(out: Path, opts) -> int | None:
    """A dummy output holds no weights: what vLLM allocates for it is what the kept tensors of
    its source take (the plan re-made from the source it names, for the served TP / PP);
    None when that source is gone or names no tensors."""
    import json

    from ..model.inventory import build_inventory
    from ..plan.budget import BudgetInputs, compute_budget
    from ..plan.build import Selection, build_plan
    from ..read.source import CONFIG_ONLY, open_source

    try:
        doc = json.loads((out / "mxtrim-plan.json").read_text(encoding="utf-8"))
        source = open_source(Path(doc["source"]))
        if source.state == CONFIG_ONLY:
            return None
        kept = {k: tuple(v) for k, v in (doc.get("kept") or {}).items()}
        plan = build_plan(build_inventory(source), Selection(kept, mtp=bool(doc.get("mtp_kept"))))
    except Exception:  # the source moved, changed or cannot be read: no prediction
        return None
    if plan.errors:
        return None
    b = compute_budget(plan, BudgetInputs(tp=opts.tp, pp=opts.pp, max_model_len=opts.max_model_len, max_num_seqs=opts.max_num_seqs))
    return b.weights_per_gpu


def compare(predicted: dict, actual: StartupFigures) -> dict:
    """``{figure: {predicted, actual, ratio, agrees}}`` and an overall verdict."""
    rows = {}
    for key in ("weights_bytes", "available_kv_bytes", "kv_tokens", "max_concurrency"):
        p, a = predicted.get(key), getattr(actual, key)
        ratio = (p / a) if (p is not None and a) else None
        # within the printed figure's rounding, or within WITHIN of it
        rounding = actual.rounding_bytes.get(key, 0) if actual.rounding_bytes else 0
        if p is None or a is None:
            agrees = None
        else:
            agrees = abs(p - a) <= rounding or (ratio is not None and abs(ratio - 1) <= WITHIN)
        rows[key] = {"predicted": p, "actual": a, "ratio": round(ratio, 4) if ratio is not None else None,
                     "agrees": agrees, "log_rounding": rounding or None}
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
        verdict = {True: "agrees", False: "DISAGREES", None: "not compared"}[row["agrees"]]
        if row["agrees"] and row.get("log_rounding") and row["ratio"] is not None and abs(row["ratio"] - 1) > WITHIN:
            verdict = "agrees within the log's rounding"
        parts.append(f"{names[key]} {_shown(key, row['predicted'])} predicted / {_shown(key, row['actual'])} logged"
                     + (f" ({row['ratio']:.2f}×, {verdict})" if row["ratio"] is not None else f" ({verdict})"))
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
