"""The strict header reader: one test per rule of the format, on real files."""

from __future__ import annotations

import json
import re
import struct

import pytest
from safetensors.numpy import save_file
import numpy as np

from mxtrim_tui.core.errors import SafetensorsFormatError
from mxtrim_tui.core.read.safetensors_io import DTYPE_BITS, MAX_HEADER_SIZE, read_header


def write_raw(path, header, data: bytes = b"", *, raw_json: bytes | None = None, length: int | None = None):
    blob = raw_json if raw_json is not None else json.dumps(header).encode()
    n = len(blob) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + blob + data)
    return path


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def expect(path, *fragments):
    with pytest.raises(SafetensorsFormatError) as info:
        read_header(path)
    msg = str(info.value)
    assert str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, msg
    return info.value


def test_reads_a_file_written_by_the_safetensors_library(tmp_path):
    p = tmp_path / "ok.safetensors"
    save_file(
        {"b": np.zeros((3, 5), dtype=np.float16), "a": np.arange(7, dtype=np.int64), "s": np.array(1.5, dtype=np.float32)},
        str(p),
        metadata={"format": "pt"},
    )
    h = read_header(p)
    assert set(h.tensors) == {"a", "b", "s"}
    assert h.tensors["b"].shape == (3, 5) and h.tensors["b"].dtype == "F16" and h.tensors["b"].nbytes == 30
    assert h.tensors["s"].shape == () and h.tensors["s"].nbytes == 4
    assert h.metadata == {"format": "pt"}
    assert h.data_start + sum(t.nbytes for t in h.tensors.values()) == p.stat().st_size
    # ordered by offset, whatever the header order
    offsets = [t.begin for t in h.by_offset()]
    assert offsets == sorted(offsets)


def test_every_dtype_of_the_format_is_known(tmp_path):
    header, off = {}, 0
    for i, (dtype, bits) in enumerate(DTYPE_BITS.items()):
        n = 8 * bits // 8  # 8 elements: whole bytes for every width incl. F4/F6
        header[f"t{i}"] = entry(dtype, [8], off, off + n)
        off += n
    p = write_raw(tmp_path / "all.safetensors", header, bytes(off))
    h = read_header(p)
    assert {t.dtype for t in h.tensors.values()} == set(DTYPE_BITS)
    assert len(DTYPE_BITS) == 22


def test_file_shorter_than_the_length_prefix(tmp_path):
    p = tmp_path / "tiny.safetensors"
    p.write_bytes(b"\x01\x02\x03")
    expect(p, "too small")


def test_header_length_over_the_limit(tmp_path):
    p = tmp_path / "huge.safetensors"
    p.write_bytes(struct.pack("<Q", MAX_HEADER_SIZE + 1) + b"{}")
    expect(p, "exceeds the limit")


def test_header_length_past_end_of_file(tmp_path):
    p = write_raw(tmp_path / "short.safetensors", {}, length=4096)
    expect(p, "runs past the end")


def test_header_not_utf8(tmp_path):
    p = write_raw(tmp_path / "latin.safetensors", None, raw_json=b'{"\xe9": 1}')
    expect(p, "not valid UTF-8")


def test_header_not_json(tmp_path):
    p = write_raw(tmp_path / "broken.safetensors", None, raw_json=b'{"a": ')
    expect(p, "not valid JSON")


def test_header_nested_too_deeply_is_an_error_not_a_crash(tmp_path):
    deep = b"[" * 5000 + b"]" * 5000
    for raw in (b'{"t": ' + deep + b"}", b'{"__metadata__": {"a": ' + deep + b'}, "t": 1}'):
        p = write_raw(tmp_path / "deep.safetensors", None, raw_json=raw)
        expect(p, "nested too deeply")


def test_header_not_an_object(tmp_path):
    p = write_raw(tmp_path / "list.safetensors", None, raw_json=b"[1, 2]")
    expect(p, "must be a JSON object")


def test_unknown_dtype_names_the_tensor(tmp_path):
    p = write_raw(tmp_path / "dt.safetensors", {"w": entry("F12", [2], 0, 3)}, bytes(3))
    err = expect(p, "'w'", "unknown dtype 'F12'")
    assert err.tensor == "w"


