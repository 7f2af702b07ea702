"""Is the served trim the original model with layers removed? The served greedy tokens are
fed, teacher-forced, through the ORIGINAL checkpoint run in transformers with only the kept
layers executed (the dropped ones taken out of its layer list), in float32 on the CPU. At
each step the original's own choice is compared with the served token:

- **equal** — every served token is the original's top token;
- **equal within numerical tolerance** — where they differ, the original ranks the served
  token within the served dtype's precision of its top token (a near tie that bf16 or fp8
  arithmetic may break either way); the largest margin is reported;
- **different** — at some step the original puts the served token clearly below its top
  token (step, both tokens, margin). Before that blames the trim, the untrimmed source is
  served the same way and compared with the whole original: when it differs too, the engine
  and transformers disagree on this model and the verdict is **not comparable**;
- **not comparable** — with the reason.

It proves the renaming and the config rewrite, not quality."""

from __future__ import annotations

import io
import json
import math
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from .http import post_json

PROMPTS = (
    "The quick brown fox jumps over the lazy dog. Once upon a time",
    "In the beginning the universe was created. This has made a lot of people",
)
STEPS = 8
CPU_REFERENCE_LIMIT = 4 * 2**30  # the original model is run whole in this process
EQUAL, WITHIN, DIFFERENT, NOT_COMPARABLE = "equal", "equal within numerical tolerance", "different", "not comparable"
# How far below its top token the original may rank the served token and still be a near tie
# for the served arithmetic: a fraction of the step's largest |logit| (relative rounding of
# the dtype, with room for accumulation over a few layers). FP8 weights and activations round
# at 2^-3 relative.
RELATIVE_TOLERANCE = {"float32": 1e-4, "float16": 2**-9, "bfloat16": 2**-6, "fp8": 2**-3}


def tolerance_key(dtype: str | None, quantized_fp8: bool) -> str:
    """The RELATIVE_TOLERANCE entry for a server running ``dtype`` (as vLLM logs or takes it)."""
    if quantized_fp8:
        return "fp8"
    key = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32"}.get(dtype or "", dtype or "")
    return key if key in RELATIVE_TOLERANCE else "bfloat16"


@dataclass
class StepJudgement:
    prompt: int
    step: int
    served: int
    top: int
    margin: float  # logit of the original's top token minus that of the served token (>= 0)
    allowed: float  # the margin a near tie may have here


@dataclass
class Judgement:
    verdict: str
    total: int
    equal: int
    differing: list[StepJudgement] = field(default_factory=list)

    @property
    def worst(self) -> StepJudgement | None:
        beyond = [d for d in self.differing if d.margin > d.allowed]
        return beyond[0] if beyond else (max(self.differing, key=lambda d: d.margin) if self.differing else None)


def judge(served: list[list[int]], step_logits: list[list[list[float]]], relative: float) -> Judgement:
    """``step_logits[p][i]``: the original's logits (over the vocabulary) before served token
    ``served[p][i]``, teacher-forced on the served tokens. Pure: the verdict logic alone."""
    total = equal = 0
    differing = []
    for p, (tokens, logits) in enumerate(zip(served, step_logits)):
        for i, (tok, row) in enumerate(zip(tokens, logits)):
            total += 1
            top = max(range(len(row)), key=row.__getitem__)
            if tok == top:
                equal += 1
                continue
            margin = row[top] - row[tok] if 0 <= tok < len(row) else math.inf
            scale = max(abs(x) for x in row) or 1.0
            differing.append(StepJudgement(p, i, tok, top, margin, relative * scale))
    if not differing:
        return Judgement(EQUAL, total, equal)
    if all(d.margin <= d.allowed for d in differing):
        return Judgement(WITHIN, total, equal, differing)
    return Judgement(DIFFERENT, total, equal, differing)


def served_tokens(base: str, model: str, prompt_ids: list[int], steps: int) -> list[int]:
    doc = {"model": model, "prompt": prompt_ids, "max_tokens": steps, "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
    status, body, _secs = post_json(base + "/v1/completions", doc)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:200]}")
    return list(json.loads(body)["choices"][0]["token_ids"])


@contextmanager
def quiet_transformers():
    """transformers' load report, warnings and progress bars kept off mxtrim's terminal while
    the original loads in this process (the validation shows its own progress; a failure is
    reported from the exception)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def reference_logits(source: Path, kept: list[int] | None, prompts: list[list[int]], served: list[list[int]]) -> list[list[list[float]]]:
    """The original checkpoint in float32 with only ``kept`` layers (None: all of them),
    teacher-forced on the served tokens: one forward pass per prompt, the logits before each
    served token."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    model.eval()
    if kept is not None:
        decoder = model.get_decoder()
        decoder.layers = torch.nn.ModuleList([decoder.layers[i] for i in kept])
        text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        text_config.num_hidden_layers = len(kept)
        if isinstance(getattr(text_config, "layer_types", None), list):
            text_config.layer_types = [text_config.layer_types[i] for i in kept]
    out = []
    with torch.no_grad():
        for ids, tokens in zip(prompts, served):
            seq = torch.tensor([list(ids) + list(tokens)])
            logits = model(seq, use_cache=False).logits[0].float()
            first = len(ids) - 1
            out.append([logits[first + i].tolist() for i in range(len(tokens))])
    return out


