"""The output's layout, decided before anything is written: which source byte range goes to
which output shard under which name and in which order, every output header byte for byte
(:func:`build_extraction`), which source files an output takes over (:func:`asset_files`), and
how mxtrim spells the JSON it writes. The disk budget sizes exactly this; the writers
(core/write/) carry it out, and ``extract_weights.py`` embeds it.

Output order (and so sharding): embeddings, text layers in their new order, MTP / draft
heads, then everything else (final norm, lm head, vision tower, projectors). Inside each
part, tensors keep their source order (file, offset): reads are sequential, and a run of
tensors contiguous in the source stays contiguous in the output, so one choice of header
padding per shard puts most of the copied bytes at the same offset modulo the page size as
in the source (what lets the script copy them with os.copy_file_range).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .build import TrimPlan
from ..read.safetensors_io import build_header_bytes
from ..read.source import FileKind, ModelSource

# What a dummy directory needs besides the rewritten config (seed: "Generate the output directory"):
# copied whatever their size.
ASSET_KINDS = (
    FileKind.TOKENIZER,
    FileKind.TOKENIZER_CONFIG,
    FileKind.CHAT_TEMPLATE,
    FileKind.GENERATION_CONFIG,
    FileKind.PROCESSOR_CONFIG,
    FileKind.CUSTOM_CODE,
)
# Side files: every other non-weight file (quantizer recipes, unknown files), copied when no
# larger than SIDE_FILE_LIMIT_BYTES and not named or shaped like weights.
SIDE_KINDS = (FileKind.QUANT_RECIPE, FileKind.UNKNOWN)
SIDE_FILE_LIMIT_BYTES = 16 * 1024 * 1024
OVER_SIDE_LIMIT = f"over the {SIDE_FILE_LIMIT_BYTES // (1024 * 1024)} MiB limit for unknown files"
PAGE = 4096
SINGLE_SHARD_NAME = "model.safetensors"
DEFAULT_METADATA = {"format": "pt"}

# OutputPart.kind values: what a part of the output is, for ordering and the disk breakdown.
HEAD = "embeddings / head"
LAYER = "layer"
MTP = "mtp"
OTHER = "other"

_RANK_EMBEDDINGS, _RANK_LAYERS, _RANK_MTP, _RANK_REST = range(4)


@dataclass(frozen=True)
class TensorCopy:
    """One output tensor: its new name and where its bytes are in the source."""

    name: str  # output name
    source_file: str  # relative to the source root
    source_name: str
    dtype: str
    shape: tuple[int, ...]
    source_begin: int  # absolute file offsets
    source_end: int
    part: str  # label of the OutputPart it belongs to

    @property
    def nbytes(self) -> int:
        return self.source_end - self.source_begin


@dataclass(frozen=True)
class OutputShard:
    file: str
    tensors: tuple[TensorCopy, ...]
    header: bytes  # the 8-byte length + the JSON header, exactly as written

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def file_bytes(self) -> int:
        return len(self.header) + self.data_bytes

    def output_ranges(self):
        """``(tensor, begin, end)`` with absolute offsets in the output file."""
        pos = len(self.header)
        for t in self.tensors:
            yield t, pos, pos + t.nbytes
            pos += t.nbytes


@dataclass(frozen=True)
class OutputPart:
    """A piece of the output a user recognises: the embeddings, one kept layer, the MTP
    block, the vision tower..."""

    kind: str  # HEAD | LAYER | MTP | OTHER | a submodel name ("vision", ...)
    label: str
    rank: tuple  # sort key: output order
    tensors: tuple[tuple[str, str], ...]  # (old name, new name)


@dataclass(frozen=True)
class Extraction:
    source_root: Path
    shards: tuple[OutputShard, ...]
    metadata: dict[str, str]
    parts: tuple[OutputPart, ...]

    @property
    def tensors(self) -> list[TensorCopy]:
        return [t for s in self.shards for t in s.tensors]

    @property
    def tensor_bytes(self) -> int:
        return sum(s.data_bytes for s in self.shards)

    @property
    def header_bytes(self) -> int:
        return sum(len(s.header) for s in self.shards)

    @property
    def needed_source_files(self) -> list[str]:
        return sorted({t.source_file for t in self.tensors})

    @cached_property
    def index_text(self) -> str | None:
        """``model.safetensors.index.json`` as written: only for more than one shard (built
        once: the disk estimate, the writer and the verification all need it)."""
        if len(self.shards) < 2:
            return None
        return index_text({t.name: s.file for s in self.shards for t in s.tensors}, self.tensor_bytes)


def index_text(weight_map: dict[str, str], total_size: int) -> str:
    # transformers v5 writes sort_keys=True, indent=2 and a final newline; the script
    # reproduces exactly this text.
    return json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"


def natural_key(name: str) -> tuple:
    """``experts.2`` before ``experts.10``; numbers sort before words at the same place."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split("."))


