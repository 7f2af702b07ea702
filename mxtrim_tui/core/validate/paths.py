"""Which vLLM modules a served validation built for each row of the plan's coverage table, and
what its requests executed through them, read from inside the running engine.

mxtrim's engine probe (``mxtrim_probe_ext.py``, a vLLM worker extension) is copied alone into
a folder of the run, put first on the server's PYTHONPATH for that run only, and loaded with
``--worker-extension-cls``; ``VLLM_SERVER_DEV_MODE=1`` opens vLLM's ``POST /collective_rpc``,
through which it is installed once the server is healthy (each rank's inventory of what was
built) and reset and read around each request check (each rank's forward calls and prefill /
decode tokens per layer, the experts its routers chose). Nothing is installed into the vLLM
environment; the model, its weights and its kernels are left as they are.

Each coverage row then gets a ``paths`` entry: executed, not executed (built but reached by
no request sent, or not built because the request that builds it was not asked for: it says
which) or unverified (the probe could not observe: not loadable, graph mode, not served),
with the classes, counts and experts as evidence. Ranks are combined as TP / PP / DP ranks
see the tokens: one rank of each tensor-parallel group (the others must agree), pipeline
stages each for its own layers, data-parallel engines summed, experts hit the union."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..child_process import NotStarted, os_reason, run as run_child
from .http import post_json

PROBE_FILE = Path(__file__).with_name("mxtrim_probe_ext.py")
PROBE_MODULE = "mxtrim_probe_ext"
PROBE_CLASS = f"{PROBE_MODULE}.MxtrimProbe"
EXTENSION_FLAG = "--worker-extension-cls"
EXECUTED, NOT_EXECUTED, UNVERIFIED = "executed", "not executed", "unverified"
# a start-up that failed on the probe itself (not on the output): its import, or vLLM's
# refusal of an extension attribute the worker already has
_PROBE_FAILURE = re.compile(r"No module named '?mxtrim_probe_ext|File \"[^\"]*mxtrim_probe_ext\.py\""
                            r"|conflicts with the worker extension class")
_OTHER_TOWER = re.compile(r"vision|visual|audio|image|encoder|mm_projector|perceiver", re.IGNORECASE)
RPC_TIMEOUT = 120.0


def _short(name: str | None) -> str | None:
    """``vllm.model_executor.layers.linear.UnquantizedLinearMethod`` -> ``UnquantizedLinearMethod``."""
    return name.rsplit(".", 1)[-1] if isinstance(name, str) else name


def served_name(layer: dict) -> str:
    """A built layer as ``paths`` and ``effective_probe`` name it: the target model's by its
    module name (``model.layers.0``), the drafter's with its role (``drafter:model.layers.4``)."""
    return layer["name"] if layer.get("role") == "target" else f"{layer.get('role')}:{layer['name']}"


def _merged_layers(reports: list[dict]) -> dict[str, dict]:
    """Every rank's built layers by served name, each taken from a rank that holds it (pipeline
    stages hold their own layers, the others a placeholder)."""
    layers: dict[str, dict] = {}
    for rep in reports:
        for layer in rep.get("layers") or []:
            name = served_name(layer)
            if name not in layers or (layer.get("on_this_rank") and not layers[name].get("on_this_rank")):
                layers[name] = layer
    return layers


def _moe_kernel(moe: dict) -> str | None:
    for key in ("kernel.moe_kernel.fused_experts", "kernel.fused_experts", "kernel.experts_cls", "kernel.moe_kernel",
                "kernel.kernel"):
        if moe.get(key):
            return _short(moe[key])
    return None


def effective_from_probe(reports: list[dict]) -> dict:
    """The configuration the engine built, from the probe's per-rank reports (``install``'s
    inventories): the model-wide settings of the first rank, and per built layer its
    attention class / backend / implementation, its MoE class, quantization method and
    kernel, and the quantization method of each of its linear layers."""
    config = next((r.get("config") for r in reports if r.get("config")), None) or {}
    layers = {}
    for name, layer in _merged_layers(reports).items():
        att = (layer.get("attention") or [None])[0] or {}
        moe = (layer.get("moe") or [None])[0] or {}
        layers[name] = {
            "attention_class": _short(att.get("module")), "attention_backend": att.get("backend"),
            "attention_impl": _short(att.get("impl")), "moe_class": _short(moe.get("module")),
            "moe_quant_method": _short(moe.get("quant_method")), "moe_kernel": _moe_kernel(moe) if moe else None,
            "linear_quant_methods": {rel: _short(d.get("quant_method")) for rel, d in (layer.get("linear") or {}).items()},
        }
    mode = config.get("compilation_mode")
    return {"quantization": config.get("quantization"), "dtype": config.get("dtype"),
            "kv_cache_dtype": config.get("kv_cache_dtype"), "speculative_method": config.get("speculative_method"),
            "compilation_mode": mode if type(mode) is int else None, "cudagraph_mode": config.get("cudagraph_mode"),
            "enforce_eager": config.get("enforce_eager") if isinstance(config.get("enforce_eager"), bool) else None,
            "layers": layers}


