"""The user's ``keymap.json``, checked before it is applied: every mistake is reported once
(which entry, what is wrong), only the bad entry is ignored, and a key that another binding of
the same screen or a global binding already uses is refused (otherwise the global binding
would win and the remapped action would silently vanish)."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from textual.binding import Binding
from textual.keys import ASCII_KEY_NAMES, KEY_NAME_REPLACEMENTS

# Keys Textual itself answers to everywhere (command palette, focus moves, copy).
BUILTIN_KEYS = {"ctrl+p": "command palette", "tab": "next field", "shift+tab": "previous field", "ctrl+c": "copy"}
GLOBAL = "all screens"


@dataclass
class KeymapCheck:
    keymap: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _key_name(key: str) -> str:
    """A key as Textual names it in bindings: one punctuation character by its Unicode name
    ("?" is question_mark), modifiers and named keys as written."""
    key = key.strip()
    if len(key) == 1 and not key.isalnum():
        try:
            name = unicodedata.name(key).lower().replace(" ", "_").replace("-", "_")
        except ValueError:
            return ASCII_KEY_NAMES.get(key, key)
        return KEY_NAME_REPLACEMENTS.get(name, name)  # textual.keys' public tables
    return key


def _keys(spec: str) -> list[str]:
    return [_key_name(k) for k in spec.split(",") if k.strip()]


def binding_scopes(app_bindings, step_bindings, screens: dict[str, list]) -> dict[str, list[Binding]]:
    """{scope: bindings}: the global scope (the app's and every step's bindings) and one
    scope per screen."""
    scopes = {GLOBAL: [b for b in [*app_bindings, *step_bindings] if isinstance(b, Binding)]}
    for name, bindings in screens.items():
        scopes[name] = [b for b in bindings if isinstance(b, Binding)]
    return scopes


def check_keymap(path: Path, scopes: dict[str, list[Binding]]) -> KeymapCheck:
    """Read ``path`` (absent: nothing to do) and keep the entries that can be applied."""
    result = KeymapCheck()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return result
    except (OSError, UnicodeDecodeError) as exc:
        result.problems.append(f"{path}: cannot be read ({exc}); default keys used")
        return result
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        result.problems.append(f"{path}: not valid JSON ({exc}); default keys used")
        return result
    if not isinstance(doc, dict):
        result.problems.append(f"{path}: must be an object of binding id → keys, e.g. {{\"selection.toggle\": \"x\"}}; default keys used")
        return result

    # every binding under a name of its own (its id, else scope#position)
    named = {scope: {b.id or f"{scope}#{n}": b for n, b in enumerate(bs)} for scope, bs in scopes.items()}
    scope_of = {name: scope for scope, bs in named.items() for name, b in bs.items() if b.id}
    # the keys each binding answers to now, updated as entries are accepted
    current = {name: _keys(b.key) for bs in named.values() for name, b in bs.items()}
    description = {name: b.description or b.action for bs in named.values() for name, b in bs.items()}
    ids_in = {scope: list(bs) for scope, bs in named.items()}

    for binding_id, keys in doc.items():
        if binding_id not in scope_of:
            result.problems.append(f"{path}: unknown binding id {binding_id!r} (F1 lists the ids); ignored")
            continue
        if not isinstance(keys, str) or not _keys(keys):
            result.problems.append(f"{path}: {binding_id}: keys must be a string such as \"x\" or \"ctrl+t,f5\"; ignored")
            continue
        scope = scope_of[binding_id]
        # a global binding meets every screen's keys; a screen binding meets its screen's and the global ones
        rivals = [i for s in (ids_in if scope == GLOBAL else (scope, GLOBAL)) for i in ids_in[s] if i != binding_id]
        clash = None
        for key in _keys(keys):
            if key in BUILTIN_KEYS:
                clash = (key, BUILTIN_KEYS[key])
                break
            owner = next((i for i in rivals if key in current[i]), None)
            if owner is not None:
                clash = (key, description[owner] + (f" ({owner})" if "#" not in owner else ""))
                break
        if clash:
            result.problems.append(f"{path}: {binding_id}: {clash[0]} is already {clash[1]}; refused, default kept")
            continue
        result.keymap[binding_id] = keys
        current[binding_id] = _keys(keys)
    return result
