"""A recipe + one cell's facts -> a fresh patched source tree and the environment its build runs with.

``prepare()`` unpacks the hash-checked archive into a new folder (the cache holds only the archive),
applies the patches the cell meets, in order, and renders the env. A patch that no longer applies is a
:class:`~builder.errors.PatchError` naming recipe line, patch, edit and file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import PatchError, RecipeError, UsageError
from builder.facts.untrusted import Untrusted, read_regular
from builder.planning.recipes import (
    CellFacts,
    Patch,
    Recipe,
    build_env_vars,
    decide,
    inputs,
    placeholder_values,
    render,
    supported,
)
from builder.sourcing.reproducible import sdist_epoch
from builder.sourcing.sources import SourceCache

# ---------------------------------------------------------------------------
# Applying.

MAX_PATCHED_BYTES = 64 << 20  # a patched source file, before and after (setup.py and its kin: a few hundred kB)


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
        text = read_regular(target, MAX_PATCHED_BYTES, f"{tree.name}/{patch.file}").decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(f"{where}: {tree.name}/{patch.file} is not UTF-8 text", hint=hint) from None
    except Untrusted as err:
        raise PatchError(f"{where}: {err}", hint=hint) from None
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
        new = render(edit.replace, values)
        size = len(text.encode()) + found * (len(new.encode()) - len(edit.search.encode()))
        if size > MAX_PATCHED_BYTES:  # told before the text is made: a replacement repeated a million times
            raise PatchError(f"{where}: edit #{k} would make {patch.file} {size} bytes, over the cap of "
                             f"{MAX_PATCHED_BYTES >> 20} MiB for a patched file", hint=hint)  # fmt: skip
        text = text.replace(edit.search, new)
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
    values = placeholder_values(facts, recipe.source.version)
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
    env = build_env_vars(recipe, facts)
    return Prepared(tree, env, recipe.unset, tuple(applied), tuple(skipped), inputs(recipe, facts), epoch)


# ---------------------------------------------------------------------------
# The cell a recipe is explained or prepared for (`python -m builder recipe explain|prepare`).


def _label(facts: CellFacts) -> str:
    major, minor = (facts.toolkit or "0.0").split(".")[:2]
    acc = {"cpu": "cpu", "cuda": f"cu{int(major)}", "rocm": f"hip{int(major)}{int(minor)}"}[facts.kind]
    mm = ".".join(facts.torch.split(".")[:2])
    return f"{acc}torch{mm}cxx11abi{'TRUE' if facts.cxx11abi else 'FALSE'}"


def cell_facts(
    torch: str, accelerator: str, archs: str, cxx11abi: bool, label: str | None, trim: bool = False
) -> CellFacts:
    """The cell a recipe is explained or prepared for, from the command's values (UsageError naming the flag)."""
    acc = accelerator
    m = re.fullmatch(r"(cuda|rocm)-(\d{1,2}\.\d{1,2})", acc)
    if not (m or acc == "cpu"):
        raise UsageError(f"--accelerator {acc!r}: expected cpu, cuda-X.Y or rocm-X.Y")
    if not re.fullmatch(r"\d+\.\d+\.\d+", torch):
        raise UsageError(f"--torch {torch!r}: give the exact release, e.g. 2.14.1")
    archs = tuple(a for a in re.split(r"[,\s]+", archs or "") if a)
    facts = CellFacts(torch, m.group(1) if m else "cpu", m.group(2) if m else None, cxx11abi, archs)
    return CellFacts(facts.torch, facts.kind, facts.toolkit, facts.cxx11abi, archs, label or _label(facts), trim)
