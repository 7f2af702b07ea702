"""`mxtrim examples` on a workspace shaped like vLLM-MetaX's published
``tools/batched_test/models/`` (tests/fixtures/published_workspace: three hand-made examples, no
weights, tokenizers as published): stale ``./temp/…`` and ``$PWD/temp/…`` paths, a tokenizer
config with no tokenizer data, the environment launch scripts set (unknown ``VLLM_*`` names
flagged against the vLLM environment), assets a README requires, an index naming absent
shards, a README's recorded results (history) — and no false alarm from HTTP routes or cache
directories made at run time. Then the writer: a dummy output without usable tokenizer data,
and a source's own launch script copied with paths it will not find, are warned of."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from engine_support import plan_for, run_cli
from mxtrim_tui.core.validate.examples import now_environment, scan
BACKEND_ERROR = "Couldn't instantiate the backend tokenizer"  # what vLLM says (transformers raises it)
from mxtrim_tui.demo.build import build_demo

PUBLISHED = Path(__file__).resolve().parent / "fixtures" / "published_workspace"
MODELS = ("tools", "batched_test", "models")
GLM, V4_0731, V4_FP8 = "GLM-5_2-W8A8-dummy-3layers", "DeepSeek-V4-Flash-0731-smq-w8a8", "DeepSeek-V4-Flash-FP8_sgl_project"


@pytest.fixture
def ws(tmp_path) -> Path:
    """The published workspace, copied (its root: the folder above tools/batched_test/models)."""
    root = tmp_path / "vLLM-metax"
    shutil.copytree(PUBLISHED, root)
    return root


def models(root: Path) -> Path:
    return root.joinpath(*MODELS)


def examples_json(folder: Path) -> dict[str, dict]:
    r = run_cli("examples", str(folder), "--json", "--python", sys.executable)
    assert r.returncode == 0, r.stderr
    return {e["name"]: e for e in json.loads(r.stdout)["examples"]}


def rendered(folder: Path, examples) -> str:
    from mxtrim_tui.render import render_examples

    out = io.StringIO()
    render_examples(folder, examples, sys.executable, None, Console(file=out, width=400, color_system=None))
    return out.getvalue()


def test_the_published_examples_report_what_is_wrong_and_nothing_else(ws):
    folder = models(ws)
    by = examples_json(folder)
    assert sorted(by) == [V4_0731, V4_FP8, GLM]

    glm = by[GLM]
    assert glm["problems"] == [
        "no tokenizer files: none of tokenizer.json, tokenizer.model, vocab.json, tokenizer_config.json beside config.json",
        "README.md: names /mxstorage/pde_ai/models/llm/ChatGLM/GLM-5_2-W8A8, which does not exist",
        "README.md: names /root/dummy_home/workspace/vLLM-metax-0.27.0-mx, which does not exist",
        f"README.md: names $PWD/temp/{GLM} (line 53), which is there neither beside README.md nor from {ws}; "
        f"this model is now tools/batched_test/models/{GLM}",
        "missing asset: tokenizer.json (README.md lists it as needed: 完整 tokenizer 数据，常规文本输入需要)",
        "missing asset: tokenizer_config.json (README.md lists it as needed: tokenizer 类、特殊 token 和行为配置，配套保留)",
        "missing asset: chat_template.jinja (README.md lists it as needed: 聊天消息格式，使用 chat 接口时保留)",
    ]
    # the cache directory the README sets (FLASHINFER_WORKSPACE_BASE=/tmp/...) is made when run: not stale
    assert not any("/tmp/glm-dummy-cache" in p for p in glm["problems"])
    assert {a["file"]: (a["required"], a["present"]) for a in glm["readme_assets"]} == {
        "config.json": (True, True), "tokenizer.json": (True, False), "tokenizer_config.json": (True, False),
        "chat_template.jinja": (True, False), "generation_config.json": (False, False)}  # "可省略": optional
    # no launch script: the README's commands are its launch; what they set is listed
    assert [(e["name"], e["value"], e["file"]) for e in glm["env"]] == [
        ("CUDA_VISIBLE_DEVICES", "2", "README.md"), ("MACA_VISIBLE_DEVICES", "2", "README.md"),
        ("CUDA_VISIBLE_DEVICES", "2,3", "README.md"), ("MACA_VISIBLE_DEVICES", "2,3", "README.md")]
    assert glm["history"] is None and glm["index"] is None

    v4 = by[V4_0731]
    assert v4["problems"] == [
        f"run_serve2.sh: names ./temp/{V4_0731} (line 3), which is there neither beside run_serve2.sh nor from {ws}; "
        f"this model is now tools/batched_test/models/{V4_0731}",
        "model.safetensors.index.json: names 47 shard file(s), none of them here (model-layers-00000.safetensors, "
        "model-layers-00001.safetensors, model-layers-00002.safetensors, … 44 more): only --load-format dummy serves "
        "this folder; a load of real weights fails",
    ]
    assert v4["index"]["shards"] == 47 and v4["index"]["absent"] == 47
    # tokenizer_config.json names a fast tokenizer with no tokenizer.json: not a tokenizer
    assert v4["tokenizer"]["usable"] is False and BACKEND_ERROR in v4["tokenizer"]["detail"]
    assert v4["tokenizer"]["files"] == ["special_tokens_map.json", "tokenizer_config.json"]
    # the commented-out export is not a setting; the two prefixes of `vllm serve` are
    assert [(e["name"], e["value"], e["line"], e["known"]) for e in v4["env"]] == [
        ("VLLM_USE_V2_MODEL_RUNNER", "0", 2, None), ("VLLM_METAX_USE_FP8_WO_A", "0", 2, None)]

    fp8 = by[V4_FP8]
    assert fp8["problems"] == [
        "no tokenizer files: none of tokenizer.json, tokenizer.model, vocab.json, tokenizer_config.json beside config.json",
        "README.md: names /workspace/model_test/DeepSeek-V4-Flash-FP8_sgl_project-before-trim-lymdzqdk, which does not exist",
        *[f"missing asset: {name} (README.md lists it as needed: Required model assets are `config.json`, `tokenizer.json`, "
          "`tokenizer_config.js…)" for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json")],
    ]
    # an HTTP route is no path; the script finds its own folder ("$(dirname …)"): nothing stale
    assert not any("/v1/completions" in p or "run_serve.sh" in p for p in fp8["problems"])
    # exported settings are listed; MODEL_DIR (a shell variable) and the `${CUDA_VISIBLE_DEVICES:?}` check are not
    assert [(e["name"], e["value"]) for e in fp8["env"]] == [
        ("MACA_VISIBLE_DEVICES", "${MACA_VISIBLE_DEVICES:-$CUDA_VISIBLE_DEVICES}"), ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1")]
    h = fp8["history"]
    assert h["status"] == "historical, not rechecked" and h["sections"] == ["Validation scope"] and h["dates"] == ["2026-09-23"]
    assert any(r.startswith("The earlier normal vLLM configuration import failed because `torchaudio/lib/libtorchaudio.so`")
               for r in h["results"])
    assert h["results"][-1].endswith("graph execution remain untested.")
    assert h["environment"] == [{"name": "vLLM", "version": None}, {"name": "torchaudio", "version": None}]


def test_the_text_view_shows_the_new_facts(ws):
    r = run_cli("examples", str(models(ws)), "--python", sys.executable, env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"{V4_0731}: run_serve2.sh: names ./temp/{V4_0731} (line 3)" in out
    assert f"{V4_0731}: tokenizer not usable: tokenizer_config.json names PreTrainedTokenizerFast" in out
    assert (f"{V4_0731}: environment (run_serve2.sh): VLLM_USE_V2_MODEL_RUNNER=0, VLLM_METAX_USE_FP8_WO_A=0 — VLLM_* names "
            "not checked against a vLLM environment") in out
    assert f"{V4_0731}: model.safetensors.index.json: names 47 shard file(s), none of them here" in out
    assert (f"{V4_FP8}: README.md records results (historical, not rechecked; Validation scope; 2026-09-23; environment: "
            "vLLM (no version given), torchaudio (no version given)):") in out
    assert f"{V4_FP8}:   That environment failure has not been rechecked or repaired during restoration." in out
    assert f"{GLM}: README.md lists generation_config.json as optional: absent" in out
    assert f"{GLM}: missing asset: chat_template.jinja" in out
    assert "/v1/completions" not in out and "/tmp/glm-dummy-cache" not in out


def fake_vllm_python(tmp_path: Path, vllm_names: list[str], metax_names: list[str] | None) -> str:
    """A Python environment with a stand-in vLLM (and vLLM-MetaX) whose envs modules define
    ``vllm_names`` (``metax_names``; None: no vllm_metax installed). Their code is never
    imported by the check: the files are read."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    for pkg, names in (("vllm", vllm_names), ("vllm_metax", metax_names)):
        if names is None:
            continue
        (site / pkg).mkdir()
        (site / pkg / "__init__.py").write_text("raise SystemExit('imported: the check must only read files')\n")
        entries = "".join(f'    "{n}": lambda: os.getenv("{n}"),\n' for n in names)
        (site / pkg / "envs.py").write_text(f"import os\n\nenvironment_variables = {{\n{entries}}}\n")
    return str(venv / "bin" / "python")


