"""The workspace of reduced models (``tools/batched_test/models/`` by default): what each one is,
whether its source is still there and unchanged, how it last validated and in which environment
against the environment now, and what in it has gone stale. Reads JSON, text and safetensors
sizes only, never weights.

An mxtrim output is read from what mxtrim left in it (``mxtrim-plan.json``, ``manifest.json``,
``validation.json``); a hand-made example (any model directory with a ``config.json``) from what
it has: its config, its README and launch scripts (``*.sh``), which are listed, never run.
The files an mxtrim output was written with are the ones its report (``README.md``, "Files")
lists; one of them gone (a tokenizer deleted by hand) is a problem, as is a hand-made example
with no tokenizer file at all.

What the texts say is read too, never run (``core.write.launch_text``, ``readme_facts``): paths
that are gone (absolute ones, and ``./x`` / ``$PWD/x`` found neither beside the file nor from
the workspace root; HTTP routes and directories made at run time are not paths to check), the
environment a launch script sets (``VLLM_*`` names the vLLM environment does not know flagged),
whether the tokenizer files make a tokenizer, and for a hand-made example the files its README
requires, the shards its index names, and the results its README records (history, shown as
not rechecked).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..read.files import read_limited
from ..read.source_pins import pin_differences
from ..write.launch_text import (
    TEXT_LIMIT, env_settings, logical_lines, shell_blocks, stale_paths, tokenizer_state,
    workspace_root,
)
from .env_names import KnownEnv, known_from_record
from .readme_facts import recorded_results, required_assets

SCHEMA = "mxtrim.examples/1"
DEFAULT_FOLDER = Path("tools") / "batched_test" / "models"
# the versions compared between a validation and now (as the offline probe names them): the
# packages, torch's build tag (cpu, cu128, metax...), the MACA and MetaX driver versions
DRIFT_KEYS = ("python", "vllm", "vllm_metax", "transformers", "torch", "torch_build", "maca", "driver")
PACKAGE_KEYS = ("vllm", "vllm_metax", "transformers", "torch")
# read only where the environment recorded them (a run validated before they were kept has none)
_RECORDED_KEYS = ("maca", "driver")  # sections of the record: {"version", ...}
NOTE_LIMIT = 80  # characters of a README's own words quoted in a problem
INDEX_LIMIT = 64 << 20  # bytes of a hand-made example's weight index read
# a row of the report's "Files" table: | `name` | kind | bytes | from |
_FILES_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]*?) \|", re.M)
# a model directory needs at least one of these beside its config.json to be tokenized
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass
class Example:
    name: str
    path: str
    made_by: str  # "mxtrim" | "hand"
    mode: str = "unknown"  # dummy | weights | unknown
    layers: int | None = None  # text layers kept (mxtrim) or declared (hand-made)
    source: dict = field(default_factory=dict)  # {"path", "state", "detail"}
    validation: dict | None = None  # the last run: {"ok", "started", "versions"}
    drift: dict = field(default_factory=dict)  # {package: {"then", "now"}} where they differ
    launch_scripts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # whether its tokenizer files make a tokenizer: {"usable": True | False | None, "files", "detail"}
    tokenizer: dict = field(default_factory=dict)
    # what its launch scripts (a hand-made README's shell blocks when it has none) set:
    # [{"name", "value", "file", "line", "known": True | False | None (not vLLM's, or not checked)}]
    env: list[dict] = field(default_factory=list)
    # hand-made: the files its README lists as needed [{"file", "required", "note", "present"}]
    readme_assets: list[dict] = field(default_factory=list)
    # hand-made: its weight index {"file", "shards", "absent", "absent_files"} (None: none)
    index: dict | None = None
    # hand-made: the results its README records, as history (readme_facts.recorded_results)
    history: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


def workspace_folder(given: Path | None, cwd: Path) -> Path:
    """The folder to read: the one given, else the workspace's tools/batched_test/models/."""
    return Path(given) if given is not None else cwd / DEFAULT_FOLDER


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _text(path: Path) -> str | None:
    """A text file (None: it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _loads(text: str | None):
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def versions_of(environment: dict) -> dict:
    """{python, vllm, ..., torch_build, maca, driver: version} of a recorded or probed
    environment. torch's build tag is its version's local part when the record has no tag of
    its own; the MACA and driver versions are left out when the record has no such section."""
    packages = environment.get("packages") or {}
    out = {"python": environment.get("python")}
    out.update({name: (packages.get(name) or {}).get("version") for name in PACKAGE_KEYS})
    out["torch_build"] = environment["torch_build"] if "torch_build" in environment else ((out["torch"] or "").partition("+")[2] or None)
    for key in _RECORDED_KEYS:
        if isinstance(environment.get(key), dict):
            out[key] = environment[key].get("version")
    return out


def read_example(path: Path, now: dict | None, known_env: KnownEnv | None = None, root: Path | None = None) -> Example:
    """One model directory of the workspace; ``now``: the versions of the environment now
    ({python, vllm, ...}), None when unknown; ``known_env``: the variable names its vLLM knows
    (None: not checked); ``root``: the workspace root a launch script's ``./x`` may be run
    from (None: the folder above the model's)."""
    plan = _json(path / "mxtrim-plan.json")
    ex = Example(path.name, str(path), "mxtrim" if isinstance(plan, dict) else "hand")
    ex.launch_scripts = sorted(p.name for p in path.glob("*.sh") if p.is_file())
    texts = {name: _text(path / name) for name in ["README.md", *ex.launch_scripts, "config.json"]}
    if isinstance(plan, dict):
        _read_mxtrim(path, plan, ex, texts["README.md"])
    else:
        config = _loads(texts["config.json"]) or {}
        depth = config.get("num_hidden_layers") if isinstance(config, dict) else None
        ex.layers = depth if isinstance(depth, int) else None
        ex.source = {"path": None, "state": "not recorded", "detail": "a hand-made example records no source"}
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            ex.problems.append(f"no tokenizer files: none of {', '.join(TOKENIZER_FILES)} beside config.json")
    _read_validation(path, ex, now)
    ex.problems += _stale_paths(path, texts, root if root is not None else path.parent)
    ex.tokenizer = _tokenizer(path)
    ex.env = _environment(ex, texts, known_env)
    ex.problems += [_unknown_env_line(e, known_env) for e in ex.env if e["known"] is False]
    if ex.made_by == "hand":
        _read_hand_made(path, ex, texts["README.md"])
    return ex


def _tokenizer(path: Path) -> dict:
    try:
        names = [p.name for p in path.iterdir() if p.is_file()]
    except OSError:
        names = []
    return tokenizer_state(names, path)


def _environment(ex: Example, texts: dict[str, str | None], known_env: KnownEnv | None) -> list[dict]:
    """What the launch scripts set (a hand-made example without one: its README's shell
    blocks), each once per file, judged against ``known_env``."""
    sources = [(name, logical_lines(texts[name][:TEXT_LIMIT])) for name in ex.launch_scripts if texts.get(name)]
    if not sources and ex.made_by == "hand" and texts.get("README.md"):
        sources = [("README.md", shell_blocks(texts["README.md"][:TEXT_LIMIT]))]
    out, seen = [], set()
    for name, lines in sources:
        for e in env_settings(lines):
            key = (name, e["name"], e["value"])
            if key not in seen:
                seen.add(key)
                out.append({**e, "file": name, "known": known_env.judge(e["name"]) if known_env is not None else None})
    return out


def _unknown_env_line(e: dict, known_env: KnownEnv) -> str:
    return (f"{e['file']}: sets {e['name']}={e['value']}, a name the vLLM environment now does not know (not in "
            f"{known_env.where()}): it has no effect")


def _read_hand_made(path: Path, ex: Example, readme: str | None) -> None:
    """A hand-made example's README (the files it requires, the results it records) and its
    weight index (the shards it names that are not there)."""
    if readme is not None:
        readme = readme[:TEXT_LIMIT]
        for asset in required_assets(readme):
            asset["present"] = (path / asset["file"]).exists()
            ex.readme_assets.append(asset)
            if asset["required"] and not asset["present"]:
                note = asset["note"] if len(asset["note"]) <= NOTE_LIMIT else asset["note"][:NOTE_LIMIT - 1] + "…"
                ex.problems.append(f"missing asset: {asset['file']} (README.md lists it as needed: {note})")
        ex.history = recorded_results(readme)
    ex.index = _index(path)
    if ex.index and ex.index["absent"]:
        i = ex.index
        shown = ", ".join(i["absent_files"][:3]) + (f", … {i['absent'] - 3} more" if i["absent"] > 3 else "")
        which = "none of them here" if i["absent"] == i["shards"] else f"{i['absent']} of them not here"
        ex.problems.append(f"{i['file']}: names {i['shards']} shard file(s), {which} ({shown}): only --load-format dummy "
                           "serves this folder; a load of real weights fails")


def _index(path: Path) -> dict | None:
    """The first weight index (``*.safetensors.index.json``) of a folder against its shards."""
    for index in sorted(path.glob("*.safetensors.index.json")):
        try:
            doc = json.loads(read_limited(index, INDEX_LIMIT))
        except (OSError, ValueError):  # unreadable, too large, not a regular file, not JSON
            continue
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict):
            continue
        shards = sorted({v for v in weight_map.values() if isinstance(v, str)})
        absent = [s for s in shards if not (path / s).is_file()]
        return {"file": index.name, "shards": len(shards), "absent": len(absent), "absent_files": absent[:10]}
    return None


