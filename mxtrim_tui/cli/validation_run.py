"""Validating one output as the flags of `validate` (or `trim --validate`) say: the server's
options, the run and its record, and the lines that report it."""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import InputError
from .progress import ValidationProgress, progress_printer


def serve_options(args, out: Path, plan_doc: dict, vllm=None):
    """How a server of ``out`` is started (``plan_doc``: its mxtrim-plan.json; ``vllm``: the
    interpreter already found, else found here); the devices chosen as ``--device`` says."""
    import shlex

    from ..core.user_settings import get_setting
    from ..core.validate.devices import across_ray_cluster, choose_devices
    from ..core.probe.vllm_python import SETTING, find_vllm_python
    from ..core.plan.budget import DEFAULT_GPU_MEMORY_UTILIZATION
    from ..core.validate.serve import (ServeOptions, cpu_attention_backend, cpu_serve_dtype, cpu_threads_refusal,
                                       required_kv_cache_dtype)

    # before anything starts: which interpreter holds vLLM (one line naming every place tried if none)
    vllm = vllm or find_vllm_python(args.python, get_setting(SETTING))
    probe = None
    if args.device != "cpu":
        from ..core.probe.gpu import probe_gpus

        probe = probe_gpus()
    serve = plan_doc.get("serve") or {}
    tp, pp = parallel_sizes(args, serve)
    from ..core.validate.parallel import batch_pids

    backend = getattr(args, "executor_backend", None)
    if backend == "ray":
        choice = across_ray_cluster(args.device, probe, tp * pp)
    else:
        choice = choose_devices(args.device, probe, count=tp * pp, gpus=args.gpus, neighbours=frozenset(batch_pids()))
    device = choice.device
    cpu = device == "cpu"
    if args.speculative and not plan_doc.get("mtp_kept"):
        raise InputError(out / "mxtrim-plan.json", "the output keeps no MTP layer: --speculative has nothing to run")
    opts = ServeOptions(
        python=vllm.python,
        python_origin=vllm.origin,
        entry=vllm.entry,
        device=device,
        gpus=choice.gpus,
        device_note=choice.note,
        refused=choice.refused,
        tp=tp,
        pp=pp,
        expert_parallel=bool(getattr(args, "expert_parallel", None) or serve.get("expert_parallel")),
        executor_backend=backend,
        max_model_len=int(getattr(args, "max_model_len", None) or (256 if cpu else serve.get("max_model_len") or 4096)),
        gpu_memory_utilization=None if cpu else float(getattr(args, "gpu_memory_utilization", None)
                                                      or serve.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION),
        kv_cache_memory_bytes=args.kv_cache_memory_bytes or (64 * 2**20 if cpu else None),
        dtype=cpu_serve_dtype(out) if cpu else None,
        # the output's chosen cache dtype, else what the family requires on a GPU (the CPU
        # build picks its own)
        kv_cache_dtype=(serve.get("kv_cache_dtype") if serve.get("kv_cache_dtype") not in (None, "auto") else None)
        or (None if cpu else required_kv_cache_dtype(out)),
        attention_backend=cpu_attention_backend(out) if cpu else None,
        trust_remote_code=args.trust_remote_code,
        speculative_mtp=1 if args.speculative else 0,
        enforce_eager=not getattr(args, "graph", False),  # --graph: a run of its own, compiled
        launcher=shlex.split(args.launcher) if args.launcher else None,
        startup_timeout=args.timeout,
        gpu_total_bytes=_chosen_gpu_memory(probe, choice.gpus) if not cpu else None,
    )
    # the CPU build's workers each need cores of their own (serve.serve_env binds them)
    opts.refused = opts.refused or cpu_threads_refusal(opts)
    return opts


def parallel_sizes(args, serve: dict) -> tuple[int, int]:
    """(TP, PP) a server of this output runs at: the flags' (trim's are text, already checked),
    else the output's serve settings, else 1."""
    return tuple(int(getattr(args, key, None) or serve.get(key) or 1) for key in ("tp", "pp"))


def _chosen_gpu_memory(probe, gpus: str | None) -> int | None:
    """Memory of the first GPU the server gets (what vLLM's budget is taken from)."""
    if probe is None or not gpus:
        return None
    first = gpus.split(",")[0].strip()
    return next((g.total_bytes for g in probe.gpus if str(g.index) == first), None)


def run_validation(out: Path, args, quiet: bool, vllm=None, offline=None):
    """Validate ``out`` as the flags say (``vllm``: the interpreter already found, else found
    here; ``offline``: a batch's offline checks, offline.OfflineBatch); the result is recorded
    in the output directory."""
    from ..core.validate.record import record
    from ..core.validate.run import read_output, validate

    opts = serve_options(args, out, read_output(out), vllm)
    progress = progress_printer() if getattr(args, "progress", False) else None
    if progress is None and not quiet:
        progress = ValidationProgress()

    serve = args.serve or args.equivalence
    v = validate(out, opts, serve=serve, equivalence=args.equivalence, on_event=progress, offline=offline)
    runs = record(v)
    # asked to serve and could not (busy or absent devices): not a success
    ok = v.ok and not (serve and opts.refused)
    return v, runs, ok


def print_validation(v, runs: int) -> None:
    marks = {"passed": "✓", "failed": "✗", "unverified": "·", "not applicable": "-", "not comparable": "≠", "differs": "≠"}
    version = (v.environment.get("packages", {}).get("vllm") or {}).get("version")
    from ..core.probe.vllm_python import origin_words

    print(f"vLLM {version + ' ' if version else ''}at {v.python} ({origin_words(v.python_origin)})")
    if v.settings:
        print(f"served with: {v.settings_line()}")
    for r in v.rows:
        print(f"{marks.get(r.status, '?')} {r.check}: {r.status}" + (f" — {r.detail}" if r.detail else ""))
        if r.verdict:
            print(f"    {r.verdict['class']}: {r.verdict['summary']}")
            for line in r.verdict["evidence"]:
                print(f"      {line}")
            print(f"    suggested: {r.verdict['advice']}")
    if v.environment.get("warning"):
        print(f"⚠ {v.environment['warning']}")
    if v.mode == "weights":
        print("loadable by this vLLM" if v.loadable else "not shown loadable (needs a real-weight start-up and generation)")
    from ..core.validate.headline import verdict

    for line in verdict(v.to_json())[1]:  # the verdict, and what the server ran at against the planned settings
        print(line)
    print(f"recorded in {v.output / 'validation.json'} (run {runs}) and README.md")


def leftover_servers_notice(args) -> None:
    """Before serving: servers a killed mxtrim left, said in one line (records of gone ones
    removed)."""
    if args.serve or args.equivalence:
        from ..core.validate import leftovers

        found = leftovers.scan()
        if found:
            print(leftovers.notice(found), file=sys.stderr, flush=True)