def test_launch_script_settings_are_checked_against_the_vllm_environment(ws, tmp_path):
    folder = models(ws)
    # vLLM and vLLM-MetaX that know both names the published script sets: nothing flagged
    python = fake_vllm_python(tmp_path / "both", ["VLLM_USE_V2_MODEL_RUNNER", "CUDA_VISIBLE_DEVICES"], ["VLLM_METAX_USE_FP8_WO_A"])
    v4 = {e.name: e for e in scan(folder, None, environment=now_environment(python))}[V4_0731]
    assert [(e["name"], e["known"]) for e in v4.env] == [("VLLM_USE_V2_MODEL_RUNNER", True), ("VLLM_METAX_USE_FP8_WO_A", True)]
    assert not any("sets " in p for p in v4.problems)

    # a vLLM that no longer knows the runner switch, with no vLLM-MetaX: the vLLM name is flagged,
    # the VLLM_METAX_ one cannot be judged (not flagged), other programs' names never are
    python = fake_vllm_python(tmp_path / "old", ["VLLM_USE_V1"], None)
    by = {e.name: e for e in scan(folder, None, environment=now_environment(python))}
    v4 = by[V4_0731]
    assert [(e["name"], e["known"]) for e in v4.env] == [("VLLM_USE_V2_MODEL_RUNNER", False), ("VLLM_METAX_USE_FP8_WO_A", None)]
    assert ("run_serve2.sh: sets VLLM_USE_V2_MODEL_RUNNER=0, a name the vLLM environment now does not know (not in vllm's "
            "envs): it has no effect") in v4.problems
    assert all(e["known"] is None for e in by[V4_FP8].env + by[GLM].env)
    assert "VLLM_USE_V2_MODEL_RUNNER=0 (unknown to vLLM)" in rendered(folder, list(by.values()))


