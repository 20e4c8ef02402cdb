"""What built a wheel, recorded inside it: ``<name>.dist-info/farm-provenance.json``, listed in its RECORD.

Source, recipe and patches, executor, image and toolchain, platform, torch, spec id, inputs hash and
SOURCE_DATE_EPOCH; no clock time and no host path, so a rebuild writes the same bytes. The sidecar carries
the same record; the doctor reads it from the installed dist-info.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from builder.facts.untrusted import field, load_json, open_zip, zip_read
from mamba_ssm.doctor.report import source_words

NAME = "farm-provenance.json"
SCHEMA = 1


def checkout_commit(repo: Path) -> str | None:
    """REPO's HEAD commit (the inputs hash covers uncommitted edits), or None outside git."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], check=False, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and len(out) == 40 else None


def checkout_dirty(repo: Path) -> bool | None:
    """Whether REPO's tree differs from its HEAD commit in what a build takes: a tracked file changed, staged,
    deleted, or an untracked file git does not ignore (the build's snapshot takes those too:
    ``git ls-files -co --exclude-standard``, builder/building/executors). Ignored files never reach a build, so they
    do not count. None outside git."""
    try:
        proc = subprocess.run(  # --no-optional-locks: reading the state writes nothing into the checkout
            ["git", "--no-optional-locks", "-C", str(repo), "status", "--porcelain", "-z", "--untracked-files=all"],
            check=False,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bool(proc.stdout.strip(b"\0")) if proc.returncode == 0 else None


def _patch_sha256(patch) -> str:
    edits = [{"search": e.search, "replace": e.replace, "count": e.count} for e in patch.edits]
    blob = json.dumps({"name": patch.name, "file": patch.file, "edits": edits}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def record(
    spec, *, epoch: int, ran: dict | None = None, commit: str | None = None, dirty: bool | None = None, recipe=None
) -> dict:
    """The provenance of SPEC's wheel. RAN: what built it, the executor's ``ran(spec)`` (executor, image, base,
    toolchain); RECIPE: its Recipe (a recipe build); DIRTY: the checkout had changes COMMIT does not hold
    (checkout_dirty), so COMMIT alone does not give its source. The platform tag is added after repair
    (with_platform): the plan's manylinux policy is a wish, the repaired wheel's tag is the fact."""
    ran = ran or {}
    if spec.from_recipe and recipe is not None:
        from builder.planning.recipes import CellFacts, decide

        source = recipe.source.provenance()
        applied = [d.patch for d in decide(recipe, CellFacts.from_spec(spec)) if d.applies]
        recipe_rec = {
            "name": recipe.name,
            "sha256": recipe.digest,
            "patches": {p.name: _patch_sha256(p) for p in applied},
        }
        if spec.trim:  # said only when so: the profile's trimmed kernel set, never a release's
            recipe_rec["trim"] = True
    else:
        source = {"kind": "checkout", "commit": commit}
        if dirty:  # said only when it is so: a clean tree's record (and wheel) is what it was before the field
            source["dirty"] = True
        recipe_rec = None
    return {
        "schema": SCHEMA,
        "id": spec.id,
        "inputs_hash": spec.inputs_hash,
        "source": source,
        "recipe": recipe_rec,
        "executor": ran.get("executor"),
        "image": ran.get("image"),
        "base": ran.get("base"),
        "toolchain": ran.get("toolchain"),
        "platform": None,
        "toolkit": spec.toolkit,
        "torch": spec.torch_version,
        "source_date_epoch": int(epoch),
    }


def with_platform(rec: dict, platform: str) -> dict:
    """REC once repair has chosen the wheel's platform tag (manylinux_2_34_x86_64, say, for a host build planned
    for manylinux_2_28)."""
    return {**rec, "platform": platform}


def dumps(rec: dict) -> bytes:
    return (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode()


def read_wheel(wheel: Path) -> dict | None:
    """The record inside WHEEL, or None (a wheel the farm did not build, or built before it recorded).

    A wheel is outside data: a record that is there but not of the record's shape (not an object, a
    ``source`` that is not one, a commit that is not text) is Untrusted, never read as no record (a verify
    would then rebuild this tree's HEAD and blame the build) nor an AttributeError."""
    with open_zip(wheel, wheel.name) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/" + NAME)]
        if len(names) != 1:
            return None
        where = f"{wheel.name}: {names[0]}"
        rec = load_json(zip_read(zf, names[0], 1 << 16, wheel.name), where)
    src = field(rec, "source", (dict, type(None)), where, None)
    if src is not None:
        for key in ("kind", "commit", "name", "version", "sha256"):
            field(src, key, (str, type(None)), f"{where}: source", None)
        field(src, "dirty", (bool, type(None)), f"{where}: source", None)
    return rec


def summary(rec: dict) -> str:
    """One line for people: what built the wheel."""
    src = rec.get("source") if isinstance(rec.get("source"), dict) else {}
    what = source_words(src)
    ran = (
        f"image {rec.get('image')}"
        if rec.get("executor") == "docker"
        else f"{rec.get('executor') or 'unknown'} executor"
    )
    tc = rec.get("toolchain") if isinstance(rec.get("toolchain"), dict) else {}
    cuda = tc.get("cuda") if isinstance(tc.get("cuda"), dict) else None
    if cuda:
        ran += f", CUDA {cuda.get('version')} from {cuda.get('origin')}"
    cross = tc.get("cross") if isinstance(tc.get("cross"), dict) else None
    if tc.get("compiler") == "cross" and cross:
        ran += f", cross compiler {cross.get('host')} -> {cross.get('target')}"
        if cross.get("python"):
            ran += f", pip and setup.py on {cross.get('python')}"
    return f"{what}, build {rec.get('id')} (inputs {rec.get('inputs_hash')}), {ran}, {rec.get('platform')}"
