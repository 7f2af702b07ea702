"""One validation of an output directory: the environment and offline checks in the target
interpreter, then (when asked) a real `vllm serve` with its requests. Every check is a row:
passed, failed (class + evidence) or unverified. Headless: the CLI prints it, the wizard
subscribes to ``on_event``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..child_process import NotStarted, run as run_child
from ..errors import InputError, require_directory
from . import requests as rq
from .classify import PORT_TAKEN, classify
from .effective import EFFECTIVE
from .graph_mode import note_startup
from .parallel import wait_for_neighbours_profiling
from .paths import EngineProbe, unserved_paths
from .serve import (ServeOptions, Server, free_port, interrupting_signals, outcome_env, output_quantization, output_text_config,
                    serve_argv, serve_env)
from .vllm_log import spec_counts_from_log
from ..probe import OFFLINE_PROBE

PASSED, FAILED, UNVERIFIED, NOT_APPLICABLE = "passed", "failed", "unverified", "not applicable"
NOT_COMPARABLE, DIFFERS = "not comparable", "differs"  # neither passed nor failed
# the server checks, in the order they run; every validation lists each of them
START_UP, GENERATION, LONG_INPUT, SPECULATIVE, IMAGE, EQUIVALENCE, MEMORY = (
    "start-up", "generation", "long input", "speculative decoding (MTP)", "image request",
    "equivalence with the original (greedy tokens)", "memory: predicted against logged")
SERVER_CHECKS = (START_UP, EFFECTIVE, GENERATION, LONG_INPUT, SPECULATIVE, IMAGE, EQUIVALENCE, MEMORY)


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
    python_origin: str = ""
    rows: list[Row] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # what the server ran with (serve_settings)
    environment: dict = field(default_factory=dict)
    serve_command: list[str] | None = None
    server_exit: dict | None = None
    memory: dict | None = None  # predicted vs logged start-up figures (memory_check.compare)
    effective: dict | None = None  # what vLLM built, per kept kind, against the plan (effective.py)
    paths: list[dict] | None = None  # per coverage row: built, executed, status (paths.py)
    effective_probe: dict | None = None  # the configuration the engine built, as its probe read it (paths.py)

    def row(self, check: str) -> Row | None:
        return next((r for r in self.rows if r.check == check), None)

    def settings_line(self) -> str:
        """The settings the server ran with, in words: device, dtype, context, KV budget..."""
        from ..units import human_bytes

        s = self.settings
        if not s:
            return ""
        parts = [s.get("device", "?"), s.get("dtype") or "dtype from config.json", f"context {s.get('max_model_len')}",
                 f"{s.get('max_num_seqs')} sequence(s)"]
        if s.get("kv_cache_memory_bytes"):
            parts.append(f"KV cache {human_bytes(s['kv_cache_memory_bytes'])}")
        if s.get("gpu_memory_utilization"):
            parts.append(f"GPU memory utilization {s['gpu_memory_utilization']:g}")
        if s.get("tp", 1) > 1 or s.get("pp", 1) > 1:
            parts.append(f"TP {s.get('tp')} PP {s.get('pp')}")
        if s.get("expert_parallel"):
            parts.append("expert parallel")
        if s.get("distributed_executor_backend") == "ray":
            parts.append("vLLM's Ray executor (workers across the Ray cluster)")
        if s.get("speculative"):
            parts.append(f"speculative MTP ({s['speculative']} token)")
        if s.get("attention_backend"):
            parts.append(f"attention {s['attention_backend']}")
        from .graph_mode import settings_words

        parts.append(settings_words(s))
        return ", ".join(parts)

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
            "python": self.python, "python_origin": self.python_origin, "settings": self.settings, "ok": self.ok, "loadable": self.loadable if self.mode == "weights" else None,
            "environment": self.environment, "serve_command": self.serve_command, "server_exit": self.server_exit,
            "memory": self.memory, "effective": self.effective, "paths": self.paths, "effective_probe": self.effective_probe,
            "rows": [r.to_json() for r in self.rows],
        }


def read_output(out: Path) -> dict:
    """The plan an output was written from (mxtrim-plan.json): mode, MTP, serve settings."""
    plan_file = out / "mxtrim-plan.json"
    require_directory(out)
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
    argv = [python, "-I", str(OFFLINE_PROBE), str(out), "1" if trust_remote_code else "0", "1"]
    try:
        proc = run_child(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except NotStarted as exc:  # found before, refused now (removed, its rights changed)
        return {}, [Row("offline checks", FAILED, f"the probe could not be started: {exc}")]
    except subprocess.TimeoutExpired:
        return {}, [Row("offline checks", FAILED, f"the probe did not finish in {timeout:.0f} s")]
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {}, [Row("offline checks", FAILED, f"{python} exited {proc.returncode}: {tail[0][:300]}")]
    return offline_rows(doc)


OFFLINE_NAMES = {"config": "config loads offline (AutoConfig, local files only)", "tokenizer": "tokenizer round trip offline",
                 "chat template": "chat template renders", "processor": "processor loads offline",
                 "architecture registered": "architecture registered in this vLLM"}


def offline_rows(doc: dict) -> tuple[dict, list[Row]]:
    """The environment and the offline rows of one output's probe document (``doc`` is taken)."""
    kept = ("normalised", "architectures", "platform")  # the class vLLM builds, its file and origin
    rows = [Row(OFFLINE_NAMES.get(c["name"], c["name"]), c["status"], c["detail"], data={k: v for k, v in c.items() if k in kept})
            for c in doc.pop("checks")]
    if doc.get("warnings"):  # the environment's own (visible-device variables that disagree)
        doc["warning"] = "; ".join(doc["warnings"])
    return doc, rows


