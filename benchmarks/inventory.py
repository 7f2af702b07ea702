"""Inventory speed on a DeepSeek-V3-shaped sparse checkpoint (full-size headers, no data).

Compares, in one run on the same files (page cache warm for all of them):
  * baseline ``json-loop``: a bare loop that reads every shard's header and ``json.loads`` it;
  * ``safe_open``: ``safetensors.safe_open`` opening every shard and listing its keys;
  * ``mxtrim``: ``open_source`` + ``build_inventory`` (strict validation of every header,
    index cross-check, file classification, layer kinds, groups, quantization);
  * ``mxtrim, index only``: the same on a copy holding only the JSON files (config,
    tokenizer, index), as a user has before downloading any shard: names from the index.

Usage: python benchmarks/inventory.py [--repeat N] [--dir PATH] [--sorted-index]

``--sorted-index`` measures a copy whose index is spelled as transformers writes it (keys
sorted, so shards interleave) instead of in shard order; the shards are symlinked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic checkpoints (tests/synth)

from mxtrim_tui.core.model.inventory import build_inventory  # noqa: E402
from mxtrim_tui.core.read.source import open_source  # noqa: E402
from synth.checkpoint import write_checkpoint  # noqa: E402
from synth.layouts.deepseek import deepseek_v3  # noqa: E402


def ensure_checkpoint(path: Path) -> Path:
    marker = path / ".complete"
    if not marker.exists():
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        write_checkpoint(path, deepseek_v3(), data="sparse", tokenizer=True)
        marker.write_text("ok")
    return path


def with_sorted_index(root: Path) -> Path:
    """A sibling of ``root`` holding symlinks to its files and the index re-spelled with
    ``json.dumps(index, indent=2, sort_keys=True)``, as ``save_pretrained`` writes it."""
    sorted_root = root.with_name(root.name + "-sorted-index")
    marker = sorted_root / ".complete"
    if not marker.exists():
        import shutil

        shutil.rmtree(sorted_root, ignore_errors=True)
        sorted_root.mkdir(parents=True)
        for f in root.iterdir():
            if f.name not in (".complete", "model.safetensors.index.json"):
                (sorted_root / f.name).symlink_to(f.resolve())
        index = json.loads((root / "model.safetensors.index.json").read_text())
        (sorted_root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        marker.write_text("ok")
    return sorted_root


def index_only_copy(root: Path) -> Path:
    """A sibling of ``root`` with its JSON files only: config, tokenizer files and the index."""
    target = root.with_name(root.name + "-index-only")
    if not (target / ".complete").exists():
        import shutil

        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for f in root.iterdir():
            if f.suffix in (".json", ".jinja"):
                shutil.copy2(f, target / f.name)
        (target / ".complete").write_text("ok")
    return target


def json_loop(root: Path) -> int:
    n = 0
    for shard in sorted(root.glob("*.safetensors")):
        with open(shard, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            n += len(json.loads(fh.read(size)))
    return n


def safe_open_loop(root: Path) -> int:
    from safetensors import safe_open

    n = 0
    for shard in sorted(root.glob("*.safetensors")):
        with safe_open(str(shard), framework="numpy") as f:
            n += len(list(f.keys()))
    return n


def mxtrim_inventory(root: Path) -> int:
    inv = build_inventory(open_source(root))
    return inv.total_tensors


def measure_interleaved(fns, root, repeat):
    """Round-robin over the methods so that machine noise hits them alike (this VM's timings
    drift by up to 2x over seconds); best and median per method."""
    results = {name: fn(root) for name, fn in fns}  # warm-up (page cache, imports)
    times: dict[str, list[float]] = {name: [] for name, _ in fns}
    for _ in range(repeat):
        for name, fn in fns:
            t0 = time.perf_counter()
            fn(root)
            times[name].append(time.perf_counter() - t0)
    return [(name, min(times[name]), statistics.median(times[name]), results[name]) for name, _ in fns]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=ROOT / ".bench" / "deepseek-v3-sparse")
    ap.add_argument("--sorted-index", action="store_true", help="index keys sorted, as transformers writes them")
    args = ap.parse_args()
    root = ensure_checkpoint(args.dir)
    if args.sorted_index:
        root = with_sorted_index(root)
    shards = len(list(root.glob("*.safetensors")))
    disk = sum(p.stat().st_blocks * 512 for p in args.dir.iterdir() if p.is_file())
    logical = sum(p.stat().st_size for p in args.dir.iterdir() if p.is_file())
    print(f"checkpoint: {root}  shards={shards}  logical={logical / 2**30:.1f} GiB  on disk={disk / 2**20:.1f} MiB")
    index_only = index_only_copy(root)
    rows = measure_interleaved(
        (
            ("json-loop (baseline)", json_loop),
            ("safe_open", safe_open_loop),
            ("mxtrim inventory", mxtrim_inventory),
            ("mxtrim, index only", lambda _root: mxtrim_inventory(index_only)),
        ),
        root,
        args.repeat,
    )
    base = rows[0][1]
    base_median = rows[0][2]
    print(f"{'method':24} {'best s':>8} {'median s':>9} {'tensors':>8} {'× best':>7} {'× median':>9}")
    for name, best, med, n in rows:
        print(f"{name:24} {best:8.3f} {med:9.3f} {n:8d} {best / base:7.2f} {med / base_median:9.2f}")
    whole, index = rows[2], rows[3]
    print(f"index only / complete inventory: {index[1] / whole[1]:.2f}x best, {index[2] / whole[2]:.2f}x median")


if __name__ == "__main__":
    main()
