"""The wizard's validation and the run screen as a user meets them: the validate dialog (any
output, the vLLM interpreter found by the CLI's rule and kept, the checks to run), nothing
started without vLLM, the log readable at 80×24, honest status and quit texts, and the small
things met on the output and source steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from textual.widgets import Checkbox, Input, ProgressBar, RadioButton

from engine_support import small_llama_output
from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.app import ConfirmQuitScreen
from mxtrim_tui.tui.screens.base import HelpScreen
from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog
from test_vllm_discovery import make_env
from tui_support import make_app, no_vllm_in_the_environment, plain, settle, wait_for  # noqa: F401 (autouse)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo") / "mxtrim-demo")


@pytest.fixture(scope="module")
def existing_output(tmp_path_factory):
    """A dummy output written earlier, by the CLI: the wizard never wrote it."""
    return small_llama_output(tmp_path_factory.mktemp("earlier"), "dummy")


@pytest.fixture(scope="module")
def vllm_env(tmp_path_factory):
    return make_env(tmp_path_factory.mktemp("env") / "vllm-env", vllm="0.32.0")


async def at_run_step(app, pilot):
    """The wizard settled on the demo, at the run step: the run screen."""
    await settle(app, pilot)
    app.action_goto("run")
    await settle(app, pilot)
    return app.get_screen("run")


def found_line(app) -> str:
    return plain(app.screen.query_one("#validate-found"), width=400)


@pytest.mark.asyncio
async def test_no_vllm_anywhere_the_dialog_says_where_it_looked_and_starts_nothing(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await at_run_step(app, pilot)
        await pilot.press("v")  # nothing written in this session: v still opens the dialog
        assert isinstance(app.screen, ValidateDialog)
        assert await wait_for(pilot, lambda: "vLLM not found" in found_line(app))
        assert "$MXTRIM_VLLM_PYTHON" in found_line(app) and "vllm on PATH: none" in found_line(app)
        app.screen.query_one("#validate-output", Input).value = "/nowhere"
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert isinstance(app.screen, ValidateDialog) and run.process is None  # refused, nothing started


@pytest.mark.asyncio
@pytest.mark.slow
async def test_an_existing_output_is_validated_with_the_interpreter_typed_and_kept(tmp_path, demo, existing_output, vllm_env):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await at_run_step(app, pilot)
        await pilot.press("v")
        dialog = app.screen
        dialog.query_one("#validate-output", Input).value = str(existing_output)
        dialog.query_one("#validate-python", Input).value = vllm_env
        assert await wait_for(pilot, lambda: f"✓ vLLM 0.32.0 at {vllm_env}" in found_line(app))
        # a dummy output without MTP: neither speculative decoding nor equivalence can be asked for
        assert "dummy output" in plain(dialog.query_one("#validate-output-note"))
        assert dialog.query_one("#validate-speculative", Checkbox).disabled
        assert dialog.query_one("#validate-equivalence", Checkbox).disabled
        dialog.query_one("#validate-serve", Checkbox).value = False  # offline checks only
        await pilot.press("ctrl+s")
        assert await wait_for(pilot, lambda: run.process is None and "validat" in plain(run.query_one("#run-status"))
                              and "…" not in plain(run.query_one("#run-status")), timeout=120)
        assert await wait_for(pilot, lambda: not run.running, timeout=120)
        assert await wait_for(pilot, lambda: "start-up: unverified" in plain(run.query_one("#run-validation"), width=300))
        status = plain(run.query_one("#run-status"), width=300)
        rows = plain(run.query_one("#run-validation"), width=300)
        assert vllm_env in status and "start-up: unverified" in rows
        assert "validating" not in rows  # the line shown while it ran is gone
    # what was typed is kept: the CLI finds it next time too
    kept = json.loads((tmp_path / "config" / "mxtrim" / "settings.json").read_text())
    assert kept["vllm_python"] == vllm_env
    history = json.loads((existing_output / "validation.json").read_text())
    assert history["runs"][-1]["python"] == vllm_env


@pytest.mark.asyncio
async def test_the_log_can_take_the_whole_screen_at_80x24_and_long_lines_wrap(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        run = await at_run_step(app, pilot)
        # idle: no animated bar under "Nothing started"
        assert run.query_one("#run-progress", ProgressBar).display is False
        long = "ERROR " + "x" * 150 + " END-OF-LINE"
        run.start([sys.executable, "-c", f"import sys, time; print({long!r}, file=sys.stderr, flush=True); time.sleep(30)"],
                  kind="validate")
        log = run.query_one("#run-log")
        assert await wait_for(pilot, lambda: any("END-OF-LINE" in str(line.text) for line in log.lines), timeout=20)
        await pilot.press("l")
        assert await wait_for(pilot, lambda: run.maximized is log and log.size.height >= 18)
        await pilot.press("l")
        assert await wait_for(pilot, lambda: run.maximized is None)
        # the quit dialog says what runs
        await pilot.press("ctrl+q")
        assert await wait_for(pilot, lambda: isinstance(app.screen, ConfirmQuitScreen))
        text = plain(app.screen.query_one("#confirm-title")) + plain(app.screen.query_one("#confirm-message"), width=300)
        assert "validation is still running" in text and "vLLM server" in text
        assert "trim" not in text and "partial output" not in text
        await pilot.press("y")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_f1_help_shows_the_run_key_for_the_log_and_the_placeholders_of_the_output_step(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        for step, wanted in (("output", "tools/batched_test/models/<model>-<mode>-<N>layers"), ("run", "Log")):
            app.action_goto(step)
            await settle(app, pilot)
            await pilot.press("f1")
            assert await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            await settle(app, pilot)
            shown = "\n".join(str(s.visual) if hasattr(s, "visual") else "" for s in app.screen.query("MarkdownBlock"))
            shown = app.screen.query_one("Markdown").source if not shown.strip() else shown
            assert wanted in shown.replace("\\<", "<")
            await pilot.press("escape")


@pytest.mark.asyncio
async def test_the_mode_has_keys_the_chosen_one_is_marked_and_spaces_are_not_kept(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.action_goto("output")
        await settle(app, pilot)
        screen = app.get_screen("output")
        await pilot.press("w")
        await settle(app, pilot)
        assert app.state.mode == "weights"
        assert "● chosen" in str(screen.query_one("#mode-weights", RadioButton).label)
        assert "● chosen" not in str(screen.query_one("#mode-dummy", RadioButton).label)
        await pilot.press("d")
        await settle(app, pilot)
        assert app.state.mode == "dummy" and "● chosen" in str(screen.query_one("#mode-dummy", RadioButton).label)
        screen.query_one("#out-path", Input).value = "  spaced-out "
        await settle(app, pilot)
        assert app.state.output_path == ws / "spaced-out"
        assert "spaces around the path you typed" in plain(screen.query_one("#output-summary"), width=300)


@pytest.mark.asyncio
async def test_the_recent_sources_follow_the_session(tmp_path, demo, existing_output):
    app, _ = make_app(tmp_path, demo)
    other = Path(json.loads((existing_output / "mxtrim-plan.json").read_text())["source"])
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_for(pilot, lambda: app.state.source_path == demo)
        await settle(app, pilot)
        app.load_source(other)
        assert await wait_for(pilot, lambda: app.state.source_path == other)
        await settle(app, pilot)
        app.action_goto("inventory")
        await settle(app, pilot)
        app.action_goto("source")
        await settle(app, pilot)
        recent = app.get_screen("source").query_one("#recent")
        assert recent.get_option_at_index(0).id == str(other.resolve())
        assert any(recent.get_option_at_index(i).id == str(demo.resolve()) for i in range(recent.option_count))


STAGES = [
    {"event": "stage", "name": "extract", "status": "start"},
    {"event": "tensor", "done_bytes": 50, "total_bytes": 100, "name": "model.layers.0.mlp.up_proj.weight"},
    {"event": "verify", "done_bytes": 100, "total_bytes": 100},
    {"event": "stage", "name": "verify", "status": "done"},
    {"event": "stage", "name": "structure", "status": "start"},
    {"event": "verify", "done_bytes": 100, "total_bytes": 100},
]


@pytest.mark.asyncio
async def test_the_status_follows_the_stages_of_a_real_weight_write(tmp_path, demo):
    """While the structure check runs after the hashes, the run screen says so (it said
    "verifying hashes" for the whole check)."""
    app, _ = make_app(tmp_path, demo)
    events = "".join(json.dumps(e) + "\n" for e in STAGES)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await at_run_step(app, pilot)
        run.start([sys.executable, "-c", f"import sys, time; sys.stderr.write({events!r}); sys.stderr.flush(); time.sleep(30)"])
        assert await wait_for(pilot, lambda: "[structure] start" in "\n".join(str(l.text) for l in run.query_one("#run-log").lines), timeout=20)
        assert await wait_for(pilot, lambda: "checking the structure against transformers" in plain(run.query_one("#run-stats"), width=300))
        stats = plain(run.query_one("#run-stats"), width=300)
        assert "checking the structure against transformers" in stats and "verifying hashes" not in stats
        app.terminate_child(run.process)
        assert await wait_for(pilot, lambda: not run.running, timeout=20)
