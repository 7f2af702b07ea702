"""`mxtrim trim --mode weights` on a terminal says how the copy goes (a line per shard written,
then the verification) instead of staying silent until the end; written to a pipe, stderr
carries none of it and `--json` stays one JSON document on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, cli_argv
from mxtrim_tui.demo import build_demo
from terminal_support import Terminal


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def test_a_weights_trim_on_a_terminal_prints_each_shard_as_it_is_written(demo, tmp_path):
    out = tmp_path / "out"
    # 2 MB shards: the demo's 6.7 MiB of kept tensors are written as four. A cache of its own:
    # the plan's transformers verdict is not known yet, and is waited for once the copy is done
    term = Terminal(cli_argv("trim", str(demo), "--mode", "weights", "--out", str(out), "--max-shard-size", "2MB"),
                    dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")), REPO, size=(40, 160))
    try:
        assert term.wait_exit(300) == 0, term.screen.decode(errors="replace")
    finally:
        term.kill()
    screen = term.screen.decode(errors="replace")
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) == 4
    assert "copying 6.70 MiB in 97 tensors into 4 shard(s)" in screen
    for n, name in enumerate(shards, 1):
        assert f"✓ shard {n}/4 {name} written" in screen
    assert "tensors verified" in screen
    # the wait for transformers' answer between the copy and the verification is said as it starts
    assert screen.index("✓ shard 4/4") < screen.index("checking the plan and the output's structure against transformers") \
        < screen.index("verifying the copied tensors")
    # the lines come before the summary the trim ends with
    assert screen.index("✓ shard 4/4") < screen.index("files; see README.md there)")


def test_piped_the_trim_prints_no_progress_and_json_stays_whole(demo, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(cli_argv("trim", str(demo), "--mode", "weights", "--out", str(out), "--max-shard-size", "2MB",
                                   "--json"), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "shard 1/4" not in proc.stderr and "copying" not in proc.stderr
    assert json.loads(proc.stdout)["output"] == str(out)
