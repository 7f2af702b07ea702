"""Real-weight extraction: byte-exact copies, renaming, sharding, the standalone script,
verification, disk budget, refusals and interruption. Real files only, no mocks (the disk
refusal replaces psutil's free-space figure in-process; the check's logic runs for real)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import xxhash

from engine_support import REPO, cli_argv, plan_for, run_cli, tree_digest
from mxtrim_tui.core.write import writer
from mxtrim_tui.core.plan.disk_budget import check_free_space, estimate_output
from mxtrim_tui.core.plan.layout import build_extraction
from mxtrim_tui.core.write.extract_script import SCRIPT_NAME
from mxtrim_tui.core.read.source import INDEX_NAME, open_source
from mxtrim_tui.core.checks.structure import CHECKED, NOT_CHECKED, PARTIAL, check_structure
from mxtrim_tui.core.units import DEFAULT_MAX_SHARD_BYTES
from mxtrim_tui.core.write.weights_writer import AccountingError, Cancelled, check_accounting, extraction_script, write_weights
from mxtrim_tui.core.write.writer import OutputError, write_dummy
from synth.checkpoint import write_checkpoint
from synth.layouts import all_layouts

LAYOUTS = all_layouts()


# --- an independent reader: plain file reads, no mxtrim code ----------------------------
def st_read(path: Path) -> tuple[int, dict | None, dict]:
    """(data start, __metadata__, {name: entry}) of a safetensors file."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    meta = header.pop("__metadata__", None)
    return 8 + n, meta, header


def st_tensors(root: Path) -> dict[str, tuple[str, str, list, bytes]]:
    """Every tensor of a directory: name -> (file, dtype, shape, bytes)."""
    out = {}
    for path in sorted(root.glob("*.safetensors")):
        start, _, header = st_read(path)
        with open(path, "rb") as fh:
            for name, info in header.items():
                b, e = info["data_offsets"]
                fh.seek(start + b)
                out[name] = (path.name, info["dtype"], info["shape"], fh.read(e - b))
    return out


def expected_renames(names, prefix: str, keep: list[int], mtp: tuple[int, int] | None = None) -> dict[str, str]:
    """new name -> old name: layers ``prefix{keep[k]}`` become ``prefix{k}``, an absolute MTP
    layer ``prefix{old}`` becomes ``prefix{new}``, other layers of that prefix are dropped,
    everything else keeps its name."""
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)\.(.*)$")
    out = {}
    for n in names:
        m = pat.match(n)
        if not m:
            out[n] = n
            continue
        i, rest = int(m.group(1)), m.group(2)
        if i in keep:
            out[f"{prefix}{keep.index(i)}.{rest}"] = n
        elif mtp is not None and i == mtp[0]:
            out[f"{prefix}{mtp[1]}.{rest}"] = n
    return out


def run_script(script: Path, source: Path, out: Path, *extra, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(script), "--source", str(source), "--out", str(out), *extra],
                          capture_output=True, text=True, **kw)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".extract-" in p.name)


# --- fixtures -----------------------------------------------------------------------------
CASES = {
    # key: (layout kwargs, keep, text prefix, absolute MTP (old, new) or None, output shard bytes, source shard bytes)
    "deepseek_v3": (dict(num_layers=4, num_experts=4, hidden_size=256, vocab_size=512), [0, 2], "model.layers.", (4, 2), 1_000_000, 2_000_000),
    "glm_moe_dsa": (dict(num_layers=4, num_experts=4, hidden_size=256, vocab_size=512), [0, 3], "model.layers.", (4, 2), 1_000_000, 2_000_000),
    "qwen3_next": (dict(num_layers=4, num_experts=4, hidden_size=256, vocab_size=512), [0, 3], "model.layers.", None, 2_000_000, 3_000_000),
    "gemma3": (dict(num_layers=6, vision_depth=2, hidden_size=256, vision_hidden_size=128, vocab_size=512), [0, 5], "language_model.model.layers.", None, 5_000_000_000, 5_000_000_000),
    "gpt_oss": (dict(num_layers=4, num_experts=4, hidden_size=256, vocab_size=512), [0, 1], "model.layers.", None, 1_000_000, 1_500_000),
    "qwen2_5_awq": (dict(num_layers=4, hidden_size=256, vocab_size=512), [0, 1], "model.layers.", None, 5_000_000_000, 5_000_000_000),
}


