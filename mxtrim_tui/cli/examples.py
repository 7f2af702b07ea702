"""`mxtrim examples [FOLDER]`: the reduced models of a workspace, with their source, last
validation, environment drift and stale paths (reads JSON and sizes, never weights)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.errors import InputError
from .arguments import hidden_debug


def register(sub) -> None:
    ex = sub.add_parser("examples", help="the reduced models of a workspace: source, last validation, environment drift, "
                        "stale paths (reads JSON and sizes, never weights)")
    ex.add_argument("folder", metavar="FOLDER", nargs="?", type=Path,
                    help="the folder of models (default: ./tools/batched_test/models/)")
    ex.add_argument("--python", metavar="PY", help="the environment to compare with (default: the vLLM interpreter "
                    "mxtrim validate would use, else this one)")
    ex.add_argument("--json", action="store_true", help="print the examples as JSON (schema mxtrim.examples/1)")
    hidden_debug(ex)
    ex.set_defaults(handler=run)


def run(args) -> int:
    from ..core.user_settings import get_setting
    from ..core.validate.examples import SCHEMA, now_environment, scan, versions_of, workspace_folder
    from ..core.probe.vllm_python import SETTING, VllmNotFound, absolute_interpreter, find_vllm_python

    folder = Path(os.path.abspath(workspace_folder(args.folder, Path.cwd())))
    if not folder.is_dir():
        raise InputError(folder, "no such folder of models (give one: mxtrim examples FOLDER)")
    python, note = absolute_interpreter(args.python) if args.python is not None else None, None
    if python is None:
        try:
            python = find_vllm_python(None, get_setting(SETTING)).python
        except VllmNotFound:
            # no vLLM anywhere: nothing to compare the validations with (mxtrim's own
            # interpreter is not where they ran)
            note = "no vLLM environment found: drift not compared (name one: mxtrim examples --python PY)"
    environment = now_environment(python) if python is not None else None  # one start of that interpreter
    now = versions_of(environment) if environment is not None else None
    examples = scan(folder, now, environment=environment)
    if args.json:
        doc = {"schema": SCHEMA, "folder": str(folder),
               "environment_now": {"python_executable": python, "versions": now} | ({"note": note} if note else {}),
               "examples": [e.to_json() for e in examples]}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    from ..render import render_examples

    render_examples(folder, examples, python, now, Console(), note=note)
    return 0
