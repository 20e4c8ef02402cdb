"""The reference pages that would drift if written by hand, generated from the code when the site builds.

MkDocs loads this file as a hook (``hooks:`` in mkdocs.yml). A page holds a generated block between two
marker lines, ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``, committed as generated, so the
markdown a maintainer opens is complete; ``on_page_markdown`` renders it afresh for the site, and
``python docs/hooks/refgen.py --write`` rewrites every page's blocks in place (a page may ask for a new block
with the first marker line alone). ``tests/test_docs.py`` fails when a committed block differs from the code's:

- ``cli-builder``, ``cli-doctor``: every command, flag and help text, from the argparse parsers
  (``builder.commands.cli.build_parser``, ``mamba_ssm.doctor.cli._parser``);
- ``exit-codes-builder``, ``exit-codes-doctor``: from ``builder/errors.py`` (each FarmError's
  ``exit_code`` and docstring, plus ``OTHER_BUILDER_EXITS``) and the doctor's ``EXIT_CODES``;
- ``env-vars``: the one list, ``mamba_build/envvars.toml``;
- ``platform-support``: the cells of the default plan (``builder.planning.plan.load_plan()``);
- ``recipe-list``: the recipes in ``recipes/``.

``tests/test_docs.py`` uses the same functions: what the code defines and the docs lack fails there.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections import defaultdict
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _checkout_on_path() -> None:
    """builder/ and mamba_ssm/ are imported from this checkout. MkDocs loads a hook by path and puts
    sys.path back afterwards, so this runs when a block is generated, not at import."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# A block: its first marker, then (once written) the generated lines and its end marker.
MARKER = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$(?:\n.*?^<!-- end generated: \1 -->$)?", re.MULTILINE | re.DOTALL)
DOCS = ROOT / "docs"
ENVVARS = ROOT / "mamba_build" / "envvars.toml"

# Exit codes the builder CLI returns that are not a FarmError's: every command's, and one command's own
# (a command function's `return N`; tests/test_docs.py finds each and fails on one missing here).
OTHER_BUILDER_EXITS = {
    0: "success",
    130: "interrupted (Ctrl-C)",
}
COMMAND_EXITS = {
    ("drift", 13): "found drift: the data is behind the index (a table says what; with `--write`, all of it was written)",
    ("rehearse", 1): "the rehearsed workflow failed: act's exit code, each job's end and the log's path are printed",
}


# --------------------------------------------------------------------------- CLI


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in --help order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append((name, helps.get(name, ""), sub))
    return out


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's own arguments (positionals and flags), less --help and the sub-command slot."""
    return [
        a for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
    ]


