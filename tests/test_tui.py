"""The wizard driven like a user over SSH: keyboard only, real files, a real child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

from mxtrim_tui.core.probe.gpu import GpuProbe
from mxtrim_tui.demo.build import build_demo
from synth.checkpoint import write_checkpoint
from synth.layouts import all_layouts
from mxtrim_tui.tui.app import MxtrimApp
from tui_support import plain, settle, wait_for

NO_GPU = lambda: GpuProbe("none", False, "no GPU in this test")  # noqa: E731


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press(ch if ch != "/" else "slash")


async def full_session(tmp_path: Path, source: Path, size=(80, 24)):
    ws = tmp_path / "ws"
    ws.mkdir()
    app = MxtrimApp(None, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=ws)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        # 1. source: type the path, Enter
        assert app.screen.id == "source"
        await type_text(pilot, str(source))
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        summary = plain(app.screen.query_one("#summary"))
        assert "architecture" in summary and "NOT executed" not in summary
        # 2. inventory: filter to MoE layers
        await pilot.press("ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "inventory"
        table = app.screen.query_one("#layer-table")
        all_rows = table.row_count
        await pilot.press("slash")
        await type_text(pilot, "moe")
        await settle(app, pilot)
        assert 0 < table.row_count < all_rows
        # 3. selection: the automatic set first
        await pilot.press("ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "selection"
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        auto_plan = app.state.plan
        assert auto_plan.auto.get("text") and not auto_plan.errors
        assert all(c.covered for c in auto_plan.coverage if c.submodel == "text")
        # drop the only kept dense layer (row 0 = layer 0): a coverage warning appears
        await pilot.press("space")
        await settle(app, pilot)
        plan = app.state.plan
        assert plan is not auto_plan and 0 not in plan.kept["text"]
        issues = plain(app.screen.query_one("#issues-view"))
        assert "not covered" in issues
        # put it back: the warning clears
        await pilot.press("space")
        await settle(app, pilot)
        assert 0 in app.state.plan.kept["text"]
        assert "not covered" not in plain(app.screen.query_one("#issues-view"))
        # manual spec: keep 0 and the last text layer
        last = max(l.index for l in app.state.inventory.submodels["text"].layers)
        await pilot.press("e")
        app.screen.query_one("#spec").value = ""
        await type_text(pilot, f"0,{last}")
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.state.plan.kept["text"] == [0, last]
        # 4. budget, 5. output
        await pilot.press("ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "budget"
        assert "not available" in plain(app.screen.query_one("#gpu-status"))
        await pilot.press("ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "output"
        out = app.state.output_path
        assert out.parent == ws / "tools" / "batched_test" / "models" and out.name.endswith("-dummy-2layers")
        # 6. run: a real `mxtrim trim` child process, log and progress streamed
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=120)
        await settle(app, pilot)
        assert app.screen.id == "run"
        log_text = "\n".join(str(line.text) for line in run.query_one("#run-log").lines)
        assert "[write] start" in log_text and "wrote config.json" in log_text and "done (exit 0)" in log_text
        assert run.progress.done == run.progress.total > 0
    return Path(app.state.last_output)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_full_session_on_the_demo_model(tmp_path):
    demo = build_demo(tmp_path / "demo")
    out = await full_session(tmp_path, demo)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["first_k_dense_replace"] == 1
    assert (out / "tokenizer.json").exists() and (out / "README.md").exists()
    assert not list(out.glob("*.safetensors"))
    assert json.loads((out / "mxtrim-plan.json").read_text())["kept"]["text"] == [0, 5]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_full_session_on_a_sparse_deepseek_v3(tmp_path):
    src = write_checkpoint(tmp_path / "DeepSeek-V3", all_layouts()["deepseek_v3"](), data="sparse")
    out = await full_session(tmp_path, src, size=(160, 48))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["first_k_dense_replace"] == 1
    assert json.loads((out / "mxtrim-plan.json").read_text())["kept"]["text"] == [0, 60]


@pytest.mark.asyncio
async def test_bad_source_shows_one_clear_error(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{")
    app = MxtrimApp(bad, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ErrorScreen" and app.screen.query("#error-message"))
        message = plain(app.screen.query_one("#error-message"))
        assert "config.json" in message and "not valid JSON" in message
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen.id == "source" and app.state.inventory is None


@pytest.mark.slow
@pytest.mark.asyncio
async def test_cancel_kills_the_child_and_quitting_leaves_no_process(tmp_path):
    """Escape on the run screen terminates the child (SIGTERM to its group)."""
    import psutil

    demo = build_demo(tmp_path / "demo")
    app = MxtrimApp(demo, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await pilot.press("ctrl+n", "ctrl+n")
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        app.state.output_text = str(tmp_path / "out")
        run = app.get_screen("run")
        # a child that runs until killed, started through the same path as a trim
        app.action_goto("run")
        await settle(app, pilot)
        import sys

        run.start([sys.executable, "-c", "import time,sys; print('tick', file=sys.stderr, flush=True); time.sleep(60)"])
        assert await wait_for(pilot, lambda: run.process is not None and run.running)
        pid = run.process.pid
        assert await wait_for(pilot, lambda: "tick" in "\n".join(str(l.text) for l in run.query_one("#run-log").lines))
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        assert await wait_for(pilot, lambda: "cancelled" in plain(run.query_one("#run-status")))
        # a second child, then quit the app: nothing may survive
        run.start([sys.executable, "-c", "import time; time.sleep(60)"])
        assert await wait_for(pilot, lambda: run.running)
        pid2 = run.process.pid
        # quitting while a child runs asks first; "n" keeps it running
        await pilot.press("ctrl+q")
        assert await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmQuitScreen")
        await pilot.press("n")
        await pilot.pause(0.2)  # not settle: the run worker waits on the child
        assert app.screen.id == "run" and run.running
        await pilot.press("ctrl+q")
        assert await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmQuitScreen")
        await pilot.press("y")
    assert not psutil.pid_exists(pid2) or psutil.Process(pid2).status() == psutil.STATUS_ZOMBIE


@pytest.mark.asyncio
@pytest.mark.slow
async def test_run_log_follows_a_burst_of_lines_until_the_user_scrolls_up(tmp_path):
    """A child that writes hundreds of lines at once: the log stays at the newest line; once the
    user scrolls up it stays where they read, and going back to the bottom follows again."""
    import sys

    demo = build_demo(tmp_path / "demo")
    app = MxtrimApp(demo, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=tmp_path)
    go = tmp_path / "go"
    child = (
        "import os, sys, time\n"
        "def burst(tag, n):\n"
        "    for i in range(n): print(tag, i, file=sys.stderr)\n"
        "    sys.stderr.flush()\n"
        "def wait(name):\n"
        f"    while not os.path.exists({str(go)!r} + name): time.sleep(0.02)\n"
        "burst('first', 400); wait('1'); burst('second', 50); wait('2'); burst('third', 200)\n"
    )
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        app.action_goto("run")
        await settle(app, pilot)
        run = app.get_screen("run")
        log = run.query_one("#run-log")

        def logged(text: str) -> bool:
            return any(str(line.text) == text for line in log.lines)

        def visible() -> list[str]:
            top = int(log.scroll_y)
            return [str(line.text) for line in log.lines[top : top + log.scrollable_content_region.height]]

        # lines handled back to back before any repaint (as messages queue up during a burst)
        for i in range(100):
            run._log(Text(f"queued {i}"))
        await settle(app, pilot)
        assert log.max_scroll_y > 50 and "queued 99" in visible()

        run.start([sys.executable, "-c", child])
        assert await wait_for(pilot, lambda: logged("first 399"))
        assert await wait_for(pilot, lambda: log.max_scroll_y > 300 and log.scroll_y == log.max_scroll_y)
        assert "first 399" in visible()
        # the user scrolls up to read; new lines must not pull the view away
        log.focus()
        await pilot.press("home")
        await pilot.pause(0.2)  # not settle: the run worker waits on the child
        (tmp_path / "go1").touch()
        assert await wait_for(pilot, lambda: logged("second 49"))
        await pilot.pause(0.2)  # not settle: the run worker waits on the child
        assert log.scroll_y == 0 and "first 0" in visible()
        # back at the bottom: following resumes
        await pilot.press("end")
        await pilot.pause(0.2)  # not settle: the run worker waits on the child
        (tmp_path / "go2").touch()
        assert await wait_for(pilot, lambda: not run.running and logged("third 199"))
        assert await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y and "third 199" in visible())


@pytest.mark.slow
@pytest.mark.asyncio
async def test_help_and_command_palette(tmp_path):
    app = MxtrimApp(None, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("f1")
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen")
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await settle(app, pilot)
        await type_text(pilot, "inventory")
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.screen.id == "inventory"


@pytest.mark.asyncio
async def test_user_keymap_rebinds_by_binding_id(tmp_path, monkeypatch):
    cfg = tmp_path / "config" / "mxtrim"
    cfg.mkdir(parents=True)
    (cfg / "keymap.json").write_text(json.dumps({"step.next": "f6"}))
    app = MxtrimApp(None, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("ctrl+n")  # rebound away
        await settle(app, pilot)
        assert app.screen.id == "source"
        await pilot.press("f6")
        await settle(app, pilot)
        assert app.screen.id == "inventory"


@pytest.mark.slow
@pytest.mark.asyncio
async def test_real_weight_run_shows_bytes_progress_and_verification(tmp_path):
    """Output screen: choose real weights (keyboard), see the disk budget; run screen: byte
    progress from the extraction script and the verification results."""
    demo = build_demo(tmp_path / "demo")
    ws = tmp_path / "ws"
    ws.mkdir()
    app = MxtrimApp(demo, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=ws)
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        for _ in range(4):
            await pilot.press("ctrl+n")
            await settle(app, pilot)
        assert app.screen.id == "output"
        app.screen.query_one("#mode").focus()
        await pilot.press("down", "enter")
        await settle(app, pilot)
        assert app.state.mode == "weights" and app.state.output_path.name.endswith("-weights-2layers")
        summary = plain(app.screen.query_one("#output-summary"))
        assert "free on the filesystem" in summary and "shard(s)" in summary
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=180)
        await settle(app, pilot)
        log_text = "\n".join(str(line.text) for line in run.query_one("#run-log").lines)
        assert "verified:" in log_text and "hashes matched" in log_text and "vLLM load: unverified" in log_text
        retained = app.state.plan.retained_bytes
        assert run.progress.bytes_copied == retained  # the script reported every byte it copied
    out = Path(app.state.last_output)
    assert (out / "extract_weights.py").exists() and (out / "manifest.json").exists()
    assert list(out.glob("*.safetensors"))


@pytest.mark.slow
@pytest.mark.asyncio
async def test_budget_with_a_gpu_reading(tmp_path):
    """The figures an H200 returned through NVML in this project's device check: the table
    lists the device and its process, and vLLM's budget arithmetic becomes available."""
    from mxtrim_tui.core.probe.gpu import GpuInfo, GpuProcess

    h200 = GpuProbe(
        "nvidia", True, "",
        (GpuInfo(0, "NVIDIA H200", 150754820096, 9787277312, 140967542784, 0, (GpuProcess(455, "python", 9133096960),)),),
        "580.159.04",
    )
    demo = build_demo(tmp_path / "demo")
    app = MxtrimApp(demo, tree_root=tmp_path, gpu_probe=lambda: h200, workspace=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        for _ in range(3):
            await pilot.press("ctrl+n")
            await settle(app, pilot)
        assert app.screen.id == "budget"
        assert await wait_for(pilot, lambda: app.screen.probe is not None)
        await settle(app, pilot)
        row = app.screen.query_one("#gpu-table").get_row_at(0)
        assert row[1] == "NVIDIA H200" and "python[455]" in row[4]
        view = plain(app.screen.query_one("#budget-view"))
        assert "KV tokens" in view and "max concurrency" in view and "not available" not in view


@pytest.mark.slow
def test_the_wizard_checks_its_plan_in_the_check_child_not_in_its_own_process(tmp_path):
    """As the CLI does: torch and transformers are imported by the check child; the wizard's
    process (the UI) never holds them, yet its plan gets transformers' verdict."""
    code = f"""
import asyncio, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from mxtrim_tui.demo.build import build_demo
from tui_support import make_app, plan_checked, wait_for
from pathlib import Path

async def main():
    app, _ = make_app(Path({str(tmp_path)!r}), build_demo(Path({str(tmp_path)!r}) / "demo"))
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: plan_checked(app), timeout=120)
        print(app.state.plan.transformers_check.status)
        print(",".join(m for m in ("torch", "transformers") if m in sys.modules) or "-")

asyncio.run(main())
"""
    # a cache of its own: a verdict remembered by another test would skip the check
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    status, loaded = out.stdout.split()
    assert status == "exact" and loaded == "-"
