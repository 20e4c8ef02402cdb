"""The coverage page (OUT/index.html): per project, which torch x accelerator x Python x ABI cells have a wheel.

Pure: takes the index model, returns HTML. The layout lives in templates/coverage.html.j2.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import jinja2

from builder.facts import paths
from builder.publishing.index.model import PROJECT, Index, describe_source, install_command
from builder.verifying import variants
from mamba_ssm import variant as _variant

_TEMPLATES = paths.TEMPLATES


@dataclass(frozen=True)
class CellInstall:
    filename: str
    href: str
    version: str
    key: str  # the variant page the command points at
    command: str
    stable: bool
    tier: str | None = None  # what its evidence record proves (builder.verifying.evidence.tier_detail); None: no record
    resolved_glibc: str | None = None  # the floor its install resolved at (builder/data/installs.json); None: unknown

    @property
    def tier_kind(self) -> str:
        """The tier's name (``cpu-checked``); a wheel indexed without a record proves nothing: ``unrecorded``."""
        return self.tier.partition(" ")[0] if self.tier else "unrecorded"

    @property
    def glibc(self) -> str | None:
        """The glibc its install needs: the wheel's own, as the platform tag repair gave it says
        (manylinux_2_28_x86_64 -> "2.28"), raised to the floor its dependencies' wheels resolved at; None for a
        wheel with no PEP 600 tag."""
        m = re.search(r"-manylinux_(\d+)_(\d+)_[a-z0-9_]+\.whl$", self.filename)
        floors = [f for f in (f"{m.group(1)}.{m.group(2)}" if m else None, self.resolved_glibc) if f]
        return max(floors, key=lambda v: tuple(map(int, v.split(".")))) if m else None

    @property
    def release(self) -> str:
        return self.version.partition("+")[0]

    @property
    def label(self) -> str:
        return self.version.partition("+")[2]


def _acc_sort(v: _variant.Variant) -> tuple:
    """CPU, CUDA, ROCm; the newest toolkit first."""
    return (_variant.BACKENDS.index(v.backend), tuple(-int(x) for x in (v.backend_version or "0").split(".")))


def _torch_sort(torch: str) -> tuple:
    return (0, 0) if torch == "stable" else tuple(-int(x) for x in torch.split("."))


def model(index: Index, project: str = PROJECT) -> dict:
    """One project's table."""
    only = index.projects == [project]  # (then every file is the project's: no filtering)
    files = index.files if only else {fn: e for fn, e in index.files.items() if e.project == project}
    # Without --base-url the page fills in its own address (a line of JavaScript); "./" until then.
    base = index.base_url.rstrip("/") + "/" if index.base_url else "./"
    pythons = sorted({e.python for e in files.values()}, key=lambda py: (int(py[2]), int(py[3:] or 0)))
    abis = sorted({e.cxx11abi for e in files.values() if e.cxx11abi is not None}) or [True]
    rows: dict[tuple[str, str, str | None], _variant.Variant] = {}  # one per torch x accelerator x machine
    pages = {}  # the variant pages that list this project: its rows
    for key, fns in index.variants.items():
        own = fns if only else [fn for fn in fns if fn in files]
        if own:
            pages[key] = own
            v = _variant.Variant.from_key(key)
            for machine in {files[fn].machine for fn in own}:
                rows.setdefault((v.torch, v.accelerator, machine), v)
    machines = sorted({m for (_t, _a, m) in rows if m}, key=lambda m: (m != "x86_64", m))
    out_rows = []
    order = lambda kv: (
        _acc_sort(kv[1]),
        machines.index(kv[0][2]) if kv[0][2] in machines else 0,
        _torch_sort(kv[0][0]),
    )
    for (torch, acc, machine), v in sorted(rows.items(), key=order):
        # a cell is a user's environment: the row's variant with the column's ABI (a stable row serves both)
        keys = {abi: v.key if v.stable else replace(v, cxx11abi=abi).key for abi in abis}
        cells = [_cell(index, keys[abi], py, base, project, machine) for py in pythons for abi in abis]
        floor = ""
        if v.stable:
            floors = {files[fn].requires_torch for fn in pages[v.key]}
            floor = ", ".join(sorted(f for f in floors if f))
        archs = _row_archs(files[fn] for fn in pages[v.key] if files[fn].machine == machine)
        cells = [c and replace(c, resolved_glibc=_glibc(project, c, torch, py, machine)) for c, py in
                 zip(cells, [py for py in pythons for _abi in abis])]  # fmt: skip
        notes = _miscompile_notes(project, {files[fn].version for fn in pages[v.key]}, archs)
        out_rows.append({"torch": torch, "accelerator": acc, "machine": machine, "floor": floor, "cells": cells,
                         "archs": archs, "notes": notes})  # fmt: skip
    columns = [{"python": f"{py[2]}.{py[3:]}", "abi": abi} for py in pythons for abi in abis]
    sources = sorted(s for p, s in index.sources if p == project)
    return {
        "project": project,
        "rows": out_rows,
        "columns": columns,
        "pythons": [f"{py[2]}.{py[3:]}" for py in pythons],
        "abis": abis,
        "base_url": index.base_url,
        "base": base,
        "accelerator_names": {acc: v.backend_name for (_torch, acc, _m), v in rows.items()},
        "machines": machines,
        "n_files": len(files),
        "n_variants": len(pages),
        "sources": [describe_source(s) for s in sources],
        "left_out": _left_out(project, {e.version.partition("+")[0] for e in files.values()}),
        "on_request": on_request(project, {e.version.partition("+")[0] for e in files.values()}),
        "releases": release_grid(project, files.values()),
    }