# source trees a working directory may be in: (package directory, what it is called, its files)
_SOURCE_TREES = (("vllm", "vLLM", ("pyproject.toml",)), ("vllm_metax", "vLLM-MetaX", ("pyproject.toml", "setup.py")))


def _source_tree_warning(env: dict, cwd: Path, module: str, label: str, markers: tuple[str, ...]) -> str | None:
    """The nearest ``label`` source tree around ``cwd`` when the interpreter imports ``module``
    from elsewhere (or not at all)."""
    origin = (env.get("packages", {}).get(module) or {}).get("origin")
    for tree in (cwd, *cwd.parents):
        # os.path.exists: a folder this user may not search reads as absent, never raises
        if os.path.exists(tree / module / "__init__.py") and any(os.path.exists(tree / m) for m in markers):
            try:
                inside = bool(origin) and Path(origin).resolve().is_relative_to(tree.resolve())
            except (OSError, RuntimeError):  # a link loop, a folder this user may not search
                inside = False
            if inside:
                return None
            if module == "vllm":  # the wording earlier runs recorded
                return f"a vLLM source tree is at {tree}, but the interpreter imports vllm from {origin or 'nowhere'}"
            return (f"workspace source differs from runtime source: a {label} source tree is at {tree}, "
                    f"but the interpreter imports {module} from {origin or 'nowhere'}")
    return None


def workspace_warning(env: dict, cwd: Path) -> str | None:
    """The environment's warnings in one line: the probe's own (``env["warning"]``), then a vLLM
    or vLLM-MetaX source tree in the working directory that is not the one being run."""
    found = [env["warning"]] if env.get("warning") else []
    found += [w for w in (_source_tree_warning(env, cwd, *tree) for tree in _SOURCE_TREES) if w]
    return "; ".join(found) or None


def validate(out: Path, opts: ServeOptions, *, serve: bool, equivalence: bool = False, on_event=None,
             offline=None) -> Validation:
    """``offline``: what gives the environment and the offline rows (``offline_checks``, the
    default, or a batch's, giving those of several outputs from one probe: offline.OfflineBatch)."""
    emit = on_event or (lambda event: None)
    out = Path(out).resolve()
    plan = read_output(out)
    mode = plan["mode"]
    v = Validation(out, mode, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), opts.python, opts.python_origin)
    emit({"event": "stage", "name": "offline", "status": "running"})
    v.environment, rows = (offline or offline_checks)(out, opts.python, opts.trust_remote_code)
    warning = workspace_warning(v.environment, Path.cwd())
    if warning:
        v.environment["warning"] = warning
    for row in rows:
        v.rows.append(row)
        emit({"event": "check", **row.to_json()})
    if opts.device_note:
        v.environment["devices"] = opts.device_note
    if serve and not opts.refused:
        serve_rows(v, out, plan, opts, emit, equivalence)
    why = f"not run: {opts.refused}" if serve else "not run (validate --serve starts vllm serve)"
    fill_not_run(v, out, plan, opts, why, equivalence, emit)
    if v.paths is None:  # nothing served: no row observed
        v.paths = unserved_paths(plan, why)
    return v


