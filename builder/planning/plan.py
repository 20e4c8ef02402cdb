"""The build plan: matrix.toml -> cells -> [BuildSpec] + {ImageSpec}, and ``python -m builder plan``.

``load_plan()`` is what every later stage calls. A classic build serves one cell (``_group``); with the
stable ABI on, one stable-ABI build per accelerator and platform serves every cell it can (``_group_stable``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from builder.errors import MatrixError
from builder.facts import compat as compat_mod
from builder.facts import installs as installs_mod
from builder.facts import miscompiles
from builder.facts import preflight as preflight_record
from builder.facts.compat import Accelerator, Compat, image_setting_key, parse_accelerator, vtuple
from builder.facts.paths import REPO
from builder.facts.spec import BuildSpec, ImageSpec, stable_hash
from builder.facts.untrusted import unguarded
from builder.planning import releases as releases_mod
from builder.planning.matrix import (
    CHECKOUT,
    IMAGE_REF_RE,
    Cell,
    Dropped,
    Matrix,
    Profile,
    expand,
    load_matrix,
    native_abi,
    toolkit_source_for,
)
from builder.planning.recipes import CellFacts, Recipe, recipe_for, supported
from builder.planning.recipes import explain as explain_recipe
from builder.planning.recipes import inputs as prepare_inputs
from mamba_ssm.variant import Variant

DEFAULT_MATRIX = REPO / "matrix.toml"
# GitHub-hosted runners per platform, for --format github.
RUNNERS = {"linux_x86_64": "ubuntu-24.04", "linux_aarch64": "ubuntu-24.04-arm"}
GITHUB_MATRIX_LIMIT = 256  # jobs per matrix, GitHub's documented cap
# Build outputs that live next to sources but are not sources.
_SKIP_DIRS = {"__pycache__", "build", "dist", ".git", ".eggs"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".a", ".egg-info")
# The checkout's extension modules, inside its wheels: what the ABI and arch audits read.
CHECKOUT_EXTENSIONS = ("mamba_ssm/_C*.so",)


@dataclass(frozen=True)
class Plan:
    matrix: Matrix
    builds: list[BuildSpec]
    images: dict[str, ImageSpec]
    dropped: list[Dropped]
    cells: list[Cell] = field(default_factory=list)  # every cell the builds serve
    profile: Profile | None = None
    source_hash: str = ""
    stable: bool = False  # whether the stable-ABI collapse was on
    recipes: dict[str, Recipe] = field(default_factory=dict)  # project -> its recipe, for the recipe builds
    # a release plan's (profile releases = "all") left-out (release, cell) pairs, each with its reason (also in
    # dropped)
    release_dropped: list[releases_mod.LeftOut] = field(default_factory=list)
    by_variant: dict = field(default_factory=dict, compare=False, repr=False)  # served_cells' index, made once
    compat: Compat | None = field(default=None, compare=False, repr=False)  # the data it was planned with

    def recipe_of(self, spec: BuildSpec) -> Recipe | None:
        """The recipe SPEC is built from, at the release it builds (None: the checkout)."""
        if not spec.from_recipe:
            return None
        recipe = self.recipes[spec.project]
        if spec.source == recipe.source.identity:
            return recipe
        for r in recipe.releases:
            if r.source.identity == spec.source:
                return recipe.at_release(r.version)
        raise KeyError(f"{spec.id}: no release of {spec.project} is built from {spec.source}")

    def build(self, build_id: str) -> BuildSpec:
        for b in self.builds:
            if b.id == build_id:
                return b
        raise KeyError(build_id)


def load_plan(
    matrix_file: Path | None = None,
    profile: str | None = None,
    only: list[str] | None = None,
    stable: bool | None = None,
    projects: list[str] | None = None,
    compat: compat_mod.Compat | None = None,
    installs: bool = True,
    reasons: releases_mod.Reasons | None = None,
    releases: str | None = None,
) -> Plan:
    """Load, validate and expand matrix.toml into the plan. Raises MatrixError.

    stable: serve every cell a stable-ABI wheel can serve from one such build per
    accelerator and platform (see ``_group_stable``); the other cells stay classic.
    None: as the profile's stable_abi says, else the matrix's [plan] stable_abi.
    Every stage that takes build ids (build, render, --only) must load the plan with
    the same profile and setting, or the ids differ.
    projects: build these projects (CHECKOUT, recipe names) instead of the profile's.
    compat: the data to plan with (default: the files'; drift --write plans from its edit before writing it).
    installs: leave out the cells the installs record (builder/data/installs.json) says do not install
    (``builder installs`` itself plans every cell).
    reasons: for a profile with releases = "all", why a (project, version, torch, accelerator) cannot be built
    (builder.planning.releases.Reasons); None: the preflight's recorded outcomes (builder/data/preflight.toml,
    ``builder.facts.preflight.preflight_reason``) where the plan reads the records (``installs``), else nothing.
    releases: "pinned" or "all" in place of the profile's choice (the cost's before and after compare the two).
    """
    compat = compat or compat_mod.load()
    if reasons is None and installs:
        reasons = preflight_record.preflight_reason
    matrix = load_matrix(Path(matrix_file) if matrix_file else DEFAULT_MATRIX, compat)
    prof = matrix.profile(profile)
    if releases is not None and prof is not None:
        if releases not in releases_mod.RELEASES:
            raise MatrixError(f"releases {releases!r}: not one of {', '.join(releases_mod.RELEASES)}")
        prof = replace(prof, releases=releases)
    if stable is None:
        stable = prof.stable_abi if prof is not None and prof.stable_abi is not None else matrix.stable_abi
    cells, dropped = expand(matrix, compat, prof)
    _check_profile_archs(matrix, prof, cells)
    src = source_hash(matrix)
    chosen = _projects(matrix, prof, projects)
    source = prof.source if prof is not None else "release"  # a canary profile builds its recipes' [canary] pins
    recipes = {r.name: r.at(source) for r in (recipe_for(n, _recipes_dir(matrix)) for n in chosen if n != CHECKOUT)}
    record = installs_mod.load() if installs else None
    every = prof is not None and prof.releases == "all"
    recipe_cells = cells
    if every and matrix.releases.torch and recipes:  # the upstream lines' older torches: theirs alone
        torch = sorted({*matrix.releases.torch, *matrix.axes.torch}, key=vtuple)
        wider = replace(matrix, axes=replace(matrix.axes, torch=tuple(torch)))
        recipe_cells, older_dropped = expand(wider, compat, prof)
        known = {d.cell for d in dropped}
        dropped = [
            *dropped,
            *(d for d in older_dropped if d.cell.torch in matrix.releases.torch and d.cell not in known),
        ]
    builds, images, refused = _specs(
        matrix, compat, cells, prof, src, stable=stable, checkout=CHECKOUT in chosen, recipes=list(recipes.values()),
        record=record, recipe_cells=recipe_cells, reasons=reasons,
    )  # fmt: skip
    release_dropped = [d for d in refused if isinstance(d, releases_mod.LeftOut)]
    refused = [Dropped(d.cell, d.reason) if isinstance(d, releases_mod.LeftOut) else d for d in refused]
    dropped = [*dropped, *refused]
    if recipe_cells is not cells:
        seen = set(cells)
        cells = [*cells, *(c for c in recipe_cells if c not in seen)]
    if prof is not None and (prof.on_request or prof.releases == "all"):
        builds = _mark_on_request(builds, cells, prof, compat, recipes)
    if only:
        builds = _select(matrix, builds, only)
        needed = {b.image for b in builds}
        images = _images_for(builds, {k: v for k, v in images.items() if k in needed})
        cells = [c for c in cells if any(_serves(b, c, compat) for b in builds)]
    if not builds:
        raise _nothing_to_build(matrix, prof, dropped)
    return Plan(matrix, builds, images, dropped, cells, prof, src, stable, recipes, release_dropped, compat=compat)


def _mark_on_request(
    builds: list[BuildSpec], cells: list[Cell], prof: Profile, compat: Compat, recipes: dict[str, Recipe]
) -> list[BuildSpec]:
    """BUILDS with ``on_request`` set where the profile's ``on_request`` leaves every cell a build serves to a
    request (a stable build serving some prebuilt cell stays prebuilt), and where a build is of a release its
    recipe does not mark ``prebuilt`` (the pinned [source] release always is)."""
    out = []
    for b in builds:
        project = b.project if b.from_recipe else CHECKOUT
        served = [c for c in cells if _serves(b, c, compat)]
        asked = bool(served) and all(prof.built_on_request(project, c, native_abi(compat, c)) for c in served)
        if b.from_recipe and not asked:
            recipe = recipes[b.project]
            release = next((r for r in recipe.releases if r.source.identity == b.source), None)
            asked = b.source != recipe.source.identity and release is not None and not release.prebuilt
        out.append(replace(b, on_request=True) if asked else b)
    return out


def _recipes_dir(matrix: Matrix) -> Path:
    return matrix.recipes_dir or REPO / "recipes"


def _projects(matrix: Matrix, prof: Profile | None, projects: list[str] | None) -> tuple[str, ...]:
    """What the plan builds: --projects, else the profile's projects, else the checkout; each one known."""
    root = _recipes_dir(matrix)
    known = [CHECKOUT, *sorted(p.stem for p in root.glob("*.toml"))]
    chosen = tuple(dict.fromkeys(projects)) if projects else (prof.projects if prof is not None else (CHECKOUT,))
    for i, name in enumerate(chosen):
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        mean = f'; did you mean "{close[0]}"?' if close else ""
        message = f"no recipe {root / (name + '.toml')}{mean} (projects: {', '.join(known)})"
        if projects:
            raise MatrixError(
                f"--projects {json.dumps(name)}: {message}", hint=f"add the recipe, or use one of: {', '.join(known)}"
            )
        raise matrix.error(("profiles", prof.name, "projects", i), message)
    return chosen


