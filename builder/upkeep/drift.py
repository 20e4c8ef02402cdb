"""``python -m builder drift``: compare the farm's data (torch rows, recipe pins) with what the package index
publishes, read light through :mod:`builder.sourcing.pypi`. Exit :data:`DRIFT_EXIT` on drift; ``--write``
edits the TOML with tomlkit, proving each edit first (copies loaded and planned, then renamed into place),
and moves a recipe pin only once the new sdist is fetched and every patch applies. One run has a budget.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import FarmError, PatchError, SourceFetchError, UnprovenWrite, UsageError
from builder.facts import hostenv
from builder.facts.compat import DATA_DIR, PLATFORMS, vtuple
from builder.facts.paths import REPO
from builder.facts.untrusted import Untrusted, marker_holds, run_budget, shown
from builder.sourcing.pypi import File, SimpleIndex

DRIFT_EXIT = 13  # the data is behind the index (not a failure of the farm); errors.py lists every code
_MACHINE = {"linux_x86_64": "x86_64", "linux_aarch64": "aarch64"}
_CUDA_PINS = re.compile(r"cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?")
_CUDA_VERSION = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.\d{1,6}){0,2}")  # 13.2.2, 12.8.90: what a CUDA pin is
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# One run's budget (seconds, MiB read from the network), beside each request's deadline: a weekly run reads
# ~40 requests and a few MB in under a minute; the workflow's job has 20 minutes, the run stops well inside them.
RUN_BUDGET = (600, 256)
MAX_MINORS = 64  # torch minors read from the oldest row up (2.8..2.15 today): a listing cannot make it endless


# ---------------------------------------------------------------------------
# What the index says about torch.


@dataclass(frozen=True)
class TorchRelease:
    minor: str
    latest: str
    python: tuple[str, str]
    pypi: dict  # platform -> "cu132" | "cpu"
    glibc: dict  # platform -> "2.28"
    released: str  # the date the latest release's first file was uploaded (YYYY-MM-DD)
    first: str = ""  # the date the minor's first release (M.m.0) was uploaded: the torch a release's era starts from
    legacy_glibc: dict = field(default_factory=dict)  # platform -> floor, where its wheels carry legacy tags alone


def _environment(platform: str, python: str) -> dict[str, str]:
    return {
        "implementation_name": "cpython", "implementation_version": f"{python}.0", "os_name": "posix",
        "platform_machine": _MACHINE[platform], "platform_release": "", "platform_system": "Linux",
        "platform_version": "", "python_full_version": f"{python}.0", "platform_python_implementation": "CPython",
        "python_version": python, "sys_platform": "linux", "extra": "",
    }  # fmt: skip


def cuda_build(requires_dist: list[str], platform: str, python: str) -> str:
    """ "cu132" (what ``cuda-toolkit==13.2.2`` or ``nvidia-cuda-runtime-cu12==12.8.90`` pins there) or "cpu"."""
    env = _environment(platform, python)
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not marker_holds(req.marker, env, f"Requires-Dist {line}"):
            continue
        if _CUDA_PINS.fullmatch(canonicalize_name(req.name)):
            pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
            if pins:
                # only a dotted number is a CUDA version: `===13.0x.y` (arbitrary equality) is not one
                m = _CUDA_VERSION.fullmatch(pins[0])
                if not m:
                    raise SourceFetchError(f"Requires-Dist {shown(repr(line), 200)}: {shown(repr(pins[0]), 60)} is not a "
                                           "CUDA version (a dotted number); the farm takes no data from it")  # fmt: skip
                return f"cu{int(m.group(1))}{int(m.group(2))}"
    return "cpu"


def torch_facts(index: SimpleIndex, oldest: str) -> dict[str, TorchRelease]:
    """{minor: facts} for each torch minor >= ``oldest`` with final Linux wheels on the index."""
    releases: dict[Version, list[File]] = defaultdict(list)
    for f in index.files("torch"):
        v = f.version
        if f.yanked or v is None or v.is_prerelease or v.is_devrelease or v.local or not f.linux_platforms():
            continue
        if vtuple(f"{v.major}.{v.minor}") >= vtuple(oldest):
            releases[v].append(f)
    latest: dict[str, Version] = {}
    for v in releases:
        minor = f"{v.major}.{v.minor}"
        latest[minor] = max(latest.get(minor, v), v)
    if len(latest) > MAX_MINORS:  # each minor costs a metadata read per platform
        raise SourceFetchError(f"{index.url}/torch/: the listing names {len(latest)} torch minors from {oldest} up; "
                               f"the check reads at most {MAX_MINORS}: not a listing of PyPI's",
                               hint="pass --since MINOR to compare fewer")  # fmt: skip
    out = {}
    for minor, v in sorted(latest.items(), key=lambda kv: vtuple(kv[0])):
        files = releases[v]
        pythons = sorted({p for f in files if (p := f.cpython())}, key=vtuple)
        pypi, glibc, legacy = {}, {}, {}
        for plat in PLATFORMS:
            on = [f for f in files if plat in f.linux_platforms() and f.cpython()]
            if not on:
                continue
            tagged = [g for f in on if (g := f.linux_platforms(pep600_only=True).get(plat))]
            if tagged:  # legacy manylinux1/2010/2014 aliases say less than torch needs: not compared
                glibc[plat] = min(tagged, key=vtuple)
            else:
                legacy[plat] = min((f.linux_platforms()[plat] for f in on), key=vtuple)
            first = min(on, key=lambda f: vtuple(f.cpython()))
            meta = index.metadata(first)
            pypi[plat] = cuda_build(meta.get_all("Requires-Dist") or [], plat, first.cpython())
        # an upload time is data only as a date: what else it holds (control characters) never reaches a TOML comment
        times = sorted(f.upload_time[:10] for f in files if f.upload_time and _DATE.fullmatch(f.upload_time[:10]))
        every = [f for r, fs in releases.items() if f"{r.major}.{r.minor}" == minor for f in fs]
        firsts = sorted(f.upload_time[:10] for f in every if f.upload_time and _DATE.fullmatch(f.upload_time[:10]))
        out[minor] = TorchRelease(minor, str(v), (pythons[0], pythons[-1]), pypi, glibc, times[0] if times else "",
                                  firsts[0] if firsts else "", legacy)  # fmt: skip
    return out


# ---------------------------------------------------------------------------
# The comparison.


@dataclass
class Drift:
    subject: str  # "torch 2.15", "causal-conv1d"
    what: str  # new-minor | new-patch | python | cuda | glibc | new-sdist | new-tag | canary
    data: str  # what the data says
    index: str  # what the index says
    status: str = ""  # after --write: written | patch broke: ... | not written
    detail: dict = field(default_factory=dict)


def _cuda_version(build: str) -> str | None:
    return f"{build[2:-1]}.{build[-1]}" if build.startswith("cu") else None


def compare_torch(data: dict, facts: dict[str, TorchRelease]) -> list[Drift]:
    out: list[Drift] = []
    for minor, f in facts.items():
        row = data.get(minor)
        subject = f"torch {minor}"
        if row is None:
            # a minor newer than every row; or, with --since below the oldest row, an older one the upstream lines
            # are planned beside (a minor between two rows is one the data left out on purpose)
            newer = vtuple(minor) > max((vtuple(m) for m in data), default=(0,))
            if newer or vtuple(minor) < min((vtuple(m) for m in data), default=(0,)):
                pyp = ", ".join(f"{p.removeprefix('linux_')} {b}" for p, b in f.pypi.items())
                out.append(Drift(subject, "new-minor", "-", f"{f.latest} (py{f.python[0]}-{f.python[1]}; {pyp}; "
                                 f"released {f.released})", detail={"facts": asdict(f), "older": not newer}))  # fmt: skip
            continue
        if f.first and row.get("released") != f.first:
            out.append(Drift(subject, "released", row.get("released", "-"), f.first))
        if Version(f.latest) > Version(row["latest"]):
            out.append(Drift(subject, "new-patch", row["latest"], f"{f.latest} (released {f.released})"))
        if list(f.python) != list(row["python"]):
            out.append(Drift(subject, "python", "-".join(row["python"]), "-".join(f.python)))
        for plat in PLATFORMS:
            build = f.pypi.get(plat)
            if build is None:
                continue
            listed = row["cuda"] if plat == "linux_x86_64" else row["cuda_aarch64"]
            ver = _cuda_version(build)
            if build != row["pypi"].get(plat) or (ver and ver not in listed):
                shown = row["pypi"].get(plat, "-") + (
                    f" (cuda list {', '.join(listed) or 'empty'})" if ver and ver not in listed else ""
                )
                out.append(Drift(subject, "cuda", f"{plat.removeprefix('linux_')}: {shown}",
                                 f"{plat.removeprefix('linux_')}: {build}", detail={"platform": plat, "build": build}))  # fmt: skip
            if f.glibc.get(plat) and f.glibc[plat] != row["glibc"].get(plat):
                out.append(Drift(subject, "glibc", f"{plat.removeprefix('linux_')}: {row['glibc'].get(plat, '-')}",
                                 f"{plat.removeprefix('linux_')}: {f.glibc[plat]}", detail={"platform": plat}))  # fmt: skip
    return out


def newest_sdist(index: SimpleIndex, project: str) -> File | None:
    sdists = [f for f in index.files(project) if f.filename.endswith(".tar.gz") and not f.yanked and f.version
              and not f.version.is_prerelease and not f.version.is_devrelease]  # fmt: skip
    return max(sdists, key=lambda f: f.version, default=None)


# A GitHub tag tarball (or one laid out the same way): its repository's tags say which archives exist.
TAG_ARCHIVE_RE = re.compile(r"(https?://[^/]+/[^/]+/[^/]+)/archive/refs/tags/([A-Za-z0-9._+-]{1,100})\.tar\.gz")


def newest_tag(url: str) -> tuple[str, Version, str] | None:
    """(tag, version, commit) of the newest final release among the tags of the git repository at URL
    (``git ls-remote --tags``; a tag is a release when, less a leading ``v``, it is a PEP 440 version)."""
    from builder.sourcing.sources import ls_remote_tags

    best = None
    for tag, commit in ls_remote_tags(url).items():
        try:
            version = Version(tag.removeprefix("v"))
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease:
            continue
        if best is None or version > best[1]:
            best = (tag, version, commit)
    return best


def compare_recipe(index: SimpleIndex, recipe) -> Drift | None:
    """The recipe's pin against what its source publishes: the index's newest sdist, the newest release tag of
    a git source's repository (its commit), or of a tag archive's repository (its archive URL; the sha256 is
    taken when --write fetches it). An archive URL laid out otherwise has no way to list releases: no drift."""
    from builder.facts.spec import ArchivePin, GitPin

    src = recipe.source
    if isinstance(src, GitPin | ArchivePin):
        m = TAG_ARCHIVE_RE.fullmatch(src.url) if isinstance(src, ArchivePin) else None
        repo = src.url if isinstance(src, GitPin) else (m.group(1) + ".git" if m else None)
        found = newest_tag(repo) if repo else None
        if found is None or found[1] <= Version(src.version):
            return None
        tag, version, commit = found
        if isinstance(src, GitPin):
            return Drift(recipe.name, "new-tag", src.version, f"{version} commit {commit[:12]}",
                         detail={"version": str(version), "commit": commit, "tag": tag})  # fmt: skip
        url = f"{m.group(1)}/archive/refs/tags/{tag}.tar.gz"
        return Drift(recipe.name, "new-tag", src.version, f"{version} archive {tag}.tar.gz",
                     detail={"version": str(version), "url": url, "tag": tag})  # fmt: skip
    newest = newest_sdist(index, recipe.source.project)
    if newest is None or newest.version <= Version(recipe.source.version):
        return None
    return Drift(recipe.name, "new-sdist", recipe.source.version, f"{newest.version} sha256 {(newest.sha256 or '?')[:12]}…",
                 detail={"version": str(newest.version), "sha256": newest.sha256, "filename": newest.filename,
                         "uploaded": _day(newest.upload_time)})  # fmt: skip


DAY_RE = re.compile(r"(\d{4}-\d{2}-\d{2})(?:T[0-9:.]+Z?)?")


def _day(upload_time: str | None) -> str | None:
    """The day of an index's upload-time (2026-05-09T13:00:51Z -> 2026-05-09); None for anything else."""
    m = DAY_RE.fullmatch(upload_time or "")
    return m.group(1) if m else None


