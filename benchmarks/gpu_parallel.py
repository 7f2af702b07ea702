"""A workspace validated one server at a time against side by side, on one GPU.

    python benchmarks/gpu_parallel.py WORKDIR [--share 0.2] [--timeout 600]

Builds dummy trims of five families (Llama, Qwen3-MoE, Gemma-3 with sliding windows,
Qwen2 with mixed sliding layers, the BF16 DeepSeek-V3 demo: MLA, MoE, MTP) into
WORKDIR/models, then times `mxtrim validate --all WORKDIR/models --serve --again
--gpu-memory-utilization SHARE` serially (`--jobs 1`) and side by side (`--jobs auto`), and
compares each output's two runs: every check's verdict, and the KV cache tokens vLLM logged.
Writes WORKDIR/parallel.md and WORKDIR/parallel.json. Not a test: CI has no GPU; the batch's
rules are tested on the CPU (tests/test_validate_parallel.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fixtures import tiny_models as tm  # noqa: E402

MODELS = {
    "llama": lambda p: tm.make_servable_llama(p, layers=4),
    "qwen3_moe": tm.make_servable_qwen3_moe,
    "gemma3_text": tm.make_servable_gemma3_text,
    "qwen2_mixed_sliding": tm.make_servable_qwen2_mixed_sliding,
    "deepseek_v3_demo": "demo",
}


def mxtrim(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def build(work: Path) -> Path:
    models = work / "models"
    for name, builder in MODELS.items():
        out = models / name
        if out.exists():
            continue
        src = work / "src" / name
        if builder == "demo":
            from mxtrim_tui.demo.build import build_demo

            build_demo(src)
        elif not (src / "config.json").exists():
            builder(src)
        r = mxtrim("trim", str(src), "--mode", "dummy", "--out", str(out))
        if r.returncode != 0:
            raise SystemExit(f"trim of {name} failed: {r.stderr[-2000:]}")
    return models


def batch(models: Path, share: str, timeout: str, jobs: str) -> tuple[float, dict, str]:
    started = time.monotonic()
    r = mxtrim("validate", "--all", str(models), "--serve", "--again", "--gpu-memory-utilization", share, "--timeout", timeout,
               "--python", sys.executable, "--jobs", jobs, "--json")
    wall = time.monotonic() - started
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = {"error": r.stderr[-3000:]}
    return wall, doc, r.stderr


def kv_tokens(run: dict) -> int | None:
    return (((run.get("memory") or {}).get("figures") or {}).get("kv_tokens") or {}).get("actual")


def verdicts(run: dict) -> dict:
    return {r["check"]: r["status"] + (f": {r['verdict']['class']}" if r.get("verdict") else "") for r in run.get("rows", [])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--share", default="0.2")
    ap.add_argument("--timeout", default="600")
    ap.add_argument("--phase", choices=["parallel", "serial", "report", "all"], default="all",
                    help="run one part (each keeps its result in WORKDIR): side by side first, so any kernel cache it "
                    "fills favours the serial run that follows")
    args = ap.parse_args()
    models = build(args.work)
    for phase, jobs in (("parallel", "auto"), ("serial", "1")):
        if args.phase in (phase, "all"):
            wall, matrix, err = batch(models, args.share, args.timeout, jobs)
            runs = {name: json.loads((models / name / "validation.json").read_text())["runs"][-1] for name in MODELS}
            (args.work / f"{phase}.json").write_text(json.dumps({"wall": wall, "matrix": matrix, "stderr": err, "runs": runs}))
            print(f"{phase}: {wall:.1f} s")
    if args.phase not in ("report", "all"):
        return 0
    done = {phase: json.loads((args.work / f"{phase}.json").read_text()) for phase in ("parallel", "serial")}
    serial_s, serial, serial_err, runs_serial = (done["serial"][k] for k in ("wall", "matrix", "stderr", "runs"))
    parallel_s, parallel, parallel_err, runs_parallel = (done["parallel"][k] for k in ("wall", "matrix", "stderr", "runs"))
    rows = []
    for name in MODELS:
        a, b = runs_serial[name], runs_parallel[name]
        ka, kb = kv_tokens(a), kv_tokens(b)
        rows.append({"output": name, "serial_ok": a.get("ok"), "parallel_ok": b.get("ok"),
                     "same_verdicts": verdicts(a) == verdicts(b), "kv_serial": ka, "kv_parallel": kb,
                     "kv_ratio": round(kb / ka, 4) if ka and kb else None,
                     "startup_serial": next((r["detail"] for r in a["rows"] if r["check"] == "start-up"), ""),
                     "startup_parallel": next((r["detail"] for r in b["rows"] if r["check"] == "start-up"), ""),
                     "verdicts_serial": verdicts(a), "verdicts_parallel": verdicts(b)})
    doc = {"share": args.share, "serial_s": round(serial_s, 1), "parallel_s": round(parallel_s, 1),
           "speedup": round(serial_s / parallel_s, 2), "rows": rows, "serial_matrix": serial, "parallel_matrix": parallel,
           "serial_stderr": serial_err[-6000:], "parallel_stderr": parallel_err[-6000:]}
    (args.work / "parallel.json").write_text(json.dumps(doc, indent=2))
    lines = [f"`mxtrim validate --all MODELS --serve --again --gpu-memory-utilization {args.share}`: "
             f"side by side (`--jobs auto`, run first) {parallel_s:.1f} s, serial (`--jobs 1`) {serial_s:.1f} s: "
             f"**{serial_s / parallel_s:.2f}×**", "",
             "| output | ok serial / side by side | same verdicts | KV tokens serial / side by side | start-up serial / side by side |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['output']} | {r['serial_ok']} / {r['parallel_ok']} | {r['same_verdicts']} | "
                     f"{r['kv_serial']} / {r['kv_parallel']} ({r['kv_ratio']}) | {r['startup_serial']} / {r['startup_parallel']} |")
    (args.work / "parallel.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
