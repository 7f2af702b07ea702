"""The tiny real-model fixtures load back in transformers and run."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fixtures.tiny_models import (  # noqa: E402
    make_tiny_deepseek_v3_mtp,
    make_tiny_llama,
    make_tiny_qwen3,
    mtp_tensor_names,
    prompt_ids,
)

from mxtrim_tui.core.read.safetensors_io import read_header  # noqa: E402

MAKERS = {
    "llama": (make_tiny_llama, "LlamaForCausalLM"),
    "qwen3": (make_tiny_qwen3, "Qwen3ForCausalLM"),
    "deepseek_v3": (make_tiny_deepseek_v3_mtp, "DeepseekV3ForCausalLM"),
}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {key: maker(root / key) for key, (maker, _) in MAKERS.items()}


@pytest.mark.parametrize("key", list(MAKERS))
def test_loads_and_gives_finite_logits(tiny_dirs, key):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_dirs[key]
    assert path.is_dir()
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 1_000_000, size
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert type(model).__name__ == MAKERS[key][1]
    model.eval()
    ids = prompt_ids(path)
    assert ids.shape[0] == 1 and ids.shape[1] > 3
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits.float()).all()
    assert logits.float().abs().sum() > 0
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert len(tok) <= model.config.vocab_size
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "What is two plus two?"}], add_generation_prompt=True
    )
    assert chat["input_ids"][0] == tok.bos_token_id


def test_deepseek_mtp_tensors_in_header(tiny_dirs):
    path = tiny_dirs["deepseek_v3"]
    names = mtp_tensor_names(path, 3)
    for suffix in (
        "embed_tokens.weight",
        "enorm.weight",
        "hnorm.weight",
        "eh_proj.weight",
        "shared_head.norm.weight",
        "shared_head.head.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
        "self_attn.q_a_proj.weight",
        "self_attn.kv_b_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate.weight",
        "mlp.gate.e_score_correction_bias",
        "mlp.shared_experts.down_proj.weight",
    ):
        assert f"model.layers.3.{suffix}" in names, suffix
    for e in range(4):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            assert f"model.layers.3.mlp.experts.{e}.{proj}.weight" in names
    # Every tensor of layer 2 has a same-shaped twin in the MTP block.
    header = {}
    for f in sorted(path.glob("*.safetensors")):
        header.update(read_header(f).tensors)  # validates the rewritten file(s)
    for name, info in header.items():
        if name.startswith("model.layers.2."):
            twin = header["model.layers.3." + name[len("model.layers.2."):]]
            assert (twin.dtype, twin.shape) == (info.dtype, info.shape)
    hidden = header["model.embed_tokens.weight"].shape[1]
    assert header["model.layers.3.eh_proj.weight"].shape == (hidden, 2 * hidden)
    assert header["model.layers.3.shared_head.head.weight"].shape == header["lm_head.weight"].shape
    assert not any(n.startswith("model.layers.4.") for n in header)
