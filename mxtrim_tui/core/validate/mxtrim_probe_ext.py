"""mxtrim's engine probe: a vLLM worker extension that says which module classes the engine
built for each decoder layer and counts what the served requests executed, per layer, per rank.

It runs inside vLLM's worker processes, in the server's own interpreter, never in mxtrim's:
validate copies this file alone into a folder of the run, puts that folder first on the
server's PYTHONPATH for that run only, and starts the server with
``--worker-extension-cls mxtrim_probe_ext.MxtrimProbe`` and ``VLLM_SERVER_DEV_MODE=1``. vLLM
mixes the class into its worker class (``WorkerWrapperBase.init_worker``: it refuses an
attribute the worker already has, hence the ``mxtrim_probe_`` / ``_mxtrim_`` prefixes) and
mxtrim calls it over HTTP, ``POST /collective_rpc``, which gathers one answer per rank:

    {"method": "mxtrim_probe_install"}   hooks on (once); returns what this rank built
    {"method": "mxtrim_probe_reset"}     counters to zero
    {"method": "mxtrim_probe_report"}    counters since the last reset (and callbacks that failed)

It only observes: forward pre-hooks that count calls and the step's tokens (prefill and decode,
as vLLM's attention metadata splits them), and a callback chained onto each MoE router's
``capture_fn`` (vLLM's own routed-experts capture point) that histograms the expert ids the
router chose. The model, its weights and the kernels it runs are left as they are. Hooks fire
only in eager mode: under torch.compile or CUDA graphs every counter stays 0, so mxtrim reads
the compilation mode from ``config`` and never takes a zero there for "not executed".

Standard library only at import time (vLLM and torch are imported inside the methods): a
module vLLM cannot import stops the server's start-up. Nothing of mxtrim is imported.
"""

from __future__ import annotations

import json
import os
import re
import time
import weakref

SCHEMA = "mxtrim.engine-probe/1"
_LAYER = re.compile(r"(?:^|\.)(?:layers|blocks)\.(\d+)$")  # a decoder (or vision) layer module
_IN_LAYER = re.compile(r"(?:^|\.)(?:layers|blocks)\.(\d+)(?:\.|$)")  # any module inside one
_KERNEL_ATTRS = ("kernel", "linear_kernel", "fp8_linear", "w8a8_block_fp8_linear", "moe_kernel",
                 "moe_mk", "fused_experts", "experts", "prepare_finalize", "impl", "experts_cls")


def _cls(obj):
    if obj is None:
        return None
    t = obj if isinstance(obj, type) else type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _kernels(obj, depth=0, seen=None):
    """Class names of the kernel objects a quantization method holds (two levels down)."""
    seen = seen if seen is not None else set()
    out = {}
    if obj is None or depth > 2 or id(obj) in seen:
        return out
    seen.add(id(obj))
    for name in _KERNEL_ATTRS:
        try:
            val = getattr(obj, name, None)
        except Exception:  # a property that asserts
            continue
        if val is None or isinstance(val, (str, int, float, bool, list, tuple, dict)):
            continue
        if callable(val) and not hasattr(val, "__dict__"):
            continue
        out[name] = _cls(val)
        for k, v in _kernels(val, depth + 1, seen).items():
            out[f"{name}.{k}"] = v
    return out


def _backend_name(backend):
    try:
        return backend.get_name()
    except Exception:
        return _cls(backend)


