"""DeepSeek-V4 sources for the tests: the published example's structure at a small width.

The published ``DeepSeek-V4-Flash-0731-smq-w8a8`` example (vLLM-MetaX's
``tools/batched_test/models``) has 7 backbone layers, ``compress_ratios`` with ten entries
(``[0,0,4,128,4,128,4]`` plus three prediction slots), ``num_hash_layers=3``, one declared MTP
layer, DSpark drafting from layers ``[4,5,6]`` and three draft heads ``mtp.0..2`` (``mtp.0``
holds DSpark's ``main_proj``, ``mtp.2`` its Markov head). Two name styles:

* ``transformers_source``: the backbone as transformers' ``DeepseekV4ForCausalLM`` names it
  (built on ``meta``), plus the ``mtp.*`` heads (transformers ignores ``mtp.*`` on load);
* ``published_source``: the release's own names (``layers.N.attn.wkv``, ``layers.N.ffn.gate.tid2eid``,
  ``embed.weight``...), which vLLM loads; ``held`` layers may exceed the config's depth (the
  example's index names layers 0..42 while its config says 7).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from synth.checkpoint import write_safetensors

HIDDEN = 64
EXPERTS = 8
VOCAB = 256
RATIOS = [0, 0, 4, 128, 4, 128, 4]

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "hc_eps": 1e-06,
    "hc_mult": 2,
    "hc_sinkhorn_iters": 20,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "index_head_dim": 32,
    "index_n_heads": 4,
    "index_topk": 16,
    "max_position_embeddings": 8192,
    "moe_intermediate_size": 16,
    "n_routed_experts": EXPERTS,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 7,
    "num_hash_layers": 3,
    "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1,
    "o_groups": 2,
    "o_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "routed_scaling_factor": 1.5,
    "scoring_func": "sqrtsoftplus",
    "sliding_window": 16,
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB,
    "compress_rope_theta": 160000,
    "compress_ratios": RATIOS + [0, 0, 0],
    "dspark_block_size": 5,
    "dspark_noise_token_id": 250,
    "dspark_target_layer_ids": [4, 5, 6],
    "dspark_markov_rank": 8,
}


def config(**changes) -> dict:
    cfg = copy.deepcopy(CONFIG)
    cfg.update(changes)
    return cfg


def _decoder(prefix: str, ratio: int, hash_moe: bool, cfg: dict) -> list[tuple[str, str, tuple]]:
    """One decoder layer under the release's names."""
    h, hd, q = cfg["hidden_size"], cfg["head_dim"], cfg["q_lora_rank"]
    heads, groups, orank = cfg["num_attention_heads"], cfg["o_groups"], cfg["o_lora_rank"]
    inter, hc = cfg["moe_intermediate_size"], cfg["hc_mult"]
    t = [
        (prefix + "attn.attn_sink", "F32", (heads,)),
        (prefix + "attn.kv_norm.weight", "BF16", (hd,)),
        (prefix + "attn.q_norm.weight", "BF16", (q,)),
        (prefix + "attn.wkv.weight", "BF16", (hd, h)),
        (prefix + "attn.wo_a.weight", "BF16", (groups * orank, heads * hd // groups)),
        (prefix + "attn.wo_b.weight", "BF16", (h, groups * orank)),
        (prefix + "attn.wq_a.weight", "BF16", (q, h)),
        (prefix + "attn.wq_b.weight", "BF16", (heads * hd, q)),
        (prefix + "attn_norm.weight", "BF16", (h,)),
        (prefix + "ffn_norm.weight", "BF16", (h,)),
    ]
    if ratio > 1:
        width = 2 * hd if ratio == 4 else hd
        t += [(prefix + "attn.compressor.ape", "F32", (ratio, width)),
              (prefix + "attn.compressor.norm.weight", "BF16", (hd,)),
              (prefix + "attn.compressor.wgate.weight", "BF16", (width, h)),
              (prefix + "attn.compressor.wkv.weight", "BF16", (width, h))]
    if ratio == 4:
        ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
        t += [(prefix + "attn.indexer.compressor.ape", "F32", (ratio, 2 * ihd)),
              (prefix + "attn.indexer.compressor.norm.weight", "BF16", (ihd,)),
              (prefix + "attn.indexer.compressor.wgate.weight", "BF16", (2 * ihd, h)),
              (prefix + "attn.indexer.compressor.wkv.weight", "BF16", (2 * ihd, h)),
              (prefix + "attn.indexer.weights_proj.weight", "BF16", (ih, h)),
              (prefix + "attn.indexer.wq_b.weight", "BF16", (ih * ihd, q))]
    for e in range(cfg["n_routed_experts"]):
        t += [(f"{prefix}ffn.experts.{e}.w1.weight", "BF16", (inter, h)),
              (f"{prefix}ffn.experts.{e}.w2.weight", "BF16", (h, inter)),
              (f"{prefix}ffn.experts.{e}.w3.weight", "BF16", (inter, h))]
    t.append((prefix + "ffn.gate.weight", "BF16", (cfg["n_routed_experts"], h)))
    if hash_moe:
        t.append((prefix + "ffn.gate.tid2eid", "I32", (cfg["vocab_size"], cfg["num_experts_per_tok"])))
    else:
        t.append((prefix + "ffn.gate.bias", "F32", (cfg["n_routed_experts"],)))
    t += [(prefix + "ffn.shared_experts.w1.weight", "BF16", (inter, h)),
          (prefix + "ffn.shared_experts.w2.weight", "BF16", (h, inter)),
          (prefix + "ffn.shared_experts.w3.weight", "BF16", (inter, h))]
    for part in ("attn", "ffn"):
        t += [(f"{prefix}hc_{part}_base", "F32", ((2 + hc) * hc,)),
              (f"{prefix}hc_{part}_fn", "F32", ((2 + hc) * hc, hc * h)),
              (f"{prefix}hc_{part}_scale", "F32", (3,))]
    return t


def mtp_heads(cfg: dict, count: int = 3) -> list[tuple[str, str, tuple]]:
    """The draft heads ``mtp.0..count-1``: MTP projections on each, DSpark's ``main_proj`` (one
    hidden-size slice per target layer) on the first, its Markov and confidence heads on the last."""
    h, hc = cfg["hidden_size"], cfg["hc_mult"]
    targets = len(cfg.get("dspark_target_layer_ids") or [1])
    out = []
    for k in range(count):
        p = f"mtp.{k}."
        out += _decoder(p, 0, False, cfg)
        out += [(p + "e_proj.weight", "BF16", (h, h)), (p + "h_proj.weight", "BF16", (h, h)),
                (p + "enorm.weight", "BF16", (h,)), (p + "hnorm.weight", "BF16", (h,)), (p + "norm.weight", "BF16", (h,)),
                (p + "hc_head_base", "F32", (hc,)), (p + "hc_head_fn", "F32", (hc, hc * h)), (p + "hc_head_scale", "F32", (1,))]
        if k == 0:
            out.append((p + "main_proj.weight", "BF16", (h, h * targets)))
        if k == count - 1:
            rank = cfg.get("dspark_markov_rank", 8)
            out += [(p + "markov_head.markov_w1.weight", "BF16", (rank, cfg["vocab_size"])),
                    (p + "markov_head.markov_w2.weight", "BF16", (cfg["vocab_size"], rank)),
                    (p + "confidence_head.proj.weight", "BF16", (1, h))]
    return out


def published_tensors(cfg: dict, held: int | None = None, mtp: int = 3) -> list[tuple[str, str, tuple]]:
    """The release's tensor names for layers 0..held-1 (default: the config's depth) and ``mtp`` heads."""
    n = cfg["num_hidden_layers"] if held is None else held
    ratios = cfg["compress_ratios"]
    h, hc = cfg["hidden_size"], cfg["hc_mult"]
    t = [("embed.weight", "BF16", (cfg["vocab_size"], h)), ("head.weight", "BF16", (cfg["vocab_size"], h)),
         ("norm.weight", "BF16", (h,)), ("hc_head_base", "F32", (hc,)), ("hc_head_fn", "F32", (hc, hc * h)),
         ("hc_head_scale", "F32", (1,))]
    for i in range(n):
        ratio = ratios[i] if i < len(ratios) else (4 if i % 2 == 0 else 128)
        t += _decoder(f"layers.{i}.", ratio, i < cfg["num_hash_layers"], cfg)
    return t + mtp_heads(cfg, mtp)


def published_source(root: Path, cfg: dict | None = None, held: int | None = None, mtp: int = 3, index_only: bool = False) -> Path:
    """A folder as the release ships it (sparse shards; ``index_only``: config and index alone)."""
    cfg = cfg or config()
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors = published_tensors(cfg, held, mtp)
    shards = {"model-layers.safetensors": [t for t in tensors if t[0].startswith("layers.")],
              "model-mtp.safetensors": [t for t in tensors if t[0].startswith("mtp.")],
              "model_exclude_layers.safetensors": [t for t in tensors if not t[0].startswith(("layers.", "mtp."))]}
    weight_map = {}
    for name, part in shards.items():
        if not index_only:
            write_safetensors(root / name, part, data="sparse")
        weight_map.update({n: name for n, _, _ in part})
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root


def transformers_source(root: Path, cfg: dict | None = None, mtp: int = 3) -> Path:
    """The backbone as transformers' ``deepseek_v4`` names it, built on ``meta`` from the config
    (its legacy ``compress_ratios`` / ``num_hash_layers`` folded in by the config class), plus the
    release's ``mtp.*`` heads; config.json keeps the release's fields (what vLLM reads)."""
    import torch
    import transformers

    cfg = cfg or config()
    hf = transformers.DeepseekV4Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        model = transformers.DeepseekV4ForCausalLM._from_config(hf)
    tensors = []
    seen = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        dtype = "F32" if tensor.dtype == torch.float32 and name.endswith(("sinks", "position_bias", ".fn", ".base", ".scale")) else (
            "BF16" if tensor.is_floating_point() else "I64")
        tensors.append((name, dtype, tuple(tensor.shape)))
    tensors += mtp_heads(cfg, mtp)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg, indent=2))
    write_safetensors(root / "model.safetensors", tensors, data="sparse")
    return root
