"""Progress events, one schema: what the writers and validation emit, what ``--progress``
prints as JSON lines on stderr, and what the wizard reads back from its child.

On the wire an event is a JSON object whose ``event`` field names its kind; :func:`parse_event`
turns one into its typed form below (a kind this version does not know is :class:`Other`,
never an error: a newer child may say more). Fields a kind defines are read with their types;
the object itself stays at hand as ``raw`` (the extraction script's and validation's rows carry
more than the screen shows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Event:
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Stage(Event):
    """A stage of a write or a validation: ``start`` / ``running`` / ``done``."""

    name: str = ""
    status: str = ""
    summary: str = ""  # what the stage established, when it says (the structure check's verdict)


@dataclass(frozen=True)
class FileWritten(Event):
    path: str = ""
    bytes: int = 0
    done_files: int = 0
    total_files: int = 0


@dataclass(frozen=True)
class TensorCopied(Event):
    """The extraction's progress (at most ten a second)."""

    name: str = ""
    shard: str = ""
    done_bytes: int = 0
    total_bytes: int = 0


@dataclass(frozen=True)
class ShardWritten(Event):
    shard: str = ""
    status: str = ""
    bytes: int = 0


@dataclass(frozen=True)
class Verifying(Event):
    """The written shards read back and hashed behind the copy."""

    done_bytes: int = 0
    total_bytes: int = 0


@dataclass(frozen=True)
class Result(Event):
    output: str = ""
    files: int = 0


@dataclass(frozen=True)
class LeftoverRemoved(Event):
    path: str = ""
    status: str = ""


@dataclass(frozen=True)
class ServerLog(Event):
    stream: str = ""
    line: str = ""


@dataclass(frozen=True)
class Check(Event):
    """One validation check's row (``raw`` holds all of it)."""

    check: str = ""
    status: str = ""


@dataclass(frozen=True)
class Serve(Event):
    status: str = ""  # starting | retrying (another process took its port) | stopped
    reason: str = ""  # retrying: why
    command: tuple = ()
    log: str = ""  # where the server's output goes (starting)
    signal: str = ""
    returncode: int | None = None


@dataclass(frozen=True)
class Memory(Event):
    """Predicted against logged start-up memory (``raw`` holds the figures)."""


@dataclass(frozen=True)
class Request(Event):
    name: str = ""
    status: int | None = None  # the HTTP status
    seconds: float | None = None
    detail: str = ""
    passed: bool = False


@dataclass(frozen=True)
class Other(Event):
    kind: str = ""


KINDS: dict[str, type[Event]] = {
    "stage": Stage, "file": FileWritten, "tensor": TensorCopied, "shard": ShardWritten, "verify": Verifying,
    "result": Result, "leftover": LeftoverRemoved, "log": ServerLog, "check": Check, "serve": Serve,
    "memory": Memory, "request": Request,
}


def _coerce(value, default):
    """``value`` as the type of the field's default (a wrong type: the default)."""
    if default is None:
        return value
    kind = type(default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is tuple and isinstance(value, list):
        return tuple(value)
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else default


def parse_event(obj: dict) -> Event:
    """The typed form of one event object."""
    kind = obj.get("event")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Other(raw=obj, kind=str(kind))
    values = {}
    for f in fields(cls):
        if f.name == "raw":
            continue
        default = f.default
        if f.name in obj and obj[f.name] is not None:
            values[f.name] = _coerce(obj[f.name], default)
    return cls(raw=obj, **values)


def parse_line(line: str) -> Event | None:
    """An event from one JSON line of a child's stderr (None: not an event, a plain line)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return parse_event(obj) if isinstance(obj, dict) and "event" in obj else None


def event_line(obj: dict) -> str:
    """One event as ``--progress`` prints it (the wire form :func:`parse_line` reads)."""
    return json.dumps(obj, default=str)
