"""The batched_test harness entry of an output: the list item of a ``tools/batched_test``
model YAML that serves it (``cd tools/batched_test && python launch.py --model-config FILE``).

Everything comes from the output's ``mxtrim-plan.json`` (mode, MTP, kept stacks and layer
kinds, serve settings), in the form the harness reads:

- ``model_path`` as the harness's ``vllm serve`` reads it: the harness passes it unchanged to
  ``vllm serve``, which runs in the folder ``launch.py`` is started in, ``tools/batched_test``
  (vLLM-MetaX's tools/batched_test/README.md: relative paths are based on that folder;
  model_worker.py, ``prepare_serve_cmd``). So ``./models/<out>`` from that folder when the
  output is inside it (``./`` first: vLLM reads a bare name it cannot find as a Hub
  repository), else the output's absolute path. The folder is the ``tools/batched_test`` the
  YAML is in, else the one the output is in; the entry's comment and the command say which;
- ``serve_config``: ``tp``/``pp``/``dp``, ``gpu_memory_utilization``, ``max_model_len``, and
  ``extra_args`` as a mapping, ``null`` for a switch (``true`` would add a ``True`` argument):
  ``--load-format dummy`` (dummy outputs), ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--enable-expert-parallel`` / ``--kv-cache-dtype`` / ``--trust-remote-code`` where the
  report's serve command has them, ``--speculative-config`` when an MTP layer is kept,
  ``--enforce-eager``;
- ``infer_type``: ``single-image`` when a vision tower is kept, else ``text-only``;
- ``tags``: ``dummy-smoke`` / ``weights-smoke`` and ``moe`` / ``dense``;
- ``extra_env``: offline Hub and transformers (as the report's command).

Entries are appended: the file's bytes stay as they were and the new entries follow (a temp
file of the old bytes and the new ones replaces it; a new file is linked into place, never
over one that appeared meanwhile). A name already in the file is refused, the file untouched.
The YAML is written here (no YAML dependency); the existing file is read with PyYAML when the
environment has it (vLLM's does), else line by line as a top-level block list.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..new_file import write_beside, write_new_file
from ..version import mxtrim_version
from .report import MTP_SPECULATIVE
from .writer import DEFAULT_MODELS_DIR

PLAN_NAME = "mxtrim-plan.json"
MAX_CONFIG_BYTES = 16 << 20  # a model list is kilobytes; anything this large is not one
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
MOE_KINDS = ("moe", "hash-moe")
HARNESS_FOLDER = DEFAULT_MODELS_DIR.parent  # tools/batched_test: where launch.py is started


@dataclass(frozen=True)
class ModelPath:
    """An entry's ``model_path`` and the harness folder it assumes: ``base``, the folder it is
    read from (None: an absolute path), ``harness``, the folder launch.py is started in (None:
    neither the YAML nor the output is in one)."""

    path: str
    base: Path | None
    harness: Path | None

    @property
    def said(self) -> str:
        if self.base is not None:
            return f"model_path is read from {self.base}, the folder launch.py is started in"
        if self.harness is not None:
            return f"model_path is absolute: the output is outside {self.harness}, the folder launch.py is started in"
        return f"model_path is absolute: neither the model YAML nor the output is in a {HARNESS_FOLDER.as_posix()} folder"


@dataclass(frozen=True)
class Entry:
    """One harness entry: its name and its fields (in the YAML's order)."""

    name: str
    fields: dict
    comment: str = ""
    model_path: ModelPath | None = None

    def yaml(self) -> str:
        """The entry as a YAML list item (with its comment lines), ending in a newline."""
        notes = [self.comment] if self.comment else []
        if self.model_path is not None:
            notes.append(_one_line(self.model_path.said))
        return "".join(f"# {n}\n" for n in notes) + "\n".join(_block_item(self.fields, 0)) + "\n"


@dataclass
class Appended:
    """What an append did: the file, the entries added, the names left out as already there."""

    config: Path
    entries: list[Entry] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    created: bool = False

    @property
    def text(self) -> str:
        return "\n".join(e.yaml() for e in self.entries)

    @property
    def model_paths_said(self) -> list[str]:
        """Which folder the appended entries' model_path assume, once each."""
        return list(dict.fromkeys(e.model_path.said for e in self.entries if e.model_path is not None))

    def to_json(self) -> dict:
        return {"config": str(self.config), "appended": [e.name for e in self.entries], "already_present": self.present,
                "created": self.created, "text": self.text,
                "model_paths": {e.name: {"model_path": e.model_path.path,
                                         "relative_to": str(e.model_path.base) if e.model_path.base is not None else None,
                                         "harness_folder": str(e.model_path.harness) if e.model_path.harness is not None else None}
                                for e in self.entries if e.model_path is not None},
                "model_paths_said": self.model_paths_said}


# --- the entry, from mxtrim-plan.json ------------------------------------------------------

def harness_folder(path: Path) -> Path | None:
    """The ``tools/batched_test`` folder ``path`` is in (or is), None when it is in none."""
    here = Path(os.path.abspath(path))
    depth = len(HARNESS_FOLDER.parts)
    for folder in (here, *here.parents):
        if folder.parts[-depth:] == HARNESS_FOLDER.parts:
            return folder
    return None


def model_path_for(output: Path, config: Path) -> ModelPath:
    """``output`` as the harness's ``vllm serve`` reads it: from the folder launch.py is started
    in (the YAML's ``tools/batched_test``, else the output's) as ``./...`` when the output is
    inside it, else its absolute path."""
    target = Path(os.path.abspath(output))
    harness = harness_folder(config) or harness_folder(target)
    if harness is None or not target.is_relative_to(harness) or target == harness:
        return ModelPath(str(target), None, harness)
    return ModelPath("./" + target.relative_to(harness).as_posix(), harness, harness)


def _plan_doc(output: Path) -> tuple[Path, dict]:
    path = Path(output) / PLAN_NAME
    if not Path(output).is_dir():
        raise InputError(output, "no such output directory")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(output, f"not an mxtrim output (no {PLAN_NAME})") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(path, f"not readable ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(path, "not a plan document (a JSON object)")
    return path, doc


def _count(path: Path, serve: dict, key: str, default=None) -> int:
    value = serve.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(path, f"serve.{key} must be a positive integer (found {value!r})")
    return value


def _serve_fields(path: Path, doc: dict) -> dict:
    serve = doc.get("serve")
    if not isinstance(serve, dict):
        raise InputError(path, "has no serve settings (serve); write the output again with this mxtrim")
    out = {key: _count(path, serve, key, 1 if key in ("pp", "dp") else None) for key in ("tp", "pp", "dp", "max_model_len", "max_num_seqs")}
    batched = serve.get("max_num_batched_tokens")
    out["max_num_batched_tokens"] = out["max_model_len"] if batched is None else _count(path, serve, "max_num_batched_tokens")
    util = serve.get("gpu_memory_utilization")
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise InputError(path, f"serve.gpu_memory_utilization must be a number in (0, 1] (found {util!r})")
    out["gpu_memory_utilization"] = float(util)
    out["expert_parallel"] = serve.get("expert_parallel") is True
    kv = serve.get("kv_cache_dtype", "auto")
    if not isinstance(kv, str) or not kv:
        raise InputError(path, f"serve.kv_cache_dtype must be a string (found {kv!r})")
    out["kv_cache_dtype"] = kv
    command = serve.get("command")
    out["command_words"] = set(command.split()) if isinstance(command, str) else set()
    return out


def _is_moe(doc: dict) -> bool:
    for m in doc.get("mapping") or []:
        kind = m.get("kind") if isinstance(m, dict) else None
        if isinstance(kind, dict) and (kind.get("mlp") in MOE_KINDS or kind.get("experts")):
            return True
    return False


def _mtp_speculative(doc: dict) -> bool:
    """The report serves a kept MTP layer with speculative decoding (report.serve_command)."""
    if doc.get("mtp_kept") is not True:
        return False
    return any(isinstance(m, dict) and m.get("submodel") == "mtp" for m in doc.get("mapping") or [])


def entry_for_output(output: Path, config: Path) -> Entry:
    """The harness entry of the mxtrim output ``output`` for the model YAML ``config``; an
    output whose ``mxtrim-plan.json`` is missing or malformed is refused naming the file."""
    output = Path(os.path.abspath(output))
    path, doc = _plan_doc(output)
    mode = doc.get("mode")
    if mode not in ("dummy", "weights"):
        raise InputError(path, f"mode must be dummy or weights (found {mode!r})")
    s = _serve_fields(path, doc)
    extra: dict = {}
    if mode == "dummy":
        extra["--load-format"] = "dummy"
    extra["--max-num-seqs"] = s["max_num_seqs"]
    extra["--max-num-batched-tokens"] = s["max_num_batched_tokens"]
    if s["expert_parallel"]:
        extra["--enable-expert-parallel"] = None
    if s["kv_cache_dtype"] != "auto":
        extra["--kv-cache-dtype"] = s["kv_cache_dtype"]
    if _mtp_speculative(doc):
        extra["--speculative-config"] = json.dumps(MTP_SPECULATIVE, separators=(",", ":"))
    if "--trust-remote-code" in s["command_words"]:
        extra["--trust-remote-code"] = None
    extra["--enforce-eager"] = None
    kept = doc.get("kept") if isinstance(doc.get("kept"), dict) else {}
    vision = bool(kept.get("vision"))
    model_path = model_path_for(output, config)
    fields = {
        "name": output.name,
        "model_path": model_path.path,
        "serve_config": {
            "tp": s["tp"],
            "pp": s["pp"],
            "dp": s["dp"],
            "gpu_memory_utilization": s["gpu_memory_utilization"],
            "max_model_len": s["max_model_len"],
            "extra_args": extra,
        },
        "infer_type": ["single-image" if vision else "text-only"],
        "tags": [f"{mode}-smoke", "moe" if _is_moe(doc) else "dense"],
        "extra_env": dict(OFFLINE_ENV),
    }
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    text = kept.get("text") if isinstance(kept.get("text"), list) else []
    what = f"{model.get('name')} cut to {len(text)} text layer(s)" if isinstance(model.get("name"), str) else f"{len(text)} text layer(s)"
    comment = f"mxtrim {mxtrim_version()}: {what}, {mode}" + (", MTP kept" if doc.get("mtp_kept") is True else "")
    return Entry(output.name, fields, _one_line(comment), model_path)


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)


# --- writing YAML ---------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"(--?)?[A-Za-z_][A-Za-z0-9_.-]*")
_RESERVED = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}


