"""Fuzz the header, index and config readers by the hundred thousand.

The generators and checks are those of ``tests/test_fuzz_readers.py`` (there hypothesis
drives them; here a PRNG seeded per case, for throughput): only ``InputError`` may escape a
reader, its message one line naming the file; safetensors headers are also judged against
``safetensors.safe_open`` and the fast paths against the exact one.

Usage: python benchmarks/fuzz_readers.py [--cases N] [--seed S] [--mix H,B,I,C]
       [--only READER [--first I]] [--no-oracle] [--crash-dir DIR] [--work DIR]

``--mix``: the shares of header files (read_header, with the reference), header bytes
(``parse_header_bytes``), index (``open_source``, also the long way) and config
(``check_config_values``, ``open_source`` + ``build_inventory`` + ``build_plan``) cases;
default 50,20,15,15. Case ``i`` of reader ``R`` is ``random.Random(f"{seed}/{R}/{i}")``, so a
crash replays with ``--only R --first i --cases 1``. Each distinct crash is printed once with
its count, and what its first case left written under ``--crash-dir``. A case running past
20 s is a crash (a hang). Exit status 1 on any crash.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import test_fuzz_readers as fz  # noqa: E402

READERS = ("header-file", "header-bytes", "index", "config")


class Reader:
    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = self.rejected = self.accepted = self.crashes = 0
        self.seconds = 0.0


def header_bytes_case(r: random.Random) -> tuple[bytes, int]:
    raw = fz.to_bytes(fz.rand_header(r)[0]) if r.randint(0, 3) else r.randbytes(r.randint(0, 64))
    return raw, 8 + len(raw) + r.choice([0, 0, 1, 7, 64, 2**40, 2**63 - 1, 2**64 + 5])


def run_case(reader: str, r: random.Random, work: Path, bases: dict, oracle: bool) -> str:
    """Run one case: "accepted" or "rejected" (an InputError); fz.Crash on a broken rule."""
    if reader == "header-file":
        return fz.check_header_file(work / "case.safetensors", fz.rand_header_file(r), oracle=oracle)
    if reader == "header-bytes":
        return fz.check_parse_bytes(*header_bytes_case(r))
    if reader == "index":
        return fz.check_open_source(fz.index_case(r, work, bases))
    root, raw, keep = fz.config_case(r, work, bases)
    fz.check_config_dict(root / "config.json", raw)
    return fz.check_plan(root, keep)


def signature(exc: BaseException) -> str:
    """What makes two crashes the same: the exception's type, the start of its message, and
    the innermost frame of the project's code."""
    msg = str(exc).split("\n")[0]
    for bad in "0123456789":  # numbers in messages (offsets, sizes) vary between cases
        msg = msg.replace(bad, "#")
    cause = exc.__cause__ or exc
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if "mxtrim_tui" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "-"
    return f"{type(cause).__name__} at {where}: {msg[:160]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000, help="total cases across the readers (default 100000)")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--mix", default="50,20,15,15", help="shares of header-file, header-bytes, index, config cases")
    ap.add_argument("--only", choices=READERS, help="run only this reader (all --cases)")
    ap.add_argument("--first", type=int, default=0, help="index of the first case (to replay one)")
    ap.add_argument("--no-oracle", action="store_true", help="skip the safetensors.safe_open comparison")
    ap.add_argument("--crash-dir", type=Path, default=ROOT / ".bench" / "fuzz-crashes")
    ap.add_argument("--work", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="where the cases are written (default: /dev/shm when present)")
    args = ap.parse_args()

    shares = [float(x) for x in args.mix.split(",")]
    if args.only:
        counts = {name: (args.cases if name == args.only else 0) for name in READERS}
    else:
        total = sum(shares)
        counts = {name: int(args.cases * s / total) for name, s in zip(READERS, shares)}
        counts[READERS[0]] += args.cases - sum(counts.values())

    # tmpfs when there is one: a case writes and links a handful of files
    work = Path(tempfile.mkdtemp(prefix="mxtrim-fuzz-bench-", dir=args.work))
    crashes: dict[str, list] = {}  # signature -> [count, reader, case index, traceback]
    readers = {name: Reader(name) for name in READERS}
    started = time.perf_counter()
    try:
        bases = fz.make_bases(work)
        for name in READERS:
            rd = readers[name]
            t0 = time.perf_counter()
            for i in range(args.first, args.first + counts[name]):
                r = random.Random(f"{args.seed}/{name}/{i}")
                rd.cases += 1
                try:
                    verdict = run_case(name, r, work, bases, not args.no_oracle)
                except Exception as exc:  # noqa: BLE001 - fz.Crash, or a bug of the harness itself
                    rd.crashes += 1
                    what = "" if isinstance(exc, fz.Crash) else "HARNESS BUG "
                    sig = f"[{name}] {what}" + signature(exc)
                    if sig not in crashes:
                        crashes[sig] = [0, name, i, traceback.format_exc()]
                        try:
                            save_input(args, name, i, work)
                        except Exception:  # noqa: BLE001 - nothing to keep
                            pass
                    crashes[sig][0] += 1
                    continue
                if verdict == "accepted":
                    rd.accepted += 1
                else:
                    rd.rejected += 1
            rd.seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    print(f"seed={args.seed} cases={sum(rd.cases for rd in readers.values())} oracle={'off' if args.no_oracle else 'safetensors.safe_open'}")
    print(f"{'reader':14} {'cases':>8} {'tool errors':>12} {'accepted':>9} {'crashes':>8} {'seconds':>8} {'cases/s':>8}")
    for rd in readers.values():
        rate = rd.cases / rd.seconds if rd.seconds else 0.0
        print(f"{rd.name:14} {rd.cases:8d} {rd.rejected:12d} {rd.accepted:9d} {rd.crashes:8d} {rd.seconds:8.1f} {rate:8.0f}")
    total_crashes = sum(rd.crashes for rd in readers.values())
    print(f"{'total':14} {sum(rd.cases for rd in readers.values()):8d} {sum(rd.rejected for rd in readers.values()):12d} "
          f"{sum(rd.accepted for rd in readers.values()):9d} {total_crashes:8d} {elapsed:8.1f}")
    print(f"distinct crashes: {len(crashes)}")
    for sig, (count, name, i, tb) in sorted(crashes.items(), key=lambda kv: -kv[1][0]):
        print(f"\n{count} x {sig}\n  replay: --only {name} --first {i} --cases 1 --seed {args.seed}"
              f"  (input: {args.crash_dir / f'{name}-{i}'})")
        print("  " + tb.strip().splitlines()[-1][:300])
    return 1 if total_crashes else 0


def save_input(args, name: str, i: int, work: Path) -> Path:
    """Keep what case ``i`` left in the work directory: the safetensors file, or the case
    directory's JSON files and a listing of the rest (shards are sparse and unchanged)."""
    out = args.crash_dir / f"{name}-{i}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if name == "header-file":
        shutil.copyfile(work / "case.safetensors", out / "case.safetensors")
    elif name == "header-bytes":
        raw, file_size = header_bytes_case(random.Random(f"{args.seed}/{name}/{i}"))
        (out / f"header-file_size-{file_size}.json").write_bytes(raw)
    else:
        case = work / ("index-case" if name == "index" else "config-case")
        listing = []
        for p in sorted(case.rglob("*")):
            rel = p.relative_to(case)
            kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
            listing.append(f"{kind} {rel} {p.lstat().st_size}")
            if kind == "file" and not p.name.endswith(".safetensors"):
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, out / rel)
        (out / "LISTING.txt").write_text("\n".join(listing) + "\n")
    return out


if __name__ == "__main__":
    sys.exit(main())
