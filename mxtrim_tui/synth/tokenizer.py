"""A small, real tokenizer built offline: byte-level BPE trained on an embedded corpus.

Nothing is downloaded. Training on the corpus below takes a few milliseconds and gives the
same ``tokenizer.json`` byte for byte on every run, so synthetic checkpoints and the demo
model are reproducible. ``transformers.AutoTokenizer`` loads the result (as
``PreTrainedTokenizerFast``) and ``apply_chat_template`` works with the bundled template.
"""

from __future__ import annotations

import json
from pathlib import Path

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, SYSTEM, USER, ASSISTANT]
MODEL_MAX_LENGTH = 4096

# Roles map to their marker tokens; a message is "<|role|>\n{content}<|eos|>\n".
CHAT_TEMPLATE = (
    "{{- bos_token -}}\n"
    "{%- for message in messages -%}\n"
    "{%- if message['role'] == 'system' -%}{{- '<|system|>\\n' -}}\n"
    "{%- elif message['role'] == 'user' -%}{{- '<|user|>\\n' -}}\n"
    "{%- elif message['role'] == 'assistant' -%}{{- '<|assistant|>\\n' -}}\n"
    "{%- else -%}{{- raise_exception('unknown role: ' ~ message['role']) -}}\n"
    "{%- endif -%}\n"
    "{%- if message['content'] is string -%}{{- message['content'] -}}\n"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}\n"
    "{{- eos_token ~ '\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}\n"
)

# A few paragraphs of plain English; enough distinct pairs for a few hundred merges.
CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model is still a model: it has an
embedding table, a stack of decoder layers, a final norm and a head that turns hidden states
into scores over the vocabulary. Large language models are trained on a great deal of text,
and their checkpoints are split into many shards of a few gigabytes each.
When you want to test a serving stack, you rarely need every layer. Trimming a checkpoint to
its first few layers keeps the tensor names, the data types and the quantization scales, so the
loader walks the same code paths while the files stay small enough to copy in seconds.
Every tensor has a name, a dtype and a shape. Attention layers project queries, keys and
values; mixture of experts layers route each token to a few experts chosen by a gate. Some
models predict more than one token at a time with an extra block at the end of the stack.
She sells sea shells by the sea shore. The shells she sells are surely sea shells.
How much wood would a woodchuck chuck if a woodchuck could chuck wood?
Peter Piper picked a peck of pickled peppers. Where is the peck of pickled peppers?
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age
of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season
of light, it was the season of darkness, it was the spring of hope, it was the winter of despair.
Please write a short answer. What is the capital of France? The capital of France is Paris.
What is two plus two? Two plus two is four. Count from one to ten: one, two, three, four,
five, six, seven, eight, nine, ten. Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024.
The user asks a question and the assistant answers it. The system message sets the rules.
Hello! How are you today? I am fine, thank you. Good morning, good evening and good night.
Weights, biases, scales and norms are stored in little-endian order after a JSON header.
Configuration files describe the hidden size, the number of heads, the rope theta and more.
def main():\n    print("hello world")\n    return 0\n
if __name__ == "__main__":\n    main()\n
"""


def build_tokenizer_json(vocab_size: int = 512) -> str:
    """Train the byte-level BPE and return ``tokenizer.json`` text (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # One line per "sequence"; training is single-threaded on a corpus this small and
    # merges are ordered by (count, pair), so the output does not depend on the run.
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return _json_text(json.loads(tok.to_str()))


def _json_text(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _dump(path: Path, obj: dict) -> None:
    path.write_text(_json_text(obj), encoding="utf-8")


def write_tokenizer(
    root: str | Path,
    *,
    vocab_size: int = 512,
    chat_template: bool = True,
    generation_config: bool = True,
) -> list[str]:
    """Write a working tokenizer into ``root`` (created if needed); return the file names written.

    Files: ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``,
    ``chat_template.jinja`` (if ``chat_template``) and ``generation_config.json`` (if
    ``generation_config`` and the directory has none yet: a model's own generation config,
    e.g. one written by ``save_pretrained`` or a layout, is never overwritten).
    The vocabulary has at most ``vocab_size`` entries (exactly that many for the default 512;
    the embedded corpus caps how many merges can be learned).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    text = build_tokenizer_json(vocab_size)
    vocab = json.loads(text)["model"]["vocab"]
    ids = {}
    for entry in json.loads(text)["added_tokens"]:
        ids[entry["content"]] = entry["id"]
    written: list[str] = []

    (root / "tokenizer.json").write_text(text, encoding="utf-8")
    written.append("tokenizer.json")

    added_tokens_decoder = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added_tokens_decoder,
        "bos_token": BOS,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD,
        "padding_side": "left",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    _dump(root / "tokenizer_config.json", config)
    written.append("tokenizer_config.json")

    special_map = {
        "additional_special_tokens": [SYSTEM, USER, ASSISTANT],
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
    }
    _dump(root / "special_tokens_map.json", special_map)
    written.append("special_tokens_map.json")

    if chat_template:
        (root / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
        written.append("chat_template.jinja")

    if generation_config and not (root / "generation_config.json").exists():
        gen = {
            "bos_token_id": ids[BOS],
            "do_sample": False,
            "eos_token_id": ids[EOS],
            "max_new_tokens": 32,
            "pad_token_id": ids[PAD],
        }
        _dump(root / "generation_config.json", gen)
        written.append("generation_config.json")

    assert len(vocab) <= vocab_size
    return written


def tokenizer_vocab_size(root: str | Path) -> int:
    """Number of entries (model vocab + added tokens) in ``root/tokenizer.json``."""
    doc = json.loads((Path(root) / "tokenizer.json").read_text(encoding="utf-8"))
    ids = set(doc["model"]["vocab"].values()) | {t["id"] for t in doc["added_tokens"]}
    return max(ids) + 1


def special_token_ids(root: str | Path) -> dict[str, int]:
    """``{"bos": id, "eos": id, "pad": id}`` from ``root/tokenizer.json``."""
    doc = json.loads((Path(root) / "tokenizer.json").read_text(encoding="utf-8"))
    ids = {t["content"]: t["id"] for t in doc["added_tokens"]}
    return {"bos": ids[BOS], "eos": ids[EOS], "pad": ids[PAD]}
