"""mxtrim installed the way its users install it: into their own vLLM environment (whose torch
must stay as it is), or as a tool of its own from the built wheel.

These tests resolve and install from the package index the machine is configured with (pip's
cache makes a second run quick); they build nothing but mxtrim's own wheel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from terminal_support import Terminal, until

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="venv layout and ptys of Linux")]


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _record_installed(site: Path, name: str, version: str) -> None:
    """What pip reads to know a distribution is installed: its .dist-info record (the package's
    files themselves play no part in resolution, so torch need not be downloaded again)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel users install, built from a copy of the project's files: setuptools builds in
    the source folder's build/, which two parallel workers building at once would share (one
    then fails on the other's half-made folder)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mxtrim_tui", source / "mxtrim_tui", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
                   check=True, cwd=out)
    (found,) = out.glob("mxtrim_tui-*.whl")
    return found


def test_installing_into_an_environment_with_another_torch_leaves_that_torch(tmp_path, wheel):
    """vLLM 0.26 pins torch 2.11: mxtrim, its transformers checks included, installs beside it."""
    python = _venv(tmp_path / "vllm-env")
    _record_installed(_site_packages(python), "torch", "2.11.0")
    report = tmp_path / "report.json"
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report),
                           f"mxtrim-tui[checks,nvidia] @ {wheel.as_uri()}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}
    assert "torch" not in planned, planned
    # the rest does resolve: mxtrim itself and transformers for the checks
    assert "mxtrim-tui" in planned and "transformers" in planned


@pytest.mark.parametrize("transformers", ["4.57.1", "5.5.3", "9.0.0"])
def test_the_checks_extra_leaves_the_environments_transformers_as_it_is(tmp_path, wheel, transformers):
    """vLLM-MetaX 0.17 stacks hold transformers 4.57, vLLM-MetaX on vLLM 0.26 needs 5.5.3, and a
    newer one than any tested must not be downgraded: `pip install 'mxtrim-tui[checks]'` into each
    changes neither transformers nor torch."""
    python = _venv(tmp_path / "vllm-env")
    site = _site_packages(python)
    _record_installed(site, "torch", "2.8.0+metax3.1.0.4")
    _record_installed(site, "transformers", transformers)
    report = tmp_path / "report.json"
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report),
                           f"mxtrim-tui[checks] @ {wheel.as_uri()}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}
    assert "transformers" not in planned and "torch" not in planned, planned
    assert "mxtrim-tui" in planned


def test_the_wheel_holds_the_product_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if "/synth/" in n or n.startswith("tests/")], "test layouts in the wheel"
    assert "mxtrim_tui/demo/tokenizer.json" in names and "mxtrim_tui/tui/app.tcss" in names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [l for l in zipfile.ZipFile(wheel).read(metadata).decode().splitlines() if l.startswith("Requires-Dist:")]
    specs = [r.removeprefix("Requires-Dist: ").split(";")[0] for r in requires]
    assert specs and not [s for s in specs if "==" in s], specs  # lower bounds, never an exact pin
    always = [r.removeprefix("Requires-Dist: ") for r in requires if "extra ==" not in r]
    names = {re.split(r"[<>=!~ ]", r, maxsplit=1)[0].lower() for r in always}
    assert names == {"textual", "rich", "psutil", "xxhash"}, always  # torch / transformers: the [checks] extra


def test_installed_as_a_tool_without_torch_the_demo_wizard_and_plan_work(tmp_path, wheel):
    """What `pipx install` / `uv tool install` make: a venv of its own holding mxtrim and its
    four dependencies. Without torch / transformers the checks against transformers are skipped,
    and the plan says so and how to enable them."""
    python = _venv(tmp_path / "tool")
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mxtrim = str(tmp_path / "tool" / "bin" / "mxtrim")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"), "TERM": "xterm-256color"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([mxtrim, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)

    assert "inspect" in run("--help").stdout
    demo = run("demo")
    assert demo.returncode == 0, demo.stderr
    demo_dir = Path(demo.stdout.strip())
    assert (demo_dir / "tokenizer.json").is_file() and (demo_dir / "model.safetensors.index.json").is_file()
    # the same demo the development install builds, byte for byte
    from mxtrim_tui.demo.build import build_demo

    here = build_demo(tmp_path / "demo-here")
    assert sorted(p.name for p in here.iterdir()) == sorted(p.name for p in demo_dir.iterdir())
    assert all((here / p.name).read_bytes() == p.read_bytes() for p in demo_dir.iterdir())

    plan = run("plan", str(demo_dir))
    assert plan.returncode == 0, plan.stderr
    shown = plan.stdout + plan.stderr
    assert "checked against transformers: not checked" in shown and "mxtrim-tui[checks]" in shown, shown[-2000:]

    trim = run("trim", str(demo_dir), "--mode", "weights", "--keep", "0,3", "--out", str(tmp_path / "out"))
    assert trim.returncode == 0, trim.stderr
    shown = " ".join(trim.stdout.split())  # as read, whatever the terminal width wrapped
    assert "structure: not checked" in shown and "pip install 'mxtrim-tui[checks]'" in shown, trim.stdout

    # the wizard opens on the demo in a real terminal and quits on Ctrl+Q
    term = Terminal([mxtrim], env, tmp_path)
    try:
        until(lambda: b"mxtrim-demo" in term.screen, 60, "the wizard's first screen")
        time.sleep(0.5)
        term.type(b"\x11")
        assert term.wait_exit(20) == 0
    finally:
        term.kill()
    assert b"Traceback" not in term.screen
