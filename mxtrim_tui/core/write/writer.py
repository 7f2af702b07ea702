"""Write a plan into an output directory: atomically, never over anything that exists,
never inside the source, never where it could not be written (checked first, one line).

Output goes to a hidden temporary sibling (``.<name>.partial-<pid>``) that is renamed into
place only when complete; any error or interruption removes it. The source is only read.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import interrupts
from ..errors import InputError
from ..plan.build import CONFIG, TrimPlan
from ..plan.layout import (
    OVER_SIDE_LIMIT, SIDE_FILE_LIMIT_BYTES, SIDE_KINDS, asset_files, is_copied_kind, json_text, utf8,
)
from ..plan.disk_budget import free_space_margin
from ..plan.plan_json import plan_to_json
from .launch_text import output_warnings
from .report import SERVE_SCRIPT, render_report, serve_script, serve_settings
from ..read.source import FileKind
from ..units import human_bytes
from .leftovers import remove_leftovers, signals_held

DEFAULT_MODELS_DIR = Path("tools") / "batched_test" / "models"
# Why a file of these kinds is not copied (weight shards and their index: the report's own line).
NOT_COPIED_REASONS = {
    FileKind.OTHER_WEIGHTS: "weights are never copied",
    FileKind.DOCUMENTATION: "not needed to load or serve (the output's README.md is mxtrim's report)",
}
PLAN_NAME = "mxtrim-plan.json"
README_NAME = "README.md"
# Files a dummy trim writes itself; a source asset of the same name is not copied over them.
DUMMY_GENERATED = frozenset({PLAN_NAME, README_NAME, SERVE_SCRIPT})
# The most mxtrim's hidden temporaries add to the output's name: the extraction script's own
# "..NAME.partial-PID.partial-PID" (PIDs of up to 7 digits).
TEMP_NAME_EXTRA = len("..") + 2 * len(".partial-") + 2 * 7




class OutputError(InputError):
    """The output location is unusable (exists, inside the source, not writable)."""


@dataclass(frozen=True)
class WriteResult:
    path: Path
    files: list[dict]
    not_copied: list[dict]
    # what the report's Warnings add of the output itself (launch_text.output_warnings)
    warnings: list[str] = field(default_factory=list, kw_only=True)


def default_output_dir(plan: TrimPlan, workspace: Path, mode: str) -> Path:
    """``<workspace>/tools/batched_test/models/<model>-<mode>-<N>layers``, with ``-2``, ``-3``...
    appended when that name is taken."""
    base = workspace / DEFAULT_MODELS_DIR / f"{plan.inventory.model_name}-{mode}-{plan.new_depth}layers"
    candidate, k = base, 1
    while candidate.exists() or candidate.is_symlink():
        k += 1
        candidate = base.with_name(f"{base.name}-{k}")
    return candidate


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def check_output_dir(out: Path, source_root: Path) -> None:
    if out.resolve() == source_root.resolve():
        raise OutputError(out, "is the source model directory; the source is never modified (choose another output directory)")
    if os.path.lexists(out):
        raise OutputError(out, "already exists; mxtrim never overwrites an output (choose another output directory)")
    if _inside(out, source_root):
        raise OutputError(out, f"is inside the source model directory {source_root}; the source is never modified")
    if _inside(source_root, out):
        raise OutputError(out, f"would contain the source model directory {source_root}")


def nearest_directory(out: Path) -> Path:
    """The nearest existing directory above ``out``; refuses an ancestor that is a file."""
    for candidate in out.parents:
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            if os.path.lexists(candidate):
                raise OutputError(out, f"{candidate} is a broken symbolic link") from None
            continue
        if not stat.S_ISDIR(mode):
            raise OutputError(out, f"{candidate} is a file, not a directory")
        return candidate
    return Path(out.anchor or "/")


def name_limit(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_name_lengths(out: Path, ancestor: Path) -> None:
    """Every component to be created fits the filesystem's name limit (the last one with room
    for mxtrim's temporary names)."""
    limit = name_limit(ancestor)
    new_parts = out.relative_to(ancestor).parts
    for i, part in enumerate(new_parts):
        allowed = limit - TEMP_NAME_EXTRA if i == len(new_parts) - 1 else limit
        size = len(os.fsencode(part))
        if size > allowed:
            extra = f" ({limit} less {TEMP_NAME_EXTRA} for mxtrim's temporary names)" if allowed != limit else ""
            raise OutputError(out, f"a name in the path is {size} bytes long; at most {allowed}{extra} fit on this filesystem")


def check_writable(out: Path, ancestor: Path) -> None:
    """Create and remove a hidden directory in ``ancestor``: the only sure test (a signal
    meanwhile waits until it is removed, so none is left behind)."""
    try:
        with interrupts.deferred():
            os.rmdir(tempfile.mkdtemp(prefix=".mxtrim-probe-", dir=ancestor))
    except OSError as exc:
        raise OutputError(out, f"cannot write in {ancestor}: {exc.strerror or exc}") from None


