"""No process left behind: `mxtrim validate --serve` and the wizard, with real processes and real
signals. The server is a stand-in (a stdlib HTTP server written here, started through
--launcher or as "vLLM's interpreter") that starts a child of its own, so that every check
is about the whole process group. After each way out (normal exit, Ctrl-C, SIGTERM, SIGHUP,
a server that crashes or hangs at start-up, the wizard terminated or hung up on, the mxtrim
process SIGKILLed) psutil must find nothing of that run alive; SIGKILL leaves a pid record
that the next run reports and `mxtrim leftovers --stop` stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from terminal_support import Terminal, until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, ptys and prctl: Linux")]

FAKE_SERVER = r'''
import json, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = os.environ.get("FAKE_MODE", "ok")
marks = os.environ["FAKE_MARKS"]
args = sys.argv[1:]
port, model = int(args[args.index("--port") + 1]), args[args.index("--model") + 1]

def mark(name, text=""):
    tmp = os.path.join(marks, "." + name)
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, os.path.join(marks, name))

if "ignore-term" in mode:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
# a child of its own (an engine core, a worker): it must go with the server
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)", marks])
mark("child.pid", str(child.pid))
mark("server.pid", str(os.getpid()))
print("fake server starting", flush=True)
if mode == "crash":
    print("fake server: cannot start", file=sys.stderr, flush=True)
    sys.exit(1)
if mode.startswith("hang"):
    while True:  # never opens its port
        time.sleep(1)

class Handler(BaseHTTPRequestHandler):
    def _send(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send({})
        elif self.path == "/v1/models":
            self._send({"data": [{"id": model}]})
        else:
            self.send_error(404)

    def do_POST(self):
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if mode == "slow":
            mark("request")
            time.sleep(3600)
        n = doc.get("max_tokens", 8)
        self._send({"choices": [{"text": " fox" * n, "message": {"content": "fox"}}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": n}})

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''

# Stands for vLLM's interpreter: asked where vllm is (`PY -I -c ...`) it names one; the
# offline probe (`PY -I probe.py ...`) finds nothing to check; `PY -m MODULE ARGS` runs the
# stand-in server.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-I" ] && [ "$2" = "-c" ]; then echo '{"origin": "/stand-in/vllm/__init__.py", "version": "0.0", "distribution": "vllm"}'; exit 0; fi
if [ "$1" = "-I" ]; then echo '{"checks": []}'; exit 0; fi
shift 2
if [ "$1" = "serve" ]; then shift; model="$1"; shift; set -- --model "$model" "$@"; fi
exec "$FAKE_INTERPRETER" "$FAKE_SERVER" "$@"
"""


