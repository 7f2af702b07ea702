"""The order of a validation's checks and its start-up wait, with stand-in servers: real
processes answering real HTTP on loopback (the OpenAI routes mxtrim calls), started through
``--launcher`` by the same code that starts vLLM. No vLLM needed: the offline checks run in a
small environment that holds a package named vllm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import cli_argv, small_llama_output
from test_vllm_discovery import make_env

# --port P among the server flags; behaviour from argv[1]:
#   slow-start  logs a line a second for 5 s, then answers
#   stall       logs two lines, then nothing, never healthy
#   dies        healthy, but exits at the first completion request
#   port-taken:MARKER  another listener holds the port when the server binds it (a real
#               EADDRINUSE), on the first start only (MARKER: a file it leaves), or on
#               every start (MARKER "always")
STAND_IN = r'''
import json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
mode, _, marker = sys.argv[1].partition(":")
# what vLLM leaves in its temporary folder after each start: a ZMQ socket, a rendezvous file
print(f"INFO temporary folder {os.environ.get('TMPDIR')}", flush=True)
open(os.path.join(os.environ["VLLM_RPC_BASE_PATH"], "0f6b-ipc-socket"), "w").close()
open(os.path.join(os.environ["TMPDIR"], "vllm_dist_0f6b"), "w").close()
port = int(sys.argv[sys.argv.index("--port") + 1])
model = sys.argv[sys.argv.index("--model") + 1]
if mode == "slow-start":
    for i in range(5):
        print(f"INFO compiling kernels {i + 1}/5", flush=True)
        time.sleep(1)
elif mode == "stall":
    print("INFO loading weights", flush=True)
    print("INFO compiling kernels 2/9", flush=True)
    while True:
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
            self.send_response(404); self.end_headers()
    def do_POST(self):
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if mode == "dies":
            print("ERROR engine core died", flush=True)
            os._exit(3)
        n = doc.get("max_tokens", 8)
        usage = {"prompt_tokens": 5, "completion_tokens": n}
        if "messages" in doc:
            self._send({"choices": [{"message": {"content": "x" * n}}], "usage": usage})
        else:
            self._send({"choices": [{"text": "x" * n, "token_ids": [1] * n}], "usage": usage})
    def log_message(self, *a):
        pass

if mode == "port-taken" and (marker == "always" or not os.path.exists(marker)):
    if marker != "always":
        open(marker, "w").close()
    thief = socket.socket()
    thief.bind(("127.0.0.1", port))
    thief.listen()
print("INFO Application startup complete.", flush=True)
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("flow")
    out = small_llama_output(root, "weights")
    script = root / "stand_in.py"
    script.write_text(STAND_IN)
    return {"out": out, "script": script, "python": make_env(root / "env", vllm="0.32.0")}


def validate(setup, mode: str, *extra: str, timeout: str = "3") -> tuple[subprocess.CompletedProcess, dict]:
    launcher = f"{sys.executable} {setup['script']} {mode}"
    proc = subprocess.run(cli_argv("validate", str(setup["out"]), "--serve", "--python", setup["python"], "--device", "cpu", "--json",
                                   "--timeout", timeout, "--launcher", launcher, *extra), capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc, json.loads(proc.stdout)


def rows(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["rows"]}


@pytest.mark.slow
def test_checks_after_a_failed_one_are_skipped_with_the_reason_and_the_json_is_whole(setup):
    """The server dies at the first request: generation fails; equivalence is not attempted
    against a dead server (no traceback), it says why; the JSON and the record are written."""
    proc, doc = validate(setup, "dies", "--equivalence")
    r = rows(doc)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert r["start-up"]["status"] == "passed"
    assert r["generation"]["status"] == "failed"
    eq = r["equivalence with the original (greedy tokens)"]
    # the server may still be dying when equivalence comes up: either reason is the truth
    assert eq["status"] == "unverified" and eq["detail"].startswith(("skipped: the server exited", "skipped: generation failed"))
    history = json.loads((setup["out"] / "validation.json").read_text())
    assert history["runs"][-1]["rows"] == doc["rows"]
    readme = (setup["out"] / "README.md").read_text()
    assert "| equivalence with the original (greedy tokens) | not run (unverified) | skipped: " in readme


@pytest.mark.slow
def test_a_start_that_keeps_logging_is_waited_for_past_the_timeout(setup):
    proc, doc = validate(setup, "slow-start", timeout="3")
    start = rows(doc)["start-up"]
    assert start["status"] == "passed", start
    assert float(start["detail"].split("after ")[1].split(" s")[0]) > 3  # longer than the timeout, still making progress


@pytest.mark.slow
def test_a_start_that_stops_making_progress_says_what_it_was_doing(setup):
    proc, doc = validate(setup, "stall", timeout="2")
    start = rows(doc)["start-up"]
    assert proc.returncode == 1 and start["status"] == "failed"
    assert start["detail"].startswith("no progress for 2 s") and "its last log line: INFO compiling kernels 2/9" in start["detail"]
    assert doc["server_exit"]["survivors"] == []


@pytest.mark.slow
def test_every_check_is_listed_with_the_settings_used(setup):
    """After a validation the output's README lists every check (run or not, with why) and
    the settings the server actually ran with, next to the command it ran."""
    proc, doc = validate(setup, "slow-start")
    names = [r["check"] for r in doc["rows"]]
    for check in ("start-up", "generation", "long input", "speculative decoding (MTP)", "image request",
                  "equivalence with the original (greedy tokens)", "memory: predicted against logged"):
        assert check in names
    readme = (setup["out"] / "README.md").read_text()
    section = readme[readme.index("## Validation"):]
    assert "Served with: cpu, float32, context 256, 1 sequence(s), KV cache 64.0 MiB" in section
    assert "| equivalence with the original (greedy tokens) | not run (unverified) | not run (validate --equivalence) |" in section
    assert "| long input | not applicable |" in section
    assert "--kv-cache-memory-bytes 67108864" in section  # the command that ran
    assert doc["settings"]["dtype"] == "float32" and doc["settings"]["max_model_len"] == 256


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_is_not_a_failure(setup, tmp_path):
    """Another process takes the drawn port first (seen with validations side by side): the
    server starts again on a fresh port, and the start-up row says which port was lost."""
    marker = tmp_path / "taken-once"
    proc, doc = validate(setup, f"port-taken:{marker}")
    start = rows(doc)["start-up"]
    assert start["status"] == "passed", start
    assert rows(doc)["generation"]["status"] == "passed"
    lost = int(start["detail"].split("took port ")[1].split(" ")[0])
    assert "started again on a fresh port" in start["detail"]
    log = (setup["out"] / "logs" / "serve.log").read_text()
    assert "Address already in use" in log and f"--port {lost} " in log
    assert f"--port {lost} " not in " ".join(doc["serve_command"]) + " "  # the run recorded is the one that served


@pytest.mark.slow
def test_a_port_taken_on_every_start_is_a_host_limit_not_the_trim(setup):
    proc, doc = validate(setup, "port-taken:always")
    start = rows(doc)["start-up"]
    assert proc.returncode == 1 and start["status"] == "failed"
    assert start["verdict"]["class"] == "host or device limit"
    assert "Address already in use" in " ".join(start["verdict"]["evidence"])
    assert "took ports " in start["detail"] and "not of the trim" in start["verdict"]["advice"]
    assert doc["server_exit"]["survivors"] == []


@pytest.mark.slow
def test_what_the_server_leaves_in_its_temporary_folder_goes_with_it(setup):
    """vLLM leaves ZMQ sockets and rendezvous files in the temporary folder after every start
    (hundreds over a day of validations): each server gets a folder of its own, removed once it
    is stopped; the compile cache stays where torch keeps it."""
    proc, doc = validate(setup, "plain")
    assert rows(doc)["start-up"]["status"] == "passed", doc["rows"]
    log = (setup["out"] / "logs" / "serve.log").read_text()
    folder = log.split("INFO temporary folder ")[-1].splitlines()[0]
    assert Path(folder).name.startswith("mxtrim-vllm-") and not Path(folder).exists()
