"""Strict safetensors header reader. Reads the header only, never tensor data, never torch.

The rules are those of the format's reference implementation (huggingface/safetensors
``Metadata::validate``): an 8-byte little-endian header length, a bounded UTF-8 JSON object,
known dtypes, ``prod(shape) * bits`` a whole number of bytes equal to the byte range, ranges
sorted, starting at 0, contiguous (no gap, no overlap) and covering the file exactly, and an
optional ``__metadata__`` map of strings to strings. Each violation raises
:class:`SafetensorsFormatError` naming the file and, where there is one, the tensor.

JSON is read as the reference's ``serde_json`` reads it: ``NaN``/``Infinity``, numbers out of
the double range (``1e400``), lone UTF-16 surrogate escapes (``"\ud800"``), ``-0`` where an
integer is due (serde reads it as a float) and nesting 128 levels deep are all rejected.

Deliberately stricter than the reference (each tested by ``tests/test_fuzz_readers.py``
against ``safetensors.safe_open``): a tensor name given twice (the reference keeps the last),
an entry spelled as an array (serde reads a struct from a sequence), and a shape whose
dimensions, zeros counted as 1, multiply past ``2**63 - 1``. The reference checks the element
count's running product left to right in u64, so it takes ``[0, 2**63]`` or
``[2**62, 2, 0]`` (zero elements); torch, whose sizes and strides are int64, cannot build
such a tensor even on the ``meta`` device, and the inventory and structure checks do.
"""

from __future__ import annotations

import json
import os
import re
from itertools import accumulate, chain, repeat
from math import prod
from operator import getitem, itemgetter, mul, sub
from pathlib import Path
from typing import NamedTuple

from ..errors import SafetensorsFormatError
from .files import NotRegularFile, open_regular_fd, pread_exactly

# Bit width of every dtype the format defines, in the format's own order.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

# The reference implementation's limit (safetensors ``MAX_HEADER_SIZE``).
MAX_HEADER_SIZE = 100_000_000
# Largest element count (zero dimensions counted as 1) a shape may describe: torch's sizes and
# strides are int64. Bits (elements * bit width) must fit the reference's u64.
MAX_ELEMENTS = 2**63 - 1
MAX_BITS = 2**64 - 1
# serde_json's nesting limit: a document 128 arrays/objects deep is rejected.
MAX_JSON_DEPTH = 127


class TensorInfo(NamedTuple):
    """One tensor entry. ``begin``/``end`` are relative to the data section.

    A NamedTuple rather than a dataclass: a DeepSeek-V3 checkpoint has ~92k of them and
    tuple construction is several times cheaper."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return prod(self.shape)


class SafetensorsHeader:
    """A validated header, stored as columns (one list per field, in header order).

    Columns keep validation and inventory of ~92k entries at C speed; :attr:`tensors`
    (name -> :class:`TensorInfo`) is built on first use; :meth:`by_offset` sorts by offset.
    """

    __slots__ = ("_path", "header_size", "file_size", "metadata", "names", "dtypes", "shapes", "begins", "ends", "_tensors", "plain_names")
    present = True  # on disk and read (see AbsentShard)

    def __init__(self, path, header_size, file_size, metadata, names, dtypes, shapes, begins, ends):
        self._path = path  # made a Path when first asked for (a directory's read builds none)
        self.header_size = header_size
        self.file_size = file_size
        self.metadata = metadata
        self.names: list[str] = names
        self.dtypes: list[str] = dtypes
        self.shapes: list = shapes  # tuples (canonical path, shared per distinct shape) or lists
        self.begins: list[int] = begins
        self.ends: list[int] = ends
        self._tensors: dict[str, TensorInfo] | None = None
        # True when every name is known to be spelled in JSON as is (no quote, backslash or
        # control character): the canonical reader proved it; False where not known.
        self.plain_names = False

    @property
    def path(self) -> Path:
        if not isinstance(self._path, Path):
            self._path = Path(self._path)
        return self._path

    @property
    def tensors(self) -> dict[str, TensorInfo]:
        if self._tensors is None:
            self._tensors = dict(
                zip(self.names, map(TensorInfo._make, zip(self.names, self.dtypes, map(tuple, self.shapes), self.begins, self.ends)))
            )
        return self._tensors

    def __len__(self) -> int:
        return len(self.names)

    def by_offset(self) -> list[TensorInfo]:
        return sorted(self.tensors.values(), key=_BEGIN_END)

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    @property
    def data_bytes(self) -> int:
        return self.file_size - self.data_start


# The dtype shown for a tensor whose shard is not on disk: only the index names it.
ABSENT_DTYPE = "not present"


class AbsentShard(SafetensorsHeader):
    """A shard the index lists but the directory lacks (a partial or index-only download):
    the names the index maps to it, with dtype :data:`ABSENT_DTYPE`, no shape and no bytes.
    The inventory reads it like a header; nothing ever reads its file."""

    __slots__ = ()
    present = False

    def __init__(self, path, names: list[str]):
        n = len(names)
        super().__init__(path, 0, 0, None, names, [ABSENT_DTYPE] * n, [()] * n, [0] * n, [0] * n)

    @property
    def data_bytes(self) -> int:
        return 0


def _fail(path, problem, tensor=None):
    raise SafetensorsFormatError(path, problem, tensor)


def _shown(value, limit: int = 200) -> str:
    """``repr`` cut short: a 5000-digit dimension would make the error unreadable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _elements_fit(dims) -> bool:
    """The product of the non-zero dimensions (integers >= 0) is at most MAX_ELEMENTS; stops
    at the first partial product past it, so a long list of huge numbers costs nothing."""
    n = 1
    for d in dims:
        if d:
            n *= d
            if n > MAX_ELEMENTS:
                return False
    return True


