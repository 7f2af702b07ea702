"""The requests sent to a healthy server, each recorded as a check: HTTP status, latency,
token counts and the text. A completion asks for several decode steps after a multi-token
prompt (prefill + decode); chat goes through the chat template when the output has one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

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


def kept_boundaries(cfg: dict, coverage, family_key: str | None = None) -> list[dict]:
    """Every boundary the long input must cross: those of the kept text layers' attention kinds
    (the plan's ``coverage`` rows), from the output's text config ``cfg`` and its family's facts
    (``Family.long_input``: sliding windows, attention chunks, the sparse indexer's top-k,
    DeepSeek-V4's compression blocks and indexer). [{"what", "tokens" (a prompt of more tokens
    crosses it), "source", "layers" (the output's layers that have it)}], shortest first."""
    from ..model.families import ALL_FAMILIES, family_for

    family = next((f for f in ALL_FAMILIES if f.key == family_key), None) or family_for(cfg)
    found: dict[tuple[str, int], dict] = {}
    for row in coverage if isinstance(coverage, list) else []:
        if not isinstance(row, dict) or row.get("submodel", "text") != "text":
            continue
        layers = [k["new"] for k in row.get("kept") or [] if isinstance(k, dict) and type(k.get("new")) is int]
        attention = str(row.get("kind", "")).split(" · ", 1)[0]
        for b in family.long_input(cfg, attention) if layers else []:
            entry = found.setdefault((b.what, b.tokens), {"what": b.what, "tokens": b.tokens, "source": b.source, "layers": []})
            entry["layers"] = sorted(set(entry["layers"]) | set(layers))
    return sorted(found.values(), key=lambda b: (b["tokens"], b["what"]))


def own_token_counter(out: Path):
    """(count, how): a counter for ``long_prompt`` with the output's own tokenizer files, loaded
    offline in this process (transformers' AutoTokenizer, local files only, never the folder's
    code), counting as vLLM's completions do (special tokens added), and the words the row
    says it with; (None, why not) where it cannot be: the server's /tokenize counts then."""
    from ..write.launch_text import read_tokenizer_config

    settings = read_tokenizer_config(Path(out) / "tokenizer_config.json") or {}
    if "AutoTokenizer" in json.dumps(settings.get("auto_map") or {}):
        return None, "the output's tokenizer needs its own code (auto_map), which is not run here"
    try:
        from transformers import AutoTokenizer

        from .equivalence import quiet_transformers

        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True, trust_remote_code=False)
    except ImportError:
        return None, "transformers is not installed beside mxtrim"
    except Exception as exc:  # files transformers cannot make a tokenizer of
        return None, f"the output's tokenizer does not load here ({type(exc).__name__}: {str(exc)[:120]})"
    return (lambda base, model, prompt: len(tok.encode(prompt, add_special_tokens=True))), "counted with the output's tokenizer"


def _named(bounds: list[dict]) -> str:
    return ", ".join(f"{b['what']} (layer{'s' if len(b['layers']) > 1 else ''} {', '.join(map(str, b['layers']))})" for b in bounds)


def long_input(base: str, out: Path, bounds: list[dict], context: int, decode: int) -> tuple[str, str, dict, RequestResult | None]:
    """The long-input request: a prompt past every boundary of ``bounds`` (kept_boundaries) that
    the served ``context`` holds with ``decode`` tokens to generate, counted with the output's
    own tokenizer. (outcome, detail, data, the request or None): outcome "crossed" (every
    boundary), "uncrossed" (one or more stayed uncrossed: past the context, or the prompt fell
    short of it), "failed" (the request failed) or "not run" (the context holds none)."""
    room = context - decode
    beyond = [b for b in bounds if b["tokens"] >= room]
    within = [b for b in bounds if b["tokens"] < room]
    advice = f"serve with --max-model-len ≥ {beyond[-1]['tokens'] + LONG_MARGIN + decode}" if beyond else ""
    data: dict = {"context": context, "boundaries": [{**b, "crossed": False} for b in bounds]}
    if not within:
        return "not run", (f"not run: the served context {context} holds no prompt past {_named(beyond)} with {decode} tokens "
                           f"to generate: {advice}"), data, None
    count, how = own_token_counter(out)
    if count is None:
        count, how = count_tokens, f"counted by the server's /tokenize: {how}"
    prompt, n = long_prompt(base, str(out), within[-1]["tokens"], count=count, limit=room)
    r = completion(base, str(out), prompt=prompt, max_tokens=decode, name="long input")
    served = r.prompt_tokens
    if n is None:
        n, how = served, "counted by the server"
    elif served is not None and served != n:
        how += f"; the server counted {served}"
    data |= {"request": r.to_json(), "prompt_tokens": n, "counted_by": how}
    if not r.passed:
        return "failed", f"long input {n} tokens ({how}): {r.detail} in {r.seconds:.2f} s", data, r
    judged = min((x for x in (n, served) if x is not None), default=0)  # what both counted
    data["boundaries"] = [{**b, "crossed": judged > b["tokens"]} for b in bounds]
    crossed = [b for b in data["boundaries"] if b["crossed"]]
    short = [b for b in data["boundaries"] if not b["crossed"] and b["tokens"] < room]
    words = ["crosses " + _named(crossed)] if crossed else []
    if short:
        words.append(f"not {_named(short)} (the prompt fell short of {'it' if len(short) == 1 else 'them'})")
    if beyond:
        words.append(f"not {_named(beyond)} (served context {context}): {advice}")
    detail = f"long input {n} tokens ({how}): " + ", ".join(words) + f"; {r.completion_tokens} generated in {r.seconds:.2f} s"
    return ("crossed" if len(crossed) == len(bounds) else "uncrossed"), detail, data, r


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
