"""A newcomer's first hour (issue 34, the wizard's items 5, 7, 10-13 and 17): what the steps say
about the loaded model, the workspace dialog, the validate dialog and the run step at 80×24."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Button, Checkbox, DataTable, Input, RichLog
from rich.text import Text

from engine_support import run_cli
from mxtrim_tui.demo.build import BF16_DEMO, build_demo
from mxtrim_tui.tui.app import ErrorScreen
from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog
from mxtrim_tui.tui.screens.workspace import ExampleDialog
from mxtrim_tui.tui.wording import in_wizard_terms
from tui_support import make_app, no_vllm_in_the_environment, plain, screen_lines, settle, wait_for  # noqa: F401 (autouse)

MODELS = Path("tools") / "batched_test" / "models"


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_tui_newcomer")]  # slow: its module fixture takes 15 to 20 s here; built once, on one worker (make's --dist loadgroup)

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The demo (with an MTP head) and a demo without one, and an output of each (the first
    kept layers 0-3, not the automatic set, with its MTP head; its last validation failed at serve)."""
    root = tmp_path_factory.mktemp("newcomer")
    demo = build_demo(root / "src" / "mxtrim-demo-moe")
    plain_demo = build_demo(root / "src" / "no-mtp-demo", replace(BF16_DEMO, num_mtp=0, name="no-mtp-demo"))
    models = root / "ws" / MODELS
    for src, name, extra in ((demo, "with-mtp", ["--keep", "0-3"]), (plain_demo, "without-mtp", [])):
        r = run_cli("trim", str(src), *extra, "--mode", "dummy", "--out", str(models / name))
        assert r.returncode == 0, r.stderr
    failed = {"started": "2026-11-21T09:00:00+00:00", "ok": False, "mode": "dummy", "environment": {},
              "rows": [{"check": "offline load", "status": "passed", "detail": ""},
                       {"check": "serve", "status": "failed", "detail": "exit 1",
                        "verdict": {"class": "environment", "evidence": ["MACA_PATH is not set"]}}]}
    (models / "with-mtp" / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [failed]}))
    return demo, plain_demo, root / "ws"


@pytest.fixture
def workspace(built, tmp_path):
    demo, plain_demo, ws = built
    shutil.copytree(ws, tmp_path / "ws")
    return demo, plain_demo, tmp_path / "ws"


def wizard(tmp_path, ws, source=None):
    from mxtrim_tui.tui.app import MxtrimApp
    from tui_support import NO_GPU

    return MxtrimApp(source, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=ws)


async def open_example(app, pilot, name: str) -> ExampleDialog:
    screen = app.get_screen("source")
    await settle(app, pilot)
    assert await wait_for(pilot, lambda: len(screen.examples) == 2)
    table = screen.query_one("#workspace", DataTable)
    await pilot.press("ctrl+o")
    row = [Path(k.value).name for k in table.rows].index(name)
    await pilot.press(*["down"] * row, "enter")
    await settle(app, pilot)
    assert isinstance(app.screen, ExampleDialog)
    return app.screen


# --- item 11: the workspace dialog -----------------------------------------------------------

