"""`mxtrim trim`: write a trimmed output directory (dummy or real weights), from the flags or a
plan file; then, as asked, its batched_test entry and its validation."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.errors import InputError
from ..core.units import HASHES
from .arguments import UsageError, parse_size, selection_args, validation_args
from .harness_text import print_harness_text
from .progress import WeightsProgress, progress_printer
from .trim_request import blocking_line, budget_inputs, plan_and_check, runtime_limit_lines, serve_inputs, trim_request
from .validation_run import leftover_servers_notice, print_validation, run_validation


def register(sub) -> None:
    tr = sub.add_parser("trim", help="write a trimmed output directory")
    selection_args(tr)
    tr.add_argument("--plan", type=Path, metavar="FILE",
                    help="run the plan file FILE (mxtrim plan ... --save): its source (refused if it changed), selection, "
                    "serve settings, mode and output; SRC, --keep, --mtp and the serve settings are not given then")
    tr.add_argument(
        "--mode",
        choices=["dummy", "weights"],
        help="dummy: config + tokenizer assets for --load-format dummy; weights: a real checkpoint of the kept tensors "
        "(required unless the plan file names it)",
    )
    tr.add_argument("--max-shard-size", type=parse_size, metavar="SIZE", help="weights mode: largest output shard (default 5GB)")
    tr.add_argument("--hash", choices=HASHES,
                    help="weights mode: the digest every copied tensor is verified with and recorded under in manifest.json "
                         "(default xxh3_128, about 9x faster than sha256 here)")
    tr.add_argument("--progress", action="store_true", help="print progress events as JSON lines on stderr")
    tr.add_argument("--out", type=Path, help="output directory (must not exist)")
    tr.add_argument("--validate", action="store_true", help="validate the output once written (offline checks; with --serve a real vllm serve)")
    tr.add_argument("--batched-test-config", type=Path, metavar="FILE",
                    help="append the output's batched_test harness entry to the model YAML FILE (created if absent; "
                    "other entries never rewritten; refused before writing when FILE is malformed or has the name)")
    validation_args(tr)
    tr.add_argument(
        "--workspace",
        type=Path,
        default=Path("."),
        help="root for the default output tools/batched_test/models/<model>-<mode>-<N>layers (default: .)",
    )
    tr.set_defaults(handler=run)


def run(args) -> int:
    from ..core.write.remote_source import RemoteSources

    # a remote source is held in a store beside the output: removed once the output is written,
    # kept to resume from when a real-weight trim fails with kept tensor bytes fetched
    remote = RemoteSources(beside_output=True, workspace=args.workspace)
    written = False
    try:
        code = _run(args, remote)
        written = True
        return code
    finally:
        remote.close(written)


def _run(args, remote) -> int:
    from ..core.write.writer import check_output_location, default_output_dir

    request = trim_request(args, remote)
    if request.mode is None:
        raise UsageError("mxtrim trim: error: --mode is required (dummy or weights) unless the plan file names it")
    raw = request.serve
    from ..core.plan.blockers import write_blockers

    if request.out is not None:  # an output that cannot be written is said at once, not after the plan's check
        check_output_location(request.out, Path(request.source))
    pending = plan_and_check(request)
    plan = pending.plan
    serve = serve_inputs(plan, raw)
    # A real-weight trim copies while transformers checks the plan: the copy starts on the
    # plan as built, and is kept only if the checked plan writes the same tensors and can be
    # written (core/write/weights_writer.py); otherwise it runs as below on the checked plan.
    alongside = request.mode == "weights" and pending.pending and not write_blockers(plan, serve, request.mode, request.repo)
    if not alongside:
        plan = pending.result()
        serve = serve_inputs(plan, raw)
    blocking = write_blockers(plan, serve, request.mode, request.repo)
    if blocking:
        return _refuse_blocked(args, plan, blocking)
    out = request.out if request.out is not None else default_output_dir(plan, args.workspace.resolve(), request.mode)
    from ..core.write.batched_test_entry import check_config
    from ..core.write.weights_writer import PlanChanged

    if args.batched_test_config is not None:  # refused now rather than after the write
        check_config(args.batched_test_config, [Path(os.path.abspath(out)).name])
    try:
        result = _write(args, request, plan, out, serve, pending if alongside else None, remote)
    except PlanChanged as changed:
        # the check made the plan another (an automatic selection widened) or blocked it: the
        # copy is gone, and the trim runs as it would have run had the check come first
        plan = changed.plan
        serve = serve_inputs(plan, raw)
        blocking = write_blockers(plan, serve, request.mode, request.repo)
        if blocking:
            return _refuse_blocked(args, plan, blocking)
        if request.out is None:
            out = default_output_dir(plan, args.workspace.resolve(), request.mode)
            if args.batched_test_config is not None:
                check_config(args.batched_test_config, [Path(os.path.abspath(out)).name])
        result = _write(args, request, plan, out, serve, remote=remote)
    if getattr(result, "plan", None) is not None:
        plan = result.plan  # checked alongside the copy
    harness = _append_harness_entry(args.batched_test_config, result.path) if args.batched_test_config is not None else None
    validation = None
    if args.validate or args.serve or args.equivalence:
        leftover_servers_notice(args)
        validation = run_validation(result.path, args, quiet=args.json)
    # what the vLLM in use cannot serve of this output (DeepSeek-V4 dummy, vLLM 0.26-0.28)
    limits = runtime_limit_lines(plan, request.mode, getattr(args, "python", None))
    if args.json:
        _print_trim_json(request, plan, result, serve, validation, harness, limits)
    else:
        _print_trim_text(request, plan, result, validation, harness, limits)
    if harness is not None and "error" in harness:
        print(f"mxtrim: error: {harness['error']}; the output was written (append its entry later: "
              f"mxtrim batched-test-entry {result.path} --config {args.batched_test_config})", file=sys.stderr)
    return 0 if (validation is None or validation[2]) and not (harness and "error" in harness) else 1


def _refuse_blocked(args, plan, blocking: list[str]) -> int:
    from ..core.plan.plan_json import plan_to_json

    if args.json:
        json.dump(plan_to_json(plan) | {"output": None}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    print(blocking_line(blocking, "; nothing written"), file=sys.stderr)
    return 1


def _append_harness_entry(config: Path, output: Path) -> dict:
    """The batched_test entry of the output just written, appended to ``config``: what was
    appended, or why it was not (the output stays written)."""
    from ..core.write.batched_test_entry import append_entries, entry_for_output

    try:
        return append_entries(config, [entry_for_output(output, config)]).to_json()
    except InputError as exc:
        return {"config": str(config), "error": str(exc)}


def _write(args, request, plan, out: Path, serve, plan_check=None, remote=None):
    """Write the output of ``plan`` at ``out`` (progress events on stderr with --progress);
    ``plan_check``: the plan's transformers check, under way while a real-weight trim copies."""
    from ..core.write.writer import write_dummy

    # a real-weight copy takes minutes on a large source: on a terminal it says how it goes
    progress = progress_printer() if args.progress else WeightsProgress() if request.mode == "weights" else _leftover_notices
    if args.progress:
        progress({"event": "stage", "name": "plan", "status": "done", "kept": plan.kept, "output": str(out)})
    if request.mode == "weights":
        from ..core.write.weights_writer import write_weights

        if remote is not None:  # a remote source: the kept tensors' byte ranges are fetched first
            remote.fetch_kept(plan, request.max_shard_bytes)

        def accept(checked) -> bool:  # the checked plan is written only if it writes as the copied one
            from ..core.plan.blockers import write_blockers

            return serve_inputs(checked, request.serve) == serve and not write_blockers(checked, serve, request.mode, request.repo)

        result = write_weights(plan, out, max_shard_bytes=request.max_shard_bytes, progress=progress, serve=serve,
                               hash_name=request.hash_name, plan_check=plan_check, accept=accept if plan_check is not None else None)
    else:
        result = write_dummy(plan, out, progress=progress, serve=serve)
    from ..core.checks.child import CheckChild

    CheckChild.release()  # the checks are done: their memory goes back before any validation
    if args.progress:
        progress({"event": "result", "output": str(result.path), "files": len(result.files)})
    return result


