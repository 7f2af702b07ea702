"""Build the bundled demo models: tiny DeepSeek-V3-architecture checkpoints, made on demand.

Each demo has the same shape of checkpoint as the real DeepSeek-V3 release, scaled down to
7-15 MB: MLA attention, a dense prefix followed by MoE layers (routed + shared
experts, ``noaux_tc`` gate with ``e_score_correction_bias``), one MTP block stored after the
last decoder layer, two shards with an index, a working tokenizer and a generation config.

* the default demo (``bf16``) is BF16 throughout, with MLA at DeepSeek-V3's own head sizes:
  vLLM's CPU build serves it, and they are the sizes vLLM's GPU MLA kernels take;
* the ``fp8`` demo has block-FP8 (e4m3, 128x128 blocks) linear weights with F32
  ``weight_scale_inv`` next to BF16 norms / embeddings / head, and 32-wide MLA heads.

Everything is pure Python (no torch, no numpy) and deterministic: two builds are byte
identical. Values are real numbers: Gaussian(0, 0.02)-distributed (after dequantization).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import tempfile
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from ..core.read.safetensors_io import build_header_bytes, tensor_nbytes
from .tokenizer import special_token_ids, tokenizer_vocab_size, write_tokenizer

# Bump whenever the builder's output changes: the cache directory names carry it, so an old
# demo is never mistaken for the current one.
DEMO_VERSION = "v2"
SEED = 20250101

BLOCK = 128
QUANTIZATION_CONFIG = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [BLOCK, BLOCK],
}


@dataclass(frozen=True)
class DemoVariant:
    """One demo: its cache name, its number format and its sizes. The field names are the
    lower-case names of the sizes (``dataclasses.replace(VARIANTS["fp8"], kv_lora=512)``)."""

    key: str
    name: str
    fp8: bool  # block-FP8 linear weights (with F32 weight_scale_inv), else BF16 throughout
    hidden: int = 256
    num_layers: int = 6
    first_k_dense: int = 2
    n_routed: int = 8
    n_shared: int = 1
    top_k: int = 2
    n_group: int = 4
    topk_group: int = 2
    n_heads: int = 4
    q_lora: int = 128
    kv_lora: int = 96
    qk_nope: int = 32
    qk_rope: int = 32
    v_head: int = 32
    intermediate: int = 384
    moe_intermediate: int = 128
    num_mtp: int = 1
    split_at: int = 4  # shard 1: embeddings + layers 0..split_at-1; shard 2: the rest


# The default demo, BF16: MLA at DeepSeek-V3's own head sizes (kv_lora_rank 512 + rope 64 = 576,
# the only latent width vLLM's CPU MLA decode kernel takes; nope / v 128, what its GPU MLA
# prefill kernels take): vLLM's CPU build serves it. Two heads and 64-wide experts keep it
# small (kv_b_proj alone is heads x 256 x 512).
BF16_DEMO = DemoVariant(
    key="bf16", name=f"mxtrim-demo-moe-{DEMO_VERSION}", fp8=False,
    n_heads=2, kv_lora=512, qk_nope=128, qk_rope=64, v_head=128, moe_intermediate=64,
)
# The block-FP8 demo, as DeepSeek-V3 is released. Output dims of every FP8 linear are multiples
# of 128 (vLLM's block-FP8 checks); kv_b_proj's input (kv_lora_rank = 96) and the 128-wide
# expert dims exercise partial blocks. vLLM's CPU build runs block FP8 only with AMX, and its
# GPU MLA prefill kernels refuse the 32-wide heads: a demo for the tool, not for serving.
FP8_DEMO = DemoVariant(key="fp8", name=f"mxtrim-demo-moe-fp8-{DEMO_VERSION}", fp8=True)

VARIANTS = {v.key: v for v in (BF16_DEMO, FP8_DEMO)}
DEFAULT_VARIANT = BF16_DEMO.key
DEMO_NAME = BF16_DEMO.name


def variant(which: "str | DemoVariant | None" = None) -> DemoVariant:
    """The demo named by ``which`` ("bf16", "fp8"; None: the default), or ``which`` itself."""
    if isinstance(which, DemoVariant):
        return which
    key = DEFAULT_VARIANT if which is None else which
    if key not in VARIANTS:
        raise ValueError(f"unknown demo {key!r}: one of {', '.join(VARIANTS)}")
    return VARIANTS[key]


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

def demo_config(vocab_size: int, bos: int, eos: int, which: "str | DemoVariant | None" = None) -> dict:
    """config.json of the demo, with the fields of the real DeepSeek-V3 release."""
    v = variant(which)
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "ep_size": 1,
        "first_k_dense_replace": v.first_k_dense,
        "hidden_act": "silu",
        "hidden_size": v.hidden,
        "initializer_range": 0.02,
        "intermediate_size": v.intermediate,
        "kv_lora_rank": v.kv_lora,
        "max_position_embeddings": 4096,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": v.moe_intermediate,
        "moe_layer_freq": 1,
        "n_group": v.n_group,
        "n_routed_experts": v.n_routed,
        "n_shared_experts": v.n_shared,
        "norm_topk_prob": True,
        "num_attention_heads": v.n_heads,
        "num_experts_per_tok": v.top_k,
        "num_hidden_layers": v.num_layers,
        "num_key_value_heads": v.n_heads,
        "num_nextn_predict_layers": v.num_mtp,
        "q_lora_rank": v.q_lora,
        "qk_nope_head_dim": v.qk_nope,
        "qk_rope_head_dim": v.qk_rope,
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
        "topk_group": v.topk_group,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": v.v_head,
        "vocab_size": vocab_size,
    }
    if not v.fp8:
        del cfg["quantization_config"]
    return cfg


# kind: "fp8" (weight; its scale_inv follows), "bf16", "norm" (bf16 around 1.0), "f32"
Spec = tuple[str, str, tuple[int, ...]]


def _linear(v: DemoVariant, prefix: str, out_f: int, in_f: int) -> list[Spec]:
    if not v.fp8:
        return [(f"{prefix}.weight", "bf16", (out_f, in_f))]
    return [
        (f"{prefix}.weight", "fp8", (out_f, in_f)),
        (f"{prefix}.weight_scale_inv", "scale", (-(-out_f // BLOCK), -(-in_f // BLOCK))),
    ]


def _attention(v: DemoVariant, p: str) -> list[Spec]:
    specs: list[Spec] = [(f"{p}.input_layernorm.weight", "norm", (v.hidden,))]
    specs += _linear(v, f"{p}.self_attn.q_a_proj", v.q_lora, v.hidden)
    specs += [(f"{p}.self_attn.q_a_layernorm.weight", "norm", (v.q_lora,))]
    specs += _linear(v, f"{p}.self_attn.q_b_proj", v.n_heads * (v.qk_nope + v.qk_rope), v.q_lora)
    specs += _linear(v, f"{p}.self_attn.kv_a_proj_with_mqa", v.kv_lora + v.qk_rope, v.hidden)
    specs += [(f"{p}.self_attn.kv_a_layernorm.weight", "norm", (v.kv_lora,))]
    specs += _linear(v, f"{p}.self_attn.kv_b_proj", v.n_heads * (v.qk_nope + v.v_head), v.kv_lora)
    specs += _linear(v, f"{p}.self_attn.o_proj", v.hidden, v.n_heads * v.v_head)
    specs += [(f"{p}.post_attention_layernorm.weight", "norm", (v.hidden,))]
    return specs


def _mlp(v: DemoVariant, p: str, width: int) -> list[Spec]:
    return (_linear(v, f"{p}.gate_proj", width, v.hidden) + _linear(v, f"{p}.up_proj", width, v.hidden)
            + _linear(v, f"{p}.down_proj", v.hidden, width))


def _block(v: DemoVariant, p: str, moe: bool) -> list[Spec]:
    specs = _attention(v, p)
    if not moe:
        return specs + _mlp(v, f"{p}.mlp", v.intermediate)
    specs += [
        (f"{p}.mlp.gate.weight", "bf16", (v.n_routed, v.hidden)),
        (f"{p}.mlp.gate.e_score_correction_bias", "f32", (v.n_routed,)),
    ]
    for e in range(v.n_routed):
        specs += _mlp(v, f"{p}.mlp.experts.{e}", v.moe_intermediate)
    return specs + _mlp(v, f"{p}.mlp.shared_experts", v.moe_intermediate * v.n_shared)


def demo_tensors(vocab_size: int, which: "str | DemoVariant | None" = None) -> list[list[Spec]]:
    """The demo's tensors, as two shards: embeddings + the first ``split_at`` layers, then the
    other layers + MTP + final norm + head. Names follow the DeepSeek-V3 release (the MTP
    block is stored after the last decoder layer, ``model.layers.{num_layers}``)."""
    v = variant(which)
    first: list[Spec] = [("model.embed_tokens.weight", "bf16", (vocab_size, v.hidden))]
    second: list[Spec] = []
    for i in range(v.num_layers):
        (first if i < v.split_at else second).extend(_block(v, f"model.layers.{i}", i >= v.first_k_dense))
    for k in range(v.num_mtp):
        p = f"model.layers.{v.num_layers + k}"
        second += [
            (f"{p}.embed_tokens.weight", "bf16", (vocab_size, v.hidden)),
            (f"{p}.enorm.weight", "norm", (v.hidden,)),
            (f"{p}.hnorm.weight", "norm", (v.hidden,)),
            (f"{p}.eh_proj.weight", "bf16", (v.hidden, 2 * v.hidden)),
        ]
        second += _block(v, p, moe=True)
        second += [
            (f"{p}.shared_head.norm.weight", "norm", (v.hidden,)),
            (f"{p}.shared_head.head.weight", "bf16", (vocab_size, v.hidden)),
        ]
    second += [
        ("model.norm.weight", "norm", (v.hidden,)),
        ("lm_head.weight", "bf16", (vocab_size, v.hidden)),
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
* MLA attention ({heads} heads, `q_lora_rank` {q_lora}, `kv_lora_rank` {kv_lora},
  `qk_nope_head_dim` {nope}, `qk_rope_head_dim` {rope}, `v_head_dim` {v_head});
* one multi-token-prediction block stored as `model.layers.{mtp}.*`
  (`num_nextn_predict_layers: 1`);
* {weights}
* two safetensors shards and `model.safetensors.index.json`;
* a small byte-level BPE tokenizer ({vocab} tokens) with a chat template.
{serving}
Delete this directory at any time; mxtrim rebuilds it on demand.
"""

