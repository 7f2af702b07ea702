"""The command's entry point (``mxtrim`` and ``python -m mxtrim_tui``).

Importing the CLI takes a few tenths of a second; a Ctrl-C or SIGTERM in that time must end the
way it does later ("mxtrim: interrupted", exit 130), not as a KeyboardInterrupt traceback. So
the entry point is this module, which imports nothing before its ``try``.
"""

import os
import sys


def main() -> int:
    try:
        from .cli import main as run

        return run()
    except KeyboardInterrupt:  # before the CLI's own handling was in place
        print("mxtrim: interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)  # as the CLI does: CPython may otherwise re-raise SIGINT at exit
