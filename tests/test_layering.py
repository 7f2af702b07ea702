"""The engine's folders follow the pipeline: each stage imports only the stages before it and
the shared modules, so there is no upward arrow and no cycle between folders; and no two
modules of the whole package (engine, CLI, wizard) import each other, directly or round a
circle. Every import counts, those inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mxtrim_tui"
CORE = PACKAGE / "core"
# the pipeline, in order: a stage may import the ones before it
STAGES = ["read", "model", "plan", "checks", "probe", "write", "validate"]
# modules directly under core/, shared by every stage: they import no stage
SHARED = {"errors", "units", "version", "interrupts", "child_process", "user_settings", "progress", "new_file"}


def _package(path: Path) -> list[str]:
    """The dotted package a module file of core is in."""
    return ["mxtrim_tui", *path.parent.relative_to(CORE.parent).parts]


def _imports(text: str, package: list[str]) -> list[tuple[int, str]]:
    """(line, absolute dotted module) of every import in ``text``, relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            # `from . import cache`: the names may be modules
            found += [(node.lineno, module)] if node.module else [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return found


def _unit(module: str) -> str | None:
    """The stage folder or shared module of core a dotted module belongs to (None: outside core)."""
    parts = module.split(".")
    if parts[:2] != ["mxtrim_tui", "core"] or len(parts) < 3:
        return None
    return parts[2]


def _arrows() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import between two units of core."""
    arrows = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE)
        own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for line, module in _imports(path.read_text(encoding="utf-8"), _package(path)):
            target = _unit(module)
            if target is not None and target != own:
                arrows.append((own, target, f"core/{rel}:{line} imports {module}"))
    return arrows


def test_every_unit_of_core_is_a_stage_or_a_shared_module():
    units = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in CORE.glob("*.py") if p.stem != "__init__"}
    assert units == set(STAGES) | SHARED, units ^ (set(STAGES) | SHARED)


def test_no_stage_imports_a_later_stage_and_shared_modules_import_no_stage():
    upward = []
    for own, target, where in _arrows():
        if own in SHARED and target in STAGES:
            upward.append(where)
        elif own in STAGES and target in STAGES and STAGES.index(target) > STAGES.index(own):
            upward.append(where)
    assert upward == []


def test_no_cycle_between_folders():
    graph: dict[str, set[str]] = {}
    for own, target, _ in _arrows():
        graph.setdefault(own, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert [unit for unit in graph if reaches(unit, unit, {unit})] == []


def test_the_arrows_are_read():
    """The test sees relative, absolute and in-function imports (it would pass vacuously if it
    read none)."""
    arrows = {(own, target) for own, target, _ in _arrows()}
    assert ("write", "plan") in arrows and ("plan", "model") in arrows and ("checks", "plan") in arrows
    in_plan = ["mxtrim_tui", "core", "plan"]
    sample = "import mxtrim_tui.core.read.source\ndef f():\n    from ..write import writer\n    from . import build\n"
    assert [_unit(m) for _, m in _imports(sample, in_plan)] == ["read", "write", "plan"]


def test_no_function_of_the_product_is_over_80_lines():
    long = []
    for path in sorted(CORE.parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.relative_to(CORE.parent.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


def _module_graph(files: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules of ``files`` ({dotted name: source}) it imports. ``from a import b``
    names module ``a.b`` when there is one, else ``a``; a package's ``__init__`` is the
    package's own name."""
    graph = {}
    for name, text in files.items():
        package = name.split(".") if name in _packages(files) else name.split(".")[:-1]
        targets = set()
        for _, module in _imports(text, package):
            parts = module.split(".")
            while parts and ".".join(parts) not in files:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def _packages(files: dict[str, str]) -> set[str]:
    return {n for n in files if any(other.startswith(n + ".") for other in files)}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (strongly connected components,
    Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for nxt in targets:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def _package_files() -> dict[str, str]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path.read_text(encoding="utf-8")
    return files


def test_no_two_modules_import_each_other():
    assert _circles(_module_graph(_package_files())) == []


def test_a_circle_between_modules_is_found():
    """The circle test reads relative, absolute and in-function imports, through packages, and
    finds a circle of three as well as a pair (it would pass vacuously otherwise)."""
    files = {
        "pkg": "",
        "pkg.entry": "def main():\n    from .cli import run\n",
        "pkg.cli": "from pkg.entry import main\n",
        "pkg.sub": "",
        "pkg.sub.a": "from . import b\n",
        "pkg.sub.b": "import pkg.sub.c\n",
        "pkg.sub.c": "def f():\n    from .a import x\n",
        "pkg.sub.d": "from .a import x\nfrom ..cli import y\n",
    }
    assert sorted(_circles(_module_graph(files))) == [["pkg.cli", "pkg.entry"], ["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]
    assert len(_module_graph(_package_files())) > 100  # the whole package is read