def _plain(value):
    """A value msgpack and JSON carry: numbers, text, None, lists of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _forward_module(lname, mod):
    """("attention" | "moe" | "other", its description): a module of vLLM's forward context."""
    if hasattr(mod, "impl") and hasattr(mod, "attn_backend"):
        window = getattr(mod, "sliding_window", None) or getattr(mod.impl, "sliding_window", None)
        d = {"forward_context_name": lname, "module": _cls(mod), "backend": _backend_name(mod.attn_backend),
             "impl": _cls(mod.impl), "kv_cache_dtype": _plain(getattr(mod, "kv_cache_dtype", None)),
             "sliding_window": _plain(window), "num_heads": _plain(getattr(mod, "num_heads", None)),
             "head_size": _plain(getattr(mod, "head_size", None))}
        prefill = getattr(mod, "prefill_backend", None)
        if prefill is not None:
            d["prefill_backend"] = _cls(prefill)
        return "attention", d
    if hasattr(mod, "router") and hasattr(mod, "routed_experts"):
        qm = getattr(mod.routed_experts, "quant_method", None)
        d = {"forward_context_name": lname, "module": _cls(mod), "router": _cls(mod.router),
             "quant_method": _cls(qm), "is_monolithic": bool(getattr(qm, "is_monolithic", False)),
             "global_num_experts": _plain(getattr(mod.router, "global_num_experts", None)),
             "top_k": _plain(getattr(mod.router, "top_k", None)),
             "local_num_experts": _plain(getattr(mod.routed_experts, "local_num_experts", None))}
        d.update({f"kernel.{k}": v for k, v in _kernels(qm).items()})
        config = getattr(mod, "moe_config", None)
        for f in ("tp_size", "dp_size", "ep_size", "use_ep", "is_sequence_parallel"):
            try:
                d[f"moe_config.{f}"] = _plain(getattr(config, f))
            except Exception:
                pass
        return "moe", d
    d = {"forward_context_name": lname, "module": _cls(mod)}
    backend = getattr(mod, "get_attn_backend", None)  # Mamba / linear attention layers
    if callable(backend):
        try:
            d["backend"] = _backend_name(backend())
        except Exception:
            pass
    return "other", d


