"""Is the served trim the original model with layers removed? Greedy tokens of the served
output against the ORIGINAL checkpoint run in transformers with only the kept layers executed
(the dropped ones taken out of its layer list), on the same token-id prompts. It proves the
renaming and the config rewrite, not quality.

Two engines can disagree on the same weights (e.g. MLA on the CPU kernels). A served model
that disagrees with itself — decoding 8 tokens, then prefilling the prompt plus the first 4
and decoding 4 more, gives other tokens — makes the comparison meaningless: that is reported
as "not comparable", neither passed nor failed."""

from __future__ import annotations

import json
from pathlib import Path

from .http import post_json

PROMPTS = (
    "The quick brown fox jumps over the lazy dog. Once upon a time",
    "In the beginning the universe was created. This has made a lot of people",
)
STEPS = 8
CPU_REFERENCE_LIMIT = 4 * 2**30  # the original model is run whole in this process


def served_tokens(base: str, model: str, prompt_ids: list[int], steps: int) -> list[int]:
    doc = {"model": model, "prompt": prompt_ids, "max_tokens": steps, "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
    status, body, _secs = post_json(base + "/v1/completions", doc)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:200]}")
    return list(json.loads(body)["choices"][0]["token_ids"])


def self_consistent(base: str, model: str, prompt_ids: list[int], tokens: list[int]) -> bool:
    """Decode vs prefill: the served model continues its own first half into its second half."""
    half = len(tokens) // 2
    return served_tokens(base, model, prompt_ids + tokens[:half], len(tokens) - half) == tokens[half:]


def reference_tokens(source: Path, kept: list[int], prompts: list[list[int]], steps: int) -> list[list[int]]:
    """Greedy tokens of the original checkpoint with only ``kept`` layers executed, in float32,
    without a KV cache (each step recomputes the whole sequence: exact, and the models here are tiny)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    model.eval()
    decoder = model.get_decoder()
    decoder.layers = torch.nn.ModuleList([decoder.layers[i] for i in kept])
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    text_config.num_hidden_layers = len(kept)
    if isinstance(getattr(text_config, "layer_types", None), list):
        text_config.layer_types = [text_config.layer_types[i] for i in kept]
    outputs = []
    with torch.no_grad():
        for ids in prompts:
            seq = list(ids)
            for _ in range(steps):
                logits = model(torch.tensor([seq]), use_cache=False).logits
                seq.append(int(logits[0, -1].argmax()))
            outputs.append(seq[len(ids):])
    return outputs


def compare(base: str, out: Path, plan: dict, steps: int = STEPS) -> tuple[str, str, dict]:
    """(status, detail, data): passed / failed / not comparable / unverified."""
    from transformers import AutoTokenizer

    source = Path(plan.get("source", ""))
    kept = (plan.get("kept") or {}).get("text")
    if plan.get("mode") != "weights":
        return "not applicable", "dummy weights: nothing to compare", {}
    if not source.is_dir() or not kept:
        return "unverified", f"the source {source} is not here to run the original model", {}
    size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
    if size > CPU_REFERENCE_LIMIT:
        return "unverified", f"the original model ({size / 2**30:.1f} GiB) is too large to run on the CPU here", {}
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    prompts = [tok.encode(p, add_special_tokens=True) for p in PROMPTS]
    model = str(out)
    served = [served_tokens(base, model, ids, steps) for ids in prompts]
    data = {"served": served, "kept": kept}
    if not all(self_consistent(base, model, ids, toks) for ids, toks in zip(prompts, served)):
        return "not comparable", "the served model disagrees with itself (decode vs prefill of the same tokens): token equality says nothing here", data
    try:
        reference = reference_tokens(source, kept, prompts, steps)
    except Exception as exc:  # transformers cannot run this architecture here
        return "unverified", f"transformers could not run the original with the kept layers: {type(exc).__name__}: {str(exc)[:200]}", data
    data["reference"] = reference
    matched = sum(a == b for s, r in zip(served, reference) for a, b in zip(s, r))
    total = sum(len(s) for s in served)
    if served == reference:
        return "passed", f"{total} of {total} greedy tokens equal the original model with layers {kept} only ({len(prompts)} prompts)", data
    first = next(i for s, r in zip(served, reference) for i, (a, b) in enumerate(zip(s, r)) if a != b)
    return "failed", f"{matched} of {total} greedy tokens equal the original with layers {kept} only; first difference at step {first}", data
