"""Predicted against actual: the budget mxtrim computes for a served output, side by side with
the figures vLLM logs at start-up (model weights memory, KV cache memory, KV cache size in
tokens, maximum concurrency), each with its ratio.

The prediction is the budget of the output itself (every layer it holds) for the settings the
server ran with: TP, PP, context, sequences, the KV budget (``--kv-cache-memory-bytes``, as the
CPU build is given) or the GPU's memory and utilisation, and the dtype it serves in. vLLM logs
GiB figures rounded to two decimals (trailing zeros dropped: "0.0" is under 0.005 GiB); tokens
come in whole blocks.
"""

from __future__ import annotations

import math
from pathlib import Path

from .serve import batched_tokens
from .vllm_log import GIB, StartupFigures

BLOCK_SIZE = 16  # vLLM's default KV block: the cache holds whole blocks of tokens
WITHIN = 0.10  # a prediction within 10 % of the logged figure agrees


def predict(out: Path, opts, gpu_total_bytes: int | None = None) -> dict:
    """What the budget predicts for ``out`` served with ``opts`` (a ServeOptions)."""
    from ..model.inventory import build_inventory
    from ..plan.budget import VLLM_GPU_MEMORY_UTILIZATION, BudgetInputs, compute_budget
    from ..plan.build import Selection, build_plan
    from ..plan.partition import rank_weights
    from ..read.source import open_source

    inv = build_inventory(open_source(out))
    text = inv.text
    depth = len(text.layers) if text else 0
    plan = build_plan(inv, Selection({"text": tuple(range(depth))}, mtp=bool(opts.speculative_mtp)))
    # a dummy output holds no weights: what vLLM allocates is what the kept tensors of its source take
    source_plan = None if inv.source.shards else _source_plan(out, opts)
    source_ranks = (rank_weights(source_plan, max(1, opts.tp), opts.pp, expert_parallel=opts.expert_parallel,
                                 max_num_batched_tokens=batched_tokens(opts))
                    if source_plan is not None else None)
    inputs = BudgetInputs(tp=opts.tp, pp=opts.pp, expert_parallel=opts.expert_parallel, max_model_len=opts.max_model_len, max_num_seqs=opts.max_num_seqs,
                          max_num_batched_tokens=batched_tokens(opts),
                          gpu_memory_utilization=opts.gpu_memory_utilization or VLLM_GPU_MEMORY_UTILIZATION, gpu_total_bytes=gpu_total_bytes,
                          kv_cache_dtype=opts.dtype if opts.dtype == "float32" else "auto")
    b = compute_budget(plan, inputs)
    # weights as stored, and what vLLM derives from them while loading (the CPU build, which
    # serves float32, logs no weights figure); a dummy output's are its source's (or config's)
    ranks = b.ranks if inv.source.shards else source_ranks
    extra = mla_runtime_copies(plan if inv.source.shards else source_plan, opts.tp) if (inv.source.shards or source_plan) else 0
    weights = ranks.per_gpu + extra if ranks else None
    # what vLLM leaves the cache: its budget less the weights it loaded and the profiling peak
    available = opts.kv_cache_memory_bytes
    if available is None and b.budget_bytes is not None:
        available = b.budget_bytes - (weights or 0) - b.activation_bytes
    tokens = concurrency = None
    if available is not None and b.kv_per_token:
        exact = vllm_kv_capacity(plan, b, opts, available)
        if exact is not None:
            tokens, concurrency = exact
        else:
            tokens = max(0, available - b.state_bytes_per_seq * opts.max_num_seqs) // b.kv_per_token // BLOCK_SIZE * BLOCK_SIZE
            concurrency = tokens / opts.max_model_len
    by_rank = {k: v + extra for k, v in ranks.by_worker().items()} if ranks else {}
    return {"weights_bytes": weights,
            "weights_from": ranks.source_of_figures if ranks else None, "available_kv_bytes": available, "kv_tokens": tokens,
            "max_concurrency": concurrency, "kv_bytes_per_token": b.kv_per_token,
            "weights_by_rank": by_rank, "available_kv_by_rank": _kv_by_rank(b, by_rank, opts)}


