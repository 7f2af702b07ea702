import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# mxtrim's state (pid records of servers it started) in a directory of this test session, so
# the user's own records never show in a test and no test leaves one in the user's home.
import os
import tempfile

os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="mxtrim-test-state-")
# the transformers checks' verdicts (core/check_cache.py): kept for this session only
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="mxtrim-test-cache-")

# Signals as a shell gives a foreground job: started under nohup or as a background job, the
# suite would inherit Ctrl-C and hang-up ignored, and so would every mxtrim and server the tests
# start and signal (an ignored disposition survives exec).
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
