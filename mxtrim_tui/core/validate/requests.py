"""The requests sent to a healthy server, each recorded as a check: HTTP status, latency,
token counts and the text. A completion asks for several decode steps after a multi-token
prompt (prefill + decode); chat goes through the chat template when the output has one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .http import get, post_json

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
MIN_DECODE_TOKENS = 8


@dataclass
class RequestResult:
    name: str
    passed: bool
    status: int | None
    seconds: float
    detail: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "name": self.name, "passed": self.passed, "status": self.status, "seconds": round(self.seconds, 3),
            "detail": self.detail, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "text": self.text,
        }


def _usage(doc: dict) -> tuple[int | None, int | None]:
    usage = doc.get("usage") or {}
    return usage.get("prompt_tokens"), usage.get("completion_tokens")


def list_models(base: str) -> RequestResult:
    status, body, secs = get(base + "/v1/models")
    try:
        ids = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        return RequestResult("models", False, status, secs, f"unexpected answer: {body[:200]}")
    return RequestResult("models", status == 200 and bool(ids), status, secs, "served: " + ", ".join(ids))


def completion(base: str, model: str, prompt: str = PROMPT, max_tokens: int = MIN_DECODE_TOKENS, name: str = "completion") -> RequestResult:
    """Greedy, and ``ignore_eos`` so that a random model still decodes every step asked for."""
    doc = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True, "logprobs": 1}
    status, body, secs = post_json(base + "/v1/completions", doc)
    try:
        answer = json.loads(body)
        choice = answer["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return RequestResult(name, False, status, secs, f"HTTP {status}: {body[:300]}")
    prompt_tokens, completion_tokens = _usage(answer)
    ok = status == 200 and (completion_tokens or 0) >= max_tokens
    detail = f"{prompt_tokens} prompt tokens, {completion_tokens} generated" + ("" if ok else f" (asked for {max_tokens})")
    return RequestResult(name, ok, status, secs, detail, prompt_tokens, completion_tokens, choice.get("text", ""))


def chat(base: str, model: str, max_tokens: int = MIN_DECODE_TOKENS) -> RequestResult:
    doc = {
        "model": model, "messages": [{"role": "user", "content": "Say something about foxes."}],
        "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
    }
    status, body, secs = post_json(base + "/v1/chat/completions", doc)
    try:
        answer = json.loads(body)
        text = answer["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError):
        return RequestResult("chat", False, status, secs, f"HTTP {status}: {body[:300]}")
    prompt_tokens, completion_tokens = _usage(answer)
    ok = status == 200 and (completion_tokens or 0) >= max_tokens
    return RequestResult("chat", ok, status, secs, f"{prompt_tokens} prompt tokens (chat template), {completion_tokens} generated", prompt_tokens, completion_tokens, text)


# vLLM's Prometheus counters of speculative decoding (V1: vllm/v1/metrics/loggers.py)
SPEC_COUNTERS = {"drafted": "vllm:spec_decode_num_draft_tokens_total", "accepted": "vllm:spec_decode_num_accepted_tokens_total"}


def spec_decode_counts(base: str) -> dict | None:
    """Drafted and accepted token totals from the server's /metrics, or None when it exposes
    no such counter."""
    status, body, _secs = get(base + "/metrics")
    if status != 200:
        return None
    found: dict[str, float] = {}
    for line in body.splitlines():
        for key, name in SPEC_COUNTERS.items():
            if line.startswith(name + "{") or line.startswith(name + " "):
                try:
                    found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
    if "drafted" not in found:
        return None
    return {"drafted": found["drafted"], "accepted": found.get("accepted", 0.0), "source": "/metrics"}


# --- the long-input request ----------------------------------------------------------------
LONG_WORD = "fox"
LONG_MARGIN = 16  # tokens past the threshold the long prompt aims for


def long_input_need(cfg: dict, kinds) -> tuple[int | None, str]:
    """How long a prompt must be to take the kept paths only long inputs take, and which:
    past the sliding window, past the sparse indexer's top-k, and for DeepSeek-V4's
    compressed attention past the largest kept ``compress_ratios`` block (and the indexer's
    top-k of compressed entries). ``kinds``: the coverage rows' kind labels of the kept
    layers. (None, "") when no kept path needs one."""
    from ..model.families.base import compression_ratio
    from ..plan.build import long_input_tokens

    found: list[tuple[int, str]] = []
    attentions = {str(k).split(" · ", 1)[0] for k in kinds}
    ratios = [r for r in map(compression_ratio, attentions) if r is not None]
    for ratio in ratios:
        need, why = long_input_tokens(cfg, ratio)
        if need:
            found.append((need, f"{why} (compress_ratios {ratio})" if ratio > 1 else why))
    words = " ".join(attentions).lower()
    for key, word, label in (("sliding_window", "sliding", "the sliding window"), ("index_topk", "dsa", "the indexer's top-k")):
        value = cfg.get(key)
        if type(value) is int and value > 0 and word in words and not ratios:
            found.append((value, f"{label} ({key}={value})"))
    if not found:
        return None, ""
    return max(found, key=lambda f: f[0])


def count_tokens(base: str, model: str, prompt: str) -> int | None:
    """The prompt's length in the served model's own tokens (vLLM's /tokenize), or None
    when the server does not answer it."""
    status, body, _secs = post_json(base + "/tokenize", {"model": model, "prompt": prompt, "add_special_tokens": True})
    try:
        count = json.loads(body).get("count") if status == 200 else None
    except (ValueError, AttributeError):
        return None
    return count if type(count) is int else None


def long_prompt(base: str, model: str, need: int, count=count_tokens, limit: int | None = None) -> tuple[str, int | None]:
    """A prompt of more than ``need`` tokens as the output's tokenizer counts them (asked of
    the server: a word may be several tokens, or several words one), and at most ``limit``
    (the context less the tokens asked for: a word of three tokens must not carry a prompt of
    three times the aim past the context), and its counted length (None: the server could not
    count it; the prompt then has ``need`` + margin words)."""
    aim = need + LONG_MARGIN if limit is None else min(need + LONG_MARGIN, max(need + 1, limit))
    words = aim
    prompt = " ".join([LONG_WORD] * words)
    for _ in range(8):
        n = count(base, model, prompt)
        if n is None:
            return prompt, None
        if n > need and (limit is None or n <= limit):
            return prompt, n
        scaled = words * aim // max(n, 1)
        words = max(words + 1, scaled) if n <= need else max(1, min(words - 1, scaled))
        prompt = " ".join([LONG_WORD] * words)
    return prompt, count(base, model, prompt)