def test_byte_length_must_match_shape_and_dtype(tmp_path):
    p = write_raw(tmp_path / "len.safetensors", {"w": entry("BF16", [2, 3], 0, 10)}, bytes(10))
    expect(p, "'w'", "byte length 10", "12 bytes")


def test_sub_byte_dtype_must_fill_whole_bytes(tmp_path):
    p = write_raw(tmp_path / "f4.safetensors", {"w": entry("F4", [3], 0, 2)}, bytes(2))
    expect(p, "'w'", "not a whole number of bytes")


def test_negative_or_non_integer_shape(tmp_path):
    p = write_raw(tmp_path / "shape.safetensors", {"w": entry("U8", [2, -1], 0, 2)}, bytes(2))
    expect(p, "'w'", "shape")
    p2 = write_raw(tmp_path / "shape2.safetensors", {"w": entry("U8", [2.0], 0, 2)}, bytes(2))
    expect(p2, "'w'", "shape")


def test_malformed_offsets(tmp_path):
    p = write_raw(tmp_path / "off.safetensors", {"w": {"dtype": "U8", "shape": [2], "data_offsets": [0]}}, bytes(2))
    expect(p, "'w'", "data_offsets")
    p2 = write_raw(tmp_path / "rev.safetensors", {"w": entry("U8", [0], 4, 2)}, bytes(4))
    expect(p2, "'w'", "not an ordered")


def test_missing_field(tmp_path):
    p = write_raw(tmp_path / "nof.safetensors", {"w": {"dtype": "U8", "data_offsets": [0, 2]}}, bytes(2))
    expect(p, "'w'", "lacks 'shape'")


def test_first_tensor_must_start_at_zero(tmp_path):
    p = write_raw(tmp_path / "start.safetensors", {"w": entry("U8", [2], 2, 4)}, bytes(4))
    expect(p, "'w'", "gap")


