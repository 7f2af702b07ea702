"""What `plan` and `trim` are asked for, as a TrimRequest (from their flags, or from
``trim --plan FILE``), its plan with the transformers check started, the serve settings and
budget figures drawn from it, and the one line that says what blocks a write."""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import InputError
from ..core.units import DEFAULT_HASH, DEFAULT_MAX_SHARD_BYTES
from .arguments import SERVE_FLAGS, UsageError


def checked_plan(request):
    """The plan of ``request``, once its transformers check is done."""
    return plan_and_check(request).result()


def plan_and_check(request):
    """The plan of ``request``, its transformers check started: in a child process (torch's
    memory goes back with it), or the verdict kept for these very inputs. ``.plan`` is the
    plan unchecked, ``.result()`` the checked one."""
    from ..core.model.inventory import build_inventory
    from ..core.plan.build import Selection, build_plan
    from ..core.read.source import open_source

    from ..core.checks.plan_outcome import start_plan_check

    inv = build_inventory(open_source(request.source))
    plan = build_plan(inv, Selection.parse(request.keep_list, request.mtp))
    return start_plan_check(plan, force=request.force, request=request)


def _serve_raw(args) -> dict[str, str]:
    """The serve settings given on the command line, as typed; malformed ones are usage errors."""
    from ..core.plan.budget import BudgetInputs, parse_budget_inputs

    raw = {key: getattr(args, key) for key in SERVE_FLAGS.values() if getattr(args, key) is not None}
    _, errors = parse_budget_inputs(raw, BudgetInputs())
    flag = {key: name for name, key in SERVE_FLAGS.items()}
    if errors:
        raise UsageError("\n".join(f"mxtrim: error: {flag[key]}: {message}" for key, message in errors.items()))
    return raw


def trim_request(args, remote=None):
    """What the command is asked to plan or write: its flags, or (trim --plan) the plan file,
    whose source must be the one it was made for. A remote source (``hf://…``) is read into
    a local folder by ``remote`` (core/write/remote_source.py), which the request then names."""
    from ..core.checks.judge import set_runtime_python
    from ..core.plan.plan_file import TrimRequest, load_plan_document, refuse_changed_source

    # the transformers checks run in the runtime's interpreter when it is named (core/checks/judge.py)
    set_runtime_python(getattr(args, "python", None))
    plan_file = getattr(args, "plan", None)
    if plan_file is None:
        if args.source is None:
            raise UsageError(f"mxtrim {args.command}: error: the source directory SRC is required" +
                             (" (or --plan FILE)" if args.command == "trim" else ""))
        held = remote.local(args.source, args.out) if remote is not None else None
        return TrimRequest(
            # absolute, as a plan file records it: the output says the same whichever way it was asked
            source=held or Path(os.path.abspath(args.source)), keep=tuple(args.keep) if args.keep else None, mtp=args.mtp, force=args.force,
            mode=args.mode, out=args.out, serve=_serve_raw(args), repo=args.repo,
            max_shard_bytes=getattr(args, "max_shard_size", None) or DEFAULT_MAX_SHARD_BYTES,
            hash_name=getattr(args, "hash", None) or DEFAULT_HASH,
        )
    given = [flag for flag, present in (("SRC", args.source), ("--keep", args.keep), ("--mtp/--no-mtp", args.mtp is not None),
                                        ("--force", args.force), ("--max-shard-size", args.max_shard_size), ("--hash", args.hash))
             if present] + [flag for flag, key in SERVE_FLAGS.items() if getattr(args, key) is not None]
    if given:
        raise UsageError(f"mxtrim trim: error: --plan holds the source, selection, serve settings and options: "
                         f"not {', '.join(given)} too (make another plan with mxtrim plan ... --save)")
    request, pins = load_plan_document(plan_file)
    if isinstance(request.source, str):  # a remote source, pinned to its commit
        if remote is None:
            raise InputError(plan_file, f"its source {request.source} is remote: give it to mxtrim trim --plan")
        from dataclasses import replace as _replace

        request = _replace(request, source=remote.local(request.source, args.out or request.out))
    if args.mode is not None and request.mode is not None and args.mode != request.mode:
        raise UsageError(f"mxtrim trim: error: --mode {args.mode}: the plan file's mode is {request.mode}")
    refuse_changed_source(plan_file, request, pins)
    from dataclasses import replace

    from ..core.plan.budget import BudgetInputs, parse_budget_inputs

    _, errors = parse_budget_inputs(request.serve, BudgetInputs())
    if errors:
        raise InputError(plan_file, "serve." + "; serve.".join(f"{k}: {m}" for k, m in errors.items()))
    return replace(request, mode=args.mode or request.mode, out=args.out or request.out, repo=args.repo or request.repo)


def serve_inputs(plan, raw: dict[str, str]):
    """The serve settings (the report's defaults where not given), or None when none given
    (``--gpu-memory`` alone is a budget figure, not a serve setting)."""
    if not set(raw) - {"gpu_gib"}:
        return None
    from ..core.plan.budget import default_serve, parse_budget_inputs

    return parse_budget_inputs(raw, default_serve(plan))[0]


def budget_inputs(plan, raw: dict[str, str], probe=None):
    """What the budget is computed for: the serve settings given (the report's defaults
    elsewhere) and the GPU memory: --gpu-memory, else the first visible GPU's (``probe``: the
    GPUs already read, else read here)."""
    from dataclasses import replace

    from ..core.plan.budget import default_serve, parse_budget_inputs

    inputs = parse_budget_inputs(raw, default_serve(plan))[0]
    if inputs.gpu_total_bytes is None:
        from ..core.probe.gpu import probe_gpus

        probe = probe if probe is not None else probe_gpus()
        if probe.available and probe.gpus and probe.gpus[0].total_bytes:
            inputs = replace(inputs, gpu_total_bytes=probe.gpus[0].total_bytes)
    return inputs


def blocking_line(blocking: list[str], then: str = "") -> str:
    """What blocks the write (core/plan/blockers.py), as the one error line every failure gets."""
    from ..core.errors import one_line

    return "mxtrim: error: " + one_line("; ".join(blocking) + then)


def runtime_limit_lines(plan, mode: str | None, python: str | None) -> list[str]:
    """What some vLLM releases cannot serve of this output (the family's runtime_limits), said
    when the vLLM that will serve it, found as validation finds it (``python``: --python), is
    one of those releases or none is found. ``mode`` None (a plan without --mode): dummy when
    the source holds no weights (a real-weight trim cannot be made), else nothing to say."""
    from ..core.read.source import CONFIG_ONLY, INDEX_ONLY

    weights_possible = plan.inventory.source.state not in (CONFIG_ONLY, INDEX_ONLY)
    mode = mode or (None if weights_possible else "dummy")
    limits = [limit for limit in plan.inventory.family.runtime_limits if limit.mode == mode]
    if not limits:
        return []
    from ..core.probe.vllm_python import SETTING, VllmNotFound, find_vllm_python, origin_words
    from ..core.user_settings import get_setting

    try:
        found = find_vllm_python(python, get_setting(SETTING))
        version, where = found.version, origin_words(found.origin)
    except VllmNotFound:  # none found, or the one named holds no vLLM: whether it is affected is unknown
        version, where = None, ""
    return [limit.warning(version, where, weights_possible) for limit in limits if limit.affects(version) is not False]
