"""``python -m mxtrim_tui.cli``, as the single ``cli.py`` ran (``python -m mxtrim_tui`` is the
entry point, with its guard for a Ctrl-C during start-up)."""

import sys

from .main import main

sys.exit(main())
