"""Real-weight output: the retained tensors, byte-exact, renamed, re-sharded, verified.

Steps, each refusing before anything is written when its check fails:

1. the plan has no blocking error; the output does not exist and is not inside the source;
2. accounting: every source tensor is retained or dropped with a reason, none unassigned;
3. disk: the exact output size (from headers) fits the free space minus a margin;
4. ``extract_weights.py`` is generated (standalone, source header hashes pinned) and *run*
   as a subprocess into the hidden temporary sibling, hashing every tensor as it copies it
   (each source byte is read once); its JSON-lines progress is forwarded. Meanwhile the
   written shards are read back and hashed a few megabytes behind it
   (:mod:`verify_stream`), and the transformers checks run in their own process: the
   structure check of the planned output, and, on a first trim whose plan verdict is not
   remembered, the plan check itself (its verdict is taken when the copy ends; a checked
   plan that writes otherwise or blocks discards the copy: :class:`PlanChanged`);
5. configs and assets are written as in dummy mode (shared code);
6. verification: every shard re-read with the strict header reader and compared byte for
   byte with the planned header, the index cross-checked (``open_source``), every written
   range's digest equal to its source range's, the first and last bytes of every tensor
   equal to the source's at the planned offsets, the source shards unchanged since before
   the copy, every kept layer's tensor set compared with the source layer's, and the
   structure compared with the reduced model transformers builds on the ``meta`` device;
7. ``manifest.json``, ``mxtrim-plan.json`` and ``README.md`` are written and the directory
   is renamed into place.

Any error or interruption (Ctrl-C; the CLI turns SIGTERM into KeyboardInterrupt) stops the
script, removes every partial file and leaves the source untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..plan.disk_budget import DiskEstimate, check_free_space, estimate_from_extraction
from .extract_script import SCRIPT_NAME, render_script
from ..plan.layout import Extraction, asset_files, build_extraction, encodes_utf8, utf8
from ..read.source_pins import shard_pins
from ..plan.build import TrimPlan
from ..plan.needed_shards import weights_blocker
from .launch_text import output_warnings
from .report import SERVE_SCRIPT, render_report
from ..read.safetensors_io import read_header
from ..read.source import INDEX_NAME, ModelSource, open_source
from ..child_process import NotStarted, parent_death_signal, start, terminate
from .leftovers import remove_leftovers, signals_held
from ..checks.structure import StructureJob, StructureResult, not_checked, planned_request
from .verify_stream import DEFAULT_HASH, OutputFollower, SourceSnapshot, VerifyFailed, hash_range
from ..units import DEFAULT_MAX_SHARD_BYTES
from .. import interrupts
from ..checks import cache as check_cache
from .writer import (
    PLAN_NAME,
    README_NAME,
    FileEvents,
    OutputError,
    WriteResult,
    make_parent,
    prepare_output,
    readme_entry,
    rename_into_place,
    temp_sibling,
    write_documents_and_assets,
    write_plan_json,
    write_serve_script,
    write_failed,
    write_text,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "mxtrim.manifest/2"  # /2: the hash is named ("hash"), xxh3_128 by default
# Files mxtrim writes itself; a source asset of the same name is not copied over them.
GENERATED = frozenset({SCRIPT_NAME, MANIFEST_NAME, PLAN_NAME, README_NAME, INDEX_NAME, SERVE_SCRIPT})
STRUCTURE_KIND = "structure"  # check_cache entries of the planned output's structure check
SCRIPT_STOP_TIMEOUT = 10.0  # seconds the script gets to clean up after SIGTERM


class AccountingError(OutputError):
    """Some source tensor is neither retained nor dropped with a reason."""


class VerificationError(OutputError):
    """The written checkpoint differs from the plan (nothing is left behind)."""


class Cancelled(Exception):
    """The caller's cancel event was set (the wizard's Cancel); everything partial is removed."""


class PlanChanged(Exception):
    """The plan's transformers check, run alongside the copy, changed what is written (an
    automatic selection widened) or made the plan unwritable (a mismatch, a blocking issue):
    the copy was thrown away, nothing is written; ``plan`` is the checked plan."""

    def __init__(self, plan: TrimPlan):
        super().__init__("the plan's check changed the plan; nothing written")
        self.plan = plan


def _check_cancel(cancel) -> None:
    interrupts.check()
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled; partial output removed")


@dataclass(frozen=True)
class WeightsWriteResult(WriteResult):
    estimate: DiskEstimate
    integrity: dict  # what verification established (shards, hashes, index, coverage)
    structure: StructureResult
    copy_method: str  # "copy_file_range", "buffered" or "copy_file_range + buffered"
    seconds: dict  # stage -> seconds
    # the plan written: the checked one when its check ran alongside the copy (``plan_check``)
    plan: TrimPlan | None = field(default=None, kw_only=True)


# --- accounting ---------------------------------------------------------------------------
def check_accounting(plan: TrimPlan) -> list[str]:
    """Problems that make a real-weight trim unsafe; empty when every source tensor is
    retained under a unique name or dropped with a known reason."""
    src = plan.inventory.source
    problems: list[str] = []
    retained = [o for o, _ in plan.renames]
    dropped = [t for t, _ in plan.dropped]

    def listing(names) -> str:
        names = sorted(names)
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    unassigned = [t for t, reason in plan.dropped if reason.startswith("unassigned")]
    if unassigned:
        problems.append(
            f"{len(unassigned)} tensor(s) belong to no known layer or part, so their new name is unknown: "
            f"{listing(unassigned)} (dummy mode is unaffected; a real-weight trim needs the family taught about them)"
        )
    both = set(retained) & set(dropped)
    if both:
        problems.append(f"{len(both)} tensor(s) are both retained and dropped: {listing(both)}")
    for what, names in (("retained", retained), ("dropped", dropped)):
        twice = [n for n, k in Counter(names).items() if k > 1]
        if twice:
            problems.append(f"{len(twice)} tensor(s) are {what} more than once: {listing(twice)}")
    known = set(retained) | set(dropped)
    neither = [t for t in src.tensor_shard if t not in known]
    if neither:
        problems.append(f"{len(neither)} source tensor(s) are neither retained nor dropped: {listing(neither)}")
    foreign = [t for t in known if t not in src.tensor_shard]
    if foreign:
        problems.append(f"{len(foreign)} planned tensor(s) are not in the source: {listing(foreign)}")
    collisions = [n for n, k in Counter(n for _, n in plan.renames).items() if k > 1]
    if collisions:
        problems.append(f"{len(collisions)} output name(s) would be written twice: {listing(collisions)}")
    return problems


# --- the script run -------------------------------------------------------------------------
class _Rate:
    """Bytes per second and ETA over the script's progress events."""

    def __init__(self):
        self.started = time.monotonic()

    def annotate(self, event: dict) -> dict:
        elapsed = time.monotonic() - self.started
        done, total = event.get("done_bytes"), event.get("total_bytes")
        if isinstance(done, int) and isinstance(total, int) and elapsed > 0:
            rate = done / elapsed
            event["elapsed_s"] = round(elapsed, 3)
            event["bytes_per_s"] = round(rate)
            event["eta_s"] = round((total - done) / rate, 1) if rate > 0 else None
        return event