def test_examples_asks_the_vllm_environment_once_for_its_versions_and_its_names(ws, tmp_path):
    """`mxtrim examples` starts the vLLM interpreter once: the same record gives the versions
    compared for drift and the folders whose envs files name the variables vLLM knows."""
    python = fake_vllm_python(tmp_path / "old", ["VLLM_USE_V1"], None)
    log = tmp_path / "starts.log"
    counted = tmp_path / "python-counted"
    counted.write_text(f'#!/bin/sh\necho started >> "{log}"\nexec "{python}" "$@"\n')
    counted.chmod(0o755)
    r = run_cli("examples", str(models(ws)), "--json", "--python", str(counted))
    assert r.returncode == 0, r.stderr[-2000:]
    assert log.read_text().splitlines() == ["started"]
    v4 = next(e for e in json.loads(r.stdout)["examples"] if e["name"] == V4_0731)
    assert [(e["name"], e["known"]) for e in v4["env"]] == [("VLLM_USE_V2_MODEL_RUNNER", False), ("VLLM_METAX_USE_FP8_WO_A", None)]


def hand_made(folder: Path, name: str, files: dict[str, str]) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    for rel, text in files.items():
        (path / rel).write_text(text)
    return path


def test_routes_caches_and_written_paths_are_not_called_stale_but_a_missing_model_is(tmp_path):
    folder = tmp_path.joinpath(*MODELS)
    script = "\n".join([
        "export XDG_CACHE_HOME=/nonexistent/cache HF_HOME=/nonexistent/hf",
        "mkdir -p /nonexistent/logs/run1",
        "MODEL_DIR=/nonexistent/models/real-one",
        "curl http://127.0.0.1:8000/v1/chat/completions -d @- > /nonexistent/out/answer.json",
        "vllm serve ./temp/$NAME --download-dir /nonexistent/dl 2>&1 | tee /nonexistent/logs/serve.log",
        "vllm serve ./weights/missing --tokenizer /nonexistent/tok",
    ])
    hand_made(folder, "h", {"serve.sh": script, "tokenizer.json": "{}",
                            "README.md": "POST `/v1/completions` or `/v1/chat/completions`; see ./serve.sh and ./gone.md\n"})
    (e,) = scan(folder, None)
    assert e.problems == [
        f"README.md: names ./gone.md (line 1), which is there neither beside README.md nor from {tmp_path}",
        "serve.sh: names /nonexistent/models/real-one, which does not exist",
        "serve.sh: names /nonexistent/tok, which does not exist",
        f"serve.sh: names ./weights/missing (line 6), which is there neither beside serve.sh nor from {tmp_path}",
    ]
    assert e.tokenizer["usable"] is True