def compare_releases(index: SimpleIndex, recipe) -> Drift | None:
    """A recipe's [[release]] tables against the sdists its index lists (final, not yanked, with a sha256 and an
    upload day): the releases it lacks, the newest aside when it is newer than [source] (that one moves the pin:
    :func:`compare_recipe`, whose write adds its [[release]] too)."""
    from builder.facts.spec import SdistPin

    if not recipe.releases or not isinstance(recipe.source, SdistPin):
        return None
    known = {Version(r.version) for r in recipe.releases}
    newest = newest_sdist(index, recipe.source.project)
    moving = newest.version if newest is not None and newest.version > Version(recipe.source.version) else None
    found: dict = {}
    for f in index.files(recipe.source.project):
        if (f.filename.endswith(".tar.gz") and not f.yanked and f.version and not f.version.is_prerelease
                and not f.version.is_devrelease and f.version not in known and f.version != moving and f.sha256
                and _day(f.upload_time)):  # fmt: skip
            day = _day(f.upload_time)
            found.setdefault(f.version, {"version": str(f.version), "sha256": f.sha256, "uploaded": day})
    if not found:
        return None
    new = [found[v] for v in sorted(found)]
    return Drift(recipe.name, "new-releases", f"{len(recipe.releases)} releases",
                 "+" + ", ".join(r["version"] for r in new), detail={"releases": new})  # fmt: skip


