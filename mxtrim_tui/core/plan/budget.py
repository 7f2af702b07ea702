"""Disk and GPU memory budget of a plan, from exact header bytes and the KV-cache formulas
vLLM uses (prior-art guide §2.5).

* Weights: exact bytes of the retained tensors; per GPU divided by TP (replicated tensors —
  embeddings with TP > vocab shards aside — are not modelled: a stated simplification).
* KV cache per token, per GPU: full/sliding attention ``2 * kv_heads/TP * head_dim * dtype``
  (kv heads replicated when fewer than TP); MLA ``(kv_lora_rank + qk_rope_head_dim) * dtype``,
  not divided by TP; DSA adds the indexer key cache (``index_head_dim`` FP8 bytes + scale);
  sliding layers are capped at the window; linear / Mamba layers hold a per-sequence state
  (not estimated here, said so).
* vLLM's start-up arithmetic: budget = total × gpu_memory_utilization; available KV =
  budget − weights − activation peak (rough); KV tokens = available / per-token; maximum
  concurrency = KV tokens / max_model_len.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from ..model.families.base import CHUNKED, DSA_FULL, DSA_SHARED, FULL, KV_SHARED, LINEAR, MAMBA, MLA, NOPE_GLOBAL, SLIDING, first_int
from .build import TrimPlan


@dataclass(frozen=True)
class BudgetInputs:
    tp: int = 1
    pp: int = 1
    max_model_len: int = 4096
    max_num_seqs: int = 1
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    gpu_total_bytes: int | None = None
    kv_dtype_bytes: int = 2


GiB = 1 << 30
COUNT_FIELDS = ("tp", "pp", "max_model_len", "max_num_seqs")
_DECIMAL = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def _parse_count(text: str) -> tuple[int | None, str | None]:
    """A positive whole number written with the digits 0-9."""
    if not text:
        return None, "required"
    if not re.fullmatch(r"[0-9]+", text):
        return None, "must be a whole number written with the digits 0-9"
    if int(text) < 1:
        return None, "must be at least 1"
    return int(text), None


def _parse_decimal(text: str) -> float | None:
    """A finite number written with the digits 0-9 (no sign, nan or inf), or None."""
    value = float(text) if _DECIMAL.fullmatch(text) else None
    return value if value is not None and math.isfinite(value) else None


def _parse_utilization(text: str) -> tuple[float | None, str | None]:
    if not text:
        return None, "required"
    value = _parse_decimal(text)
    if value is None or not 0 < value <= 1:
        return None, "must be a number greater than 0 and at most 1, like 0.9"
    return value, None


def _parse_gib(text: str) -> tuple[int | None, str | None]:
    value = _parse_decimal(text)
    if value is None or value <= 0:
        return None, "must be a positive number of GiB, like 80"
    return int(value * GiB), None


def parse_budget_inputs(raw: dict[str, str], base: BudgetInputs) -> tuple[BudgetInputs, dict[str, str]]:
    """Typed values -> (inputs, {field: message}). Keys among ``tp``, ``pp``,
    ``max_model_len``, ``max_num_seqs``, ``gpu_memory_utilization`` and ``gpu_gib`` (GPU memory
    in GiB; empty leaves ``base.gpu_total_bytes``). Invalid fields keep ``base``'s value."""
    values: dict = {}
    errors: dict[str, str] = {}
    for key, typed in raw.items():
        text = str(typed).strip()
        if key in COUNT_FIELDS:
            value, problem = _parse_count(text)
            target = key
        elif key == "gpu_memory_utilization":
            value, problem = _parse_utilization(text)
            target = key
        elif key == "gpu_gib":
            if not text:
                continue
            value, problem = _parse_gib(text)
            target = "gpu_total_bytes"
        else:
            raise KeyError(key)
        if problem:
            errors[key] = problem
        else:
            values[target] = value
    return replace(base, **values), errors


@dataclass
class KvLine:
    kind: str
    layers: int
    bytes_per_token: int  # per GPU, per layer
    note: str = ""


@dataclass
class Budget:
    inputs: BudgetInputs
    weights_bytes: int
    weights_per_gpu: int
    kv_lines: list[KvLine]
    kv_per_token: int  # all kept layers, per GPU (sliding layers counted at full rate)
    kv_bytes_for_context: int  # one sequence of max_model_len, sliding capped, per GPU
    activation_bytes: int
    budget_bytes: int | None
    available_kv_bytes: int | None
    kv_tokens: int | None
    max_concurrency: float | None
    advice: list[str] = field(default_factory=list)

    @property
    def state_layers(self) -> int:
        """Linear/Mamba layers, whose per-sequence state is not estimated."""
        return sum(line.layers for line in self.kv_lines if line.kind in (LINEAR, MAMBA))

    @property
    def fits(self) -> bool | None:
        if self.available_kv_bytes is None:
            return None
        return self.available_kv_bytes >= self.kv_bytes_for_context


def _text_config(plan: TrimPlan) -> dict:
    cfg = plan.new_documents.get("config.json") or plan.inventory.source.config
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else cfg


