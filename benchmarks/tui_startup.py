"""Wizard start-up: time from process start to the first frame of the source screen, and to
a ready inventory of a DeepSeek-V3-shaped sparse checkpoint (163 shards, 91,991 tensors).

Runs `python -m mxtrim_tui tui SRC` headless as a real process; the app appends timing
marks (wall clock) to MXTRIM_TIMING_FILE and exits once the inventory is ready. Baseline in
the same run: `python -c "import textual.app"` (interpreter + Textual import alone).
Targets: first frame < 1.0 s, ready inventory < 1.5 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.inventory import ensure_checkpoint  # noqa: E402


def one_run(src: Path, home: Path) -> tuple[float, float]:
    """Seconds from launch to the first frame and to the inventory being ready."""
    with tempfile.NamedTemporaryFile("r", suffix=".marks") as marks:
        env = dict(os.environ, MXTRIM_TIMING_FILE=marks.name, MXTRIM_EXIT_WHEN_READY="1", MXTRIM_HEADLESS="1",
                   XDG_CONFIG_HOME=str(home))
        t0 = time.time()
        subprocess.run([sys.executable, "-m", "mxtrim_tui", "tui", str(src)], env=env, check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        stamps = dict(line.split() for line in Path(marks.name).read_text().splitlines())
    return float(stamps["first_frame"]) - t0, float(stamps["inventory_ready"]) - t0


def main() -> None:
    src = ensure_checkpoint(ROOT / ".bench" / "deepseek-v3-sparse")
    home = Path(tempfile.mkdtemp(prefix="mxtrim-bench-home-"))
    base = []
    for _ in range(5):
        t0 = time.time()
        subprocess.run([sys.executable, "-c", "import textual.app"], check=True)
        base.append(time.time() - t0)
    first, ready = zip(*(one_run(src, home) for _ in range(5)))
    b = min(base)
    print(f"checkpoint: {src}")
    print(f"{'measure':44} {'best s':>7} {'median s':>9} {'× baseline':>11}")
    label = 'baseline: python -c "import textual.app"'
    print(f"{label:44} {b:7.3f} {statistics.median(base):9.3f} {1.0:11.2f}")
    print(f"{'first frame of the source screen':44} {min(first):7.3f} {statistics.median(first):9.3f} {min(first) / b:11.2f}")
    print(f"{'inventory of DeepSeek-V3 (sparse) ready':44} {min(ready):7.3f} {statistics.median(ready):9.3f} {min(ready) / b:11.2f}")


if __name__ == "__main__":
    main()
