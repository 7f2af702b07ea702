"""vLLM plugins in the offline probe: `vllm serve` loads the platform and general plugins (entry
points) before it builds a model, so the "architecture registered" check does too, and names the
class vLLM will build, its file and where it comes from. A small plugin distribution
(tests/fixtures/vllm_tiny_plugin, declared as vLLM-MetaX declares its own) is installed into a
test environment layered over .venv-vllm (which stays untouched); and a vLLM-MetaX source tree in
the working directory that is not the one imported is said."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from test_validate import VLLM_PYTHON, needs_vllm

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_tiny_plugin"
OUT_OF_TREE, REPLACED = "TinyOutOfTreeForCausalLM", "LlamaForCausalLM"


def _paths(python: str) -> tuple[str, str]:
    """(base interpreter, purelib site-packages) of a virtual environment's ``python``."""
    done = subprocess.run([python, "-c", "import sys, sysconfig; print(sys._base_executable); print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60)
    base, purelib = done.stdout.split("\n")[:2]
    return base, purelib


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    """A virtual environment of .venv-vllm's base interpreter whose site-packages holds the
    plugin distribution and a .pth that adds .venv-vllm's site-packages after it; and an
    output directory (config + tokenizer) naming the out-of-tree architecture, then one vLLM
    registers itself (which the plugin replaces)."""
    from mxtrim_tui.demo.tokenizer import write_tokenizer

    root = tmp_path_factory.mktemp("plugins")
    base, vllm_site = _paths(VLLM_PYTHON)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = str(root / "venv" / "bin" / "python")
    site = Path(_paths(python)[1])
    (site / "_mxtrim_layer.pth").write_text(f"import site; site.addsitedir({vllm_site!r})\n")
    src = root / "src"
    shutil.copytree(FIXTURE, src)  # the build writes beside the sources
    done = subprocess.run([VLLM_PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                           "--no-cache-dir", "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = root / "out"
    out.mkdir()
    write_tokenizer(out, generation_config=False)
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": [OUT_OF_TREE, REPLACED], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300}))
    return python, out, site


def registered_row(python: str, out: Path):
    from mxtrim_tui.core.validate.run import offline_checks

    env, rows = offline_checks(out, python, trust_remote_code=False)
    row = next(r for r in rows if r.check == "architecture registered in this vLLM")
    return env, row


@needs_vllm
def test_an_architecture_registered_by_a_plugin_is_found_with_its_origin(layered, monkeypatch, tmp_path):
    """Read for two outputs in one batch probe (validate of several outputs): the first loads
    the plugins, the second reads the registry they were loaded into and gets the same record."""
    from mxtrim_tui.core.validate.offline import OfflineBatch
    from test_offline_batch import probes, shim

    python, out, site = layered
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    second = shutil.copytree(out, tmp_path / "second")
    noted, log = shim(tmp_path, python)
    batch = OfflineBatch(noted, [out, second])
    env, rows = batch(out, noted, False)
    row = next(r for r in rows if r.check == "architecture registered in this vLLM")
    env2, rows2 = batch(second, noted, False)
    assert probes(log) == [[str(out), str(second)]]  # both answered by the one probe
    # the second output's rows and plugin outcomes are those a probe of it alone gives
    alone_env, alone_row = registered_row(python, second)
    assert next(r for r in rows2 if r.check == row.check).to_json() == alone_row.to_json() == row.to_json()
    assert env2["vllm_plugins"] == alone_env["vllm_plugins"] and env2["vllm_platform"] == alone_env["vllm_platform"]
    assert row.status == "passed", row.detail
    by = {r["architecture"]: r for r in row.data["architectures"]}
    tiny = by[OUT_OF_TREE]
    assert (tiny["class"], tiny["module"], tiny["package"]) == (OUT_OF_TREE, "tinyplug.model", "tinyplug")
    assert tiny["file"] == str(site / "tinyplug" / "model.py")
    assert (tiny["distribution"], tiny["origin"], tiny["plugin"]) == ("mxtrim-tinyplug", "mxtrim-tinyplug", "tiny")
    # a class vLLM registers itself, replaced by a general plugin (as vLLM-MetaX's metax_enhanced_model does)
    llama = by[REPLACED]
    assert (llama["class"], llama["origin"], llama["plugin"]) == ("TinyLlamaForCausalLM", "mxtrim-tinyplug", "tiny_enhanced")
    assert f"{OUT_OF_TREE} → {OUT_OF_TREE} (mxtrim-tinyplug: tinyplug/model.py, plugin tiny)" in row.detail
    assert f"vLLM builds {OUT_OF_TREE}" in row.detail and "plugins loaded: tiny, tiny_enhanced" in row.detail
    assert row.data["platform"] == "vllm.platforms.cpu.CpuPlatform"
    plugins = {(p["group"], p["name"]): p for p in env["vllm_plugins"]}
    general = plugins[("vllm.general_plugins", "tiny")]
    assert (general["value"], general["distribution"], general["distribution_version"]) == ("tinyplug:register", "mxtrim-tinyplug", "0.1")
    assert (general["status"], general["registered"], general["replaced"]) == ("loaded", [OUT_OF_TREE], [])
    assert plugins[("vllm.general_plugins", "tiny_enhanced")]["replaced"] == [REPLACED]
    assert plugins[("vllm.platform_plugins", "tinyplat")]["status"] == "not activated"  # returns None: no device of its own
    assert env["vllm_platform"] == "vllm.platforms.cpu.CpuPlatform"
    # the README's record names the platform and the plugins from outside vLLM
    from mxtrim_tui.core.validate.record import environment_lines

    assert environment_lines(env)[-1] == ("vLLM platform `vllm.platforms.cpu.CpuPlatform`; plugins outside vLLM loaded: "
                                          "tiny (mxtrim-tinyplug), tiny_enhanced (mxtrim-tinyplug).")


@needs_vllm
def test_the_same_registry_read_without_plugins_misses_it(layered, monkeypatch):
    """VLLM_PLUGINS="" (vLLM loads no plugin): the out-of-tree architecture is missing, the
    replaced one is vLLM's own again, and the row says which plugins were left out."""
    python, out, _ = layered
    monkeypatch.setenv("VLLM_PLUGINS", "")
    env, row = registered_row(python, out)
    assert row.status == "failed"
    assert row.detail.startswith(f"not registered in this vLLM: {OUT_OF_TREE} (VLLM_PLUGINS='' leaves out plugin(s) tinyplat, tiny, ")
    (llama,) = row.data["architectures"]
    assert (llama["architecture"], llama["class"], llama["origin"], llama["plugin"]) == (REPLACED, REPLACED, "vllm", None)
    assert llama["file"].endswith("/vllm/model_executor/models/llama.py")
    assert {p["status"] for p in env["vllm_plugins"]} == {"left out by VLLM_PLUGINS"}


# --- other vLLMs: a plugin that fails, no per-group loader, registry entries of other shapes ---


@dataclass(frozen=True)
class _Lazy:
    module_name: str
    class_name: str


def _fake_vllm(monkeypatch, plugins: types.ModuleType, platform_module: str = "vllm_metax.platform"):
    """``vllm``, ``vllm.platforms`` and ``vllm.plugins`` stand-ins in sys.modules; returns the
    registry (its ``models`` as vLLM keeps them)."""
    registry = types.SimpleNamespace(models={"LlamaForCausalLM": _Lazy("vllm.model_executor.models.llama", "LlamaForCausalLM")})
    platform_cls = type("MacaPlatform", (), {"__module__": platform_module})
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform_cls()
    vllm = types.ModuleType("vllm")
    vllm.platforms, vllm.plugins, vllm.ModelRegistry = platforms, plugins, registry
    for name, module in (("vllm", vllm), ("vllm.platforms", platforms), ("vllm.plugins", plugins)):
        monkeypatch.setitem(sys.modules, name, module)
    return registry


def _entries():
    return [{"group": "vllm.platform_plugins", "name": "metax", "value": "vllm_metax:register", "allowed": True},
            {"group": "vllm.general_plugins", "name": "metax_enhanced_model", "value": "vllm_metax:register_model", "allowed": True},
            {"group": "vllm.general_plugins", "name": "broken", "value": "broken:register", "allowed": True},
            {"group": "vllm.general_plugins", "name": "off", "value": "off:register", "allowed": False}]


def test_a_plugin_that_fails_is_named_and_the_others_still_load(monkeypatch):
    from mxtrim_tui.core.probe import offline_probe as probe

    def enhanced():
        registry.models["LlamaForCausalLM"] = _Lazy("vllm_metax.models.llama", "LlamaForCausalLM")

    def broken():
        raise RuntimeError("no MACA device\nsecond line")

    plugins = types.ModuleType("vllm.plugins")
    plugins.plugins_loaded = False
    plugins.load_plugins_by_group = lambda group: {"metax_enhanced_model": enhanced, "broken": broken}
    registry = _fake_vllm(monkeypatch, plugins)
    entries = _entries()
    assert probe.load_vllm_plugins(entries, registry) == "vllm_metax.platform.MacaPlatform"
    platform, enhanced_e, broken_e, off = entries
    assert platform["status"] == "activated" and off["status"] == "left out by VLLM_PLUGINS"
    assert (enhanced_e["status"], enhanced_e["replaced"]) == ("loaded", ["LlamaForCausalLM"])
    assert (broken_e["status"], broken_e["error"]) == ("failed", "RuntimeError: no MACA device")
    assert plugins.plugins_loaded is True  # as vLLM's own load_general_plugins leaves it
    rec = probe.architecture_record(registry, "LlamaForCausalLM", entries)
    assert (rec["class"], rec["module"], rec["package"], rec["origin"], rec["plugin"]) == (
        "LlamaForCausalLM", "vllm_metax.models.llama", "vllm_metax", "vllm_metax", "metax_enhanced_model")
    assert probe.describe_architecture(rec) == ("LlamaForCausalLM → LlamaForCausalLM "
                                                "(vllm_metax: vllm_metax/models/llama.py, plugin metax_enhanced_model)")


def test_a_vllm_without_the_group_loader_and_registry_entries_of_other_shapes(monkeypatch):
    from mxtrim_tui.core.probe import offline_probe as probe

    class Model:  # a class registered directly (vLLM keeps it, not a "module:Class" string)
        __module__ = "someplug.models"

    plugins = types.ModuleType("vllm.plugins")

    def load_general_plugins():
        registry.models["SomeForCausalLM"] = types.SimpleNamespace(model_cls=Model)
        registry.models["Opaque"] = object()

    plugins.load_general_plugins = load_general_plugins
    registry = _fake_vllm(monkeypatch, plugins, platform_module="vllm.platforms.cuda")
    entries = _entries()
    probe.load_vllm_plugins(entries, registry)
    assert entries[0]["status"] == "not activated"
    assert entries[1]["status"] == entries[2]["status"] == "loaded (by vLLM, together)"
    assert entries[1]["changed"] == ["Opaque", "SomeForCausalLM"]
    rec = probe.architecture_record(registry, "SomeForCausalLM", entries)
    assert (rec["class"], rec["module"], rec["package"], rec["file"]) == ("Model", "someplug.models", "someplug", None)
    opaque = probe.architecture_record(registry, "Opaque", entries)
    assert opaque["class"] is None and probe.describe_architecture(opaque) == "Opaque (its class is not known to this reading)"
    assert probe.architecture_record(types.SimpleNamespace(), "X", entries)["module"] is None  # no ``models`` at all


# --- a vLLM-MetaX checkout in the working directory ------------------------------------


def _metax_tree(root: Path, marker: str = "pyproject.toml") -> Path:
    (root / "vllm_metax").mkdir(parents=True)
    (root / "vllm_metax" / "__init__.py").write_text("")
    (root / marker).write_text("")
    (root / "tools").mkdir()
    return root


def _env(vllm_metax: str | None = None, vllm: str | None = None, warning: str | None = None) -> dict:
    env = {"packages": {"vllm_metax": {"origin": vllm_metax}, "vllm": {"origin": vllm}}}
    if warning:
        env["warning"] = warning
    return env


def test_a_vllm_metax_checkout_that_is_not_the_one_imported_is_said(tmp_path):
    from mxtrim_tui.core.validate.run import workspace_warning

    tree = _metax_tree(tmp_path / "vLLM-metax", marker="setup.py")
    elsewhere = "/opt/conda/lib/python3.10/site-packages/vllm_metax/__init__.py"
    said = workspace_warning(_env(vllm_metax=elsewhere), tree / "tools")
    assert said == (f"workspace source differs from runtime source: a vLLM-MetaX source tree is at {tree}, "
                    f"but the interpreter imports vllm_metax from {elsewhere}")
    assert "imports vllm_metax from nowhere" in workspace_warning(_env(), tree)
    # an editable install of this checkout: the one imported
    assert workspace_warning(_env(vllm_metax=str(tree / "vllm_metax" / "__init__.py")), tree / "tools") is None
    # a vllm_metax folder without a project file is not a checkout
    bare = tmp_path / "bare"
    (bare / "vllm_metax").mkdir(parents=True)
    (bare / "vllm_metax" / "__init__.py").write_text("")
    assert workspace_warning(_env(vllm_metax=elsewhere), bare) is None


def test_the_vllm_tree_message_and_the_probe_warning_are_kept(tmp_path):
    from mxtrim_tui.core.validate.run import workspace_warning

    vllm_tree = tmp_path / "vllm-src"
    (vllm_tree / "vllm").mkdir(parents=True)
    (vllm_tree / "vllm" / "__init__.py").write_text("")
    (vllm_tree / "pyproject.toml").write_text("")
    imported = "/venv/lib/python3.11/site-packages/vllm/__init__.py"
    assert workspace_warning(_env(vllm=imported), vllm_tree) == (
        f"a vLLM source tree is at {vllm_tree}, but the interpreter imports vllm from {imported}")
    # both trees, and the probe's own warning first
    both = _metax_tree(vllm_tree / "vLLM-metax")
    said = workspace_warning(_env(vllm=imported, warning="devices differ"), both)
    parts = said.split("; ")
    assert parts[0] == "devices differ" and parts[1].startswith("a vLLM source tree is at")
    assert parts[2].startswith("workspace source differs from runtime source: a vLLM-MetaX source tree")
    assert workspace_warning(_env(warning="devices differ"), tmp_path) == "devices differ"
    assert workspace_warning(_env(), tmp_path) is None
