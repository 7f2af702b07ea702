"""Validating many outputs side by side (``mxtrim validate --all --jobs N|auto``).

Each output is validated by a child ``mxtrim validate OUT --json --progress`` — the very run
a serial batch makes, so its ``validation.json``, logs and README are what a serial run
writes — placed on the GPUs it needs (TP × PP devices) by the live occupancy:

* a GPU holding memory of a process this batch did not start is never used;
* small outputs may share a GPU, each with its own utilisation share
  (``--gpu-memory-utilization``), while the shares add up to at most ``MAX_SHARED`` and the
  GPU's free memory covers the newcomer's share (vLLM refuses to start otherwise);
* no two servers profile memory on one GPU at the same time: vLLM measures the whole GPU's
  free memory from the moment its engine takes the device until its KV cache is allocated,
  so a neighbour that allocates (or frees) memory meanwhile changes the newcomer's KV cache
  or fails it. Servers start side by side (their first tens of seconds are CPU work); a
  server whose engine announces itself ("Initializing a V1 LLM engine") while another on one
  of its GPUs is inside that window is paused (SIGSTOP to its process group, before it takes
  the device) and continued when the window closes at the other's "init engine (profile,
  create kv cache, warmup model) took". A finished server is not stopped while a neighbour's
  window is open (the child waits on the batch folder's ``profiling-GPU`` files);
* a start-up that fails on memory while it shared a GPU is run again alone: a failure caused
  by a neighbour is not the output's.

* with ``starting`` set, at most that many servers are in their CPU start-up at once (from
  their child's start to their engine's first line): the others wait, so the first ones reach
  their memory windows sooner instead of all contending for the CPUs together.

On the CPU (no GPU visible) up to N servers simply run at once. The caller rewrites the matrix
as rows finish; Ctrl-C stops every running child (each stops its own server and records the
interruption as a single run does) and keeps the finished rows."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ..child_process import NotStarted, os_reason, parent_death_signal, start
from ..errors import InputError
from ..units import plural
from .devices import others_on, pid_exists

MAX_SHARED = 0.95  # the shares of one GPU's memory that its servers may add up to
# vLLM's EngineCore, about to take the device (its memory baseline follows) ...
ENGINE_STARTING = re.compile(r"Initializing a V1 LLM engine")
# ... and once its KV cache is allocated and the model warmed up
KV_READY = re.compile(r"init engine \(profile, create kv cache, warmup model\) took")
# start-up failures a neighbour's memory traffic causes (vLLM's profiler and KV sizing)
NEIGHBOUR_FAILURE = re.compile(r"No available memory for the cache blocks|Error in memory profiling|"
                               r"Free memory on device .* is less than desired GPU memory utilization")
BATCH_DIR_ENV = "MXTRIM_BATCH_DIR"
OURS_FILE = "ours.json"  # pids of every process the batch started (children, servers, workers)


def profiling_file(batch_dir: Path, gpu: int) -> Path:
    return Path(batch_dir) / f"profiling-{gpu}"


@dataclass
class Job:
    index: int
    output: Path
    tp: int  # tensor parallel size
    share: float | None  # its GPU memory utilisation (None: on the CPU)
    alone: bool = False  # run again alone after a failure beside a neighbour
    pp: int = 1  # pipeline parallel size
    gpus: list[int] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    profiling: bool = False  # inside its memory window (engine start to KV cache allocated)
    engine: bool = False  # its engine has announced itself: its CPU start-up is over
    paused: list[int] = field(default_factory=list)  # its server's process groups, stopped until a window closes
    shared: bool = False  # another of ours ran on one of its GPUs beside it
    stdout: list[str] = field(default_factory=list)
    tail: deque = field(default_factory=lambda: deque(maxlen=40))  # its last lines: server log, errors
    ended: set = field(default_factory=set)  # its streams read to the end ("stdout", "stderr")

    @property
    def devices(self) -> int:
        """GPUs the server needs: TP × PP."""
        return self.tp * self.pp


@dataclass
class Placement:
    gpus: list[int] | None  # None: not now (try again when one of ours moves on)
    refused: str = ""  # why never (not enough GPUs free of others' memory, a share too large)


class GpuLedger:
    """Which GPUs may take a server now, from a live probe and the batch's own servers."""

    def __init__(self, allowed: set[int] | None = None) -> None:
        self.allowed = allowed  # the user's CUDA_/MACA_VISIBLE_DEVICES, as indices
        self.baseline: dict[int, int] = {}  # used bytes when the batch began (our servers: none)

    def held_by_others(self, gpu, ours: set[int], running_here: bool) -> str | None:
        """Why ``gpu`` holds memory of a process this batch did not start (None: it does not)."""
        others = others_on(gpu, ours, unseen_are_ours=running_here)
        if others:
            p = others[0]
            return f"GPU {gpu.index} holds memory of {p.name or 'a process'}[{p.pid}], not started by this batch"
        base = self.baseline.setdefault(gpu.index, gpu.used_bytes or 0)
        if not running_here and base > IDLE_USED_BYTES and gpu.used_bytes and gpu.used_bytes > IDLE_USED_BYTES:
            return f"GPU {gpu.index}: {gpu.used_bytes / 2**30:.1f} GiB in use by processes not visible here"
        return None

    def place(self, job: Job, probe, running: list[Job], ours: set[int]) -> Placement:
        gpus = [g for g in probe.gpus if self.allowed is None or g.index in self.allowed]
        share = job.share or 0.0
        if share > MAX_SHARED:
            return Placement(None, refused=f"a GPU share of {share:g} is more than {MAX_SHARED:g}")
        usable, reasons = [], []
        for g in gpus:
            here = [j for j in running if g.index in j.gpus]
            why = self.held_by_others(g, ours, bool(here))
            if why:
                reasons.append(why)
                continue
            usable.append((g, here))
        if len(usable) < job.devices:
            return Placement(None, refused=f"{plural(len(usable), 'GPU')} free of other processes' memory, {job.devices} needed"
                             + (": " + "; ".join(reasons) if reasons else ""))
        free_now = []
        for g, here in usable:
            if job.alone and here:
                continue
            if sum(j.share or 0.0 for j in here) + share > MAX_SHARED + 1e-9:
                continue
            if g.total_bytes and g.free_bytes is not None and g.free_bytes < share * g.total_bytes:
                continue  # vLLM refuses a start whose share is not free
            free_now.append((len(here), g.index))
        if len(free_now) < job.devices:
            if not running:
                return Placement(None, refused=f"no {plural(job.devices, 'GPU')} with {share:g} of their memory free")
            return Placement(None)
        chosen = sorted(i for _, i in sorted(free_now)[:job.devices])
        return Placement(chosen)


