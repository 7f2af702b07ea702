"""Dummy trim of a DeepSeek-V3-shaped sparse checkpoint, end to end.

Times, in one run on the same checkpoint (warm page cache, best of N):
  * baseline ``inspect``: ``mxtrim inspect --json`` as a subprocess (read + inventory + JSON);
  * ``trim``: ``mxtrim trim --mode dummy`` as a subprocess (read, inventory, auto plan with
    rule verification, rewritten config, assets, report, atomic rename);
  * the in-process stages of the trim.

Usage: python benchmarks/trim_dummy.py [--repeat N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.inventory import ensure_checkpoint  # noqa: E402
from mxtrim_tui.core.model.inventory import build_inventory  # noqa: E402
from mxtrim_tui.core.plan.build import build_plan  # noqa: E402
from mxtrim_tui.core.read.source import open_source  # noqa: E402
from mxtrim_tui.core.write.writer import write_dummy  # noqa: E402


def best_of(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    src = ensure_checkpoint(ROOT / ".bench" / "deepseek-v3-sparse")
    work = Path(tempfile.mkdtemp(prefix="mxtrim-bench-"))
    try:
        py = sys.executable

        def inspect():
            subprocess.run([py, "-m", "mxtrim_tui", "inspect", str(src), "--json"], check=True, capture_output=True, cwd=ROOT)

        counter = iter(range(10**6))

        def trim():
            out = work / f"out{next(counter)}"
            subprocess.run([py, "-m", "mxtrim_tui", "trim", str(src), "--mode", "dummy", "--out", str(out)], check=True, capture_output=True, cwd=ROOT)

        t_inspect = best_of(inspect, args.repeat)
        t_trim = best_of(trim, args.repeat)

        stages = {}
        t0 = time.perf_counter()
        source = open_source(src)
        stages["read (headers, index, files)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        inv = build_inventory(source)
        stages["inventory"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan = build_plan(inv)
        stages["plan (auto selection + verification)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_dummy(plan, work / "inproc")
        stages["write (config, assets, report)"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"checkpoint: {src} (DeepSeek-V3 layout, {len(source.shards)} shards, {source.tensor_count} tensors)")
    print(f"{'subprocess':40} {'best s':>8} {'× baseline':>11}")
    print(f"{'mxtrim inspect --json (baseline)':40} {t_inspect:8.3f} {1.0:11.2f}")
    print(f"{'mxtrim trim --mode dummy':40} {t_trim:8.3f} {t_trim / t_inspect:11.2f}")
    print("in-process stages of one trim:")
    for name, t in stages.items():
        print(f"  {name:38} {t:8.3f}")
    print(f"  {'total':38} {sum(stages.values()):8.3f}")


if __name__ == "__main__":
    main()