def serve_settings(opts: ServeOptions) -> dict:
    """What a server runs with, as validation.json records it: every setting that changes its
    outcome (an earlier run is reused only where they all match: ``batch.reuse``), the vLLM
    variables of its environment (``outcome_env``), and the GPUs it was placed on."""
    return {"device": opts.device, "gpus": opts.gpus, "dtype": opts.dtype, "kv_cache_dtype": opts.kv_cache_dtype,
            "max_model_len": opts.max_model_len,
            "max_num_seqs": opts.max_num_seqs, "kv_cache_memory_bytes": opts.kv_cache_memory_bytes,
            "gpu_memory_utilization": opts.gpu_memory_utilization, "tp": opts.tp, "pp": opts.pp,
            "expert_parallel": opts.expert_parallel, "distributed_executor_backend": opts.executor_backend,
            "speculative": opts.speculative_mtp, "attention_backend": opts.attention_backend,
            "enforce_eager": opts.enforce_eager, "graph": opts.graph, "entry": opts.entry, "trust_remote_code": opts.trust_remote_code,
            "launcher": list(opts.launcher) if opts.launcher else None, "extra_args": list(opts.extra_args),
            "env": outcome_env(serve_env(opts))}


def applicability(out: Path, plan: dict, check: str, equivalence: bool) -> str | None:
    """Why ``check`` does not apply to this output (None: it applies)."""
    if check == LONG_INPUT and not long_input_boundaries(out, plan):
        return "no kept path is taken only by long inputs (no sliding window, compression block or sparse top-k kept)"
    if check == SPECULATIVE and not plan.get("mtp_kept"):
        return "no MTP layer kept"
    if check == IMAGE and not any((out / n).exists() for n in ("preprocessor_config.json", "processor_config.json")):
        return "no processor in the output (text model)"
    if check == EQUIVALENCE and plan.get("mode") != "weights":
        return "dummy weights: nothing to compare"
    return None


def checks_to_run(out: Path, plan: dict, opts: ServeOptions, equivalence: bool) -> list[str]:
    """The request checks a served validation runs, in order: those that apply and were asked for."""
    asked = [GENERATION, LONG_INPUT] + ([SPECULATIVE] if opts.speculative_mtp else []) + ([EQUIVALENCE] if equivalence else [])
    return [c for c in asked if applicability(out, plan, c, equivalence) is None]


def fill_not_run(v: Validation, out: Path, plan: dict, opts: ServeOptions, why: str, equivalence: bool, emit) -> None:
    """Every server check gets a row: the ones that did not run say why (not applicable, or
    not run with the reason)."""
    for check in SERVER_CHECKS:
        if v.row(check) is not None:
            continue
        na = applicability(out, plan, check, equivalence)
        if na:
            row = Row(check, NOT_APPLICABLE, na)
        elif check == SPECULATIVE and not opts.speculative_mtp:
            row = Row(check, UNVERIFIED, "not run: the kept MTP layer runs only with speculative decoding (validate --serve --speculative)")
        elif check == EQUIVALENCE and not equivalence:
            row = Row(check, UNVERIFIED, "not run (validate --equivalence)")
        elif check == IMAGE:
            row = Row(check, UNVERIFIED, "not run: image requests are not sent yet")
        else:
            row = Row(check, UNVERIFIED, why)
        v.rows.append(row)
        emit({"event": "check", **row.to_json()})
    # the offline rows, then the server checks in the order they run
    order = {c: i for i, c in enumerate(SERVER_CHECKS)}
    v.rows.sort(key=lambda r: order.get(r.check, -1))


# Starts on a fresh port when another process took the one drawn for the server before vLLM
# bound it (a busy host; several validations side by side): the port is ours to choose.
PORT_ATTEMPTS = 3


def serve_rows(v: Validation, out: Path, plan: dict, opts: ServeOptions, emit, equivalence: bool = False) -> None:
    v.settings = serve_settings(opts)
    taken: list[int] = []
    probe = None
    try:
        probe = EngineProbe(opts)  # what the engine built and executed, per coverage row (not part of serve_command)
        while True:
            port = free_port()
            argv = serve_argv(out, v.mode, opts, port)
            v.serve_command = argv
            emit({"event": "serve", "status": "starting", "command": argv, "log": str(out / "logs" / "serve.log")})
            server = Server(probe.server_argv(argv), probe.server_env(serve_env(opts)), out / "logs" / "serve.log",
                            on_line=lambda s, l: emit({"event": "log", "stream": s, "line": l}), output=out)
            with interrupting_signals():  # SIGTERM / SIGHUP unwind through the finally below, like Ctrl-C
                done = _serve_and_stop(v, out, plan, opts, emit, equivalence, server, port, taken, probe)
            if done:
                return
            if probe.restart:  # the start failed on mxtrim's probe, not on the output: again without it
                probe.restart = False
                emit({"event": "serve", "status": "retrying", "reason": probe.unusable})
                continue
            taken.append(port)
            emit({"event": "serve", "status": "retrying", "reason": f"port {port} was taken before the server bound it"})
    finally:
        if probe is not None:  # None: interrupted while it was prepared (it removed its own folder)
            probe.close()
            v.paths = probe.paths(plan, out)


