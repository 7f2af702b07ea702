"""`mxtrim validate OUT1 OUT2 …` / `validate --all [FOLDER]`: many outputs, one after the other
or (``--jobs``) side by side, each output's earlier run reused where it still answers, and the
validation matrix of every output × check rewritten as each finishes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.errors import InputError
from .arguments import UsageError
from .validation_run import leftover_servers_notice, parallel_sizes, run_validation, serve_options


NODES_OWN = "each Ray node's own vLLM interpreter (none found where the batch was started)"


def _many_outputs(args) -> tuple[list[Path], list[Path], Path]:
    """(mxtrim outputs, hand-made examples, matrix folder) of ``validate OUT1 OUT2 …`` / ``--all``."""
    from ..core.validate.batch import outputs_in
    from ..core.validate.examples import workspace_folder

    outputs, hand_made = [Path(os.path.abspath(o)) for o in args.output], []
    folder = None
    if args.all_in is not None:
        folder = Path(os.path.abspath(workspace_folder(Path(args.all_in) if args.all_in else None, Path.cwd())))
        if not folder.is_dir():
            raise InputError(folder, "no such folder of models (give one: mxtrim validate --all FOLDER)")
        mine, hand_made = outputs_in(folder)
        outputs += [o for o in mine if o not in outputs]
    matrix = Path(os.path.abspath(args.matrix or folder or Path.cwd()))
    if not matrix.is_dir():
        raise InputError(matrix, "no such folder for the validation matrix")
    return outputs, hand_made, matrix


def validate_many(args) -> int:
    """One output after the other, one server at a time; the matrix rewritten after each, so
    Ctrl-C keeps the finished rows (and stops the running server, as a single validation does)."""
    from ..core.user_settings import get_setting
    from ..core.validate import batch
    from ..core.validate.examples import now_versions
    from ..core.probe.vllm_python import SETTING, VllmNotFound, find_vllm_python

    if getattr(args, "ray", None) is not None and args.jobs != 1:
        raise UsageError("mxtrim validate: error: --ray places each server on a node of the cluster, as many at once "
                         "as the cluster's GPUs take; --jobs (side by side on this host) does not go with it")
    if getattr(args, "executor_backend", None) == "ray" and args.jobs != 1 and getattr(args, "ray", None) is None:
        raise UsageError("mxtrim validate: error: --distributed-executor-backend ray lets vLLM's Ray executor place "
                         "each server's workers, which --jobs would place on this host's GPUs: use --ray to validate "
                         "the outputs across the cluster")
    outputs, hand_made, folder = _many_outputs(args)
    ray = _ray_cluster(args) if getattr(args, "ray", None) is not None else None
    try:
        vllm = find_vllm_python(args.python, get_setting(SETTING))
    except VllmNotFound:
        if ray is None or args.python:
            raise
        vllm = None  # a driver without vLLM: each node resolves its own, and no earlier run is reused
    now = now_versions(vllm.python) if vllm is not None else None
    rows = [batch.MatrixRow(str(o), batch.NOT_RUN) for o in outputs]
    leftover_servers_notice(args)
    i = 0

    def publish(complete: bool) -> tuple[dict, tuple[Path, Path]]:
        doc = batch.matrix_document(rows, vllm.python if vllm is not None else NODES_OWN, now, hand_made, complete,
                                    execution=_execution(args))
        return doc, batch.write_matrix(folder, doc)

    running: list[int] = []  # the rows being validated now
    try:
        if ray is not None:
            _validate_on_ray(ray, args, outputs, rows, vllm, now, lambda: publish(False), running)
        elif getattr(args, "jobs", 1) == 1:
            from ..core.validate.offline import OfflineBatch

            # vLLM's registry read once, for the outputs that will be validated (not reused)
            offline = OfflineBatch(vllm.python, outputs,
                                   will_run=lambda o: _reused_row(args, o, vllm, now, "", quiet=True).state != batch.REUSED)
            for i, out in enumerate(outputs):
                running[:] = [i]
                rows[i] = _validate_one_of_many(args, out, vllm, now, f"[{i + 1}/{len(outputs)}]", offline)
                publish(False)
        else:
            _validate_side_by_side(args, outputs, rows, vllm, now, lambda: publish(False), running)
    except KeyboardInterrupt:
        for i in running:
            if rows[i].state == batch.NOT_RUN:
                rows[i].state = batch.INTERRUPTED
        _, paths = publish(False)
        print(f"mxtrim: interrupted; finished rows kept in {paths[1]}", file=sys.stderr)
        raise
    doc, paths = publish(True)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(batch.matrix_markdown(doc))
        print(f"matrix: {paths[1]} and {paths[0].name}")
    return 0 if all(r.ok for r in rows) else 1


def _execution(args) -> str | None:
    """How this batch's servers run: graph mode (--graph) or eager; None where none is asked."""
    from ..core.validate.graph_mode import EAGER, GRAPH

    if getattr(args, "graph", False):
        return GRAPH
    return EAGER if args.serve or args.equivalence else None