def _read_mxtrim(path: Path, plan: dict, ex: Example, readme: str | None) -> None:
    ex.mode = plan.get("mode") if plan.get("mode") in ("dummy", "weights") else "unknown"
    kept = (plan.get("kept") or {}).get("text")
    ex.layers = len(kept) if isinstance(kept, list) else None
    source = plan.get("source") if isinstance(plan.get("source"), str) else None
    manifest = _json(path / "manifest.json") if ex.mode == "weights" else None
    headers = (manifest or {}).get("source_headers") or {}
    pins = {"shards": {rel: [d.get("sha256"), d.get("header_bytes"), d.get("file_bytes")] for rel, d in headers.items()
                       if isinstance(d, dict)}}
    if source is None:
        ex.source = {"path": None, "state": "not recorded", "detail": "mxtrim-plan.json names no source"}
    elif not Path(source).is_dir():
        ex.source = {"path": source, "state": "missing", "detail": "not there any more (moved or deleted)"}
    elif pins["shards"]:
        differ = pin_differences(Path(source), pins)
        ex.source = ({"path": source, "state": "changed", "detail": "; ".join(differ[:3])} if differ else
                     {"path": source, "state": "unchanged", "detail": f"{len(pins['shards'])} shard header(s) as pinned"})
    else:
        ex.source = {"path": source, "state": "present", "detail": "its headers were not pinned (dummy output)"}
    if manifest is not None:
        ex.problems += _shard_problems(path, manifest)
    ex.problems += _asset_problems(path, readme)


