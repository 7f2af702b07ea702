"""A corpus of malformed inputs, each tried against every command it applies to.

Every kind corrupts a fresh copy of a small valid source (Llama-3 shape, 4 layers, 4 shards
and an index; DeepSeek-V3 / Kimi-K2 shapes for the kinds that need them) or supplies a bad
argument, and is run as

    mxtrim inspect SRC
    mxtrim plan SRC
    mxtrim trim SRC --out OUT --mode dummy
    mxtrim trim SRC --out OUT --mode weights

(plus the kind's own arguments). A refused input must give exactly the exit status of the
table (1: bad input; 2: a malformed ``--keep``, which ``cli.main`` maps from SelectionError),
exactly one stderr line ``mxtrim: error: ...`` naming the file or argument and the problem, no
traceback, no output directory and no hidden ``.OUT.partial-*`` / ``.OUT.extract-*`` sibling,
and the source tree exactly as it was (contents, sizes, mtimes, link targets, entry types).
"accepted" kinds document inputs that are deliberately not refused: exit 0 and, where there is
one, the warning shown. Most kinds run ``mxtrim_tui.cli.main`` in-process (one transformers
import for the module); kinds that could block (FIFO, /dev/zero) run as a child process with
a timeout.

Columns: inspect / plan / dummy / weights. ``1`` ``2``: refused with that status, one line.
``ok+w``: accepted, the warning shown (``inspect`` describes a config that contradicts its
checkpoint; planning it is refused). ``ok``: accepted. ``n/a``: the kind does not apply to the
command (no case is generated). ``skip``: cannot be made here. Notes: ``F`` = failed before
this corpus's fixes (see below).

=====================================  =======  =======  =======  =======  ==========================
kind                                   inspect  plan     dummy    weights  note
=====================================  =======  =======  =======  =======  ==========================
st-header-length-past-eof              1        1        1        1
st-header-length-huge                  1        1        1        1
st-header-length-zero                  1        1        1        1
st-header-not-utf8                     1        1        1        1
st-header-not-json                     1        1        1        1
st-header-json-array                   1        1        1        1
st-header-nested-past-recursion-limit  1        1        1        1
st-header-nested-past-serde-limit      1        1        1        1
st-unknown-dtype                       1        1        1        1
st-shape-vs-byte-range                 1        1        1        1
st-offsets-overlap                     1        1        1        1
st-offsets-gap                         1        1        1        1
st-offsets-past-eof                    1        1        1        1
st-dim-negative                        1        1        1        1
st-dim-float                           1        1        1        1
st-dim-overflow                        1        1        1        1        [2**70, 0]
dup-tensor-across-shards               1        1        1        1
shard-empty                            1        1        1        1
shard-truncated                        1        1        1        1
index-invalid-json                     1        1        1        1
index-absolute-path                    1        1        1        1
index-dotdot-path                      1        1        1        1
index-symlink-escaping-to-non-shard    1        1        1        1        judged by content
index-symlink-escaping-to-valid-shard  ok       ok       ok       ok       HF cache layout: followed
index-symlink-loop                     1        1        1        1
index-shard-is-directory               1        1        1        1
index-shard-dev-zero                   1        1        1        1        child process
index-shard-fifo                       1        1        1        1        child process
index-total-size-wrong                 1        1        1        1        README: must equal
index-total-size-not-integer           ok+w     ok+w     ok+w     ok+w     a warning (ignored)
config-missing                         1        1        1        1
config-invalid-json                    1        1        1        1
config-not-object                      1        1        1        1
depth-missing                          ok+w     1        1        1        F: planned "1 of None"
depth-zero                             1        1        1        1
depth-negative                         1        1        1        1
depth-string                           1        1        1        1
depth-billion                          1        1        1        1        child process
layer-types-wrong-length               ok+w     1        1        1        F: written, unchanged list
depth-config-more-than-tensors         ok+w     1        1        1        F: written
depth-config-fewer-than-tensors        ok+w     1        1        1        F: written
keep-past-declared-depth               n/a      1        1        1        F: IndexError
hybrid-pattern-shorter-than-stack      ok+w     1        1        1        F: IndexError
side-quant-config-nested-900-levels    1        1        1        1        F: RecursionError
keep-out-of-range                      n/a      1        1        1      
keep-negative                          n/a      2        2        2
keep-reversed                          n/a      2        2        2
keep-empty                             n/a      2        2        2
keep-garbage                           n/a      2        2        2
out-inside-source                      n/a      n/a      1        1
out-equal-to-source                    n/a      n/a      1        1        F: "already exists"
out-existing-file                      n/a      n/a      1        1
out-under-regular-file                 n/a      n/a      1        1
out-under-read-only-directory          n/a      n/a      1        1        ro tmpfs (skip: no mount)
unreadable-config                      skip     skip     skip     skip     root reads mode 000
file-name-with-newline                 1        1        1        1        refused in the index, escaped \\n
file-name-not-utf8                     1        1        1        1        escaped \\udcff
deepseek-n-routed-experts-string       1        1        1        1
kimi-n-routed-experts-string           1        1        1        1        not blamed on auto_map
deepseek-n-group-string                1        1        1        1        F: "not checked", written
kimi-kv-lora-rank-string               1        1        1        1        F: blamed on auto_map
=====================================  =======  =======  =======  =======  ==========================

61 kinds, 228 (kind, command) cases: 224 pass, 4 skip (as root).
Fixes behind the F rows: core/model (Inventory.problems: a depth missing or unlike the layers
held, a per-layer list shorter than the depth; Family.whole_fields for the DeepSeek / GLM
structure fields), core/plan/build.py (those problems block every plan; re-slicing never
indexes past a list; coverage linear in the layers), core/read/source.py (side quantization
files nested at most 64 levels), core/write/writer.py (``--out`` equal to the source named).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from engine_support import mount_tmpfs, run_cli, tree_digest
from mxtrim_tui import cli
from synth.checkpoint import write_checkpoint
from synth.layouts.deepseek import deepseek_v3, kimi_k2
from synth.layouts.llama import llama3

INDEX = "model.safetensors.index.json"
COMMANDS = ("inspect", "plan", "dummy", "weights")
PLANNING = ("plan", "dummy", "weights")
WRITING = ("dummy", "weights")

@dataclass
class Ctx:
    """What a kind's function gets: the source copy, a scratch directory outside it, the
    default output path, and finalizers (run after the case whatever happens)."""

    src: Path
    work: Path
    out: Path
    finalizers: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class Case:
    says: tuple[str, ...] = ()  # what the one error line must hold (file or argument, problem)
    args: tuple[str, ...] = ()  # extra arguments
    out: Path | None = None  # replaces the default --out
    shown: str = ""  # accepted kinds: a warning that must be shown
    not_says: tuple[str, ...] = ()  # what the error line must not blame


@dataclass(frozen=True)
class Kind:
    make: Callable[[Ctx], Case]
    commands: tuple[str, ...] = COMMANDS
    rc: int = 1  # exit status when refused
    accepted: tuple[str, ...] = ()  # commands that deliberately accept it (exit 0)
    child: bool = False  # run as a child process (could block in-process)
    base: str = "llama"


KINDS: dict[str, Kind] = {}


def kind(name: str, **kw):
    def register(fn):
        assert name not in KINDS, name
        KINDS[name] = Kind(fn, **kw)
        return fn

    return register


# --- helpers that corrupt a copy -----------------------------------------------------------
def shards(src: Path) -> list[Path]:
    return sorted(src.glob("model-*.safetensors"))


def victim(src: Path) -> Path:
    """The shard every shard-level kind corrupts: the second of four (not the first, so the
    index's long way is taken after a good shard was read)."""
    return shards(src)[1]


def read_st(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_st(path: Path, header: dict | bytes, data: bytes, length: int | None = None) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if isinstance(header, dict):
        raw += b" " * (-len(raw) % 8)
    n = len(raw) if length is None else length
    path.write_bytes(n.to_bytes(8, "little") + raw + data)


def edit_header(path: Path, change: Callable[[dict], None]) -> None:
    header, data = read_st(path)
    change(header)
    write_st(path, header, data)


def tensors_of(header: dict) -> list[str]:
    """Tensor names in data order."""
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])


