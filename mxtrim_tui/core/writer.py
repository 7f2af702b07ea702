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


def _write_json(path: Path, doc: dict) -> int:
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))


def write_dummy(plan: TrimPlan, out: Path, *, progress=None) -> WriteResult:
    """Write the dummy directory for ``plan`` at ``out`` (which must not exist).

    ``progress(event)`` receives dicts: ``{"event": "stage", "name", "status"}`` and
    ``{"event": "file", "path", "bytes", "done_files", "total_files"}``."""
    emit = progress or (lambda event: None)
    if plan.errors:
        raise OutputError(out, "the plan has blocking errors: " + "; ".join(i.message for i in plan.errors))
    src = plan.inventory.source
    out = Path(os.path.abspath(out))
    check_output_dir(out, src.root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    files: list[dict] = []
    not_copied: list[dict] = []
    assets = [f for f in src.files if f.path not in plan.new_documents and f.kind in ASSET_KINDS]
    total = len(plan.new_documents) + len(assets) + 2
    try:
        tmp.mkdir()
        emit({"event": "stage", "name": "write", "status": "start", "temporary": str(tmp)})
        for name, doc in plan.new_documents.items():
            size = _write_json(tmp / name, doc)
            files.append({"path": name, "kind": "config" if name == CONFIG else "quantization config", "bytes": size, "from": "rewritten"})
            emit({"event": "file", "path": name, "bytes": size, "done_files": len(files), "total_files": total})
        for f in src.files:
            if f.path in plan.new_documents:
                continue
            if f.kind in ASSET_KINDS:
                target = tmp / f.path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src.root / f.path, target)  # follows symlinks: a portable copy
                origin = "copied" + (f" (symlink → {f.symlink_target} dereferenced)" if f.symlink_target else "")
                files.append({"path": f.path, "kind": f.kind.value, "bytes": target.stat().st_size, "from": origin})
                emit({"event": "file", "path": f.path, "bytes": target.stat().st_size, "done_files": len(files), "total_files": total})
            else:
                not_copied.append({"path": f.path, "kind": f.kind.value, "detail": f.detail})
        plan_doc = plan_to_json(plan)
        plan_doc["mode"] = "dummy"
        plan_doc["output"] = str(out)
        size = _write_json(tmp / "mxtrim-plan.json", plan_doc)
        files.append({"path": "mxtrim-plan.json", "kind": "trim plan", "bytes": size, "from": "written"})
        readme = render_report(plan, out, "dummy", files, not_copied)
        (tmp / "README.md").write_text(readme, encoding="utf-8")
        files.append({"path": "README.md", "kind": "report", "bytes": len(readme.encode()), "from": "written"})
        if out.exists():
            raise OutputError(out, "appeared while writing; not overwritten")
        os.rename(tmp, out)
        emit({"event": "stage", "name": "write", "status": "done", "output": str(out)})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WriteResult(out, files, not_copied)
