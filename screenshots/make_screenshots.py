"""Regenerate screenshots/*.svg and *.png from the real app (`make screenshots`).

Drives the wizard on the bundled demo model through every screen at 100x30, saves Textual's
SVG export of each, and converts it to PNG with cairosvg.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def main() -> None:
    import cairosvg

    work = Path(tempfile.mkdtemp(prefix="mxtrim-shots-"))
    os.environ["XDG_CONFIG_HOME"] = str(work / "config")  # keep the user's recent list clean
    try:
        shots = asyncio.run(capture(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for svg in shots:
        png = svg.with_suffix(".png")
        cairosvg.svg2png(url=str(svg), write_to=str(png), output_width=1400)
        print(f"{svg.name} {png.name}")


if __name__ == "__main__":
    main()
