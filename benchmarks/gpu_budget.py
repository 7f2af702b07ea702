"""Weights and KV cache predicted by mxtrim against what vLLM logs, on a real GPU.

    python benchmarks/gpu_budget.py WORKDIR [--device cuda] [--only NAME ...] [--timeout 600]

Cases (each a trim, then `mxtrim validate OUT --serve --json`):

* ``v4_fp8_auto`` / ``v4_fp8_keep03``: the published DeepSeek-V4-Flash-FP8 five-layer config
  (tests/fixtures/published_workspace/…/DeepSeek-V4-Flash-FP8_sgl_project/config.json) in a
  config-only folder with the demo's tokenizer, trimmed dummy to the automatic set and to
  ``--keep 0,3``: the weights per GPU come from the config alone;
* ``demo_dummy``, ``demo_weights_equivalence``, ``demo_dummy_speculative``: the bundled BF16
  DeepSeek-V3 demo (MLA, MoE, MTP), dummy; real weights with ``--equivalence``; dummy with
  ``--speculative``.

Writes WORKDIR/results.json (every validation document) and WORKDIR/table.md: verdicts, weights
and KV cache tokens predicted / logged. Not a test: CI has no GPU; the budget rules it checks
are tested on the CPU (tests/test_budget*.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from gpu_validation import gpu_arguments, mxtrim, results_of, validate_json  # noqa: E402

V4_CONFIG = ROOT / "tests/fixtures/published_workspace/tools/batched_test/models/DeepSeek-V4-Flash-FP8_sgl_project/config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")

# name: (source, trim flags, validate flags)
CASES = {
    "v4_fp8_auto": ("v4", ["--mode", "dummy"], []),
    "v4_fp8_keep03": ("v4", ["--mode", "dummy", "--keep", "0,3"], []),
    "demo_dummy": ("demo", ["--mode", "dummy"], []),
    "demo_weights_equivalence": ("demo", ["--mode", "weights"], ["--equivalence"]),
    "demo_dummy_speculative": ("demo", ["--mode", "dummy"], ["--speculative"]),
}


def source(kind: str, work: Path) -> Path:
    from mxtrim_tui.demo.build import build_demo

    demo = work / "src" / "demo"
    if not demo.exists():
        build_demo(demo)
    if kind == "demo":
        return demo
    v4 = work / "src" / "v4-fp8-config-only"
    if not v4.exists():
        v4.mkdir(parents=True)
        shutil.copy(V4_CONFIG, v4 / "config.json")
        for name in TOKENIZER_FILES:  # a tokenizer of the demo's: a dummy load needs one, not V4's own
            if (demo / name).exists():
                shutil.copy(demo / name, v4 / name)
    return v4


def figures(doc: dict) -> dict:
    memory = (doc.get("memory") or {}).get("figures") or {}
    return {k: memory.get(k) or {} for k in ("weights_bytes", "kv_tokens", "available_kv_bytes")}


def gib(n) -> str:
    return "—" if not n else f"{n / (1 << 30):.2f} GiB"


def row(name: str, doc: dict) -> str:
    if "rows" not in doc:
        return f"| {name} | error: {doc.get('error', '')[-160:]!r} | | | |"
    verdicts = ", ".join(f"{r['check']}: {r['status']}" + (f" ({r['verdict']['class']})" if r.get("verdict") else "")
                         for r in doc["rows"])
    f = figures(doc)
    w, kv = f["weights_bytes"], f["kv_tokens"]
    weights = f"{gib(w.get('predicted'))} / {gib(w.get('actual'))}" + (f" ({w['ratio']:.3f}×)" if w.get("ratio") else "")
    tokens = f"{kv.get('predicted') or 0:,} / {kv.get('actual') or 0:,}" + (f" ({kv['ratio']:.3f}×)" if kv.get("ratio") else "")
    return f"| {name} | {verdicts} | {weights} | {tokens} | {doc.get('exit')} |"


def main() -> int:
    args = gpu_arguments().parse_args()
    work = args.work.resolve()
    path, results = results_of(work)
    for name in args.only or CASES:
        if name in results:
            continue
        kind, trim_flags, validate_flags = CASES[name]
        out = work / "out" / name
        if not out.exists():
            proc = mxtrim("trim", str(source(kind, work)), *trim_flags, "--out", str(out))
            if proc.returncode != 0:
                results[name] = {"error": proc.stderr[-3000:]}
                path.write_text(json.dumps(results, indent=1))
                continue
        doc = validate_json(out, args.device, args.timeout, *validate_flags)
        results[name] = doc
        path.write_text(json.dumps(results, indent=1))
        print(f"{name}: exit {doc['exit']} in {doc['wall_s']} s", flush=True)
    lines = ["| case | checks | weights / GPU predicted / logged | KV cache tokens predicted / logged | exit |",
             "| --- | --- | --- | --- | --- |"]
    lines += [row(name, doc) for name, doc in results.items()]
    (work / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
