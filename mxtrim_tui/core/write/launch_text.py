"""What a model directory's own texts say, read and never run: the paths a launch script or a
README names and which of them are gone, the environment variables a launch script sets, and
whether the tokenizer files there make a tokenizer.

Shared by the writer (a source's own launch script copied into an output; an output's tokenizer)
and ``mxtrim examples``. Nothing here executes, sources or expands a script: a ``$VAR`` is left
as written, a path that depends on one is not judged.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

TEXT_LIMIT = 1 << 20  # bytes of a README / launch script / config read for paths
CONFIG_LIMIT = 16 << 20  # bytes of a tokenizer_config.json read (they carry every added token)
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh", "shell-session"}
LAUNCH_SUFFIXES = (".sh", ".bash")

# an absolute path: at a line start or after a space, a quote, a backtick, '=', '(' or '['; not
# inside a URL (after ':' or '/')
_ABSOLUTE = re.compile(r"""(?:(?<=^)|(?<=[\s"'`=(\[]))(/(?:[A-Za-z0-9._~+@%-]+/)*[A-Za-z0-9._~+@%-]+)""", re.M)
# a path relative to where it is run: ./x, ../x, $PWD/x, ${PWD}/x, $(pwd)/x
_RELATIVE = re.compile(
    r"""(?:(?<=^)|(?<=[\s"'`=(\[]))((?:\$\{PWD\}|\$PWD|\$\(pwd\)|\.\.?)(?:/[A-Za-z0-9._~+@%-]+)+)""", re.M)
# an HTTP route of a server (/v1/completions, /v1/chat/completions), never a file
_ROUTE = re.compile(r"/v\d+(?:/|$)")
# a variable whose value is a directory a program makes when it is missing (caches, homes,
# workspaces, logs, temporaries) — unless it names a model
_MADE_DIR_VAR = re.compile(r"(?i)(cache|home|base|dir|root|workspace|tmp|temp|log|out|output|prefix)")
_MODEL_VAR = re.compile(r"(?i)(model|ckpt|checkpoint|weight|tokenizer)")
_ASSIGNED = re.compile(r"""([A-Za-z_][A-Za-z0-9_]*)=["']?$""")
_MADE_DIR_OPTION = re.compile(r"""--[\w-]*(cache|dir|log|output|profile|download|tmp)[\w-]*[= ]["']?$""")
_WRITTEN = re.compile(r"""(?:\d?>>?|\btee(?:\s+-a)?|\bmkdir(?:\s+-p)?|\btouch)\s*["']?$""")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a path that goes on with a variable or a glob: where it leads is not known from the text
_UNJUDGED = re.compile(r"/?[$*?{\[]")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_OPERATORS = set("();<>|&")

# files that hold a tokenizer's vocabulary (tokenizer_config.json alone only configures one)
_VOCABULARY = re.compile(r"(?i)(tokenizer\.json|tokenizer\.model|.*\.model|spiece\..*|vocab\..*|merges\.txt|.*tiktoken.*)")
TOKENIZER_NAMES = re.compile(r"(?i)(tokenizer.*|special_tokens_map\.json|added_tokens\.json|vocab\..*|merges\.txt|spiece\..*|.*tiktoken.*|.*\.model)")
BACKEND_ERROR = "Couldn't instantiate the backend tokenizer"


def read_text(path: Path, limit: int = TEXT_LIMIT) -> str | None:
    """The first ``limit`` bytes of a text file (None: it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def is_launch_script(name: str) -> bool:
    return name.lower().endswith(LAUNCH_SUFFIXES)


# --- shell text ---------------------------------------------------------------------------
def logical_lines(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    """(line number, line) of a shell text with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", first_line
    for n, line in enumerate(text.splitlines(), first_line):
        if not pending:
            start = n
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def shell_blocks(readme: str) -> list[tuple[int, str]]:
    """The logical lines of a README's fenced shell code blocks (```bash, ```sh, ``` …)."""
    out: list[tuple[int, str]] = []
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"\s*(```+|~~~+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
            j += 1
        if fence.group(2).lower() in SHELL_FENCES:
            out += logical_lines("\n".join(lines[i + 1:j]), i + 2)
        i = j + 1
    return out


def _hide_substitutions(line: str) -> tuple[str, list[str]]:
    """``line`` with each ``$(…)`` / backquoted command replaced by a placeholder word (so the
    tokenizer sees one word), and the originals."""
    subs: list[str] = []
    out, i = [], 0
    while i < len(line):
        if line.startswith("$(", i):
            depth, j = 0, i + 1
            while j < len(line):
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                if depth == 0:
                    break
                j += 1
            subs.append(line[i:j + 1])
            out.append(f"\x00{len(subs) - 1}\x00")
            i = j + 1
        elif line[i] == "`":
            j = line.find("`", i + 1)
            j = len(line) - 1 if j < 0 else j
            subs.append(line[i:j + 1])
            out.append(f"\x00{len(subs) - 1}\x00")
            i = j + 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out), subs


def _restore(word: str, subs: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda m: subs[int(m.group(1))], word)


def _commands(line: str) -> list[list[str]]:
    """The simple commands of one logical shell line, as words (quotes removed, ``$(…)`` kept
    as written); a comment ends the line. Unparseable (an open quote): none."""
    hidden, subs = _hide_substitutions(line)
    lexer = shlex.shlex(hidden, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError:
        return []
    commands, current = [], []
    for word in words:
        if word.startswith("#"):
            break
        if set(word) <= _OPERATORS:
            commands.append(current)
            current = []
        else:
            current.append(_restore(word, subs))
    commands.append(current)
    return [c for c in commands if c]


def env_settings(lines: list[tuple[int, str]]) -> list[dict]:
    """The environment variables the shell lines set for what they run: ``export NAME=…``,
    ``NAME=… command`` (for that command), ``env NAME=… command``, and a plain ``NAME=…``
    exported later. A plain shell variable (``MODEL_DIR=…``) is not one. Each: {"name",
    "value", "line"}, in order."""
    found: list[dict] = []
    shell: dict[str, tuple[str, int]] = {}
    for n, line in lines:
        for words in _commands(line):
            if words[0] in ("export", "declare", "typeset") and (words[0] == "export" or "-x" in words[1:]):
                for w in words[1:]:
                    m = _ASSIGNMENT.fullmatch(w)
                    if m:
                        found.append({"name": m.group(1), "value": m.group(2), "line": n})
                    elif _NAME.fullmatch(w) and w in shell:
                        found.append({"name": w, "value": shell[w][0], "line": shell[w][1]})
                continue
            rest = words[1:] if words[0] == "env" else words
            k = 0
            while k < len(rest) and _ASSIGNMENT.fullmatch(rest[k]):
                k += 1
            assigned = [_ASSIGNMENT.fullmatch(w) for w in rest[:k]]
            if k < len(rest) or words[0] == "env":  # they prefix a command: its environment
                found += [{"name": m.group(1), "value": m.group(2), "line": n} for m in assigned]
            else:
                shell.update({m.group(1): (m.group(2), n) for m in assigned})
    return found


# --- paths --------------------------------------------------------------------------------
def _made_at_run_time(before: str) -> bool:
    """Whether the text just before a path says it is made when run, not read: a cache / home /
    workspace variable's value, a cache or log option's, a redirect's or mkdir's target."""
    assigned = _ASSIGNED.search(before)
    if assigned:
        var = assigned.group(1)
        return bool(_MADE_DIR_VAR.search(var)) and not _MODEL_VAR.search(var)
    return bool(_MADE_DIR_OPTION.search(before) or _WRITTEN.search(before))


def named_paths(text: str, relative: bool = True) -> list[dict]:
    """The paths a text names that it reads: {"path", "kind": "absolute" | "relative", "line"}.
    Left out: HTTP routes (``/v1/completions``), directories made when run (a cache variable's
    value, a redirect's target), a path that goes on with ``$VAR`` or a glob (not judged), an
    absolute path of one component (``/health``)."""
    out, seen = [], set()
    patterns = [("absolute", _ABSOLUTE)] + ([("relative", _RELATIVE)] if relative else [])
    for kind, pattern in patterns:
        for m in pattern.finditer(text):
            path = m.group(1).rstrip(".,;:)")
            if _UNJUDGED.match(text, m.end(1)) or path in seen:
                continue
            line_start = text.rfind("\n", 0, m.start(1)) + 1
            before = text[line_start:m.start(1)]
            if kind == "absolute" and (path.count("/") < 2 or _ROUTE.match(path)):
                continue
            if _made_at_run_time(before):
                continue
            seen.add(path)
            out.append({"path": path, "kind": kind, "line": text.count("\n", 0, m.start(1)) + 1})
    return out


def relative_tail(path: str) -> str:
    """``./temp/x`` / ``$PWD/temp/x`` → ``temp/x`` (``../`` kept)."""
    return re.sub(r"^(?:\$\{PWD\}|\$PWD|\$\(pwd\)|\.)/", "", path)


def resolves(path: str, bases: list[Path]) -> bool:
    """Whether a relative path is there from any of ``bases``."""
    tail = relative_tail(path)
    return any((base / tail).exists() for base in bases)


def stale_paths(name: str, text: str, bases: list[Path], relative: bool = True) -> list[dict]:
    """The paths ``text`` (the file ``name``) names that are not there: absolute ones that do not
    exist, relative ones found from none of ``bases`` (the folder of the file, the workspace
    root it is run from). Each: named_paths' entry with "file"."""
    gone = []
    for p in named_paths(text, relative):
        there = Path(p["path"]).exists() if p["kind"] == "absolute" else resolves(p["path"], bases)
        if not there:
            gone.append({**p, "file": name})
    return gone


# --- tokenizer ----------------------------------------------------------------------------
def read_tokenizer_config(path: Path) -> dict | None:
    text = read_text(path, CONFIG_LIMIT)
    try:
        doc = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def tokenizer_state(names, folder: Path) -> dict:
    """Whether the files ``names`` of ``folder`` make a tokenizer: {"usable": True | False |
    None (custom code, not judged), "files": the tokenizer files, "detail"}. The folder's
    tokenizer_config.json is read only when ``names`` hold it and no tokenizer.json."""
    names = set(names)
    files = sorted(n for n in names if TOKENIZER_NAMES.fullmatch(n))
    vocabulary = sorted(n for n in names if _VOCABULARY.fullmatch(n))
    if "tokenizer.json" in names:
        return {"usable": True, "files": files, "detail": "tokenizer.json"}
    tokenizer_config = read_tokenizer_config(Path(folder) / "tokenizer_config.json") if "tokenizer_config.json" in names else None
    cls = (tokenizer_config or {}).get("tokenizer_class")
    cls = cls if isinstance(cls, str) else None
    auto_map = (tokenizer_config or {}).get("auto_map")
    if isinstance(auto_map, (dict, list)) and "AutoTokenizer" in json.dumps(auto_map):
        return {"usable": None, "files": files, "detail": "a custom tokenizer (auto_map): not judged"}
    if cls == "PreTrainedTokenizerFast":
        return {"usable": False, "files": files,
                "detail": f"tokenizer_config.json names PreTrainedTokenizerFast, whose data is tokenizer.json, and there is "
                          f"no tokenizer.json beside it: loading fails with \"{BACKEND_ERROR}\""}
    if vocabulary:
        return {"usable": True, "files": files, "detail": ", ".join(vocabulary)}
    if not files:
        return {"usable": False, "files": [], "detail": "no tokenizer files"}
    what = f"names {cls}" if cls else "names no tokenizer class"
    return {"usable": False, "files": files,
            "detail": f"{', '.join(files)} only ({'tokenizer_config.json ' + what if tokenizer_config else 'settings'}): no "
                      f"vocabulary (tokenizer.json, tokenizer.model, vocab.json, ...) to build a tokenizer from"}


# --- an output's own files ----------------------------------------------------------------
def workspace_root(models_folder: Path) -> Path | None:
    """The workspace a folder of models is in: the folder above ``tools/batched_test/models``
    (None: the folder is not laid out so)."""
    parts = Path(models_folder).parts
    return Path(*parts[:-3]) if len(parts) > 3 and parts[-3:] == ("tools", "batched_test", "models") else None


def _copied_script_paths(text: str, source_root: Path, out: Path, written: set[str]) -> list[str]:
    """What is wrong with the paths a source's launch script names, once it is in ``out``."""
    root = workspace_root(out.parent)
    found = []
    for p in named_paths(text):
        if p["kind"] == "relative":
            tail = relative_tail(p["path"])
            if tail in written or tail.split("/")[0] in written or (root is not None and (root / tail).exists()):
                continue
            where = f"this output or the workspace root {root}" if root is not None else "this output"
            found.append(f"{p['path']} (line {p['line']}), which is not there from {where}")
            continue
        path = Path(p["path"])
        try:
            inside = path.resolve().is_relative_to(source_root.resolve())
        except (OSError, RuntimeError):  # a symlink loop
            inside = False
        if inside:
            found.append(f"{p['path']} (line {p['line']}), the source itself")
        elif not path.exists():
            found.append(f"{p['path']} (line {p['line']}), which does not exist")
    return found


def output_warnings(plan, out: Path, files: list[dict]) -> list[str]:
    """What a user must know of an output about to be written with ``files`` (the report's
    entries): no usable tokenizer data in it, or a launch script of the source copied as is that
    names paths it will not find from the output (or the source itself). Read, never run."""
    warnings = []
    source_root = Path(plan.inventory.source.root)
    written = {f["path"] for f in files}
    state = tokenizer_state(written, source_root)
    if state["usable"] is False:
        warnings.append(f"No usable tokenizer in this output: {state['detail']}. vLLM builds the tokenizer when it starts, so "
                        "serving fails; put the model's tokenizer.json in the source and trim again (or serve with "
                        "--skip-tokenizer-init and send token ids).")
    for f in files:
        if not (is_launch_script(f["path"]) and str(f.get("from", "")).startswith("copied")):
            continue
        text = read_text(source_root / f["path"])
        stale = _copied_script_paths(text, source_root, Path(out), written) if text is not None else []
        if stale:
            warnings.append(f"{f['path']} is the source's own launch script, copied as is: it names " + "; ".join(stale)
                            + ". Run as is, it does not serve this output; serve.sh does.")
    return warnings
