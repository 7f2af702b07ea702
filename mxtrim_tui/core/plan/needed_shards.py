"""Which source shards a real-weight trim reads: every shard holding a retained tensor.

A 3-layer trim of a 163-shard checkpoint needs a handful of them; this is the list to fetch
(``mxtrim plan --fetch-list``). Pure: from the plan and the headers already read.
"""

from __future__ import annotations

from dataclasses import dataclass

from .build import TrimPlan


@dataclass(frozen=True)
class NeededShard:
    file: str  # relative to the source root
    file_bytes: int  # the whole shard, as a download would fetch it
    retained_tensors: int  # tensors of the trim it holds
    retained_bytes: int  # their bytes
    present: bool  # on disk in the source

    def to_json(self) -> dict:
        return {"file": self.file, "file_bytes": self.file_bytes, "retained_tensors": self.retained_tensors,
                "retained_bytes": self.retained_bytes, "present": self.present}


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
    return [
        NeededShard(rel, src.shards[rel].file_size, n, nbytes, True)
        for rel, (n, nbytes) in sorted(counts.items())
    ]