def data_end(header: dict) -> int:
    return max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def edit_index(src: Path, change: Callable[[dict], None]) -> None:
    edit_json(src / INDEX, change)


def remap_shard(src: Path, old: str, new: str) -> None:
    """Every index entry naming ``old`` names ``new`` instead."""

    def change(doc):
        doc["weight_map"] = {t: (new if s == old else s) for t, s in doc["weight_map"].items()}

    edit_index(src, change)


def set_config(src: Path, **fields) -> None:
    def change(cfg):
        for k, v in fields.items():
            if v is ...:
                cfg.pop(k, None)
            else:
                cfg[k] = v

    edit_json(src / "config.json", change)


def replace_victim(src: Path, make: Callable[[Path], None]) -> str:
    p = victim(src)
    p.unlink()
    make(p)
    return p.name


# --- safetensors header -------------------------------------------------------------------
@kind("st-header-length-past-eof")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    raw = p.read_bytes()
    p.write_bytes(len(raw).to_bytes(8, "little") + raw[8:])
    return Case((p.name, "runs past the end of the file"))


@kind("st-header-length-huge")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    raw = p.read_bytes()
    p.write_bytes((2**64 - 1).to_bytes(8, "little") + raw[8:])
    return Case((p.name, "exceeds the limit"))


@kind("st-header-length-zero")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    raw = p.read_bytes()
    p.write_bytes((0).to_bytes(8, "little") + raw[8:])
    return Case((p.name, "header is not valid JSON"))


