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
