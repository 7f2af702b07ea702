"""Which interpreter's transformers judges the checks: the runtime's, when it is known.

A trimmed config is right when the transformers *the runtime uses* builds the kept layers from
it; mxtrim's own transformers may be another version (a tool install beside a vLLM-MetaX 0.17
stack on 4.57, say). So the checks run in the interpreter validation will use when the user
named it, in this order:

1. ``--python PY`` (``mxtrim plan`` / ``trim``)
2. ``$MXTRIM_VLLM_PYTHON``
3. the wizard's kept setting (the vLLM interpreter of its validate dialog)
4. else the interpreter running mxtrim (when mxtrim is installed beside vLLM, the same thing)

Every verdict names the transformers version and import origin it came from
(:func:`..plan.check_result.describe_judge`); when mxtrim's own transformers is another version, the report says which one
judged. Nothing here imports torch or transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

from ..child_process import NotStarted, run

ENV_VAR = "MXTRIM_VLLM_PYTHON"
_explicit: tuple[str, str] | None = None  # (python, origin) named on the command line

# run by the judging interpreter in isolated mode: what would judge there (no import of either)
VERSIONS = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "def v(d):\n"
    "    try:\n"
    "        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "s = u.find_spec('transformers')\n"
    "print(json.dumps({'python': sys.executable, 'transformers': v('transformers'), 'torch': v('torch'),\n"
    "                  'origin': str((list(s.submodule_search_locations or []) or [''])[0]) if s else None}))\n"
)


@dataclass(frozen=True)
class Judge:
    python: str  # the interpreter the checks run in
    origin: str  # where the choice came from ("--python", "$MXTRIM_VLLM_PYTHON", "mxtrim's own")

    @property
    def own(self) -> bool:
        return same_interpreter(self.python, sys.executable)


def same_interpreter(a: str, b: str) -> bool:
    """The same environment's interpreter: compared by path, links not followed (every venv's
    python links to the same base interpreter)."""
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def set_runtime_python(python: str | None, origin: str = "--python") -> None:
    """The interpreter named on the command line (None: forget it)."""
    global _explicit
    _explicit = (os.path.abspath(os.path.expanduser(python)), origin) if python else None


def current_judge() -> Judge:
    """The interpreter the checks run in now, by the rule above. A named interpreter that does
    not exist falls to the next place (the validation that uses it reports the error)."""
    candidates = []
    if _explicit:
        candidates.append(_explicit)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        candidates.append((os.path.abspath(os.path.expanduser(env)), f"${ENV_VAR}"))
    try:
        from ..user_settings import VLLM_PYTHON, get_setting

        kept = get_setting(VLLM_PYTHON)
    except Exception:  # noqa: BLE001 - an unreadable settings file is no setting
        kept = None
    if kept:
        candidates.append((os.path.abspath(os.path.expanduser(kept)), "the wizard's vLLM interpreter setting"))
    passed_over = []
    for python, origin in candidates:
        unusable = _unusable(python)
        if unusable:  # said, and the next place judges (the validation that uses it reports it too)
            passed_over.append(f"{origin} {python} {unusable}")
            continue
        refused = start_refused(python)
        if refused:  # the system will not start it: said, and the next place judges
            passed_over.append(f"{origin} {python} {refused}")
            continue
        # named on the command line it judges, or says why it cannot; an interpreter from the
        # environment or the settings without transformers is passed over, and that is said
        if origin == "--python" or versions(python).get("transformers"):
            return Judge(python, origin + (f" ({'; '.join(passed_over)})" if passed_over else ""))
        passed_over.append(f"{origin} {python} has no transformers")
    return Judge(sys.executable, "mxtrim's own" + (f" ({'; '.join(passed_over)})" if passed_over else ""))


def unreadable_interpreter(path: str) -> str:
    """Why ``path`` cannot be used as an interpreter when where it (or its links) points cannot
    be read, "" when it can. Never raises: a folder on the way this user may not search, a
    link loop, a name too long... each is a reason, not an error."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return "no such file" if not os.path.lexists(path) else "a link to a file that does not exist"
    except PermissionError:
        return "cannot be used: permission denied reading where it points"
    except (OSError, ValueError) as exc:
        return f"cannot be used: {getattr(exc, 'strerror', None) or exc}"
    return ""


def _unusable(python: str) -> str:
    """Why ``python`` cannot judge, "" when it can; never raises."""
    why = unreadable_interpreter(python)
    if why:
        return why if why.startswith("cannot") else f"cannot be used: {why}"
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        return "cannot be used: not an executable file"
    return ""


def versions(python: str) -> dict:
    """{python, transformers, torch, origin} of ``python`` (values None when unreadable)."""
    return _asked(python)[0]


def start_refused(python: str) -> str:
    """"cannot be used: REASON" when the system refuses to start ``python`` (found by asking
    its versions), "" when it started."""
    return _asked(python)[1]


@lru_cache(maxsize=8)
def _asked(python: str) -> tuple[dict, str]:
    """(:func:`versions` of ``python``, why the system refused to start it or "")."""
    if same_interpreter(python, sys.executable):
        return _versions_here(), ""
    unknown = {"python": python, "transformers": None, "torch": None, "origin": None}
    try:
        proc = run([python, "-I", "-c", VERSIONS], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except NotStarted as exc:
        return unknown, exc.reason
    except subprocess.TimeoutExpired:
        return unknown, ""
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return unknown, ""
    return (doc if isinstance(doc, dict) else {"python": python}), ""


@lru_cache(maxsize=1)
def _versions_here() -> dict:
    import importlib.metadata as md
    import importlib.util

    def version(dist):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    spec = importlib.util.find_spec("transformers")
    origin = (list(spec.submodule_search_locations or []) or [None])[0] if spec else None
    origin = None if origin is None else str(origin)  # an editable install's finder gives paths
    return {"python": sys.executable, "transformers": version("transformers"), "torch": version("torch"), "origin": origin}


def judge_record(judge: Judge, answered: dict | None = None) -> dict:
    """What a verdict records of its judge: the child's own account when it answered, else the
    versions read from the interpreter; with mxtrim's own transformers when another judged."""
    doc = dict(answered or versions(judge.python))
    doc["python"] = judge.python
    doc["chosen_by"] = judge.origin
    if not judge.own:
        doc["own_transformers"] = _versions_here().get("transformers") or ""  # "": not installed
    return doc