def run_extraction_script(script: Path, source: Path, out: Path, emit, cancel=None, hash_name: str | None = None, seen=None) -> dict:
    """Run ``script`` (a generated extract_weights.py) with this Python into ``out``.

    Returns the script's ``done`` event. Its ``tensor``/``shard`` events are forwarded with
    bytes/s and ETA added; its start and end become ``stage`` events. ``hash_name``: the
    script hashes every tensor as it copies it (``--hash``); ``seen(event)`` receives every
    event of the script first (its ``digest`` events are not forwarded). On any exception
    here (including KeyboardInterrupt) the script is sent SIGTERM, which makes it remove its
    partial output, and waited for. ``cancel`` (a threading.Event) stops it the same way
    from another thread."""
    # -I: isolated mode (no PYTHON* variables, no user site, no script directory on the
    # path), which also proves the script needs nothing but the standard library (and,
    # with --hash xxh3_128, the xxhash package).
    cmd = [sys.executable, "-I", str(script), "--source", str(source), "--out", str(out), "--progress"]
    if hash_name:
        cmd += ["--hash", hash_name]
    # Its own session: a terminal's Ctrl-C reaches only mxtrim, which stops the script once
    # (SIGTERM) and waits for its clean-up. A parent-death signal stops it should mxtrim be
    # killed outright, instead of it finishing a copy nobody will verify.
    try:
        proc = start(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1,
                     start_new_session=True, preexec_fn=parent_death_signal())
    except NotStarted as exc:  # named by the interpreter: ``out`` is the partial folder, removed
        raise OutputError(None, f"{SCRIPT_NAME} could not be started: {exc}") from None
    rate = _Rate()
    done: dict | None = None
    error: str | None = None
    other: deque[str] = deque(maxlen=20)  # non-JSON stderr (a traceback): the end explains
    if cancel is not None:
        # readline blocks; a watcher stops the script as soon as cancel is set
        def watch():
            while proc.poll() is None:
                if cancel.wait(0.1):
                    stop_process(proc)
                    return

        threading.Thread(target=watch, name="mxtrim-cancel-watch", daemon=True).start()
    try:
        emit({"event": "stage", "name": "extract", "status": "start", "script": SCRIPT_NAME, "pid": proc.pid})
        for line in proc.stderr:
            line = line.rstrip("\n")
            event = None
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
            if not isinstance(event, dict):
                if line and not line.startswith("extract_weights: error:"):
                    other.append(line)
                continue
            kind = event.get("event")
            interrupts.check()
            if seen is not None:
                seen(event)
            if kind == "start":
                rate = _Rate()
                emit({"event": "stage", "name": "extract", "status": "running", **{k: v for k, v in event.items() if k != "event"}})
            elif kind == "tensor":
                emit(rate.annotate(event))
            elif kind == "shard":
                emit(event)
            elif kind == "done":
                done = event
            elif kind == "error":
                error = str(event.get("message"))
        rc = proc.wait()
        _check_cancel(cancel)
    except BaseException:
        stop_process(proc)
        raise
    finally:
        if proc.stderr is not None:
            proc.stderr.close()
    if rc != 0 or done is None:
        detail = error or (other[-1] if other else "no message")
        raise OutputError(out, f"{SCRIPT_NAME} failed (exit status {rc}): {detail}")
    emit({"event": "stage", "name": "extract", "status": "done", **{k: v for k, v in done.items() if k != "event"}})
    return done