def _quoted(text: str) -> str:
    """A quoted YAML scalar: single-quoted when every character is printable (only ``'`` is
    doubled there), else double-quoted with the rest escaped."""
    if all(c.isprintable() and c != "\ufeff" for c in text):
        return "'" + text.replace("'", "''") + "'"
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable() and c != "\ufeff":
            out.append(c)
        elif ord(c) <= 0xFFFF:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a YAML key here is a string, not {key!r}")
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _RESERVED else _quoted(key)


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no place in a harness entry")
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if "." not in mantissa:  # YAML 1.1 (PyYAML) reads a float only with a dot
            mantissa += ".0"
        if e and exponent[0] not in "+-":
            exponent = "+" + exponent
        return mantissa + (("e" + exponent) if e else "")
    if isinstance(value, str):
        return _quoted(value)
    raise TypeError(f"no YAML form for {value!r} here")


def _block(value, indent: int) -> list[str]:
    """The lines of a mapping or a list in block style at ``indent`` spaces."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_key(k)}:")
                lines += _block(v, indent + 2)
            else:
                lines.append(f"{pad}{_key(k)}: {_inline(v)}")
    else:
        for item in value:
            lines += _block_item(item, indent)
    return lines


def _block_item(item, indent: int) -> list[str]:
    """One list item at ``indent``: ``- scalar``, or a collection whose first line follows the dash."""
    pad = " " * indent
    if isinstance(item, (dict, list)) and item:
        inner = _block(item, indent + 2)
        return [pad + "- " + inner[0][indent + 2:], *inner[1:]]
    return [f"{pad}- {_inline(item)}"]


def _inline(value) -> str:
    if isinstance(value, dict) and not value:
        return "{}"
    if isinstance(value, list) and not value:
        return "[]"
    return _scalar(value)


# --- reading the existing file --------------------------------------------------------------

@dataclass
class _Existing:
    data: bytes | None  # None: no file yet
    names: list[str]
    parsed: list | None  # the entries as PyYAML reads them (None: read without PyYAML)


def _read(config: Path) -> bytes | None:
    if config.is_dir():
        raise InputError(config, "is a directory, not a model YAML file")
    try:
        with open(config, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        if not config.parent.is_dir():
            raise InputError(config.parent, "no such folder for the model YAML") from None
        return None
    except OSError as exc:
        raise InputError(config, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(config, f"larger than {MAX_CONFIG_BYTES >> 20} MiB: not a batched_test model list")
    return data


def _decode(config: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(config, f"not UTF-8 text (byte {exc.start})") from None


def _yaml_module():
    try:
        import yaml
    except ImportError:
        return None
    return yaml


def _existing(config: Path) -> _Existing:
    """The file's bytes and the names of its entries; a file that is not a YAML list of
    entries is refused naming it and the problem."""
    data = _read(config)
    if data is None:
        return _Existing(None, [], [])
    text = _decode(config, data)
    yaml = _yaml_module()
    if yaml is None:
        return _Existing(data, _names_line_by_line(config, text), None)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(config, f"not valid YAML ({problem}{at}); nothing appended") from None
    if doc is None:
        return _Existing(data, [], [])
    if not isinstance(doc, list):
        raise InputError(config, f"not a batched_test model list (its top level is a {type(doc).__name__}, not a list "
                         "of entries); nothing appended")
    names = []
    for i, item in enumerate(doc, 1):
        if not isinstance(item, dict):
            raise InputError(config, f"entry {i} is not a mapping (name, model_path, serve_config...); nothing appended")
        if isinstance(item.get("name"), str):
            names.append(item["name"])
        elif item.get("name") is not None:
            names.append(str(item["name"]))
    return _Existing(data, names, doc)


_ITEM = re.compile(r"-(?:[ ]+(.*))?$")
_NAME = re.compile(r"name[ ]*:(?:[ ]+(.*))?$")


def _unquote(value: str) -> str:
    value = value.strip()
    if value.startswith('"'):
        try:
            return json.loads(value[: value.rindex('"') + 1])
        except ValueError:
            return value.strip('"')
    if value.startswith("'"):
        return value[1: value.rindex("'")].replace("''", "'") if value.count("'") > 1 else value.strip("'")
    return re.split(r"[ ]+#", value, maxsplit=1)[0].strip()


def _names_line_by_line(config: Path, text: str) -> list[str]:
    """Without PyYAML: the file must be a top-level block list at column 0 (each item ``- ``
    there, nothing else there but comments); the names are the items' ``name:`` keys."""
    names: list[str] = []
    item_indent = None
    seen_item = False
    for number, line in enumerate(text.splitlines(), 1):
        body = line.rstrip()
        if not body or body.lstrip().startswith("#"):
            continue
        lead = body[: len(body) - len(body.lstrip())]
        if "\t" in lead:
            raise InputError(config, f"line {number} is indented with a tab (YAML forbids it); nothing appended")
        if body == "---" and not names and item_indent is None and not seen_item:
            continue  # the document's start marker
        if not lead:
            seen_item = True
            m = _ITEM.match(body)
            if m is None:
                raise InputError(config, f"line {number}: not a batched_test model list (a top-level '- ' item "
                                 "expected at column 0); nothing appended")
            rest = m.group(1) or ""
            item_indent = 2 if rest else None
            n = _NAME.match(rest)
            if n:
                names.append(_unquote(n.group(1) or ""))
            continue
        if not seen_item:
            raise InputError(config, f"line {number}: not a batched_test model list (a top-level '- ' item "
                             "expected at column 0); nothing appended")
        if item_indent is None:  # "-" alone: the item's keys start on the next line
            item_indent = len(lead)
        if len(lead) == item_indent:
            n = _NAME.match(body.lstrip())
            if n:
                names.append(_unquote(n.group(1) or ""))
    return names


