"""The effective configuration of a served output: the path vLLM actually built, per kept layer
kind, against the one the output's ``config.json`` and the serve settings plan.

What was served comes from the server's start-up log (the wording of vLLM 0.32's CPU build,
0.26's CUDA build and vLLM-MetaX, in tests/fixtures/*_logs) and, where mxtrim's in-engine probe
ran, from what each rank built (``effective_probe``, which wins over the log):

* the engine line, ``Initializing a V1 LLM engine (v0.32.0) with config: … dtype=torch.float32
  … quantization=None … enforce_eager=True … kv_cache_dtype=auto … compilation_config={'mode':
  <CompilationMode.NONE: 0> … 'cudagraph_mode': <CUDAGraphMode.NONE: 0> …`` with its
  ``speculative_config=SpeculativeConfig(method='mtp', …, num_spec_tokens=1)``;
* the attention backend (``Using CPU_MLA backend.``, ``Using TRITON_MLA attention backend out of
  potential backends: […]``, vLLM-MetaX ``Using Triton backend on V1 engine.``) and MLA's
  prefill backend (``Using CPU_SDPA_MLA MLA prefill backend.``);
* the MoE backend (``Using TRITON Fp8 MoE backend out of potential backends: […]``, ``Using CPU
  Unquantized MoE backend …``) and its experts kernel (``Using CPUUnquantizedExperts MoE
  backend``);
* the linear kernels (``Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8``,
  ``Selected DeepGemmFp8BlockScaledMMKernel for Fp8LinearMethod``);
* the KV cache: its dtype on the engine line, ``Using DeepSeek's fp8_ds_mla KV cache format.``,
  ``Using LBHNC KV cache layout.``.

A served path that differs from the plan (the quantization dropped or changed by an override,
another dtype, KV-cache dtype or attention backend than the settings ask for, an MLA model on a
non-MLA backend, a quantized kind served unquantized, a drafter that was not built, a compiled
engine where eager was planned) is a failure of its own class (``classify.SERVED_PATH``), each
difference with the line it rests on. Pure functions: no Textual, no vLLM, no torch."""

from __future__ import annotations

import re
from typing import Iterable

from .classify import SERVED_PATH
from .paths import planned_layer_names, coverage_rows
from .vllm_log import message

EFFECTIVE = "effective configuration"

_ENGINE = re.compile(r"^Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<config>.*)$")
_FIELDS = {
    "quantization": re.compile(r", quantization=([\w-]+)"),
    "dtype": re.compile(r", dtype=(?:torch\.)?(\w+)"),
    "kv_cache_dtype": re.compile(r", kv_cache_dtype=([\w-]+)"),
    "enforce_eager": re.compile(r", enforce_eager=(True|False)"),
}
_SPECULATIVE = re.compile(r", speculative_config=(None|SpeculativeConfig\((?P<body>[^)]*)\))")
_SPEC_METHOD = re.compile(r"method='([^']*)'")
_SPEC_TOKENS = re.compile(r"num_spec(?:ulative)?_tokens=(\d+)")
# 0.26 / 0.32: {'mode': <CompilationMode.NONE: 0>, …}; vLLM-MetaX 0.17: {"level":3,"mode":3,…}
_COMPILE_MODE = re.compile(r"compilation_config=\{[^}]*?['\"]mode['\"]:\s*(?:<CompilationMode\.\w+: (\d+)>|(\d+))")
_CUDAGRAPH = re.compile(r"['\"]cudagraph_mode['\"]:\s*(?:<CUDAGraphMode\.(\w+): \d+>|['\"]?(\w+))")
# "Using CPU_MLA backend." (CPU), "Using TRITON_MLA attention backend out of potential backends:
# […]." (CUDA), "Using Triton backend on V1 engine." (vLLM-MetaX), "Using X backend (selected
# via --attention-backend)." (ROCm); not the MLA prefill, MoE or Mamba backends
_ATTENTION = re.compile(r"^Using (\w+) (?:attention )?backend(?:\.$| out of potential backends\b| on V1 engine\b| \(selected via)")
_MLA_PREFILL = re.compile(r"^Using (\w+) MLA prefill backend\b")
_MOE_BACKEND = re.compile(r"^Using (\w+) ([\w-]+) MoE backend out of potential backends\b")
_MOE_EXPERTS = re.compile(r"^Using (\w+) MoE backend$")
_LINEAR = re.compile(r"^Selected (\w+) for (\w+)")
_KV_FORMAT = re.compile(r"^Using DeepSeek's (\w+) KV cache format\b")
_KV_LAYOUT = re.compile(r"^(?:Using (\w+) KV cache layout\b|Setting KV cache layout to (\w+)\b)")

