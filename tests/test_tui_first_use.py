"""The wizard as a new user meets it at 80x24: typed values kept and carried through, bad
locations and budget values refused with one line, advertised keys that work, honest status
lines and counts. Keyboard only, real files, real `mxtrim trim` children."""

from __future__ import annotations

import difflib
import json
import sys

import pytest
from textual.widgets import DataTable, Input
from textual.widgets._footer import FooterKey

from mxtrim_tui.demo.build import build_demo
from tui_support import make_app, plain, plan_checked, settle, wait_for

SIZE = (80, 24)


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo") / "demo", "fp8")  # the block-FP8 demo: its TP rules


def flat(widget) -> str:
    """A Static's text at 80 columns with wrapped lines joined (a wrapped path reads whole)."""
    return "".join(line.strip() for line in plain(widget, width=76).splitlines())


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press({"/": "slash", ".": "full_stop", " ": "space", "-": "minus", "_": "underscore", "~": "tilde"}.get(ch, ch))


async def replace_text(app, pilot, selector: str, text: str) -> None:
    """Focus a text box, clear it with the keyboard, type ``text``."""
    box = app.screen.query_one(selector, Input)
    box.focus()
    await pilot.press("end", "ctrl+u")
    await type_text(pilot, text)
    await settle(app, pilot)


async def goto(app, pilot, step: str) -> None:
    app.action_goto(step)
    await settle(app, pilot)


async def loaded(app, pilot) -> None:
    assert await wait_for(pilot, lambda: app.state.inventory is not None)
    await settle(app, pilot)


async def write_and_wait(app, pilot) -> dict:
    run = app.get_screen("run")
    before = app.state.last_output
    await pilot.press("ctrl+s")
    assert await wait_for(pilot, lambda: app.screen.id == "run", timeout=10)
    assert await wait_for(pilot, lambda: app.state.last_output not in (None, before) and not run.running, timeout=120)
    await settle(app, pilot)
    return {"status": plain(run.query_one("#run-status"), width=76), "stats": plain(run.query_one("#run-stats"), width=76)}


# --- 1. a typed output path is kept, resolved and written to exactly -------------------------
@pytest.mark.asyncio
@pytest.mark.slow
async def test_typed_output_path_survives_navigation_mode_switch_and_runs(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "output")
        default = app.state.output_path
        assert default.name.endswith("-dummy-2layers")
        # the default follows the selection while nothing is typed
        await goto(app, pilot, "selection")
        await pilot.press("e")
        await replace_text(app, pilot, "#spec", "0,3,5")
        await pilot.press("enter")
        await settle(app, pilot)
        await goto(app, pilot, "output")
        assert app.screen.query_one("#out-path", Input).value.endswith("-dummy-3layers")

        await replace_text(app, pilot, "#out-path", "first-try")
        assert app.state.output_path == ws / "first-try"
        assert str(ws / "first-try") in flat(app.screen.query_one("#output-summary"))
        # back and forth, then the mode: the typed text stays exactly as typed
        await pilot.press("ctrl+b")
        await settle(app, pilot)
        await pilot.press("ctrl+n")
        await settle(app, pilot)
        app.screen.query_one("#mode").focus()
        await pilot.press("down", "enter", "up", "enter")
        await settle(app, pilot)
        assert app.screen.query_one("#out-path", Input).value == "first-try"
        await write_and_wait(app, pilot)
        assert app.state.last_output == str(ws / "first-try")
        assert (ws / "first-try" / "config.json").exists()
        assert not (ws / "tools").exists()  # nothing went to the default place
        # Escape after the run: back on the output screen, the typed path is still there
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen.id == "output"
        assert app.screen.query_one("#out-path", Input).value == "first-try"
        assert "exists" in flat(app.screen.query_one("#output-summary"))
        # a new typed path (absolute, elsewhere): written exactly there
        elsewhere = tmp_path / "second" / "place"
        await replace_text(app, pilot, "#out-path", str(elsewhere))
        await write_and_wait(app, pilot)
        assert app.state.last_output == str(elsewhere) and (elsewhere / "README.md").exists()


