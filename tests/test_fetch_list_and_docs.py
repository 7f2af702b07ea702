"""`plan --fetch-list` says that it lists every shard a real-weight trim reads, those already on
disk included, and how many are missing; the docs say where mxtrim writes (each folder as the
code computes it), the whole order in which it looks for vLLM's interpreter, and where the `hf`
command comes from."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import REPO, run_cli
from mxtrim_tui.demo.build import build_demo

DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def partial(tmp_path_factory) -> Path:
    """The demo with its second shard not downloaded yet (index and first shard on disk)."""
    root = build_demo(tmp_path_factory.mktemp("src") / "demo")
    (root / "model-00002-of-00002.safetensors").unlink()
    return root


@pytest.mark.slow
def test_fetch_list_lists_the_shards_on_disk_too_and_says_so(partial):
    proc = run_cli("plan", str(partial), "--fetch-list")
    assert proc.stdout.splitlines() == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert "mxtrim: 2 shard(s) listed, those on disk included: 1 on disk, 1 missing" in proc.stderr
    helped = run_cli("plan", "--help")
    assert "those already on disk included" in " ".join(helped.stdout.split())


def test_install_docs_name_every_folder_mxtrim_writes_under_home(tmp_path):
    """The folders as the code computes them for a user without XDG variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")} | {"HOME": str(tmp_path)}
    code = ("from mxtrim_tui.core.user_settings import config_dir, state_dir\n"
            "from mxtrim_tui.core.checks.cache import cache_dir\n"
            "from mxtrim_tui.core.validate.leftovers import state_dir as servers\n"
            "print(config_dir()); print(state_dir()); print(cache_dir().parent); print(servers())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    folders = ["~/" + str(Path(line).relative_to(tmp_path)) for line in done.stdout.split()]
    assert folders == ["~/.config/mxtrim", "~/.local/state/mxtrim", "~/.cache/mxtrim", "~/.local/state/mxtrim/servers"]
    install = (DOCS / "install.md").read_text()
    for folder in folders[:3]:
        assert f"`{folder}/`" in install
    for variable in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        assert f"${variable}/mxtrim" in install
    for name in ("settings.json", "recent.json", "keymap.json", "servers/", "plans/", "checks/"):
        assert f"`{name}" in install
    assert "and `~/.cache/mxtrim`." not in install  # the one folder it named before


def test_validation_docs_give_the_interpreter_order_of_the_code():
    text = " ".join((DOCS / "validation.md").read_text().split())
    order = ["`--python PY`", "`$MXTRIM_VLLM_PYTHON`", "the wizard's kept setting",
             "`.venv-vllm/bin/python` of the checkout", "of the current directory", "a `vllm` command on `PATH`",
             "mxtrim's own"]
    where = [text.find(place) for place in order]
    assert -1 not in where and where == sorted(where), list(zip(order, where))


def test_partial_downloads_says_where_hf_comes_from():
    text = " ".join((DOCS / "partial-downloads.md").read_text().split())
    assert "`hf` is the command line of `huggingface_hub` (`pip install huggingface_hub`" in text
