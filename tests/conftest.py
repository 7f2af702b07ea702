import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# mxtrim's state (pid records of servers it started) in a directory of this test session, so
# the user's own records never show in a test and no test leaves one in the user's home.
import os
import tempfile
import time

import pytest

from home_guard import attribute, changed_under, watched_folders

# The user's own folders, read before anything below points them elsewhere: the suite must
# leave them as they were (checked when the run ends, pytest_sessionfinish).
# (parallel workers inherit the run's environment, already pointed elsewhere: they read the
# controller's record of the real folders)
import json

REAL_FOLDERS = json.loads(os.environ.setdefault("MXTRIM_TEST_REAL_FOLDERS", json.dumps(watched_folders(dict(os.environ)))))
STARTED = time.time()
# pip keeps finding the package index the user configured in the real home (tests resolve
# and install wheels), without writing its cache there
_pip_conf = os.path.join(os.path.expanduser("~"), ".config", "pip", "pip.conf")
if "PIP_CONFIG_FILE" not in os.environ and os.path.isfile(_pip_conf):
    os.environ["PIP_CONFIG_FILE"] = _pip_conf
os.environ.setdefault("PIP_NO_CACHE_DIR", "1")

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

# The real vLLM servers of the suite run without TorchDynamo: vLLM's CPU build compiles one op
# (the logprobs' batched_count_greater_than, vllm/v1/sample/ops/logprobs.py) with TorchInductor
# on the first completion that asks for logprobs, as validation's does. That is 6 to 14
# CPU-seconds per server of importing and running the inductor, on a path none of these tests
# looks at; tests/test_demo_served.py serves the demo with it, as a user's validation runs.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

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


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory, monkeypatch):
    """Every test runs with its own HOME and XDG_CONFIG_HOME (recent sources, settings, key
    map, vLLM's usage file), under pytest's temporary folder; XDG_CACHE_HOME and XDG_STATE_HOME
    are this run's temporary folders (above: the remembered verdicts are shared by the
    parallel workers)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    yield home


def pytest_sessionfinish(session, exitstatus):
    """The run fails when the suite changed anything under the user's real home or XDG folders
    while it ran (the controller checks, once, after every worker is done; what other programs
    changed meanwhile is listed: home_guard.attribute)."""
    if hasattr(session.config, "workerinput"):
        return
    changed = changed_under(REAL_FOLDERS, STARTED, exclude=[os.path.dirname(_TESTS), tempfile.gettempdir()])
    checkout = os.path.dirname(_TESTS)
    ours, others = attribute(changed, REAL_FOLDERS, [os.path.join(checkout, ".venv"), str(session.config._tmp_path_factory.getbasetemp().parent),
                                       os.environ["XDG_STATE_HOME"], os.environ["XDG_CACHE_HOME"]])
    writer = session.config.get_terminal_writer()
    if others:
        shown = "\n  ".join(others[:10])
        writer.line(f"changed under the user's real home while the suite ran, naming nothing of it (another "
                    f"program's, not counted):\n  {shown}", yellow=True)
    if ours:
        shown = "\n  ".join(ours[:20])
        writer.line(f"the suite wrote under the user's real home or XDG folders:\n  {shown}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