@pytest.mark.asyncio
async def test_the_dialog_says_which_check_failed_and_why(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_example(app, pilot, "with-mtp")
        details = plain(dialog.query_one("#example-details"), width=300)
        assert "failed: serve — environment, started 2026-11-21" in details
        assert "MTP kept" in details


@pytest.mark.asyncio
async def test_a_model_that_never_had_mtp_did_not_drop_it(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_example(app, pilot, "without-mtp")
        details = plain(dialog.query_one("#example-details"), width=300)
        assert "MTP" not in details.split("kept", 1)[1].split("\n")[0]


@pytest.mark.asyncio
async def test_u_loads_the_output_s_plan_not_the_automatic_set(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_example(app, pilot, "with-mtp")
        await pilot.press("u")
        assert await wait_for(pilot, lambda: app.screen.id == "inventory")
        await settle(app, pilot)
        assert app.state.plan.kept["text"] == [0, 1, 2, 3] and app.state.plan.mtp_kept
        assert not app.state.plan.auto.get("text")
        await pilot.press("3")
        await settle(app, pilot)
        assert "4 text layer(s): 0-3" in plain(app.screen.query_one("#selection-summary"), width=300)


# --- item 10: re-validating ------------------------------------------------------------------

@pytest.mark.asyncio
async def test_v_after_validating_a_workspace_output_offers_that_output_and_speculative(tmp_path, workspace, monkeypatch):
    from mxtrim_tui.tui.screens.run import RunScreen
    from test_vllm_discovery import make_env

    started = []
    monkeypatch.setattr(RunScreen, "start", lambda self, argv, kind="trim": started.append(argv))
    demo, plain_demo, ws = workspace
    output = ws / MODELS / "with-mtp"
    vllm_env = make_env(tmp_path / "vllm-env", vllm="0.32.0")
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_example(app, pilot, "with-mtp")
        await pilot.press("v")
        await settle(app, pilot)
        assert isinstance(app.screen, ValidateDialog)
        # an MTP head is kept: what it is kept for is checked by default
        assert app.screen.query_one("#validate-speculative", Checkbox).value
        app.screen.query_one("#validate-python", Input).value = vllm_env
        assert await wait_for(pilot, lambda: "vLLM 0.32.0" in plain(app.screen.query_one("#validate-found"), width=400))
        await pilot.press("ctrl+s")
        assert await wait_for(pilot, lambda: app.screen.id == "run" and started)
        assert "--speculative" in started[0]
        await pilot.press("v")
        await settle(app, pilot)
        assert isinstance(app.screen, ValidateDialog)
        assert app.screen.query_one("#validate-output", Input).value == str(output)


@pytest.mark.asyncio
async def test_v_right_after_a_write_exits_waits_for_what_was_written(tmp_path, workspace, monkeypatch):
    """Seen in a terminal: `v` pressed as the trim's process had exited, before its result was
    read, opened the dialog with an empty output box (and Ctrl+S there started nothing)."""
    import sys

    from mxtrim_tui.tui.screens.run import RunScreen

    demo, plain_demo, ws = workspace
    output = ws / MODELS / "with-mtp"
    held = []
    handle = RunScreen.on_child_exited
    monkeypatch.setattr(RunScreen, "on_child_exited", lambda self, message: held.append(message))
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await pilot.press("6")
        await settle(app, pilot)
        run = app.screen
        # a real child that answers as `trim --json` does and exits
        answer = json.dumps({"output": str(output), "files": ["config.json"]})
        run.start([sys.executable, "-c", f"print({answer!r})"], kind="trim")
        assert await wait_for(pilot, lambda: held)
        assert run.process.poll() is not None  # exited; its answer not yet read
        await pilot.press("v")
        await settle(app, pilot)
        assert app.screen is run  # not a dialog that does not know the output
        handle(run, held[0])
        await pilot.press("v")
        await settle(app, pilot)
        assert isinstance(app.screen, ValidateDialog)
        assert app.screen.query_one("#validate-output", Input).value == str(output)
        assert "dummy output" in plain(app.screen.query_one("#validate-output-note"))


# --- items 12, 13: the loaded model is named; a failed load says what stays ---------------------

@pytest.mark.asyncio
async def test_every_step_names_the_loaded_model_and_a_failed_load_says_it_stays(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        name = app.state.inventory.model_name
        # no toast over the workspace list
        assert not [n for n in app._notifications if n.title == "Loaded"]
        for step in "123456":
            await pilot.press(step)
            await settle(app, pilot)
            assert name in screen_lines(app)[0], (step, screen_lines(app)[0])
        await pilot.press("1", "ctrl+l")
        not_a_model = tmp_path / "not-a-model"
        not_a_model.mkdir()
        app.screen.query_one("#path", Input).value = str(not_a_model)
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: isinstance(app.screen, ErrorScreen))
        message = plain(app.screen.query_one("#error-message"), width=300)
        assert f"Still loaded: {name} (from {demo})" in message
        await pilot.press("escape")
        await settle(app, pilot)
        assert f"Still loaded: {name}" in plain(app.screen.query_one("#summary"), width=300)
        assert app.state.source_path == demo and name in screen_lines(app)[0]


# --- item 5: 80×24 ---------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_the_validate_dialog_fits_80x24_and_tab_reaches_start(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        await pilot.press("6", "v")
        await settle(app, pilot)
        dialog = app.screen
        assert isinstance(dialog, ValidateDialog)
        shown = "\n".join(screen_lines(app))
        assert "then this interpreter" in shown
        for _ in range(8):
            if isinstance(app.focused, Button):
                break
            await pilot.press("tab")
            await settle(app, pilot)
        start = dialog.query_one("#validate-start", Button)
        assert app.focused is start
        region = start.region
        assert region.height and region.bottom <= 24
        assert dialog.get_widget_at(region.x + 1, region.y + 1)[0] is start
        assert any("Start (Enter / Ctrl+S)" in line for line in screen_lines(app))


@pytest.mark.asyncio
async def test_the_log_keeps_lines_after_a_validation_and_follows_the_next_run(tmp_path, workspace, monkeypatch):
    from mxtrim_tui.tui.screens import run as run_module

    demo, plain_demo, ws = workspace
    monkeypatch.setattr(run_module.RunScreen, "_run", lambda self, argv: None)
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await pilot.press("6")
        await settle(app, pilot)
        run = app.screen
        run.start(["python", "-m", "mxtrim_tui", "validate", "x"], kind="validate")
        run._starting = False
        log = run.query_one("#run-log", RichLog)
        for n in range(200):
            log.write(Text(f"server line {n}"))
        rows = [{"check": c, "status": "failed", "verdict": {"class": "environment", "evidence": ["a", "b"]}}
                for c in ("offline load", "serve", "completion", "chat")]
        run.validation = run_module.ValidationView.from_json({"rows": rows})
        run.query_one("#run-validation").update(run.validation.render())
        run._show_command("the server validation started", "vllm serve " + " ".join(f"--flag-{n} value" for n in range(40)))
        await settle(app, pilot)
        assert log.size.height >= 4
        # scrolled up in this run...
        log.scroll_home(animate=False)
        await settle(app, pilot)
        assert log.scroll_y < log.max_scroll_y
        # ...the next run follows its tail
        run.start(["python", "-m", "mxtrim_tui", "validate", "y"], kind="validate")
        run._starting = False
        for n in range(200):
            log.write(Text(f"next run line {n}"))
        await settle(app, pilot, extra=0.3)
        assert log.scroll_y == log.max_scroll_y > 0


@pytest.mark.asyncio
async def test_the_output_box_shows_the_end_of_a_long_path(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await settle(app, pilot)
        taken = app.state.output_path
        taken.mkdir(parents=True)  # the default name is taken: the next one ends in -2
        await pilot.press("5")
        await settle(app, pilot)
        path = app.screen.query_one("#out-path", Input)
        assert path.value.endswith("-2") and len(path.value) > path.content_region.width
        line = next(line for line in screen_lines(app) if "…" in line and "-2" in line)
        assert line.split("…", 1)[1].split()[0].rstrip("▎▊▌│").endswith("-2")


# --- items 7, 17: the selection step's words --------------------------------------------------

def test_fix_hints_name_the_wizard_s_keys():
    assert in_wizard_terms("omit --no-mtp to keep them") == "press m on step 3 to keep them"
    assert in_wizard_terms("use --mtp or --no-mtp instead of --keep mtp=...") == "press m on step 3 to keep or drop them"
    assert in_wizard_terms("--keep 0-3 builds exactly") == "keeping 0-3 (e on step 3) builds exactly"
    assert in_wizard_terms("keep layers 0-5 (--keep), or drop the draft heads (--no-mtp)") == \
        "keep layers 0-5 (e on step 3), or drop the draft heads (m on step 3)"
    assert "--" not in in_wizard_terms("real weights need 2 shard(s): a, b; fetch them; or trim with --mode dummy")


@pytest.mark.asyncio
async def test_the_selection_step_speaks_the_wizard_s_keys_and_keeps_its_words_whole(tmp_path, workspace):
    demo, plain_demo, ws = workspace
    app = wizard(tmp_path, ws, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await pilot.press("3")
        await settle(app, pilot)
        await pilot.press("m")  # drop the MTP head: a warning with a fix
        assert await wait_for(pilot, lambda: not app.state.plan.mtp_kept)
        await settle(app, pilot)
        issues = plain(app.screen.query_one("#issues-view"), width=300)
        assert "press m on step 3 to keep them" in issues and "--no-mtp" not in issues
        shown = screen_lines(app)
        assert not any(line.rstrip().endswith("⚠") for line in shown)
        spec = app.screen.query_one("#spec", Input)
        assert any(spec.placeholder in line for line in shown)
