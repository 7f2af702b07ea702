"""A workspace validated one server at a time against side by side, on one GPU.

    python benchmarks/gpu_parallel.py WORKDIR [--share 0.2] [--timeout 600] [--starting K] [--phase P]
                                      [--models a,b] [--baseline serial|parallel]

Builds dummy trims of five families (Llama, Qwen3-MoE, Gemma-3 with sliding windows,
Qwen2 with mixed sliding layers, the BF16 DeepSeek-V3 demo: MLA, MoE, MTP) into
WORKDIR/models, then times `mxtrim validate --all WORKDIR/models --serve --again
--gpu-memory-utilization SHARE` serially (`--jobs 1`), side by side (`--jobs auto`) and side by
side with at most K servers in their CPU start-up at once (`--jobs auto --starting K`), and
compares each output's runs: every check's verdict, and the KV cache tokens vLLM logged. The
`ray` phase validates the same workspace as tasks of a one-node Ray cluster of this machine's
GPUs (`ray start --head`, then `--ray auto`; stopped after), against the baseline phase.

Every phase starts from empty compile caches of its own (vLLM's, TorchInductor's and Triton's,
under WORKDIR/caches/PHASE), as a re-validation after a vLLM upgrade does: a phase does not
reuse what an earlier one compiled (`--shared-caches` lets them share the user's caches).
Each phase keeps WORKDIR/PHASE.json; the report writes WORKDIR/report.md and report.json.
Not a test: CI has no GPU; the batch's rules are tested on the CPU (tests/test_validate_parallel.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fixtures import tiny_models as tm  # noqa: E402
from mxtrim_tui.core.validate.examples import last_run  # noqa: E402

MODELS = {
    "llama": lambda p: tm.make_servable_llama(p, layers=4),
    "qwen3_moe": tm.make_servable_qwen3_moe,
    "gemma3_text": tm.make_servable_gemma3_text,
    "qwen2_mixed_sliding": tm.make_servable_qwen2_mixed_sliding,
    "deepseek_v3_demo": "demo",
}


def mxtrim(*args: str, timeout: float = 3600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=None if env is None else {**os.environ, **env})


def fresh_caches(folder: Path) -> dict:
    """Environment giving vLLM, TorchInductor and Triton empty cache folders under ``folder``."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    names = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
    for sub in names.values():
        (folder / sub).mkdir(parents=True)
    return {var: str(folder / sub) for var, sub in names.items()}


def build(work: Path, names: list[str]) -> Path:
    models = work / "models"
    for name, builder in ((n, MODELS[n]) for n in names):
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


def batch(models: Path, share: str, timeout: str, jobs: list[str], env: dict | None) -> tuple[float, dict, str]:
    started = time.monotonic()
    r = mxtrim("validate", "--all", str(models), "--serve", "--again", "--gpu-memory-utilization", share, "--timeout", timeout,
               "--python", sys.executable, *jobs, "--json", env=env)
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


PHASES = ("parallel", "starting", "serial", "ray")  # in the order they run
RAY_CLI = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


@contextlib.contextmanager
def ray_head(env: dict | None):
    """A one-node Ray cluster of this machine (its GPUs as Ray detects them), stopped after; its
    workers, and so the validations and servers they start, get ``env`` (the phase's caches)."""
    subprocess.run([*RAY_CLI, "start", "--head", "--include-dashboard=false", "--disable-usage-stats"], check=True,
                   capture_output=True, text=True, env={**os.environ, **(env or {})})
    try:
        yield
    finally:
        subprocess.run([*RAY_CLI, "stop", "--force"], capture_output=True, text=True)


def phase_file(phase: str, starting: str) -> str:
    """The result file's stem: ``starting`` phases keep one file per K (starting2, starting3 ...)."""
    return f"starting{starting}" if phase == "starting" else phase


def run_phase(args, models: Path, phase: str) -> None:
    jobs = {"parallel": ["--jobs", "auto"], "starting": ["--jobs", "auto", "--starting", args.starting], "serial": ["--jobs", "1"],
            "ray": ["--ray", "auto"]}[phase]
    env = None if args.shared_caches else fresh_caches(args.work / "caches" / phase)
    with ray_head(env) if phase == "ray" else contextlib.nullcontext():
        wall, matrix, err = batch(models, args.share, args.timeout, jobs, env)
    runs = {name: last_run(models / name) for name in args.models}
    (args.work / f"{phase_file(phase, args.starting)}.json").write_text(json.dumps({"wall": wall, "matrix": matrix, "stderr": err, "runs": runs, "argv": jobs}))
    print(f"{phase}: {wall:.1f} s")


