"""The long-input request crosses every boundary of the kept layer kinds: each kept sliding
window (Gemma-3's per-layer ``layer_types``), DeepSeek-V3.2's sparse top-k (``index_topk``:
the indexer selects only among more tokens than that) and DeepSeek-V4's compression blocks and
indexer (ratios 4 and 128), counted with the output's own tokenizer and with room left in the
served context for the tokens it generates. Where the served context cannot hold a boundary,
the row says which one stayed uncrossed and what to serve with, and it is not passed.

The outputs are real dummy trims of tiny sources made with transformers (DeepSeek-V4's from
tests/dsv4_support.py), each with the project's tokenizer. The server is a stand-in of vLLM's
OpenAI routes as mxtrim calls them: the prompt counted with the output's tokenizer (special
tokens added, as vLLM's completions count it), a prompt and completion past the context refused
with HTTP 400 as vLLM refuses them. The real CPU build serves the Gemma-3 output in
tests/test_validate.py (its long-input row names the window crossed and the token count)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dsv4_support as v4
from engine_support import plan_for
from http_support import JsonHandler, serving
from fixtures import tiny_models as tm
from synth.checkpoint import write_safetensors
from mxtrim_tui.core.validate.run import LONG_INPUT, Validation, long_input_row, read_output
from mxtrim_tui.core.validate.serve import ServeOptions
from mxtrim_tui.core.write.writer import write_dummy
from mxtrim_tui.demo.tokenizer import special_token_ids, tokenizer_vocab_size, write_tokenizer


class StandIn:
    """vLLM's ``/v1/completions`` and ``/tokenize`` on loopback for one output, served with
    ``max_model_len``: the prompts it was sent are kept in ``prompts``."""

    def __init__(self, out: Path, max_model_len: int):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
        self.max_model_len = max_model_len
        self.prompts: list[str] = []
        stand_in = self

        class Handler(JsonHandler):
            def do_POST(self):
                doc = self.read_json()
                n = len(stand_in.tok.encode(doc["prompt"], add_special_tokens=True))
                if self.path == "/tokenize":
                    return self.send_json({"count": n, "max_model_len": stand_in.max_model_len, "tokens": []})
                stand_in.prompts.append(doc["prompt"])
                asked = doc.get("max_tokens", 16)
                if n + asked > stand_in.max_model_len:
                    return self.send_json({"error": {"message": f"This model's maximum context length is {stand_in.max_model_len} "
                                                             f"tokens. However, you requested {n + asked} tokens ({n} in the "
                                                             f"messages, {asked} in the completion).", "code": 400}}, 400)
                self.send_json({"choices": [{"text": " fox" * asked}],
                                "usage": {"prompt_tokens": n, "completion_tokens": asked, "total_tokens": n + asked}})

        self._serving = serving(Handler)
        self.base = ""

    def __enter__(self):
        self.base = self._serving.__enter__()
        return self

    def __exit__(self, *exc):
        self._serving.__exit__(*exc)


def long_input(out: Path, max_model_len: int) -> tuple[dict, StandIn]:
    """The long-input row of ``out`` served (by the stand-in) with ``max_model_len``."""
    v = Validation(out, "dummy", "now", "python")
    opts = ServeOptions(python="python", device="cpu", max_model_len=max_model_len)
    with StandIn(out, max_model_len) as server:
        long_input_row(v, out, read_output(out), opts, server.base, lambda event: None)
    row = v.row(LONG_INPUT)
    assert row is not None
    return row.to_json(), server


def counted(out: Path, prompt: str) -> int:
    """The prompt's length in the output's own tokenizer, as vLLM counts a completion's prompt."""
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(out, local_files_only=True).encode(prompt, add_special_tokens=True))


def trimmed(src: Path, keep: str, out: Path) -> Path:
    write_dummy(plan_for(src, [keep]), out)
    return out


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    """A 6-layer Gemma-3 text model (sliding window 100 on layers 0, 1, 3, 4, full attention on
    2 and 5) trimmed to 0, 2, 3: the output's layers 0 and 2 slide, layer 1 is full."""
    root = tmp_path_factory.mktemp("gemma3")
    src = tm.make_servable_gemma3_text(root / "src", sliding_window=100)
    return trimmed(src, "0,2,3", root / "out")


