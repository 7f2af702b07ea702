"""Disk space a real-weight output needs, from headers alone, and the free-space check.

Shard sizes are exact: tensor bytes from the source headers plus each output header as it
will be written (:func:`~.layout.build_extraction` builds them byte for byte).
Rewritten configs and copied assets are exact too; only the small generated files
(manifest, script, plan, report) are estimated, generously. The budget assumes a full copy
even where the filesystem could share blocks (reflinks): a promise of space that a
cross-device copy would not keep is worse than a conservative one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .layout import HEAD, LAYER, MTP, OTHER, Extraction, asset_files, build_extraction, json_text, utf8
from .build import TrimPlan
from ..units import DEFAULT_MAX_SHARD_BYTES, human_bytes

MARGIN_MIN = 1 << 30  # the most kept free: 1 GiB...
MARGIN_FRACTION = 0.02  # ...or 2 % of the filesystem,
MARGIN_FLOOR = 1 << 20  # but for a small output only 1 MiB plus a tenth of it



@dataclass(frozen=True)
class DiskEstimate:
    total: int  # bytes the output directory will take
    parts: tuple[tuple[str, int], ...]  # (label, bytes), summing to total
    shards: int
    tensor_bytes: int
    header_bytes: int

    def breakdown(self) -> str:
        return "; ".join(f"{label} {human_bytes(n)}" for label, n in self.parts)


def _json_size(doc: dict) -> int:
    return len(utf8(json_text(doc)))


def estimate_from_extraction(plan: TrimPlan, extraction: Extraction) -> DiskEstimate:
    by_kind: dict[str, int] = {}
    layer_rows: list[tuple[str, int]] = []
    other_rows: list[tuple[str, int]] = []
    mtp_layers = 0
    sizes: dict[str, int] = {}
    for t in extraction.tensors:
        sizes[t.part] = sizes.get(t.part, 0) + t.nbytes
    for part in extraction.parts:
        n = sizes.get(part.label, 0)
        if part.kind == LAYER:
            layer_rows.append((part.label, n))
        elif part.kind == OTHER:
            other_rows.append((f"other: {part.label}", n))
        else:
            by_kind[part.kind] = by_kind.get(part.kind, 0) + n
            if part.kind == MTP and part.label.startswith("MTP layer"):
                mtp_layers += 1
    rows: list[tuple[str, int]] = []
    if HEAD in by_kind:
        rows.append(("embeddings / head", by_kind.pop(HEAD)))
    rows += layer_rows
    if MTP in by_kind:
        rows.append((f"MTP / draft heads ({mtp_layers} layer{'s' if mtp_layers != 1 else ''})", by_kind.pop(MTP)))
    for kind, n in by_kind.items():  # other submodels: vision tower, audio encoder...
        rows.append((f"{kind} tower" if kind == "vision" else kind, n))
    rows += other_rows

    header_bytes = extraction.header_bytes
    rows.append((f"safetensors headers ({len(extraction.shards)} shard{'s' if len(extraction.shards) != 1 else ''})", header_bytes))
    index = extraction.index_text
    if index is not None:
        rows.append(("model.safetensors.index.json", len(index.encode("utf-8"))))
    docs = sum(_json_size(doc) for doc in plan.new_documents.values())
    assets = asset_files(plan)
    rows.append((f"config and assets ({len(plan.new_documents) + len(assets)} files)", docs + sum(f.size for f in assets)))
    # manifest (one line per retained and dropped tensor), script (one line per tensor plus
    # the headers), plan JSON and README: generous per-entry sizes.
    generated = 256 * 1024 + 1200 * len(plan.renames) + 200 * len(plan.dropped)
    rows.append(("manifest, script, plan, report (estimate)", generated))
    return DiskEstimate(
        total=sum(n for _, n in rows),
        parts=tuple(rows),
        shards=len(extraction.shards),
        tensor_bytes=extraction.tensor_bytes,
        header_bytes=header_bytes,
    )


def estimate_output(plan: TrimPlan, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> DiskEstimate:
    """What a real-weight trim of ``plan`` will take on disk. Pure: reads no file."""
    return estimate_from_extraction(plan, build_extraction(plan, max_shard_bytes))


def existing_ancestor(path: Path) -> Path:
    """The nearest directory that exists at or above ``path`` (the output does not exist yet)."""
    path = Path(path).absolute()
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path(path.anchor or "/")


def free_space_margin(filesystem_bytes: int, output_bytes: int) -> int:
    """Space left free after writing: never fill a filesystem to the last byte nor past 98 %
    of it (at least 1 GiB), but a small output needs no more than 1 MiB plus a tenth of itself
    (block rounding, the filesystem's own metadata), so it still fits a small volume."""
    return min(max(MARGIN_MIN, int(filesystem_bytes * MARGIN_FRACTION)), MARGIN_FLOOR + output_bytes // 10)


def check_free_space(estimate: DiskEstimate, out_dir: Path) -> tuple[bool, int, str]:
    """``(ok, free bytes, message)`` for writing ``estimate`` at ``out_dir``: ok when the
    free space of the filesystem that will hold it, minus a margin (see
    :func:`free_space_margin`), covers the output."""
    import psutil  # here, not at import: the writers and the wizard load this module early

    where = existing_ancestor(out_dir)
    usage = psutil.disk_usage(str(where))
    margin = free_space_margin(usage.total, estimate.total)
    usable = max(0, usage.free - margin)
    ok = estimate.total <= usable
    need = f"the output needs {human_bytes(estimate.total)} ({estimate.total:,} bytes)"
    have = (
        f"{human_bytes(usage.free)} ({usage.free:,} bytes) free on the filesystem of {where}, "
        f"keeping a margin of {human_bytes(margin)}"
    )
    if ok:
        message = f"{need}; {have}"
    else:
        message = (
            f"not enough disk space: {need}, {have} leaves {human_bytes(usable)}. "
            f"Breakdown: {estimate.breakdown()}. Choose another --out on a larger filesystem, keep fewer layers, "
            "or drop optional parts (e.g. --no-mtp)"
        )
    return ok, usage.free, message