class Run:
    """One scenario's files, environment and processes."""

    def __init__(self, root: Path):
        self.root = root
        self.marks = root / "marks"
        self.state = root / "state"
        self.server_script = root / "fake_server.py"
        self.python = root / "fake-python"
        self.marks.mkdir()
        self.server_script.write_text(FAKE_SERVER)
        self.python.write_text(FAKE_PYTHON)
        self.python.chmod(0o755)
        self.seen: dict[int, psutil.Process] = {}

    def output(self, name: str = "out") -> Path:
        out = self.root / name
        out.mkdir()
        (out / "mxtrim-plan.json").write_text(json.dumps({"mode": "dummy"}))
        return out

    def env(self, mode: str) -> dict[str, str]:
        return dict(os.environ, FAKE_MODE=mode, FAKE_MARKS=str(self.marks), FAKE_INTERPRETER=sys.executable,
                    FAKE_SERVER=str(self.server_script), XDG_STATE_HOME=str(self.state),
                    XDG_CONFIG_HOME=str(self.root / "config"), MXTRIM_VLLM_PYTHON=str(self.python), PYTHONUNBUFFERED="1")

    def validate_argv(self, out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "mxtrim_tui", "validate", str(out), "--serve", "--device", "cpu", "--json",
                "--python", str(self.python), "--launcher", f"{sys.executable} {self.server_script}", *extra]

    def mxtrim(self, *args: str, mode: str = "ok", timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mxtrim_tui", *args], capture_output=True, text=True,
                              env=self.env(mode), cwd=self.root, timeout=timeout)

    def pid_of(self, name: str, timeout: float = 30.0) -> int:
        """The pid a stand-in wrote (server.pid, child.pid); remembered as a psutil.Process
        (pid and start time: a reused pid is never mistaken for it)."""
        path = self.marks / name
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline, f"{name} never appeared"
            time.sleep(0.05)
        pid = int(path.read_text())
        try:
            self.seen[pid] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            pass
        return pid

    def wait_for(self, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.marks / name).exists():
            assert time.monotonic() < deadline, f"{name} never appeared"
            time.sleep(0.05)

    def alive(self) -> list[str]:
        """Processes of this run still alive: those the stand-ins named, and any whose command
        line names this scenario's directory (mxtrim itself, the server, its child)."""
        found = {}
        for pid, proc in self.seen.items():
            if _alive(proc):
                found[pid] = " ".join(_cmdline(proc))
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.pid != os.getpid() and str(self.root) in cmd and _alive(proc):
                found[proc.pid] = cmd
        return [f"{pid}: {cmd[:200]}" for pid, cmd in sorted(found.items())]

    def records(self) -> list[Path]:
        return sorted((self.state / "mxtrim" / "servers").glob("*.json"))

    def assert_clean(self, timeout: float = 5.0) -> None:
        """Nothing of this run alive (a short grace for processes being reaped) and no record."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.alive() == [], "processes outlived the run"
        assert self.records() == [], "a pid record outlived its server"

    def kill_all(self) -> None:
        for line in self.alive():
            try:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path)
    yield r
    r.kill_all()  # a failed scenario must not leave its processes on the machine


def rows(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["rows"]}


# --- mxtrim validate --serve ------------------------------------------------------------------
def test_normal_exit_stops_the_server_and_its_child(run):
    out = run.output()
    proc = subprocess.run(run.validate_argv(out), capture_output=True, text=True, env=run.env("ok"), timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert rows(doc)["start-up"]["status"] == "passed" and rows(doc)["generation"]["status"] == "passed"
    run.pid_of("server.pid"), run.pid_of("child.pid")
    run.assert_clean()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_mxtrim_while_the_server_answers_stops_the_whole_group(run, sig):
    """Ctrl-C (SIGINT to the mxtrim process), SIGTERM, SIGHUP (its terminal closed) in the
    middle of a request: mxtrim unwinds, stops the server's group, exits 130."""
    out = run.output()
    proc = subprocess.Popen(run.validate_argv(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run.env("slow"))
    try:
        run.pid_of("server.pid"), run.pid_of("child.pid")
        run.wait_for("request")
        assert run.records(), "no pid record while the server runs"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "[mxtrim] server stopped (SIGINT)" in (out / "logs" / "serve.log").read_text()
    run.assert_clean()


def test_a_server_that_crashes_at_start_up_leaves_no_child(run):
    out = run.output()
    proc = subprocess.run(run.validate_argv(out), capture_output=True, text=True, env=run.env("crash"), timeout=60)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and "exited with status 1" in rows(doc)["start-up"]["detail"]
    run.pid_of("server.pid"), run.pid_of("child.pid")
    run.assert_clean()


def test_a_server_that_never_opens_its_port_is_stopped_at_the_timeout(run):
    out = run.output()
    proc = subprocess.run(run.validate_argv(out, "--timeout", "2"), capture_output=True, text=True, env=run.env("hang"), timeout=60)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and "no progress for 2 s" in rows(doc)["start-up"]["detail"]
    run.pid_of("server.pid"), run.pid_of("child.pid")
    run.assert_clean()


@pytest.mark.parametrize("mode", ["hang", "hang-ignore-term"])
def test_sigkill_of_mxtrim_the_next_run_reports_the_leftover_and_leftovers_stop_stops_it(run, mode):
    """SIGKILL cannot be caught: the server gets SIGTERM from the kernel (parent-death signal)
    and a well-behaved one ends; its child, or a server that ignores SIGTERM, is left. The pid
    record lets the next `validate --serve` say so in one line, and `mxtrim leftovers --stop`
    stop the group."""
    out = run.output()
    proc = subprocess.Popen(run.validate_argv(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run.env(mode))
    try:
        server, child = run.pid_of("server.pid"), run.pid_of("child.pid")
        time.sleep(0.3)
        proc.kill()
        proc.communicate(timeout=10)
    finally:
        proc.kill()
    server_proc, child_proc = run.seen[server], run.seen[child]
    if mode == "hang":
        assert _wait_dead(server_proc, 5), "the parent-death signal did not end the server"
    else:
        time.sleep(0.5)
        assert _alive(server_proc)
    assert _alive(child_proc)
    assert len(run.records()) == 1

    # the next run (a server that crashes at once: quick) says it in one line
    again = run.output("again")
    next_run = subprocess.run(run.validate_argv(again), capture_output=True, text=True, env=run.env("crash"), timeout=60)
    notice = [line for line in next_run.stderr.splitlines() if "left running" in line]
    assert len(notice) == 1 and f"pid {server}" in notice[0] and "mxtrim leftovers --stop" in notice[0], next_run.stderr
    assert str(out) in notice[0]

    listing = run.mxtrim("leftovers")
    assert listing.returncode == 0 and f"pid {server}" in listing.stdout and "--stop" in listing.stdout

    stopped = run.mxtrim("leftovers", "--stop")
    assert stopped.returncode == 0 and f"stopped pid {server}" in stopped.stdout, stopped.stderr
    run.assert_clean()
    assert "no server left" in run.mxtrim("leftovers").stdout


def test_records_of_gone_or_reused_pids_are_removed_silently_and_a_running_mxtrim_keeps_its_own(run):
    """A record whose server is gone, one whose pid now belongs to another process (start
    time, or command line, differs), and one whose mxtrim still runs: none is reported; the
    first two are removed, the third kept."""
    from mxtrim_tui.core.validate.leftovers import ServerRecord

    servers = run.state / "mxtrim" / "servers"
    servers.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.root), "--model", "x"], start_new_session=True)
    try:
        other_proc = psutil.Process(other.pid)
        me = psutil.Process()
        dead_parent = {"parent_pid": gone.pid, "parent_create_time": 1.0}
        records = {
            "gone": dict(pid=gone.pid, create_time=1.0, command=["vllm", "--model", "x"], **dead_parent),
            "reused-time": dict(pid=other.pid, create_time=other_proc.create_time() - 100, command=other_proc.cmdline(), **dead_parent),
            "reused-command": dict(pid=other.pid, create_time=other_proc.create_time(), command=["vllm", "--model", "y"], **dead_parent),
            "owned": dict(pid=other.pid, create_time=other_proc.create_time(), command=other_proc.cmdline(),
                          parent_pid=me.pid, parent_create_time=me.create_time()),
        }
        for name, fields in records.items():
            rec = ServerRecord(pgid=fields["pid"], output=name, started="then", **fields)
            (servers / f"server-{name}.json").write_text(json.dumps(rec.to_json()))
        listing = run.mxtrim("leftovers")
        assert listing.returncode == 0 and "no server left" in listing.stdout, listing.stdout
        assert [p.name for p in run.records()] == ["server-owned.json"]
        assert _alive(other_proc)
    finally:
        other.kill()
        other.wait()