# A plan that leaves nothing lists this many dropped combinations, with their reasons, in its error.
EXPLAIN_INLINE = 10


def _nothing_to_build(matrix: Matrix, prof: Profile | None, dropped: list[Dropped]) -> MatrixError:
    """The error for a plan with no build: why each combination was dropped, when they are few;
    else where to see them (``plan --explain`` lists them even then: the error carries them)."""
    scope = f"profile {prof.name!r} selects" if prof else "the matrix leaves"
    path = ("profiles", prof.name) if prof else ("axes",)
    message = f"nothing to build: {scope} no buildable combination ({len(dropped)} dropped)"
    if not dropped:
        hint = "no combination was dropped: the axes (and the profile's keys) select none; widen them"
    elif len(dropped) <= EXPLAIN_INLINE:
        message += ":\n" + dropped_lines(dropped)
        hint = None
    else:
        hint = "rerun the plan with --explain to see what was dropped and why"
    err = matrix.error(path, message, hint=hint)
    err.dropped = dropped  # for --explain (_run)
    return err


def dropped_lines(dropped: list[Dropped]) -> str:
    return "\n".join(f"  {cell.describe()}: {reason}" for cell, reason in dropped)


# ---------------------------------------------------------------------------


def source_hash(matrix: Matrix) -> str:
    """One hash of every source file the wheel is built from (computed once per plan)."""
    root = matrix.root
    h = hashlib.sha256()
    for rel in sorted(set(matrix.package.sources)):
        top = root / rel
        if top.is_file():
            files = [top]
        elif top.is_dir():
            files = []
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
                files += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith(_SKIP_SUFFIXES)]
        else:
            h.update(f"missing:{rel}\0".encode())
            continue
        for f in files:
            try:
                data = f.read_bytes()
            except OSError:
                continue
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _variant(cell: Cell, acc: Accelerator) -> Variant:
    backend = acc.kind
    return Variant(
        torch=cell.torch,
        backend=backend,
        backend_version=acc.toolkit,
        cxx11abi=cell.cxx11abi,
        python="cp" + cell.python.replace(".", ""),
        platform=cell.platform,
    )


