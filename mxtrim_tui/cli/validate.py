"""`mxtrim validate`: prove an output (offline loads, then with --serve a real vllm serve with
requests); several outputs or ``--all`` go to validate_many.py."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from .arguments import UsageError, hidden_debug, validation_args
from .validate_many import validate_many
from .validation_run import leftover_servers_notice, print_validation, run_validation


def register(sub) -> None:
    va = sub.add_parser("validate", help="prove an output: offline loads, then (--serve) a real vllm serve with requests")
    va.add_argument("output", metavar="OUT", nargs="*", type=Path,
                    help="directories written by mxtrim trim; several: one after the other, with a matrix of every output × check")
    va.add_argument("--all", metavar="FOLDER", nargs="?", const="", dest="all_in",
                    help="every mxtrim output in FOLDER (default: ./tools/batched_test/models/)")
    va.add_argument("--again", action="store_true",
                    help="with several outputs: also those already validated with the same interpreter and versions")
    va.add_argument("--matrix", metavar="DIR", type=Path,
                    help="where validation-matrix.md / .json go (default: the --all folder, else the current directory)")
    va.add_argument("--jobs", type=_jobs, default=1, metavar="N|auto",
                    help="with several outputs: up to N servers side by side (auto: as many as the GPUs take), each on "
                    "GPUs free of other workloads, small ones sharing a GPU by their --gpu-memory-utilization shares, "
                    "never two profiling memory on one GPU at once (default 1: one after the other)")
    va.add_argument("--starting", type=_jobs, metavar="N",
                    help="with --jobs: at most N servers in their CPU start-up at once (before their engine takes the GPU), "
                    "so the first reach their memory measurement sooner (default, or auto: no limit)")
    va.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                    help="validate the outputs as tasks of a Ray cluster (auto, the default: $RAY_ADDRESS or the cluster "
                    "running here), each on a node with the GPUs it needs, in that node's interpreter; the outputs must "
                    "lie on a filesystem every node mounts (needs mxtrim-tui[ray])")
    va.add_argument("--retries", type=_retries, default=0, metavar="N",
                    help="with --ray: run a validation lost with its node (or its worker) again, up to N times (default 0)")
    va.add_argument("--gpu-memory-utilization", type=_share, metavar="F",
                    help="the share of a GPU's memory each server may use, in (0, 1] (default: the output's serve settings)")
    validation_args(va)
    va.add_argument("--tp", type=_ranks, default=1, metavar="N", help="tensor parallel size (default 1)")
    va.add_argument("--pp", type=_ranks, default=1, metavar="N",
                    help="pipeline parallel size (default 1); the server takes TP × PP GPUs")
    va.add_argument("--ep", "--enable-expert-parallel", dest="expert_parallel", action="store_true", default=None,
                    help="serve with expert parallelism (default: the output's serve settings)")
    va.add_argument("--distributed-executor-backend", dest="executor_backend", choices=("mp", "ray"), metavar="mp|ray",
                    help="vLLM's executor for the TP × PP workers (default: vLLM's choice); ray: vLLM's Ray executor "
                    "places them over the nodes of the Ray cluster at $RAY_ADDRESS (a server larger than one node; "
                    "with --ray, chosen for such a server)")
    va.add_argument("--max-model-len", type=int, metavar="N", help="context of the server (default: 256 on CPU, the output's serve settings on GPU)")
    va.add_argument("--json", action="store_true", help="print the validation as JSON (schema mxtrim.validation/1)")
    va.add_argument("--progress", action="store_true", help="print events (checks, server log lines, requests) as JSON lines on stderr")
    hidden_debug(va)
    va.set_defaults(handler=run)


def _count(text: str, what: str) -> int:
    """A whole number of at least 1, else the usage error naming ``what`` it should be."""
    if text.strip().isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not {what}")


def _jobs(text: str) -> int | None:
    """``--jobs``: a count, or ``auto`` (None: as many as the GPUs take)."""
    if text.strip().lower() == "auto":
        return None
    return _count(text, "a number of servers (1, 2, …) or auto")


def _retries(text: str) -> int:
    if text.strip().isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of retries (0, 1, …)")


def _ranks(text: str) -> int:
    """``--tp`` / ``--pp`` of validate: a size of at least 1."""
    return _count(text, "a parallel size (1, 2, …)")


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of GPU memory in (0, 1]")
    return value


def run(args) -> int:
    if args.all_in is not None or len(args.output) > 1 or args.ray is not None:
        return validate_many(args)
    if len(args.output) != 1:
        raise UsageError("mxtrim validate: error: give an output directory (OUT), several, or --all [FOLDER]")
    leftover_servers_notice(args)
    v, runs, ok = run_validation(args.output[0], args, quiet=args.json)
    if args.json:
        json.dump(v.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_validation(v, runs)
        print_paths(v.paths)
    return 0 if ok else 1


def print_paths(paths: list[dict] | None) -> None:
    """Per coverage row, what the engine executed (``paths``: core/validate/paths.py)."""
    from ..core.write.report import PATHS_TITLE, path_line

    if not paths:
        return
    print(PATHS_TITLE)
    for p in paths:
        print("  " + path_line(p))
