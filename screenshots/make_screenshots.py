"""Regenerate screenshots/*.svg and *.png from the real app (`make screenshots`).

Drives the wizard on the bundled demo model through every screen at 100x30, saves Textual's
SVG export of each, and converts it to PNG with cairosvg. ``1b-workspace`` is the first step
again, on a workspace holding reduced models (an output `mxtrim trim` writes, and a hand-made
one with a launch script); ``1c-remote`` is the first step on a Hub repository typed as
``hf://ORG/NAME`` (the demo served by the stand-in Hub of the tests).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from mxtrim_tui.demo.build import build_demo  # noqa: E402
from mxtrim_tui.tui.app import MxtrimApp  # noqa: E402
from tui_support import settle, wait_for  # noqa: E402

SIZE = (100, 30)
ORDER = ["source", "inventory", "selection", "budget", "output"]


async def capture(work: Path) -> list[Path]:
    demo = build_demo(work / "models" / "mxtrim-demo-moe")
    app = MxtrimApp(demo, tree_root=work / "models", workspace=work / "ws")
    shots: list[Path] = []

    def save(name: str) -> None:
        app.clear_notifications()
        path = HERE / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"mxtrim — {name}"))
        shots.append(path)

    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        for n, name in enumerate(ORDER, 1):
            if n > 1:
                await pilot.press("ctrl+n")
                await settle(app, pilot)
            if name == "selection":
                await wait_for(pilot, lambda: app.state.plan is not None)
                await settle(app, pilot)
            if name == "inventory":
                await pilot.press("down", "down", "down")  # highlight an MoE layer: its tensors below
                await settle(app, pilot)
            await pilot.pause(0.1)
            save(f"{n}-{name}")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.state.last_output is not None and not app.get_screen("run").running, timeout=120)
        await settle(app, pilot)
        save("6-run")
        await pilot.press("f1")
        await settle(app, pilot)
        save("7-help")
    return shots


def build_workspace(demo: Path, ws: Path) -> None:
    """Reduced models in ``ws``'s tools/batched_test/models/: two outputs of the demo written by
    the CLI (one validated), and a hand-made example with a launch script."""
    models = ws / "tools" / "batched_test" / "models"
    for keep, mode in (("0,2", "dummy"), ("0,2", "weights")):
        out = models / f"mxtrim-demo-moe-{mode}-2layers"
        subprocess.run([sys.executable, "-m", "mxtrim_tui", "trim", str(demo), "--keep", keep, "--mode", mode, "--out", str(out)],
                       check=True, capture_output=True)
    run = {"started": "2026-11-20T10:00:00+00:00", "ok": True, "mode": "dummy", "rows": [],
           "environment": {"python": "3.11.7", "packages": {"vllm": {"version": "0.31.0"}}}}
    (models / "mxtrim-demo-moe-dummy-2layers" / "validation.json").write_text(json.dumps({"runs": [run]}))
    hand = models / "qwen3-8b-hand"
    hand.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(demo / name, hand / name)
    (hand / "serve.sh").write_text("#!/bin/sh\nvllm serve /data/models/Qwen3-8B-smoke --load-format dummy\n")


async def capture_workspace(work: Path) -> Path:
    """The first step with the workspace list, its first model highlighted."""
    demo = work / "models" / "mxtrim-demo-moe"
    build_workspace(demo, work / "ws-built")
    app = MxtrimApp(demo, tree_root=work / "models", workspace=work / "ws-built")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.inventory is not None)
        await wait_for(pilot, lambda: app.get_screen("source").query_one("#workspace").row_count == 3)
        await settle(app, pilot)
        await pilot.press("ctrl+o")
        await settle(app, pilot)
        app.clear_notifications()
        await pilot.pause(0.1)
        path = HERE / "1b-workspace.svg"
        path.write_text(app.export_screenshot(title="mxtrim — 1b-workspace"))
    return path


async def capture_remote(work: Path) -> Path:
    """The first step on a Hub repository: the demo model served by the stand-in Hub
    (tests/hub_standin.py) and typed as hf://ORG/NAME, read by range requests."""
    from huggingface_hub import constants
    from hub_standin import HubStandIn
    from textual.widgets import Input

    constants.HF_HUB_OFFLINE = False
    with HubStandIn({"mxtrim/mxtrim-demo-moe": work / "models" / "mxtrim-demo-moe"}) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        app = MxtrimApp(None, tree_root=work / "models", workspace=work / "ws-remote")
        async with app.run_test(size=SIZE) as pilot:
            await settle(app, pilot)
            box = app.screen.query_one("#path", Input)
            box.focus()
            box.value = "hf://mxtrim/mxtrim-demo-moe"
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.state.inventory is not None)
            await settle(app, pilot)
            app.clear_notifications()
            await pilot.pause(0.1)
            path = HERE / "1c-remote.svg"
            path.write_text(app.export_screenshot(title="mxtrim — 1c-remote"))
            await pilot.press("ctrl+q")
            await settle(app, pilot)
    return path


def main() -> None:
    import cairosvg

    work = Path(tempfile.mkdtemp(prefix="mxtrim-shots-"))
    os.environ["XDG_CONFIG_HOME"] = str(work / "config")  # keep the user's recent list clean
    try:
        shots = asyncio.run(capture(work))
        shots.insert(1, asyncio.run(capture_workspace(work)))
        (work / "ws-remote").mkdir()
        shots.insert(2, asyncio.run(capture_remote(work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for svg in shots:
        png = svg.with_suffix(".png")
        cairosvg.svg2png(url=str(svg), write_to=str(png), output_width=1400)
        print(f"{svg.name} {png.name}")


if __name__ == "__main__":
    main()
