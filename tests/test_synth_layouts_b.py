"""Synthetic layouts: Qwen-VL, Gemma, Llama, Mixtral, gpt-oss, Nemotron-H and Jamba.

Full size: exact tensor counts and byte totals, unique names, a sparse checkpoint whose every
shard passes the strict header reader and matches the layout. Scaled down: random-byte
checkpoints that safetensors/torch read back, configs that agree with the tensors, and (where
transformers' own parameter names match the checkpoint's) shapes equal to a meta-device model
built from the scaled config.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mxtrim_tui.core.read.safetensors_io import read_header, tensor_nbytes
from synth.checkpoint import Layout, write_checkpoint
from synth.layouts import gemma, gpt_oss, jamba, llama, mixtral, nemotron_h, qwen_vl

MODULES = [qwen_vl, gemma, llama, mixtral, gpt_oss, nemotron_h, jamba]
FUNCS = {key: fn for mod in MODULES for key, fn in mod.LAYOUTS.items()}

# variant id -> (LAYOUTS key, kwargs, tensor count, total bytes) at full size.
FULL = {
    "qwen2_5_vl": ("qwen2_5_vl", {}, 729, 16_584_333_312),
    "qwen2_5_vl-new": ("qwen2_5_vl", {"new_layout": True}, 729, 16_584_333_312),
    "qwen3_vl": ("qwen3_vl", {}, 750, 17_534_247_392),
    "qwen3_vl_moe": ("qwen3_vl_moe", {}, 882, 62_141_508_064),
    "gemma2": ("gemma2", {}, 464, 18_483_411_968),
    "gemma3": ("gemma3", {}, 1247, 54_864_813_280),
    "gemma3-new": ("gemma3", {"original_layout": False}, 1247, 54_864_813_280),
    "gemma3_text": ("gemma3_text", {}, 340, 1_999_771_904),
    "llama3": ("llama3", {}, 291, 16_060_522_496),
    "llama3_2_1b": ("llama3_2_1b", {}, 146, 2_471_628_800),
    "llama4": ("llama4", {}, 1061, 803_167_562_752),
    "mixtral": ("mixtral", {}, 995, 93_405_585_408),
    "gpt_oss": ("gpt_oss", {}, 687, 65_248_815_744),
    "nemotron_h": ("nemotron_h", {}, 311, 16_201_705_472),
    "jamba": ("jamba", {}, 1251, 103_140_646_656),
}

SMALL = {"hidden_size": 64, "vocab_size": 256}
# variant id -> (LAYOUTS key, kwargs) of a scaled-down layout.
SCALED = {
    "qwen2_5_vl": ("qwen2_5_vl", {**SMALL, "num_layers": 3, "vision_depth": 9}),
    "qwen2_5_vl-new": ("qwen2_5_vl", {**SMALL, "num_layers": 3, "vision_depth": 9, "new_layout": True}),
    "qwen3_vl": ("qwen3_vl", {**SMALL, "num_layers": 4, "vision_depth": 4}),
    "qwen3_vl_moe": ("qwen3_vl_moe", {**SMALL, "num_layers": 4, "vision_depth": 4, "num_experts": 4}),
    "qwen3_vl_moe-dense1": (
        "qwen3_vl_moe",
        {**SMALL, "num_layers": 3, "vision_depth": 2, "num_experts": 4, "mlp_only_layers": [1]},
    ),
    "gemma2": ("gemma2", {**SMALL, "num_layers": 4}),
    "gemma3": ("gemma3", {**SMALL, "num_layers": 7, "vision_depth": 2}),
    "gemma3-new": ("gemma3", {**SMALL, "num_layers": 7, "vision_depth": 2, "original_layout": False}),
    "gemma3_text": ("gemma3_text", {**SMALL, "num_layers": 7}),
    "llama3": ("llama3", {**SMALL, "num_layers": 3}),
    "llama3_2_1b": ("llama3_2_1b", {**SMALL, "num_layers": 3}),
    "llama4": ("llama4", {**SMALL, "num_layers": 5, "vision_depth": 2, "num_experts": 4}),
    "mixtral": ("mixtral", {**SMALL, "num_layers": 2, "num_experts": 4}),
    "gpt_oss": ("gpt_oss", {**SMALL, "num_layers": 3, "num_experts": 4}),
    "nemotron_h": ("nemotron_h", {**SMALL, "num_layers": 8}),
    "nemotron_h-pattern": ("nemotron_h", {**SMALL, "pattern": "M*-M"}),
    "jamba": ("jamba", {**SMALL, "num_layers": 9, "num_experts": 4}),
}

# Dtypes torch's safetensors loader handles on every build we run.
TORCH_READABLE = {"BF16", "F16", "F32", "F64", "U8", "I8", "I16", "I32", "I64", "BOOL"}


def _build(key: str, kwargs: dict) -> Layout:
    return FUNCS[key](**kwargs)


def _shard_files(root: Path) -> list[Path]:
    index = root / "model.safetensors.index.json"
    if index.exists():
        doc = json.loads(index.read_text())
        return [root / name for name in dict.fromkeys(doc["weight_map"].values())]
    return [root / "model.safetensors"]


def _check_written(root: Path, layout: Layout) -> None:
    """Every shard passes the strict reader; together they hold exactly the layout."""
    assert json.loads((root / "config.json").read_text()) == layout.config
    expected = {name: (dtype, shape) for name, dtype, shape in layout.tensors}
    seen: dict[str, tuple[str, tuple[int, ...]]] = {}
    for shard in _shard_files(root):
        header = read_header(shard)
        assert header.file_size == shard.stat().st_size
        for name, info in header.tensors.items():
            assert name not in seen, f"{name} in two shards"
            seen[name] = (info.dtype, info.shape)
    assert seen == expected
    index = root / "model.safetensors.index.json"
    if index.exists():
        doc = json.loads(index.read_text())
        assert doc["metadata"]["total_size"] == layout.total_bytes
        assert set(doc["weight_map"]) == set(expected)


# --------------------------------------------------------------------------- full size


def test_every_layout_is_covered():
    assert {key for key, *_ in FULL.values()} == set(FUNCS)
    assert {key for key, _ in SCALED.values()} == set(FUNCS)


@pytest.mark.parametrize("variant", sorted(FULL))
def test_full_size_layout(variant, tmp_path):
    key, kwargs, count, nbytes = FULL[variant]
    layout = _build(key, kwargs)
    names = [name for name, _, _ in layout.tensors]
    assert len(names) == count
    assert len(set(names)) == count
    assert layout.total_bytes == nbytes
    assert all(tensor_nbytes(d, s) > 0 for _, d, s in layout.tensors)
    root = write_checkpoint(tmp_path / variant, layout, data="sparse", tokenizer=False)
    _check_written(root, layout)
    # Same defaults, same answer (layouts are pure functions).
    assert _build(key, kwargs).tensors == layout.tensors


def test_full_size_facts():
    """Released per-layer structure that trimming must preserve."""
    q = qwen_vl.qwen2_5_vl().config
    assert q["num_hidden_layers"] == 28 and "text_config" not in q
    assert q["vision_config"]["depth"] == 32
    assert q["vision_config"]["fullatt_block_indexes"] == [7, 15, 23, 31]
    assert q["vision_config"]["window_size"] == 112
    assert q["rope_scaling"] == {"type": "mrope", "mrope_section": [16, 24, 24]}
    qn = qwen_vl.qwen2_5_vl(new_layout=True).config
    assert qn["text_config"]["layer_types"] == ["full_attention"] * 28

    q3 = qwen_vl.qwen3_vl().config
    assert q3["text_config"]["num_hidden_layers"] == 36
    assert q3["vision_config"]["depth"] == 27
    assert q3["vision_config"]["deepstack_visual_indexes"] == [8, 16, 24]
    moe = qwen_vl.qwen3_vl_moe()
    tc = moe.config["text_config"]
    assert (tc["num_hidden_layers"], tc["num_experts"], tc["decoder_sparse_step"], tc["mlp_only_layers"]) == (48, 128, 1, [])
    shapes = {n: s for n, _, s in moe.tensors}
    assert shapes["model.language_model.layers.0.mlp.experts.gate_up_proj"] == (128, 2048, 1536)
    assert shapes["model.language_model.layers.0.mlp.experts.down_proj"] == (128, 768, 2048)

    g2 = gemma.gemma2().config
    assert g2["num_hidden_layers"] == 42 and "layer_types" not in g2
    assert "lm_head.weight" not in {n for n, _, _ in gemma.gemma2().tensors}
    g3 = gemma.gemma3().config
    assert g3["text_config"]["num_hidden_layers"] == 62
    assert "layer_types" not in g3["text_config"] and "sliding_window_pattern" not in g3["text_config"]
    assert g3["vision_config"]["num_hidden_layers"] == 27
    g3n = gemma.gemma3(original_layout=False).config["text_config"]
    assert g3n["layer_types"].count("full_attention") == 10  # layers 5, 11, ..., 59
    assert g3n["layer_types"][5] == "full_attention" and g3n["layer_types"][4] == "sliding_attention"
    assert gemma.gemma3_text().config["sliding_window_pattern"] == 6

    assert llama.llama3().config["num_key_value_heads"] == 8
    assert "lm_head.weight" not in {n for n, _, _ in llama.llama3_2_1b().tensors}
    l4 = llama.llama4()
    t4 = l4.config["text_config"]
    assert t4["interleave_moe_layer_step"] == 2 and len(t4["no_rope_layers"]) == 48
    assert t4["no_rope_layers"][:4] == [1, 1, 1, 0]
    routers = [n for n, _, _ in l4.tensors if n.endswith("feed_forward.router.weight")]
    assert [int(n.split(".")[3]) for n in routers] == list(range(1, 48, 2))
    assert l4.config["vision_config"]["num_hidden_layers"] == 34
    assert llama.llama4(explicit_no_rope_layers=False).config["text_config"]["no_rope_layers"] == []

    go = gpt_oss.gpt_oss()
    assert go.config["layer_types"] == ["sliding_attention", "full_attention"] * 18
    assert go.config["quantization_config"]["quant_method"] == "mxfp4"
    gshapes = {n: (d, s) for n, d, s in go.tensors}
    assert gshapes["model.layers.0.mlp.experts.gate_up_proj_blocks"] == ("U8", (128, 5760, 90, 16))
    assert gshapes["model.layers.0.mlp.experts.gate_up_proj_scales"] == ("U8", (128, 5760, 90))
    assert gshapes["model.layers.0.mlp.experts.down_proj_blocks"] == ("U8", (128, 2880, 90, 16))
    assert gshapes["model.layers.0.mlp.experts.down_proj_bias"] == ("BF16", (128, 2880))
    assert gshapes["model.layers.0.self_attn.sinks"] == ("BF16", (64,))
    # The 20b is the same architecture at 24 layers / 32 experts: 459 tensors, 12.82 GiB.
    small = gpt_oss.gpt_oss(num_layers=24, num_experts=32)
    assert len(small.tensors) == 459 and round(small.total_bytes / 2**30, 2) == 12.82

    pat = nemotron_h.nemotron_h().config["hybrid_override_pattern"]
    assert len(pat) == 52 and (pat.count("M"), pat.count("*"), pat.count("-")) == (24, 4, 24)

    jt = jamba.jamba()
    attn = sorted({int(n.split(".")[2]) for n, _, _ in jt.tensors if ".self_attn." in n})
    moe_layers = sorted({int(n.split(".")[2]) for n, _, _ in jt.tensors if "feed_forward.router" in n})
    assert attn == [4, 12, 20, 28]
    assert moe_layers == list(range(1, 32, 2))


# --------------------------------------------------------------------------- scaled down


def _layer_ids(names, prefix: str) -> set[int]:
    pat = re.compile(re.escape(prefix) + r"(\d+)\.")
    return {int(m.group(1)) for n in names if (m := pat.match(n))}


def _text_config(config: dict) -> dict:
    return config.get("text_config", config)


TEXT_PREFIX = {
    "qwen2_5_vl": "model.layers.",
    "qwen2_5_vl-new": "model.language_model.layers.",
    "qwen3_vl": "model.language_model.layers.",
    "qwen3_vl_moe": "model.language_model.layers.",
    "qwen3_vl_moe-dense1": "model.language_model.layers.",
    "gemma3": "language_model.model.layers.",
    "gemma3-new": "model.language_model.layers.",
    "llama4": "language_model.model.layers.",
    "nemotron_h": "backbone.layers.",
    "nemotron_h-pattern": "backbone.layers.",
}
VISION_PREFIX = {
    "qwen2_5_vl": ("visual.blocks.", lambda c: c["vision_config"]["depth"]),
    "qwen2_5_vl-new": ("model.visual.blocks.", lambda c: c["vision_config"]["depth"]),
    "qwen3_vl": ("model.visual.blocks.", lambda c: c["vision_config"]["depth"]),
    "qwen3_vl_moe": ("model.visual.blocks.", lambda c: c["vision_config"]["depth"]),
    "qwen3_vl_moe-dense1": ("model.visual.blocks.", lambda c: c["vision_config"]["depth"]),
    "gemma3": ("vision_tower.vision_model.encoder.layers.", lambda c: c["vision_config"]["num_hidden_layers"]),
    "gemma3-new": (
        "model.vision_tower.vision_model.encoder.layers.",
        lambda c: c["vision_config"]["num_hidden_layers"],
    ),
    "llama4": ("vision_model.model.layers.", lambda c: c["vision_config"]["num_hidden_layers"]),
}


@pytest.mark.parametrize("variant", sorted(SCALED))
def test_scaled_config_agrees_with_tensors(variant):
    key, kwargs = SCALED[variant]
    layout = _build(key, kwargs)
    names = [n for n, _, _ in layout.tensors]
    assert len(set(names)) == len(names)
    cfg = layout.config
    text = _text_config(cfg)
    n = text["num_hidden_layers"]
    assert _layer_ids(names, TEXT_PREFIX.get(variant, "model.layers.")) == set(range(n))
    if variant in VISION_PREFIX:
        prefix, depth = VISION_PREFIX[variant]
        assert _layer_ids(names, prefix) == set(range(depth(cfg)))
    for list_key in ("layer_types", "no_rope_layers"):
        if text.get(list_key):
            assert len(text[list_key]) == n
    # Special token ids index the scaled vocabulary.
    vocab = text.get("vocab_size", kwargs["vocab_size"])
    for scope in (cfg, text):
        for k, v in scope.items():
            if k.endswith(("_token_id", "_token_index")) and v is not None:
                assert all(0 <= x < vocab for x in (v if isinstance(v, list) else [v])), (k, v)
    shapes = {nm: s for nm, _, s in layout.tensors}
    emb = next(s for nm, s in shapes.items() if nm.endswith(("embed_tokens.weight", "embeddings.weight")))
    assert emb == (kwargs["vocab_size"], kwargs["hidden_size"])


def test_scaled_family_rules():
    q = qwen_vl.qwen2_5_vl(num_layers=2, vision_depth=12, hidden_size=64, vocab_size=256)
    assert q.config["vision_config"]["fullatt_block_indexes"] == [7]
    assert qwen_vl.qwen2_5_vl(num_layers=2, vision_depth=3, hidden_size=64).config["vision_config"][
        "fullatt_block_indexes"
    ] == [2]
    q3 = qwen_vl.qwen3_vl(num_layers=4, vision_depth=8, hidden_size=64, vocab_size=256)
    ds = q3.config["vision_config"]["deepstack_visual_indexes"]
    assert ds == [2, 4, 6]
    mergers = {int(n.split(".")[3]) for n, _, _ in q3.tensors if ".deepstack_merger_list." in n}
    assert mergers == set(range(len(ds)))
    dense = qwen_vl.qwen3_vl_moe(num_layers=3, vision_depth=2, hidden_size=64, vocab_size=256, num_experts=4,
                                 mlp_only_layers=[1])
    names = {n for n, _, _ in dense.tensors}
    assert "model.language_model.layers.1.mlp.gate_proj.weight" in names
    assert "model.language_model.layers.1.mlp.gate.weight" not in names
    assert "model.language_model.layers.2.mlp.experts.gate_up_proj" in names

    l4 = llama.llama4(num_layers=6, vision_depth=1, hidden_size=64, vocab_size=256, num_experts=4)
    assert l4.config["text_config"]["no_rope_layers"] == [1, 1, 1, 0, 1, 1]
    moe = sorted(_layer_ids([n for n, _, _ in l4.tensors if "router" in n], "language_model.model.layers."))
    assert moe == [1, 3, 5]

    go = gpt_oss.gpt_oss(num_layers=3, num_experts=4, hidden_size=50, vocab_size=256)
    assert go.config["hidden_size"] == 64  # rounded up to the MXFP4 block size
    assert go.config["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention"]
    gshapes = {n: s for n, _, s in go.tensors}
    assert gshapes["model.layers.0.mlp.experts.gate_up_proj_blocks"] == (4, 128, 2, 16)
    assert gshapes["model.layers.0.self_attn.sinks"] == (go.config["num_attention_heads"],)

    nh = nemotron_h.nemotron_h(num_layers=8, hidden_size=64, vocab_size=256)
    assert nh.config["hybrid_override_pattern"] == "M-M-M-M*"
    nh = nemotron_h.nemotron_h(pattern="M*-M", hidden_size=64, vocab_size=256)
    names = {n for n, _, _ in nh.tensors}
    assert "backbone.layers.0.mixer.A_log" in names and "backbone.layers.3.mixer.A_log" in names
    assert "backbone.layers.1.mixer.q_proj.weight" in names
    assert "backbone.layers.2.mixer.up_proj.weight" in names
    with pytest.raises(ValueError):
        nemotron_h.nemotron_h(pattern="M*E")
    with pytest.raises(ValueError):
        nemotron_h.nemotron_h(num_layers=3, pattern="M*-M")

    jt = jamba.jamba(num_layers=9, num_experts=4, hidden_size=64, vocab_size=256)
    assert sorted(_layer_ids([n for n, _, _ in jt.tensors if ".self_attn." in n], "model.layers.")) == [4]
    assert sorted(_layer_ids([n for n, _, _ in jt.tensors if ".router." in n], "model.layers.")) == [1, 3, 5, 7]
    jt = jamba.jamba(num_layers=3, attn_layer_period=3, attn_layer_offset=2, hidden_size=64, vocab_size=256)
    assert sorted(_layer_ids([n for n, _, _ in jt.tensors if ".self_attn." in n], "model.layers.")) == [2]
    with pytest.raises(ValueError):
        jamba.jamba(attn_layer_period=2, attn_layer_offset=2)


@pytest.mark.parametrize("variant", sorted(SCALED))
def test_scaled_random_checkpoint_reads_back(variant, tmp_path):
    key, kwargs = SCALED[variant]
    layout = _build(key, kwargs)
    # Small shards so the index path is exercised too.
    root = write_checkpoint(tmp_path / variant, layout, data="random", max_shard_bytes=400_000, tokenizer=False)
    _check_written(root, layout)

    torch = pytest.importorskip("torch")
    from safetensors import safe_open

    expected = {n: (d, s) for n, d, s in layout.tensors}
    read = 0
    for shard in _shard_files(root):
        with safe_open(str(shard), framework="pt") as fh:
            for name in fh.keys():
                dtype, shape = expected[name]
                if dtype not in TORCH_READABLE:
                    continue
                tensor = fh.get_tensor(name)
                assert tuple(tensor.shape) == shape
                assert tensor.element_size() * tensor.numel() == tensor_nbytes(dtype, shape)
                if dtype == "U8":
                    assert tensor.dtype == torch.uint8
                read += 1
    assert read == sum(1 for _, d, _ in layout.tensors if d in TORCH_READABLE) > 0


# --------------------------------------------------------------------------- against transformers

# Checkpoint name -> transformers 5 parameter name, for layouts whose parameters otherwise match.
RENAMES = {
    "qwen2_5_vl": [(r"^visual\.", "model.visual."), (r"^model\.(?!visual\.)", "model.language_model.")],
    "qwen2_5_vl-new": [],
    "qwen3_vl": [],
    "gemma2": [],
    "gemma3": [
        (r"^language_model\.model\.", "model.language_model."),
        (r"^vision_tower\.vision_model\.", "model.vision_tower."),
        (r"^multi_modal_projector\.", "model.multi_modal_projector."),
    ],
    "gemma3-new": [(r"^model\.vision_tower\.vision_model\.", "model.vision_tower.")],
    "gemma3_text": [],
    "llama3": [],
    "llama3_2_1b": [],
    "llama4": [],
    "nemotron_h": [(r"^backbone\.", "model.")],
}


@pytest.mark.parametrize("variant", sorted(RENAMES))
def test_scaled_shapes_match_transformers(variant):
    """Scaled configs load in transformers and give the same parameter shapes (the tied
    ``lm_head`` is a parameter there but never stored)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    key, kwargs = SCALED[variant]
    layout = _build(key, kwargs)
    config = {k: v for k, v in layout.config.items() if k != "auto_map"}
    conf = transformers.AutoConfig.for_model(**config)
    arch = getattr(transformers, config["architectures"][0])
    with torch.device("meta"):
        model = arch(conf)
    theirs = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    ours = {}
    for name, _, shape in layout.tensors:
        for pattern, repl in RENAMES[variant]:
            name = re.sub(pattern, repl, name)
        ours[name] = shape
    missing = set(theirs) - set(ours)
    if "lm_head.weight" not in ours:  # tied: the config must not say otherwise
        assert layout.config.get("tie_word_embeddings", True) is not False
        assert _text_config(layout.config).get("tie_word_embeddings", True) is not False
        missing.discard("lm_head.weight")
    assert missing == set()
    assert ours == {k: v for k, v in theirs.items() if k in ours}
