"""DeepSeek-V4 (``DeepseekV4ForCausalLM``, model_type ``deepseek_v4``).

Read in vLLM (``vllm/models/deepseek_v4/attention.py`` and ``model.py`` at vllm-project/vllm
0484480bc730, ``vllm_metax/models/deepseek_v4`` at vLLM-MetaX 3aadf0845da8, DSpark in
``vllm/models/deepseek_v4/amd/dspark.py`` at 055e47c28003) and transformers 5.25's
``deepseek_v4``:

* Attention: every layer is single-KV-head MQA with a sliding window (``sliding_window``);
  ``compress_ratios[i]`` > 1 adds a compressor whose cache holds one entry per that many
  tokens, and ratio 4 adds the lightning indexer (its top-``index_topk`` selection).
  vLLM reads ``compress_ratios[layer_id]`` for backbone layers and ``max(1, ratio)``; the
  list has extra slots past the backbone for the prediction layers, which the MTP layers do
  not read in vLLM (they use ratio 1) but other consumers may traverse, so the slots are kept
  as they are and only the backbone entries are re-sliced.
* MLP: every layer is MoE; layers below ``num_hash_layers`` route by a frozen token-id table
  (``ffn.gate.tid2eid``), later ones by the learned router. vLLM compares the layer index
  with ``num_hash_layers`` (transformers folds the field into ``mlp_layer_types``; its
  default is 3), so the field is rewritten to the number of kept hash-routed layers, which
  must come first.
* MTP / DSpark: draft heads under their own namespace ``mtp.{k}.*`` (relative: never
  renumbered; vLLM builds them as layers ``num_hidden_layers + k``). DSpark builds
  ``n_mtp_layers`` (default 3) heads from ``mtp.0..2`` and reads the hidden states of
  ``dspark_target_layer_ids`` through ``mtp.0.main_proj`` (input width hidden_size × number
  of targets).
* Names: the release's (``layers.N.attn.wkv``, ``embed.weight``, ``head.weight``) or
  transformers' (``model.layers.N.self_attn.kv_proj``, ``model.embed_tokens.weight``).
"""

from __future__ import annotations

from ..quant import config_dtype
from .base import (
    HASH_MOE, MOE, SLIDING_ONLY, Boundary, Family, LoadStage, Mtp, RuntimeLimit, Stack, compressed_kind, compression_ratio,
    first_int, list_entry,
)

DEFAULT_HASH_LAYERS = 3  # transformers' DeepseekV4Config.default_num_hash_layers
DSPARK_DEFAULT_HEADS = 3  # vLLM dspark.py: getattr(config, "n_mtp_layers", None) or 3
_LAYER_TYPE_RATIOS = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}

WHOLE_FIELDS = (
    ("num_hash_layers", 0),
    ("sliding_window", 1),
    ("index_topk", 1),
    ("index_n_heads", 1),
    ("index_head_dim", 1),
    ("head_dim", 1),
    ("q_lora_rank", 1),
    ("o_lora_rank", 1),
    ("o_groups", 1),
    ("hc_mult", 1),
    ("n_shared_experts", 0),
)

SHARED = (
    ("model.embed_tokens.", "embeddings"),
    ("embed.", "embeddings"),
    ("lm_head.", "lm head"),
    ("head.", "lm head"),
    ("model.norm.", "final norm"),
    ("norm.", "final norm"),
    ("model.hc_head.", "hyper-connection head"),
    ("hc_head_", "hyper-connection head"),
)


def layer_ratio(cfg: dict, idx: int) -> int | None:
    """The compression ratio of backbone layer ``idx``: ``compress_ratios`` (what vLLM
    reads), else transformers' ``layer_types``; None when neither says."""
    ratio = list_entry(cfg, "compress_ratios", idx)
    if isinstance(ratio, int) and not isinstance(ratio, bool):
        return ratio
    layer_type = list_entry(cfg, "layer_types", idx)
    if layer_type in _LAYER_TYPE_RATIOS:
        rates = cfg.get("compress_rates") if isinstance(cfg.get("compress_rates"), dict) else {}
        value = rates.get(layer_type, _LAYER_TYPE_RATIOS[layer_type])
        return value if isinstance(value, int) else _LAYER_TYPE_RATIOS[layer_type]
    return None