def _settings_now(args, out: Path, vllm) -> dict | None:
    """The settings a server of ``out`` would run with now (run.serve_settings), None when the
    output or the flags are refused (its validation says why)."""
    from ..core.validate.run import read_output, serve_settings

    try:
        return serve_settings(serve_options(args, out, read_output(out), vllm))
    except InputError:
        return None


def _reused_row(args, out: Path, vllm, now: dict | None, counter: str, quiet: bool = False):
    """The row of the run recorded earlier that answers this request (reused), else a row not
    run yet whose note says why the earlier run does not (empty: there is none); ``quiet``:
    nothing said on stderr."""
    from ..core.validate import batch
    from ..core.validate.examples import last_run
    from ..core.validate.graph_mode import earlier_run

    serve = args.serve or args.equivalence
    if vllm is None:
        return batch.MatrixRow(str(out), batch.NOT_RUN, note="validated anew: no vLLM here to compare its last run with")
    # a served request is measured against the latest run of its own mode (eager or graph)
    earlier = None if args.again else (earlier_run(out, getattr(args, "graph", False)) if serve else last_run(out))
    elsewhere = batch.recorded_elsewhere(earlier, out)
    if elsewhere and not quiet:
        print(f"{counter} {out}: its last recorded run was made for {elsewhere} (copied or moved since): validated anew",
              file=sys.stderr, flush=True)
    settings = _settings_now(args, out, vllm) if serve and earlier is not None else None
    if serve and earlier is not None and settings is None:
        return batch.MatrixRow(str(out), batch.NOT_RUN)
    decision = batch.reuse(earlier, vllm.python, now, serve, args.equivalence, args.speculative, out,
                           parallel=(args.tp, args.pp), settings=settings)
    if decision.why and not elsewhere and not quiet:
        print(f"{counter} {out}: {decision.why}", file=sys.stderr, flush=True)
    if decision.reused:
        return batch.row_for_run(out, earlier, batch.REUSED, decision.why)
    return batch.MatrixRow(str(out), batch.NOT_RUN, note=decision.why)


def _validated_row(out: Path, doc: dict, ok: bool):
    """The matrix row of a validation just run (``doc``: its JSON)."""
    from ..core.validate import batch

    row = batch.row_for_run(out, doc, batch.VALIDATED)
    row.ok = ok  # asked to serve and could not (no free device): not ok, as for a single output
    if ok != doc.get("ok"):  # the start-up row says why
        row.note = next((r.get("detail") or "" for r in doc.get("rows") or [] if r.get("check") == batch.START_UP), "")
    return row


