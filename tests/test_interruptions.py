"""A real ``mxtrim trim --mode weights`` stopped by real signals at each phase, a source changed
while it is copied, full disks, and the kept script run the way its README says.

After every interruption: no output directory exists, nothing hidden is left except what a
SIGKILL cannot clean (recognisably mxtrim's, by name), the next run removes that, and a
re-run succeeds. The source is never changed by mxtrim."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv, plan_for, run_cli, tree_digest
from mxtrim_tui.core.write.extract_script import SCRIPT_NAME, build_extraction
from mxtrim_tui.core.write.leftovers import find_leftovers
from mxtrim_tui.synth.checkpoint import write_checkpoint
from mxtrim_tui.synth.layouts.llama import llama3

LEFTOVER = re.compile(r"\.\.?llama-weights\.(partial|extract)-\d+(\.py|\.partial-\d+)?")


@pytest.fixture(scope="module")
def big_source(tmp_path_factory):
    """~400 MB of random bytes in 4 shards: the copy and the verification each take long
    enough to be interrupted inside them."""
    layout = llama3(num_layers=4, hidden_size=2048, vocab_size=32768)
    root = write_checkpoint(tmp_path_factory.mktemp("big") / "llama", layout, data="random", max_shard_bytes=120_000_000)
    return root, tree_digest(root)


def _events(line: str) -> dict | None:
    if line.startswith("{"):
        try:
            return json.loads(line)
        except ValueError:
            return None
    return None


def _contents(digest: dict) -> dict:
    """A tree digest without modification times (a test that restores a byte changes those)."""
    return {path: entry[:2] for path, entry in digest.items()}


def _phase_reached(event: dict, phase: str) -> bool:
    if phase == "plan":
        return event.get("event") == "stage" and event.get("name") == "plan"
    if phase == "copy":
        return event.get("event") == "tensor" and event.get("done_bytes", 0) > 0
    if phase == "verify":
        return event.get("event") == "verify"
    raise AssertionError(phase)


def _start_trim(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = cli_argv("trim", str(src), "--mode", "weights", "--keep", "0,3", "--out", str(out), "--max-shard-size", "100MB", "--progress", *extra)
    # its own session, as a shell gives a job: SIGINT goes to the group like a terminal's Ctrl-C
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO, start_new_session=True)


def _interrupt(proc: subprocess.Popen, phase: str, sig: int, twice: bool = False) -> tuple[int, str, list[dict]]:
    """Deliver ``sig`` when ``phase`` is reached; (exit status, non-event stderr, events)."""
    seen: list[dict] = []
    if phase == "startup":
        time.sleep(0.15)  # Python is still importing mxtrim
    else:
        for line in proc.stderr:
            event = _events(line)
            if event is not None:
                seen.append(event)
                if _phase_reached(event, phase):
                    break
        else:
            raise AssertionError(f"never reached {phase}: {seen[-3:]}")
    send = (lambda s: os.killpg(proc.pid, s)) if sig == signal.SIGINT else proc.send_signal
    send(sig)
    if twice:
        time.sleep(0.005)
        send(sig)
    rest = proc.stderr.read()
    rc = proc.wait(timeout=120)
    text = "\n".join(line for line in rest.splitlines() if _events(line) is None)
    seen += [e for e in map(_events, rest.splitlines()) if e is not None]
    return rc, text, seen


def _script_pid(events: list[dict]) -> int | None:
    return next((e["pid"] for e in events if e.get("event") == "stage" and e.get("name") == "extract" and "pid" in e), None)


def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


TRIALS = [
    ("startup", signal.SIGINT),
    ("startup", signal.SIGTERM),
    ("plan", signal.SIGINT),
    ("copy", signal.SIGINT),
    ("copy", signal.SIGTERM),
    ("copy", signal.SIGKILL),
    ("verify", signal.SIGINT),
    ("verify", signal.SIGTERM),
    ("verify", signal.SIGKILL),
]


@pytest.mark.parametrize("phase, sig", TRIALS, ids=[f"{p}-{signal.Signals(s).name}" for p, s in TRIALS])
def test_a_signal_at_any_phase_leaves_nothing_that_looks_complete(big_source, tmp_path, phase, sig):
    src, digest = big_source
    out = tmp_path / "models" / "llama-weights"
    out.parent.mkdir()
    rc, text, events = _interrupt(_start_trim(src, out), phase, sig)
    assert not out.exists(), f"{phase}: an output directory after {signal.Signals(sig).name}"
    assert "Traceback" not in text, text
    script = _script_pid(events)
    if script is not None:  # the extraction script never outlives mxtrim (parent-death signal)
        assert _gone(script), f"extraction script {script} still running"
    left = sorted(p.name for p in out.parent.iterdir())
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
        assert all(LEFTOVER.fullmatch(name) for name in left), left
        assert sorted(p.name for p in find_leftovers(out)) == left
    else:
        assert rc == 130, text
        assert text.strip().splitlines()[-1] == "mxtrim: interrupted", text
        assert left == []
        if phase != "verify":
            return  # nothing left; one clean re-run (after the last phase) is proof enough
    # the next run removes what a SIGKILL left, says so, and succeeds
    again = run_cli("trim", str(src), "--mode", "weights", "--keep", "0,3", "--out", str(out), "--max-shard-size", "100MB")
    assert again.returncode == 0, again.stderr
    for name in left:
        assert f"removed {out.parent / name}, left by an interrupted run" in again.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["llama-weights"]
    assert tree_digest(src) == digest


def test_two_quick_ctrl_cs_during_the_copy_leave_nothing(big_source, tmp_path):
    src, _ = big_source
    for trial in range(2):
        out = tmp_path / f"t{trial}" / "llama-weights"
        out.parent.mkdir()
        rc, text, _ = _interrupt(_start_trim(src, out), "copy", signal.SIGINT, twice=True)
        assert rc == 130 and "Traceback" not in text, text
        assert list(out.parent.iterdir()) == []


def test_a_source_changed_during_the_copy_is_detected(big_source, tmp_path):
    """A byte of an already copied tensor changes in the source before verification: the
    trim fails naming the tensor, and nothing is left."""
    src, digest = big_source
    plan = plan_for(src, ["0,3"])
    extraction = build_extraction(plan, 100_000_000)
    first = extraction.shards[0].tensors[0]
    target = src / first.source_file
    out = tmp_path / "llama-weights"
    proc = _start_trim(src, out)
    original = None
    try:
        for line in proc.stderr:
            event = _events(line)
            if event and event.get("event") == "shard" and event.get("status") == "done":
                with open(target, "r+b") as fh:  # the first tensor of the first output shard
                    fh.seek(first.source_begin)
                    original = fh.read(1)
                    fh.seek(first.source_begin)
                    fh.write(bytes([original[0] ^ 0xFF]))
                break
        rest = proc.stderr.read()
        rc = proc.wait(timeout=120)
    finally:
        if original is not None:
            with open(target, "r+b") as fh:
                fh.seek(first.source_begin)
                fh.write(original)
    assert original is not None, "the first shard was never finished"
    errors = [line for line in rest.splitlines() if line.startswith("mxtrim: error:")]
    assert rc == 1 and len(errors) == 1, rest
    assert first.source_name in errors[0] or first.name in errors[0], errors[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert _contents(tree_digest(src)) == _contents(digest)


# --- full disks ---------------------------------------------------------------------------
@pytest.fixture
def small_volume(tmp_path):
    """A 24 MiB tmpfs mounted by the test (root only); skipped with the reason otherwise."""
    mount = tmp_path / "vol"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def mid_source(tmp_path_factory):
    """~40 MB of random bytes: more than the small volume holds."""
    layout = llama3(num_layers=2, hidden_size=1024, vocab_size=8192)
    return write_checkpoint(tmp_path_factory.mktemp("mid") / "llama", layout, data="random")


def test_a_weights_trim_too_big_for_the_volume_is_refused_before_writing(mid_source, small_volume):
    r = run_cli("trim", str(mid_source), "--mode", "weights", "--keep", "0,1", "--out", str(small_volume / "out"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "not enough disk space" in r.stderr and str(small_volume / "out") in r.stderr
    assert list(small_volume.iterdir()) == []


def test_a_small_trim_fits_a_small_volume(small_volume, tmp_path):
    """The margin scales with the output: a trim of a few MB is not refused for want of a GiB."""
    src = write_checkpoint(tmp_path / "small", llama3(num_layers=2, hidden_size=256, vocab_size=4096), data="random")
    r = run_cli("trim", str(src), "--mode", "weights", "--keep", "0", "--out", str(small_volume / "out"))
    assert r.returncode == 0, r.stderr
    assert 2_000_000 < sum(p.stat().st_size for p in (small_volume / "out").glob("*.safetensors")) < 24 << 20


def test_the_disk_filling_during_the_script_is_one_error_and_no_partial_output(mid_source, small_volume, tmp_path):
    """The kept script, which has no size check of its own, on a volume too small: one line,
    its partial output removed."""
    plan = plan_for(mid_source, ["0,1"])
    from mxtrim_tui.core.write.weights_writer import extraction_script

    script = tmp_path / SCRIPT_NAME
    script.write_text(extraction_script(plan, build_extraction(plan, 10**9)))
    r = subprocess.run([sys.executable, str(script), "--source", str(mid_source), "--out", str(small_volume / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr, r.stderr
    assert list(small_volume.iterdir()) == []


def test_a_dummy_trim_on_a_full_volume_is_refused_before_writing(mid_source, small_volume):
    (small_volume / "filler").write_bytes(b"\0" * (24 * 1024 * 1024 - 64 * 1024))
    r = run_cli("trim", str(mid_source), "--mode", "dummy", "--keep", "0", "--out", str(small_volume / "out"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "not enough disk space" in r.stderr
    assert sorted(p.name for p in small_volume.iterdir()) == ["filler"]


# --- the kept script runs no code from the model directory ----------------------------------
MARKER_CODE = "import os\nopen(os.path.join(os.environ['MXTRIM_MARKERS'], __name__ + '.ran'), 'w').close()\n"


def test_the_kept_script_never_imports_the_model_directorys_python_files(mid_source, tmp_path):
    src = tmp_path / "src"
    import shutil

    shutil.copytree(mid_source, src)
    for name in ("argparse", "json", "hashlib", "shutil", "signal", "errno", "time"):
        (src / f"{name}.py").write_text(MARKER_CODE)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"MXTRIM_MARKERS": str(markers)}
    out = tmp_path / "out"
    r = run_cli("trim", str(src), "--mode", "weights", "--keep", "0", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert (out / "json.py").exists() and (out / SCRIPT_NAME).exists()  # copied beside the script
    # the control: Python itself would import them from that folder
    subprocess.run([sys.executable, "-c", "import json"], cwd=out, env={**os.environ, **env}, check=True)
    assert [p.name for p in markers.iterdir()] == ["json.ran"]
    (markers / "json.ran").unlink()
    # run as the README says, from elsewhere and from inside the output folder
    for cwd, again in ((tmp_path, tmp_path / "again1"), (out, tmp_path / "again2")):
        r = subprocess.run([sys.executable, str(out / SCRIPT_NAME), "--source", str(src), "--out", str(again)],
                           cwd=cwd, env={**os.environ, **env, "PYTHONPATH": "."}, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert list(markers.iterdir()) == [], f"model code ran from {cwd}"
        for shard in out.glob("*.safetensors"):
            assert (again / shard.name).read_bytes() == shard.read_bytes()
