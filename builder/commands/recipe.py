"""``python -m builder recipe {check,explain,prepare,fetch}``: third-party recipes (builder.sourcing.prepare, its
preflight builder.sourcing.preflight)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError
from builder.planning.recipes import GitPin, explain, recipe_for, supported
from builder.sourcing.prepare import cell_facts, prepare
from builder.sourcing.sources import SourceCache


def add_command(subparsers) -> None:
    p = subparsers.add_parser("recipe", help=summary("recipe"))
    sub = p.add_subparsers(dest="recipe_command", metavar="ACTION", required=True)
    q = sub.add_parser(
        "check",
        help="the preflight: each cell of a profile patched and its metadata prepared with the cell's environment "
        "(no compile); every value, arch list, label and requirement checked",
    )
    q.add_argument("projects", nargs="*", help="recipes to check (default: every recipe of the profile)")
    q.add_argument("--profile", default=None, help="the matrix.toml profile whose cells are checked (default: all)")
    q.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    q.add_argument("--recipes", type=Path, default=None, help="with --torch: recipes folder (default: recipes/)")
    q.add_argument(
        "--torch", default=None, help="check one cell instead of a profile's: the torch release, e.g. 2.14.1"
    )
    q.add_argument("--accelerator", default="cpu", help="with --torch: cpu, cuda-X.Y or rocm-X.Y")
    q.add_argument("--archs", default="", help="with --torch: sm_80,sm_90 or gfx90a,...")
    q.add_argument("--cxx11abi", choices=("TRUE", "FALSE"), default="TRUE", help="with --torch: the C++ ABI")
    q.add_argument("--releases", action="store_true", help="every [[release]] of the recipes named (default: "
                   "mamba-ssm and causal-conv1d) beside every torch minor of builder/data/torch.toml, with its "
                   "newest CUDA toolkit of each major (and ROCm with --rocm)")  # fmt: skip
    q.add_argument("--rocm", action="store_true", help="with --releases: the ROCm cells too")
    q.add_argument("--torch-minors", default="", help="with --releases: only these torch minors (2.4,2.14)")
    q.add_argument("--no-compile", action="store_true", help="skip the syntax-only compile of each extension")
    q.add_argument("--record", action="store_true", help="with --releases: write each cell's outcome to "
                   "builder/data/preflight.toml (what the plan reads: builder/facts/preflight.py)")  # fmt: skip
    for name, text in (
        ("explain", "which patches of the recipe apply to a cell, and why"),
        ("prepare", "fetch and check the sdist, unpack and patch it into --out; print the tree and env"),
        ("fetch", "fetch the pinned sdist into the farm cache and check its hash"),
    ):
        q = sub.add_parser(name, help=text)
        q.add_argument("project", help="the recipe's project (mamba-ssm, causal-conv1d)")
        q.add_argument("--recipes", type=Path, default=None, help="recipes folder (default: recipes/)")
        q.add_argument("--canary", action="store_true", help="the recipe's [canary] pin (its default branch's head) "
                       "and its when.source = \"canary\" patches and env, instead of its [source]")  # fmt: skip
        q.add_argument("--release", default=None, help="one of the recipe's [[release]] versions (default: [source])")
        if name == "fetch":
            continue
        q.add_argument("--torch", required=True, help="the torch release, e.g. 2.14.1")
        q.add_argument("--accelerator", required=True, help="cpu, cuda-X.Y or rocm-X.Y")
        q.add_argument("--archs", default="", help="sm_80,sm_90 or gfx90a,...")
        q.add_argument("--cxx11abi", choices=("TRUE", "FALSE"), default="TRUE", help="the C++ ABI (default TRUE)")
        q.add_argument("--label", default=None, help="local version label (default: from the cell)")
        q.add_argument(
            "--trim", action="store_true", help="the trimmed build (a profile's trim: the patches with when.trim)"
        )
        if name == "prepare":
            q.add_argument("--out", type=Path, required=True, help="a new folder for the tree")
            q.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.planning.recipes import RECIPES_DIR

    if args.recipe_command == "check":
        return _check(args)
    recipe = recipe_for(args.project, args.recipes or RECIPES_DIR).at("canary" if args.canary else "release")
    if args.release is not None:
        if args.canary:
            raise UsageError("--release and --canary name two different sources: give one")
        recipe = recipe.at_release(args.release)
    if args.recipe_command == "fetch":
        cache = SourceCache()
        print(cache.fetch_git(recipe.source) if isinstance(recipe.source, GitPin) else cache.fetch(recipe.source))
        return 0
    facts = cell_facts(args.torch, args.accelerator, args.archs, args.cxx11abi == "TRUE", args.label, args.trim)
    if args.canary:
        facts = replace(facts, source="canary")
    if args.recipe_command == "explain":
        print("\n".join(explain(recipe, facts)))
        return 0
    if args.out.exists():
        raise UsageError(f"--out {args.out}: already exists; every prepared tree goes into a new folder")
    prep = prepare(recipe, facts, args.out)
    if args.format == "json":
        json.dump({"tree": str(prep.tree), "env": prep.env, "unset": list(prep.unset),
                   "applied": list(prep.applied), "skipped": list(prep.skipped)}, sys.stdout, indent=2)  # fmt: skip
        print()
    else:
        print(f"tree: {prep.tree}")
        print(f"patches: {', '.join(prep.applied) or 'none'} (skipped: {', '.join(prep.skipped) or 'none'})")
        print("env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in prep.env.items()))
        print("unset: " + " ".join(prep.unset))
    return 0


def _check(args: argparse.Namespace) -> int:
    """Every distinct cell of the profile's recipe builds through the preflight; each failure printed, the first
    raised (its own exit code)."""
    import tempfile
    import time

    from builder.errors import FarmError
    from builder.planning.plan import load_plan
    from builder.planning.recipes import CellFacts
    from builder.sourcing.preflight import check_cell

    t0 = time.monotonic()
    cells: dict = {}
    if args.releases:
        return _check_releases(args)
    if args.record:
        raise UsageError("--record writes the outcome of --releases: give both")
    if args.torch is not None:  # one cell of the named recipes, as `recipe explain` takes it
        from builder.planning.recipes import RECIPES_DIR

        if not args.projects:
            raise UsageError("--torch checks one cell of the recipes named: name at least one")
        facts = cell_facts(args.torch, args.accelerator, args.archs, args.cxx11abi == "TRUE", None)
        for name in args.projects:
            recipe = recipe_for(name, args.recipes or RECIPES_DIR)
            cells[(recipe.name, facts)] = recipe
    else:
        plan = load_plan(matrix_file=args.matrix, profile=args.profile, projects=args.projects or None)
        for spec in plan.builds:
            recipe = plan.recipe_of(spec)
            if recipe is not None:
                cells.setdefault((recipe.name, CellFacts.from_spec(spec)), recipe)
    if not cells:
        raise UsageError("the plan holds no recipe builds to check",
                         hint="name a profile whose projects are recipes (--profile ci-upstream)")  # fmt: skip
    failed: list[FarmError] = []
    with tempfile.TemporaryDirectory(prefix="recipe-check-") as work:
        for i, ((_, facts), recipe) in enumerate(cells.items()):
            try:
                print(check_cell(recipe, facts, Path(work) / str(i), compile=not args.no_compile).line(recipe),
                      flush=True)  # fmt: skip
            except FarmError as err:
                failed.append(err)
                print(
                    f"{recipe.name}: {facts.describe()}: FAILED: {err}" + (f"\n  hint: {err.hint}" if err.hint else "")
                )
    took = time.monotonic() - t0
    print(f"preflight: {len(cells) - len(failed)} of {len(cells)} cell(s) ok in {took:.1f} s")
    if failed:
        raise failed[0]
    return 0


def release_cells(torch_minors: tuple[str, ...] = (), rocm: bool = False) -> list:
    """The cells a release is checked beside: each torch minor's newest patch release with its newest CUDA toolkit
    (x86_64) and, with ROCM, its newest ROCm; its newest C++ ABI; sm_80 or gfx90a (the arch list is the plan's)."""
    from builder.facts.compat import load, vtuple

    out = []
    for minor, row in sorted(load().torch.items(), key=lambda kv: vtuple(kv[0])):
        if torch_minors and minor not in torch_minors:
            continue
        accs = [f"cuda-{max(row.cuda, key=vtuple)}"] if row.cuda else []
        accs += [f"rocm-{'.'.join(row.rocm[-1].split('.')[:2])}"] if rocm and row.rocm else []
        for acc in accs:
            archs = "sm_80" if acc.startswith("cuda") else "gfx90a"
            out.append(cell_facts(row.latest, acc, archs, row.cxx11abi[-1], None))
    return out


def _check_releases(args: argparse.Namespace) -> int:
    """Every release of the recipes beside every torch (release_cells): patches, metadata, the syntax-only compile;
    each outcome printed, and with --record written for the plan (builder.facts.preflight)."""
    import tempfile
    import time

    from builder.errors import FarmError
    from builder.facts import preflight as record
    from builder.planning.recipes import RECIPES_DIR
    from builder.sourcing.preflight import check_cell

    t0 = time.monotonic()
    minors = tuple(m for m in args.torch_minors.split(",") if m)
    cells = release_cells(minors, args.rocm)
    outcomes: list[record.Outcome] = []
    failed = hits = 0
    with tempfile.TemporaryDirectory(prefix="recipe-check-") as work:
        n = 0
        for name in args.projects or ("mamba-ssm", "causal-conv1d"):
            recipe = recipe_for(name, args.recipes or RECIPES_DIR)
            for rel in recipe.releases:
                built = recipe.at_release(rel.version)
                for facts in cells:
                    if not supported(built, facts)[0]:
                        continue  # [requires] refuses it: the plan says so itself, nothing to record
                    n += 1
                    kept = _kept(built, facts, not args.no_compile)
                    outcome = _read_kept(kept)  # this recipe's bytes, release and cell checked before: its outcome
                    if outcome is not None:
                        hits += 1
                    else:
                        try:
                            done = check_cell(built, facts, Path(work) / str(n), compile=not args.no_compile)
                            print(done.line(recipe), flush=True)
                            outcome = record.Outcome(recipe.name, rel.version, facts.torch, record.acc_key(facts), None,
                                                     bool(done.compiled), done.requires)  # fmt: skip
                        except FarmError as err:
                            reason = _reason(err, built, facts)
                            print(f"{recipe.name} {rel.version}: {facts.describe()}: FAILED: {reason}", flush=True)
                            outcome = record.Outcome(recipe.name, rel.version, facts.torch, record.acc_key(facts),
                                                     reason, False, ())  # fmt: skip
                        kept.parent.mkdir(parents=True, exist_ok=True)
                        kept.write_text(json.dumps({**outcome.__dict__, "requires": list(outcome.requires)}))
                    failed += outcome.reason is not None
                    outcomes.append(outcome)
    took = time.monotonic() - t0
    print(f"preflight: {len(outcomes) - failed} of {len(outcomes)} (release, torch, accelerator) cell(s) ok "
          f"in {took:.1f} s ({hits} kept from an earlier run)")  # fmt: skip
    if args.record:
        path = record.write(outcomes)
        print(f"recorded: {path}")
    return 0


def _reason(err: Exception, recipe, facts) -> str:
    """The error as the record keeps it: without the recipe's folder and the cell (the record's keys say it)."""
    from builder.planning.recipes import for_recipe

    said = str(err).replace(f"{recipe.path}", recipe.path.name)
    for cell in (for_recipe(recipe, facts).describe(), facts.describe()):
        said = said.replace(f"cell {cell}: ", "").replace(f"{cell}: ", "")
    return " ".join(line.strip() for line in said.splitlines() if line.strip())


def _kept(recipe, facts, compile: bool) -> Path:
    """Where a cell's outcome is kept: keyed by the recipe file's bytes, the release's source, the cell and whether
    it compiled, so any change to one of them checks the cell again."""
    import hashlib

    from builder.facts import hostenv

    key = json.dumps([recipe.digest, recipe.source.identity, repr(facts), compile, 1])
    return hostenv.CACHE_ROOT / "preflight-cells" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _read_kept(kept: Path):
    """A kept outcome, or None where there is none or it is not one (then the cell is checked again)."""
    from builder.facts import preflight as record

    try:
        data = json.loads(kept.read_text())
        return record.Outcome(**{**data, "requires": tuple(str(r) for r in data["requires"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
