"""Tensor parallelism on two GPUs: real-weight trims served by vLLM at TP=2, each worker's
weights and KV budget as vLLM logs them beside mxtrim's per-rank prediction, and a TP size
the plan refuses, served anyway to show that vLLM refuses it too.

    python benchmarks/gpu_tp.py WORKDIR [--device cuda] [--small] [--only NAME ...]

Models are built here, in WORKDIR (no download), wide enough that vLLM's two-decimal GiB
figures resolve each rank's share:

* ``llama_tp2``: Llama-3-8B's widths (hidden 4096, MLP 14336, 32 heads, 8 KV heads), 4 layers,
  keep 0 and 3, real weights, ``--tp 2 --equivalence``;
* ``deepseek_fp8_tp2``: DeepSeek-V3's layout (MLA with its own head sizes, block-FP8, MoE with
  a shared expert, MTP) at hidden 2048, 16 heads, 64 routed experts of 512, dense MLP 4096,
  so that every TP share is whole 128 × 128 blocks; keep 0 (dense) and 2 (MoE) and the MTP
  layer, real weights, ``--tp 2 --speculative``, then again with ``--enable-expert-parallel``;
* ``deepseek_fp8_refused``: the same with experts of 384: ``mxtrim plan --tp 2`` refuses it
  (192 rows per rank), and ``mxtrim validate --serve --tp 2`` of its TP=1 dummy trim shows
  vLLM's own refusal.

``--small`` scales every width down (CPU dry run of the flow). Writes WORKDIR/results.json
and WORKDIR/table.md. Not a test: CI has no GPU. The README's TP=2 table is this script's
table.md from the device machine (two H200s, vLLM 0.26.0's CUDA build)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.gpu_validation import cell, gpu_arguments, mxtrim, results_of, validate_json as validate  # noqa: E402

GIB = 2**30
DEEPSEEK = {"HIDDEN": 2048, "N_HEADS": 16, "Q_LORA": 1536, "KV_LORA": 512, "QK_NOPE": 128, "QK_ROPE": 64, "V_HEAD": 128,
            "INTERMEDIATE": 4096, "MOE_INTERMEDIATE": 512, "N_ROUTED": 64, "N_SHARED": 1, "TOP_K": 2}
SMALL = {"HIDDEN": 256, "N_HEADS": 4, "Q_LORA": 256, "INTERMEDIATE": 512, "MOE_INTERMEDIATE": 256, "N_ROUTED": 8}


def build_llama(path: Path, small: bool) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig

    from fixtures.tiny_models import _tokenizer_first

    if (path / "config.json").exists():
        return path
    path, tokens = _tokenizer_first(path)
    widths = dict(hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=4) if small else \
        dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8)
    config = LlamaConfig(**tokens, **widths, num_hidden_layers=4, max_position_embeddings=8192, rope_theta=500000.0,
                         tie_word_embeddings=False)
    torch.manual_seed(20261204)
    # on the CPU: a CUDA context here would make the GPU busy for mxtrim's device choice
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    model.save_pretrained(path)
    return path


def build_deepseek(path: Path, small: bool, moe_intermediate: int | None = None) -> Path:
    from mxtrim_tui.demo import build as demo

    if (path / "config.json").exists():
        return path
    sizes = dict(DEEPSEEK, **(SMALL if small else {}))
    if moe_intermediate:
        sizes["MOE_INTERMEDIATE"] = moe_intermediate
    demo.build_demo(path, dataclasses.replace(demo.VARIANTS["fp8"], **{k.lower(): v for k, v in sizes.items()}))
    return path


def trim(src: Path, out: Path, mode: str, keep: str, *extra: str) -> dict:
    if out.exists():
        return {"exit": 0}
    proc = mxtrim("trim", str(src), "--mode", mode, "--keep", keep, "--out", str(out), *extra)
    return {"exit": proc.returncode, "stderr": proc.stderr[-3000:]}


def runs(work: Path, small: bool, device: str, timeout: str, tp: int) -> dict:
    """name -> (thunk giving its result document)."""
    src = work / "src"
    out = work / "out"
    tp_flags = ["--tp", str(tp)]

    def llama():
        s = build_llama(src / "llama", small)
        t = trim(s, out / "llama-weights", "weights", "0,3")
        return t if t["exit"] else validate(out / "llama-weights", device, timeout, *tp_flags, "--equivalence")

    def deepseek(*flags):
        def run():
            s = build_deepseek(src / "deepseek", small)
            t = trim(s, out / "deepseek-weights", "weights", "0,2")
            return t if t["exit"] else validate(out / "deepseek-weights", device, timeout, *tp_flags, "--speculative", *flags)
        return run

    def refused():
        s = build_deepseek(src / "deepseek-384", small, moe_intermediate=384 if not small else 128 + 64)
        refusal = mxtrim("plan", str(s), "--keep", "0,2", "--tp", "2")
        if tp < 2:
            return {"plan_exit": refusal.returncode, "plan_refusal": [ln for ln in refusal.stderr.splitlines() if "--tp" in ln],
                    "note": "TP=2 not served: one GPU"}
        t = trim(s, out / "deepseek-384-dummy", "dummy", "0,2")
        doc = t if t["exit"] else validate(out / "deepseek-384-dummy", device, timeout, *tp_flags)
        doc["plan_exit"] = refusal.returncode
        doc["plan_refusal"] = [line for line in refusal.stderr.splitlines() if "--tp" in line]
        return doc

    found = {f"llama_tp{tp}": llama, f"deepseek_fp8_tp{tp}": deepseek()}
    if tp > 1:  # expert parallelism and a TP refusal need two GPUs; one GPU shows the plan's refusal only
        found[f"deepseek_fp8_tp{tp}_ep"] = deepseek("--enable-expert-parallel")
    found["deepseek_fp8_refused"] = refused
    return found


def gib(value) -> str:
    return "—" if value is None else f"{value / GIB:.3f}"


def rank_cells(doc: dict) -> str:
    mem = doc.get("memory") or {}
    ranks = mem.get("weights_by_rank") or {}
    if not ranks:
        row = (mem.get("figures") or {}).get("weights_bytes") or {}
        return f"{gib(row.get('predicted'))} / {gib(row.get('actual'))}"
    return "<br>".join(f"{rank}: {gib(r['predicted'])} / {gib(r['actual'])}" + (" ✓" if r["agrees"] else " ✗" if r["agrees"] is False else "")
                       for rank, r in ranks.items())


def kv_cells(doc: dict) -> tuple[str, str]:
    figures = (doc.get("memory") or {}).get("figures") or {}
    kv = figures.get("available_kv_bytes") or {}
    tokens = figures.get("kv_tokens") or {}
    ratio = f" ({tokens['ratio']:.3f}×)" if tokens.get("ratio") else ""
    return (f"{gib(kv.get('predicted'))} / {gib(kv.get('actual'))}",
            f"{tokens.get('predicted') or 0:,} / {tokens.get('actual') or 0:,}{ratio}")


def table(results: dict) -> str:
    lines = ["| run | start-up | generation | speculative (MTP) | equivalence | memory check | weights per rank, GiB predicted / logged "
             "| KV memory, GiB predicted / logged | KV tokens predicted / logged |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, doc in results.items():
        if "rows" not in doc and "plan_refusal" in doc:
            continue
        if "rows" not in doc:
            lines.append(f"| {name} | error: {str(doc.get('error') or doc.get('stderr'))[:160]!r} | | | | | | | |")
            continue
        kv, tokens = kv_cells(doc)
        lines.append(f"| {name} | {cell(doc, 'start-up')} | {cell(doc, 'generation')} | {cell(doc, 'speculative decoding (MTP)')} | "
                     f"{cell(doc, 'equivalence with the original (greedy tokens)')} | {cell(doc, 'memory: predicted against logged')} | "
                     f"{rank_cells(doc)} | {kv} | {tokens} |")
    refused = results.get("deepseek_fp8_refused") or {}
    if refused.get("plan_refusal"):
        lines += ["", f"mxtrim plan --tp 2 (exit {refused.get('plan_exit')}): `{refused['plan_refusal'][0][:400]}`"]
    start = next((r for r in refused.get("rows", []) if r["check"] == "start-up"), None)
    if start and start.get("verdict"):
        lines += [f"vLLM at TP=2: {start['verdict']['class']} — " + " / ".join(f"`{e[:300]}`" for e in start["verdict"]["evidence"][:2])]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = gpu_arguments()
    ap.add_argument("--small", action="store_true", help="small widths: a CPU dry run of the flow")
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    work = args.work.resolve()
    results_path, results = results_of(work)
    for name, thunk in runs(work, args.small, args.device, args.timeout, args.tp).items():
        if (args.only and name not in args.only) or name in results:
            continue
        started = time.monotonic()
        try:
            results[name] = thunk()
        except Exception as exc:  # a builder that failed: keep going, say so in the table
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results_path.write_text(json.dumps(results, indent=1))
        print(f"{name}: exit {results[name].get('exit')} in {time.monotonic() - started:.0f} s", flush=True)
    (work / "table.md").write_text(table(results))
    print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
