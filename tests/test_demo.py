"""The bundled demo models (the default BF16 one and the block-FP8 one): structure, FP8
encoding, caching, determinism, offline loading, and the default one served by vLLM's CPU build."""

import json
import math
import re

import pytest

from mxtrim_tui.core.read.safetensors_io import read_header
from mxtrim_tui.demo import build as demo_build
from mxtrim_tui.demo import VARIANTS, build_demo, demo_model_path, ensure_demo_model

LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


@pytest.fixture(params=["bf16", "fp8"])
def demo(request, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return ensure_demo_model(request.param)


def _is_fp8(root) -> bool:
    return "quantization_config" in json.loads((root / "config.json").read_text())


def _headers(root):
    out = {}
    for f in sorted(root.glob("*.safetensors")):
        for name, info in read_header(f).tensors.items():
            out[name] = (f.name, info)
    return out


def _files(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_location(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    p = demo_model_path()
    version = demo_build.DEMO_VERSION
    assert p == tmp_path / "xdg" / "mxtrim" / f"mxtrim-demo-moe-{version}" == demo_model_path("bf16")
    assert demo_model_path("fp8") == tmp_path / "xdg" / "mxtrim" / f"mxtrim-demo-moe-fp8-{version}"
    assert not p.exists()  # the path alone builds nothing
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert demo_model_path() == tmp_path / "home" / ".cache" / "mxtrim" / p.name
    with pytest.raises(ValueError, match="unknown demo 'int8'"):
        demo_model_path("int8")


def test_files_and_config(demo):
    fp8 = _is_fp8(demo)
    assert demo == demo_model_path("fp8" if fp8 else None) and demo.is_dir()
    names = {p.name for p in demo.iterdir()}
    assert names == {
        "README.md",
        "config.json",
        "generation_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
    }
    size = sum(p.stat().st_size for p in demo.iterdir())
    assert (1_000_000 < size <= 8_000_000) if fp8 else (8_000_000 < size <= 16_000_000), size
    cfg = json.loads((demo / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg["model_type"] == "deepseek_v3"
    assert cfg["num_hidden_layers"] == 6
    assert cfg["first_k_dense_replace"] == 2
    assert (cfg["n_routed_experts"], cfg["n_shared_experts"], cfg["num_experts_per_tok"]) == (8, 1, 2)
    assert cfg["num_nextn_predict_layers"] == 1
    assert cfg["hidden_size"] == 256 and cfg["torch_dtype"] == "bfloat16"
    mla = [cfg[k] for k in ("num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")]
    if fp8:
        assert cfg["quantization_config"] == QUANT
        assert mla == [4, 128, 96, 32, 32, 32]
    else:
        assert "quantization_config" not in cfg
        # DeepSeek-V3's own MLA sizes: the latent cache is 512 + 64 = 576 wide (vLLM's CPU MLA
        # decode kernel takes no other), nope / rope / v 128 / 64 / 128 (what its GPU MLA
        # prefill kernels take)
        assert mla == [2, 128, 512, 128, 64, 128]
        assert cfg["moe_intermediate_size"] == 64
    tok = json.loads((demo / "tokenizer.json").read_text())
    assert cfg["vocab_size"] == len(tok["model"]["vocab"]) == 512


def test_structure(demo):
    cfg = json.loads((demo / "config.json").read_text())
    headers = _headers(demo)
    index = json.loads((demo / "model.safetensors.index.json").read_text())
    # The index names every tensor, in the right shard, with the right total.
    assert index["weight_map"] == {n: f for n, (f, _) in headers.items()}
    assert index["metadata"]["total_size"] == sum(i.nbytes for _, i in headers.values())
    assert {f for f, _ in headers.values()} == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }

    by_layer = {}
    for name in headers:
        m = LAYER_RE.match(name)
        if m:
            by_layer.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert sorted(by_layer) == list(range(7))  # 6 decoder layers + MTP at 6
    for i in (0, 1):
        assert {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"} <= by_layer[i]
        assert "mlp.gate.weight" not in by_layer[i]
    for i in range(2, 7):
        assert not any(s.startswith("mlp.gate_proj") for s in by_layer[i])
        assert {"mlp.gate.weight", "mlp.gate.e_score_correction_bias"} <= by_layer[i]
        experts = {int(s.split(".")[2]) for s in by_layer[i] if s.startswith("mlp.experts.")}
        assert experts == set(range(8))
        assert "mlp.shared_experts.down_proj.weight" in by_layer[i]
        assert "self_attn.kv_a_proj_with_mqa.weight" in by_layer[i]
    mtp = {"embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight",
           "shared_head.norm.weight", "shared_head.head.weight"}
    assert mtp <= by_layer[6]
    assert not any(mtp & by_layer[i] for i in range(6))

    def dtype(n):
        return headers[n][1].dtype

    if not _is_fp8(demo):
        assert not [n for n in headers if n.endswith("_scale_inv")]
        assert {n for n, (_, i) in headers.items() if i.dtype != "BF16"} == {
            f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in range(2, 7)}
        assert headers["model.layers.6.eh_proj.weight"][1].shape == (256, 512)
        assert headers["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"][1].shape == (512 + 64, 256)
        assert headers["model.layers.0.self_attn.kv_b_proj.weight"][1].shape == (2 * (128 + 128), 512)
        assert headers["model.layers.0.self_attn.q_b_proj.weight"][1].shape == (2 * (128 + 64), 128)
        assert headers["lm_head.weight"][1].shape == (cfg["vocab_size"], 256)
        return
    fp8 = 0
    for name, (_, info) in headers.items():
        if re.search(r"_proj(_with_mqa)?\.weight$", name) and ".eh_proj." not in name:
            assert info.dtype == "F8_E4M3", name
            scale = headers[name + "_scale_inv"][1]
            assert scale.dtype == "F32"
            out_f, in_f = info.shape
            assert scale.shape == (math.ceil(out_f / 128), math.ceil(in_f / 128)), name
            fp8 += 1
        elif name.endswith("weight_scale_inv"):
            assert name[: -len("_scale_inv")] in headers
        elif name.endswith("e_score_correction_bias"):
            assert info.dtype == "F32"
        else:
            assert info.dtype == "BF16", name
    assert fp8 == 7 * 5 + 2 * 3 + 5 * (8 + 1) * 3  # attention (6 + MTP), dense MLPs, experts
    assert dtype("model.layers.2.mlp.gate.weight") == "BF16"
    assert dtype("model.layers.6.eh_proj.weight") == "BF16"
    assert headers["model.layers.6.eh_proj.weight"][1].shape == (256, 512)
    assert headers["lm_head.weight"][1].shape == (cfg["vocab_size"], 256)
    # kv_b_proj takes kv_lora_rank (96) inputs: a partial 128-block.
    assert headers["model.layers.0.self_attn.kv_b_proj.weight_scale_inv"][1].shape == (2, 1)


@pytest.mark.slow
def test_values_are_real_numbers(demo):
    torch = pytest.importorskip("torch")
    from safetensors import safe_open

    for f in sorted(demo.glob("*.safetensors")):
        with safe_open(f, "pt") as fh:
            for name in fh.keys():
                t = fh.get_tensor(name)
                assert torch.isfinite(t.float()).all(), name
                if t.dtype == torch.float8_e4m3fn:
                    s = fh.get_tensor(name + "_scale_inv")
                    full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: t.shape[0], : t.shape[1]]
                    w = t.float() * full
                    assert 0.01 < w.std().item() < 0.04, name
                elif name.endswith("weight_scale_inv"):
                    assert (t > 0).all(), name
                elif name.endswith("norm.weight"):
                    assert abs(t.float().mean().item() - 1.0) < 0.05, name
                elif t.dim() == 2:
                    assert 0.01 < t.float().std().item() < 0.04, name


def test_fp8_encoder_matches_torch():
    torch = pytest.importorskip("torch")
    import random

    grid = torch.arange(127, dtype=torch.uint8).view(torch.float8_e4m3fn).double().tolist()
    rng = random.Random(0)
    xs = [rng.gauss(0.0, s) for s in (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0) for _ in range(2000)]
    xs += grid + [-g for g in grid] + [(a + b) / 2 for a, b in zip(grid, grid[1:])] + [1e6, -1e6]
    ref = torch.tensor(xs, dtype=torch.float64).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    assert [demo_build.e4m3fn_encode(x) for x in xs] == ref


def test_idempotent(demo):
    before = {p.name: p.stat().st_mtime_ns for p in demo.iterdir()}
    dir_mtime = demo.stat().st_mtime_ns
    assert ensure_demo_model("fp8" if _is_fp8(demo) else None) == demo
    assert {p.name: p.stat().st_mtime_ns for p in demo.iterdir()} == before
    assert demo.stat().st_mtime_ns == dir_mtime
    assert [p.name for p in demo.parent.iterdir()] == [demo.name]  # no temp dirs left


@pytest.mark.parametrize("which", ["bf16", "fp8"])
def test_deterministic(tmp_path, monkeypatch, which):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a"))
    a = ensure_demo_model(which)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    b = ensure_demo_model(which)
    assert a != b
    assert _files(a) == _files(b)
    # build_demo writes the same files as the cache (the tool install's `mxtrim demo` is checked
    # against it byte for byte); the default is the BF16 demo
    c = build_demo(tmp_path / "c", which) if which != "bf16" else build_demo(tmp_path / "c")
    assert _files(c) == _files(a)


def test_the_two_demos_are_cached_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bf16, fp8 = ensure_demo_model(), ensure_demo_model("fp8")
    assert bf16 != fp8 and bf16.parent == fp8.parent
    assert sorted(p.name for p in bf16.parent.iterdir()) == sorted(v.name for v in VARIANTS.values())
    assert not _is_fp8(bf16) and _is_fp8(fp8)
    assert "mxtrim demo --fp8" in (bf16 / "README.md").read_text()


def test_crash_leaves_no_half_demo(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = demo_build.build_demo

    def broken(root, which=None):
        real(root, which)
        raise RuntimeError("disk full")

    monkeypatch.setattr(demo_build, "build_demo", broken)
    with pytest.raises(RuntimeError):
        ensure_demo_model()
    assert not demo_model_path().exists()
    assert list(demo_model_path().parent.iterdir()) == []
    monkeypatch.setattr(demo_build, "build_demo", real)
    assert ensure_demo_model().is_dir()


def test_loads_offline(demo):
    transformers = pytest.importorskip("transformers")

    config = transformers.AutoConfig.from_pretrained(demo, local_files_only=True)
    assert type(config).__name__ == "DeepseekV3Config"
    assert config.num_hidden_layers == 6 and config.num_nextn_predict_layers == 1
    assert getattr(config, "quantization_config", None) == (QUANT if _is_fp8(demo) else None)
    tok = transformers.AutoTokenizer.from_pretrained(demo, local_files_only=True)
    assert len(tok) == config.vocab_size
    ids = tok("The capital of France is Paris.")["input_ids"]
    assert ids[0] == config.bos_token_id and max(ids) < config.vocab_size
    chat = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert chat.startswith("<|bos|><|system|>") and chat.endswith("<|assistant|>\n")
    gen = transformers.GenerationConfig.from_pretrained(demo, local_files_only=True)
    assert gen.eos_token_id == config.eos_token_id


def test_the_shipped_tokenizer_is_the_one_training_reproduces():
    """mxtrim ships the demo's trained tokenizer.json (no training library at run time);
    retraining on the same corpus gives it back byte for byte."""
    pytest.importorskip("tokenizers")
    from synth.tokenizer_training import build_tokenizer_json

    from mxtrim_tui.demo.tokenizer import tokenizer_json_text

    assert build_tokenizer_json(512) == tokenizer_json_text()