def walk(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every (command path, help, parser) under PARSER, depth first, the root included."""
    out = [(path or parser.prog, "", parser)]
    for name, helptext, sub in _subcommands(parser):
        for p, h, s in walk(sub, f"{path} {name}".strip()):
            out.append((p, h or helptext, s))
    return out


def builder_parser() -> argparse.ArgumentParser:
    from builder.commands.cli import build_parser

    return build_parser(every=True)  # each command's full parser, not --help's summaries


def doctor_parser() -> argparse.ArgumentParser:
    from mamba_ssm.doctor.cli import _parser

    return _parser()


def _cell(text: str) -> str:
    """TEXT as one table cell: one line, pipes escaped, and <...> shown (not taken as HTML) outside code spans."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    parts[::2] = [p.replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]]
    return "`".join(parts)


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    meta = action.metavar or action.dest.upper()
    if isinstance(meta, tuple):
        meta = " ".join(meta)
    if action.choices and not action.metavar:
        meta = "{" + ",".join(map(str, action.choices)) + "}"
    more = " ..." if action.nargs in ("+", "*", argparse.REMAINDER) or isinstance(action, argparse._AppendAction) else ""
    return f"`{names} {meta}{more}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help == argparse.SUPPRESS:  # deliberately left out of --help (another data file, for tests)
        default = action.default
        if isinstance(default, Path) and default.is_absolute() and default.is_relative_to(ROOT):
            default = default.relative_to(ROOT).as_posix()
        return _cell(f"hidden from `--help`; default `{default}`")
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    if action.required and action.option_strings:
        text = f"required. {text}"
    return _cell(text)


def cli_markdown(parser: argparse.ArgumentParser, prefix: str) -> str:
    """One section per command: usage, description, a table of its arguments."""
    blocks = []
    for path, helptext, p in walk(parser):
        title = prefix if path == parser.prog else f"{prefix} {path}"
        opts = options(p)
        subs = _subcommands(p)
        if path != parser.prog and not opts and subs:
            lead = helptext or p.description or ""
            blocks.append(f"### `{title}`\n\n{_cell(lead)}\n\nSub-commands: " + ", ".join(f"`{n}`" for n, _, _ in subs) + ".\n")
            continue
        lines = [f"### `{title}`", ""]
        lead = p.description or helptext
        if lead:
            lines += [_cell(lead), ""]
        usage = " ".join(p.format_usage().removeprefix("usage: ").split())
        lines += ["```text", usage, "```", ""]
        if opts:
            lines += ["| argument | what it does |", "|---|---|"]
            lines += [f"| {_flag(a)} | {_help(p, a)} |" for a in opts]
            lines.append("")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


# --------------------------------------------------------------------------- exit codes


def farm_errors() -> list[type]:
    """Every FarmError class of the farm: builder/errors.py's (base first), then any a command's module
    defines itself (every command's module is imported, as the full parser does)."""
    import importlib

    from builder import errors
    from builder.commands.cli import COMMANDS

    for command in COMMANDS.values():
        importlib.import_module(command.module)
    found = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.FarmError)]
    stack = [errors.FarmError]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub not in found and sub.__module__.startswith("builder"):
                found.append(sub)
    return found


def builder_exit_codes() -> dict[int, list[str]]:
    """exit code -> its meanings (one per error class; several classes may share a code)."""
    from builder import errors

    codes: dict[int, list[str]] = defaultdict(list)
    for code, text in OTHER_BUILDER_EXITS.items():
        codes[code].append(text)
    for cls in farm_errors():
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        if cls is errors.FarmError:
            doc = "any other error the user can fix; the message says what"
        where = "" if cls.__module__ == "builder.errors" else f" (`{cls.__module__}`)"
        codes[cls.exit_code].append(f"`{cls.__name__}`{where}: {_cell(doc)}")
    for (command, code), text in COMMAND_EXITS.items():
        codes[code].append(f"`{command}`, its own: {_cell(text)}")
    return dict(sorted(codes.items()))


def doctor_exit_codes() -> dict[int, str]:
    from mamba_ssm.doctor.cli import EXIT_CODES

    return dict(sorted(EXIT_CODES.items()))


