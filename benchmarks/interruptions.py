"""Interrupting a real ``mxtrim trim --mode weights``: SIGINT (to the process group, as a
terminal's Ctrl-C), SIGTERM and SIGKILL at each phase, on the 2.95 GB random-bytes fixture of
``benchmarks/extract.py`` (so the copy and the verification take seconds).

A trial passes when afterwards: no output directory exists; the extraction script is gone;
for SIGINT/SIGTERM the exit status is 130 with "mxtrim: interrupted" as the last line (or, in
the first instants of start-up, death by that signal) and no traceback, and nothing is left beside the output; for SIGKILL only hidden temporaries named
like mxtrim's are left, and the next run removes them (saying so) and succeeds. The source's
contents never change. ``tests/test_interruptions.py`` runs the same trials on a smaller
source in ``make test``.

Usage: python benchmarks/interruptions.py [--repeat N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("startup", "plan", "copy", "verify", "structure")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
TRIM_ARGS = ("--mode", "weights", "--keep", "0,1", "--max-shard-size", "1GB")


def leftover_pattern(name: str) -> re.Pattern:
    """mxtrim's hidden temporaries of an output called ``name``."""
    n = re.escape(name)
    return re.compile(rf"\.\.?{n}\.(partial|extract)-\d+(\.py|\.partial-\d+)?")


def event_of(line: str) -> dict | None:
    if line.startswith("{"):
        try:
            return json.loads(line)
        except ValueError:
            return None
    return None


def phase_reached(event: dict, phase: str) -> bool:
    kind, name = event.get("event"), event.get("name")
    if phase == "plan":
        return kind == "stage" and name == "plan"
    if phase == "copy":
        return kind == "tensor" and event.get("done_bytes", 0) > 0
    if phase == "verify":
        # the written shards are read back alongside the copy: a tensor event saying some
        # bytes are verified already (or, should the copy end first, the verify stage)
        return (kind == "tensor" and event.get("verified_bytes", 0) > 0) or kind == "verify"
    if phase == "structure":
        return kind == "stage" and name == "structure" and event.get("status") == "start"
    raise ValueError(phase)


def mxtrim(*args: str, python_flags: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, *python_flags, "-m", "mxtrim_tui", *args]


# The first engine module the CLI imports (mxtrim_tui/cli/main.py): by then the interpreter is up
# and mxtrim's entry point guards the rest of the start-up.
STARTUP_MARK = "mxtrim_tui.core.errors"


def start_trim(src: Path, out: Path, *trim_args: str) -> subprocess.Popen:
    """``mxtrim trim`` with --progress, in its own session as a shell starts a job. Python
    reports each import as it completes (``-X importtime``), so a start-up signal can be sent
    while mxtrim's own modules are being imported, whatever the machine's load."""
    cmd = mxtrim("trim", str(src), "--out", str(out), "--progress", *trim_args, python_flags=("-X", "importtime"))
    # Ctrl-C restored to its default, as a shell does for a foreground job (under nohup or in
    # a background job it is ignored, and mxtrim rightly keeps it so)
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupt(proc: subprocess.Popen, phase: str, sig: int, twice: bool = False) -> tuple[int, str, list[dict]]:
    """Deliver ``sig`` once ``phase`` is reached (``startup``: as soon as the CLI has begun
    importing the engine, while Python still imports mxtrim); returns (exit status, non-event
    stderr, events)."""
    seen: list[dict] = []
    if phase == "startup":
        for line in proc.stderr:
            if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == STARTUP_MARK:
                break
        else:
            raise AssertionError(f"{STARTUP_MARK} was never imported")
    else:
        for line in proc.stderr:
            event = event_of(line)
            if event is not None:
                seen.append(event)
                if phase_reached(event, phase):
                    break
        else:
            raise AssertionError(f"never reached {phase}: {seen[-3:]}")
    send = (lambda s: os.killpg(proc.pid, s)) if sig == signal.SIGINT else proc.send_signal
    send(sig)
    if twice:
        time.sleep(0.005)
        send(sig)
    rest = proc.stderr.read()
    rc = proc.wait(timeout=300)
    text = "\n".join(line for line in rest.splitlines() if event_of(line) is None and not line.startswith("import time:"))
    seen += [e for e in map(event_of, rest.splitlines()) if e is not None]
    return rc, text, seen


def script_pid(events: list[dict]) -> int | None:
    return next((e["pid"] for e in events if e.get("event") == "stage" and e.get("name") == "extract" and "pid" in e), None)


def gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def trial_problems(out: Path, sig: int, rc: int, text: str, events: list[dict]) -> tuple[list[str], list[str]]:
    """(what broke a promise, the names a SIGKILL left) after one interrupted trim."""
    problems = []
    if out.exists():
        problems.append("an output directory exists")
    if "Traceback" in text:
        problems.append("a traceback")
    pid = script_pid(events)
    if pid is not None and not gone(pid):
        problems.append(f"extraction script {pid} still running")
    left = sorted(p.name for p in out.parent.iterdir() if p != out)
    if sig == signal.SIGKILL:
        if rc != -signal.SIGKILL:
            problems.append(f"exit status {rc}")
        pattern = leftover_pattern(out.name)
        problems += [f"{name} left, not named like mxtrim's" for name in left if not pattern.fullmatch(name)]
    else:
        # 130 after "mxtrim: interrupted"; or death by the signal itself, silent: before mxtrim
        # has set its handlers (the first tenths of a second of start-up), or SIGINT re-raised
        # by CPython at exit when a KeyboardInterrupt passed through exec()'d code (a dataclass
        # being made at import). A shell shows 128 + the signal either way.
        if rc != -sig:
            if rc != 130:
                problems.append(f"exit status {rc}")
            if not text.strip() or text.strip().splitlines()[-1] != "mxtrim: interrupted":
                problems.append(f"last line {text.strip().splitlines()[-1:]!r}")
        problems += [f"{name} left" for name in left]
    return problems, left


def rerun_problems(src: Path, out: Path, left: list[str], *trim_args: str) -> list[str]:
    """The next run removes what was left (saying so) and succeeds."""
    r = subprocess.run(mxtrim("trim", str(src), "--out", str(out), *trim_args), capture_output=True, text=True, cwd=ROOT)
    problems = [] if r.returncode == 0 else [f"re-run failed: {r.stderr.strip()[-300:]}"]
    problems += [f"re-run did not report removing {name}" for name in left
                 if f"removed {out.parent / name}, left by an interrupted run" not in r.stderr]
    remaining = sorted(p.name for p in out.parent.iterdir())
    if remaining != [out.name]:
        problems.append(f"after the re-run: {remaining}")
    return problems


def content_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode())
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    h.update(chunk)
    return h.hexdigest()


def main() -> None:
    from benchmarks.extract import ensure_source

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="trials per phase and signal")
    args = ap.parse_args()
    src = ensure_source()
    work = ROOT / ".bench" / "interrupt-work"
    shutil.rmtree(work, ignore_errors=True)
    before = content_digest(src)
    rows, failures, n = [], 0, 0
    started = time.monotonic()
    for phase in PHASES:
        for sig in SIGNALS:
            if phase == "startup" and sig == signal.SIGKILL:
                continue  # nothing exists yet to leave behind
            ok = 0
            for k in range(args.repeat):
                n += 1
                out = work / f"{phase}-{sig.name}-{k}" / "llama-weights"
                out.parent.mkdir(parents=True)
                rc, text, events = interrupt(start_trim(src, out, *TRIM_ARGS), phase, sig)
                problems, left = trial_problems(out, sig, rc, text, events)
                if sig == signal.SIGKILL:
                    problems += rerun_problems(src, out, left, *TRIM_ARGS)
                shutil.rmtree(out.parent, ignore_errors=True)
                if problems:
                    failures += 1
                    print(f"FAIL {phase} {sig.name} #{k}: {'; '.join(problems)}", flush=True)
                else:
                    ok += 1
            rows.append((phase, sig.name, ok, args.repeat))
    double_ok = 0
    for k in range(args.repeat):  # two Ctrl-Cs 5 ms apart during the copy
        n += 1
        out = work / f"double-{k}" / "llama-weights"
        out.parent.mkdir(parents=True)
        rc, text, events = interrupt(start_trim(src, out, *TRIM_ARGS), "copy", signal.SIGINT, twice=True)
        problems, _ = trial_problems(out, signal.SIGINT, rc, text, events)
        failures += bool(problems)
        double_ok += not problems
        if problems:
            print(f"FAIL double Ctrl-C #{k}: {'; '.join(problems)}", flush=True)
        shutil.rmtree(out.parent, ignore_errors=True)
    rows.append(("copy", "SIGINT twice, 5 ms apart", double_ok, args.repeat))
    unchanged = content_digest(src) == before
    print(f"\n{n} interrupted trims of a {sum(p.stat().st_size for p in src.glob('*.safetensors')) / 1e9:.2f} GB source "
          f"in {time.monotonic() - started:.0f} s; source unchanged: {unchanged}\n")
    print("| phase | signal | trials passed |\n| --- | --- | ---: |")
    for phase, name, ok, total in rows:
        print(f"| {phase} | {name} | {ok}/{total} |")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures or not unchanged else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