def _ports_note(taken: list[int]) -> str:
    if not taken:
        return ""
    ports = ", ".join(str(p) for p in taken)
    return f"; another process took port{'s' if len(taken) > 1 else ''} {ports} first, started again on a fresh port"


def _blocker(v: Validation, server: Server) -> str | None:
    """Why the next check cannot run: the server is gone, or generation failed."""
    code = server.exited()
    if code is not None:
        return f"skipped: the server exited (status {code})"
    gen = v.row(GENERATION)
    if gen is not None and gen.status == FAILED:
        return "skipped: generation failed"
    return None


def _serve_and_stop(v: Validation, out: Path, plan: dict, opts: ServeOptions, emit, equivalence: bool, server: Server, port: int,
                    taken: list[int], probe: EngineProbe) -> bool:
    """Serve and run the checks: False when the server lost its port to another process before
    it bound it and another attempt is left (``taken``: the ports lost so far), or failed to
    load mxtrim's probe (``probe.restart``), nothing recorded."""
    started = time.monotonic()
    base = f"http://127.0.0.1:{port}"
    try:
        server.start()
        emit({"event": "stage", "name": "start-up", "status": "running"})
        healthy, why = server.wait_healthy(base, opts.startup_timeout, limit=opts.startup_limit)
        if not healthy:
            exit_info = server.stop()
            if exit_info.returncode not in (None, 0) and probe.failed_start(server.tail):
                return False
            if (len(taken) + 1 < PORT_ATTEMPTS and exit_info.returncode not in (None, 0)
                    and any(PORT_TAKEN.search(line) for line in server.tail)):
                return False
            why += _ports_note(taken)
            verdict = classify(list(server.tail), exit_info.returncode, stopped_by_us=False, reason=why, dummy=v.mode == "dummy",
                               environment=v.environment, source_state=source_state(plan))
            v.rows.append(Row(START_UP, FAILED, why, verdict.to_json() if verdict else None))
            note_startup(v.rows[-1], out, opts)  # graph mode: what it compiled before it stopped
            emit({"event": "check", **v.rows[-1].to_json()})
            v.server_exit = _exit_json(exit_info)
            for check in [EFFECTIVE] + checks_to_run(out, plan, opts, equivalence):
                v.rows.append(Row(check, UNVERIFIED, "skipped: the server did not start"))
            # what vLLM logged before it stopped (the weights, perhaps the KV budget) is compared
            memory_row(v, out, opts, emit, started=False)
            return True
        v.rows.append(Row(START_UP, PASSED, f"healthy after {time.monotonic() - started:.1f} s"
                          + (" (dummy weights)" if v.mode == "dummy" else " (real weights)") + _ports_note(taken)))
        note_startup(v.rows[-1], out, opts)  # graph mode: the compile / capture time vLLM logged
        emit({"event": "check", **v.rows[-1].to_json()})
        probe.install(base)  # what each rank built; its counters on
        v.effective_probe = probe.effective()
        memory_row(v, out, opts, emit)
        effective_check(v, out, plan, emit)
        steps = {GENERATION: lambda: generation_rows(v, out, base, server, emit),
                 LONG_INPUT: lambda: long_input_row(v, out, plan, opts, base, emit),
                 SPECULATIVE: lambda: speculative_row(v, out, base, server, emit),
                 EQUIVALENCE: lambda: equivalence_row(v, out, plan, opts, base, server, emit)}
        for check in checks_to_run(out, plan, opts, equivalence):
            run_check = steps[check]
            blocker = _blocker(v, server) if check != GENERATION else None
            if blocker:
                v.rows.append(Row(check, UNVERIFIED, blocker))
                emit({"event": "check", **v.rows[-1].to_json()})
                continue
            emit({"event": "stage", "name": check, "status": "running"})
            try:
                # each request check counted alone (the equivalence check stops this server)
                with probe.measure(base, check) if check != EQUIVALENCE else contextlib.nullcontext():
                    run_check()
            except Exception as exc:  # a request that could not be made: the check failed, the run goes on
                reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                verdict = classify(list(server.tail), server.exited(), stopped_by_us=False, reason=reason, dummy=v.mode == "dummy",
                                   environment=v.environment, source_state=source_state(plan))
                v.rows.append(Row(check, FAILED, reason, verdict.to_json() if verdict else None))
                emit({"event": "check", **v.rows[-1].to_json()})
        return True
    finally:
        if server.exited() is None and sys.exc_info()[0] is None:
            # side by side with other servers (validate --jobs): not stopped while a neighbour
            # on its GPUs profiles memory, whose free memory would jump under it
            wait_for_neighbours_profiling(opts.gpus, out)
        if server.exited() is None or not server.stop_requested:
            exit_info = server.stop()
            v.server_exit = _exit_json(exit_info)
            emit({"event": "serve", "status": "stopped", **v.server_exit})


