"""Per release of upstream's projects, what the doctor needs to answer a user's own pins: the requirements each
release declares (recorded from its sdist), the causal-conv1d releases a mamba-ssm release pairs with, and the
cells where the farm serves it or leaves it out, with the reason.

``record_requires(DIR)`` (``python -m builder doctor-dist --record-requires DIR``) reads each [[release]]'s sdist
from DIR, checks its sha256 against the recipe, and writes ``builder/data/requires.toml``; ``release_records()``
is the doctor's ``RELEASES`` (``mamba_ssm/doctor/lines.py``). Which release serves which cell comes from one
function, ``served_cells``.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from builder.errors import SourceIntegrityError, UsageError
from builder.facts import paths
from builder.facts.untrusted import load_toml
from mamba_ssm.guard import Deadline, TooLarge, Untrusted, read_capped, shown

REQUIRES = paths.DATA / "requires.toml"
# The projects a user's requirements file names that the doctor answers (the upstream line's pair).
PROJECTS = ("mamba-ssm", "causal-conv1d")
PAIR = "causal-conv1d"  # what a mamba-ssm release pairs with
NOT_PLANNED = "not planned yet"
_REQUIRES_TXT = re.compile(r"[^/]+/[^/]+\.egg-info/requires\.txt")
MAX_SDIST = 256 << 20
MAX_MEMBERS = 20000
MAX_REQUIRES = 64 << 10
SDIST_SECONDS = 60.0


# --------------------------------------------------------------------------- recording requires.txt


def parse_requires_txt(text: str, what: str) -> list[str]:
    """setuptools' requires.txt (``[extra]`` / ``[extra:marker]`` / ``[:marker]`` sections) as PEP 508 strings,
    an extra's requirements marked ``extra == "name"``."""
    out, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        extra, _, marker = section.partition(":")
        parts = [f"({marker})" if marker and extra else marker, f'extra == "{extra}"' if extra else ""]
        full = line + ("; " + " and ".join(p for p in parts if p) if any(parts) else "")
        try:
            out.append(str(Requirement(full)))
        except InvalidRequirement as e:
            raise SourceIntegrityError(f"{what}: {shown(line, 200)} is not a requirement ({e})") from None
    return out


def recorded_requires(path: Path, sha256: str) -> list[str]:
    """The requirements of the sdist at PATH (its ``*.egg-info/requires.txt``), refused unless it is SHA256."""
    what = path.name
    try:
        with open(path, "rb") as f:
            raw = read_capped(f, MAX_SDIST)
    except (OSError, TooLarge) as e:
        raise SourceIntegrityError(f"{what}: cannot read it ({e})") from None
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        raise SourceIntegrityError(f"{what}: sha256 {got}, the recipe's release says {sha256}")
    import io

    try:
        with Deadline(SDIST_SECONDS, what), tarfile.open(fileobj=io.BytesIO(raw), mode="r|gz") as tar:
            for n, member in enumerate(tar):
                if n > MAX_MEMBERS:
                    break
                if member.isreg() and _REQUIRES_TXT.fullmatch(member.name):
                    if member.size > MAX_REQUIRES:
                        raise SourceIntegrityError(f"{what}: {shown(member.name)} is {member.size} bytes")
                    text = tar.extractfile(member).read().decode("utf-8")
                    return parse_requires_txt(text, f"{what}: {member.name}")
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError, Untrusted) as e:
        raise SourceIntegrityError(f"{what}: not a readable sdist ({shown(e, 300)})") from None
    raise SourceIntegrityError(f"{what}: no *.egg-info/requires.txt in its first {MAX_MEMBERS} members")


def record_requires(sdists: Path, out: Path = REQUIRES) -> Path:
    """Write OUT from each [[release]] sdist of PROJECTS in the folder SDISTS."""
    from builder.planning.recipes import recipe_for

    if not sdists.is_dir():
        raise UsageError(f"{sdists}: not a folder", hint="pass the folder the releases' sdists are in")
    body = [
        (
            "# The requirements each upstream release declares, read from its sdist's *.egg-info/requires.txt (an\n"
            "# extra's marked `extra == \"name\"`), the sdist checked against recipes/*.toml's [[release]] sha256.\n"
            "# Written by `python -m builder doctor-dist --record-requires DIR`; do not edit by hand.\n"
        )
    ]
    for project in PROJECTS:
        recipe = recipe_for(project)
        for rel in recipe.releases:
            path = sdists / f"{project.replace('-', '_')}-{rel.version}.tar.gz"
            if not path.is_file():
                raise UsageError(f"{path}: missing", hint=f"download {project} {rel.version}'s sdist into {sdists}")
            reqs = recorded_requires(path, rel.sha256)
            body.append(f"\n[[{project}]]\nversion = {json.dumps(rel.version)}\nsha256 = {json.dumps(rel.sha256)}\n"
                        f"requires = {json.dumps(reqs)}\n")  # fmt: skip
    out.write_text("".join(body), encoding="utf-8")
    return out


