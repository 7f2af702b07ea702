"""Executed paths and the effective configuration on a real GPU: dummy trims served eagerly
(the in-engine probe counts each kept layer) and in graph mode (torch.compile and CUDA graphs,
a run of its own), by the vLLM of this machine.

    python benchmarks/gpu_paths.py WORKDIR [--device cuda] [--only NAME ...]

Writes WORKDIR/paths.json (every validation document) and WORKDIR/paths.md (one table per
output and run: the effective configuration, the start-up line in graph mode, then each
coverage row's status and evidence). Not a test: CI has no GPU; the probe and the row logic
are tested on vLLM's CPU build (tests/test_paths_served.py, tests/test_effective_config.py,
tests/test_graph_mode.py). `--device cpu --only llama` runs it on vLLM's CPU build (about
1.5 minutes here: the eager run's row executed, the graph run's unverified in graph mode)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.gpu_validation import MODELS, gpu_arguments, mxtrim, results_of, source, validate_json  # noqa: E402

# output: the runs made of its dummy trim (validate flags each)
RUNS = {
    "deepseek_v3_fp8_mla576_mtp": {"eager": ["--speculative"], "graph": ["--graph"]},
    "llama": {"eager": [], "graph": ["--graph"]},
    "gemma3_text": {"eager": []},
    "qwen3_moe": {"eager": []},
}


def row(doc: dict, check: str) -> dict:
    return next((r for r in doc.get("rows", []) if r["check"] == check), {"status": "—", "detail": ""})


def table(key: str, doc: dict) -> list[str]:
    lines = [f"### {key}", ""]
    if "rows" not in doc:
        return lines + [f"error: `{doc.get('error', '')[-400:]}`", ""]
    start, effective = row(doc, "start-up"), row(doc, "effective configuration")
    lines += [f"* start-up: **{start['status']}**: {start['detail']}",
              f"* effective configuration: **{effective['status']}**: {effective['detail']}",
              f"* generation: **{row(doc, 'generation')['status']}**; exit {doc['exit']} after {doc['wall_s']} s", "",
              "| row | kind | layers | status | evidence |", "| --- | --- | --- | --- | --- |"]
    for path in doc.get("paths") or []:
        said = path.get("evidence") or path.get("reason") or ""
        lines.append(f"| {path['row']} | {path['kind']} | {', '.join(path['layers'])} | {path['status']} | "
                     f"{said.replace('|', '/')} |")
    return lines + [""]


def main() -> int:
    args = gpu_arguments().parse_args()
    work = args.work.resolve()
    results_path, results = results_of(work, "paths.json")
    for name in args.only or RUNS:
        out = work / "out" / f"{name}-dummy"
        if not out.exists():
            proc = mxtrim("trim", str(source(name, work)), "--mode", "dummy", "--keep", MODELS[name][1], "--out", str(out))
            if proc.returncode != 0:
                results[f"{name}/trim"] = {"error": proc.stderr[-2000:]}
                continue
        for run, flags in RUNS[name].items():
            key = f"{name}/{run}"
            if key in results:
                continue
            doc = results[key] = validate_json(out, args.device, args.timeout, *flags)
            results_path.write_text(json.dumps(results, indent=1))
            print(f"{key}: exit {doc['exit']} in {doc['wall_s']} s", flush=True)
    lines: list[str] = []
    for key, doc in results.items():
        lines += table(key, doc)
    (work / "paths.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