def _validate_one_of_many(args, out: Path, vllm, now: dict | None, counter: str, offline):
    from ..core.validate import batch

    earlier = _reused_row(args, out, vllm, now, counter)
    if earlier.state == batch.REUSED:
        return earlier
    print(f"{counter} {out}", file=sys.stderr, flush=True)
    try:
        v, runs, ok = run_validation(out, args, quiet=True, vllm=vllm, offline=offline)
    except InputError as exc:
        print(f"mxtrim: error: {exc}", file=sys.stderr, flush=True)
        return batch.MatrixRow(str(out), batch.REFUSED, False, note=str(exc))
    print(f"{counter} {out}: {'ok' if ok else 'failed'} (recorded in validation.json, run {runs})", file=sys.stderr, flush=True)
    return _with_note(_validated_row(out, v.to_json(), ok), earlier.note)


def _with_note(row, note: str):
    """``row`` with ``note`` (why an earlier run was not reused) before its own."""
    row.note = "; ".join(n for n in (note, row.note) if n)
    return row


def _serve_settings_to_run(args, out: Path, i: int, total: int, rows: list, vllm, now: dict | None) -> dict | None:
    """The serve settings of an output a batch runs now (``rows[i]``: its row until then);
    None, with its row filled, where its earlier run is reused or the output is refused."""
    from ..core.validate import batch
    from ..core.validate.run import read_output

    rows[i] = _reused_row(args, out, vllm, now, f"[{i + 1}/{total}]")
    if rows[i].state == batch.REUSED:
        return None
    try:
        return read_output(out).get("serve") or {}
    except InputError as exc:
        print(f"mxtrim: error: {exc}", file=sys.stderr, flush=True)
        rows[i] = batch.MatrixRow(str(out), batch.REFUSED, False, note=str(exc))
        return None


