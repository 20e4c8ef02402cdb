"""The release axis: which of a recipe's releases a plan builds, and beside which torch minors.

A profile with ``releases = "all"`` (matrix.toml) plans every release of each recipe (its ``[[release]]`` tables,
:class:`~builder.planning.recipes.Release`); any other plans the ``[source]`` release alone, as before. A release
is planned beside the torch minors of its era: from ``[releases] era`` minors before the newest torch released on
or before the release's upload day (``released`` in ``builder/data/torch.toml``, recorded by ``drift``), up to the
newest minor of the axis. The upstream lines' axis is ``[releases] torch`` (older minors, theirs alone) and
``[axes] torch``; the pinned release ([source]) keeps every minor of ``[axes] torch`` too, as it had before.

Within its era a (release, cell) is left out only for a reason an attempt gave: the recipe cannot build the cell
(its ``[requires]``), the installs record says its wheel does not install beside that torch, or ``reasons``, the
preflight's recorded outcome for (project, version, torch, accelerator), says so. With no ``reasons`` given,
nothing is left out for that cause; a cell never tried is planned, never left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packaging.version import Version

from builder.facts.compat import Compat, vtuple
from builder.planning.recipes import Recipe, Release

# (project, version, torch release "2.8.0", accelerator "cuda-12.9") -> why that release cannot be built for it
# (the preflight's recorded outcome), or None
Reasons = Callable[[str, str, str, str], "str | None"]

RELEASES = ("pinned", "all")  # a profile's choice


def era(release: Release, compat: Compat, minors: Sequence[str], back: int) -> tuple[str, ...]:
    """The torch minors of MINORS (any order) that RELEASE is planned beside, oldest first: from BACK minors before
    the newest one released on or before its upload day, up to the newest. A release older than every minor's
    release day starts at the oldest; a row with no release day counts as released after every release."""
    ordered = sorted(set(minors), key=vtuple)
    by_then = [
        i for i, m in enumerate(ordered) if compat.torch[m].released and compat.torch[m].released <= release.uploaded
    ]
    start = max(0, by_then[-1] - back) if by_then else 0
    return tuple(ordered[start:])


def selected(recipe: Recipe, releases: str) -> tuple[Recipe, ...]:
    """The recipe at each release the profile's choice builds, oldest first: every [[release]] (``"all"``), or
    the recipe as its [source] pins it (``"pinned"``, or a recipe that lists no releases)."""
    if releases != "all" or not recipe.releases:
        return (recipe,)
    return tuple(recipe.at_release(r.version) for r in recipe.releases)


def release_of(recipe: Recipe) -> Release | None:
    """The [[release]] RECIPE (a recipe at one release) builds, matched by version; None when it lists none."""
    return next((r for r in recipe.releases if r.version == recipe.source.version), None)


@dataclass(frozen=True)
class GridCell:
    """One (release, torch minor) of a line's grid: how many of its cells are planned, and why the others are
    left out (their distinct reasons)."""

    planned: int
    left_out: int
    reasons: tuple[str, ...]


def grid(plan) -> dict[str, dict[str, dict[str, GridCell]]]:
    """project -> version -> torch minor -> GridCell, for the plan's recipe lines: what it builds and what it
    leaves out, per (release, torch). Only the eras' cells appear: a torch outside a release's era is no cell."""
    planned: dict[tuple[str, str, str], int] = {}
    for b in plan.builds:
        if b.from_recipe:
            key = (b.project, plan.recipe_of(b).source.version, b.torch)
            planned[key] = planned.get(key, 0) + 1
    left: dict[tuple[str, str, str], list[str]] = {}
    for d in plan.release_dropped:
        left.setdefault((d.project, d.version, d.cell.torch), []).append(d.reason)
    out: dict[str, dict[str, dict[str, GridCell]]] = {}
    for key in sorted({*planned, *left}, key=lambda k: (k[0], Version(k[1]), vtuple(k[2]))):
        project, version, torch = key
        reasons = tuple(dict.fromkeys(left.get(key, ())))
        cell = GridCell(planned.get(key, 0), len(left.get(key, ())), reasons)
        out.setdefault(project, {}).setdefault(version, {})[torch] = cell
    return out


@dataclass(frozen=True)
class LeftOut:
    """A (release, cell) of a release's era that the plan leaves out, and the reason an attempt gave."""

    project: str
    version: str
    cell: object  # builder.planning.matrix.Cell
    reason: str


def summary_lines(plan) -> list[str]:
    """Per recipe line: its releases, the (release, torch) pairs of their eras, the builds planned and the cells
    left out (with their reasons, in ``plan --explain``)."""
    lines = []
    for project, versions in grid(plan).items():
        pairs = [c for by_torch in versions.values() for c in by_torch.values()]
        whole = sum(1 for c in pairs if not c.planned)
        lines.append(f"releases: {project}: {len(versions)} release(s), {len(pairs)} (release, torch) pair(s), "
                     f"{sum(c.planned for c in pairs)} build(s); {sum(c.left_out for c in pairs)} cell(s) left out "
                     f"with their reasons ({whole} pair(s) wholly)")  # fmt: skip
    return lines
