"""A repository on ModelScope read and trimmed by byte ranges (``ms://ORG/NAME[@REVISION]``):
the real ModelScope SDK client (modelscope-hub) against a stand-in of ModelScope's HTTP surface
(tests/modelscope_standin.py: the file listing with each file's commit, downloads redirected to
object storage), serving a sharded checkpoint the test writes. Every body byte served is
counted."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from engine_support import run_cli
from hub_standin import header_bytes, sharded_llama
from modelscope_standin import ModelScopeStandIn
from mxtrim_tui.core.model.inventory import build_inventory
from mxtrim_tui.core.model.inventory_json import inventory_to_json
from mxtrim_tui.core.read.remote import RemoteError, RemoteRef, header_mirror, parse_remote
from mxtrim_tui.core.read.remote_hubs import open_repo
from mxtrim_tui.core.read.remote_modelscope import MsRepo
from mxtrim_tui.core.read.source import open_source

REPO = "org/tiny-llama"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return sharded_llama(tmp_path_factory.mktemp("ms"))



def test_ms_references_default_to_master():
    assert parse_remote("ms://Qwen/Qwen3-8B") == RemoteRef("Qwen/Qwen3-8B", "master", "ms")
    assert str(parse_remote("ms://org/name@v1.0")) == "ms://org/name@v1.0"
    assert isinstance(open_repo(parse_remote("ms://org/name")), MsRepo)


def test_the_inventory_over_ranges_is_the_local_one_pinned_to_the_listed_commit(checkpoint, tmp_path):
    with ModelScopeStandIn({REPO: checkpoint}) as ms:
        repo = MsRepo(RemoteRef(REPO, "master", "ms"), endpoint=ms.endpoint)
        report = header_mirror(repo, tmp_path / "tiny-llama")
        served = dict(ms.served)
    assert report.source == f"ms://{REPO}@{ms.commit}"
    # listed at the branch once, then every file read at the commit the listing named
    assert ms.listed_at[0] == "master" and set(ms.files_at) == {ms.commit} and ms.redirects == 2 * len(report_shards(checkpoint))  # two reads a header
    local, mirror = open_source(checkpoint), open_source(tmp_path / "tiny-llama")
    docs = {k: inventory_to_json(build_inventory(src), with_tensors=True) for k, src in (("m", mirror), ("l", local))}
    assert docs["m"].pop("source") == report.source and docs["l"].pop("source") == str(checkpoint)
    assert json.dumps(docs["m"], sort_keys=True) == json.dumps(docs["l"], sort_keys=True)
    expected = {p.name: p.stat().st_size for p in checkpoint.iterdir() if p.suffix != ".safetensors"}
    expected |= {p.name: header_bytes(p) for p in report_shards(checkpoint)}
    assert served == expected


def report_shards(checkpoint):
    return sorted(checkpoint.glob("*.safetensors"))


@pytest.mark.parametrize("ref, words", [
    ("org/absent", "no such repository, or no revision"),
    ("org/private", "private or needs its terms accepted"),
    (f"{REPO}@v9", "no such repository, or no revision 'v9'"),
])
def test_an_absent_private_or_unknown_revision_is_one_clear_error(checkpoint, tmp_path, ref, words):
    name, _, revision = ref.partition("@")
    with ModelScopeStandIn({REPO: checkpoint, "org/private": checkpoint}, private=frozenset({"org/private"})) as ms:
        with pytest.raises(RemoteError) as err:
            header_mirror(MsRepo(RemoteRef(name, revision or "master", "ms"), endpoint=ms.endpoint), tmp_path / "m")
    assert str(err.value).startswith(f"ms://{name}@{revision or 'master'}: ") and words in str(err.value)
    assert "MODELSCOPE_API_TOKEN" in str(err.value) or "private" not in words
    assert not list(tmp_path.iterdir())


def test_object_storage_that_ignores_range_is_refused(checkpoint, tmp_path):
    with ModelScopeStandIn({REPO: checkpoint}, ignore_range=True) as ms:
        with pytest.raises(RemoteError, match="ignored the byte range"):
            header_mirror(MsRepo(RemoteRef(REPO, "master", "ms"), endpoint=ms.endpoint), tmp_path / "m")
        asked = list(ms.files_at)  # recorded as each download is asked for
    assert len(asked) == 1  # found out by the first answer: nothing more was asked for
    assert not list(tmp_path.iterdir())


class DroppingEndpoint:
    """An address that takes each connection and closes it unanswered (a proxy or firewall
    that cuts it), counting them. ``taken()`` waits for every connection made before it is
    called: it connects once more itself and counts until that connection comes through."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.count, self.mark, self.marked = 0, None, threading.Event()
        threading.Thread(target=self._take, daemon=True).start()

    def _take(self) -> None:
        while not self.marked.is_set():
            conn, peer = self.listener.accept()
            conn.close()
            if peer == self.mark:
                self.marked.set()
            else:
                self.count += 1

    def taken(self) -> int:
        with socket.socket() as own:
            own.bind(("127.0.0.1", 0))
            self.mark = own.getsockname()
            own.connect(self.listener.getsockname())
            assert self.marked.wait(120), "the mark connection never came through"
        self.listener.close()
        return self.count