def _token(tok, i: int) -> str:
    try:
        return repr(tok.decode([i]))
    except Exception:  # an id outside the tokenizer
        return "?"


def describe(j: Judgement, tok, relative: float, dtype_key: str) -> str:
    if j.verdict == EQUAL:
        return f"equal: {j.total} of {j.total} greedy tokens are the original's top tokens"
    w = j.worst
    if j.verdict == WITHIN:
        return (f"equal within numerical tolerance: {len(j.differing)} of {j.total} served tokens are not the original's top token, "
                f"each a near tie (largest margin {w.margin:.3g} ≤ {w.allowed:.3g}, {relative:g} of the step's largest logit for {dtype_key})")
    return (f"different at step {w.step} of prompt {w.prompt + 1}: served {w.served} {_token(tok, w.served)}, "
            f"the original's top {w.top} {_token(tok, w.top)}, margin {w.margin:.3g} > {w.allowed:.3g} allowed for {dtype_key} "
            f"({j.total - len(j.differing)} of {j.total} tokens equal)")


def prepare(plan: dict) -> tuple[str | None, str]:
    """(None, "") when the comparison can run, else (status, why not)."""
    source = Path(plan.get("source", ""))
    kept = (plan.get("kept") or {}).get("text")
    if plan.get("mode") != "weights":
        return "not applicable", "dummy weights: nothing to compare"
    if not source.is_dir() or not kept:
        return "unverified", f"the source {source} is not here to run the original model"
    size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
    if size > CPU_REFERENCE_LIMIT:
        return "unverified", f"the original model ({size / 2**30:.1f} GiB) is too large to run on the CPU here"
    return None, ""


def compare(base: str, out: Path, plan: dict, dtype_key: str, serve_source=None, steps: int = STEPS) -> tuple[str, str, dict]:
    """(status, detail, data): passed (equal, or equal within tolerance) / failed (different) /
    not comparable / unverified / not applicable. ``serve_source(callback)`` serves the
    untrimmed source the same way and calls ``callback(base, model)`` with it (or returns
    (None, why) when it cannot)."""
    from transformers import AutoTokenizer

    status, why = prepare(plan)
    if status:
        return status, why, {}
    source = Path(plan["source"])
    kept = plan["kept"]["text"]
    relative = RELATIVE_TOLERANCE[dtype_key]
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    prompts = [tok.encode(p, add_special_tokens=True) for p in PROMPTS]
    served = [served_tokens(base, str(out), ids, steps) for ids in prompts]
    data = {"served": served, "kept": kept, "tolerance": {"dtype": dtype_key, "relative": relative}}
    try:
        logits = reference_logits(source, kept, prompts, served)
    except Exception as exc:  # transformers cannot run this architecture here
        return "unverified", f"transformers could not run the original with the kept layers: {type(exc).__name__}: {str(exc)[:200]}", data
    j = judge(served, logits, relative)
    data |= {"verdict": j.verdict, "equal": j.equal, "total": j.total,
             "differing": [vars(d) for d in j.differing[:16]]}
    detail = describe(j, tok, relative, dtype_key) + f" (layers {kept} of the original)"
    if j.verdict != DIFFERENT:
        return "passed", detail, data
    # before blaming the trim: does this engine agree with transformers on the untrimmed model?
    if serve_source is None:
        return "failed", detail, data

    def source_judgement(src_base: str, model: str) -> Judgement:
        src_served = [served_tokens(src_base, model, ids, steps) for ids in prompts]
        return judge(src_served, reference_logits(source, None, prompts, src_served), relative)

    src, why = serve_source(source_judgement)
    if src is None:
        data["source_check"] = why
        return "failed", detail + f"; the untrimmed source could not be served to rule out the engine ({why})", data
    data["source_check"] = {"verdict": src.verdict, "equal": src.equal, "total": src.total}
    if src.verdict == DIFFERENT:
        return NOT_COMPARABLE, ("the untrimmed source served the same way also differs from transformers ("
                                + describe(src, tok, relative, dtype_key) + "): this engine and transformers disagree on this model, "
                                "so the trim cannot be judged by token equality"), data
    return "failed", detail + f"; the untrimmed source served the same way is {src.verdict} to the whole original", data