# --- appending ------------------------------------------------------------------------------

def _refuse_duplicates(config: Path, entries: list[Entry], existing: list[str], skip_present: bool) -> list[str]:
    seen: set[str] = set()
    for e in entries:
        if e.name in seen:
            raise InputError(config, f"two outputs would be entered under the same name {e.name!r}; nothing appended")
        seen.add(e.name)
    present = [e.name for e in entries if e.name in existing]
    if present and not skip_present:
        more = f" (and {len(present) - 1} more)" if len(present) > 1 else ""
        raise InputError(config, f"already has an entry named {present[0]!r}{more}; nothing appended "
                         "(remove that entry or rename the output)")
    return present


def _joined(old: bytes | None, text: str) -> bytes:
    """The old bytes unchanged, a line break if they lack a final one, a blank line, the new text."""
    new = text.encode("utf-8")
    if not old:
        return new
    sep = b"" if old.endswith(b"\n") else b"\n"
    if not (old + sep).endswith(b"\n\n"):
        sep += b"\n"
    return old + sep + new


def _check_appended(config: Path, before: _Existing, data: bytes, entries: list[Entry]) -> None:
    """With PyYAML: the file as it would be must read as the old entries followed by the new
    ones (an indented list, a document end marker... would make the new text something else)."""
    yaml = _yaml_module()
    if yaml is None or before.parsed is None:
        return
    try:
        after = yaml.safe_load(data.decode("utf-8"))
    except yaml.YAMLError:
        after = None
    if after != before.parsed + [e.fields for e in entries]:
        raise InputError(config, "an entry added at the end of this file would not read as a new list item (is the "
                         "list indented, or the document ended with '...'?); nothing appended")


