"""mxtrim's engine probe without a vLLM server: when it may be used with the server's command
(a launcher or extra arguments of the user's that bring their own worker extension or Ray),
what it leaves in the temporary folder when it or the server cannot start or is interrupted,
the server's environment once it was given up, and its callbacks run in a worker stand-in of
vLLM's documented surface (a model of real torch modules, the forward context, the MoE
router's ``capture_fn``, ``POST /collective_rpc`` over real HTTP): a callback that fails never
stops the forward pass, and the rows it counted are unverified, naming the error."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from http_support import JsonHandler, serving
from mxtrim_tui.core.validate.http import post_json
from mxtrim_tui.core.validate.mxtrim_probe_ext import MxtrimProbe
from mxtrim_tui.core.validate.paths import EXTENSION_FLAG, EngineProbe
from mxtrim_tui.core.validate.serve import Server, ServeOptions, serve_argv, serve_env


@pytest.fixture
def tmp_folder(tmp_path, monkeypatch) -> Path:
    """The temporary folder of mxtrim (and of what it starts) for this test alone, so what is
    left there is this test's."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def probe_for(tmp_path: Path, **opts) -> tuple[EngineProbe, list[str]]:
    """The probe of a server of these options, and the command that server gets."""
    options = ServeOptions(python=sys.executable, **opts)
    probe = EngineProbe(options)
    return probe, probe.server_argv(serve_argv(tmp_path / "out", "dummy", options, 8000))


# ---- the server's own arguments ---------------------------------------------------------------

@pytest.mark.parametrize("words", [
    ["--worker-extension-cls", "my_ext.Ext"],
    ["--worker-extension-cls=my_ext.Ext"],
    ["--worker_extension_cls", "my_ext.Ext"],  # vLLM's parser takes underscores for dashes
], ids=["spaced", "equals", "underscores"])
def test_a_launcher_with_its_own_worker_extension_keeps_it_and_the_rows_say_why(tmp_path, tmp_folder, words):
    launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *words]
    probe, argv = probe_for(tmp_path, launcher=launcher)
    # the user's extension is the only one the server gets: mxtrim adds none after it
    assert sum(w.replace("_", "-").split("=")[0] == EXTENSION_FLAG for w in argv) == 1, argv
    assert "mxtrim_probe_ext.MxtrimProbe" not in argv
    assert "worker extension" in probe.unusable
    env = probe.server_env({"PATH": "/bin"})
    assert env == {"PATH": "/bin"}  # no probe folder on PYTHONPATH, no development endpoints
    assert os.listdir(tmp_folder) == []  # nothing prepared
    plan = {"coverage": [{"group": "A", "submodel": "text", "kind": "dense", "kept": [{"new": 0, "old": 0}]}]}
    (row,) = probe.paths(plan, tmp_path / "out")
    assert row["status"] == "unverified" and "worker extension" in row["evidence"]


@pytest.mark.parametrize("where", ["launcher", "extra_args"])
@pytest.mark.parametrize("words", [["--distributed-executor-backend", "ray"], ["--distributed-executor-backend=ray"]],
                         ids=["spaced", "equals"])
def test_ray_asked_for_in_the_servers_own_words_is_served_once_without_the_probe(tmp_path, tmp_folder, where, words):
    launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    opts = {"launcher": launcher + words} if where == "launcher" else {"launcher": launcher, "extra_args": list(words)}
    probe, argv = probe_for(tmp_path, **opts)
    assert EXTENSION_FLAG not in argv, argv
    assert probe.unusable and "Ray" in probe.unusable
    assert os.listdir(tmp_folder) == []


def test_a_later_backend_of_the_users_replaces_ray_and_the_probe_is_used(tmp_path, tmp_folder):
    # argparse keeps the last value: Ray given by mxtrim's --ray, then the user's own executor after it
    probe, argv = probe_for(tmp_path, executor_backend="ray", extra_args=["--distributed-executor-backend", "mp"])
    try:
        assert probe.unusable is None and argv[-2:] == [EXTENSION_FLAG, "mxtrim_probe_ext.MxtrimProbe"]
    finally:
        probe.close()


# ---- given up, interrupted, or no room ------------------------------------------------------

def test_after_a_start_that_failed_on_the_probe_the_next_start_has_no_trace_of_it(tmp_path, tmp_folder):
    probe, _argv = probe_for(tmp_path)
    try:
        assert probe.active
        base = {"PATH": "/bin", "PYTHONPATH": "/mine"}
        with_probe = probe.server_env(base)
        assert with_probe["VLLM_SERVER_DEV_MODE"] == "1" and with_probe["PYTHONPATH"].startswith(probe.folder)
        assert probe.failed_start(["ModuleNotFoundError: No module named 'mxtrim_probe_ext'"])
        # served again without it: its folder off PYTHONPATH, vLLM's development endpoints off
        assert probe.server_env(base) == base
        assert EXTENSION_FLAG not in probe.server_argv(["vllm", "serve"])
    finally:
        probe.close()


