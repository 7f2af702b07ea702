"""Snapshot tests of every wizard screen at 80x24 and 160x48 (pytest-textual-snapshot).

Everything on screen is pinned: the demo model and workspace live at fixed paths, the GPU
probe and free disk space are fixed, the clock is off, cursors do not blink, notifications
are cleared and workers are awaited before the capture. Update with
`pytest tests/test_tui_snapshots.py --snapshot-update` after an intended change.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from mxtrim_tui.core.probe.gpu import GpuProbe
from mxtrim_tui.core.progress import FileWritten
from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.app import MxtrimApp
from mxtrim_tui.tui.screens.run import RunScreen
from tui_support import plan_checked, settle, wait_for

FIXTURES = Path("/tmp/mxtrim-snapshot-fixtures")
# The fixed paths admit one test at a time (the lock of ``demo``): the module runs on one worker
# (make's --dist loadgroup), where the others would only wait on that lock, leaving cores idle.
pytestmark = pytest.mark.xdist_group("test_tui_snapshots")
DiskUsage = namedtuple("DiskUsage", "total used free")
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
# screen -> Ctrl+N presses from the source screen
STEPS = {"source": 0, "inventory": 1, "selection": 2, "budget": 3, "output": 4}


@pytest.fixture
def demo():
    """The demo at its fixed path, for one test at a time: the paths are on screen, so parallel
    workers (pytest-xdist) cannot each have their own; a lock held for the whole test keeps the
    others out, and the demo (built the same on every run) is built once."""
    FIXTURES.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{FIXTURES}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        model = FIXTURES / "models" / "mxtrim-demo-moe"
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())  # built afresh by every run
        stamp = FIXTURES / ".built-by"
        if not stamp.is_file() or stamp.read_text() != run:
            shutil.rmtree(FIXTURES, ignore_errors=True)
            tmp = FIXTURES.with_name(FIXTURES.name + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            build_demo(tmp / "models" / "mxtrim-demo-moe")
            (tmp / ".built-by").write_text(run)
            tmp.rename(FIXTURES)
        yield model


def pinned_environment() -> dict:
    """The report's "environment seen" lists this checkout's interpreter and package paths; the
    output and budget screens show the exact size of that report, so pin what it lists."""
    from mxtrim_tui.core.probe.environment import DISTRIBUTIONS, PackageInfo

    packages = {m: PackageInfo(m, "1.0", f"/opt/env/site-packages/{m}/__init__.py") for m in DISTRIBUTIONS}
    return {"python": "3.11.7 (/opt/env/bin/python)", "platform": "Linux-x86_64", "packages": packages}


def pinned_judge(judge, answered=None) -> dict:
    """The transformers that judged the checks, as the report names it: pinned like the
    environment (its import origin is this checkout's path)."""
    return {"python": "/opt/env/bin/python", "transformers": "1.0", "torch": "1.0",
            "origin": "/opt/env/site-packages/transformers", "chosen_by": "mxtrim's own"}


@pytest.fixture
def make_app(demo, monkeypatch):
    monkeypatch.setattr("mxtrim_tui.core.write.report.environment", pinned_environment)
    monkeypatch.setattr("mxtrim_tui.core.checks.plan_outcome.judge_record", pinned_judge)
    monkeypatch.setattr("mxtrim_tui.core.checks.judge.judge_record", pinned_judge)
    # the vLLM validation will use, as the report names it: pinned too (its path is this machine's)
    monkeypatch.setattr("mxtrim_tui.core.probe.environment.validation_environment",
                        lambda: {"python": "/opt/env/bin/python", "origin": "$MXTRIM_VLLM_PYTHON", "version": "1.0"})
    # verdicts remembered by the snapshot tests alone: one the suite's other tests stored for the
    # same plan names the real judge
    monkeypatch.setenv("XDG_CACHE_HOME", str(FIXTURES / "cache"))

    def make():
        config = FIXTURES / "config"
        shutil.rmtree(config, ignore_errors=True)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
        ws = FIXTURES / "ws"
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir(parents=True)
        return MxtrimApp(
            demo,
            tree_root=FIXTURES / "models",
            gpu_probe=lambda: GpuProbe("none", False, "NVML unavailable on this test machine"),
            disk_usage=lambda path: DiskUsage(500 * 2**30, 400 * 2**30, 100 * 2**30),
            workspace=ws,
        )

    return make


async def _ready(app, pilot, presses: int) -> None:
    await wait_for(pilot, lambda: app.state.inventory is not None)
    await settle(app, pilot)
    for _ in range(presses):
        await pilot.press("ctrl+n")
        await settle(app, pilot)
    await wait_for(pilot, lambda: plan_checked(app))
    await settle(app, pilot)
    app.clear_notifications()
    await pilot.pause(0.05)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", STEPS)
@pytest.mark.slow
def test_screen(snap_compare, make_app, screen, size):
    async def run_before(pilot):
        await _ready(pilot.app, pilot, STEPS[screen])

    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.slow
def test_run_screen_after_a_dummy_trim(snap_compare, make_app, size, monkeypatch):
    # The output README lists the interpreter and package paths of the checkout that runs the
    # test, so its byte count differs between clones; pin that one number in the streamed log.
    on_event = RunScreen._on_event

    def pinned(self, event):
        if isinstance(event, FileWritten) and event.path == "README.md":
            event = dataclasses.replace(event, bytes=5000)
        on_event(self, event)

    monkeypatch.setattr(RunScreen, "_on_event", pinned)
    # and the elapsed time shown when the run ends
    from mxtrim_tui.tui.screens import run as run_screen

    monkeypatch.setattr(run_screen, "clock", lambda: 100.0)
    # the plan file the write runs (its path is the log's first line): a fixed folder
    monkeypatch.setenv("XDG_STATE_HOME", str(FIXTURES / "state"))

    async def run_before(pilot):
        app = pilot.app
        await _ready(app, pilot, 4)
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=120)
        await settle(app, pilot)
        # the log scrolls to its last line after a repaint: capture only once it has
        log = run.query_one("#run-log")
        await wait_for(pilot, lambda: int(log.scroll_y) + log.scrollable_content_region.height >= len(log.lines))
        app.clear_notifications()
        await pilot.pause(0.05)

    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=run_before)


