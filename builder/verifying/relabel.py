"""Relabelling a third-party wheel: the metadata the farm promises, on a wheel whose setup.py we do not own.

Upstream's wheels (mamba-ssm, causal-conv1d) declare ``Requires-Dist: torch`` with no version, so
pip may replace the user's torch with another release the extension was never built against.
:func:`pin_torch` rewrites ``METADATA`` to require exactly the torch minor of the build
(``torch==2.14.*``) and writes the build's local version label into the version (METADATA, the dist-info
folder, the file name) when the package set none; a package's own other label is refused.
:func:`write_wheel` is the one place a wheel's members are written back with a fresh ``RECORD``.
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import os
import stat
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from builder.errors import VerificationError
from builder.facts.untrusted import Untrusted, open_zip, shown, zip_read
from builder.sourcing.reproducible import zip_entries, zip_time


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


MAX_MEMBER_BYTES = (1 << 30) - 1  # one member read into memory; the cap is on the bytes really inflated
_HASHES = ("sha256", "sha384", "sha512")


def _member_name_ok(name: str) -> bool:
    """A member name a wheel may hold: relative, no ``..``, no backslash or NUL (what the index refuses too)."""
    parts = name.rstrip("/").split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name and "\0" not in name and ".." not in parts \
        and ":" not in parts[0] and all(parts)  # fmt: skip


def read_members(wheel: Path) -> tuple[list[zipfile.ZipInfo], dict[str, bytes], str]:
    """(zip entries, name -> bytes, the .dist-info folder) of WHEEL, read as outside data: every member a plain
    file or folder under a relative name (no link, no ``..``, no absolute path, none twice), each capped as
    inflated, and each file's bytes the hash its RECORD lists (a fresh RECORD written later then vouches only
    for what the old one did). VerificationError otherwise."""
    try:
        with open_zip(wheel, wheel.name) as src:
            infos = src.infolist()
            seen = set()
            for i in infos:
                if not _member_name_ok(i.filename) or i.filename in seen:
                    raise VerificationError(f"{wheel.name}: member {shown(repr(i.filename), 200)} is absolute, climbs "
                                            "out with '..', or comes twice: not a wheel the farm rewrites")  # fmt: skip
                if stat.S_ISLNK(i.external_attr >> 16):
                    raise VerificationError(f"{wheel.name}: member {shown(repr(i.filename), 200)} is a symbolic link: "
                                            "not a wheel the farm rewrites")  # fmt: skip
                seen.add(i.filename)
            members = {i.filename: zip_read(src, i, MAX_MEMBER_BYTES, wheel.name) for i in infos}
    except Untrusted as err:
        raise VerificationError(str(err)) from None
    info_dirs = {n.split("/")[0] for n in members if n.count("/") == 1 and n.endswith(".dist-info/METADATA")}
    if len(info_dirs) != 1:
        raise VerificationError(f"{wheel.name}: expected one *.dist-info/METADATA, found {len(info_dirs)}")
    info_dir = info_dirs.pop()
    _check_record(wheel, members, info_dir)
    return infos, members, info_dir


def _check_record(wheel: Path, members: dict[str, bytes], info_dir: str) -> None:
    """Every file member's bytes against its RECORD row (PEP 376/427), before anything is rewritten."""
    import csv
    import io

    record_name = f"{info_dir}/RECORD"
    raw = members.get(record_name)
    if raw is None:
        raise VerificationError(f"{wheel.name}: no {record_name}")
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as err:
        raise VerificationError(f"{wheel.name}: {record_name} is not readable ({err})") from None
    listed = {}
    for row in rows:
        if row:
            listed[row[0]] = row[1] if len(row) > 1 else ""
    for name, data in members.items():
        if name == record_name or name.endswith("/") or name.endswith((".jws", ".p7s")) and name.startswith(info_dir):
            continue
        want = listed.get(name)
        algo, _, digest = (want or "").partition("=")
        if algo not in _HASHES:
            raise VerificationError(f"{wheel.name}: {shown(repr(name), 200)} has no hash in {record_name}: "
                                    "its RECORD does not vouch for it")  # fmt: skip
        got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
        if got != digest.rstrip("="):
            raise VerificationError(f"{wheel.name}: {shown(repr(name), 200)} does not match its {record_name} hash: "
                                    "the file was changed after the wheel was built")  # fmt: skip