def _kv_by_rank(budget, weights_by_rank: dict, opts) -> dict:
    """Each worker's KV budget where it differs between workers: the GPU's budget less that
    worker's own weights and the profiling peak. A budget given (``--kv-cache-memory-bytes``,
    the CPU build's) is every worker's: {} (the ``available_kv_bytes`` prediction stands for all)."""
    if opts.kv_cache_memory_bytes is not None or budget.budget_bytes is None:
        return {}
    return {rank: budget.budget_bytes - w - budget.activation_bytes for rank, w in weights_by_rank.items()}


def mla_runtime_copies(plan, tp: int) -> int:
    """Bytes vLLM adds on each rank while loading an MLA layer whose ``kv_b_proj`` is
    quantized: its GPU MLA path dequantizes the weight into 16-bit ``W_UK_T`` and ``W_UV``
    (``process_weights_after_loading``: "we just store fp16/bf16 copies") beside the quantized
    one — ``heads / TP × (qk_nope + v) × kv_lora_rank × 2`` bytes per layer. Seen on an H200:
    12 MiB for three such layers, the difference between the tensors and "Model loading took"."""
    src = plan.inventory.source
    total = 0
    for old, new in plan.renames:
        if not new.endswith(".kv_b_proj.weight") or not src.is_present(old):
            continue
        info = src.tensor(old)
        if str(info.dtype) in ("BF16", "F16", "F32") or len(info.shape) != 2:
            continue
        rows, cols = info.shape
        total += -(-rows // max(1, tp)) * cols * 2
    return total


def kv_block_size(device: str, mla: bool) -> int:
    """vLLM's default KV block: on the CPU build 128 tokens, 16 for its MLA kernel
    (``CpuPlatform.check_and_update_config``); on GPUs 16, 64 for FlashMLA."""
    if device == "cpu":
        return 16 if mla else 128
    return 64 if mla else 16


def vllm_kv_capacity(plan, budget, opts, available: int) -> tuple[int, float] | None:
    """(tokens, concurrency) as vLLM reports them at start-up ("KV cache size: N tokens,
    Maximum concurrency ..."), from its own arithmetic (``vllm/v1/core/kv_cache_utils.py``):
    layers are bucketed by kind; a hybrid model's buckets are split into groups of
    ``group_size`` layers (the smallest bucket, or the largest when that is < 1.5x it); the
    pool holds ``available // (page × group_size)`` blocks; a request at the full context needs
    ``cdiv(context, block)`` blocks per full-attention group and ``cdiv(min(window - 1 +
    batched, context), block) + 1`` per sliding group; tokens = blocks / per-request × context.
    None where that arithmetic is not modelled here (recurrent state, unequal pages)."""
    from ..model.families.base import CHUNKED, DSA_FULL, DSA_SHARED, FULL, MLA, NOPE_GLOBAL, SLIDING, compression_ratio
    from ..plan.budget import whole_sequence_capacity
    from ..plan.build import text_config

    if any(compression_ratio(line.kind) is not None for line in budget.kv_lines) and budget.kv_bytes_for_context:
        # DeepSeek-V4: vLLM reports its capacity as concurrency × context, a request at the
        # full context holding every cache of every layer (windows, compressed rows, indexer
        # keys, compressor states: the budget's bytes of one sequence)
        return whole_sequence_capacity(available, budget.kv_bytes_for_context, opts.max_model_len)
    buckets: dict[str, list[int]] = {}
    for line in budget.kv_lines:
        if line.kind not in (FULL, SLIDING, NOPE_GLOBAL, MLA, DSA_FULL, DSA_SHARED, CHUNKED) or budget.state_bytes_per_seq:
            return None
        key = "sliding" if line.kind in (SLIDING, CHUNKED) else "full"
        buckets.setdefault(key, []).extend([line.bytes_per_token] * line.layers)
    per_layer = {n for layers in buckets.values() for n in layers}
    if len(per_layer) != 1 or not buckets:
        return None
    mla = any(line.kind in (MLA, DSA_FULL, DSA_SHARED) for line in budget.kv_lines)
    block = kv_block_size(opts.device, mla)
    page = block * per_layer.pop()
    context = opts.max_model_len
    batched = batched_tokens(opts)
    cfg = text_config(plan)
    window = cfg.get("sliding_window") or cfg.get("attention_chunk_size") or 0
    sizes = [len(v) for v in buckets.values()]
    group = min(sizes) if len(sizes) > 1 else sizes[0]
    if len(sizes) > 1 and max(sizes) < min(sizes) * 1.5:
        group = max(sizes)
    blocks = available // (page * group)
    per_request = 0
    for kind, layers in buckets.items():
        groups = -(-len(layers) // group)
        if kind == "sliding" and isinstance(window, int) and window > 0:
            need = -(-min(window - 1 + batched, context) // block) + 1
        else:
            need = -(-context // block)
        per_request += groups * need
    if not per_request:
        return None
    concurrency = blocks / per_request
    return int(concurrency * context), concurrency


def source_weights(out: Path, opts):
    """A dummy output holds no weights: what vLLM allocates for it is what the kept tensors of
    its source take (the plan re-made from the source it names, for the served TP / PP / EP),
    as a ``RankWeights``; None when that source is gone or names no tensors."""
    from ..plan.partition import rank_weights

    plan = _source_plan(out, opts)
    return None if plan is None else rank_weights(plan, max(1, opts.tp), opts.pp, expert_parallel=opts.expert_parallel,
                                                  max_num_batched_tokens=batched_tokens(opts))


def _source_plan(out: Path, opts):
    """The plan of a dummy output re-made from the source it names, as served: its MTP layer
    only with speculative decoding (vLLM loads no MTP weights without it). None when that
    source is gone, changed or names no tensors."""
    import json

    from ..model.inventory import build_inventory
    from ..plan.build import Selection, build_plan
    from ..read.source import COMPLETE, open_source

    try:
        doc = json.loads((out / "mxtrim-plan.json").read_text(encoding="utf-8"))
        source = open_source(Path(doc["source"]))
        kept = {k: tuple(v) for k, v in (doc.get("kept") or {}).items()}
        served_mtp = bool(doc.get("mtp_kept")) and bool(opts.speculative_mtp)
        plan = build_plan(build_inventory(source), Selection(kept, mtp=served_mtp))
        if not plan.errors and source.state != COMPLETE:
            # parts without headers: their weights come from the config, through transformers'
            # meta build of the output config (made by the plan check, remembered)
            from ..checks.plan_outcome import checked_plan_cached

            plan = checked_plan_cached(plan, force=True)
    except Exception:  # the source moved, changed or cannot be read: no prediction
        return None
    return None if plan.errors else plan


def compare(predicted: dict, actual: StartupFigures) -> dict:
    """``{figure: {predicted, actual, ratio, agrees}}`` and an overall verdict."""
    rows = {key: _agreement(predicted.get(key), getattr(actual, key), actual.rounding_bytes.get(key, 0))
            for key in ("weights_bytes", "available_kv_bytes", "kv_tokens", "max_concurrency")}
    per_rank = _per_rank(predicted.get("weights_by_rank") or {}, actual.weights_by_rank, actual.rounding_bytes.get("weights_bytes", 0))
    kv_per_rank = _per_rank(predicted.get("available_kv_by_rank") or {}, actual.available_kv_by_rank,
                            actual.rounding_bytes.get("available_kv_bytes", 0), predicted.get("available_kv_bytes"))
    compared = [r["agrees"] for r in [*rows.values(), *per_rank.values(), *kv_per_rank.values()] if r["agrees"] is not None]
    return {"figures": rows, "weights_by_rank": per_rank, "available_kv_by_rank": kv_per_rank, "device": actual.device, "weights_from": predicted.get("weights_from"), "kv_bytes_per_token": predicted.get("kv_bytes_per_token"),
            "compared": len(compared), "agree": all(compared) if compared else None, "log_lines": list(actual.source_lines)}


def _per_rank(predicted: dict, logged: dict, rounding: int, every=None) -> dict:
    """Each worker's logged figure (weights, KV budget) against its own prediction, ``every``
    where none is its own (only where more than one worker logged: a lone worker's figure is
    the row of ``figures``)."""
    if len(logged) < 2:
        return {}
    return {rank: _agreement(predicted.get(rank, every), a, rounding) for rank, a in sorted(logged.items())}


def _agreement(p, a, rounding: int) -> dict:
    """One figure predicted against logged: the ratio, and whether they agree — within the
    printed figure's rounding, or within WITHIN of it (None: one of them is missing)."""
    ratio = (p / a) if (p is not None and a) else None
    agrees = None if (p is None or a is None) else (abs(p - a) <= rounding or (ratio is not None and abs(ratio - 1) <= WITHIN))
    return {"predicted": p, "actual": a, "ratio": round(ratio, 4) if ratio is not None else None,
            "agrees": agrees, "log_rounding": rounding or None}


def summary(check: dict) -> str:
    """One line: each compared figure, predicted / actual and the ratio; with several workers,
    each one's weights and KV memory."""
    names = {"weights_bytes": "weights", "available_kv_bytes": "KV memory", "kv_tokens": "KV tokens", "max_concurrency": "concurrency"}
    if check.get("weights_from") in ("config", "headers and config"):
        names["weights_bytes"] = f"weights ({'from the config' if check['weights_from'] == 'config' else 'headers and config'})"
    parts = [f"{names[key]} {_compared(key, row)}" for key, row in check["figures"].items() if row["actual"] is not None]
    ranks = check.get("weights_by_rank") or {}
    if ranks:
        parts.append("weights per worker: " + ", ".join(f"{rank} {_compared('weights_bytes', row)}" for rank, row in ranks.items()))
    kv_ranks = check.get("available_kv_by_rank") or {}
    if kv_ranks:
        parts.append("KV memory per worker: " + ", ".join(f"{rank} {_compared('available_kv_bytes', row)}" for rank, row in kv_ranks.items()))
    missing = [names[k] for k, r in check["figures"].items() if r["actual"] is None]
    # a server that stopped while starting logged only what came before (the weights, then the KV budget)
    why = "the server stopped during start-up before it logged" if check.get("stopped_during_startup") else "not logged by this vLLM"
    return "; ".join(parts) + (f"; {why}: {', '.join(missing)}" if missing else "")


def _compared(key: str, row: dict) -> str:
    verdict = {True: "agrees", False: "DISAGREES", None: "not compared"}[row["agrees"]]
    if row["agrees"] and row.get("log_rounding") and (row["ratio"] is None or abs(row["ratio"] - 1) > WITHIN):
        verdict = "agrees within the log's rounding"
    rounded = key.endswith("bytes") and row.get("log_rounding") and row["actual"] is not None
    logged = _logged(row["actual"], row["log_rounding"]) if rounded else _shown(key, row["actual"])
    return (f"{_shown(key, row['predicted'])} predicted / {logged} logged"
            + (f" ({row['ratio']:.2f}×, {verdict})" if row["ratio"] is not None else f" ({verdict})"))


def _logged(value: int, rounding: int) -> str:
    """A GiB figure as vLLM printed it, to the rounding it was printed with (``rounding``: half
    its last decimal, in bytes): "14.91 ± 0.005 GiB", or "under 0.005 GiB" where it printed 0."""
    half = rounding / GIB
    decimals = max(0, round(-math.log10(2 * half)))
    if value == 0:
        return f"under {half:.{decimals + 1}f} GiB"
    return f"{value / GIB:.{decimals}f} ± {half:.{decimals + 1}f} GiB"


def _shown(key: str, value) -> str:
    from ..units import human_bytes

    if value is None:
        return "—"
    if key.endswith("bytes"):
        return human_bytes(value)
    if key == "max_concurrency":
        return f"{value:.2f}×"
    return f"{value:,}"