def stop_process(proc: subprocess.Popen) -> None:
    """The script removes its partial output on SIGTERM: given SCRIPT_STOP_TIMEOUT, then killed."""
    terminate(proc, SCRIPT_STOP_TIMEOUT)


# --- verification ---------------------------------------------------------------------------
class CopyCheck:
    """What the copy itself established: the script's digest of every source range it read,
    the follower's digest of every written range, and the source shards' state before."""

    def __init__(self, plan: TrimPlan, extraction: Extraction, tmp: Path, hash_name: str):
        src = plan.inventory.source
        self.hash_name = hash_name
        self.extraction = extraction
        self.snapshot = SourceSnapshot(src.root, extraction.needed_source_files)
        self.source_digests: dict[str, str] = {}
        self.partial: Path | None = None  # the script's own hidden directory while it writes
        self.tmp = tmp
        self.follower = OutputFollower(extraction, src.root, self._folders, hash_name)

    def _folders(self):
        return [p for p in (self.partial, self.tmp) if p is not None]

    def seen(self, event: dict) -> None:
        """The script's events: its partial directory starts the follower; digests are kept."""
        kind = event.get("event")
        if kind == "start" and event.get("partial") and self.follower.ident is None:
            self.partial = Path(event["partial"])
            self.follower.start()
        elif kind == "digest":
            self.source_digests[str(event.get("name"))] = str(event.get("digest"))
        elif kind == "tensor":
            event["verified_bytes"] = self.follower.done_bytes  # the wizard keeps one bar: the copy's

    def finish(self, emit, cancel) -> None:
        """Wait for the follower to read the rest, emitting ``verify`` progress."""
        total = self.extraction.tensor_bytes
        self.follower.writer_done.set()  # the script has exited: a shard short now stays short
        emit({"event": "stage", "name": "verify", "status": "start", "total_bytes": total, "done_bytes": self.follower.done_bytes})
        if self.follower.ident is None:
            self.follower.start()  # the script never named its partial directory: read the renamed one
        while self.follower.is_alive():
            self.follower.join(0.1)
            _check_cancel(cancel)
            emit({"event": "verify", "done_bytes": self.follower.done_bytes, "total_bytes": total})
        emit({"event": "verify", "done_bytes": self.follower.done_bytes, "total_bytes": total})
        error = self.follower.error
        if isinstance(error, VerifyFailed):
            raise VerificationError(self.tmp / error.path.name, error.message)
        if error is not None:
            raise error

    def stop(self) -> None:
        self.follower.stop()
        if self.follower.is_alive():
            self.follower.join()


def verify_output(plan: TrimPlan, extraction: Extraction, tmp: Path, check: CopyCheck) -> tuple[dict, list[dict], ModelSource]:
    """Check the written shards against the plan; return (integrity summary, manifest rows).
    Raises VerificationError on the first disagreement."""
    shard_rows = _verify_shards(extraction, tmp)
    index_state, written = _verify_index(extraction, tmp)
    layers = _verify_coverage(plan, written, tmp)
    rows = _verify_digests(plan.inventory.source, extraction, tmp, check)
    integrity = _integrity_summary(plan, extraction, shard_rows, rows, index_state, layers, check)
    return integrity, rows, written


def _verify_shards(extraction: Extraction, tmp: Path) -> list[dict]:
    """Check every shard's strict header rules, exact header bytes and size; return shard rows."""
    expected_files = {s.file for s in extraction.shards}
    present = {p.name for p in tmp.glob("*.safetensors")}
    if present != expected_files:
        raise VerificationError(tmp, f"shards on disk {sorted(present)} differ from the planned {sorted(expected_files)}")
    shard_rows = []
    for shard in extraction.shards:
        path = tmp / shard.file
        header = read_header(path)
        with open(path, "rb") as fh:
            raw = fh.read(len(shard.header))
        if raw != shard.header:
            raise VerificationError(path, "header differs from the planned header")
        if header.file_size != shard.file_bytes:
            raise VerificationError(path, f"file is {header.file_size} bytes, planned {shard.file_bytes}")
        shard_rows.append({"file": shard.file, "tensors": len(shard.tensors), "bytes": header.file_size})
    return shard_rows


