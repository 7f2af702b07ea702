"""GPU memory budget of a plan, from exact header bytes and the KV-cache formulas vLLM uses
(prior-art guide §2.5).

* Weights per GPU: every retained tensor (those of parts without safetensors headers derived
  from the config: core/plan/config_weights.py) partitioned as vLLM holds it (core/plan/partition.py):
  TP column / row / vocabulary splits, replicated norms, routers and MLA latent projections,
  KV heads replicated when fewer than TP, experts over EP = TP × DP ranks with expert
  parallelism, layers over pipeline stages; the busiest GPU counts. Plus what vLLM allocates
  while it loads beside the tensors (the family's ``load_buffers``: DeepSeek-V4's rotary
  caches, top-k / hidden-state buffers and DeepGEMM's workspace), sized by the serve batch.
* KV cache per token, per GPU and layer: full / sliding / chunked attention
  ``2 × max(1, kv_heads / TP) × head_dim × dtype``; MLA ``(kv_lora_rank + qk_rope_head_dim) ×
  dtype``, not divided by TP; DSA adds the indexer key cache (``index_head_dim`` FP8 bytes +
  one FP32 scale per 128), and with an FP8 cache the fp8_ds_mla layout (656 B); a KV-sharing
  layer adds nothing. ``--kv-cache-dtype fp8*`` makes the element one byte. DeepSeek-V4
  (read in vLLM 0.32.0's ``models/deepseek_v4`` and ``v1/kv_cache_interface.py``): every
  layer (MTP too) has a sliding-window cache, a layer of compression ratio r > 1 a compressed
  cache (one 584 B fp8_ds_mla row per r tokens) and its compressor's float32 state, and ratio 4
  the indexer's keys and its compressor's state; pages padded as vLLM pads them (``v4_caches``).
  For a sequence,
  sliding layers hold ``min(window − 1 + max_num_batched_tokens, max_model_len)`` tokens and
  chunked layers at most the chunk. Linear-attention (gated delta net) and Mamba layers hold a
  constant state per sequence: convolution state plus recurrent state, in the model's dtype.
* vLLM's start-up arithmetic: budget = total × gpu_memory_utilization; available KV =
  budget − weights − activation peak (rough); KV tokens = available / per-token (after the
  per-sequence states of max_num_seqs sequences); maximum concurrency = KV tokens / max_model_len
  (DeepSeek-V4: concurrency = available / the bytes of one sequence at the full context).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from ..model.families.base import (
    CHUNKED, DSA_FULL, DSA_SHARED, FULL, KV_SHARED, LINEAR, MAMBA, MLA, NOPE_GLOBAL, SLIDING, compression_ratio, first_int,
)
from ..model.quant import config_dtype
from ..read.safetensors_io import DTYPE_BITS
from ..units import human_bytes
from .build import TrimPlan, default_context, text_config
from .partition import EXPERT, RankWeights, block_split_failures, rank_weights


# The utilisation the report's serve command, validation's server and the budget assume unless
# told otherwise (BudgetInputs' default); vLLM's own, for a server started without the flag.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.8
VLLM_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class BudgetInputs:
    tp: int = 1
    pp: int = 1
    max_model_len: int = 4096
    max_num_seqs: int = 1
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    gpu_total_bytes: int | None = None
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype: auto (the model's dtype), fp8, fp8_e4m3, ...
    dp: int = 1
    expert_parallel: bool = False

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one KV element for an explicit cache dtype (``auto``: the model's, see
        compute_budget); ``float32`` is what the CPU build serves with ``--dtype float32``."""
        return 1 if self.kv_cache_dtype.startswith("fp8") else 4 if self.kv_cache_dtype == "float32" else 2


GiB = 1 << 30
COUNT_FIELDS = ("tp", "pp", "dp", "max_model_len", "max_num_seqs", "max_num_batched_tokens")
# every key parse_budget_inputs takes: the serve settings, as the CLI's flags, the budget step
# and a plan file name them
SERVE_KEYS = COUNT_FIELDS + ("gpu_memory_utilization", "kv_cache_dtype", "gpu_gib", "expert_parallel")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
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
        elif key == "kv_cache_dtype":
            value, target = text, key
            problem = None if text in KV_CACHE_DTYPES else f"must be one of {', '.join(KV_CACHE_DTYPES)}"
        elif key == "expert_parallel":
            value, problem, target = bool(typed), None, key
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
    state_bytes_per_seq: int = 0  # linear / Mamba layers: per GPU, per layer, per sequence
    tokens_per_seq: int | None = None  # tokens one sequence holds (sliding / chunked: capped)