def test_gap_between_tensors(tmp_path):
    hdr = {"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 3, 5)}
    p = write_raw(tmp_path / "gap.safetensors", hdr, bytes(5))
    expect(p, "'b'", "gap", "previous tensor ended at 2")


def test_overlapping_tensors(tmp_path):
    hdr = {"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 2, 6)}
    p = write_raw(tmp_path / "overlap.safetensors", hdr, bytes(6))
    expect(p, "'b'", "overlap")


def test_unsorted_header_order_is_fine(tmp_path):
    hdr = {"z": entry("U8", [2], 2, 4), "a": entry("U8", [2], 0, 2)}
    p = write_raw(tmp_path / "order.safetensors", hdr, bytes(4))
    assert [t.name for t in read_header(p).by_offset()] == ["a", "z"]


def test_trailing_bytes_after_last_tensor(tmp_path):
    p = write_raw(tmp_path / "trail.safetensors", {"w": entry("U8", [2], 0, 2)}, bytes(5))
    expect(p, "3 bytes after the last tensor")


def test_truncated_data(tmp_path):
    p = write_raw(tmp_path / "trunc.safetensors", {"w": entry("F32", [4], 0, 16)}, bytes(10))
    expect(p, "truncated", "need")


def test_metadata_must_map_strings_to_strings(tmp_path):
    p = write_raw(
        tmp_path / "meta.safetensors", {"__metadata__": {"format": "pt", "n": 3}, "w": entry("U8", [1], 0, 1)}, bytes(1)
    )
    expect(p, "__metadata__")


def test_duplicate_tensor_names(tmp_path):
    raw = b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}'
    p = write_raw(tmp_path / "dup.safetensors", None, bytes(2), raw_json=raw)
    expect(p, "'w'", "duplicate")


def test_padding_spaces_and_empty_tensors_are_valid(tmp_path):
    raw = json.dumps({"e": entry("BF16", [0, 4], 0, 0), "w": entry("U8", [2], 0, 2)}).encode() + b"    "
    p = write_raw(tmp_path / "pad.safetensors", None, bytes(2), raw_json=b"  " + raw)
    h = read_header(p)
    assert h.tensors["e"].nbytes == 0 and h.tensors["w"].nbytes == 2


def test_sparse_file_reads_without_touching_data(tmp_path):
    """A full-size header over a hole: the reader validates it from the header alone."""
    from synth.checkpoint import write_safetensors

    p = tmp_path / "sparse.safetensors"
    size = write_safetensors(p, [("big", "BF16", (32768, 32768))], data="sparse")
    h = read_header(p)
    assert h.file_size == size and h.tensors["big"].nbytes == 2 * 32768 * 32768
    assert p.stat().st_blocks * 512 < 1_000_000  # the 2 GiB tensor costs no disk


def test_fast_paths_accept_exactly_what_the_exact_path_accepts(tmp_path):
    """Seeded mutation fuzz: whenever the reference-rule path rejects a header, both fast
    paths (the split-based canonical one and the JSON-tree one) must have deferred to it
    (returned None); when they accept, they agree with it entry for entry."""
    import random

    from mxtrim_tui.core.read.safetensors_io import _parse_canonical, _parse_exact, _parse_fast

    rng = random.Random(1234)
    dtypes = list(DTYPE_BITS)
    checked = rejected = canonical_hits = 0
    for case in range(1200):
        n = rng.randint(0, 6)
        header, off = {}, 0
        for i in range(n):
            dt = rng.choice(dtypes)
            shape = [rng.randint(0, 4) * 2 for _ in range(rng.randint(0, 3))] or []
            size = tensor_bytes(dt, shape)
            header[f"t{i}"] = entry(dt, shape, off, off + size)
            off += size
        data_size = off
        mutation = rng.randint(0, 9)
        names = list(header)
        if names and mutation == 1:
            header[rng.choice(names)]["shape"].append(rng.choice([-2, 1.0, True, 3]))
        elif names and mutation == 2:
            e = header[rng.choice(names)]["data_offsets"]
            e[rng.randint(0, 1)] += rng.choice([-1, 1])
        elif names and mutation == 3:
            header[rng.choice(names)]["data_offsets"].append(0)
        elif names and mutation == 4:
            header[rng.choice(names)]["dtype"] = "Q8"
        elif names and mutation == 5:
            header[rng.choice(names)]["data_offsets"][0] = float(header[names[0]]["data_offsets"][0])
        elif mutation == 6:
            data_size += rng.choice([-1, 1, 8])
        elif names and mutation == 7:
            a = rng.choice(names)
            header[a]["data_offsets"] = [0, header[a]["data_offsets"][1] - header[a]["data_offsets"][0]]
        elif mutation == 8:
            header["__metadata__"] = rng.choice([{"a": "b"}, {"a": 1}, ["x"]])
        # the writers' compact spelling (the split path's case) or json.dumps' default
        text = json.dumps(header, separators=(",", ":")) if case % 2 else json.dumps(header)
        text += " " * rng.choice([0, 0, 3])
        file_size = 8 + len(text.encode()) + max(data_size, 0)
        path = tmp_path / f"case{case}.safetensors"
        try:
            exact = _parse_exact(path, text, len(text.encode()), file_size)
        except SafetensorsFormatError:
            exact = None
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        fast = _parse_fast(path, text, obj, len(text.encode()), file_size) if isinstance(obj, dict) else None
        canonical = _parse_canonical(path, text.encode(), text, len(text.encode()), file_size)
        if exact is None:
            rejected += 1
            assert fast is None and canonical is None, (case, text)
        else:
            for other in (fast, canonical):
                if other is not None:
                    assert other.tensors == exact.tensors and other.metadata == exact.metadata, (case, text)
            checked += fast is not None
            canonical_hits += canonical is not None
    assert checked > 100 and rejected > 100 and canonical_hits > 60


def test_canonical_path_defers_on_every_respelling(tmp_path):
    """Each textual respelling of a valid compact header, applied to many random headers:
    the split-based path must agree with the reference-rule path (same entries) or defer."""
    import random

    from mxtrim_tui.core.read.safetensors_io import _parse_canonical, _parse_exact

    rng = random.Random(99)
    dtypes = list(DTYPE_BITS)
    outcomes = {choice: set() for choice in range(len(_RESPELLINGS) + 1)}
    for case in range(1500):
        header, off = {}, 0
        if (case // 25) % 2 == 0:
            header["__metadata__"] = {"format": "pt"}
        for i in range(rng.randint(2, 5)):
            dt = rng.choice(dtypes)
            shape = [rng.randint(1, 4) * 2 for _ in range(rng.randint(0, 3))]
            size = tensor_bytes(dt, shape)
            header[f"t{i}"] = entry(dt, shape, off, off + size)
            off += size
        choice = case % len(outcomes)
        text = _respell(json.dumps(header, separators=(",", ":")), choice)
        raw = text.encode()
        file_size = 8 + len(raw) + off
        path = tmp_path / "h.safetensors"
        try:
            exact = _parse_exact(path, text, len(raw), file_size)
        except (SafetensorsFormatError, ValueError):
            exact = None
        canonical = _parse_canonical(path, raw, text, len(raw), file_size)
        if canonical is not None:
            assert exact is not None, (choice, text)
            assert canonical.tensors == exact.tensors and canonical.metadata == exact.metadata, (choice, text)
        outcomes[choice].add((exact is not None, canonical is not None))
    # a valid unchanged spelling always takes the split path; every respelling was exercised
    assert (True, True) in outcomes[len(_RESPELLINGS)] and (True, False) not in outcomes[len(_RESPELLINGS)]
    assert all(outcomes.values())


_RESPELLINGS = (
    ("", ""),  # (special-cased) a leading zero on the last end
    ('"data_offsets":[', '"data_offsets":[+'),
    (",", ", "),  # valid JSON, other spacing
    ('"t0"', '"t\\u0030"'),  # an escape that decodes to the same name
    ('"t1"', '"t0"'),  # duplicate name
    ('"t0"', '"t\x01"'),  # raw control character
    ('"t0"', '"tä"'),  # non-ASCII name (valid)
    ('{"dtype"', '{"shape":[],"dtype"'),  # extra key
    ("]}}", "]},}"),  # trailing comma
    ('"shape":[', '"shape":[1_'),
    ("]", " ]"),
    ('"dtype":"', '"dtype": "'),
    ('"format":"pt"', '"format":"p}t"'),  # a brace inside metadata
    ('"format":"pt"', '"format":1'),
    ("}", "}\n"),
    ('"t1"', '"__metadata__"'),  # a tensor may not take the metadata's name
    ('"t1"', '"t\\""'),  # an escaped quote inside a name
    ('"data_offsets"', '"data_offset"'),  # a missing key
    ('"t0":{', '"t0":{"dtype":"F32",'),  # a duplicate key
    ("]},", "]}, "),
    ("{", " {"),
    ('"pt"},', '"pt"}'),  # no comma after the metadata
    ("]}}", "]}x"),  # junk after the last entry
    ('"format":"pt"', '"n":1,"format":"pt"'),  # a metadata value that is not a string
    ("{", "x{"),
    ('"data_offsets":[0,', '"data_offsets":[0,\x0b'),  # int() takes a vertical tab, JSON does not
    ("]}}", "\x0c]}}"),  # nor a form feed
    ('"t0"', '"t\x1f"'),  # the last control character
    ('"t0"', '"t\u00e4\x01"'),  # a control character in a non-ASCII name
    ('"t0"', '"t\x7f"'),  # DEL is not a control character to JSON (valid)
    ("", ""),  # (special-cased) a non-ASCII digit in the last end
    ("", ""),  # (special-cased) an underscore in the last end
    ("", ""),  # (special-cased) a plus sign on the last end
    ("", ""),  # (special-cased) three offsets in the last entry
)
_LAST_END = {
    len(_RESPELLINGS) - 2: r",+\1\2]}}",
    len(_RESPELLINGS) - 3: r",\1_\2]}}",
    len(_RESPELLINGS) - 4: lambda m: ",\u0664" + m.group(2) + "]}}",  # ARABIC-INDIC DIGIT FOUR
}


def _respell(text: str, choice: int) -> str:
    if choice == len(_RESPELLINGS):
        return text
    if choice == 0:  # a leading zero on the last end offset
        return re.sub(r"(\d+)\]\}\}", r"0\1]}}", text)
    if choice == len(_RESPELLINGS) - 1:
        return re.sub(r",(\d+)\]\}\}", r",\1,\1]}}", text)
    if choice in _LAST_END:  # spellings int() takes and JSON does not, on the last end
        return re.sub(r",(\d)(\d*)\]\}\}", _LAST_END[choice], text)
    old, new = _RESPELLINGS[choice]
    return text.replace(old, new, 1)


def tensor_bytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_BITS[dtype] // 8