def _verify_index(extraction: Extraction, tmp: Path) -> tuple[str, ModelSource]:
    """Check the index (exact text when sharded, absent otherwise); return its state and the opened output."""
    index_path = tmp / INDEX_NAME
    expected_index = extraction.index_text
    if expected_index is None:
        if index_path.exists():
            raise VerificationError(index_path, "a single-shard output must not have an index")
        index_state = "none (single shard)"
    else:
        if not index_path.exists() or index_path.read_text(encoding="utf-8") != expected_index:
            raise VerificationError(index_path, "index differs from the planned weight_map / total_size")
        index_state = f"consistent ({len(extraction.tensors)} entries, total_size {extraction.tensor_bytes})"
    written = open_source(tmp)  # cross-checks the index against the shards
    if set(written.shards) != {s.file for s in extraction.shards}:
        raise VerificationError(tmp, "the index names other shards than those written")
    return index_state, written


def _verify_coverage(plan: TrimPlan, written: ModelSource, tmp: Path) -> int:
    """Check the output holds exactly the renamed set and every kept layer whole; return the layer count."""
    out_names = set(written.tensor_shard)
    want = {n for _, n in plan.renames}
    if out_names != want:
        missing, extra = sorted(want - out_names), sorted(out_names - want)
        raise VerificationError(tmp, f"output tensors differ from the plan: missing {missing[:5]}, unexpected {extra[:5]}")
    layers = 0
    layer_of = {(sub, l.name): l for sub, sm in plan.inventory.submodels.items() for l in sm.layers}
    ordered = sorted(out_names)  # a layer's names are one run: from "<prefix>." up to "<prefix>/"
    for m in plan.mappings:
        layer = layer_of[(m.submodel, m.old_name)]
        old_rest = sorted(t[len(m.old_name) + 1:] for t in layer.tensors)
        new_prefix = m.new_name + "."
        run = ordered[bisect_left(ordered, new_prefix) : bisect_left(ordered, m.new_name + "/")]
        new_rest = [n[len(new_prefix):] for n in run]
        if old_rest != new_rest:
            raise VerificationError(
                tmp, f"{m.submodel} layer {m.old} → {m.new_name}: {len(new_rest)} tensors written, the source layer has {len(old_rest)}"
            )
        layers += 1
    return layers


def _verify_digests(src: ModelSource, extraction: Extraction, tmp: Path, check: CopyCheck) -> list[dict]:
    """Every written range's digest against its source range's, and the source unchanged
    since before the copy; return the manifest rows."""
    name = check.hash_name
    rows = []
    for shard in extraction.shards:
        for t, begin, end in shard.output_ranges():
            rows.append({
                "file": shard.file,
                "name": t.name,
                "output_range": [begin, end],
                "source_file": t.source_file,
                "source_name": t.source_name,
                "source_range": [t.source_begin, t.source_end],
                "dtype": t.dtype,
                "shape": list(t.shape),
                "source_" + name: check.source_digests.get(t.name),
                "written_" + name: check.follower.digests.get(t.name),
            })
    unread = [r for r in rows if r["source_" + name] is None or r["written_" + name] is None]
    if unread:
        which = "source" if unread[0]["source_" + name] is None else "written"
        raise VerificationError(tmp / unread[0]["file"], f"tensor {unread[0]['name']!r}: no digest of its {which} range ({len(unread)} tensor(s))")
    changed = check.snapshot.changed()
    if changed:
        _source_changed(src, extraction, rows, changed, name)
    bad = [r for r in rows if r["source_" + name] != r["written_" + name]]
    if bad:
        raise VerificationError(
            tmp / bad[0]["file"], f"tensor {bad[0]['name']!r}: written bytes differ from the source range ({len(bad)} tensor(s) differ)"
        )
    return rows


def _source_changed(src: ModelSource, extraction: Extraction, rows: list[dict], changed: list[str], name: str) -> None:
    """A source shard changed while it was copied: hash its retained ranges again to name the
    tensors that differ from what was copied, and refuse either way."""
    key = "source_" + name
    jobs = [(r, t) for r, t in zip(rows, extraction.tensors) if t.source_file in changed]
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        try:
            now = list(pool.map(lambda job: hash_range(src.root / job[1].source_file, job[1].source_begin, job[1].source_end, name), jobs))
        except OSError:
            now = [None] * len(jobs)
    differ = [t for (r, t), digest in zip(jobs, now) if digest != r[key]]
    shard = src.root / changed[0]
    if differ:
        t = differ[0]
        raise VerificationError(shard, f"changed while it was copied: tensor {t.source_name!r} (output {t.name!r}) no longer has "
                                f"the bytes copied ({len(differ)} retained tensor(s) differ); nothing written, run the trim again")
    raise VerificationError(shard, "changed while it was copied (its size, identity or modification time differs from "
                            "before the copy); nothing written, run the trim again")