def _wait_dead(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(proc) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(proc)


# --- the wizard, in a real terminal -------------------------------------------------------------
@pytest.mark.parametrize("how", ["SIGTERM", "terminal closed"])
def test_the_wizard_terminated_or_hung_up_on_stops_its_validation_and_server(run, how):
    """The wizard writes a trim, validates it (`v`: a `mxtrim validate --serve` child whose
    server hangs at start-up, its child with it), and is then sent SIGTERM or loses its
    terminal (SIGHUP): it stops the validation, which stops its server, and exits 128 + signal."""
    from mxtrim_tui.demo.build import ensure_demo_model

    env = run.env("hang") | {"MXTRIM_TIMING_FILE": str(run.root / "timing"), "TERM": "xterm-256color"}
    env.pop("MXTRIM_HEADLESS", None)
    term = Terminal([sys.executable, "-m", "mxtrim_tui", "tui", str(ensure_demo_model())], env, run.root)
    run.seen[term.pid] = psutil.Process(term.pid)
    try:
        timing = run.root / "timing"
        until(lambda: timing.exists() and "inventory_ready" in timing.read_text(), 60, "the source to load")

        def next_step() -> bool:  # ctrl+n until the run step shows
            term.type(b"\x0e")
            time.sleep(0.5)
            return b"Nothing started" in term.screen

        until(next_step, 60, "the run step", step=0)
        term.type(b"\x13")  # ctrl+s: write the output

        until(lambda: "written:" in term.screen.decode("utf-8", "replace"), 90, "the trim to finish")
        term.type(b"v")  # the validate dialog: it finds the stand-in vLLM, Ctrl+S starts
        until(lambda: "vLLM 0.0 at" in term.screen.decode("utf-8", "replace"), 60, "the dialog to find vLLM")
        term.type(b"\x13")
        until(lambda: (run.marks / "child.pid").exists(), 90, "the validation's server")
        run.pid_of("server.pid"), run.pid_of("child.pid")
        for child in psutil.Process(term.pid).children(recursive=True):
            run.seen[child.pid] = child  # the `mxtrim validate` child too
        assert run.records()
        if how == "SIGTERM":
            os.kill(term.pid, signal.SIGTERM)
            expected = 128 + signal.SIGTERM
        else:
            term.hang_up()
            expected = 128 + signal.SIGHUP
        assert term.wait_exit(60) == expected
    finally:
        term.kill()
    run.assert_clean()


@pytest.mark.asyncio
async def test_the_wizard_says_at_start_that_a_killed_mxtrim_left_a_server(run, monkeypatch):
    from mxtrim_tui.core.probe.gpu import GpuProbe
    from mxtrim_tui.core.validate.leftovers import ServerRecord
    from mxtrim_tui.tui.app import MxtrimApp

    monkeypatch.setenv("XDG_STATE_HOME", str(run.state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(run.root / "config"))
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.root), "--model", "m"], start_new_session=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        proc = psutil.Process(server.pid)
        rec = ServerRecord(pid=server.pid, pgid=server.pid, create_time=proc.create_time(), command=proc.cmdline(),
                           parent_pid=gone.pid, parent_create_time=1.0, output=str(run.root / "out"), started="then")
        servers = run.state / "mxtrim" / "servers"
        servers.mkdir(parents=True)
        (servers / "server-x.json").write_text(json.dumps(rec.to_json()))
        app = MxtrimApp(None, tree_root=run.root, gpu_probe=lambda: GpuProbe("none", False, "no GPU here"), workspace=run.root)
        async with app.run_test(size=(100, 40)) as pilot:
            for _ in range(100):
                if app._notifications:
                    break
                await pilot.pause(0.1)
            messages = [n.message for n in app._notifications]
        assert any(f"pid {server.pid}" in m and "mxtrim leftovers --stop" in m for m in messages), messages
    finally:
        server.kill()
        server.wait()
