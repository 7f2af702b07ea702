"""The plan as a document (schema ``mxtrim.plan-file/1``): what a trim is run from.

``mxtrim plan SRC ... --save FILE`` writes one, the wizard writes one for every write, and
``mxtrim trim --plan FILE`` runs exactly it. It holds everything the trim is made of — the
source (its path, every shard's header and every other file pinned: read/source_pins.py), the
selection as typed (``--keep`` specs, the MTP choice, ``--force``), the mode, the output
location, all the serve settings and the writer's options — and, for a reader, what the plan
does (kept layers, config changes, the transformers check, issues). A trim from it refuses a
source that changed since, naming what differs. The review part is never read back: the plan
is rebuilt from the source and the selection, so a plan file cannot smuggle in a rewrite.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..new_file import write_new_file
from ..read.remote import parse_remote
from ..read.source_pins import pin_differences, source_pins
from ..units import DEFAULT_HASH, DEFAULT_MAX_SHARD_BYTES, HASHES
from ..user_settings import state_dir
from ..version import mxtrim_version
from .budget import SERVE_KEYS
from .plan_json import plan_to_json

SCHEMA = "mxtrim.plan-file/1"
MODES = ("dummy", "weights")


@dataclass(frozen=True)
class TrimRequest:
    """What a trim is made of: the flags of ``mxtrim trim``, or a plan file."""

    source: Path | str  # str: a remote source as a plan file names it (hf://ORG/NAME@<commit>), not read yet
    keep: tuple[str, ...] | None = None  # --keep specs as typed; None: automatic
    mtp: bool | None = None
    force: bool = False
    mode: str | None = None
    out: Path | None = None
    serve: dict = field(default_factory=dict)  # SERVE_KEYS -> the value as typed (expert_parallel: bool)
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    hash_name: str = DEFAULT_HASH
    repo: str | None = None

    @property
    def keep_list(self) -> list[str] | None:
        """The ``--keep`` specs as a list (None: automatic), as ``Selection.parse`` and JSON take them."""
        return list(self.keep) if self.keep is not None else None


def plan_document(request: TrimRequest, plan) -> dict:
    """The plan file of ``request``, whose plan (built from ``request.source``) is ``plan``;
    of the plan's JSON the readable parts are kept for review."""
    review = plan_to_json(plan)
    return {
        "schema": SCHEMA,
        "written_by": f"mxtrim {mxtrim_version()}",
        "source": {"path": plan.inventory.source.origin or str(Path(os.path.abspath(request.source))), "pins": source_pins(plan.inventory.source)},
        "selection": {"keep": request.keep_list, "mtp": request.mtp, "force": request.force},
        "mode": request.mode,
        "output": str(request.out) if request.out is not None else None,
        "serve": dict(request.serve),
        "options": {"max_shard_bytes": request.max_shard_bytes, "hash": request.hash_name, "repo": request.repo},
        "review": {key: review.get(key) for key in ("model", "kept", "mtp_kept", "new_depth", "config_edits", "transformers_check",
                                                    "issues", "ok")},
    }


def save_plan_document(doc: dict, path: Path) -> None:
    """Write ``doc`` at ``path``, never over an existing file."""
    _write_new(_text(doc), Path(path))


def check_save_location(path: Path) -> None:
    """Refuse a plan file's place that cannot be written: a name taken, a folder not there."""
    if path.exists() or path.is_symlink():
        raise InputError(path, "already exists; refusing to overwrite (choose another --save)")
    if not path.parent.is_dir():
        raise InputError(path.parent, "directory not found")


def _write_new(text: str, path: Path) -> None:
    """``text`` at ``path``, never over an existing file (written beside it, then linked into
    place, so a reader never sees half of it)."""
    check_save_location(path)
    try:
        write_new_file(path, text.encode("utf-8"))
    except FileExistsError:  # the name appeared meanwhile: nothing is overwritten
        raise InputError(path, "already exists; refusing to overwrite (choose another --save)") from None


def keep_plan_file(request: TrimRequest, plan) -> Path:
    """Save the plan file of a wizard write under ``$XDG_STATE_HOME/mxtrim/plans/`` and return
    its path. Named after the model, the mode and the digest of its text: the same write asked
    again reuses the same file, another one never touches it."""
    text = _text(plan_document(request, plan))
    folder = state_dir() / "plans"
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", plan.inventory.model_name).strip("-") or "model"
    path = folder / f"{name}-{request.mode}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}.json"
    try:
        _write_new(text, path)
    except InputError:
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            raise
    return path


def _text(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def load_plan_document(path: Path) -> tuple[TrimRequest, dict]:
    """The request a plan file holds, and the file's source pins; a malformed file is refused
    naming it and the field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "plan file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not a readable plan file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise InputError(path, f"not a plan file of schema {SCHEMA} (schema: {found!r}); write one with mxtrim plan ... --save")

    def bad(where: str, want: str):
        return InputError(path, f"{where} must be {want}")

    source, selection, options = doc.get("source"), doc.get("selection"), doc.get("options") or {}
    if not isinstance(source, dict) or not isinstance(source.get("path"), str) or not isinstance(source.get("pins"), dict):
        raise bad("source", "an object with path and pins")
    if not isinstance(selection, dict):
        raise bad("selection", "an object")
    keep = selection.get("keep")
    if keep is not None and not (isinstance(keep, list) and all(isinstance(k, str) for k in keep)):
        raise bad("selection.keep", "a list of --keep specs or null")
    if selection.get("mtp") not in (True, False, None) or not isinstance(selection.get("force", False), bool):
        raise bad("selection.mtp / selection.force", "true, false (or null for mtp)")
    mode, output = doc.get("mode"), doc.get("output")
    if mode is not None and mode not in MODES:
        raise bad("mode", f"one of {', '.join(MODES)} or null")
    if output is not None and not isinstance(output, str):
        raise bad("output", "a path or null")
    serve = doc.get("serve") or {}
    if not isinstance(serve, dict) or set(serve) - set(SERVE_KEYS):
        raise bad("serve", f"an object of {', '.join(SERVE_KEYS)}")
    shard_bytes, hash_name = options.get("max_shard_bytes", DEFAULT_MAX_SHARD_BYTES), options.get("hash", DEFAULT_HASH)
    if not isinstance(shard_bytes, int) or isinstance(shard_bytes, bool) or shard_bytes <= 0 or hash_name not in HASHES:
        raise bad("options", f"max_shard_bytes a positive integer and hash one of {', '.join(HASHES)}")
    request = TrimRequest(
        # a remote source stays as its text (hf://ORG/NAME@<commit>): the command reads it
        source=source["path"] if parse_remote(source["path"]) else Path(source["path"]), keep=tuple(keep) if keep is not None else None, mtp=selection.get("mtp"),
        force=bool(selection.get("force", False)), mode=mode, out=Path(output) if output is not None else None,
        serve={k: v for k, v in serve.items() if v is not None}, max_shard_bytes=shard_bytes, hash_name=hash_name,
        repo=options.get("repo") if isinstance(options.get("repo"), str) else None,
    )
    return request, source["pins"]


def refuse_changed_source(plan_path: Path, request: TrimRequest, pins: dict) -> None:
    """Raise when the source is not the one the plan file was made for."""
    differ = pin_differences(request.source, pins)
    if differ:
        more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        raise InputError(plan_path, f"the source changed since this plan was made ({request.source}: {differ[0]}{more}); "
                         "nothing written; make the plan again (mxtrim plan ... --save)")