def build_workspace(demo: Path, models: Path) -> None:
    """A workspace's reduced models: a dummy output of the demo written by the CLI (validated
    once, on a fixed day) and a hand-made example whose launch script names a path that is gone."""
    from engine_support import run_cli

    out = models / "mxtrim-demo-moe-dummy-2layers"
    r = run_cli("trim", str(demo), "--keep", "0,2", "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr
    run = {"started": "2026-11-20T10:00:00+00:00", "ok": True, "mode": "dummy", "rows": [],
           "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.31.0"}}}}
    (out / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [run]}))
    hand = models / "qwen3-8b-hand"
    hand.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(demo / name, hand / name)
    (hand / "serve.sh").write_text("#!/bin/sh\nvllm serve /nonexistent/models/Qwen3-8B --load-format dummy\n")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.slow
def test_source_screen_with_the_workspace_list(snap_compare, make_app, demo, size):
    app = make_app()  # its workspace is made afresh: the models go in now
    build_workspace(demo, FIXTURES / "ws" / "tools" / "batched_test" / "models")

    async def run_before(pilot):
        source = pilot.app.get_screen("source")
        await wait_for(pilot, lambda: source.is_mounted and source.query_one("#workspace").row_count == 2)
        await _ready(pilot.app, pilot, 0)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.slow
def test_help_screen(snap_compare, make_app, size):
    async def run_before(pilot):
        app = pilot.app
        await _ready(app, pilot, 2)
        await pilot.press("f1")
        await settle(app, pilot)

    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=run_before)