@kind("st-header-not-utf8")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    raw = bytearray(p.read_bytes())
    raw[raw.index(b'"', 8) + 1] = 0xFF  # first byte of the first name
    p.write_bytes(bytes(raw))
    return Case((p.name, "header is not valid UTF-8"))


@kind("st-header-not-json")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    write_st(p, b'{"model.x": {"dtype": "F32", ', read_st(p)[1])
    return Case((p.name, "header is not valid JSON"))


@kind("st-header-json-array")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    write_st(p, b"[]      ", read_st(p)[1])
    return Case((p.name, "header must be a JSON object, got list"))


@kind("st-header-nested-past-recursion-limit")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    write_st(p, b"[" * 200_000, b"")
    return Case((p.name, "nested too deeply"))


@kind("st-header-nested-past-serde-limit")
def _(c: Ctx) -> Case:
    """130 levels in an extra field: Python parses it, the reference (serde, 128) does not."""
    p = victim(c.src)
    header, data = read_st(p)
    first = tensors_of(header)[0]
    header[first]["extra"] = json.loads("[" * 130 + "]" * 130)
    write_st(p, header, data)
    return Case((p.name, first, "nested too deeply"))


@kind("st-unknown-dtype")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    first = tensors_of(header)[0]
    header[first]["dtype"] = "F12"
    write_st(p, header, data)
    return Case((p.name, first, "unknown dtype 'F12'"))


@kind("st-shape-vs-byte-range")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    first = tensors_of(header)[0]
    header[first]["shape"] = [3]
    write_st(p, header, data)
    return Case((p.name, first, "does not match shape [3]"))


@kind("st-offsets-overlap")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    a, b = tensors_of(header)[:2]
    size = header[b]["data_offsets"][1] - header[b]["data_offsets"][0]
    header[b]["data_offsets"] = [0, size]
    write_st(p, header, data)
    return Case((p.name, "overlap"))


