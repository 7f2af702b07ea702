"""How vLLM spreads each retained tensor over its ranks: weights per GPU, exact from headers.

Every tensor gets a partitioning from its name (a declarative table, below), the way vLLM's
layers hold it:

* ``column``: split on its output dimension (QKV / gate / up projections, MLA ``q_b_proj`` /
  ``kv_b_proj``, linear-attention input projections): ColumnParallelLinear;
* ``row``: split on its input dimension (``o_proj``, ``down_proj``, ``out_proj``): RowParallelLinear;
  a 1-D bias or a per-output-channel scale of a row-parallel layer is replicated;
* ``kv``: K/V projections, split over the KV heads; with fewer KV heads than TP each rank
  holds one head (vLLM replicates them);
* ``vocab``: embeddings and LM heads, split over the vocabulary padded to a multiple of 64
  (VocabParallelEmbedding / ParallelLMHead);
* ``expert``: routed experts: with expert parallelism each whole expert lives on one of
  ``ep = TP × DP`` ranks (experts ``[r·E/ep, (r+1)·E/ep)`` on rank r); without it, split like
  the MLP they are (gate/up column, down row);
* ``replicated``: norms, routers and their biases, MLA's ``q_a_proj`` / ``kv_a_proj_with_mqa``
  (replicated in vLLM's DeepSeek / GLM MLA), DSA indexers, MTP ``eh_proj`` / ``enorm`` /
  ``hnorm``, anything not named below.

Quantization scales follow their weight along the split dimension (a block scale of
``ceil(out/128) × ceil(in/128)`` splits with it; a dimension of 1 cannot split and stays
whole). A split gives each rank ``ceil(size / ranks)`` rows of the dimension.

Pipeline stages take the kept text layers as vLLM's ``get_pp_indices`` does (an even share, the
remainder to the stages before the last); the first stage holds the embeddings, the last the
final norm, the LM head and the MTP layers.

Beside the tensors, each GPU holds what vLLM allocates while it loads the model (the family's
``load_buffers``: DeepSeek-V4's rotary caches, top-k and hidden-state buffers, DeepGEMM's
workspace), partitioning ``load buffers``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..model.families.base import LoadStage, first_int
from .build import default_context, text_config
from .config_weights import config_weights

COLUMN, ROW, KV, VOCAB, EXPERT, REPLICATED = "column", "row", "kv", "vocab", "expert", "replicated"
LOAD_BUFFERS = "load buffers"  # what vLLM allocates at load beside the tensors (Family.load_buffers)

# (pattern on the tensor name, partitioning); the first match wins. Order matters: routed
# experts before the MLP projections they are named like, shared experts after them.
RULES: tuple[tuple[str, str], ...] = (
    (r"(^|\.)(embed_tokens|wte|word_embeddings|embed_in|embed_out|lm_head|shared_head\.head)\.", VOCAB),
    (r"\.experts\.(\d+\.)?(gate_up_proj|gate_proj|up_proj|w1|w3|down_proj|w2)(_blocks|_scales|_bias)?(\.|$)", EXPERT),
    (r"(norm|layernorm|ln_\d|ln_f)(\.|$)|e_score_correction_bias|\.indexer\.|(^|\.)(eh_proj|enorm|hnorm)\.", REPLICATED),
    (r"\.(q_a_proj|kv_a_proj_with_mqa|fused_qkv_a_proj)\.", REPLICATED),
    (r"\.(mlp|block_sparse_moe|feed_forward)\.(gate|router)\.", REPLICATED),
    (r"\.(k_proj|v_proj)\.", KV),
    (r"\.(o_proj|down_proj|out_proj|dense|w2|fc2|c_proj|wo)\.", ROW),
    (r"\.(q_proj|q_b_proj|kv_b_proj|qkv_proj|query_key_value|gate_proj|up_proj|gate_up_proj|w1|w3|fc1|c_fc|"
     r"in_proj\w*|conv1d|wq|wk|wv)\.|\.(A_log|dt_bias|D)$", COLUMN),
)
_COMPILED = tuple((re.compile(p), kind) for p, kind in RULES)
_EXPERT_NUMBER = re.compile(r"\.experts\.(\d+)\.")
_LAYER_KEY = re.compile(r"^(.*?\.\d+)\.")  # "model.layers.3." -> the layer a tensor belongs to
_PACKED = ("qweight", "qzeros", "scales", "g_idx")  # AWQ / GPTQ: [in, out] (transposed)
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


def partition_of(name: str) -> str:
    for pattern, kind in _COMPILED:
        if pattern.search(name):
            return kind
    return REPLICATED


def _split_bytes(nbytes: int, shape: tuple, dim: int, ranks: int) -> int:
    """Bytes one rank holds when dimension ``dim`` is split ``ranks`` ways (the largest share)."""
    if ranks == 1 or not shape or shape[dim] <= 1:
        return nbytes
    size = shape[dim]
    return nbytes // size * math.ceil(size / ranks)


def _dims(name: str, shape: tuple) -> tuple[int, int]:
    """(output dim, input dim) of a weight-like tensor."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in _PACKED and len(shape) == 2:
        return 1, 0
    if len(shape) >= 3:  # fused experts [E, in, out] (gpt-oss, Llama 4)
        return len(shape) - 1, len(shape) - 2
    return 0, (1 if len(shape) > 1 else -1)