def _listed_files(readme: str | None) -> list[tuple[str, str]]:
    """(file, kind) of every file the output's report (README.md, its "Files" table) lists as
    written."""
    if readme is None:
        return []
    section = readme[:TEXT_LIMIT].partition("\n## Files\n")[2].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2).strip()) for m in _FILES_ROW.finditer(section)]


def _asset_problems(path: Path, readme: str | None) -> list[str]:
    """The non-shard files the report lists (config, tokenizer, templates, scripts, manifest)
    that are gone from the output; weight shards are checked against the manifest instead."""
    found = []
    for name, kind in _listed_files(readme):
        if kind == "weights" or Path(name).is_absolute() or ".." in Path(name).parts:
            continue
        if not (path / name).exists():
            found.append(f"missing asset: {name} (listed in README.md)")
    return found


def _shard_problems(path: Path, manifest: dict) -> list[str]:
    """A weights output's shards against its manifest: each there, each of the recorded size."""
    found = []
    for shard in manifest.get("shards") or []:
        if not isinstance(shard, dict) or not isinstance(shard.get("file"), str):
            continue
        file = path / shard["file"]
        if not file.is_file():
            found.append(f"{shard['file']}: missing (manifest.json lists it)")
        elif isinstance(shard.get("bytes"), int) and file.stat().st_size != shard["bytes"]:
            found.append(f"{shard['file']}: {file.stat().st_size} bytes, manifest.json says {shard['bytes']}")
    return found


def last_run(out: Path, keep=None) -> dict | None:
    """The last run recorded in ``out``'s validation.json (None: none, or unreadable); with
    ``keep``, the last run for which ``keep(run)`` is true (graph_mode.earlier_run)."""
    history = _json(out / "validation.json")
    runs = history.get("runs") if isinstance(history, dict) else None
    if keep is not None and isinstance(runs, list):
        return next((run for run in reversed(runs) if isinstance(run, dict) and keep(run)), None)
    return runs[-1] if isinstance(runs, list) and runs and isinstance(runs[-1], dict) else None


def _read_validation(path: Path, ex: Example, now: dict | None) -> None:
    last = last_run(path)
    if last is None:
        return
    then = versions_of(last.get("environment") or {})
    ex.validation = {"ok": last.get("ok"), "started": last.get("started"), "versions": then}
    if now is not None:
        # a key the earlier run did not record (MACA, driver) is not compared: unknown is no drift
        ex.drift = {k: {"then": then.get(k), "now": now.get(k)} for k in DRIFT_KEYS
                    if (k in then or k not in _RECORDED_KEYS) and then.get(k) != now.get(k)}