def add_releases(doc, releases: list[dict]) -> None:
    """RELEASES appended to the tomlkit document's [[release]] tables, which stay oldest first."""
    import tomlkit

    tables = doc["release"]
    for rel in releases:
        table = tomlkit.table()
        for key in ("version", "sha256", "uploaded"):
            table[key] = rel[key]
        tables.append(table)
    if [Version(t["version"]) for t in tables] != sorted(Version(t["version"]) for t in tables):
        ordered = sorted(tables, key=lambda t: Version(t["version"]))
        tables.clear()
        for t in ordered:
            tables.append(t)


def write_releases(recipe, drift: Drift, out: Path | None = None) -> None:
    """Add the releases the index lists and the recipe lacks (to ``out``, a staged copy, when given)."""
    import tomlkit

    target = out or recipe.path
    doc = tomlkit.parse(target.read_text())
    add_releases(doc, drift.detail["releases"])
    target.write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")
    drift.status = f"written ({len(drift.detail['releases'])} [[release]] table(s) added)"


def compare_canary(recipe) -> Drift | None:
    """The recipe's [canary] pin against its branch's head (git describe against its newest release tag): a drift
    when the branch moved; None for a recipe with no [canary] or a branch still at the pin."""
    from builder.facts.spec import canary_version
    from builder.sourcing.sources import branch_head

    pin = recipe.canary
    if pin is None:
        return None
    head = branch_head(pin.url, pin.branch)
    if head.commit == pin.commit:
        return None
    if head.distance == 0:  # the head is a release: its sdist (or tag) is the release pin's drift, not a canary
        return None
    version = canary_version(head.release, head.distance)
    return Drift(f"{recipe.name} canary", "canary", f"{pin.version} ({pin.commit[:12]})",
                 f"{version} ({pin.branch} at {head.commit[:12]}, {head.distance} after {head.tag})",
                 detail={"commit": head.commit, "release": head.release, "distance": head.distance,
                         "version": version, "tag": head.tag})  # fmt: skip