def check_free_bytes(out: Path, ancestor: Path, need_bytes: int) -> None:
    usage = shutil.disk_usage(ancestor)
    margin = free_space_margin(usage.total, need_bytes)
    if need_bytes + margin > usage.free:
        raise OutputError(
            out,
            f"not enough disk space: needs {human_bytes(need_bytes)} ({need_bytes:,} bytes) and a margin of "
            f"{human_bytes(margin)}, but {ancestor} has {human_bytes(usage.free)} ({usage.free:,} bytes) free",
        )


def check_output_location(out: Path, source_root: Path, need_bytes: int | None = None) -> Path:
    """``out`` made absolute, or :class:`OutputError` (one line) when it cannot be written:
    it exists, is inside the source or contains it, has a name too long, lies below a file,
    below an unwritable directory, or (``need_bytes`` given) on a filesystem without room."""
    out = Path(os.path.abspath(out))
    ancestor = nearest_directory(out)
    check_name_lengths(out, ancestor)
    check_output_dir(out, source_root)
    check_writable(out, ancestor)
    if need_bytes is not None:
        check_free_bytes(out, ancestor, need_bytes)
    return out


def make_parent(out: Path) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(out, f"cannot create {out.parent}: {exc.strerror or exc}") from None


def write_json(path: Path, doc: dict) -> int:
    return write_text(path, json_text(doc))


def temp_sibling(out: Path) -> Path:
    """The hidden directory an output is written to before it is renamed into place."""
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def prepare_output(plan: TrimPlan, out: Path) -> Path:
    """Refuse a plan with blocking errors or an unusable output; return ``out`` absolute."""
    if plan.errors:
        raise OutputError(out, "the plan has blocking errors: " + "; ".join(i.message for i in plan.errors))
    return check_output_location(out, plan.inventory.source.root)


def not_copied_reason(f) -> str:
    """Why ``f`` (a file of a kind never copied, or a side file left out) is not copied."""
    if f.never_copy:
        return f.never_copy
    if f.kind in SIDE_KINDS:
        return OVER_SIDE_LIMIT if f.size > SIDE_FILE_LIMIT_BYTES else ""
    return NOT_COPIED_REASONS.get(f.kind, "")


def not_copied_files(plan: TrimPlan, reserved=frozenset()) -> list[dict]:
    """Report entries for the source files an output does not take over, each with why."""
    out = []
    for f in plan.inventory.source.files:
        copied = is_copied_kind(f)
        if f.path in plan.new_documents or (copied and f.path not in reserved):
            continue
        reason = "name taken by mxtrim's own output" if copied else not_copied_reason(f)
        parts = [f.detail] if f.detail else []
        if reason and reason != f.detail:
            parts.append(reason)
        out.append({"path": f.path, "kind": f.kind.value, "detail": "; ".join(parts)})
    return out


def document_kind(name: str) -> str:
    return "config" if name == CONFIG else "quantization config"


class FileEvents:
    """One ``file`` progress event per written file, counted against the total to be written."""

    def __init__(self, emit, total: int):
        self.emit, self.total, self.done = emit, total, 0

    def add(self, entry: dict) -> dict:
        self.done += 1
        self.emit({"event": "file", "path": entry["path"], "bytes": entry["bytes"], "done_files": self.done, "total_files": self.total})
        return entry


def write_documents_and_assets(plan: TrimPlan, target: Path, events: FileEvents, *, reserved=frozenset()):
    """Write the rewritten config / side quantization files and copy the assets into
    ``target``. Returns ``(files, not_copied)`` entries for the report. ``reserved``: names
    the caller writes itself (an asset of that name is not copied, and says so)."""
    files: list[dict] = []
    for name, doc in plan.new_documents.items():
        size = write_json(target / name, doc)
        files.append(events.add({"path": name, "kind": document_kind(name), "bytes": size, "from": "rewritten"}))
    src = plan.inventory.source
    for f in asset_files(plan, reserved):
        dest = target / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.root / f.path, dest)  # follows symlinks: a portable copy
        files.append(events.add({"path": f.path, "kind": f.kind.value, "bytes": dest.stat().st_size, "from": copied_from(f)}))
    return files, not_copied_files(plan, reserved)


def copied_from(f) -> str:
    return "copied" + (f" (symlink → {f.symlink_target} dereferenced)" if f.symlink_target else "")


def plan_json_text(plan: TrimPlan, out: Path, mode: str, serve=None) -> str:
    """``mxtrim-plan.json``: the plan, the mode, the output and the serve settings."""
    doc = plan_to_json(plan, serve=serve)
    doc["mode"] = mode
    doc["output"] = str(out)
    doc["serve"] = serve_settings(plan, out, mode, serve)
    return json_text(doc)