UNQUANTIZED_DTYPES = {"BF16", "F16", "F32", "F64"}  # the weight dtypes of a kind that is not quantized


def _excerpt(msg: str, m: re.Match | None) -> str:
    """The engine line as evidence: its head and the field it rests on ("Initializing a V1 LLM
    engine (v0.32.0) with config: … quantization=None …")."""
    head = msg[: msg.index(" with config:") + len(" with config:")] if " with config:" in msg else ""
    if m is None:
        return (head or msg)[:400]
    return f"{head} … {msg[m.start():m.end()].lstrip(', ')} …"[:400]


def parse_log(lines: Iterable[str]) -> dict:
    """What one server's start-up log says it built (``vllm_log.last_run`` of the log): every
    field None / empty where the log says nothing; ``evidence``: field -> the line it rests on."""
    found: dict = {"vllm": None, "quantization": None, "dtype": None, "kv_cache_dtype": None, "enforce_eager": None,
                   "speculative_method": None, "num_speculative_tokens": None, "compilation_mode": None,
                   "cudagraph_mode": None, "attention_backends": [], "mla_prefill_backend": None, "moe_backends": [],
                   "moe_experts": [], "linear_kernels": {}, "kv_cache_format": None, "kv_cache_layout": None,
                   "engine_logged": False}
    evidence: dict[str, str] = {}
    for raw in lines:
        msg = message(raw)
        if not msg:
            continue
        if (m := _ENGINE.match(msg)) is not None:
            if found["engine_logged"]:
                continue  # one engine per server (a DP rank's repeat says the same)
            found["engine_logged"], found["vllm"] = True, m.group("version")
            for key, pattern in _FIELDS.items():
                f = pattern.search(msg)
                if f is not None:
                    value = f.group(1)
                    found[key] = {"True": True, "False": False}.get(value) if key == "enforce_eager" else value
                    if key == "quantization" and value == "None":
                        found[key] = None
                    evidence[key] = _excerpt(msg, f)
            spec = _SPECULATIVE.search(msg)
            if spec is not None:
                body = spec.group("body") or ""
                method, tokens = _SPEC_METHOD.search(body), _SPEC_TOKENS.search(body)
                found["speculative_method"] = method.group(1) if method else None
                found["num_speculative_tokens"] = int(tokens.group(1)) if tokens else None
                evidence["speculative_method"] = _excerpt(msg, spec)
            mode = _COMPILE_MODE.search(msg)
            if mode is not None:
                found["compilation_mode"] = int(mode.group(1) or mode.group(2))
                evidence["compilation_mode"] = _excerpt(msg, mode)
            graphs = _CUDAGRAPH.search(msg)
            if graphs is not None:
                found["cudagraph_mode"] = graphs.group(1) or graphs.group(2)
                evidence["cudagraph_mode"] = _excerpt(msg, graphs)
        elif (m := _MLA_PREFILL.match(msg)) is not None:
            found["mla_prefill_backend"] = found["mla_prefill_backend"] or m.group(1)
        elif (m := _ATTENTION.match(msg)) is not None:
            _add(found["attention_backends"], m.group(1))
            evidence.setdefault("attention_backend", msg[:400])
        elif (m := _MOE_BACKEND.match(msg)) is not None:
            _add(found["moe_backends"], f"{m.group(1)} {m.group(2)}")
            evidence.setdefault("moe_backend", msg[:400])
        elif (m := _MOE_EXPERTS.match(msg)) is not None:
            _add(found["moe_experts"], m.group(1))
        elif (m := _LINEAR.match(msg)) is not None:
            found["linear_kernels"].setdefault(m.group(2), m.group(1))
            evidence.setdefault(f"linear:{m.group(2)}", msg[:400])
        elif (m := _KV_FORMAT.match(msg)) is not None:
            found["kv_cache_format"] = m.group(1)
        elif (m := _KV_LAYOUT.match(msg)) is not None:
            found["kv_cache_layout"] = found["kv_cache_layout"] or m.group(1) or m.group(2)
    found["evidence"] = evidence
    return found


