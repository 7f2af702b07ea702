"""Real-weight extraction: throughput and peak memory of the generated script against `cp`
and a naive safetensors load + save, on the same bytes.

Fixture (random bytes, written once into .bench/extract-src/): a Llama-3-shaped checkpoint,
hidden 4096, vocabulary 131072, 2 layers, in 2 source shards: 2.95 GB, of which the
embedding alone is one 1 GiB tensor (and the lm head another). The trim keeps both layers,
so every method writes the same tensor bytes: what our writer does beyond `cp` — new
headers, re-sharding in output order — is all inside the timed run.

Methods, each run in its own measuring subprocess (wall time, CPU time and peak RSS of the
method's processes, from RUSAGE_CHILDREN; and, sampled every 5 ms, the peak RSS of the
method's own process, without its children). The page cache cannot be dropped here: a first
round warms it (reported as "first run"), then ROUNDS more rounds run every method in turn.
On this shared 2-CPU VM one 3 GB copy varies by up to 2x from run to run whichever tool
copies, so the table gives the best warm run (the least disturbed; GB/s and × cp use it),
the median, and the CPU time (user + system) of the best run, which contention distorts
least. Dirty pages are flushed (os.sync) before every run so one run's writeback is not
billed to the next.

  * ours: `python -I extract_weights.py` without digest checks (os.copy_file_range for
    page-congruent ranges, its 512 KiB buffer for the others): the script as mxtrim
    generates it before the copy, or the kept one run with --skip-digest-check;
  * ours, hashing: the same with --hash xxh3_128, as mxtrim runs it (each source window
    mapped, hashed and written from the map); the kept script re-run by a user takes this
    path too, checking each tensor against the digest mxtrim recorded;
  * ours, buffered: the same script with os.copy_file_range removed (buffer only);
  * cp: `cp` of the source shards (GNU coreutils, which also uses copy_file_range);
  * naive safetensors: safetensors.torch.load_file of every shard + save_file (wall time
    includes importing torch; the in-process copy time is shown separately);
  * mxtrim trim --mode weights, end to end: plan, the script hashing as it copies, the
    written shards read back and hashed behind it, the ends of every tensor compared with
    the source, the structure check. The transformers checks' verdicts are remembered
    (core/checks/cache.py, in a cache private to this run): the first round checks (in child
    processes), the warm rounds reuse the verdicts, as a trim after `mxtrim plan` does;
  * the same with --hash sha256;
  * the same with the verdicts not remembered (MXTRIM_CHECK_CACHE=0): every run imports
    torch and transformers in its check processes.

A second table gives each hash's throughput on 256 MiB in memory (one thread), with BLAKE3
when the blake3 package happens to be installed (it is not a dependency).

With --first-trim only the first-trim figure is measured (issue 35's target): `cp`,
`mxtrim trim --mode weights` with no verdict remembered (MXTRIM_CHECK_CACHE=0, so every run's
check child imports torch and transformers and builds the meta models while the script
copies) and `mxtrim plan` of the same selection (the plan check alone, nothing copied: the
floor of a first trim, which keeps its output only once that check has passed), alternated, a warm-up round then FIRST_TRIM_ROUNDS rounds: the ratio of the medians
(cp / mxtrim, so 1.0 is cp's speed) and mxtrim's own peak RSS (sampled; its children apart).

With --tmpfs the suite runs a second time with source and outputs in /dev/shm (no disk).
On a Firecracker VM that measures the host faulting in fresh memory more than copying.

--layers N (with --first-trim) uses a fixture of N layers, all kept, in .bench/extract-src-N:
the check's fixed cost (importing torch and transformers) against a copy of more bytes.

Usage: python benchmarks/extract.py [--tmpfs | --first-trim [--layers N]]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic checkpoints (tests/synth)

from mxtrim_tui.core.plan.layout import build_extraction  # noqa: E402
from mxtrim_tui.core.write.extract_script import SCRIPT_NAME  # noqa: E402
from mxtrim_tui.core.model.inventory import build_inventory  # noqa: E402
from mxtrim_tui.core.plan.build import Selection, build_plan  # noqa: E402
from mxtrim_tui.core.read.source import open_source  # noqa: E402
from mxtrim_tui.core.units import DEFAULT_MAX_SHARD_BYTES, human_bytes  # noqa: E402
from mxtrim_tui.core.write.weights_writer import extraction_script  # noqa: E402
from synth.checkpoint import write_checkpoint  # noqa: E402
from synth.layouts import all_layouts  # noqa: E402

BENCH = ROOT / ".bench"
SOURCE = BENCH / "extract-src"
WORK = BENCH / "extract-work"
LAYOUT = dict(num_layers=2, hidden_size=4096, vocab_size=131072)
GB = 1e9
ROUNDS = 7  # warm rounds after the first
FIRST_TRIM_ROUNDS = 5  # --first-trim: rounds after a warm-up round

# Runs one command, then prints its wall time, the peak RSS of it and its descendants, and
# the peak RSS of the command's own process (sampled every 5 ms).
MEASURE = r"""
import json, os, resource, subprocess, sys, threading, time
import psutil
cmd, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
t0 = time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
own = [0]
def sample():
    try:
        p = psutil.Process(proc.pid)
        while proc.poll() is None:
            own[0] = max(own[0], p.memory_info().rss)
            time.sleep(0.005)
    except psutil.Error:
        pass
