"""The wizard's source step on a repository of the Hub: ``hf://ORG/NAME`` typed in the path box
is read by range requests (the real huggingface_hub client against the stand-in Hub), shown
as the repository at its commit, remembered as such, planned, and its write's plan file names
it; quitting removes what was read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Input

from hub_standin import HubStandIn, sharded_llama
from tui_support import make_app, plain, settle, wait_for

REPO = "org/tiny-llama"


@pytest.fixture(autouse=True)
def online(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_hub_repository_typed_in_the_source_step_is_read_by_ranges(tmp_path, monkeypatch):
    checkpoint = sharded_llama(tmp_path / "hub")
    with HubStandIn({REPO: checkpoint}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        app, ws = make_app(tmp_path, None)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            box = app.screen.query_one("#path", Input)
            box.focus()
            box.value = f"hf://{REPO}"
            await pilot.press("enter")
            assert await wait_for(pilot, lambda: app.state.inventory is not None)
            await settle(app, pilot)
            source = f"hf://{REPO}@{hub.commit}"
            inv = app.state.inventory
            mirror = app.state.source_path
            assert inv.source.origin == source and inv.model_name == "tiny-llama" and len(inv.text.layers) == 4
            shown = plain(app.screen.query_one("#summary"))
            assert "tiny-llama" in shown and source in shown and "read by range requests" in shown
            assert app.screen.query_one("#path", Input).value == f"hf://{REPO}"  # as typed
            # read by ranges: headers and small files only
            shards = list(checkpoint.glob("*.safetensors"))
            assert sum(hub.served.values()) < sum(p.stat().st_size for p in shards) / 10
            # remembered as the repository at its commit; a write's plan file names it
            from mxtrim_tui.tui.settings import load_recent

            assert load_recent()[0] == source
            from mxtrim_tui.core.plan.plan_file import keep_plan_file

            plan_file = keep_plan_file(app.state.trim_request(), app.state.plan)
            assert json.loads(plan_file.read_text())["source"]["path"] == source
            assert mirror.is_dir()
            await pilot.press("ctrl+q")
            await settle(app, pilot)
        assert not mirror.exists()  # what was read went with the wizard
        # the plan file runs as the wizard's write runs it: the source read again at its commit
        from engine_support import run_cli

        r = run_cli("trim", "--plan", str(plan_file), "--json", env={"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["output"]
    assert f"| source | `{source}` |" in (Path(out) / "README.md").read_text()
