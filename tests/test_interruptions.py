"""A real ``mxtrim trim --mode weights`` stopped by real signals at each phase, a source changed
while it is copied, full disks, and the kept script run the way its README says.

After every interruption: no output directory exists, nothing hidden is left except what a
SIGKILL cannot clean (recognisably mxtrim's, by name), the next run removes that, and a
re-run succeeds. The source is never changed by mxtrim. ``benchmarks/interruptions.py`` runs
the same trials, more of them, on a 2.95 GB source."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from benchmarks.interruptions import event_of, interrupt, rerun_problems, start_trim, trial_problems
from engine_support import mount_tmpfs, plan_for, run_cli, tree_digest
from mxtrim_tui.core.plan.layout import build_extraction
from mxtrim_tui.core.write.extract_script import SCRIPT_NAME
from mxtrim_tui.core.write.leftovers import find_leftovers
from synth.checkpoint import write_checkpoint
from synth.layouts.llama import llama3

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_interruptions")]  # real signals to real trims of a 670 MB source

TRIM_ARGS = ("--mode", "weights", "--keep", "0,3", "--max-shard-size", "100MB")


@pytest.fixture(scope="module")
def big_source(tmp_path_factory):
    """~670 MB of random bytes in 6 shards: the copy and the verification each take long
    enough to be interrupted inside them."""
    layout = llama3(num_layers=4, hidden_size=2048, vocab_size=32768)
    root = write_checkpoint(tmp_path_factory.mktemp("big") / "llama", layout, data="random", max_shard_bytes=120_000_000)
    return root, tree_digest(root)


def _contents(digest: dict) -> dict:
    """A tree digest without modification times (a test that restores a byte changes those)."""
    return {path: entry[:2] for path, entry in digest.items()}


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
    rc, text, events = interrupt(start_trim(src, out, *TRIM_ARGS), phase, sig)
    problems, left = trial_problems(out, sig, rc, text, events)
    assert problems == [], text
    if sig == signal.SIGKILL:
        assert sorted(p.name for p in find_leftovers(out)) == left
    # the next run removes what a SIGKILL left, says so, and succeeds (one clean re-run after
    # the other signals is proof enough)
    if sig == signal.SIGKILL or phase == "verify":
        assert rerun_problems(src, out, left, *TRIM_ARGS) == []
    assert tree_digest(src) == digest


def test_two_quick_ctrl_cs_during_the_copy_leave_nothing(big_source, tmp_path):
    src, _ = big_source
    for trial in range(2):
        out = tmp_path / f"t{trial}" / "llama-weights"
        out.parent.mkdir()
        rc, text, events = interrupt(start_trim(src, out, *TRIM_ARGS), "copy", signal.SIGINT, twice=True)
        assert trial_problems(out, signal.SIGINT, rc, text, events) == ([], [])


def test_a_source_changed_during_the_copy_is_detected(big_source, tmp_path):
    """A byte of an already copied tensor changes in the source before verification: the
    trim fails naming the tensor, and nothing is left."""
    src, digest = big_source
    plan = plan_for(src, ["0,3"])
    extraction = build_extraction(plan, 100_000_000)
    first = extraction.shards[0].tensors[0]
    target = src / first.source_file
    out = tmp_path / "llama-weights"
    proc = start_trim(src, out, *TRIM_ARGS)
    original = None
    try:
        for line in proc.stderr:
            event = event_of(line)
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
    why = mount_tmpfs(mount, "size=24m")
    if why is not None:
        pytest.skip(f"cannot mount a small tmpfs here: {why}")
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
