"""The demo's tokenizer: a small, real byte-level BPE tokenizer, shipped as ``tokenizer.json``.

The vocabulary (512 entries, six special tokens) was trained offline with the ``tokenizers``
library on an embedded English corpus; ``tests/synth/tokenizer_training.py`` retrains it and a
test checks the shipped file is reproduced byte for byte. Shipping the trained file keeps
``mxtrim demo`` free of training libraries. ``transformers.AutoTokenizer`` loads the result (as
``PreTrainedTokenizerFast``) and ``apply_chat_template`` works with the template below.
"""

from __future__ import annotations

import json
from importlib import resources
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


def tokenizer_json_text() -> str:
    """The shipped ``tokenizer.json``, as text."""
    return resources.files(__package__).joinpath("tokenizer.json").read_text(encoding="utf-8")


def _json_text(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _dump(path: Path, obj: dict) -> None:
    path.write_text(_json_text(obj), encoding="utf-8")


def write_tokenizer(
    root: str | Path,
    *,
    chat_template: bool = True,
    generation_config: bool = True,
) -> list[str]:
    """Write a working tokenizer into ``root`` (created if needed); return the file names written.

    Files: ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``,
    ``chat_template.jinja`` (if ``chat_template``) and ``generation_config.json`` (if
    ``generation_config`` and the directory has none yet: a model's own generation config,
    e.g. one written by ``save_pretrained`` or a layout, is never overwritten).
    The vocabulary has 512 entries.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    text = tokenizer_json_text()
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