_WEIGHTS = {
    True: "block-FP8 weights (`F8_E4M3`, 128x128 blocks) with `F32` `weight_scale_inv`, BF16 norms,\n"
          "  router, embeddings and head, F32 `e_score_correction_bias`;",
    False: "BF16 weights, F32 `e_score_correction_bias`;",
}
_SERVING = {
    True: "\nvLLM does not serve this one: no MLA kernel of vLLM takes its sizes (a latent of\n"
          "{kv_lora} + {rope}, heads {nope} wide), and vLLM's CPU build runs block FP8 only on CPUs\n"
          "with AMX. It shows the tool on a block-FP8 checkpoint; `mxtrim demo` (no flag) builds the\n"
          "BF16 demo vLLM serves.\n",
    False: "\nIts MLA sizes are DeepSeek-V3's own: a latent of 512 + 64 = 576 (the only width vLLM's\n"
           "CPU MLA kernel takes) and nope / rope / v 128 / 64 / 128 (what vLLM's GPU MLA prefill\n"
           "kernels take). `mxtrim demo --fp8` builds a block-FP8 variant.\n",
}


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


def _write_readme(root: Path, v: DemoVariant, vocab_size: int) -> None:
    (root / "README.md").write_text(
        README.format(
            name=v.name, layers=v.num_layers, hidden=v.hidden, last_dense=v.first_k_dense - 1,
            dense=v.first_k_dense, routed=v.n_routed, topk=v.top_k, shared=v.n_shared,
            heads=v.n_heads, q_lora=v.q_lora, kv_lora=v.kv_lora, nope=v.qk_nope, rope=v.qk_rope,
            v_head=v.v_head, mtp=v.num_layers, vocab=vocab_size, weights=_WEIGHTS[v.fp8],
            serving=_SERVING[v.fp8].format(nope=v.qk_nope, kv_lora=v.kv_lora, rope=v.qk_rope),
        )
    )