@pytest.mark.parametrize("files, usable", [
    ({"tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})}, False),
    ({"tokenizer_config.json": json.dumps({"tokenizer_class": "Qwen2Tokenizer"}), "special_tokens_map.json": "{}"}, False),
    ({"tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}), "tokenizer.json": "{}"}, True),
    ({"tokenizer_config.json": json.dumps({"tokenizer_class": "LlamaTokenizerFast"}), "tokenizer.model": "x"}, True),
    ({"tokenizer_config.json": json.dumps({"tokenizer_class": "Qwen2Tokenizer"}), "vocab.json": "{}", "merges.txt": ""}, True),
    ({"tokenizer_config.json": json.dumps({"auto_map": {"AutoTokenizer": ["tok.MyTokenizer", None]}})}, None),
])
def test_a_tokenizer_config_alone_is_not_a_tokenizer(tmp_path, files, usable):
    folder = tmp_path / "models"
    hand_made(folder, "h", files)
    (e,) = scan(folder, None)
    assert e.tokenizer["usable"] is usable
    shown = rendered(folder, [e])
    assert ("h: tokenizer not usable:" in shown) is (usable is False)


# --- the writer ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The demo model twice: as built (a tokenizer, and a launch script that finds its own
    folder, as the published FP8 example's does), and without tokenizer.json with two launch
    scripts of its own: one of the published shape (``./temp/NAME``) and one naming the source."""
    root = tmp_path_factory.mktemp("src")
    good = build_demo(root / "good")
    shutil.copy(PUBLISHED.joinpath(*MODELS, V4_FP8, "run_serve.sh"), good / "run_serve.sh")
    bad = build_demo(root / "bad")
    (bad / "tokenizer.json").unlink()
    (bad / "run_serve2.sh").write_text("VLLM_USE_V2_MODEL_RUNNER=0 \\\nvllm serve ./temp/bad --load-format dummy\n")
    (bad / "launch.sh").write_text(f"#!/bin/sh\nvllm serve {bad} --max-model-len 1024\n")
    return good, bad


def warnings_of(readme: str) -> list[str]:
    section = readme.partition("\n## Warnings\n")[2].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("- ")]


@pytest.mark.slow
def test_a_dummy_output_without_a_tokenizer_and_with_a_stale_source_script_is_warned_of(sources, tmp_path):
    good, bad = sources
    out = tmp_path.joinpath(*MODELS, "bad-dummy")
    r = run_cli("trim", str(bad), "--keep", "0,2", "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr
    said = warnings_of((out / "README.md").read_text())
    assert any(w.startswith("No usable tokenizer in this output: tokenizer_config.json names PreTrainedTokenizerFast")
               and BACKEND_ERROR in w for w in said)
    assert (f"run_serve2.sh is the source's own launch script, copied as is: it names ./temp/bad (line 2), which is not there "
            f"from this output or the workspace root {tmp_path}. Run as is, it does not serve this output; serve.sh does.") in said
    assert (f"launch.sh is the source's own launch script, copied as is: it names {bad} (line 2), the source itself. "
            "Run as is, it does not serve this output; serve.sh does.") in said
    # the write result carries them too, for whoever wrote the output
    from mxtrim_tui.core.write.writer import write_dummy

    result = write_dummy(plan_for(bad, ["0,2"]), tmp_path / "api-out")
    assert any(w.startswith("No usable tokenizer") for w in result.warnings)
    assert any(w.startswith("run_serve2.sh is the source's own launch script") for w in result.warnings)
    # and `mxtrim examples` says the copied script's path is stale
    (e,) = [e for e in scan(tmp_path.joinpath(*MODELS), None) if e.name == "bad-dummy"]
    assert any(p.startswith("run_serve2.sh: names ./temp/bad (line 2)") for p in e.problems)
    assert e.tokenizer["usable"] is False


def test_an_intact_source_and_a_self_locating_script_give_no_warning(sources, tmp_path):
    good, bad = sources
    out = tmp_path.joinpath(*MODELS, "good-dummy")
    r = run_cli("trim", str(good), "--keep", "0,2", "--mode", "dummy", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "run_serve.sh").is_file()
    said = warnings_of((out / "README.md").read_text())
    assert not any("tokenizer" in w or "launch script" in w for w in said), said