# ---------------------------------------------------------------------------------------
def output_parts(plan: TrimPlan) -> list[OutputPart]:
    """The retained tensors grouped into recognisable parts, in output order.

    Every retained tensor lands in exactly one part; one the inventory cannot place (it
    should not happen: renames come from the inventory) goes to an "other" part."""
    inv = plan.inventory
    new_name = dict(plan.renames)
    parts: list[OutputPart] = []
    mapped = {(m.submodel, m.old_name): m for m in plan.mappings}

    for part in inv.shared:
        kept = tuple((t, new_name[t]) for t in part.tensors if t in new_name)
        if not kept:
            continue
        if part.label == "embeddings":
            parts.append(OutputPart(HEAD, part.label, (_RANK_EMBEDDINGS,), kept))
        elif part.label in ("final norm", "lm head"):
            parts.append(OutputPart(HEAD, part.label, (_RANK_REST, 0, part.label), kept))
        else:
            parts.append(OutputPart(OTHER, part.label, (_RANK_REST, 2, part.label), kept))

    for sub_i, sm in enumerate(inv.submodels.values()):
        for layer in sm.layers:
            m = mapped.get((sm.name, layer.name))
            if m is None:
                continue
            kept = tuple((t, new_name[t]) for t in layer.tensors if t in new_name)
            if sm.name == "text":
                label = f"text layer {m.new}" + (f" (was {m.old})" if m.new != m.old else "")
                parts.append(OutputPart(LAYER, label, (_RANK_LAYERS, m.new), kept))
            elif sm.name == "mtp":
                label = f"MTP layer {m.old} ({m.new_name})"
                parts.append(OutputPart(MTP, label, (_RANK_MTP, 0, m.new), kept))
            else:
                label = f"{sm.name} layer {m.new}" + (f" (was {m.old})" if m.new != m.old else "")
                parts.append(OutputPart(sm.name, label, (_RANK_REST, 3, sub_i, 0, m.new), kept))
        for p_i, part in enumerate(sm.parts):
            kept = tuple((t, new_name[t]) for t in part.tensors if t in new_name)
            if not kept:
                continue
            if sm.name == "mtp":
                parts.append(OutputPart(MTP, f"MTP {part.label}", (_RANK_MTP, 1, p_i), kept))
            elif sm.name == "text":
                parts.append(OutputPart(HEAD, part.label, (_RANK_REST, 1, p_i), kept))
            else:
                parts.append(OutputPart(sm.name, f"{sm.name} {part.label}", (_RANK_REST, 3, sub_i, 1, p_i), kept))

    placed = {old for p in parts for old, _ in p.tensors}
    stray = tuple((o, n) for o, n in plan.renames if o not in placed)
    if stray:
        parts.append(OutputPart(OTHER, "other tensors", (_RANK_REST, 9), stray))
    parts.sort(key=lambda p: p.rank)
    return parts


def source_metadata(src: ModelSource, files: list[str]) -> dict[str, str]:
    """The ``__metadata__`` of the first of the source shards ``files`` that has one (at
    least ``{"format": "pt"}``, which transformers requires to accept the file). Only shards
    the trim reads count, so a partial download gives the same output as the whole source."""
    for rel in files:
        header = src.shards[rel]
        if header.metadata:
            meta = dict(header.metadata)
            meta.setdefault("format", "pt")
            return meta
    return dict(DEFAULT_METADATA)