def v4_attention(cfg: dict, idx: int) -> str | None:
    ratio = layer_ratio(cfg, idx)
    return None if ratio is None else compressed_kind(ratio)


def hash_layers(cfg: dict) -> int:
    """How many leading layers route by hash: ``num_hash_layers`` (vLLM), else the count of
    ``hash_moe`` entries leading transformers' ``mlp_layer_types``, else the default 3."""
    n = first_int(cfg, "num_hash_layers")
    if n is not None:
        return n
    types = cfg.get("mlp_layer_types")
    if isinstance(types, list):
        lead = 0
        while lead < len(types) and types[lead] == "hash_moe":
            lead += 1
        return lead
    return DEFAULT_HASH_LAYERS


def v4_mlp(cfg: dict, idx: int) -> str:
    """vLLM model.py: ``is_hash_moe = layer index < config.num_hash_layers``."""
    types = cfg.get("mlp_layer_types")
    if first_int(cfg, "num_hash_layers") is None and isinstance(types, list) and idx < len(types):
        return HASH_MOE if types[idx] == "hash_moe" else MOE
    return HASH_MOE if idx < hash_layers(cfg) else MOE


def draft_heads(cfg: dict) -> int | None:
    """The heads vLLM builds: DSpark's ``n_mtp_layers`` (or 3) when the config names DSpark
    targets, else what ``num_nextn_predict_layers`` says (None). A config whose
    ``num_nextn_predict_layers`` is 0 declares no head (an output trimmed with --no-mtp
    keeps the DSpark fields, not the heads)."""
    targets = cfg.get("dspark_target_layer_ids")
    mtp = first_int(cfg, "num_nextn_predict_layers")
    if not (isinstance(targets, list) and targets) or mtp == 0:
        return None
    return max(mtp or 0, first_int(cfg, "n_mtp_layers") or DSPARK_DEFAULT_HEADS)


def write_num_hash_layers(ctx) -> None:
    """``num_hash_layers`` = the number of kept hash-routed layers, which must lead the
    stack (vLLM routes exactly the layers below it by hash)."""
    if not ctx.kinds:
        return
    lead = 0
    while lead < len(ctx.kinds) and ctx.kinds[lead].mlp == HASH_MOE:
        lead += 1
    late = [old for old, k in zip(ctx.kept[lead:], ctx.kinds[lead:]) if k.mlp == HASH_MOE]
    if late:
        hashed = [old for old, k in zip(ctx.kept, ctx.kinds) if k.mlp == HASH_MOE]
        ctx.error(
            f"hash-routed layer {late[0]} would follow a learned-routing MoE layer: DeepSeek-V4 routes exactly the "
            "layers below num_hash_layers by hash, so kept hash-routed layers must come first",
            f"keep hash-routed layers (kept: {', '.join(map(str, hashed))}) only before the first learned-routing one",
        )
        return
    if ctx.get("num_hash_layers") is None and isinstance(ctx.get("mlp_layer_types"), list):
        return  # transformers' per-layer list, re-sliced with the layers
    if ctx.get("num_hash_layers") is not None or lead != DEFAULT_HASH_LAYERS:
        ctx.set("num_hash_layers", lead, "number of kept hash-routed layers (vLLM: layer index < num_hash_layers routes by hash)")


