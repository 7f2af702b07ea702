"""The offline checks of several outputs from one probe of the target interpreter: vLLM's
registry is imported and its plugins loaded once for the whole batch (several seconds of each
output's probe), the configuration, tokenizer, chat template and processor read per output.

Asked for the first output of a batch, the probe reads it and every later one; each later
output then gets the rows read for it, unless one of its files changed since (then it is
probed alone, as is every output the batch probe could not answer: a crash, a timeout, code
that is the output's own under --trust-remote-code, where each output keeps its own process)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

from ..probe import OFFLINE_PROBE
from ..probe.offline_probe import MANY_MARK
from .run import offline_checks, offline_rows

# what a validation writes into an output: not part of what its offline checks read
WRITTEN_BY_VALIDATION = frozenset({"validation.json", "README.md", "logs"})
EXIT_GRACE = 10.0  # seconds the probe has to exit once it answered for every output


def fingerprint(out: Path) -> tuple:
    """Name, size and modification time of each file at the top of ``out`` (where the
    configuration, tokenizer and processor files are), those a validation writes left out; a
    link whose target is gone by its own."""
    found = []
    try:
        with os.scandir(out) as entries:
            for e in entries:
                if e.name in WRITTEN_BY_VALIDATION:
                    continue
                try:
                    st = e.stat()
                except OSError:
                    st = e.stat(follow_symlinks=False)
                found.append((e.name, st.st_size, st.st_mtime_ns))
    except OSError:
        return ()
    return tuple(sorted(found))


class OfflineBatch:
    """Stands in for ``run.offline_checks`` in ``run.validate`` for the outputs of a batch.
    ``timeout``: seconds per output the probe may take (as a lone probe may) before it is
    stopped; those it did not answer are probed alone."""

    def __init__(self, python: str, trust_remote_code: bool, outputs: list[Path], timeout: float = 300.0,
                 will_run=lambda out: True) -> None:
        """``will_run(out)``: whether a later output will be validated (not its earlier run reused)."""
        self.python, self.trust, self.timeout, self.will_run = python, trust_remote_code, timeout, will_run
        self.outputs = [Path(o).resolve() for o in outputs]
        self.asked: set[Path] = set()
        self.found: dict[Path, tuple[dict, tuple]] = {}

    def __call__(self, out: Path, python: str, trust_remote_code: bool) -> tuple[dict, list]:
        out = Path(out).resolve()
        if python != self.python or trust_remote_code != self.trust or trust_remote_code or out not in self.outputs:
            return offline_checks(out, python, trust_remote_code)
        if out not in self.asked:
            later = [o for o in self.outputs[self.outputs.index(out) + 1:] if o not in self.asked and self.will_run(o)]
            self._probe([out, *later])
        doc, before = self.found.pop(out, (None, None))
        if doc is None or before != fingerprint(out):
            return offline_checks(out, python, trust_remote_code)
        return offline_rows(doc)

    def _probe(self, outputs: list[Path]) -> None:
        """One probe of ``outputs`` (those not asked before); two at least, else each alone."""
        outputs = [o for o in outputs if o not in self.asked]
        self.asked.update(outputs)
        if len(outputs) < 2:
            return
        before = {o: fingerprint(o) for o in outputs}
        argv = [self.python, "-I", str(OFFLINE_PROBE), "--many", "0", "1", *map(str, outputs)]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                    text=True, errors="replace")
        except OSError:
            return
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
        answered = 0
        deadline = time.monotonic() + self.timeout * len(outputs)  # the first answer comes once all are read
        try:
            while answered < len(outputs):
                # queue.Empty: no answer for that long (what the probe logs meanwhile is no answer)
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                if line is None:
                    break
                if self._take(line, before):
                    answered += 1
                    deadline = time.monotonic() + self.timeout
        except queue.Empty:
            pass
        finally:
            try:
                proc.wait(timeout=EXIT_GRACE if answered == len(outputs) else 0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()

    def _take(self, line: str, before: dict[Path, tuple]) -> bool:
        """Keep the document of one output a line of the probe holds (False: none)."""
        if not line.startswith(MANY_MARK):
            return False
        try:
            doc = json.loads(line[len(MANY_MARK):])
            out = Path(doc.pop("output"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        if out not in before:
            return False
        self.found[out] = (doc, before[out])
        return True


def _read_lines(stream, lines: queue.Queue) -> None:
    """Every line of ``stream`` into ``lines``, then None (also once the stream is closed)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)
