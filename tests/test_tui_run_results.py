"""What the run step and its dialogs tell a user after a run, in the wizard driven by Pilot:
the verdict says which planned serve settings a validation did not test (and `mxtrim
validate` says the same); Escape leaves a text box; `c` copies the output's own serve
command after a validation; the validate dialog's check boxes read without colour; where the
vLLM interpreter came from is said one way; the results, the executed paths of the coverage
rows and the serve command are reachable at 80×24, 100×30 and 160×48; a cancelled trim offers
no validation of an output that is not there.

The validations here run the real `mxtrim validate` child: offline checks in the vLLM of
`.venv-vllm` (imported, never served) and a stand-in server started through `--launcher`
(real HTTP on loopback, tests/test_validate_flow.py's); the one whose paths are read serves the
demo's trim with the real vLLM of `.venv-vllm` and mxtrim's engine probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import re
from pathlib import Path

import pytest
from textual.widgets import Checkbox, Input

from engine_support import REPO, cli_argv, run_cli
from fixtures.tiny_models import make_servable_llama
from mxtrim_tui.core.probe.vllm_python import local_places as REAL_LOCAL_PLACES
from mxtrim_tui.demo.build import build_demo
from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog
from test_validate_flow import STAND_IN
from tui_support import burst, make_app, no_vllm_in_the_environment, plain, screen_lines, settle, wait_for  # noqa: F401 (autouse)

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
needs_vllm_env = pytest.mark.skipif(not Path(VLLM_PYTHON).exists(),
                                    reason="no vLLM environment (.venv-vllm, made by `make vllm`) to run the offline checks in")
NOT_TESTED = "planned TP 2, context 32,768, 16 sequences: not tested"
SERVED = "at TP 1, context 256, 1 sequence"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo") / "mxtrim-demo")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A dummy output planned for TP 2, context 32,768 and 16 sequences, and a stand-in server."""
    root = tmp_path_factory.mktemp("planned")
    src = make_servable_llama(root / "llama", layers=2)
    out = root / "llama-tp2"
    r = run_cli("trim", str(src), "--mode", "dummy", "--keep", "0", "--out", str(out),
                "--tp", "2", "--max-model-len", "32768", "--max-num-seqs", "16")
    assert r.returncode == 0, r.stderr
    script = root / "stand_in.py"
    script.write_text(STAND_IN)
    return {"out": out, "script": script, "command": json.loads((out / "mxtrim-plan.json").read_text())["serve"]["command"]}


@pytest.fixture(scope="module")
def planned_demo(demo, tmp_path_factory):
    """The demo (A MLA dense, B MLA MoE, C the MTP layer) trimmed dummy for TP 2, context 32,768
    and 16 sequences, to be served by the real vLLM."""
    out = tmp_path_factory.mktemp("planned-demo") / "demo-tp2"
    r = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out),
                "--tp", "2", "--max-model-len", "32768", "--max-num-seqs", "16")
    assert r.returncode == 0, r.stderr
    return {"out": out}


def validate_args(planned) -> list[str]:
    """`mxtrim validate OUT` on CPU (TP 1, context 256, one sequence) with the stand-in server."""
    return ["validate", str(planned["out"]), "--python", VLLM_PYTHON, "--serve", "--device", "cpu", "--timeout", "60",
            "--launcher", f"{sys.executable} {planned['script']} ok"]


async def at_run_step(app, pilot):
    await settle(app, pilot)
    app.action_goto("run")
    await settle(app, pilot)
    return app.get_screen("run")


def served_args(planned) -> list[str]:
    """`mxtrim validate OUT --serve` on CPU with the real vLLM (the engine probe in it)."""
    return ["validate", str(planned["out"]), "--python", VLLM_PYTHON, "--serve", "--device", "cpu"]


