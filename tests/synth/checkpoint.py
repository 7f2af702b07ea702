"""Write a Hugging Face-layout checkpoint directory from a list of tensor specs."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from mxtrim_tui.core.read.safetensors_io import build_header_bytes, tensor_nbytes

TensorSpec = tuple[str, str, tuple[int, ...]]


@dataclass
class Layout:
    """A model's config and tensor list, as its real checkpoint has them."""

    name: str
    config: dict
    tensors: list[TensorSpec]
    # Other files to write beside config.json: name -> dict (written as JSON), str or bytes.
    extra_files: dict[str, object] = field(default_factory=dict)
    # Shard size used when writing (real releases use ~4-5 GB shards).
    max_shard_bytes: int = 5_000_000_000

    @property
    def total_bytes(self) -> int:
        return sum(tensor_nbytes(d, s) for _, d, s in self.tensors)


def plan_shards(tensors: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Greedy split in checkpoint order; an oversized tensor gets a shard of its own."""
    shards: list[list[TensorSpec]] = []
    current: list[TensorSpec] = []
    size = 0
    for spec in tensors:
        n = tensor_nbytes(spec[1], spec[2])
        if current and size + n > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(spec)
        size += n
    if current or not shards:
        shards.append(current)
    return shards


def write_safetensors(
    path: Path,
    tensors: list[TensorSpec],
    *,
    data: str = "random",
    seed: int = 0,
    metadata: dict[str, str] | None = None,
    payload: dict[str, bytes] | None = None,
) -> int:
    """Write one safetensors file. ``data``: "random" (seeded bytes), "zeros" or "sparse"
    (header written, file extended with a hole: full logical size, no disk blocks).
    ``payload`` gives exact bytes for some tensors. Returns the file size."""
    entries = [(n, d, s, tensor_nbytes(d, s)) for n, d, s in tensors]
    prefix, data_size = build_header_bytes(entries, metadata if metadata is not None else {"format": "pt"})
    rng = random.Random(seed)
    with open(path, "wb") as fh:
        fh.write(prefix)
        if data == "sparse":
            fh.truncate(len(prefix) + data_size)
        else:
            for name, _, _, nbytes in entries:
                if payload and name in payload:
                    blob = payload[name]
                    if len(blob) != nbytes:
                        raise ValueError(f"payload for {name} is {len(blob)} bytes, expected {nbytes}")
                    fh.write(blob)
                elif data == "zeros":
                    fh.write(bytes(nbytes))
                else:
                    fh.write(rng.randbytes(nbytes))
    return len(prefix) + data_size


def write_checkpoint(
    root: str | Path,
    layout: Layout,
    *,
    data: str = "sparse",
    max_shard_bytes: int | None = None,
    seed: int = 0,
    tokenizer: bool = True,
    index: bool | None = None,
) -> Path:
    """Write ``layout`` under ``root`` (created). Shards follow the standard
    ``model-0000i-of-0000n.safetensors`` naming with an index when there is more than one."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(layout.config, indent=2) + "\n")
    for name, content in layout.extra_files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(json.dumps(content, indent=2) + "\n")
    shards = plan_shards(layout.tensors, max_shard_bytes or layout.max_shard_bytes)
    n = len(shards)
    if index is None:
        index = n > 1
    weight_map: dict[str, str] = {}
    total = 0
    for i, shard in enumerate(shards, 1):
        fname = "model.safetensors" if n == 1 and not index else f"model-{i:05d}-of-{n:05d}.safetensors"
        write_safetensors(root / fname, shard, data=data, seed=seed + i)
        for name, dtype, shape in shard:
            weight_map[name] = fname
            total += tensor_nbytes(dtype, shape)
    if index:
        doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (root / "model.safetensors.index.json").write_text(json.dumps(doc, indent=2) + "\n")
    if tokenizer:
        from mxtrim_tui.demo.tokenizer import write_tokenizer

        write_tokenizer(root)
    return root