def _add(items: list, value) -> None:
    if value not in items:
        items.append(value)


# --- the plan -------------------------------------------------------------------------------

def describe_quantization(q: dict | None) -> str:
    """An output's ``quantization_config`` in words: "FP8 block 128×128", "W8A8 int8
    (compressed-tensors)", "none"."""
    if not q:
        return "none"
    method = str(q.get("quant_method") or q.get("quantization_method") or "unknown")
    if method == "fp8":
        block = q.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2:
            return f"FP8 block {block[0]}×{block[1]}"
        return "FP8"
    scheme = compressed_scheme(q)
    if scheme:
        return f"{scheme} (compressed-tensors)"
    bits = q.get("bits")
    return f"{method} ({bits}-bit)" if bits else method


def compressed_scheme(q: dict) -> str | None:
    """compressed-tensors' scheme of the first config group: "W8A8 int8", "W8A8 FP8", "W4A16"…"""
    groups = q.get("config_groups")
    if q.get("quant_method") != "compressed-tensors" or not isinstance(groups, dict):
        return None
    for group in groups.values():
        if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
            continue
        w, a = group["weights"], group.get("input_activations") if isinstance(group.get("input_activations"), dict) else {}
        kind = "FP8" if w.get("type") == "float" else "int8" if w.get("num_bits") == 8 else ""
        acts = f"A{a.get('num_bits')}" if a.get("num_bits") else "A16"
        return f"W{w.get('num_bits')}{acts}" + (f" {kind}" if kind and acts != "A16" else "")
    return None


def planned(quantization: dict | None, text_config: dict, settings: dict) -> dict:
    """The path the output's config and the serve settings plan (``serve_settings``): None where
    the plan leaves a choice to vLLM."""
    method = None
    if quantization:
        method = str(quantization.get("quant_method") or quantization.get("quantization_method") or "unknown")
    return {"quantization": method, "quantization_words": describe_quantization(quantization),
            "fp8_block": method == "fp8" and isinstance(quantization.get("weight_block_size"), list),
            "compressed_scheme": compressed_scheme(quantization) if quantization else None,
            "dtype": settings.get("dtype"), "kv_cache_dtype": settings.get("kv_cache_dtype") or "auto",
            "attention_backend": settings.get("attention_backend"),
            "mla": isinstance(text_config.get("kv_lora_rank"), int),
            "speculative_method": "mtp" if settings.get("speculative") else None,
            "num_speculative_tokens": settings.get("speculative") or None,
            "enforce_eager": settings.get("enforce_eager")}


def same_quantization(planned_method: str | None, served: str | None) -> bool:
    """Whether vLLM's quantization method ``served`` is the config's ``planned_method``: the same
    name, or one of its kernels' names (gptq → gptq_marlin, fp8 → deepseek_v4_fp8)."""
    if planned_method is None or served is None:
        return planned_method is None and served is None
    a, b = (s.lower().replace("-", "_") for s in (planned_method, served))
    return a == b or a in b.split("_") or b.startswith(a + "_")


# --- per kept kind --------------------------------------------------------------------------

def _quantized_kind(label: str) -> bool:
    """The kind's weights are stored quantized (its label names an FP8 / integer dtype)."""
    dtypes = label.split(" · ")[2].split(" + ")[0].split("/") if label.count(" · ") >= 2 else []
    return any(d.strip() and d.strip() not in UNQUANTIZED_DTYPES for d in dtypes)


def _moe_kind(label: str) -> bool:
    return "moe" in label.split(" · ")[1] if " · " in label else False


def _probe_layer(probe: dict | None, name: str) -> dict | None:
    layers = (probe or {}).get("layers") or {}
    found = layers.get(name)
    return found if isinstance(found, dict) else None


