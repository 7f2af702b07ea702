"""Inventory of every family at its real full-size shape (sparse files, no data on disk).

Expectations are the published structure of each release (which layers are dense/MoE,
sliding/full, linear/full, which DSA layers run the indexer, where MTP lives), written
independently of the family modules that compute them.
"""

from __future__ import annotations

import json

import pytest

from mxtrim_tui.core.model.inventory import build_inventory
from mxtrim_tui.core.read.source import open_source
from synth.checkpoint import write_checkpoint
from synth.layouts import all_layouts

LAYOUTS = all_layouts()


def inventory_of(tmp_path, key, **kw):
    layout = LAYOUTS[key](**kw)
    root = write_checkpoint(tmp_path / key, layout, data="sparse", tokenizer=False)
    return build_inventory(open_source(root)), layout


def kinds(inv, sub="text"):
    return [(l.kind.attention, l.kind.mlp) for l in inv.submodels[sub].layers]


def rng(n, f):
    return [f(i) for i in range(n)]


# key: (family, text depth, expected (attention, mlp) per text layer, mtp layers)
EXPECTED = {
    "deepseek_v2": ("deepseek_v3", 60, lambda i: ("mla", "dense" if i < 1 else "moe"), 0),
    "deepseek_v3": ("deepseek_v3", 61, lambda i: ("mla", "dense" if i < 3 else "moe"), 1),
    "kimi_k2": ("deepseek_v3", 61, lambda i: ("mla", "dense" if i < 1 else "moe"), 0),
    "deepseek_v32": ("deepseek_v32", 61, lambda i: ("dsa (full indexer)", "dense" if i < 3 else "moe"), 1),
    # GLM-5: offset 3, freq 4 -> layers 0,1,2 and 6,10,14,... run the indexer
    "glm_moe_dsa": (
        "glm_moe_dsa",
        78,
        lambda i: (
            "dsa (full indexer)" if i < 3 or (i - 2) % 4 == 0 else "dsa (shared indexer)",
            "dense" if i < 3 else "moe",
        ),
        1,
    ),
    "glm4_moe": ("glm4_moe", 92, lambda i: ("full", "dense" if i < 3 else "moe"), 1),
    "qwen2": ("qwen_dense", 28, lambda i: ("full", "dense"), 0),
    "qwen3": ("qwen_dense", 36, lambda i: ("full", "dense"), 0),
    "qwen3_small_tied": ("qwen_dense", 28, lambda i: ("full", "dense"), 0),
    "qwen2_5_awq": ("qwen_dense", 28, lambda i: ("full", "dense"), 0),
    "qwen2_moe": ("qwen_moe", 24, lambda i: ("full", "moe"), 0),
    "qwen3_moe": ("qwen_moe", 48, lambda i: ("full", "moe"), 0),
    "qwen3_next": ("qwen3_next", 48, lambda i: ("full" if (i + 1) % 4 == 0 else "linear", "moe"), 1),
    "qwen2_5_vl": ("qwen2_5_vl", 28, lambda i: ("full", "dense"), 0),
    "qwen3_vl": ("qwen3_vl", 36, lambda i: ("full", "dense"), 0),
    "qwen3_vl_moe": ("qwen3_vl", 48, lambda i: ("full", "moe"), 0),
    "gemma2": ("gemma2", 42, lambda i: ("sliding" if i % 2 == 0 else "full", "dense"), 0),
    "gemma3": ("gemma3", 62, lambda i: ("full" if (i + 1) % 6 == 0 else "sliding", "dense"), 0),
    "gemma3_text": ("gemma3", 26, lambda i: ("full" if (i + 1) % 6 == 0 else "sliding", "dense"), 0),
    "llama3": ("llama", 32, lambda i: ("full", "dense"), 0),
    "llama3_2_1b": ("llama", 16, lambda i: ("full", "dense"), 0),
    # Maverick: MoE on odd layers; every 4th layer is NoPE global attention, others chunked
    "llama4": (
        "llama4",
        48,
        lambda i: ("full (NoPE)" if (i + 1) % 4 == 0 else "chunked", "moe" if i % 2 == 1 else "dense"),
        0,
    ),
    "mixtral": ("mixtral", 32, lambda i: ("full", "moe"), 0),
    "gpt_oss": ("gpt_oss", 36, lambda i: ("sliding" if i % 2 == 0 else "full", "moe"), 0),
    "jamba": (
        "jamba",
        32,
        lambda i: ("full" if i % 8 == 4 else "mamba", "moe" if i % 2 == 1 else "dense"),
        0,
    ),
}


def test_every_layout_has_an_expectation():
    assert set(EXPECTED) | {"nemotron_h"} == set(LAYOUTS)