def build_demo(root: str | Path, which: "str | DemoVariant | None" = None) -> Path:
    """Write a demo model into ``root`` (created; should be empty). Returns ``root``.

    ``which``: "bf16" (the default: the demo vLLM serves), "fp8" (block-FP8), or a
    :class:`DemoVariant` (e.g. ``dataclasses.replace(VARIANTS["fp8"], kv_lora=512)``)."""
    v = variant(which)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    write_tokenizer(root, generation_config=False)
    vocab_size = tokenizer_vocab_size(root)
    ids = special_token_ids(root)

    (root / "config.json").write_text(
        json.dumps(demo_config(vocab_size, ids["bos"], ids["eos"], v), indent=2) + "\n"
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

    shards = demo_tensors(vocab_size, v)
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
    _write_readme(root, v, vocab_size)
    return root


# --------------------------------------------------------------------------- cache location

def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mxtrim`` (``~/.cache/mxtrim`` when unset or not absolute)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mxtrim"


def demo_model_path(which: "str | None" = None) -> Path:
    """Where a demo model lives (it may not exist yet: see :func:`ensure_demo_model`)."""
    return cache_dir() / variant(which).name


def ensure_demo_model(which: "str | None" = None) -> Path:
    """Return a demo model's directory ("bf16", the default, or "fp8"), building it first if
    absent.

    The model is written into a temporary sibling directory and renamed into place, so the
    final directory either does not exist or is complete, even after a crash or with two
    processes racing (the loser discards its copy)."""
    v = variant(which)
    final = demo_model_path(v.key)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{v.name}.tmp-", dir=final.parent))
    try:
        build_demo(tmp, v.key)
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