def check_config(config: Path, names: list[str]) -> None:
    """Refuse now what an append of entries called ``names`` to ``config`` would refuse: an
    unreadable or malformed file, a missing folder, a name already there. Nothing is written."""
    config = Path(config)
    before = _existing(config)
    stubs = [Entry(n, {"name": n, "model_path": "./" + n}) for n in names]
    _refuse_duplicates(config, stubs, before.names, skip_present=False)
    _check_appended(config, before, _joined(before.data, "\n".join(e.yaml() for e in stubs)), stubs)


def append_entries(config: Path, entries: list[Entry], *, skip_present: bool = False) -> Appended:
    """Append ``entries`` to the model YAML ``config`` (created when absent). A name already in
    the file is refused with the file untouched, or (``skip_present``) left out and reported."""
    config = Path(config)
    target = Path(os.path.realpath(config)) if config.is_symlink() else config
    before = _existing(config)
    present = _refuse_duplicates(config, entries, before.names, skip_present)
    todo = [e for e in entries if e.name not in present]
    result = Appended(config, todo, present, created=before.data is None)
    if not todo:
        return result
    data = _joined(before.data, result.text)
    _check_appended(config, before, data, todo)
    if before.data is None:
        _write_new(target, data)
    else:
        _replace(target, before.data, data)
    return result


def _write_new(path: Path, data: bytes) -> None:
    """A new file at ``path``, never over one that appeared meanwhile."""
    try:
        write_new_file(path, data, sync=True)
    except FileExistsError:
        raise InputError(path, "appeared while the entry was being written; nothing appended (run it again)") from None
    except OSError as exc:
        raise InputError(path, f"cannot be written ({exc.strerror or exc})") from None


def _replace(path: Path, old: bytes, data: bytes) -> None:
    """``path`` replaced by ``data`` (whose start is ``old``, the bytes read): written beside it
    with its permissions, then renamed over it, unless the file changed since it was read."""
    import shutil

    tmp = None
    try:
        tmp = write_beside(path, data, sync=True)
        shutil.copymode(path, tmp)
        with open(path, "rb") as fh:
            if fh.read(len(old) + 1) != old:
                raise InputError(path, "changed while the entry was being appended; nothing appended (run it again)")
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(path, f"cannot be written ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
