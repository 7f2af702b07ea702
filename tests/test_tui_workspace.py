"""The workspace's reduced models on the wizard's first step, as a user meets them over SSH at
80×24, keyboard only: the list (mode, layers, source, last validation, problems) read in a
worker, a model opened with Enter (its plan, problems, scripts shown and never run), its source
read as if typed and the wizard on to the next step, and a validation started from there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, Input

from engine_support import run_cli
from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.app import MxtrimApp
from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog
from mxtrim_tui.tui.screens.workspace import ExampleDialog
from tui_support import NO_GPU, no_vllm_in_the_environment, plain, settle, wait_for  # noqa: F401 (autouse)

OUTPUT = "mxtrim-demo-moe-dummy-2layers"
GONE = "/nonexistent/models/Qwen3-8B-smoke"
VALIDATED = {"started": "2026-11-20T10:00:00+00:00", "ok": True, "mode": "dummy", "rows": [],
             "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.31.0"}}}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A source, and a workspace holding an mxtrim dummy output of it (written by the CLI,
    validated once) and a hand-made example whose launch script names a path that is gone."""
    root = tmp_path_factory.mktemp("built")
    demo = build_demo(root / "src" / "mxtrim-demo-moe")
    models = root / "ws" / "tools" / "batched_test" / "models"
    r = run_cli("trim", str(demo), "--keep", "0,2", "--mode", "dummy", "--out", str(models / OUTPUT))
    assert r.returncode == 0, r.stderr
    (models / OUTPUT / "validation.json").write_text(json.dumps({"schema": "mxtrim.validation-history/1", "runs": [VALIDATED]}))
    hand = models / "qwen3-hand"
    hand.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(demo / name, hand / name)
    (hand / "launch.sh").write_text(f"#!/bin/sh\nvllm serve {GONE} --load-format dummy\n")
    return demo, root / "ws"


@pytest.fixture
def workspace(built, tmp_path):
    """The built workspace, a copy of its own for each test."""
    demo, ws = built
    shutil.copytree(ws, tmp_path / "ws")
    return demo, tmp_path / "ws"


def wizard(tmp_path, ws) -> MxtrimApp:
    return MxtrimApp(None, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=ws)


def rows(app) -> dict[str, list[str]]:
    """The workspace list as shown: model (its folder's name) -> the cells after the name."""
    table = app.get_screen("source").query_one("#workspace", DataTable)
    return {Path(key.value).name: [getattr(c, "plain", str(c)) for c in table.get_row(key)][1:] for key in table.rows}


async def listed(app, pilot, count: int = 2) -> dict[str, list[str]]:
    await settle(app, pilot)
    assert await wait_for(pilot, lambda: len(rows(app)) == count)
    return rows(app)


@pytest.mark.asyncio
async def test_the_list_shows_each_model_with_its_state_and_verdict(tmp_path, workspace):
    demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        shown = await listed(app, pilot)
        screen = app.get_screen("source")
        # the screen opened at once, the path box ready for typing
        assert app.screen.id == "source" and screen.query_one("#path", Input).has_focus
        # model, mode, layers, source, validated, problems
        assert shown[OUTPUT] == ["dummy", "2", "present", "ok 2026-11-20", "—"]
        assert shown["qwen3-hand"] == ["hand", "6", "—", "never", "1"]
        # the folder's path is cut in the middle to fit 80 columns: its end stays
        title = plain(screen.query_one("#workspace-title"), width=300).strip()
        assert title.startswith("Workspace (^o): 2 models, Enter opens one · /tmp/") and title.endswith("_test/models") and "…" in title
        assert len(title) <= 78
        assert not screen.query_one("#workspace-note").display