@dataclass
class Budget:
    inputs: BudgetInputs
    weights_bytes: int
    weights_per_gpu: int
    kv_lines: list[KvLine]
    kv_per_token: int  # all kept layers, per GPU (sliding layers counted at full rate)
    kv_bytes_for_context: int  # one sequence of max_model_len, sliding capped, states included, per GPU
    activation_bytes: int
    budget_bytes: int | None
    available_kv_bytes: int | None
    kv_tokens: int | None
    max_concurrency: float | None
    advice: list[str] = field(default_factory=list)
    ranks: RankWeights | None = None
    state_bytes_per_seq: int = 0  # all linear / Mamba layers, per GPU
    unestimated_layers: int = 0  # recurrent layers whose state the config does not describe

    @property
    def weights_from(self) -> str:
        """Where the weights per GPU come from: "headers", "config" or "headers and config"."""
        return self.ranks.source_of_figures if self.ranks else "headers"

    def weights_origin(self) -> str:
        """The weights figure's origin in words, "" when read from headers alone."""
        r = self.ranks
        if r is None or (not r.config_bytes and not r.config_problem):
            return ""
        parts = ", ".join(r.config_parts)
        if not r.config_bytes:
            return f"not derived from the config for {parts}: {r.config_problem}; those count 0 B"
        text = ("from the config (transformers' meta build of the output config, quantization applied): no safetensors "
                "headers here" if r.source_of_figures == "config" else
                f"{human_bytes(r.config_bytes)} of it from the config (no safetensors headers for {parts}), the rest from headers")
        return text + (f"; not derived: {r.config_problem}" if r.config_problem else "")

    @property
    def state_layers(self) -> int:
        """Linear/Mamba layers whose per-sequence state is not estimated."""
        return self.unestimated_layers

    @property
    def fits(self) -> bool | None:
        if self.available_kv_bytes is None:
            return None
        return self.available_kv_bytes >= self.kv_bytes_for_context

    def to_json(self) -> dict:
        return {
            "inputs": {"tp": self.inputs.tp, "pp": self.inputs.pp, "dp": self.inputs.dp,
                       "expert_parallel": self.inputs.expert_parallel, "max_model_len": self.inputs.max_model_len,
                       "max_num_seqs": self.inputs.max_num_seqs, "max_num_batched_tokens": self.inputs.max_num_batched_tokens,
                       "gpu_memory_utilization": self.inputs.gpu_memory_utilization,
                       "kv_cache_dtype": self.inputs.kv_cache_dtype, "gpu_total_bytes": self.inputs.gpu_total_bytes},
            "weights_bytes": self.weights_bytes,
            "weights_per_gpu_bytes": self.weights_per_gpu,
            "weights_from": self.weights_from,
            "weights_origin": self.weights_origin() or None,
            "ranks": self.ranks.to_json() if self.ranks else None,
            "kv": [{"kind": l.kind, "layers": l.layers, "bytes_per_token_per_layer": l.bytes_per_token,
                    "bytes_per_token": l.bytes_per_token * l.layers, "tokens_per_sequence": l.tokens_per_seq,
                    "state_bytes_per_sequence_per_layer": l.state_bytes_per_seq, "note": l.note} for l in self.kv_lines],
            "kv_bytes_per_token": self.kv_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_seq,
            "kv_bytes_per_sequence": self.kv_bytes_for_context,
            "activation_bytes": self.activation_bytes,
            "budget_bytes": self.budget_bytes,
            "available_kv_bytes": self.available_kv_bytes,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "fits": self.fits,
            "advice": self.advice,
        }


def model_dtype_bytes(cfg: dict) -> int:
    """Bytes of one element in the dtype the config declares (16-bit when it declares none)."""
    return DTYPE_BITS[config_dtype(cfg) or "BF16"] // 8


