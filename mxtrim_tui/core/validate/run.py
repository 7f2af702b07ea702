"""One validation of an output directory: the environment and offline checks in the target
interpreter, then (when asked) a real `vllm serve` with its requests. Every check is a row:
passed, failed (class + evidence) or unverified. Headless: the CLI prints it, the wizard
subscribes to ``on_event``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import InputError
from . import requests as rq
from .classify import classify
from .serve import ServeOptions, Server, free_port, interrupting_signals, output_text_config, serve_argv, serve_env

PROBE = Path(__file__).with_name("offline_probe.py")
PASSED, FAILED, UNVERIFIED, NOT_APPLICABLE = "passed", "failed", "unverified", "not applicable"


@dataclass
class Row:
    check: str
    status: str
    detail: str = ""
    verdict: dict | None = None  # class, summary, evidence, advice (failed server checks)
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        doc = {"check": self.check, "status": self.status, "detail": self.detail}
        if self.verdict:
            doc["verdict"] = self.verdict
        if self.data:
            doc["data"] = self.data
        return doc


@dataclass
class Validation:
    output: Path
    mode: str
    started: str
    python: str
    rows: list[Row] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    serve_command: list[str] | None = None
    server_exit: dict | None = None
    memory: dict | None = None  # predicted vs logged start-up figures (memory_check.compare)

    @property
    def ok(self) -> bool:
        """Every executed check passed."""
        return all(r.status != FAILED for r in self.rows)

    @property
    def loadable(self) -> bool:
        """A real-weight checkpoint is loadable only once a non-dummy start-up and generation passed."""
        status = {r.check: r.status for r in self.rows}
        return self.mode == "weights" and status.get("start-up") == PASSED and status.get("generation") == PASSED

    def to_json(self) -> dict:
        return {
            "schema": "mxtrim.validation/1", "output": str(self.output), "mode": self.mode, "started": self.started,
            "python": self.python, "ok": self.ok, "loadable": self.loadable if self.mode == "weights" else None,
            "environment": self.environment, "serve_command": self.serve_command, "server_exit": self.server_exit,
            "memory": self.memory, "rows": [r.to_json() for r in self.rows],
        }


def read_output(out: Path) -> dict:
    """The plan an output was written from (mxtrim-plan.json): mode, MTP, serve settings."""
    plan_file = out / "mxtrim-plan.json"
    if not out.is_dir():
        raise InputError(out, "is not a directory")
    try:
        doc = json.loads(plan_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(plan_file, "missing: validate works on directories written by mxtrim trim") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(plan_file, f"cannot be read as JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("mode") not in ("dummy", "weights"):
        raise InputError(plan_file, "has no mode (dummy or weights)")
    return doc


def offline_checks(out: Path, python: str, trust_remote_code: bool, timeout: float = 300.0) -> tuple[dict, list[Row]]:
    """Environment and offline rows, from a subprocess of the target interpreter in isolated
    mode (nothing from the current directory or the output is imported)."""
    argv = [python, "-I", str(PROBE), str(out), "1" if trust_remote_code else "0", "1"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise InputError(python, "no such interpreter (--python)") from None
    except subprocess.TimeoutExpired:
        return {}, [Row("offline checks", FAILED, f"the probe did not finish in {timeout:.0f} s")]
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {}, [Row("offline checks", FAILED, f"{python} exited {proc.returncode}: {tail[0][:300]}")]
    names = {"config": "config loads offline (AutoConfig, local files only)", "tokenizer": "tokenizer round trip offline",
             "chat template": "chat template renders", "processor": "processor loads offline",
             "architecture registered": "architecture registered in this vLLM"}
    rows = [Row(names.get(c["name"], c["name"]), c["status"], c["detail"], data={k: v for k, v in c.items() if k == "normalised"})
            for c in doc.pop("checks")]
    return doc, rows


def workspace_warning(env: dict, cwd: Path) -> str | None:
    """A vLLM source tree in the working directory that is not the vLLM being run."""
    origin = (env.get("packages", {}).get("vllm") or {}).get("origin")
    for tree in (cwd, *cwd.parents):
        if (tree / "vllm" / "__init__.py").exists() and (tree / "pyproject.toml").exists():
            if not origin or not Path(origin).resolve().is_relative_to(tree.resolve()):
                return f"a vLLM source tree is at {tree}, but the interpreter imports vllm from {origin or 'nowhere'}"
            return None
    return None


def validate(out: Path, opts: ServeOptions, *, serve: bool, equivalence: bool = False, on_event=None) -> Validation:
    emit = on_event or (lambda event: None)
    out = Path(out).resolve()
    plan = read_output(out)
    mode = plan["mode"]
    v = Validation(out, mode, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), opts.python)
    emit({"event": "stage", "name": "offline", "status": "running"})
    v.environment, rows = offline_checks(out, opts.python, opts.trust_remote_code)
    warning = workspace_warning(v.environment, Path.cwd())
    if warning:
        v.environment["warning"] = warning
    for row in rows:
        v.rows.append(row)
        emit({"event": "check", **row.to_json()})
    if opts.device_note:
        v.environment["devices"] = opts.device_note
    if not serve or opts.refused:
        why = f"not run: {opts.refused}" if serve else "not run (validate --serve starts vllm serve)"
        for name in ("start-up", "generation"):
            v.rows.append(Row(name, UNVERIFIED, why))
        return v
    serve_rows(v, out, plan, opts, emit, equivalence)
    return v


def serve_rows(v: Validation, out: Path, plan: dict, opts: ServeOptions, emit, equivalence: bool = False) -> None:
    port = free_port()
    argv = serve_argv(out, v.mode, opts, port)
    v.serve_command = argv
    emit({"event": "serve", "status": "starting", "command": argv})
    server = Server(argv, serve_env(opts), out / "logs" / "serve.log", on_line=lambda s, l: emit({"event": "log", "stream": s, "line": l}),
                    output=out)
    with interrupting_signals():  # SIGTERM / SIGHUP unwind through the finally below, like Ctrl-C
        _serve_and_stop(v, out, plan, opts, emit, equivalence, server, port)


def _serve_and_stop(v: Validation, out: Path, plan: dict, opts: ServeOptions, emit, equivalence: bool, server: Server, port: int) -> None:
    started = time.monotonic()
    try:
        server.start()
        healthy, why = server.wait_healthy(f"http://127.0.0.1:{port}", opts.startup_timeout)
        if not healthy:
            exit_info = server.stop()
            verdict = classify(list(server.tail), exit_info.returncode, stopped_by_us=False, reason=why, dummy=v.mode == "dummy")
            v.rows.append(Row("start-up", FAILED, why, verdict.to_json() if verdict else None))
            v.rows.append(Row("generation", UNVERIFIED, "the server did not start"))
            v.server_exit = _exit_json(exit_info)
            return
        v.rows.append(Row("start-up", PASSED, f"healthy after {time.monotonic() - started:.1f} s" + (" (dummy weights)" if v.mode == "dummy" else " (real weights)")))
        emit({"event": "check", **v.rows[-1].to_json()})
        v.memory = memory_comparison(out, opts)
        if v.memory is not None:
            emit({"event": "memory", **v.memory})
        base = f"http://127.0.0.1:{port}"
        generation_rows(v, out, base, server, emit)
        extra_rows(v, out, plan, opts, base, server, emit)
        if equivalence:
            from .equivalence import compare

            emit({"event": "stage", "name": "equivalence", "status": "running"})
            status, detail, data = compare(base, out, plan)
            v.rows.append(Row("equivalence with the original (greedy tokens)", status, detail, data=data))
            emit({"event": "check", **v.rows[-1].to_json()})
    finally:
        if server.exited() is None or not server.stop_requested:
            exit_info = server.stop()
            v.server_exit = _exit_json(exit_info)
            emit({"event": "serve", "status": "stopped", **v.server_exit})


def memory_comparison(out: Path, opts: ServeOptions) -> dict | None:
    """The budget's prediction beside the figures this server logged while starting (its log's
    last run), or None when the log holds none of them."""
    from . import memory_check
    from .vllm_log import iter_file, last_run, parse_startup

    actual = parse_startup(last_run(iter_file(out / "logs" / "serve.log")))
    if not actual.source_lines:
        return None
    try:
        predicted = memory_check.predict(out, opts, opts.gpu_total_bytes)
    except InputError as exc:  # the output cannot be read back: say so, do not fail the run
        return {"error": str(exc)}
    return memory_check.compare(predicted, actual)


def generation_rows(v: Validation, out: Path, base: str, server: Server, emit) -> None:
    """Prefill + several decode steps (completion), the chat template (chat), the model list."""
    results = [rq.list_models(base), rq.completion(base, str(out))]
    if (out / "chat_template.jinja").exists() or _has_chat_template(out):
        results.append(rq.chat(base, str(out)))
    for r in results:
        emit({"event": "request", **r.to_json()})
    gen = [r for r in results if r.name != "models"]
    failed = [r for r in results if not r.passed]
    detail = "; ".join(f"{r.name}: {r.detail} in {r.seconds:.2f} s" for r in results)
    verdict = None
    if failed:
        verdict = classify(list(server.tail), server.exited(), stopped_by_us=False, dummy=v.mode == "dummy",
                           reason="; ".join(f"{r.name}: {r.detail}" for r in failed))
    v.rows.append(Row("generation", FAILED if failed else PASSED, detail, verdict.to_json() if verdict else None,
                      data={"requests": [r.to_json() for r in results], "decode_steps": min((r.completion_tokens or 0) for r in gen) if gen else 0}))
    emit({"event": "check", **v.rows[-1].to_json()})


def long_input_length(out: Path, plan: dict) -> tuple[int | None, str]:
    """How long a prompt must be to reach a kept path that only long inputs take (past the
    sliding window, past the sparse indexer's top-k), and which one; (None, "") when no kept
    path needs one."""
    cfg = output_text_config(out)
    kinds = " ".join(str(c.get("kind", "")) for c in plan.get("coverage", []) if c.get("kept"))
    for key, kind_word, label in (("sliding_window", "sliding", "the sliding window"), ("index_topk", "dsa", "the indexer's top-k")):
        value = cfg.get(key)
        if isinstance(value, int) and value > 0 and kind_word in kinds.lower():
            return value, f"{label} ({key}={value})"
    return None, ""


def extra_rows(v: Validation, out: Path, plan: dict, opts: ServeOptions, base: str, server: Server, emit) -> None:
    """The branches a plain request does not take: a prompt past the window / top-k, the MTP
    draft path, images. Each is a row of its own: passed, failed, or unverified with the reason."""
    threshold, label = long_input_length(out, plan)
    if threshold is not None:
        if threshold + 24 > opts.max_model_len:
            v.rows.append(Row("long input", UNVERIFIED, f"a prompt past {label} needs --max-model-len > {threshold + 24} (now {opts.max_model_len})"))
        else:
            prompt = " ".join(["fox"] * (threshold + 16))
            r = rq.completion(base, str(out), prompt=prompt, max_tokens=4, name="long input")
            emit({"event": "request", **r.to_json()})
            past = (r.prompt_tokens or 0) > threshold
            status = PASSED if r.passed and past else FAILED
            v.rows.append(Row("long input", status, f"past {label}: {r.detail} in {r.seconds:.2f} s", data={"request": r.to_json()}))
        emit({"event": "check", **v.rows[-1].to_json()})
    if plan.get("mtp_kept"):
        if opts.speculative_mtp:
            gen = next((r for r in v.rows if r.check == "generation"), None)
            accepted = [l for l in server.tail if "acceptance" in l.lower() or "SpecDecoding" in l]
            detail = "served with --speculative-config method mtp; " + (accepted[-1].strip()[:200] if accepted else "generation ran through the draft path")
            v.rows.append(Row("speculative decoding (MTP)", gen.status if gen else FAILED, detail))
        else:
            v.rows.append(Row("speculative decoding (MTP)", UNVERIFIED, "the kept MTP layer runs only with speculative decoding: validate --serve --speculative"))
        emit({"event": "check", **v.rows[-1].to_json()})
    if any((out / n).exists() for n in ("preprocessor_config.json", "processor_config.json")):
        v.rows.append(Row("image request", UNVERIFIED, "image requests are not sent yet"))
        emit({"event": "check", **v.rows[-1].to_json()})


def _exit_json(exit_info) -> dict:
    return {"returncode": exit_info.returncode, "requested": exit_info.requested, "signal": exit_info.signal_used,
            "stragglers": exit_info.stragglers, "survivors": exit_info.survivors}


def _has_chat_template(out: Path) -> bool:
    try:
        return "chat_template" in json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def default_python() -> str:
    return sys.executable