# ---------------------------------------------------------------------------
# Writing.


def _set(table, key: str, value) -> None:
    """Replace a value, keeping the comment on its line."""
    import tomlkit

    comment = table[key].trivia.comment if key in table else ""
    table[key] = tomlkit.item(value)
    if comment:
        table[key].comment(comment.lstrip("# "))
        table[key].trivia.comment_ws = "  "


def _inline(values: dict):
    """An inline table laid out as the data's own: ``{ a = "x", b = "y" }``."""
    import tomlkit

    text = ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
    return tomlkit.parse(f"x = {{ {text} }}")["x"]


def write_torch(path: Path, drifts: list[Drift], facts: dict[str, TorchRelease], today: str) -> None:
    import tomlkit

    doc = tomlkit.parse(path.read_text())
    rows = doc["torch"]
    for d in drifts:
        minor = d.subject.split()[1]
        f = facts[minor]
        if d.what == "new-minor":
            older = d.detail.get("older", False)
            # what the metadata does not say comes from the nearest row: the minor before (the one after, for an
            # older minor)
            near = rows[min(rows, key=vtuple) if older else max(rows, key=vtuple)]
            t = tomlkit.table()
            t.add(
                tomlkit.comment(
                    f"read from PyPI on {today} by `python -m builder drift --write` (released {f.released});"
                )
            )
            t.add(
                tomlkit.comment(
                    "cuda lists PyPI's own build only: PyTorch's /whl indexes and ROCm were not read (check)"
                )
            )
            t["latest"] = f.latest
            if f.first:
                t["released"] = f.first
            t["python"] = list(f.python)
            t["cuda"] = [v for v in [_cuda_version(f.pypi.get("linux_x86_64", "cpu"))] if v]
            t["cuda_aarch64"] = [v for v in [_cuda_version(f.pypi.get("linux_aarch64", "cpu"))] if v]
            t["rocm"] = []
            t["pypi"] = _inline(f.pypi)
            t["cxx11abi"] = list(near["cxx11abi"])
            t["cxx11abi"].comment(f"as the minor {'after' if older else 'before'} (not in the metadata)")
            t["cxx11abi"].trivia.comment_ws = "  "
            glibc = dict(f.glibc)
            legacy = {p: g for p, g in f.legacy_glibc.items() if p not in glibc}
            for plat, floor in legacy.items():  # a legacy alias (manylinux1: 2.5) says less than torch needs
                glibc[plat] = near["glibc"].get(plat, floor)  # the nearest row's
            t["glibc"] = _inline({p: glibc[p] for p in PLATFORMS if p in glibc})
            if legacy:
                shown_tags = ", ".join(f"{p.removeprefix('linux_')} {g}" for p, g in sorted(legacy.items()))
                t["glibc"].comment(
                    f"legacy manylinux tags alone ({shown_tags}): as the minor {'after' if older else 'before'}"
                )
                t["glibc"].trivia.comment_ws = "  "
            if older:
                rows.value._insert_at(0, minor, t)
            else:
                rows.add(minor, t)
        elif d.what == "new-patch":
            _set(rows[minor], "latest", f.latest)
        elif d.what == "released":
            _set(rows[minor], "released", f.first)
        elif d.what == "python":
            _set(rows[minor], "python", list(f.python))
        elif d.what == "cuda":
            plat, build = d.detail["platform"], d.detail["build"]
            rows[minor]["pypi"][plat] = build
            ver = _cuda_version(build)
            key = "cuda" if plat == "linux_x86_64" else "cuda_aarch64"
            if ver and ver not in rows[minor][key]:
                _set(rows[minor], key, sorted([*rows[minor][key], ver], key=vtuple))
        elif d.what == "glibc":
            rows[minor]["glibc"][d.detail["platform"]] = f.glibc[d.detail["platform"]]
        d.status = "written"
    text = re.sub(r"([^\n])\n(\[torch\.)", r"\1\n\n\2", tomlkit.dumps(doc))  # a blank line before each row
    path.write_text(text.rstrip("\n") + "\n")


