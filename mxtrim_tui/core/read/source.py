"""ModelSource: one read of a Hugging Face-layout model directory, without loading weights.

It reads ``config.json`` (and its nested sub-configs), side quantization files, the
safetensors index and every shard header (strictly validated), and classifies every other
file by name *and* content. It never imports torch and never executes code from the
directory; custom code referenced by ``auto_map`` is only listed (and read as text, for the
file names a tokenizer module names).

Tokenizer files are recognised by what they are: by name (``tokenizer.*``, ``*tiktoken*``,
``vocab*``, ``merges*``, ``spiece*``), by content (SentencePiece, tiktoken rank files), and by
reference (a string in a tokenizer or processor config, or a quoted name in the tokenizer's
``auto_map`` module, that names a file of the directory).
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import re
import stat
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from bisect import bisect_right
from itertools import accumulate, chain, repeat
from operator import attrgetter
from pathlib import Path, PurePosixPath

from ..errors import IndexConsistencyError, InputError, require_directory
from .config_values import check_config_values, check_nesting
from .files import NotRegularFile, TooLarge, open_regular, read_limited
from .safetensors_io import JSON_WHITESPACE, AbsentShard, SafetensorsHeader, TensorInfo, read_header

INDEX_NAME = "model.safetensors.index.json"
# How much of the weights a directory holds (ModelSource.state).
COMPLETE, PARTIAL, INDEX_ONLY, CONFIG_ONLY = "complete", "partial", "index only", "config only"
SIDE_QUANT_FILES = ("quantize_config.json", "quant_config.json", "hf_quant_config.json")
# Sub-configs that describe their own stack of layers (VLMs, audio, encoders).
NESTED_CONFIG_KEYS = (
    "text_config",
    "vision_config",
    "audio_config",
    "encoder_config",
    "decoder_config",
    "speech_config",
    "llm_config",
)


class FileKind(str, Enum):
    CONFIG = "config"
    QUANT_CONFIG = "quantization config"
    INDEX = "weight index"
    WEIGHTS = "weights"
    OTHER_WEIGHTS = "weights (other format)"
    TOKENIZER = "tokenizer"
    TOKENIZER_CONFIG = "tokenizer config"
    CHAT_TEMPLATE = "chat template"
    GENERATION_CONFIG = "generation config"
    PROCESSOR_CONFIG = "processor config"
    CUSTOM_CODE = "custom code"
    QUANT_RECIPE = "quantizer recipe"
    DOCUMENTATION = "documentation"
    UNKNOWN = "unknown"


# Names that are a tokenizer's whatever their content (lower-cased file name).
_TOKENIZER_NAME = re.compile(r"tokenizer\..+|.*tiktoken.*|vocab.*|merges.*|spiece.*")
# Quantizer recipes (llm-compressor ``recipe.yaml``, LLMC ``*qconfig*.yaml``, ``quant*.yaml``...):
# not read by loaders, copied and labelled.
_RECIPE_NAME = re.compile(r"(.*qconfig.*|recipe.*|.*_recipe|quant.*)\.(ya?ml|json|toml)")
# Files named like weights in another format: never copied, whatever their size.
WEIGHT_LIKE_SUFFIXES = (
    ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".ggml", ".h5", ".hdf5", ".msgpack", ".npz", ".npy",
    ".onnx", ".tflite", ".ot", ".pdparams", ".pkl", ".pickle", ".joblib", ".distcp", ".nemo",
)
# Magic numbers of weight containers: a file that starts with one is never copied.
_WEIGHT_MAGIC = (
    (b"PK\x03\x04", "PyTorch zip archive"),
    (b"GGUF", "GGUF file"),
    (b"\x93NUMPY", "NumPy array"),
    (b"\x89HDF", "HDF5 file"),
)
TIKTOKEN_DETAIL = "tiktoken BPE ranks (base64 lines)"
BROKEN_SYMLINK = "broken symlink"
# Tokenizer and processor configs whose string values may name the files they need.
_REFERENCING_CONFIGS = (FileKind.TOKENIZER_CONFIG, FileKind.PROCESSOR_CONFIG)


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, POSIX separators
    kind: FileKind
    size: int
    detail: str = ""
    symlink_target: str | None = None  # where a symlink points (as written in the link)
    # Why no output ever takes this file over, whatever its size ("": nothing against it):
    # set for a broken symlink and for an unknown file named or shaped like weights.
    never_copy: str = ""

    @property
    def is_symlink(self) -> bool:
        return self.symlink_target is not None


@dataclass
class ModelSource:
    root: Path
    config: dict
    nested_configs: dict[str, dict]
    side_quant_configs: dict[str, dict]
    index_file: str | None  # the index's name when there is one (checked against the shards)
    shards: dict[str, SafetensorsHeader]  # relative shard path -> header, shards on disk only
    files: list[SourceFile]
    warnings: list[str] = field(default_factory=list)
    _tensor_shard: dict[str, str] | None = field(default=None, repr=False)
    # Shards the index lists that are not on disk (partial or index-only downloads): the
    # names the index maps to each. Empty for a complete source.
    absent_shards: dict[str, AbsentShard] = field(default_factory=dict)
    index_total_size: int | None = None  # the index's metadata.total_size when an integer
    _all_headers: dict | None = field(default=None, repr=False)
    # Where the files came from when the folder is a mirror of a remote repository
    # (``hf://ORG/NAME@<commit>``: read/remote.py); None for a local model directory.
    origin: str | None = None

    @property
    def shown(self) -> str:
        """The source as a user names it: the remote repository at its commit, else the folder."""
        return self.origin or str(self.root.resolve())

    @property
    def all_headers(self) -> dict[str, SafetensorsHeader]:
        """Every shard the source names, present (headers) or absent (index entries), by path."""
        if self._all_headers is None:
            self._all_headers = dict(sorted({**self.shards, **self.absent_shards}.items())) if self.absent_shards else self.shards
        return self._all_headers

    @property
    def tensor_shard(self) -> dict[str, str]:
        """Tensor name -> relative shard path (built on first use when not already at hand)."""
        if self._tensor_shard is None:
            self._tensor_shard = _shard_of_each_tensor(self.all_headers)
        return self._tensor_shard

    # --- convenience -------------------------------------------------------------
    def tensor(self, name: str) -> TensorInfo:
        """A tensor's entry; one in an absent shard has dtype ABSENT_DTYPE and no bytes."""
        return self.all_headers[self.tensor_shard[name]].tensors[name]

    def is_present(self, name: str) -> bool:
        return self.tensor_shard[name] in self.shards

    def iter_tensors(self):
        """The tensors of the shards on disk."""
        for shard in self.shards.values():
            yield from shard.tensors.values()

    @property
    def tensor_count(self) -> int:
        """Tensors the source names: in its headers, and in its index for absent shards."""
        return _names_held(self.all_headers)

    @property
    def present_tensor_bytes(self) -> int:
        return sum(h.data_bytes for h in self.shards.values())

    @property
    def tensor_bytes(self) -> int | None:
        """All tensor bytes: the headers' sum when every shard is present, else the index's
        total_size (None when it gives none, and for a config-only directory)."""
        if self.absent_shards:
            return self.index_total_size
        return self.present_tensor_bytes if self.shards else None

    @property
    def state(self) -> str:
        """COMPLETE, PARTIAL, INDEX_ONLY or CONFIG_ONLY."""
        if not self.absent_shards:
            return COMPLETE if self.shards else CONFIG_ONLY
        return PARTIAL if self.shards else INDEX_ONLY

    @property
    def state_detail(self) -> str:
        """The state in words, with the shard counts."""
        n = len(self.all_headers)
        state = self.state
        if state == COMPLETE:
            return f"complete: all {n} shard(s) present" if self.index_file else f"complete: {n} shard(s), no index"
        if state == PARTIAL:
            return f"partial download: {len(self.shards)} of {n} shards present"
        if state == INDEX_ONLY:
            return f"index only: {INDEX_NAME} lists {n} shard(s), none present"
        return "config only: no weights and no index"

    @property
    def architectures(self) -> list[str]:
        archs = self.config.get("architectures") or []
        return [a for a in archs if isinstance(a, str)]

    @property
    def model_type(self) -> str:
        mt = self.config.get("model_type")
        return mt if isinstance(mt, str) else ""

    def files_of(self, *kinds: FileKind) -> list[SourceFile]:
        return [f for f in self.files if f.kind in kinds]

    @property
    def custom_code_present(self) -> bool:
        return any(f.kind is FileKind.CUSTOM_CODE for f in self.files)