@kind("st-offsets-gap")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    for name in tensors_of(header):
        header[name]["data_offsets"] = [o + 8 for o in header[name]["data_offsets"]]
    write_st(p, header, data + bytes(8))
    return Case((p.name, "gap: data starts at 8"))


@kind("st-offsets-past-eof")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    end = data_end(header)
    header["model.extra.weight"] = {"dtype": "U8", "shape": [16], "data_offsets": [end, end + 16]}
    write_st(p, header, data)
    edit_index(c.src, lambda d: d["weight_map"].__setitem__("model.extra.weight", p.name))
    return Case((p.name, "file is truncated"))


@kind("st-dim-negative")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    first = tensors_of(header)[0]
    header[first]["shape"] = [-1] + header[first]["shape"][1:]
    write_st(p, header, data)
    return Case((p.name, first, "non-negative integers"))


@kind("st-dim-float")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    header, data = read_st(p)
    first = tensors_of(header)[0]
    header[first]["shape"] = [float(d) for d in header[first]["shape"]]
    write_st(p, header, data)
    return Case((p.name, first, "non-negative integers"))


@kind("st-dim-overflow")
def _(c: Ctx) -> Case:
    """[2**70, 0]: zero bytes, which the reference accepts; no tensor can index 2**70 rows."""
    p = victim(c.src)
    header, data = read_st(p)
    end = data_end(header)
    header["model.huge.weight"] = {"dtype": "F32", "shape": [2**70, 0], "data_offsets": [end, end]}
    write_st(p, header, data)
    edit_index(c.src, lambda d: d["weight_map"].__setitem__("model.huge.weight", p.name))
    return Case((p.name, "model.huge.weight", "more elements than a tensor can index"))


# --- shards and index ---------------------------------------------------------------------
@kind("dup-tensor-across-shards")
def _(c: Ctx) -> Case:
    first, second = shards(c.src)[:2]
    h1, d1 = read_st(first)
    name = tensors_of(h1)[-1]
    b, e = h1[name]["data_offsets"]
    h2, d2 = read_st(second)
    end = data_end(h2)
    h2[name] = {"dtype": h1[name]["dtype"], "shape": h1[name]["shape"], "data_offsets": [end, end + e - b]}
    write_st(second, h2, d2 + d1[b:e])
    return Case((name, "duplicate across shards", first.name, second.name))


@kind("shard-empty")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    p.write_bytes(b"")
    return Case((p.name, "0 bytes, too small"))


@kind("shard-truncated")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    raw = p.read_bytes()
    p.write_bytes(raw[:-100])
    return Case((p.name, "file is truncated"))


@kind("index-invalid-json")
def _(c: Ctx) -> Case:
    (c.src / INDEX).write_text('{"weight_map": {')
    return Case((INDEX, "is not valid JSON"))


@kind("index-absolute-path")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    remap_shard(c.src, p.name, str(p))
    return Case((INDEX, "is absolute"))


@kind("index-dotdot-path")
def _(c: Ctx) -> Case:
    p = victim(c.src)
    remap_shard(c.src, p.name, f"../{c.src.name}/{p.name}")
    return Case((INDEX, "escapes the model directory"))


@kind("index-symlink-escaping-to-non-shard")
def _(c: Ctx) -> Case:
    outside = c.work / "outside.txt"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n" * 4)
    name = replace_victim(c.src, lambda p: p.symlink_to(outside))
    return Case((name, "header length"))


@kind("index-symlink-escaping-to-valid-shard", accepted=COMMANDS)
def _(c: Ctx) -> Case:
    """The Hugging Face cache links every file to ../../blobs/<hash>: followed, judged by content."""
    blobs = c.work / "blobs"
    blobs.mkdir()
    p = victim(c.src)
    blob = blobs / "0123abcd"
    p.rename(blob)
    p.symlink_to(os.path.relpath(blob, p.parent))
    return Case()