def write_text(path: Path, text: str) -> int:
    data = utf8(text)
    path.write_bytes(data)
    return len(data)


def write_plan_json(plan: TrimPlan, target: Path, out: Path, mode: str, serve=None) -> dict:
    size = write_text(target / PLAN_NAME, plan_json_text(plan, out, mode, serve))
    return {"path": PLAN_NAME, "kind": "trim plan", "bytes": size, "from": "written"}


def write_serve_script(plan: TrimPlan, target: Path, mode: str, serve=None) -> dict:
    """``serve.sh``, executable."""
    size = write_text(target / SERVE_SCRIPT, serve_script(plan, mode, serve))
    os.chmod(target / SERVE_SCRIPT, 0o755)
    return serve_script_entry(size)


def serve_script_entry(size: int) -> dict:
    return {"path": SERVE_SCRIPT, "kind": "serve script", "bytes": size, "from": "written: the serve command, for the folder it is in"}


def readme_entry(size: int) -> dict:
    return {"path": README_NAME, "kind": "report", "bytes": size, "from": "written"}


def rename_into_place(tmp: Path, out: Path) -> None:
    interrupts.check()  # a Ctrl-C / SIGTERM whose exception a finalizer swallowed stops it here
    if out.exists() or out.is_symlink():
        raise OutputError(out, "appeared while writing; not overwritten")
    os.rename(tmp, out)


def dummy_file_count(plan: TrimPlan) -> int:
    return len(plan.new_documents) + len(asset_files(plan, DUMMY_GENERATED)) + len(DUMMY_GENERATED)


def estimate_dummy_bytes(plan: TrimPlan, out: Path, serve=None) -> int:
    """The bytes a dummy trim of ``plan`` at ``out`` writes, README and plan included: the
    same texts :func:`write_dummy` writes, rendered in memory (exact unless the minute in the
    README's timestamp turns in between)."""
    out = Path(os.path.abspath(out))
    files = [
        {"path": name, "kind": document_kind(name), "bytes": len(utf8(json_text(doc))), "from": "rewritten"}
        for name, doc in plan.new_documents.items()
    ]
    files += [{"path": f.path, "kind": f.kind.value, "bytes": f.size, "from": copied_from(f)} for f in asset_files(plan, DUMMY_GENERATED)]
    plan_size = len(utf8(plan_json_text(plan, out, "dummy", serve)))
    files.append({"path": PLAN_NAME, "kind": "trim plan", "bytes": plan_size, "from": "written"})
    files.append(serve_script_entry(len(utf8(serve_script(plan, "dummy", serve)))))
    readme = render_report(plan, out, "dummy", files, not_copied_files(plan, DUMMY_GENERATED), serve=serve)
    return sum(f["bytes"] for f in files) + len(utf8(readme))


def write_dummy(plan: TrimPlan, out: Path, *, progress=None, serve=None) -> WriteResult:
    """Write the dummy directory for ``plan`` at ``out`` (which must not exist).

    ``progress(event)`` receives dicts: ``{"event": "stage", "name", "status"}`` and one
    ``{"event": "file", "path", "bytes", "done_files", "total_files"}`` per written file.
    ``serve`` (BudgetInputs): the serve settings the report's command spells out."""
    emit = progress or (lambda event: None)
    out = prepare_output(plan, out)
    check_free_bytes(out, nearest_directory(out), estimate_dummy_bytes(plan, out, serve))
    make_parent(out)
    remove_leftovers(out, emit)
    tmp = temp_sibling(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    events = FileEvents(emit, dummy_file_count(plan))
    try:
        tmp.mkdir()
        emit({"event": "stage", "name": "write", "status": "start", "temporary": str(tmp)})
        files, not_copied = write_documents_and_assets(plan, tmp, events, reserved=DUMMY_GENERATED)
        files.append(events.add(write_plan_json(plan, tmp, out, "dummy", serve)))
        files.append(events.add(write_serve_script(plan, tmp, "dummy", serve)))
        warnings = output_warnings(plan, out, [*files, {"path": README_NAME}])  # the README's and the result's
        readme = render_report(plan, out, "dummy", files, not_copied, serve=serve, warnings=warnings)
        files.append(events.add(readme_entry(write_text(tmp / README_NAME, readme))))
        rename_into_place(tmp, out)
        emit({"event": "stage", "name": "write", "status": "done", "output": str(out)})
    except OSError as exc:
        with signals_held():
            shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(out, exc) from None
    except BaseException:
        with signals_held():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WriteResult(out, files, not_copied, warnings=warnings)


def write_failed(out: Path, exc: OSError) -> OutputError:
    """An operating-system error while writing (a full disk, a vanished directory) as one line;
    the caller has removed the partial output."""
    where = f"{exc.filename}: " if exc.filename else ""
    return OutputError(out, f"writing failed, partial output removed: {where}{exc.strerror or exc}")
