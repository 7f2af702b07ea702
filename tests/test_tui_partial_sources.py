"""The wizard on sources that are not complete downloads: the index alone, and a partial
download holding exactly the shards a trim needs (symlinked, as a Hub cache snapshot does).

What the user sees is checked against the index itself: the shards a selection needs are
those holding any tensor outside the dropped text layers."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from synth.checkpoint import write_checkpoint
from synth.layouts.deepseek import deepseek_v3
from mxtrim_tui.tui.app import ErrorScreen
from tui_support import make_app, plain, settle, wait_for

INDEX = "model.safetensors.index.json"
TEXT_LAYERS = 6  # layers 0-2 dense, 3-5 MoE; model.layers.6 is the MTP head
LAYER = re.compile(r"model\.layers\.(\d+)\.")


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def needed_by(weight_map: dict, kept: set[int]) -> list[str]:
    """The shards holding a tensor that a trim keeping text layers ``kept`` (MTP kept) retains."""
    dropped = set(range(TEXT_LAYERS)) - kept
    return sorted({shard for name, shard in weight_map.items()
                   if not ((m := LAYER.match(name)) and int(m.group(1)) in dropped)})


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("partial-sources")
    layout = deepseek_v3(num_layers=TEXT_LAYERS, num_experts=8, hidden_size=64, moe_intermediate_size=16,
                         intermediate_size=64, vocab_size=256, q_lora_rank=32, kv_lora_rank=32)
    complete = write_checkpoint(base / "complete" / "DeepSeek-V3", layout, data="sparse",
                                max_shard_bytes=layout.total_bytes // 20)
    weight_map = json.loads((complete / INDEX).read_text())["weight_map"]
    listed = len(set(weight_map.values()))
    auto = needed_by(weight_map, {0, 3})  # the automatic set: one dense and one MoE layer
    assert 1 < len(auto) < listed  # a trim needs some of the shards, not all
    dirs = {}
    for state, linked in (("index-only", []), ("partial", auto)):
        d = base / state / "DeepSeek-V3"
        d.mkdir(parents=True)
        for f in complete.iterdir():
            if f.suffix != ".safetensors":
                shutil.copy2(f, d / f.name)
        for name in linked:
            os.symlink(complete / name, d / name)
        dirs[state] = d
    return dirs, weight_map, listed, auto


async def open_wizard(pilot, app):
    assert await wait_for(pilot, lambda: app.state.inventory is not None)
    await settle(app, pilot)


async def goto(pilot, app, step: str) -> None:
    await pilot.press(str(["source", "inventory", "selection", "budget", "output", "run"].index(step) + 1))
    await settle(app, pilot)
    assert app.screen.id == step


async def keep_spec(pilot, app, spec: str) -> None:
    await pilot.press("e")
    app.screen.query_one("#spec").value = ""
    for ch in spec:
        await pilot.press(ch)
    await pilot.press("enter")
    await settle(app, pilot)


def needed_line(app) -> str:
    return plain(app.screen.query_one("#needed-line")).strip()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_index_only_source_shows_what_is_missing_and_offers_no_real_weights(sources, tmp_path):
    (dirs, weight_map, listed, auto) = sources
    app, ws = make_app(tmp_path, dirs["index-only"])
    async with app.run_test(size=(160, 48)) as pilot:
        await open_wizard(pilot, app)
        # 1. source: what kind of source, the index's shards, no claim about shards on disk
        summary = plain(app.screen.query_one("#summary"))
        assert f"index only: {INDEX} lists {listed} shard(s), none present" in summary
        assert f"lists {listed} shards, 0 present" in summary
        assert "config-only" not in summary and "consistent with the shards" not in summary
        # 2. inventory: sizes not known are "unknown", never 0 B
        await goto(pilot, app, "inventory")
        layers = app.screen.query_one("#layer-table")
        sizes = {str(layers.get_row_at(i)[3]) for i in range(layers.row_count)}
        assert sizes == {"unknown"}
        # 3. selection: the shards the automatic set needs, all of them missing
        await goto(pilot, app, "selection")
        line = needed_line(app)
        assert line.startswith(f"real-weight trim needs {len(auto)} of {listed} shards") and "), 0 present" in line
        assert f"missing: {auto[0]}, {auto[1]}" in line
        layer_sizes = {str(row[4]) for row in map(app.screen.query_one("#keep-table").get_row_at, range(TEXT_LAYERS))}
        assert layer_sizes == {"unknown"}
        # the line follows the selection
        await keep_spec(pilot, app, "0")
        assert app.state.plan.kept["text"] == [0]
        fewer = needed_by(weight_map, {0})
        assert len(fewer) < len(auto)
        assert needed_line(app).startswith(f"real-weight trim needs {len(fewer)} of {listed} shards")
        # 5. output: real weights not offered, with the reason naming the shards to fetch
        await goto(pilot, app, "output")
        assert app.screen.query_one("#mode-weights").disabled
        out = plain(app.screen.query_one("#output-summary"))
        assert f"real weights need {len(fewer)} shard(s) that are not in the source" in out
        assert fewer[0] in out
        app.screen.query_one("#mode").focus()
        await pilot.press("down", "enter")  # the keys that pick real weights on a complete source
        await settle(app, pilot)
        await pilot.click("#mode-weights")
        await settle(app, pilot)
        assert app.state.mode == "dummy"
    assert not any(ws.iterdir())


@pytest.mark.asyncio
@pytest.mark.slow
async def test_partial_source_allows_real_weights_only_while_the_needed_shards_are_present(sources, tmp_path):
    (dirs, weight_map, listed, auto) = sources
    app, ws = make_app(tmp_path, dirs["partial"])
    async with app.run_test(size=(160, 48)) as pilot:
        await open_wizard(pilot, app)
        summary = plain(app.screen.query_one("#summary"))
        assert f"partial download: {len(auto)} of {listed} shards present" in summary
        assert f"lists {listed} shards, {len(auto)} present" in summary
        # selection: the automatic set needs exactly the shards on disk
        await goto(pilot, app, "selection")
        assert needed_line(app).startswith(f"real-weight trim needs {len(auto)} of {listed} shards")
        assert needed_line(app).endswith(f"{len(auto)} present") and "missing" not in needed_line(app)
        # output: real weights can be chosen, sized, no blocker
        await goto(pilot, app, "output")
        assert not app.screen.query_one("#mode-weights").disabled
        app.screen.query_one("#mode").focus()
        await pilot.press("down", "enter")
        await settle(app, pilot)
        assert app.state.mode == "weights"
        out = plain(app.screen.query_one("#output-summary"))
        assert "free on the filesystem" in out and "blocked" not in out
        # a layer whose shards are not on disk: the selection names them, the write is refused
        await goto(pilot, app, "selection")
        await keep_spec(pilot, app, "0,1,3")
        missing = sorted(set(needed_by(weight_map, {0, 1, 3})) - set(auto))
        assert missing
        line = needed_line(app)
        assert f"), {len(auto)} present" in line and f"missing: {missing[0]}" in line
        shards_tab = plain(app.screen.query_one("#shards-view"))
        assert f"{missing[0]} (missing)" in shards_tab and f"{auto[0]} (missing)" not in shards_tab
        await goto(pilot, app, "budget")  # sized as what can be written; retained bytes partly known
        disk = plain(app.screen.query_one("#disk-view"))
        assert "dummy output" in disk and f"✗ real weights need {len(missing)} shard(s)" in disk
        assert re.search(r"weights +≥ [\d.]+ KiB retained", plain(app.screen.query_one("#budget-view")))
        await goto(pilot, app, "output")
        assert app.state.mode == "weights"  # the user's choice stands, blocked
        out = plain(app.screen.query_one("#output-summary"))
        assert "blocked" in out and f"real weights need {len(missing)} shard(s)" in out and missing[0] in out
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert isinstance(app.screen, ErrorScreen) and missing[0] in app.screen.message
        assert not any(ws.iterdir()) and not app.get_screen("run").running
        await pilot.press("escape")
        await settle(app, pilot)
        # back to the automatic set: the real-weight trim runs from the partial download
        await goto(pilot, app, "selection")
        await pilot.press("a")
        await settle(app, pilot)
        await goto(pilot, app, "output")
        assert "blocked" not in plain(app.screen.query_one("#output-summary"))
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=180)
        await settle(app, pilot)
        log_text = "\n".join(str(line.text) for line in run.query_one("#run-log").lines)
        assert "done (exit 0)" in log_text, log_text[-2000:]
    out_dir = Path(app.state.last_output)
    assert (out_dir / "extract_weights.py").exists() and list(out_dir.glob("*.safetensors"))


@pytest.mark.asyncio
async def test_the_selection_summary_counts_every_warning_the_issues_tab_lists(sources, tmp_path):
    """An index alone: "real weights" is one of the warnings listed, and counted with the others."""
    (dirs, weight_map, listed, auto) = sources
    app, ws = make_app(tmp_path, dirs["index-only"])
    async with app.run_test(size=(160, 48)) as pilot:
        await open_wizard(pilot, app)
        await goto(pilot, app, "selection")
        issues = plain(app.screen.query_one("#issues-view"))
        assert "⚠ real weights: " in issues
        listed_warnings = issues.count("⚠ ")
        assert re.search(rf"⚠{listed_warnings}\b", plain(app.screen.query_one("#selection-summary"))), (
            issues, plain(app.screen.query_one("#selection-summary")))