def _meta_source(root: Path, config) -> Path:
    """``config`` (a transformers config) built on the meta device: its tensor names and shapes
    written as a sparse checkpoint, with the project's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tensors, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            tensors.append((name, "BF16" if tensor.is_floating_point() else "I64", tuple(tensor.shape)))
    config.save_pretrained(root)
    write_safetensors(root / "model.safetensors", tensors, data="sparse")
    return root


@pytest.fixture(scope="module")
def dsv32(tmp_path_factory):
    """A 3-layer DeepSeek-V3.2-style model (MLA + DSA indexer selecting index_topk=64 tokens,
    layer 0 dense, 1-2 MoE) trimmed to layers 0 and 2."""
    from transformers import DeepseekV32Config

    root = tmp_path_factory.mktemp("dsv32")
    src = root / "src"
    write_tokenizer(src, generation_config=False)
    ids = special_token_ids(src)
    config = DeepseekV32Config(
        vocab_size=tokenizer_vocab_size(src), bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
        index_topk=64, index_n_heads=2, index_head_dim=32, max_position_embeddings=4096,
    )
    config.architectures = ["DeepseekV32ForCausalLM"]
    return trimmed(_meta_source(src, config), "0,2", root / "out")


@pytest.fixture(scope="module")
def dsv4(tmp_path_factory):
    """The published DeepSeek-V4 example's structure (sliding window 16 on every layer,
    compress_ratios [0,0,4,128,4,128,4], index_topk 16) trimmed to 0, 2, 3: the output's layer 0
    has the window only, layer 1 compresses by 4 with the indexer, layer 2 by 128."""
    root = tmp_path_factory.mktemp("dsv4")
    src = root / "src"
    write_tokenizer(src, generation_config=False)
    v4.published_source(src, v4.config(vocab_size=tokenizer_vocab_size(src)))
    return trimmed(src, "0,2,3", root / "out")


def boundaries(out: Path) -> dict[str, tuple[int, list[int]]]:
    """The output's kept boundaries: what -> (the prompt tokens it takes more than, layers)."""
    from mxtrim_tui.core.validate.run import long_input_boundaries

    bounds = long_input_boundaries(out, read_output(out))
    return {b["what"]: (b["tokens"], b["layers"]) for b in bounds}


# --- the boundaries, from the output's config ---------------------------------------------------
def test_each_kept_boundary_is_named_with_its_layers(gemma3, dsv32, dsv4):
    assert boundaries(gemma3) == {"the sliding window 100": (100, [0, 2])}
    assert boundaries(dsv32) == {"the index top-k 64": (64, [0, 1])}
    # DeepSeek-V4 (vLLM models/deepseek_v4, cpu_sparse.py): a window on every layer; one compressed
    # entry per 4 or 128 tokens, the first once the prompt holds that many; the indexer selects
    # its top-k of the ÷4 entries only once max_seq_len // 4 > index_topk, from 4 × 17 = 68 tokens
    assert boundaries(dsv4) == {
        "the sliding window 16": (16, [0, 1, 2]),
        "the compressed block 4": (3, [1]),
        "the indexer's top-k 16 of ÷4 entries": (67, [1]),
        "the compressed block 128": (127, [2]),
    }


# --- the request: crossed, counted with the output's tokenizer ----------------------------------
def test_the_long_input_crosses_the_kept_window_counted_with_the_outputs_tokenizer(gemma3):
    row, server = long_input(gemma3, 256)
    assert row["status"] == "passed", row
    [prompt] = server.prompts
    n = counted(gemma3, prompt)
    assert 100 < n <= 256 - 4  # past the window, with room for the 4 tokens it generates
    assert row["detail"].startswith(f"long input {n} tokens (counted with the output's tokenizer): "
                                    "crosses the sliding window 100 (layers 0, 2);"), row["detail"]
    assert row["data"]["prompt_tokens"] == n
    assert [(b["what"], b["layers"], b["crossed"]) for b in row["data"]["boundaries"]] == [("the sliding window 100", [0, 2], True)]


