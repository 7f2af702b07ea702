"""A repository on the Hub read by byte ranges (mxtrim_tui.core.read.remote): the real
huggingface_hub client against a stand-in of the Hub's HTTP surface (tests/hub_standin.py)
serving a sharded checkpoint the test writes. Every body byte served is counted."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from hub_standin import HubStandIn, sharded_llama
from mxtrim_tui.core.model.inventory import build_inventory
from mxtrim_tui.core.model.inventory_json import inventory_to_json
from mxtrim_tui.core.read.remote import MIRROR_RECORD, HfRepo, RemoteError, RemoteRef, header_mirror, parse_remote
from mxtrim_tui.core.read.source import open_source

REPO = "org/tiny-llama"


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """huggingface_hub reads HF_HUB_OFFLINE when it is imported: the stand-in is local."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return sharded_llama(tmp_path_factory.mktemp("hub"))


def tensors(src) -> dict:
    return {(shard, t.name): (t.dtype, t.shape, t.begin, t.end) for shard, s in src.shards.items() for t in s.tensors.values()}


def test_references_name_a_repository_and_a_revision():
    assert parse_remote("hf://deepseek-ai/DeepSeek-V3") == RemoteRef("deepseek-ai/DeepSeek-V3", "main")
    assert parse_remote("hf://org/name@v1.0") == RemoteRef("org/name", "v1.0")
    assert str(parse_remote("hf://org/name@" + "a" * 40)) == "hf://org/name@" + "a" * 40
    for text in ("org/name", "/data/models/x", "hf://just-a-name", "hf://org/name/extra", "s3://org/name"):
        assert parse_remote(text) is None, text


def test_the_inventory_over_ranges_is_the_local_one_and_reads_headers_only(checkpoint, tmp_path):
    with HubStandIn({REPO: checkpoint}) as hub:
        repo = HfRepo(RemoteRef(REPO), endpoint=hub.endpoint)
        report = header_mirror(repo, tmp_path / "tiny-llama")
        served = dict(hub.served)
    local, mirror = open_source(checkpoint), open_source(tmp_path / "tiny-llama")
    # tensor by tensor: names, shards, dtypes, shapes and offsets; then the whole inventory
    assert tensors(mirror) == tensors(local) and len(tensors(local)) > 30
    docs = {name: inventory_to_json(build_inventory(src), with_tensors=True) for name, src in (("mirror", mirror), ("local", local))}
    # the mirror names the repository at its commit as its source, the local reader its folder
    assert docs["mirror"].pop("source") == f"hf://{REPO}@{hub.commit}" and docs["local"].pop("source") == str(checkpoint)
    assert json.dumps(docs["mirror"], sort_keys=True) == json.dumps(docs["local"], sort_keys=True)
    # what was read: each shard's 8 + N header bytes, the small files whole, nothing else
    shards = sorted(checkpoint.glob("*.safetensors"))
    for shard in shards:
        (n,) = struct.unpack("<Q", shard.read_bytes()[:8])
        assert served[shard.name] == 8 + n < shard.stat().st_size / 10
        assert (tmp_path / "tiny-llama" / shard.name).stat().st_size == shard.stat().st_size  # sparse, full size
    small = [p for p in checkpoint.iterdir() if p.suffix != ".safetensors"]
    assert all(served[p.name] == p.stat().st_size for p in small)
    assert sum(served.values()) == report.bytes_read < report.repository_bytes / 10
    record = json.loads((tmp_path / "tiny-llama" / MIRROR_RECORD).read_text())
    assert record["source"] == f"hf://{REPO}@{hub.commit}" and record["bytes_read"] == report.bytes_read
    assert record["shards_header_only"] == len(shards)


def test_the_standin_has_counted_an_answer_by_the_time_the_client_has_it(checkpoint):
    """What the tests read of the stand-in's accounting is whole as soon as a read returns:
    each answer is counted before its bytes go out (a count read a moment early once saw a
    shard's first 8 bytes and not its header). A long switch interval lets the reading thread
    keep running once its answer is in, as a loaded machine does."""
    shard = sorted(checkpoint.glob("*.safetensors"))[0].name
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        with HubStandIn({REPO: checkpoint}, redirect=True) as hub:
            repo = HfRepo(RemoteRef(REPO), endpoint=hub.endpoint)
            for n in range(1, 101):
                repo.read(shard, 0, 8)  # and at once, with no wait in between, what was counted
                assert (hub.served[shard], len(hub.ranges), hub.redirects) == (8 * n, n, n)
    finally:
        sys.setswitchinterval(interval)
    assert set(hub.ranges) == {(shard, 0, 8)}