def _check_shape(path, name, shape) -> tuple[int, ...]:
    if not isinstance(shape, list):
        _fail(path, f"shape must be a list of integers, got {_shown(shape)}", name)
    for d in shape:
        # bool is an int subclass in Python; the format has no booleans here.
        if type(d) is not int or d < 0:
            _fail(path, f"shape must be a list of non-negative integers, got {_shown(shape)}", name)
    if not _elements_fit(shape):
        _fail(
            path,
            f"shape {_shown(shape)} has more elements than a tensor can index (its dimensions, "
            f"zeros counted as 1, multiply past 2**63-1)",
            name,
        )
    return tuple(shape)


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text):
    value = float(text)
    if value in (_INF, -_INF):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _serde_int(text):
    """An integer literal as serde_json reads it: ``-0`` is a float (so never a dimension or
    an offset), a number past the double range is an error."""
    if text == "-0":
        return -0.0
    value = int(text)  # over 4300 digits: ValueError, as an invalid document
    if len(text) > 300:
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"number {text[:40]}... is out of range") from None
    return value


_INF = float("inf")
_STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
# A \u escape of a UTF-16 surrogate (D800-DFFF): paired or lone, it needs a closer look.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _loads(text: str, **hooks):
    """``json.loads`` refusing NaN, Infinity and numbers past the double range, as serde_json."""
    if not hooks:
        return _STRICT_JSON.decode(text)
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, **hooks)


def _too_deep(value, depth: int) -> bool:
    """``value`` (a parsed JSON value, an array or object at nesting level ``depth``, the
    header itself being level 1) reaches past MAX_JSON_DEPTH levels."""
    if type(value) is dict:
        value = value.values()
    elif type(value) is not list:
        return False
    if depth > MAX_JSON_DEPTH:
        return True
    return any(_too_deep(v, depth + 1) for v in value)


# Each escape in turn (an escaped backslash is consumed whole, so "\\\\ud800" is no escape).
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def _has_lone_surrogate(text: str) -> bool:
    """The JSON text spells an unpaired UTF-16 surrogate (a high half not directly followed
    by a low one, or a low half alone), which serde rejects and UTF-8 cannot encode. Read
    from the text, not the parsed document: a key given twice drops its first value."""
    pending = -1  # end of a high-surrogate escape waiting for its low half
    for m in _ESCAPE.finditer(text):
        code = int(m.group(1), 16) if m.group(1) else -1
        if pending >= 0:
            if m.start() != pending or not 0xDC00 <= code <= 0xDFFF:
                return True
            pending = -1
        elif 0xD800 <= code <= 0xDBFF:
            pending = m.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return True
    return pending >= 0


