"""builder/'s imports follow its stages, and make no cycle, counting every import statement: module-level
and inside functions.

A function-local import hides a cycle from Python (it runs after both modules have loaded), not
from the design: the graph here is read from the source with ``ast``, so it sees both kinds.
"""

from __future__ import annotations

import ast
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

# builder/'s stages, in import order (docs/architecture.md): a module of a stage imports only its own stage,
# the stages before it and builder.errors. builder's top (__main__) may import anything; errors nothing.
# commands (each command's argument parsing and printing) is the top layer: no stage imports it.
# DOMAIN, the stages that do the work: `python -m builder --help` imports none of them.
DOMAIN = ("facts", "planning", "sourcing", "environments", "verifying", "building", "publishing", "run", "upkeep")
STAGES = (*DOMAIN, "commands")

# what builder/ holds besides the stage packages
TOP = {"__init__.py", "__main__.py", "errors.py", "data", "templates"}

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


def stage_of(module: str, stages=STAGES) -> str | None:
    """The stage MODULE lives in (builder.planning.plan -> planning); None at the package's top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in stages else None


def upward_imports(graph: dict[str, dict[str, str]], package: str, stages=STAGES) -> list[str]:
    """One line per import that goes against the stage order: a stage importing a later stage or the
    package's top (all but PACKAGE.errors), or PACKAGE.errors importing anything of the package."""
    rank = {s: i for i, s in enumerate(stages)}
    errors = f"{package}.errors"
    out = []
    for mod, deps in sorted(graph.items()):
        here = stage_of(mod, stages)
        for dep, where in sorted(deps.items()):
            there = stage_of(dep, stages)
            if mod == errors:
                out.append(f"{mod} imports {dep} ({where}): the errors are below every stage")
            elif here is None or dep == errors:
                continue
            elif there is None:
                out.append(f"{mod} ({here}) imports {dep}, the package's top ({where})")
            elif rank[there] > rank[here]:
                out.append(f"{mod} ({here}) imports {dep} ({there}), a later stage ({where})")
    return out


def test_builder_imports_follow_the_stage_order() -> None:
    found = upward_imports(import_graph(REPO, "builder"), "builder")
    assert not found, "imports against the stage order in builder/ (docs/architecture.md):\n" + "\n".join(found)


def test_building_and_verifying_import_neither_the_other() -> None:
    # one floor: the executors never load the verifier, and the verifier checks wheels built anywhere
    swapped = tuple("verifying" if s == "building" else "building" if s == "verifying" else s for s in STAGES)
    found = upward_imports(import_graph(REPO, "builder"), "builder", swapped)
    assert not found, "building/ and verifying/ import each other (builder/run/ joins them):\n" + "\n".join(found)


def test_builder_top_holds_only_the_stages_errors_and_the_cli() -> None:
    here = {p.name for p in (REPO / "builder").iterdir() if p.name != "__pycache__"}
    assert here == TOP | set(STAGES), f"not a stage, errors, the CLI, data or templates: {sorted(here - TOP)}"
    for stage in STAGES:
        assert (REPO / "builder" / stage / "__init__.py").is_file(), f"builder/{stage}/ is not a package"


def test_an_upward_import_is_named(tmp_path: Path) -> None:
    # the same checker on a copy of builder/ with one hand-made import against the order, inside a function
    shutil.copytree(REPO / "builder", tmp_path / "builder", ignore=shutil.ignore_patterns("__pycache__"))
    assert upward_imports(import_graph(tmp_path, "builder"), "builder") == []
    compat = tmp_path / "builder" / "facts" / "compat.py"
    lines = compat.read_text().count("\n")
    compat.write_text(
        compat.read_text() + "\n\ndef _plan():\n    from builder.planning import plan\n\n    return plan\n"
    )
    want = f"builder.facts.compat (facts) imports builder.planning.plan (planning), a later stage (builder/facts/compat.py:{lines + 4})"
    assert upward_imports(import_graph(tmp_path, "builder"), "builder") == [want]