def v4_boundaries(cfg: dict, attention: str) -> list[Boundary]:
    """The prompt lengths from which a DeepSeek-V4 layer's paths run (vLLM 0.32.0
    ``models/deepseek_v4/attention.py`` and ``cpu/cpu_sparse.py``): every layer attends to the
    last ``sliding_window`` positions; a layer of ratio r > 1 also to one compressed entry per r
    tokens, the first once the prompt holds r tokens; at ratio 4 the indexer selects
    ``index_topk`` of those entries, and only where ``max_seq_len // 4 > index_topk`` (below it
    every entry is taken without it): from 4 × (index_topk + 1) tokens."""
    ratio = compression_ratio(attention)
    if ratio is None:
        return []
    window = first_int(cfg, "sliding_window", default=0) or 0
    found = [Boundary(f"the sliding window {window}", window, f"sliding_window={window}")] if window > 0 else []
    if ratio > 1:
        found.append(Boundary(f"the compressed block {ratio}", ratio - 1, f"one compressed block of {ratio} tokens"))
    topk = first_int(cfg, "index_topk", default=0) or 0
    if ratio == 4 and topk > 0:
        found.append(Boundary(f"the indexer's top-k {topk} of ÷{ratio} entries", ratio * (topk + 1) - 1,
                              f"index_topk={topk} of the compressed entries of {ratio} tokens"))
    return found


def check_hash_boundary(cfg: dict) -> list[str]:
    n, depth = first_int(cfg, "num_hash_layers"), first_int(cfg, "num_hidden_layers")
    if n is not None and depth is not None and n > depth:
        return [f"num_hash_layers ({n}) is more than num_hidden_layers ({depth}): vLLM would build the first "
                f"{n - depth} MTP layer(s) (layers {depth}..) with hash routing"]
    return []


MiB = 1 << 20
# vLLM 0.26.0's vendored DeepGEMM 2.5.0 (third_party/deep_gemm, csrc/jit/device_runtime.hpp):
# its DeviceRuntime holds a cuBLASLt workspace of kCublasLtWorkspaceSize bytes from its first
# use, made while the FP8 linear layers are built (vllm/utils/deep_gemm.py _lazy_init ->
# set_pdl); a torch tensor, so vLLM's "Model loading took" counts it
DEEPGEMM_WORKSPACE = 32 * MiB


def _rope_caches(cfg: dict, ratios: set[int]) -> list[tuple[str, int]]:
    """vLLM's rotary caches for the kept layers' ratios (models/deepseek_v4/common/rope.py and
    model_executor/layers/rotary_embedding DeepseekV4ScalingRotaryEmbedding, v0.26.0 and
    v0.32.0): float32 ``[positions, qk_rope_head_dim]`` (cos and sin halves), one per distinct
    get_rope key: ``rope_theta`` for sliding-only layers (ratio <= 1), ``compress_rope_theta``
    for compressed ones, YaRN (``original_max_position_embeddings × factor`` positions) on the
    compressed layers; ``max_position_embeddings`` positions otherwise (0.26.0 gives the
    sliding layers the YaRN length too: the same in the published configs)."""
    rope_dim = first_int(cfg, "qk_rope_head_dim", default=0)
    positions = first_int(cfg, "max_position_embeddings", default=0)
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else cfg.get("rope_parameters")
    scaling = scaling if isinstance(scaling, dict) else {}
    yarn = (scaling.get("rope_type") or scaling.get("type")) not in (None, "default")
    original, factor = scaling.get("original_max_position_embeddings"), scaling.get("factor")
    theta = cfg.get("rope_theta") or scaling.get("rope_theta") or 10000
    keys = set()
    if any(r <= 1 for r in ratios):
        keys.add((theta, positions))
    if any(r > 1 for r in ratios):
        compressed = positions
        if yarn and isinstance(original, (int, float)) and isinstance(factor, (int, float)):
            compressed = int(original * factor)
        keys.add((cfg.get("compress_rope_theta", theta), compressed))
    return [(f"rotary cache (theta {t:g}, {n:,} positions)", n * rope_dim * 4) for t, n in sorted(keys)]


