"""Tokenizer and side assets are copied by what they are, not by a content sniff alone.

A Kimi-K2-shaped source (a ``tiktoken.model`` rank file of base64 lines, the tokenizer class in
``tokenization_kimi.py`` named by ``tokenizer_config.json``'s ``auto_map``) must give a dummy
output whose tokenizer loads (``trust_remote_code``, in a child interpreter) and encodes and
decodes exactly as the source's does. Small non-weight files and quantizer recipes are copied;
what is not copied is listed in the report with its reason.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import plan_for, run_cli
from mxtrim_tui.core.read.source import TIKTOKEN_DETAIL, FileKind, open_source
from mxtrim_tui.core.plan.layout import OVER_SIDE_LIMIT, SIDE_FILE_LIMIT_BYTES, asset_files
from mxtrim_tui.core.write.writer import not_copied_files
from synth.checkpoint import write_checkpoint
from synth.layouts.deepseek import kimi_k2

# Multi-byte tokens after the 256 single bytes, each the concatenation of two earlier ones.
MERGES = ["he", "ll", "llo", "He", "Hello", " w", "or", " wor", "ld", " world", "th", " th", "in", "er", "an", "es"]
SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "[UNK]", "[PAD]"]
TEXTS = ["Hello world", "the answer is 42 — ça va? 日本", " leading and trailing  "]

# The tokenizer module the test writes (no third-party dependency: a pure-Python reader of the
# rank file and byte-level BPE merging by rank, as tiktoken does). It names its rank file only
# in ``vocab_files_names``, as the real tokenization_kimi.py does.
TOKENIZATION_KIMI = r'''
import base64
import os

from transformers import PreTrainedTokenizer


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, bos_token="[BOS]", eos_token="[EOS]", unk_token="[UNK]", pad_token="[PAD]", **kwargs):
        self.vocab_file = vocab_file
        self.ranks = load_ranks(vocab_file)
        self.decoder = {rank: token for token, rank in self.ranks.items()}
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, pad_token=pad_token, **kwargs)

    @property
    def vocab_size(self):
        return len(self.ranks)

    def get_vocab(self):
        vocab = {token.decode("latin-1"): rank for token, rank in self.ranks.items()}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text, **kwargs):
        parts = [bytes([b]) for b in text.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.ranks.get(parts[i] + parts[i + 1], 1 << 62))
            if parts[best] + parts[best + 1] not in self.ranks:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        return [p.decode("latin-1") for p in parts]

    def _convert_token_to_id(self, token):
        return self.ranks[token.encode("latin-1")]

    def _convert_id_to_token(self, index):
        return self.decoder[index].decode("latin-1")

    def convert_tokens_to_string(self, tokens):
        return "".join(tokens).encode("latin-1").decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return (self.vocab_file,)
'''

# The model's configuration class, as the real repository ships it beside config.json's auto_map
# (transformers reads the model config before the tokenizer's).
CONFIGURATION_DEEPSEEK = r'''
from transformers import PretrainedConfig


class DeepseekV3Config(PretrainedConfig):
    model_type = "kimi_k2"

    def __init__(self, max_position_embeddings=4096, rope_scaling=None, rope_theta=10000.0, **kwargs):
        self.max_position_embeddings = max_position_embeddings
        self.rope_scaling = rope_scaling
        self.rope_theta = rope_theta
        super().__init__(**kwargs)
'''

# Loads a directory's tokenizer with trust_remote_code and prints what it makes of TEXTS.
ROUND_TRIP = r'''
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True, local_files_only=True)
texts = json.loads(sys.argv[2])
ids = [tok.encode(t, add_special_tokens=False) for t in texts]
print(json.dumps({"class": type(tok).__name__, "ids": ids, "decoded": [tok.decode(i) for i in ids],
                  "with_specials": tok.encode(texts[0]), "eos": tok.eos_token_id, "len": len(tok)}))
'''


def rank_file_text() -> str:
    tokens = [bytes([b]) for b in range(256)] + [m.encode() for m in MERGES]
    return "".join(f"{base64.b64encode(t).decode()} {rank}\n" for rank, t in enumerate(tokens))


def write_kimi_tokenizer(root: Path) -> None:
    """tiktoken.model, tokenization_kimi.py and a tokenizer_config.json shaped as Kimi-K2's."""
    n = 256 + len(MERGES)
    (root / "tiktoken.model").write_text(rank_file_text())
    (root / "tokenization_kimi.py").write_text(TOKENIZATION_KIMI)
    (root / "configuration_deepseek.py").write_text(CONFIGURATION_DEEPSEEK)
    decoder = {
        str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for i, t in enumerate(SPECIALS)
    }
    config = {
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_end|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "chat_template": "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}",
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "extra_special_tokens": {},
        "model_max_length": 131072,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))