@kind("index-symlink-loop")
def _(c: Ctx) -> Case:
    name = replace_victim(c.src, lambda p: p.symlink_to(p.name))
    return Case((name, "Too many levels of symbolic links"))


@kind("index-shard-is-directory")
def _(c: Ctx) -> Case:
    name = replace_victim(c.src, lambda p: p.mkdir())
    return Case((name, "is a directory"))


@kind("index-shard-dev-zero", child=True)
def _(c: Ctx) -> Case:
    name = replace_victim(c.src, lambda p: p.symlink_to("/dev/zero"))
    return Case((name, "character device"))


@kind("index-shard-fifo", child=True)
def _(c: Ctx) -> Case:
    name = replace_victim(c.src, lambda p: os.mkfifo(p))
    return Case((name, "FIFO"))


@kind("index-total-size-wrong")
def _(c: Ctx) -> Case:
    """README ("What strict means"): metadata.total_size must equal the tensor bytes."""
    edit_index(c.src, lambda d: d["metadata"].__setitem__("total_size", 12))
    return Case((INDEX, "metadata.total_size is 12 but the shards hold"))


@kind("index-total-size-not-integer", accepted=COMMANDS)
def _(c: Ctx) -> Case:
    edit_index(c.src, lambda d: d["metadata"].__setitem__("total_size", "12"))
    return Case(shown="metadata.total_size is '12', not an integer")


# --- config.json --------------------------------------------------------------------------
@kind("config-missing")
def _(c: Ctx) -> Case:
    (c.src / "config.json").unlink()
    return Case(("config.json", "config.json not found"))


@kind("config-invalid-json")
def _(c: Ctx) -> Case:
    (c.src / "config.json").write_text('{"model_type": "llama",')
    return Case(("config.json", "is not valid JSON"))


@kind("config-not-object")
def _(c: Ctx) -> Case:
    (c.src / "config.json").write_text("[1, 2]")
    return Case(("config.json", "must hold a JSON object"))


# A config that contradicts its checkpoint: `inspect` describes it (the contradiction among its
# warnings); plan and trim refuse it.
INSPECT_WARNS = ("inspect",)


@kind("depth-missing", accepted=INSPECT_WARNS)
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers=...)
    return Case(
        ("config.json: num_hidden_layers is missing, and the checkpoint holds text layers 0..3",),
        shown="config.json: num_hidden_layers is missing",
    )


@kind("depth-zero")
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers=0)
    return Case(("config.json", "num_hidden_layers is 0"))


@kind("depth-negative")
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers=-4)
    return Case(("config.json", "num_hidden_layers is -4"))


@kind("depth-string")
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers="4")
    return Case(("config.json", "num_hidden_layers is '4' (a string)"))


@kind("depth-billion", child=True)
def _(c: Ctx) -> Case:
    """Refused on reading (config_values: at most 10,000 layers). Were it planned, transformers
    would build 10**9 layers on meta (GiBs, no end; the plan now blocks a depth unlike the
    layers held before the check runs): a child process, so a regression is a timeout."""
    set_config(c.src, num_hidden_layers=10**9)
    return Case(("config.json", "num_hidden_layers is 1000000000"))


@kind("layer-types-wrong-length", accepted=INSPECT_WARNS)
def _(c: Ctx) -> Case:
    set_config(c.src, layer_types=["full_attention"] * 3)
    text = "config.json: layer_types has 3 entries but num_hidden_layers is 4 (one entry per layer)"
    return Case((text,), shown=text)


@kind("depth-config-more-than-tensors", accepted=INSPECT_WARNS)
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers=6)
    return Case(
        ("config.json: num_hidden_layers is 6 but the checkpoint holds text layers 0..3",),
        shown="declares 6 layers but the checkpoint has layers 0..3",
    )