def _stale_paths(path: Path, texts: dict[str, str | None], root: Path) -> list[str]:
    """Paths named in the README, the launch scripts and config.json (``texts``: file name ->
    its text) that are not there: absolute ones that do not exist; in the README and scripts,
    ``./x`` / ``$PWD/x`` found neither beside the file nor from ``root``, where it may be run.
    HTTP routes and directories made when run (a cache variable's value) are not checked."""
    found = []
    for name, text in texts.items():
        if text is None:
            continue
        for p in stale_paths(name, text[:TEXT_LIMIT], [path, root], relative=name != "config.json"):
            if p["kind"] == "absolute":
                found.append(f"{name}: names {p['path']}, which does not exist")
                continue
            line = f"{name}: names {p['path']} (line {p['line']}), which is there neither beside {name} nor from {root}"
            if path.name in p["path"].split("/"):
                line += f"; this model is now {_shown_from(path, root)}"
            found.append(line)
    return found


def _shown_from(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` where it is inside it (as a launch script run there would
    name it), else as it is."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def model_dirs(folder: Path) -> list[Path]:
    """Every model directory (one holding config.json) directly in ``folder``, by name."""
    if not folder.is_dir():
        return []
    return [p for p in sorted(folder.iterdir()) if p.is_dir() and (p / "config.json").is_file()]


def folder_stamp(folder: Path) -> tuple:
    """What changes when an output is written into ``folder`` or one of its models validated
    (a file renamed into it): the folder's and each model directory's modification times."""
    try:
        return (folder.stat().st_mtime_ns, tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_dir()))
    except OSError:
        return ()


def is_mxtrim_output(path: Path) -> bool:
    return isinstance(_json(path / "mxtrim-plan.json"), dict)


def scan(folder: Path, now: dict | None, environment: dict | None = None) -> list[Example]:
    """Every model directory of ``folder``; ``environment``: the record of the vLLM environment
    (:func:`now_environment`) whose variable names a launch script's settings are checked
    against (None: not checked)."""
    known = known_from_record(environment)
    root = workspace_root(folder) or Path(folder)
    return [read_example(p, now, known, root) for p in model_dirs(folder)]


def example_details(ex: Example, script_lines: int = 3) -> dict:
    """What a closer look at one example shows beyond its row: for an mxtrim output the layers
    kept per submodel (original indices), whether MTP was kept and the model it was cut from
    (``mxtrim-plan.json``); for a hand-made example every launch script's first lines (read,
    never run; an output's scripts are its own, listed by name). Read when one is opened."""
    path = Path(ex.path)
    plan = _json(path / "mxtrim-plan.json") if ex.made_by == "mxtrim" else None
    plan = plan if isinstance(plan, dict) else {}
    kept = plan.get("kept") if isinstance(plan.get("kept"), dict) else {}
    model = plan.get("model") if isinstance(plan.get("model"), dict) else {}
    scripts = {}
    for name in ex.launch_scripts:
        if ex.made_by != "hand":
            scripts[name] = []
            continue
        try:
            with open(path / name, encoding="utf-8", errors="replace") as fh:
                scripts[name] = [line.rstrip("\r\n")[:300] for _, line in zip(range(script_lines), fh)]
        except OSError as exc:
            scripts[name] = [f"(cannot be read: {exc.strerror or exc})"]
    return {"kept": {k: v for k, v in kept.items() if isinstance(v, list)}, "mtp_kept": plan.get("mtp_kept"),
            "model": model.get("name") if isinstance(model.get("name"), str) else None, "scripts": scripts}


def now_environment(python: str, timeout: float = 60.0) -> dict | None:
    """``python``'s environment record, asked of it with the offline probe's --versions (its
    packages' versions and folders, torch's build tag, MACA, driver; nothing of them imported);
    None when it does not answer."""
    import subprocess

    from ..probe import OFFLINE_PROBE

    try:
        proc = subprocess.run([python, "-I", str(OFFLINE_PROBE), "--versions"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    return record if isinstance(record, dict) else None


def now_versions(python: str, timeout: float = 60.0) -> dict | None:
    """The versions of ``python``'s environment (python, vllm, vllm_metax, transformers,
    torch, torch's build tag, MACA, driver); None when it does not answer."""
    record = now_environment(python, timeout)
    return versions_of(record) if record is not None else None