@pytest.mark.parametrize("key", sorted(EXPECTED))
@pytest.mark.slow
def test_family_inventory_at_full_size(tmp_path, key):
    family, depth, per_layer, mtp = EXPECTED[key]
    inv, layout = inventory_of(tmp_path, key)
    assert inv.family.key == family
    text = inv.submodels["text"]
    assert text.declared_depth == depth and len(text.layers) == depth
    assert kinds(inv) == rng(depth, per_layer)
    # every tensor is placed exactly once, bytes add up exactly
    placed = [n for sm in inv.submodels.values() for l in sm.layers for n in l.tensors]
    placed += [n for sm in inv.submodels.values() for p in sm.parts for n in p.tensors]
    placed += [n for p in inv.shared for n in p.tensors]
    assert inv.unassigned == []
    assert sorted(placed) == sorted(n for n, _, _ in layout.tensors)
    assert sum(sm.nbytes for sm in inv.submodels.values()) + sum(p.nbytes for p in inv.shared) == layout.total_bytes
    if mtp:
        assert len(inv.submodels["mtp"].layers) == mtp
    else:
        assert "mtp" not in inv.submodels
    assert not any("disagree" in w or "looks like" in w for w in inv.warnings), inv.warnings
    # groups partition the layers of each submodel
    for sm in inv.submodels.values():
        grouped = sorted(i for g in inv.groups if g.submodel == sm.name for i in g.layers)
        assert grouped == sorted(l.index for l in sm.layers)


def test_deepseek_v3_details(tmp_path):
    inv, _ = inventory_of(tmp_path, "deepseek_v3")
    moe = inv.submodels["text"].layers[3]
    assert moe.kind.experts == 256 and "shared expert" in moe.kind.special and "router bias" in moe.kind.special
    assert moe.kind.weight_dtypes == ("BF16", "F8_E4M3")  # FP8 projections, BF16 router gate
    assert moe.scale_tensors > 3 * 256  # every FP8 linear carries weight_scale_inv
    assert "mlp.gate" in moe.unquantized
    mtp = inv.submodels["mtp"].layers[0]
    assert mtp.stored_index == 61 and mtp.name == "model.layers.61" and "mtp head" in mtp.kind.special
    assert inv.quantization.method == "fp8" and "weight_block_size=[128, 128]" in inv.quantization.summary()
    assert len(inv.groups) == 3
    assert inv.total_tensors == 91991 and len(inv.source.shards) >= 160


@pytest.mark.slow
def test_glm5_quant_ignore_entries_are_attached_to_layers(tmp_path):
    inv, _ = inventory_of(tmp_path, "glm_moe_dsa")
    assert inv.quantization.location == "config.json:compression_config"
    layers = inv.submodels["text"].layers
    assert "model.layers.0.self_attn.indexer.weights_proj" in layers[0].quant_ignored
    assert layers[7].quant_ignored == ["model.layers.7.mlp.gate"]  # shared-indexer layer: gate only
    assert set(inv.submodels["mtp"].layers[0].quant_ignored) >= {"model.layers.78.eh_proj"}
    assert "I8" in layers[6].kind.weight_dtypes


def test_qwen3_next_relative_mtp_and_parts(tmp_path):
    inv, _ = inventory_of(tmp_path, "qwen3_next")
    mtp = inv.submodels["mtp"]
    assert [l.name for l in mtp.layers] == ["mtp.layers.0"]
    assert [p.label for p in mtp.parts] == ["mtp shared"]
    assert all(n.startswith("mtp.") for p in mtp.parts for n in p.tensors)


def test_vision_towers(tmp_path):
    inv, _ = inventory_of(tmp_path, "qwen2_5_vl")
    vision = inv.submodels["vision"]
    assert vision.declared_depth == 32 and len(vision.layers) == 32
    full = [l.index for l in vision.layers if l.kind.attention == "vision full"]
    assert full == [7, 15, 23, 31]
    inv3, _ = inventory_of(tmp_path, "qwen3_vl")
    labels = {p.label for p in inv3.submodels["vision"].parts}
    assert "vision deepstack mergers" in labels


@pytest.mark.parametrize("original", [True, False])
def test_gemma3_both_tensor_layouts(tmp_path, original):
    inv, _ = inventory_of(tmp_path, "gemma3", original_layout=original)
    assert len(inv.submodels["text"].layers) == 62 and len(inv.submodels["vision"].layers) == 27
    prefix = inv.submodels["text"].layers[0].prefix
    assert prefix == ("language_model.model.layers." if original else "model.language_model.layers.")
    assert inv.unassigned == []


