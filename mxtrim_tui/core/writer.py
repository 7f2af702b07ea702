"""Write a plan into an output directory: atomically, never over anything that exists,
never inside the source.

Output goes to a hidden temporary sibling (``.<name>.partial-<pid>``) that is renamed into
place only when complete; any error or interruption removes it. The source is only read.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .plan import CONFIG, TrimPlan
from .plan_json import plan_to_json
from .report import render_report
from .source import FileKind

DEFAULT_MODELS_DIR = Path("tools") / "batched_test" / "models"
# What a dummy directory needs besides the rewritten config (seed: "Generate the output directory").
ASSET_KINDS = (
    FileKind.TOKENIZER,
    FileKind.TOKENIZER_CONFIG,
    FileKind.CHAT_TEMPLATE,
    FileKind.GENERATION_CONFIG,
    FileKind.PROCESSOR_CONFIG,
    FileKind.CUSTOM_CODE,
)


class OutputError(InputError):
    """The output location is unusable (exists, inside the source, not writable)."""


@dataclass(frozen=True)
class WriteResult:
    path: Path
    files: list[dict]
    not_copied: list[dict]


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
    if out.exists() or out.is_symlink():
        raise OutputError(out, "already exists; mxtrim never overwrites an output (choose another --out)")
    if _inside(out, source_root):
        raise OutputError(out, f"is inside the source model directory {source_root}; the source is never modified")
    if _inside(source_root, out):
        raise OutputError(out, f"would contain the source model directory {source_root}")


def json_text(doc: dict) -> str:
    """How every JSON document mxtrim writes is spelled: indent 2, UTF-8, a final newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write_json(path: Path, doc: dict) -> int:
    text = json_text(doc)
    path.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))


def temp_sibling(out: Path) -> Path:
    """The hidden directory an output is written to before it is renamed into place."""
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def prepare_output(plan: TrimPlan, out: Path) -> Path:
    """Refuse a plan with blocking errors or an unusable output; return ``out`` absolute."""
    if plan.errors:
        raise OutputError(out, "the plan has blocking errors: " + "; ".join(i.message for i in plan.errors))
    out = Path(os.path.abspath(out))
    check_output_dir(out, plan.inventory.source.root)
    return out


def asset_files(plan: TrimPlan):
    """Source files copied into every output (tokenizer, templates, generation/processor
    configs, custom code), excluding those rewritten by the plan."""
    return [f for f in plan.inventory.source.files if f.path not in plan.new_documents and f.kind in ASSET_KINDS]


def write_documents_and_assets(plan: TrimPlan, target: Path, emit, total_files: int, *, reserved=frozenset()):
    """Write the rewritten config / side quantization files and copy the assets into
    ``target``. Returns ``(files, not_copied)`` entries for the report. ``reserved``: names
    the caller writes itself (an asset of that name is not copied, and says so)."""
    src = plan.inventory.source
    files: list[dict] = []
    not_copied: list[dict] = []
    for name, doc in plan.new_documents.items():
        size = write_json(target / name, doc)
        files.append({"path": name, "kind": "config" if name == CONFIG else "quantization config", "bytes": size, "from": "rewritten"})
        emit({"event": "file", "path": name, "bytes": size, "done_files": len(files), "total_files": total_files})
    for f in src.files:
        if f.path in plan.new_documents:
            continue
        if f.kind in ASSET_KINDS and f.path not in reserved:
            dest = target / f.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src.root / f.path, dest)  # follows symlinks: a portable copy
            origin = "copied" + (f" (symlink → {f.symlink_target} dereferenced)" if f.symlink_target else "")
            size = dest.stat().st_size
            files.append({"path": f.path, "kind": f.kind.value, "bytes": size, "from": origin})
            emit({"event": "file", "path": f.path, "bytes": size, "done_files": len(files), "total_files": total_files})
        else:
            detail = f"{f.detail + '; ' if f.detail else ''}name taken by mxtrim's own output" if f.kind in ASSET_KINDS else f.detail
            not_copied.append({"path": f.path, "kind": f.kind.value, "detail": detail})
    return files, not_copied


def write_plan_json(plan: TrimPlan, target: Path, out: Path, mode: str) -> dict:
    plan_doc = plan_to_json(plan)
    plan_doc["mode"] = mode
    plan_doc["output"] = str(out)
    size = write_json(target / "mxtrim-plan.json", plan_doc)
    return {"path": "mxtrim-plan.json", "kind": "trim plan", "bytes": size, "from": "written"}


def rename_into_place(tmp: Path, out: Path) -> None:
    if out.exists() or out.is_symlink():
        raise OutputError(out, "appeared while writing; not overwritten")
    os.rename(tmp, out)


def write_dummy(plan: TrimPlan, out: Path, *, progress=None) -> WriteResult:
    """Write the dummy directory for ``plan`` at ``out`` (which must not exist).

    ``progress(event)`` receives dicts: ``{"event": "stage", "name", "status"}`` and
    ``{"event": "file", "path", "bytes", "done_files", "total_files"}``."""
    emit = progress or (lambda event: None)
    out = prepare_output(plan, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    total = len(plan.new_documents) + len(asset_files(plan)) + 2
    try:
        tmp.mkdir()
        emit({"event": "stage", "name": "write", "status": "start", "temporary": str(tmp)})
        files, not_copied = write_documents_and_assets(plan, tmp, emit, total)
        files.append(write_plan_json(plan, tmp, out, "dummy"))
        readme = render_report(plan, out, "dummy", files, not_copied)
        (tmp / "README.md").write_text(readme, encoding="utf-8")
        files.append({"path": "README.md", "kind": "report", "bytes": len(readme.encode()), "from": "written"})
        emit({"event": "file", "path": "README.md", "bytes": len(readme.encode()), "done_files": len(files), "total_files": total})
        rename_into_place(tmp, out)
        emit({"event": "stage", "name": "write", "status": "done", "output": str(out)})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WriteResult(out, files, not_copied)