async def validated_in_the_wizard(app, pilot, planned, args=None, timeout=180):
    run = await at_run_step(app, pilot)
    run.start(cli_argv(*(args or validate_args(planned)), "--json", "--progress"), kind="validate")
    assert await wait_for(pilot, lambda: run.process is None and not run._starting and "validat" in plain(run.query_one("#run-status"))
                          and "…" not in plain(run.query_one("#run-status")), timeout=timeout)
    await settle(app, pilot, extra=0.3)
    return run


# --- item 1: the verdict names what was not tested ---------------------------------------------

@pytest.mark.slow
@needs_vllm_env
def test_the_cli_verdict_says_which_planned_settings_were_not_tested(planned):
    r = subprocess.run(cli_argv(*validate_args(planned)), capture_output=True, text=True, timeout=300)
    lines = r.stdout.splitlines()
    verdict = [line for line in lines if line.startswith(("✓ validated", "✗ validation"))]
    assert verdict and verdict[0].startswith("✓ validated"), r.stdout + r.stderr[-2000:]
    after = lines[lines.index(verdict[0]) + 1]
    assert after == f"Served on cpu {SERVED}; {NOT_TESTED}", r.stdout


@pytest.mark.asyncio
@pytest.mark.slow
@needs_vllm_env
async def test_the_wizard_verdict_says_which_planned_settings_were_not_tested(tmp_path, demo, planned):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        run = await validated_in_the_wizard(app, pilot, planned)
        status = " ".join(plain(run.query_one("#run-status"), width=300).split())
        assert status.startswith("✓ validated") and f"Served on cpu {SERVED}; {NOT_TESTED}" in status, status


# --- item 3: c copies the output's own serve command -------------------------------------------

@pytest.mark.asyncio
@pytest.mark.slow
@needs_vllm_env
async def test_after_a_validation_c_copies_the_output_s_serve_command(tmp_path, demo, planned):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await validated_in_the_wizard(app, pilot, planned)
        await pilot.press("c")
        await settle(app, pilot)
        # the README's command (TP 2, context 32,768), not the CPU one the validation's server
        # ran; as a person types it: its two GPUs listed, no shell expressions
        copied = app.clipboard
        assert copied.startswith("CUDA_VISIBLE_DEVICES=0,1 MACA_VISIBLE_DEVICES=0,1 ") and "$" not in copied, copied
        assert f" vllm serve {planned['out']} " in copied and "--tensor-parallel-size 2 " in copied
        assert "--max-model-len 32768 " in copied and "--max-model-len 256" not in copied
        assert planned["command"] in (planned["out"] / "README.md").read_text()


# --- item 6: the results, the paths and the serve command are reachable at 80×24 and up ---------

async def results_on_the_whole_screen(app, pilot, run) -> str:
    """`r`, then the results box paged through to its end: every line it showed, in order."""
    await pilot.press("r")
    await settle(app, pilot)
    box = run.query_one("#run-validation-box")
    assert run.maximized is box
    seen = [screen_lines(app)]
    for _ in range(40):
        if box.scroll_y >= box.max_scroll_y:
            break
        await pilot.press("pagedown")
        await settle(app, pilot)
        seen.append(screen_lines(app))
    await pilot.press("r")
    await settle(app, pilot)
    assert run.maximized is None
    # each line less the scrollbar's column (its thumb glyphs would join the next wrapped word)
    return "\n".join(line.rstrip(SCROLLBAR + " ") for lines in seen for line in lines)


SCROLLBAR = "▁▂▃▄▅▆▇█▔▕▏"


def assert_paths_shown(shown: str, out) -> None:
    """The demo's coverage rows served without speculative decoding, one line each after the
    checks: A and B executed (B's experts counted), C not executed, naming the request."""
    flat = " ".join(shown.split())
    a = re.search(r"✓ A text: mla · dense · BF16 \[model\.layers\.0\]: executed", flat)
    b = re.search(r"✓ B text: mla · moe×8 · [^\[]*\[model\.layers\.1\]: executed \([1-8] of 8 experts received tokens\)", flat)
    c = re.search(r"○ C mtp: mla · moe×8 · [^\[]*\[drafter:model\.layers\.2\]: not executed: served without speculative decoding", flat)
    assert a and b and c, flat
    assert f"`mxtrimvalidate{out}--serve--speculative`" in "".join(flat[c.end():].split()), flat  # the request that would reach it
    assert flat.index("memory: predicted against logged") < a.start() < b.start() < c.start(), flat  # after the checks


