"""The batched_test harness entry from the wizard's output step, as a user meets it: a model
YAML typed under the output directory, what the write will append said as it is typed, the
entry appended by the write (and shown on the run step), a name already in the file refused
before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from textual.widgets import Input

from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.app import ErrorScreen
from tui_support import make_app, no_vllm_in_the_environment, plain, plan_checked, settle, wait_for  # noqa: F401 (autouse)

CONFIG = "tools/batched_test/configs/smoke.yaml"
HAND_WRITTEN = "# kept by hand\n- name: hand-made\n  model_path: /data/hand-made  # elsewhere\n  infer_type: [text-only]\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo") / "mxtrim-demo")


async def at_output_step(app, pilot):
    await settle(app, pilot)
    assert await wait_for(pilot, lambda: plan_checked(app))
    app.action_goto("output")
    await settle(app, pilot)
    return app.get_screen("output")


async def type_config(app, pilot, screen, text: str) -> None:
    screen.query_one("#batched-test", Input).focus()
    for ch in text:
        await pilot.press(ch if ch != "/" else "slash")
    await settle(app, pilot)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_write_appends_the_entry_to_the_model_yaml_typed_on_the_output_step(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    config = ws / CONFIG
    config.parent.mkdir(parents=True)
    config.write_text(HAND_WRITTEN)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await at_output_step(app, pilot)
        await type_config(app, pilot, screen, CONFIG)
        out = app.state.output_path
        said = plain(screen.query_one("#batched-test-summary"), width=400)
        harness = ws / "tools" / "batched_test"  # where launch.py is started: model_path is read from there
        assert f"appends the entry '{out.name}' to {config}" in said and f"model_path ./models/{out.name}" in said
        assert f"read from {harness}, the folder launch.py is started in" in said
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=120)
        await settle(app, pilot)
        status = plain(run.query_one("#run-status"), width=400)
        assert f"✓ written: {out}" in status and f"batched_test entry '{out.name}' appended to {config}" in status
        log = "\n".join(str(line.text) for line in run.query_one("#run-log").lines)
        assert f"- name: '{out.name}'" in log
    text = config.read_text()
    assert text.startswith(HAND_WRITTEN)
    hand, entry = yaml.safe_load(text)
    assert hand["name"] == "hand-made" and entry["name"] == out.name
    assert entry["model_path"] == f"./models/{out.name}" and Path(os.path.abspath(harness / entry["model_path"])) == out
    assert entry["tags"] == ["dummy-smoke", "moe"] and entry["serve_config"]["extra_args"]["--load-format"] == "dummy"


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_name_already_in_the_file_is_refused_before_anything_is_written(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    config = ws / CONFIG
    config.parent.mkdir(parents=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await at_output_step(app, pilot)
        out = app.state.output_path
        taken = HAND_WRITTEN + f"- name: {out.name}\n  model_path: ./models/{out.name}\n"
        config.write_text(taken)
        await type_config(app, pilot, screen, CONFIG)
        said = plain(screen.query_one("#batched-test-summary"), width=400)
        assert f"✗ {config}: already has an entry named '{out.name}'" in said
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert isinstance(app.screen, ErrorScreen)
        assert "batched_test entry cannot be appended" in plain(app.screen.query_one("#error-title"))
        assert f"already has an entry named '{out.name}'" in plain(app.screen.query_one("#error-message"), width=400)
        await pilot.press("escape")
        # emptied, the write goes ahead without an entry
        screen.query_one("#batched-test", Input).value = ""
        await settle(app, pilot)
        assert plain(screen.query_one("#batched-test-summary")).strip() == ""
    assert not out.exists() and config.read_text() == taken
