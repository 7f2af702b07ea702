"""The command's entry point (``mxtrim`` and ``python -m mxtrim_tui``).

Importing the CLI takes a few tenths of a second; a Ctrl-C or SIGTERM in that time must end the
way it does later ("mxtrim: interrupted", exit 130), not as a KeyboardInterrupt traceback. So
the entry point is this module, which imports nothing but the standard library (and
``exit_status``, which is only that) before its ``try``.
"""

import sys

from .exit_status import exit_interrupted


def main() -> int:
    try:
        from .cli import main as run

        return run()
    except KeyboardInterrupt:  # before the CLI's own handling was in place
        print("mxtrim: interrupted", file=sys.stderr)
        exit_interrupted()
