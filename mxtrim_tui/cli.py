"""``mxtrim``: the headless command line, on the same engine as the wizard.

Exit codes: 0 success, 1 bad input (one line on stderr naming the file and the problem),
2 usage errors. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import json
import sys

from .core.errors import InputError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mxtrim",
        description="Trim huge LLM checkpoints to a few layers for vLLM smoke tests.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ins = sub.add_parser("inspect", help="describe a model directory without loading weights")
    ins.add_argument("source", metavar="SRC", help="Hugging Face-layout model directory")
    ins.add_argument("--json", action="store_true", help="print the inventory as JSON (schema mxtrim.inventory/1)")
    ins.add_argument("--tensors", action="store_true", help="with --json: list every tensor name per layer/part")
    ins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    demo = sub.add_parser("demo", help="build the bundled demo model (if needed) and print its path")
    demo.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def cmd_inspect(args) -> int:
    from .core.inventory import build_inventory
    from .core.source import open_source

    inv = build_inventory(open_source(args.source))
    if args.json:
        from .core.inventory_json import inventory_to_json

        json.dump(inventory_to_json(inv, with_tensors=args.tensors), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from .render import render_inventory

        render_inventory(inv, Console())
    return 0


def cmd_demo(args) -> int:
    from .demo.build import ensure_demo_model

    print(ensure_demo_model())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        if args.command is None:
            # Until the wizard lands, the default is the inventory of the bundled demo model.
            from .demo.build import ensure_demo_model

            args = _parser().parse_args(["inspect", str(ensure_demo_model())] + (["--debug"] if args.debug else []))
        return {"inspect": cmd_inspect, "demo": cmd_demo}[args.command](args)
    except InputError as exc:
        if args.debug:
            raise
        print(f"mxtrim: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mxtrim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