def v4_load_buffers(cfg: dict, stage: LoadStage) -> list[tuple[str, int]]:
    """What vLLM 0.26.0's CUDA build allocates while it loads a DeepSeek-V4 model, beside the
    checkpoint's tensors (read in the v0.26.0 wheel, paths under vllm/):

    * models/deepseek_v4/nvidia/model.py:991, DeepseekV4Model.__init__: ``topk_indices_buffer``
      (max_num_batched_tokens × index_topk int32, shared by the indexers); :1049, on the last
      pipeline stage, ``_mtp_hidden_buffer`` (max_num_batched_tokens × hc_mult × hidden_size in
      the model's dtype; 0.27.0 and later only with MTP speculative decoding); nvidia/mtp.py:178,
      the MTP drafter's own top-k buffer;
    * models/deepseek_v4/attention.py:242 (common/rope.py), the rotary caches registered by
      model_executor/layers/rotary_embedding/deepseek_scaling_rope.py:248 (_rope_caches);
    * utils/deep_gemm.py:262 (_apply_pdl -> set_pdl), DeepGEMM's cuBLASLt workspace, with
      block-FP8 linear layers.

    Seen on an H100 (tests/fixtures/gpu_logs): for the published V4-Flash FP8 config these
    680 MiB, with the indexer's compressor counted 16-bit, leave between the tensors and
    "Model loading took" only the caching allocator's whole-block remainders (2.55 MiB for the
    automatic set, 0 for --keep 0,3, when the allocation order was replayed there)."""
    batched = stage.batched_tokens
    topk = batched * first_int(cfg, "index_topk", default=0) * 4
    out = [("indexer top-k buffer", topk)]
    if stage.drafter:
        out.append(("MTP drafter's indexer top-k buffer", topk))
    out += _rope_caches(cfg, {r for r in map(compression_ratio, stage.kinds) if r is not None})
    if stage.last:
        width = first_int(cfg, "hc_mult", default=1) * first_int(cfg, "hidden_size", default=0)
        out.append(("MTP hidden-state buffer", batched * width * (4 if config_dtype(cfg) == "F32" else 2)))
    quant = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else {}
    if str(quant.get("quant_method", "")).startswith("fp8") and quant.get("weight_block_size"):
        out.append(("DeepGEMM workspace", DEEPGEMM_WORKSPACE))
    return [(what, n) for what, n in out if n]


# vLLM 0.26.0 to 0.28.0 (models/deepseek_v4/nvidia/model.py): finalize_mhc_broadcast_weights
# runs in load_weights only, which --load-format dummy never calls; 0.29.0 runs it in
# process_weights_after_loading, after any load (read in the released wheels)
DUMMY_MHC = RuntimeLimit(
    mode="dummy", since="0.26.0", until="0.29.0",
    problem="cannot start a dummy DeepSeek-V4 output: its GPU model sets the first layer's mHC broadcast weights only "
            "while real weights load (assert self.hc_attn_fn_broadcast is not None while the server starts)",
)

DEEPSEEK_V4 = Family(
    key="deepseek_v4",
    display="DeepSeek-V4 (compressed sparse attention + hash / learned MoE, MTP / DSpark)",
    model_types=("deepseek_v4",),
    architectures=("DeepseekV4ForCausalLM",),
    stacks=(
        Stack("text", ("model.layers.", "layers."), attention=v4_attention, mlp=v4_mlp, experts_fields=("n_routed_experts",)),
    ),
    # vLLM builds MTP layer k as layer num_hidden_layers + k: past the backbone, ratio 1
    # (sliding window only) and >= num_hash_layers (learned routing).
    mtp=Mtp("relative", ("num_nextn_predict_layers",), prefixes=("mtp.",), count_rule=draft_heads,
            attention=lambda cfg, k: SLIDING_ONLY, mlp=lambda cfg, k: MOE),
    shared=SHARED,
    checks=(check_hash_boundary,),
    trim=(write_num_hash_layers,),
    whole_fields=WHOLE_FIELDS,
    target_lists=("dspark_target_layer_ids",),
    formula_fix="keep hash-routed layers first; the compression ratios follow the kept layers (compress_ratios re-sliced)",
    # vLLM's models/deepseek_v4/attention.py stores the cache in the fp8_ds_mla layout only:
    # 0.26.0 refuses --kv-cache-dtype auto ("DeepseekV4 fp8_ds_mla layout only supports fp8
    # kv-cache, got auto", seen on an H100), later versions turn auto into fp8
    kv_cache_dtype="fp8",
    load_buffers=v4_load_buffers,
    runtime_limits=(DUMMY_MHC,),
    long_input=v4_boundaries,
)

FAMILIES = (DEEPSEEK_V4,)
