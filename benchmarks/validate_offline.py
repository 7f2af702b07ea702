"""Offline validation of a workspace: N dummy trims of a servable Llama validated without a
server (config, tokenizer, chat template, processor, vLLM's registry with its plugins).

Times, in one run, on the same outputs, in vLLM's interpreter (``.venv-vllm`` of this checkout
or ``--python``), round-robin, best and median of ``--repeat``:
  * baseline: ``mxtrim validate OUT`` once per output, one after the other (one probe each);
  * ``mxtrim validate OUT1 … OUTN``: one batch (one probe for all: the registry read once).
Both record the same rows for every output (checked each round).

Usage: python benchmarks/validate_offline.py [--outputs N] [--repeat R] [--python PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fixtures.tiny_models import make_servable_llama  # noqa: E402


def mxtrim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, cwd=ROOT)


def last_rows(out: Path) -> list[tuple]:
    run = json.loads((out / "validation.json").read_text())["runs"][-1]
    return [(r["check"], r["status"], r["detail"]) for r in run["rows"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--outputs", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mxtrim-bench-"))
    try:
        src = make_servable_llama(work / "llama", layers=4)
        outs = []
        for i in range(args.outputs):
            out = work / "models" / f"llama-{i}"
            r = mxtrim("trim", str(src), "--keep", str(i % 4), "--mode", "dummy", "--out", str(out))
            assert r.returncode == 0, r.stderr
            outs.append(out)
        common = ["--python", args.python, "--device", "cpu", "--json"]

        runs = {}

        def alone():
            for out in outs:
                assert mxtrim("validate", str(out), *common).returncode == 0

        def batch():
            r = mxtrim("validate", *map(str, outs), *common, "--again", "--matrix", str(work))
            assert r.returncode == 0, r.stderr[-2000:]
            assert {row["state"] for row in json.loads(r.stdout)["rows"]} == {"validated"}

        times = {"alone": [], "batch": []}
        for _ in range(args.repeat):
            for name, fn in (("alone", alone), ("batch", batch)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
                rows = [last_rows(out) for out in outs]
                count = [len(json.loads((out / "validation.json").read_text())["runs"]) for out in outs]
                assert count != runs.get("count"), "nothing was recorded: a run was reused"
                runs["count"] = count
                if name == "alone":
                    expected = rows
                assert rows == expected, "the batch recorded other rows than the outputs validated alone"
        base = times["alone"]
        print(f"{args.outputs} outputs, offline validation, {args.repeat} rounds (same rows both ways)")
        print("| method | best s | median s | × baseline's time (best) | × baseline's time (median) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, label in (("alone", f"baseline: `validate OUT` × {args.outputs}"), ("batch", f"`validate OUT1 … OUT{args.outputs}`")):
            t = times[name]
            print(f"| {label} | {min(t):.2f} | {statistics.median(t):.2f} | {min(t) / min(base):.2f} | "
                  f"{statistics.median(t) / statistics.median(base):.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