def kinds(output_plan: dict, served: dict, probe: dict | None) -> list[dict]:
    """What was served per kept kind (coverage row of ``output_plan``, the output's
    mxtrim-plan.json): its quantization, attention backend, MoE backend and kernel, KV cache and,
    for the MTP row, the speculative method. Its layers named as the probe names them, as
    ``paths`` does (the text model's ``model.layers.N``, the MTP drafter's by the name its layer
    is stored under)."""
    out = []
    for row in coverage_rows(output_plan):
        if not row.get("kept"):
            continue
        label = str(row.get("kind") or "")
        names = planned_layer_names(row, output_plan)
        entry = {"row": row.get("group"), "kind": label, "layers": names, "source": "log",
                 "quantization": served["quantization"] or "none",
                 "attention_backend": "/".join(served["attention_backends"]) or None,
                 "moe_backend": ("/".join(served["moe_backends"] + served["moe_experts"]) or None) if _moe_kind(label) else None,
                 "kv_cache_dtype": served["kv_cache_dtype"], "kv_cache_layout": served["kv_cache_layout"]}
        if row.get("submodel") == "mtp":
            entry["speculative_method"] = served["speculative_method"]
            if not served["speculative_method"] and served["engine_logged"]:  # no drafter, nothing of it built
                entry.update(quantization=None, attention_backend=None, moe_backend=None,
                             note="not built: served without speculative decoding")
        built = [layer for layer in (_probe_layer(probe, n) for n in names) if layer]
        if built:
            entry["source"] = "probe"
            for key in ("attention_backend", "attention_class"):
                entry[key] = "/".join(sorted({str(b[key]) for b in built if b.get(key)})) or None
            methods = sorted({str(m) for b in built for m in (b.get("linear_quant_methods") or {}).values()})
            entry["linear_quant_methods"] = methods
            if _moe_kind(label):
                moe = sorted({f"{b.get('moe_quant_method')} ({b.get('moe_kernel')})" for b in built if b.get("moe_quant_method")})
                entry["moe_backend"] = "/".join(moe) or None
        out.append(entry)
    return out


# --- the comparison ---------------------------------------------------------------------------

def _engine(served: dict, probe: dict | None) -> dict:
    """The model-wide settings: what each rank built (the probe's record) where it says,
    else what the log said. The probe's None is "none" for the quantization and the
    speculative method once it read the engine's configuration (its dtype is known)."""
    engine = dict(served)
    if probe:
        read = probe.get("dtype") is not None
        for key in ("quantization", "kv_cache_dtype", "speculative_method", "compilation_mode", "cudagraph_mode", "enforce_eager"):
            if probe.get(key) is not None or (read and key in ("quantization", "speculative_method")):
                engine[key] = probe.get(key)
        if read:
            engine["dtype"] = str(probe["dtype"]).removeprefix("torch.")
    return engine