def test_an_interrupt_while_the_probe_is_checked_leaves_no_folder_behind(tmp_path, tmp_folder):
    # an interpreter that takes its time importing the probe; Ctrl-C (SIGINT to its parent)
    # arrives meanwhile. The parent is a mxtrim process of its own, never the test's worker.
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nkill -INT $PPID\nexec sleep 60\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    code = ("import sys\n"
            "from mxtrim_tui.core.validate.paths import EngineProbe\n"
            "from mxtrim_tui.core.validate.serve import ServeOptions\n"
            "try:\n    EngineProbe(ServeOptions(python=sys.argv[1]))\n"
            "except KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(python)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr  # interrupted while the check ran
    assert os.listdir(tmp_folder) == []


def test_no_room_for_the_probes_folder_is_a_reason_not_a_traceback(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))  # a temporary folder that cannot hold one
    probe = EngineProbe(ServeOptions(python=sys.executable))
    assert not probe.active and probe.folder is None
    assert "mxtrim's probe" in probe.unusable and "not a directory" in probe.unusable.lower()
    assert probe.server_argv(["vllm", "serve"]) == ["vllm", "serve"]


def test_a_server_that_cannot_be_started_leaves_no_scratch_folder(tmp_path, tmp_folder):
    server = Server([str(tmp_path / "no-such-vllm"), "serve"], serve_env(ServeOptions(python=sys.executable)),
                    tmp_path / "logs" / "serve.log")
    server.start()
    healthy, why = server.wait_healthy("http://127.0.0.1:9", timeout=30)
    assert not healthy and "could not be started" in why and "no-such-vllm" in why
    server.stop()
    assert os.listdir(tmp_folder) == []


# ---- the callbacks, inside a worker ----------------------------------------------------------

class Router:
    """vLLM's router surface the probe uses (BaseRouter): ``global_num_experts``, ``top_k``,
    ``set_capture_fn``, and ``capture_fn(topk_ids)`` called with the chosen ids, where padded
    rows carry -1."""

    def __init__(self, experts: int, top_k: int):
        self.global_num_experts, self.top_k, self.capture_fn = experts, top_k, None
        self.ids: torch.Tensor | None = None  # what the next call chooses (None: the top-k of the logits)

    def set_capture_fn(self, fn):
        self.capture_fn = fn

    def select_experts(self, logits: torch.Tensor) -> torch.Tensor:
        ids = self.ids if self.ids is not None else logits.topk(self.top_k, dim=-1).indices
        if self.capture_fn is not None:
            self.capture_fn(ids)
        return ids


class MoE(torch.nn.Module):
    def __init__(self, dim: int, experts: int):
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts)
        self.router = Router(experts, top_k=2)
        self.routed_experts = SimpleNamespace(quant_method=None, local_num_experts=experts)

    def forward(self, x):
        self.router.select_experts(self.gate(x))
        return x


class Layer(torch.nn.Module):
    def __init__(self, dim: int, moe: bool):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = MoE(dim, 4) if moe else None

    def forward(self, x):
        x = self.proj(x)
        return self.mlp(x) if self.mlp is not None else x