def tp_bytes(name: str, shape: tuple, nbytes: int, kind: str, tp: int, kv_heads: int, vocab: int) -> int:
    """Bytes of the tensor on one TP rank (its largest share)."""
    if tp == 1 or kind == REPLICATED or not shape:
        return nbytes
    out_dim, in_dim = _dims(name, shape)
    if kind == VOCAB:
        rows = shape[0]
        padded = math.ceil(rows / VOCAB_PADDING) * VOCAB_PADDING if rows >= vocab > 0 else rows
        return nbytes // rows * math.ceil(padded / tp)
    if kind == KV and kv_heads and kv_heads < tp:
        return nbytes // kv_heads  # one head per rank, replicated
    if is_column_split(kind, name):
        return _split_bytes(nbytes, shape, out_dim, tp)
    if in_dim < 0:  # bias / per-channel vector of a row-parallel layer
        return nbytes
    return _split_bytes(nbytes, shape, in_dim, tp)


def is_column_split(kind: str, name: str) -> bool:
    """Split on its output rows (column-parallel), not its input columns (row-parallel)."""
    return kind in (COLUMN, KV) or (kind == EXPERT and _is_column_expert(name))


def kv_heads_of(cfg: dict) -> int:
    """The KV heads TP splits (the attention heads where the config names no others)."""
    return first_int(cfg, "num_key_value_heads") or first_int(cfg, "num_attention_heads") or 1


def _is_column_expert(name: str) -> bool:
    return re.search(r"\.(gate_up_proj|gate_proj|up_proj|w1|w3)(_blocks|_scales|_bias)?(\.|$)", name) is not None