@pytest.mark.parametrize("nobody", ["closed port", "connections cut"])
def test_no_answer_at_the_endpoint_is_one_whole_line_at_once(nobody):
    """`mxtrim inspect ms://…` where nothing answers: one line naming the endpoint and what to
    do, none of the SDK's log lines, and the endpoint tried once, not again after back-offs."""
    if nobody == "closed port":
        with ModelScopeStandIn({}) as ms:
            endpoint = ms.endpoint  # closed on leaving: nothing listens there now
        dropping = None
    else:
        dropping = DroppingEndpoint()
        endpoint = dropping.endpoint
    began = time.monotonic()
    r = run_cli("inspect", f"ms://{REPO}", env={"MODELSCOPE_ENDPOINT": endpoint, "MODELSCOPE_LOG_LEVEL": "INFO"})
    took = time.monotonic() - began
    tries = dropping.taken() if dropping else None  # every connection it made, counted
    said = (r.stdout + r.stderr).strip()
    print(f"{nobody}: told in {took:.2f} s: {said}")  # measured, never asserted
    assert r.returncode == 1 and len(said.splitlines()) == 1, said
    assert said.startswith(f"mxtrim: error: ms://{REPO}@master: ") and f"no answer from {endpoint}" in said
    assert "check the network" in said and "MODELSCOPE_ENDPOINT" in said and "local folder" in said
    assert "WARNING" not in said and "retry" not in said.lower() and "Traceback" not in said
    # whole: the reason as the system gave it, not cut off inside a bracket
    assert said.count("(") == said.count(")") and said.count("[") == said.count("]") and said.endswith(")")
    if nobody == "closed port":
        assert "Connection refused" in said
    else:
        assert tries == 1  # one connection: no retries


def test_without_the_sdk_one_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "modelscope_hub.api", None)
    with pytest.raises(RemoteError, match=r"pip install 'mxtrim-tui\[modelscope\]'"):
        MsRepo(RemoteRef(REPO, "master", "ms"))


@pytest.mark.slow
def test_a_real_weight_trim_from_modelscope_fetches_the_kept_ranges_and_equals_the_local_trim(checkpoint, tmp_path):
    local = tmp_path / "local"
    assert run_cli("trim", str(checkpoint), "--keep", "0", "--mode", "weights", "--out", str(local)).returncode == 0
    out = tmp_path / "remote"
    with ModelScopeStandIn({REPO: checkpoint}) as ms:
        r = run_cli("trim", f"ms://{REPO}", "--keep", "0", "--mode", "weights", "--out", str(out), "--json",
                    env={"MODELSCOPE_ENDPOINT": ms.endpoint})
        served = sum(ms.served.values())
        # the kept extraction script, run again against ModelScope itself
        rerun = subprocess.run([sys.executable, "-I", str(out / "extract_weights.py"), "--source", f"ms://{REPO}@{ms.commit}",
                                "--out", str(tmp_path / "rerun")], capture_output=True, text=True,
                               env={**os.environ, "MODELSCOPE_ENDPOINT": ms.endpoint})
    assert r.returncode == 0, r.stderr
    assert rerun.returncode == 0, rerun.stderr
    for shard in out.glob("*.safetensors"):
        assert (tmp_path / "rerun" / shard.name).read_bytes() == shard.read_bytes()
    shutil.rmtree(tmp_path / "rerun")
    source = f"ms://{REPO}@{ms.commit}"
    doc = json.loads(r.stdout)
    assert doc["source"] == source and doc["checks"]["integrity"]["hashes_matched"] == doc["checks"]["integrity"]["tensors"]
    for shard in local.glob("*.safetensors"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()
    whole = sum(p.stat().st_size for p in report_shards(checkpoint))
    assert served < whole / 2  # headers, small files and the kept ranges, not the shards
    readme = (out / "README.md").read_text()
    assert f"| source | `{source}` |" in readme and f"modelscope download --model {REPO} " in readme
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "remote"]
