"""A recipe + one cell's facts -> a patched source tree and the environment its build runs with.

``prepare()`` unpacks the hash-checked sdist (builder.sourcing.sources) into a new folder, applies the
recipe's patches whose conditions the cell meets, in the recipe's order, and renders the build
env. Each build gets its own fresh tree; the cache only ever holds the archive, so no patch can
reach it. A patch that no longer applies raises :class:`~builder.errors.PatchError` naming the
recipe line, the patch, the edit and the file: that build fails, nothing is skipped silently.

``explain()`` says, without touching the network or the disk, which patches apply to a cell
and why (``python -m builder recipe explain``; the plan's ``--explain`` shows the same lines).

Fetching (builder.sourcing.sources), recipes (builder.sourcing.recipes) and relabelling (builder.verifying.wheels) stay
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
from builder.planning.matrix import ARCH_RE
from builder.sourcing.recipes import PLACEHOLDER_RE, CellFacts, Patch, Recipe, recipe_for
from builder.sourcing.sources import SourceCache

# ---------------------------------------------------------------------------
# Placeholders: the cell's facts, in the forms setup.py files want them.


def _cuda_sm(arch: str) -> tuple[str, str]:
    """sm_90a -> ("90a", "9.0a"): the compute/sm suffix and the TORCH_CUDA_ARCH_LIST form."""
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not m:
        raise RecipeError(f"{arch!r} is not a CUDA arch such as sm_80")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}", f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def placeholder_values(facts: CellFacts) -> dict[str, str]:
    """``${name}`` -> text for this cell. Arch-list placeholders exist only for cells of their kind."""
    for arch in facts.archs:
        prefix = {"cuda": "sm_", "rocm": "gfx"}.get(facts.kind)
        if not ARCH_RE.fullmatch(arch) or prefix is None or not arch.startswith(prefix):
            raise RecipeError(f"{facts.describe()}: {arch!r} is not a {facts.kind} architecture")
    values = {
        "label": facts.label,
        "cxx11abi": "TRUE" if facts.cxx11abi else "FALSE",
        "torch": facts.torch,
        "toolkit": facts.toolkit or "",
    }
    if facts.kind in ("cuda", "rocm") and not facts.archs:
        raise RecipeError(f"{facts.describe()}: a {facts.kind} build needs its architectures (none given)")
    if facts.kind == "cuda":
        sms = [_cuda_sm(a) for a in facts.archs]
        values["gencode"] = json.dumps([f for sm, _ in sms for f in ("-gencode", f"arch=compute_{sm},code=sm_{sm}")])
        values["cuda_arch_list"] = ";".join(dotted for _, dotted in sms)
    elif facts.kind == "rocm":
        values["offload_arch"] = json.dumps([f"--offload-arch={a}" for a in facts.archs])
    return values


def render(template: str, values: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        if m.group(1) not in values:  # the loader only lets kind-specific ones into patches of that kind
            raise RecipeError(f"${{{m.group(1)}}} has no value for this cell")
        return values[m.group(1)]

    return PLACEHOLDER_RE.sub(one, template)


# ---------------------------------------------------------------------------
# Which patches apply, and why.


@dataclass(frozen=True)
class Decision:
    patch: Patch
    applies: bool
    reasons: tuple[str, ...]


def decide(recipe: Recipe, facts: CellFacts) -> list[Decision]:
    out = []
    for patch in recipe.patches:
        ok, reasons = patch.when.check(facts)
        out.append(Decision(patch, ok, tuple(reasons)))
    return out


def supported(recipe: Recipe, facts: CellFacts) -> tuple[bool, str]:
    """(can the recipe build this cell at all, why not): the plan drops a cell that fails it."""
    ok, reasons = recipe.requires.check(facts)
    if ok:
        return True, ""
    why = f" ({recipe.requires_why})" if recipe.requires_why else ""
    return False, f"{recipe.name} {recipe.source.version} cannot be built for it: {'; '.join(reasons)}{why}"


def explain(recipe: Recipe, facts: CellFacts) -> list[str]:
    """Human lines: the source, the cell, each patch with applies/skipped and the reason, the env."""
    lines = [f"{recipe.name}: {recipe.source.describe()} ({recipe.path.name})", f"  cell: {facts.describe()}"]
    ok, why = supported(recipe, facts)
    if not ok:
        return [*lines, f"  refused: {why}"]
    for d in decide(recipe, facts):
        edits = f"{len(d.patch.edits)} edit{'s' if len(d.patch.edits) != 1 else ''}"
        verdict = "applies" if d.applies else "skipped"
        lines.append(f"  patch {d.patch.name} ({d.patch.file}, {edits}): {verdict}: {'; '.join(d.reasons)}")
    env = build_env_vars(recipe, facts)
    lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    if recipe.unset:
        lines.append("  unset: " + " ".join(recipe.unset))
    return lines


def build_env_vars(recipe: Recipe, facts: CellFacts) -> dict[str, str]:
    values = placeholder_values(facts)
    return {k: render(v, values) for k, v in recipe.env.items()}


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
    applied, skipped = [], []
    for d in decide(recipe, facts):
        if d.applies:
            apply_patch(tree, d.patch, values, recipe)
            applied.append(d.patch.name)
        else:
            skipped.append(d.patch.name)
    env = {k: render(v, values) for k, v in recipe.env.items()}
    return Prepared(tree, env, recipe.unset, tuple(applied), tuple(skipped), inputs(recipe, facts))


def inputs(recipe: Recipe, facts: CellFacts) -> dict:
    """What a build's inputs hash must cover, known without fetching: the plan can hash it."""
    return {
        "source": recipe.source.identity,
        "recipe_sha256": recipe.digest,
        "patches": [d.patch.name for d in decide(recipe, facts) if d.applies],
        "env": build_env_vars(recipe, facts),
        "unset": list(recipe.unset),
    }


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
    from builder.sourcing.recipes import RECIPES_DIR

    recipe = recipe_for(args.project, args.recipes or RECIPES_DIR)
    if args.recipe_command == "fetch":
        print(SourceCache().fetch(recipe.source))
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