def write_matrix_axis(path: Path, minors: list[str]) -> None:
    """A new torch minor joins the matrix's torch axis: the release (every profile that does not narrow
    torch) builds it."""
    import tomlkit

    doc = tomlkit.parse(path.read_text())
    axis = doc["axes"]["torch"]
    for m in minors:
        if m not in axis:
            axis.append(m)
    path.write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")


def write_release_axis(path: Path, minors: list[str]) -> None:
    """A torch minor older than every row (``--since`` below them) joins matrix.toml's [releases] torch: the
    upstream lines' releases are planned beside it, this checkout's line is not."""
    import tomlkit

    doc = tomlkit.parse(path.read_text())
    if "releases" not in doc:
        doc["releases"] = tomlkit.table()
    table = doc["releases"]
    axis = list(doc.get("axes", {}).get("torch", []))
    merged = sorted({*table.get("torch", []), *(m for m in minors if m not in axis)}, key=vtuple)
    if "torch" in table:
        table["torch"].clear()
        table["torch"].extend(merged)
    else:
        table["torch"] = merged
    path.write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")


# --- the matrix's Python axis against the Pythons torch ships ---------------------------------------------


def compare_python_axis(matrix: dict, data: dict, facts: dict[str, TorchRelease]) -> list[Drift]:
    """A Python that a torch of the matrix's torch axis ships wheels for (the index's facts where read, the
    data's rows otherwise) but the Python axis lacks is drift (``python-axis``: --write adds it); the floor
    is the axis's oldest Python, a choice. An axis Python that no such torch ships is reported
    (``python-unshipped``), never removed by --write."""
    axes = matrix.get("axes", {})
    axis = list(axes.get("python", []))
    torches = [*axes.get("torch", []), *(m for m in facts if m not in data and m not in axes.get("torch", []))]  # new minors too
    if not axis or not torches:
        return []
    ranges = {m: tuple(facts[m].python) if m in facts else tuple(data[m]["python"]) for m in torches if m in facts or m in data}
    shipped: dict[str, list[str]] = {}
    for minor, (lo, hi) in ranges.items():
        for x in range(vtuple(lo)[1], vtuple(hi)[1] + 1):
            shipped.setdefault(f"3.{x}", []).append(minor)
    floor = min(axis, key=vtuple)
    out = []
    for py in sorted(shipped, key=vtuple):
        if py not in axis and vtuple(py) >= vtuple(floor):
            on = shipped[py]
            out.append(Drift(f"python {py}", "python-axis", f"axis {axis[0]}..{axis[-1]}",
                             f"torch {on[0]}..{on[-1]} ship cp{py.replace('.', '')}", detail={"python": py}))  # fmt: skip
    for py in axis:
        if py not in shipped:
            out.append(Drift(f"python {py}", "python-unshipped", f"axis {axis[0]}..{axis[-1]}",
                             f"no torch {torches[0]}..{torches[-1]} ships it", status="not written"))  # fmt: skip
    return out


def write_python_axis(path: Path, drifts: list[Drift]) -> None:
    """The shipped Pythons the axis lacks join matrix.toml's Python axis, in version order (comments kept)."""
    import tomlkit

    add = [d for d in drifts if d.what == "python-axis"]
    if not add:
        return
    doc = tomlkit.parse(path.read_text())
    axis = doc["axes"]["python"]
    merged = sorted({*axis, *(d.detail["python"] for d in add)}, key=vtuple)
    axis.clear()
    axis.extend(merged)
    path.write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")
    for d in add:
        d.status = "written"


def check_patches(recipe, tree: Path, source: str = "release") -> str | None:
    """None when every patch of the recipe for SOURCE (its ``when.source`` that one or none) and for the recipe's
    source's version (its ``when.release`` matching it, or none) applies to a fresh copy of ``tree``; else the
    PatchError's text."""
    from builder.planning.recipes import CellFacts, placeholder_values
    from builder.sourcing.prepare import apply_patch

    values = {}
    for facts in (CellFacts("2.14.1", "cuda", "13.0", True, ("sm_80",), "cu13"),
                  CellFacts("2.14.1", "rocm", "7.2", True, ("gfx90a",), "hip72")):  # fmt: skip
        values.update(placeholder_values(facts, recipe.source.version))
    for patch in recipe.patches:
        if patch.when.source not in (None, source):
            continue
        if patch.when.release is not None and not patch.when.release.contains(recipe.source.version, prereleases=True):
            continue  # another release's era
        with tempfile.TemporaryDirectory(prefix="drift-patch-") as tmp:
            copy = Path(tmp) / tree.name
            shutil.copytree(tree, copy, symlinks=True)
            try:
                apply_patch(copy, patch, values, recipe)
            except PatchError as err:
                return str(err)
    return None