def release_grid(project: str, entries) -> dict:
    """The release x torch grid of a project's wheels: per release (newest first) and torch minor (oldest first), the
    strongest tier its wheels prove, else the reason the installs record gives for its cells there (a release is
    recorded under another whose wheel has the same requirements: ``same_as``), else nothing. Stable-ABI wheels
    (torch "stable") are this checkout's line's and have no torch column."""
    from packaging.version import InvalidVersion, Version

    from builder.facts import installs
    from builder.verifying import evidence

    rank = {t: i for i, t in enumerate(evidence.TIERS)}  # strongest first
    best: dict[tuple[str, str], str] = {}
    for e in entries:
        if e.torch == "stable":
            continue
        k = (e.version.partition("+")[0], e.torch)
        tier = e.tier.partition(" ")[0] if e.tier else "unrecorded"
        if k not in best or rank.get(tier, len(rank)) < rank.get(best[k], len(rank)):
            best[k] = tier
    if not best:
        return {}
    record = installs.load()
    versions = {v for v, _t in best}
    torches = {t for _v, t in best}
    reasons: dict[tuple[str, str], str] = {}
    for key, o in record.cells.items():
        name_version, torch, _py, _platform = key.split(" | ")
        name, version = name_version.split(" ", 1)
        minor = ".".join(torch.removeprefix("torch ").split(".")[:2])
        if name != project or o.installs is not False:
            continue
        for v in [version, *(line.split(" ", 1)[1] for line, other in record.same_as.items() if other == name_version)]:
            if v in versions and minor in torches and (v, minor) not in best:
                reasons.setdefault((v, minor), o.why)

    def order(v: str):
        try:
            return Version(v)
        except InvalidVersion:
            return Version("0")

    cols = sorted(torches, key=lambda t: tuple(int(x) for x in t.split(".")))
    rows = []
    for v in sorted(versions, key=order, reverse=True):
        rows.append({"version": v, "cells": [{"tier": best.get((v, t)), "why": reasons.get((v, t), "")} for t in cols]})
    return {"torches": cols, "rows": rows}


def _glibc(project: str, cell: CellInstall, torch: str, py: str, machine: str | None) -> str | None:
    """The glibc floor a cell's install resolved at (the newest torch release of its minor recorded)."""
    from builder.facts import installs

    if torch == "stable" or machine is None:
        return None
    python = f"{py[2]}.{py[3:]}"
    found = installs.load().for_minor(project, cell.release, torch, python, f"linux_{machine}")
    return found.floor if found is not None and found.installs else None


def _left_out(project: str, versions: set[str]) -> list[dict]:
    """The cells of this project's releases that are not published because their install does not resolve beside
    their torch (builder/data/installs.json), each with the resolver's reason and what to do instead."""
    from builder.facts import installs

    out = []
    for key, o in sorted(installs.load().cells.items()):
        name, version = key.split(" | ", 1)[0].split(" ", 1)
        if name == project and version in versions and o.installs is False:
            out.append({"cell": key.split(" | ", 1)[1], "why": o.why, "instead": o.instead})
    return out


