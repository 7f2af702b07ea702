"""``mxtrim``: the headless command line, on the same engine as the wizard.

Exit codes: 0 success, 1 bad input (one line on stderr naming the file and the problem),
2 usage errors. ``--debug`` shows tracebacks.

This module builds the parser, each command module adding its own subcommand (its arguments,
and its handler as the ``handler`` default), and maps the errors to exit codes.
"""

from __future__ import annotations

import argparse
import sys

from ..core.errors import InputError
from ..exit_status import exit_interrupted
from . import batched_test_entry, demo, examples, inspect, leftovers, plan, trim, tui, validate
from .arguments import UsageError

# in the order `mxtrim --help` lists them
COMMANDS = (inspect, plan, trim, validate, examples, batched_test_entry, leftovers, tui, demo)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mxtrim",
        description="Trim huge LLM checkpoints to a few layers for vLLM smoke tests.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from ..core import interrupts

    interrupts.install()  # SIGTERM unwinds like Ctrl-C, so writers remove their partial output
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, even while the engine is still importing
        print("mxtrim: interrupted", file=sys.stderr)
        if argv is None:  # the command line, not a caller in the same process
            exit_interrupted()
        return 130


def _run(argv: list[str]) -> int:
    from ..core.plan.build import SelectionError

    args = _parser().parse_args(argv)
    try:
        if args.command is None:
            args = _parser().parse_args(["tui"] + (["--debug"] if args.debug else []))
        return args.handler(args)
    except SelectionError as exc:
        print(f"mxtrim: error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except InputError as exc:
        if args.debug:
            raise
        print(f"mxtrim: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
