"""Graph mode (``mxtrim validate OUT --serve --graph``): the server runs without
``--enforce-eager``, with vLLM's default compilation — torch.compile and CUDA graphs on a GPU;
on the CPU build its Dynamo trace with inductor (``CompilationMode.DYNAMO_TRACE_ONCE``), no
graphs captured. Graph mode runs other code than eager mode, so it is a run of its own: its
settings record ``enforce_eager: false`` and ``graph: true``, an earlier run is reused only for a
request in the same mode (``earlier_run``), the matrix of each mode has a file of its own
(``batch.write_matrix``) and the README keeps the latest run of the other mode beside the latest
run (``record.other_mode_section``).

The start-up row of a graph-mode run records what vLLM logged of its compilation, read in vLLM's
own words (vLLM 0.26.0 and 0.32.0 sources; the oldest wording from vLLM-MetaX's build):

* ``torch.compile takes %.2f s in total`` (older builds), ``torch.compile took %.2f s in total``
  (``vllm/compilation/monitor.py``; 0.32.0 prefixes a tag: ``[backbone] ``), and ``torch.compile
  and initial profiling/warmup run together took %.2f s in total`` (``compilation/decorators.py``,
  without the AOT compile): each worker's, one line per compiled part;
* ``init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)``
  (``vllm/v1/engine/core.py``): vLLM's own total (the slowest worker's), which wins;
* ``Graph capturing finished in %.0f secs, took %.2f GiB`` (``v1/worker/gpu_model_runner.py``):
  the CUDA graphs captured;
* the CPU build logs no time for its compilation mode (``monitor_torch_compile`` times only
  ``VLLM_COMPILE``): the time between ``Warming up model for the compilation...`` and ``Warming
  up done.`` (``v1/worker/cpu_model_runner.py``), by the lines' timestamps, to the second;
* ``Directly load AOT compilation from path`` / ``Directly load the compiled graph(s)``: the
  compiled code came from vLLM's compile cache (a short compile time says so).

No Textual, no torch: this reads log text and records."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Iterable

from .vllm_log import _ANSI, iter_file, last_run, message, worker_rank

GRAPH, EAGER = "graph", "eager"  # a run's execution mode, as the matrix names it
_NUM = r"\d+(?:\.\d+)?"
_TAG = r"(?:\[[^\]]*\]\s*)?"  # vLLM 0.32.0's "[backbone] " before a compile line
_TORCH_COMPILE = re.compile(rf"^{_TAG}torch\.compile (?:takes|took) (?P<s>{_NUM}) s in total")
_COMPILE_AND_WARMUP = re.compile(rf"^{_TAG}torch\.compile and initial profiling/warmup run together took (?P<s>{_NUM}) s in total")
_INIT_ENGINE = re.compile(rf"^init engine \(profile, create kv cache, warmup model\) took (?P<s>{_NUM}) s"
                          rf"(?: \(compilation: (?P<c>{_NUM}) s)?")
_CAPTURE = re.compile(rf"^Graph capturing finished in (?P<s>{_NUM}) secs?, took (?P<gib>-?{_NUM}) GiB")
_CPU_WARMUP, _CPU_WARMUP_DONE = "Warming up model for the compilation", "Warming up done"
_FROM_CACHE = re.compile(rf"^{_TAG}Directly load (?:AOT compilation|the compiled graph)")
# the logger header's date and time: "INFO 12-07 16:39:18 [cpu_model_runner.py:87] "
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR)\s+(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})\b")
# where compile_s comes from
VLLM_TOTAL, TORCH_COMPILE, CPU_WARMUP = "vLLM's compilation total", "torch.compile", "the CPU build's warm-up for the compilation"


def _stamp(line: str) -> datetime | None:
    m = _STAMP.search(_ANSI.sub("", line))
    if m is None:
        return None
    month, day, hour, minute, second = map(int, m.groups())
    try:
        return datetime(2000, month, day, hour, minute, second)  # a leap year: 02-29 is a date
    except ValueError:
        return None


def compile_times(lines: Iterable[str]) -> dict:
    """What one start-up (``lines``: its log) logged of its compilation: ``compile_s`` and
    ``compile_source`` (vLLM's total, else the slowest worker's torch.compile lines summed, else
    the CPU build's warm-up by its timestamps), ``capture_s`` / ``capture_gib`` (the CUDA graphs
    of the slowest worker), ``init_engine_s``, ``from_cache`` and the ``log_lines`` read,
    verbatim; each None (``log_lines`` empty) where it logged nothing of it."""
    compiled: dict[str, float] = {}
    warm_start: dict[str, datetime] = {}
    warm: dict[str, float] = {}
    times: dict = {"compile_s": None, "compile_source": None, "capture_s": None, "capture_gib": None,
                   "init_engine_s": None, "from_cache": False, "log_lines": []}
    total = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        msg = message(line)
        rank = worker_rank(line)
        if (m := _TORCH_COMPILE.match(msg) or _COMPILE_AND_WARMUP.match(msg)) is not None:
            compiled[rank] = compiled.get(rank, 0.0) + float(m.group("s"))
        elif (m := _INIT_ENGINE.match(msg)) is not None:
            times["init_engine_s"] = float(m.group("s"))
            total = float(m.group("c")) if m.group("c") else total
        elif (m := _CAPTURE.match(msg)) is not None:
            times["capture_s"] = max(times["capture_s"] or 0.0, float(m.group("s")))
            times["capture_gib"] = max(times["capture_gib"] or 0.0, float(m.group("gib")))
        elif msg.startswith(_CPU_WARMUP) and _stamp(line) is not None:
            warm_start[rank] = _stamp(line)
        elif msg.startswith(_CPU_WARMUP_DONE) and rank in warm_start and _stamp(line) is not None:
            seconds = (_stamp(line) - warm_start.pop(rank)).total_seconds()
            if seconds >= 0:
                warm[rank] = seconds
        elif _FROM_CACHE.match(msg):
            times["from_cache"] = True
        else:
            continue
        times["log_lines"].append(line)
    for source, value in ((VLLM_TOTAL, total), (TORCH_COMPILE, max(compiled.values(), default=None)),
                          (CPU_WARMUP, max(warm.values(), default=None))):
        if value is not None:
            times["compile_s"], times["compile_source"] = round(value, 2), source
            break
    return times


def startup_words(times: dict) -> str:
    """The start-up row's clause for graph mode: what was compiled and captured, in how long."""
    parts = []
    if times.get("compile_s") is not None:
        if times["compile_source"] == CPU_WARMUP:
            parts.append(f"compiled in {times['compile_s']:.0f} s ({CPU_WARMUP}, by its log's timestamps)")
        else:
            parts.append(f"torch.compile {times['compile_s']:.2f} s")
    if times.get("capture_s") is not None:
        parts.append(f"CUDA graphs captured in {times['capture_s']:g} s ({times['capture_gib']:g} GiB)")
    if times.get("from_cache"):
        parts.append("compiled code loaded from vLLM's compile cache")
    return "graph mode: " + (", ".join(parts) if parts else "vLLM logged no compile or capture time")


