"""Tests never touch the user's home: every test has its own HOME and XDG_CONFIG_HOME (the
autouse fixture of conftest.py), and the run fails when something under the real home or XDG
folders changed (home_guard, checked when the run ends). Here: the fixture is in place, and the
check finds what a test would have written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import conftest
from home_guard import attribute, changed_under, watched_folders


def test_each_test_has_its_own_home_and_config_folder(tmp_path_factory):
    home = Path(os.environ["HOME"])
    assert Path(os.environ["XDG_CONFIG_HOME"]) == home / ".config"
    base = tmp_path_factory.getbasetemp()
    assert base in home.parents  # under pytest's temporary folder
    real = conftest.REAL_FOLDERS
    for variable in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert os.environ[variable] != real[variable], variable
    assert os.path.expanduser("~") == str(home)


def test_a_write_under_a_real_folder_is_found(tmp_path):
    home = tmp_path / "real-home"
    (home / ".config" / "mxtrim").mkdir(parents=True)
    (home / ".config" / "mxtrim" / "old.json").write_text("{}")
    (home / ".tool").mkdir()
    (home / ".tool" / "old").write_text("")
    (home / ".bashrc").write_text("")
    since = time.time() + 0.01
    time.sleep(0.05)
    folders = watched_folders({"HOME": str(home)})
    assert changed_under(folders, since, exclude=[]) == []
    (home / ".config" / "mxtrim" / "recent.json").write_text("[]")  # what issue-era tests did
    (home / ".cache" / "vllm").mkdir(parents=True)
    (home / ".cache" / "vllm" / "usage.json").write_text("{}")
    (home / ".new-tool").mkdir()
    (home / ".new-tool" / "x").write_text("")
    (home / ".tool" / "touched-by-another-program").write_text("")  # its folder, not ours
    (home / "notes.txt").write_text("")
    (home / "checkout").mkdir()
    (home / "checkout" / "file").write_text("")
    found = changed_under(folders, since, exclude=[str(home / "checkout")])
    assert found == sorted([str(home / ".cache" / "vllm" / "usage.json"),
                            str(home / ".config" / "mxtrim" / "recent.json"),
                            str(home / ".new-tool"), str(home / "notes.txt")])



def test_what_another_program_writes_meanwhile_is_not_the_suites(tmp_path):
    """A shell's history or pip run in another terminal while the suite runs is listed, not
    counted; the suite's own writes are: in a program's folder it runs, or naming this run."""
    home = tmp_path / "real-home"
    run = tmp_path / "pytest-of-me" / "pytest-7"
    (home / ".cache" / "pip" / "selfcheck").mkdir(parents=True)
    (home / ".cache" / "vllm").mkdir(parents=True)
    since = time.time() + 0.01
    time.sleep(0.05)
    (home / ".bash_history").write_text("make test\n")
    (home / ".cache" / "pip" / "selfcheck" / "a1").write_text('{"key": "/opt/tool-venv", "last_check": "2026-12-06"}')
    (home / ".cache" / "pip" / "selfcheck" / "b2").write_text(f'{{"key": "{run}/popen-gw1/venv0"}}')  # a test's pip
    (home / ".cache" / "vllm" / "usage.json").write_text("{}")
    (home / "notes.txt").write_text(f"see {run}/llama")
    folders = watched_folders({"HOME": str(home)})
    ours, others = attribute(changed_under(folders, since, exclude=[]), folders, [str(run.parent)])
    assert ours == sorted([str(home / ".cache" / "pip" / "selfcheck" / "b2"), str(home / ".cache" / "vllm" / "usage.json"),
                           str(home / "notes.txt")])
    assert others == sorted([str(home / ".bash_history"), str(home / ".cache" / "pip" / "selfcheck" / "a1")])
