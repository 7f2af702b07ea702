"""Helpers for driving the wizard in tests (pilot and snapshots)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Input
from textual.worker import WorkerFailed

from mxtrim_tui.core.probe.gpu import GpuProbe
from mxtrim_tui.tui.app import MxtrimApp

NO_GPU = lambda: GpuProbe("none", False, "no GPU in this test")  # noqa: E731


def make_app(tmp_path, source, **kw):
    """The wizard on ``source`` with no GPU and its own workspace ``tmp_path/ws``: (app, ws)."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return MxtrimApp(source, tree_root=tmp_path, gpu_probe=NO_GPU, workspace=ws, **kw), ws

# DirectoryTree keeps a loader worker alive for the app's lifetime: never wait on it.
BACKGROUND_GROUPS = {"_loader"}


async def settle(app, pilot, extra: float = 0.05, rounds: int = 3) -> None:
    """Wait until every finite worker is done and the screen has refreshed, for a few rounds:
    a handled key posts messages (Changed, a worker's answer) that post their own, and on a
    loaded machine one round ends before the chain does."""
    for _ in range(rounds):
        for _ in range(50):
            busy = [w for w in app.workers if w.group not in BACKGROUND_GROUPS and not w.is_finished]
            if not busy:
                break
            try:
                await app.workers.wait_for_complete(busy)
            except WorkerFailed:  # a load that fails on bad input: the wizard shows it, the test reads it
                pass
        await pilot.pause(extra)
    for inp in app.screen.query(Input):
        inp.cursor_blink = False


async def wait_for(pilot, predicate, timeout: float = 30.0, step: float = 0.1) -> bool:
    waited = 0.0
    while waited < timeout:
        if predicate():
            return True
        await pilot.pause(step)
        waited += step
    return predicate()


def plain(widget, width: int = 200) -> str:
    """The text a Static shows (Rich renderables rendered to plain text)."""
    from rich.console import Console

    content = getattr(widget, "content", None)
    if content is None:
        content = widget.render()
    if isinstance(content, str):
        return content
    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
    console.print(content)
    return console.export_text()


def plan_checked(app) -> bool:
    """The wizard's plan exists and has been checked against transformers (as written)."""
    plan = app.state.plan
    return plan is not None and (bool(plan.errors) or plan.transformers_check is not None)


@pytest.fixture(autouse=True)
def no_vllm_in_the_environment(tmp_path, monkeypatch):
    """A wizard that finds no vLLM and no kept settings (autouse where a test module imports
    it): a private config home, no $MXTRIM_VLLM_PYTHON, no .venv-vllm of the checkout or the
    current directory, a PATH without a `vllm` command."""
    from mxtrim_tui.core.probe import vllm_python
    from mxtrim_tui.core.probe.environment import _validation_environment

    monkeypatch.setattr(vllm_python, "local_places", lambda cwd=None: [])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MXTRIM_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + ":/usr/bin:/bin")
    # the wizard asks once per setting, variable and folder: an answer found under another
    # test's places (the patch above is not part of that key) is never reused by the next
    _validation_environment.cache_clear()
    yield
    _validation_environment.cache_clear()


def burst(app, *keys: str) -> None:
    """Keys that arrive in one read (over SSH, a paste of keystrokes): every one is queued
    before the app handles the first, as the terminal driver queues what one read parsed. A
    key is named as in ``pilot.press`` ("ctrl+k", "backspace") or is one character ("/", "2")."""
    import unicodedata

    from textual import events
    from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

    for key in keys:
        if len(key) == 1 and not key.isalnum():
            key = _character_to_key(key)
        try:
            char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
        except KeyError:
            char = key if len(key) == 1 else None
        event = events.Key(key, char)
        event.set_sender(app)
        app.post_message(event)


def retype(text: str) -> list[str]:
    """The keys that replace a text box's whole value with ``text``: Home, Ctrl+K, the text."""
    return ["home", "ctrl+k", *text]


def screen_lines(app) -> list[str]:
    """What the terminal shows, line by line (from the app's screenshot)."""
    import html
    import re

    rows: dict[float, list[str]] = {}
    svg = app.export_screenshot()
    for m in re.finditer(r'<text[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(1)), []).append(html.unescape(re.sub(r"<[^>]+>", "", m.group(2))))
    return ["".join(parts).replace("\xa0", " ") for _, parts in sorted(rows.items())]