def note_startup(row, out: Path, opts) -> None:
    """Graph mode (``opts.graph``): the start-up row (``run.Row``, passed or failed) gains what
    the server logged of its compilation, as ``data["graph"]`` and a clause of its detail.
    Eager mode: the row is left as it is."""
    if not opts.graph:
        return
    try:
        times = compile_times(last_run(iter_file(out / "logs" / "serve.log")))
    except OSError:
        times = compile_times([])
    row.detail = "; ".join(p for p in (row.detail, startup_words(times)) if p)
    row.data["graph"] = times


def served_in_graph_mode(run) -> bool | None:
    """True: ``run`` (a record of validation.json) served without ``--enforce-eager``; False:
    eagerly; None: no server ran (offline checks only)."""
    settings = run.get("settings") if isinstance(run, dict) else None
    if not isinstance(settings, dict) or "enforce_eager" not in settings:
        return None
    return settings["enforce_eager"] is False


def earlier_run(out: Path, graph: bool) -> dict | None:
    """The recorded run a served request in this mode is measured against: the latest one
    of this mode (or with no server), else the latest of all (its reason to run again then
    names the modes)."""
    from .examples import last_run as last_recorded

    return last_recorded(out, keep=lambda run: served_in_graph_mode(run) in (None, graph)) or last_recorded(out)


def mode_name(eager: bool) -> str:
    return "eager mode (--enforce-eager)" if eager else "graph mode (--graph)"


def mode_difference(eager_before, eager_now) -> str:
    """"served before in eager mode (--enforce-eager), now in graph mode (--graph)"."""
    return f"served before in {mode_name(eager_before is not False)}, now in {mode_name(eager_now is not False)}"


def settings_words(settings: dict) -> str:
    """How a run's settings say its mode (``run.Validation.settings_line``)."""
    return "eager" if settings.get("enforce_eager", True) is not False else "graph mode (without --enforce-eager)"
