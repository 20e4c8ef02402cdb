"""A recipe + one cell's facts -> a patched source tree and the environment its build runs with.

``prepare()`` unpacks the hash-checked sdist (builder.sourcing.sources) into a new folder, applies the
recipe's patches whose conditions the cell meets, in the recipe's order, and renders the build
env. Each build gets its own fresh tree; the cache only ever holds the archive, so no patch can
reach it. A patch that no longer applies raises :class:`~builder.errors.PatchError` naming the
recipe line, the patch, the edit and the file: that build fails, nothing is skipped silently.

What a recipe says for a cell (which patches apply and why, the env, the inputs hash) is the
plan's, in builder.planning.recipes: ``python -m builder recipe explain`` prints its ``explain()``.

Fetching (builder.sourcing.sources), recipes (builder.planning.recipes) and relabelling (builder.verifying.wheels) stay
separate: this module only joins the first two for one build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import PatchError, RecipeError, UsageError
from builder.facts.spec import GitPin
from builder.planning.recipes import (
    CellFacts,
    Patch,
    Recipe,
    decide,
    explain,
    inputs,
    placeholder_values,
    recipe_for,
    render,
    supported,
)
from builder.sourcing.reproducible import sdist_epoch
from builder.sourcing.sources import SourceCache

# ---------------------------------------------------------------------------
# Applying.


def apply_patch(tree: Path, patch: Patch, values: dict[str, str], recipe: Recipe) -> None:
    """Apply every edit of ``patch`` to its file under ``tree``, or raise PatchError and leave the file as it was."""
    where = f"{recipe.where(patch.line)}: patch {patch.name!r}"
    hint = (
        f"the sdist ({recipe.source.describe()}) no longer has the text this patch edits: "
        f"update the patch in {recipe.path}; only this build fails"
    )
    target = tree / patch.file
    if not target.is_file():
        raise PatchError(f"{where}: {patch.file} is not in {tree.name}", hint=hint)
    try:
        text = target.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(f"{where}: {tree.name}/{patch.file} is not UTF-8 text", hint=hint) from None
    for k, edit in enumerate(patch.edits, 1):
        found = text.count(edit.search)
        if found != edit.count:
            first = next((ln.strip() for ln in edit.search.splitlines() if ln.strip()), edit.search)
            raise PatchError(
                f"{where} no longer applies to {patch.file}: edit #{k}'s search text (starting "
                f"{first[:60]!r}) occurs {found} time{'s' if found != 1 else ''} in {tree.name}/{patch.file}, "
                f"the patch expects {edit.count}",
                hint=hint,
            )
        text = text.replace(edit.search, render(edit.replace, values))
    tmp = target.with_name(f".{target.name}.patched")
    tmp.write_bytes(text.encode("utf-8"))
    os.chmod(tmp, target.stat().st_mode)
    os.replace(tmp, target)


@dataclass(frozen=True)
class Prepared:
    """What an executor needs: the tree to ``pip wheel`` and the env to do it with."""

    tree: Path
    env: dict  # set these
    unset: tuple[str, ...]  # and remove these from the host's environment
    applied: tuple[str, ...]  # patch names, in order
    skipped: tuple[str, ...]
    inputs: dict = field(hash=False)  # what the build's inputs hash should cover
    epoch: int = 0  # the source's time (reproducible.sdist_epoch), read before patching

    def build_env(self, base: dict | None = None) -> dict[str, str]:
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in self.unset}
        env.update(self.env)
        return env


def prepare(recipe: Recipe, facts: CellFacts, workdir: Path, cache: SourceCache | None = None) -> Prepared:
    """Fetch (once) and check the sdist, unpack it into ``workdir/src`` (new), patch it for ``facts``."""
    ok, why = supported(recipe, facts)
    if not ok:
        raise RecipeError(f"{recipe.path}: {facts.describe()}: {why}")
    values = placeholder_values(facts)
    cache = cache or SourceCache()
    dest = Path(workdir) / "src"
    if dest.exists():
        raise UsageError(f"{dest}: already exists; every build prepares its source into a new folder")
    tree = cache.unpack(recipe.source, dest)
    epoch = sdist_epoch(tree)  # before the patches give the files they edit the clock's time
    applied, skipped = [], []
    for d in decide(recipe, facts):
        if d.applies:
            apply_patch(tree, d.patch, values, recipe)
            applied.append(d.patch.name)
        else:
            skipped.append(d.patch.name)
    env = {k: render(v, values) for k, v in recipe.env.items()}
    return Prepared(tree, env, recipe.unset, tuple(applied), tuple(skipped), inputs(recipe, facts), epoch)


# ---------------------------------------------------------------------------
# python -m builder recipe {explain,prepare,fetch}


def _label(facts: CellFacts) -> str:
    major, minor = (facts.toolkit or "0.0").split(".")[:2]
    acc = {"cpu": "cpu", "cuda": f"cu{int(major)}", "rocm": f"hip{int(major)}{int(minor)}"}[facts.kind]
    mm = ".".join(facts.torch.split(".")[:2])
    return f"{acc}torch{mm}cxx11abi{'TRUE' if facts.cxx11abi else 'FALSE'}"


def facts_from_args(args: argparse.Namespace) -> CellFacts:
    acc = args.accelerator
    m = re.fullmatch(r"(cuda|rocm)-(\d{1,2}\.\d{1,2})", acc)
    if not (m or acc == "cpu"):
        raise UsageError(f"--accelerator {acc!r}: expected cpu, cuda-X.Y or rocm-X.Y")
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.torch):
        raise UsageError(f"--torch {args.torch!r}: give the exact release, e.g. 2.14.1")
    archs = tuple(a for a in re.split(r"[,\s]+", args.archs or "") if a)
    facts = CellFacts(args.torch, m.group(1) if m else "cpu", m.group(2) if m else None, args.cxx11abi == "TRUE", archs)
    return CellFacts(facts.torch, facts.kind, facts.toolkit, facts.cxx11abi, archs, args.label or _label(facts))


def add_command(subparsers) -> None:
    p = subparsers.add_parser("recipe", help="third-party recipes: explain a cell's patches, fetch, prepare a tree")
    sub = p.add_subparsers(dest="recipe_command", metavar="ACTION", required=True)
    for name, text in (
        ("explain", "which patches of the recipe apply to a cell, and why"),
        ("prepare", "fetch and check the sdist, unpack and patch it into --out; print the tree and env"),
        ("fetch", "fetch the pinned sdist into the farm cache and check its hash"),
    ):
        q = sub.add_parser(name, help=text)
        q.add_argument("project", help="the recipe's project (mamba-ssm, causal-conv1d)")
        q.add_argument("--recipes", type=Path, default=None, help="recipes folder (default: recipes/)")
        if name == "fetch":
            continue
        q.add_argument("--torch", required=True, help="the torch release, e.g. 2.14.1")
        q.add_argument("--accelerator", required=True, help="cpu, cuda-X.Y or rocm-X.Y")
        q.add_argument("--archs", default="", help="sm_80,sm_90 or gfx90a,...")
        q.add_argument("--cxx11abi", choices=("TRUE", "FALSE"), default="TRUE", help="the C++ ABI (default TRUE)")
        q.add_argument("--label", default=None, help="local version label (default: from the cell)")
        if name == "prepare":
            q.add_argument("--out", type=Path, required=True, help="a new folder for the tree")
            q.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from builder.planning.recipes import RECIPES_DIR

    recipe = recipe_for(args.project, args.recipes or RECIPES_DIR)
    if args.recipe_command == "fetch":
        cache = SourceCache()
        print(cache.fetch_git(recipe.source) if isinstance(recipe.source, GitPin) else cache.fetch(recipe.source))
        return 0
    facts = facts_from_args(args)
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