def _integrity_summary(plan: TrimPlan, extraction: Extraction, shard_rows: list[dict], rows: list[dict], index_state: str, layers: int,
                       check: CopyCheck) -> dict:
    """What verification established: shards, hashes, index, layers and the retained/dropped counts."""
    src = plan.inventory.source
    dropped_reasons = Counter(reason for _, reason in plan.dropped)
    return {
        "shards": shard_rows,
        "tensors": len(rows),
        "tensor_bytes": extraction.tensor_bytes,
        "hash": check.hash_name,
        "hashes_matched": len(rows),
        "source_read": "once: hashed by the extraction script as it copied each tensor",
        "edges_compared": check.follower.edges_compared,
        "source_unchanged": f"{len(check.snapshot.before)} source shard(s): same identity, size and modification times after the copy",
        "headers": "strict format rules passed; headers equal the planned headers byte for byte",
        "index": index_state,
        "layers_complete": layers,
        "retained": len(plan.renames),
        "renamed": sum(1 for o, n in plan.renames if o != n),
        "dropped": len(plan.dropped),
        "dropped_reasons": dict(sorted(dropped_reasons.items())),
        "dropped_bytes": sum(src.tensor(t).nbytes for t, _ in plan.dropped),
    }


def _write_lines_json(path: Path, doc: dict, list_keys: tuple[str, ...]) -> int:
    """JSON with one line per entry of the big lists: diffable and still one json.load.
    ASCII with escapes when a file name is not UTF-8 (it reads back the same)."""
    text = _lines_json(doc, list_keys, ensure_ascii=False)
    if not encodes_utf8(text):
        text = _lines_json(doc, list_keys, ensure_ascii=True)
    return write_text(path, text)


