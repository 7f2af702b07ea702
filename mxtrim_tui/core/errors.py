"""Error types of the engine.

Every error a user can cause with bad input is an ``InputError``: one line that names the
file and the problem. The CLI prints it without a traceback and exits with status 1.
"""

from __future__ import annotations

from pathlib import Path


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a file name...) escaped, so an error
    stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InputError(Exception):
    """Bad input: a file that is missing, unreadable or malformed."""

    def __init__(self, path: str | Path | None, problem: str):
        self.path = str(path) if path is not None else None
        self.problem = problem
        shown = one_line(self.path) if self.path else None
        super().__init__(f"{shown}: {one_line(problem)}" if shown else one_line(problem))


def require_directory(path: str | Path) -> Path:
    """``path``, which must be a directory: the one error every command gives when it is not
    (a model to read, an output to validate)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(path, "is not a directory" if path.exists() else "no such directory")
    return path


class SafetensorsFormatError(InputError):
    """A safetensors file that breaks one of the format's rules."""

    def __init__(self, path: str | Path, problem: str, tensor: str | None = None):
        self.tensor = tensor
        where = f"tensor {tensor!r}: " if tensor is not None else ""
        super().__init__(path, where + problem)


class IndexConsistencyError(InputError):
    """``model.safetensors.index.json`` disagrees with the shards on disk."""