def source_state(plan: dict) -> str | None:
    """What the output's source held when it was trimmed (``mxtrim-plan.json``'s
    ``source_state``: complete, partial, index only, config only); None when not recorded."""
    state = plan.get("source_state")
    return state.get("state") if isinstance(state, dict) and isinstance(state.get("state"), str) else None


def memory_row(v: Validation, out: Path, opts: ServeOptions, emit, started: bool = True) -> None:
    """The budget's prediction against the figures vLLM logged: a row of its own, so that a
    disagreement is seen wherever the rows are (CLI, README, wizard). ``started`` False: the
    server stopped during start-up, and only the figures it logged before are compared."""
    from .memory_check import summary

    v.memory = memory_comparison(out, opts, started)
    if v.memory is None:
        row = Row(MEMORY, UNVERIFIED, "vLLM logged no memory figures" if started
                  else "skipped: the server did not start (it logged no memory figure before it stopped)")
    elif "error" in v.memory:
        row = Row(MEMORY, UNVERIFIED, f"no prediction: {v.memory['error']}")
    else:
        emit({"event": "memory", **v.memory})
        agree = v.memory.get("agree")
        status = UNVERIFIED if agree is None else (PASSED if agree else DIFFERS)
        row = Row(MEMORY, status, summary(v.memory), data={"memory": v.memory})
    v.rows.append(row)
    emit({"event": "check", **row.to_json()})


def effective_check(v: Validation, out: Path, plan: dict, emit) -> None:
    """What vLLM built (its start-up log, and the engine's own record where the probe ran)
    against what the output's config and the serve settings plan: a row of its own."""
    from .effective import output_row

    row, v.effective = output_row(out, plan, v.settings, getattr(v, "effective_probe", None))
    v.rows.append(Row(**row))
    emit({"event": "check", **v.rows[-1].to_json()})


def memory_comparison(out: Path, opts: ServeOptions, started: bool = True) -> dict | None:
    """The budget's prediction beside the figures this server logged while starting (its log's
    last run), or None when the log holds none of them. ``started`` False: the server stopped
    during start-up (``stopped_during_startup``: the figures it had not logged yet are not
    compared, and the summary says why)."""
    from . import memory_check
    from .vllm_log import iter_file, last_run, parse_startup

    actual = parse_startup(last_run(iter_file(out / "logs" / "serve.log")))
    if not actual.source_lines:
        return None
    try:
        predicted = memory_check.predict(out, opts, opts.gpu_total_bytes)
    except InputError as exc:  # the output cannot be read back: say so, do not fail the run
        return {"error": str(exc)}
    return {**memory_check.compare(predicted, actual), "stopped_during_startup": not started}


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
                           reason="; ".join(f"{r.name}: {r.detail}" for r in failed), environment=v.environment)
    v.rows.append(Row("generation", FAILED if failed else PASSED, detail, verdict.to_json() if verdict else None,
                      data={"requests": [r.to_json() for r in results], "decode_steps": min((r.completion_tokens or 0) for r in gen) if gen else 0}))
    emit({"event": "check", **v.rows[-1].to_json()})


def long_input_boundaries(out: Path, plan: dict) -> list[dict]:
    """The lengths from which kept paths run that only long inputs take (sliding windows,
    compression blocks, sparse top-k), each with the layers that have it; [] when none."""
    family = plan.get("model", {}).get("family") if isinstance(plan.get("model"), dict) else None
    return rq.kept_boundaries(output_text_config(out), plan.get("coverage", []), family)


