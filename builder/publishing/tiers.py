"""Each cell's tier, computed from evidence records and the plan, never typed: ``python -m builder evidence``.

A record proves the cells of the build that makes its kind of wheel (line, project, label, Python tag,
machine); the evidence ledger ``builder/data/evidence.json`` is harvested from real runs, and its ``hip``
key holds HIP compile records (:func:`cell_detail`). :func:`overclaims` fails a ledger that claims more.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from builder.errors import UsageError
from builder.facts import paths
from builder.facts.untrusted import Untrusted, expect, load_json, read_regular
from builder.verifying import evidence
from mamba_ssm.elf import tag_machine

LEDGER = paths.DATA / "evidence.json"
LEDGER_SCHEMA = 1
_MAX_LEDGER = 16 << 20
RANK = {t: i for i, t in enumerate(reversed(evidence.TIERS))}  # planned 0 ... gpu-run 3


# --------------------------------------------------------------------------- wheel kinds


def line_of_record(rec: dict) -> str:
    """``upstream`` for a wheel built from a recipe's sdist, ``canary`` for one of a default branch's head (it proves
    no release's cell), else ``checkout`` (its provenance's ``source``)."""
    src = (rec.get("built") or {}).get("source")
    if isinstance(src, dict) and src.get("kind") == "canary":
        return "canary"
    return "upstream" if isinstance(src, dict) and src.get("kind") != "checkout" else "checkout"


def record_kind(rec: dict) -> tuple[str, str, str, str, str]:
    """(line, project, label, interpreter-abi, machine) of the wheel a record is of (UsageError: not a wheel name)."""
    try:
        name, version, _build, tags = parse_wheel_filename(rec["wheel"])
    except (InvalidWheelFilename, KeyError, TypeError) as err:
        raise UsageError(f"evidence record {str(rec.get('wheel'))[:200]!r}: not a wheel file name ({err})") from None
    (tag,) = tuple(tags)[:1] or (None,)
    line = line_of_record(rec)
    label = str(version.local or "").lower()
    if line == "upstream":  # one release's wheel proves nothing of another release's (the release axis)
        label = f"{version.public}+{label}"
    return (line, canonicalize_name(name), label, f"{tag.interpreter}-{tag.abi}",
            tag_machine(tag.platform) or tag.platform)  # fmt: skip


def build_kind(spec) -> tuple[str, str, str, str, str]:
    """The same of the wheel a BuildSpec makes."""
    from builder.facts import compat

    python = f"{compat.load().stable_python_tag}-abi3" if spec.stable else f"{spec.python_tag}-{spec.python_tag}"
    label = spec.label.lower()
    if spec.from_recipe:  # the release it builds: the version its source pins (``kind:name==version@pin``)
        label = f"{spec.source.partition('==')[2].partition('@')[0]}+{label}"
    return ("upstream" if spec.from_recipe else "checkout", canonicalize_name(spec.project), label,
            python, tag_machine(spec.platform) or spec.platform)  # fmt: skip


# --------------------------------------------------------------------------- the ledger


def load_records(path: Path) -> tuple[list[dict], list[dict]]:
    """The ledger's wheel records and HIP compile records, each checked as any record read from outside."""
    if not path.is_file():
        return [], []
    try:
        doc = expect(load_json(read_regular(path, _MAX_LEDGER), str(path)), dict, str(path))
        if doc.get("schema") != LEDGER_SCHEMA:
            raise Untrusted(f"{path}: schema {doc.get('schema')!r}, this builder reads {LEDGER_SCHEMA}")
        records = expect(doc.get("records"), list, f"{path}: 'records'")
        hip = expect(doc.get("hip", []), list, f"{path}: 'hip'")
        return ([evidence.check(r, f"{path}: record {i}") for i, r in enumerate(records)],
                [evidence.check_hip(r, f"{path}: hip record {i}") for i, r in enumerate(hip)])  # fmt: skip
    except Untrusted as err:
        raise UsageError(f"{err}", hint="remake it with `python -m builder evidence harvest`") from None


def load_ledger(path: Path = LEDGER) -> list[dict]:
    """The ledger's wheel records, each checked as any record read from outside (UsageError naming the file)."""
    return load_records(path)[0]


def load_hip(path: Path = LEDGER) -> list[dict]:
    """The ledger's HIP compile records (its ``hip`` key), checked the same way."""
    return load_records(path)[1]