def _validate_side_by_side(args, outputs: list[Path], rows: list, vllm, now: dict | None, publish, running: list[int]) -> None:
    """``validate --jobs N|auto``: each output in a child ``mxtrim validate OUT`` (what a serial
    run writes), side by side as core.validate.parallel places them; ``rows`` filled and
    ``publish()`` called as each finishes; ``running`` names the rows under way."""
    from ..core.plan.budget import DEFAULT_GPU_MEMORY_UTILIZATION
    from ..core.validate import batch
    from ..core.validate.devices import _user_visible
    from ..core.validate.parallel import Job, ParallelBatch

    probe_gpus = None
    if args.device != "cpu":
        from ..core.probe.gpu import probe_gpus
    first = probe_gpus() if probe_gpus is not None else None
    on_gpu = first is not None and first.available and bool(first.gpus)
    jobs = []
    for i, out in enumerate(outputs):
        serve = _serve_settings_to_run(args, out, i, len(outputs), rows, vllm, now)
        if serve is None:
            continue
        share = (args.gpu_memory_utilization or float(serve.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
                 if on_gpu else None)
        tp, pp = parallel_sizes(args, serve)
        jobs.append(Job(i, out, tp, share, pp=pp))
    publish()
    report = _SideBySideReport(rows, publish, running, len(outputs))
    vendor = first.vendor if on_gpu else None
    allowed = _user_visible(first.visible_devices) if on_gpu else None
    # auto on the CPU: a server per 8 cores (each runs its own threads on all of them)
    limit = args.jobs if args.jobs is not None or on_gpu else max(1, (os.cpu_count() or 1) // 8)
    ParallelBatch(jobs, lambda job: _side_by_side_argv(args, vllm.python, job, vendor), probe_gpus if on_gpu else None,
                  limit, report.start, report.done, report.refused, allowed, on_pause=report.pause, starting=args.starting).run()


def _side_by_side_argv(args, python: str, job, vendor: str | None) -> list[str]:
    """The child ``mxtrim validate OUT`` of one output of a side-by-side batch: this batch's
    flags, with the GPUs and the share it was placed on."""
    argv = [sys.executable, "-m", "mxtrim_tui", "validate", str(job.output), "--python", python, "--json", "--progress",
            "--timeout", f"{args.timeout:g}", "--tp", str(job.tp), "--pp", str(job.pp)]
    if job.gpus:
        device = args.device if args.device != "auto" else ("maca" if vendor == "metax" else "cuda")
        argv += ["--device", device, "--gpus", ",".join(map(str, job.gpus)), "--gpu-memory-utilization", f"{job.share:g}"]
    else:
        argv += ["--device", args.device]
    return argv + _checks_and_server_flags(args)


def _checks_and_server_flags(args) -> list[str]:
    """The flags every output's child validation of a batch gets as this batch got them."""
    flags = (("--serve", args.serve), ("--graph", getattr(args, "graph", False)), ("--speculative", args.speculative),
             ("--equivalence", args.equivalence),
             ("--trust-remote-code", args.trust_remote_code), ("--ep", args.expert_parallel))
    argv = [flag for flag, on in flags if on]
    for flag, value in (("--launcher", args.launcher), ("--kv-cache-memory-bytes", args.kv_cache_memory_bytes),
                        ("--max-model-len", args.max_model_len),
                        ("--distributed-executor-backend", getattr(args, "executor_backend", None))):
        if value is not None:
            argv += [flag, str(value)]
    return argv


class _SideBySideReport:
    """What a side-by-side batch says on stderr and puts in the matrix as its servers go."""

    def __init__(self, rows: list, publish, running: list[int], total: int) -> None:
        self.rows, self.publish, self.running, self.total = rows, publish, running, total

    def _say(self, job, text: str) -> None:
        print(f"[{job.index + 1}/{self.total}] {job.output}{text}", file=sys.stderr, flush=True)

    def start(self, job) -> None:
        self.running.append(job.index)
        where = f" on GPU {','.join(map(str, job.gpus))} (share {job.share:g})" if job.gpus else ""
        self._say(job, where + (" again, alone" if job.alone else ""))

    def done(self, job, doc: dict | None, code: int, retried: bool) -> None:
        from ..core.validate import batch

        self.running.remove(job.index)
        if retried:
            self._say(job, ": its start failed on memory beside another server of this batch (not the output's failure): "
                      "validated again alone")
            return
        if doc is None:
            why = next((line[len("mxtrim: error: "):] for line in reversed(job.tail) if line.startswith("mxtrim: error: ")),
                       f"the validation exited with status {code} without a result")
            print(f"mxtrim: error: {why}", file=sys.stderr, flush=True)
            self.rows[job.index] = batch.MatrixRow(str(job.output), batch.REFUSED, False, note=why)
        else:
            row = self.rows[job.index] = _with_note(_validated_row(job.output, doc, code == 0), self.rows[job.index].note)
            if job.alone:
                row.note = (row.note + "; " if row.note else "") + "validated alone: its start beside another server failed on memory"
            self._say(job, f": {'ok' if code == 0 else 'failed'} (recorded in validation.json)")
        self.publish()

    def refused(self, job, why: str) -> None:
        from ..core.validate import batch

        self._say(job, f": not started: {why}")
        self.rows[job.index] = batch.MatrixRow(str(job.output), batch.REFUSED, False, note=why)
        self.publish()

    def pause(self, job, paused: bool) -> None:
        gpus = ",".join(map(str, job.gpus))
        self._say(job, f": paused while another server on GPU {gpus} measures its memory" if paused else ": continued")


def _ray_cluster(args):
    """The ``ray`` module joined to the cluster ``--ray`` names, before anything starts."""
    from ..core.validate.ray_batch import RayUnavailable, connect

    try:
        return connect(None if args.ray == "auto" else args.ray)
    except RayUnavailable as exc:
        raise UsageError(f"mxtrim: error: {exc}") from None


def _validate_on_ray(ray, args, outputs: list[Path], rows: list, vllm, now: dict | None, publish, running: list[int]) -> None:
    """``validate --ray``: each output not reused is a Ray task (core.validate.ray_batch) on a
    node with TP × PP GPUs (none on the CPU: --device cpu, or auto where no node has a GPU);
    rows filled and ``publish()`` called as each lands, with the node that ran it."""
    from ..core.validate import batch
    from ..core.units import plural
    from ..core.validate.ray_batch import LOST, RayBatch, RayJob, across_nodes_refusal, cluster_device, gpu_nodes

    total = len(outputs)
    nodes = gpu_nodes(ray)
    widest = nodes[0].gpus if nodes else 0
    device = cluster_device(args.device, nodes)  # auto: the CPU where no node declares a GPU
    jobs = []
    for i, out in enumerate(outputs):
        serve = _serve_settings_to_run(args, out, i, total, rows, vllm, now)
        if serve is None:
            continue
        tp, pp = parallel_sizes(args, serve)
        gpus = 0 if device == "cpu" else tp * pp
        # asked for vLLM's Ray executor, or no one node holds it: the server's workers span nodes
        if gpus and (gpus > widest or args.executor_backend == "ray"):
            refusal = across_nodes_refusal(gpus, nodes)
            if refusal is None:
                jobs.append(RayJob(i, out, gpus, across=nodes[0]))
                continue
            why = f"its server takes {plural(gpus, 'GPU')} (TP {tp} × PP {pp}): {refusal}"
            print(f"[{i + 1}/{total}] {out}: not started: {why}", file=sys.stderr, flush=True)
            rows[i] = batch.MatrixRow(str(out), batch.REFUSED, False, note=why)
            continue
        jobs.append(RayJob(i, out, gpus))
    publish()

    def say(job, text: str) -> None:
        print(f"[{job.index + 1}/{total}] {job.output}{text}", file=sys.stderr, flush=True)

    def started(job) -> None:
        running.append(job.index)
        across = f" across nodes: vLLM's Ray executor, started on {job.across}" if job.across else ""
        say(job, " submitted" + (" again" if job.attempts > 1 else "") + (f" ({plural(job.gpus, 'GPU')}{across})" if job.gpus else ""))

    def done(job, result: dict) -> None:
        running.remove(job.index)
        host = (result.get("node") or {}).get("host", "")
        lost = f"{LOST} ({'; '.join(job.losses)}), validated again" if job.losses else ""
        doc = result.get("doc")
        if doc is None:
            why = result.get("unreadable") or result.get("error") or next(
                (line[len("mxtrim: error: "):] for line in reversed(result.get("tail") or []) if line.startswith("mxtrim: error: ")),
                f"the validation exited with status {result.get('code')} without a result")
            say(job, f": {why}")
            rows[job.index] = batch.MatrixRow(str(job.output), batch.REFUSED, False, note=why, node=host)
        else:
            row = rows[job.index] = _with_note(_validated_row(job.output, doc, result.get("code") == 0), rows[job.index].note)
            row.node = host
            row.note = "; ".join(n for n in (row.note, lost) if n)
            say(job, f": {'ok' if row.ok else 'failed'} on {host} (recorded in validation.json)")
        publish()

    def lost(job, what: str, retried: bool) -> None:
        running.remove(job.index)
        job.losses.append(what)
        say(job, f": {LOST}: {what}" + ("; submitted again" if retried else ""))
        if not retried:
            rows[job.index] = batch.MatrixRow(str(job.output), batch.INTERRUPTED, False, note=f"{LOST}: {what}")
            publish()

    def cancelled(job) -> None:
        if rows[job.index].state == batch.NOT_RUN:
            rows[job.index] = batch.MatrixRow(str(job.output), batch.INTERRUPTED, note="cancelled (Ctrl-C)")

    RayBatch(ray, jobs, lambda job: _ray_argv(args, job), args.retries, done, lost, cancelled, started).run()


def _ray_argv(args, job) -> list[str]:
    """The flags of one output's validation on its node (the node resolves the vLLM interpreter
    unless --python names one; Ray's GPUs are added there)."""
    argv = ["--json", "--progress", "--timeout", f"{args.timeout:g}", "--device", args.device]
    if args.python:
        argv += ["--python", args.python]
    if args.tp != 1 or args.pp != 1:
        argv += ["--tp", str(args.tp), "--pp", str(args.pp)]
    if args.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:g}"]
    return argv + _checks_and_server_flags(args)
