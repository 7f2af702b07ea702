"""Which source shards a real-weight trim reads: every shard holding a retained tensor.

A 3-layer trim of a 163-shard checkpoint needs a handful of them; this is the list to fetch
(``mxtrim plan --fetch-list``), with the download command when the repository is known.
Pure: from the plan, the headers already read and the index.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .build import TrimPlan
from ..units import human_bytes


@dataclass(frozen=True)
class NeededShard:
    file: str  # relative to the source root
    file_bytes: int | None  # the whole shard as a download fetches it (None: not on disk)
    retained_tensors: int  # tensors of the trim it holds
    retained_bytes: int | None  # their bytes (None: not on disk, only the index names them)
    present: bool  # on disk in the source
    # Not on disk: the index's total_size less the shards present, shared equally among the
    # absent ones (checkpoints are cut into shards of one nominal size); None without a total.
    estimated_file_bytes: int | None = None

    def to_json(self) -> dict:
        return {"file": self.file, "present": self.present, "file_bytes": self.file_bytes,
                "estimated_file_bytes": self.estimated_file_bytes, "retained_tensors": self.retained_tensors,
                "retained_bytes": self.retained_bytes}

    @property
    def download_bytes(self) -> int | None:
        """What fetching it costs: exact when present, the estimate when not."""
        return self.file_bytes if self.present else self.estimated_file_bytes


def needed_shards(plan: TrimPlan) -> list[NeededShard]:
    """The shards holding the plan's retained tensors, in shard order."""
    src = plan.inventory.source
    owner = src.tensor_shard
    counts: dict[str, list[int]] = {}
    for old, _new in plan.renames:
        rel = owner[old]
        entry = counts.setdefault(rel, [0, 0])
        entry[0] += 1
        entry[1] += src.tensor(old).nbytes
    estimate = None
    if src.absent_shards and src.index_total_size is not None:
        left = max(0, src.index_total_size - src.present_tensor_bytes)
        estimate = -(-left // len(src.absent_shards))
    out = []
    for rel, (n, nbytes) in sorted(counts.items()):
        header = src.shards.get(rel)
        if header is not None:
            out.append(NeededShard(rel, header.file_size, n, nbytes, True))
        else:
            out.append(NeededShard(rel, None, n, None, False, estimate))
    return out


def missing_shards(needed: list[NeededShard]) -> list[str]:
    return [s.file for s in needed if not s.present]


def needed_summary(needed: list[NeededShard], listed: int | None = None) -> str:
    """"needs 4 shards (17.1 GiB), 2 present", or "needs 4 of 163 shards (...)" with
    ``listed`` ("≈" where a size is estimated, "size unknown" where the index gives none)."""
    sizes = [s.download_bytes for s in needed]
    if any(b is None for b in sizes):
        size = "size unknown"
    else:
        size = ("≈ " if any(not s.present for s in needed) else "") + human_bytes(sum(sizes))
    present = sum(s.present for s in needed)
    of = f" of {listed}" if listed is not None else ""
    return f"needs {len(needed)}{of} shard{'s' if len(needed) != 1 or of else ''} ({size}), {present} present"


# A Hub repository id: owner/name, no path-like parts (a local path in _name_or_path is not one).
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def repo_id(config: dict, given: str | None = None) -> str | None:
    """The repository to download from: ``given`` (``--repo``), else config.json's
    ``_name_or_path`` when it is a Hub id rather than a local path."""
    if given:
        return given
    name = config.get("_name_or_path")
    if isinstance(name, str) and _REPO_ID.fullmatch(name) and not name.startswith((".", "/")) and ".." not in name:
        return name
    return None


def download_command(repo: str, files: list[str], local_dir: str) -> str:
    """The ``hf download`` line that fetches ``files`` into the source directory
    (``huggingface-cli download`` takes the same arguments)."""
    return shlex.join(["hf", "download", repo, "--include", *files, "--local-dir", local_dir])


def weights_blocker(plan: TrimPlan, repo: str | None = None) -> str | None:
    """Why a real-weight trim of ``plan`` cannot run from this source (needed shards not on
    disk), with what to fetch; None when it can."""
    missing = missing_shards(needed_shards(plan))
    if not missing:
        return None
    src = plan.inventory.source
    shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    repo = repo_id(src.config, repo)
    how = f"fetch them: {download_command(repo, missing, str(src.root))}" if repo else "fetch them into the source directory (mxtrim plan --fetch-list names every shard the trim reads)"
    return f"real weights need {len(missing)} shard(s) that are not in the source: {shown}; {how}; or trim with --mode dummy"
