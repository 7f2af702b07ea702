"""Build the bundled demo model: a tiny DeepSeek-V3-architecture checkpoint, made on demand.

The demo has the same shape of checkpoint as the real DeepSeek-V3 release, scaled down to a
few megabytes: MLA attention, a dense prefix followed by MoE layers (routed + shared
experts, ``noaux_tc`` gate with ``e_score_correction_bias``), one MTP block stored after the
last decoder layer, block-FP8 (e4m3, 128x128 blocks) linear weights with F32
``weight_scale_inv`` next to BF16 norms / embeddings / head, two shards with an index, a
working tokenizer and a generation config.

Everything is pure Python (no torch, no numpy) and deterministic: two builds are byte
identical. Values are real numbers: Gaussian(0, 0.02)-distributed after dequantization.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import tempfile
from bisect import bisect_left
from pathlib import Path
from statistics import NormalDist

from ..core.read.safetensors_io import build_header_bytes, tensor_nbytes
from .tokenizer import special_token_ids, tokenizer_vocab_size, write_tokenizer

# Bump whenever the builder's output changes: the cache directory name carries it, so an old
# demo is never mistaken for the current one.
DEMO_VERSION = "v1"
DEMO_NAME = f"mxtrim-demo-moe-{DEMO_VERSION}"
SEED = 20250101

BLOCK = 128
QUANTIZATION_CONFIG = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [BLOCK, BLOCK],
}

# Sizes. Output dims of every FP8 linear are multiples of 128 (vLLM's block-FP8 checks);
# kv_b_proj's input (kv_lora_rank = 96) and the 128-wide expert dims exercise partial blocks.
HIDDEN = 256
NUM_LAYERS = 6
FIRST_K_DENSE = 2
N_ROUTED = 8
N_SHARED = 1
TOP_K = 2
N_HEADS = 4
Q_LORA = 128
KV_LORA = 96
QK_NOPE = 32
QK_ROPE = 32
V_HEAD = 32
INTERMEDIATE = 384
MOE_INTERMEDIATE = 128
NUM_MTP = 1
SPLIT_AT = 4  # shard 1: embeddings + layers 0-3; shard 2: the rest


# --------------------------------------------------------------------------- number formats

def _e4m3fn_decode(code: int) -> float:
    """Value of a non-negative float8_e4m3fn code (0..0x7E; 0x7F is NaN)."""
    exp, man = (code >> 3) & 0xF, code & 0x7
    if exp == 0:
        return man * 2.0**-9
    return (1 + man / 8) * 2.0 ** (exp - 7)


_E4M3_GRID = [_e4m3fn_decode(c) for c in range(0x7F)]  # increasing, 0 .. 448


def e4m3fn_encode(x: float) -> int:
    """float -> float8_e4m3fn bit pattern: round to nearest, ties to even, saturate at +-448.

    (e4m3fn has no infinities; 0x7F/0xFF are NaN and are never produced.)"""
    if x != x:
        raise ValueError("NaN cannot be encoded")
    sign = 0x80 if (x < 0 or (x == 0 and struct.pack(">f", x)[0] & 0x80)) else 0
    a = abs(x)
    if a >= _E4M3_GRID[-1]:
        return sign | 0x7E
    i = bisect_left(_E4M3_GRID, a)  # _E4M3_GRID[i-1] < a <= _E4M3_GRID[i]
    if _E4M3_GRID[i] == a or i == 0:
        return sign | i
    lo, hi = _E4M3_GRID[i - 1], _E4M3_GRID[i]
    if a - lo < hi - a:
        code = i - 1
    elif a - lo > hi - a:
        code = i
    else:
        code = i if i % 2 == 0 else i - 1
    return sign | code


def bf16_bits(x: float) -> int:
    """float -> bfloat16 bit pattern by truncating the float32 encoding."""
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


# 256-entry tables: a uniform random byte b picks the Gaussian quantile (b + 0.5) / 256, so
# bytes from random.Random.randbytes translate (at C speed) into Gaussian-distributed values.
_Z = [NormalDist().inv_cdf((b + 0.5) / 256) for b in range(256)]
# FP8 codes spread over the whole e4m3 range: the extreme quantile lands on 448.
FP8_SIGMA = 448.0 / _Z[-1]
_FP8_TABLE = bytes(e4m3fn_encode(z * FP8_SIGMA) for z in _Z)


def _bf16_tables(mean: float, std: float) -> tuple[bytes, bytes]:
    bits = [bf16_bits(mean + z * std) for z in _Z]
    return bytes(b & 0xFF for b in bits), bytes(b >> 8 for b in bits)


_BF16_WEIGHT = _bf16_tables(0.0, 0.02)
_BF16_NORM = _bf16_tables(1.0, 0.02)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _rng(name: str) -> random.Random:
    # String seeds hash with SHA-512: stable across runs and Python versions.
    return random.Random(f"mxtrim-demo:{SEED}:{name}")


def _bf16_payload(name: str, shape, tables) -> bytes:
    n = _numel(shape)
    idx = _rng(name).randbytes(n)
    out = bytearray(2 * n)
    out[0::2] = idx.translate(tables[0])
    out[1::2] = idx.translate(tables[1])
    return bytes(out)


def _fp8_payload(name: str, shape) -> bytes:
    return _rng(name).randbytes(_numel(shape)).translate(_FP8_TABLE)


def _scale_inv_payload(name: str, shape) -> bytes:
    """Per-block dequantization scales: fp8 * scale_inv ~ N(0, 0.02), varied per block."""
    rng = _rng(name)
    base = 0.02 / FP8_SIGMA
    vals = [base * (0.75 + 0.5 * rng.random()) for _ in range(_numel(shape))]
    return struct.pack(f"<{len(vals)}f", *vals)


def _f32_payload(name: str, shape, std: float) -> bytes:
    rng = _rng(name)
    vals = [rng.gauss(0.0, std) for _ in range(_numel(shape))]
    return struct.pack(f"<{len(vals)}f", *vals)


# --------------------------------------------------------------------------- layout

def demo_config(vocab_size: int, bos: int, eos: int) -> dict:
    """config.json of the demo, with the fields of the real DeepSeek-V3 release."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "ep_size": 1,
        "first_k_dense_replace": FIRST_K_DENSE,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "kv_lora_rank": KV_LORA,
        "max_position_embeddings": 4096,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": MOE_INTERMEDIATE,
        "moe_layer_freq": 1,
        "n_group": 4,
        "n_routed_experts": N_ROUTED,
        "n_shared_experts": N_SHARED,
        "norm_topk_prob": True,
        "num_attention_heads": N_HEADS,
        "num_experts_per_tok": TOP_K,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": N_HEADS,
        "num_nextn_predict_layers": NUM_MTP,
        "q_lora_rank": Q_LORA,
        "qk_nope_head_dim": QK_NOPE,
        "qk_rope_head_dim": QK_ROPE,
        "quantization_config": dict(QUANTIZATION_CONFIG),
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 4.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 1024,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 2,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": V_HEAD,
        "vocab_size": vocab_size,
    }


