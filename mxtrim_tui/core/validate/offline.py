"""The offline checks of several outputs from one probe of the target interpreter: vLLM's
registry is imported and its plugins loaded once for the whole batch (several seconds of each
output's probe), the configuration, tokenizer, chat template and processor read per output.

Asked for the first output of a batch, the probe reads it and every later one that will be
validated (not reused); each later output then gets the rows read for it, unless one of its files changed since (then it is
probed alone, as is every output the batch probe could not answer: a crash, a timeout, code
that is the output's own under --trust-remote-code, where each output keeps its own process)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..probe import OFFLINE_PROBE
from ..probe.offline_probe import MANY_MARK
from .run import offline_checks, offline_rows

# what a validation writes into an output: not part of what its offline checks read
WRITTEN_BY_VALIDATION = frozenset({"validation.json", "README.md", "logs"})


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
    ``timeout``: seconds per output the probe may take in all (as a lone probe may) before it
    is stopped; those it did not answer are probed alone."""

    def __init__(self, python: str, outputs: list[Path], timeout: float = 300.0, will_run=lambda out: True) -> None:
        """``will_run(out)``: whether a later output will be validated (not its earlier run reused)."""
        self.python, self.timeout, self.will_run = python, timeout, will_run
        self.outputs = [Path(o).resolve() for o in outputs]
        self.asked: set[Path] = set()
        self.found: dict[Path, tuple[dict, tuple]] = {}

    def __call__(self, out: Path, python: str, trust_remote_code: bool) -> tuple[dict, list]:
        out = Path(out).resolve()
        if python != self.python or trust_remote_code or out not in self.outputs:
            return offline_checks(out, python, trust_remote_code)
        if out not in self.asked:
            later = [o for o in self.outputs[self.outputs.index(out) + 1:] if o not in self.asked and self.will_run(o)]
            self._probe([out, *later])
        doc, before = self.found.pop(out, (None, None))
        if doc is None or before != fingerprint(out):
            return offline_checks(out, python, trust_remote_code)
        return offline_rows(doc)

    def _probe(self, outputs: list[Path]) -> None:
        """One probe of ``outputs``: two at least, else each is probed alone."""
        self.asked.update(outputs)
        if len(outputs) < 2:
            return
        before = {o: fingerprint(o) for o in outputs}
        argv = [self.python, "-I", str(OFFLINE_PROBE), "--many", "0", "1", *map(str, outputs)]
        try:
            text = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  text=True, errors="replace", timeout=self.timeout * len(outputs)).stdout
        except subprocess.TimeoutExpired as exc:  # the outputs it answered before it was stopped
            text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        except OSError:
            return
        for line in text.splitlines():
            self._take(line, before)

    def _take(self, line: str, before: dict[Path, tuple]) -> None:
        """Keep the document of one output a line of the probe holds, if it holds one."""
        if not line.startswith(MANY_MARK):
            return
        try:
            doc = json.loads(line[len(MANY_MARK):])
            out = Path(doc.pop("output"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        if out in before:
            self.found[out] = (doc, before[out])