@kind("depth-config-fewer-than-tensors", accepted=INSPECT_WARNS)
def _(c: Ctx) -> Case:
    set_config(c.src, num_hidden_layers=2)
    return Case(
        ("config.json: num_hidden_layers is 2 but the checkpoint holds text layers 0..3",),
        shown="declares 2 layers but the checkpoint has layers 0..3",
    )


@kind("keep-past-declared-depth", commands=PLANNING)
def _(c: Ctx) -> Case:
    """Layer 3 held, 2 declared with a 2-entry layer_types: re-slicing it at 3 was an IndexError."""
    set_config(c.src, num_hidden_layers=2, layer_types=["full_attention"] * 2)
    return Case(("config.json: num_hidden_layers is 2 but the checkpoint holds text layers 0..3",), args=("--keep", "3"))


@kind("hybrid-pattern-shorter-than-stack", accepted=INSPECT_WARNS)
def _(c: Ctx) -> Case:
    """Nemotron-H's depth comes from its pattern: "M" for 4 layers held (an IndexError once)."""
    set_config(c.src, model_type="nemotron_h", hybrid_override_pattern="M")
    text = "config.json: hybrid_override_pattern describes 1 layer(s) but the checkpoint holds text layers 0..3"
    return Case((text,), shown="the checkpoint has layers 0..3")


@kind("side-quant-config-nested-900-levels")
def _(c: Ctx) -> Case:
    """The plan deep-copies side quantization files: 900 levels exhausted its stack."""
    deep = "".join("[" if i % 2 else '{"k":' for i in range(900)) + "1"
    deep += "".join("]" if i % 2 else "}" for i in reversed(range(900)))
    (c.src / "quantize_config.json").write_text('{"quant_method": "awq", "x": ' + deep + "}")
    return Case(("quantize_config.json", "nests arrays and objects more than 64 levels deep"))


# --- --keep -------------------------------------------------------------------------------
@kind("keep-out-of-range", commands=PLANNING)
def _(c: Ctx) -> Case:
    return Case(("layer(s) 9 do not exist",), args=("--keep", "9"))


@kind("keep-negative", commands=PLANNING, rc=2)
def _(c: Ctx) -> Case:
    return Case(("--keep '-1'",), args=("--keep", "-1"))


@kind("keep-reversed", commands=PLANNING, rc=2)
def _(c: Ctx) -> Case:
    return Case(("--keep '3-1'", "runs backwards"), args=("--keep", "3-1"))


@kind("keep-empty", commands=PLANNING, rc=2)
def _(c: Ctx) -> Case:
    return Case(("--keep ''", "no layer indices"), args=("--keep", ""))


@kind("keep-garbage", commands=PLANNING, rc=2)
def _(c: Ctx) -> Case:
    return Case(("--keep 'abc'", "not an index"), args=("--keep", "abc"))


# --- --out --------------------------------------------------------------------------------
@kind("out-inside-source", commands=WRITING)
def _(c: Ctx) -> Case:
    out = c.src / "trimmed"
    return Case((str(out), "inside the source"), out=out)


@kind("out-equal-to-source", commands=WRITING)
def _(c: Ctx) -> Case:
    return Case((str(c.src), "is the source model directory"), out=c.src)


@kind("out-existing-file", commands=WRITING)
def _(c: Ctx) -> Case:
    out = c.work / "taken.txt"
    out.write_text("mine")
    return Case((str(out), "already exists"), out=out)


@kind("out-under-regular-file", commands=WRITING)
def _(c: Ctx) -> Case:
    (c.work / "file").write_text("mine")
    out = c.work / "file" / "sub" / "out"
    return Case((str(out), "is a file, not a directory"), out=out)


@kind("out-under-read-only-directory", commands=WRITING)
def _(c: Ctx) -> Case:
    """As root a 0o555 directory is writable: a read-only tmpfs is mounted instead."""
    ro = c.work / "ro"
    ro.mkdir()
    why = mount_tmpfs(ro, "ro,size=1m")
    if why is not None:
        pytest.skip(f"cannot mount a read-only tmpfs here: {why}")
    c.finalizers.append(lambda: subprocess.run(["umount", str(ro)], check=True))
    out = ro / "sub" / "out"
    return Case((str(out), f"cannot write in {ro}", "Read-only file system"), out=out)