def pp_stages(depth: int, pp: int) -> list[range]:
    """The text layers of each pipeline stage, as vLLM's ``get_pp_indices`` assigns them."""
    per = depth // pp
    sizes = [per] * pp
    for i in range(2, depth % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


@dataclass
class RankWeights:
    """Weights per GPU for one parallel layout."""

    tp: int
    pp: int
    dp: int
    ep: int  # 1: no expert parallelism
    plain_stage_bytes: list[int]  # per pipeline stage: one TP rank's share (experts aside under EP)
    expert_rank_bytes: list[list[int]]  # per stage, per EP rank: its experts (all 0 without EP)
    by_kind: dict[str, int] = field(default_factory=dict)  # partitioning -> bytes on that GPU (busiest stage)
    total_bytes: int = 0  # every retained tensor once
    unknown_tensors: int = 0  # retained tensors whose shard is not on disk and the config could not replace
    config_bytes: int = 0  # of total_bytes: derived from the config (parts without headers; config_weights.py)
    config_parts: list[str] = field(default_factory=list)  # those parts, in words
    config_problem: str = ""  # why some part without headers was not derived (it counts 0 B)
    load_buffers: list[tuple[str, int]] = field(default_factory=list)  # (what, bytes) on the busiest GPU

    @property
    def source_of_figures(self) -> str:
        """"headers", "config" or "headers and config": where the figure's bytes come from."""
        if not self.config_bytes:
            return "headers"
        return "config" if self.config_bytes == self.total_bytes else "headers and config"

    @property
    def stage_bytes(self) -> list[int]:
        """Per pipeline stage: the bytes on its busiest GPU."""
        return [plain + max(experts) for plain, experts in zip(self.plain_stage_bytes, self.expert_rank_bytes)]

    def worker_bytes(self, pp_rank: int = 0, tp_rank: int = 0) -> int:
        """Bytes on one worker of the first DP replica: its stage's TP share (the largest, where
        a split is uneven) plus, under expert parallelism, the experts of its EP rank."""
        stage = min(pp_rank, len(self.plain_stage_bytes) - 1)
        experts = self.expert_rank_bytes[stage]
        return self.plain_stage_bytes[stage] + (experts[tp_rank % len(experts)] if self.ep > 1 else 0)

    def by_worker(self) -> dict[str, int]:
        """Bytes per worker of the first DP replica, keyed as vLLM tags its workers' log lines
        without ``Worker_`` (``"TP1"``, ``"PP1_TP0"``, ``"TP0_EP0"``; ``"0"`` for one GPU)."""
        out = {}
        for p in range(self.pp):
            for t in range(self.tp):
                parts = (["DP0"] if self.dp > 1 else []) + ([f"PP{p}"] if self.pp > 1 else []) \
                    + ([f"TP{t}"] if self.tp > 1 else []) + ([f"EP{t}"] if self.ep > 1 else [])
                out["_".join(parts) or "0"] = self.worker_bytes(p, t)
        return out

    @property
    def per_gpu(self) -> int:
        return max(self.stage_bytes) if self.stage_bytes else 0

    def to_json(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "per_gpu_bytes": self.per_gpu,
                "stage_bytes": self.stage_bytes, "by_partitioning": dict(sorted(self.by_kind.items())),
                "total_bytes": self.total_bytes, "unknown_tensors": self.unknown_tensors,
                "weights_from": self.source_of_figures, "config_bytes": self.config_bytes,
                "config_parts": self.config_parts, "config_problem": self.config_problem or None,
                "load_buffers": [{"what": what, "bytes": n} for what, n in self.load_buffers]}


def rank_weights(plan, tp: int = 1, pp: int = 1, dp: int = 1, expert_parallel: bool = False,
                 max_num_batched_tokens: int | None = None) -> RankWeights:
    """Bytes per GPU of the plan's retained tensors under TP × PP (× DP with EP), and of what
    vLLM allocates beside them while it loads (sized by the serve batch
    ``max_num_batched_tokens``; None: the context of the serve command's defaults, the batch
    mxtrim's serve command and validation's server use)."""
    inv = plan.inventory
    src = inv.source
    cfg = text_config(plan)
    kv_heads = kv_heads_of(cfg)
    vocab = first_int(cfg, "vocab_size")
    ep = tp * dp if expert_parallel else 1
    experts = first_int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    depth = max(1, plan.new_depth)
    stages = pp_stages(depth, max(1, min(pp, depth)))
    stage_of_layer = {i: s for s, r in enumerate(stages) for i in r}
    text_layer = {m.new_name: m.new for m in plan.mappings if m.submodel == "text"}
    last = len(stages) - 1
    # per stage: non-expert bytes on one TP rank, and expert bytes per EP rank
    plain = [0] * len(stages)
    by_kind: list[dict[str, int]] = [{} for _ in stages]
    expert_rank = [[0] * ep for _ in stages]
    total = unknown = 0
    derived = config_weights(plan)
    tensors = []
    for old, new in plan.renames:
        if new in derived.skipped:
            continue
        info = src.tensor(old)
        if not src.is_present(old):
            unknown += 1
            continue
        tensors.append((new, tuple(info.shape), info.nbytes))
    tensors += [(name, shape, nbytes) for name, _, shape, nbytes in derived.tensors]
    for new, shape, nbytes in tensors:
        total += nbytes
        kind = partition_of(new)
        m = _LAYER_KEY.match(new)
        if m and m.group(1) in text_layer:
            stage = stage_of_layer.get(text_layer[m.group(1)], last)
        elif m is None and ((kind == VOCAB and "head" not in new) or "vision" in new or "visual" in new):
            stage = 0  # embeddings and encoders feed the first stage
        else:
            stage = last  # final norm, LM head, MTP layers
        if kind == EXPERT and ep > 1:
            share = _expert_share(new, shape, nbytes, experts, ep)
            for r, b in enumerate(share):
                expert_rank[stage][r] += b
            continue
        b = tp_bytes(new, shape, nbytes, kind, tp, kv_heads, vocab)
        plain[stage] += b
        by_kind[stage][kind] = by_kind[stage].get(kind, 0) + b
    stage_buffers = _load_buffers(plan, cfg, stages, max_num_batched_tokens)
    for stage, buffers in enumerate(stage_buffers):
        if buffers:
            plain[stage] += sum(n for _, n in buffers)
            by_kind[stage][LOAD_BUFFERS] = sum(n for _, n in buffers)
    weights = RankWeights(tp, len(stages), dp, ep, plain, expert_rank, {}, total, unknown,
                          derived.nbytes, derived.parts, derived.problem)
    stage_bytes = weights.stage_bytes
    busiest = max(range(len(stages)), key=stage_bytes.__getitem__)
    kinds = dict(by_kind[busiest])
    if ep > 1 and max(expert_rank[busiest]):
        kinds[EXPERT] = max(expert_rank[busiest])
    weights.by_kind = kinds
    weights.load_buffers = stage_buffers[busiest]
    return weights


def _load_buffers(plan, cfg: dict, stages: list[range], batched: int | None) -> list[list[tuple[str, int]]]:
    """Per pipeline stage, what vLLM allocates at load beside the tensors (the family's
    ``load_buffers``), from the attention kinds of the stage's layers (the MTP layers, served
    as the drafter, on the last)."""
    rule = plan.inventory.family.load_buffers
    if rule is None:
        return [[] for _ in stages]
    if batched is None:
        batched = default_context(plan)
    kinds = {m.new: m.kind.attention for m in plan.mappings if m.submodel == "text"}
    mtp = [m.kind.attention for m in plan.mappings if m.submodel == "mtp"]
    last = len(stages) - 1
    return [rule(cfg, LoadStage(tuple(kinds[i] for i in r if i in kinds) + (tuple(mtp) if s == last else ()),
                                last=s == last, batched_tokens=batched, drafter=s == last and bool(mtp)))
            for s, r in enumerate(stages)]


def _expert_share(name: str, shape: tuple, nbytes: int, experts: int | None, ep: int) -> list[int]:
    """Bytes of an expert tensor on each EP rank (linear placement)."""
    share = [0] * ep
    m = _EXPERT_NUMBER.search(name)
    if m and experts:
        share[min(ep - 1, int(m.group(1)) * ep // experts)] = nbytes
        return share
    if len(shape) >= 3 and shape[0] > 1:  # fused [E, ...]: whole experts per rank
        per = nbytes // shape[0]
        counts = [len(range(r, shape[0], ep)) for r in range(ep)]
        return [per * c for c in counts]
    return [nbytes] * ep



_LAYER_NUMBER = re.compile(r"\.\d+\.")
_EXPERT_FOLD = re.compile(r"\.experts\.N\.")


def block_split_failures(plan, tp: int, expert_parallel: bool, block: tuple[int, int]) -> list[tuple[str, str]]:
    """The retained block-quantized weights whose TP share is not whole quantization blocks,
    as vLLM refuses them at start-up (``validate_fp8_block_shape``: a column-parallel share of
    the output rows must be a multiple of ``block_n``, a row-parallel share of the input columns
    of ``block_k``; routed experts the same without expert parallelism, whole with it). Read
    from the tensors' header shapes: attention projections, dense MLPs, shared and routed
    experts alike. One (line, partition kind) per distinct module (layer numbers folded to N):
    the kind tells whether expert parallelism would help (it keeps only routed experts whole)."""
    if tp <= 1:
        return []
    src = plan.inventory.source
    cfg = text_config(plan)
    kv_heads = kv_heads_of(cfg)
    block_n, block_k = block
    seen: dict[str, tuple[str, str]] = {}
    for old, new in plan.renames:
        if not new.endswith(".weight") or not src.is_present(old):
            continue
        info = src.tensor(old)
        if not str(info.dtype).startswith("F8") or len(info.shape) != 2:
            continue
        kind = partition_of(new)
        if kind in (REPLICATED, VOCAB) or (kind == EXPERT and expert_parallel):
            continue
        rows, cols = info.shape
        if is_column_split(kind, new):
            share = rows // kv_heads if (kind == KV and kv_heads < tp) else rows // tp
            what, unit = f"{rows} output rows", block_n
        else:
            share, what, unit = cols // tp, f"{cols} input columns", block_k
        if share % unit:
            module = _LAYER_NUMBER.sub(".N.", new[: -len(".weight")])
            seen.setdefault(_EXPERT_FOLD.sub(".experts.E.", module), (f"{what} / TP={tp} = {share}", kind))
    return [(f"{module}: {text}, not whole {block_n}×{block_k} blocks", kind) for module, (text, kind) in seen.items()]