RELEASE_PROFILE = "release"  # what a tag's release plans: its on_request builds are the page's "on request" cells


def request_command(build_id: str, version: str) -> str:
    """The command that has the release build and publish one on-request build (release.yml's on-request input)."""
    return f"gh workflow run release.yml --ref v{version} -f profile={RELEASE_PROFILE} -f on-request={build_id}"


def on_request(project: str, versions: set[str], matrix_file=None) -> list[dict]:
    """The cells of this project's releases (VERSIONS) that the release plans but builds only on request
    (its profile's ``on_request``; builder.planning.plan), each with the command that asks for its build. The
    checkout's release is its own version; a recipe's, its pin's. Empty when the profile leaves nothing to a
    request (the plan is not loaded then)."""
    from builder.facts import compat as compat_mod
    from builder.planning import matrix as matrix_mod
    from builder.planning import plan as plan_mod

    compat = compat_mod.load()
    path = matrix_file or plan_mod.DEFAULT_MATRIX
    prof = matrix_mod.load_matrix(path, compat).profile(RELEASE_PROFILE)
    if prof is None or not prof.on_request:
        return []
    plan = plan_mod.load_plan(path, RELEASE_PROFILE, compat=compat)
    tag = plan.matrix.package.version  # the release tag names this checkout's version
    out = []
    for b in plan.builds:
        version = plan.recipes[b.project].source.version if b.from_recipe else plan.matrix.package.version
        if b.on_request and b.project == project and version in versions:
            cells = plan_mod.served_cells(plan, b)
            out.append({"cell": f"{version} | {b.variant} | {', '.join(sorted({c.python for c in cells}))} | "
                                f"{b.platform}", "id": b.id, "command": request_command(b.id, tag)})  # fmt: skip
    return out


def _miscompile_notes(project: str, versions: set[str], archs: list[dict]) -> list[str]:
    """Which code serves a GPU whose own code the toolkit miscompiles (builder/data/miscompiles.toml), where this
    row's wheels show it: the arch left out, the code serving it present."""
    from builder.facts import miscompiles

    return [m.note() for m in miscompiles.load()
            if m.project == project and any(v.partition("+")[0] in m.versions for v in versions)
            and m.shown_in(a["arch"] for a in archs)]  # fmt: skip


def _row_archs(entries) -> list[dict]:
    """The GPU code of a row's wheels (their sidecars' archs), each with the GPUs it is known by (GB10 for sm_121)."""
    from builder.facts import compat

    names = compat.load().gpu_names
    found = {a for e in entries for a in e.archs}
    key = lambda a: (
        a[:2] != "sm",
        int("".join(c for c in a if c.isdigit()) or 0, 16 if a.startswith("gfx") else 10),
        a,
    )
    return [{"arch": a, "gpus": names.get(a, "")} for a in sorted(found, key=key)]


def _cell(index: Index, key: str, py: str, base: str, project: str, machine: str | None = None) -> CellInstall | None:
    """The wheel a user in this cell (on MACHINE) gets (the model answers; e.g. no exact cp312 wheel of this
    release: the stable wheel's own page serves it)."""
    picked = index.wheel_for(key, py, project, machine)
    if picked is None:
        return None
    page, fn = picked
    e = index.files[fn]
    return CellInstall(
        filename=fn,
        href=index.href(fn, 0),
        version=e.version,
        key=page,
        command=install_command(e, page, base),
        stable=e.stable,
        tier=e.tier,
    )


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(index: Index) -> str:
    base = index.base_url.rstrip("/") + "/" if index.base_url else "./"
    return (
        _environment()
        .get_template("coverage.html.j2")
        .render(
            projects=[model(index, p) for p in index.projects],
            base_url=index.base_url,
            base=base,
            n_files=len(index.files),
            n_variants=len(index.variants),
            wheel_variants={p: variants.summary(getattr(index, "wheel_variants", None), p) for p in index.projects},
            variant_install=variants.INSTALL_PREVIEW,
            variant_root=variants.ROOT,
        )
    )