def _lines_json(doc: dict, list_keys: tuple[str, ...], ensure_ascii: bool) -> str:
    parts = []
    for key, value in doc.items():
        if key in list_keys and isinstance(value, list):
            body = ",\n".join("    " + json.dumps(v, ensure_ascii=ensure_ascii) for v in value)
            parts.append(f"  {json.dumps(key)}: [\n{body}\n  ]" if value else f"  {json.dumps(key)}: []")
        else:
            parts.append(f"  {json.dumps(key)}: " + json.dumps(value, ensure_ascii=ensure_ascii, indent=2).replace("\n", "\n  "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


# --- the writer ---------------------------------------------------------------------------
def extraction_script(plan: TrimPlan, extraction: Extraction, digests: dict | None = None) -> str:
    """The standalone ``extract_weights.py`` that copies ``extraction`` out of the plan's source
    (``digests``: the source headers' digests, when already at hand)."""
    if digests is None:
        digests = shard_pins(plan.inventory.source, extraction.needed_source_files)
    return render_script(extraction, digests, model_name=plan.inventory.model_name)


def weights_file_count(plan: TrimPlan, extraction: Extraction) -> int:
    """Files a real-weight output holds: shards, index, script, configs and assets, plan,
    manifest, serve.sh, README."""
    index = 1 if extraction.index_text is not None else 0
    return len(extraction.shards) + index + 1 + len(plan.new_documents) + len(asset_files(plan, GENERATED)) + 4


def extracted_files(extraction: Extraction) -> list[dict]:
    """Report entries of the files the extraction script wrote."""
    files = [
        {"path": shard.file, "kind": "weights", "bytes": shard.file_bytes, "from": f"{len(shard.tensors)} tensors extracted by {SCRIPT_NAME}"}
        for shard in extraction.shards
    ]
    index = extraction.index_text
    if index is not None:
        files.append({"path": INDEX_NAME, "kind": "weight index", "bytes": len(utf8(index)), "from": f"written by {SCRIPT_NAME}"})
    return files


def _write_kept_script(plan: TrimPlan, extraction: Extraction, digests: dict, rows: list[dict], hash_name: str, tmp: Path) -> dict:
    """Write the script the user keeps: the one mxtrim ran, with every written tensor's
    verified digest recorded, so a re-run refuses a source whose tensor data changed."""
    recorded = {r["name"]: r["written_" + hash_name] for r in rows}
    text = render_script(extraction, digests, model_name=plan.inventory.model_name, tensor_digests=(hash_name, recorded))
    size = write_text(tmp / SCRIPT_NAME, text)
    return {"path": SCRIPT_NAME, "kind": "extraction script", "bytes": size,
            "from": f"generated; run by mxtrim to write the shards, then each tensor's {hash_name} digest recorded"}


def write_weights(
    plan: TrimPlan,
    out: Path,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress=None,
    structure: bool = True,
    cancel=None,
    serve=None,
    hash_name: str = DEFAULT_HASH,
    plan_check=None,
    accept=None,
) -> WeightsWriteResult:
    """Write the real-weight checkpoint of ``plan`` at ``out`` (which must not exist).

    ``progress(event)`` receives dicts: ``stage`` events (budget, extract, files, verify,
    structure, write), the script's ``tensor`` events (``name``, ``shard``, ``done_bytes``,
    ``total_bytes``, plus ``bytes_per_s`` and ``eta_s``) and ``shard`` events, ``file``
    events for configs and assets, and ``verify`` events (``done_bytes``, ``total_bytes``).
    ``structure=False`` skips the transformers structure check (it imports torch, in a
    child process that runs while the copy does, unless the same planned output was checked
    before: :mod:`..checks.cache`). ``hash_name``: ``xxh3_128`` (the default) or ``sha256``,
    the digest every tensor's source and written ranges get.
    ``plan_check`` (:class:`..checks.plan_outcome.PlanCheck`): ``plan`` is not checked
    against transformers yet and its check is under way in the check child; the copy starts
    on ``plan`` as it is and the verdict is taken once the copy is done, before anything else
    is written. When the checked plan writes other tensors, has blocking errors, or
    ``accept(checked)`` says no, everything is removed and :class:`PlanChanged` raised;
    otherwise the checked plan (its config rewrite, issues and verdict) is the one written,
    and the result's ``plan``.
    ``cancel``: a threading.Event another thread may set (a UI's Cancel button): the run
    stops at the next event (the script within 0.1 s) and raises :class:`Cancelled`, with
    everything partial removed — what Ctrl-C does in the CLI. ``serve`` (BudgetInputs): the
    serve settings the report's command spells out."""
    emit = progress or (lambda event: None)
    timings: dict[str, float] = {}
    out = prepare_output(plan, out)
    _refuse_unextractable(plan)

    t0 = time.monotonic()
    extraction, estimate, digests, script_text = _prepare_extraction(plan, out, max_shard_bytes, emit)
    timings["prepare"] = time.monotonic() - t0

    tmp, script_tmp = _prepare_temporaries(out, emit)
    check = job = None  # the copy's check; the structure check (its child, or its result)
    try:
        check = CopyCheck(plan, extraction, tmp, hash_name)
        script_tmp.write_bytes(utf8(script_text))
        job = _start_structure(plan, extraction, structure, emit)
        plan, job, done = _copy_beside_checks(plan, extraction, (script_tmp, tmp), check, job, structure,
                                              (plan_check, accept), hash_name, emit, cancel, timings)

        events, files, not_copied = _write_file_entries(plan, extraction, tmp, emit)

        t0 = time.monotonic()
        check.finish(emit, cancel)
        integrity, rows, _ = verify_output(plan, extraction, tmp, check)
        emit({"event": "stage", "name": "verify", "status": "done", "tensors": integrity["tensors"], "hashes_matched": integrity["hashes_matched"]})
        timings["verify"] = time.monotonic() - t0
        files.append(events.add(_write_kept_script(plan, extraction, digests, rows, hash_name, tmp)))

        _check_cancel(cancel)
        t0 = time.monotonic()
        result = _structure_stage(job, emit, cancel)
        timings["structure"] = time.monotonic() - t0
        _check_cancel(cancel)

        warnings = _write_reports(plan, out, tmp, events, files, not_copied, serve, (done, digests, integrity, result, rows), hash_name)
        rename_into_place(tmp, out)
        emit({"event": "stage", "name": "write", "status": "done", "output": str(out)})
    except OSError as exc:
        _abandon(check, job, plan_check, tmp, script_tmp)
        raise write_failed(out, exc) from None
    except BaseException:
        _abandon(check, job, plan_check, tmp, script_tmp)
        raise
    return WeightsWriteResult(out, files, not_copied, estimate, integrity, result, done.get("method", ""), timings,
                              warnings=warnings, plan=plan)


def _copy_beside_checks(plan: TrimPlan, extraction, paths: tuple[Path, Path], check, job, structure: bool, verdict: tuple,
                        hash_name: str, emit, cancel, timings: dict):
    """Run the extraction script (``paths``: it, and the folder it writes) while the check child
    answers; then take the plan check's verdict (``verdict``: the pending check and ``accept``).
    Returns (the plan to write, the structure check, the script's result)."""
    script_tmp, tmp = paths
    plan_check, accept = verdict
    if plan_check is not None and not plan_check.known:
        child = plan_check.child
        emit({"event": "stage", "name": "check", "status": "start", "pid": child.pid if child is not None else None})
    t0 = time.monotonic()
    done = run_extraction_script(script_tmp, plan.inventory.source.root, tmp, emit, cancel, hash_name, check.seen)
    timings["extract"] = time.monotonic() - t0
    script_tmp.unlink()
    if plan_check is not None:
        t0 = time.monotonic()
        plan, job = _plan_verdict(plan, plan_check, accept, extraction, job, structure, emit, cancel)
        timings["check"] = time.monotonic() - t0
    return plan, job, done


def _write_reports(plan: TrimPlan, out: Path, tmp: Path, events, files: list[dict], not_copied, serve, copied: tuple,
                   hash_name: str) -> list[str]:
    """The plan file, serve script, manifest and README of a verified copy, added to ``files``;
    returns the output's warnings (the README's).
    ``copied``: (the script's result, the source digests, the integrity check, the structure
    check, the written tensors' rows)."""
    done, digests, integrity, result, rows = copied
    files += [events.add(write_plan_json(plan, tmp, out, "weights", serve)), events.add(write_serve_script(plan, tmp, "weights", serve))]
    manifest = _manifest(plan, out, done, digests, integrity, result, rows)
    files.append(events.add(_write_manifest(tmp, manifest, hash_name)))
    weights_info = {"integrity": integrity, "structure": result, "copy_method": done.get("method"),
                    "script": SCRIPT_NAME, "manifest": MANIFEST_NAME, "source_files": sorted(digests)}
    warnings = output_warnings(plan, out, [*files, {"path": README_NAME}])  # the README's and the result's
    readme = render_report(plan, out, "weights", files, not_copied, weights=weights_info, serve=serve, warnings=warnings)
    files.append(events.add(readme_entry(write_text(tmp / README_NAME, readme))))
    return warnings


def _write_manifest(tmp: Path, manifest: dict, hash_name: str) -> dict:
    size = _write_lines_json(tmp / MANIFEST_NAME, manifest, ("tensors", "dropped"))
    return {"path": MANIFEST_NAME, "kind": "manifest", "bytes": size, "from": f"written (every tensor's ranges and {hash_name} digests)"}


def _prepare_temporaries(out: Path, emit) -> tuple[Path, Path]:
    """The output's parent made, an interrupted run's leftovers removed: (hidden directory the
    output is written to, path the script is written to)."""
    make_parent(out)
    remove_leftovers(out, emit)
    tmp = temp_sibling(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp, out.with_name(f".{out.name}.extract-{os.getpid()}.py")


def _refuse_unextractable(plan: TrimPlan) -> None:
    """Raise when the source has no weights or its tensor accounting fails."""
    src = plan.inventory.source
    if not src.shards and not src.absent_shards:
        raise OutputError(src.root, "the source has no safetensors weights: nothing to extract (use --mode dummy)")
    missing = weights_blocker(plan)
    if missing:
        raise OutputError(src.root, missing + "; nothing written")
    problems = check_accounting(plan)
    if problems:
        raise AccountingError(src.root, "tensor accounting failed, nothing written: " + "; ".join(problems))


def _prepare_extraction(plan: TrimPlan, out: Path, max_shard_bytes: int, emit):
    """Plan the shards, check free space and render the script: (extraction, estimate, digests, script text)."""
    extraction = build_extraction(plan, max_shard_bytes)
    estimate = estimate_from_extraction(plan, extraction)
    ok, free, message = check_free_space(estimate, out)
    if not ok:
        raise OutputError(out, message)
    emit({"event": "stage", "name": "budget", "status": "done", "total_bytes": estimate.total, "free_bytes": free,
          "shards": estimate.shards, "parts": [list(p) for p in estimate.parts]})
    digests = shard_pins(plan.inventory.source, extraction.needed_source_files)
    script_text = extraction_script(plan, extraction, digests)
    return extraction, estimate, digests, script_text


def _write_file_entries(plan: TrimPlan, extraction: Extraction, tmp: Path, emit):
    """Record the extracted files and write configs and assets: (events, files, not copied)."""
    events = FileEvents(emit, weights_file_count(plan, extraction))
    emit({"event": "stage", "name": "files", "status": "start"})
    files = [events.add(f) for f in extracted_files(extraction)]
    more, not_copied = write_documents_and_assets(plan, tmp, events, reserved=GENERATED)
    files += more
    for f in not_copied:
        if f["kind"] in ("weights", "weight index"):
            f["detail"] = "replaced by the extracted shards" + (" and their index" if len(extraction.shards) > 1 else "")
    return events, files, not_copied


def _structure_request(plan: TrimPlan, extraction: Extraction) -> dict:
    config = plan.new_documents.get("config.json", plan.inventory.source.config)
    return planned_request(config, [(t.name, t.dtype, t.shape) for t in extraction.tensors], plan)


def _start_structure(plan: TrimPlan, extraction: Extraction, structure: bool, emit, announce: bool = True) -> StructureJob | StructureResult:
    """The structure check of the planned output: its result when skipped or already known
    (:mod:`..checks.cache`), else its child process, started before the copy."""
    if announce:
        emit({"event": "stage", "name": "structure", "status": "start"})
    if not structure:
        return not_checked("skipped (structure=False)")
    request = _structure_request(plan, extraction)
    digest = check_cache.key(STRUCTURE_KIND, request)
    known = check_cache.load(STRUCTURE_KIND, digest)
    if known is not None:
        try:
            return StructureResult.from_json(known)
        except (KeyError, TypeError, ValueError):
            pass
    job = StructureJob(request)
    job.cache_key = digest
    return job


def _plan_verdict(plan: TrimPlan, plan_check, accept, extraction: Extraction, job, structure: bool, emit, cancel):
    """The plan's transformers verdict, asked before the copy: (checked plan, structure job of
    its output). Raises :class:`PlanChanged` when the checked plan is not the copied one's
    (other tensors), blocks, or ``accept`` refuses it."""
    checked = plan_check.result(interrupt=lambda: _check_cancel(cancel))
    verdict = checked.transformers_check
    emit({"event": "stage", "name": "check", "status": "done", "result": verdict.status if verdict else None,
          "summary": verdict.summary if verdict else ""})
    if checked.renames != plan.renames or checked.dropped != plan.dropped or checked.errors or (accept is not None and not accept(checked)):
        raise PlanChanged(checked)
    if structure and _structure_request(plan, extraction) != _structure_request(checked, extraction):
        # the check rewrote the config (fields solved against transformers): the structure
        # check asked before the copy judged another config; it is asked again
        if isinstance(job, StructureJob):
            job.result(interrupt=lambda: _check_cancel(cancel))  # the child answers in order
        job = _start_structure(checked, extraction, structure, emit, announce=False)
    return checked, job


def _structure_stage(job: StructureJob | StructureResult, emit, cancel) -> StructureResult:
    """The structure check's result: waited for (and remembered), or known already."""
    if isinstance(job, StructureJob):
        result = job.result(interrupt=lambda: _check_cancel(cancel))
        if not job.failed:
            check_cache.store(STRUCTURE_KIND, job.cache_key, result.to_json())
    else:
        result = job
    emit({"event": "stage", "name": "structure", "status": "done", "result": result.status, "summary": result.summary})
    return result


def _abandon(check, job, plan_check, tmp: Path, script_tmp: Path) -> None:
    """After an error or an interruption: the checks stopped and the partial output removed,
    with a second Ctrl-C held off from the first step (a Ctrl-C while a check child was being
    stopped left the extraction script beside the output)."""
    with signals_held():
        _stop_checks(check, job, plan_check)
        _remove_partial_output(tmp, script_tmp)


def _stop_checks(check: CopyCheck | None, job: StructureJob | StructureResult | None, plan_check=None) -> None:
    if check is not None:
        check.stop()
    if isinstance(job, StructureJob):
        job.stop()
    if plan_check is not None and plan_check.pending:
        plan_check.child.close()  # its answer will not be read


def _manifest(plan: TrimPlan, out: Path, done: dict, digests: dict, integrity: dict, result: StructureResult, rows: list[dict]) -> dict:
    """The manifest document: source headers, shards, totals, structure, every tensor and drop."""
    src = plan.inventory.source
    return {
        "schema": MANIFEST_SCHEMA,
        "source": src.shown,
        "output": str(out),
        "hash": integrity["hash"],
        "copy_method": done.get("method"),
        "source_headers": {rel: asdict(d) for rel, d in digests.items()},
        "shards": integrity["shards"],
        "totals": {k: integrity[k] for k in ("tensors", "tensor_bytes", "retained", "renamed", "dropped", "dropped_bytes")},
        "structure": result.to_json(),
        "tensors": rows,
        "dropped": [{"name": t, "source_file": src.tensor_shard[t], "reason": r if src.is_present(t) else f"{r}; dropped; shard not present"}
                    for t, r in plan.dropped],
    }


def _remove_partial_output(tmp: Path, script_tmp: Path) -> None:
    """Remove the temporary output, the script and any partial directory a killed script
    left, with a second Ctrl-C held off until done."""
    with signals_held():
        shutil.rmtree(tmp, ignore_errors=True)
        script_tmp.unlink(missing_ok=True)
        # a script killed before it could clean up leaves its own hidden sibling of tmp
        for stray in tmp.parent.iterdir():
            if stray.name.startswith(f".{tmp.name}.partial-"):
                shutil.rmtree(stray, ignore_errors=True)
