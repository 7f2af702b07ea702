"""The index check that reads the weight map in pieces must reach the same verdict as parsing
the whole index: for every spelling and every defect below, ``open_source`` gives the same
shards, warnings and tensor map, or the same error, with the piecewise check on or off; and
it is the piecewise check that settles the common spellings (else it would be dead weight)."""

from __future__ import annotations

import json
import re

import pytest

from engine_support import load_index
from mxtrim_tui.core.read import source
from mxtrim_tui.core.errors import InputError
from mxtrim_tui.core.read.source import INDEX_NAME, open_source
from synth.checkpoint import Layout, write_checkpoint

ODD_NAMES = ['odd}name.weight', 'quote"name.weight', "line\nbreak.weight", "caf\u00e9.weight", "tab\tname.weight"]


def _checkpoint(tmp_path):
    tensors = [("model.embed_tokens.weight", "BF16", (16, 8))]
    for i in range(3):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", "BF16", (8,)), (p + "mlp.up_proj.weight", "BF16", (16, 8))]
    tensors += [(name, "F32", (2,)) for name in ODD_NAMES]
    tensors += [("lm_head.weight", "BF16", (16, 8))]
    layout = Layout("odd-llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 3}, tensors)
    return write_checkpoint(tmp_path / "m", layout, data="random", max_shard_bytes=layout.total_bytes // 3 + 1, tokenizer=False)


def _outcome(root):
    try:
        src = open_source(root)
    except InputError as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", list(src.shards), src.warnings, src.tensor_shard)


def _both_ways(root, monkeypatch):
    """(outcome with the piecewise check, outcome without it, what the piecewise check said)."""
    with monkeypatch.context() as m:
        said = _spy(m, "_index_agrees_with_shards")
        with_pieces = _outcome(root)
    with monkeypatch.context() as m:
        m.setattr(source, "_index_agrees_with_shards", lambda *args: None)
        whole = _outcome(root)
    return with_pieces, whole, said[0] if said else None


def _spy(monkeypatch, name: str) -> list:
    """What ``source.<name>`` answers, call after call, in the list returned."""
    said = []
    real = getattr(source, name)
    monkeypatch.setattr(source, name, lambda *a: said.append(real(*a)) or said[-1])
    return said


def _swap_keys(doc):
    return {"weight_map": doc["weight_map"], "metadata": doc["metadata"]}


# Spellings of a correct index that real writers produce: the piecewise check settles them.
SPELLINGS = {
    "transformers (indent 2, sorted keys)": lambda d: json.dumps(d, indent=2, sort_keys=True) + "\n",
    "indent 2 in shard order": lambda d: json.dumps(d, indent=2),
    "indent 4, non-ASCII kept": lambda d: json.dumps(d, indent=4, ensure_ascii=False),
    "CRLF line ends": lambda d: json.dumps(d, indent=2).replace("\n", "\r\n"),
    "one line": lambda d: json.dumps(d),
    "compact": lambda d: json.dumps(d, separators=(",", ":")),
}

# Respellings and defects: whatever the piecewise check says, the verdict must not change.
VARIANTS = {
    "weight map before metadata": lambda d: json.dumps(_swap_keys(d), indent=2),
    "metadata missing": lambda d: json.dumps({"weight_map": d["weight_map"]}, indent=2),
    "total_size wrong": lambda d: json.dumps({**d, "metadata": {"total_size": 1}}, indent=2),
    "total_size a string": lambda d: json.dumps({**d, "metadata": {"total_size": "12"}}, indent=2),
    "escaped name": lambda d: json.dumps(d, indent=2).replace('"model.embed', '"\\u006dodel.embed'),
    "escaped weight_map key": lambda d: json.dumps(d, indent=2).replace('"weight_map"', '"weight\\u005fmap"'),
    "real map empty, a map nested in metadata": lambda d: json.dumps(
        {"metadata": {"weight_map": d["weight_map"]}, "weight_map": {}}, indent=2
    ),
    "escaped key empty, literal map nested": lambda d: json.dumps(
        {"metadata": {"weight_map": d["weight_map"]}, "weight_map": {}}, indent=2
    ).replace('"weight_map": {}', '"weight\\u005fmap": {}'),
    "trailing comma": lambda d: json.dumps(d, indent=2).replace('"\n  }', '",\n  }'),
    "double comma": lambda d: json.dumps(d, indent=2).replace('",\n', '",,\n', 1),
    "comma first": lambda d: json.dumps(d, indent=2).replace('",\n    "', '"\n    ,"'),
    "form feed before a comma": lambda d: json.dumps(d, indent=2).replace('",\n', '"\f,\n', 1),
    "byte order mark": lambda d: "\ufeff" + json.dumps(d, indent=2),
    "truncated": lambda d: json.dumps(d, indent=2)[:-40],
    "empty file": lambda d: "",
    "not an object": lambda d: "[]",
    "a value that is a number": lambda d: json.dumps(d, indent=2).replace('"lm_head.weight": "', '"lm_head.weight": 7, "x": "', 1),
    "empty weight map": lambda d: json.dumps({**d, "weight_map": {}}, indent=2),
    "raw line break inside a name": lambda d: json.dumps(d, indent=2).replace("line\\nbreak", "line\nbreak"),
}


def _mutate_map(change):
    def spell(d):
        wm = dict(d["weight_map"])
        items = change(wm)
        return json.dumps({"metadata": d["metadata"], "weight_map": dict(items) if items is not None else wm}, indent=2)

    return spell


def _first_shard_names(wm):
    first = min(wm.values())
    return [n for n, s in wm.items() if s == first]


VARIANTS |= {
    "one entry missing": _mutate_map(lambda wm: list(wm.items())[1:]),
    "an entry added": _mutate_map(lambda wm: list(wm.items()) + [("ghost.weight", min(wm.values()))]),
    "an entry in the wrong shard": _mutate_map(
        lambda wm: [(n, max(wm.values()) if n == "lm_head.weight" and s != max(wm.values()) else min(wm.values()) if n == "lm_head.weight" else s) for n, s in wm.items()]
    ),
    "a shard named ./x": _mutate_map(lambda wm: [(n, "./" + s) for n, s in wm.items()]),
    "a shard named by an absolute path": _mutate_map(lambda wm: [(n, "/abs/" + s) for n, s in wm.items()]),
}


def _duplicate_far_apart(d):
    """One name given twice (first and last line, same shard), another of that shard dropped:
    the entry count is right, a name is missing, and json.loads keeps one of the two."""
    names = _first_shard_names(d["weight_map"])
    dup, dropped = names[0], names[1]
    lines = [f'    {json.dumps(n)}: {json.dumps(s)}' for n, s in d["weight_map"].items() if n != dropped]
    lines.append(f'    {json.dumps(dup)}: {json.dumps(d["weight_map"][dup])}')
    return '{\n  "metadata": ' + json.dumps(d["metadata"]) + ',\n  "weight_map": {\n' + ",\n".join(lines) + "\n  }\n}\n"


def _duplicate_adjacent(d):
    text = json.dumps(d, indent=2)
    line = next(x for x in text.splitlines() if "lm_head.weight" in x).rstrip(",")
    return text.replace(line, line + ",\n" + line, 1)


VARIANTS["a name twice, another missing"] = _duplicate_far_apart
VARIANTS["a name twice in a row"] = _duplicate_adjacent

DEEP = "[" * 3000 + "]" * 3000  # past json.loads' recursion limit


def _with_value(value_json):
    return lambda d: json.dumps(d, indent=2).replace('"lm_head.weight": "', '"lm_head.weight": ' + value_json + ', "x": "', 1)


VARIANTS |= {
    # found by review: the piecewise check must not crash where the whole parse reports
    "deep nesting after a broken map": lambda d: '{"weight_map": {"a": garbage}, "x": ' + DEEP + "}",
    "deep value first, a bad byte later": lambda d: json.dumps(d, indent=2)
    .replace('"weight_map": {', '"weight_map": {\n    "q": ' + DEEP + ",", 1)
    .replace("odd}name", "odd\udcffname"),
    "deep metadata": lambda d: json.dumps(d, indent=2).replace('"total_size"', '"deep": ' + DEEP + ', "total_size"', 1),
    "blank lines before the closing brace": lambda d: json.dumps(d, indent=2).replace('"\n  }', '"' + "\n" * 20000 + "  }"),
    "a list as a value": _with_value('["model-00001-of-00003.safetensors"]'),
    "NaN as a value": _with_value("NaN"),
    "null as a value": _with_value("null"),
    "a shard name too long to look up": _mutate_map(lambda wm: [(n, "x" * 5000 + ".safetensors") for n in wm]),
    "a NUL in a shard name": _mutate_map(lambda wm: [(n, "x\u0000.safetensors") for n in wm]),
}


@pytest.fixture(params=[1, 9, 1 << 16], ids=["pieces-of-a-line", "pieces-of-9-bytes", "pieces-of-64k"])
def piece_size(request, monkeypatch):
    monkeypatch.setattr(source, "_INDEX_PIECE_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_common_spellings_are_settled_piecewise_with_the_same_result(tmp_path, monkeypatch, piece_size, spelling):
    root = _checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(SPELLINGS[spelling](load_index(root)), encoding="utf-8")
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert said is not None, "the piecewise check should have settled this index"
    assert with_pieces == whole and with_pieces[0] == "ok"
    assert len(with_pieces[3]) == 13 and with_pieces[3]['quote"name.weight'] in with_pieces[1]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_gets_the_verdict_of_the_whole_parse(tmp_path, monkeypatch, piece_size, variant):
    root = _checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(VARIANTS[variant](load_index(root)), encoding="utf-8", errors="surrogateescape")
    with_pieces, whole, said = _both_ways(root, monkeypatch)  # nothing but InputError escapes
    assert with_pieces == whole
    if said is not None:  # it vouched for the map: only the size check can still object
        assert whole[0] == "ok" or "metadata.total_size" in whole[2]


def test_shards_beside_the_index_do_not_change_the_verdict(tmp_path, monkeypatch, piece_size):
    """An unnamed shard with names of its own is settled piecewise and reported; a copy of a
    named shard, or a broken file, goes the long way or is ignored, with the same result."""
    root = _checkpoint(tmp_path)
    # names of its own: rename every tensor of a one-file checkpoint
    own = write_checkpoint(
        tmp_path / "own",
        Layout("x", {"model_type": "llama"}, [("extra.a.weight", "F32", (3,)), ("extra.b.weight", "F32", (1,))]),
        data="random",
        tokenizer=False,
    )
    (root / "aaa-own.safetensors").write_bytes((own / "model.safetensors").read_bytes())
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert said is not None and with_pieces == whole
    assert "aaa-own.safetensors" not in with_pieces[1]
    assert any("aaa-own.safetensors" in w and "not referenced" in w for w in with_pieces[2])

    first = sorted(root.glob("model-*.safetensors"))[0]
    (root / "zzz-copy.safetensors").write_bytes(first.read_bytes())
    (root / "broken.safetensors").write_bytes(b"\xff" * 16)
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert said is None and with_pieces == whole and with_pieces[0] == "ok"
    assert "zzz-copy.safetensors" not in with_pieces[1]


def test_a_named_shard_that_is_missing_or_broken_is_the_same_outcome(tmp_path, monkeypatch, piece_size):
    root = _checkpoint(tmp_path)
    shards = sorted(root.glob("model-*.safetensors"))
    shards[1].write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x00" * 3)
    with_pieces, whole, _ = _both_ways(root, monkeypatch)
    assert with_pieces == whole and with_pieces[0] == "error" and shards[1].name in with_pieces[2]
    shards[1].unlink()  # missing is not broken: a partial download, read from the index
    with_pieces, whole, _ = _both_ways(root, monkeypatch)
    assert with_pieces == whole and with_pieces[0] == "ok" and shards[1].name not in with_pieces[1]
    assert with_pieces[3][next(t for t, r in with_pieces[3].items() if r == shards[1].name)] == shards[1].name
    assert any("1 of the" in w and "shards it lists is not present" in w for w in with_pieces[2])


def test_the_index_is_mapped_read_only_and_left_as_it_was(tmp_path, monkeypatch):
    root = _checkpoint(tmp_path)
    before = (root / INDEX_NAME).read_bytes()
    with_pieces, _, said = _both_ways(root, monkeypatch)
    assert said is not None and with_pieces[0] == "ok"
    assert (root / INDEX_NAME).read_bytes() == before


def _plain_checkpoint(tmp_path):
    """The checkpoint above without its odd names: an index in shard order can be settled by
    comparing its text with the names the headers hold."""
    tensors = [("model.embed_tokens.weight", "BF16", (16, 8))]
    for i in range(3):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", "BF16", (8,)), (p + "mlp.up_proj.weight", "BF16", (16, 8)), (p + "caf\u00e9", "F32", (2,))]
    tensors += [("lm_head.weight", "BF16", (16, 8))]
    layout = Layout("plain-llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 3}, tensors)
    return write_checkpoint(tmp_path / "m", layout, data="random", max_shard_bytes=layout.total_bytes // 3 + 1, tokenizer=False)


def _dumps(d, **kw):
    return json.dumps(d, ensure_ascii=False, **kw)


SHARD_ORDER = {
    "indent 2": lambda d: _dumps(d, indent=2),
    "indent 4, CRLF": lambda d: _dumps(d, indent=4).replace("\n", "\r\n"),
    "one line": lambda d: _dumps(d),
    "compact": lambda d: _dumps(d, separators=(",", ":")),
    "tabs, trailing blank lines": lambda d: _dumps(d, indent="\t").replace('"\n\t}', '"\n\n\n\t}'),
}
SHARD_ORDER_DEFECTS = {
    "a pair given twice": lambda d: _dumps(d, indent=2).replace('"lm_head.weight"', '"model.embed_tokens.weight": "%s",\n    "lm_head.weight"'
                                                                    % d["weight_map"]["model.embed_tokens.weight"], 1),
    "a name in the wrong shard": lambda d: _dumps({**d, "weight_map": {**d["weight_map"], "lm_head.weight": "model-00001-of-00003.safetensors"}}, indent=2),
    "a trailing comma": lambda d: _dumps(d, indent=2).replace('"\n  }', '",\n  }'),
    "a name escaped": lambda d: _dumps(d, indent=2).replace('"lm_head', '"\\u006cm_head'),
    "non-ASCII escaped": lambda d: json.dumps(d, indent=2),
    "a pair missing": lambda d: _dumps({**d, "weight_map": {n: s for n, s in d["weight_map"].items() if n != "lm_head.weight"}}, indent=2),
    "a comment after the last pair": lambda d: _dumps(d, indent=2).replace('"\n  }', '" // x\n  }'),
    "a separator spelled otherwise once": lambda d: _dumps(d, indent=2).replace(',\n    "model.layers.1.', ' ,\n    "model.layers.1.', 1),
}


def _in_shard_order(root):
    """The index with its weight map in shard order, each shard's names in header order."""
    from mxtrim_tui.core.read.safetensors_io import read_header

    doc = load_index(root)
    shards = sorted(set(doc["weight_map"].values()))
    doc["weight_map"] = {name: shard for shard in shards for name in read_header(root / shard).names}
    return doc


@pytest.mark.parametrize("spelling", sorted(SHARD_ORDER))
def test_an_index_in_shard_order_is_settled_by_one_comparison(tmp_path, monkeypatch, spelling):
    root = _plain_checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(SHARD_ORDER[spelling](_in_shard_order(root)), encoding="utf-8")
    compared = _spy(monkeypatch, "_spelled_in_shard_order")
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert compared[0] is True and said is not None
    assert with_pieces == whole and with_pieces[0] == "ok" and len(with_pieces[3]) == 11


@pytest.mark.parametrize("defect", sorted(SHARD_ORDER_DEFECTS))
def test_a_defect_in_a_shard_order_index_is_never_settled_by_the_comparison(tmp_path, monkeypatch, defect):
    root = _plain_checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(SHARD_ORDER_DEFECTS[defect](_in_shard_order(root)), encoding="utf-8")
    compared = _spy(monkeypatch, "_spelled_in_shard_order")
    with_pieces, whole, _ = _both_ways(root, monkeypatch)
    assert True not in compared
    assert with_pieces == whole


def _append_to_last_shard(root, name):
    """The last shard written again with one more tensor, ``name``, at its end."""
    from mxtrim_tui.core.read.safetensors_io import build_header_bytes, read_header

    shard = sorted(root.glob("*.safetensors"))[-1]
    header = read_header(shard)
    body = shard.read_bytes()[header.data_start:]
    entries = [(t.name, t.dtype, t.shape, t.end - t.begin) for t in header.by_offset()] + [(name, "F32", (2,), 8)]
    prefix, _ = build_header_bytes(entries, header.metadata)
    shard.write_bytes(prefix + body + bytes(8))


def test_a_name_held_by_two_shards_is_never_settled_by_the_comparison(tmp_path, monkeypatch):
    """The index lists every shard's names in order, so it names the tensor twice, once with
    each shard: the comparison holds, and the check must still send it the long way."""
    root = _plain_checkpoint(tmp_path)
    _append_to_last_shard(root, "model.embed_tokens.weight")
    from mxtrim_tui.core.read.safetensors_io import read_header

    doc = load_index(root)
    pairs = [(n, shard.name) for shard in sorted(root.glob("*.safetensors")) for n in read_header(shard).names]
    body = ",\n".join(f"    {_dumps(n)}: {_dumps(r)}" for n, r in pairs)
    (root / INDEX_NAME).write_text('{\n  "metadata": %s,\n  "weight_map": {\n%s\n  }\n}\n' % (json.dumps(doc["metadata"]), body), encoding="utf-8")
    compared = _spy(monkeypatch, "_spelled_in_shard_order")
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert compared == [True] and said is None
    assert with_pieces == whole and with_pieces[0] == "error" and "model.embed_tokens.weight" in with_pieces[2]


@pytest.mark.parametrize("spelling", sorted(SHARD_ORDER))
def test_names_a_header_escapes_in_a_shard_order_index_get_the_verdict_of_the_whole_parse(tmp_path, monkeypatch, spelling):
    """Names holding a quote, a tab or a line break are escaped in their header and in the
    index: the comparison of raw names cannot vouch for them, whatever it finds."""
    root = _checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(SHARD_ORDER[spelling](_in_shard_order(root)), encoding="utf-8")
    with_pieces, whole, _ = _both_ways(root, monkeypatch)
    assert with_pieces == whole and with_pieces[0] == "ok" and len(with_pieces[3]) == 13


def _sorted_index(root, spelling="indent 2"):
    doc = _in_shard_order(root)
    doc["weight_map"] = dict(sorted(doc["weight_map"].items()))
    return SHARD_ORDER[spelling](doc)


@pytest.mark.parametrize("at_once", [1, 3, 2048])
@pytest.mark.parametrize("spelling", sorted(SHARD_ORDER))
def test_an_index_with_sorted_keys_is_settled_by_comparing_its_text(tmp_path, monkeypatch, spelling, at_once):
    """``save_pretrained`` writes the index with its keys sorted: such a weight map is compared
    with the headers' names sorted (``at_once`` pairs at a time), and the verdict is the whole
    parse's."""
    monkeypatch.setattr(source, "_SORTED_PAIRS_AT_ONCE", at_once)
    root = _plain_checkpoint(tmp_path)
    (root / INDEX_NAME).write_text(_sorted_index(root, spelling), encoding="utf-8")
    compared = _spy(monkeypatch, "_spelled_sorted")
    with_pieces, whole, said = _both_ways(root, monkeypatch)
    assert compared == [True] and said is not None
    assert with_pieces == whole and with_pieces[0] == "ok" and len(with_pieces[3]) == 11


SORTED_DEFECTS = {
    "two names swapped": lambda text: text.replace('"lm_head.weight"', '"@@"', 1).replace('"model.embed_tokens.weight"', '"lm_head.weight"', 1)
    .replace('"@@"', '"model.embed_tokens.weight"', 1),
    "a name in the wrong shard": lambda text: re.sub(r'"lm_head.weight": "model-0000\d', '"lm_head.weight": "model-00001', text, count=1),
    "a pair given twice": lambda text: text.replace('"lm_head.weight"', '"lm_head.weight": "x",\n    "lm_head.weight"', 1),
    "a pair missing": lambda text: "\n".join(line for line in text.splitlines() if '"lm_head.weight"' not in line),
    "non-ASCII escaped": lambda text: text.replace("caf\u00e9", "caf\\u00e9"),
    "a trailing comma": lambda text: text.replace('"\n  }', '",\n  }'),
}


@pytest.mark.parametrize("at_once", [3, 2048])
@pytest.mark.parametrize("defect", sorted(SORTED_DEFECTS))
def test_a_defect_in_a_sorted_index_is_never_settled_by_the_comparison(tmp_path, monkeypatch, defect, at_once):
    monkeypatch.setattr(source, "_SORTED_PAIRS_AT_ONCE", at_once)
    root = _plain_checkpoint(tmp_path)
    text = _sorted_index(root)
    changed = SORTED_DEFECTS[defect](text)
    assert changed != text
    (root / INDEX_NAME).write_text(changed, encoding="utf-8")
    compared = _spy(monkeypatch, "_spelled_sorted")
    with_pieces, whole, _ = _both_ways(root, monkeypatch)
    assert True not in compared
    assert with_pieces == whole