def _cell_variant(cell: Cell, compat: Compat) -> str:
    return _variant(cell, parse_accelerator(cell.accelerator)).key


def _group(cells: list[Cell]) -> list[tuple[Cell, tuple[Cell, ...]]]:
    """Builds and the cells each serves. One build per cell until stable-ABI builds exist."""
    return [(c, (c,)) for c in cells]


# --- stable-ABI collapse ------------------------------------------------------------
# A stable-ABI wheel (setup.py with MAMBA_STABLE_ABI=TRUE) is cp310-abi3, requires
# torch >= the floor and serves both C++ ABIs, so one build per accelerator and
# platform serves every such cell. Its floors and backends (CPU and CUDA: setup.py
# refuses a stable ROCm build) are mamba_build/build.toml's [stable], read by compat.


def stable_floor() -> str:
    return compat_mod.load().stable_floor


def _stable_eligible(cell: Cell, acc: Accelerator, compat: Compat) -> bool:
    return (
        acc.kind in compat.stable_kinds
        and vtuple(cell.torch) >= vtuple(compat.stable_floor)
        and vtuple(cell.python) >= vtuple(compat.stable_python)
    )


def _group_stable(
    cells: list[Cell], accs: dict[str, Accelerator], compat: Compat
) -> list[tuple[Cell, tuple[Cell, ...], bool]]:
    """(build cell, cells served, stable?): a stable build per (accelerator, platform) for the
    cells it can serve, built in one of them (the abi3 tag's Python where a cell has it, newest torch,
    oldest Python, its native ABI);
    a classic build per remaining cell."""
    pools: dict[tuple[str, str], list[Cell]] = {}
    groups: list[tuple[Cell, tuple[Cell, ...], bool]] = []
    for c in cells:
        if _stable_eligible(c, accs[c.accelerator], compat):
            pools.setdefault((c.accelerator, c.platform), []).append(c)
        else:
            groups.append((c, (c,), False))
    for served in pools.values():
        # The abi3 tag's own Python first (torch 2.15 has no cp310 wheel: the build stays on the newest
        # torch that has one, and the canary in tests/test_stable_abi.py runs the wheel under newer ones).
        build = min(served, key=lambda c: (c.python != compat.stable_python, tuple(-x for x in vtuple(c.torch)),
                                           vtuple(c.python), not c.cxx11abi))  # fmt: skip
        groups.append((build, tuple(served), True))
    # Each accelerator's classic builds, then its stable build (per platform).
    return sorted(groups, key=lambda g: (g[0].sort_key()[:2], g[2], g[0].sort_key()))