def exit_codes_markdown(which: str) -> str:
    lines = ["| code | meaning |", "|---|---|"]
    if which == "builder":
        lines += [f"| {code} | {'<br>'.join(texts)} |" for code, texts in builder_exit_codes().items()]
    else:
        lines += [f"| {code} | {_cell(text)} |" for code, text in doctor_exit_codes().items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- environment variables


def env_list() -> list[dict]:
    return tomllib.loads(ENVVARS.read_text())["var"]


SECTIONS = {  # the table's groups, in order: what each is for
    "install": "installing",
    "build": "compiling",
    "runtime": "run time",
    "doctor": "the doctor",
    "farm": "the farm",
    "rehearsal": "the rehearsal",
    "tests": "tests",
}


def env_markdown() -> str:
    order = list(SECTIONS)
    rows = sorted(env_list(), key=lambda v: order.index(v["section"]))  # stable: the file's order within a group
    lines = ["| variable | for | effect | default | read by |", "|---|---|---|---|---|"]
    for v in rows:
        where = "<br>".join(f"`{p}`" for p in v["read_by"])
        lines.append(f"| `{v['name']}` | {SECTIONS[v['section']]} | {_cell(v['effect'])} | {_cell(v.get('default', ''))} | {where} |")
    return "\n".join(lines) + "\n"


# What the env scan reads: Python files (ast) and C/C++ sources (getenv).
ENV_SCAN_PY = ["setup.py", "noxfile.py", "mamba_build", "mamba_ssm", "builder"]
ENV_SCAN_C = ["csrc"]
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ENV_HELPER = re.compile(r"^_?env_")  # env_bool, _env_mib: the code's own readers take the name as an argument


def _is_env(node: ast.AST) -> bool:
    """An expression that is an environment mapping: os.environ, env, self.env, plan.env ..."""
    text = ast.unparse(node)
    return text == "os.environ" or text.split(".")[-1] in ("env", "environ")


def _names_in_file(tree: ast.Module) -> set[str]:
    consts = {}  # module-level NAME = "STRING"
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    consts[t.id] = node.value.value
    loops = {}  # for var in ("A", "B"): var -> the names
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            vals = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if vals:
                loops[node.target.id] = vals

    def values(arg: ast.AST) -> list[str]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        if isinstance(arg, ast.Name):
            if arg.id in consts:
                return [consts[arg.id]]
            return loops.get(arg.id, [])
        return []

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and _is_env(f.value):
                found.update(values(node.args[0]))
            elif isinstance(f, ast.Attribute) and f.attr == "getenv":
                found.update(values(node.args[0]))
            elif _ENV_HELPER.search(getattr(f, "attr", getattr(f, "id", ""))):
                # a reader of the code's own (toolchain.env_bool(env, "NAME"), sources._env_mib("NAME", 512))
                for arg in node.args:
                    found.update(values(arg))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_env(node.value):
            found.update(values(node.slice))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if _is_env(node.comparators[0]):
                found.update(values(node.left))
    return {n for n in found if _ENV_NAME.match(n)}


def env_reads() -> dict[str, set[str]]:
    """name -> the files (repo-relative) whose code reads it."""
    reads: dict[str, set[str]] = defaultdict(set)
    files = []
    for entry in ENV_SCAN_PY:
        p = ROOT / entry
        files += [p] if p.is_file() else sorted(p.rglob("*.py"))
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for name in _names_in_file(ast.parse(path.read_text(), rel)):
            reads[name].add(rel)
    for entry in ENV_SCAN_C:
        for path in sorted((ROOT / entry).rglob("*")):
            if path.suffix in (".c", ".cc", ".cpp", ".h", ".cu", ".cuh", ".inc"):
                for name in re.findall(r'getenv\("([A-Z][A-Z0-9_]*)"\)', path.read_text()):
                    reads[name].add(path.relative_to(ROOT).as_posix())
    return dict(reads)


# --------------------------------------------------------------------------- platform support


def _span(values: list[str], order: list[str]) -> str:
    """'2.4-2.9, 2.11' for a subset of ORDER: consecutive runs joined."""
    idx = sorted(order.index(v) for v in set(values))
    runs, start = [], None
    for i, k in enumerate(idx):
        if start is None:
            start = k
        if i + 1 == len(idx) or idx[i + 1] != k + 1:
            runs.append(order[start] if start == k else f"{order[start]}–{order[k]}")
            start = None
    return ", ".join(runs)


def _group_tiers(group, tier_of: dict, pythons: list[str]) -> str:
    """The tiers of a table cell's Pythons: ``planned``, or ``3.11 cpu-checked; 3.10, 3.12–3.14 planned``."""
    by: dict[str, list[str]] = defaultdict(list)
    for c in group:
        by[tier_of.get(c, "planned")].append(c.python)
    if len(by) == 1:
        return f"*{next(iter(by))}*"
    from builder.verifying.evidence import TIERS

    return "; ".join(f"{_span(by[t], pythons)} *{t}*" for t in TIERS if t in by)


def _acc_title(acc: str) -> str:
    kind, _, ver = acc.partition("-")
    return {"cpu": "CPU", "cuda": f"CUDA {ver}", "rocm": f"ROCm {ver}"}[kind]


def platform_markdown(profile: str | None = None) -> str:
    """Per platform, a torch × accelerator table of the Pythons each cell has, from the plan."""

    plan = _plan(profile)
    cells = plan.cells
    torches = list(plan.matrix.axes.torch)
    pythons = sorted({c.python for c in cells}, key=lambda p: tuple(map(int, p.split("."))))
    accs = []
    for c in sorted(cells, key=lambda c: c.sort_key()):
        if c.accelerator not in accs:
            accs.append(c.accelerator)
    n_stable = sum(b.stable for b in plan.builds)
    out = [
        f"{len(cells)} cells (torch × Python × accelerator × C++ ABI × platform) served by {len(plan.builds)} builds, "
        f"{n_stable} of them stable-ABI wheels. Each cell lists its Pythons; "
        "**S** marks a cell served by its accelerator's stable-ABI (`abi3`) wheel. "
        "The C++ ABI is the one torch ships (pre-CXX11 up to torch 2.6, CXX11 from 2.7); "
        "`(F, T)` marks a torch with wheels for both. After `·`, each Python's tier, computed from the evidence "
        "ledger (*gpu-run*, *cpu-checked*, *compiled*, *planned*).",
        "",
    ]
    served_by_stable = set()
    from builder.planning.plan import served_cells

    for b in plan.builds:
        if b.stable:
            served_by_stable.update(served_cells(plan, b))
    tier_of = {cell: tier for cell, _b, tier, _r in _ledger_tiers(profile)}
    for platform in sorted({c.platform for c in cells}, key=lambda p: (p != "linux_x86_64", p)):
        here = [c for c in cells if c.platform == platform]
        cols = [a for a in accs if any(c.accelerator == a for c in here)]
        out += [f"### `{platform}`", "", "| torch | " + " | ".join(_acc_title(a) for a in cols) + " |",
                "|---|" + "---|" * len(cols)]
        for t in torches:
            row = []
            for a in cols:
                group = [c for c in here if c.torch == t and c.accelerator == a]
                if not group:
                    row.append("")
                    continue
                text = _span([c.python for c in group], pythons)
                abis = {c.cxx11abi for c in group}
                if len(abis) > 1:
                    text += " (F, T)"
                if all(c in served_by_stable for c in group):
                    text += " **S**"
                text += " · " + _group_tiers(group, tier_of, pythons)
                row.append(text)
            if any(row):
                out.append(f"| {t} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def _kind(accelerator: str) -> str:
    """A cell's accelerator (cuda-13.0) or a build's (cu13, hip62) -> cpu | cuda | rocm."""
    head = accelerator.split("-")[0]
    return "cpu" if head == "cpu" else "cuda" if head.startswith("cu") else "rocm"


@functools.cache
def _plan(profile: str | None = None, stable: bool | None = None):
    """One load of each plan per docs build (the release profile's, every release beside its era's torches, is the
    costly one)."""
    from builder.planning.plan import load_plan

    return load_plan(profile=profile, stable=stable)


@functools.cache
def _ledger_tiers(profile: str | None) -> tuple:
    """(cell, build, tier, record) for every cell of the plan, from the evidence ledger; the docs build stops when
    the ledger holds a record that no longer stands (builder.publishing.tiers.check_ledger)."""
    from builder.facts import compat as compat_mod
    from builder.planning.matrix import load_matrix
    from builder.planning.plan import DEFAULT_MATRIX
    from builder.publishing import tiers

    records = tiers.load_ledger()
    profiles = load_matrix(DEFAULT_MATRIX, compat_mod.load()).profiles
    problems = tiers.check_ledger(records, [_plan(), *(_plan(p) for p in profiles)])
    if problems:
        raise ValueError("builder/data/evidence.json: " + "; ".join(problems)
                         + " (harvest real runs again: python -m builder evidence harvest --wheels DIR)")
    return tuple(tiers.cell_tiers(_plan(profile), records))


def _tier_counts(found) -> str:
    from collections import Counter

    from builder.verifying.evidence import TIERS

    c = Counter(t for t in found)
    return ", ".join(f"{c[t]} {t}" for t in TIERS if c[t])


def _backed_by(found) -> str:
    """The wheel records behind a row's cells; with none, what the ledger's HIP compile records say of them
    (builder.publishing.tiers.cell_detail: ROCm cells, planned, HIP compiled), else that nothing was built."""
    from builder.publishing import tiers
    from builder.verifying.evidence import tier_detail

    seen = {}
    for _c, _b, _t, r in found:
        if r is not None:
            archs = ", ".join(r["verified"].get("archs") or ()) or "no device code"
            seen[r["wheel"]] = f"`{r['wheel']}`: {tier_detail(r)}, {archs}"
    if seen:
        return "; ".join(seen[k] for k in sorted(seen))
    hip = tiers.load_hip()
    said = sorted({tiers.cell_detail(b, t, r, hip) for _c, b, t, r in found} - {"planned"})
    return "; ".join(said) or "no record: nothing of this kind built here"


def support_tiers() -> list[dict]:
    """One row per (product line, project, accelerator kind, platform) of the release plan: how many of its cells
    have each tier (builder.publishing.tiers, from the evidence ledger: never typed), the records behind them,
    accelerators, torch releases, Pythons and GPU architectures; what stands in where nothing can run here
    (builder/data/support.toml)."""
    from builder.facts import compat as compat_mod
    from builder.verifying import evidence

    data = tomllib.loads((ROOT / "builder" / "data" / "support.toml").read_text())
    gpu_names = compat_mod.load().gpu_names
    plan = _plan("release")
    vkey = lambda v: tuple(map(int, v.split(".")))
    torches = sorted({*plan.matrix.releases.torch, *plan.matrix.axes.torch}, key=vkey)
    pythons = sorted({c.python for c in plan.cells}, key=vkey)
    stand_in = {s["kind"]: s["text"] for s in data.get("stand_in", [])}
    groups: dict[tuple, list] = defaultdict(list)
    for cell, b, tier, rec in _ledger_tiers("release"):
        line = "upstream" if b.from_recipe else "checkout"
        groups[(line, b.project, _kind(b.accelerator), b.platform)].append((cell, b, tier, rec))
    order = lambda k: (k[0] != "checkout", k[1], ["cpu", "cuda", "rocm"].index(k[2]), k[3] != "linux_x86_64")
    rows = []
    for key in sorted(groups, key=order):
        line, project, kind, platform = key
        found = groups[key]
        cells = [c for c, *_ in found]
        archs = sorted({a for _c, b, *_ in found for a in b.archs},
                       key=lambda a: (a[:3], int(re.sub(r"\D", "", a) or 0)))  # fmt: skip
        accs = sorted({c.accelerator for c in cells}, key=lambda a: vkey(a.split("-")[1]) if "-" in a else ())
        # the glibc floor: what the records' repaired tags say, and the plan's floor for cells with no record
        built = sorted({g for *_x, rec in found if (g := evidence.glibc_floor(rec))}, key=vkey)
        planned = sorted({evidence.tag_glibc(b.manylinux) for _c, b, _t, rec in found if not evidence.glibc_floor(rec)},
                         key=vkey)  # fmt: skip
        rows.append({
            "line": line, "project": project, "kind": kind, "platform": platform,
            "tiers": _tier_counts(t for *_x, t, _r in found), "tier_list": [t for *_x, t, _r in found],
            "accelerators": [_acc_title(a) for a in accs],
            "torch": _span([c.torch for c in cells], torches), "python": _span([c.python for c in cells], pythons),
            "archs": [(a, gpu_names.get(a, "")) for a in archs], "glibc": built, "glibc_planned": planned,
            "records": _backed_by(found), "stand_in": stand_in.get(kind, ""),
        })  # fmt: skip
    return rows


def support_markdown() -> str:
    """The support page's tier table and the platforms not supported, with what to do instead."""
    data = tomllib.loads((ROOT / "builder" / "data" / "support.toml").read_text())
    out = ["| package | platform | accelerator | torch | Python | cells by tier | glibc (built; planned) | GPU architectures | the records behind it |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in support_tiers():
        archs = ", ".join(f"`{a}` ({name})" if name else f"`{a}`" for a, name in r["archs"]) or "(CPU)"
        who = f"`{r['project']}` ({'this repository' if r['line'] == 'checkout' else 'upstream'})"
        why = r["records"] + (f". {r['stand_in']}" if r["stand_in"] else "")
        glibc = "; ".join(x for x in (", ".join(f"≥ {g}" for g in r["glibc"]),
                                      ", ".join(f"planned ≥ {g}" for g in r["glibc_planned"])) if x)  # fmt: skip
        out.append(f"| {who} | `{r['platform']}` | {', '.join(r['accelerators'])} | {r['torch']} | {r['python']} "
                   f"| **{r['tiers']}** | {glibc} | {_cell(archs)} | {_cell(why)} |")  # fmt: skip
    out += ["", "**Not supported:**", ""]
    out += [f"- **{u['platform']}**: {u['instead']}." for u in data["unsupported"]]
    return "\n".join(out) + "\n"


def floors_markdown() -> str:
    """What a machine needs for each line's wheels, computed: the glibc floor of each accelerator family (the
    release plan's manylinux targets, raised per machine to what the cells' installs resolved at), the NVIDIA driver of each CUDA major (toolkits.toml [driver]) and the GPUs
    each CUDA major's wheels run on (their arch lists, the names in toolkits.toml [gpus]), and the GPUs none serves."""
    from builder.facts import compat as compat_mod
    from mamba_ssm.doctor import served

    compat = compat_mod.load()
    vkey = lambda v: tuple(map(int, v.split(".")))
    fam = {"cpu": "CPU", "cu": "CUDA", "hip": "ROCm"}
    from builder.publishing import pins

    floors: dict[tuple[str, str], dict] = defaultdict(dict)  # (line, family) -> {machine: the highest floor}
    for w in pins.release_wheels():  # the plan's target raised to what each cell's install resolved at
        line = "upstream's mamba-ssm and causal-conv1d" if w.line == "upstream" else "this repository's mamba-ssm"
        f = next(v for k, v in fam.items() if w.accelerator.startswith(k))
        machine = w.platform.removeprefix("linux_")
        floors[(line, f)][machine] = max(floors[(line, f)].get(machine, w.glibc), w.glibc, key=vkey)
    majors: dict[str, set] = defaultdict(set)
    for b in _plan("release").builds:
        line = "upstream's mamba-ssm and causal-conv1d" if b.from_recipe else "this repository's mamba-ssm"
        f = next(v for k, v in fam.items() if b.accelerator.startswith(k))
        if f == "CUDA":
            majors[b.accelerator].update(b.archs)
        if f == "ROCm":
            majors[(line, "rocm")].update(b.archs)
    out = ["| wheels | accelerator | glibc | NVIDIA driver | GPUs their code runs on |", "|---|---|---|---|---|"]
    for (line, f), glibcs in sorted(floors.items(), key=lambda kv: (kv[0][0] != "this repository's mamba-ssm", kv[0][1])):
        rows = sorted(k for k in majors if isinstance(k, str)) if f == "CUDA" else [None]
        for acc in rows:
            driver = f"{compat.drivers[acc[2:]]} or newer" if acc else "-"
            gpus = "-"
            if acc:
                names = [f"{n} ({sm})" for sm, n, _via in served.gpus_served("checkout" if "this" in line else "upstream", acc)]
                gpus = "; ".join(names)
            if f == "ROCm":
                gpus = "; ".join(f"{compat.gpu_names.get(a, a)} ({a})" for a in sorted(majors[(line, "rocm")]))
            base = glibcs.get("x86_64") or max(glibcs.values(), key=vkey)
            more = "".join(f" ({m}: {g})" for m, g in sorted(glibcs.items()) if g != base)
            out.append(f"| {line} | {acc or f} | {base} or newer{more} | {driver} | {gpus} |")
    unserved = [f"{n} ({sm})" for sm, n in compat.gpu_names.items() if sm.startswith("sm_")
                and not any(served.gpu_accelerators(line, f"{sm[3:-1]}.{sm[-1]}") for line in ("upstream", "checkout"))]  # fmt: skip
    out += ["", (f"No wheel of either line carries code for {', '.join(unserved)}: this repository's mamba-ssm builds "
                 "for them from source with a CUDA 12 toolkit (`MAMBA_CUDA_ARCHS`); upstream's setup.py compiles a fixed list.")]
    return "\n".join(out) + "\n"


def plan_counts_markdown() -> str:
    """The benchmarks page's plan row (what `benchmarks/collapse.py plan` prints), from the plan of this checkout."""

    classic, plan = _plan(stable=False), _plan(stable=True)
    stable = [b for b in plan.builds if b.stable]
    served = len(plan.cells) - (len(plan.builds) - len(stable))
    compiles = len({(b.image, b.archs) for b in plan.builds})  # kernels compile once per (image, arch list)
    per = f", {served // len(stable)} each" if stable and served % len(stable) == 0 else ""
    n, c = len(classic.cells), len(classic.builds)
    return (f"| default matrix: cells / builds (generated from this checkout's plan) | {n} / {c} = {n / c:.1f} classic; "
            f"{len(plan.cells)} / {len(plan.builds)} = {len(plan.cells) / len(plan.builds):.2f} with the stable plan "
            f"({len(stable)} stable builds serve {served} cells{per}); kernels compile once per image and arch list: "
            f"{compiles} times |\n")  # fmt: skip


def profiles_markdown() -> str:
    """matrix.toml's profiles: name, what it builds (its description), its projects."""
    from builder.facts import compat as compat_mod
    from builder.planning.matrix import load_matrix
    from builder.planning.plan import DEFAULT_MATRIX

    matrix = load_matrix(DEFAULT_MATRIX, compat_mod.load())
    lines = ["| profile | builds | projects |", "|---|---|---|", "| *(none)* | the whole matrix | `checkout` |"]
    for name, prof in matrix.profiles.items():
        projects = ", ".join(f"`{p}`" for p in prof.projects)
        lines.append(f"| `{name}` | {_cell(prof.description)} | {projects} |")
    return "\n".join(lines) + "\n"


def upstream_markdown() -> str:
    """Per recipe project of the release profile: which accelerators, torch releases and Pythons it is built for."""

    plan = _plan("release")
    by: dict[tuple[str, str], list] = defaultdict(list)
    for b in plan.builds:
        if b.from_recipe:
            by[(b.project, b.accelerator)].append(b)
    if not by:
        return "The release profile builds no recipe.\n"
    torches = sorted({*plan.matrix.releases.torch, *plan.matrix.axes.torch}, key=lambda t: tuple(map(int, t.split("."))))
    pythons = sorted({b.python for bs in by.values() for b in bs}, key=lambda p: tuple(map(int, p.split("."))))
    tier_of = {b.id: tier for _c, b, tier, _r in _ledger_tiers("release")}
    lines = [(f"From the `release` profile: {sum(map(len, by.values()))} builds, classic wheels only; each build's "
              "tier from the evidence ledger."), "",
             "| project | accelerator | torch | Python | platforms | builds by tier |", "|---|---|---|---|---|---|"]
    for (project, acc), bs in sorted(by.items()):
        from packaging.version import Version

        versions = sorted({plan.recipe_of(b).source.version for b in bs}, key=Version)
        version = versions[0] if len(versions) == 1 else f"{versions[0]} … {versions[-1]} ({len(versions)} releases)"
        lines.append(f"| `{project}` {version} | `{acc}` | {_span([b.torch for b in bs], torches)} "
                     f"| {_span([b.python for b in bs], pythons)} | {', '.join(sorted({b.platform for b in bs}))} "
                     f"| {_tier_counts(tier_of.get(b.id, 'planned') for b in bs)} |")
    return "\n".join(lines) + "\n"


def recipes_markdown() -> str:
    lines = ["| recipe | pinned sdist | sha256 |", "|---|---|---|"]
    for path in sorted((ROOT / "recipes").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        src = data.get("source", {})
        name = src.get("name", path.stem)
        lines.append(f"| `recipes/{path.name}` | `{name}=={src.get('version', '?')}` | `{str(src.get('sha256', ''))[:16]}…` |")
    return "\n".join(lines) + "\n"


def placeholders_markdown() -> str:
    from builder.planning.recipes import PLACEHOLDERS

    lines = ["| placeholder | what it becomes |", "|---|---|"]
    lines += [f"| `${{{name}}}` | {_cell(text)} |" for name, text in PLACEHOLDERS.items()]
    return "\n".join(lines) + "\n"


def denied_env_markdown() -> str:
    from builder.planning import recipes

    names = ", ".join(f"`{n}`" for n in sorted(getattr(recipes, "DENIED_ENV", ())))
    prefixes = ", ".join(f"`{p}*`" for p in getattr(recipes, "DENIED_ENV_PREFIXES", ()))
    if not names and not prefixes:
        return "None: a recipe may set or unset any name.\n"
    return f"Names: {names}.\n\nPrefixes: {prefixes}.\n"


# --------------------------------------------------------------------------- the hook

GENERATORS = {
    "cli-builder": lambda: cli_markdown(builder_parser(), "python -m builder"),
    "cli-doctor": lambda: cli_markdown(doctor_parser(), "python -m mamba_ssm.doctor"),
    "exit-codes-builder": lambda: exit_codes_markdown("builder"),
    "exit-codes-doctor": lambda: exit_codes_markdown("doctor"),
    "env-vars": env_markdown,
    "platform-support": platform_markdown,
    "support-tiers": support_markdown,
    "floors": floors_markdown,
    "plan-counts": plan_counts_markdown,
    "platform-support-upstream": upstream_markdown,
    "profiles": profiles_markdown,
    "recipe-list": recipes_markdown,
    "recipe-placeholders": placeholders_markdown,
    "recipe-denied-env": denied_env_markdown,
}


def render(markdown: str, where: str = "", *, markers: bool = False) -> str:
    """MARKDOWN with each generated block made afresh; MARKERS: kept around it (the committed page), else the
    block's content alone (the site)."""
    _checkout_on_path()

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"{where}: unknown generated block {name!r} (known: {', '.join(GENERATORS)})")
        body = GENERATORS[name]().rstrip("\n")
        return f"<!-- generated: {name} -->\n{body}\n<!-- end generated: {name} -->" if markers else body

    return MARKER.sub(one, markdown)


def stale_pages() -> list[Path]:
    """The pages under docs/ whose committed generated blocks differ from what the code generates now."""
    return [p for p in sorted(DOCS.rglob("*.md")) if MARKER.search(text := p.read_text())
            and render(text, str(p), markers=True) != text]  # fmt: skip


def write_pages() -> list[Path]:
    """Rewrite every stale page's generated blocks in place; the pages written."""
    stale = stale_pages()
    for page in stale:
        page.write_text(render(page.read_text(), str(page), markers=True))
    return stale


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    return render(markdown, page.file.src_path)


if __name__ == "__main__":  # python docs/hooks/refgen.py --write
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python docs/hooks/refgen.py --write  (rewrites docs/'s generated blocks from the code)")
    for written in write_pages():
        print(f"wrote {written.relative_to(ROOT)}")