def parse_header_bytes(path: str | Path, raw: bytes, file_size: int, names_checked_by_caller: bool = False) -> SafetensorsHeader:
    """Validate a header already read from disk (``raw`` = the JSON bytes).

    ``names_checked_by_caller``: the caller reading many shards makes sure itself that no name
    is given twice and none is ``__metadata__`` (one set of every shard's names does it for all
    of them at once, and a name held by two shards needs that set anyway); where it finds
    one, it reads the headers again without this.

    A fast path handles well-formed headers with C-level operations where it can; any
    irregularity sends the header through the exact, entry-by-entry path, which produces
    the precise error. Both accept exactly the same headers.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(path, f"header is not valid UTF-8 ({exc.reason} at byte {exc.start})")
    canonical = _parse_canonical(path, raw, text, len(raw), file_size, names_checked_by_caller)
    if canonical is not None:
        return canonical
    try:
        obj = _loads(text)
    except ValueError as exc:
        _fail(path, f"header is not valid JSON ({exc})")
    except RecursionError:
        _fail(path, "header is nested too deeply to parse")
    if not isinstance(obj, dict):
        _fail(path, f"header must be a JSON object, got {type(obj).__name__}")
    fast = _parse_fast(path, text, obj, len(raw), file_size)
    if fast is not None:
        return fast
    return _parse_exact(path, text, len(raw), file_size)


# The common case, in one ``str.split('"')``: an entry exactly as the reference writer (and
# ``json.dumps(..., separators=(",", ":"))``) spells it,
#   "NAME":{"dtype":"DT","shape":[S],"data_offsets":[B,E]},
# splits into ten pieces: NAME ':{' 'dtype' ':' DT ',' 'shape' ':[S],' 'data_offsets' ':[B,E]},'
_PIECES = 10
_CONSTANT_PIECES = ((1, ":{"), (2, "dtype"), (3, ":"), (5, ","), (6, "shape"), (8, "data_offsets"))
_SHAPE_PIECE = re.compile(r":\[((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)?\],")
_CONTROL_BYTES = bytes(range(32))
JSON_WHITESPACE = " \t\n\r"  # the four characters JSON allows between tokens


class _NotCanonical(Exception):
    pass


class _ShapeSizes(dict):
    """shape piece -> bytes for one dtype, validated once per distinct shape (a checkpoint
    has few); ``shapes`` (shared by all dtypes) collects piece -> shape tuple."""

    def __init__(self, bits: int, shapes: dict) -> None:
        super().__init__()
        self.bits = bits
        self.shapes = shapes

    def __missing__(self, piece):
        m = _SHAPE_PIECE.fullmatch(piece)
        if m is None:
            raise _NotCanonical
        try:
            dims = tuple(map(int, m.group(1).split(","))) if m.group(1) else ()
        except ValueError:  # a dimension of over 4300 digits
            raise _NotCanonical from None
        if not _elements_fit(dims):
            raise _NotCanonical
        nbits = prod(dims) * self.bits
        if nbits % 8 or nbits > MAX_BITS:
            raise _NotCanonical
        self.shapes[piece] = dims
        self[piece] = nbits // 8
        return nbits // 8


class _SizesByDtype(dict):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: dict = {}

    def __missing__(self, dtype):
        self[dtype] = sizes = _ShapeSizes(DTYPE_BITS[dtype], self.shapes)
        return sizes


_DTYPE_NAMES = {name: name for name in DTYPE_BITS}
# Shared by every header read: a checkpoint's shards repeat the same few shapes, and one
# tuple per distinct shape serves them all.
_sizes_of = _SizesByDtype()


# Metadata as spelled at the head of a header -> as parsed: a checkpoint's shards repeat the
# same few ({"format":"pt"}), read once each (valid ones only; a few, short ones)
_METADATA_READ: dict[str, dict] = {}


def _entries_start(text: str, p: list[str]):
    """(index of the first entry's name in ``p``, metadata) for a compact header whose
    pieces come in whole entries, else None."""
    if p[0] != "{" or len(p) < 1 + _PIECES:
        return None
    start = 1
    metadata = None
    if p[1] == "__metadata__":
        close = text.find("}")
        spelled = text[: close + 1]
        metadata = _METADATA_READ.get(spelled)
        if metadata is None:
            try:
                meta_obj = json.loads(spelled + "}")
            except (ValueError, RecursionError):
                return None
            metadata = meta_obj.get("__metadata__")
            if type(metadata) is not dict or not all(type(v) is str for v in metadata.values()):
                return None
            if len(_METADATA_READ) < 64 and len(spelled) < 4096:
                _METADATA_READ[spelled] = metadata
        metadata = dict(metadata)  # every header its own
        start = text.count('"', 0, close) + 1
        if p[start - 1] != "},":
            return None
    if (len(p) - start) % _PIECES:
        return None
    return start, metadata


def _parse_canonical(path, raw, text, header_size, file_size, names_checked_by_caller=False):
    """Validate and columnise a canonically written header without building a JSON tree.

    Every character is accounted for: the constant pieces are compared exactly, names hold
    no escape or control character, shapes and offsets are plain non-negative integers
    without leading zeros, and the offsets must chain from 0 in header order to the end of
    the file with each range as long as its shape says. Anything else (other key orders or
    spacing, escapes, duplicates, metadata elsewhere than first, tensors not laid out in
    header order, any broken rule) returns None and the JSON paths decide.
    """
    if "\\" in text or (len(raw.translate(None, _CONTROL_BYTES)) != len(raw) if text.isascii() else not text.isprintable()):
        return None
    p = text.split('"')
    entries = _entries_start(text, p)
    if entries is None:
        return None
    start, metadata = entries
    n = (len(p) - start) // _PIECES
    for offset, piece in _CONSTANT_PIECES:
        if p[start + offset :: _PIECES] != [piece] * n:
            return None
    names = p[start::_PIECES]
    try:
        # the format's own dtype strings, shared: no per-entry copy stays alive
        dtypes = list(map(_DTYPE_NAMES.__getitem__, p[start + 4 :: _PIECES]))
    except KeyError:
        return None
    shape_pieces = p[start + 7 :: _PIECES]
    offset_pieces = p[start + 9 :: _PIECES]
    if not names_checked_by_caller:
        name_set = set(names)
        if len(name_set) != n or "__metadata__" in name_set:
            return None
    global _sizes_of
    if len(_sizes_of.shapes) > 100_000:  # distinct shapes seen by this process: bounded
        _sizes_of = _SizesByDtype()
    sizes_of = _sizes_of
    try:
        sizes = list(map(getitem, map(sizes_of.__getitem__, dtypes), shape_pieces))
    except _NotCanonical:
        return None
    last = offset_pieces[-1].rstrip(JSON_WHITESPACE)
    if not last.endswith("}}"):
        return None
    offset_pieces[-1] = last[:-1] + ","
    joined = "".join(offset_pieces)  # ":[B,E]},:[B,E]},..."
    if not (joined.startswith(":[0,") and joined.endswith("]},")):
        return None
    numbers = joined[2:-3].replace("]},:[", ",")  # "B,E,B,E,..."
    # int() also takes "+1", "1_0" and other scripts' digits, which JSON does not, and "-0",
    # which JSON spells but serde reads as a float (and a -0 end would match an empty
    # tensor's running sum). No leading zeros: only the first number, the first begin, may be 0.
    if not numbers.isascii() or "+" in numbers or "_" in numbers or "-" in numbers or ",0" in numbers:
        return None
    flat = numbers.split(",")
    if len(flat) != 2 * n:
        return None
    try:
        ends = list(map(int, flat[1::2]))
    except ValueError:
        return None
    if ends != list(accumulate(sizes)) or flat[2::2] != flat[1:-1:2] or ends[-1] != file_size - 8 - header_size:
        return None
    begins = [0]
    begins += ends[:-1]
    shapes = list(map(sizes_of.shapes.__getitem__, shape_pieces))
    header = SafetensorsHeader(path, header_size, file_size, metadata, names, dtypes, shapes, begins, ends)
    header.plain_names = True  # split at quotes, no backslash, no control byte: see above
    return header


def _text_defers(text: str, n: int, metadata, data: int) -> bool:
    """What the text alone shows needs the exact path: field counts off (a duplicate key
    vanished), odd metadata, negative numbers or booleans (prod() would lie), escaped quotes
    or surrogates, files of 512 PiB or more."""
    if (
        text.count('"dtype"') != n
        or text.count('"shape"') != n
        or text.count('"data_offsets"') != n
        or text.count('"__metadata__"') > 1
    ):
        return True
    if metadata is not None and not (
        type(metadata) is dict and all(type(k) is str and type(v) is str for k, v in metadata.items())
    ):
        return True
    if ("-" in text and _NEGATIVE.search(text)) or "true" in text or "false" in text:
        return True
    # Escaped quotes (the string count would be wrong), escapes of surrogates (maybe lone) and
    # files of 512 PiB or more (where a non-empty tensor's size alone no longer bounds its
    # element count below 2**63).
    return ("\\" in text and ('\\"' in text or _SURROGATE_ESCAPE.search(text) is not None)) or data >= 2**59


def _parse_fast(path, text, obj, header_size, file_size):
    """Return the header, or None when anything needs the exact path's scrutiny."""
    # Duplicate keys vanish in json.loads; every entry has exactly one "dtype", "shape" and
    # "data_offsets" key and the header at most one "__metadata__", so a count mismatch (or
    # a name or value spelled like one of them) defers to the exact path.
    metadata = obj.pop("__metadata__", None)
    n = len(obj)
    data = file_size - 8 - header_size
    if _text_defers(text, n, metadata, data):
        return None
    try:
        infos = list(obj.values())
        # exactly dtype, shape and data_offsets: other fields (maybe deeply nested) go the
        # exact way
        if not _only(map(len, infos), 3):
            return None
        dtypes = list(map(_DTYPE, infos))
        shapes = list(map(_SHAPE, infos))
        # Before prod(): lists of at most 64 numbers below 2**63. A string or a list among
        # the dimensions makes max() raise (prod() of ["x", 2**32] or [[2], 2**32] would
        # repeat the sequence: a MemoryError); long lists of huge numbers would make prod()
        # slow. (Floats pass here and are caught by the type of the sizes below.)
        if (
            not _only(map(type, shapes), list)
            or max(map(len, shapes), default=0) > 64
            or max(chain.from_iterable(shapes), default=0) > MAX_ELEMENTS
        ):
            return None
        offsets = list(map(_OFFSETS, infos))
        begins = list(map(_FIRST, offsets))
        ends = list(map(_SECOND, offsets))
        bits = list(map(DTYPE_BITS.__getitem__, dtypes))
        nbits = list(map(mul, map(prod, shapes), bits))
    except (TypeError, KeyError, IndexError, OverflowError):  # Overflow: a NaN got past max()
        return None
    # A key given twice vanished in json.loads; if its first value had no "dtype" (an array,
    # a number) the counts above missed it. Every string of the text is accounted for
    # instead: 5 per entry (name, three field names, dtype), the metadata's key and pairs.
    strings = 5 * n + (0 if metadata is None else 1 + 2 * len(metadata)) + (metadata is None and '"__metadata__"' in text)
    if text.count('"') != 2 * strings:
        return None
    # prod() of a shape holding a float is a float; offsets must be plain ints; lists of
    # more than two offsets are caught by the length check on the offsets' types below.
    if (
        not _only(map(type, nbits), int)
        or not _only(map(type, begins), int)
        or not _only(map(type, ends), int)
        or not _only(map(len, offsets), 2)
        or list(map(mul, map(sub, ends, begins), repeat(8))) != nbits
    ):
        return None
    # An empty tensor's shape may hide huge dimensions behind its zero (non-empty ones are
    # bounded by their byte size, below 2**62 elements here): each is checked.
    if 0 in nbits and not all(_elements_fit(s) for s, b in zip(shapes, nbits) if not b):
        return None
    # Sorted (begin, end) pairs must chain 0 -> end of file with no gap or overlap:
    # flat = [b0, e0, b1, e1, ...], so e_i == b_{i+1} is flat[1:-1:2] == flat[2::2].
    flat = list(chain.from_iterable(sorted(zip(begins, ends))))
    if flat:
        if flat[0] != 0 or flat[-1] != data or flat[1:-1:2] != flat[2::2]:
            return None
    elif data != 0:
        return None
    return SafetensorsHeader(path, header_size, file_size, metadata, list(obj), dtypes, shapes, begins, ends)


def _only(values, expected) -> bool:
    """True when every value equals ``expected`` (types or small ints), at C speed."""
    return set(values) <= {expected}


_DTYPE = itemgetter("dtype")
_SHAPE = itemgetter("shape")
_OFFSETS = itemgetter("data_offsets")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_BEGIN = itemgetter(3)
_BEGIN_END = itemgetter(3, 4)
_END = itemgetter(4)
_NEGATIVE = re.compile(r"[\[,]\s*-")


def _exact_entry(path: Path, name: str, info, duplicates: dict) -> tuple:
    """One header entry checked field by field: (begin, end, name, dtype, shape)."""
    if not isinstance(info, dict):
        _fail(path, "entry must be an object with dtype, shape and data_offsets", name)
    if id(info) in duplicates:
        twice = [k for k in duplicates[id(info)][1] if k in _FIELDS]
        if twice:
            _fail(path, f"entry gives {twice[0]!r} twice", name)
    if len(info) != 3 and any(_too_deep(v, 3) for k, v in info.items() if k not in _FIELDS):
        _fail(path, "header is nested too deeply (the reference stops at 128 levels)", name)
    try:
        dtype = info["dtype"]
        shape = info["shape"]
        offsets = info["data_offsets"]
    except KeyError as exc:
        _fail(path, f"entry lacks {exc.args[0]!r}", name)
    bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None:
        _fail(path, f"unknown dtype {_shown(dtype)}", name)
    _check_shape(path, name, shape)
    if (
        type(offsets) is not list
        or len(offsets) != 2
        or type(offsets[0]) is not int
        or type(offsets[1]) is not int
    ):
        _fail(path, f"data_offsets must be [begin, end] integers, got {_shown(offsets)}", name)
    begin, end = offsets
    if begin < 0 or end < begin:
        _fail(path, f"data_offsets [{begin}, {end}] are not an ordered non-negative range", name)
    nbits = prod(shape) * bits
    if nbits > MAX_BITS:
        _fail(path, f"shape {_shown(shape)} of {dtype} is {nbits} bits, past the format's 64-bit sizes", name)
    if nbits % 8:
        _fail(
            path,
            f"shape {shape} of {dtype} is {nbits} bits, not a whole number of bytes",
            name,
        )
    if end - begin != nbits // 8:
        _fail(
            path,
            f"byte length {end - begin} does not match shape {shape} of {dtype} "
            f"({nbits // 8} bytes)",
            name,
        )
    return begin, end, name, dtype, shape


def _check_coverage(path: Path, entries: list, text: str, header_size: int, file_size: int) -> None:
    """The data ranges, in order, must tile the file after the header: no gap, no overlap,
    nothing after the last tensor, nothing missing (and no lone surrogate in the header)."""
    entries.sort()
    expected = 0
    for begin, end, name, dtype, shape in entries:
        if begin != expected:
            if begin > expected:
                _fail(path, f"gap: data starts at {begin}, previous tensor ended at {expected}", name)
            _fail(path, f"overlap: data starts at {begin}, previous tensor ended at {expected}", name)
        expected = end

    if "\\" in text and _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(text):
        _fail(path, "header holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is no character")

    covered = 8 + header_size + expected
    if covered != file_size:
        if covered < file_size:
            _fail(
                path,
                f"file has {file_size - covered} bytes after the last tensor "
                f"(tensors cover {covered} of {file_size} bytes)",
            )
        _fail(
            path,
            f"file is truncated: tensors need {covered} bytes, the file has {file_size}",
        )


def _parse_exact(path: Path, text: str, header_size: int, file_size: int) -> SafetensorsHeader:
    """Entry-by-entry validation with precise errors (the reference rules)."""
    duplicates: dict[int, tuple] = {}  # id(object) -> (the object, its keys given more than once)
    try:
        obj = _loads(text, object_pairs_hook=_note_duplicate_keys(duplicates), parse_int=_serde_int)
    except ValueError as exc:
        _fail(path, f"header is not valid JSON ({exc})")
    except RecursionError:
        _fail(path, "header is nested too deeply to parse")
    if not isinstance(obj, dict):
        _fail(path, f"header must be a JSON object, got {type(obj).__name__}")
    # A name given twice is refused (the reference keeps the last); so is a second
    # __metadata__ or a field given twice in an entry (the reference too). Keys repeated in
    # the metadata map or in fields the format does not define are let be (the reference
    # does, and so does json.loads in the fast paths: the last one counts).
    if id(obj) in duplicates:
        _fail(path, "duplicate key in header", duplicates[id(obj)][1][0])

    metadata = obj.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            _fail(path, "__metadata__ must be a map of strings to strings")

    entries = [_exact_entry(path, name, info, duplicates) for name, info in obj.items()]

    names = [e[2] for e in entries]
    columns = ([e[3] for e in entries], [e[4] for e in entries], [e[0] for e in entries], [e[1] for e in entries])
    _check_coverage(path, entries, text, header_size, file_size)
    return SafetensorsHeader(path, header_size, file_size, metadata, names, *columns)


_FIELDS = frozenset(("dtype", "shape", "data_offsets"))


def _note_duplicate_keys(duplicates: dict):
    """An object_pairs_hook that records, by id of the dict built, the keys given twice (and
    the dict itself: one dropped as a duplicate's first value must not free its id for reuse)."""

    def hook(pairs):
        d = dict(pairs)
        if len(d) != len(pairs):
            seen = set()
            twice = []
            for k, _ in pairs:
                if k in seen:
                    twice.append(k)
                seen.add(k)
            duplicates[id(d)] = (d, twice)
        return d

    return hook


def read_header(path: str | Path, names_checked_by_caller: bool = False) -> SafetensorsHeader:
    """Read and validate the header of one safetensors file (``names_checked_by_caller``: see
    :func:`parse_header_bytes`)."""
    try:
        fd, st = open_regular_fd(path)
        try:
            file_size = st.st_size
            if file_size < 8:
                _fail(path, f"file is {file_size} bytes, too small for the 8-byte header length")
            header_size = int.from_bytes(pread_exactly(fd, 8, 0), "little")
            if header_size > MAX_HEADER_SIZE:
                _fail(path, f"header length {header_size} exceeds the limit of {MAX_HEADER_SIZE} bytes")
            if 8 + header_size > file_size:
                _fail(
                    path,
                    f"header length {header_size} runs past the end of the file ({file_size} bytes)",
                )
            raw = pread_exactly(fd, header_size, 8)
        finally:
            os.close(fd)
    except NotRegularFile as exc:
        raise SafetensorsFormatError(path, str(exc)) from None
    except OSError as exc:
        raise SafetensorsFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL or an unencodable character in the name
        raise SafetensorsFormatError(path, f"cannot be opened ({exc})") from None
    if len(raw) != header_size:
        _fail(path, "file changed while reading the header")
    return parse_header_bytes(path, raw, file_size, names_checked_by_caller)


def build_header_bytes(
    entries: list[tuple[str, str, tuple[int, ...] | list[int], int]],
    metadata: dict[str, str] | None = None,
) -> tuple[bytes, int]:
    """Build a header for ``(name, dtype, shape, nbytes)`` entries laid out back to back.

    Returns ``(prefix, data_size)`` where ``prefix`` is the 8-byte length plus the JSON,
    padded with spaces to a multiple of 8 as the reference writer does.
    """
    header: dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw, offset


def tensor_nbytes(dtype: str, shape) -> int:
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPE_BITS[dtype]
    if bits % 8:
        raise ValueError(f"{dtype}{list(shape)} is not a whole number of bytes")
    return bits // 8