def _serves(b: BuildSpec, cell: Cell, compat: Compat) -> bool:
    """Whether build B serves CELL (a stable build: any Python of its variants; classic: its own)."""
    if cell.platform != b.platform or _cell_variant(cell, compat) not in (b.serves or (b.variant,)):
        return False
    return b.stable or cell.python == b.python


def served_cells(plan: Plan, b: BuildSpec) -> list[Cell]:
    """The plan's cells build B serves (the plan's cells indexed once by platform and variant)."""
    if not plan.by_variant:
        compat = plan.compat or compat_mod.load()
        for c in plan.cells:
            plan.by_variant.setdefault((c.platform, _cell_variant(c, compat)), []).append(c)
    keys = b.serves or (b.variant,)
    return [c for k in dict.fromkeys(keys) for c in plan.by_variant.get((b.platform, k), ())
            if b.stable or c.python == b.python]  # fmt: skip


@dataclass(frozen=True)
class _Toolchain:
    kind: str
    base: str
    toolkit: str | None
    toolkit_source: str
    platform: str
    extra: tuple  # sorted (key, value) pairs for the template


def _toolchain(matrix: Matrix, compat: Compat, acc: Accelerator, platform: str, torch: str) -> tuple[_Toolchain, str]:
    """The toolchain an accelerator builds in on PLATFORM, and the build's manylinux target."""
    source = "none" if acc.kind == "cpu" else toolkit_source_for(matrix, compat, acc)
    setting = matrix.images[image_setting_key(acc.kind, source)]
    suite = compat.debian_suite(acc) if source == "debian" else None
    full = compat.toolkit_full(acc)
    base = setting.base.format(
        arch=platform.removeprefix("linux_"),
        toolkit=acc.toolkit or "",
        toolkit_full=full or "",
        debian_suite=suite or "",
    )
    key = image_setting_key(acc.kind, source)
    if not IMAGE_REF_RE.fullmatch(base):  # the template was checked with sample values; check the real one
        raise matrix.error(("images", key, "base"), f"{json.dumps(base)} is not a container image reference")
    glibc = setting.glibc or compat.debian_glibc.get(suite or "", "2.28")
    extra = {"glibc": glibc}
    if full:
        extra["toolkit_full"] = full
    if suite:
        extra["debian_suite"] = suite
    if compat.hip_bf16_patch(acc):
        extra["hip_bf16_patch"] = True
    tc = _Toolchain(acc.kind, base, acc.toolkit, source, platform, tuple(sorted(extra.items())))
    return tc, compat.manylinux(torch, platform, glibc)


def _image_id(tc: _Toolchain) -> str:
    # Pythons are left out on purpose: a profile that needs fewer Pythons gets the same
    # image id, so build ids and inputs hashes do not depend on the profile.
    digest = stable_hash([tc.kind, tc.base, tc.toolkit, tc.toolkit_source, tc.platform, list(tc.extra)], 8)
    return f"{tc.kind}{tc.toolkit or ''}-{tc.platform.removeprefix('linux_')}-{digest}"


def _check_profile_archs(matrix: Matrix, prof: Profile | None, cells: list[Cell]) -> None:
    """A profile's arch of a kind none of its cells builds would be ignored (that kind's default list kept)."""
    if prof is None or not prof.archs or not cells:
        return
    kinds = {parse_accelerator(a).kind for a in {c.accelerator for c in cells}}
    for i, arch in enumerate(prof.archs):
        kind = "cuda" if arch.startswith("sm_") else "rocm"
        if kind not in kinds:
            raise matrix.error(
                ("profiles", prof.name, "archs", i),
                f"{arch} is a {kind} architecture, but profile {prof.name} builds no {kind} cell "
                f"({', '.join(sorted(kinds))} only): it would be ignored",
                hint=f"give the {'gfx' if kind == 'cuda' else 'sm_'}* architectures its builds compile for, "
                "or drop archs to keep the defaults",
            )


