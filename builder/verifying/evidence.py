"""What was checked of a wheel: ``<wheel>.evidence.json``, beside it in dist/wheels, the index and a release.

Written by the farm as it works (the verifier's and smoke test's results, the GPU gate's runs), never by
hand; :func:`tier` reads a record's tier (gpu-run, cpu-checked, compiled), and records from outside are read
through :func:`read`. Also the HIP compile record (``check_hip``, ``read_hip``, ``hip_detail``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

from builder.errors import UsageError
from builder.facts.untrusted import Untrusted, expect, load_json, read_regular, shown

SCHEMA = 1
SUFFIX = ".evidence.json"
MAX_BYTES = 1 << 20  # a record is a few kB; a gate appends one small entry per run
MAX_GPU_RUNS = 256
MAX_COMMANDS = 64  # a recipe's [test] commands, each with its output
MAX_OUTPUT = 2048  # characters of a command's output; builder/verifying/wheels.py keeps 2000 (and an ellipsis)
TIERS = ("gpu-run", "cpu-checked", "compiled", "planned")  # strongest first
TIER_TEXT = {
    "gpu-run": "run on a GPU",
    "cpu-checked": "imported, numerics checked on CPU",
    "compiled": "compiled and verified only",
    "planned": "planned: no wheel built here yet",
}


def path_of(wheel: Path | str) -> Path:
    return Path(f"{wheel}{SUFFIX}")


def make(wheel: Path, *, built: dict | None, verified: dict, smoke: dict | None) -> dict:
    """The record of WHEEL (the verified file, hashed here) from what was run: SMOKE is the smoke test's return
    (None: it did not run, ``--no-smoke``)."""
    return {
        "schema": SCHEMA,
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "built": built,
        "verified": verified,
        "imported": (smoke or {}).get("imported"),
        "numerics": list((smoke or {}).get("numerics") or []),
        "gpu": [],
    }


def dumps(rec: dict) -> str:
    return json.dumps(rec, indent=1, sort_keys=True) + "\n"


def write(path: Path, rec: dict) -> None:
    """Write the record at PATH with one rename (a reader never sees half of one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(dumps(rec))
    os.replace(tmp, path)


# --------------------------------------------------------------------------- reading a record from outside


def check(rec: object, what: str) -> dict:
    """RECORD's shape, checked field by field (Untrusted naming WHAT and the field otherwise)."""
    rec = expect(rec, dict, what)
    if rec.get("schema") != SCHEMA:
        raise Untrusted(f"{what}: schema {shown(repr(rec.get('schema')), 40)}, this builder reads {SCHEMA}")
    expect(rec.get("wheel"), str, f"{what}: 'wheel'")
    sha = expect(rec.get("sha256"), str, f"{what}: 'sha256'")
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise Untrusted(f"{what}: 'sha256' is not 64 hex digits")
    if rec.get("built") is not None:
        expect(rec["built"], dict, f"{what}: 'built'")
    verified = expect(rec.get("verified"), dict, f"{what}: 'verified'")
    expect(verified.get("tags"), list, f"{what}: 'verified.tags'")
    imported = rec.get("imported")
    if imported is not None:
        imported = expect(imported, dict, f"{what}: 'imported'")
        expect(imported.get("torch"), str, f"{what}: 'imported.torch'")
        for key in ("modules", "api", "deps"):
            items = expect(imported.get(key, []), list, f"{what}: 'imported.{key}'")
            if not all(isinstance(m, str) for m in items):
                raise Untrusted(f"{what}: 'imported.{key}' is not a list of names")
        commands = expect(imported.get("commands", []), (list, int), f"{what}: 'imported.commands'")
        if isinstance(commands, list) and (len(commands) > MAX_COMMANDS or not all(
            isinstance(c, dict) and isinstance(c.get("argv"), str) and isinstance(c.get("output"), str)
            and isinstance(c.get("stderr", ""), str) and max(len(c["output"]), len(c.get("stderr", ""))) <= MAX_OUTPUT
            for c in commands
        )):  # fmt: skip
            raise Untrusted(f"{what}: 'imported.commands' is not a list of at most {MAX_COMMANDS} commands with "
                            f"their output (at most {MAX_OUTPUT} characters each)")  # fmt: skip
    for key, limit in (("numerics", 64), ("gpu", MAX_GPU_RUNS)):
        items = expect(rec.get(key), list, f"{what}: '{key}'")
        if len(items) > limit or not all(isinstance(i, dict) for i in items):
            raise Untrusted(f"{what}: '{key}' is not a list of at most {limit} objects")
    for run in rec["gpu"]:
        expect(run.get("passed"), bool, f"{what}: 'gpu[].passed'")
        expect(run.get("gpu"), str, f"{what}: 'gpu[].gpu'")
    return rec


def read(path: Path | str, *, wheel_sha256: str | None = None) -> dict | None:
    """The record at PATH (None when there is none), read as outside data: regular file, capped, depth-checked,
    each field's type checked; WHEEL_SHA256, when given, must be the one the record is of. A bad record is a
    UsageError naming the file."""
    path = str(path)
    if not os.path.lexists(path):
        return None
    try:
        rec = check(load_json(read_regular(path, MAX_BYTES), path), path)
    except Untrusted as err:
        raise UsageError(
            f"{err}: not an evidence record the farm wrote", hint="rebuild the wheel, or remove the file"
        ) from None
    if wheel_sha256 is not None and rec["sha256"] != wheel_sha256:
        raise UsageError(
            f"{path}: the record is of sha256 {rec['sha256'][:16]}..., the wheel beside it is {wheel_sha256[:16]}...",
            hint="a record says what was checked of one set of bytes: rebuild the wheel, or remove the stale record",
        )
    return rec


def append_gpu(path: Path, run: dict) -> dict:
    """Add the GPU gate's RUN to the record at PATH (rewritten with one rename); returns the record."""
    rec = read(path)
    if rec is None:
        raise UsageError(
            f"{path}: no evidence record to add the GPU run to", hint="rebuild the wheel with this builder"
        )
    rec["gpu"] = [*rec["gpu"], run][-MAX_GPU_RUNS:]
    write(Path(path), rec)
    return rec


# --------------------------------------------------------------------------- what a record proves


def _minor(version: object) -> str:
    return ".".join(str(version or "").split("+")[0].split(".")[:2])


def tier(rec: dict | None, torch: str | None = None) -> str:
    """The strongest tier RECORD proves (None: planned). TORCH (a minor, ``2.13``): what it proves for a user of
    that torch: a run or an import with another torch (a stable wheel serves many) proves only that it compiled."""
    if rec is None:
        return "planned"
    same = lambda v: torch is None or _minor(v) == torch
    if any(r.get("passed") is True and r.get("device", "cuda") != "cpu" and same(r.get("torch", torch))
           for r in rec.get("gpu") or ()):  # fmt: skip
        return "gpu-run"
    if rec.get("imported") and numerics_passed(rec) and same(rec["imported"].get("torch")):
        return "cpu-checked"
    return "compiled"


def numerics_passed(rec: dict) -> bool:
    """Whether RECORD's numerics checks ran and passed: at least one, each a measured error within its tolerance
    (this checkout's smoke script and a recipe's ``[test] numerics`` commands both record them so)."""
    checks = rec.get("numerics") or ()
    return bool(checks) and all(_within(c.get("max_abs_error"), c.get("tolerance")) for c in checks)


def _within(err: object, tol: object) -> bool:
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return number(err) and number(tol) and 0 <= err <= tol


def gpus(rec: dict | None) -> list[str]:
    """The GPUs that ran the wheel and passed (``H100 (sm_90)``)."""
    out = []
    for r in (rec or {}).get("gpu") or ():
        if r.get("passed") is True and r.get("device", "cuda") != "cpu":
            name = f"{r.get('gpu')} ({r['sm']})" if r.get("sm") else str(r.get("gpu"))
            if name not in out:
                out.append(name)
    return out


def tier_detail(rec: dict | None) -> str:
    """A tier with what backs it, for a page: ``gpu-run (H100 (sm_90))``, ``cpu-checked (torch 2.13.0)``."""
    t = tier(rec)
    if t == "gpu-run":
        return f"gpu-run ({', '.join(gpus(rec))})"
    if t == "planned":
        return t
    imported = rec.get("imported") or {}
    if imported:
        how = "imported" + (" under emulation" if imported.get("emulated") else "")
        return f"{t} ({how} with torch {imported.get('torch')})"
    return f"{t} (not imported)"


FIGURE_CHARS = 80  # a test command's output shown on the wheel's line: one short line holding a number
_FIGURE_RE = re.compile(r"[^\n]*\d[^\n]*")


def figures(imported: dict) -> list[tuple[int, str]]:
    """(number, output) of each recipe test command whose output is a figure: one line of at most FIGURE_CHARS
    characters with a digit in it (a numerics check's error, a count)."""
    commands = imported.get("commands")
    found = []
    for i, c in enumerate(commands if isinstance(commands, list) else (), 1):
        out = c.get("output", "").strip()
        if len(out) <= FIGURE_CHARS and _FIGURE_RE.fullmatch(out):
            found.append((i, out))
    return found


def tag_glibc(tag: str) -> str | None:
    """The glibc a PEP 600 tag needs: manylinux_2_28_x86_64 -> "2.28"; None for any other tag."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def glibc_floor(rec: dict | None) -> str | None:
    """The glibc a record's wheel needs, as the tag repair gave it says; None where nothing was repaired (no
    record, or the variant form of a repaired wheel)."""
    return tag_glibc(str(((rec or {}).get("verified") or {}).get("repaired") or ""))


def line(rec: dict) -> str:
    """One line for the build's output: what was verified, what the smoke test ran, with which torch."""
    v = rec.get("verified") or {}
    parts = [f"tags {', '.join(v.get('tags') or ())}"]
    abi = sorted({k for k in (v.get("abi") or {}).values() if k})
    parts.append(f"ABI {', '.join(abi)}" if abi else "ABI neutral")
    parts.append(f"archs {', '.join(v['archs'])}" if v.get("archs") else "no device code")
    for arch, note in sorted((v.get("served_by") or {}).items()):
        parts.append(f"{arch} served by {note.split(' runs ', 1)[-1].split(':', 1)[0]}")
    if v.get("machine"):
        parts.append(f"ELF {v['machine']}")
    if v.get("repaired"):
        reaches = f" (auditwheel: {v['reaches']})" if v.get("reaches") else ""
        parts.append(f"repaired {v['repaired']}{reaches}")
    text = f"verified ({', '.join(parts)})"
    imported = rec.get("imported")
    if imported:
        what = [f"imports {', '.join(imported.get('modules') or ())}"]
        if imported.get("api"):
            what.append(f"API {', '.join(imported['api'])}")
        if imported.get("deps"):
            what.append(f"with its {len(imported['deps'])} declared dependencies")
        for n in rec.get("numerics") or ():
            what.append(f"numerics {n.get('check')} on {n.get('device', 'cpu')}")
        what += [f"test command {i} printed {shown(out, FIGURE_CHARS)}" for i, out in figures(imported)]
        emulated = " under emulation" if imported.get("emulated") else ""
        text += f", smoke-tested ({'; '.join(what)}) with torch {imported.get('torch')}{emulated}"
    else:
        text += ", not smoke-tested"
    for g in gpus(rec):
        text += f", run on {g}"
    return text


