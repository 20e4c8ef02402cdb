"""builder/ has no import cycle, counting every import statement: module-level and inside functions.

A function-local import hides a cycle from Python (it runs after both modules have loaded), not
from the design: the graph here is read from the source with ``ast``, so it sees both kinds.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Cycles that are known and being cut elsewhere. Each entry must still be a cycle: delete it once it is gone.
ALLOWED: set[frozenset[str]] = set()


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file for every .py under ROOT/PACKAGE (a package's own name for its __init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(root: Path, package: str) -> dict[str, dict[str, str]]:
    """Module -> {a module of PACKAGE it imports: "file:line" of the first such import}, every statement counted."""
    modules = _modules(root, package)

    def owner(name: str) -> str | None:  # the module NAME is, or lives in (builder.x.func -> builder.x)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, str]] = {m: {} for m in modules}
    for mod, path in modules.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x / from ..y import z
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # from pkg import submodule names the submodule; from pkg.mod import name names pkg.mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                dep = owner(target)
                if dep and dep != mod:
                    graph[mod].setdefault(dep, f"{path.relative_to(root)}:{node.lineno}")
    return graph


def _components(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _cycle(graph: dict[str, dict[str, str]], comp: list[str]) -> str:
    """A shortest cycle through COMP's first module, as "a -> b (a.py:3) -> a (b.py:9)"."""
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = paths[v] + [start]
                return start + "".join(f" -> {b} ({graph[a][b]})" for a, b in itertools.pairwise(path))
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {comp}")


def cycles(graph: dict[str, dict[str, str]], allowed=frozenset()) -> list[str]:
    """One line per knot of modules that import each other: a shortest cycle, and every module in the knot."""
    out = []
    for comp in _components(graph):
        if frozenset(comp) in allowed:
            continue
        line = _cycle(graph, comp)
        out.append(line if len(comp) == line.count(" -> ") else f"{line}; the knot: {', '.join(comp)}")
    return out


def test_builder_has_no_import_cycle() -> None:
    graph = import_graph(REPO, "builder")
    # the reader sees what it must: module-level imports and function-local ones, submodules by name
    assert "builder.building.engine" in graph["builder.building.executors.docker"]
    assert "builder.planning.plan" in graph["builder.building.render"]  # imported inside _run()
    assert "builder.building.schedule" in graph["builder.building.build"]  # from builder import schedule
    found = cycles(graph, ALLOWED)
    assert not found, "import cycles in builder/:\n" + "\n".join(found)
    gone = [sorted(a) for a in ALLOWED if a not in {frozenset(c) for c in _components(graph)}]
    assert not gone, f"no longer a cycle, delete from ALLOWED: {gone}"


def test_a_cycle_through_a_function_local_import_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text("import os\n\n\ndef thing():\n    from .. import a\n\n    return a, os\n")
    (pkg / "c.py").write_text("from pkg import a\n")  # imports into the cycle, not part of it
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == ["pkg.a -> pkg.sub.b (pkg/a.py:1) -> pkg.a (pkg/sub/b.py:5)"]
    (pkg / "sub" / "b.py").write_text("import os\n\n\ndef thing():\n    return os\n")
    assert cycles(import_graph(tmp_path, "pkg")) == []
