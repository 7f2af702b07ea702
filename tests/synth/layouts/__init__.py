"""Real architectures' configs and tensor layouts, one module per family.

Each public function returns a :class:`~synth.checkpoint.Layout` whose
``config`` mirrors the released ``config.json`` and whose ``tensors`` carry the released
checkpoint's names, dtypes and shapes (optionally scaled down with keyword arguments).
The helpers the family modules share (scaling, token-id fitting, the tensor collector) live in
:mod:`.common`.
"""

from __future__ import annotations

from importlib import import_module

MODULES = ("deepseek", "glm", "qwen", "qwen_next", "qwen_vl", "gemma", "llama", "mixtral", "gpt_oss", "nemotron_h", "jamba")


def all_layouts() -> dict:
    """key -> layout function, over every family module."""
    out: dict = {}
    for name in MODULES:
        out.update(import_module(f"{__name__}.{name}").LAYOUTS)
    return out