# --------------------------------------------------------------------------- a HIP compile (no wheel)

# What ``python -m builder hip-compile --evidence PATH`` writes (builder/building/hip.py): the kernels hipified and
# compiled with a real hipcc, their code objects audited, for which gfx targets and with which toolchain. Not of a
# wheel (torch's ROCm builds are not on PyPI: nothing here links against a ROCm torch), so it proves no tier: the
# ledger keeps it under its own key, and a ROCm cell of its line with no wheel record stays planned, saying this.
HIP_KIND = "hip-compile"
MAX_HIP_TUS = 64
_GFX = re.compile(r"gfx[0-9a-f]{2,5}")
_HIP_VERSION = re.compile(r"[0-9]{1,4}(\.[0-9A-Za-z]{1,16}){0,4}(-[0-9A-Za-z.]{1,32})?")  # 5.7.31921-0
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]{0,199}(:[A-Za-z0-9._-]{1,128})?")


def check_hip(rec: object, what: str) -> dict:
    """A HIP compile record's shape, checked field by field (Untrusted naming WHAT and the field otherwise)."""
    rec = expect(rec, dict, what)
    if rec.get("schema") != SCHEMA or rec.get("kind") != HIP_KIND:
        raise Untrusted(f"{what}: not a {HIP_KIND} record of schema {SCHEMA}")
    if rec.get("linked") is not False:
        raise Untrusted(f"{what}: 'linked' must be false (a HIP compile links against no torch)")
    if expect(rec.get("line"), str, f"{what}: 'line'") not in ("checkout", "upstream"):
        raise Untrusted(f"{what}: 'line' is neither checkout nor upstream")
    if not _HIP_VERSION.fullmatch(expect(rec.get("hip_version"), str, f"{what}: 'hip_version'")):
        raise Untrusted(f"{what}: 'hip_version' is empty or not a version")
    archs = expect(rec.get("archs"), list, f"{what}: 'archs'")
    if not archs or not all(isinstance(a, str) and _GFX.fullmatch(a) for a in archs):
        raise Untrusted(f"{what}: 'archs' is not a list of gfx targets")
    toolchain = expect(rec.get("toolchain"), dict, f"{what}: 'toolchain'")
    if not _IMAGE.fullmatch(expect(toolchain.get("image"), str, f"{what}: 'toolchain.image'")):
        raise Untrusted(f"{what}: 'toolchain.image' is not an image name")
    tus = expect(rec.get("tus"), list, f"{what}: 'tus'")
    if not tus or len(tus) > MAX_HIP_TUS or not all(isinstance(t, dict) for t in tus):
        raise Untrusted(f"{what}: 'tus' is not a list of 1 to {MAX_HIP_TUS} objects")
    return rec


def read_hip(path: Path | str) -> dict:
    """The HIP compile record at PATH, read as outside data (UsageError naming the file)."""
    path = str(path)
    try:
        return check_hip(load_json(read_regular(path, MAX_BYTES), path), path)
    except Untrusted as err:
        raise UsageError(
            f"{err}: not a HIP compile record the farm wrote",
            hint="write one with `python -m builder hip-compile --evidence PATH`",
        ) from None


def hip_detail(rec: dict, archs: tuple[str, ...] | list[str]) -> str:
    """What a HIP compile record says of a ROCm cell that wants ARCHS: it stays planned, since no wheel of it was
    linked against a ROCm torch, with the targets compiled (and the cell's others, not compiled) and the toolchain."""
    done = [a for a in archs if a in rec["archs"]]
    if not done:
        return "planned"
    left = [a for a in archs if a not in rec["archs"]]
    text = f"planned: HIP compiled ({', '.join(done)}"
    if left:
        text += f"; not {', '.join(left)}"
    return text + f"; HIP {rec['hip_version']} in {rec['toolchain']['image']}), never linked against a ROCm torch"
