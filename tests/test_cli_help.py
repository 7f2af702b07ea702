"""Every ``--help`` of the command line is what it was before the CLI became one module per
command (``mxtrim_tui/cli/``): the texts in ``fixtures/cli_help/`` were written by the single
``cli.py`` (``COLUMNS=100 python -m mxtrim_tui [COMMAND] --help``), and a change to a flag or a
help line must change them on purpose."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from mxtrim_tui.cli import main

HELP = Path(__file__).resolve().parent / "fixtures" / "cli_help"
COMMANDS = ["inspect", "plan", "trim", "validate", "examples", "batched-test-entry", "leftovers", "tui", "demo"]


@pytest.mark.parametrize("command", [None, *COMMANDS], ids=["mxtrim", *COMMANDS])
def test_help_is_unchanged(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        main([*([command] if command else []), "--help"])
    assert ended.value.code == 0
    assert out.getvalue() == (HELP / f"{command or 'mxtrim'}.txt").read_text(encoding="utf-8")


def test_every_command_has_its_help_text():
    """A command added without a recorded help text fails here, not silently."""
    listed = (HELP / "mxtrim.txt").read_text(encoding="utf-8")
    assert {p.stem for p in HELP.glob("*.txt")} == {"mxtrim", *COMMANDS}
    assert all(f"    {c}" in listed for c in COMMANDS)