def kv_bytes_per_token(kind: str, cfg: dict, tp: int, dtype_bytes: int, kv_cache_dtype: str = "auto") -> tuple[int, str]:
    """KV bytes one layer of ``kind`` holds per token on one GPU, and a note."""
    heads = first_int(cfg, "num_attention_heads", default=1) or 1
    kv_heads = first_int(cfg, "num_key_value_heads", default=heads) or heads
    head_dim = first_int(cfg, "head_dim", default=0) or (first_int(cfg, "hidden_size", default=0) // heads)
    if kind in (MLA, DSA_FULL, DSA_SHARED):
        latent = first_int(cfg, "kv_lora_rank", default=0) + first_int(cfg, "qk_rope_head_dim", default=0)
        if kind in (DSA_FULL, DSA_SHARED) and kv_cache_dtype.startswith("fp8"):
            n, note = 656, "MLA latent, fp8_ds_mla layout (656 B), replicated on every TP rank"
        else:
            n, note = latent * dtype_bytes, "MLA latent, replicated on every TP rank"
        if kind in (DSA_FULL, DSA_SHARED) and cfg.get("index_head_dim"):
            idx = first_int(cfg, "index_head_dim", default=0)
            n += indexer_key_bytes(idx)
            note += " + indexer key cache"
        return n, note
    if kind == KV_SHARED:
        return 0, "reuses another layer's KV"
    if kind in (FULL, SLIDING, CHUNKED, NOPE_GLOBAL):
        per_rank = max(1, kv_heads // tp)
        note = "" if kv_heads >= tp else f"{kv_heads} KV heads replicated over TP={tp}"
        return 2 * per_rank * head_dim * dtype_bytes, note
    return 0, "recurrent state per sequence"


V4_FP8_ROW = 584  # vLLM deepseek_v4: 448 B NoPE fp8 + 128 B RoPE bf16 + 8 B scale per cached row
V4_SOURCE = "vLLM 0.32.0's models/deepseek_v4 and v1/kv_cache_interface.py"
V4_NOTE = (f"as {V4_SOURCE} size them: pages of whole blocks, aligned; the MTP layer's own caches are "
           "counted as a window-only layer; unverified against a GPU server's log")
V4_BLOCK = 256  # tokens per block of the compressed and indexer caches (vLLM forces block_size 256)
V4_SWA_BLOCK = 64  # DeepseekV4SWACache's block
V4_STATE_BLOCK = {4: 4, 128: 8}  # CompressorStateCache's block per compression ratio


@dataclass(frozen=True)
class V4Cache:
    """One DeepSeek-V4 cache of one layer, as vLLM sizes it: ``content`` bytes per stored state,
    ``states`` per page of ``block`` tokens, the page padded to ``align``; ``window`` tokens
    (sliding caches, per sequence) or None (one state per ``ratio`` tokens of the context)."""

    name: str
    content: int
    block: int
    states: int
    align: int
    window: int | None = None

    @property
    def page(self) -> int:
        return -(-(self.states * self.content) // self.align) * self.align

    def per_token(self) -> int:
        """Bytes per token of context (a growing cache; 0 for a sliding one), rounded up."""
        return 0 if self.window is not None else -(-self.page // self.block)

    def per_sequence(self, context: int, in_flight: int) -> int:
        """Bytes one sequence of ``context`` tokens holds: whole pages of the context, or of
        the window (``min(window − 1 + in_flight, context)`` tokens and one more page)."""
        if self.window is None:
            return -(-context // self.block) * self.page
        return (-(-min(self.window - 1 + in_flight, context) // self.block) + 1) * self.page


def v4_caches(ratio: int, cfg: dict, kv_cache_dtype: str, dtype_bytes: int) -> list[V4Cache]:
    """The caches vLLM gives one DeepSeek-V4 layer of compression ratio ``ratio`` (the MTP layer
    and ratio <= 1: the sliding window alone). Every cache is one KV head, not split by TP.

    * the sliding window (``DeepseekV4SWACache``): ``sliding_window`` tokens of 584 B fp8_ds_mla
      rows (``head_dim`` elements with a 16-bit cache), blocks of 64;
    * ratio > 1, the compressed cache (``MLAAttentionSpec``, ``tokens_per_state`` = ratio): one
      row per ``ratio`` tokens, blocks of 256 tokens;
    * ratio > 1, the compressor's state (``CompressorStateCache``): float32 kv + score states of
      ``coff × head_dim`` each (coff 2 at ratio 4, which overlaps, else 1), a window of
      ``coff × ratio`` tokens in blocks of 4 (ratio 4) or 8 (ratio 128);
    * ratio 4 only (vLLM: "Only C4A uses sparse attention and hence has indexer"), the indexer's
      keys (FP8 ``index_head_dim`` + one FP32 scale per 128, one per 4 tokens) and its own
      compressor's state (``index_head_dim``, coff 2).

    Pages are padded to 576 B with the fp8_ds_mla layout, else to 512 B."""
    sixteen = kv_cache_dtype in ("bfloat16", "float16", "float32")
    head = first_int(cfg, "head_dim", default=512)
    align = 512 if sixteen else 576
    row = head * dtype_bytes if sixteen else V4_FP8_ROW
    window = first_int(cfg, "sliding_window", default=0) or 1
    out = [V4Cache("sliding window", row, V4_SWA_BLOCK, V4_SWA_BLOCK, align, window)]
    if ratio <= 1:
        return out
    coff = 2 if ratio == 4 else 1
    state_block = V4_STATE_BLOCK.get(ratio, 4)
    out.append(V4Cache(f"compressed rows (1 per {ratio} tokens)", row, V4_BLOCK, V4_BLOCK // ratio, align))
    out.append(V4Cache("compressor state", 2 * coff * head * 4, state_block, state_block, align, coff * ratio))
    if ratio == 4:
        idx = first_int(cfg, "index_head_dim", default=128) or 128
        # vLLM's k_cache_head_dim: FP8 values + 4 B of FP32 scale per whole 128 of them
        out.append(V4Cache("indexer keys", idx + idx // 128 * 4, V4_BLOCK, V4_BLOCK // ratio, align))
        out.append(V4Cache("indexer compressor state", 2 * coff * idx * 4, state_block, state_block, align, coff * ratio))
    return out


def _v4_part(c: V4Cache, context: int, in_flight: int) -> str:
    if c.window is None:
        return f"{c.name}: {c.content} B rows, {c.per_token()} B per token"
    held = min(c.window - 1 + in_flight, context)
    return (f"{c.name}: window {c.window:,}, {held:,} tokens held per sequence "
            f"({c.content:,} B each, {human_bytes(c.per_sequence(context, in_flight))})")


def indexer_key_bytes(index_head_dim: int) -> int:
    """One token's sparse-attention indexer key: FP8 values + one FP32 scale per 128."""
    return index_head_dim + 4 * max(1, index_head_dim // 128)


def recurrent_state_bytes(kind: str, cfg: dict, tp: int) -> int | None:
    """Bytes of one linear-attention / Mamba layer's state per sequence on one GPU (the
    convolution state plus the recurrent state, in the model's dtype); None when the config
    does not describe it."""
    b = model_dtype_bytes(cfg)
    if kind == LINEAR and cfg.get("linear_num_value_heads"):  # gated delta net (Qwen3-Next)
        kh, vh = first_int(cfg, "linear_num_key_heads", default=0), first_int(cfg, "linear_num_value_heads", default=0)
        kd, vd = first_int(cfg, "linear_key_head_dim", default=0), first_int(cfg, "linear_value_head_dim", default=0)
        kernel = first_int(cfg, "linear_conv_kernel_dim", default=4)
        conv = (kernel - 1) * (2 * kh * kd + vh * vd) // tp
        return (conv + vh // tp * kd * vd) * b if vh else None
    if kind == MAMBA:
        d_state = first_int(cfg, "ssm_state_size", "mamba_d_state", "state_size", default=0)
        d_conv = first_int(cfg, "conv_kernel", "mamba_d_conv", "d_conv", default=4)
        nheads = first_int(cfg, "mamba_num_heads", default=0)
        if not d_state:
            return None
        if nheads:  # Mamba-2: heads × head_dim × state, conv over x, B and C
            head_dim = first_int(cfg, "mamba_head_dim", default=0)
            groups = first_int(cfg, "n_groups", "mamba_n_groups", default=1)
            inner = nheads * head_dim
            return ((d_conv - 1) * (inner + 2 * groups * d_state) // tp + nheads // tp * head_dim * d_state) * b
        expand = first_int(cfg, "mamba_expand", "expand", default=2)
        inner = expand * first_int(cfg, "hidden_size", default=0)  # Mamba-1 (Jamba)
        return ((d_conv - 1) * inner // tp + inner // tp * d_state) * b
    return None


def served_kv_cache_dtype(plan: TrimPlan, kv_cache_dtype: str) -> str:
    """The --kv-cache-dtype the server is given: the one chosen, else (auto) the one vLLM
    requires of the family (DeepSeek-V4: fp8), else auto."""
    if kv_cache_dtype not in ("auto", ""):
        return kv_cache_dtype
    return plan.inventory.family.kv_cache_dtype or "auto"


def compute_budget(plan: TrimPlan, inputs: BudgetInputs) -> Budget:
    cfg = text_config(plan)
    inputs = replace(inputs, kv_cache_dtype=served_kv_cache_dtype(plan, inputs.kv_cache_dtype))  # what is served
    tp = max(1, inputs.tp)
    # vLLM V1 prefills in chunks of max_num_batched_tokens, its profiling batch (mxtrim's serve command: the context)
    batched = inputs.max_num_batched_tokens or inputs.max_model_len
    ranks = rank_weights(plan, tp, inputs.pp, inputs.dp, inputs.expert_parallel, batched)
    weights = plan.retained_bytes
    per_gpu = ranks.per_gpu
    lines: dict[str, KvLine] = {}
    total_per_token = 0
    context_bytes = 0
    states = 0
    unestimated = 0
    window = first_int(cfg, "sliding_window", default=0)
    chunk = first_int(cfg, "attention_chunk_size", default=0)
    dtype_bytes = model_dtype_bytes(cfg) if inputs.kv_cache_dtype in ("auto", "") else inputs.kv_dtype_bytes
    # what a sliding-window layer holds per sequence (the window, and one step's new tokens)
    windowed = min(window - 1 + batched, inputs.max_model_len) if window else inputs.max_model_len
    for m in plan.mappings:
        if m.submodel not in ("text", "mtp"):
            continue
        kind = m.kind.attention
        ratio = compression_ratio(kind)
        n, note = kv_bytes_per_token(kind, cfg, tp, dtype_bytes, inputs.kv_cache_dtype)
        tokens = inputs.max_model_len
        if kind == SLIDING and window:
            tokens = windowed
        if kind == CHUNKED and chunk:
            tokens = min(tokens, chunk)
        state = 0
        if ratio is not None:  # DeepSeek-V4: compressed caches per token, windows per sequence
            caches = v4_caches(ratio, cfg, inputs.kv_cache_dtype, dtype_bytes)
            in_flight = (inputs.pp + 1) * batched  # vLLM's max_in_flight_tokens with async scheduling
            n = sum(c.per_token() for c in caches)
            state = sum(c.per_sequence(inputs.max_model_len, in_flight) for c in caches if c.window is not None)
            tokens = inputs.max_model_len
            n_seq = sum(c.per_sequence(inputs.max_model_len, in_flight) for c in caches if c.window is None)
            note = "; ".join(_v4_part(c, inputs.max_model_len, in_flight) for c in caches) + f"; {V4_NOTE}"
            line = lines.setdefault(kind, KvLine(kind, 0, n, note, state, tokens))
            line.layers += 1
            total_per_token += n
            states += state
            context_bytes += n_seq + state
            continue
        elif kind in (LINEAR, MAMBA):
            state = recurrent_state_bytes(kind, cfg, tp)
            if state is None:
                unestimated += 1
                state, note = 0, "recurrent state per sequence (not described by the config)"
            tokens = None
        line = lines.setdefault(kind, KvLine(kind, 0, n, note, state, tokens))
        line.layers += 1
        total_per_token += n
        states += state
        context_bytes += n * (tokens or 0) + state
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
        if any(compression_ratio(l.kind) is not None for l in lines.values()) and context_bytes:
            # DeepSeek-V4: vLLM reports the capacity as concurrency × context, one request at
            # the full context holding every cache of every layer (windows, compressed rows,
            # indexer keys, compressor states): the bytes of one sequence, not of one token
            kv_tokens, conc = whole_sequence_capacity(available, context_bytes, inputs.max_model_len)
        elif total_per_token:
            kv_tokens = max(0, available - states * inputs.max_num_seqs) // total_per_token
            conc = kv_tokens / inputs.max_model_len
    b = Budget(
        inputs, weights, per_gpu, list(lines.values()), total_per_token, context_bytes, activation,
        budget_bytes, available, kv_tokens, conc, ranks=ranks, state_bytes_per_seq=states, unestimated_layers=unestimated,
    )
    b.advice = advise(b)
    return b


def whole_sequence_capacity(available: int, sequence_bytes: int, context: int) -> tuple[int, float]:
    """(tokens, concurrency) where vLLM counts the capacity in whole requests at the full
    context (DeepSeek-V4): concurrency = memory / the bytes of one such sequence."""
    concurrency = max(0, available) / sequence_bytes
    return int(concurrency * context), concurrency


def advise(b: Budget) -> list[str]:
    """The seed's order: runtime context, concurrency and cache budgets first; never fewer
    experts or narrower dimensions before those; TP is a separate decision."""
    out = []
    if b.available_kv_bytes is None:
        return ["no GPU memory figure: give the GPU memory in GiB (--gpu-memory, or the budget step's GPU memory field) to predict vLLM's KV budget"]
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
    cfg = text_config(plan)
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
    experts = first_int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    ep = tp * max(1, inputs.dp)
    has_moe = experts and any(m.kind.mlp in ("moe", "hash-moe") for m in plan.mappings)
    if has_moe and inputs.expert_parallel and experts % ep:
        errors["ep"] = (f"{experts} routed experts do not split over EP = TP × DP = {ep} ranks "
                        f"(fix: TP × DP dividing {experts}, or no expert parallelism)")
    problems += _quantized_split_problems(plan, cfg, tp, bool(has_moe), inputs.expert_parallel)
    if problems:
        errors["tp"] = "; ".join(problems)
    if inputs.pp > plan.new_depth:
        errors["pp"] = f"PP={inputs.pp} exceeds the {plan.new_depth} kept text layer{'s' if plan.new_depth != 1 else ''}"
    return errors


def _quantized_split_problems(plan: TrimPlan, cfg: dict, tp: int, has_moe: bool, expert_parallel: bool) -> list[str]:
    """TP shares that are not whole quantization blocks / groups. Block FP8 with its tensors on
    disk: every retained FP8 weight by its header shape (``partition.block_split_failures``);
    otherwise the MLP widths of the config."""
    block_size = _fp8_block(plan)
    if tp > 1 and block_size and any(plan.inventory.source.is_present(old) for old, _ in plan.renames):
        found = block_split_failures(plan, tp, expert_parallel, block_size)
        # expert parallelism keeps routed experts whole, and nothing else: offered only when
        # they are all that fails to split
        ep_helps = has_moe and not expert_parallel and all(kind == EXPERT for _, kind in found)
        return [line for line, _ in found] + ([f"fix: a smaller TP{', or expert parallelism' if ep_helps else ''}"] if found else [])
    # no tensors to read: the config's MLP widths, each with whether expert parallelism (whole
    # routed experts per rank) would take it out of the split
    dense_kept = not has_moe or any(not m.kind.experts for m in plan.mappings)
    sizes = [("intermediate_size", first_int(cfg, "intermediate_size") if dense_kept else None, False)]
    moe_width = first_int(cfg, "moe_intermediate_size", "expert_intermediate_size")
    if has_moe:
        sizes.append(("moe_intermediate_size", moe_width, True))
        shared = first_int(cfg, "shared_expert_intermediate_size")
        n_shared = first_int(cfg, "n_shared_experts", "num_shared_experts")
        if shared or (n_shared and moe_width):
            sizes.append(("shared experts' width" if not shared else "shared_expert_intermediate_size",
                          shared or n_shared * moe_width, False))
    block = _quant_block(plan)
    found: list[tuple[str, bool]] = []
    for field_name, size, routed in sizes:
        if not size or (routed and expert_parallel):
            continue
        if size % tp:
            found.append((f"TP={tp} does not divide {field_name} {size}", routed))
        elif block and tp > 1 and (size // tp) % block[1]:
            found.append((f"{field_name} {size} / TP={tp} = {size // tp} is not divisible by the quantization "
                          f"{block[0]} {block[1]}", routed))
    if not found:
        return []
    ep_helps = not expert_parallel and all(routed for _, routed in found)
    return [line for line, _ in found] + [f"fix: a smaller TP{', or expert parallelism' if ep_helps else ''}"]


def _fp8_block(plan: TrimPlan) -> tuple[int, int] | None:
    """The block-FP8 ``weight_block_size`` (block_n, block_k), when the config has a valid one."""
    q = plan.inventory.quantization
    block = q.config.get("weight_block_size") if q is not None else None
    if isinstance(block, list) and len(block) == 2 and all(type(x) is int and x > 0 for x in block):
        return block[0], block[1]
    return None


def _quant_block(plan: TrimPlan) -> tuple[str, int] | None:
    """The quantization's granularity over a linear layer's input (FP8 block ``block_n``,
    AWQ / GPTQ ``group_size``) that each TP shard must keep whole, or None."""
    q = plan.inventory.quantization
    if q is None:
        return None
    block = _fp8_block(plan)
    if block:
        return "block size", block[0]
    group = q.config.get("group_size")
    if type(group) is int and group > 0:
        return "group size", group
    return None


def default_serve(plan: TrimPlan) -> BudgetInputs:
    """The settings the report's serve command uses when none are chosen."""
    return BudgetInputs(max_model_len=default_context(plan), max_num_seqs=1)