def write_canary(recipe, drift: Drift, cache_root: Path | None, out: Path | None = None) -> None:
    """Move the recipe's [canary] pin (in ``out``, a staged copy that may already hold its release pin's move, when
    given) to the branch's head once the canary's patches apply to the head's tree."""
    import tomlkit

    from builder.facts.spec import CanaryPin
    from builder.sourcing.sources import SourceCache

    old = recipe.canary
    pin = CanaryPin(old.name, drift.detail["version"], old.url, drift.detail["commit"], old.branch,
                    drift.detail["release"], drift.detail["distance"])  # fmt: skip
    cache = SourceCache(cache_root / "sdists" if cache_root else None)
    with tempfile.TemporaryDirectory(prefix="drift-canary-") as tmp:
        tree = cache.unpack(pin, Path(tmp) / "src")
        broke = check_patches(replace(recipe, source=pin), tree, source="canary")
    if broke:
        drift.status = f"not written: {broke}"
        drift.detail["exit"] = PatchError.exit_code
        return
    target = out or recipe.path
    doc = tomlkit.parse(target.read_text())
    for key in ("commit", "release", "distance"):
        _set(doc["canary"], key, drift.detail[key])
    target.write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")
    drift.status = "written (the canary's patches apply to the head)"


def write_recipe(index: SimpleIndex, recipe, drift: Drift, cache_root: Path | None, out: Path | None = None) -> None:
    """Move the recipe's pin (to ``out``, a staged copy, when given) once the new sdist's patches apply."""
    import tomlkit

    from builder.facts.spec import ArchivePin, GitPin, SdistPin
    from builder.sourcing.sources import Fetcher, SourceCache, archive_sha256

    fetcher = Fetcher(indexes=(index.url,), ca_bundle=index.fetcher.ca_bundle, proxy=index.fetcher.proxy,
                      timeout=index.fetcher.timeout)  # fmt: skip
    cache = SourceCache(cache_root / "sdists" if cache_root else None, fetcher)
    src = recipe.source
    if isinstance(src, GitPin):
        pin = GitPin(src.name, drift.detail["version"], src.url, drift.detail["commit"])
        keys = {"version": pin.version, "commit": pin.commit}
    elif isinstance(src, ArchivePin):  # the tag's archive, hashed as fetched: the reviewer checks it in the PR
        sha = archive_sha256(drift.detail["url"], fetcher)
        pin = ArchivePin(src.name, drift.detail["version"], sha, drift.detail["url"])
        keys = {"version": pin.version, "url": pin.url, "sha256": pin.sha256}
    else:
        if not drift.detail.get("sha256"):
            drift.status = "not written: the index lists no sha256"
            return
        pin = SdistPin(src.name, drift.detail["version"], drift.detail["sha256"])
        keys = {"version": pin.version, "sha256": pin.sha256}
    with tempfile.TemporaryDirectory(prefix="drift-sdist-") as tmp:
        tree = cache.unpack(pin, Path(tmp) / "src")
        broke = check_patches(replace(recipe, source=pin), tree)
    if broke:
        drift.status = f"not written: {broke}"
        drift.detail["exit"] = PatchError.exit_code
        return
    doc = tomlkit.parse(recipe.path.read_text())
    for key, value in keys.items():
        _set(doc["source"], key, value)
    if "release" in doc and isinstance(pin, SdistPin) and not isinstance(pin, ArchivePin):
        if not drift.detail.get("uploaded"):
            drift.status = "not written: the index gives no upload day for the new sdist ([[release]] needs one)"
            return
        add_releases(doc, [{"version": pin.version, "sha256": pin.sha256, "uploaded": drift.detail["uploaded"]}])
    (out or recipe.path).write_text(tomlkit.dumps(doc).rstrip("\n") + "\n")
    drift.status = f"written (all {len(recipe.patches)} patches apply)"


# ---------------------------------------------------------------------------
# Proving what --write writes.