def load_requires(path: Path = REQUIRES) -> dict[str, dict[str, list[str]]]:
    """{project: {version: [requirement, ...]}} from the record."""
    data = load_toml(path.read_bytes(), str(path.relative_to(paths.REPO)))
    return {p: {row["version"]: list(row["requires"]) for row in data.get(p, [])} for p in PROJECTS}


# --------------------------------------------------------------------------- what serves which cell


def served_cells(project: str, version: str, wheels: Iterable, left_out: Iterable[dict]) -> dict:
    """Where the farm serves PROJECT VERSION: {"planned": bool, "cells": {label: {"pythons", "machines"}},
    "left_out": [{"torch", "python", "machine", "why", "instead"}]}: the cells where the release plan prebuilds it
    (the recipes' [source] and the releases marked ``prebuilt``), and those the installs record leaves out; a
    release the plan does not prebuild (built on request, or not planned) is not "planned" here. WHEELS: the release plan's (``pins.release_wheels()``); LEFT_OUT: the
    installs record's cells that do not install (``pins.left_out_rows()``)."""
    mine = [w for w in wheels if w.line == "upstream" and (w.project, w.version) == (project, version)]
    if not mine:
        return {"planned": False, "cells": {}, "left_out": []}
    cells: dict[str, dict] = {}
    for w in sorted(mine, key=lambda w: w.label):
        cell = cells.setdefault(w.label, {"pythons": set(), "machines": set()})
        cell["pythons"].add(f"{w.python}-abi3" if w.abi3 else w.python)
        cell["machines"].add(w.platform.removeprefix("linux_"))
    left = [{k: r[k] for k in ("torch", "python", "machine", "why", "instead")}
            for r in left_out if (r["project"], r["version"]) == (project, version)]  # fmt: skip
    return {
        "planned": True,
        "cells": {k: {"pythons": sorted(v["pythons"]), "machines": sorted(v["machines"])} for k, v in cells.items()},
        "left_out": left,
    }


def pair_spec(requires: list[str]) -> str | None:
    """The causal-conv1d specifier a mamba-ssm release's requirements name (its base ones or its extra's); ""
    for any release; None where it names none."""
    for text in requires:
        req = Requirement(text)
        if canonicalize_name(req.name) == PAIR:
            return str(req.specifier)
    return None


def release_records(wheels: Iterable, left_out: Iterable[dict]) -> dict[str, list[dict]]:
    """Per project, every release oldest first: version, upload day, requirements, the causal-conv1d specifier it
    pairs with (mamba-ssm), and where it is served (``served_cells``)."""
    from builder.planning.recipes import recipe_for

    wheels, left_out = tuple(wheels), list(left_out)
    requires = load_requires()
    out: dict[str, list[dict]] = {}
    for project in PROJECTS:
        rows = []
        for rel in recipe_for(project).releases:
            if rel.version not in requires[project]:
                raise UsageError(
                    f"{REQUIRES.relative_to(paths.REPO)}: no {project} {rel.version}",
                    hint="`python -m builder doctor-dist --record-requires DIR` with the releases' sdists in DIR",
                )
            reqs = requires[project][rel.version]
            row = {"version": rel.version, "uploaded": rel.uploaded, "requires": reqs}
            if project != PAIR:
                row["pairs"] = pair_spec(reqs)
                row["pair_extra"] = any(Requirement(r).marker is not None and canonicalize_name(Requirement(r).name)
                                        == PAIR for r in reqs)  # fmt: skip
            row.update(served_cells(project, rel.version, wheels, left_out))
            rows.append(row)
        out[project] = rows
    return out


def releases_source(wheels: Iterable, left_out: Iterable[dict]) -> str:
    """The RELEASES block of the doctor's lines.py."""
    rows = release_records(wheels, left_out)
    body = "".join(
        f"    {json.dumps(p)}: [\n" + "".join(f"        {r!r},\n" for r in rel) + "    ],\n" for p, rel in rows.items()
    )
    return (
        "# Every release of upstream's pair, oldest first (recipes/*.toml [[release]], builder/data/requires.toml):\n"
        '# its requirements, the causal-conv1d releases it pairs with, and where the farm serves it ("planned":\n'
        f'# false: {NOT_PLANNED}; "left_out": cells whose requirements do not install beside their torch).\n'
        f"RELEASES = {{\n{body}}}\n"
    )
