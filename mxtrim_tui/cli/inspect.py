"""`mxtrim inspect SRC`: what a model directory holds, read without loading weights."""

from __future__ import annotations

import json
import sys

from .arguments import hidden_debug


def register(sub) -> None:
    ins = sub.add_parser("inspect", help="describe a model directory without loading weights")
    ins.add_argument("source", metavar="SRC", help="Hugging Face-layout model directory")
    ins.add_argument("--json", action="store_true", help="print the inventory as JSON (schema mxtrim.inventory/1)")
    ins.add_argument("--tensors", action="store_true", help="with --json: list every tensor name per layer/part")
    hidden_debug(ins)
    ins.set_defaults(handler=run)


def run(args) -> int:
    from ..core.model.inventory import build_inventory
    from ..core.read.source import open_source

    inv = build_inventory(open_source(args.source))
    if args.json:
        from ..core.model.inventory_json import inventory_to_json

        json.dump(inventory_to_json(inv, with_tensors=args.tensors), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from ..render import render_inventory

        render_inventory(inv, Console())
    return 0