class Staged:
    """Copies beside the files --write edits: edited, loaded and planned, then put in place atomically (or
    removed, the files untouched). A copy's name is hidden and not ``*.toml``: no loader finds it by a glob."""

    def __init__(self) -> None:
        self.copies: dict[Path, Path] = {}

    def __getitem__(self, path: Path) -> Path:
        """A copy beside ``path`` (so the matrix's relative paths resolve as the file's do)."""
        if path not in self.copies:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".drift", dir=path.parent)
            with os.fdopen(fd, "wb") as out:
                out.write(path.read_bytes())
            self.copies[path] = Path(tmp)
        return self.copies[path]

    def named(self, path: Path) -> Path:
        """A copy with ``path``'s own name, in a hidden folder beside it (a recipe's name must be its file's)."""
        if path not in self.copies:
            folder = Path(tempfile.mkdtemp(prefix=".drift-", dir=path.parent))
            shutil.copyfile(path, folder / path.name)
            self.copies[path] = folder / path.name
        return self.copies[path]

    def drop(self, path: Path) -> None:
        tmp = self.copies.pop(path)
        tmp.unlink(missing_ok=True)
        if tmp.parent.name.startswith(".drift-"):
            shutil.rmtree(tmp.parent, ignore_errors=True)

    def discard(self) -> None:
        for path in list(self.copies):
            self.drop(path)

    def commit(self) -> None:
        for path, tmp in list(self.copies.items()):
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
            self.drop(path)


def prove(staged: Staged, torch_data: Path, matrix: Path, recipes: dict) -> None:
    """Load the staged data with the farm's own loaders and plan every profile from it, as ``builder plan``
    would after the write; UnprovenWrite (nothing is written) when any of it fails, whatever the failure."""
    from builder.facts import compat as compat_mod
    from builder.planning.matrix import load_matrix
    from builder.planning.plan import load_plan
    from builder.planning.recipes import load_recipe

    step = "loading the new data"
    try:
        for path, tmp in staged.copies.items():
            if any(r.path == path for r in recipes.values()):
                step = f"loading the new {path.name}"
                load_recipe(tmp)
        step = f"loading the new {torch_data.name}"
        torch_doc = _read_toml(staged.copies.get(torch_data, torch_data))
        compat = compat_mod.load_with(torch_doc)
        matrix_file = staged.copies.get(matrix, matrix)
        step = f"loading the new {matrix.name}"
        profiles = [None, *sorted(load_matrix(matrix_file, compat).profiles)]
        for name in profiles:
            step = f"planning {'the profile ' + name if name else 'the whole matrix'} from the new data"
            load_plan(matrix_file, profile=name, compat=compat)
    except Exception as err:  # noqa: BLE001 (any failure of the farm's loaders on this data refuses the write)
        raise UnprovenWrite(
            f"--write: nothing written: {step} failed ({type(err).__name__}: {shown(err, 500)})",
            hint="the index published something the farm cannot take as data; the table says what drifted",
        ) from None


# ---------------------------------------------------------------------------
# A run.


@dataclass(frozen=True)
class DriftOptions:
    """What one drift run reads, compares and (with ``write``) writes; the command's flags, typed."""

    index: str | None = None  # the simple API to read (None: the host's pip index-url, else PyPI)
    write: bool = False  # update the TOML files (comments kept)
    format: str = "table"  # table or json
    torch_data: Path = DATA_DIR / "torch.toml"
    matrix: Path = REPO / "matrix.toml"
    recipes: Path = REPO / "recipes"
    cache: Path | None = None  # the farm cache (None: the farm's)
    no_recipes: bool = False  # torch only
    since: str | None = None  # compare torch minors from this one up
    budget_seconds: float | None = None
    budget_mb: float | None = None


def _read_toml(path: Path) -> dict:
    import tomllib

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}") from None


def run_drift(options: DriftOptions) -> int:
    """Compare (and with ``write``, update) the data; the report's exit code: 0, or DRIFT_EXIT on drift."""
    from builder.planning.recipes import load_recipes

    cache_root = options.cache or hostenv.CACHE_ROOT
    index = SimpleIndex(options.index, cache=cache_root / "metadata")
    data = _read_toml(options.torch_data).get("torch", {})
    if not data:
        raise UsageError(f'{options.torch_data}: no [torch."M.m"] rows')
    oldest = min(data, key=vtuple)
    if options.since:
        if not re.fullmatch(r"\d+\.\d+", options.since):
            raise UsageError(f"--since {shown(repr(options.since), 60)}: write a torch minor such as 2.13")
        oldest = options.since  # below the oldest row: the older minors' rows are added (the upstream lines' axis)
    try:
        budget = run_budget("python -m builder drift", options.budget_seconds, options.budget_mb, RUN_BUDGET)
    except Untrusted as err:
        raise UsageError(str(err)) from None
    staged = Staged()
    try:
        # everything read from the index (and the new sdists --write fetches) under one budget of time and bytes
        with budget:
            facts = torch_facts(index, oldest)
            drifts = compare_torch(data, facts)
            py_drifts = compare_python_axis(_read_toml(options.matrix), data, facts)
            recipes = {} if options.no_recipes else load_recipes(options.recipes)
            recipe_drifts = [(r, d) for r in recipes.values() if (d := compare_recipe(index, r))]
            recipe_drifts += [(r, d) for r in recipes.values() if (d := compare_releases(index, r))]
            # after the release pins': a canary's write edits the copy a release pin's move may have made
            recipe_drifts += [(r, d) for r in recipes.values() if (d := compare_canary(r))]
            if options.write:
                _write(options, index, drifts + py_drifts, facts, recipe_drifts, staged)
        every = drifts + py_drifts + [d for _, d in recipe_drifts]
        if options.write:
            try:
                prove(staged, options.torch_data, options.matrix, recipes)
            except UnprovenWrite:
                for d in every:
                    if d.status.startswith("written"):
                        d.status = "not written: the new data does not load (below)"
                _report(options, index, every, facts, recipes)
                raise
            staged.commit()
            if options.recipes.resolve() == (REPO / "recipes").resolve() and any(
                d.status.startswith("written") for _, d in recipe_drifts
            ):  # the doctor pins a line's newest version where the installed one is unknown: it moves with the pin
                from builder.publishing.doctor_dist import write_lines

                write_lines()
    except Untrusted as err:  # what the index said that breaks a rule, or the run's budget spent
        raise SourceFetchError(str(err)) from None
    finally:
        staged.discard()
    return _report(options, index, every, facts, recipes)