# kind: "fp8" (weight; its scale_inv follows), "bf16", "norm" (bf16 around 1.0), "f32"
Spec = tuple[str, str, tuple[int, ...]]


def _linear(prefix: str, out_f: int, in_f: int) -> list[Spec]:
    return [
        (f"{prefix}.weight", "fp8", (out_f, in_f)),
        (f"{prefix}.weight_scale_inv", "scale", (-(-out_f // BLOCK), -(-in_f // BLOCK))),
    ]


def _block(p: str, moe: bool) -> list[Spec]:
    specs: list[Spec] = [(f"{p}.input_layernorm.weight", "norm", (HIDDEN,))]
    specs += _linear(f"{p}.self_attn.q_a_proj", Q_LORA, HIDDEN)
    specs += [(f"{p}.self_attn.q_a_layernorm.weight", "norm", (Q_LORA,))]
    specs += _linear(f"{p}.self_attn.q_b_proj", N_HEADS * (QK_NOPE + QK_ROPE), Q_LORA)
    specs += _linear(f"{p}.self_attn.kv_a_proj_with_mqa", KV_LORA + QK_ROPE, HIDDEN)
    specs += [(f"{p}.self_attn.kv_a_layernorm.weight", "norm", (KV_LORA,))]
    specs += _linear(f"{p}.self_attn.kv_b_proj", N_HEADS * (QK_NOPE + V_HEAD), KV_LORA)
    specs += _linear(f"{p}.self_attn.o_proj", HIDDEN, N_HEADS * V_HEAD)
    specs += [(f"{p}.post_attention_layernorm.weight", "norm", (HIDDEN,))]
    if not moe:
        specs += _linear(f"{p}.mlp.gate_proj", INTERMEDIATE, HIDDEN)
        specs += _linear(f"{p}.mlp.up_proj", INTERMEDIATE, HIDDEN)
        specs += _linear(f"{p}.mlp.down_proj", HIDDEN, INTERMEDIATE)
        return specs
    specs += [
        (f"{p}.mlp.gate.weight", "bf16", (N_ROUTED, HIDDEN)),
        (f"{p}.mlp.gate.e_score_correction_bias", "f32", (N_ROUTED,)),
    ]
    for e in range(N_ROUTED):
        specs += _linear(f"{p}.mlp.experts.{e}.gate_proj", MOE_INTERMEDIATE, HIDDEN)
        specs += _linear(f"{p}.mlp.experts.{e}.up_proj", MOE_INTERMEDIATE, HIDDEN)
        specs += _linear(f"{p}.mlp.experts.{e}.down_proj", HIDDEN, MOE_INTERMEDIATE)
    shared = MOE_INTERMEDIATE * N_SHARED
    specs += _linear(f"{p}.mlp.shared_experts.gate_proj", shared, HIDDEN)
    specs += _linear(f"{p}.mlp.shared_experts.up_proj", shared, HIDDEN)
    specs += _linear(f"{p}.mlp.shared_experts.down_proj", HIDDEN, shared)
    return specs


def demo_tensors(vocab_size: int) -> list[list[Spec]]:
    """The demo's tensors, as two shards: embeddings + layers 0-3, then layers 4-5 + MTP +
    final norm + head. Names follow the DeepSeek-V3 release (MTP at ``model.layers.6``)."""
    first: list[Spec] = [("model.embed_tokens.weight", "bf16", (vocab_size, HIDDEN))]
    second: list[Spec] = []
    for i in range(NUM_LAYERS):
        (first if i < SPLIT_AT else second).extend(_block(f"model.layers.{i}", i >= FIRST_K_DENSE))
    for k in range(NUM_MTP):
        p = f"model.layers.{NUM_LAYERS + k}"
        second += [
            (f"{p}.embed_tokens.weight", "bf16", (vocab_size, HIDDEN)),
            (f"{p}.enorm.weight", "norm", (HIDDEN,)),
            (f"{p}.hnorm.weight", "norm", (HIDDEN,)),
            (f"{p}.eh_proj.weight", "bf16", (HIDDEN, 2 * HIDDEN)),
        ]
        second += _block(p, moe=True)
        second += [
            (f"{p}.shared_head.norm.weight", "norm", (HIDDEN,)),
            (f"{p}.shared_head.head.weight", "bf16", (vocab_size, HIDDEN)),
        ]
    second += [
        ("model.norm.weight", "norm", (HIDDEN,)),
        ("lm_head.weight", "bf16", (vocab_size, HIDDEN)),
    ]
    return [first, second]


_DTYPE = {"fp8": "F8_E4M3", "scale": "F32", "bf16": "BF16", "norm": "BF16", "f32": "F32"}


def _payload(name: str, kind: str, shape) -> bytes:
    if kind == "fp8":
        return _fp8_payload(name, shape)
    if kind == "scale":
        return _scale_inv_payload(name, shape)
    if kind == "bf16":
        return _bf16_payload(name, shape, _BF16_WEIGHT)
    if kind == "norm":
        return _bf16_payload(name, shape, _BF16_NORM)
    if kind == "f32":
        return _f32_payload(name, shape, 0.01)
    raise ValueError(kind)


README = """\
# mxtrim demo model ({name})

A tiny, randomly initialised model generated by mxtrim-tui so that the tool can be tried
without downloading anything. It is **not** a trained model: its output is noise.

It has the checkpoint structure of the DeepSeek-V3 release, scaled down:

* `DeepseekV3ForCausalLM`, {layers} decoder layers (hidden size {hidden}); layers
  0-{last_dense} use a dense MLP (`first_k_dense_replace: {dense}`), the others are MoE with
  {routed} routed experts (top {topk}) and {shared} shared expert, `noaux_tc` routing;
* MLA attention (`q_lora_rank` {q_lora}, `kv_lora_rank` {kv_lora});
* one multi-token-prediction block stored as `model.layers.{mtp}.*`
  (`num_nextn_predict_layers: 1`);
* block-FP8 weights (`F8_E4M3`, 128x128 blocks) with `F32` `weight_scale_inv`, BF16 norms,
  router, embeddings and head, F32 `e_score_correction_bias`;
* two safetensors shards and `model.safetensors.index.json`;
* a small byte-level BPE tokenizer ({vocab} tokens) with a chat template.

Delete this directory at any time; mxtrim rebuilds it on demand.
"""


def _write_shard(path: Path, specs: list[tuple[str, str, tuple[int, ...]]], payload: dict[str, bytes]) -> None:
    """One safetensors file: the header for ``specs``, then each tensor's bytes in order."""
    entries = [(name, dtype, shape, tensor_nbytes(dtype, shape)) for name, dtype, shape in specs]
    for name, _, _, nbytes in entries:
        if len(payload[name]) != nbytes:
            raise ValueError(f"payload for {name} is {len(payload[name])} bytes, expected {nbytes}")
    header, _ = build_header_bytes(entries, {"format": "pt"})
    with open(path, "wb") as fh:
        fh.write(header)
        for name, _, _ in specs:
            fh.write(payload[name])


def build_demo(root: str | Path) -> Path:
    """Write the demo model into ``root`` (created; should be empty). Returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    write_tokenizer(root, generation_config=False)
    vocab_size = tokenizer_vocab_size(root)
    ids = special_token_ids(root)

    (root / "config.json").write_text(
        json.dumps(demo_config(vocab_size, ids["bos"], ids["eos"]), indent=2) + "\n"
    )
    gen = {
        "bos_token_id": ids["bos"],
        "do_sample": True,
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "temperature": 0.6,
        "top_p": 0.95,
    }
    (root / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")

    shards = demo_tensors(vocab_size)
    n = len(shards)
    weight_map: dict[str, str] = {}
    total = 0
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        specs = [(name, _DTYPE[kind], shape) for name, kind, shape in shard]
        payload = {name: _payload(name, kind, shape) for name, kind, shape in shard}
        _write_shard(root / fname, specs, payload)
        for name, _, _ in shard:
            weight_map[name] = fname
        total += sum(len(b) for b in payload.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

    (root / "README.md").write_text(
        README.format(
            name=DEMO_NAME,
            layers=NUM_LAYERS,
            hidden=HIDDEN,
            last_dense=FIRST_K_DENSE - 1,
            dense=FIRST_K_DENSE,
            routed=N_ROUTED,
            topk=TOP_K,
            shared=N_SHARED,
            q_lora=Q_LORA,
            kv_lora=KV_LORA,
            mtp=NUM_LAYERS,
            vocab=vocab_size,
        )
    )
    return root


# --------------------------------------------------------------------------- cache location

def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mxtrim`` (``~/.cache/mxtrim`` when unset or not absolute)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mxtrim"


def demo_model_path() -> Path:
    """Where the demo model lives (it may not exist yet: see :func:`ensure_demo_model`)."""
    return cache_dir() / DEMO_NAME


def ensure_demo_model() -> Path:
    """Return the demo model's directory, building it first if absent.

    The model is written into a temporary sibling directory and renamed into place, so the
    final directory either does not exist or is complete, even after a crash or with two
    processes racing (the loser discards its copy)."""
    final = demo_model_path()
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEMO_NAME}.tmp-", dir=final.parent))
    try:
        build_demo(tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