def startup(run: dict) -> str:
    return next((r["detail"] for r in run["rows"] if r["check"] == "start-up"), "")


def compare(serial_runs: dict, other_runs: dict) -> list[dict]:
    rows = []
    for name in serial_runs:
        a, b = serial_runs[name], other_runs[name]
        ka, kb = kv_tokens(a), kv_tokens(b)
        va, vb = verdicts(a), verdicts(b)
        rows.append({"output": name, "serial_ok": a.get("ok"), "other_ok": b.get("ok"), "same_verdicts": va == vb,
                     "kv_serial": ka, "kv_other": kb, "kv_ratio": round(kb / ka, 4) if ka and kb else None,
                     "startup_serial": startup(a), "startup_other": startup(b), "verdicts_serial": va, "verdicts_other": vb})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--share", default="0.2")
    ap.add_argument("--timeout", default="600")
    ap.add_argument("--starting", default="2", help="K of the third phase, --jobs auto --starting K")
    ap.add_argument("--shared-caches", action="store_true", help="every phase uses the user's compile caches")
    ap.add_argument("--phase", choices=[*PHASES, "report", "all"], default="all",
                    help="run one part (each keeps its result in WORKDIR), or all of them in the order "
                    + ", ".join(PHASES) + ", then the report")
    ap.add_argument("--models", default=",".join(MODELS), help="the outputs of the workspace (default: all five)")
    ap.add_argument("--baseline", choices=("serial", "parallel"), default="serial", help="the phase the others are compared with")
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    if args.phase != "report":
        models = build(args.work, args.models)
        for phase in PHASES:
            if args.phase in (phase, "all"):
                run_phase(args, models, phase)
    if args.phase not in ("report", "all"):
        return 0
    stems = [args.baseline, *(p for p in ("serial", "parallel") if p != args.baseline),
             *sorted(p.stem for p in args.work.glob("starting*.json")), "ray"]
    done = {p: json.loads((args.work / f"{p}.json").read_text()) for p in stems if (args.work / f"{p}.json").exists()}
    serial = done[args.baseline]  # the baseline (the serial run unless --baseline says otherwise)
    doc = {"share": args.share, "fresh_caches": not args.shared_caches, "baseline": args.baseline,
           "baseline_s": round(serial["wall"], 1), "phases": {}}
    lines = [f"`mxtrim validate --all MODELS --serve --again --gpu-memory-utilization {args.share}`, each phase from "
             + ("empty compile caches" if not args.shared_caches else "the user's compile caches")
             + f": {args.baseline} (`{' '.join(serial['argv'])}`) {serial['wall']:.1f} s", ""]
    for phase in stems[1:]:
        if phase not in done:
            continue
        other = done[phase]
        rows = compare(serial["runs"], other["runs"])
        doc["phases"][phase] = {"argv": other["argv"], "wall_s": round(other["wall"], 1),
                                "speedup": round(serial["wall"] / other["wall"], 2), "rows": rows, "matrix": other["matrix"],
                                "stderr": other["stderr"][-6000:]}
        lines += [f"`{' '.join(other['argv'])}`: {other['wall']:.1f} s, **{serial['wall'] / other['wall']:.2f}×** the {args.baseline} run", "",
                  f"| output | ok {args.baseline} / this | same verdicts | KV tokens {args.baseline} / this | start-up {args.baseline} / this |",
                  "| --- | --- | --- | --- | --- |"]
        for r in rows:
            lines.append(f"| {r['output']} | {r['serial_ok']} / {r['other_ok']} | {r['same_verdicts']} | "
                         f"{r['kv_serial']} / {r['kv_other']} ({r['kv_ratio']}) | {r['startup_serial']} / {r['startup_other']} |")
        lines.append("")
    doc["baseline_matrix"], doc["baseline_stderr"] = serial["matrix"], serial["stderr"][-6000:]
    (args.work / "report.json").write_text(json.dumps(doc, indent=2))
    (args.work / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