class MxtrimProbe:
    """Mixed into vLLM's worker class (``Worker.__bases__ += (MxtrimProbe,)``)."""

    # ---- what was built ------------------------------------------------------------------
    def _mxtrim_models(self):
        runner = self.model_runner
        models = {"target": runner.get_model()}
        draft = None
        if hasattr(runner, "get_draft_model"):  # model runner V2 (GPU default in vLLM 0.32)
            try:
                draft = runner.get_draft_model()
            except Exception:
                draft = None
        if draft is None:  # model runner V1 and the CPU runner: the proposer holds the model
            draft = getattr(getattr(runner, "drafter", None), "model", None)
        if draft is not None and draft is not models["target"]:
            models["drafter"] = draft
        return models

    def _mxtrim_ranks(self):
        from vllm.distributed import parallel_state as ps

        out = {"rank": getattr(self, "rank", None), "pid": os.getpid()}
        try:
            out["tp"] = ps.get_tensor_model_parallel_rank()
            out["tp_size"] = ps.get_tensor_model_parallel_world_size()
        except Exception:
            out["tp"], out["tp_size"] = None, None
        for key, fn in (("pp", "get_pp_group"), ("dp", "get_dp_group")):
            try:
                group = getattr(ps, fn)()
                out[key], out[key + "_size"] = group.rank_in_group, group.world_size
            except Exception:
                out[key], out[key + "_size"] = None, None
        return out

    def _mxtrim_config(self):
        c = self.vllm_config
        spec = c.speculative_config
        cc = c.compilation_config
        mode = getattr(cc, "mode", None)
        cudagraph = getattr(cc, "cudagraph_mode", None)
        att = getattr(c, "attention_config", None)
        return {
            "dtype": str(c.model_config.dtype).replace("torch.", ""),
            "quantization": _plain(c.model_config.quantization),
            "kv_cache_dtype": _plain(c.cache_config.cache_dtype),
            "enforce_eager": bool(c.model_config.enforce_eager),
            "compilation_mode": int(mode) if mode is not None else None,
            "cudagraph_mode": getattr(cudagraph, "name", None) or _plain(cudagraph),
            "speculative_method": _plain(getattr(spec, "method", None)),
            "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None),
            "attention_backend_requested": _plain(getattr(att, "backend", None)) if att is not None else None,
            "model_runner": _cls(self.model_runner),
            "worker": _cls(self),
        }

    def _mxtrim_inventory(self):
        ctx = self.vllm_config.compilation_config.static_forward_context
        models = self._mxtrim_models()
        owner = {}
        layers = {}  # "role:name" -> description
        for role, model in models.items():
            for name, mod in model.named_modules():
                owner[id(mod)] = (role, name)
                m = _LAYER.search(name)
                if m:
                    layers[f"{role}:{name}"] = {
                        "role": role, "name": name, "index": int(m.group(1)), "class": _cls(mod),
                        "on_this_rank": type(mod).__name__ != "PPMissingLayer",
                        "attention": [], "moe": [], "linear": {}, "other": []}

        def layer_of(role, name):
            """The innermost layer that holds the module ``name`` of ``role`` (None: none)."""
            found, m = None, _IN_LAYER.search(name)
            while m:
                found = layers.get(f"{role}:{name[: m.end()].rstrip('.')}") or found
                m = _IN_LAYER.search(name, m.end() - 1)
            return found

        for role, model in models.items():  # linear layers and their quantization methods
            for name, mod in model.named_modules():
                qm = getattr(mod, "quant_method", None)
                if qm is None or "LinearMethod" not in type(qm).__name__:
                    continue
                lay = layer_of(role, name)
                if lay is None:
                    continue
                desc = {"module": _cls(mod), "quant_method": _cls(qm)}
                desc.update({f"kernel.{k}": v for k, v in _kernels(qm).items()})
                scheme = getattr(mod, "scheme", None)
                if scheme is not None:
                    desc["scheme"] = _cls(scheme)
                    desc.update({f"scheme.{k}": v for k, v in _kernels(scheme).items()})
                lay["linear"][name[len(lay["name"]) + 1:]] = desc

        # attention / MLA / Mamba layers and MoE runners, as vLLM registered them for its forward context
        for lname, mod in ctx.items():
            role, mname = owner.get(id(mod), (None, lname))
            lay = layer_of(role, mname) if role else None
            if lay is not None:
                kind, desc = _forward_module(lname, mod)
                lay[kind].append(desc)
        return {"schema": SCHEMA, "config": self._mxtrim_config(), "ranks": self._mxtrim_ranks(),
                "layers": sorted(layers.values(), key=lambda v: (v["role"], v["name"]))}

    # ---- what ran -------------------------------------------------------------------------
    def _mxtrim_step(self):
        """This forward pass's tokens, split as vLLM's backends split them (a query of at most
        1 + speculative tokens is a decode), from the attention metadata of the forward
        context; computed once per forward pass."""
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if not is_forward_context_available():
            return None
        fc = get_forward_context()
        last = self._mxtrim_state.get("fc")
        if last is not None and last() is fc:
            return self._mxtrim_state["step"]
        md_all = fc.attn_metadata
        if isinstance(md_all, dict):
            mds = [next(iter(md_all.values()))] if md_all else []
        elif isinstance(md_all, list):  # micro-batches (DBO)
            mds = [next(iter(d.values())) for d in md_all if d]
        else:
            mds = []
        spec = self.vllm_config.speculative_config
        threshold = 1 + (getattr(spec, "num_speculative_tokens", 0) or 0)
        step = {"prefill_tokens": 0, "decode_tokens": 0, "known": False}
        for md in mds:
            qsl = getattr(md, "query_start_loc_cpu", None)
            if qsl is None:
                qsl = getattr(md, "query_start_loc", None)
            if qsl is None:  # metadata without query_start_loc (FlashInfer): the backend's own split
                nd, npf = getattr(md, "num_decode_tokens", None), getattr(md, "num_prefill_tokens", None)
                if nd is None:
                    continue
                if npf is None:
                    npf = int(getattr(md, "num_actual_tokens", nd)) - int(nd)
                step["decode_tokens"] += int(nd)
                step["prefill_tokens"] += int(npf)
                step["known"] = True
                continue
            starts = [int(x) for x in qsl.tolist()]
            lens = [b - a for a, b in zip(starts, starts[1:])]
            n_actual = getattr(md, "num_actual_tokens", None)
            if n_actual is not None:  # padded request slots past the real tokens are dropped
                kept, total = [], 0
                for q in lens:
                    if total >= n_actual:
                        break
                    kept.append(q)
                    total += q
                lens = kept
            for q in lens:
                if q > 0:
                    step["decode_tokens" if q <= threshold else "prefill_tokens"] += q
            step["known"] = True
        # kept for the pass's other layers only once read whole: metadata that cannot be read
        # fails each layer's count of this pass, never hands them an earlier pass's tokens
        self._mxtrim_state["step"] = step
        try:
            self._mxtrim_state["fc"] = weakref.ref(fc)
        except TypeError:
            self._mxtrim_state["fc"] = lambda fc=fc: fc
        return step

    def _mxtrim_failed(self, key, exc):
        """A callback that failed: recorded (the first error per counter), never raised into
        the engine's forward pass; mxtrim reports the rows it counts unverified."""
        self._mxtrim_state.setdefault("errors", {}).setdefault(key, f"{type(exc).__name__}: {str(exc)[:200]}")

    def _mxtrim_count(self, key, args):
        t0 = time.perf_counter()
        try:
            c = self._mxtrim_counts.get(key)
            if c is None:
                c = self._mxtrim_counts[key] = {"calls": 0, "prefill_tokens": 0, "decode_tokens": 0, "rows": 0}
            c["calls"] += 1
            step = self._mxtrim_step()
            if step and step["known"]:
                c["prefill_tokens"] += step["prefill_tokens"]
                c["decode_tokens"] += step["decode_tokens"]
            else:  # no attention metadata (a vision encoder, an attention-free step): rows of the input
                for a in args:
                    if hasattr(a, "shape") and len(a.shape) >= 1:
                        c["rows"] += int(a.shape[0])
                        break
        except Exception as exc:
            self._mxtrim_failed(key, exc)
        finally:
            self._mxtrim_state["hook_s"] = self._mxtrim_state.get("hook_s", 0.0) + time.perf_counter() - t0

    def _mxtrim_histogram(self, lname, topk_ids, n):
        """Add the chosen expert ids to the layer's histogram. With the number of experts known
        it stays on the device (a scatter-add into a tensor of that size: no copy to the host,
        no synchronisation per call); ids outside 0..n-1 (-1: a padded row, an expert of
        another rank) are left out."""
        import torch

        ids = topk_ids.reshape(-1).long()
        if n > 0:
            hist = self._mxtrim_hist.get(lname)
            if hist is None:
                hist = self._mxtrim_hist[lname] = torch.zeros(n, dtype=torch.long, device=ids.device)
            hist.index_add_(0, ids.clamp(0, n - 1), ((ids >= 0) & (ids < n)).long())
            return
        # a router that does not say how many experts: sized by the ids themselves (a host sync)
        h = torch.bincount(ids[ids >= 0])
        old = self._mxtrim_hist.get(lname)
        m = max(old.numel() if old is not None else 0, h.numel())
        pad = torch.nn.functional.pad
        self._mxtrim_hist[lname] = pad(h, (0, m - h.numel())) + (pad(old, (0, m - old.numel())) if old is not None else 0)

    def _mxtrim_capture(self, lname, router):
        """Chain a histogram of the chosen expert ids onto the router's capture callback."""
        n = 0
        for attr in ("global_num_experts", "num_logical_experts", "num_experts"):  # vLLM's routers; V4's MegaMoE
            value = getattr(router, attr, None)
            if type(value) is int and value > 0:
                n = value
                break
        prev = getattr(router, "capture_fn", None)

        def capture(topk_ids, *rest, lname=lname, n=n, prev=prev):
            t0 = time.perf_counter()
            try:
                self._mxtrim_histogram(lname, topk_ids, n)
            except Exception as exc:
                self._mxtrim_failed(f"experts:{lname}", exc)
            finally:
                self._mxtrim_state["capture_s"] = self._mxtrim_state.get("capture_s", 0.0) + time.perf_counter() - t0
            if prev is not None:  # vLLM's own capture, as it was
                prev(topk_ids, *rest)

        if hasattr(router, "set_capture_fn"):
            router.set_capture_fn(capture)
        else:
            router.capture_fn = capture

    def mxtrim_probe_install(self, *_):
        """Register the hooks (once) and return this rank's inventory of what was built."""
        import torch

        if getattr(self, "_mxtrim_installed", False):
            return {"installed": "already", **self._mxtrim_inventory()}
        t0 = time.perf_counter()
        self._mxtrim_state, self._mxtrim_counts, self._mxtrim_hist, self._mxtrim_handles = {}, {}, {}, []
        hooked = 0
        for role, model in self._mxtrim_models().items():
            for name, mod in model.named_modules():
                if _LAYER.search(name):
                    key = f"{role}:{name}"
                    self._mxtrim_handles.append(mod.register_forward_pre_hook(
                        lambda m, args, key=key: self._mxtrim_count(key, args)))
                    hooked += 1
                if hasattr(mod, "capture_fn") and hasattr(mod, "layer_id") and not hasattr(mod, "set_capture_fn"):
                    self._mxtrim_capture(f"{role}:{name}", mod)  # a model's own gate (vLLM's RoutedExpertsCaptureSource)
        for lname, mod in self.vllm_config.compilation_config.static_forward_context.items():
            if not isinstance(mod, torch.nn.Module):
                continue
            self._mxtrim_handles.append(mod.register_forward_pre_hook(
                lambda m, args, key=f"fc:{lname}": self._mxtrim_count(key, args)))
            hooked += 1
            router = getattr(mod, "router", None)
            if router is not None and hasattr(router, "set_capture_fn"):
                self._mxtrim_capture(lname, router)
        self._mxtrim_installed = True
        inv = self._mxtrim_inventory()
        inv.update(installed=True, hooks=hooked, install_s=round(time.perf_counter() - t0, 4))
        return inv

    def mxtrim_probe_reset(self, *_):
        if not getattr(self, "_mxtrim_installed", False):
            return {"installed": False}
        self._mxtrim_counts.clear()
        self._mxtrim_hist.clear()
        for key in ("hook_s", "capture_s", "errors"):
            self._mxtrim_state.pop(key, None)
        return {"reset": True, "ranks": self._mxtrim_ranks()}

    def mxtrim_probe_report(self, *_):
        """This rank's counters since the last reset, and the callbacks that failed meanwhile.
        Also written to $MXTRIM_PROBE_DIR (the folder mxtrim gave the server; never a folder
        named by the caller), one file per rank: over HTTP, collective_rpc answers with the
        first engine's ranks only when DP > 1, and every engine runs the call."""
        if not getattr(self, "_mxtrim_installed", False):
            return {"installed": False, "ranks": self._mxtrim_ranks()}
        experts = {}
        for lname, h in self._mxtrim_hist.items():
            experts[lname] = [int(x) for x in h.tolist()]
        out = {"schema": SCHEMA, "installed": True, "ranks": self._mxtrim_ranks(), "config": self._mxtrim_config(),
               "counts": {k: dict(v) for k, v in self._mxtrim_counts.items()}, "experts": experts,
               "errors": dict(self._mxtrim_state.get("errors", {})),
               "overhead_s": {"hooks": round(self._mxtrim_state.get("hook_s", 0.0), 6),
                              "expert_capture": round(self._mxtrim_state.get("capture_s", 0.0), 6)}}
        target = os.environ.get("MXTRIM_PROBE_DIR", "")
        if target:
            r = out["ranks"]
            path = os.path.join(target, f"probe-dp{r.get('dp')}-pp{r.get('pp')}-tp{r.get('tp')}.json")
            os.makedirs(target, exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(out, f)
            os.replace(path + ".tmp", path)
        return out