LONG_DECODE_TOKENS = 4  # tokens the long-input request asks for


def long_input_row(v: Validation, out: Path, plan: dict, opts: ServeOptions, base: str, emit) -> None:
    """A prompt past every kept boundary the served context holds (the branches a plain request
    does not take): passed when it crossed them all, unverified naming those it could not."""
    outcome, detail, data, r = rq.long_input(base, out, long_input_boundaries(out, plan), opts.max_model_len, LONG_DECODE_TOKENS)
    if r is not None:
        emit({"event": "request", **r.to_json()})
    v.rows.append(Row(LONG_INPUT, {"crossed": PASSED, "failed": FAILED}.get(outcome, UNVERIFIED), detail, data=data))
    emit({"event": "check", **v.rows[-1].to_json()})


def speculative_row(v: Validation, out: Path, base: str, server: Server, emit) -> None:
    """Served with the MTP drafter: a request, then vLLM's own counters of drafted and accepted
    tokens (its /metrics, else its log). Passed only when tokens were drafted."""
    r = rq.completion(base, str(out), max_tokens=16, name="speculative")
    emit({"event": "request", **r.to_json()})
    counts = rq.spec_decode_counts(base) or spec_counts_from_log(list(server.tail))
    data = {"request": r.to_json(), "spec_decode": counts}
    if not r.passed:
        v.rows.append(Row(SPECULATIVE, FAILED, f"the request through the draft path failed: {r.detail}", data=data))
    elif counts is None:
        v.rows.append(Row(SPECULATIVE, UNVERIFIED, "the request passed, but this vLLM reported no drafted / accepted counts", data=data))
    elif counts["drafted"] > 0:
        rate = counts["accepted"] / counts["drafted"]
        v.rows.append(Row(SPECULATIVE, PASSED, f"{counts['drafted']:g} tokens drafted by the MTP layer, {counts['accepted']:g} accepted ({rate:.0%}; "
                                               "random weights accept few) — source: " + counts["source"], data=data))
    else:
        v.rows.append(Row(SPECULATIVE, FAILED, "served with --speculative-config, but vLLM drafted no token", data=data))
    emit({"event": "check", **v.rows[-1].to_json()})


def equivalence_row(v: Validation, out: Path, plan: dict, opts: ServeOptions, base: str, server: Server, emit) -> None:
    from .equivalence import compare, tolerance_key
    from .vllm_log import iter_file, last_run, served_dtype

    dtype = served_dtype(last_run(iter_file(out / "logs" / "serve.log"))) or opts.dtype
    key = tolerance_key(dtype, "fp8" in json.dumps(output_quantization(out) or {}).lower())

    def serve_source(judge_served):
        """Stop the trim's server, serve the untrimmed source (checked by ``compare`` to be
        here and small enough) the same way, judge it."""
        v.server_exit = _exit_json(server.stop())  # one server at a time: GPU memory is the trim's
        source = Path(plan["source"])
        port = free_port()
        argv = serve_argv(source, "weights", dataclasses.replace(opts, speculative_mtp=0), port)
        emit({"event": "serve", "status": "starting", "command": argv, "log": str(out / "logs" / "serve-source.log")})
        other = Server(argv, serve_env(opts), out / "logs" / "serve-source.log",
                       on_line=lambda s, l: emit({"event": "log", "stream": s, "line": l}), output=out)
        try:
            other.start()
            healthy, why = other.wait_healthy(f"http://127.0.0.1:{port}", opts.startup_timeout, limit=opts.startup_limit)
            if not healthy:
                return None, f"its server did not start: {why} (logs/serve-source.log)"
            return judge_served(f"http://127.0.0.1:{port}", str(source)), ""
        finally:
            other.stop()

    status, detail, data = compare(base, out, plan, key, serve_source=serve_source)
    v.rows.append(Row(EQUIVALENCE, status, detail, data=data))
    emit({"event": "check", **v.rows[-1].to_json()})


def _exit_json(exit_info) -> dict:
    return {"returncode": exit_info.returncode, "requested": exit_info.requested, "signal": exit_info.signal_used,
            "stragglers": exit_info.stragglers, "survivors": exit_info.survivors}


def _has_chat_template(out: Path) -> bool:
    try:
        return "chat_template" in json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