def _write(options: DriftOptions, index: SimpleIndex, drifts: list[Drift], facts: dict, recipe_drifts: list, staged: Staged) -> None:
    """Every edit --write makes, onto the staged copies (:class:`Staged`)."""
    today = datetime.date.today().isoformat()
    python_axis = [d for d in drifts if d.what == "python-axis"]
    drifts = [d for d in drifts if d.what not in ("python-axis", "python-unshipped")]
    if drifts:
        write_torch(staged[options.torch_data], drifts, facts, today)
        new = [d.subject.split()[1] for d in drifts if d.what == "new-minor" and not d.detail.get("older")]
        if new:
            write_matrix_axis(staged[options.matrix], new)
        older = [d.subject.split()[1] for d in drifts if d.what == "new-minor" and d.detail.get("older")]
        if older:
            write_release_axis(staged[options.matrix], older)
    if python_axis:
        write_python_axis(staged[options.matrix], python_axis)
    for recipe, d in recipe_drifts:
        canary = d.what == "canary"
        try:
            if d.what == "new-releases":  # onto the copy a pin's move may have made, as a canary's write
                write_releases(recipe, d, out=staged.named(recipe.path))
                continue
            if canary:
                write_canary(recipe, d, options.cache, out=staged.named(recipe.path))
            else:
                write_recipe(index, recipe, d, options.cache, out=staged.named(recipe.path))
        except FarmError as err:  # the new sdist could not be fetched or unpacked: the pin stays
            if not canary:  # (a canary's failed write left the copy as it was, a release pin's move in it kept)
                staged.drop(recipe.path)
            d.status = f"not written: {err}"
            d.detail["exit"] = err.exit_code
        else:
            if not d.status.startswith("written") and not canary:  # a broken patch: the pin stays
                staged.drop(recipe.path)


def _report(options: DriftOptions, index: SimpleIndex, every: list[Drift], facts: dict, recipes: dict) -> int:
    checked = f"torch {min(facts, key=vtuple, default='-')}..{max(facts, key=vtuple, default='-')}, " + (
        ", ".join(f"{r.name} {r.source.version}" + (f" (canary {r.canary.version})" if r.canary else "")
                  for r in recipes.values()) or "no recipes"
    )
    cost = f"{index.requests} requests, {index.bytes / 1e6:.1f} MB read from {index.url}"
    if options.format == "json":
        print(json.dumps({"index": index.url, "checked": checked, "drift": [asdict(d) for d in every],
                          "requests": index.requests, "bytes": index.bytes}, indent=2))  # fmt: skip
    else:
        _table(every, checked, cost, options.write)
    failed = [d.detail["exit"] for d in every if d.detail.get("exit")]
    if failed:  # a broken patch (10), or the new sdist's fetch (9) / hash (8): someone has to look
        return failed[0]
    return DRIFT_EXIT if every else 0


def _table(drifts: list[Drift], checked: str, cost: str, wrote: bool) -> None:
    if not drifts:
        print(f"no drift ({checked}; {cost})")
        return
    head = ["subject", "drift", "data", "index"] + (["--write"] if wrote else [])
    rows = [[shown(c, 300) for c in [d.subject, d.what, d.data, d.index] + ([d.status or "-"] if wrote else [])]
            for d in drifts]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - (1 if wrote else 0))]
    for r in [head, *rows]:
        cells = [c.ljust(w) for c, w in zip(r, widths)] + r[len(widths) :]
        print("  ".join(cells).rstrip())
    print(f"{len(drifts)} drift(s) ({checked}; {cost})", file=sys.stderr)


__all__ = ["DRIFT_EXIT", "SourceFetchError", "compare_torch", "cuda_build", "torch_facts"]
