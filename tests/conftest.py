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
# the transformers checks' verdicts (core/checks/cache.py) and vLLM's model-inspection cache:
# kept for this run only, and shared by its parallel workers (pytest-xdist) as one process
# running the whole suite would share them (entries are written atomically)
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _cache = os.path.join(tempfile.gettempdir(), f"mxtrim-test-cache-{_RUN}")
    os.makedirs(_cache, exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = _cache
else:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="mxtrim-test-cache-")

# Signals as a shell gives a foreground job: started under nohup or as a background job, the
# suite would inherit Ctrl-C and hang-up ignored, and so would every mxtrim and server the tests
# start and signal (an ignored disposition survives exec).
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_collection_modifyitems(config, items):
    """Longest first: the tests that start vLLM, then the slow ones, then the rest, so parallel
    workers finish together instead of one serving vLLM alone at the end (the order within each
    group is kept, and no test depends on another's order)."""
    def rank(item) -> int:
        return 0 if item.get_closest_marker("vllm") else 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)