threading.Thread(target=sample, daemon=True).start()
out, err = proc.communicate()
wall = time.perf_counter() - t0
if proc.returncode:
    sys.exit(f"{cmd[:3]} failed ({proc.returncode}): {err[-2000:]}")
usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and its descendants
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss * 1024, "own_rss": own[0], "stdout": out}))
"""

NAIVE = r"""
import json, sys, time
from pathlib import Path
from safetensors.torch import load_file, save_file
src, out, renames = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
t0 = time.perf_counter()
tensors = {}
for shard in sorted(src.glob("*.safetensors")):
    tensors.update(load_file(shard))
kept = {new: tensors[old] for old, new in renames}
out.mkdir()
save_file(kept, out / "model.safetensors", metadata={"format": "pt"})
print(json.dumps({"copy_seconds": time.perf_counter() - t0}))
"""


def ensure_source(layers: int = LAYOUT["num_layers"]) -> Path:
    """The fixture with ``layers`` layers (the default one, or .bench/extract-src-N)."""
    layout = all_layouts()["llama3"](**{**LAYOUT, "num_layers": layers})
    source = SOURCE if layers == LAYOUT["num_layers"] else SOURCE.with_name(f"{SOURCE.name}-{layers}")
    if (source / "config.json").exists():
        return source
    need = 2 * layout.total_bytes + 2 * GB  # source + one output + margin
    free = psutil.disk_usage(str(BENCH if BENCH.exists() else ROOT)).free
    if free < need:
        sys.exit(f"benchmark needs {human_bytes(need)} free under {BENCH}, {human_bytes(free)} available")
    print(f"writing the fixture ({human_bytes(layout.total_bytes)} of random bytes) into {source} ...", flush=True)
    tmp = source.with_name(source.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    # Headers and holes first, then every data byte overwritten with random bytes in 64 MiB
    # chunks (random.randbytes cannot make a 1 GiB tensor in one call).
    write_checkpoint(tmp, layout, data="sparse", max_shard_bytes=2_000_000_000)
    for shard in sorted(tmp.glob("*.safetensors")):
        with open(shard, "r+b") as fh:
            start = 8 + int.from_bytes(fh.read(8), "little")
            end = fh.seek(0, os.SEEK_END)
            fh.seek(start)
            while fh.tell() < end:
                fh.write(os.urandom(min(64 << 20, end - fh.tell())))
    tmp.rename(source)
    return source


def output_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and (p.suffix == ".safetensors" or p.name.endswith("index.json")))


def measure(cmd: list[str], env: dict | None = None) -> dict:
    os.sync()
    proc = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(cmd), json.dumps(env or {})], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout)


def run_suite(src: Path, work: Path, script_src: Path, plan) -> tuple[dict, tuple[int, int]]:
    """Every method, 1 + ROUNDS rounds in turn, outputs under ``work``; returns the runs."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    py = sys.executable
    script = str(shutil.copy(script_src, work / SCRIPT_NAME))
    renames = json.dumps(plan.renames)
    shards = [str(p) for p in sorted(src.glob("*.safetensors"))]

    def ours(out):
        return [py, "-I", script, "--source", str(src), "--out", str(out)]

    def ours_hashing(out):
        return ours(out) + ["--hash", "xxh3_128"]

    def ours_buffered(out):
        code = (f"import os, runpy, sys; del os.copy_file_range; sys.argv = ['x', '--source', {str(src)!r}, '--out', {str(out)!r}]; "
                f"runpy.run_path({script!r}, run_name='__main__')")
        return [py, "-I", "-c", code]

    def cp(out):
        out.mkdir()
        return ["cp", *shards, str(out)]

    def naive(out):
        return [py, "-c", NAIVE, str(src), str(out), renames]

    def full(out, *extra):
        return [py, "-m", "mxtrim_tui", "trim", str(src), "--mode", "weights", "--keep", "0,1", "--out", str(out), *extra]

    cache = tempfile.mkdtemp(prefix="mxtrim-bench-cache-")  # the checks' verdicts, for this run only
    remembered = {"XDG_CACHE_HOME": cache}
    methods = [
        ("ours: extract_weights.py, no digests (--skip-digest-check)", ours, None),
        ("ours: extract_weights.py --hash xxh3_128 (as mxtrim runs it; a re-run checking digests)", ours_hashing, None),
        ("ours: extract_weights.py, buffered fallback", ours_buffered, None),
        ("cp of the source shards", cp, None),
        ("naive safetensors load_file + save_file", naive, None),
        ("mxtrim trim --mode weights, end to end (verified; check verdicts remembered)", full, remembered),
        ("mxtrim trim --mode weights --hash sha256 (verdicts remembered)", lambda out: full(out, "--hash", "sha256"), remembered),
        ("mxtrim trim --mode weights, checks run every time (MXTRIM_CHECK_CACHE=0)", full, {"MXTRIM_CHECK_CACHE": "0"}),
    ]
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in methods}
    try:
        for round_ in range(1 + ROUNDS):
            for i, (label, make, env) in enumerate(methods):
                out = work / f"out-{i}-{round_}"
                result = measure(make(out), env)
                result["bytes"] = output_bytes(out)
                runs[label].append(result)
                shutil.rmtree(out)
                print(f"  round {round_}: {label}: {result['wall']:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return runs, (len(shards), sum(Path(s).stat().st_size for s in shards))


def print_table(title: str, runs: dict, shards: tuple[int, int], biggest: int) -> None:
    def best(label):
        return min(runs[label][1:], key=lambda r: r["wall"])

    def median(label):
        walls = sorted(r["wall"] for r in runs[label][1:])
        return walls[len(walls) // 2]

    cp_label = next(label for label in runs if label.startswith("cp"))
    cp_rate = best(cp_label)["bytes"] / best(cp_label)["wall"]
    print()
    print(f"{title}: {shards[0]} source shards, {human_bytes(shards[1])}, "
          f"largest tensor {human_bytes(biggest)}; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {ROUNDS} warm runs each")
    print("| method | bytes written | best warm s | median warm s | CPU s (best run) | GB/s (best) | × cp (best) | × cp (median) "
          "| peak RSS MiB, own (warm) | peak RSS MiB, with children (all) | first run s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, rs in runs.items():
        b = best(label)
        rate = b["bytes"] / b["wall"]
        extra = ""
        inner = [json.loads(r["stdout"]) for r in rs[1:] if r.get("stdout", "").strip().startswith("{")]
        if inner and "copy_seconds" in inner[0]:
            copy = min(i["copy_seconds"] for i in inner)
            extra = f" (in-process copy {copy:.2f} s = {b['bytes'] / copy / GB:.2f} GB/s; the rest is importing torch)"
        rss = max(r["rss"] for r in rs)
        own = max(r["own_rss"] for r in rs[1:])
        print(f"| {label}{extra} | {b['bytes']:,} | {b['wall']:.2f} | {median(label):.2f} | {b['cpu']:.2f} | {rate / GB:.2f} | "
              f"{rate / cp_rate:.2f} | {median(cp_label) / median(label):.2f} | {own / 2**20:.0f} | {rss / 2**20:.0f} | {rs[0]['wall']:.2f} |")


def first_trim(src: Path, work: Path, layers: int) -> None:
    """cp against a first real-weight trim (no verdict remembered) keeping all ``layers``
    layers (the bytes cp copies), alternated; medians."""
    keep = f"0-{layers - 1}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shards = [str(p) for p in sorted(src.glob("*.safetensors"))]
    fresh = {"MXTRIM_CHECK_CACHE": "0"}
    runs: dict[str, list[dict]] = {"cp": [], "trim": [], "plan": []}
    try:
        for round_ in range(1 + FIRST_TRIM_ROUNDS):
            for label in ("cp", "trim", "plan"):
                out = work / f"out-{label}-{round_}"
                if label == "cp":
                    out.mkdir()
                    result = measure(["cp", *shards, str(out)])
                elif label == "plan":  # the check alone: what a first trim cannot go below
                    out.mkdir()
                    result = measure([sys.executable, "-m", "mxtrim_tui", "plan", str(src), "--keep", keep], fresh)
                else:
                    result = measure([sys.executable, "-m", "mxtrim_tui", "trim", str(src), "--mode", "weights", "--keep", keep,
                                      "--out", str(out)], fresh)
                result["bytes"] = output_bytes(out)
                shutil.rmtree(out)
                if round_:
                    runs[label].append(result)
                print(f"  {'warm-up' if not round_ else f'round {round_}'}: {label}: {result['wall']:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: sorted(r["wall"] for r in v)[len(v) // 2] for k, v in runs.items()}
    own = max(r["own_rss"] for r in runs["trim"])
    children = max(r["rss"] for r in runs["trim"])
    print()
    print(f"first trim (no verdict remembered) of {human_bytes(runs['cp'][0]['bytes'])}, {FIRST_TRIM_ROUNDS} rounds after a warm-up; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("| method | median s | runs s | × cp (median) | peak RSS MiB, own | peak RSS MiB, largest process |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for label, name in (("cp", "cp of the source shards"), ("trim", "mxtrim trim --mode weights, MXTRIM_CHECK_CACHE=0"),
                        ("plan", "mxtrim plan (the transformers check alone, nothing copied), MXTRIM_CHECK_CACHE=0")):
        walls = ", ".join(f"{r['wall']:.2f}" for r in runs[label])
        own_rss = max(r["own_rss"] for r in runs[label])
        big = max(r["rss"] for r in runs[label])
        print(f"| {name} | {med[label]:.2f} | {walls} | {med['cp'] / med[label]:.2f} | {own_rss / 2**20:.0f} | {big / 2**20:.0f} |")
    print(f"first trim: {med['cp'] / med['trim']:.2f}x cp (median of {FIRST_TRIM_ROUNDS}); mxtrim's own peak RSS {own / 2**20:.0f} MiB "
          f"(largest process incl. the check child {children / 2**20:.0f} MiB)")
    print(f"the plan check alone takes {med['plan']:.2f} s: a first trim that waits for it runs at most at "
          f"{med['cp'] / med['plan']:.2f}x cp on these bytes")


def hash_table() -> None:
    """Each hash's throughput over 256 MiB in memory, one thread, best of 5."""
    import xxhash

    makers = {"sha256 (hashlib, SHA-NI where the CPU has it)": hashlib.sha256, "blake2b (hashlib)": hashlib.blake2b,
              "md5 (hashlib)": hashlib.md5, "xxh3_128 (xxhash)": xxhash.xxh3_128, "xxh3_64 (xxhash)": xxhash.xxh3_64}
    try:
        import blake3

        makers["blake3 (blake3, one thread)"] = blake3.blake3
    except ImportError:
        pass
    data = memoryview(os.urandom(256 << 20))
    print()
    print("| hash | GB/s (one thread, 1 MiB updates) |")
    print("| --- | ---: |")
    for label, make in makers.items():
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            h = make()
            for i in range(0, len(data), 1 << 20):
                h.update(data[i : i + (1 << 20)])
            h.digest()
            best = min(best, time.perf_counter() - t0)
        print(f"| {label} | {len(data) / best / GB:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmpfs", action="store_true", help="run the suite again with source and outputs in /dev/shm")
    ap.add_argument("--first-trim", action="store_true", help="only cp against a first trim (no verdict remembered), medians")
    ap.add_argument("--layers", type=int, default=LAYOUT["num_layers"],
                    help="--first-trim: the fixture's layers, all kept (each 0.44 GB beside the 2.15 GB of embedding and head)")
    args = ap.parse_args()
    if (args.layers != LAYOUT["num_layers"] and not args.first_trim) or args.layers < 1:
        ap.error("--layers N (at least 1) goes with --first-trim")
    BENCH.mkdir(exist_ok=True)
    if args.first_trim:
        first_trim(ensure_source(args.layers), WORK, args.layers)
        return
    src = ensure_source()
    plan = build_plan(build_inventory(open_source(src)), Selection.parse(["0,1"]))
    biggest = max(t.nbytes for t in plan.inventory.source.iter_tensors())
    # the script `mxtrim trim --mode weights` would write and run
    script = BENCH / "extract-ref-script.py"
    script.write_text(extraction_script(plan, build_extraction(plan, DEFAULT_MAX_SHARD_BYTES)))
    tables = []
    print(f"on disk ({BENCH}):", flush=True)
    tables.append((f"disk: {src}", *run_suite(src, WORK, Path(script), plan)))

    # The same on tmpfs: no disk writeback in the timings, the copy cost alone.
    shm = Path("/dev/shm")
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    if args.tmpfs and shm.is_dir() and psutil.disk_usage(str(shm)).free > 2.5 * size + 2 * GB:
        shm_src = shm / "mxtrim-bench-src"
        try:
            shutil.rmtree(shm_src, ignore_errors=True)
            shutil.copytree(src, shm_src)
            print(f"on tmpfs ({shm}):", flush=True)
            tables.append((f"tmpfs: {shm_src}", *run_suite(shm_src, shm / "mxtrim-bench-work", Path(script), plan)))
        finally:
            shutil.rmtree(shm_src, ignore_errors=True)
    Path(script).unlink()
    for title, runs, shards in tables:
        print_table(title, runs, shards, biggest)
    hash_table()


if __name__ == "__main__":
    main()