def graph_mode(config: dict) -> str | None:
    """Why the probe's counters cannot be read as executions (compiled graphs or CUDA graphs
    run without the Python hooks that count), or None in eager mode."""
    mode, graphs = config.get("compilation_mode"), config.get("cudagraph_mode")
    if mode in (0, None) and graphs in ("NONE", None):
        return None
    return f"compilation mode {mode}, CUDA graph mode {graphs}"


def rank_label(ranks: dict) -> str:
    """``TP0``; ``PP1 TP0`` and ``DP1 PP0 TP0`` where there are several stages or engines."""
    parts = [f"DP{ranks.get('dp')}"] if (ranks.get("dp_size") or 1) > 1 else []
    parts += [f"PP{ranks.get('pp')}"] if (ranks.get("pp_size") or 1) > 1 else []
    return " ".join(parts + [f"TP{ranks.get('tp')}"])


def combine(reports: list[dict]) -> dict:
    """One request's counters over the ranks: per (DP, PP) group the first TP rank's (TP ranks
    see every token: summing them would count each token once per rank), checked against the
    group's other ranks; then the groups summed (stages count their own layers, engines their
    own requests). Expert histograms the same way, so a hit is the union over the ranks."""
    groups: dict[tuple, list[dict]] = {}
    for rep in reports:
        r = rep.get("ranks") or {}
        groups.setdefault((r.get("dp"), r.get("pp")), []).append(rep)
    counts: dict[str, dict] = {}
    experts: dict[str, list[int]] = {}
    errors: dict[str, str] = {}  # a callback of the probe that failed on any rank: its counts are short
    for rep in reports:
        for key, error in (rep.get("errors") if isinstance(rep.get("errors"), dict) else {}).items():
            errors.setdefault(str(key), str(error))
    agree = True
    for members in groups.values():
        members.sort(key=lambda rep: (rep.get("ranks") or {}).get("tp") or 0)
        first = members[0]
        agree &= all(m.get("counts") == first.get("counts") and m.get("experts") == first.get("experts") for m in members[1:])
        for key, c in (first.get("counts") or {}).items():
            total = counts.setdefault(key, {"calls": 0, "prefill_tokens": 0, "decode_tokens": 0})
            for field in total:
                total[field] += int(c.get(field) or 0)
        for key, hist in (first.get("experts") or {}).items():
            old = experts.setdefault(key, [])
            old.extend([0] * (len(hist) - len(old)))
            for i, n in enumerate(hist):
                old[i] += int(n)
    return {"counts": counts, "experts": experts, "agree": agree, "errors": errors,
            "seen": sorted({rank_label(rep.get("ranks") or {}) for rep in reports})}


def _flag_values(words: list[str], flag: str) -> list[str]:
    """The values given to ``flag`` in a server's words, in order (``--flag V``, ``--flag=V``;
    vLLM's parser takes ``_`` for ``-`` in a flag's name)."""
    values = []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if not name.startswith("--") or name.replace("_", "-") != flag:
            continue
        values.append(value if eq else (words[i + 1] if i + 1 < len(words) else ""))
    return values


