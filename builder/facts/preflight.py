"""The recorded preflight of every upstream release beside every torch: builder/data/preflight.toml, written only
by ``python -m builder recipe check --releases --record`` (builder/commands/recipe.py), read here.

One ``[[cell]]`` per (project, release, torch, accelerator) tried: ``reason`` is the real error where it failed (the
patch that did not apply, the metadata setup.py could not prepare, the compiler's first error line), absent where
it passed; ``compiled`` says whether the syntax-only compile ran (this machine had the torch's headers);
``requires`` is the release's own Requires-Dist as its setup.py declared it, from which :func:`pairs` reads the
causal-conv1d a mamba-ssm release names.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.facts.paths import DATA

RECORD = DATA / "preflight.toml"
ACC_RE = re.compile(r"(?:(cu|cuda-?)(\d+)(?:\.\d+)?|(hip|rocm-?)(\d+)(?:\.\d+)*|(cpu))")


@dataclass(frozen=True)
class Outcome:
    project: str
    version: str
    torch: str  # the release tried ("2.14.1")
    accelerator: str  # acc_key: "cu13", "hip7", "cpu"
    reason: str | None  # None: it passed
    compiled: bool
    requires: tuple[str, ...] = ()


def acc_key(facts_or_name) -> str:
    """The accelerator as the record keys it, the toolkit's major alone: "cu13", "hip7", "cpu". Takes CellFacts or
    a name in any of the farm's spellings (cu13, cuda-13.0, hip72, rocm-7.2, cpu)."""
    kind = getattr(facts_or_name, "kind", None)
    if kind is not None:
        if kind == "cpu":
            return "cpu"
        return ("cu" if kind == "cuda" else "hip") + facts_or_name.toolkit.split(".")[0]
    m = ACC_RE.fullmatch(str(facts_or_name))
    if not m:
        raise ValueError(f"{facts_or_name!r} is not an accelerator (cu13, cuda-13.0, hip72, rocm-7.2, cpu)")
    if m.group(5):
        return "cpu"
    if m.group(1):
        return f"cu{m.group(2)}"
    digits = m.group(4)
    # hip72 is ROCm 7.2 (major 7); rocm-7.2 / rocm7 say the major themselves
    return f"hip{digits[0] if m.group(3) == 'hip' and len(digits) > 1 else digits}"


def _minor(torch: str) -> str:
    return ".".join(torch.split("+")[0].split(".")[:2])


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)  # a TOML basic string: JSON's escapes are TOML's


def _key(o: Outcome) -> tuple[str, str, str, str]:
    return canonicalize_name(o.project), str(Version(o.version)), _minor(o.torch), o.accelerator


def write(outcomes: list[Outcome], path: Path = RECORD) -> Path:
    """The record with OUTCOMES in place of the cells they cover (the others kept), written through a temporary
    file moved over it: never half written."""
    merged = {**load(path), **{_key(o): o for o in outcomes}}
    outcomes = list(merged.values())
    lines = [
        "# The preflight of every upstream release beside every torch (builder/facts/preflight.py reads it).",
        "# Written by `python -m builder recipe check --releases --record`; never edited by hand.",
        "",
    ]
    for o in sorted(outcomes, key=lambda o: (o.project, Version(o.version), Version(o.torch), o.accelerator)):
        lines += ["[[cell]]", f"project = {_q(o.project)}", f"version = {_q(o.version)}", f"torch = {_q(o.torch)}",
                  f"accelerator = {_q(o.accelerator)}", f"compiled = {str(o.compiled).lower()}"]  # fmt: skip
        if o.reason is not None:
            lines.append(f"reason = {_q(o.reason[:600])}")
        if o.requires:
            lines.append("requires = [" + ", ".join(_q(r) for r in o.requires) + "]")
        lines.append("")
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
    load.cache_clear()
    return path


@functools.lru_cache(maxsize=4)
def load(path: Path = RECORD) -> dict[tuple[str, str, str, str], Outcome]:
    """(project, version, torch minor, accelerator key) -> Outcome; {} when nothing is recorded."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    out = {}
    for cell in data.get("cell", []):
        o = Outcome(cell["project"], cell["version"], cell["torch"], cell["accelerator"], cell.get("reason"),
                    bool(cell.get("compiled")), tuple(cell.get("requires", ())))  # fmt: skip
        out[_key(o)] = o
    return out


def preflight_reason(project: str, version: str, torch: str, accelerator: str) -> str | None:
    """Why (project, version) cannot be built beside TORCH (a release, "2.14.1", or a minor) on ACCELERATOR (cu13,
    cuda-13.0, hip72, rocm-7.2): the recorded error, or None where the recorded preflight passed or none is
    recorded for the cell (a cell not tried has no reason)."""
    try:
        key = (canonicalize_name(project), str(Version(version)), _minor(torch), acc_key(accelerator))
    except (InvalidVersion, ValueError):
        return None
    found = load().get(key)
    return found.reason if found is not None else None


def pairs(version: str, project: str = "mamba-ssm", partner: str = "causal-conv1d") -> str | None:
    """The PARTNER releases a PROJECT release names in its own metadata (its Requires-Dist, an extra's included):
    a specifier (">=1.4.0"), "" where it names PARTNER unpinned, None where it does not name it (or nothing passed)."""
    want = (canonicalize_name(project), str(Version(version)))
    for (name, ver, _, _), o in load().items():
        if (name, ver) != want or not o.requires:
            continue
        for raw in o.requires:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == canonicalize_name(partner):
                return str(req.specifier)
        return None
    return None