# --------------------------------------------------------------------------------------
def _load_json(path: Path, what: str) -> object:
    try:
        text = read_limited(path).decode("utf-8")  # half the time of read_text on a large index
    except FileNotFoundError:
        raise InputError(path, f"{what} not found") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"{what} is not UTF-8 text ({exc.reason})") from None
    except (NotRegularFile, TooLarge) as exc:
        raise InputError(path, f"{what} {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(path, f"{what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise InputError(path, f"{what} is nested too deeply to parse") from None


def _auto_map_modules(*configs: dict) -> set[str]:
    """Module file names (``foo.py``) referenced by ``auto_map`` entries."""
    names: set[str] = set()
    for cfg in configs:
        amap = cfg.get("auto_map") if isinstance(cfg, dict) else None
        if not isinstance(amap, dict):
            continue
        for value in amap.values():
            refs = value if isinstance(value, list) else [value]
            for ref in refs:
                if not isinstance(ref, str):
                    continue
                ref = ref.split("--", 1)[-1]  # "repo--module.Class" form
                module = ref.rsplit(".", 1)[0]
                names.add(module.replace(".", "/") + ".py")
    return names


def _looks_like_sentencepiece(path: str) -> bool:
    """A SentencePiece ``ModelProto`` starts with field 1 (pieces), wire type 2: byte 0x0A,
    and the first piece is a nested message whose first field is the piece string (0x0A)."""
    try:
        with open_regular(path) as fh:
            head = fh.read(64)
    except OSError:
        return False
    if len(head) < 4 or head[0] != 0x0A:
        return False
    # skip the varint length of the first piece
    i = 1
    while i < len(head) and head[i] & 0x80:
        i += 1
    return i + 1 < len(head) and head[i + 1] == 0x0A


_TIKTOKEN_LINE = re.compile(rb"[A-Za-z0-9+/]+={0,2} [0-9]+\r?")


def _looks_like_tiktoken(path: str) -> bool:
    """A tiktoken rank file: lines ``<base64 token> <rank>`` (the first 4 KiB are checked;
    blank lines are skipped, as tiktoken's loader does)."""
    try:
        with open_regular(path) as fh:
            head = fh.read(4097)
    except OSError:
        return False
    lines = head[:4096].split(b"\n")
    if len(head) > 4096:
        lines.pop()  # cut short: the last line is not judged
    lines = [line for line in lines if line]
    return bool(lines) and all(_TIKTOKEN_LINE.fullmatch(line) for line in lines)


def _head(path: str, n: int = 8) -> bytes:
    try:
        with open_regular(path) as fh:
            return fh.read(n)
    except OSError:
        return b""


def _weight_like(lower: str, path: str) -> str:
    """Why an unknown file is taken for weights ("" when it is not): its name or its magic."""
    head = _head(path)
    for magic, what in _WEIGHT_MAGIC:
        if head.startswith(magic):
            return f"{what}: weights are never copied"
    if lower.endswith(WEIGHT_LIKE_SUFFIXES):
        return f"named like weights ({PurePosixPath(lower).suffix}): never copied"
    return ""


def _named_kind(lower: str, kind: FileKind, detail: str) -> tuple[FileKind, str]:
    """What an unknown file is by its name alone: a tokenizer file or a quantizer recipe."""
    if kind is not FileKind.UNKNOWN:
        return kind, detail
    if _TOKENIZER_NAME.fullmatch(lower):
        return FileKind.TOKENIZER, detail or "tokenizer file by its name"
    if _RECIPE_NAME.fullmatch(lower):
        return FileKind.QUANT_RECIPE, "a quantization tool's recipe (not read by loaders)"
    return kind, detail


_UNREADABLE = object()  # what _read_json gives for a file that is absent, unreadable or not JSON


def _read_json(path) -> object:
    try:
        return json.loads(read_limited(path).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return _UNREADABLE


def _classify_json(name: str, path: str, obj: object = None) -> tuple[FileKind, str]:
    """``obj``: the file's parsed JSON (or _UNREADABLE) when the caller has already read it."""
    if obj is None:
        obj = _read_json(path)
    if obj is _UNREADABLE:
        return FileKind.UNKNOWN, "unreadable or not JSON"
    if not isinstance(obj, dict):
        if name == "vocab.json":
            return FileKind.UNKNOWN, "vocab.json is not a token map"
        return FileKind.UNKNOWN, "JSON that is not an object"
    if name == "tokenizer.json" or ("model" in obj and "normalizer" in obj and "added_tokens" in obj):
        return FileKind.TOKENIZER, "fast tokenizer"
    if name == "tokenizer_config.json":
        return FileKind.TOKENIZER_CONFIG, "" if "chat_template" not in obj else "includes a chat template"
    if name in ("special_tokens_map.json", "added_tokens.json"):
        return FileKind.TOKENIZER, name[: -len(".json")].replace("_", " ")
    if name == "vocab.json" and all(isinstance(v, int) for v in list(obj.values())[:50]):
        return FileKind.TOKENIZER, "BPE vocabulary"
    if name == "generation_config.json":
        return FileKind.GENERATION_CONFIG, ""
    if name in ("chat_template.json",) and "chat_template" in obj:
        return FileKind.CHAT_TEMPLATE, "JSON chat template"
    if name.endswith(("preprocessor_config.json", "processor_config.json")) or name in (
        "video_preprocessor_config.json",
    ):
        return FileKind.PROCESSOR_CONFIG, ""
    if "weight_map" in obj:
        return FileKind.INDEX, "index of another weight set"
    return FileKind.UNKNOWN, "JSON of unknown purpose"


def _walk_files(top: str, prefix: str = ""):
    """(relative POSIX path, DirEntry) of every file below ``top`` that is not hidden, sorted,
    a directory's files before its subdirectories; symlinked directories are not entered
    (as os.walk without followlinks). DirEntry caches what the listing already told."""
    try:
        with os.scandir(top) as listing:
            entries = sorted((e for e in listing if not e.name.startswith(".")), key=_NAME)
    except OSError:
        if not prefix:
            raise
        return  # an unreadable subdirectory: nothing in it is listed
    subdirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:  # a symlink loop: listed as a file, which reading then refuses
            is_dir = False
        if is_dir:
            if not entry.is_symlink():
                subdirs.append(entry)
        else:
            yield prefix + entry.name, entry
    for entry in subdirs:
        yield from _walk_files(entry.path, prefix + entry.name + "/")


_NAME = attrgetter("name")


def _classify(rel: str, path: str, auto_map_files: set[str], shard_paths: set[str], parsed: object = None) -> tuple[FileKind, str]:
    name = rel.rpartition("/")[2]  # PurePosixPath(rel).name, without building a path per file
    lower = name.lower()
    if rel == "config.json":
        return FileKind.CONFIG, ""
    if rel in SIDE_QUANT_FILES:
        return FileKind.QUANT_CONFIG, "side file"
    if rel == INDEX_NAME:
        return FileKind.INDEX, ""
    if rel in shard_paths:
        return FileKind.WEIGHTS, "safetensors shard"
    if lower.endswith(".safetensors"):
        return FileKind.WEIGHTS, "safetensors file not referenced by the index (loaders ignore it)"
    if lower.endswith(".json"):
        return _named_kind(lower, *_classify_json(name, path, parsed))
    if lower.endswith(".jinja"):
        return FileKind.CHAT_TEMPLATE, ""
    if lower.endswith(".py"):
        if rel in auto_map_files:
            return FileKind.CUSTOM_CODE, "referenced by auto_map (not executed)"
        return FileKind.CUSTOM_CODE, "Python file not referenced by auto_map (not executed)"
    if lower.endswith((".model", ".spm")):
        if _looks_like_sentencepiece(path):
            return FileKind.TOKENIZER, "SentencePiece model"
        if _looks_like_tiktoken(path):
            return FileKind.TOKENIZER, TIKTOKEN_DETAIL
        return _named_kind(lower, FileKind.UNKNOWN, ".model file that is not a SentencePiece model")
    if lower in ("merges.txt",):
        return FileKind.TOKENIZER, "BPE merges"
    if lower in ("vocab.txt", "spiece.vocab"):
        return FileKind.TOKENIZER, "vocabulary"
    if "tiktoken" in lower:
        return FileKind.TOKENIZER, TIKTOKEN_DETAIL if _looks_like_tiktoken(path) else "tiktoken file by its name"
    if lower.endswith(WEIGHT_LIKE_SUFFIXES):
        magic = _head(path, 4)
        if magic[:2] == b"PK":
            return FileKind.OTHER_WEIGHTS, "PyTorch zip archive (not read; safetensors is used)"
        if magic == b"GGUF":
            return FileKind.OTHER_WEIGHTS, "GGUF file (not read)"
        return _named_kind(lower, FileKind.UNKNOWN, "binary file of unknown format")
    if _TOKENIZER_NAME.fullmatch(lower):
        return FileKind.TOKENIZER, "tokenizer file by its name"
    if _RECIPE_NAME.fullmatch(lower):
        return FileKind.QUANT_RECIPE, "a quantization tool's recipe (not read by loaders)"
    if lower.startswith(("readme", "license", "licence", "notice", "use_policy")) or lower.endswith(
        (".md", ".txt", ".rst", ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".svg")
    ):
        return FileKind.DOCUMENTATION, ""
    return FileKind.UNKNOWN, ""


# A quoted string in Python source (for the file names a tokenizer module names).
_PY_STRING = re.compile(r"""(?<![A-Za-z0-9_])[rRbBuU]?(["'])([^"'\\\n]{1,255})\1""")
_CODE_READ_LIMIT = 1 << 20


def _config_strings(obj, depth: int = 0):
    """Every string value (not key) in a parsed JSON document."""
    if isinstance(obj, str):
        yield obj
    elif depth < 32 and isinstance(obj, dict):
        for v in obj.values():
            yield from _config_strings(v, depth + 1)
    elif depth < 32 and isinstance(obj, list):
        for v in obj:
            yield from _config_strings(v, depth + 1)


def _code_strings(path: Path):
    """The quoted strings of a Python file (read as text, never executed; the first MiB)."""
    try:
        with open_regular(path) as fh:
            text = fh.read(_CODE_READ_LIMIT).decode("utf-8", "replace")
    except OSError:
        return []
    return [m.group(2) for m in _PY_STRING.finditer(text)]


def _resolve_reference(base: PurePosixPath, value: str, present: set[str]) -> str | None:
    """The directory's file that ``value`` (a string found in a file of ``base``) names, if any."""
    if not value or len(value) > 255 or "\n" in value or _looks_absolute(value):
        return None
    parts = []
    for part in (base / value).parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    rel = "/".join(parts)
    return rel if rel in present else None


def _referenced_files(root: Path, files: list[SourceFile], parsed: dict, tokenizer_modules: set[str]) -> dict[str, str]:
    """Files named by a tokenizer / processor config (any string value) or by a tokenizer
    module of ``auto_map`` (a quoted string): relative path -> what names it (a config
    first)."""
    present = {f.path for f in files}
    refs: dict[str, str] = {}

    def note(by: str, strings) -> None:
        base = PurePosixPath(by).parent
        for value in strings:
            rel = _resolve_reference(base, value, present)
            if rel is not None and rel != by:
                refs.setdefault(rel, by)

    for f in files:
        if f.kind in _REFERENCING_CONFIGS:
            doc = parsed[f.path] if f.path in parsed else _read_json(root / f.path)
            note(f.path, _config_strings(doc) if doc is not _UNREADABLE else ())
    for f in files:
        if f.kind is FileKind.CUSTOM_CODE and f.path in tokenizer_modules:
            note(f.path, _code_strings(root / f.path))
    return refs


# Kinds a reference from a tokenizer / processor config turns into a tokenizer file.
_REFERENCE_OVERRIDES = (FileKind.UNKNOWN, FileKind.DOCUMENTATION)


def _apply_references(root: Path, files: list[SourceFile], refs: dict[str, str]) -> list[SourceFile]:
    """``files`` with each one a config or tokenizer module names made a tokenizer file (what
    its content says, when anything, kept in the detail)."""
    out = []
    for f in files:
        by = refs.get(f.path)
        if by is not None and f.kind in _REFERENCE_OVERRIDES and f.never_copy != BROKEN_SYMLINK:
            sniff = f.detail if f.kind is FileKind.UNKNOWN else ""
            if not sniff and _looks_like_tiktoken(str(root / f.path)):
                sniff = TIKTOKEN_DETAIL
            detail = f"referenced by {by}" + (f"; {sniff}" if sniff else "")
            f = SourceFile(f.path, FileKind.TOKENIZER, f.size, detail, f.symlink_target)
        out.append(f)
    return out


def _shard_of_each_tensor(shards: dict) -> dict[str, str]:
    """Tensor name -> relative shard path (a name in two shards: the later one)."""
    mapping: dict[str, str] = {}
    for rel, header in shards.items():
        mapping.update(dict.fromkeys(header.names, rel))
    return mapping


def _names_held(shards: dict) -> int:
    """How many tensor names the headers hold between them (a name in two shards counts twice)."""
    return sum(len(h.names) for h in shards.values())


def _tensor_shard_without_index(root: Path, shards: dict) -> dict[str, str]:
    """The name -> shard map of unindexed shards, which must not share a name."""
    mapping = _shard_of_each_tensor(shards)
    if len(mapping) != _names_held(shards):
        first_holder: dict[str, str] = {}
        for rel, header in shards.items():
            for tname in header.names:
                other = first_holder.setdefault(tname, rel)
                if other != rel:
                    raise InputError(root / rel, f"tensor {tname!r} also appears in {other} (duplicate across shards)")
    return mapping


def _read_index(root: Path, index_path: Path) -> tuple[dict, dict, list[str]]:
    """The index document, its weight map (shard paths normalised) and the shards it names."""
    index = _load_json(index_path, INDEX_NAME)
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise IndexConsistencyError(index_path, "index has no weight_map object")
    weight_map = index["weight_map"]
    if set(map(type, weight_map.values())) - {str}:  # a number, null, list, NaN...
        bad = next(t for t, r in weight_map.items() if type(r) is not str)
        raise IndexConsistencyError(index_path, f"weight_map entry {bad!r} is not a file name")
    safe_names = {}
    for rel in set(weight_map.values()):
        safe_names[rel] = _safe_relpath(root, rel, index_path)
    if any(k != v for k, v in safe_names.items()):  # normalise "./x" style names
        weight_map = {t: safe_names[r] for t, r in weight_map.items()}
    return index, weight_map, sorted(set(weight_map.values()))


def _may_be_shard(entry) -> bool:
    """Read as a shard: anything but a directory or a dangling link (the index check names
    those); a FIFO or a loop of links is read, and reading it says what it is."""
    try:
        return not stat.S_ISDIR(entry.stat().st_mode)
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _read_top_level_shards(root: Path) -> tuple[dict[str, SafetensorsHeader | InputError], bool]:
    """Every ``*.safetensors`` file at the top of the directory (symlinks followed), sorted by
    name: its validated header, or the error reading it gave; and whether no name is given
    twice, in one header or across them.
    Errors are kept, not raised: a file the index does not name is never an error (loaders
    ignore it); without an index, the first one is raised.

    Each header's own names are checked for repeats by one set of all of them (which a name
    in two shards needs anyway); only where that set finds a repeat is each header checked on
    its own, and one holding a name twice (or a tensor named ``__metadata__``) read again with
    its reader's own check, which says what is wrong with it."""
    with os.scandir(root) as listing:
        files = sorted(e.name for e in listing if e.name.endswith(".safetensors") and _may_be_shard(e))
    top = str(root)  # paths as text: a header makes its Path only when asked for it
    headers = {rel: _read_or_error(os.path.join(top, rel), names_checked_by_caller=True) for rel in files}
    read = [h.names for h in headers.values() if type(h) is SafetensorsHeader]
    every_name = set().union(*read)
    if len(every_name) == sum(map(len, read)) and "__metadata__" not in every_name:
        return headers, True
    for rel, h in headers.items():
        if type(h) is SafetensorsHeader and ("__metadata__" in h.names or len(set(h.names)) != len(h.names)):
            headers[rel] = _read_or_error(os.path.join(top, rel), names_checked_by_caller=False)
    return headers, False


def _read_or_error(path: str, names_checked_by_caller: bool) -> SafetensorsHeader | InputError:
    try:
        return read_header(path, names_checked_by_caller)
    except InputError as exc:
        return exc


def _read_indexed_shards(root: Path, index_path: Path, at_top: dict, names_unique: bool):
    """``(headers of the shards on disk, absent shards, the index's warnings, its total_size)``
    for the shards the index names, checked against it. ``at_top``: what
    :func:`_read_top_level_shards` read (reused, never re-read); ``names_unique``: no name is
    given twice in them, as it found.

    The usual case is settled by :func:`_index_agrees_with_shards`, which reads the index in
    pieces. Anything it does not vouch for goes the long way: the whole index parsed, its
    shards read in order (a broken shard is the error; a missing one is recorded as absent,
    the names the index maps to it kept), and as each header is read its names are popped
    from the weight map at C speed (the shard each maps to must be this one). Every shard
    popping cleanly and only absent shards' names left over means the map and the shards
    hold the same names; otherwise _verify_index works out the details from a fresh copy of
    the index."""
    agreed = _index_agrees_with_shards(index_path, at_top, names_unique)
    if agreed is not None:
        index_outside_map, shards = agreed
        warnings, total = _total_size_check(index_path, index_outside_map, shards, {})
        return shards, {}, warnings, total
    index, weight_map, shard_names = _read_index(root, index_path)
    shards = {}
    absent = set()
    consistent = True
    for rel in shard_names:
        header = at_top.get(rel)
        if isinstance(header, InputError):
            raise header
        if header is None:
            p = root / rel
            if not _exists(p, rel, index_path):
                if p.is_symlink():
                    raise InputError(p, f"shard is a broken symlink (-> {os.readlink(p)})")
                absent.add(rel)
                continue
            header = read_header(p)
        shards[rel] = header
        if consistent:
            try:
                consistent = list(map(weight_map.pop, header.names)) == [rel] * len(header.names)
            except KeyError:  # not in the index, or held by an earlier shard too
                consistent = False
    if not consistent or (weight_map and not absent):
        index, weight_map, _ = _read_index(root, index_path)
        _verify_index(root, index_path, {t: r for t, r in weight_map.items() if r not in absent}, shards)
        raise AssertionError("the index check by popping and the one by lookup disagree")
    # What is left of the map: exactly the absent shards' names (a name mapped to a present
    # shard that does not hold it would still be here)
    names_of: dict[str, list[str]] = {rel: [] for rel in sorted(absent)}
    for tname, rel in weight_map.items():
        held = names_of.get(rel)
        if held is None:
            raise IndexConsistencyError(index_path, f"tensor {tname!r} is mapped to {rel} but that shard does not hold it")
        held.append(tname)
    absent_shards = {rel: AbsentShard(root / rel, names) for rel, names in names_of.items()}
    warnings, total = _total_size_check(index_path, index, shards, absent_shards)
    if absent_shards:
        held = len(shards) + len(absent_shards)
        warnings.append(
            f"{INDEX_NAME}: {len(absent_shards)} of the {held} shards it lists {'is' if len(absent_shards) == 1 else 'are'} not present; "
            "inventory and dummy trims work from the index, a real-weight trim needs the shards holding kept tensors"
        )
    return shards, absent_shards, warnings, total


# The weight map's opening, and how much of its body is parsed at a time (small enough that
# the allocator reuses the same memory for every piece instead of mapping fresh pages).
_WEIGHT_MAP_OPENS = re.compile(rb'"weight_map"[ \t\n\r]*:[ \t\n\r]*\{')
_INDEX_PIECE_BYTES = 1 << 16
_JSON_WHITESPACE_BYTES = JSON_WHITESPACE.encode()
# Shared read-only mapping, its pages populated in one call where the platform can.
_MAP_FLAGS = (mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)) if hasattr(mmap, "MAP_SHARED") else None


def _index_agrees_with_shards(index_path: Path, at_top: dict, names_unique: bool):
    """``(the index without its weight-map entries, the shards it names)`` when the index's
    weight map names exactly the tensors of the top-level shards it refers to, each in the
    shard that holds it; None when that is not certain, and the long way decides.

    A DeepSeek-V3 index is 8.8 MB; read and parsed whole it costs ~35 MB of fresh memory
    (the bytes, the text, ~180k strings), and where first-touch page faults are dear (~3.5 µs
    each on the VMs this was measured on) that costs more than the parse itself. Here the
    file is mapped (populated in one call) and the weight map's body is parsed in pieces cut
    at line ends (byte 0x0A is never inside a JSON string nor inside a multi-byte UTF-8
    character), each piece checked and dropped before the next, so the same memory serves
    them all.

    What is accepted is exactly what ``json.loads`` of the whole file would give: the text
    outside the map parses with the map emptied, its only ``"weight_map"`` key being the one
    opened (no escapes there to spell another); each piece but the last ends in a comma and
    holds at least one pair, so the pieces join into one valid body; every name must pop
    from the shards' names with its shard as value, so a name given twice, missing, or
    placed in the wrong shard rejects. ``names_unique``: no name is given twice in
    ``at_top``'s headers (so none in those the index names)."""
    if _MAP_FLAGS is None:  # no POSIX mmap flags (Windows): the long way
        return None
    headers = {rel: h for rel, h in at_top.items() if type(h) is SafetensorsHeader and _is_plain_shard_name(rel)}
    held = _names_held(headers)
    try:
        with open_regular(index_path) as fh, mmap.mmap(
            fh.fileno(), 0, flags=_MAP_FLAGS, prot=mmap.PROT_READ
        ) as data:
            outside = _parse_outside_weight_map(data)
            if outside is None:
                return None
            index_outside_map, body_start, body_end = outside
            names_once = names_unique or len(set().union(*(h.names for h in headers.values()))) == held
            if _spelled_in_shard_order(data, body_start, body_end, headers) or (
                    names_once and _spelled_sorted(data, body_start, body_end, headers)):
                # every shard's names listed, each with its shard: a name held by two shards
                # is the only thing left to rule out (the long way says which)
                if not names_once:
                    return None
                owner = {}
            else:
                owner = _shard_of_each_tensor(headers)  # emptied as the index names each tensor
                if len(owner) != held:
                    return None  # a name in two files: the long way says which
                if not _pop_weight_map_pieces(data, body_start, body_end, owner.pop):
                    return None
    except (OSError, ValueError, UnicodeDecodeError):  # ValueError: an empty file cannot be mapped
        return None
    # Shards left with names the index never gave must be unnamed by it altogether.
    unnamed = Counter(owner.values())
    if any(count != len(headers[rel].names) for rel, count in unnamed.items()):
        return None
    return index_outside_map, {rel: h for rel, h in headers.items() if h.names and rel not in unnamed}


def _parse_outside_weight_map(data):
    """(the index parsed with its weight map emptied, body start, body end) or None."""
    opening = _WEIGHT_MAP_OPENS.search(data)
    if opening is None:
        return None
    body_start = opening.end()
    body_end = data.rfind(b"}", body_start, data.rfind(b"}"))  # the map is usually the last key
    if body_end < 0:
        return None
    outside = (data[:body_start] + data[body_end:]).decode("utf-8")
    if "\\" in outside or outside.count('"weight_map"') != 1:
        return None
    try:
        index = json.loads(outside)
    except (ValueError, RecursionError):
        return None
    if type(index) is not dict or index.get("weight_map") != {}:
        return None
    return index, body_start, body_end


_BETWEEN = re.compile(r"[ \t\n\r]*")
_CONTROL_BYTES = bytes(range(32))


def _pair_spelling(data, body_start: int, body_end: int, first_name: str, first_shard: str):
    """``(offset of the first pair in the body, the text between a name and its shard, the
    text between two pairs)`` when the body starts with the pair ``first_name: first_shard``
    spelled without escapes and followed by another pair; else None."""
    head = data[body_start : min(body_end, body_start + 4096)].decode("utf-8", "replace")
    lead = _BETWEEN.match(head).end()
    at = lead + len(first_name) + 2
    if head[lead:at] != f'"{first_name}"':
        return None
    colon_end = head.find('"', at)
    colon = head[at:colon_end]
    if colon.strip(JSON_WHITESPACE) != ":":
        return None
    at = colon_end + len(first_shard) + 2
    if head[colon_end:at] != f'"{first_shard}"':
        return None
    sep_end = head.find('"', at)
    sep = head[at:sep_end]
    if sep_end < 0 or sep.strip(JSON_WHITESPACE) != ",":
        return None  # one name only, or another spelling: the pieces decide
    return lead, colon, sep


def _spelled_in_shard_order(data, body_start: int, body_end: int, headers: dict) -> bool:
    """True when the weight map's body is, byte for byte, every shard's names in header order,
    shard after shard, each paired with its shard, in one spelling throughout (the same
    whitespace around every ``:`` and ``,``, as ``json.dumps(..., indent=N)`` writes it), and
    no name or shard name holds a quote, a backslash or a control character (so nothing is
    escaped, and ``json.loads`` of the body gives exactly those pairs): the check
    :func:`_pop_weight_map_pieces` makes pair by pair, made by one comparison. Any other
    order or spelling returns False, and the pieces decide."""
    shards = [(rel, h.names) for rel, h in headers.items() if h.names]
    if not shards:
        return False
    spelling = _pair_spelling(data, body_start, body_end, shards[0][1][0], shards[0][0])
    if spelling is None:
        return False
    lead, colon, sep = spelling
    # Shard by shard (each piece of text compared in place in the map, then dropped, so the
    # same memory serves every shard), nothing in a name needing an escape: each pair holds
    # exactly its four quotes, no backslash, and no control byte but the separators' own.
    pos = body_start + lead
    colon_controls, sep_controls = (sum(map(text.count, "\t\n\r")) for text in (colon, sep))
    last = len(shards) - 1
    # Names a canonical header spelled hold no quote, backslash or control character (see
    # SafetensorsHeader.plain_names); with plain shard names too, each piece is known to hold
    # exactly its quotes and the separators' control bytes, and only the comparison is left.
    plain = all(headers[rel].plain_names and _needs_no_escape(rel) for rel, _ in shards)
    try:
        for i, (rel, names) in enumerate(shards):
            pair_end = f'"{colon}"{rel}"'
            seps = len(names) if i < last else len(names) - 1  # a separator after each pair but the map's last
            piece = ('"' + (pair_end + sep + '"').join(names) + pair_end + (sep if i < last else "")).encode("utf-8")
            end = pos + len(piece)
            if end > body_end or data[pos:end] != piece or not (
                    plain or _holds_no_escape(piece, 4 * len(names), len(names) * colon_controls + seps * sep_controls)):
                return False
            pos = end
    except UnicodeEncodeError:  # a lone surrogate in a name
        return False
    return not data[pos:body_end].strip(b" \t\n\r")  # nothing but whitespace after the last pair


_SORTED_PAIRS_AT_ONCE = 2048  # pairs compared per piece: the same memory serves every piece


def _spelled_sorted(data, body_start: int, body_end: int, headers: dict) -> bool:
    """True when the weight map's body is, byte for byte, every name of the headers in sorted
    order (as ``json.dumps(..., sort_keys=True)`` writes it: ``save_pretrained``'s index), each
    paired with its shard, in one spelling throughout, nothing escaped: what
    :func:`_spelled_in_shard_order` checks, in that order. The names must be known to be given
    once each (the caller's set of every name); anything else returns False, and the pieces
    decide."""
    shards = [(rel, h.names) for rel, h in headers.items() if h.names]
    if not shards:
        return False
    names = list(chain.from_iterable(names for _, names in shards))
    # header order is mostly sorted already: the sort merges runs
    order = sorted(range(len(names)), key=names.__getitem__)
    first = order[0]
    first_shard = shards[bisect_right(list(accumulate(len(held) for _, held in shards)), first)][0]
    spelling = _pair_spelling(data, body_start, body_end, names[first], first_shard)
    if spelling is None:
        return False
    lead, colon, sep = spelling
    # what follows each name up to the next name: ": "SHARD",<sep>" (one string per shard)
    after = list(chain.from_iterable(repeat(f'"{colon}"{rel}"{sep}"', len(held)) for rel, held in shards))
    plain = all(headers[rel].plain_names and _needs_no_escape(rel) for rel, _ in shards)  # see there
    colon_controls, sep_controls = (sum(map(text.count, "\t\n\r")) for text in (colon, sep))
    pos = body_start + lead
    flat: list = [None] * (2 * _SORTED_PAIRS_AT_ONCE)
    try:
        for at in range(0, len(order), _SORTED_PAIRS_AT_ONCE):
            part = order[at : at + _SORTED_PAIRS_AT_ONCE]
            more = at + _SORTED_PAIRS_AT_ONCE < len(order)
            if len(flat) != 2 * len(part):
                flat = [None] * (2 * len(part))
            flat[0::2] = map(names.__getitem__, part)
            flat[1::2] = map(after.__getitem__, part)
            text = ('"' if at == 0 else "") + "".join(flat)  # every pair, the next name's quote opened
            piece = (text if more else text[: -len(sep) - 1]).encode("utf-8")  # the last: up to its shard's quote
            end = pos + len(piece)
            seps = len(part) if more else len(part) - 1
            quotes = 4 * len(part) + (at == 0) - (not more)  # the first opens the map's first name; the last ends at its shard
            if end > body_end or data[pos:end] != piece or not (
                    plain or _holds_no_escape(piece, quotes, len(part) * colon_controls + seps * sep_controls)):
                return False
            pos = end
    except UnicodeEncodeError:  # a lone surrogate in a name
        return False
    return not data[pos:body_end].strip(b" \t\n\r")  # nothing but whitespace after the last pair


def _holds_no_escape(piece: bytes, quotes: int, controls: int) -> bool:
    """A piece of the weight map holds only the quotes and control bytes its pairs and
    separators spell, and no backslash: no name or shard name in it is escaped."""
    return (piece.count(b'"') == quotes and b"\\" not in piece
            and len(piece) - len(piece.translate(None, _CONTROL_BYTES)) == controls)


def _needs_no_escape(name: str) -> bool:
    """``name`` is spelled in JSON as is: no quote, backslash or control character."""
    return '"' not in name and "\\" not in name and not any(map(name.__contains__, _CONTROL_CHARS))


_CONTROL_CHARS = tuple(map(chr, range(32)))


def _pop_weight_map_pieces(data, body_start: int, body_end: int, pop) -> bool:
    """Parse the body ``data[body_start:body_end]`` piece by piece; True when every pair
    ``name: shard`` popped ``shard`` (see _index_agrees_with_shards). A piece ends at the
    first line end past its nominal size that follows a comma (a line that does not end a
    pair, as in comma-first styles, joins the next)."""
    start = body_start
    search_from = body_start + _INDEX_PIECE_BYTES
    checked_to = start  # the line ends in data[start:checked_to] follow no comma
    while True:
        cut = data.find(b"\n", search_from, body_end)
        last = cut < 0
        if not last and not _comma_ends(data, checked_to, cut):
            search_from = checked_to = cut + 1
            continue
        piece = data[start : body_end if last else cut].decode("utf-8").rstrip(JSON_WHITESPACE)
        if not last:
            piece = piece[:-1]  # the comma
        try:
            pairs = json.loads("{" + piece + "}")
            if not pairs and not (last and start == body_start):
                return False  # ",," or a trailing comma
            if list(map(pop, pairs)) != list(pairs.values()):
                return False
        except (ValueError, KeyError, RecursionError):
            return False
        if last:
            return True
        start = checked_to = cut
        search_from = cut + _INDEX_PIECE_BYTES


def _comma_ends(data, start: int, end: int) -> bool:
    """The last byte of ``data[start:end]`` that is not JSON whitespace is a comma. (Called
    with ``start`` just past the last line end found not to follow a comma: whitespace all
    the way back to it means the same answer, so each byte is looked at once.)"""
    while end > start and data[end - 1] in _JSON_WHITESPACE_BYTES:
        end -= 1
    return end > start and data[end - 1] == 0x2C


def _is_plain_shard_name(rel: str) -> bool:
    """A top-level file name that an index entry names as is (no normalising, no refusal)."""
    return not _looks_absolute(rel)


def _looks_absolute(rel: str) -> bool:
    """Absolute on some platform: "/x", "\\x" or a drive letter "C:x"."""
    return rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":")


def _exists(p: Path, rel: str, index_path: Path) -> bool:
    try:
        return p.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL in it...
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise IndexConsistencyError(index_path, f"shard {rel!r} listed in the index cannot be looked up ({problem})") from None


def _verify_index(root: Path, index_path: Path, weight_map: dict, shards: dict) -> None:
    """Raise the first disagreement between the index and the shards, precisely: a name
    in a shard but not in the map, one held by two shards, one mapped to a shard that does
    not hold it."""
    held = 0
    for rel, header in shards.items():
        held += len(header.names)
        if header.names and set(map(weight_map.get, header.names)) != {rel}:
            for tname in header.names:
                owner = weight_map.get(tname)
                if owner == rel:
                    continue
                if owner is None:
                    raise IndexConsistencyError(
                        root / rel, f"tensor {tname!r} is in the shard but not in the index weight_map"
                    )
                if tname in shards[owner].names:
                    raise InputError(root / rel, f"tensor {tname!r} also appears in {owner} (duplicate across shards)")
                raise IndexConsistencyError(
                    index_path, f"tensor {tname!r} is mapped to {owner} but that shard does not hold it (it is in {rel})"
                )
    if held != len(weight_map):
        held_by = {rel: set(h.names) for rel, h in shards.items()}
        for tname, rel in weight_map.items():
            if tname not in held_by[rel]:
                raise IndexConsistencyError(index_path, f"tensor {tname!r} is mapped to {rel} but that shard does not hold it")


def _total_size_check(index_path: Path, index: dict, shards: dict, absent: dict) -> tuple[list[str], int | None]:
    """``(warnings, total_size)``: metadata.total_size must be the shards' data size (at
    least that of the shards present when some are absent); absent or not an integer, a
    warning and None."""
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    actual = sum(h.data_bytes for h in shards.values())
    if total is None:
        return [f"{INDEX_NAME}: metadata.total_size is missing"], None
    if type(total) is not int:
        return [f"{INDEX_NAME}: metadata.total_size is {total!r}, not an integer (ignored)"], None
    if not absent and total != actual:
        raise IndexConsistencyError(index_path, f"metadata.total_size is {total} but the shards hold {actual} tensor bytes")
    if absent and total < actual:
        raise IndexConsistencyError(
            index_path, f"metadata.total_size is {total} but the shards present already hold {actual} tensor bytes"
        )
    return [], total


def _safe_relpath(root: Path, rel: str, index_path: Path) -> str:
    """An index entry must name a file inside the model directory."""
    p = PurePosixPath(rel)
    control = next((c for c in rel if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        raise IndexConsistencyError(index_path, f"shard name {rel!r} holds the control character {control!r}: it names no checkpoint file")
    if _looks_absolute(rel):
        raise IndexConsistencyError(index_path, f"shard path {rel!r} is absolute")
    if ".." in p.parts:
        raise IndexConsistencyError(index_path, f"shard path {rel!r} escapes the model directory")
    return str(p)


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while building large acyclic structures.

    Reading ~92k header entries allocates many containers; with the collector on, its scans
    grow with the live heap and cost more than the reading itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # What was built is long-lived and acyclic: promote it to the oldest generation
            # (two list splices) instead of letting the next young collection walk every
            # reference in it (~8 ms for a DeepSeek-V3 inventory). Skipped when someone
            # else keeps objects frozen, which unfreeze() would release.
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def open_source(root: str | Path) -> ModelSource:
    """Read a model directory. Raises :class:`InputError` with file and problem on bad input."""
    with gc_paused():
        return _open_source(Path(root))


def _classified_files(root: Path, config: dict, nested: dict, shard_set: set, warnings: list[str]) -> list[SourceFile]:
    """Every file in the directory, classified (weights, tokenizer, templates, custom code,
    side files...), with what is wrong with it said in ``warnings``."""
    tok_cfg = _read_json(root / "tokenizer_config.json")
    tokenizer_modules = _auto_map_modules(tok_cfg if isinstance(tok_cfg, dict) else {})
    auto_map_files = _auto_map_modules(config, *nested.values()) | tokenizer_modules
    parsed = {"tokenizer_config.json": tok_cfg}  # read once, classified below
    files: list[SourceFile] = []
    for rel, entry in _walk_files(str(root)):
        link = os.readlink(entry.path) if entry.is_symlink() else None
        try:
            st = entry.stat()
        except OSError as exc:  # dangling, or a loop of links
            what = BROKEN_SYMLINK if isinstance(exc, FileNotFoundError) else f"unreadable ({exc.strerror or exc})"
            warnings.append(f"{rel}: {what}" + (f" (-> {link})" if link else ""))
            files.append(SourceFile(rel, FileKind.UNKNOWN, 0, what, link, never_copy=what))
            continue
        if not stat.S_ISREG(st.st_mode):
            what = "not a regular file (never read or copied)"
            warnings.append(f"{rel}: {what}")
            files.append(SourceFile(rel, FileKind.UNKNOWN, 0, what, link, never_copy=what))
            continue
        size = st.st_size
        kind, detail = _classify(rel, entry.path, auto_map_files, shard_set, parsed.get(rel))
        never = _weight_like(rel.lower(), entry.path) if kind is FileKind.UNKNOWN else ""
        files.append(SourceFile(rel, kind, size, detail, link, never))
    refs = _referenced_files(root, files, parsed, tokenizer_modules)
    if refs:
        files = _apply_references(root, files, refs)
    for module in sorted(auto_map_files):
        if not (root / module).exists():
            warnings.append(f"auto_map refers to {module}, which is not in the directory")
    for f in files:
        if f.kind is FileKind.WEIGHTS and f.path not in shard_set:
            warnings.append(f"{f.path}: safetensors file not referenced by the index; loaders ignore it")
    return files


def _open_source(root: Path) -> ModelSource:
    root = require_directory(root)
    warnings: list[str] = []

    config_path = root / "config.json"
    config = _load_json(config_path, "config.json")
    if not isinstance(config, dict):
        raise InputError(config_path, "config.json must hold a JSON object")
    check_config_values(config, config_path)
    nested = {k: v for k, v in config.items() if k in NESTED_CONFIG_KEYS and isinstance(v, dict)}

    side_quant: dict[str, dict] = {}
    for name in SIDE_QUANT_FILES:
        p = root / name
        if p.exists():
            obj = _load_json(p, name)
            if not isinstance(obj, dict):
                raise InputError(p, f"{name} must hold a JSON object")
            check_nesting(obj, p, name)
            side_quant[name] = obj

    # --- shards: from the index when there is one, else every *.safetensors at the top
    index_path = root / INDEX_NAME
    at_top, names_unique = _read_top_level_shards(root)
    if not index_path.exists():
        index_path = None
        for header in at_top.values():
            if isinstance(header, InputError):
                raise header
        shards = at_top
        tensor_shard = _tensor_shard_without_index(root, shards)
        absent_shards, total_size = {}, None
    else:
        shards, absent_shards, index_warnings, total_size = _read_indexed_shards(root, index_path, at_top, names_unique)
        warnings += index_warnings
        tensor_shard = None  # built from the headers when first asked for

    files = _classified_files(root, config, nested, set(shards), warnings)

    if not shards and not absent_shards:
        warnings.append("no safetensors weights: a config-only directory (dummy load only)")

    return ModelSource(
        root=root,
        config=config,
        nested_configs=nested,
        side_quant_configs=side_quant,
        index_file=INDEX_NAME if index_path is not None else None,
        shards=shards,
        files=files,
        warnings=warnings,
        _tensor_shard=tensor_shard,
        absent_shards=absent_shards,
        index_total_size=total_size,
        origin=_remote_origin(root),
    )


# Written by read/remote.py into a folder that mirrors a remote repository (hidden: never
# listed as a source file, never copied to an output).
MIRROR_RECORD = ".mxtrim-remote.json"


def _remote_origin(root: Path) -> str | None:
    """``hf://ORG/NAME@<commit>`` when ``root`` mirrors a remote repository, else None."""
    try:
        doc = json.loads((root / MIRROR_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    source = doc.get("source") if isinstance(doc, dict) else None
    return source if isinstance(source, str) and source.startswith(("hf://", "ms://")) else None
