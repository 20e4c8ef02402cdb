"""``python -m builder resolve``: which wheel of an index fits an environment, and the command that installs it.

    python -m builder resolve --torch 2.6 --cuda 12.4 --abi FALSE --python 3.11 --index https://host/index/
    python -m builder resolve --project causal-conv1d --torch 2.14 --cuda 13.0 --python 3.11

With no exact fit it lists the nearest variants and why each does not fit.
The core (:func:`resolve`) is pure: a manifest and a Variant in, a Resolution out.
"""

from __future__ import annotations

import http.client
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from builder.errors import UsageError
from builder.facts.untrusted import (
    Deadline,
    Untrusted,
    load_json,
    plain_url,
    read_capped,
    read_regular,
    shown,
)
from builder.publishing.index.model import PROJECT, Entry, Manifest
from builder.sourcing.sources import request_deadline
from builder.verifying.variants import check_record
from mamba_ssm import variant as _variant
from mamba_ssm.elf import tag_machine

DEFAULT_INDEX = "dist/index"


@dataclass
class Resolution:
    variant: _variant.Variant
    project: str = PROJECT
    key: str | None = None  # the variant page that serves it (the exact one, or a stable one)
    filename: str | None = None
    entry: Entry | None = None
    near: list[tuple[str, list[str]]] = field(default_factory=list)  # (variant key, reasons it does not fit)


def resolve(manifest: dict | Manifest, variant: _variant.Variant, project: str = PROJECT) -> Resolution:
    """The ``project`` wheel of ``manifest`` (manifest.json's document, or read) that a user of ``variant`` gets."""
    if not isinstance(manifest, Manifest):
        manifest = Manifest.from_json(manifest)
    project = canonicalize_name(project)
    res = Resolution(variant, project)
    picked = manifest.wheel_for(variant.key, variant.python, project, tag_machine(variant.platform))
    if picked is not None:
        res.key, res.filename = picked
        res.entry = manifest.files[res.filename]
        return res
    res.near = _nearest(manifest, variant, project)
    return res


def _nearest(manifest: Manifest, want: _variant.Variant, project: str, limit: int = 4) -> list[tuple[str, list[str]]]:
    scored = []
    for key, fns in manifest.variants.items():
        page = _variant.Variant.from_key(key)
        entries = [e for e in (manifest.files[fn] for fn in fns) if e.project == project]
        if not entries:
            continue
        reasons, score = [], 0
        if page.accelerator != want.accelerator:
            reasons.append(f"built for {page.accelerator}; your torch is a {want.accelerator} build")
            score += 100 if page.backend != want.backend else 40
        if page.stable:
            if not any(e.admits(want.key) for e in entries):
                floors = {e.requires_torch for e in entries}
                reasons.append(f"stable-ABI wheel needs torch{' or '.join(sorted(floors))}; yours is {want.torch}")
                score += 30
        elif page.torch != want.torch:
            reasons.append(f"built for torch {page.torch}; yours is {want.torch} (each wheel fits one torch minor)")
            a, b = (tuple(int(x) for x in t.split(".")) for t in (page.torch, want.torch))
            score += 10 + 5 * abs((a[0] * 100 + a[1]) - (b[0] * 100 + b[1]))
        if page.cxx11abi is not None and page.cxx11abi != want.cxx11abi:
            reasons.append(
                f"cxx11abi{'TRUE' if page.cxx11abi else 'FALSE'}; your torch uses "
                f"cxx11abi{'TRUE' if want.cxx11abi else 'FALSE'}"
            )
            score += 50
        if not any(e.installs_on(want.python) for e in entries):
            have = sorted({e.python + ("+" if e.abi == "abi3" else "") for e in entries})
            reasons.append(f"no wheel for {want.python} (has {', '.join(have)})")
            score += 20
        if reasons:
            scored.append((score, key, reasons))
    scored.sort()
    return [(key, reasons) for _s, key, reasons in scored[:limit]]


# --------------------------------------------------------------------------- I/O

MAX_MANIFEST_BYTES = 256 << 20  # a 5,000-wheel manifest is a few MB
_STR_FIELDS = ("filename", "version", "label", "key", "accelerator", "torch", "python", "abi", "platform", "sha256")
_TEXT_RE = re.compile(r"[A-Za-z0-9._+!=<>~,*-]*")  # what the fields that reach a command may hold


def _bad(where: str, what: str):
    raise UsageError(
        f"{where}: {what}: not a manifest this builder can read",
        hint="point --index at an index made by `python -m builder index`, or rebuild it",
    )


