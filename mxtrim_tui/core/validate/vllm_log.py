"""The memory figures that `vllm serve` prints while it starts: what the weights took, the KV
cache budget, how many tokens the KV cache holds and the concurrency that allows.

The wording is vLLM's own (checked against vLLM 0.32.0 and vllm-project/vllm's history):

* weights, GPU model runners (``vllm/v1/worker/gpu_model_runner.py``, and the V2 runner
  ``vllm/v1/worker/gpu/model_runner.py``)::

      Model loading took %s GiB memory and %.6f seconds      (0.32.0: format_gib, 2 decimals)
      Model loading took %.4f GiB and %.6f seconds            (earlier V1)
      Loading model weights took %.4f GB                       (V0; the figure is bytes / 2**30)

  The CPU model runner (``vllm/v1/worker/cpu_model_runner.py``) prints no such line: on the
  CPU build ``weights_bytes`` stays None. (``Loading weights took %.2f seconds`` and
  ``Checkpoint size: X GiB`` are a time and the size on disk, not the memory: not read.)
* KV cache budget, GPU worker (``vllm/v1/worker/gpu_worker.py``)::

      Available KV cache memory: %s GiB                        (may be negative: too little memory)
      Initial free memory %s GiB, reserved %s GiB memory for KV Cache as specified by
      kv_cache_memory_bytes config and skipped memory profiling. ...   (--kv-cache-memory-bytes)

  and CPU worker (``vllm/v1/worker/cpu_worker.py``), KV / node total::

      Explicitly set (%s/%s) GiB for KV cache on node %d.      (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE)
      Auto set (%s/%s) GiB for KV cache on node %d, with %s GiB requested memory for the worker. ...
* KV cache size and concurrency (``vllm/v1/core/kv_cache_utils.py``)::

      %s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx
                                                               (0.32.0: one line; "GPU" on CUDA,
                                                                else the device type upper-cased:
                                                                "CPU"; " + host" with hisparse)
      GPU KV cache size: %s tokens                             (earlier V1: two lines)
      Maximum concurrency for %s tokens per request: %.2fx

Lines are read after removing ANSI colour codes (``VLLM_LOGGING_COLOR=1``), any leading
``(EngineCore pid=N)`` / ``(APIServer pid=N)`` / ``(Worker_TP0 pid=N)`` tags and the logger's
``INFO mm-dd hh:mm:ss [file.py:line]`` header (see ``message``); the message itself must then
start with the wording above, so a line that only quotes it (a traceback, a request echo) is
not read. No Textual, no torch: this runs on any log text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable, Iterator

GIB = 2**30

# CSI sequences (colours, cursor moves) and OSC sequences (titles, links).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# "(EngineCore pid=123) ", "(APIServer pid=1) ", "(Worker_TP0 pid=7) ", "(EngineCore_DP0 pid=9) ",
# "(VllmWorker rank=0 pid=3) ": vLLM's per-process tags, one or more.
_PROCESS_TAG = re.compile(r"^\s*\([^()]*\bpid=\d+\)\s*")
# The logger header: "INFO 12-03 08:36:07 [kv_cache_utils.py:2327] " (0.32.0); older builds
# wrote "INFO 12-03 08:36:07 kv_cache_utils.py:2327] "; a milliseconds field is tolerated.
_LOGGER_HEADER = re.compile(
    r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+)?"
    r"(?:\[[^\]\s]+:\d+\]|[^\s\]\[]+\.py:\d+\]?)\s?"
)

_NUM = r"-?\d+(?:\.\d+)?"
_WEIGHTS = re.compile(
    rf"^(?:Model loading took (?P<gib>{_NUM}) GiB(?: memory)? and {_NUM} seconds"
    rf"|Loading model weights took (?P<gb>{_NUM}) GB\b)"
)
_AVAILABLE_GPU = re.compile(rf"^Available KV cache memory: (?P<gib>{_NUM}) GiB")
_RESERVED_GPU = re.compile(rf"^Initial free memory {_NUM} GiB, reserved (?P<gib>{_NUM}) GiB memory for KV Cache")
_CPU_KV = re.compile(rf"^(?:Explicitly|Auto) set \((?P<gib>{_NUM})/{_NUM}\) GiB for KV cache on node \d+")
_CONCURRENCY = r"Maximum concurrency for (?P<len>\d[\d,]*) tokens per request: (?P<x>\d+(?:\.\d+)?)x"
_KV_SIZE = re.compile(
    rf"^(?P<dev>[A-Z][A-Z0-9]*)(?: \+ host)? KV cache size: (?P<tokens>\d[\d,]*) tokens(?:, {_CONCURRENCY})?"
)
_CONCURRENCY_ALONE = re.compile(rf"^{_CONCURRENCY}")


@dataclass(frozen=True)
class StartupFigures:
    """What one start-up printed; None where the log says nothing about it.

    GiB figures are converted to bytes with GiB = 2**30, from the decimal the log prints:
    vLLM rounds them (0.26.0 and 0.32.0: ``format_gib``, ``str(round(x, 2))``; earlier builds:
    ``%.4f``), so a byte count here is exact only to that rounding (``0.06`` GiB is anything
    from 0.055 to 0.065 GiB, printed for a 64 MiB budget). ``str(round(x, 2))`` drops trailing
    zeros: ``27.2`` is 27.20 ± 0.005 GiB and ``0.0`` anything under 0.005 GiB, so a figure is
    taken to two decimals at least (see ``_half_unit_bytes``).

    ``available_kv_bytes`` is the KV cache budget: the GPU worker's "Available KV cache
    memory" (negative when the weights and activations leave nothing) or its "reserved X GiB
    memory for KV Cache" (given --kv-cache-memory-bytes), or the CPU worker's "Explicitly/Auto
    set (X/total) GiB for KV cache". ``device`` is ``"gpu"`` or ``"cpu"`` (another device
    type that vLLM names in "<DEV> KV cache size", lower-cased: e.g. ``"xpu"``), from the
    wording; ``source_lines`` are all the lines that matched, verbatim (colour codes and
    prefixes kept; only the line end removed), in log order. When a figure is printed more
    than once (one line per tensor-parallel rank), the first one counts; every worker's own
    figure is kept in ``weights_by_rank`` / ``available_kv_by_rank``, keyed by the worker's
    tag without ``Worker_`` (``"TP0"``, ``"TP1_EP1"``, ``"PP1_TP0"``; ``"0"`` for a lone
    worker or a log without tags)."""

    weights_bytes: int | None = None
    available_kv_bytes: int | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    tokens_per_request: int | None = None
    device: str | None = None
    source_lines: tuple[str, ...] = ()
    # half a unit of the last decimal each byte figure was printed with: "0.06 GiB" is 0.06 GiB
    # ± 0.005 GiB, so a prediction within that of the printed value agrees with it
    rounding_bytes: dict = field(default_factory=dict, compare=False)
    weights_by_rank: dict = field(default_factory=dict, compare=False)
    available_kv_by_rank: dict = field(default_factory=dict, compare=False)


def _gib_to_bytes(text: str) -> int:
    return int((Decimal(text) * GIB).to_integral_value())


_WORKER_TAG = re.compile(r"\((Worker(?:_[A-Z]+\d+)*) pid=\d+\)")


def worker_rank(line: str) -> str:
    """The worker a log line came from, as vLLM names it in its tag without ``Worker_``
    (``(Worker_TP1_EP1 pid=7)`` -> ``"TP1_EP1"``); ``"0"`` for ``(Worker pid=7)`` or none."""
    tags = _WORKER_TAG.findall(_ANSI.sub("", line))
    name = tags[-1] if tags else "Worker"
    return name.partition("_")[2] or "0"


# the fewest decimals a GiB figure stands for: vLLM prints every one it logs to two decimals at
# least (``format_gib`` is ``str(round(x, 2))``, which drops trailing zeros; ``%.2f``, ``%.4f``)
PRINTED_DECIMALS = 2


def _half_unit_bytes(text: str) -> int:
    """Half a unit of the last decimal ``text`` (a GiB figure) was rounded to, in bytes: that
    of its last printed decimal, and of the second where it prints fewer ("0.0", "27.2")."""
    exponent = Decimal(text).as_tuple().exponent
    if not isinstance(exponent, int):
        return 0
    return int((Decimal(5).scaleb(min(exponent, -PRINTED_DECIMALS) - 1) * GIB).to_integral_value())


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def message(line: str) -> str:
    """A log line without ANSI codes, its ``(Name pid=N)`` tags and ``LEVEL date [file:line]``
    header, and without surrounding whitespace: the logged message itself."""
    text = _ANSI.sub("", line).strip()
    while True:
        stripped = _PROCESS_TAG.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    return _LOGGER_HEADER.sub("", text, count=1).strip()


def parse_startup(lines: Iterable[str]) -> StartupFigures:
    """The start-up memory figures in ``lines`` (a server log, whole or streamed). Give it one
    start-up: mxtrim appends every validation's server log to the same ``logs/serve.log``
    (see ``last_run``)."""
    found: dict[str, object] = {}
    rounding: dict[str, int] = {}
    sources: list[str] = []
    by_rank: dict[str, dict[str, int]] = {"weights": {}, "kv": {}}
    for raw in lines:
        line = raw.rstrip("\r\n")
        msg = message(line)
        if not msg:
            continue
        if (m := _WEIGHTS.match(msg)) is not None:
            text = m.group("gib") or m.group("gb")
            by_rank["weights"].setdefault(worker_rank(line), _gib_to_bytes(text))
            if "weights_bytes" not in found:
                found["weights_bytes"], rounding["weights_bytes"] = _gib_to_bytes(text), _half_unit_bytes(text)
        elif (m := _AVAILABLE_GPU.match(msg) or _RESERVED_GPU.match(msg)) is not None:
            by_rank["kv"].setdefault(worker_rank(line), _gib_to_bytes(m.group("gib")))
            if "available_kv_bytes" not in found:
                found["available_kv_bytes"], rounding["available_kv_bytes"] = _gib_to_bytes(m.group("gib")), _half_unit_bytes(m.group("gib"))
            found.setdefault("device", "gpu")
        elif (m := _CPU_KV.match(msg)) is not None:
            by_rank["kv"].setdefault(worker_rank(line), _gib_to_bytes(m.group("gib")))
            if "available_kv_bytes" not in found:
                found["available_kv_bytes"] = _gib_to_bytes(m.group("gib"))
                rounding["available_kv_bytes"] = _half_unit_bytes(m.group("gib"))
            found.setdefault("device", "cpu")
        elif (m := _KV_SIZE.match(msg)) is not None:
            found.setdefault("kv_tokens", _count(m.group("tokens")))
            # The KV size line names the device outright: it wins over the worker's wording.
            if "kv_tokens_device" not in found:
                found["kv_tokens_device"] = m.group("dev").lower()
            if m.group("x") is not None:
                found.setdefault("tokens_per_request", _count(m.group("len")))
                found.setdefault("max_concurrency", float(m.group("x")))
        elif (m := _CONCURRENCY_ALONE.match(msg)) is not None:
            found.setdefault("tokens_per_request", _count(m.group("len")))
            found.setdefault("max_concurrency", float(m.group("x")))
        else:
            continue
        sources.append(line)
    device = found.pop("kv_tokens_device", None) or found.get("device")
    found["device"] = device
    return StartupFigures(**found, source_lines=tuple(sources), rounding_bytes=rounding,  # type: ignore[arg-type]
                          weights_by_rank=by_rank["weights"], available_kv_by_rank=by_rank["kv"])


def last_run(lines: Iterable[str]) -> list[str]:
    """The lines of the last server in a ``logs/serve.log`` that mxtrim wrote: each server's
    lines follow the ``$ COMMAND`` line that ``serve.Server.start`` writes first. A log with
    no such line is returned whole."""
    kept: list[str] = []
    for line in lines:
        if line.startswith("$ "):
            kept = []
        kept.append(line)
    return kept


def iter_file(path) -> Iterator[str]:
    """The lines of a log file, undecodable bytes replaced (a server log is not always UTF-8)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from f


_ENGINE_DTYPE = re.compile(r"Initializing a V1 LLM engine .*?\bdtype=torch\.(\w+)")


def served_dtype(lines: Iterable[str]) -> str | None:
    """The dtype the engine runs in, from its start-up line (``dtype=torch.bfloat16``)."""
    for line in lines:
        m = _ENGINE_DTYPE.search(line)
        if m:
            return m.group(1)
    return None


SPEC_LOG = re.compile(r"SpecDecoding metrics:.*?Accepted: (\d+) tokens, Drafted: (\d+) tokens")


def spec_counts_from_log(lines: Iterable[str]) -> dict | None:
    """Drafted and accepted token totals over vLLM's "SpecDecoding metrics" lines, or None
    when there is none."""
    accepted = drafted = 0
    seen = False
    for line in lines:
        m = SPEC_LOG.search(line)
        if m:
            seen = True
            accepted += int(m.group(1))
            drafted += int(m.group(2))
    return {"drafted": drafted, "accepted": accepted, "source": "log"} if seen else None