def _weights_checks(result) -> dict:
    return {
        "integrity": result.integrity,
        "structure": result.structure.to_json(),
        "disk_bytes": result.estimate.total,
        "copy_method": result.copy_method,
        "vllm_load": "unverified",
    }


def _print_trim_json(request, plan, result, serve, validation, harness=None, limits=()) -> None:
    from ..core.plan.plan_json import plan_to_json
    from ..core.write.report import serve_command

    command = serve_command(plan, result.path, request.mode, serve)
    doc = plan_to_json(plan, serve=budget_inputs(plan, request.serve)) | {
        "mode": request.mode, "output": str(result.path), "files": result.files, "serve_command": command,
        "warnings": [*result.warnings, *limits]}
    if request.mode == "weights":
        doc["checks"] = _weights_checks(result)
    if validation is not None:
        doc["validation"] = validation[0].to_json()
    if harness is not None:
        doc["batched_test"] = harness
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _print_trim_text(request, plan, result, validation, harness=None, limits=()) -> None:
    from rich.console import Console
    from rich.text import Text

    from ..render import render_plan

    console = Console()
    render_plan(plan, console, repo=request.repo)
    # paths and check summaries are text, never markup: "[checks]" or a bracket in a path stays as written
    console.print(Text.assemble(("wrote", "bold green"), f" {result.path} ({len(result.files)} files; see README.md there)"))
    for warning in result.warnings:  # also under Warnings in the output's README
        console.print(Text(f"warning: {warning}", style="yellow"))
    for warning in limits:  # of the vLLM in use, not of the output: said here only
        console.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
    if request.mode == "weights":
        integ = result.integrity
        console.print(
            f"checkpoint: {integ['tensors']} tensors in {len(integ['shards'])} shard(s), "
            f"{integ['hashes_matched']} {integ['hash']} hashes matched; index {integ['index']}", markup=False,
        )
        console.print(f"structure: {result.structure.headline}", markup=False)
        if validation is None:
            console.print("vLLM load: unverified (mxtrim validate OUT --serve, or the serve command in README.md)")
    if harness is not None and "error" not in harness:
        print_harness_text(harness)
    if validation is not None:
        print_validation(*validation[:2])


def _leftover_notices(event: dict) -> None:
    """Without --progress, the one event a user should still hear of: a leftover of an
    interrupted run removed."""
    from ..core.progress import LeftoverRemoved, parse_event

    typed = parse_event(event)
    if isinstance(typed, LeftoverRemoved):
        print(f"mxtrim: removed {typed.path}, left by an interrupted run", file=sys.stderr)