def check_manifest(doc, where: str) -> dict:
    """``doc`` as manifest.json's schema has it (model.SCHEMA), or a UsageError naming what is wrong."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    from builder.publishing.index.model import SCHEMA

    if not isinstance(doc, dict):
        _bad(where, f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        _bad(where, f"schema {doc.get('schema')!r}, this builder reads schema {SCHEMA}")
    files, variants = doc.get("files"), doc.get("variants")
    if not isinstance(files, dict) or not isinstance(variants, dict):
        _bad(where, "'files' and 'variants' must be objects")
    for fn, e in files.items():
        if not isinstance(e, dict):
            _bad(where, f"files[{fn!r}] is not an object")
        for key in _STR_FIELDS:
            if not isinstance(e.get(key), str) or not _TEXT_RE.fullmatch(e[key]):
                _bad(where, f"files[{fn!r}].{key} is {e.get(key)!r}")
        if e["filename"] != fn or not isinstance(e.get("stable"), bool) or not re.fullmatch(r"cp\d{2,3}", e["python"]):
            _bad(where, f"files[{fn!r}] does not describe {fn!r}")
        for key in ("project", "requires_torch", "requires_python"):
            if key in e and not isinstance(e[key], str):
                _bad(where, f"files[{fn!r}].{key} is {e[key]!r}")
        if "serves_declared" in e and not (
            isinstance(e["serves_declared"], list) and all(isinstance(k, str) for k in e["serves_declared"])
        ):
            _bad(where, f"files[{fn!r}].serves_declared is not a list of variant keys")
        try:
            Version(e["version"])
            _variant.Variant.from_key(e["key"])
            if e.get("requires_torch"):
                SpecifierSet(e["requires_torch"])
        except (InvalidVersion, _variant.VariantError, ValueError) as err:
            _bad(where, f"files[{fn!r}]: {err}")
        if "project" in e and canonicalize_name(e["project"]) != e["project"]:
            _bad(where, f"files[{fn!r}].project {e['project']!r} is not a canonical name")
    for key, fns in variants.items():
        try:
            _variant.Variant.from_key(key)
        except (_variant.VariantError, ValueError) as err:
            _bad(where, f"variants[{key!r}]: {err}")
        if not isinstance(fns, list) or not all(isinstance(fn, str) and fn in files for fn in fns):
            _bad(where, f"variants[{key!r}] lists files the manifest does not have")
    base = doc.get("base_url")
    if base is not None and not (isinstance(base, str) and is_http_url(base)):
        _bad(where, f"base_url {base!r} is not an http(s) URL")
    try:
        check_record(doc.get("wheel_variants"), where)
    except Untrusted as err:
        raise UsageError(f"{err}: not a manifest this builder can read",
                         hint="point --index at an index made by `python -m builder index`, or rebuild it") from None  # fmt: skip
    return doc


def is_http_url(url: str) -> bool:
    return plain_url(url) is not None


def load(index: str) -> tuple[dict, str]:
    """The manifest of an index (a folder or an http(s)/file URL) and the base URL for commands.

    Read as outside data (:mod:`builder.facts.untrusted`): a local manifest must be a regular file (a FIFO or
    a device is refused, never waited on), a remote one is read under one deadline, both capped and parsed
    with a depth limit."""
    if "://" in index:
        if index.startswith("file://"):
            folder = urllib.parse.unquote(urllib.parse.urlsplit(index).path)
            doc, _ = _load_folder(Path(folder), index)
            return doc, doc.get("base_url") or index.rstrip("/")
        if not is_http_url(index):
            raise UsageError(f"--index {shown(repr(index), 300)}: not an http(s) or file:// URL",
                             hint="give the index root URL")  # fmt: skip
        url = index.rstrip("/") + "/manifest.json"
        try:
            seconds = request_deadline()
            with Deadline(seconds, url) as deadline, urllib.request.urlopen(url, timeout=min(30, seconds)) as r:
                body = read_capped(r, MAX_MANIFEST_BYTES, deadline, network=True)
            doc = load_json(body, url)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as err:
            raise UsageError(f"--index {shown(index, 300)}: cannot read {shown(url, 300)} ({shown(err, 300)})",
                             hint="give the index root URL") from None  # fmt: skip
        doc = check_manifest(doc, url)
        return doc, doc.get("base_url") or index.rstrip("/")
    return _load_folder(Path(index), index)


def _load_folder(path: Path, index: str) -> tuple[dict, str]:
    mf = path / "manifest.json"
    if not os.path.lexists(mf):
        raise UsageError(
            f"--index {shown(index, 300)}: no manifest.json there",
            hint="point --index at the OUT of `python -m builder index`",
        )
    try:
        doc = load_json(read_regular(mf, MAX_MANIFEST_BYTES), str(mf))
    except Untrusted as err:
        raise UsageError(f"{err}: not a manifest this builder can read") from None
    doc = check_manifest(doc, str(mf))
    return doc, doc.get("base_url") or path.absolute().as_uri()