def _archs(matrix: Matrix, compat: Compat, acc: Accelerator, prof: Profile | None) -> tuple[str, ...]:
    default = compat.default_archs(acc)
    if prof is None or not prof.archs or acc.kind == "cpu":
        return default
    prefix = "sm_" if acc.kind == "cuda" else "gfx"
    wanted = tuple(a for a in prof.archs if a.startswith(prefix))
    if not wanted:
        return default
    for i, arch in enumerate(prof.archs):
        if arch.startswith(prefix) and not compat.can_compile(acc, arch):
            raise matrix.error(
                ("profiles", prof.name, "archs", i),
                f"{arch} is not an architecture {acc.name} compiles for (defaults: {', '.join(default)})",
            )
    return wanted


class _CellFields:
    """Everything of a build but its id, per cell: its toolchain (one per accelerator, platform and torch,
    made once), torch and target; ``images`` collects the toolchain of every image id handed out."""

    def __init__(self, matrix: Matrix, compat: Compat, cells: list[Cell], prof: Profile | None) -> None:
        self.matrix, self.compat = matrix, compat
        self.accs = {name: parse_accelerator(name) for name in {c.accelerator for c in cells}}
        self.archs = {name: _archs(matrix, compat, acc, prof) for name, acc in self.accs.items()}
        self.toolchains: dict[tuple, tuple[_Toolchain, str, str]] = {}
        self.images: dict[str, _Toolchain] = {}

    def __call__(self, cell: Cell, variant: Variant) -> dict:
        matrix, compat, acc = self.matrix, self.compat, self.accs[cell.accelerator]
        key = (cell.accelerator, cell.platform, cell.torch)
        if key not in self.toolchains:
            tc, manylinux = _toolchain(matrix, compat, acc, cell.platform, cell.torch)
            self.toolchains[key] = (tc, manylinux, _image_id(tc))
        tc, manylinux, image_id = self.toolchains[key]
        self.images[image_id] = tc
        install = compat.torch_install(cell.torch, acc, cell.platform, prefer_pypi=matrix.prefer_pypi)
        row = compat.torch[cell.torch]
        index_url = matrix.torch_index_url.format(variant=install.index_variant) if install.index_variant else ""
        return {
            "torch": cell.torch,
            "torch_version": row.latest,
            "python": cell.python,
            "accelerator": variant.accelerator,
            "toolkit": acc.toolkit,
            "cxx11abi": cell.cxx11abi,
            "platform": cell.platform,
            "variant": variant.key,
            "label": variant.label,
            "archs": self.archs[cell.accelerator],
            "image": image_id,
            "torch_index_url": index_url,
            "cxx_std": row.cxx_std,
            "manylinux": manylinux,
            "abi_native": cell.cxx11abi in row.cxx11abi,
        }


def _specs(
    matrix: Matrix,
    compat: Compat,
    cells: list[Cell],
    prof: Profile | None,
    src: str,
    stable: bool = False,
    checkout: bool = True,
    recipes: list[Recipe] | None = None,
    record: installs_mod.Installs | None = None,
    recipe_cells: list[Cell] | None = None,
    reasons: releases_mod.Reasons | None = None,
) -> tuple[list[BuildSpec], dict[str, ImageSpec], list[Dropped | releases_mod.LeftOut]]:
    recipe_cells = cells if recipe_cells is None else recipe_cells
    cell_fields = _CellFields(matrix, compat, [*cells, *recipe_cells], prof)
    builds = _checkout_builds(matrix, compat, cells, src, stable, cell_fields) if checkout else []
    dropped: list[Dropped | releases_mod.LeftOut] = []
    every = prof is not None and prof.releases == "all"
    minors = tuple(dict.fromkeys(c.torch for c in recipe_cells))
    # A recipe's builds: one classic build per cell it supports (third-party code has no stable-ABI build); a
    # release plan's, per release, one per cell of the release's era.
    for recipe in recipes or ():
        for at in releases_mod.selected(recipe, prof.releases if prof is not None else "pinned"):
            rel = releases_mod.release_of(at) if every else None
            ours = set(releases_mod.era(rel, compat, minors, matrix.releases.era)) if rel is not None else None
            if ours is not None and at.source.version == recipe.source.version:
                ours |= set(matrix.axes.torch)  # the pinned release keeps every cell it had before the release axis
            for cell in recipe_cells:
                if ours is not None and cell.torch not in ours:
                    continue  # outside the release's era: no cell of its grid
                built = _recipe_build(at, cell, prof, record, cell_fields, reasons=reasons if every else None,
                                      versioned=at.source.version != recipe.source.version, left_out=every)  # fmt: skip
                (builds if isinstance(built, BuildSpec) else dropped).append(built)
    ids = [b.id for b in builds]
    if len(set(ids)) != len(ids):  # pragma: no cover - guarded by the accelerator label check
        raise MatrixError(f"{matrix.path}: two builds share an id; check axes.accelerator")
    images = {
        iid: ImageSpec(
            id=iid,
            kind=tc.kind,
            base=tc.base,
            platform=tc.platform,
            toolkit=tc.toolkit,
            toolkit_source=tc.toolkit_source,
            pythons=(),
            template=f"docker/{tc.kind}.Dockerfile.j2",
            extra=dict(tc.extra),
        )
        for iid, tc in cell_fields.images.items()
    }
    return builds, _images_for(builds, images), dropped


