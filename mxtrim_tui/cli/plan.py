"""`mxtrim plan`: what a trim would do (the plan, the GPUs, the budget), the source shards it
reads (``--fetch-list``), or the plan file a later `trim --plan` runs (``--save``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .arguments import selection_args
from .trim_request import blocking_line, budget_inputs, checked_plan, runtime_limit_lines, serve_inputs, trim_request


def register(sub) -> None:
    pl = sub.add_parser("plan", help="show what a trim would do; writes nothing but the plan file asked for (--save)")
    selection_args(pl)
    pl.add_argument("--save", type=Path, metavar="FILE",
                    help="write the plan file (schema mxtrim.plan-file/1: source pinned, selection, serve settings, "
                    "mode, output) for mxtrim trim --plan FILE; never over an existing file")
    pl.add_argument("--mode", choices=["dummy", "weights"], help="with --save: the mode the plan file's trim writes")
    pl.add_argument("--out", type=Path, help="with --save: the output directory the plan file's trim writes")
    pl.add_argument("--tensors", action="store_true", help="with --json: list every tensor rename and drop")
    pl.add_argument("--fetch-list", action="store_true",
                    help="print only the source shards a real-weight trim reads, one file name per line: every one "
                    "of them, those already on disk included (stderr says how many are missing)")
    pl.add_argument("--python", metavar="PY",
                    help="the interpreter of the environment that will run the output: the transformers checks run in it "
                    "(default: $MXTRIM_VLLM_PYTHON, the wizard's kept setting, else this interpreter)")
    pl.set_defaults(handler=run)


def run(args) -> int:
    from ..core.write.remote_source import RemoteSources

    remote = RemoteSources()  # a remote source is read into a temporary folder, removed at the end
    try:
        return _run(args, trim_request(args, remote))
    finally:
        remote.close(written=False)


def _run(args, request) -> int:
    raw = request.serve
    if args.save is not None:  # a place that cannot take the plan file: said before the plan's check
        from ..core.plan.plan_file import check_save_location

        check_save_location(args.save)
    plan = checked_plan(request)
    from ..core.plan.blockers import write_blockers

    blocking = write_blockers(plan, serve_inputs(plan, raw), None)
    # what the vLLM in use cannot serve of the output this plan makes (DeepSeek-V4 dummy, 0.26-0.28)
    limits = [] if blocking or args.fetch_list else runtime_limit_lines(plan, args.mode, args.python)
    if args.fetch_list:
        from ..core.plan.needed_shards import needed_shards

        needed = needed_shards(plan)
        for shard in needed:  # one name per line, for a downloader (which skips what it already has)
            print(shard.file)
        missing = sum(1 for shard in needed if not shard.present)
        sys.stdout.flush()
        print(f"mxtrim: {len(needed)} shard(s) listed, those on disk included: {len(needed) - missing} on disk, "
              f"{missing} missing", file=sys.stderr)
    elif args.json:
        from ..core.plan.plan_json import plan_to_json
        from ..core.probe.gpu import probe_gpus, probe_json

        probe = probe_gpus()  # the GPUs read: what the budget's memory figure comes from
        doc = plan_to_json(plan, with_tensors=args.tensors, serve=budget_inputs(plan, raw, probe)) | {"gpus": probe_json(probe)}
        if plan.inventory.source.origin:
            doc["remote"] = remote_download(plan)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        for line in limits:
            print(f"mxtrim: warning: {line}", file=sys.stderr)
    else:
        from rich.console import Console
        from rich.text import Text

        from ..core.plan.budget import compute_budget
        from ..core.probe.gpu import probe_gpus
        from ..render import render_budget, render_gpus, render_plan

        console = Console()
        # a selection that keeps nothing is no plan to show: its error line below says why; the
        # errors of a plan shown are said once, by that line
        if not (blocking and plan.errors and plan.new_depth == 0):
            render_plan(plan, console, repo=args.repo, errors=not blocking)
            probe = probe_gpus()
            render_gpus(probe, console, gpu_memory_flag="gpu_gib" in raw)
            render_budget(compute_budget(plan, budget_inputs(plan, raw, probe)), console)
            for line in limits:  # beside the budget's "fits": the vLLM in use may not start it at all
                console.print(Text(f"warning: {line}", style="yellow"), soft_wrap=True)
            if plan.inventory.source.origin:
                from ..core.units import human_bytes

                fetch = remote_download(plan)
                console.print(f"remote source {plan.inventory.source.origin}: a real-weight trim downloads "
                              f"{human_bytes(fetch['weights_trim_bytes'])} (the kept tensors, by byte ranges) of the "
                              f"repository's {human_bytes(fetch['repository_weight_bytes'])} of weights; a dummy trim "
                              "none (its small files are read already)", markup=False, soft_wrap=True)
    if blocking:
        print(blocking_line(blocking, "; no plan file saved" if args.save else ""), file=sys.stderr)
        return 1
    if args.save is not None:
        _save_plan(request, plan, args.save)
    return 0


def _save_plan(request, plan, path: Path) -> None:
    from ..core.plan.plan_file import plan_document, save_plan_document

    save_plan_document(plan_document(request, plan), path)
    print(f"saved the plan to {path} (run it: mxtrim trim --plan {path})", file=sys.stderr)


def remote_download(plan) -> dict:
    """What a trim of a remote source downloads beyond what the plan read: the kept tensors'
    bytes for a real-weight trim, nothing more for a dummy one."""
    return {"source": plan.inventory.source.origin, "weights_trim_bytes": plan.retained_bytes,
            "dummy_trim_bytes": 0, "repository_weight_bytes": plan.inventory.source.present_tensor_bytes}
