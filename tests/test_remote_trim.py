"""`mxtrim plan|trim hf://ORG/NAME[@REVISION]`: a model trimmed without downloading it. The real
huggingface_hub client and the real CLI against the stand-in Hub (tests/hub_standin.py), which
counts every byte and range it serves: a dummy trim reads headers and small files only; a
real-weight trim fetches exactly the kept tensors' byte ranges and writes the same checkpoint
as a local trim of the same files; an interrupted fetch resumes where it stopped; a branch
that moved meanwhile is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import run_cli
from hub_standin import HubStandIn, header_bytes, sharded_llama
from mxtrim_tui.core.plan.layout import build_extraction
from mxtrim_tui.core.read.remote_store import STORE_PREFIX, coalesce, kept_ranges
from mxtrim_tui.core.units import DEFAULT_MAX_SHARD_BYTES

REPO = "org/tiny-llama"
pytestmark = pytest.mark.slow  # whole trims through the CLI, with their transformers checks


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return sharded_llama(tmp_path_factory.mktemp("hub"))



def small_files(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in root.iterdir() if p.suffix != ".safetensors"}


def env_for(hub) -> dict:
    return {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"}


def kept_source_ranges(checkpoint: Path, keep: str) -> list[tuple[str, int, int]]:
    from engine_support import plan_for

    return [r.key() for r in kept_ranges(build_extraction(plan_for(checkpoint, keep=[keep]), DEFAULT_MAX_SHARD_BYTES))]


def test_kept_ranges_are_merged_where_they_touch_and_cut_into_pieces():
    pieces = coalesce([("b", 0, 10), ("a", 20, 30), ("a", 10, 20), ("a", 40, 50), ("a", 45, 60)], piece=15)
    assert [p.key() for p in pieces] == [("a", 10, 25), ("a", 25, 30), ("a", 40, 55), ("a", 55, 60), ("b", 0, 10)]


def test_a_real_weight_trim_fetches_the_kept_ranges_only_and_writes_the_local_trims_checkpoint(checkpoint, tmp_path):
    local = tmp_path / "local"
    r = run_cli("trim", str(checkpoint), "--keep", "0", "--mode", "weights", "--out", str(local))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "remote"
    with HubStandIn({REPO: checkpoint}, redirect=True) as hub:  # shards served from where the Hub redirects
        cache = tmp_path / "hf-home"  # huggingface_hub's cache: never written by a trim
        r = run_cli("trim", f"hf://{REPO}", "--keep", "0", "--mode", "weights", "--out", str(out), "--json",
                    env=env_for(hub) | {"HF_HOME": str(cache), "HF_HUB_CACHE": str(cache / "hub")})
        served, ranges = dict(hub.served), list(hub.ranges)
        # the kept extraction script, run again against the repository itself: the same shards
        hub.ranges.clear()
        rerun = subprocess.run([sys.executable, "-I", str(out / "extract_weights.py"), "--source", f"hf://{REPO}@{hub.commit}",
                                "--out", str(tmp_path / "rerun")], capture_output=True, text=True,
                               env={**os.environ, "HF_ENDPOINT": hub.endpoint})
        rerun_ranges = list(hub.ranges)
    assert not cache.exists() and hub.redirects >= len(list(checkpoint.glob("*.safetensors")))
    assert rerun.returncode == 0, rerun.stderr
    for shard in out.glob("*.safetensors"):
        assert (tmp_path / "rerun" / shard.name).read_bytes() == shard.read_bytes()
    pinned = {f for f, _, _ in kept_source_ranges(checkpoint, "0")}
    assert sorted(r for r in rerun_ranges if r[1] > 0) == sorted(kept_source_ranges(checkpoint, "0"))  # the tensors' ranges
    assert sorted(r for r in rerun_ranges if r[1] == 0) == sorted((f, 0, header_bytes(checkpoint / f)) for f in pinned)
    shutil.rmtree(tmp_path / "rerun")
    assert r.returncode == 0, r.stderr
    source = f"hf://{REPO}@{hub.commit}"
    # what was read: the small files whole, each shard's header, and exactly the kept tensors' bytes
    kept = kept_source_ranges(checkpoint, "0")
    shards = sorted(checkpoint.glob("*.safetensors"))
    expected = {name: size for name, size in small_files(checkpoint).items()}
    for shard in shards:
        expected[shard.name] = header_bytes(shard) + sum(e - b for f, b, e in kept if f == shard.name)
    assert served == expected
    tensor_ranges = sorted(rng for rng in ranges if rng[1] >= header_bytes(checkpoint / rng[0]) and rng[0].endswith(".safetensors"))
    assert tensor_ranges == sorted(kept)
    whole = sum(s.stat().st_size for s in shards)
    assert sum(served.values()) < whole / 2
    assert f"{source}: fetching the kept tensors: " in r.stderr and "range requests" in r.stderr
    # the same checkpoint as the local trim, byte for byte, verified the same way
    for name in sorted(p.name for p in local.glob("*.safetensors")) + ["model.safetensors.index.json", "config.json"]:
        if (local / name).exists():
            assert (out / name).read_bytes() == (local / name).read_bytes(), name
    doc = json.loads(r.stdout)
    assert doc["source"] == source and doc["checks"]["integrity"]["hashes_matched"] == doc["checks"]["integrity"]["tensors"] > 0
    assert json.loads((out / "manifest.json").read_text())["source"] == source
    readme = (out / "README.md").read_text()
    assert f"| source | `{source}` |" in readme and f"hf download {REPO} " in readme and f"--revision {hub.commit}" in readme
    assert json.loads((out / "mxtrim-plan.json").read_text())["source"] == source
    # the store is gone; nothing else beside the output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "remote"]  # no store, no cache


def test_a_dummy_trim_reads_headers_and_small_files_and_a_plan_file_pins_the_commit(checkpoint, tmp_path):
    plan_file = tmp_path / "plan.json"
    out = tmp_path / "dummy"
    with HubStandIn({REPO: checkpoint}) as hub:
        p = run_cli("plan", f"hf://{REPO}", "--keep", "0", "--mode", "dummy", "--out", str(out), "--save", str(plan_file),
                    env=env_for(hub))
        planned = dict(hub.served)
        hub.served.clear()
        hub.old_commits.add(hub.commit)
        old, hub.commit = hub.commit, "f" * 40  # main moves on: the plan file names the commit it was made on
        hub.revisions.clear()
        r = run_cli("trim", "--plan", str(plan_file), env=env_for(hub))
        served, revisions = dict(hub.served), dict(hub.revisions)
    assert p.returncode == 0, p.stderr
    assert f"remote source hf://{REPO}@{old}: a real-weight trim downloads " in p.stdout
    saved = json.loads(plan_file.read_text())
    assert saved["source"]["path"] == f"hf://{REPO}@{old}"
    # a dummy trim reads each shard's header and the small files, nothing of the tensors
    headers_and_small = {**small_files(checkpoint), **{s.name: header_bytes(s) for s in checkpoint.glob("*.safetensors")}}
    assert planned == headers_and_small
    assert r.returncode == 0, r.stderr
    assert served == headers_and_small and revisions == {old: revisions[old]}  # every request at the plan's commit
    source = f"hf://{REPO}@{old}"
    assert json.loads((out / "mxtrim-plan.json").read_text())["source"] == source
    assert f"| source | `{source}` |" in (out / "README.md").read_text()
    assert (out / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()
    assert not list(out.glob("*.safetensors")) and not list(tmp_path.glob(STORE_PREFIX + "*"))


def test_an_interrupted_fetch_resumes_where_it_stopped_and_a_moved_branch_is_refused(checkpoint, tmp_path):
    """The last shard's tensor bytes come truncated: the trim fails with nothing written and
    keeps what it fetched; main then moves on: the same command is refused, naming both
    commits; the trim at the first commit fetches only what it lacked and writes the local
    trim's checkpoint."""
    last = sorted(p.name for p in checkpoint.glob("*.safetensors"))[-1]
    cut = lambda name, start, end: name == last and start >= header_bytes(checkpoint / last)  # noqa: E731
    out = tmp_path / "models" / "remote"
    args = ("--keep", "0", "--mode", "weights", "--out", str(out))
    with HubStandIn({REPO: checkpoint}, short_answers=cut) as hub:
        first = run_cli("trim", f"hf://{REPO}", *args, env=env_for(hub))
        written_after_failure = out.exists()
        commit = hub.commit
        stores = list(out.parent.glob(STORE_PREFIX + "*"))
        assert len(stores) == 1
        recorded = {tuple(json.loads(line).values()) for line in (stores[0] / ".mxtrim-ranges.jsonl").read_text().splitlines()}
        hub.short_answers, hub.old_commits = False, {commit}
        hub.commit = "e" * 40
        moved = run_cli("trim", f"hf://{REPO}", *args, env=env_for(hub))
        written_after_failure |= out.exists()
        hub.ranges.clear()
        resumed = run_cli("trim", f"hf://{REPO}@{commit}", *args, env=env_for(hub))
        again = list(hub.ranges)
    assert first.returncode == 1 and "came truncated" in first.stderr and last in first.stderr, first.stderr
    assert "the same command resumes from there" in first.stderr and not written_after_failure
    kept = set(kept_source_ranges(checkpoint, "0"))
    assert recorded and recorded < kept and not any(f == last for f, _, _ in recorded)
    assert moved.returncode == 1 and "the revision moved" in moved.stderr and commit in moved.stderr and "e" * 40 in moved.stderr
    assert f"hf://{REPO}@{commit}" in moved.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    assert set(again) == kept - recorded  # only what the first run lacked; no header read again
    local = tmp_path / "local"
    assert run_cli("trim", str(checkpoint), *args[:-1], str(local)).returncode == 0
    for shard in local.glob("*.safetensors"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["remote"]
