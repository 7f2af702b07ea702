"""Byte sizes and formatting shared by the CLI, the TUI and reports."""

# The largest output shard unless the user says otherwise (huggingface_hub's "5GB").
DEFAULT_MAX_SHARD_BYTES = 5_000_000_000
# the digests a real-weight trim verifies and records every tensor with; the first is the default
HASHES = ("xxh3_128", "sha256")
DEFAULT_HASH = HASHES[0]


def human_bytes(n: int | float) -> str:
    """Binary units: 1536 -> '1.50 KiB', 688e9 -> '641 GiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            if abs(n) < 10:
                return f"{n:.2f} {unit}"
            if abs(n) < 100:
                return f"{n:.1f} {unit}"
            return f"{n:.0f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and the noun agreeing with it: '1 layer', '2 layers', '0 layers' (``many``: a plural
    other than noun + 's')."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def shown_bytes(n: int | None, known: bool = True) -> str:
    """``human_bytes`` of a size that may be partly unknown (tensors in shards not on disk):
    "unknown" when nothing of it is known, "≥ X" when only part is."""
    if n is None or (not known and n == 0):
        return "unknown"
    return human_bytes(n) if known else f"≥ {human_bytes(n)}"


def index_ranges(idx) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out, start, prev = [], None, None
    for i in sorted(idx):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)