# --- unreadable and oddly named files ------------------------------------------------------
@kind("unreadable-config")
def _(c: Ctx) -> Case:
    if os.geteuid() == 0:
        pytest.skip("running as root: mode 000 does not stop root from reading")
    (c.src / "config.json").chmod(0)
    c.finalizers.append(lambda: (c.src / "config.json").chmod(0o644))
    return Case(("config.json", "Permission denied"))


def _rename_victim(c: Ctx, new: str) -> None:
    p = victim(c.src)
    raw = p.read_bytes()
    p.unlink()
    (c.src / new).write_bytes(raw[:-100])  # and truncated: the error names it
    remap_shard(c.src, p.name, new)


@kind("file-name-with-newline")
def _(c: Ctx) -> Case:
    """A name with a newline: refused in the index that holds it (no checkpoint file is named
    so), never read as a file or as a missing shard."""
    _rename_victim(c, "model-00002\nof-00004.safetensors")
    return Case(("model.safetensors.index.json", "model-00002\\nof-00004.safetensors", "names no checkpoint file"))


@kind("file-name-not-utf8")
def _(c: Ctx) -> Case:
    """b'model-\\xff.safetensors', named by the index as the JSON escape \\udcff."""
    _rename_victim(c, os.fsdecode(b"model-\xff.safetensors"))
    return Case(("model-\\udcff.safetensors", "file is truncated"))


# --- DeepSeek-like configs: blame the field, never auto_map -----------------------------------
NOT_AUTO_MAP = ("auto_map", "own code")


@kind("deepseek-n-routed-experts-string", base="deepseek")
def _(c: Ctx) -> Case:
    set_config(c.src, n_routed_experts="8")
    return Case(("config.json", "n_routed_experts is '8' (a string)"), not_says=NOT_AUTO_MAP)


@kind("kimi-n-routed-experts-string", base="kimi")
def _(c: Ctx) -> Case:
    set_config(c.src, n_routed_experts="8")
    return Case(("config.json", "n_routed_experts is '8' (a string)"), not_says=NOT_AUTO_MAP)


@kind("deepseek-n-group-string", base="deepseek")
def _(c: Ctx) -> Case:
    set_config(c.src, n_group="1")
    return Case(("config.json", "n_group is '1' (a string)"), not_says=NOT_AUTO_MAP)


@kind("kimi-kv-lora-rank-string", base="kimi")
def _(c: Ctx) -> Case:
    set_config(c.src, kv_lora_rank="16")
    return Case(("config.json", "kv_lora_rank is '16' (a string)"), not_says=NOT_AUTO_MAP)