class Model(torch.nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([Layer(dim, moe=False), Layer(dim, moe=True)])

    def forward(self, x):
        for layer in self.model.layers:
            x = layer(x)
        return x


class Forward:
    """vllm.forward_context's surface: the context of the forward pass under way."""
    current = None

    @classmethod
    def available(cls):
        return cls.current is not None

    @classmethod
    def get(cls):
        return cls.current


class BrokenMetadata:
    """Attention metadata whose query starts cannot be read (a property that refuses)."""

    @property
    def query_start_loc_cpu(self):
        raise RuntimeError("query_start_loc_cpu is not built for this step")


@pytest.fixture
def vllm_surface(monkeypatch):
    """The few modules of vLLM the probe imports inside a worker: ranks of a single GPU, the
    forward context."""
    group = SimpleNamespace(rank_in_group=0, world_size=1)
    ps = types.ModuleType("vllm.distributed.parallel_state")
    ps.get_tensor_model_parallel_rank, ps.get_tensor_model_parallel_world_size = (lambda: 0), (lambda: 1)
    ps.get_pp_group = ps.get_dp_group = lambda: group
    dist = types.ModuleType("vllm.distributed")
    dist.parallel_state = ps
    fc = types.ModuleType("vllm.forward_context")
    fc.is_forward_context_available, fc.get_forward_context = Forward.available, Forward.get
    vllm = types.ModuleType("vllm")
    vllm.distributed, vllm.forward_context = dist, fc
    for name, mod in (("vllm", vllm), ("vllm.distributed", dist), ("vllm.distributed.parallel_state", ps),
                      ("vllm.forward_context", fc)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(Forward, "current", None)


class Worker(MxtrimProbe):
    """vLLM's worker with mxtrim's probe mixed in, as ``--worker-extension-cls`` does."""

    def __init__(self, model: Model):
        self.rank = 0
        self.model_runner = SimpleNamespace(get_model=lambda: model)
        compilation = SimpleNamespace(static_forward_context={"model.layers.1.mlp": model.model.layers[1].mlp},
                                      mode=0, cudagraph_mode=None)
        self.vllm_config = SimpleNamespace(
            compilation_config=compilation, speculative_config=None, attention_config=None,
            model_config=SimpleNamespace(dtype=torch.float32, quantization=None, enforce_eager=True),
            cache_config=SimpleNamespace(cache_dtype="auto"))


@pytest.fixture
def engine(vllm_surface):
    """A worker behind vLLM's ``POST /collective_rpc`` (one rank: one result per call)."""
    model = Model()
    worker = Worker(model)

    class Handler(JsonHandler):
        def do_POST(self):
            body = self.read_json()
            try:
                result = getattr(worker, body["method"])(*body.get("args", []), **body.get("kwargs", {}))
                status, doc = 200, {"results": [result]}
            except Exception as exc:
                status, doc = 500, {"error": f"{type(exc).__name__}: {exc}"}
            self.send_json(doc, status)

    with serving(Handler) as base:
        yield SimpleNamespace(model=model, worker=worker, base=base)


PLAN = {"coverage": [
    {"group": "A", "submodel": "text", "kind": "dense", "kept": [{"new": 0, "old": 0}], "request": "any request"},
    {"group": "B", "submodel": "text", "kind": "moe", "kept": [{"new": 1, "old": 5}], "request": "any request"},
]}


def step(model: Model, tokens: int, metadata=None) -> torch.Tensor:
    """One forward pass of ``tokens`` prefill tokens, in its forward context."""
    md = metadata or SimpleNamespace(query_start_loc_cpu=torch.tensor([0, tokens]), num_actual_tokens=tokens)
    Forward.current = SimpleNamespace(attn_metadata={"model.layers.0.attn": md})
    try:
        with torch.no_grad():
            return model(torch.randn(tokens, 8))
    finally:
        Forward.current = None


def served_rows(engine, tmp_path: Path, requests) -> dict[str, dict]:
    """The probe installed on the engine, each request measured, the rows as validate reports them."""
    probe = EngineProbe(ServeOptions(python=sys.executable))
    try:
        probe.install(engine.base)
        assert probe.inventory, probe.lost
        for check, run in requests.items():
            with probe.measure(engine.base, check):
                run()
        assert probe.lost is None, probe.lost
        return {p["row"]: p for p in probe.paths(PLAN, tmp_path / "out")}
    finally:
        probe.close()


def test_padded_rows_routed_to_no_expert_are_left_out_of_the_histogram(engine, tmp_path):
    router = engine.model.model.layers[1].mlp.router
    # 3 tokens x top-2: experts 0, 2 and 3 chosen, the padded row's slots -1
    router.ids = torch.tensor([[0, 2], [2, 3], [-1, -1]])
    rows = served_rows(engine, tmp_path, {"generation": lambda: step(engine.model, 3)})
    dense, moe = rows["A"], rows["B"]
    assert dense["status"] == "executed" and moe["status"] == "executed", moe["evidence"]
    assert moe["experts_per_layer"] == {"model.layers.1": [1, 0, 2, 1]}
    assert "3 of 4 experts received tokens" in moe["evidence"]


def test_a_count_that_fails_leaves_the_forward_pass_running_and_its_rows_unverified(engine, tmp_path):
    outputs = []
    rows = served_rows(engine, tmp_path, {
        "generation": lambda: outputs.append(step(engine.model, 4)),
        "long input": lambda: outputs.append(step(engine.model, 6, BrokenMetadata())),
    })
    assert [tuple(o.shape) for o in outputs] == [(4, 8), (6, 8)]  # the engine ran both requests
    for row in rows.values():
        assert row["status"] == "unverified", row["evidence"]
        assert "query_start_loc_cpu is not built for this step" in row["evidence"], row["evidence"]
        assert "RuntimeError" in row["reason"]


def test_an_expert_capture_that_fails_leaves_the_forward_pass_running_and_the_moe_row_unverified(engine, tmp_path):
    router = engine.model.model.layers[1].mlp.router
    router.ids = torch.tensor([[0, 2], [2, 3]]).to_sparse()  # a layout the histogram cannot take
    outputs = []
    rows = served_rows(engine, tmp_path, {"generation": lambda: outputs.append(step(engine.model, 2))})
    assert [tuple(o.shape) for o in outputs] == [(2, 8)]
    assert rows["A"]["status"] == "executed", rows["A"]["evidence"]
    assert rows["B"]["status"] == "unverified" and "experts" in rows["B"]["reason"], rows["B"]


def test_the_report_writes_nowhere_a_caller_names(engine, tmp_path, monkeypatch):
    monkeypatch.delenv("MXTRIM_PROBE_DIR", raising=False)
    elsewhere = tmp_path / "elsewhere"
    probe = EngineProbe(ServeOptions(python=sys.executable))
    try:
        probe.install(engine.base)
        status, body, _secs = post_json(engine.base + "/collective_rpc",
                                        {"method": "mxtrim_probe_report", "args": [str(elsewhere)]})
        assert status == 200 and json.loads(body)["results"][0]["installed"] is True, body
        assert not elsewhere.exists()
    finally:
        probe.close()