IDLE_USED_BYTES = 2 * 2**30  # what a GPU nobody uses may show as used (driver, context reserve)


def _tree(pid: int) -> set[int]:
    """``pid`` and its live descendants."""
    import psutil

    try:
        return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:  # gone meanwhile
        return {pid}


class ParallelBatch:
    """Runs ``jobs`` through ``argv_for(job)`` children, at most ``limit`` at once (None: as
    many as the GPUs take), at most ``starting`` of them in their CPU start-up (None: any).
    ``probe()`` gives a live GpuProbe (None or unavailable: the CPU).
    ``on_start(job)``, ``on_done(job, doc, returncode, retried)``, ``on_refused(job, why)`` and
    ``on_pause(job, paused)`` report."""

    def __init__(self, jobs: list[Job], argv_for, probe, limit: int | None, on_start, on_done, on_refused,
                 allowed: set[int] | None = None, poll: float = 0.5, on_pause=None, starting: int | None = None) -> None:
        self.pending = list(jobs)
        self.starting = starting
        self.running: list[Job] = []
        self.argv_for = argv_for
        self.probe = probe
        self.limit = limit
        self.on_start, self.on_done, self.on_refused = on_start, on_done, on_refused
        self.on_pause = on_pause or (lambda job, paused: None)
        self.ledger = GpuLedger(allowed)
        self.poll = poll
        self.events: queue.Queue = queue.Queue()
        try:
            self.dir = Path(tempfile.mkdtemp(prefix="mxtrim-batch-"))
        except OSError as exc:  # a full or read-only temporary folder: one line, before any output starts
            raise InputError(tempfile.gettempdir(), "cannot make the folder where outputs validated side by side "
                             f"share their GPU bookings: {os_reason(exc)}") from None
        self.ours: set[int] = set()
        self._moved, self._next_try = True, 0.0  # placement is due: one of ours moved on / when

    # --- the children's side of the protocol ---------------------------------------------------
    def _env(self) -> dict[str, str]:
        return dict(os.environ, **{BATCH_DIR_ENV: str(self.dir)})

    def _refresh_ours(self) -> None:
        ours: set[int] = set()
        for job in self.running:
            if job.proc is not None:
                ours |= _tree(job.proc.pid)
        self.ours = ours
        tmp = self.dir / (OURS_FILE + ".tmp")
        tmp.write_text(json.dumps(sorted(ours)))
        os.replace(tmp, self.dir / OURS_FILE)

    def _set_profiling(self, job: Job, on: bool) -> None:
        job.profiling = on
        for gpu in job.gpus:
            path = profiling_file(self.dir, gpu)
            if on:
                path.write_text(str(job.output))
            elif path.exists() and path.read_text() == str(job.output):
                path.unlink()

    def _window_open_beside(self, job: Job) -> bool:
        return any(j is not job and j.profiling and set(j.gpus) & set(job.gpus) for j in self.running)

    def _engine_starting(self, job: Job) -> None:
        """``job``'s engine is about to take its GPUs: its window opens now, or, while a
        neighbour's is open, it is paused until that one closes."""
        if job.profiling or job.paused:
            return
        if not self._window_open_beside(job):
            self._set_profiling(job, True)
            return
        job.paused = _server_groups(job.proc.pid)
        for group in job.paused:
            _signal_group(group, signal.SIGSTOP)
        self.on_pause(job, True)

    def _window_closed(self, job: Job) -> None:
        """``job``'s window is over: the paused neighbours go on, one window per GPU."""
        self._moved = True
        if job.profiling:
            self._set_profiling(job, False)
        for waiting in [j for j in self.running if j.paused]:
            if not self._window_open_beside(waiting):
                self._set_profiling(waiting, True)
                groups, waiting.paused = waiting.paused, []
                for group in groups:
                    _signal_group(group, signal.SIGCONT)
                self.on_pause(waiting, False)

    # --- running ---------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.pending or self.running:
                self._start_what_fits()
                self._handle_events(timeout=self.poll)
        except BaseException:
            self.stop_all()
            raise
        finally:
            for leftover in self.dir.iterdir():
                leftover.unlink()
            self.dir.rmdir()

    def _gpu_probe(self):
        probe = self.probe() if self.probe is not None else None
        return probe if probe is not None and probe.available and probe.gpus else None

    def _start_what_fits(self) -> None:
        """Start what fits now. Placement probes the GPUs and walks the batch's processes: it is
        tried again when one of ours moved on (finished, or its window closed), else at most
        once per ``poll`` (memory another process frees), not at every log line read."""
        now = time.monotonic()
        if not self._moved and now < self._next_try:
            return
        self._moved, self._next_try = False, now + self.poll
        while self.pending and (self.limit is None or len(self.running) < self.limit) and self._may_start_another():
            job = self.pending[0]
            probe = self._gpu_probe() if job.share is not None else None
            if job.share is not None and probe is None:
                job.share = None  # no GPU: the child says why in its own row
            if probe is not None:
                self._refresh_ours()
                placed = self.ledger.place(job, probe, self.running, self.ours)
                if placed.refused:
                    self.pending.pop(0)
                    self.on_refused(job, placed.refused)
                    continue
                if placed.gpus is None:
                    return  # the next start waits for one of ours to move on
                job.gpus = placed.gpus
                for neighbour in self.running:  # each may now fail on the other's memory
                    if set(neighbour.gpus) & set(job.gpus):
                        neighbour.shared = job.shared = True
            self.pending.pop(0)
            self._start(job)

    def _may_start_another(self) -> bool:
        return self.starting is None or sum(not j.engine for j in self.running) < self.starting

    def _start(self, job: Job) -> None:
        try:
            job.proc = start(self.argv_for(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             text=True, errors="replace", env=self._env(), start_new_session=True,
                             preexec_fn=parent_death_signal())
        except NotStarted as exc:  # the system refused the child: this output is not validated, said why
            self.on_refused(job, str(exc))
            return
        self.running.append(job)
        self._refresh_ours()
        for stream in ("stdout", "stderr"):
            threading.Thread(target=self._pump, args=(job, stream), daemon=True).start()
        self.on_start(job)

    def _pump(self, job: Job, stream: str) -> None:
        pipe = job.proc.stdout if stream == "stdout" else job.proc.stderr
        for line in pipe:
            self.events.put((job, stream, line))
        self.events.put((job, stream, None))

    def _handle_events(self, timeout: float) -> None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while item is not None:
            job, stream, line = item
            if line is None:
                # finished once both streams are read to the end: the verdict (a retry alone or
                # not) reads the last log lines, which may come after its JSON on stdout
                job.ended.add(stream)
                if job.ended == {"stdout", "stderr"}:
                    self._finish(job)
            elif stream == "stdout":
                job.stdout.append(line)
            else:
                self._read_progress(job, line)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                item = None

    def _read_progress(self, job: Job, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            job.tail.append(line.rstrip("\n"))  # e.g. "mxtrim: error: …"
            return
        if event.get("event") == "log":
            text = str(event.get("line", ""))
            job.tail.append(text)
            if ENGINE_STARTING.search(text):
                if not job.engine:
                    job.engine = True  # its start-up is over: under --starting, the next may start
                    self._moved = self._moved or self.starting is not None
                if job.gpus:
                    self._engine_starting(job)
            elif job.profiling and KV_READY.search(text):
                self._window_closed(job)
        elif event.get("event") == "check" and event.get("check") == "start-up" and job.profiling:
            self._window_closed(job)

    def _finish(self, job: Job) -> None:
        code = job.proc.wait()
        job.paused = []
        self.running.remove(job)
        self._window_closed(job)
        try:
            doc = json.loads("".join(job.stdout))
        except ValueError:
            doc = None
        if (isinstance(doc, dict) and not job.alone and job.shared and code != 0
                and any(NEIGHBOUR_FAILURE.search(t) for t in job.tail)):
            # it failed on memory beside a neighbour: not the output's failure; again, alone
            retry = Job(job.index, job.output, job.tp, job.share, alone=True, pp=job.pp)
            self.pending.insert(0, retry)
            self.on_done(job, doc, code, retried=True)
            return
        self.on_done(job, doc if isinstance(doc, dict) else None, code, retried=False)

    def stop_all(self, grace: float = 120.0) -> None:
        """Ctrl-C: each running child gets one SIGINT (it stops its server and records the
        interruption), then time to do so; one that outlives ``grace`` is killed with its group."""
        for job in self.running:
            groups, job.paused = job.paused, []
            for group in groups:  # a stopped server cannot stop itself
                _signal_group(group, signal.SIGCONT)
        for job in self.running:
            if job.proc is not None and job.proc.poll() is None:
                try:
                    os.kill(job.proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for job in self.running:
            if job.proc is None:
                continue
            try:
                job.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(job.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                job.proc.wait()


def _server_groups(child: int) -> list[int]:
    """The process groups a validation child started (its server, in a session of its own)."""
    own = os.getpgid(child) if pid_exists(child) else None
    groups = []
    for pid in sorted(_tree(child) - {child}):
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if group != own and group not in groups:
            groups.append(group)
    return groups


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- the child's side ----------------------------------------------------------------------------

def batch_dir() -> Path | None:
    value = os.environ.get(BATCH_DIR_ENV)
    return Path(value) if value and Path(value).is_dir() else None


def batch_pids() -> set[int]:
    """Processes of the batch this validation runs in (its neighbours share GPUs with it)."""
    folder = batch_dir()
    if folder is None:
        return set()
    try:
        return {int(p) for p in json.loads((folder / OURS_FILE).read_text())}
    except (OSError, ValueError, TypeError):
        return set()


def wait_for_neighbours_profiling(gpus: str | None, output: Path, limit: float = 3600.0, poll: float = 0.5) -> None:
    """Before a server of a batch stops: while another server on one of its GPUs profiles
    memory, wait (its free memory would jump under it)."""
    folder = batch_dir()
    if folder is None or not gpus:
        return
    indices = [int(x) for x in gpus.split(",") if x.strip().isdigit()]
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        busy = False
        for gpu in indices:
            try:
                busy |= profiling_file(folder, gpu).read_text() != str(output)
            except OSError:
                continue
        if not busy:
            return
        time.sleep(poll)
