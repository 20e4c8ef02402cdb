"""``python -m builder release collect|split|variant-files|gate|cost``: the release's publish job.

Which planned build made a wheel, and which product line it is, are read from its sidecar
(``<wheel>.spec.json``: ``id``, ``source``); ``split`` puts each wheel, sidecar and evidence record in its
line's folder, since the two lines share the name mamba-ssm and each is its own index.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from builder.errors import NameCollision, UsageError
from builder.publishing.index.model import CHECKOUT, describe_source
from builder.publishing.index.reader import read_sidecar, read_source
from builder.verifying import evidence

# product line -> what it is: sidecar source "checkout", and "sdist:<name>==<version>@sha256:<hex>" (builder.sourcing.sources)
# and "canary:<name>==<version>@<commit>" (a default branch's head: its own index, never a release's)
LINES = {"checkout": "this repository's mamba-ssm", "upstream": "upstream's packages (from their sdists)",
         "canary": "upstream's default branches (canary builds, dev versions)"}  # fmt: skip


def sidecar(wheel: Path) -> dict:
    """The BuildSpec the farm wrote beside WHEEL (read as the index reads it); it must exist and name its build."""
    path = Path(f"{wheel}.spec.json")
    spec = read_sidecar(str(path))
    if spec is None:
        raise UsageError(
            f"{wheel}: no sidecar {path.name}, so neither its build id nor its index (product line) is known",
            hint="the farm writes one beside every wheel it builds: upload it with the wheel, or remove the wheel",
        )
    if not isinstance(spec.get("id"), str):
        raise UsageError(f"{path}: expected the build's spec, a JSON object with an 'id'", hint="rebuild the wheel")
    return spec


def line_of(wheel: Path, spec: dict) -> str:
    """The product line of WHEEL: its sidecar's ``source``, checked as the index checks it (absent: checkout)."""
    try:
        project = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    except InvalidWheelFilename as err:
        raise UsageError(f"{wheel}: {err}", hint="only the farm's wheels, under their own names") from None
    source = read_source(f"{wheel}.spec.json", spec, project)
    return "checkout" if source == CHECKOUT else ("canary" if source.startswith("canary:") else "upstream")


def wheels_in(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.whl"))


def planned(matrix_file: Path) -> list[tuple[str, str]]:
    """(build id, its job's id) for every build of a plan's GitHub matrix (``plan --format github``)."""
    try:
        jobs = json.loads(matrix_file.read_text(encoding="utf-8"))["include"]
        pairs = [(i, job["id"]) for job in jobs for i in job["ids"].split()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UsageError(
            f"--matrix {matrix_file}: not a plan's GitHub matrix ({type(err).__name__}: {err})",
            hint="pass what `python -m builder plan --format github` printed (each job has an 'id' and 'ids')",
        ) from None
    if not all(isinstance(job, str) for _, job in pairs):
        raise UsageError(f"--matrix {matrix_file}: a job's 'id' is not a string", hint="pass the plan's matrix")
    return pairs


def collect(pairs: list[tuple[str, str]], folder: Path) -> list[tuple[str, str, bool]]:
    """(build id, its job's id, whether a wheel under FOLDER names it in its sidecar) for each planned build."""
    made = {sidecar(w)["id"] for w in wheels_in(folder)}
    return [(i, job, i in made) for i, job in pairs]


def split(folder: Path, out: Path) -> dict[str, list[Path]]:
    """Link (else copy) every wheel under FOLDER, its sidecar and its evidence record into OUT/<line>/; only lines with wheels
    get a folder. Returns the wheels placed, by line."""
    placed: dict[str, list[Path]] = {}
    named: dict[str, tuple[str, str]] = {}  # filename -> (line, source) of the first wheel of that name
    for wheel in wheels_in(folder):
        spec = sidecar(wheel)
        line = line_of(wheel, spec)
        dest = out / line
        if wheel.name in named and named[wheel.name][0] != line:  # the lines' indexes, one release's assets
            first = named[wheel.name][1]
            raise NameCollision(
                f"{folder}: one filename, {wheel.name}, in two product lines: from {describe_source(first)} and "
                f"from {describe_source(spec.get('source', CHECKOUT))}; a release's assets hold one file per name",
                hint="each line's wheels carry versions of their own (this checkout's, in mamba_ssm/__init__.py, is "
                "one upstream never published): rebuild the one built with the other line's version",
            )
        named.setdefault(wheel.name, (line, spec.get("source", CHECKOUT)))
        if (dest / wheel.name).exists():
            raise UsageError(f"{folder}: two wheels named {wheel.name}", hint="keep one of them")
        dest.mkdir(parents=True, exist_ok=True)
        record = evidence.path_of(wheel)  # what was checked of it (the index reads and checks it)
        for f in (wheel, Path(f"{wheel}.spec.json"), *([record] if os.path.lexists(record) else [])):
            _place(f, dest / f.name)
        placed.setdefault(line, []).append(dest / wheel.name)
    return placed


def variant_files(index: Path, wheels: Path) -> list[Path]:
    """The variant root's files (PEP 825 variant wheels, their plain fallback, each release's -variants.json)
    that INDEX made from the wheels under WHEELS (this run's): what a tag release uploads beside its wheels,
    where the variant pages link them (builder.verifying.variants.variant_url). Read from the index's live manifest."""
    from builder.publishing.index.model import Manifest
    from builder.verifying import variants

    try:
        doc = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
        files, record = Manifest.from_json(doc).files, doc.get("wheel_variants") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UsageError(f"--index {index}: no index manifest ({type(err).__name__}: {err})",
                         hint="pass the folder `python -m builder index --out` made") from None  # fmt: skip
    ours = {w.name for w in wheels_in(wheels)}
    out, releases = [], set()
    for name, made in sorted((record.get("files") or {}).items()):
        if made.get("from") in ours and made["from"] in files:
            out.append(index / "files" / name)
            releases.add((files[made["from"]].project, files[made["from"]].release))
    for project, release in sorted(releases):
        out.append(index / variants.ROOT / project / variants.variants_json_name(project, release))
    return out


def _place(src: Path, dest: Path) -> None:
    # A hard link: a release's wheels are gigabytes, and the runner's disk is small.
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)