class EngineProbe:
    """The probe of one validation's server: whether it can be used (``unusable``: why not),
    the folder it is loaded from, its inventory once installed and its readings per request."""

    def __init__(self, opts, out: Path | None = None):
        self.opts = opts
        self.out = out
        self.unusable: str | None = self._refused(opts)
        self.folder: str | None = None
        self.inventory: list[dict] | None = None
        self.readings: dict[str, list[dict]] = {}  # request check -> per-rank reports
        self.lost: str | None = None  # why the readings stopped (an RPC that failed)
        self.restart = False  # the last start failed on the probe: serve again without it
        if self.unusable is None:
            self._prepare()

    @staticmethod
    def _refused(opts) -> str | None:
        """Why the probe cannot go with this server, from the words the server gets (the
        launcher's, mxtrim's, the extra arguments'; argparse keeps the last of a flag given twice)."""
        words = [*(opts.launcher or []), *(["--distributed-executor-backend", opts.executor_backend] if opts.executor_backend else []),
                 *opts.extra_args]
        if _flag_values(words, "--distributed-executor-backend")[-1:] == ["ray"]:
            return ("vLLM's Ray executor starts its workers without the server's PYTHONPATH, where mxtrim's probe is: "
                    "not loadable on Ray workers")
        if _flag_values(words, EXTENSION_FLAG):
            return (f"the server already uses a worker extension ({EXTENSION_FLAG} in its launcher or arguments): "
                    "vLLM takes one, the server's own is kept")
        return None

    def _prepare(self) -> None:
        """The probe alone in a folder of its own, and a check that the server's interpreter
        imports it from there (a module vLLM cannot import stops its start-up). The folder goes
        again if anything stops this half-way (Ctrl-C during the check)."""
        try:
            self.folder = tempfile.mkdtemp(prefix="mxtrim-probe-")
            shutil.copyfile(PROBE_FILE, os.path.join(self.folder, PROBE_FILE.name))
        except OSError as exc:  # no room in the temporary folder, or none to write in
            self.close()
            where = exc.filename if isinstance(exc.filename, str) else tempfile.gettempdir()
            self.unusable = f"mxtrim's probe could not be copied to {where}: {os_reason(exc)}; served without it"
            return
        try:
            proc = run_child([self.opts.python, "-c", f"import {PROBE_MODULE}"], env=self.server_env(dict(os.environ)),
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            why = None if proc.returncode == 0 else ((proc.stderr or proc.stdout).strip().splitlines() or [f"status {proc.returncode}"])[-1]
        except NotStarted as exc:
            why = str(exc)
        except subprocess.TimeoutExpired:
            why = "it did not finish importing it in 120 s"
        except BaseException:
            self.close()
            raise
        if why:
            self.close()
            self.unusable = f"{self.opts.python} cannot import mxtrim's probe {PROBE_MODULE} ({why[:200]}): served without it"

    @property
    def active(self) -> bool:
        return self.unusable is None and self.folder is not None

    def server_argv(self, argv: list[str]) -> list[str]:
        return [*argv, EXTENSION_FLAG, PROBE_CLASS] if self.active else argv

    def server_env(self, env: dict[str, str]) -> dict[str, str]:
        """The server's environment with the probe's folder first on PYTHONPATH and vLLM's
        development endpoints (``/collective_rpc``) on; the server listens on loopback only."""
        if not self.active:  # given up (failed_start): served again without any of it
            return env
        env = dict(env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.folder, env.get("PYTHONPATH", "")) if p)
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["MXTRIM_PROBE_DIR"] = os.path.join(self.folder, "ranks")
        return env

    def failed_start(self, tail) -> bool:
        """Whether a start-up that failed failed on the probe (mxtrim's own failure, never the
        output's); if so the next start goes without it."""
        line = next((line.strip() for line in tail if _PROBE_FAILURE.search(line)), None) if self.active else None
        if line is None:
            return False
        self.unusable = f"the server could not load mxtrim's probe {PROBE_MODULE} ({line[:200]}): served again without it"
        self.restart = True
        return True

    def _rpc(self, base: str, method: str) -> list[dict] | None:
        status, body, _secs = post_json(base + "/collective_rpc", {"method": method, "timeout": RPC_TIMEOUT}, timeout=RPC_TIMEOUT + 10)
        try:
            results = json.loads(body).get("results") if status == 200 else None
        except (ValueError, AttributeError):
            results = None
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            self.lost = (f"the server's POST /collective_rpc did not answer {method} (HTTP {status}: "
                         f"{' '.join(str(body).split())[:160]})")
            return None
        return results + self._other_engines(results)

    def _other_engines(self, results: list[dict]) -> list[dict]:
        """The ranks of data-parallel engines past the first: over HTTP only the first
        engine's answer comes back, every engine writes its own file."""
        if not self.folder or not any(((r.get("ranks") or {}).get("dp_size") or 1) > 1 for r in results):
            return []
        seen = {json.dumps(r.get("ranks"), sort_keys=True) for r in results}
        more = []
        for path in sorted(Path(self.folder, "ranks").glob("probe-dp*.json")):
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if json.dumps(doc.get("ranks"), sort_keys=True) not in seen and (doc.get("ranks") or {}).get("dp") != 0:
                more.append(doc)
        return more

    def install(self, base: str) -> None:
        """Once the server is healthy: the hooks on, and each rank's inventory of what it built."""
        if self.active:
            self.inventory = self._rpc(base, "mxtrim_probe_install")

    @contextlib.contextmanager
    def measure(self, base: str, check: str):
        """Around one request check: counters to zero, the requests, then each rank's counters."""
        if not self.active or self.inventory is None or self.lost:
            yield
            return
        if self._rpc(base, "mxtrim_probe_reset") is None:
            yield
            return
        try:
            yield
        finally:
            if not self.lost:
                reports = self._rpc(base, "mxtrim_probe_report")
                if reports is not None:
                    self.readings[check] = reports

    def close(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def effective(self) -> dict | None:
        return effective_from_probe(self.inventory) if self.inventory else None

    def why_unobserved(self) -> str | None:
        """Why the rows cannot be read from the engine (None: they can)."""
        if self.unusable:
            return self.unusable
        if self.inventory is None:
            return self.lost or "the server did not start"
        config = self.inventory[0].get("config") or {}
        graphs = graph_mode(config)
        if graphs:
            return (f"unverified in graph mode ({graphs}): compiled and captured graphs run without the hooks that "
                    "count, so a zero says nothing; serve with --enforce-eager to count")
        return None

    def paths(self, plan: dict, out: Path) -> list[dict]:
        """One entry per coverage row of the plan: what was built and executed, and its status."""
        why = self.why_unobserved()
        layers = _merged_layers(self.inventory or [])
        readings = {check: combine(reports) for check, reports in self.readings.items()}
        return [_row_path(row, plan, out, self.opts, layers, readings, why, self.lost) for row in coverage_rows(plan)]


def unserved_paths(plan: dict, why: str) -> list[dict]:
    """The coverage rows of a validation that served nothing: unverified, with the reason."""
    return [_entry(row, planned_layer_names(row, plan), UNVERIFIED, why) for row in coverage_rows(plan)]


def coverage_rows(plan: dict) -> list[dict]:
    """The plan's coverage rows, each with its kept layers as {new, old} (a hand-edited plan's
    other entries left out)."""
    rows = plan.get("coverage") if isinstance(plan.get("coverage"), list) else []
    out = []
    for row in rows:
        if isinstance(row, dict):
            kept = row.get("kept") if isinstance(row.get("kept"), list) else []
            out.append({**row, "kept": [k for k in kept if isinstance(k, dict) and type(k.get("new")) is int]})
    return out


def planned_layer_names(row: dict, plan: dict) -> list[str]:
    """The layers of a coverage row as vLLM names them, from the plan alone (the text model's
    by their new index, the MTP layers as the drafter's, by the name they are stored under)."""
    names = []
    for kept in row.get("kept") or []:
        new = kept.get("new")
        if row.get("submodel") == "text":
            names.append(f"model.layers.{new}")
        else:
            mapping = plan.get("mapping") if isinstance(plan.get("mapping"), list) else []
            stored = next((m.get("new_name") for m in mapping if isinstance(m, dict) and m.get("submodel") == row.get("submodel")
                           and m.get("new") == new and isinstance(m.get("new_name"), str)), None) or f"{row.get('submodel')}.{new}"
            names.append(f"drafter:{stored}" if row.get("submodel") == "mtp" else stored)
    return names


def _find_layers(row: dict, plan: dict, layers: dict[str, dict]) -> list[str | None]:
    """The built layers (served names) of a coverage row, None where none was found; planned
    names stand for every layer when nothing was built (the drafter without speculative decoding)."""
    planned = planned_layer_names(row, plan)
    sub = row.get("submodel")
    found = []
    for kept, name in zip(row.get("kept") or [], planned):
        if name in layers:
            found.append(name)
            continue
        new = kept.get("new")
        if sub == "text":
            pool = [n for n, l in layers.items() if l.get("role") == "target" and l.get("index") == new and not _OTHER_TOWER.search(l["name"])]
        elif sub == "mtp":
            drafter = sorted((l["index"], n) for n, l in layers.items() if l.get("role") == "drafter" and l["name"].count(".") == 2)
            pool = [drafter[new][1]] if new is not None and new < len(drafter) else []
        else:
            pool = [n for n, l in layers.items() if l.get("role") == "target" and l.get("index") == new
                    and sub and sub[:3].lower() in l["name"].lower()]
        found.append(min(pool, key=len) if pool else None)
    return found


def _entry(row: dict, names: list[str], status: str, evidence: str, reason: str | None = None, **fields) -> dict:
    """``reason``: why the row is not executed or unverified, in one clause (the start of
    ``evidence`` where not given)."""
    return {"row": row.get("group"), "kind": f"{row.get('submodel')}: {row.get('kind')}", "layers": names, "status": status,
            "reason": None if status == EXECUTED else (reason or evidence), "evidence": evidence,
            "built": fields.get("built", []), "executed": fields.get("executed", {}),
            "experts_hit": fields.get("experts_hit"), "experts": fields.get("experts"),
            "experts_per_layer": fields.get("experts_per_layer"), "ranks": fields.get("ranks")}


def _built(name: str, layer: dict) -> dict:
    att = (layer.get("attention") or [None])[0]
    moe = (layer.get("moe") or [None])[0]
    return {
        "layer": name, "class": _short(layer.get("class")),
        "attention": None if not att else {
            "class": _short(att.get("module")), "backend": att.get("backend"), "impl": _short(att.get("impl")),
            "prefill_backend": _short(att.get("prefill_backend")), "kv_cache_dtype": att.get("kv_cache_dtype"),
            "sliding_window": att.get("sliding_window")},
        "moe": None if not moe else {
            "class": _short(moe.get("module")), "router": _short(moe.get("router")), "quant_method": _short(moe.get("quant_method")),
            "kernel": _moe_kernel(moe), "experts": moe.get("global_num_experts"), "top_k": moe.get("top_k"),
            "monolithic": bool(moe.get("is_monolithic")), "forward_context_name": moe.get("forward_context_name")},
        "other": [_short(o.get("module")) + (f" on {o['backend']}" if o.get("backend") else "") for o in layer.get("other") or []],
        "linear_quant_methods": {rel: _short(d.get("quant_method")) for rel, d in (layer.get("linear") or {}).items()},
    }


def _built_words(b: dict, role: str) -> str:
    parts = []
    att, moe = b["attention"], b["moe"]
    if att:
        parts.append(f"{att['class']} on {att['backend']} ({att['impl']}"
                     + (f", prefill {att['prefill_backend']}" if att.get("prefill_backend") else "")
                     + (f", sliding window {att['sliding_window']}" if att.get("sliding_window") else "") + ")")
    parts += b["other"]
    if moe:
        parts.append(f"{moe['class']} ({moe['router']}, {moe['quant_method']}" + (f", kernel {moe['kernel']}" if moe["kernel"] else "") + ")")
    methods = sorted({m for m in b["linear_quant_methods"].values() if m})
    if methods:
        parts.append("linear " + "/".join(methods))
    owner = "drafter " if role == "drafter" else ""
    return f"{b['layer']}: {owner}{b['class']}" + (" — " + ", ".join(parts) if parts else "")


def _row_path(row: dict, plan: dict, out: Path, opts, layers: dict, readings: dict, why: str | None, lost: str | None) -> dict:
    planned = planned_layer_names(row, plan)
    if not row.get("kept"):
        return _entry(row, [], NOT_EXECUTED, "not kept in this output: no layer of this kind was written")
    if why:
        return _entry(row, planned, UNVERIFIED, why)
    found = _find_layers(row, plan, layers)
    names = [f or p for f, p in zip(found, planned)]
    spec_words = (f"served without speculative decoding: `mxtrim validate {out} --serve --speculative` sends the request "
                  "that reaches it (vLLM builds the MTP drafter only with speculative decoding)")
    if None in found:
        if row.get("submodel") == "mtp" and not opts.speculative_mtp:
            return _entry(row, names, NOT_EXECUTED, spec_words)
        missing = ", ".join(p for f, p in zip(found, planned) if f is None)
        return _entry(row, names, UNVERIFIED, f"not found among the layers the engine built: {missing}")
    built = [_built(n, layers[n]) for n in names]
    per_request = {}
    for check, reading in readings.items():
        per_request[check] = {n: dict(reading["counts"].get(_count_key(layers[n]), {"calls": 0, "prefill_tokens": 0, "decode_tokens": 0}))
                              for n in names}
    fields = {"built": built, "executed": per_request}
    if readings:
        seen = sorted({label for r in readings.values() for label in r["seen"]})
        fields["ranks"] = {"seen": seen, "agree": all(r["agree"] for r in readings.values())}
    words = ["built: " + "; ".join(_built_words(b, layers[b["layer"]].get("role")) for b in built)]
    calls = {n: sum(c[n]["calls"] for c in per_request.values()) for n in names}
    if per_request:
        ran = []
        for check, by_layer in per_request.items():
            ran.append(f"{check}: " + ", ".join(f"{n} {c['calls']} forward calls ({c['prefill_tokens']} prefill + {c['decode_tokens']} decode tokens)"
                                                for n, c in by_layer.items()))
        words.append("executed: " + "; ".join(ran))
    experts_words = _experts(built, readings, fields)
    if experts_words:
        words.append(experts_words)
    if fields.get("ranks") and not fields["ranks"]["agree"]:
        words.append("the tensor-parallel ranks disagree on these counts (" + ", ".join(fields["ranks"]["seen"]) + ")")
    failed = sorted({e for r in readings.values() for n in names for e in _layer_errors(layers[n], r["errors"])})
    if failed:
        why = f"mxtrim's probe failed in the engine ({'; '.join(failed)[:300]}): the counts are incomplete"
        return _entry(row, names, UNVERIFIED, "; ".join([why] + words), why, **fields)
    if not per_request:
        why = lost or "no request was measured"
        return _entry(row, names, UNVERIFIED, "; ".join([why] + words), why, **fields)
    if all(calls.values()):
        return _entry(row, names, EXECUTED, "; ".join(words), **fields)
    if row.get("submodel") == "vision":
        reach = "an image request reaches it; validate sends none yet"
    else:
        reach = f"the requests sent did not reach it; the plan's request for it: {row.get('request')}"
    idle = ", ".join(n for n, c in calls.items() if not c)
    why = f"{idle} built but not executed: {reach}"
    return _entry(row, names, NOT_EXECUTED, "; ".join([why] + words), why, **fields)


def _count_key(layer: dict) -> str:
    return f"{layer.get('role')}:{layer['name']}"


def _layer_errors(layer: dict, errors: dict[str, str]) -> list[str]:
    """The probe's failures in a built layer: its own forward hook (``role:name``), those of
    the modules it registered in the forward context (``fc:NAME``), its experts' histograms
    (``experts:NAME``, or a gate of the model's own inside the layer)."""
    own = _count_key(layer)
    context = {d.get("forward_context_name") for kind in ("attention", "moe", "other") for d in layer.get(kind) or []
               if isinstance(d, dict)}
    keys = {own} | {f"{prefix}:{name}" for name in context for prefix in ("fc", "experts")}

    def what(key: str) -> str:
        kind, _, name = key.partition(":")
        name = name.rsplit(":", 1)[-1]
        return f"counting {layer['name']}" if key == own else f"counting {name}" if kind == "fc" else f"counting the experts of {name}"

    return [f"{what(key)}: {error}" for key, error in errors.items() if key in keys or key.startswith(f"experts:{own}.")]


def _experts(built: list[dict], readings: dict, fields: dict) -> str:
    """How many experts of the row's MoE layers received tokens over every request measured."""
    moes = [(b["layer"], b["moe"]) for b in built if b["moe"]]
    if not moes or not readings:
        return ""
    per_layer, words = {}, []
    for name, moe in moes:
        if moe["monolithic"]:
            words.append(f"{name}: experts unverified (a monolithic MoE kernel chooses them inside the kernel)")
            continue
        hist: list[int] = []
        for reading in readings.values():
            h = reading["experts"].get(moe["forward_context_name"]) or []
            hist.extend([0] * (len(h) - len(hist)))
            for i, n in enumerate(h):
                hist[i] += n
        total = moe["experts"] or len(hist)
        hist.extend([0] * (total - len(hist)))
        per_layer[name] = hist
        hit = sum(1 for n in hist if n)
        words.append(f"{hit} of {total} experts received tokens" + (f" in {name}" if len(moes) > 1 else ""))
    if per_layer:
        fields["experts_per_layer"] = per_layer
        fields["experts_hit"] = min(sum(1 for n in h if n) for h in per_layer.values())
        fields["experts"] = max(len(h) for h in per_layer.values())
    return "; ".join(words)