def differences(plan: dict, served: dict, probe: dict | None, per_kind: list[dict]) -> list[dict]:
    """Each way the served path differs from the planned one: what, planned, served, and the
    line it rests on (a log line, or the probe's record)."""
    found: list[dict] = []
    ev = served["evidence"]

    def differ(what: str, want, got, evidence: str) -> None:
        found.append({"what": what, "planned": want, "served": got, "evidence": evidence})

    engine = _engine(served, probe)
    source = "the engine's own record (mxtrim's probe)"

    def line(key: str) -> str:
        return ev.get(key) or f"{source}: {key}={engine.get(key)!r}"

    if served["engine_logged"] or probe:
        if not same_quantization(plan["quantization"], engine["quantization"]):
            differ("quantization", plan["quantization_words"], engine["quantization"] or "none", line("quantization"))
        if plan["dtype"] and engine["dtype"] and engine["dtype"] != plan["dtype"]:
            differ("dtype", plan["dtype"], engine["dtype"], line("dtype"))
        if plan["kv_cache_dtype"] != "auto" and engine["kv_cache_dtype"] and engine["kv_cache_dtype"] != plan["kv_cache_dtype"]:
            differ("KV cache dtype", plan["kv_cache_dtype"], engine["kv_cache_dtype"], line("kv_cache_dtype"))
        spec = engine["speculative_method"]
        if plan["speculative_method"] and not (spec and str(spec).endswith("mtp")):
            differ("speculative method", "mtp (the kept MTP layer as drafter)", spec or "none", line("speculative_method"))
        elif not plan["speculative_method"] and spec:
            differ("speculative method", "none", spec, line("speculative_method"))
        eager = {True: "eager", False: "compiled"}
        if plan["enforce_eager"] is not None and engine["enforce_eager"] is not None and engine["enforce_eager"] != plan["enforce_eager"]:
            differ("eager / graph mode", eager[plan["enforce_eager"]], eager[engine["enforce_eager"]], line("enforce_eager"))
        elif plan["enforce_eager"] and engine["compilation_mode"] not in (None, 0):
            differ("compilation", "none (eager)", f"mode {engine['compilation_mode']}", line("compilation_mode"))
    backends = served["attention_backends"]
    if plan["attention_backend"] and backends and any(b != plan["attention_backend"] for b in backends):
        differ("attention backend", plan["attention_backend"], "/".join(backends), ev["attention_backend"])
    elif plan["mla"] and backends and not any("MLA" in b.upper() for b in backends):
        differ("attention backend", "an MLA backend (config.json has kv_lora_rank)", "/".join(backends), ev["attention_backend"])
    # the linear kernels vLLM selected for the quantized layers
    kernels = served["linear_kernels"]
    fp8 = {m: k for m, k in kernels.items() if "fp8" in m.lower()}
    if plan["fp8_block"] and fp8 and not any("block" in k.lower() for k in fp8.values()):
        method, kernel = next(iter(fp8.items()))
        differ("linear kernel", f"{plan['quantization_words']} (a block-scaled FP8 kernel)", f"{kernel} for {method}",
               ev[f"linear:{method}"])
    # a W8A8 scheme (int8 or FP8 activations too) served as another scheme: weight-only
    # (CompressedTensorsWNA16, W8A16) or the other 8-bit type
    scheme = plan["compressed_scheme"]
    schemes = {m: k for m, k in kernels.items() if m.startswith("CompressedTensors")}
    want = (scheme or "").replace(" ", "").lower()
    if want.startswith("w8a8") and schemes:
        if not any(m.lower().removeprefix("compressedtensors").startswith(want) for m in schemes):
            method, kernel = next(iter(schemes.items()))
            differ("quantization scheme", f"{scheme} (compressed-tensors)", method, ev[f"linear:{method}"])
    # per kept kind: a quantized kind served unquantized (a fallback), an MLA kind built without MLA
    for kind in per_kind:
        label = kind["kind"]
        if kind["source"] == "probe":
            for name in kind["layers"]:
                layer = _probe_layer(probe, name) or {}
                if plan["attention_backend"] and layer.get("attention_backend") and layer["attention_backend"] != plan["attention_backend"]:
                    differ(f"row {kind['row']} attention backend", plan["attention_backend"], layer["attention_backend"],
                           f"{source}: {name} attention_backend={layer['attention_backend']}")
                if label.startswith("mla") and layer.get("attention_class") and "MLA" not in str(layer["attention_class"]):
                    differ(f"row {kind['row']} attention", "MLA", layer["attention_class"],
                           f"{source}: {name} attention_class={layer['attention_class']}")
                if plan["quantization"] and _quantized_kind(label):
                    methods = list((layer.get("linear_quant_methods") or {}).values())
                    if methods and all(str(m).startswith("Unquantized") for m in methods):
                        differ(f"row {kind['row']} linear layers", plan["quantization_words"], "unquantized",
                               f"{source}: {name} linear_quant_methods={sorted(set(map(str, methods)))}")
                    moe = layer.get("moe_quant_method")
                    if _moe_kind(label) and moe and str(moe).startswith("Unquantized"):
                        differ(f"row {kind['row']} experts", plan["quantization_words"], "unquantized",
                               f"{source}: {name} moe_quant_method={moe}")
        elif plan["quantization"] and _quantized_kind(label) and _moe_kind(label):
            moe = served["moe_backends"]
            if moe and all(b.split(" ", 1)[1].lower() == "unquantized" for b in moe):
                differ(f"row {kind['row']} experts", plan["quantization_words"], f"{moe[0]} MoE backend", ev["moe_backend"])
    return found