def test_a_mirror_that_ignores_range_is_refused_and_leaves_nothing(checkpoint, tmp_path):
    with HubStandIn({REPO: checkpoint}, ignore_range=True) as hub:
        with pytest.raises(RemoteError) as err:
            header_mirror(HfRepo(RemoteRef(REPO), endpoint=hub.endpoint), tmp_path / "mirror")
        served = sum(hub.served.values())
    said = str(err.value)
    assert said.startswith(f"hf://{REPO}@main: ") and "ignored the byte range" in said and "does not download them whole" in said
    assert list(tmp_path.iterdir()) == []  # no mirror, no partial folder
    largest = max(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    assert served < 3 * largest  # the first whole answer was dropped, not read to the end of every shard


def test_an_answer_shorter_than_its_range_is_refused_and_leaves_nothing(checkpoint, tmp_path):
    with HubStandIn({REPO: checkpoint}, short_answers=True) as hub:
        with pytest.raises(RemoteError) as err:
            header_mirror(HfRepo(RemoteRef(REPO), endpoint=hub.endpoint), tmp_path / "mirror")
    said = str(err.value)
    assert said.startswith(f"hf://{REPO}@main: ") and "came truncated (7 of 8 bytes)" in said and "read it again" in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ref, words", [
    (RemoteRef("org/absent"), "no such repository, or it is private"),
    (RemoteRef(REPO, "v9"), "no revision 'v9' in it"),
    (RemoteRef("org/gated"), "the repository is gated: accept its terms on the Hub and give a token"),
])
def test_a_repository_or_revision_that_is_not_there_is_one_clear_error(checkpoint, tmp_path, ref, words):
    with HubStandIn({REPO: checkpoint}, gated=frozenset({"org/gated"})) as hub:
        with pytest.raises(RemoteError) as err:
            header_mirror(HfRepo(ref, endpoint=hub.endpoint), tmp_path / "mirror")
    assert str(err.value).startswith(f"{ref}: ") and words in str(err.value)
    assert not (tmp_path / "mirror").exists()


def test_no_answer_at_the_endpoint_names_it(tmp_path):
    with HubStandIn({}) as hub:
        endpoint = hub.endpoint  # closed on leaving: nothing listens there now
    with pytest.raises(RemoteError) as err:
        HfRepo(RemoteRef(REPO), endpoint=endpoint).files()
    assert f"no answer from {endpoint}" in str(err.value) and "HF_ENDPOINT" in str(err.value)


@pytest.mark.slow
def test_inspect_of_a_hub_repository_reads_it_by_ranges(checkpoint):
    """`mxtrim inspect hf://ORG/NAME --json`, the Hub at $HF_ENDPOINT: the local inventory's
    layers and parts, the source pinned to its commit, and the bytes read (headers only)."""
    from engine_support import run_cli

    local = json.loads(run_cli("inspect", str(checkpoint), "--json").stdout)
    with HubStandIn({REPO: checkpoint}) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"}
        r = run_cli("inspect", f"hf://{REPO}", "--json", env=env)
        served = sum(hub.served.values())
        absent = run_cli("inspect", "hf://org/absent", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == f"hf://{REPO}@{hub.commit}" and doc["remote"]["bytes_read"] == served
    assert doc["remote"]["repository_bytes"] > 10 * served
    for key in ("model", "totals", "source_state", "submodels", "groups", "shared", "quantization", "unassigned"):
        assert doc[key] == local[key], key
    assert f"hf://{REPO}@{hub.commit}: read " in r.stderr and "range requests" in r.stderr
    assert absent.returncode == 1 and absent.stderr.startswith("mxtrim: error: hf://org/absent@main: ")
    assert "no such repository, or it is private" in absent.stderr and "Traceback" not in absent.stderr


def hub_cache(root, checkpoint, commit: str, files=None):
    """huggingface_hub's cache layout holding ``checkpoint`` at ``commit`` (main points at it)."""
    import shutil

    repo = root / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for p in checkpoint.iterdir():
        if files is None or p.name in files:
            shutil.copy(p, snapshot / p.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.mark.slow
def test_a_repository_in_the_local_cache_is_read_there_and_offline_without_it_is_one_error(checkpoint, tmp_path):
    """Offline first: a complete snapshot in huggingface_hub's cache is read there (nothing asked
    of the Hub), a partial one too when HF_HUB_OFFLINE is set; offline without it, one error."""
    from engine_support import run_cli

    commit = "c" * 40
    cache = tmp_path / "hub-cache"
    hub_cache(cache, checkpoint, commit)
    with HubStandIn({REPO: checkpoint}) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(cache)}
        r = run_cli("inspect", f"hf://{REPO}", "--json", env=env)
        served = sum(hub.served.values())
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert served == 0 and doc["source"] == f"hf://{REPO}@{commit}" and doc["remote"]["bytes_read"] == 0
    assert doc["model"]["name"] == "tiny-llama" and doc["source_state"]["state"] == "complete"
    assert "read from huggingface_hub's cache" in r.stderr and "nothing downloaded" in r.stderr
    # offline: the config-only snapshot is what there is, and says so; no cache at all: one error
    partial = tmp_path / "partial-cache"
    hub_cache(partial, checkpoint, commit, files={"config.json", "tokenizer.json", "tokenizer_config.json"})
    offline_env = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    r = run_cli("inspect", f"hf://{REPO}", "--json", env={**offline_env, "HF_HUB_CACHE": str(partial)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source_state"]["state"] == "config only"
    r = run_cli("inspect", f"hf://{REPO}", env={**offline_env, "HF_HUB_CACHE": str(tmp_path / "empty")})
    assert r.returncode == 1 and r.stderr.startswith(f"mxtrim: error: hf://{REPO}@main: HF_HUB_OFFLINE is set"), r.stderr
    assert "Traceback" not in r.stderr


def test_without_huggingface_hub_one_message_says_what_to_install(monkeypatch):
    import sys

    from mxtrim_tui.core.read.remote import cached_snapshot

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    for call in (lambda: HfRepo(RemoteRef(REPO)), lambda: cached_snapshot(RemoteRef(REPO))):
        with pytest.raises(RemoteError, match=r"hf:// sources need huggingface_hub.*pip install 'mxtrim-tui\[checks\]'"):
            call()