@pytest.fixture(scope="module")
def kimi_source(tmp_path_factory) -> Path:
    """A tiny Kimi-K2 checkpoint with the tokenizer above and a few side files."""
    layout = kimi_k2(num_layers=3, num_experts=4, hidden_size=256, vocab_size=512)
    root = write_checkpoint(tmp_path_factory.mktemp("src") / "Kimi-K2-Instruct", layout, data="sparse", tokenizer=False)
    write_kimi_tokenizer(root)
    (root / "generation_config.json").write_text(json.dumps({"max_length": 131072, "eos_token_id": 163585}))
    (root / "llmc_qconfig.yaml").write_text("quant:\n  method: Awq\n  weight:\n    bit: 4\n    granularity: per_group\n")
    (root / "serving_notes.cfg").write_text("[serve]\nmax_len = 4096\n")
    (root / "README.md").write_text("# Kimi-K2\n")
    (root / "LICENSE").write_text("Modified MIT License\n")
    (root / "optimizer.bin").write_bytes(os.urandom(64))  # named like weights: never copied
    with open(root / "rollouts.jsonl", "wb") as fh:  # an unknown file over the limit (sparse)
        fh.truncate(SIDE_FILE_LIMIT_BYTES + 1)
    return root


def round_trip(directory: Path, home: Path) -> dict:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(directory), json.dumps(TEXTS)],
        capture_output=True, text=True, env=env, cwd=directory.parent, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- classification ------------------------------------------------------------------------
def test_tokenizer_files_are_classified_by_name_content_and_reference(kimi_source, tmp_path):
    files = {f.path: f for f in open_source(kimi_source).files}
    assert (files["tiktoken.model"].kind, files["tiktoken.model"].detail) == (FileKind.TOKENIZER, TIKTOKEN_DETAIL)
    assert files["tokenization_kimi.py"].kind is FileKind.CUSTOM_CODE
    assert "referenced by auto_map" in files["tokenization_kimi.py"].detail
    assert files["llmc_qconfig.yaml"].kind is FileKind.QUANT_RECIPE
    assert files["serving_notes.cfg"].kind is FileKind.UNKNOWN and not files["serving_notes.cfg"].never_copy
    assert files["optimizer.bin"].never_copy and files["rollouts.jsonl"].kind is FileKind.UNKNOWN

    # by reference: a rank file with a name no pattern knows, named by the tokenizer config,
    # or only by a quoted string in the tokenizer's auto_map module
    root = write_checkpoint(tmp_path / "ref", kimi_k2(num_layers=2, num_experts=4, hidden_size=256, vocab_size=512), tokenizer=False)
    write_kimi_tokenizer(root)
    (root / "tiktoken.model").rename(root / "ranks.bpe")
    (root / "extra.dat").write_text("not a rank file\n")
    cfg = json.loads((root / "tokenizer_config.json").read_text())
    cfg["vocab_file"] = "ranks.bpe"
    (root / "tokenizer_config.json").write_text(json.dumps(cfg))
    code = (root / "tokenization_kimi.py").read_text().replace('"tiktoken.model"', '"ranks.bpe"')
    (root / "tokenization_kimi.py").write_text(code + '\nEXTRA_FILE = "extra.dat"\n')
    (root / "merges_extra.txt").write_text("h e\n")
    (root / "spiece.vocab.txt").write_text("a\n")
    files = {f.path: f for f in open_source(root).files}
    assert (files["ranks.bpe"].kind, files["ranks.bpe"].detail) == (FileKind.TOKENIZER, f"referenced by tokenizer_config.json; {TIKTOKEN_DETAIL}")
    assert files["extra.dat"].kind is FileKind.TOKENIZER and files["extra.dat"].detail == "referenced by tokenization_kimi.py"
    assert files["merges_extra.txt"].kind is FileKind.TOKENIZER and files["spiece.vocab.txt"].kind is FileKind.TOKENIZER


