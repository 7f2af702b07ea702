"""Validation verdicts on a real GPU: dummy and real-weight trims of tiny Llama, Qwen3-MoE,
Gemma-3 and the block-FP8 DeepSeek-V3 demo (MLA, MoE, MTP) served by the vLLM of this machine,
with equivalence for real weights and speculative decoding through the kept MTP layer.

    python benchmarks/gpu_validation.py WORKDIR [--device cuda] [--only NAME ...]

Writes WORKDIR/results.json (every validation document) and WORKDIR/table.md (verdicts, KV
tokens predicted / logged). Not a test: CI has no GPU; the verdict logic it exercises is tested
on the CPU (tests/test_verdicts.py, tests/test_validate*.py). The README's GPU table is this
script's table.md from the device machine (vLLM 0.26.0, CUDA build, one H200)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fixtures import tiny_models as tm  # noqa: E402

# name: (builder or "demo", kept layers, extra validate flags for real weights)
MODELS = {
    "llama": (lambda p: tm.make_servable_llama(p, layers=4), "0", ["--equivalence"]),
    "qwen3_moe": (tm.make_servable_qwen3_moe, "1,3", ["--equivalence"]),
    "gemma3_text": (tm.make_servable_gemma3_text, "0,2", ["--equivalence"]),
    "deepseek_v3_fp8_mtp": ("demo", "0,2", ["--speculative", "--equivalence"]),
    # the demo with DeepSeek-V3's own attention sizes (kv_lora_rank 512, rope 64, nope / v 128):
    # vLLM's GPU MLA kernels take no others
    "deepseek_v3_fp8_mla576_mtp": ("demo-mla576", "0,2", ["--speculative", "--equivalence"]),
}
MLA576 = {"KV_LORA": 512, "QK_NOPE": 128, "QK_ROPE": 64, "V_HEAD": 128}


def mxtrim(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def validate_json(out: Path, device: str, timeout: str, *flags: str) -> dict:
    """``mxtrim validate OUT --serve --json …``: its document, with the wall time and the exit
    status (the error text where it printed none)."""
    started = time.monotonic()
    proc = mxtrim("validate", str(out), "--device", device, "--json", "--timeout", timeout, "--serve", *flags)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {"error": (proc.stderr or proc.stdout)[-3000:]}
    doc["wall_s"] = round(time.monotonic() - started, 1)
    doc["exit"] = proc.returncode
    return doc


def results_of(work: Path, name: str = "results.json") -> tuple[Path, dict]:
    """WORK/NAME and what an earlier run left in it (a run resumes where it stopped)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / name
    return path, (json.loads(path.read_text()) if path.exists() else {})


def gpu_arguments(timeout: str = "600") -> argparse.ArgumentParser:
    """The arguments every GPU benchmark takes: WORK, --device, --only NAME..., --timeout S."""
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", default=timeout)
    return ap


def source(name: str, work: Path) -> Path:
    builder = MODELS[name][0]
    if builder in ("demo", "demo-mla576"):
        from mxtrim_tui.demo import build as demo

        path = work / "src" / name
        if not path.exists():
            # the block-FP8 demo, as measured; demo-mla576 at DeepSeek-V3's MLA sizes
            variant = demo.VARIANTS["fp8"]
            if builder == "demo-mla576":
                variant = dataclasses.replace(variant, **{k.lower(): v for k, v in MLA576.items()})
            demo.build_demo(path, variant)
        return path
    path = work / "src" / name
    return path if (path / "config.json").exists() else builder(path)


def cell(doc: dict, check: str) -> str:
    row = next((r for r in doc.get("rows", []) if r["check"] == check), None)
    if row is None:
        return "—"
    status = row["status"]
    if status == "failed" and row.get("verdict"):
        status += f": {row['verdict']['class']}"
    if check.startswith("equivalence") and row.get("data", {}).get("verdict"):
        status = f"{status} ({row['data']['verdict']})"
    if check.startswith("speculative") and (row.get("data") or {}).get("spec_decode"):
        c = row["data"]["spec_decode"]
        status += f" ({c['drafted']:g} drafted, {c['accepted']:g} accepted)"
    return status


def main() -> int:
    args = gpu_arguments("300").parse_args()
    work = args.work.resolve()
    results_path, results = results_of(work)
    for name in args.only or MODELS:
        src = source(name, work)
        keep, extra = MODELS[name][1], MODELS[name][2]
        for mode in ("dummy", "weights"):
            key = f"{name}/{mode}"
            if key in results:
                continue
            out = work / "out" / f"{name}-{mode}"
            if not out.exists():
                proc = mxtrim("trim", str(src), "--mode", mode, "--keep", keep, "--out", str(out))
                if proc.returncode != 0:
                    results[key] = {"error": proc.stderr[-2000:]}
                    continue
            flags = extra if mode == "weights" else [f for f in extra if f == "--speculative"]
            doc = results[key] = validate_json(out, args.device, args.timeout, *flags)
            results_path.write_text(json.dumps(results, indent=1))
            print(f"{key}: exit {doc['exit']} in {doc['wall_s']} s", flush=True)
    lines = ["| model | mode | start-up | generation | long input | speculative (MTP) | equivalence | KV tokens predicted / logged | exit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, doc in results.items():
        name, mode = key.split("/")
        if "rows" not in doc:
            lines.append(f"| {name} | {mode} | error: {doc.get('error', '')[:120]!r} | | | | | | |")
            continue
        kv = ((doc.get("memory") or {}).get("figures") or {}).get("kv_tokens") or {}
        tokens = f"{kv.get('predicted') or 0:,} / {kv.get('actual') or 0:,}" + (f" ({kv['ratio']:.2f}×)" if kv.get("ratio") else "")
        lines.append(f"| {name} | {mode} | {cell(doc, 'start-up')} | {cell(doc, 'generation')} | {cell(doc, 'long input')} | "
                     f"{cell(doc, 'speculative decoding (MTP)')} | {cell(doc, 'equivalence with the original (greedy tokens)')} | "
                     f"{tokens} | {doc['exit']} |")
    (work / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