def _checkout_builds(
    matrix: Matrix, compat: Compat, cells: list[Cell], src: str, stable: bool, cell_fields: _CellFields
) -> list[BuildSpec]:
    """This checkout's builds: one per cell, or (STABLE) one stable-ABI build serving every cell it can."""
    accs, builds = cell_fields.accs, []
    groups = _group_stable(cells, accs, compat) if stable else [(c, cs, False) for c, cs in _group(cells)]
    for cell, serves, is_stable in groups:
        acc = accs[cell.accelerator]
        variant = _variant(cell, acc).as_stable() if is_stable else _variant(cell, acc)
        fields = {"id": f"{variant.key}-{variant.python}-{cell.platform}", **cell_fields(cell, variant)}
        if is_stable:  # built against the newest torch it serves; serves every variant key of its cells
            fields.update(torch="stable", stable=True, serves=tuple(sorted({_variant(c, acc).key for c in serves})))
        hashed = {k: v for k, v in fields.items() if k not in ("id", "stable", "serves")}
        if is_stable:
            hashed["stable"] = True
        hashed.update(
            archs=list(fields["archs"]),
            package=matrix.package.name,
            package_version=matrix.package.version,
            sources=src,
            serves=[_variant(c, acc).key for c in serves],
        )
        builds.append(
            BuildSpec(**fields, project=canonicalize_name(matrix.package.name), extensions=CHECKOUT_EXTENSIONS,
                      inputs_hash=stable_hash(hashed, 16))
        )  # fmt: skip
    return builds


def _recipe_build(
    recipe: Recipe,
    cell: Cell,
    prof: Profile | None,
    record: installs_mod.Installs | None,
    cell_fields: _CellFields,
    reasons: releases_mod.Reasons | None = None,
    versioned: bool = False,
    left_out: bool = False,
) -> BuildSpec | Dropped | releases_mod.LeftOut:
    """RECIPE's build of CELL, or why the cell is left out (the recipe does not support it, the preflight's
    recorded outcome says it cannot be built (REASONS), or its wheel would not install beside the cell's torch).
    VERSIONED: the id names the release (a release plan's releases other than [source]). LEFT_OUT: a cell the
    recipe supports but leaves out is a LeftOut, a (release, cell) of the release plan's grid."""
    acc = cell_fields.accs[cell.accelerator]
    variant = _variant(cell, acc)
    fields = cell_fields(cell, variant)
    trim = prof is not None and prof.trim
    source = prof.source if prof is not None else "release"  # a canary profile builds its recipes' [canary] pins
    facts = CellFacts(
        fields["torch_version"], acc.kind, acc.toolkit, cell.cxx11abi, fields["archs"], variant.label, trim, source
    )
    ok, why = supported(recipe, facts)
    if not ok:
        return Dropped(cell, why)
    version = recipe.source.version

    def gone(why: str) -> Dropped | releases_mod.LeftOut:
        return releases_mod.LeftOut(recipe.name, version, cell, why) if left_out else Dropped(cell, why)

    if reasons is not None and (refused := reasons(recipe.name, version, fields["torch_version"], cell.accelerator)):
        return gone(f"{recipe.name} {version} cannot be built beside torch {fields['torch_version']}: {refused}")
    outcome = record.outcome(recipe.name, version, fields["torch_version"], cell.python, cell.platform) \
        if record is not None else None  # fmt: skip
    if outcome is not None and outcome.installs is False:
        return gone(f"{recipe.name} {version} does not install beside torch "
                    f"{fields['torch_version']}: {outcome.describe().split(': ', 1)[1]}")  # fmt: skip
    # GPU code a toolkit is known to compile wrong is never built: another arch's code serves that GPU
    fields["archs"] = miscompiles.apply(recipe.name, version, acc.toolkit, tuple(fields["archs"]))
    facts = CellFacts(
        fields["torch_version"], acc.kind, acc.toolkit, cell.cxx11abi, fields["archs"], variant.label, source=source
    )
    recipe_inputs = prepare_inputs(recipe, facts)
    fields.update(
        id=f"{recipe.name}-{version + '-' if versioned else ''}{variant.key}-{variant.python}-{cell.platform}",
        project=recipe.name,
        source=recipe.source.identity,
        extensions=recipe.extensions,
        env=tuple(recipe_inputs["env"].items()),
        unset=tuple(recipe_inputs["unset"]),
        trim=trim,
    )
    # trim is hashed only where set: a full build's hash does not depend on the field
    hashed = {k: v for k, v in fields.items() if k != "id" and (k != "trim" or trim)}
    hashed.update(package_version=recipe.source.version, recipe=recipe_inputs)
    return BuildSpec(**fields, inputs_hash=stable_hash(hashed, 16))