# --- the runner -----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpus-bases")
    layout = llama3(num_layers=4, hidden_size=64, vocab_size=128)
    llama = write_checkpoint(root / "llama", layout, data="random", max_shard_bytes=layout.total_bytes // 3 + 1)
    assert len(shards(llama)) == 4 and (llama / INDEX).exists()
    small = dict(num_layers=4, num_experts=8, hidden_size=64, vocab_size=128, first_k_dense_replace=1)
    ds = deepseek_v3(**small)
    deepseek = write_checkpoint(root / "deepseek", ds, data="sparse", max_shard_bytes=ds.total_bytes // 3 + 1)
    km = kimi_k2(**small)
    kimi = write_checkpoint(root / "kimi", km, data="sparse", max_shard_bytes=km.total_bytes // 3 + 1)
    return {"llama": llama, "deepseek": deepseek, "kimi": kimi}


def source_state(root: Path) -> dict:
    """Every entry below ``root``: file digests, sizes and mtimes (tree_digest), and for every
    entry its type, mtime and link target, without following links (a directory's mtime
    changes when anything is created or removed in it)."""
    state = {"files": tree_digest(root)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            link = os.readlink(p) if stat.S_ISLNK(st.st_mode) else None
            state[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, link)
    st = os.lstat(root)
    state["."] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns)
    return state


def nearest_dir(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.is_dir() and not p.is_symlink():
            return p
    raise AssertionError(path)


def argv_for(command: str, src: Path, out: Path, args: tuple[str, ...]) -> list[str]:
    if command in ("inspect", "plan"):
        return [command, str(src), *args]
    return ["trim", str(src), "--out", str(out), "--mode", command, *args]


def run_in_process(argv: list[str], capfd) -> tuple[int, str, str]:
    """``cli.main(argv)``: anything but a return (or argparse's SystemExit) fails the test."""
    old = signal.getsignal(signal.SIGTERM)
    try:
        try:
            rc = cli.main(argv)
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code
    finally:
        signal.signal(signal.SIGTERM, old)
    out, err = capfd.readouterr()
    return rc, out, err


def run_child(argv: list[str]) -> tuple[int, str, str]:
    r = run_cli(*argv, timeout=120)
    return r.returncode, r.stdout, r.stderr


def _cases():
    for name, k in KINDS.items():
        for command in k.commands:
            yield pytest.param(name, command, id=f"{name}-{command}")


def test_the_corpus_is_large_enough():
    assert len(KINDS) >= 40
    assert sum(len(k.commands) for k in KINDS.values()) >= 160


def new_ctx(tmp_path: Path) -> Ctx:
    return Ctx(tmp_path / "src", tmp_path / "work", tmp_path / "work" / "out")


def prepare(name: str, bases: dict, ctx: Ctx) -> Case:
    """A fresh copy of the kind's base source, corrupted by the kind."""
    shutil.copytree(bases[KINDS[name].base], ctx.src, symlinks=True)
    ctx.work.mkdir()
    return KINDS[name].make(ctx)


def flat(text: str) -> str:
    """Rich wraps long lines: compare with runs of white space made one space."""
    return " ".join(text.split())


@pytest.mark.parametrize("name, command", list(_cases()))
def test_bad_input(name, command, bases, tmp_path, capfd):
    k = KINDS[name]
    ctx = new_ctx(tmp_path)
    try:
        case = prepare(name, bases, ctx)
        src = ctx.src
        out = case.out if case.out is not None else ctx.out
        watched = nearest_dir(out.parent)
        listing_before = sorted(os.listdir(watched))
        out_existed = os.path.lexists(out)
        before = source_state(src)
        argv = argv_for(command, src, out, case.args)
        rc, stdout, stderr = run_child(argv) if k.child else run_in_process(argv, capfd)

        assert "Traceback" not in stderr, stderr
        temporaries = [n for n in os.listdir(watched) if n.startswith(f".{out.name}.")]
        assert temporaries == [], f"hidden temporaries left: {temporaries}"
        if command in k.accepted:  # deliberately
            assert rc == 0, stderr
            if case.shown:
                assert flat(case.shown) in flat(stdout + stderr), stdout + stderr
            if command in WRITING:
                assert (out / "config.json").is_file()
        else:
            lines = stderr.splitlines()
            assert rc == k.rc, f"exit {rc}: {stderr}"
            assert len(lines) == 1, f"stderr is not one line: {stderr!r}"
            line = lines[0]
            assert line.startswith("mxtrim: error: "), line
            for needle in case.says:
                assert needle in line, f"{needle!r} not in {line!r}"
            for needle in case.not_says:
                assert needle not in line, f"{needle!r} in {line!r}"
            assert os.path.lexists(out) == out_existed
            assert sorted(os.listdir(watched)) == listing_before
        assert source_state(src) == before, "the source changed"
    finally:
        for fin in ctx.finalizers:
            fin()