def test_the_stage_order_on_a_small_package(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for folder in ("", "facts", "planning", "building"):
        (pkg / folder).mkdir(parents=True, exist_ok=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "cli.py").write_text("from pkg.building import run\n")  # the top may import any stage
    (pkg / "facts" / "f.py").write_text("from pkg.errors import E\n")
    (pkg / "planning" / "p.py").write_text("from pkg.facts import f\nfrom . import q\n")  # earlier, its own
    (pkg / "planning" / "q.py").write_text("")
    (pkg / "building" / "run.py").write_text("import pkg.planning.p\n")
    assert upward_imports(import_graph(tmp_path, "pkg"), "pkg") == []
    (pkg / "facts" / "f.py").write_text("from ..building import run\n")  # a relative import, against the order
    (pkg / "planning" / "q.py").write_text("from pkg import cli\n")  # the top
    (pkg / "errors.py").write_text("from pkg.facts import f\n")  # errors are below everything
    assert upward_imports(import_graph(tmp_path, "pkg"), "pkg") == [
        "pkg.errors imports pkg.facts.f (pkg/errors.py:1): the errors are below every stage",
        "pkg.facts.f (facts) imports pkg.building.run (building), a later stage (pkg/facts/f.py:1)",
        "pkg.planning.q (planning) imports pkg.cli, the package's top (pkg/planning/q.py:1)",
    ]


def test_builder_has_no_import_cycle() -> None:
    graph = import_graph(REPO, "builder")
    # the reader sees what it must: module-level imports and function-local ones, submodules by name
    assert "builder.building.images.engine" in graph["builder.building.executors.docker"]
    assert "builder.planning.plan" in graph["builder.run.verify"]  # imported inside _profile_of()
    assert "builder.run.schedule" in graph["builder.run.build"]  # from builder.run import schedule
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


# --------------------------------------------------------------------------- the commands apart from the work

# Modules outside builder/commands/ that may parse arguments, and why.
ARGPARSE_ALLOWED = {
    "builder/upkeep/standins/gh.py": "a stand-in program for GitHub's `gh` CLI that tests run as its own "
    "executable: it parses gh's arguments, not the farm's",
}


def argparse_importers(root: Path, package: str) -> list[str]:
    """Files of PACKAGE under ROOT, outside PACKAGE/commands/, with an import of argparse (any statement)."""
    out = []
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(f"{package}/commands/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "argparse" or n.startswith("argparse.") for n in names):
                out.append(f"{rel}:{node.lineno}")
                break
    return out


def test_only_the_commands_parse_arguments() -> None:
    found = [f for f in argparse_importers(REPO, "builder") if f.split(":")[0] not in ARGPARSE_ALLOWED]
    assert not found, "argparse outside builder/commands/ (a domain module takes typed options):\n" + "\n".join(found)
    assert all((REPO / f).is_file() for f in ARGPARSE_ALLOWED), "an exception names a file that is gone: delete it"


def test_an_argparse_import_outside_the_commands_is_named(tmp_path: Path) -> None:
    shutil.copytree(REPO / "builder", tmp_path / "builder", ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "builder" / "planning" / "plan.py"
    lines = plan.read_text().count("\n")
    plan.write_text(
        plan.read_text() + "\n\ndef _parse():\n    from argparse import ArgumentParser\n\n    return ArgumentParser\n"
    )
    found = [f for f in argparse_importers(tmp_path, "builder") if f.split(":")[0] not in ARGPARSE_ALLOWED]
    assert found == [f"builder/planning/plan.py:{lines + 4}"]


_IMPORTED = """
import sys
from builder.commands.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m == "builder" or m.startswith("builder."))))
"""


def _imported_by(*argv: str) -> set[str]:
    """The builder modules a fresh interpreter has imported after ``python -m builder ARGV`` (main, in-process)."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    return set(proc.stdout.split())


def _domain(modules: set[str], stages=DOMAIN) -> list[str]:
    return sorted(m for m in modules if stage_of(m) in stages)


def test_help_lists_the_commands_without_importing_the_work() -> None:
    modules = _imported_by("--help")
    assert {"builder.commands.cli", "builder.commands"} <= modules, modules
    assert not _domain(modules), f"python -m builder --help imported domain modules: {_domain(modules)}"
    commands = [m for m in modules if m.startswith("builder.commands.") and m != "builder.commands.cli"]
    assert not commands, commands  # the table's summaries suffice
    # one command's --help imports that command's module and what it needs, not the others'
    plan = _imported_by("plan", "--help")
    assert "builder.commands.plan" in plan and "builder.planning.plan" in plan
    assert not [m for m in plan if m.startswith("builder.commands.") and m not in ("builder.commands.plan", "builder.commands.cli")], plan
    assert not _domain(plan, ("building", "publishing", "upkeep")), _domain(plan, ("building", "publishing", "upkeep"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_package_imports(root: Path) -> list[str]:
    """``file:line name`` for each import in ROOT/builder of a private module or name of the kernel package
    (``mamba_ssm._x``, ``mamba_ssm.pkg._x``, ``from mamba_ssm.x import _y``): the farm uses the package's
    public modules only, so the package may change its private parts without breaking the farm."""
    found = []
    for path in sorted((root / "builder").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "mamba_ssm"]
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "mamba_ssm":
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if any(map(_private, n.split(".")))]
    return found


def test_the_farm_imports_only_public_modules_of_the_package() -> None:
    found = private_package_imports(REPO)
    assert not found, "builder/ imports private parts of mamba_ssm (make them public, or move them into builder):\n" + (
        "\n".join(found)
    )


def test_a_private_package_import_is_named_with_its_file_and_line(tmp_path) -> None:
    (tmp_path / "builder" / "stage").mkdir(parents=True)
    (tmp_path / "builder" / "stage" / "a.py").write_text(
        "from mamba_ssm import variant, __version__\nimport mamba_ssm._C\n"
        "def f():\n    from mamba_ssm.doctor import _rules\n    from mamba_ssm.guard import shown, _Guarded\n"
    )
    assert private_package_imports(tmp_path) == [
        "builder/stage/a.py:2 mamba_ssm._C",
        "builder/stage/a.py:4 mamba_ssm.doctor._rules",
        "builder/stage/a.py:5 mamba_ssm.guard._Guarded",
    ]
