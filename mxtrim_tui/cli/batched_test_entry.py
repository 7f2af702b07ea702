"""`mxtrim batched-test-entry`: the batched_test harness entries of existing outputs, appended
to a model YAML."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.errors import InputError
from .arguments import UsageError, hidden_debug
from .harness_text import print_harness_text


def register(sub) -> None:
    be = sub.add_parser("batched-test-entry", help="append the batched_test harness entries of existing outputs to a "
                        "model YAML (read from each output's mxtrim-plan.json)")
    be.add_argument("output", metavar="OUT", nargs="*", type=Path, help="directories written by mxtrim trim")
    be.add_argument("--config", type=Path, metavar="FILE", required=True,
                    help="the batched_test model YAML to append to (created if absent); model_path is written as the "
                    "harness reads it: from the tools/batched_test folder launch.py is started in (the YAML's, else "
                    "the output's), absolute for an output outside it")
    be.add_argument("--all", metavar="FOLDER", nargs="?", const="", dest="all_in",
                    help="every mxtrim output in FOLDER (default: ./tools/batched_test/models/); those whose name the "
                    "file already has are left as they are")
    be.add_argument("--json", action="store_true", help="print what was appended as JSON")
    hidden_debug(be)
    be.set_defaults(handler=run)


def run(args) -> int:
    """`mxtrim batched-test-entry OUT... --config FILE` / `--all [FOLDER]`: the harness entries
    of existing outputs appended to FILE, all or none (a name already there refuses them all;
    with --all those already there are left out)."""
    from ..core.write.batched_test_entry import append_entries, entry_for_output

    outputs = [Path(os.path.abspath(o)) for o in args.output]
    hand_made: list[Path] = []
    if args.all_in is not None:
        from ..core.validate.examples import is_mxtrim_output, model_dirs, workspace_folder

        folder = workspace_folder(Path(args.all_in) if args.all_in else None, Path.cwd())
        if not folder.is_dir():
            raise InputError(folder, "no such folder of models (give one: mxtrim batched-test-entry --all FOLDER)")
        found = [Path(os.path.abspath(p)) for p in model_dirs(folder)]
        hand_made = [p for p in found if not is_mxtrim_output(p)]
        outputs += [p for p in found if p not in hand_made and p not in outputs]
        if not outputs:
            raise InputError(folder, "holds no mxtrim output (directories with mxtrim-plan.json); nothing appended")
    if not outputs:
        raise UsageError("mxtrim batched-test-entry: error: give an output directory (OUT), several, or --all [FOLDER]")
    entries = [entry_for_output(o, args.config) for o in outputs]
    appended = append_entries(args.config, entries, skip_present=args.all_in is not None).to_json()
    appended["not_mxtrim_outputs"] = [str(p) for p in hand_made]
    if args.json:
        json.dump(appended, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print_harness_text(appended)
    if not appended["appended"] and not appended["already_present"]:
        print("batched_test: nothing to append")
    if hand_made:
        print(f"left out (not written by mxtrim): {', '.join(p.name for p in hand_made)}")
    return 0
