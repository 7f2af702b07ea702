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
        exit_interrupted()


def exit_interrupted() -> None:
    """Exit with status 130 now. CPython kills itself with SIGINT at exit when a
    KeyboardInterrupt once passed through exec()'d code (a dataclass made during an import),
    even though it was handled, and a SIGTERM'd mxtrim would then seem to have died of Ctrl-C."""
    import atexit

    atexit._run_exitfuncs()  # the check child is stopped, as at a normal exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
