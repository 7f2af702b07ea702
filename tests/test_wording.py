"""What mxtrim says reads as English for every count and case a user meets: one layer is
"1 layer", a harness list that does not exist yet is created with the entry, a plan that
changes nothing in the configuration says so, a judge without transformers says the check did
not run and why, and the wizard's spec placeholder is a spec the loaded model takes."""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
from pathlib import Path

import pytest
from textual.widgets import Input

from engine_support import run_cli
from mxtrim_tui.demo.build import VARIANTS, build_demo
from tui_support import make_app, settle, wait_for


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory) -> Path:
    """The demo's architecture with two text layers (one dense, one MoE) and its MTP layer."""
    variant = dataclasses.replace(VARIANTS["bf16"], num_layers=2, first_k_dense=1, split_at=1)
    return build_demo(tmp_path_factory.mktemp("src") / "two-layers", variant)


def _said(proc) -> str:
    return " ".join(proc.stdout.split())  # rich wraps at the pipe's 80 columns


@pytest.mark.slow
def test_one_layer_is_one_layer(two_layers, tmp_path):
    ws = tmp_path / "ws"
    proc = run_cli("trim", str(two_layers), "--mode", "dummy", "--keep", "0", "--no-mtp", "--workspace", str(ws))
    assert proc.returncode == 0, proc.stderr
    # the narrow listing of `mxtrim examples` (a block per model)
    listed = run_cli("examples", str(ws / "tools" / "batched_test" / "models"), env={"COLUMNS": "60"})
    assert listed.returncode == 0, listed.stderr
    assert "dummy · 1 layer · source" in listed.stdout and "1 layers" not in listed.stdout


@pytest.mark.slow
def test_a_new_harness_list_is_created_with_the_entry(two_layers, tmp_path):
    config = tmp_path / "smoke.yaml"
    proc = run_cli("trim", str(two_layers), "--mode", "dummy", "--keep", "0", "--no-mtp", "--workspace", str(tmp_path / "ws"),
                   "--batched-test-config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert f"batched_test: created {config} with 'two-layers-dummy-1layers':" in proc.stdout
    assert config.is_file()


@pytest.mark.slow
def test_a_plan_that_changes_no_configuration_field_says_so(two_layers):
    proc = run_cli("plan", str(two_layers), "--keep", "0,1", "--mtp")
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "no configuration changes: the configuration is written as it is" in said
    assert "Configuration changes" not in said


def test_a_judge_without_transformers_says_the_check_did_not_run(two_layers, tmp_path):
    """An interpreter where transformers cannot be imported (site-packages off: -S)."""
    nosite = tmp_path / "python-without-site"
    nosite.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    nosite.chmod(nosite.stat().st_mode | stat.S_IXUSR)
    proc = run_cli("plan", str(two_layers), "--python", str(nosite), env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert f"not checked: transformers is not installed in the interpreter named by --python ({nosite})" in said
    assert "judged by transformers not installed" not in said


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_spec_placeholder_is_a_spec_the_loaded_model_takes(two_layers, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app, _ = make_app(tmp_path, two_layers)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.state.inventory is not None)
        app.action_goto("selection")
        await settle(app, pilot)
        assert await wait_for(pilot, lambda: app.state.plan is not None)
        await settle(app, pilot)
        spec = app.screen.query_one("#spec", Input)
        assert spec.placeholder == "spec 0,1 (Enter applies)"
        # the placeholder typed as it reads is taken
        spec.focus()
        for ch in "0,1":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.state.plan.kept["text"] == [0, 1] and not app.state.plan.errors