@pytest.fixture(scope="module")
def random_source(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(key: str) -> Path:
        if key not in cache:
            kw, _, _, _, _, src_shard = CASES[key]
            cache[key] = write_checkpoint(tmp_path_factory.mktemp("src") / key, LAYOUTS[key](**kw), data="random", max_shard_bytes=src_shard)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def trimmed(random_source, tmp_path_factory):
    """key -> (source, output, result, progress events): one write per family."""
    cache = {}

    def get(key: str):
        if key not in cache:
            src = random_source(key)
            _, keep, _, _, out_shard, _ = CASES[key]
            plan = plan_for(src, [",".join(map(str, keep))])
            assert not plan.errors, [i.message for i in plan.errors]
            events: list[dict] = []
            before = tree_digest(src)
            result = write_weights(plan, tmp_path_factory.mktemp("out") / f"{key}-weights", max_shard_bytes=out_shard, progress=events.append)
            assert tree_digest(src) == before, "the source changed"
            cache[key] = (src, result.path, result, events, plan)
        return cache[key]

    return get


# --- byte-exact extraction, per family ------------------------------------------------------
@pytest.mark.parametrize("key", sorted(CASES))
def test_output_is_the_renamed_source_byte_for_byte(trimmed, key):
    src, out, result, _, _ = trimmed(key)
    _, keep, prefix, mtp, out_shard, _ = CASES[key]
    source = st_tensors(src)
    written = st_tensors(out)
    want = expected_renames(source, prefix, keep, mtp)
    assert set(written) == set(want)
    for new, old in want.items():
        _, dtype, shape, data = written[new]
        s_file, s_dtype, s_shape, s_data = source[old]
        assert (dtype, shape) == (s_dtype, s_shape), new
        assert data == s_data, f"{new} differs from {old}"

    # the manifest records the same digests, source and written, for every tensor
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hash"] == "xxh3_128"
    rows = {r["name"]: r for r in manifest["tensors"]}
    assert set(rows) == set(want)
    for new, old in want.items():
        row = rows[new]
        assert row["source_name"] == old and row["source_file"] == source[old][0]
        assert row["source_xxh3_128"] == row["written_xxh3_128"] == xxhash.xxh3_128(source[old][3]).hexdigest()
        b, e = row["source_range"]
        with open(src / row["source_file"], "rb") as fh:
            fh.seek(b)
            assert fh.read(e - b) == source[old][3]
    dropped = {d["name"] for d in manifest["dropped"]}
    assert dropped == set(source) - set(want.values())
    assert all(d["reason"] for d in manifest["dropped"])
    assert set(manifest["source_headers"]) == {p.name for p in src.glob("*.safetensors")}

    # layout: standard names, an index only when sharded, metadata of the source
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    total = sum(len(d) for *_, d in written.values())
    if len(shards) == 1:
        assert shards == ["model.safetensors"] and not (out / INDEX_NAME).exists()
    else:
        n = len(shards)
        assert shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
        index = json.loads((out / INDEX_NAME).read_text())
        assert index["metadata"]["total_size"] == total
        assert index["weight_map"] == {name: f for name, (f, *_) in written.items()}
    if out_shard < total:
        assert len(shards) > 1
    first_meta = st_read(sorted(src.glob("*.safetensors"))[0])[1]
    for s in shards:
        assert st_read(out / s)[1] == first_meta
        data_bytes = sum(len(d) for f, *_, d in written.values() if f == s)
        assert data_bytes <= out_shard or len([1 for f, *_ in written.values() if f == s]) == 1
    opened = open_source(out)  # strict headers + index cross-check
    assert opened.tensor_count == len(want)

    # output order: embeddings first, then layers in new order, then MTP, then the rest
    order = [name for s in shards for name in st_read(out / s)[2]]
    assert "embed_tokens" in order[0]
    layer_of = [int(m.group(1)) for n in order if (m := re.match(rf"^{re.escape(prefix)}(\d+)\.", n))]
    assert layer_of == sorted(layer_of)


@pytest.mark.parametrize("key", sorted(CASES))
def test_script_reproduces_identical_shards_and_refuses_a_changed_source(trimmed, key, tmp_path):
    src, out, _, _, _ = trimmed(key)
    script = out / SCRIPT_NAME
    # standalone: standard library imports only, but for xxhash, imported inside new_hash
    # (only --hash xxh3_128, which mxtrim's own run passes, needs it)
    tree = ast.parse(script.read_text())
    hasher = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "new_hash")
    lazy = {a.name for n in ast.walk(hasher) if isinstance(n, ast.Import) for a in n.names}
    assert lazy == {"xxhash"}
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - lazy <= set(sys.stdlib_module_names), imported - lazy - set(sys.stdlib_module_names)

    weights = sorted(p.name for p in out.glob("*.safetensors")) + ([INDEX_NAME] if (out / INDEX_NAME).exists() else [])
    # by default each tensor is hashed as it is copied and checked against its recorded digest
    again = tmp_path / "again"
    proc = run_script(script, src, again, "--progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in again.iterdir()) == sorted(weights)
    for name in weights:
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    events = [json.loads(line) for line in proc.stderr.splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "done" and events[-1]["method"] == "mapped"
    assert any(e["event"] == "tensor" and {"name", "done_bytes", "total_bytes", "shard"} <= set(e) for e in events)

    # without the check and --hash: page-congruent ranges go through copy_file_range, the others the buffer
    unchecked = tmp_path / "unchecked"
    proc = run_script(script, src, unchecked, "--progress", "--skip-digest-check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in weights:
        assert (unchecked / name).read_bytes() == (out / name).read_bytes(), name
    method = json.loads(proc.stderr.splitlines()[-1])["method"]
    assert set(method.split(" + ")) <= {"copy_file_range", "buffered"}
    if hasattr(os, "copy_file_range"):
        assert "copy_file_range" in method

    # the output exists now: refused
    proc = run_script(script, src, again)
    assert proc.returncode == 1 and "already exists" in proc.stderr and len(proc.stderr.splitlines()) == 1

    # one header byte flipped (inside __metadata__: same length, still a valid file)
    changed = tmp_path / "changed"
    shutil.copytree(src, changed)
    victim = next(p for p in sorted(changed.glob("*.safetensors")))
    raw = bytearray(victim.read_bytes())
    pos = raw.index(b'"format":"pt"') + len(b'"format":"p')
    raw[pos] = ord("T")
    victim.write_bytes(bytes(raw))
    target = tmp_path / "from-changed"
    proc = run_script(script, changed, target)
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1 and "source changed" in proc.stderr
    assert not target.exists() and leftovers(tmp_path) == []


def test_changed_tensor_metadata_is_refused(trimmed, tmp_path):
    src, out, _, _, _ = trimmed("deepseek_v3")
    changed = tmp_path / "changed"
    shutil.copytree(src, changed)
    # rename one tensor by one character: same header length, different metadata
    victim = next(p for p in sorted(changed.glob("*.safetensors")) if b"model.norm.weight" in p.read_bytes()[:65536])
    raw = victim.read_bytes()
    victim.write_bytes(raw.replace(b'"model.norm.weight"', b'"model.norm.weighT"', 1))
    proc = run_script(out / SCRIPT_NAME, changed, tmp_path / "x")
    assert proc.returncode == 1 and "header differs" in proc.stderr
    assert not (tmp_path / "x").exists() and leftovers(tmp_path) == []


def test_changed_tensor_data_under_an_intact_header_is_refused_naming_the_tensor(trimmed, tmp_path):
    src, out, _, _, _ = trimmed("deepseek_v3")
    script = out / SCRIPT_NAME
    manifest = json.loads((out / "manifest.json").read_text())
    recorded = next(t for t in manifest["tensors"] if ".mlp.experts." in t["name"])
    changed = tmp_path / "changed"
    shutil.copytree(src, changed)
    victim = changed / recorded["source_file"]
    with open(victim, "r+b") as fh:  # one byte inside the tensor's data: the header is untouched
        fh.seek(recorded["source_range"][0] + 1)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    target = tmp_path / "from-changed"
    proc = run_script(script, changed, target, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"tensor {recorded['source_name']!r} (output {recorded['name']!r})" in proc.stderr
    assert "tensor data changed" in proc.stderr and str(victim) in proc.stderr
    assert not target.exists() and leftovers(tmp_path) == []
    # the user who knows the data changed can still extract it
    proc = run_script(script, changed, target, "--skip-digest-check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    differ = [(a, b) for f in out.glob("*.safetensors") for a, b in zip((out / f.name).read_bytes(), (target / f.name).read_bytes()) if a != b]
    assert len(differ) == 1  # exactly the flipped byte
    # the recorded digests are the manifest's: one per written tensor, nothing else
    table = re.search(r"^TENSOR_DIGESTS = \{\n(.*?)^\}", script.read_text(), re.S | re.M).group(1)
    pairs = dict(re.findall(r'^    "([^"]+)": "([0-9a-f]+)",$', table, re.M))
    assert pairs == {t["name"]: t["written_xxh3_128"] for t in manifest["tensors"]}
    # a hand-edited table is refused before anything is read
    edited = tmp_path / SCRIPT_NAME
    edited.write_text(script.read_text().replace(f'    "{recorded["name"]}": ', '    "renamed.weight": ', 1))
    proc = run_script(edited, src, tmp_path / "y", cwd=tmp_path)
    assert proc.returncode == 1 and "do not match the tensor list" in proc.stderr


def test_buffered_fallback_is_byte_identical(trimmed, tmp_path):
    """Without os.copy_file_range the script copies through its bounded buffer."""
    src, out, _, _, _ = trimmed("deepseek_v3")
    dest = tmp_path / "buffered"
    code = (
        "import os, runpy, sys; del os.copy_file_range; "
        f"sys.argv = ['extract_weights.py', '--source', {str(src)!r}, '--out', {str(dest)!r}, '--progress', '--skip-digest-check']; "
        f"runpy.run_path({str(out / SCRIPT_NAME)!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr.splitlines()[0])["method"] == "buffered"
    for p in out.glob("*.safetensors"):
        assert (dest / p.name).read_bytes() == p.read_bytes()


def test_mtp_and_tied_heads_are_carried_as_they_are(trimmed, tmp_path):
    # DeepSeek: absolute MTP moved from N=4 to 2; lm_head present in the source -> kept
    _, out, _, _, plan = trimmed("deepseek_v3")
    names = set(st_tensors(out))
    assert "lm_head.weight" in names and any(n.startswith("model.layers.2.eh_proj") for n in names)
    assert json.loads((out / "config.json").read_text())["num_nextn_predict_layers"] == 1
    # Qwen3-Next: relative mtp.* untouched
    _, out, _, _, _ = trimmed("qwen3_next")
    assert any(n.startswith("mtp.layers.0.") for n in st_tensors(out))
    # a tied model: no lm_head in the source, none in the output
    src = write_checkpoint(tmp_path / "tied", LAYOUTS["qwen3_small_tied"](num_layers=2, hidden_size=64, vocab_size=128), data="random")
    result = write_weights(plan_for(src, ["1"]), tmp_path / "tied-out")
    names = set(st_tensors(result.path))
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert st_tensors(result.path)["model.layers.0.mlp.up_proj.weight"][3] == st_tensors(src)["model.layers.1.mlp.up_proj.weight"][3]


def test_symlinked_shards_like_the_hub_cache(tmp_path):
    """Hub snapshots link every file to a blob: shards are read through the links."""
    blobs = tmp_path / "blobs"
    real = write_checkpoint(blobs / "real", LAYOUTS["llama3"](num_layers=3, hidden_size=64, vocab_size=128), data="random",
                            max_shard_bytes=60_000)
    snap = tmp_path / "snapshot"
    snap.mkdir()
    for p in real.iterdir():
        (snap / p.name).symlink_to(p)
    result = write_weights(plan_for(snap, ["0,2"]), tmp_path / "out")
    written = st_tensors(result.path)
    source = st_tensors(real)
    assert written["model.layers.1.self_attn.q_proj.weight"][3] == source["model.layers.2.self_attn.q_proj.weight"][3]
    assert not any(p.is_symlink() for p in result.path.iterdir())


# --- verification, report, progress ---------------------------------------------------------
def test_result_report_and_progress(trimmed):
    src, out, result, events, plan = trimmed("deepseek_v3")
    integ = result.integrity
    assert integ["hashes_matched"] == integ["tensors"] == len(plan.renames)
    assert integ["retained"] + integ["dropped"] == open_source(src).tensor_count
    # mxtrim's run hashes as it copies: every source range mapped, hashed and written from
    # the map (the script run alone uses copy_file_range: the reproduction test)
    assert result.copy_method == "mapped"
    assert integ["edges_compared"] == integ["tensors"] and integ["hash"] == "xxh3_128"

    stages = [(e["name"], e["status"]) for e in events if e["event"] == "stage"]
    for step in [("budget", "done"), ("extract", "start"), ("extract", "done"), ("verify", "start"), ("verify", "done"),
                 ("structure", "done"), ("write", "done")]:
        assert step in stages
    assert [s for s in stages if s in (("extract", "done"), ("verify", "start"), ("write", "done"))] == [
        ("extract", "done"), ("verify", "start"), ("write", "done")]
    tensors = [e for e in events if e["event"] == "tensor"]
    assert tensors and all({"name", "shard", "done_bytes", "total_bytes", "bytes_per_s", "eta_s"} <= set(e) for e in tensors)
    assert tensors[-1]["done_bytes"] == tensors[-1]["total_bytes"] == integ["tensor_bytes"]
    assert all("verified_bytes" in e for e in tensors)  # the written shards are read back during the copy
    verify = [e for e in events if e["event"] == "verify"]
    assert verify[-1]["done_bytes"] == verify[-1]["total_bytes"] == integ["tensor_bytes"]

    listed = {f["path"] for f in result.files}
    assert {SCRIPT_NAME, "manifest.json", "mxtrim-plan.json", "README.md", "config.json", INDEX_NAME} <= listed
    assert listed == {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}

    readme = (out / "README.md").read_text()
    assert "| mode | real weights |" in readme
    assert "--load-format" not in readme and "vllm serve" in readme
    for section in ("## Checkpoint integrity", "## Tensor coverage", "## Structure check"):
        assert section in readme
    assert f"`{SCRIPT_NAME}`" in readme and "`manifest.json`" in readme
    assert "vllm serve loads the real weights and starts (health endpoint) | unverified" in readme
    assert "loadable" not in readme.lower()
    assert "text layer 1 not kept" in readme  # dropped reasons
    plan_doc = json.loads((out / "mxtrim-plan.json").read_text())
    assert plan_doc["mode"] == "weights" and plan_doc["output"] == str(out)


@pytest.mark.parametrize("key", sorted(CASES))
def test_structure_check_per_family(trimmed, key):
    _, _, result, _, _ = trimmed(key)
    st = result.structure
    assert st.problems == 0, st.details
    quantized = key in ("deepseek_v3", "glm_moe_dsa", "gpt_oss", "qwen2_5_awq")
    assert st.status == (PARTIAL if quantized else CHECKED), st.summary
    if CASES[key][3] is not None or key == "qwen3_next":
        assert any("MTP" in reason for reason in st.ignored)


def test_structure_check_reports_mismatches_and_missing(trimmed, tmp_path):
    src, out, _, _, plan = trimmed("gemma3")
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] += 8  # every text MLP weight now has the wrong shape
    cfg["text_config"]["num_hidden_layers"] = 3  # and a third layer is expected but absent
    cfg["text_config"]["layer_types"] = cfg["text_config"]["layer_types"] + ["sliding_attention"]
    (broken / "config.json").write_text(json.dumps(cfg))
    st = check_structure(broken, plan)
    assert st.status == CHECKED
    assert any("mlp.down_proj.weight" in n for n, _, _ in st.mismatched)
    assert any(".layers.2." in m for m in st.missing)
    # an architecture transformers does not know
    cfg["model_type"] = "no_such_model"
    (broken / "config.json").write_text(json.dumps(cfg))
    st = check_structure(broken, plan)
    assert st.status == NOT_CHECKED and "config" in st.summary


def test_structure_not_checked_for_custom_code(tmp_path):
    """Kimi-K2 needs its own modelling code: never executed, never prompted for."""
    layout = LAYOUTS["kimi_k2"](num_layers=3, num_experts=4, hidden_size=256, vocab_size=512)
    src = write_checkpoint(tmp_path / "kimi", layout, data="random")
    result = write_weights(plan_for(src), tmp_path / "out")
    assert result.structure.status == NOT_CHECKED and "auto_map" in result.structure.summary
    readme = (result.path / "README.md").read_text()
    assert "not checked" in readme and "config loads offline (AutoConfig, local files only) | unverified" in readme


def test_disk_estimate_is_exact_for_what_it_does_not_call_estimate(trimmed):
    src, out, result, _, plan = trimmed("deepseek_v3")
    est = estimate_output(plan, CASES["deepseek_v3"][4])
    assert est == result.estimate
    parts = dict(est.parts)
    shards = list(out.glob("*.safetensors"))
    assert est.tensor_bytes + est.header_bytes == sum(p.stat().st_size for p in shards)
    assert parts[INDEX_NAME] == (out / INDEX_NAME).stat().st_size
    labels = [label for label, _ in est.parts]
    assert labels[0] == "embeddings / head" and labels[1].startswith("text layer 0") and labels[2].startswith("text layer 1 (was 2)")
    assert any(label.startswith("MTP") for label in labels)
    assets = next(n for label, n in est.parts if label.startswith("config and assets"))
    written = [f for f in result.files if f["from"] in ("rewritten",) or f["from"].startswith("copied")]
    assert assets == sum(f["bytes"] for f in written)
    generated = next(n for label, n in est.parts if "estimate" in label)
    actual = sum((out / n).stat().st_size for n in (SCRIPT_NAME, "manifest.json", "mxtrim-plan.json", "README.md"))
    assert actual <= generated
    assert est.total >= sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    ok, free, message = check_free_space(est, out.parent / "new")
    assert ok and free > 0 and "needs" in message


# --- refusals ---------------------------------------------------------------------------------
def test_refuses_existing_output_and_output_inside_source(random_source, tmp_path):
    src = random_source("gpt_oss")
    plan = plan_for(src, ["0,1"])
    before = tree_digest(src)
    existing = tmp_path / "exists"
    existing.mkdir()
    with pytest.raises(OutputError, match="already exists"):
        write_weights(plan, existing)
    with pytest.raises(OutputError, match="inside the source"):
        write_weights(plan, src / "trimmed")
    assert tree_digest(src) == before and not (src / "trimmed").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_refuses_insufficient_disk_before_writing(random_source, tmp_path, monkeypatch):
    src = random_source("deepseek_v3")
    plan = plan_for(src, ["0,2"])
    est = estimate_output(plan, 1_000_000)
    real = psutil.disk_usage
    gib = 1 << 30

    def small_disk(path):
        u = real(path)
        # a 100 GiB filesystem with the output plus 100 KiB free (margin: 1 MiB + a tenth)
        return type(u)(100 * gib, 100 * gib - est.total - 100 * 1024, est.total + 100 * 1024, 99.0)

    monkeypatch.setattr(psutil, "disk_usage", small_disk)
    ok, free, message = check_free_space(est, tmp_path / "out")
    assert not ok and free == est.total + 100 * 1024
    with pytest.raises(OutputError) as info:
        write_weights(plan, tmp_path / "out", max_shard_bytes=1_000_000)
    text = str(info.value)
    assert "not enough disk space" in text and f"{est.total:,} bytes" in text and f"{free:,} bytes" in text
    assert "embeddings / head" in text and "text layer 0" in text and "MTP" in text
    assert list(tmp_path.iterdir()) == []
    margin = writer.free_space_margin
    assert margin(100 * gib, 60 * gib) == 2 * gib and margin(10 * gib, 60 * gib) == gib
    # a 4 MB output keeps 1 MiB + 400 KB free, so it fits a 20 MB volume
    assert margin(20 * 10**6, 4 * 10**6) == (1 << 20) + 400_000


def test_refuses_unaccounted_tensors_before_writing(tmp_path):
    layout = LAYOUTS["llama3"](num_layers=2, hidden_size=64, vocab_size=128)
    # numbered like a layer of a stack the family does not know: its new name is unknown
    layout.tensors.append(("mystery.layers.0.buffer", "F32", (4,)))
    # outside every stack and not numbered: kept as it is
    layout.tensors.append(("mystery_buffer", "F32", (4,)))
    src = write_checkpoint(tmp_path / "src", layout, data="random")
    plan = plan_for(src, ["1"])
    assert ("mystery.layers.0.buffer", "unassigned: belongs to no known layer or part") in plan.dropped
    assert ("mystery_buffer", "mystery_buffer") in plan.renames
    assert check_accounting(plan)
    with pytest.raises(AccountingError, match="mystery.layers.0.buffer"):
        write_weights(plan, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    # dummy mode is unaffected
    assert write_dummy(plan, tmp_path / "dummy").path.exists()

    # a tensor the plan forgets (neither retained nor dropped), a name written twice
    clean = dataclasses.replace(plan, dropped=[d for d in plan.dropped if d[0] != "mystery.layers.0.buffer"])
    forgot = dataclasses.replace(clean, renames=clean.renames[:-1])
    assert any("neither retained nor dropped" in p for p in check_accounting(forgot))
    twice = dataclasses.replace(clean, renames=clean.renames + [(clean.renames[0][0] + "x", clean.renames[0][1])])
    assert any("written twice" in p for p in check_accounting(twice))
    with pytest.raises(AccountingError, match="neither retained nor dropped"):
        write_weights(forgot, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_refuses_a_plan_with_errors_and_a_config_only_source(tmp_path):
    src = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=2, hidden_size=64, vocab_size=128), data="random")
    with pytest.raises(OutputError, match="blocking errors"):
        write_weights(plan_for(src, ["7"]), tmp_path / "out")
    for p in src.glob("*.safetensors"):
        p.unlink()
    with pytest.raises(OutputError, match="no safetensors weights"):
        write_weights(plan_for(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- interruption --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_source(tmp_path_factory):
    """~120 MB of random bytes: copying takes long enough to be interrupted mid-way."""
    layout = LAYOUTS["llama3"](num_layers=2, hidden_size=1024, vocab_size=16384)
    return write_checkpoint(tmp_path_factory.mktemp("big") / "llama", layout, data="random", max_shard_bytes=60_000_000)


def _wait_for(proc, kind: str) -> list[dict]:
    seen = []
    for line in proc.stderr:
        if line.startswith("{"):
            event = json.loads(line)
            seen.append(event)
            if event["event"] == kind:
                return seen
    raise AssertionError(f"no {kind} event; saw {seen}")


@pytest.mark.slow
def test_sigterm_during_cli_trim_leaves_nothing(big_source, tmp_path):
    before = tree_digest(big_source)
    out = tmp_path / "models" / "llama-weights"
    cmd = cli_argv("trim", str(big_source), "--mode", "weights", "--keep", "0,1", "--out", str(out), "--progress")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO)
    events = _wait_for(proc, "tensor")
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    assert "interrupted" in rest
    child = next(e["pid"] for e in events if e["event"] == "stage" and e["name"] == "extract" and e["status"] == "start")
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []
    assert tree_digest(big_source) == before


def test_sigterm_during_script_removes_partial_output(big_source, tmp_path):
    plan = plan_for(big_source, ["0,1"])
    script = tmp_path / SCRIPT_NAME
    script.write_text(extraction_script(plan, build_extraction(plan, DEFAULT_MAX_SHARD_BYTES)))
    again = tmp_path / "again"
    proc = subprocess.Popen([sys.executable, "-I", str(script), "--source", str(big_source), "--out", str(again), "--progress"],
                            stderr=subprocess.PIPE, text=True)
    _wait_for(proc, "tensor")
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=30) == 130, rest
    assert "interrupted; partial output removed" in rest
    assert not again.exists() and leftovers(tmp_path) == []


def test_cancel_event_stops_and_cleans_up(big_source, tmp_path):
    """What a UI's Cancel button does: set an event from another thread."""
    import threading

    cancel = threading.Event()
    seen = []

    def progress(event):
        seen.append(event)
        if event["event"] == "tensor":
            cancel.set()

    with pytest.raises(Cancelled):
        write_weights(plan_for(big_source, ["0,1"]), tmp_path / "out", progress=progress, cancel=cancel, structure=False)
    child = next(e["pid"] for e in seen if e["event"] == "stage" and e["name"] == "extract")
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_weights_json(random_source, tmp_path):
    src = random_source("qwen2_5_awq")
    out = tmp_path / "awq"
    proc = run_cli("trim", str(src), "--mode", "weights", "--keep", "0", "--out", str(out), "--max-shard-size", "1MB", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "weights" and doc["output"] == str(out)
    assert doc["checks"]["vllm_load"] == "unverified"
    assert doc["checks"]["integrity"]["hashes_matched"] == doc["tensors"]["retained"]
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1
    # the unquantized module of layer 0 travels with its float weight
    assert "model.layers.0.mlp.down_proj.weight" in st_tensors(out)


@pytest.mark.slow
def test_cli_weights_with_sha256_records_sha256_of_every_tensor(random_source, tmp_path):
    """--hash sha256: the script hashes with SHA-256 as it copies, the manifest says so and
    every digest is the SHA-256 of the tensor's bytes."""
    src = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=2, hidden_size=64, vocab_size=128), data="random")
    out = tmp_path / "sha"
    proc = run_cli("trim", str(src), "--mode", "weights", "--keep", "1", "--out", str(out), "--hash", "sha256", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["checks"]["integrity"]["hash"] == "sha256"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hash"] == "sha256"
    written = st_tensors(out)
    for row in manifest["tensors"]:
        assert row["source_sha256"] == row["written_sha256"] == hashlib.sha256(written[row["name"]][3]).hexdigest()


def _swap_two_ranges(script_text: str) -> tuple[str, str]:
    """The script with the source ranges of two same-sized tensors swapped (a copier reading
    the wrong place); returns (text, the first swapped tensor's output name)."""
    entry = re.compile(r'^(\s+\[("[^"]+"), .*, )(\d+), (\d+)\],$', re.M)
    found = [(m, int(m.group(4)) - int(m.group(3))) for m in entry.finditer(script_text)]
    for i, (a, size) in enumerate(found):
        b = next((m for m, n in found[i + 1:] if n == size), None)
        if b is not None:
            break
    else:
        raise AssertionError("no two tensors of one size")
    swapped = {a.start(): f"{a.group(1)}{b.group(3)}, {b.group(4)}],", b.start(): f"{b.group(1)}{a.group(3)}, {a.group(4)}],"}
    out, pos = [], 0
    for m in sorted((a, b), key=lambda m: m.start()):
        out += [script_text[pos:m.start()], swapped[m.start()]]
        pos = m.end()
    return "".join(out) + script_text[pos:], json.loads(a.group(2))


def test_a_copy_from_the_wrong_place_is_caught_by_mxtrims_own_reads(tmp_path, monkeypatch):
    """The script hashes what it copies, so a script reading the wrong range agrees with
    itself; mxtrim compares the ends of every written tensor with the source at the planned
    offsets, read by itself, and refuses. Nothing is left."""
    from mxtrim_tui.core.write import weights_writer

    src = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=2, hidden_size=64, vocab_size=128), data="random")
    real = weights_writer.extraction_script
    victim = []

    def miswired(plan, extraction, digests=None):
        text, name = _swap_two_ranges(real(plan, extraction, digests))
        victim.append(name)
        return text

    monkeypatch.setattr(weights_writer, "extraction_script", miswired)
    out = tmp_path / "out"
    with pytest.raises(OutputError) as info:
        write_weights(plan_for(src, ["0,1"]), out, structure=False)
    assert victim and repr(victim[0]) in str(info.value) and "differ from the source" in str(info.value), info.value
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_a_written_byte_unlike_the_source_is_caught_by_its_digest(tmp_path, monkeypatch):
    """A script that hashes the source bytes right but writes one byte wrong in the middle of
    each large tensor (past the compared ends): the written range's digest, taken by mxtrim
    reading the shard back, differs from the script's digest of the source range."""
    from mxtrim_tui.core.write import weights_writer

    src = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=2, hidden_size=1024, vocab_size=16384), data="random")
    real = weights_writer.extraction_script
    faithful = "                    write_all(dst_fd, piece)\n"
    flip = ("                    write_all(dst_fd, piece if pos != offset - start + BUFFER else bytes([piece[0] ^ 0xFF]) + bytes(piece[1:]))\n")

    def corrupting(plan, extraction, digests=None):
        text = real(plan, extraction, digests)
        assert text.count(faithful) == 1
        return text.replace(faithful, flip)

    monkeypatch.setattr(weights_writer, "extraction_script", corrupting)
    out = tmp_path / "out"
    with pytest.raises(OutputError) as info:
        write_weights(plan_for(src, ["0,1"]), out, structure=False)
    assert "written bytes differ from the source range" in str(info.value), info.value
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_a_shard_left_short_after_the_script_ended_is_an_error_not_a_wait(tmp_path):
    """The reader that follows the script waits for bytes only while the script runs: once it
    has exited, a shard shorter than planned (or missing) is reported at once."""
    from mxtrim_tui.core.write.verify_stream import OutputFollower, VerifyFailed

    src = write_checkpoint(tmp_path / "src", LAYOUTS["llama3"](num_layers=2, hidden_size=64, vocab_size=128), data="random")
    extraction = build_extraction(plan_for(src, ["0,1"]), 60_000)
    assert len(extraction.shards) > 1
    written = tmp_path / "written"
    written.mkdir()
    first = extraction.shards[0]
    (written / first.file).write_bytes(first.header)  # the header, and the data never came
    for missing_too in (False, True):
        follower = OutputFollower(extraction, src, lambda: [written])
        follower.writer_done.set()
        if missing_too:
            (written / first.file).unlink()
        follower.start()
        follower.join(timeout=30)
        assert not follower.is_alive()
        assert isinstance(follower.error, VerifyFailed), follower.error
        assert ("was not written" if missing_too else "ends at byte") in follower.error.message


# --- tiny real models: transformers loads the trimmed checkpoint ------------------------------
@pytest.mark.parametrize("maker, keep", [("make_tiny_llama", "1"), ("make_tiny_qwen3", "1"), ("make_tiny_deepseek_v3_mtp", "0,2")])
def test_tiny_real_model_loads_and_runs(tmp_path, maker, keep):
    import torch
    from transformers import AutoModelForCausalLM

    from fixtures import tiny_models

    src = getattr(tiny_models, maker)(tmp_path / "src")
    plan = plan_for(src, [keep])
    result = write_weights(plan, tmp_path / "out")
    assert result.structure.status == CHECKED and result.structure.problems == 0, result.structure.details
    model, info = AutoModelForCausalLM.from_pretrained(result.path, local_files_only=True, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    logits = model(tiny_models.prompt_ids(result.path)).logits
    assert torch.isfinite(logits).all()
    # the kept layer's weights are the source layer's
    source = AutoModelForCausalLM.from_pretrained(src, local_files_only=True)
    kept = [int(k) for k in keep.split(",")]
    for new, old in enumerate(kept):
        a = dict(model.model.layers[new].named_parameters())
        b = dict(source.model.layers[old].named_parameters())
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(model.model.embed_tokens.weight, source.model.embed_tokens.weight)