@pytest.mark.slow
@pytest.mark.asyncio
async def test_enter_shows_an_output_and_its_source_is_read_and_the_wizard_goes_on(tmp_path, workspace):
    demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await listed(app, pilot)
        await pilot.press("ctrl+o", "enter")  # the first row: the mxtrim output
        await settle(app, pilot)
        assert isinstance(app.screen, ExampleDialog)
        details = plain(app.screen.query_one("#example-details"), width=300)
        assert "2 layers: text 0, 2 · MTP kept" in details and "dummy output" in details
        assert str(demo) in details and "ok, started 2026-11-20T10:00:00+00:00" in details and "vllm 0.31.0" in details
        assert "problems  none" in details
        await pilot.press("u")
        assert await wait_for(pilot, lambda: app.screen.id == "inventory")
        assert app.state.source_path == demo and app.state.inventory.model_name == "mxtrim-demo-moe"
        # as if typed: the path box holds it, and going back shows what was read
        await pilot.press("1")
        await settle(app, pilot)
        assert app.screen.query_one("#path", Input).value == str(demo)
        assert "mxtrim-demo-moe" in plain(app.screen.query_one("#summary"))


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_hand_made_example_shows_its_scripts_never_run(tmp_path, workspace):
    demo, ws = workspace
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await listed(app, pilot)
        await pilot.press("ctrl+o", "down", "enter")
        await settle(app, pilot)
        details = plain(app.screen.query_one("#example-details"), width=300)
        assert "launch.sh" in details and f"vllm serve {GONE} --load-format dummy" in details and "never run" in details
        assert f"launch.sh: names {GONE}, which does not exist" in details
        # no source recorded, no mxtrim plan: neither can be asked for; Close has the focus
        assert app.screen.query_one("#example-use", Button).disabled and app.screen.query_one("#example-validate", Button).disabled
        assert app.focused.id == "example-close"
        await pilot.press("u")
        await settle(app, pilot)
        assert isinstance(app.screen, ExampleDialog) and app.state.source_path is None
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen.id == "source"


@pytest.mark.asyncio
async def test_no_workspace_is_one_dim_line_saying_where_it_looked(tmp_path):
    ws = tmp_path / "empty-ws"
    ws.mkdir()
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        screen = app.get_screen("source")
        note = screen.query_one("#workspace-note")
        assert await wait_for(pilot, lambda: "looked in" in plain(note, width=300))
        line = plain(note, width=300).strip()
        assert line.startswith("no workspace: looked in /") and line.endswith("/tools/batched_test/models") and len(line) <= 78
        assert not screen.query_one("#workspace", DataTable).display and not app._notifications
        # Ctrl+O, with no list to go to, says where it looked in full
        await pilot.press("ctrl+o")
        await settle(app, pilot)
        assert [n.message for n in app._notifications] == [f"no workspace: looked in {ws / 'tools' / 'batched_test' / 'models'}"]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_re_validate_opens_the_validate_dialog_on_that_output_and_the_list_follows(tmp_path, workspace):
    from test_vllm_discovery import make_env

    demo, ws = workspace
    vllm_env = make_env(tmp_path / "vllm-env", vllm="0.32.0")
    output = ws / "tools" / "batched_test" / "models" / OUTPUT
    app = wizard(tmp_path, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await listed(app, pilot)
        await pilot.press("ctrl+o", "enter", "v")
        await settle(app, pilot)
        assert isinstance(app.screen, ValidateDialog)
        assert app.screen.query_one("#validate-output", Input).value == str(output)
        assert "dummy output" in plain(app.screen.query_one("#validate-output-note"))
        app.screen.query_one("#validate-python", Input).value = vllm_env
        assert await wait_for(pilot, lambda: "vLLM 0.32.0" in plain(app.screen.query_one("#validate-found"), width=400))
        app.screen.query_one("#validate-serve").value = False  # offline checks only
        await pilot.press("ctrl+s")
        assert await wait_for(pilot, lambda: app.screen.id == "run")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: run.process is None and not run._starting
                              and "…" not in plain(run.query_one("#run-status")), timeout=120)
        assert "start-up: unverified" in plain(run.query_one("#run-validation"), width=300)
        runs = json.loads((output / "validation.json").read_text())["runs"]
        assert len(runs) == 2 and runs[-1]["python"] == vllm_env
        # back on the first step, the list shows the new run
        await pilot.press("1")
        assert await wait_for(pilot, lambda: rows(app)[OUTPUT][3] != "ok 2026-11-20")
        assert rows(app)[OUTPUT][3].endswith(runs[-1]["started"][:10])
