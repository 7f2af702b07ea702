"""Where an output may go: `mxtrim trim --out` refuses an unusable location with one line
and exit status 1, before writing anything (the wizard shows the same line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine_support import run_cli
from mxtrim_tui.core.units import human_bytes
from mxtrim_tui.core.write.writer import OutputError, check_output_location, make_parent
from mxtrim_tui.demo import build_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("src") / "demo")


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(demo: Path, out: Path | str) -> str:
    """Run a dummy trim to ``out``; return its one stderr line (exit 1 checked)."""
    result = run_cli("trim", str(demo), "--mode", "dummy", "--out", str(out))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("mxtrim: error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


@pytest.mark.slow  # the free --out runs the whole trim, its transformers check child included
@pytest.mark.parametrize("mode", ["dummy", "weights"])
def test_an_unusable_output_is_said_before_the_plan_is_checked(demo, tmp_path, mode):
    """A mistyped --out is answered at once: no transformers check of the plan runs first (its
    verdict, remembered once a check has run, is absent from an empty cache)."""
    (tmp_path / "taken").mkdir()
    cache = tmp_path / "cache"
    result = run_cli("trim", str(demo), "--mode", mode, "--out", str(tmp_path / "taken"), env={"XDG_CACHE_HOME": str(cache)})
    assert result.returncode == 1 and "already exists" in result.stderr, result.stderr
    assert not (cache / "mxtrim" / "checks").exists() or list((cache / "mxtrim" / "checks").iterdir()) == []
    # the same source and cache with a usable output: the check runs and its verdict is kept
    result = run_cli("trim", str(demo), "--mode", mode, "--out", str(tmp_path / "free"), env={"XDG_CACHE_HOME": str(cache)})
    assert result.returncode == 0, result.stderr
    assert any(p.name.startswith("plan-") for p in (cache / "mxtrim" / "checks").iterdir())


@pytest.mark.slow
def test_out_below_a_regular_file(demo, tmp_path):
    (tmp_path / "README.md").write_text("a file")
    line = refused(demo, tmp_path / "README.md" / "x")
    assert f"{tmp_path / 'README.md'} is a file, not a directory" in line
    assert listing(tmp_path) == ["README.md"]


@pytest.mark.slow
def test_out_where_nothing_can_be_created(demo):
    line = refused(demo, "/proc/x")
    assert "cannot write in /proc" in line and "No such file or directory" in line
    assert not os.path.lexists("/proc/x")
    # creating the parent, the writers' first step, fails with one line too
    with pytest.raises(OutputError, match="^/proc/a/b: cannot create /proc/a: No such file or directory$"):
        make_parent(Path("/proc/a/b"))


def test_out_name_too_long(demo, tmp_path):
    line = refused(demo, tmp_path / ("a" * 300))
    assert "300 bytes long" in line and "at most" in line
    assert listing(tmp_path) == []


@pytest.mark.slow
def test_out_that_exists(demo, tmp_path):
    (tmp_path / "taken").mkdir()
    line = refused(demo, tmp_path / "taken")
    assert "already exists" in line
    assert listing(tmp_path) == ["taken"]


def test_out_inside_the_source(demo):
    before = listing(demo)
    line = refused(demo, demo / "trimmed")
    assert "inside the source" in line
    assert listing(demo) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o555 directory anyway (/proc covers an unwritable location)")
def test_out_below_a_read_only_directory(demo, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        line = refused(demo, locked / "sub" / "out")
        assert f"cannot write in {locked}" in line and "Permission denied" in line
        assert listing(locked) == []
    finally:
        locked.chmod(0o755)


def test_not_enough_free_space_names_both_figures(demo, tmp_path):
    with pytest.raises(OutputError) as info:
        check_output_location(tmp_path / "out", demo, need_bytes=10**18)
    text = str(info.value)
    assert "\n" not in text and human_bytes(10**18) in text and f"{10**18:,} bytes" in text and "free" in text
    assert listing(tmp_path) == []
    # the same location with a need that fits: accepted, absolute, nothing created
    assert check_output_location(Path(os.path.relpath(tmp_path / "out")), demo, need_bytes=1) == tmp_path / "out"
    assert listing(tmp_path) == []
