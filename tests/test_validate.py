"""`mxtrim validate` for real: offline checks in vLLM's own interpreter, a real `vllm serve`
(the CPU build that `make test` installs in .venv-vllm) on trimmed outputs, requests, failure
classes with evidence, the report rows, and no server left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from fixtures.tiny_models import make_servable_llama

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")
_no_vllm = pytest.mark.skipif(
    not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
    reason="real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON",
)


def needs_vllm(test):
    """A test that starts the real vLLM: marked `vllm` (make test-fast leaves it out)."""
    return pytest.mark.vllm(_no_vllm(test))


def servers(root: Path) -> list[int]:
    """Processes started by this test process's validations (servers, stand-ins and their
    children): their command line names a directory under its temporary root (one per xdist
    worker, so a test never sees another worker's servers)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if p.info["pid"] != os.getpid() and str(root) in cmd:
            found.append(p.pid)
    return found


@pytest.fixture(autouse=True)
def no_server_left(tmp_path_factory):
    yield
    assert servers(tmp_path_factory.getbasetemp()) == [], "a server process outlived its test"


def mxtrim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def llama_outputs(tmp_path_factory):
    """A 6-layer Llama trimmed to the non-contiguous layers 1 and 4, both modes."""
    root = tmp_path_factory.mktemp("validate")
    src = make_servable_llama(root / "llama", layers=6)
    outs = {}
    for mode in ("dummy", "weights"):
        out = root / f"llama-{mode}"
        proc = mxtrim("trim", str(src), "--mode", mode, "--keep", "1,4", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        outs[mode] = out
    return outs


def validate(out: Path, *extra: str) -> tuple[int, dict]:
    proc = mxtrim("validate", str(out), "--python", VLLM_PYTHON, "--device", "cpu", "--json", *extra, cwd=out.parent)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def rows(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["rows"]}


@needs_vllm
def test_offline_then_served_real_weights_are_loadable_and_history_is_kept(llama_outputs):
    out = llama_outputs["weights"]
    code, doc = validate(out)
    assert code == 0
    r = rows(doc)
    # the checks ran in vLLM's interpreter, not this one
    assert doc["environment"]["executable"] == VLLM_PYTHON or Path(doc["environment"]["executable"]).parent == Path(VLLM_PYTHON).parent
    assert doc["environment"]["packages"]["vllm"]["version"] == "0.32.0"
    assert r["config loads offline (AutoConfig, local files only)"]["status"] == "passed"
    assert r["config loads offline (AutoConfig, local files only)"]["data"]["normalised"]["num_hidden_layers"] == 2
    assert r["tokenizer round trip offline"]["status"] == "passed"
    assert r["architecture registered in this vLLM"]["status"] == "passed"
    assert r["start-up"]["status"] == "unverified" and doc["loadable"] is False

    # one server for every served check: start-up, requests, memory and equivalence
    code, doc = validate(out, "--equivalence")
    assert code == 0, json.dumps(doc["rows"], indent=1)
    r = rows(doc)
    assert r["start-up"]["status"] == "passed" and "real weights" in r["start-up"]["detail"]
    eq = r["equivalence with the original (greedy tokens)"]
    # served in float32 on the CPU build: every served token is the original's own top token
    assert eq["status"] == "passed" and eq["data"]["kept"] == [1, 4], eq
    assert eq["data"]["verdict"] == "equal" and eq["detail"].startswith("equal: 16 of 16")
    gen = r["generation"]
    assert gen["status"] == "passed" and gen["data"]["decode_steps"] >= 8
    assert {q["name"] for q in gen["data"]["requests"]} == {"models", "completion", "chat"}
    assert doc["loadable"] is True
    assert "--load-format" not in doc["serve_command"]
    assert doc["server_exit"]["requested"] and doc["server_exit"]["survivors"] == []
    # the budget's prediction beside what this vLLM logged while starting (the CPU build logs
    # its KV budget, tokens and concurrency, not the weights)
    memory = doc["memory"]
    assert memory["device"] == "cpu" and memory["compared"] == 3 and memory["agree"] is True, memory
    tokens = memory["figures"]["kv_tokens"]
    assert tokens["actual"] > 0 and abs(tokens["ratio"] - 1) <= 0.10
    assert memory["figures"]["weights_bytes"]["actual"] is None
    assert any("KV cache size" in line for line in memory["log_lines"])
    assert "KV tokens" in (out / "README.md").read_text()
    # the record: both runs kept, the README says loadable, the log is beside it
    history = json.loads((out / "validation.json").read_text())
    assert len(history["runs"]) == 2 and history["runs"][0]["rows"] != history["runs"][1]["rows"]
    readme = (out / "README.md").read_text()
    assert "**loadable** by this vLLM" in readme and "| start-up | passed |" in readme
    assert "## Layer mapping" in readme and readme.count("## Validation") == 1
    log = (out / "logs" / "serve.log").read_text()
    assert "Application startup complete" in log or (out / "logs" / "serve.log").stat().st_size > 0
    # vLLM's rendezvous file went to the server's own temporary folder, removed with it
    rendezvous = Path(log.split("distributed_init_method=file://")[1].split()[0])
    assert rendezvous.parent.name.startswith("mxtrim-vllm-") and not rendezvous.parent.exists()


def _rename_tensor(shard: Path, old_suffix: str, new_suffix: str) -> str:
    from safetensors.torch import load_file, save_file

    tensors = load_file(shard)
    name = next(n for n in tensors if n.endswith(old_suffix))
    tensors[name[: -len(old_suffix)] + new_suffix] = tensors.pop(name)
    save_file(tensors, shard, metadata={"format": "pt"})
    return name


@needs_vllm
def test_a_tensor_renamed_wrong_is_a_checkpoint_mapping_failure(llama_outputs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(llama_outputs["weights"], broken)
    for leftover in ("validation.json", "logs"):
        shutil.rmtree(broken / leftover, ignore_errors=True) if (broken / leftover).is_dir() else (broken / leftover).unlink(missing_ok=True)
    shard = next(broken.glob("*.safetensors"))
    _rename_tensor(shard, "layers.1.mlp.down_proj.weight", "layers.1.mlp.down_proj_wrong.weight")
    code, doc = validate(broken, "--serve", "--timeout", "300")
    assert code == 1
    start = rows(doc)["start-up"]
    assert start["status"] == "failed"
    assert start["verdict"]["class"] == "checkpoint mapping/completeness"
    assert any("down_proj" in line for line in start["verdict"]["evidence"])
    assert rows(doc)["generation"]["status"] == "unverified" and doc["loadable"] is False
    readme = (broken / "README.md").read_text()
    assert "failed: checkpoint mapping/completeness" in readme and "not shown loadable" in readme


# (a KV budget too small: tests/test_validate_reuse.py, on the same real CPU build)


# --- the server lifecycle with stand-in servers (real processes, real signals) ---------------
HANG = "import signal, time\n{ignore}\nwhile True: time.sleep(1)  # stand-in of {where}"


@pytest.mark.slow
@pytest.mark.parametrize("ignore", ["", "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)"])
def test_a_server_that_never_gets_healthy_is_stopped_with_its_whole_group(llama_outputs, tmp_path, ignore):
    """A launcher that hangs (and, second case, ignores SIGINT and SIGTERM, with a child of
    its own): start-up fails after the timeout and nothing of the group survives."""
    script = tmp_path / "hang.py"
    script.write_text(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {HANG.format(ignore=ignore, where=tmp_path)!r}])\n"
        + HANG.format(ignore=ignore, where=tmp_path) + "\n"
    )
    out = tmp_path / "out"
    shutil.copytree(llama_outputs["dummy"], out)
    python = VLLM_PYTHON or sys.executable
    proc = mxtrim("validate", str(out), "--python", python, "--device", "cpu", "--serve", "--json",
                  "--timeout", "3", "--launcher", f"{sys.executable} {script}", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    start = rows(doc)["start-up"]
    assert proc.returncode == 1 and start["status"] == "failed" and "no progress for 3 s" in start["detail"]
    assert doc["server_exit"]["signal"] == ("SIGKILL" if ignore else "SIGINT")
    assert doc["server_exit"]["survivors"] == [] or all(not psutil.pid_exists(p) for p in doc["server_exit"]["survivors"])


def test_validate_refuses_a_directory_not_written_by_mxtrim(tmp_path):
    proc = mxtrim("validate", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "mxtrim-plan.json" in proc.stderr and "Traceback" not in proc.stderr


# --- the wizard: write, then validate with the live server log --------------------------------
@needs_vllm
@pytest.mark.asyncio
async def test_wizard_validates_after_a_write_streams_the_log_and_leaves_no_process(tmp_path, monkeypatch):
    from mxtrim_tui.core.probe.gpu import GpuProbe
    from mxtrim_tui.tui.app import MxtrimApp
    from tui_support import plain, settle, wait_for

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MXTRIM_VLLM_PYTHON", VLLM_PYTHON)
    src = make_servable_llama(tmp_path / "llama", layers=4)
    ws = tmp_path / "ws"
    ws.mkdir()
    app = MxtrimApp(src, tree_root=tmp_path, gpu_probe=lambda: GpuProbe("none", False, "no GPU here"), workspace=ws)
    async with app.run_test(size=(100, 40)) as pilot:
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        await settle(app, pilot)
        app.action_goto("output")
        await settle(app, pilot)
        await pilot.press("ctrl+s")
        run = app.get_screen("run")
        assert await wait_for(pilot, lambda: app.state.last_output is not None and not run.running, timeout=120)
        log = run.query_one("#run-log")

        def log_text() -> str:
            return "\n".join(str(line.text) for line in log.lines)

        async def validate_from_the_dialog() -> None:
            """`v` opens the dialog; it finds vLLM as the CLI does ($MXTRIM_VLLM_PYTHON here); Ctrl+S starts."""
            await pilot.press("v")
            assert await wait_for(pilot, lambda: "✓ vLLM 0.32.0" in plain(app.screen.query_one("#validate-found"), width=400), timeout=60)
            assert "$MXTRIM_VLLM_PYTHON" in plain(app.screen.query_one("#validate-found"), width=400)
            await pilot.press("ctrl+s")

        # start, then stop it while the server starts: nothing is left
        await validate_from_the_dialog()
        assert await wait_for(pilot, lambda: "[serve] starting" in log_text(), timeout=120)
        await pilot.pause(3)
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: "stopped" in plain(run.query_one("#run-status")), timeout=90)
        assert servers(tmp_path) == []
        # again, to the end: the server's own log lines and each verdict appear
        await validate_from_the_dialog()
        def finished() -> bool:
            status = plain(run.query_one("#run-status"))
            return not run.running and ("✓ validated" in status or "✗" in status)

        assert await wait_for(pilot, finished, timeout=400)
        await pilot.pause(0.5)
        status = plain(run.query_one("#run-status"))
        verdicts = plain(run.query_one("#run-validation"), width=300)
        assert "✓ validated" in status, verdicts
        assert "start-up: passed" in verdicts and "generation: passed" in verdicts
        assert "Starting vLLM" in log_text() or "Application startup complete" in log_text()
        assert "--load-format dummy" in plain(run.query_one("#run-serve"), width=400)
        await pilot.press("ctrl+q")
    assert servers(tmp_path) == []


# --- equivalence: the served trim is the original with layers removed ------------------------
def _swap_layers(shard: Path, a: int, b: int) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(shard)
    swapped = {}
    for name, t in tensors.items():
        for x, y in ((a, b), (b, a)):
            tag = f".layers.{x}."
            if tag in name:
                name = name.replace(tag, f".layers.{y}.")
                break
        swapped[name] = t
    save_file(swapped, shard, metadata={"format": "pt"})


@needs_vllm
def test_equivalence_fails_with_two_layers_swapped_and_blames_the_trim_only_after_the_source_agrees(llama_outputs, tmp_path):
    """(The trim itself is equal: test_offline_then_served_…; layer 0 alone: the chained trim.)"""
    swapped = tmp_path / "swapped"
    shutil.copytree(llama_outputs["weights"], swapped)
    _swap_layers(next(swapped.glob("*.safetensors")), 0, 1)
    code, doc = validate(swapped, "--equivalence")
    eq = rows(doc)["equivalence with the original (greedy tokens)"]
    assert code == 1 and eq["status"] == "failed", eq
    assert eq["detail"].startswith("different at step") and "the original's top" in eq["detail"]
    # blamed on the trim only once the untrimmed source, served the same way, agreed with transformers
    assert eq["data"]["source_check"]["verdict"] == "equal"
    assert rows(doc)["start-up"]["status"] == "passed"  # it loads: only the comparison catches it


# --- the families served for real: dummy and real weights, non-contiguous kept layers ---------
from fixtures import tiny_models as tm  # noqa: E402

FAMILIES = {
    # name: (builder, kept layers: a dense and an MoE one / a sliding and a full one, MTP kept when present)
    "qwen3_moe": (tm.make_servable_qwen3_moe, "1,3"),
    "gemma3_text": (tm.make_servable_gemma3_text, "0,2"),
    "glm4_moe_mtp": (tm.make_servable_glm4_moe_mtp, "0,3"),
    "deepseek_v3_mtp": (tm.make_servable_deepseek_v3_mtp, "0,2"),
}
# greedy tokens against the original in transformers (teacher-forced on the served tokens):
# passed for every family here, DeepSeek's MLA included (served with the CPU_MLA backend in float32)
EQUIVALENCE = {"qwen3_moe": "passed", "gemma3_text": "passed", "glm4_moe_mtp": "passed", "deepseek_v3_mtp": "passed"}


@pytest.fixture(scope="module")
def family_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    made = {}

    def get(name: str, mode: str) -> Path:
        """The family's source built on first use, and its trim in ``mode`` written on first use
        (a worker that serves only one of the two modes writes only that one)."""
        builder, keep = FAMILIES[name]
        if name not in made:
            made[name] = {"source": builder(root / name)}
        if mode not in made[name]:
            out = root / f"{name}-{mode}"
            proc = mxtrim("trim", str(made[name]["source"]), "--mode", mode, "--keep", keep, "--out", str(out))
            assert proc.returncode == 0, proc.stderr
            made[name][mode] = out
        return made[name][mode]

    return get


# The dummy path is the same for every family (config and tokenizer, --load-format dummy): it is
# served for the two whose KV layout differs most, Gemma-3's sliding / full here and DeepSeek's
# MLA with its MTP layer in tests/test_demo_served.py (the demo is that model); the others are
# served with real weights below.
DUMMY_SERVED = ["gemma3_text"]


def _memory_agrees(doc: dict) -> None:
    """The budget's prediction agrees with what vLLM logged, the hybrid sliding / full KV pool
    of Gemma-3 included (vLLM counts whole blocks per group, one more for a sliding window)."""
    memory = doc["memory"]
    assert memory["agree"] is True and rows(doc)["memory: predicted against logged"]["status"] == "passed", memory
    assert memory["figures"]["kv_tokens"]["predicted"] == memory["figures"]["kv_tokens"]["actual"]


@needs_vllm
@pytest.mark.parametrize("family", DUMMY_SERVED)
def test_family_dummy_trim_is_served(family_outputs, family):
    code, doc = validate(family_outputs(family, "dummy"), "--serve")
    r = rows(doc)
    assert code == 0, json.dumps(doc["rows"], indent=1)[:3000]
    assert r["start-up"]["status"] == "passed" and r["generation"]["status"] == "passed"
    assert "dummy weights" in r["start-up"]["detail"]
    cmd = doc["serve_command"]
    assert cmd[cmd.index("--load-format") + 1] == "dummy"
    assert doc["loadable"] is None  # a dummy output is never called a loadable checkpoint
    if family == "gemma3_text":  # a prompt past the kept sliding window, counted with the output's tokenizer as vLLM counts it
        long = r["long input"]
        n = long["data"]["request"]["prompt_tokens"]  # vLLM's own count of the prompt it was sent
        assert long["status"] == "passed" and n > 16, long
        assert long["detail"].startswith(f"long input {n} tokens (counted with the output's tokenizer): "
                                         "crosses the sliding window 16 (layer 0);"), long
        # the engine built the sliding layer with its window and the long input ran through it
        sliding = next(p for p in doc["paths"] if "sliding" in p["kind"])
        assert sliding["status"] == "executed" and sliding["layers"] == ["model.layers.0"], sliding
        assert [b["attention"]["sliding_window"] for b in sliding["built"]] == [16], sliding["built"]
        ran = sliding["executed"]["long input"]["model.layers.0"]
        assert ran["calls"] > 0 and ran["prefill_tokens"] >= n, sliding["executed"]
    _memory_agrees(doc)
    # a dummy output holds no weights: they are predicted from the kept tensors of its source
    assert doc["memory"]["figures"]["weights_bytes"]["predicted"] > 0


@needs_vllm
@pytest.mark.parametrize("family", FAMILIES)
def test_family_real_weight_trim_is_loadable_equivalent_and_drafts_with_its_mtp_layer(family_outputs, family):
    """One server per output for every served check: equivalence and, with a kept MTP layer,
    speculative decoding (vLLM's counters must show drafted tokens)."""
    mtp = "mtp" in family
    code, doc = validate(family_outputs(family, "weights"), "--equivalence", *(["--speculative"] if mtp else []))
    r = rows(doc)
    assert code == 0, json.dumps(doc["rows"], indent=1)[:3000]
    assert doc["loadable"] is True
    _memory_agrees(doc)
    eq = r["equivalence with the original (greedy tokens)"]
    assert eq["status"] == EQUIVALENCE[family], eq
    spec = r["speculative decoding (MTP)"]
    if mtp:
        assert spec["status"] == "passed", spec
        arg = doc["serve_command"][doc["serve_command"].index("--speculative-config") + 1]
        assert json.loads(arg)["method"] == "mtp"
    else:
        assert spec["status"] == "not applicable", spec


@needs_vllm
def test_qwen2_mixed_sliding_is_warned_and_classified_as_configuration(tmp_path):
    src = tm.make_servable_qwen2_mixed_sliding(tmp_path / "qwen2")
    out = tmp_path / "qwen2-dummy"
    proc = mxtrim("trim", str(src), "--mode", "dummy", "--keep", "0,2", "--out", str(out))
    assert proc.returncode == 0
    assert "Sliding window for some but all layers" in (out / "README.md").read_text()  # the plan's warning
    code, doc = validate(out, "--serve")
    start = rows(doc)["start-up"]
    assert code == 1 and start["verdict"]["class"] == "trimming/configuration or missing dependency"
    assert any("Sliding window for some but all layers" in line for line in start["verdict"]["evidence"])


def test_qwen3_moe_saved_by_transformers_5_keeps_its_moe_layers(tmp_path):
    """transformers 5 writes the expert count as num_local_experts: still MoE layers."""
    from mxtrim_tui.core.model.inventory import build_inventory
    from mxtrim_tui.core.plan.build import Selection, build_plan
    from mxtrim_tui.core.read.source import open_source

    src = tm.make_servable_qwen3_moe(tmp_path / "q", experts_key="num_local_experts")
    plan = build_plan(build_inventory(open_source(src)), Selection.parse(None, None))
    kinds = {m.kind.mlp for m in plan.mappings}
    assert "moe" in " ".join(sorted(kinds)).lower() and len(plan.kept["text"]) >= 2


@needs_vllm
def test_trim_validate_chains_the_write_and_the_validation(tmp_path):
    """`trim --validate --equivalence` of layer 0 alone (nothing renamed): equal, in one command."""
    src = make_servable_llama(tmp_path / "llama", layers=4)
    out = tmp_path / "chained"
    proc = mxtrim("trim", str(src), "--mode", "weights", "--keep", "0", "--out", str(out), "--json",
                  "--validate", "--equivalence", "--python", VLLM_PYTHON, "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    r = rows(doc["validation"])
    assert doc["output"] == str(out) and r["generation"]["status"] == "passed"
    assert r["equivalence with the original (greedy tokens)"]["data"]["verdict"] == "equal"
    assert len(json.loads((out / "validation.json").read_text())["runs"]) == 1


@pytest.mark.slow
def test_serving_on_a_gpu_that_is_not_there_is_not_a_success(llama_outputs, tmp_path):
    out = tmp_path / "no-gpu"
    shutil.copytree(llama_outputs["dummy"], out)
    proc = mxtrim("validate", str(out), "--serve", "--device", "cuda", "--json", "--python", VLLM_PYTHON or sys.executable)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert rows(doc)["start-up"]["status"] == "unverified" and "no GPU visible" in rows(doc)["start-up"]["detail"]
    assert doc["serve_command"] is None  # nothing was started
