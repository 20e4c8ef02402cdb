"""The one reader of a wheel's core metadata, for the verifier and the index; a leaf (imports nothing of builder).

The torch pin (``requires_torch``) is every unmarked ``Requires-Dist: torch`` taken together; an entry with a
marker does not apply to every install, so it pins nothing.
"""

from __future__ import annotations

import functools
import io
from typing import NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from builder.facts.untrusted import Untrusted, open_zip, text, zip_read

MAX_METADATA_BYTES = 16 << 20  # a wheel's METADATA or WHEEL (torch's METADATA is about 40 kB)


class MetadataError(ValueError):
    """The wheel's dist-info cannot be read (the message names what is wrong, not the file)."""


class WheelMetadata(NamedTuple):  # (a NamedTuple: built 5,000 times in a large index run)
    names: tuple[str, ...]  # every member of the zip
    dist_info: str  # "mamba_ssm-0.3.0+cu12torch2.6cxx11abiFALSE.dist-info"
    raw: bytes  # METADATA as stored (the index serves it as the PEP 658 .metadata file)
    version: str  # METADATA's Version ("" if absent)
    requires_python: str  # "" if absent
    requires_torch: str | None  # the torch pin (see the module doc): "" for a bare torch, None for none
    wheel_tags: tuple[str, ...] | None  # the Tag: lines of WHEEL, sorted (None unless asked for)
    name: str = ""  # METADATA's Name ("" if absent)
    requires_dist: tuple[str, ...] = ()  # every Requires-Dist value, markers and all, as written


def read(src, *, wheel_tags: bool = False) -> WheelMetadata:
    """Read the dist-info of the wheel ``src`` (a path, a file or a buffer): the central directory, then
    only METADATA (and WHEEL with ``wheel_tags``). Raises MetadataError."""
    try:
        with open_zip(io.BytesIO(src) if isinstance(src, bytes | bytearray) else src, "the wheel") as zf:
            names = tuple(zf.namelist())
            infos = [n[: -len("/METADATA")] for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(infos) != 1:
                raise MetadataError(f"expected one *.dist-info/METADATA, found {len(infos)}")
            (info,) = infos
            raw = zip_read(zf, f"{info}/METADATA", MAX_METADATA_BYTES, "the wheel")  # capped as inflated
            text(raw, f"{info}/METADATA")  # core metadata is UTF-8: other bytes are refused, never published
            tags = None
            if wheel_tags:
                if f"{info}/WHEEL" not in names:
                    raise MetadataError(f"no {info}/WHEEL")
                wheel = text(zip_read(zf, f"{info}/WHEEL", MAX_METADATA_BYTES, "the wheel"), f"{info}/WHEEL")
                tags = tuple(
                    sorted(v.strip() for k, _, v in (ln.partition(":") for ln in wheel.splitlines()) if k == "Tag")
                )
    except Untrusted as err:
        raise MetadataError(str(err).removeprefix("the wheel: ")) from None
    headers = parse_headers(raw)
    return WheelMetadata(
        names=names,
        dist_info=info,
        raw=raw,
        version=(headers.get("version") or [""])[0],
        requires_python=(headers.get("requires-python") or [""])[0],
        requires_torch=torch_pin(headers.get("requires-dist", ())),
        wheel_tags=tags,
        name=(headers.get("name") or [""])[0],
        requires_dist=tuple(headers.get("requires-dist", ())),
    )


def parse_headers(metadata: bytes) -> dict[str, list[str]]:
    """The header block of a METADATA file (RFC 822 style) by lower-cased name. email.parser costs more
    than the rest of reading a small wheel, and a 5,000-wheel index reads 5,000 of them."""
    out: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in metadata.decode("utf-8", "surrogateescape").splitlines():  # read() refused non-UTF-8 first
        if not line:
            break  # the body (the long description) follows
        if line[0] in " \t" and last:
            last[-1] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        last = out.setdefault(name.strip().lower(), [])
        last.append(value.strip())
    return out


def torch_pin(requires_dist) -> str | None:
    """The torch specifier every install requires (module doc), from the ``Requires-Dist`` values."""
    specs = [s for s in map(_unmarked_torch, requires_dist) if s is not None]
    if not specs:
        return None
    if len(specs) == 1:
        return specs[0]
    combined = SpecifierSet()
    for s in specs:
        combined &= SpecifierSet(s)
    return str(combined)


@functools.cache
def _unmarked_torch(line: str) -> str | None:
    """The specifier of an unmarked ``torch...`` requirement ("" for a bare torch), None for anything else.
    (Cached: a farm's wheels repeat the same few lines.)"""
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    return str(req.specifier) if canonicalize_name(req.name) == "torch" and req.marker is None else None
