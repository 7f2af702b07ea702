"""Graph mode as a run of its own (`mxtrim validate OUT --serve --graph`): the server runs
without ``--enforce-eager`` (vLLM's default compilation; CUDA graphs on a GPU), the start-up row
records the compile / capture time vLLM logs, and validation.json, the README and the matrix
keep eager and graph-mode results apart. The real CPU build serves a tiny output both ways; the
GPU's log lines come from a stand-in server that prints them as vLLM 0.26's CUDA build does;
the wizard's validate dialog passes --graph."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Checkbox, Input

from engine_support import cli_argv, small_llama_output
from test_validate import needs_vllm, servers
from test_validate_flow import STAND_IN
from test_vllm_discovery import make_env
from tui_support import make_app, no_vllm_in_the_environment, plain, screen_lines, settle, wait_for  # noqa: F401 (autouse)

# the served module fixture (an eager and a graph-mode server) built once, on one worker
pytestmark = pytest.mark.xdist_group("test_graph_mode")

VLLM_PYTHON = os.environ.get("MXTRIM_VLLM_PYTHON")
EAGER_ONLY = "--enforce-eager"


@pytest.fixture(autouse=True)
def no_server_left(tmp_path_factory):
    yield
    assert servers(tmp_path_factory.getbasetemp()) == [], "a server process outlived its test"


def mxtrim(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cli_argv(*args), capture_output=True, text=True, timeout=timeout, env=env)


def with_dynamo() -> dict:
    """The environment of a graph-mode server: TorchDynamo on (the suite turns it off for its
    eager servers, tests/conftest.py), as a user's runs."""
    return {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"}


def rows(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["rows"]}


def history(out: Path) -> list[dict]:
    return json.loads((out / "validation.json").read_text())["runs"]


def validation_section(out: Path) -> str:
    readme = (out / "README.md").read_text()
    return readme[readme.index("## Validation"):]


# --- the real CPU build -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served_both_ways(tmp_path_factory):
    """A one-layer Llama (dummy weights) served by the real CPU build eagerly, then in graph
    mode: (workspace folder, output, eager answer, graph answer)."""
    if not VLLM_PYTHON or not Path(VLLM_PYTHON).exists():
        pytest.skip("real vLLM not set up: `make test` makes .venv-vllm and sets MXTRIM_VLLM_PYTHON")
    root = tmp_path_factory.mktemp("graph")
    out = small_llama_output(root, "dummy")
    answers = []
    for extra in ((), ("--graph",)):
        proc = mxtrim("validate", str(out), "--serve", "--python", VLLM_PYTHON, "--device", "cpu", "--json", *extra,
                      env=with_dynamo() if extra else None)
        assert proc.stdout.strip(), proc.stderr[-3000:]
        answers.append((proc.returncode, json.loads(proc.stdout)))
    return root, out, answers[0], answers[1]


@needs_vllm
def test_graph_mode_serves_without_enforce_eager_and_records_its_compile_time(served_both_ways):
    _root, _out, (eager_code, eager), (graph_code, graph) = served_both_ways
    assert eager_code == 0, json.dumps(eager["rows"], indent=1)
    assert graph_code == 0, json.dumps(graph["rows"], indent=1)
    assert EAGER_ONLY in eager["serve_command"] and EAGER_ONLY not in graph["serve_command"]
    assert eager["settings"]["enforce_eager"] is True and eager["settings"]["graph"] is False
    assert graph["settings"]["enforce_eager"] is False and graph["settings"]["graph"] is True
    start, gen = rows(graph)["start-up"], rows(graph)["generation"]
    assert start["status"] == "passed" and gen["status"] == "passed" and gen["data"]["decode_steps"] >= 8
    # the CPU build compiles in its warm-up ("Warming up model for the compilation..." then
    # "Warming up done."): the time between those lines is the compile time it logs
    compiled = start["data"]["graph"]
    assert isinstance(compiled["compile_s"], (int, float)) and compiled["compile_s"] >= 0
    assert any("Warming up model for the compilation" in line for line in compiled["log_lines"])
    assert "graph mode: compiled in " in start["detail"]
    assert "graph" not in (rows(eager)["start-up"].get("data") or {})  # eager: nothing compiled, nothing said
    # the verdict (the CLI's last lines, the wizard's status) names the mode
    from mxtrim_tui.core.validate.headline import verdict

    assert any(line.startswith("Served on cpu in graph mode at") for line in verdict(graph)[1]), verdict(graph)
    assert not any("graph mode" in line for line in verdict(eager)[1])


@needs_vllm
def test_the_eager_and_the_graph_run_are_both_kept_and_labelled(served_both_ways):
    _root, out, (_, eager), (_, graph) = served_both_ways
    runs = history(out)
    assert [r["started"] for r in runs] == [eager["started"], graph["started"]]
    assert [r["settings"]["graph"] for r in runs] == [False, True]
    section = validation_section(out)
    # the latest run (graph mode) heads the section; the latest eager run stays beside it
    head, _, eager_part = section.partition("### Eager mode")
    assert "graph mode (without --enforce-eager)" in head and "| start-up | passed | healthy after" in head
    assert eager_part, section
    assert eager["started"] in eager_part and "--enforce-eager" in eager_part
    assert "| start-up | passed | healthy after" in eager_part and "| generation | passed |" in eager_part


@needs_vllm
def test_the_matrix_keeps_graph_and_eager_apart(served_both_ways):
    root, out, (_, eager), (_, graph) = served_both_ways
    common = ("validate", "--all", str(root), "--serve", "--python", VLLM_PYTHON, "--device", "cpu", "--json")
    # each mode reuses its own latest run: no server starts, neither overwrites the other
    for extra, run in (((), eager), (("--graph",), graph)):
        proc = mxtrim(*common, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        row = next(r for r in doc["rows"] if Path(r["output"]) == out)
        assert row["state"] == "reused" and row["started"] == run["started"], row
        assert doc["execution"] == ("graph" if extra else "eager")
    assert len(history(out)) == 2
    eager_md, graph_md = (root / "validation-matrix.md").read_text(), (root / "validation-matrix-graph.md").read_text()
    assert json.loads((root / "validation-matrix.json").read_text())["execution"] == "eager"
    assert json.loads((root / "validation-matrix-graph.json").read_text())["execution"] == "graph"
    assert "graph mode" in graph_md.splitlines()[0] and "without `--enforce-eager`" in graph_md
    assert "eager (`--enforce-eager`)" in eager_md
    for text, run in ((eager_md, eager), (graph_md, graph)):
        assert f"reused ({run['started']})" in text


# --- what vLLM's CUDA build logs, from a stand-in server ----------------------------------------

# vLLM 0.26.0's CUDA build, from its format strings: compilation/backends.py ("Dynamo bytecode
# transform time", "Compiling a graph for compile range … takes"), compilation/monitor.py
# ("torch.compile took %.2f s in total"), v1/worker/gpu_model_runner.py ("Graph capturing
# finished in %.0f secs, took %.2f GiB"), v1/engine/core.py ("init engine … (compilation: …)")
CUDA_GRAPH_LINES = """\
(EngineCore_DP0 pid=4242) INFO 12-07 10:00:01 [backends.py:1156] Dynamo bytecode transform time: 3.21 s
(EngineCore_DP0 pid=4242) INFO 12-07 10:00:09 [backends.py:394] Compiling a graph for compile range (1, 4096) takes 7.80 s
(EngineCore_DP0 pid=4242) INFO 12-07 10:00:10 [monitor.py:64] torch.compile took 12.30 s in total
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:03<00:00, 19.80it/s]
(EngineCore_DP0 pid=4242) INFO 12-07 10:00:16 [gpu_model_runner.py:6845] Graph capturing finished in 5 secs, took 0.42 GiB
(EngineCore_DP0 pid=4242) INFO 12-07 10:00:16 [core.py:341] init engine (profile, create kv cache, warmup model) took 30.10 s (compilation: 12.30 s)
"""
# vLLM with --enforce-eager (vllm/config/vllm.py)
EAGER_LINE = ("(APIServer pid=4200) WARNING 12-07 10:00:00 [vllm.py:1163] Enforce eager set, disabling torch.compile and "
              "CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none\n")
# prints what vLLM prints for the command it got, then serves as the flow tests' stand-in does
PRELUDE = r'''
import sys
graph_lines = sys.argv.pop(1)
if "--enforce-eager" in sys.argv:
    print(EAGER_LINE, end="", flush=True)
else:
    print(open(graph_lines, encoding="utf-8").read(), end="", flush=True)
'''


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph-stand-in")
    models = root / "models"
    out = small_llama_output(models, "dummy")
    lines = root / "cuda-graph.log"
    lines.write_text(CUDA_GRAPH_LINES)
    script = root / "stand_in.py"
    script.write_text(f"EAGER_LINE = {EAGER_LINE!r}\n" + PRELUDE + STAND_IN)
    return {"models": models, "out": out, "python": make_env(root / "env", vllm="0.26.0"),
            "launcher": f"{sys.executable} {script} {lines} plain"}


def validate_with_stand_in(setup, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = mxtrim("validate", *args, "--serve", "--python", setup["python"], "--device", "cpu", "--json",
                  "--launcher", setup["launcher"], timeout=300)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def test_the_compile_and_capture_times_vllm_logs_are_recorded_with_the_start_up(stand_in):
    # (the stand-in's environment holds no transformers: its offline rows fail, the server's run)
    proc, doc = validate_with_stand_in(stand_in, str(stand_in["out"]), "--graph")
    start = rows(doc)["start-up"]
    assert start["status"] == "passed"
    graph = start["data"]["graph"]
    assert (graph["compile_s"], graph["capture_s"], graph["capture_gib"]) == (12.3, 5, 0.42)
    assert "torch.compile 12.30 s" in start["detail"] and "CUDA graphs captured in 5 s (0.42 GiB)" in start["detail"]
    assert any("Graph capturing finished" in line for line in graph["log_lines"])
    assert EAGER_ONLY not in doc["serve_command"]
    # eager: vLLM compiles nothing, and the row says nothing of it
    proc, doc = validate_with_stand_in(stand_in, str(stand_in["out"]))
    assert EAGER_ONLY in doc["serve_command"] and "graph" not in (rows(doc)["start-up"].get("data") or {})
    assert "graph mode" not in rows(doc)["start-up"]["detail"]


def test_a_graph_mode_start_that_fails_keeps_the_compile_time_it_logged(stand_in):
    """A captured vLLM-MetaX start-up (vLLM 0.17's wording, "torch.compile takes … in total")
    that compiled, then ran out of memory: the failed start-up row still says how long it compiled."""
    log = Path(__file__).resolve().parent / "fixtures" / "metax_logs" / "c500-autotune-oom.log"
    replay = "import sys; [print(l, end='') for l in open(sys.argv[1]) if not l.startswith('$ ')]; sys.exit(1)"
    proc = mxtrim("validate", str(stand_in["out"]), "--graph", "--python", stand_in["python"], "--device", "cpu", "--json",
                  "--launcher", f"{sys.executable} -c {shlex.quote(replay)} {log}", timeout=300)
    start = rows(json.loads(proc.stdout))["start-up"]
    assert proc.returncode == 1 and start["status"] == "failed" and start["verdict"]["class"]
    assert start["data"]["graph"]["compile_s"] == 20.14 and "graph mode: torch.compile 20.14 s" in start["detail"]


def test_each_mode_reuses_only_its_own_run_and_has_its_own_matrix(stand_in, tmp_path):
    """An eager run does not answer a graph-mode request (nor the other way round); each mode
    reuses its own latest run, whichever ran last; side-by-side children serve in graph mode."""
    models = tmp_path / "models"
    out = small_llama_output(models, "dummy")
    common = ("--all", str(models))
    seen = []
    for extra in ((), ("--graph", "--jobs", "2"), (), ("--graph",)):
        proc, doc = validate_with_stand_in(stand_in, *common, *extra)
        row = next(r for r in doc["rows"] if Path(r["output"]) == out)
        assert row["cells"]["start-up"]["status"] == row["cells"]["generation"]["status"] == "passed", (row, proc.stderr[-3000:])
        seen.append((doc["execution"], row["state"], row["started"]))
        if extra[:1] == ("--graph",) and row["state"] == "validated":
            assert row["note"] == "run again: served before in eager mode (--enforce-eager), now in graph mode (--graph)"
            assert history(out)[-1]["settings"]["graph"] is True  # the child served in graph mode
            start = next(r for r in history(out)[-1]["rows"] if r["check"] == "start-up")
            assert "CUDA graphs captured in 5 s" in start["detail"]
    runs = history(out)
    assert len(runs) == 2 and [r["settings"]["graph"] for r in runs] == [False, True]
    assert seen == [("eager", "validated", runs[0]["started"]), ("graph", "validated", runs[1]["started"]),
                    ("eager", "reused", runs[0]["started"]), ("graph", "reused", runs[1]["started"])]
    eager_md, graph_md = (models / "validation-matrix.md").read_text(), (models / "validation-matrix-graph.md").read_text()
    assert f"reused ({runs[0]['started']})" in eager_md and f"reused ({runs[1]['started']})" in graph_md


def test_the_reason_a_run_is_made_again_names_the_modes():
    from mxtrim_tui.core.validate.batch import settings_differences

    then, now = {"tp": 1, "pp": 1, "enforce_eager": False}, {"tp": 1, "pp": 1, "enforce_eager": True}
    assert settings_differences(then, now) == [
        "served before in graph mode (--graph), now in eager mode (--enforce-eager)"]


# --- the wizard ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from mxtrim_tui.demo.build import build_demo

    return build_demo(tmp_path_factory.mktemp("demo") / "mxtrim-demo")


@pytest.fixture(scope="module")
def wizard_output(tmp_path_factory):
    root = tmp_path_factory.mktemp("wizard")
    return small_llama_output(root, "dummy"), make_env(root / "env", vllm="0.32.0")


@pytest.mark.asyncio
async def test_the_validate_dialog_offers_graph_mode_and_passes_graph(tmp_path, demo, wizard_output, monkeypatch):
    from mxtrim_tui.tui.screens import run as run_module
    from mxtrim_tui.tui.screens.validate_dialog import ValidateDialog

    out, vllm_env = wizard_output
    started: list[list[str]] = []
    monkeypatch.setattr(run_module.RunScreen, "_run", lambda self, argv: started.append(argv))
    app, _ = make_app(tmp_path, demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        app.action_goto("run")
        await settle(app, pilot)
        await pilot.press("v")
        assert await wait_for(pilot, lambda: isinstance(app.screen, ValidateDialog))
        dialog = app.screen
        dialog.query_one("#validate-output", Input).value = str(out)
        dialog.query_one("#validate-python", Input).value = vllm_env
        assert await wait_for(pilot, lambda: "vLLM 0.32.0" in plain(dialog.query_one("#validate-found"), width=400))
        box = dialog.query_one("#validate-graph", Checkbox)
        assert box.value is False and not box.disabled  # eager unless asked
        box.focus()
        await pilot.press("space")
        await settle(app, pilot)
        assert box.value is True
        # ticked reads without colour: the mark is an X
        box.scroll_visible(animate=False)
        await settle(app, pilot)
        assert any("▐X▌ graph mode" in line for line in screen_lines(app)), "\n".join(screen_lines(app))
        await pilot.press("ctrl+s")
        assert await wait_for(pilot, lambda: bool(started))
    argv = started[0]
    assert argv[argv.index("validate") + 1] == str(out) and "--graph" in argv and "--serve" in argv
