"""Two wheels compared byte for byte: ``identical`` (an empty list), or each member that differs with its sizes,
sha256s, first differing offset and, for an ELF member, the section that offset is in; when every member
agrees, the zip entries' own fields (time, mode, order). ``reproduce --rebuild`` (builder/run/verify.py)
rebuilds a spec and asks this."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from builder.facts.untrusted import shown
from mamba_ssm import elf as _elf

MAX_UNPACKED_BYTES = 8 << 30  # what compare() may read of one wheel's members (a zip bomb stops here)


@dataclass(frozen=True)
class Difference:
    member: str
    how: str

    def line(self) -> str:
        return f"  {shown(self.member, 300)}: {self.how}"


def _first_offset(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    if a[:n] == b[:n]:
        return n
    while hi - lo > 1:  # bisect on equal prefixes: fast on the 100 MB members of a CUDA wheel
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo if a[lo] != b[lo] else hi


def _elf_section(data: bytes, offset: int, name: str) -> str | None:
    try:
        elf = _elf.Elf(data, name)
    except _elf.NotAnElf:
        return None
    for sec in elf.sections:
        if sec.type != 8 and sec.size and sec.offset <= offset < sec.offset + sec.size:
            return sec.name or "(unnamed section)"
    return "(outside every section: ELF headers or padding)"


def _elf_sections_differing(a: bytes, b: bytes, name: str, limit: int = 8) -> str | None:
    """The named sections whose bytes differ between two ELF files (a section that grew shifts every offset
    after it, so the first differing byte alone says little: ELF headers). None when either is no ELF."""
    try:
        ea, eb = _elf.Elf(a, name), _elf.Elf(b, name)
    except _elf.NotAnElf:
        return None

    def body(data: bytes, sec) -> bytes:
        return b"" if sec.type == 8 else data[sec.offset : sec.offset + sec.size]  # SHT_NOBITS: no bytes

    sb = {sec.name: sec for sec in eb.sections}
    out = []
    for sec in ea.sections:
        other = sb.get(sec.name)
        if other is None:
            out.append(f"{sec.name or '(unnamed)'} only in the given")
        elif body(a, sec) != body(b, other):
            out.append(f"{sec.name or '(unnamed)'} {sec.size} vs {other.size} bytes")
    out += [f"{n or '(unnamed)'} only in the rebuild" for n in sb.keys() - {sec.name for sec in ea.sections}]
    if not out:
        return None
    return ", ".join(shown(x, 80) for x in out[:limit]) + (f" and {len(out) - limit} more" if len(out) > limit else "")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compare(expected: Path, rebuilt: Path) -> list[Difference]:
    """The ways REBUILT differs from EXPECTED (empty: the same bytes)."""
    if expected.read_bytes() == rebuilt.read_bytes():
        return []
    out: list[Difference] = []
    with zipfile.ZipFile(expected) as za, zipfile.ZipFile(rebuilt) as zb:
        ia, ib = {i.filename: i for i in za.infolist()}, {i.filename: i for i in zb.infolist()}
        for name in sorted(ia.keys() - ib.keys()):
            out.append(Difference(name, "only in the given wheel"))
        for name in sorted(ib.keys() - ia.keys()):
            out.append(Difference(name, "only in the rebuild"))
        for name in sorted(ia.keys() & ib.keys()):
            a, b = za.read(name), zb.read(name)
            if a == b:
                continue
            off = _first_offset(a, b)
            how = f"size {len(a)} vs {len(b)}, sha256 {_sha(a)[:16]} vs {_sha(b)[:16]}, first difference at byte {off}"
            section = _elf_section(a, off, name) if a[:4] == b"\x7fELF" else None
            sections = _elf_sections_differing(a, b, name) if section else None
            how += f" (ELF section {section})" if section else ""
            out.append(Difference(name, how + (f"; sections that differ: {sections}" if sections else "")))
        if not out:  # every member's bytes agree: the zip container itself differs
            for name in sorted(ia.keys() & ib.keys()):
                x, y = ia[name], ib[name]
                fields = [
                    f"{f} {getattr(x, f)} vs {getattr(y, f)}"
                    for f in ("date_time", "external_attr", "compress_type", "create_system")
                    if getattr(x, f) != getattr(y, f)
                ]
                if fields:
                    out.append(Difference(name, "zip entry: " + ", ".join(fields)))
            if list(ia) != list(ib):
                out.append(Difference("(zip order)", "the same members in another order"))
            if not out:
                out.append(Difference("(zip container)", "same members and entries, other archive bytes (compression)"))
    return out


# --------------------------------------------------------------------------- the command
