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

from .base import HASH_MOE, MOE, SLIDING_ONLY, Family, Mtp, Stack, compressed_kind, first_int, list_entry

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


def check_hash_boundary(cfg: dict) -> list[str]:
    n, depth = first_int(cfg, "num_hash_layers"), first_int(cfg, "num_hidden_layers")
    if n is not None and depth is not None and n > depth:
        return [f"num_hash_layers ({n}) is more than num_hidden_layers ({depth}): vLLM would build the first "
                f"{n - depth} MTP layer(s) (layers {depth}..) with hash routing"]
    return []


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
)

FAMILIES = (DEEPSEEK_V4,)