def test_the_index_topk_is_crossed(dsv32):
    row, server = long_input(dsv32, 256)
    n = counted(dsv32, server.prompts[-1])
    assert row["status"] == "passed" and n > 64
    assert f"long input {n} tokens (counted with the output's tokenizer): crosses the index top-k 64 (layers 0, 1)" in row["detail"]


def test_every_v4_boundary_the_context_holds_is_crossed(dsv4):
    row, server = long_input(dsv4, 256)
    n = counted(dsv4, server.prompts[-1])
    assert row["status"] == "passed" and 127 < n <= 252, row
    assert ("crosses the compressed block 4 (layer 1), the sliding window 16 (layers 0, 1, 2), the indexer's top-k 16 of "
            "÷4 entries (layer 1), the compressed block 128 (layer 2);") in row["detail"]


# --- a served context too short for a boundary --------------------------------------------------
def test_a_boundary_past_the_served_context_stays_uncrossed_and_is_named(dsv4):
    """Context 100: the window, the ÷4 block and the indexer's top-k are crossed, the ÷128 block
    cannot be: the row is unverified and names it, with the context that would hold it."""
    row, server = long_input(dsv4, 100)
    [prompt] = server.prompts
    n = counted(dsv4, prompt)
    assert 67 < n <= 100 - 4
    assert row["status"] == "unverified", row
    assert (f"long input {n} tokens (counted with the output's tokenizer): crosses the compressed block 4 (layer 1), "
            "the sliding window 16 (layers 0, 1, 2), the indexer's top-k 16 of ÷4 entries (layer 1), "
            "not the compressed block 128 (layer 2) (served context 100): serve with --max-model-len ≥ 147") in row["detail"]
    crossed = {b["what"]: b["crossed"] for b in row["data"]["boundaries"]}
    assert crossed == {"the compressed block 4": True, "the sliding window 16": True,
                       "the indexer's top-k 16 of ÷4 entries": True, "the compressed block 128": False}


@pytest.mark.parametrize("name, context, uncrossed, needed", [
    ("gemma3", 96, "the sliding window 100 (layers 0, 2)", 120),
    ("dsv32", 64, "the index top-k 64 (layers 0, 1)", 84),
])
def test_a_context_that_holds_no_boundary_sends_nothing_and_says_what_to_serve_with(request, name, context, uncrossed, needed):
    out = request.getfixturevalue(name)
    row, server = long_input(out, context)
    assert server.prompts == []
    assert row["status"] == "unverified"
    assert row["detail"] == (f"not run: the served context {context} holds no prompt past {uncrossed} with 4 tokens to generate: "
                             f"serve with --max-model-len ≥ {needed}")


# --- the output's tokenizer is read, never its code ---------------------------------------------
def test_a_tokenizer_that_needs_its_own_code_is_not_run_and_the_server_counts(gemma3, tmp_path):
    """A tokenizer_config.json naming a tokenizer class in the output's own module (auto_map): the
    module is never imported (it would leave a marker); the server's /tokenize counts instead,
    and the row says so."""
    import shutil

    out = tmp_path / "custom"
    shutil.copytree(gemma3, out)
    marker = tmp_path / "imported"
    (out / "custom_tokenizer.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                             "from transformers import PreTrainedTokenizerFast as CustomTokenizer\n")
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": [None, "custom_tokenizer.CustomTokenizer"]}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    v = Validation(out, "dummy", "now", "python")
    opts = ServeOptions(python="python", device="cpu", max_model_len=256)
    with StandIn(gemma3, 256) as server:  # the server reads the tokenizer as vLLM would
        long_input_row(v, out, read_output(out), opts, server.base, lambda event: None)
    row = v.row(LONG_INPUT).to_json()
    assert not marker.exists()
    n = counted(gemma3, server.prompts[-1])
    assert row["status"] == "passed" and n > 100
    assert row["detail"].startswith(f"long input {n} tokens (counted by the server's /tokenize: the output's tokenizer "
                                    "needs its own code"), row["detail"]
