"""Progress events, one schema: every line `mxtrim trim --progress` prints is an event of a
kind the wizard reads (core/progress.py), with the fields its run screen shows."""

from __future__ import annotations

import pytest

from engine_support import run_cli
from mxtrim_tui.core.progress import (
    FileWritten, Other, Result, Stage, TensorCopied, Verifying, parse_event, parse_line,
)
from mxtrim_tui.demo.build import build_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


@pytest.mark.parametrize("mode", ["weights", "dummy"])
def test_every_progress_line_is_a_known_event(demo, tmp_path, mode):
    r = run_cli("trim", str(demo), "--keep", "0,2", "--mode", mode, "--out", str(tmp_path / "out"), "--progress")
    assert r.returncode == 0, r.stderr
    events = [parse_line(line) for line in r.stderr.splitlines()]
    assert None not in events and not [e for e in events if isinstance(e, Other)]
    files = [e for e in events if isinstance(e, FileWritten)]
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert sorted(f.path for f in files) == written  # one per written file, counted to the end
    assert files[-1].done_files == files[-1].total_files == len(written)
    stages = {(e.name, e.status) for e in events if isinstance(e, Stage)}
    assert ("write", "done") in stages and isinstance(events[-1], Result) and events[-1].files == len(written)
    if mode == "weights":
        copied = [e for e in events if isinstance(e, TensorCopied)]
        assert copied and copied[-1].done_bytes == copied[-1].total_bytes > 0
        assert ("structure", "done") in stages and any(isinstance(e, Verifying) for e in events)
        assert next(e for e in events if isinstance(e, Stage) and e.name == "structure" and e.status == "done").summary


def test_fields_are_read_with_their_types_and_unknown_kinds_are_kept():
    e = parse_event({"event": "file", "path": "config.json", "bytes": "12", "done_files": 1, "total_files": True})
    assert isinstance(e, FileWritten) and (e.path, e.bytes, e.done_files, e.total_files) == ("config.json", 0, 1, 0)
    future = parse_event({"event": "telemetry", "x": 1})
    assert isinstance(future, Other) and future.kind == "telemetry" and future.raw == {"event": "telemetry", "x": 1}
    assert parse_line("wrote something") is None and parse_line("[1, 2]") is None