def test_nemotron_h_pattern(tmp_path):
    inv, layout = inventory_of(tmp_path, "nemotron_h")
    pattern = layout.config["hybrid_override_pattern"]
    want = {"M": ("mamba", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
    assert kinds(inv) == [want[c] for c in pattern]
    assert inv.submodels["text"].layers[0].prefix == "backbone.layers."


def test_awq_unquantized_module_is_its_own_group(tmp_path):
    inv, layout = inventory_of(tmp_path, "qwen2_5_awq")
    skipped = layout.config["quantization_config"]["modules_to_not_convert"]
    assert inv.quantization.method == "awq"
    groups = [g for g in inv.groups if g.submodel == "text"]
    assert len(groups) == 2  # the layer with an unquantized module is a distinct path
    odd = next(g for g in groups if len(g.layers) == 1)
    layer = inv.submodels["text"].layers[odd.layers[0]]
    assert layer.unquantized and all(e in layer.quant_ignored for e in skipped)


def test_tied_embeddings_have_no_lm_head(tmp_path):
    inv, _ = inventory_of(tmp_path, "qwen3_small_tied")
    assert [p.label for p in inv.shared] == ["embeddings", "final norm"]


# --- config and tensors disagree --------------------------------------------------------
def _rewrite_config(root, **changes):
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(changes)
    (root / "config.json").write_text(json.dumps(cfg))


def test_disagreements_are_reported(tmp_path):
    layout = LAYOUTS["deepseek_v3"](num_layers=6, num_experts=8, hidden_size=256)
    root = write_checkpoint(tmp_path / "m", layout, data="sparse", tokenizer=False)
    # config claims more experts and moves the dense/MoE boundary
    _rewrite_config(root, n_routed_experts=16, first_k_dense_replace=1)
    inv = build_inventory(open_source(root))
    text = " | ".join(inv.warnings)
    assert "config says 16 experts but the checkpoint has 8" in text
    assert "config builds a moe MLP but the tensors look like dense" in text  # layers 1-2


def test_depth_disagreement(tmp_path):
    layout = LAYOUTS["qwen3"](num_layers=4, hidden_size=256)
    root = write_checkpoint(tmp_path / "m", layout, data="sparse", tokenizer=False)
    _rewrite_config(root, num_hidden_layers=6)
    inv = build_inventory(open_source(root))
    assert any("declares 6 layers but the checkpoint has layers 0..3" in w for w in inv.warnings)


def test_generic_fallback_from_tensor_names(tmp_path):
    """An architecture with no family module: stacks and kinds come from names alone."""
    layout = LAYOUTS["qwen3_moe"](num_layers=4, num_experts=4, hidden_size=256)
    layout.config["model_type"] = "brand_new_moe"
    layout.config["architectures"] = ["BrandNewMoeForCausalLM"]
    # one dense layer so the fallback has two kinds to tell apart
    layout.tensors = [t for t in layout.tensors if not (t[0].startswith("model.layers.0.mlp."))]
    layout.tensors += [
        ("model.layers.0.mlp.gate_proj.weight", "BF16", (512, 256)),
        ("model.layers.0.mlp.up_proj.weight", "BF16", (512, 256)),
        ("model.layers.0.mlp.down_proj.weight", "BF16", (256, 512)),
    ]
    root = write_checkpoint(tmp_path / "m", layout, data="sparse", tokenizer=False)
    inv = build_inventory(open_source(root))
    assert inv.family.key == "generic"
    assert any("no family module" in w for w in inv.warnings)
    assert kinds(inv) == [("full", "dense")] + [("full", "moe")] * 3
    assert inv.submodels["text"].layers[1].kind.experts == 4
    assert {p.label for p in inv.shared} == {"embeddings", "final norm", "lm head"}


def test_config_only_directory_lists_layers_from_rules(tmp_path):
    """A dummy (config-only) directory still has an inventory: kinds from the config rules."""
    layout = LAYOUTS["glm_moe_dsa"]()
    root = tmp_path / "cfg-only"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(layout.config))
    inv = build_inventory(open_source(root))
    layers = inv.submodels["text"].layers
    assert len(layers) == 78 and layers[6].kind.attention == "dsa (full indexer)"
    assert layers[7].kind.attention == "dsa (shared indexer)" and layers[3].kind.mlp == "moe"
    assert any("no safetensors weights" in w for w in inv.warnings)


def test_layer_runs_cut_every_header_as_matching_each_name_would():
    """The runs of one layer key found on the joined names (the fast way) are those that
    matching every name on its own gives: for layers in order, layers interleaved, names
    outside any stack between them, MTP layers, and a name holding a line break."""
    import random
    import re

    from mxtrim_tui.core.model.inventory import _layer_runs, _layer_runs_by_name

    splitter = re.compile(r"^(?:(model\.layers\.|mtp\.)(\d+)\.)?(.+)$", re.DOTALL)
    rng = random.Random(35)
    pool = [lambda: f"model.layers.{rng.randint(0, 12)}.w{rng.randint(0, 3)}", lambda: f"mtp.{rng.randint(0, 2)}.x",
            lambda: "lm_head.weight", lambda: "model.norm.weight", lambda: "model.layers.1", lambda: "odd\nname"]
    for _ in range(3000):
        names = [rng.choice(pool)() for _ in range(rng.randint(0, 30))]
        if rng.random() < 0.5:
            names = list(dict.fromkeys(names))  # unique, as every header's names are
        if rng.random() < 0.5:
            names.sort()
        by_name = list(_layer_runs_by_name(names, splitter.match, 0, len(names)))
        assert list(_layer_runs(names, splitter.match, False)) == by_name, names
        if not any("\n" in n for n in names) and len(set(names)) == len(names):  # as a canonical header holds
            assert list(_layer_runs(names, splitter.match, False, plain=True)) == by_name, names
