"""`mxtrim tui [SRC]` (and `mxtrim` alone): open the wizard."""

from __future__ import annotations

from .arguments import hidden_debug


def register(sub) -> None:
    tui = sub.add_parser("tui", help="open the wizard (default: on the bundled demo model)")
    tui.add_argument("source", metavar="SRC", nargs="?", help="model directory to open, or hf://ORG/NAME[@REVISION] / ms://ORG/NAME[@REVISION] (read by range requests)")
    hidden_debug(tui)
    tui.set_defaults(handler=run)


def run(args) -> int:
    from ..tui.app import run_app

    return run_app(args.source)