@pytest.mark.asyncio
@pytest.mark.slow
@pytest.mark.vllm
@needs_vllm_env
async def test_after_a_validation_its_rows_paths_and_the_serve_command_are_reachable(tmp_path, demo, planned_demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        run = await validated_in_the_wizard(app, pilot, planned_demo, served_args(planned_demo), timeout=900)
        for size in ((80, 24), (100, 30), (160, 48)):
            await pilot.resize_terminal(*size)
            await settle(app, pilot, extra=0.3)
            # a line over the results says what they hold and how to see them all
            shown = " ".join(" ".join(screen_lines(app)).split())
            assert f"Below: {len(run.validation.rows)} checks (" in shown and len(run.validation.rows) >= 12, (size, shown)
            assert "then the paths of 3 coverage rows (2 executed · 1 not executed), then the serve command · r: whole screen" in shown, (size, shown)
            everything = await results_on_the_whole_screen(app, pilot, run)
            for row in run.validation.rows:
                assert f"{row['check']}: {row['status']}" in everything, (size, everything)
            assert_paths_shown(everything, planned_demo["out"])
            command = run.serve_command
            assert command.startswith("CUDA_VISIBLE_DEVICES=0,1 ") and "--tensor-parallel-size 2 " in command
            assert command in " ".join(everything.split()), everything  # all of it, wrapped
        # at 160×48 the paths read in place, nothing maximized or scrolled
        assert_paths_shown("\n".join(screen_lines(app)), planned_demo["out"])


# --- item 2: Escape leaves a text box ----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.asyncio
async def test_escape_leaves_a_text_box_then_the_step_keys_work(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await settle(app, pilot)
        await pilot.press("4")
        await settle(app, pilot)
        tp = app.screen.query_one("#in-tp", Input)
        app.screen.set_focus(tp)
        before = tp.value
        burst(app, "end", "escape", "5")  # was: "5" typed into the box (TP 25)
        await settle(app, pilot)
        assert app.screen.id == "output" and tp.value == before
        yaml = app.screen.query_one("#batched-test", Input)
        app.screen.set_focus(yaml)
        burst(app, "escape", "w")  # was: "w" typed into the YAML box
        await settle(app, pilot)
        assert yaml.value == "" and app.state.mode == "weights"
        # the YAML box looks like the other boxes: a border (three lines), a focus style
        assert yaml.outer_size.height == 3 == app.screen.query_one("#out-path", Input).outer_size.height
        app.screen.set_focus(yaml)
        await settle(app, pilot)
        assert yaml.styles.border_top[0] != "" and yaml.has_focus
        # Escape outside a box keeps its meaning: back from the run step
        await pilot.press("6")
        await settle(app, pilot)
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen.id == "output"


# --- item 4: check boxes read without colour ----------------------------------------------------

@pytest.mark.asyncio
async def test_the_validate_dialog_s_check_boxes_read_differently_on_and_off(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await at_run_step(app, pilot)
        await pilot.press("v")
        await settle(app, pilot)
        assert isinstance(app.screen, ValidateDialog)
        box = app.screen.query_one("#validate-serve", Checkbox)
        on = box.render().plain
        box.value = False
        await settle(app, pilot)
        off = box.render().plain
        assert box.value is False and on != off
        assert "▐X▌" in on and "▐X▌" not in off
        line = next(line for line in screen_lines(app) if "start vllm serve" in line)
        assert "X" not in line.split("start vllm serve")[0]  # on screen too, not only by colour


# --- item 5: where the interpreter came from, said one way ------------------------------------

@pytest.mark.asyncio
@pytest.mark.slow
@needs_vllm_env
async def test_the_dialog_and_the_readme_say_alike_where_vllm_was_found(tmp_path, demo, planned, monkeypatch):
    """No --python, variable or setting: the checkout's .venv-vllm is found. The README's
    validation section says so as the dialog did (it said "found from --python")."""
    from mxtrim_tui.core.probe import vllm_python

    if Path(VLLM_PYTHON) != REPO / ".venv-vllm" / "bin" / "python":
        pytest.skip("the vLLM environment is not the checkout's .venv-vllm")
    monkeypatch.setattr(vllm_python, "local_places", REAL_LOCAL_PLACES)  # the checkout's .venv-vllm, as a user has it
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await at_run_step(app, pilot)
        await pilot.press("v")
        dialog = app.screen
        dialog.query_one("#validate-output", Input).value = str(planned["out"])
        found = lambda: plain(dialog.query_one("#validate-found"), width=400)  # noqa: E731
        assert await wait_for(pilot, lambda: "✓ vLLM" in found(), timeout=60)
        assert "(found as .venv-vllm of this checkout)" in found(), found()
        dialog.query_one("#validate-serve", Checkbox).value = False  # offline checks only
        await settle(app, pilot)
        await pilot.press("ctrl+s")
        assert await wait_for(pilot, lambda: run.process is None and not run._starting
                              and "…" not in plain(run.query_one("#run-status")), timeout=180)
    readme = (planned["out"] / "README.md").read_text()
    section = readme[readme.index("## Validation"):]
    assert "found as .venv-vllm of this checkout)" in section.splitlines()[2], section
    assert "--python" not in section.splitlines()[2]


# --- item 7: a cancelled trim offers no validation of what is not there -----------------------

def footer_keys(app) -> list[str]:
    return [b.binding.key for b in app.screen.active_bindings.values() if b.binding.show and b.enabled]


@pytest.mark.asyncio
async def test_after_a_cancelled_trim_the_footer_offers_no_validation(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        run = await at_run_step(app, pilot)
        assert "v" in footer_keys(app) and "Validate" in screen_lines(app)[-1]  # nothing run yet: v opens the dialog
        # a trim child that is cancelled while it copies (as test_tui_first_use's)
        run.start([sys.executable, "-c", "import time, sys; print('{\"event\": \"tensor\", \"done_bytes\": 1, \"total_bytes\": 9}', "
                   "file=sys.stderr, flush=True); time.sleep(60)"])
        assert await wait_for(pilot, lambda: run.running)
        await pilot.pause(0.3)
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: run.process is None and "cancelled" in plain(run.query_one("#run-status")), timeout=30)
        await settle(app, pilot)
        assert "v" not in footer_keys(app) and "Validate" not in screen_lines(app)[-1]


# --- the run step at 80 columns: a long log line wraps whole once the log scrolls -------------

@pytest.mark.asyncio
async def test_at_80_columns_a_long_log_line_wraps_whole_beside_the_scrollbar(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    # rows of 75 and 76 columns where the line wraps at the log's width without the scrollbar
    words = ["x" * 58, "config-bf63.json", "y" * 69, "logged", "and-the-rest"]
    child = ("import sys\n"
             "for n in range(60): print('line', n, file=sys.stderr)\n"
             f"print({' '.join(words)!r}, file=sys.stderr)\n")
    async with app.run_test(size=(80, 24)) as pilot:
        run = await at_run_step(app, pilot)
        run.start([sys.executable, "-c", child])
        assert await wait_for(pilot, lambda: run.process is None and not run._starting and "finished" in plain(run.query_one("#run-status")))
        await settle(app, pilot)
        log = run.query_one("#run-log")
        assert log.max_scroll_y > 0  # the log scrolls: its scrollbar takes two columns
        assert await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y)
        shown = " ".join(screen_lines(app))
        assert [w for w in words if w not in shown] == [], shown


# --- the budget's EP check box reads without colour --------------------------------------------

@pytest.mark.asyncio
async def test_the_budget_s_expert_parallel_box_reads_differently_on_and_off(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await pilot.press("4")
        await settle(app, pilot)
        box = app.screen.query_one("#in-expert_parallel", Checkbox)
        off = next(line for line in screen_lines(app) if "experts" in line)
        box.value = True
        await settle(app, pilot)
        on = next(line for line in screen_lines(app) if "experts" in line)
        assert "X" not in off.split("experts")[0] and "X" in on.split("experts")[0], (off, on)


# --- the validate dialog at 80×24: framed boxes, Start in sight --------------------------------

@pytest.mark.asyncio
async def test_the_validate_dialog_at_80x24_frames_its_boxes_and_shows_start(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await at_run_step(app, pilot)
        await pilot.press("v")
        await settle(app, pilot)
        dialog = app.screen
        assert isinstance(dialog, ValidateDialog)
        # Start is on screen as the dialog opens, nothing scrolled
        start = dialog.query_one("#validate-start")
        assert start.region.height and start.region.bottom <= 24
        assert dialog.get_widget_at(start.region.x + 1, start.region.y + 1)[0] is start
        assert any("Start (Enter / Ctrl+S)" in line for line in screen_lines(app))
        # each text box has a frame, and the focused one's frame is drawn otherwise
        output, python = dialog.query_one("#validate-output", Input), dialog.query_one("#validate-python", Input)
        for box in (output, python):
            assert box.styles.border_top[0] not in ("", "none", "hidden") and box.outer_size.height == 3, box.id
        assert output.has_focus and output.styles.border_top != python.styles.border_top


# --- a stopped validation reads as stopped -------------------------------------------------------

@pytest.mark.asyncio
async def test_a_stopped_validation_says_stopped_not_finished(tmp_path, demo):
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        run = await at_run_step(app, pilot)
        # a validation child that is stopped while its server starts
        run.start([sys.executable, "-c", "import time, sys; print('{\"event\": \"stage\", \"name\": \"serve\", \"status\": \"running\"}', "
                   "file=sys.stderr, flush=True); time.sleep(60)"], kind="validate")
        assert await wait_for(pilot, lambda: run.running and "running: serve" in plain(run.query_one("#run-stats")))
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: run.process is None and "validation stopped" in plain(run.query_one("#run-status")), timeout=60)
        await settle(app, pilot)
        assert plain(run.query_one("#run-stats")).startswith("stopped after ")
        shown = "\n".join(screen_lines(app))
        assert "100%" not in shown and "finished" not in shown, shown


# --- the serve command shown after a write is the one a person types ----------------------------

@pytest.mark.asyncio
@pytest.mark.slow
async def test_after_a_write_the_serve_command_shown_and_copied_is_plain(tmp_path, demo):
    app, ws = make_app(tmp_path, demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await pilot.press("5")
        await settle(app, pilot)
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.busy, timeout=180)
        await settle(app, pilot)
        await pilot.press("c")
        await settle(app, pilot)
        out = app.state.last_output
        copied = app.clipboard
        assert copied.startswith("CUDA_VISIBLE_DEVICES=0 MACA_VISIBLE_DEVICES=0 "), copied
        assert f" vllm serve {out} " in copied and " --tensor-parallel-size 1 " in copied and " --port 8000 " in copied
        assert "$" not in copied and "\\" not in copied and "\n" not in copied
        shown = "".join("".join(screen_lines(app)).split())
        assert "".join(copied.split()) in shown, shown  # all of it on screen (wrapped, a long path cut anywhere)
        # the written serve.sh still follows the devices and TP the user sets
        script = (Path(out) / "serve.sh").read_text()
        assert "${CUDA_VISIBLE_DEVICES:-${MACA_VISIBLE_DEVICES:-" in script and "${TP:-1}" in script
