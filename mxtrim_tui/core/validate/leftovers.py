"""Servers that outlived the mxtrim that started them.

Every server ``validate --serve`` starts gets a small JSON record in the state directory
(``$XDG_STATE_HOME/mxtrim/servers/``, else ``~/.local/state/mxtrim/servers/``): the server's
pid and process group, its start time and command line, the mxtrim process that started it,
the output directory. The record is removed once the server is stopped. Only a parent that
died without stopping it (SIGKILL, a crash of the interpreter, a power cut of the terminal)
leaves one behind; the next ``validate --serve`` (and the wizard's start) call ``scan()``:

- the parent still runs: the server is its, nothing to say;
- nothing of the server's group runs any more: the record is removed, silently;
- else the server (or a child of it) is a leftover: reported in one line, stopped by
  ``mxtrim leftovers --stop`` (``stop()``).

A pid is the server's only while its start time (and command line) match the record: a pid
the system gave to another process since is never reported, nor signalled.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..child_process import stop_group
from ..user_settings import state_dir as user_state_dir

SCHEMA = "mxtrim.server/1"
TIME_TOLERANCE = 0.05  # seconds: psutil's create_time of one process, read twice, is the same


def state_dir() -> Path:
    """Where the server records live: ``$XDG_STATE_HOME/mxtrim/servers``."""
    return user_state_dir() / "servers"


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


@dataclass
class ServerRecord:
    pid: int  # the server process (the leader of its own process group)
    pgid: int
    create_time: float  # psutil's, of the server: with pid, who it is
    command: list[str]  # as started
    parent_pid: int  # the mxtrim process that started it and must stop it
    parent_create_time: float | None
    output: str
    started: str  # UTC, for people
    path: Path | None = field(default=None, compare=False)

    def to_json(self) -> dict:
        doc = asdict(self)
        doc.pop("path")
        return {"schema": SCHEMA, **doc}

    @classmethod
    def from_json(cls, doc: dict, path: Path) -> "ServerRecord":
        return cls(
            pid=int(doc["pid"]), pgid=int(doc["pgid"]), create_time=float(doc["create_time"]),
            command=[str(a) for a in doc["command"]], parent_pid=int(doc["parent_pid"]),
            parent_create_time=None if doc.get("parent_create_time") is None else float(doc["parent_create_time"]),
            output=str(doc.get("output", "")), started=str(doc.get("started", "")), path=path,
        )


def write_record(pid: int, command: list[str], output: Path) -> Path | None:
    """Record a server just started (its own session: pgid == pid). Never fails a validation:
    an unwritable state directory only means no record (None)."""
    created = _create_time(pid)
    if created is None:
        return None  # gone already (and reaped): nothing to find later
    record = ServerRecord(
        pid=pid, pgid=pid, create_time=created, command=list(command), parent_pid=os.getpid(),
        parent_create_time=_create_time(os.getpid()), output=str(output),
        started=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
    path = state_dir() / f"server-{pid}-{int(created * 1000)}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(record.to_json(), indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # a record is whole or absent
    except OSError:
        return None
    return path


def remove_record(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def read_records() -> list[ServerRecord]:
    """Every record; unreadable ones are removed (records are written whole, by rename)."""
    try:
        paths = sorted(state_dir().glob("server-*.json"))
    except OSError:
        return []
    records = []
    for path in paths:
        try:
            records.append(ServerRecord.from_json(json.loads(path.read_text(encoding="utf-8")), path))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            remove_record(path)
    return records


def _same_process(pid: int, create_time: float | None):
    """psutil.Process for ``pid`` if it is still the process that started at ``create_time``
    (and not a zombie), else None."""
    import psutil

    if create_time is None:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > TIME_TOLERANCE or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def _command_matches(live: list[str], recorded: list[str]) -> bool:
    """The server's arguments (from --model on: output, port, settings) end its live command
    line; what precedes them may differ (a launcher script that execs, an interpreter named by a
    shebang)."""
    tail = recorded[recorded.index("--model"):] if "--model" in recorded else recorded
    return len(live) >= len(tail) and live[len(live) - len(tail):] == tail


def members(record: ServerRecord) -> list:
    """The live processes of the record's server: the server itself if its pid, start time and
    command line still match, and the rest of its process group (children that outlived it).
    Empty when the pid was given to another process (a process group is never renumbered
    while it has members, so then none of the old group is left)."""
    import psutil

    try:
        leader = psutil.Process(record.pid)
        leader_time = leader.create_time()
    except psutil.Error:
        leader = None
    if leader is not None:
        if abs(leader_time - record.create_time) > TIME_TOLERANCE:
            return []  # the pid is another process's now
        try:
            if leader.status() != psutil.STATUS_ZOMBIE and not _command_matches(leader.cmdline(), record.command):
                return []
        except psutil.Error:
            pass
    found = []
    for proc in psutil.process_iter(["status", "create_time"]):
        try:
            if (os.getpgid(proc.pid) == record.pgid and proc.info["status"] != psutil.STATUS_ZOMBIE
                    and proc.info["create_time"] >= record.create_time - TIME_TOLERANCE):
                found.append(proc)
        except (OSError, TypeError, psutil.Error):
            continue
    return found


@dataclass
class Leftover:
    record: ServerRecord
    processes: list  # psutil.Process

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]


def scan() -> list[Leftover]:
    """Servers whose mxtrim is gone but which (or whose children) still run. Records of servers
    that are gone are removed; records of servers whose mxtrim still runs are left alone."""
    if not state_dir().is_dir():
        return []  # the common case costs a stat, not a psutil import
    leftovers = []
    for record in read_records():
        if _same_process(record.parent_pid, record.parent_create_time) is not None:
            continue  # its mxtrim runs, and will stop it
        alive = members(record)
        if alive:
            leftovers.append(Leftover(record, alive))
        else:
            remove_record(record.path)
    return leftovers


def stop(leftover: Leftover, grace: float = 5.0) -> list[int]:
    """SIGTERM to the server's process group, SIGKILL to what is left after ``grace`` seconds;
    the record is removed once nothing of it runs. Returns the pids still alive (normally
    none)."""
    import psutil

    def signal_each(sig) -> None:
        for proc in leftover.processes:  # the same processes, identity checked by psutil
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass

    def exited(seconds: float, hurry) -> bool:
        return not psutil.wait_procs(leftover.processes, timeout=seconds)[1]

    stop_group(leftover.record.pgid, ((signal.SIGTERM, grace),), exited=exited, also=signal_each)
    alive = psutil.wait_procs(leftover.processes, timeout=0)[1]
    # children the group gained meanwhile (a server that forks while it is told to stop)
    deadline = time.monotonic() + 2.0
    rest = members(leftover.record)
    while rest and time.monotonic() < deadline:
        for proc in rest:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(rest, timeout=1.0)
        rest = members(leftover.record)
    survivors = sorted({p.pid for p in alive} | {p.pid for p in rest})
    if not survivors:
        remove_record(leftover.record.path)
    return survivors


def describe(leftover: Leftover) -> str:
    r = leftover.record
    others = [p for p in leftover.pids if p != r.pid]
    who = f"pid {r.pid}" if r.pid in leftover.pids else f"pid {r.pid} (gone; its children {', '.join(map(str, others))} run)"
    if r.pid in leftover.pids and others:
        who += f" and {len(others)} child process(es)"
    return f"{who}, serving {r.output}, started {r.started} by mxtrim pid {r.parent_pid}"


def notice(leftovers: list[Leftover]) -> str:
    """One line for stderr or a notification."""
    if len(leftovers) == 1:
        return (f"mxtrim: a server left running by an earlier mxtrim that was killed: {describe(leftovers[0])}; "
                "stop it with: mxtrim leftovers --stop")
    pids = ", ".join(str(l.record.pid) for l in leftovers)
    return (f"mxtrim: {len(leftovers)} servers left running by earlier mxtrim runs that were killed (pids {pids}); "
            "list them with: mxtrim leftovers; stop them with: mxtrim leftovers --stop")