def summary(plan: dict, served: dict, probe: dict | None) -> str:
    """The served path in one line."""
    engine = _engine(served, probe)
    parts = [f"quantization {engine.get('quantization') or 'none'}"
             + (f" ({plan['quantization_words']})" if plan["quantization"] else "")]
    kernels = served["linear_kernels"]
    if kernels:
        parts[-1] += ", " + ", ".join(f"{k} for {m}" for m, k in kernels.items())
    if served["attention_backends"]:
        prefill = f" (MLA prefill {served['mla_prefill_backend']})" if served["mla_prefill_backend"] else ""
        parts.append(f"attention {'/'.join(served['attention_backends'])}{prefill}")
    if served["moe_backends"] or served["moe_experts"]:
        parts.append("MoE " + ", ".join(served["moe_backends"] + served["moe_experts"]))
    kv = f"KV cache {engine.get('kv_cache_dtype') or '?'}"
    extras = [x for x in (served["kv_cache_format"], served["kv_cache_layout"] and f"layout {served['kv_cache_layout']}") if x]
    parts.append(kv + (f" ({', '.join(extras)})" if extras else ""))
    spec = engine.get("speculative_method")
    parts.append(f"speculative {spec}" if spec else "no speculative decoding")
    if engine.get("dtype"):
        parts.append(engine["dtype"])
    eager = engine.get("enforce_eager")
    if eager is not None:
        parts.append("eager" if eager else f"compiled (mode {engine.get('compilation_mode')}, CUDA graphs {engine.get('cudagraph_mode')})")
    return "; ".join(parts)


ADVICE = ("vLLM built another path than the output's config.json and the serve settings plan (the quoted lines): what "
          "this run proves is that other path, not the kept one. Serve without the override that chose it (in the "
          "launcher or the extra arguments: --quantization, --hf-overrides, --dtype, --kv-cache-dtype, "
          "--attention-backend, -cc / --compilation-config), or on a build that runs the planned path")


def effective_row(lines: Iterable[str], quantization: dict | None, text_config: dict, settings: dict,
                  output_plan: dict, probe: dict | None = None) -> tuple[dict, dict]:
    """(the row, the record): the validation's "effective configuration" row (check, status,
    detail, verdict, data), and what was served (validate --json's ``effective``).
    ``lines``: the server's start-up log (its last run); ``quantization``: the output's
    ``quantization_config``; ``settings``: what the server ran with (``run.serve_settings``);
    ``output_plan``: the output's mxtrim-plan.json (its coverage rows and mapping); ``probe``:
    what the engine built, where mxtrim's probe ran (None: the log only)."""
    served = parse_log(lines)
    plan = planned(quantization, text_config, settings)
    per_kind = kinds(output_plan, served, probe)
    found = differences(plan, served, probe, per_kind)
    record = {"source": "probe and log" if probe else "log",
              "engine": {k: v for k, v in served.items() if k not in ("evidence", "engine_logged")},
              "planned": {k: plan[k] for k in ("quantization_words", "dtype", "kv_cache_dtype", "attention_backend", "mla",
                                               "speculative_method", "enforce_eager")},
              "kinds": per_kind, "differences": found}
    if probe:
        record["probe"] = {k: v for k, v in probe.items() if k != "layers"}
    if not found and not served["engine_logged"] and not probe:
        return ({"check": EFFECTIVE, "status": "unverified", "detail": "vLLM logged no engine configuration, and no probe ran",
                 "verdict": None, "data": {}}, record)
    line = summary(plan, served, probe)
    if not found:
        return ({"check": EFFECTIVE, "status": "passed", "detail": f"as planned: {line}", "verdict": None,
                 "data": {}}, record)
    said = "; ".join(f"{d['what']} {d['served']} (planned {d['planned']})" for d in found)
    verdict = {"class": SERVED_PATH, "summary": said,
               "evidence": list(dict.fromkeys(d["evidence"] for d in found))[:4], "advice": ADVICE}
    return ({"check": EFFECTIVE, "status": "failed", "detail": f"served path differs from the plan: {said}", "verdict": verdict,
             "data": {"differences": found}}, record)


def output_row(out, plan: dict, settings: dict, probe: dict | None = None) -> tuple[dict, dict]:
    """``effective_row`` of a served output: its server's last start-up in ``logs/serve.log``,
    its ``config.json`` and its plan's coverage (``mxtrim-plan.json``)."""
    from .serve import output_quantization, output_text_config
    from .vllm_log import iter_file, last_run

    try:
        lines = last_run(iter_file(out / "logs" / "serve.log"))
    except OSError:
        lines = []
    return effective_row(lines, output_quantization(out), output_text_config(out), settings, plan, probe)