def _write(ledger: Path, records: list[dict], hip: list[dict]) -> None:
    doc = {"schema": LEDGER_SCHEMA, "records": records}
    if hip:
        doc["hip"] = hip
    tmp = ledger.with_name(f".{ledger.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, ledger)


def _slim(rec: dict) -> dict:
    """What the ledger keeps of a record: all of it but the provenance's reproducibility detail."""
    built = rec.get("built") or {}
    keep = ("id", "source", "executor", "image", "base", "toolkit", "toolchain", "torch", "recipe")
    return {**rec, "built": {k: built[k] for k in keep if k in built}}


def harvest(wheels: Path, ledger: Path = LEDGER) -> tuple[int, int]:
    """Read every ``<wheel>.evidence.json`` under WHEELS (the wheel beside it must be the bytes it is of) into the
    ledger: a record replaces the one of the same wheel kind. Returns (records read, records in the ledger)."""
    from builder.facts.spec import sha256_of

    if not wheels.is_dir():
        raise UsageError(f"--wheels {wheels}: no such directory", hint="point it at a dist/wheels of a real run")
    found = []
    for path in sorted(wheels.rglob("*.whl" + evidence.SUFFIX)):
        wheel = path.with_name(path.name.removesuffix(evidence.SUFFIX))
        if not wheel.is_file():
            raise UsageError(f"{path}: no wheel beside it", hint="harvest a dist/wheels folder as the farm left it")
        rec = evidence.read(path, wheel_sha256=sha256_of(wheel))
        if rec["wheel"] != wheel.name:
            raise UsageError(f"{path}: the record is of {rec['wheel']!r}, not {wheel.name}")
        if not rec.get("built"):
            raise UsageError(f"{path}: the record says nothing of how the wheel was built", hint="rebuild it")
        found.append(_slim(rec))
    old, hip = load_records(ledger)
    by_kind = {record_kind(r): r for r in old}
    for r in found:
        by_kind[record_kind(r)] = r
    records = [by_kind[k] for k in sorted(by_kind)]
    _write(ledger, records, hip)
    return len(found), len(records)


def harvest_hip(path: Path, ledger: Path = LEDGER) -> dict:
    """Read the HIP compile record at PATH into the ledger's ``hip`` key, in place of its line's earlier one."""
    rec = evidence.read_hip(path)
    records, hip = load_records(ledger)
    _write(ledger, records, [*(h for h in hip if h["line"] != rec["line"]), rec])
    return rec


def hip_record(build, hip: list[dict]) -> dict | None:
    """The HIP compile record that speaks for BUILD: a ROCm build of the record's line (the kernels it compiled are
    this checkout's), else None."""
    if not build.label.startswith("hip"):
        return None
    line = "upstream" if build.from_recipe else "checkout"
    return next((h for h in hip if h["line"] == line), None)


def cell_detail(build, tier: str, rec: dict | None, hip: list[dict]) -> str:
    """What a cell's tier rests on, for a page: its wheel record's detail; with none, a ROCm cell's HIP compile
    (:func:`builder.verifying.evidence.hip_detail`), else ``planned``."""
    if rec is not None:
        return evidence.tier_detail(rec)
    found = hip_record(build, hip) if tier == "planned" else None
    return evidence.hip_detail(found, build.archs) if found else tier


def by_kind(records: list[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for r in records:
        k = record_kind(r)
        if k not in out or RANK[evidence.tier(r)] > RANK[evidence.tier(out[k])]:
            out[k] = r
    return out


def overclaims(ledger: list[dict], fresh: list[dict]) -> list[str]:
    """Where the ledger claims a stronger tier for a wheel kind than FRESH records (this run's) now prove."""
    claims = by_kind(ledger)
    out = []
    for r in fresh:
        old = claims.get(record_kind(r))
        if old is not None and RANK[evidence.tier(old)] > RANK[evidence.tier(r)]:
            out.append(f"{r['wheel']}: the ledger says {evidence.tier_detail(old)}, this build proves "
                       f"{evidence.tier_detail(r)}")  # fmt: skip
    return out


# --------------------------------------------------------------------------- cells


def cell_tiers(plan, records: list[dict]) -> list[tuple[object, object, str, dict | None]]:
    """(cell, the build serving it, its tier, the record) for every (build, served cell) of PLAN."""
    from builder.planning.plan import served_cells

    kinds = by_kind(records)
    out = []
    for b in plan.builds:
        rec = kinds.get(build_kind(b))
        out += [(c, b, evidence.tier(rec, c.torch), rec) for c in served_cells(plan, b)]
    return out


def counts(plan, records: list[dict]) -> dict[str, Counter]:
    """Per product line, how many cells have each tier (every tier named, 0 included)."""
    out: dict[str, Counter] = {}
    for _cell, b, t, _rec in cell_tiers(plan, records):
        line = "upstream" if b.from_recipe else "checkout"
        out.setdefault(line, Counter({k: 0 for k in evidence.TIERS}))[t] += 1
    return out


def resolve_counts(plan) -> dict[str, tuple[int, int, int]]:
    """Per product line: (cells recorded to resolve beside their torch, cells left out because they do not, cells
    never resolved) of PLAN (builder/data/installs.json; the plan drops the ones that do not install)."""
    from builder.facts import installs
    from builder.planning.plan import cell_outcomes

    record = installs.load()
    out: dict[str, list[int]] = {}
    for b in plan.builds:
        line = out.setdefault("upstream" if b.from_recipe else "checkout", [0, 0, 0])
        for o in cell_outcomes(plan, b, record):
            line[0 if o is not None and o.installs else 2] += 1  # not resolvable here counts as never resolved
    for _cell, reason in plan.dropped:
        if " does not install beside torch " in reason:
            out.setdefault("upstream" if reason.split(" ", 1)[0] in plan.recipes else "checkout", [0, 0, 0])[1] += 1
    return {k: tuple(v) for k, v in out.items()}


def check_ledger(records: list[dict], plans: list) -> list[str]:
    """What in the ledger no longer stands (the docs build fails on any): a record whose wheel kind no build of
    PLANS makes (the plan moved on: harvest again), or whose tags disagree with its own wheel's name."""
    known = {build_kind(b) for p in plans for b in p.builds}
    problems = []
    for r in records:
        if record_kind(r) not in known:
            problems.append(f"{r['wheel']}: no build of the plan makes this kind of wheel any more")
        tag = "-".join(r["wheel"].removesuffix(".whl").split("-")[-3:])
        if r["verified"].get("tags") != [tag]:
            problems.append(f"{r['wheel']}: its record verified tags {r['verified'].get('tags')}, the wheel is {tag}")
    return problems


def command_tier(plan, records: list[dict], line: str, label: str, page: str) -> str:
    """The note printed beside an install command of LINE pinning LABEL from the variant page PAGE: the tiers of the
    cells it installs on, strongest first, and where each holds (``tier: cpu-checked on x86_64; compiled on the
    rest``). The user pages carry it; tests/test_docs.py recomputes it."""
    torch = page.split("-torch", 1)[1].split("-", 1)[0] if "-torch" in page else None
    weakest: dict[tuple[str, str], str] = {}  # (machine, cpXY) -> the weakest tier of the projects it installs
    for cell, b, tier, _rec in cell_tiers(plan, records):
        if ("upstream" if b.from_recipe else "checkout") != line or b.label.lower() != label.lower():
            continue
        if b.from_recipe and b.source != plan.recipes[b.project].source.identity:
            continue  # the pages' commands pin each recipe's pinned release: another release's cells are not theirs
        if page not in {b.variant, *b.serves} or (torch and cell.torch != torch):
            continue
        where = (cell.platform.removeprefix("linux_"), "cp" + cell.python.replace(".", ""))
        if where not in weakest or RANK[tier] < RANK[weakest[where]]:
            weakest[where] = tier
    by: dict[str, set] = {}
    for where, tier in weakest.items():
        by.setdefault(tier, set()).add(where)
    every = set(weakest)
    if not by:
        raise LookupError(f"no cell of the {line} line's release installs {label} from {page}")
    order = sorted(by, key=RANK.__getitem__, reverse=True)
    parts = []
    for tier in order[:-1]:
        where = []
        for machine in sorted({m for m, _ in by[tier]}):
            pys = sorted(p for m, p in by[tier] if m == machine)
            all_pys = sorted(p for m, p in every if m == machine)
            where.append(machine if pys == all_pys else f"{' '.join(pys)} {machine}")
        parts.append(f"{tier} on {', '.join(where)}")
    parts.append(f"{order[-1]} on the rest" if len(order) > 1 else order[-1])
    return "tier: " + "; ".join(parts)