def test_copy_list_and_reasons(kimi_source):
    plan = plan_for(kimi_source)
    copied = {f.path for f in asset_files(plan, frozenset({"README.md"}))}
    assert {"tiktoken.model", "tokenization_kimi.py", "tokenizer_config.json", "generation_config.json",
            "llmc_qconfig.yaml", "serving_notes.cfg"} <= copied
    assert not copied & {"optimizer.bin", "rollouts.jsonl", "README.md", "LICENSE"}
    reasons = {e["path"]: e for e in not_copied_files(plan, frozenset({"README.md"}))}
    assert OVER_SIDE_LIMIT == "over the 16 MiB limit for unknown files"
    assert reasons["rollouts.jsonl"]["detail"].endswith(OVER_SIDE_LIMIT)
    assert "never copied" in reasons["optimizer.bin"]["detail"]
    assert "not needed to load or serve" in reasons["LICENSE"]["detail"]
    assert not any(e["path"].endswith(".safetensors") and not e["detail"] for e in reasons.values())


# --- the end-to-end requirement ------------------------------------------------------------
@pytest.mark.slow
def test_kimi_k2_dummy_output_has_a_complete_tokenizer(kimi_source, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "out"
    result = run_cli("trim", str(kimi_source), "--mode", "dummy", "--keep", "0,1", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    written = {f["path"]: f for f in doc["files"]}
    assert written["tiktoken.model"]["kind"] == "tokenizer"
    assert written["llmc_qconfig.yaml"]["kind"] == "quantizer recipe"
    assert (out / "tiktoken.model").read_bytes() == (kimi_source / "tiktoken.model").read_bytes()
    assert {"tokenization_kimi.py", "tokenizer_config.json", "serving_notes.cfg"} <= set(written)
    for absent in ("rollouts.jsonl", "optimizer.bin", "LICENSE"):
        assert not (out / absent).exists(), absent
    assert not list(out.glob("*.safetensors"))

    # the report lists what was not copied, and why
    section = (out / "README.md").read_text().split("Not copied from the source:")[1].split("##")[0]
    lines = {line.split("`")[1]: line for line in section.splitlines() if line.startswith("- `")}
    assert OVER_SIDE_LIMIT in lines["rollouts.jsonl"]
    assert "never copied" in lines["optimizer.bin"]
    assert "(documentation: not needed to load or serve" in lines["LICENSE"] and "not needed" in lines["README.md"]

    # the output's tokenizer loads with trust_remote_code and behaves exactly as the source's
    home = tmp_path / "hf-home"
    got, want = round_trip(out, home), round_trip(kimi_source, home)
    assert got["class"] == "TikTokenTokenizer"
    assert got == want
    assert got["decoded"] == TEXTS
    assert any(len(ids) < len(text.encode()) for ids, text in zip(got["ids"], TEXTS))  # merges were applied
    assert got["eos"] == 256 + len(MERGES) + 1
