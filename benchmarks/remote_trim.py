"""A model read and trimmed over HTTP by byte ranges, against downloading its shards whole.

A DeepSeek-V3-shaped checkpoint (the release's tensor names, FP8 block layout with scales, MLA,
dense then MoE layers, the MTP layer; reduced widths, sparse files) is served on loopback by
the stand-in Hub (tests/hub_standin.py); the real huggingface_hub client and the real CLI read
it. Each figure is the bytes the server sent and the wall time, both ways, in the same run:

- inventory: ``mxtrim inspect hf://…`` (each shard's header, the small files) against
  ``snapshot_download`` of the whole repository (8 workers) then ``mxtrim inspect DIR``;
- two-layer real-weight trim (a dense and a MoE layer): ``mxtrim trim hf://… --mode weights``
  (headers, then the kept tensors' ranges) against ``snapshot_download`` of the shards that
  hold them (8 workers) then ``mxtrim trim DIR``; the two outputs' shards are compared byte
  for byte;
- the full-size DeepSeek-V3 layout (163 shards, 689 GB, sparse): the inventory's bytes against
  the repository's, and what a two-layer trim would fetch (``mxtrim plan hf://… --json``).

The stand-in paces its answers to a link of ``--rate`` Mbit/s (1,000 by default: a data
centre's ordinary link to a hub or mirror), shared by all requests in flight; ``--rate 0``
serves at loopback speed, where fixed costs (starting the CLI, the transformers checks)
weigh more.

    python benchmarks/remote_trim.py [--layers 32] [--keep 0,3] [--rate 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from engine_support import cli_argv  # noqa: E402
from hub_standin import HubStandIn  # noqa: E402
from synth.checkpoint import write_checkpoint  # noqa: E402
from synth.layouts.deepseek import deepseek_v3  # noqa: E402

REPO = "bench/deepseek-v3-shaped"
FULL = "bench/deepseek-v3"


def cli(*args: str, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cli_argv(*args), capture_output=True, text=True, env={**os.environ, **env})
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"mxtrim {' '.join(args)} failed:\n{r.stderr}")
    return took, r


def download(hub, repo: str, dest: Path, patterns: list[str] | None) -> float:
    from huggingface_hub import snapshot_download

    t0 = time.perf_counter()
    snapshot_download(repo, revision="main", local_dir=dest, allow_patterns=patterns, max_workers=8, endpoint=hub.endpoint)
    return time.perf_counter() - t0


def gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**28 else f"{n / 2**20:,.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rate", type=float, default=1000.0,
                    help="the link's speed in Mbit/s for all answers together (default 1000; 0: loopback as fast as it goes)")
    ap.add_argument("--keep", default="0,3", help="the two layers trimmed (a dense and a MoE one by default)")
    args = ap.parse_args()
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = False
    with tempfile.TemporaryDirectory(prefix="mxtrim-bench-remote-") as tmp:
        tmp = Path(tmp)
        shaped = write_checkpoint(tmp / "deepseek-v3-shaped", deepseek_v3(
            num_layers=args.layers, num_experts=32, hidden_size=1024, moe_intermediate_size=512, intermediate_size=4096,
            vocab_size=16000, first_k_dense_replace=3), data="random", max_shard_bytes=100_000_000)
        full = write_checkpoint(tmp / "deepseek-v3", deepseek_v3(), data="sparse")
        shards = sorted(shaped.glob("*.safetensors"))
        repository = sum(p.stat().st_size for p in shaped.iterdir() if p.is_file())
        rows = []
        with HubStandIn({REPO: shaped, FULL: full}, rate=args.rate * 1e6 / 8 if args.rate else None) as hub:
            env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}

            def served() -> int:
                n = sum(hub.served.values())
                hub.served.clear()
                return n

            # inventory
            took, r = cli("inspect", f"hf://{REPO}", "--json", env=env)
            ranged_bytes, ranged = served(), json.loads(r.stdout)
            whole = download(hub, REPO, tmp / "whole", None)
            took_local, r = cli("inspect", str(tmp / "whole"), "--json", env=env)
            whole_bytes = served()
            local = json.loads(r.stdout)
            differ = [k for k in local if k not in ("source", "model") and ranged.get(k) != local[k]]
            same = not differ and ranged["model"] | {"name": None} == local["model"] | {"name": None}
            rows.append(("inventory", ranged_bytes, took, whole_bytes, whole + took_local, "same inventory" if same else f"DIFFERENT: {differ}"))

            # two-layer real-weight trim
            out_ranged, out_whole = tmp / "trim-ranged", tmp / "trim-whole"
            took, r = cli("trim", f"hf://{REPO}", "--keep", args.keep, "--mode", "weights", "--out", str(out_ranged), env=env)
            ranged_bytes = served()
            _, r = cli("plan", str(tmp / "whole"), "--keep", args.keep, "--fetch-list", env=env)
            needed = r.stdout.split()
            small = [p.name for p in shaped.iterdir() if p.suffix != ".safetensors"]
            whole = download(hub, REPO, tmp / "needed", needed + small)
            took_local, _ = cli("trim", str(tmp / "needed"), "--keep", args.keep, "--mode", "weights", "--out", str(out_whole), env=env)
            whole_bytes = served()
            written = sorted(p.name for p in out_whole.glob("*.safetensors"))
            same = written and all((out_ranged / n).read_bytes() == (out_whole / n).read_bytes() for n in written)
            rows.append((f"trim --keep {args.keep} --mode weights", ranged_bytes, took, whole_bytes, whole + took_local,
                         f"{len(needed)} of {len(shards)} shards needed; outputs " + ("byte-identical" if same else "DIFFER")))

            # the full-size layout: bytes only
            took_full, r = cli("inspect", f"hf://{FULL}", "--json", env=env)
            full_bytes = served()
            full_repo = json.loads(r.stdout)["remote"]["repository_bytes"]
            _, r = cli("plan", f"hf://{FULL}", "--keep", args.keep, "--json", env=env)
            plan = json.loads(r.stdout)["remote"]
            _, r = cli("plan", f"hf://{FULL}", "--keep", args.keep, "--fetch-list", env=env)
            full_needed = r.stdout.split()
            full_needed_bytes = sum((full / name).stat().st_size for name in full_needed)
            served()

        link = f"a {args.rate:,.0f} Mbit/s link (the stand-in paces its answers)" if args.rate else "loopback at full speed"
        print(f"DeepSeek-V3-shaped checkpoint: {args.layers} layers, {len(shards)} shards, {gib(repository)}; "
              f"{os.cpu_count()} cores; {link}\n")
        print("| run | by ranges: bytes | time | whole shards (snapshot_download, 8 workers): bytes | time | bytes ratio | time ratio | result |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for name, rb, rt, wb, wt, note in rows:
            print(f"| {name} | {gib(rb)} | {rt:.1f} s | {gib(wb)} | {wt:.1f} s | {wb / rb:,.1f}x fewer | {wt / rt:.2f}x | {note} |")
        print(f"\nFull-size DeepSeek-V3 layout (163 shards, {gib(full_repo)}): inventory by ranges read {gib(full_bytes)} "
              f"({full_repo / full_bytes:,.0f}x fewer than the repository) in {took_full:.1f} s; a trim of layers {args.keep} "
              f"would fetch {gib(plan['weights_trim_bytes'])} by ranges, where the {len(full_needed)} shards holding those "
              f"tensors are {gib(full_needed_bytes)} whole ({full_needed_bytes / plan['weights_trim_bytes']:.1f}x) "
              f"and the repository's weights {gib(plan['repository_weight_bytes'])}.")


if __name__ == "__main__":
    main()
