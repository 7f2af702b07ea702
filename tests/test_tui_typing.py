"""Typing at any speed (issue 34, items 1, 2 and 6): keys that arrive in one burst, as over SSH
or from a paste of keystrokes, are what every text box of the wizard shows, and what the plan,
the serve settings and the write use; a step key never types into a box the user left; the
inventory filter lets go of the focus."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from engine_support import run_cli
from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog
from tui_support import burst, make_app, no_vllm_in_the_environment, plain, retype, settle, wait_for  # noqa: F401 (autouse)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("typing") / "mxtrim-demo-moe")


async def loaded(app, pilot) -> None:
    assert await wait_for(pilot, lambda: app.state.plan is not None)
    await settle(app, pilot)


async def at_step(app, pilot, key: str) -> None:
    await pilot.press(key)
    await settle(app, pilot)


def box(app, selector: str) -> Input:
    return app.screen.query_one(selector, Input)


# --- item 1: bursts ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_issue_s_bursts_in_tp_and_context_are_what_the_boxes_show_and_step_5_uses(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "4")
        context = box(app, "#in-max_model_len").value
        # into TP; Ctrl+A Ctrl+K 2 at once (was: an empty box, "✗ TP: required", figures at the old TP)
        burst(app, "tab", "ctrl+a", "ctrl+k", "2")
        await settle(app, pilot)
        assert box(app, "#in-tp").value == "2"
        assert app.state.budget_errors == {} and app.state.budget_inputs.tp == 2
        assert "TP=2" in plain(app.screen.query_one("#budget-view"), width=300)
        # on to context; End, Backspace × its length, 2 0 4 1 at once (was: 8192 left, 3 times of 3)
        burst(app, "tab", "tab", "tab", "end", *["backspace"] * len(context), "2", "0", "4", "1")
        await settle(app, pilot)
        assert box(app, "#in-max_model_len").value == "2041"
        assert app.state.budget_inputs.max_model_len == 2041
        # and on to step 5 in the same burst as a last edit: the serve line is what the boxes hold
        burst(app, "backspace", "2", "ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "output"
        summary = plain(app.screen.query_one("#output-summary"), width=300)
        assert "TP=2, context 2042" in summary and "blocked" not in summary, summary
        assert app.state.trim_request().serve == {"tp": "2", "max_model_len": "2042"}


@pytest.mark.asyncio
async def test_one_burst_through_every_budget_box_then_step_5(tmp_path, demo):
    wanted = {"tp": "2", "pp": "1", "dp": "1", "max_model_len": "3000", "max_num_seqs": "3",
              "max_num_batched_tokens": "4096", "gpu_memory_utilization": "0.85", "kv_cache_dtype": "fp8", "gpu_gib": "64"}
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "4")
        keys = ["tab"]
        for value in wanted.values():
            keys += [*retype(value), "tab"]
        burst(app, *keys, "ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "output"
        budget = app.get_screen("budget")
        assert {name: budget.query_one(f"#in-{name}", Input).value for name in wanted} == wanted
        st = app.state
        assert st.budget_errors == {}
        b = st.budget_inputs
        assert (b.tp, b.max_model_len, b.max_num_seqs, b.max_num_batched_tokens, b.kv_cache_dtype) == (2, 3000, 3, 4096, "fp8")
        assert b.gpu_memory_utilization == 0.85
        assert "TP=2, context 3000, 3 seq(s), utilisation 0.85" in plain(app.screen.query_one("#output-summary"), width=300)


@pytest.mark.asyncio
async def test_a_burst_in_the_path_box_reads_what_it_shows(tmp_path, demo):
    app, ws = make_app(tmp_path, None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        burst(app, *"/nowhere/at/all", *retype(str(demo)), "enter")
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        assert app.state.source_path == demo
        assert app.get_screen("source").query_one("#path", Input).value == str(demo)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_burst_through_the_filter_the_spec_and_the_output_boxes(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "2")
        table = app.screen.query_one("#layer-table", DataTable)
        every = table.row_count
        # "/" then the words at once: they reach the filter, not the table
        burst(app, "/", "m", "o", "e", "x", "backspace")
        await settle(app, pilot)
        assert box(app, "#filter").value == "moe" and 0 < table.row_count < every
        # Escape leaves the filter; the next digit jumps
        burst(app, "escape", "3")
        await settle(app, pilot)
        assert app.screen.id == "selection"
        # the spec box: e, a new set, Enter, and on to step 4, at once
        burst(app, "e", *retype("0,2"), "enter", "ctrl+n")
        assert await wait_for(pilot, lambda: app.state.plan.kept.get("text") == [0, 2])
        await settle(app, pilot)
        assert app.screen.id == "budget"
        assert "0,2" == app.get_screen("selection").query_one("#spec", Input).value
        # the output step: the path box and the model YAML box, then on to step 6
        await at_step(app, pilot, "5")
        burst(app, "ctrl+l", *retype("my-out"), "tab", *"models.yaml", "ctrl+n")
        await settle(app, pilot)
        assert app.screen.id == "run"
        output = app.get_screen("output")
        assert output.query_one("#out-path", Input).value == "my-out" and app.state.output_path == ws / "my-out"
        assert output.query_one("#batched-test", Input).value == "models.yaml"
        assert app.state.batched_test_config == ws / "models.yaml"


@pytest.mark.asyncio
async def test_a_burst_in_the_validate_dialog_checks_the_output_typed(tmp_path, demo):
    out = tmp_path / "written"
    r = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "6")
        await at_step(app, pilot, "v")
        assert isinstance(app.screen, ValidateDialog)
        burst(app, *"/nowhere", *retype(str(out)), "tab", *"/no/python")
        await settle(app, pilot)
        assert box(app, "#validate-output").value == str(out)
        assert "dummy output" in plain(app.screen.query_one("#validate-output-note"))
        assert box(app, "#validate-python").value == "/no/python"


# --- item 2: a step key never types into a box left behind ------------------------------------

@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("fast", [False, True], ids=["key by key", "burst"])
async def test_returning_to_a_step_starts_outside_its_text_boxes(tmp_path, demo, fast):
    app, ws = make_app(tmp_path, demo)

    async def keys(*names):
        if fast:
            burst(app, *names)
        else:
            await pilot.press(*names)
        await settle(app, pilot)

    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "4")
        await pilot.press("tab", "tab", "tab", "tab")
        context = box(app, "#in-max_model_len")
        assert context.has_focus
        before = context.value
        await keys("ctrl+n", "4", "5")
        assert app.screen.id == "output"
        assert context.value == before and "max_model_len" not in app.state.budget_text
        # the same on step 5: the path box left with Ctrl+N keeps the default
        default = app.state.output_path
        await keys("ctrl+l", "ctrl+n", "5", "6")
        assert app.screen.id == "run"
        assert app.state.output_text is None and app.state.output_path == default
        assert app.get_screen("output").query_one("#out-path", Input).value == str(default)


# --- item 6: the inventory filter lets go; help and the selection tabs name their keys ----------

@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_filter_lets_go_and_f1_says_how(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "2")
        await pilot.press("slash", "m", "o", "e")
        await settle(app, pilot)
        assert box(app, "#filter").has_focus
        await at_step(app, pilot, "f1")
        text = _help_text(app)
        assert "1 2 3 4 5 6" in text and "jump to step" in text
        assert "Leave the filter" in text and "Escape leaves it" in text
        await at_step(app, pilot, "escape")  # closes the help
        await at_step(app, pilot, "escape")  # leaves the filter
        assert app.screen.query_one("#layer-table", DataTable).has_focus and box(app, "#filter").value == "moe"
        await at_step(app, pilot, "3")
        assert app.screen.id == "selection"
        # back with 2: the table has the focus, the digits jump
        await at_step(app, pilot, "2")
        await at_step(app, pilot, "3")
        assert app.screen.id == "selection"


def _help_text(app) -> str:
    from textual.widgets import Markdown

    return app.screen.query_one(Markdown).source


def footer_keys(app) -> list[str]:
    from textual.widgets._footer import FooterKey

    return [f"{k.key_display} {k.description}" for k in app.screen.query(FooterKey)]


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_selection_tabs_have_a_key_in_the_footer(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "3")
        assert "t Tab" in footer_keys(app), footer_keys(app)
        tabs = app.screen.query_one("#selection-tabs")
        seen = [tabs.active]
        for _ in range(4):
            await at_step(app, pilot, "t")
            seen.append(tabs.active)
        assert seen[:4] == ["issues", "coverage", "mapping", "diff"]
        assert app.screen.query_one("#keep-table", DataTable).has_focus


# --- the real wizard in a terminal: one write of many keys -------------------------------------

@pytest.mark.slow
def test_one_write_of_keys_in_a_real_terminal_is_what_step_5_shows(demo, tmp_path):
    import os
    import sys
    import time

    from terminal_support import Terminal, until

    timing = tmp_path / "timing"
    env = {k: v for k, v in os.environ.items() if k not in ("MXTRIM_HEADLESS", "MXTRIM_EXIT_WHEN_READY")}
    env |= {"MXTRIM_TIMING_FILE": str(timing), "TERM": "xterm-256color", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    ws = tmp_path / "ws"
    ws.mkdir()
    term = Terminal([sys.executable, "-m", "mxtrim_tui", "tui", str(demo)], env, ws)
    try:
        # deadlines are hang guards, not measures: a loaded machine (a full suite beside a busy
        # core) once took over 60 s to reach the budget step
        until(lambda: timing.exists() and "inventory_ready" in timing.read_text(), 180, "the source to load")

        def at_budget() -> bool:
            term.type(b"4")
            time.sleep(0.5)
            return b"KV / token" in term.screen

        until(at_budget, 180, "the budget step", step=0)
        # Tab into TP, Ctrl+A Ctrl+K 2; three Tabs to context, End, Backspace x8, 2041; Ctrl+N
        term.type(b"\t\x01\x0b2" + b"\t\t\t" + b"\x1b[F" + b"\x7f" * 8 + b"2041" + b"\x0e")
        until(lambda: b"TP=2, context 2041" in term.screen, 90, "step 5's serve line")
        assert b"required" not in term.screen.split(b"TP=2, context 2041")[-1]
    finally:
        term.kill()


@pytest.mark.asyncio
async def test_a_mode_key_and_ctrl_s_in_one_burst_write_that_mode(tmp_path, demo, monkeypatch):
    import json

    from mxtrim_tui.tui.screens.run import RunScreen

    started = []
    monkeypatch.setattr(RunScreen, "start", lambda self, argv, kind="trim": started.append(argv))
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(app, pilot)
        await at_step(app, pilot, "5")
        assert app.state.mode == "dummy"
        burst(app, "w", "ctrl+s")
        assert await wait_for(pilot, lambda: started)
        plan_file = started[0][started[0].index("--plan") + 1]
        assert json.loads(open(plan_file).read())["mode"] == "weights"