def shard_names(n: int) -> list[str]:
    if n == 1:
        return [SINGLE_SHARD_NAME]
    return [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


def build_extraction(plan: TrimPlan, max_shard_bytes: int) -> Extraction:
    """Lay out the output: tensors in output order, greedily cut into shards of at most
    ``max_shard_bytes`` tensor bytes (a larger tensor gets a shard of its own), headers
    with fresh contiguous offsets. Reads nothing beyond the headers already parsed."""
    if max_shard_bytes <= 0:
        raise ValueError("max_shard_bytes must be positive")
    src = plan.inventory.source
    parts = output_parts(plan)
    copies: list[TensorCopy] = []
    for part in parts:
        part_copies = []
        for old, new in part.tensors:
            rel = src.tensor_shard[old]
            header = src.shards[rel]
            info = header.tensors[old]
            part_copies.append(
                TensorCopy(new, rel, old, info.dtype, info.shape, header.data_start + info.begin, header.data_start + info.end, part.label)
            )
        copies += sorted(part_copies, key=lambda t: (t.source_file, t.source_begin, natural_key(t.name)))

    groups: list[list[TensorCopy]] = []
    current: list[TensorCopy] = []
    size = 0
    for c in copies:
        if current and size + c.nbytes > max_shard_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(c)
        size += c.nbytes
    if current or not groups:
        groups.append(current)

    metadata = source_metadata(src, sorted({c.source_file for c in copies}))
    shards = []
    for name, group in zip(shard_names(len(groups)), groups):
        header, _ = build_header_bytes([(t.name, t.dtype, t.shape, t.nbytes) for t in group], metadata)
        shards.append(OutputShard(name, tuple(group), _page_congruent(header, group)))
    return Extraction(src.root, tuple(shards), metadata, tuple(parts))


def _page_congruent(header: bytes, group: list[TensorCopy]) -> bytes:
    """Pad the header with trailing spaces (the format allows it; the reference writer pads
    to a multiple of 8) so that the most bytes land at their source offset modulo PAGE.
    Padding stays a multiple of 8, keeping the data section 8-byte aligned."""
    votes: dict[int, int] = {}
    offset = len(header)
    for t in group:
        pad = (t.source_begin - offset) % PAGE
        if pad % 8 == 0:
            votes[pad] = votes.get(pad, 0) + t.nbytes
        offset += t.nbytes
    if not votes:
        return header
    pad = max(votes.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    if pad == 0:
        return header
    raw = header[8:] + b" " * pad
    return len(raw).to_bytes(8, "little") + raw



# --- the files an output takes over, and how its JSON is spelled -------------------------
def is_copied_kind(f) -> bool:
    """Whether a source file is of a kind an output takes over: an asset, or a small side file
    that is not weights (names reserved by mxtrim aside)."""
    if f.kind in ASSET_KINDS:
        return True
    return f.kind in SIDE_KINDS and not f.never_copy and f.size <= SIDE_FILE_LIMIT_BYTES


def asset_files(plan: TrimPlan, reserved=frozenset()):
    """Source files copied into every output (tokenizer files, templates, generation/processor
    configs, custom code, and side files: quantizer recipes and other small non-weight files),
    excluding those rewritten by the plan and the ``reserved`` names mxtrim writes itself."""
    return [
        f for f in plan.inventory.source.files
        if f.path not in plan.new_documents and is_copied_kind(f) and f.path not in reserved
    ]


def json_text(doc: dict) -> str:
    """How every JSON document mxtrim writes is spelled: indent 2, UTF-8, a final newline.
    A file name that is not UTF-8 (held as surrogates) makes the document ASCII with escapes,
    which still reads back to the same name."""
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if text.isascii() or encodes_utf8(text):
        return text
    return json.dumps(doc, indent=2) + "\n"


def encodes_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8(text: str) -> bytes:
    """``text`` as written to a file: UTF-8, with what cannot be (non-UTF-8 file names held as
    surrogates) spelled as backslash escapes."""
    return text.encode("utf-8", "backslashreplace")


