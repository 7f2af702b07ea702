"""How an interrupted ``mxtrim`` ends, whether the entry point or the CLI caught the interrupt.
Standard library only: the entry point imports it before its guard is in place."""

import os
import sys


def exit_interrupted() -> None:
    """Exit with status 130 now. CPython kills itself with SIGINT at exit when a
    KeyboardInterrupt once passed through exec()'d code (a dataclass made during an import),
    even though it was handled, and a SIGTERM'd mxtrim would then seem to have died of Ctrl-C."""
    import atexit

    atexit._run_exitfuncs()  # the check child is stopped, as at a normal exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