# --- 2. an unwritable location: one clear line, no traceback, nothing created ---------------
@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["under-a-file", "proc"])
@pytest.mark.slow
async def test_unwritable_output_location_is_refused_before_writing(tmp_path, demo, where):
    app, ws = make_app(tmp_path, demo)
    (ws / "README.md").write_text("a regular file\n")
    target = str(ws / "README.md" / "out") if where == "under-a-file" else "/proc/mxtrim-out"
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "output")
        await replace_text(app, pilot, "#out-path", target)
        summary = flat(app.screen.query_one("#output-summary"))
        assert "✗" in summary and ("not a directory" in summary or "is a file" in summary or "/proc" in summary)
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "ErrorScreen"
        message = plain(app.screen.query_one("#error-message"), width=300).strip()
        assert len(message.splitlines()) == 1 and "Traceback" not in message and "Error" not in message.split(":")[0]
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.get_screen("run").process is None and app.state.last_output is None
    assert sorted(p.name for p in ws.iterdir()) == ["README.md"]


# --- 3. budget fields: validated, marked, and carried into the serve command ----------------
@pytest.mark.asyncio
@pytest.mark.slow
async def test_budget_fields_are_validated_and_reach_the_report(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "budget")
        await replace_text(app, pilot, "#in-tp", "0")
        await replace_text(app, pilot, "#in-gpu_memory_utilization", "7")
        assert app.screen.query_one("#in-tp", Input).has_class("-invalid")
        assert app.screen.query_one("#in-gpu_memory_utilization", Input).has_class("-invalid")
        errors = plain(app.screen.query_one("#budget-errors"))
        assert "TP" in errors and "util" in errors
        await replace_text(app, pilot, "#in-max_num_seqs", "")
        assert app.screen.query_one("#in-max_num_seqs", Input).has_class("-invalid")
        # 3 does not divide the demo's 4 attention heads
        await replace_text(app, pilot, "#in-tp", "3")
        assert app.screen.query_one("#in-tp", Input).has_class("-invalid")
        # a write is refused while a field is invalid
        await goto(app, pilot, "output")
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "ErrorScreen" and "budget" in plain(app.screen.query_one("#error-title")).lower()
        await pilot.press("escape")
        await goto(app, pilot, "budget")
        # TP=2 would split the demo's 384-wide FP8 MLP into 192 rows: not whole 128-blocks
        await replace_text(app, pilot, "#in-tp", "2")
        assert app.screen.query_one("#in-tp", Input).has_class("-invalid")
        assert "mlp.gate_proj: 384 output rows / TP=2 = 192, not whole 128×128 blocks" in plain(
            app.screen.query_one("#budget-errors"), width=400)
        await replace_text(app, pilot, "#in-tp", "1")
        await replace_text(app, pilot, "#in-gpu_memory_utilization", "0.5")
        await replace_text(app, pilot, "#in-max_num_seqs", "3")
        await replace_text(app, pilot, "#in-max_model_len", "1024")
        # a box cleared and given its default back is valid again
        await replace_text(app, pilot, "#in-pp", "")
        await replace_text(app, pilot, "#in-pp", "2")
        assert not app.screen.query("Input.-invalid")
        # the values survive leaving and coming back
        await goto(app, pilot, "inventory")
        await goto(app, pilot, "budget")
        assert app.screen.query_one("#in-pp", Input).value == "2" and not app.screen.query("Input.-invalid")
        await goto(app, pilot, "output")
        await replace_text(app, pilot, "#out-path", "served")
        await write_and_wait(app, pilot)
        serve_shown = plain(app.get_screen("run").query_one("#run-serve"), width=400)
    readme = (ws / "served" / "README.md").read_text()
    for flag in ("--tensor-parallel-size 1", "--pipeline-parallel-size 2", "--max-model-len 1024", "--max-num-seqs 3", "--gpu-memory-utilization 0.5"):
        assert flag in readme and flag in serve_shown
    assert "${TP:-1}" not in readme


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_write_runs_a_plan_file_holding_every_budget_field(tmp_path, demo, monkeypatch):
    """DP, expert parallelism, tokens per step and the KV cache dtype chosen in the budget step
    reach the output's serve command: the wizard saves a plan file and runs `trim --plan`."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "budget")
        await replace_text(app, pilot, "#in-dp", "2")
        await replace_text(app, pilot, "#in-max_num_batched_tokens", "512")
        await replace_text(app, pilot, "#in-kv_cache_dtype", "fp8")
        app.screen.query_one("#in-expert_parallel").focus()
        await pilot.press("space")
        await settle(app, pilot)
        assert not app.screen.query("Input.-invalid")
        await goto(app, pilot, "output")
        await replace_text(app, pilot, "#out-path", "planned")
        await write_and_wait(app, pilot)
        log = "\n".join(str(line.text) for line in app.get_screen("run").query_one("#run-log").lines)
    plans = list((tmp_path / "state" / "mxtrim" / "plans").glob("*.json"))
    assert len(plans) == 1 and f"mxtrim trim --plan {plans[0]}" in log.replace("\n", "")  # wrapped at 80 columns
    doc = json.loads(plans[0].read_text())
    assert doc["serve"] == {"dp": "2", "max_num_batched_tokens": "512", "kv_cache_dtype": "fp8", "expert_parallel": True}
    assert doc["mode"] == "dummy" and doc["output"] == str(ws / "planned")
    readme = (ws / "planned" / "README.md").read_text()
    for flag in ("--data-parallel-size 2", "--enable-expert-parallel", "--max-num-batched-tokens 512", "--kv-cache-dtype fp8"):
        assert flag in readme, flag


# --- 4. advertised keys work from each screen's initial focus -------------------------------
@pytest.mark.asyncio
@pytest.mark.slow
async def test_advertised_keys_work_from_the_initial_focus(tmp_path, demo):
    (tmp_path / "models-unique-dir").mkdir()
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        # source screen, once read: a digit jumps instead of typing into the path box
        await pilot.press("5")
        await settle(app, pilot)
        assert app.screen.id == "output"
        await pilot.press("2")
        await settle(app, pilot)
        assert app.screen.id == "inventory"
        # inventory: ^g / ^y switch tabs even while the filter has focus
        await pilot.press("slash")
        await settle(app, pilot)
        assert isinstance(app.focused, Input)
        await pilot.press("ctrl+g")
        await settle(app, pilot)
        assert app.screen.query_one("#inventory-tabs").active == "groups"
        await pilot.press("ctrl+y")
        await settle(app, pilot)
        assert app.screen.query_one("#inventory-tabs").active == "layers"
        # budget: starts outside the text boxes, so digits still jump
        await goto(app, pilot, "budget")
        await pilot.press("5")
        await settle(app, pilot)
        assert app.screen.id == "output"
        # the path box completes with Tab, as its placeholder says
        await goto(app, pilot, "source")
        await pilot.press("ctrl+l")
        box = app.screen.query_one("#path", Input)
        box.value = ""
        await type_text(pilot, str(tmp_path / "models-u"))
        assert await wait_for(pilot, lambda: box._suggestion.endswith("models-unique-dir/"))
        await pilot.press("tab")
        await settle(app, pilot)
        assert box.value == str(tmp_path / "models-unique-dir") + "/" and box.has_focus


# --- 5. keymap.json mistakes are reported, only the bad entry ignored -----------------------
@pytest.mark.slow
@pytest.mark.asyncio
async def test_keymap_mistakes_are_reported_and_collisions_refused(tmp_path, demo):
    cfg = tmp_path / "config" / "mxtrim"
    cfg.mkdir(parents=True)
    (cfg / "keymap.json").write_text(json.dumps({
        "selection.toggle": "ctrl+q",   # the global Quit key: refused
        "selection.auto": "x",          # fine: applied
        "no.such.binding": "f9",         # unknown id
        "step.next": 5,                  # not a key string
    }))
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(app, pilot)
        problems = app.keymap_problems
        assert len(problems) == 3
        assert any("selection.toggle" in p and "ctrl+q" in p and "refused" in p for p in problems)
        assert any("no.such.binding" in p for p in problems) and any("step.next" in p for p in problems)
        assert any("keymap.json" in (n.title or "") for n in app._notifications)
        # the refused entry left Toggle on space; the good entry moved Auto to x
        await goto(app, pilot, "selection")
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        kept = list(app.state.plan.kept["text"])
        await pilot.press("space")
        await settle(app, pilot)
        assert app.state.plan.kept["text"] != kept
        await pilot.press("x")
        await settle(app, pilot)
        assert app.state.plan.kept["text"] == kept and app.state.plan.auto.get("text")
        # F1 lists the problems again
        await pilot.press("f1")
        await settle(app, pilot)
        help_text = app.screen.query_one("Markdown").source
        assert "Key map problems" in help_text and "no.such.binding" in help_text


@pytest.mark.asyncio
async def test_keymap_that_is_not_json_is_reported(tmp_path, demo):
    cfg = tmp_path / "config" / "mxtrim"
    cfg.mkdir(parents=True)
    (cfg / "keymap.json").write_text('{"selection.toggle": "x",')
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        assert len(app.keymap_problems) == 1 and "not valid JSON" in app.keymap_problems[0]


@pytest.mark.asyncio
async def test_help_names_the_keymap_file_the_wizard_reads(tmp_path, demo):
    """$XDG_CONFIG_HOME is set (here, as on many desktops): F1 names the keymap.json under it,
    the file whose entries the wizard read, not ~/.config/mxtrim/keymap.json."""
    keymap = tmp_path / "config" / "mxtrim" / "keymap.json"
    keymap.parent.mkdir(parents=True)
    keymap.write_text(json.dumps({"no.such.binding": "f9"}))
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        assert app.keymap_problems and app.keymap_problems[0].startswith(f"{keymap}: ")  # that file was read
        await pilot.press("f1")
        await settle(app, pilot)
        help_text = app.screen.query_one("Markdown").source
        assert f"Keys can be remapped by id in `{keymap}`" in help_text and "~/.config" not in help_text, help_text


# --- 7. run status lines describe the current state ------------------------------------------
@pytest.mark.slow
@pytest.mark.asyncio
async def test_run_status_after_failure_success_and_cancel(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    blocker = ws / "taken"
    blocker.write_text("")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "run")
        run = app.screen

        def footer_descriptions() -> set[str]:
            return {k.description for k in app.screen.query(FooterKey)}

        # nothing runs: Escape is not advertised as Cancel
        assert "Cancel" not in footer_descriptions()
        # a real trim child that fails after start (its output location is under a file)
        argv = [sys.executable, "-m", "mxtrim_tui", "trim", str(demo), "--mode", "dummy", "--out", str(blocker / "x"), "--progress", "--json"]
        run.start(argv)
        assert await wait_for(pilot, lambda: run.process is None and "failed" in plain(run.query_one("#run-status")), timeout=60)
        await settle(app, pilot)
        status = flat(run.query_one("#run-status"))
        assert "exit 1" in status and "taken" in status  # the reason itself, wrapped at 80 columns
        assert run.query_one("#run-progress").total is not None  # not pulsing
        assert "ETA" not in plain(run.query_one("#run-stats"))
        # success: no stale "verifying" or ETA, files counted as written
        await goto(app, pilot, "output")
        await replace_text(app, pilot, "#out-path", "ok")
        shown = await write_and_wait(app, pilot)
        files = [p for p in (ws / "ok").rglob("*") if p.is_file()]
        assert f"{len(files)} file(s)" in shown["stats"] and "ETA" not in shown["stats"] and "verifying" not in shown["stats"]
        assert run.progress.done == run.progress.total == len(files)
        # the serve command shown can be copied (OSC 52): the README's, as a person types it
        await pilot.press("c")
        await settle(app, pilot)
        copied = app.clipboard
        assert copied.startswith("CUDA_VISIBLE_DEVICES=0 MACA_VISIBLE_DEVICES=0 ") and "$" not in copied, copied
        readme_command = next(line for line in (ws / "ok" / "README.md").read_text().splitlines() if line.startswith("vllm serve "))
        assert {w for w in readme_command.split() if "$" not in w} <= set(copied.split()), (readme_command, copied)
        # cancel: the status says so and the ETA is gone
        run.start([sys.executable, "-c", "import time,sys; print('{\"event\": \"tensor\", \"done_bytes\": 1, \"total_bytes\": 9}', file=sys.stderr, flush=True); time.sleep(60)"])
        assert await wait_for(pilot, lambda: run.running)
        assert await wait_for(pilot, lambda: "Cancel" in footer_descriptions())
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: "cancelled" in plain(run.query_one("#run-status")), timeout=20)
        assert "ETA" not in plain(run.query_one("#run-stats"))
        assert await wait_for(pilot, lambda: "Cancel" not in footer_descriptions())


# --- 8. counts agree with what is listed and written -----------------------------------------
@pytest.mark.slow
@pytest.mark.asyncio
async def test_counts_agree_with_what_is_listed_and_written(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(app, pilot)
        await goto(app, pilot, "selection")
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        # keep only the last layer: coverage warnings appear; the summary counts each listed one
        last = max(l.index for l in app.state.inventory.submodels["text"].layers)
        await pilot.press("e")
        await replace_text(app, pilot, "#spec", str(last))
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: plan_checked(app) and app.state.plan.kept["text"] == [last])
        await settle(app, pilot)
        listed = plain(app.screen.query_one("#issues-view")).count("⚠")
        summary = plain(app.screen.query_one("#selection-summary"))
        assert listed > 0 and f"⚠{listed}" in summary  # one word: the count never wraps away from ⚠
        # `a`: the spec box no longer shows the old spec
        await pilot.press("a")
        assert await wait_for(pilot, lambda: plan_checked(app) and app.state.plan.auto.get("text"))
        await settle(app, pilot)
        assert app.screen.query_one("#spec", Input).value == ""
        # the size shown before writing is what is written, README and plan included
        await goto(app, pilot, "output")
        await replace_text(app, pilot, "#out-path", "sized")

        estimate = app.state.output_bytes()
        from mxtrim_tui.core.write.writer import plan_json_text

        serve = app.state.budget_inputs if app.state.budget_chosen else None
        planned = plan_json_text(app.state.plan, ws / "sized", "dummy", serve)
        await write_and_wait(app, pilot)
    written = sum(p.stat().st_size for p in (ws / "sized").rglob("*") if p.is_file())
    if abs(estimate - written) > 8:  # say where: the plan file's difference, each file's size
        from mxtrim_tui.core.write.writer import estimate_dummy_bytes

        diff = "\n".join(difflib.unified_diff(planned.splitlines(), (ws / "sized" / "mxtrim-plan.json").read_text().splitlines(), lineterm=""))
        sizes = {p.name: p.stat().st_size for p in (ws / "sized").rglob("*") if p.is_file()}
        again = estimate_dummy_bytes(app.state.plan, ws / "sized", serve)
        readme = (ws / "sized" / "README.md").read_text()
        raise AssertionError(f"estimated {estimate}, written {written}, estimated again {again}\n{sizes}\n{diff}\n{readme}")


# --- 9. 80x24: numbers first, nothing clipped beyond reach, Help on every footer -------------
@pytest.mark.asyncio
@pytest.mark.slow
async def test_80x24_numbers_visible_summary_scrolls_help_in_footer(tmp_path, demo):
    # a recent source whose path is far wider than the Recent pane
    deep = tmp_path / ("a-rather-long-directory-name-" * 3) / "models" / "Some-Model-Name-Instruct"
    deep.mkdir(parents=True)
    (tmp_path / "config" / "mxtrim").mkdir(parents=True)
    (tmp_path / "config" / "mxtrim" / "recent.json").write_text(json.dumps([str(deep)]))
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        recent = app.screen.query_one("#recent")
        # the source just read comes first, then the long one: one line each, not wrapped mid-word
        assert recent.virtual_size.height == recent.option_count == 2
        assert str(recent.get_option_at_index(1).prompt).startswith("Some-Model-Name-Instruct")  # name first

        def keys() -> dict:  # the footer's keys, recomposed for each new screen
            return {k.description: k.region for k in app.screen.query(FooterKey)}

        for step in ("source", "inventory", "selection", "budget", "output", "run"):
            await goto(app, pilot, step)
            assert await wait_for(pilot, lambda: {"Help", "palette"} <= keys().keys() and keys()["Help"].width > 0), step
            assert keys()["Help"].right <= keys()["palette"].x, step
        await goto(app, pilot, "inventory")
        for table_id, wanted in (("#layer-table", {"bytes", "tensors", "weights"}), ("#group-table", {"n", "bytes"})):
            table = app.screen.query_one(table_id, DataTable)
            if table_id == "#group-table":
                await pilot.press("ctrl+g")
                await settle(app, pilot)
            right = 0
            for column in table.ordered_columns:
                right += column.get_render_width(table)
                if str(column.label) in wanted:
                    assert right <= table.size.width, f"{table_id}: {column.label} ends at {right}"
        await goto(app, pilot, "output")
        app.screen.query_one("#mode").focus()
        await pilot.press("down", "enter")
        await settle(app, pilot)
        body = app.screen.query_one("#output-body")
        summary = app.screen.query_one("#output-summary")
        assert summary.region.bottom > body.region.bottom or body.max_scroll_y == 0
        body.scroll_end(animate=False)
        await settle(app, pilot)
        assert "report" in plain(summary)
        assert body.scroll_y == body.max_scroll_y


# --- 10. wording: F1 and the run screen speak of the product only ----------------------------
@pytest.mark.slow
@pytest.mark.asyncio
async def test_help_lists_each_key_once_and_run_screen_has_no_project_talk(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        for step in ("source", "selection", "run"):
            await goto(app, pilot, step)
            await pilot.press("f1")
            await settle(app, pilot)
            text = app.screen.query_one("Markdown").source
            assert "help_quit" not in text and text.count("`ctrl+c`") + text.count("`^c`") <= 1, step
            assert "validation issue" not in text and "lands with" not in text
            await pilot.press("escape")
            await settle(app, pilot)
        run = app.get_screen("run")
        shown = " ".join(plain(w) for w in run.query("Static"))
        assert "validation issue" not in shown and "lands with" not in shown