def kv_bytes_per_token(kind: str, cfg: dict, tp: int, dtype_bytes: int) -> tuple[int, str]:
    heads = first_int(cfg, "num_attention_heads", default=1) or 1
    kv_heads = first_int(cfg, "num_key_value_heads", default=heads) or heads
    head_dim = first_int(cfg, "head_dim", default=0) or (first_int(cfg, "hidden_size", default=0) // heads)
    if kind in (MLA, DSA_FULL, DSA_SHARED):
        latent = first_int(cfg, "kv_lora_rank", default=0) + first_int(cfg, "qk_rope_head_dim", default=0)
        n = latent * dtype_bytes
        note = "MLA latent, replicated on every TP rank"
        if kind in (DSA_FULL, DSA_SHARED) and cfg.get("index_head_dim"):
            idx = first_int(cfg, "index_head_dim", default=0)
            n += idx + 4 * max(1, idx // 128)  # FP8 keys + one FP32 scale per 128
            note += " + indexer key cache"
        return n, note
    if kind == KV_SHARED:
        return 0, "reuses another layer's KV"
    if kind in (FULL, SLIDING, CHUNKED, NOPE_GLOBAL):
        per_rank = max(1, kv_heads // tp)
        note = "" if kv_heads >= tp else f"{kv_heads} KV heads replicated over TP={tp}"
        return 2 * per_rank * head_dim * dtype_bytes, note
    return 0, "recurrent state per sequence (not estimated)"


def compute_budget(plan: TrimPlan, inputs: BudgetInputs) -> Budget:
    cfg = _text_config(plan)
    tp = max(1, inputs.tp)
    weights = plan.retained_bytes
    per_gpu = weights // tp
    lines: dict[str, KvLine] = {}
    total_per_token = 0
    context_bytes = 0
    window = first_int(cfg, "sliding_window", default=0)
    chunk = first_int(cfg, "attention_chunk_size", default=0)
    for m in plan.mappings:
        if m.submodel not in ("text", "mtp"):
            continue
        kind = m.kind.attention
        n, note = kv_bytes_per_token(kind, cfg, tp, inputs.kv_dtype_bytes)
        line = lines.setdefault(kind, KvLine(kind, 0, n, note))
        line.layers += 1
        total_per_token += n
        tokens = inputs.max_model_len
        if kind == SLIDING and window:
            tokens = min(tokens, window)
        if kind == CHUNKED and chunk:
            tokens = min(tokens, chunk)
        context_bytes += n * tokens
    # vLLM V1 prefills in chunks: the profiling batch is max_num_batched_tokens (default 8192).
    batched = inputs.max_num_batched_tokens or min(inputs.max_model_len, 8192)
    hidden = first_int(cfg, "hidden_size", default=0)
    inter = max(first_int(cfg, "intermediate_size", default=0), first_int(cfg, "moe_intermediate_size", default=0))
    vocab = first_int(cfg, "vocab_size", default=0)
    # Rough peak of vLLM's profiling forward pass: hidden states and MLP intermediates for
    # the batched tokens, plus logits of the sampled positions.
    activation = batched * (4 * hidden + 2 * inter) * 2 // tp + inputs.max_num_seqs * vocab * 4
    budget_bytes = available = kv_tokens = conc = None
    if inputs.gpu_total_bytes:
        budget_bytes = int(inputs.gpu_total_bytes * inputs.gpu_memory_utilization)
        available = budget_bytes - per_gpu - activation
        if total_per_token:
            kv_tokens = max(0, available) // total_per_token
            conc = kv_tokens / inputs.max_model_len
    b = Budget(
        inputs, weights, per_gpu, list(lines.values()), total_per_token, context_bytes, activation,
        budget_bytes, available, kv_tokens, conc,
    )
    b.advice = advise(b)
    return b


def advise(b: Budget) -> list[str]:
    """The seed's order: runtime context, concurrency and cache budgets first; never fewer
    experts or narrower dimensions before those; TP is a separate decision."""
    out = []
    if b.available_kv_bytes is None:
        return ["no GPU memory figure: type the GPU memory (GiB) to predict vLLM's KV budget"]
    if b.available_kv_bytes < 0:
        out.append("weights + activations exceed the budget: raise --gpu-memory-utilization or TP before anything else")
    if b.fits is False:
        out.append(f"lower --max-model-len (now {b.inputs.max_model_len}) so one sequence's KV fits")
        out.append(f"lower --max-num-seqs (now {b.inputs.max_num_seqs}) and --max-num-batched-tokens")
        out.append("only then consider fewer layers; never fewer experts or narrower dimensions to make it fit")
    elif b.max_concurrency is not None and b.max_concurrency < b.inputs.max_num_seqs:
        out.append(f"KV holds {b.max_concurrency:.1f} sequences of max_model_len; lower --max-num-seqs")
    if not out:
        out.append("fits: the predicted KV budget holds max_model_len for the requested concurrency")
    return out


def check_parallelism(plan: TrimPlan, inputs: BudgetInputs) -> dict[str, str]:
    """What vLLM would refuse at start-up: TP must divide the attention heads, and the KV
    heads (or, with fewer KV heads than TP, be a multiple of them: vLLM replicates them);
    PP cannot exceed the kept text layers."""
    cfg = _text_config(plan)
    tp, errors = max(1, inputs.tp), {}
    heads = first_int(cfg, "num_attention_heads")
    kv_heads = first_int(cfg, "num_key_value_heads", default=heads)
    problems = []
    if heads and heads % tp:
        problems.append(f"TP={tp} does not divide the {heads} attention heads")
    if kv_heads and kv_heads != heads and kv_heads >= tp and kv_heads % tp:
        problems.append(f"TP={tp} does not divide the {kv_heads} KV heads")
    if kv_heads and kv_heads < tp and tp % kv_heads:
        problems.append(f"TP={tp} is not a multiple of the {kv_heads} KV heads (vLLM can only replicate them evenly)")
    if problems:
        errors["tp"] = "; ".join(problems)
    if inputs.pp > plan.new_depth:
        errors["pp"] = f"PP={inputs.pp} exceeds the {plan.new_depth} kept text layer{'s' if plan.new_depth != 1 else ''}"
    return errors