def _images_for(builds: list[BuildSpec], images: dict[str, ImageSpec]) -> dict[str, ImageSpec]:
    """IMAGES with each one's Pythons set to exactly what BUILDS need of it."""
    pythons: dict[str, set] = {}
    for b in builds:
        pythons.setdefault(b.image, set()).add(b.python)
    out = {}
    for iid in sorted(pythons):
        im = images[iid]
        out[iid] = ImageSpec(
            id=im.id,
            kind=im.kind,
            base=im.base,
            platform=im.platform,
            toolkit=im.toolkit,
            toolkit_source=im.toolkit_source,
            pythons=tuple(sorted(pythons[iid], key=vtuple)),
            template=im.template,
            extra=dict(im.extra),
        )
    return out


def _select(matrix: Matrix, builds: list[BuildSpec], only: list[str]) -> list[BuildSpec]:
    by_id = {b.id: b for b in builds}
    for want in only:
        if want not in by_id:
            close = difflib.get_close_matches(want, list(by_id), n=5, cutoff=0.6)
            near = f"; near matches: {', '.join(close)}" if close else ""
            raise MatrixError(
                f"{matrix.path}: --only {json.dumps(want)}: no such build in this plan{near}",
                hint="list the ids with `python -m builder plan --format json` (same --profile)",
            )
    wanted = set(only)
    return [b for b in builds if b.id in wanted]


def github_jobs(builds: list[BuildSpec]) -> list[dict]:
    """The release's build jobs, in plan order: one per build, but one per compile group for the classic
    CUDA builds, which share compiled kernels across Pythons (a recipe's through ccache, the checkout's through the
    image's kernel cache): all its Pythons in one `build --only`, since a job restores no cache another
    workflow can write, so sharing compiled objects happens inside one job. ``id`` names the job and its
    artifacts (the group's name for a group); ``ids`` lists the builds it makes, space-separated."""
    groups: dict[str, list[BuildSpec]] = {}
    for b in builds:
        groups.setdefault(b.compile_group if b.accelerator.startswith("cu") and not b.stable else b.id, []).append(b)
    jobs = []
    for name, members in groups.items():
        job = github_job(members[0])
        job.update(id=name, ids=" ".join(m.id for m in members), python=" ".join(m.python for m in members))
        jobs.append(job)
    return jobs


def github_job(b: BuildSpec) -> dict:
    """One build's job entry (its group's fields other than the Pythons are the same: see github_jobs)."""
    return {
        "id": b.id,
        "ids": b.id,
        "project": b.project,
        "farm_project": b.project if b.from_recipe else CHECKOUT,  # what --projects calls it
        "variant": b.variant,
        "torch": b.torch,
        "torch_version": b.torch_version,
        "python": b.python,
        "accelerator": b.accelerator,
        "toolkit": b.toolkit or "",
        "platform": b.platform,
        "image": b.image,
        "runs_on": RUNNERS[b.platform],
    }