def write_wheel(
    infos: list[zipfile.ZipInfo], members: dict[str, bytes], info_dir: str, dest: Path, *, epoch: int | None = None
) -> Path:
    """Write MEMBERS to DEST with a RECORD that hashes them; atomic. Reproducible: entries in a fixed
    order and mode (builder/sourcing/reproducible.py), every one stamped EPOCH (SOURCE_DATE_EPOCH) when given,
    else each keeping its time (a rewrite of an already stamped wheel stays stamped)."""
    record_name = f"{info_dir}/RECORD"
    names = sorted(n for n in members if n != record_name and not n.endswith("/"))
    rows = [f"{n},{_record_hash(members[n])},{len(members[n])}" for n in names]  # sorted: no walk order shows
    members = {**members, record_name: ("\n".join([*rows, f"{record_name},,"]) + "\n").encode()}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    if record_name not in {i.filename for i in infos}:
        infos = [*infos, zipfile.ZipInfo(record_name, date_time=infos[0].date_time if infos else (1980, 1, 1, 0, 0, 0))]
    date_time = zip_time(epoch) if epoch is not None else None
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for zi in zip_entries(infos, info_dir, date_time):
            zf.writestr(zi, members[zi.filename])
    os.replace(tmp, dest)
    return dest


def torch_pin(torch: str) -> str:
    """The requirement a build against torch M.m (or M.m.p) gets: ``torch==M.m.*``."""
    major, minor = torch.split(".")[:2]
    return f"torch=={major}.{minor}.*"


def labelled_version(version: str, label: str, what: str) -> str:
    """VERSION with the local LABEL: added when it has none, kept when it is LABEL (any case); a package's own
    other label is refused (the preflight, builder/sourcing/preflight.py, says so before anything compiles)."""
    public, _, own = version.partition("+")
    if own and own.lower() != label.lower():
        raise VerificationError(
            f"{what}: the package labels its own version {shown(version, 80)}, the build's label is {label}",
            hint="drop the recipe's setting of the package's label variable: the farm labels the wheel itself",
        )
    return f"{public}+{label}"


def _with_version(infos: list, members: dict, info_dir: str, version: str) -> tuple[list, dict, str]:
    """The members under ``<name>-<version>.dist-info``, as bdist_wheel names the folder of that version."""
    new_dir = f"{info_dir.removesuffix('.dist-info').rsplit('-', 1)[0]}-{version}.dist-info"
    if new_dir == info_dir:
        return infos, members, info_dir

    def moved(name: str) -> str:
        return new_dir + name[len(info_dir) :] if name == info_dir or name.startswith(info_dir + "/") else name

    renamed = []
    for i in infos:
        zi = zipfile.ZipInfo(moved(i.filename), date_time=i.date_time)
        zi.external_attr = i.external_attr
        renamed.append(zi)
    return renamed, {moved(n): data for n, data in members.items()}, new_dir


def pin_torch(wheel: Path, torch: str, out_dir: Path, *, label: str | None = None) -> Path:
    """A copy of WHEEL in OUT_DIR whose METADATA requires ``torch==<torch's M.m>.*`` instead of any
    unconditional torch requirement it had (added if it had none). Markers' torch lines stay.

    LABEL: the build's local version label, which the farm writes into the version (METADATA, the
    dist-info folder and the file name) when the package's setup.py set none: a recipe needs no version patch."""
    infos, members, info_dir = read_members(wheel)
    name = f"{info_dir}/METADATA"
    text = members[name].decode("utf-8")
    head, sep, body = text.partition("\n\n")  # headers, then the long description
    pin = f"Requires-Dist: {torch_pin(torch)}"
    version = None
    lines, placed = [], False
    for line in head.splitlines():
        if label is not None and line.lower().startswith("version:"):
            version = labelled_version(line.split(":", 1)[1].strip(), label, wheel.name)
            lines.append(f"Version: {version}")
            continue
        if line.lower().startswith("requires-dist:"):
            try:
                req = Requirement(line.split(":", 1)[1].strip())
            except InvalidRequirement:
                req = None
            if req is not None and req.name.lower() == "torch" and not req.marker:
                if not placed:
                    lines.append(pin)
                    placed = True
                continue
        lines.append(line)
    if not placed:
        lines.append(pin)
    members[name] = ("\n".join(lines) + (sep + body if sep else "\n")).encode("utf-8")
    meta = email.parser.Parser().parsestr(members[name].decode(), headersonly=True)
    if not any(r.replace(" ", "") == torch_pin(torch) for r in meta.get_all("Requires-Dist") or []):
        raise VerificationError(f"{wheel.name}: could not pin torch in its METADATA")  # pragma: no cover
    dest = wheel.name
    if label is not None:
        if version is None:
            raise VerificationError(f"{wheel.name}: its METADATA has no Version")
        infos, members, info_dir = _with_version(infos, members, info_dir, version)
        stem = wheel.name.split("-")
        dest = "-".join([stem[0], version, *stem[2:]])
    return write_wheel(infos, members, info_dir, Path(out_dir) / dest)