def summary(plan: Plan) -> str:
    scope = f" (profile {plan.profile.name})" if plan.profile else ""
    stable = sum(b.stable for b in plan.builds)
    kinds = f" ({stable} stable-ABI)" if stable else ""
    asked = sum(b.on_request for b in plan.builds)
    on_request = f" ({len(plan.builds) - asked} prebuilt, {asked} on request)" if asked else ""
    jobs = github_jobs([b for b in plan.builds if not b.on_request])  # what a tag's release runs
    per = {p: sum(j["platform"] == p for j in jobs) for p in RUNNERS}
    matrices = sum(-(-n // GITHUB_MATRIX_LIMIT) for n in per.values())
    return (
        f"{len(plan.builds)} builds{kinds}{on_request} serving {len(plan.cells)} cells, {len(plan.images)} images, "
        f"dropped {len(plan.dropped)}{scope}; a release runs them as {len(jobs)} jobs in {matrices} "
        f"matri{'ces' if matrices != 1 else 'x'} of at most {GITHUB_MATRIX_LIMIT}"
    )


def _archs_short(archs: tuple[str, ...]) -> str:
    if len(archs) <= 3:
        return ",".join(archs) or "-"
    return f"{archs[0]}..{archs[-1]} ({len(archs)})"


def print_table(plan: Plan) -> None:
    from rich.console import Console
    from rich.table import Table

    width = None if sys.stdout.isatty() else 240
    console = Console(file=unguarded(sys.stdout), width=width, soft_wrap=False, highlight=False)  # its own styles
    table = Table(title=f"build plan: {plan.matrix.path.name}", show_lines=False, pad_edge=False)
    for col in ("id", "torch", "toolkit", "archs", "torch from", "manylinux", "image", "serves", "installs"):
        table.add_column(col, no_wrap=True)
    record = installs_mod.load()
    for b in plan.builds:
        source = b.torch_index_url.rstrip("/").rsplit("/", 1)[-1] if b.torch_index_url else "PyPI"
        row = [b.id, b.torch_version, b.toolkit or "-", _archs_short(b.archs), source, b.manylinux, b.image]
        table.add_row(*row, _serves_short(plan, b), _installs_short(plan, b, record))
    console.print(table)
    console.print(summary(plan))
    console.print(installs_summary(plan, record))


def cell_outcomes(plan: Plan, b: BuildSpec, record: installs_mod.Installs) -> list[installs_mod.InstallRecord | None]:
    """The recorded install outcome of each cell build B serves (None: never resolved)."""
    compat = plan.compat or compat_mod.load()
    version = plan.recipe_of(b).source.version if b.from_recipe else plan.matrix.package.version
    return [record.outcome(b.project, version, compat.torch[c.torch].latest, c.python, c.platform)
            for c in served_cells(plan, b)]  # fmt: skip


def _installs_short(plan: Plan, b: BuildSpec, record: installs_mod.Installs) -> str:
    found = cell_outcomes(plan, b, record)
    if len(found) == 1:
        o = found[0]
        return "unresolved" if o is None or o.installs is None else f"glibc {o.floor}" if o.installs else "no"
    ok = sum(1 for o in found if o is not None and o.installs)
    floors = sorted({o.floor for o in found if o is not None and o.installs}, key=vtuple)
    return f"{ok}/{len(found)}" + (f" (glibc {floors[-1]})" if floors else "")


def installs_summary(plan: Plan, record: installs_mod.Installs) -> str:
    """Per line (project), how many of the plan's cells are recorded to install, and the cells left out."""
    lines = []
    by: dict[str, list] = {}
    for b in plan.builds:
        by.setdefault(f"{b.project} ({'upstream' if b.from_recipe else 'this checkout'})", []).extend(
            cell_outcomes(plan, b, record)
        )
    left = {}
    for cell, reason in plan.dropped:
        if " does not install beside torch " in reason:
            project = reason.split(" ", 1)[0]
            left[project] = left.get(project, 0) + 1
    for line, found in sorted(by.items()):
        ok = sum(1 for o in found if o is not None and o.installs)
        unresolved = sum(1 for o in found if o is None)
        unknown = sum(1 for o in found if o is not None and o.installs is None)
        project = line.split(" ", 1)[0]
        more = f", {unresolved} never resolved" if unresolved else ""
        more += f", {unknown} not resolvable here (no torch of theirs on PyPI to stand in)" if unknown else ""
        # only a recipe's cells are left out so (this checkout's wheels require torch alone)
        gone = f"; {left[project]} left out (they do not install)" if left.get(project) and "(upstream)" in line else ""
        lines.append(f"installs: {line}: {ok} of {len(found)} planned cells resolve beside their torch{more}{gone}")
    return "\n".join(lines)


def _serves_short(plan: Plan, b: BuildSpec) -> str:
    if not b.stable:
        return "1 cell"
    cells = served_cells(plan, b)
    torches = sorted({c.torch for c in cells}, key=vtuple)
    pythons = sorted({c.python for c in cells}, key=vtuple)

    def span(v: list) -> str:
        return v[0] if len(v) == 1 else f"{v[0]}..{v[-1]}"

    n, v = len(cells), len(b.serves)
    return f"{n} cell{'s' * (n != 1)}: torch {span(torches)} x py{span(pythons)} ({v} variant{'s' * (v != 1)})"


def print_explanation(plan: Plan, out) -> None:
    for b in plan.builds:
        if (recipe := plan.recipe_of(b)) is not None:  # the recipe's patches, env and unset for this cell
            print(f"{b.id}:", file=out)
            for line in explain_recipe(recipe, CellFacts.from_spec(b)):
                print(f"  {line}", file=out)
        if b.stable:
            cells = served_cells(plan, b)
            print(f"{b.id} serves {len(cells)} cell(s):", file=out)
            for c in cells:
                print(f"  {c.describe()}", file=out)
    print(f"dropped {len(plan.dropped)} combination(s):", file=out)
    if plan.dropped:
        print(dropped_lines(plan.dropped), file=out)
