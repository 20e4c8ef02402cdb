"""The resolver index: per-variant find-links pages, PEP 503/691 simple pages, the coverage page.

``python -m builder index --wheels DIR --out OUT [--base-url URL] [--files-url URL]``

On disk (OUT = ``dist/index``)::

    dist/index -> .index.d/gen-<id>          a symlink, swapped atomically (os.replace)
    dist/.index.d/store/                     every wheel once (a hard link to it), plus <wheel>.metadata (PEP 658)
    dist/.index.d/gen-<id>/files -> ../store
    dist/.index.d/gen-<id>/<variant> -> ../pages/<variant>.<hash>   (immutable, shared by generations)
    dist/.index.d/pages/<variant>.<hash>/index.html              find-links page
    dist/.index.d/pages/<variant>.<hash>/mamba-ssm/index.html    PEP 503 project page
    dist/.index.d/gen-<id>/simple/...                        everything (HTML + PEP 691 JSON)
    dist/.index.d/gen-<id>/index.html, manifest.json         coverage page, machine-readable view
    dist/.index.d/lock                                       serialises concurrent runs

Wheels are immutable once published: a run adds new files to the store (a hard
link to the wheel it was given, a copy where linking is refused), checks the
recorded ones (size, mtime and inode, and their sha256 whenever any moved, or
always with ``verify=True``), writes a complete new generation of pages in a
staging folder, then swaps the OUT symlink. Readers see the old index or the new
one, never a mix; a killed run leaves the old one live. (No fsync: the swap is
atomic for readers and for killed runs, not across a power cut.) Because of the
hard link, rewriting a wheel in place in ``--wheels`` alters the published file:
the next run reports it. Publish the tree with symlinks followed (``rsync -aL``).

A wheel given under a published name with other bytes is refused, unless the run
names it in ``replace`` (``--replace NAME``): then the new bytes supersede the old
ones in the store (renamed over them just before the swap), the manifest entry
records what it replaced, and the result lists it. ``builder build`` passes only
the wheels it just rebuilt because their inputs changed; never use it on an index
that others have installed from (pip caches by filename, hash pins break).

Which variants a stable-ABI wheel (``+cu13torchstable``, ``cp310-abi3``) serves:
a sidecar ``<wheel>.spec.json`` (the farm's ``BuildSpec.to_json()``) names them
in ``serves``; without one, every indexed variant of the same accelerator whose
torch minor satisfies the wheel's ``Requires-Dist: torch`` specifier, plus the
wheel's own ``<acc>-torchstable-abi3`` page.

Where a wheel is downloaded from: ``files/<name>`` next to the pages, unless the run
that added it was given ``--files-url URL`` (a GitHub release's download URL: GitHub
Pages sites stop at 1 GB, release assets do not). Such a wheel is linked as
``URL/<name>`` (sha256 fragment kept, no PEP 658 attribute: its ``.metadata`` is not
hosted there), the manifest records that URL, and a later run that gives the same
file with another ``--files-url`` moves the link. ``files/`` still holds every wheel
(integrity checks, the release upload); a site whose wheels are all hosted elsewhere
is published without it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import html
import io
import json
import os
import re
import shutil
import time
import urllib.parse
import uuid
import zipfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from filelock import FileLock, Timeout
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder.errors import IndexIntegrityError, UsageError
from mamba_ssm import _variant

PROJECT = "mamba-ssm"
SCHEMA = 1
KEEP_GENERATIONS = 2  # the new one and the previous (readers may still be on it)
LOCK_TIMEOUT_S = 600
_CHUNK = 1 << 20


# --------------------------------------------------------------------------- naming


def canonical_label(label: str) -> str:
    """setuptools lowercases local versions in filenames and METADATA (``cxx11abitrue``); the farm's
    names keep ``cxx11abiTRUE``. Versions compare case-insensitively, so both name the same wheel."""
    return re.sub(r"cxx11abi(true|false)$", lambda m: "cxx11abi" + m.group(1).upper(), label, flags=re.IGNORECASE)


def variant_of_label(label: str) -> _variant.Variant:
    """The Variant named by a local label; naming stays in mamba_ssm._variant."""
    label = canonical_label(label)
    parts = _variant.parse_label(label)
    acc = parts["accelerator"]
    if acc == "cpu":
        backend, version = "cpu", None
    elif acc.startswith("cu"):
        backend, version = "cuda", acc[2:]
    else:  # hipMN: any split that round-trips through accelerator_tag will do
        backend, version = "rocm", f"{acc[3]}.{acc[4:]}"
    v = _variant.Variant(torch=parts["torch"], backend=backend, backend_version=version, cxx11abi=parts["cxx11abi"])
    if v.label != label:  # pragma: no cover - guards the round trip above
        raise UsageError(f"local label {label!r} does not round-trip through mamba_ssm._variant ({v.label!r})")
    return v


def install_command(entry: dict, key: str, base: str) -> str:
    """The one-line install that holds up in the real world: exact local version, this variant's index."""
    return f"pip install {PROJECT}=={entry['version']} --extra-index-url {base.rstrip('/')}/{key}/"


def python_serves(entry: dict, python_tag: str) -> bool:
    """Whether a wheel installs on CPython ``python_tag`` (cp311): exact tag, or abi3 from its floor up."""
    if entry["abi"] == "abi3":
        return _py_num(python_tag) >= _py_num(entry["python"])
    return entry["python"] == python_tag


@functools.cache
def parse_version(v: str) -> Version:
    """Version parsing dominates a large run's CPU time; versions repeat a lot."""
    return Version(v)


def _release(entry: dict) -> str:
    return entry["version"].partition("+")[0]


def _py_num(tag: str) -> tuple[int, int]:
    digits = tag[2:]
    return int(digits[0]), int(digits[1:] or 0)


# --------------------------------------------------------------------------- reading wheels

_WHOLE = 64 << 20  # wheels up to this size are read in one go (hash and zip from one buffer)


def _sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@functools.cache
def _parse_tag(tag: str) -> frozenset:
    return parse_tag(tag)


def _parse_filename(name: str):
    """parse_wheel_filename, with the common case (no build tag) served from caches: a 5,000-wheel run
    repeats versions and tags a lot. Anything unusual goes to packaging for its checks and messages."""
    parts = name[:-4].split("-")
    if len(parts) == 5 and name.endswith(".whl") and parts[0] == "mamba_ssm":
        try:
            return PROJECT, parse_version(parts[1]), (), _parse_tag("-".join(parts[2:]))
        except InvalidVersion:
            pass
    return parse_wheel_filename(name)


@functools.cache
def _variant_of_raw_label(raw: str) -> _variant.Variant:
    return variant_of_label(raw)


@functools.cache
def _variant_fields(variant: _variant.Variant) -> dict:
    return {
        "label": variant.label,
        "key": variant.key,
        "accelerator": variant.accelerator,
        "torch": variant.torch,
        "cxx11abi": variant.cxx11abi,
        "stable": variant.stable,
    }


@functools.cache
def _torch_specifier(line: str) -> str | None:
    """The specifier of a ``Requires-Dist: torch...`` line ("" for bare torch), None for anything else."""
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    return str(req.specifier) if req.name == "torch" else None


def _headers(metadata: bytes) -> dict[str, list[str]]:
    """The header block of a METADATA file (RFC 822 style), lower-cased names; only the few we read
    matter, and email.parser costs more than the rest of reading a small wheel."""
    out: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in metadata.decode("utf-8", "surrogateescape").splitlines():
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


def _check_name(path: str):
    """What the filename says: (version, tag, variant, the version as commands print it).

    Paths are plain strings here: pathlib's overhead shows at 5,000 wheels."""
    filename = os.path.basename(path)
    try:
        name, version, _build, tags = _parse_filename(filename)
    except InvalidWheelFilename as err:
        raise UsageError(f"{path}: not a valid wheel filename ({err})") from None
    if name != canonicalize_name(PROJECT):
        raise UsageError(f"{path}: a {name} wheel, not {PROJECT}; only {PROJECT} wheels belong in this index")
    if not version.local:
        raise UsageError(
            f"{path}: version {version} has no local label (e.g. +cu12torch2.6cxx11abiFALSE); "
            "index wheels that the farm built and verified"
        )
    if len(tags) != 1:
        raise UsageError(
            f"{path}: carries {len(tags)} tags ({'.'.join(sorted(str(t) for t in tags))}); "
            "pip and uv prefer different ones: retag to exactly one (builder.wheels.retag)"
        )
    (tag,) = tags
    # packaging lowercases local labels; the farm's spelling (cxx11abiFALSE) is in the filename.
    raw_version = filename.split("-")[1]
    try:
        variant = _variant_of_raw_label(raw_version.partition("+")[2])
    except _variant.VariantError as err:
        raise UsageError(f"{path}: {err}") from None
    label = _variant_fields(variant)["label"]
    return version, tag, variant, f"{raw_version.partition('+')[0]}+{label}"  # the spelling commands print


def _entry(path: str, zsrc, named) -> tuple[dict, bytes]:
    """The manifest entry (without hashes) and METADATA bytes, the zip read from ``zsrc`` (a file or
    buffer): zipfile reads the central directory and then only the METADATA member."""
    version, tag, variant, raw_version = named
    try:
        with zipfile.ZipFile(zsrc) as zf:
            meta_names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(meta_names) != 1:
                raise UsageError(f"{path}: expected one *.dist-info/METADATA, found {len(meta_names)}")
            metadata = zf.read(meta_names[0])
    except zipfile.BadZipFile as err:
        raise UsageError(f"{path}: not a readable zip file ({err})") from None
    headers = _headers(metadata)
    meta_version = (headers.get("version") or ["0"])[0]
    try:
        same = parse_version(meta_version) == version
    except InvalidVersion:
        same = False
    if not same:
        raise UsageError(f"{path}: METADATA says version {meta_version}, the filename says {version}")
    requires_torch = ""
    for line in headers.get("requires-dist", []):
        spec = _torch_specifier(line)
        if spec is not None:
            requires_torch = spec
    entry = {
        "filename": os.path.basename(path),
        "version": raw_version,
        **_variant_fields(variant),
        "python": tag.interpreter,
        "abi": tag.abi,
        "platform": tag.platform,
        "requires_python": (headers.get("requires-python") or [""])[0],
        "requires_torch": requires_torch,
    }
    if variant.stable:
        sidecar = path + ".spec.json"
        if os.path.isfile(sidecar):
            entry["serves_declared"] = _read_serves(Path(sidecar), variant)
    return entry, metadata


def read_wheel(path: Path) -> tuple[dict, bytes]:
    """The manifest entry for one wheel (without hashes) and its METADATA bytes."""
    named = _check_name(str(path))
    with open(path, "rb") as f:
        return _entry(str(path), f, named)


def _ingest(src: str, name: str, store_fd: int, store_name: str | None = None) -> dict:
    """Read a new wheel once (hash, METADATA), publish it into the store, return its manifest entry.

    The store gets a hard link (no copy; a copy where linking is refused, e.g. across filesystems), so
    the published bytes are the ones hashed here as long as the file's stat did not move meanwhile;
    later runs re-hash it whenever its stat moves, and report it if its bytes changed.
    ``store_name`` (default ``name``) is where it goes: a replacement is staged under another name."""
    named = _check_name(src)
    name = store_name or name
    with open(src, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size <= _WHOLE:
            data = f.read()
            sha = hashlib.sha256(data).hexdigest()
            entry, metadata = _entry(src, io.BytesIO(data), named)
        else:  # a real CUDA wheel can be hundreds of MB: hash in chunks, seek to the zip directory
            data = None
            sha = hashlib.file_digest(f, "sha256").hexdigest()
            entry, metadata = _entry(src, f, named)
    try:
        try:
            os.link(src, name, dst_dir_fd=store_fd)
        except FileExistsError:  # left by a run that failed before publishing it: never served
            os.unlink(name, dir_fd=store_fd)
            os.link(src, name, dst_dir_fd=store_fd)
        dst = os.stat(name, dir_fd=store_fd)
        moved = (dst.st_ino, dst.st_size, dst.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:  # no hard links here (another filesystem, or not allowed): copy, hashing what is written
        copied = _write_file(store_fd, name, data) if data is not None else _copy_hashing(src, store_fd, name)
        dst = os.stat(name, dir_fd=store_fd)
        moved = copied != sha
    if moved:
        raise IndexIntegrityError(
            f"{src} changed while it was being indexed", hint="let whatever writes it finish, then rerun"
        )
    entry["sha256"] = sha
    entry["size"] = dst.st_size
    entry["stat"] = _stat_key(dst)
    entry["source_stat"] = _stat_key(st)
    entry["metadata_sha256"] = _write_file(store_fd, name + ".metadata", metadata)
    entry["metadata_stat"] = _stat_key(os.stat(name + ".metadata", dir_fd=store_fd))
    return entry


def _stat_key(st: os.stat_result) -> list[int]:
    """What a recorded file is recognised by without reading it."""
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _write_file(dir_fd: int, name: str, data: bytes) -> str:
    """Write a store file in place (no temporary): a store file is served only once a manifest names it,
    and a run only writes names that the live manifest does not. Returns the sha256 of what it wrote."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return hashlib.sha256(data).hexdigest()


def _copy_hashing(src: Path, dir_fd: int, name: str) -> str:
    h = hashlib.sha256()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
    try:
        with open(src, "rb") as f, open(fd, "wb", closefd=False) as out:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _read_serves(sidecar: Path, variant: _variant.Variant) -> list[str]:
    try:
        serves = json.loads(sidecar.read_text())["serves"]
    except (ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{sidecar}: expected JSON with a 'serves' list of variant keys ({err})") from None
    for key in serves:
        try:
            parts = _variant.parse_key(key)
        except _variant.VariantError as err:
            raise UsageError(f"{sidecar}: {err}") from None
        if parts["accelerator"] != variant.accelerator:
            raise UsageError(f"{sidecar}: serves {key}, but the wheel is built for {variant.accelerator}")
    return sorted(set(serves))


# --------------------------------------------------------------------------- the model


@dataclass
class Index:
    """Everything the pages are made from: the manifest's files, grouped by variant."""

    files: dict[str, dict]
    base_url: str | None
    variants: dict[str, list[str]] = field(default_factory=dict)
    anchor_tails: dict[str, str] = field(default_factory=dict)
    order: dict[str, tuple] = field(default_factory=dict)  # the sort key of every file, computed once

    def __post_init__(self) -> None:
        own = {e["key"] for e in self.files.values()}
        exact = {k for k in own if not k.endswith("-abi3")}
        groups: dict[str, list[str]] = {k: [] for k in own}
        # A stable wheel stays off an exact page for a release that page already has: with both, pip
        # and uv would take "+cu13torchstable" over "+cu13torch2.14..." (local labels sort as text).
        releases = {(e["key"], _release(e)) for e in self.files.values() if not e["stable"]}
        for fn, e in self.files.items():
            e["serves"] = self.serves(e, exact)
            for key in e["serves"]:
                if key != e["key"] and (key, _release(e)) in releases:
                    continue
                groups.setdefault(key, []).append(fn)
        # Rank the few distinct versions once; sorting 5,000 files then compares ints, not Versions.
        rank = {v: i for i, v in enumerate(sorted({e["version"] for e in self.files.values()}, key=parse_version))}
        self.order = {fn: (rank[e["version"]], e["python"], fn) for fn, e in self.files.items()}
        self.variants = {k: sorted(v, key=self.order.__getitem__) for k, v in sorted(groups.items())}
        self._check_one_file_per_cell()

    def _order(self, fn: str) -> tuple:
        return self.order[fn]

    @staticmethod
    def serves(entry: dict, exact_keys: set[str]) -> list[str]:
        if not entry["stable"]:
            return [entry["key"]]
        if "serves_declared" in entry:
            return sorted({entry["key"], *entry["serves_declared"]})
        spec = Requirement(f"torch{entry['requires_torch']}").specifier
        keys = {entry["key"]}
        for key in exact_keys:
            parts = _variant.parse_key(key)
            if parts["accelerator"] == entry["accelerator"] and spec.contains(
                Version(parts["torch"] + ".0"), prereleases=True
            ):
                keys.add(key)
        return sorted(keys)

    def _check_one_file_per_cell(self) -> None:
        # Two files for one (variant, version, Python) is a choice pip and uv would make differently.
        for key, fns in self.variants.items():
            seen: dict[tuple, str] = {}
            for fn in fns:
                e = self.files[fn]
                cell = (e["version"], e["python"], e["abi"])
                if cell in seen:
                    raise IndexIntegrityError(
                        f"variant {key} has two wheels for {e['version']} {e['python']}-{e['abi']}: "
                        f"{seen[cell]} and {fn}; pip and uv would pick differently",
                        hint="keep exactly one platform tag per variant and Python (remove one of them from --wheels)",
                    )
                seen[cell] = fn

    def href(self, fn: str, depth: int) -> str:
        if fn and self.files[fn].get("url"):
            return self.files[fn]["url"]
        if self.base_url:
            return f"{self.base_url.rstrip('/')}/files/{fn}"
        return "../" * depth + "files/" + fn


# --------------------------------------------------------------------------- pages


def _anchors(index: Index, fns: list[str], depth: int) -> str:
    """The wheel links of one page. Escaping works per character, so the href's prefix is escaped once
    per page and each file's part once per run (a 5,000-wheel run links each file two or three times)."""
    head = f'    <a href="{html.escape(index.href("", depth))}'
    tails = index.anchor_tails
    return "".join(
        (head if "url" not in index.files[fn] else '    <a href="') + (tails.get(fn) or _anchor_tail(index, fn))
        for fn in fns
    )


def _anchor_tail(index: Index, fn: str) -> str:
    """The anchor after the page's common href prefix (after `href="` for a wheel hosted elsewhere)."""
    e = index.files[fn]
    external = e.get("url")
    tail = f'{html.escape(external or fn)}#sha256={e["sha256"]}"'
    if e["requires_python"]:
        tail += f' data-requires-python="{html.escape(e["requires_python"])}"'
    if not external:  # PEP 658: the .metadata file is served next to the wheel, so only from files/
        md = f"sha256={e['metadata_sha256']}"
        tail += f' data-dist-info-metadata="{md}" data-core-metadata="{md}"'
    tail += f">{html.escape(fn)}</a><br>\n"
    index.anchor_tails[fn] = tail
    return tail


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        f"{body}  </body>\n</html>\n"
    )


def _json_project(index: Index, fns: list[str], depth: int) -> str:
    files = []
    prefix = index.href("", depth)
    for fn in fns:
        e = index.files[fn]
        md = {"sha256": e["metadata_sha256"]} if "url" not in e else False
        files.append(
            {
                "filename": fn,
                "url": e.get("url") or prefix + fn,
                "hashes": {"sha256": e["sha256"]},
                "requires-python": e["requires_python"] or None,
                "core-metadata": md,
                "dist-info-metadata": md,
                "size": e["size"],
            }
        )
    versions = sorted({index.files[fn]["version"] for fn in fns}, key=parse_version)
    doc = {"meta": {"api-version": "1.1"}, "name": PROJECT, "versions": versions, "files": files}
    return orjson.dumps(doc).decode() + "\n"  # compact; orjson: 5,000 files in milliseconds


def _root_json() -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": PROJECT}]}, indent=1) + "\n"


_PROJECT_LINK = f'    <a href="{PROJECT}/">{PROJECT}</a><br>\n'


def render_variant(index: Index, key: str) -> dict[str, str]:
    """One variant folder: <key>/ is a find-links page (wheel anchors) and a PEP 503 root at once."""
    fns = index.variants[key]
    return {
        "index.html": _page(f"{PROJECT}: {key}", _anchors(index, fns, 1) + _PROJECT_LINK),
        f"{PROJECT}/index.html": _page(f"Links for {PROJECT} ({key})", _anchors(index, fns, 2)),
    }


def render_pages(index: Index) -> dict[str, str]:
    """The pages of one generation outside the variant folders, by relative path (pure: no I/O)."""
    pages: dict[str, str] = {}
    project_link = _PROJECT_LINK
    every = sorted(index.files, key=index.order.__getitem__)
    pages["simple/index.html"] = _page("Simple index", project_link)
    pages["simple/index.json"] = _root_json()
    pages[f"simple/{PROJECT}/index.html"] = _page(f"Links for {PROJECT}", _anchors(index, every, 2))
    pages[f"simple/{PROJECT}/index.json"] = _json_project(index, every, 2)
    from builder import coverage

    pages["index.html"] = coverage.render(index)
    return pages


def manifest_doc(index: Index) -> dict:
    return {
        "schema": SCHEMA,
        "project": PROJECT,
        "base_url": index.base_url,
        "files": index.files,
        "variants": index.variants,
    }


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class IndexResult:
    out: Path
    generation: Path
    added: tuple[str, ...]
    files: int
    variants: int
    replaced: tuple[str, ...] = ()  # published names whose bytes this run superseded (``replace``)


class _Layout:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.root = out.parent / f".{out.name}.d"
        self.store = self.root / "store"
        self.pages = self.root / "pages"
        self.lock = self.root / "lock"

    def current(self) -> Path | None:
        if self.out.is_symlink():
            target = self.out.resolve()
            return target if target.is_dir() else None
        if self.out.exists():
            if self.out.is_dir() and not any(self.out.iterdir()):
                self.out.rmdir()
                return None
            raise UsageError(
                f"{self.out} exists and is not an index made by `builder index` (expected a symlink into {self.root})",
                hint="choose another --out, or move that folder away",
            )
        return None


def load_manifest(gen: Path | None) -> dict:
    if gen is None or not (gen / "manifest.json").is_file():
        return {"files": {}}
    try:
        doc = orjson.loads((gen / "manifest.json").read_bytes())  # 5,000 entries: 5x faster than json
    except orjson.JSONDecodeError as err:
        raise IndexIntegrityError(f"{gen / 'manifest.json'} is not valid JSON ({err})") from None
    if doc.get("schema") != SCHEMA:
        raise IndexIntegrityError(f"{gen / 'manifest.json'}: schema {doc.get('schema')}, this builder reads {SCHEMA}")
    return doc


def _check_published(
    store_fd: int, store: Path, files: dict[str, dict], *, verify: bool, waive: frozenset = frozenset()
) -> tuple[bool, dict[str, list[str]]]:
    """Every recorded file is there with its recorded bytes. Stat first; hash when stat moved (or always).

    Returns whether a recorded stat was refreshed (a file touched, bytes unchanged), and the problems of
    the wheels in ``waive`` (named for replacement): the caller lets them pass only if they do get replaced.
    """
    problems, refreshed, waived = [], False, {}
    stat = os.stat
    for fn, e in files.items():
        for name, sha_key, stat_key in ((fn, "sha256", "stat"), (fn + ".metadata", "metadata_sha256", "metadata_stat")):
            try:
                st = stat(name, dir_fd=store_fd)  # relative to the open store: no path walk per file
            except FileNotFoundError:
                (waived.setdefault(fn, []) if fn in waive else problems).append(
                    f"{store / name}: missing (recorded sha256 {e[sha_key]})"
                )
                continue
            now = [st.st_size, st.st_mtime_ns, st.st_ino]
            if verify or now != e[stat_key]:
                actual = _sha256(store / name)
                if actual != e[sha_key]:
                    (waived.setdefault(fn, []) if fn in waive else problems).append(
                        f"{store / name}: sha256 is {actual}, recorded {e[sha_key]}"
                    )
                elif e[stat_key] != now:
                    e[stat_key] = now  # touched (or an older manifest's stat form), same bytes
                    refreshed = True
    if problems:
        _integrity_failure(problems)
    return refreshed, waived


def _integrity_failure(problems: list[str]):
    raise IndexIntegrityError(
        "published files no longer match the index: " + "; ".join(problems),
        hint="restore the original files (they are never re-hashed into the index); nothing was changed. "
        "To supersede a wheel on purpose, rerun with --replace NAME and its new build in --wheels",
    )


def _wheel_sources(root: Path) -> list[tuple[str, str]]:
    """(name, path) of every .whl under ``root`` (recursively), sorted by path: os.scandir, no pathlib."""
    found, stack = [], [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir():
                    stack.append(entry.path)
                elif entry.name.endswith(".whl"):
                    found.append((entry.path, entry.name))
    found.sort()
    return [(name, path) for path, name in found]


def _write_tree(root: Path, pages: dict[str, str]) -> None:
    for rel, text in pages.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _write_units(layout: _Layout, index: Index, previous: dict, replaced: frozenset = frozenset()) -> dict[str, str]:
    """Each variant folder is an immutable unit, pages/<key>.<hash>/, shared by every generation
    whose pages for that variant are the same: adding one wheel rewrites one or two folders, not all.
    ``replaced``: files whose pages must be rendered again (new bytes, or a download URL that moved)."""
    units = {}
    same_base = previous.get("base_url") == index.base_url
    for key, fns in index.variants.items():
        old = previous.get("units", {}).get(key)
        reuse = same_base and old and previous.get("variants", {}).get(key) == fns
        if reuse and not (replaced and replaced.intersection(fns)) and (layout.pages / old).is_dir():
            units[key] = old  # same files, same links: the pages are the same
            continue
        pages = render_variant(index, key)
        digest = hashlib.sha256("\0".join(pages[k] for k in sorted(pages)).encode()).hexdigest()[:16]
        unit = layout.pages / f"{key}.{digest}"
        if not unit.is_dir():
            tmp = layout.pages / f".{unit.name}.{uuid.uuid4().hex[:8]}.staging"
            _write_tree(tmp, pages)
            try:
                os.rename(tmp, unit)
            except OSError:  # the same unit appeared meanwhile (same content): keep that one
                shutil.rmtree(tmp, ignore_errors=True)
        units[key] = unit.name
    return units


def _write_generation(gen: Path, units: dict[str, str], pages: dict[str, str], manifest: dict) -> None:
    gen.mkdir(parents=True)
    (gen / "files").symlink_to(Path("..") / "store")
    for key, unit in units.items():
        (gen / key).symlink_to(Path("..") / "pages" / unit)
    _write_tree(gen, pages)
    # compact, by orjson: a 5,000-wheel manifest in milliseconds
    (gen / "manifest.json").write_bytes(orjson.dumps(manifest) + b"\n")


def build_index(
    wheels_dir: Path,
    out: Path,
    *,
    base_url: str | None = None,
    verify: bool = False,
    replace: Collection[str] | None = None,
    files_url: str | None = None,
) -> IndexResult:
    """Add every wheel under ``wheels_dir`` to the index at ``out`` (keeping everything already there).

    ``replace``: wheel filenames whose published bytes a different file of the same name in
    ``wheels_dir`` may supersede; any other such file is refused (published wheels are immutable).
    ``files_url``: the wheels under ``wheels_dir`` are downloaded from ``files_url/<name>``."""
    wheels_dir, out = Path(wheels_dir), Path(out)
    files_url = _check_files_url(files_url)
    if not wheels_dir.is_dir():
        raise UsageError(f"--wheels {wheels_dir}: no such directory", hint="point --wheels at a folder of .whl files")
    layout = _Layout(out.absolute())
    layout.store.mkdir(parents=True, exist_ok=True)
    layout.pages.mkdir(exist_ok=True)
    try:
        with FileLock(str(layout.lock), timeout=LOCK_TIMEOUT_S), _no_cyclic_gc():
            return _build_locked(wheels_dir, layout, base_url, verify, frozenset(replace or ()), files_url)
    except Timeout:
        raise IndexIntegrityError(
            f"another `builder index` has held {layout.lock} for {LOCK_TIMEOUT_S} s", hint="wait for it, then rerun"
        ) from None


def _check_files_url(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        raise UsageError(
            f"--files-url {url!r} is not an http(s) folder URL",
            hint="give the folder the wheels are downloaded from, e.g. "
            "https://github.com/OWNER/REPO/releases/download/TAG (no query, no #fragment)",
        )
    return urllib.parse.urlunsplit(parts).rstrip("/")


def _wheel_url(files_url: str, name: str) -> str:
    return f"{files_url}/{urllib.parse.quote(name)}"  # the local label's "+" as %2B, as GitHub's own links


@contextlib.contextmanager
def _no_cyclic_gc():
    """A run allocates ~100,000 small dicts and lists (the manifest) that form no cycles; the cyclic
    collector would rescan them again and again while they are built (a tenth of an add-one run)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _build_locked(
    wheels_dir: Path, layout: _Layout, base_url: str | None, verify: bool, replace: frozenset, files_url: str | None
) -> IndexResult:
    current = layout.current()
    doc = load_manifest(current)
    files: dict[str, dict] = doc["files"]
    if base_url is None:
        base_url = doc.get("base_url")
    store_fd = os.open(layout.store, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dirty, waived = _check_published(store_fd, layout.store, files, verify=verify, waive=replace)
        added, staged = [], {}  # staged: published name -> the store name its new bytes wait under
        sources = _wheel_sources(wheels_dir)
        if replace:
            missing = replace - {name for name, _ in sources}
            if missing:
                raise UsageError(
                    f"--replace {' '.join(sorted(missing))}: no such wheel under {wheels_dir}",
                    hint="name the new build's filename exactly, with the file in --wheels",
                )
        moved = set()  # published files whose download URL this run changes
        for name, src in sources:
            known = files.get(name)
            if known is None:
                files[name] = _ingest(src, name, store_fd)
                if files_url:
                    files[name]["url"] = _wheel_url(files_url, name)
                added.append(name)
                continue
            if files_url and known.get("url") != _wheel_url(files_url, name):
                known["url"] = _wheel_url(files_url, name)  # the same bytes, hosted elsewhere now
                moved.add(name)
                dirty = True
            st = os.stat(src)
            now = [st.st_size, st.st_mtime_ns, st.st_ino]
            if now == known.get("source_stat"):
                continue
            if st.st_size != known["size"] or _sha256(src) != known["sha256"]:
                if name in replace:
                    staged[name] = f".{name}.{uuid.uuid4().hex[:8]}.replacement"
                    files[name] = _replacement(known, _ingest(src, name, store_fd, staged[name]))
                    if known.get("url"):  # (already moved to this run's --files-url above)
                        files[name]["url"] = known["url"]
                    continue
                raise IndexIntegrityError(
                    f"{src} differs from the published {name} (sha256 {known['sha256']})",
                    hint="published wheels are immutable: give the new build a new version, remove it from "
                    "--wheels, or supersede the published file on purpose with --replace NAME",
                )
            known["source_stat"] = now
            dirty = True
        unresolved = [p for fn, ps in waived.items() if fn not in staged for p in ps]
        if unresolved:  # named for replacement, but the same bytes were given: still an altered file
            _unstage(store_fd, staged)
            _integrity_failure(unresolved)
        try:
            return _publish(layout, current, doc, files, base_url, added, staged, dirty, store_fd, moved)
        except BaseException:
            _unstage(store_fd, staged)
            raise
    finally:
        os.close(store_fd)


def _replacement(old: dict, new: dict) -> dict:
    """The new entry, remembering every set of bytes it superseded (newest last)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    new["replaced"] = [*old.get("replaced", []), {"sha256": old["sha256"], "size": old["size"], "at": when}]
    return new


def _unstage(store_fd: int, staged: dict[str, str]) -> None:
    for tmp in staged.values():
        for n in (tmp, tmp + ".metadata"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(n, dir_fd=store_fd)


def _publish(layout, current, doc, files, base_url, added, staged, dirty, store_fd, moved) -> IndexResult:
    if current is not None and not added and not staged and not dirty and base_url == doc.get("base_url"):
        return IndexResult(layout.out, current, (), len(files), len(doc.get("variants", {})))

    index = Index(dict(sorted(files.items())), base_url)
    pages = render_pages(index)
    gen_name = f"gen-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    staging = layout.root / f".{gen_name}.staging"
    try:
        units = _write_units(layout, index, doc, frozenset(staged) | frozenset(moved))
        _write_generation(staging, units, pages, {**manifest_doc(index), "units": units})
        gen = layout.root / gen_name
        os.rename(staging, gen)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    link_tmp = layout.out.with_name(f".{layout.out.name}.{uuid.uuid4().hex}.link")
    link_tmp.symlink_to(os.path.relpath(gen, layout.out.parent))
    # The old bytes leave the store right before the swap: the window in which the live manifest and
    # a replaced file disagree is two renames long (a run killed in it is reported; --replace mends it).
    for name, tmp in staged.items():
        os.replace(tmp + ".metadata", name + ".metadata", src_dir_fd=store_fd, dst_dir_fd=store_fd)
        os.replace(tmp, name, src_dir_fd=store_fd, dst_dir_fd=store_fd)
    os.replace(link_tmp, layout.out)  # the atomic swap
    _collect_garbage(layout, keep={gen, current})
    return IndexResult(layout.out, gen, tuple(added), len(files), len(index.variants), tuple(sorted(staged)))


def _collect_garbage(layout: _Layout, keep: set[Path | None]) -> None:
    keep_names = {g.name for g in keep if g is not None}
    with os.scandir(layout.root) as it:
        doomed = [
            e.path
            for e in it
            if (e.name.startswith("gen-") and e.name not in keep_names)
            or (e.name.startswith(".gen-") and e.name.endswith(".staging"))  # left by a run that was killed
        ]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    live = set()
    for name in keep_names:
        with os.scandir(layout.root / name) as it:
            live.update(os.readlink(e.path) for e in it if e.is_symlink())
    with os.scandir(layout.pages) as it:
        for unit in it:
            if unit.name.startswith(".") or os.path.join("..", "pages", unit.name) not in live:
                shutil.rmtree(unit.path, ignore_errors=True)  # unreferenced, or a killed run's staging


# --------------------------------------------------------------------------- CLI


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "index",
        help="index a folder of wheels: per-variant find-links pages, PEP 503/691 simple pages, coverage page",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--wheels", type=Path, required=True, help="folder of verified mamba-ssm wheels (searched recursively)"
    )
    p.add_argument(
        "--out", type=Path, required=True, help="index to create or extend (a symlink to the live generation)"
    )
    p.add_argument("--base-url", help="absolute URL the index is served from (default: relative links)")
    p.add_argument(
        "--files-url",
        metavar="URL",
        help="the wheels under --wheels are downloaded from URL/<name> (e.g. a GitHub release's "
        "https://github.com/OWNER/REPO/releases/download/TAG), not from the index's files/: "
        "GitHub Pages sites stop at 1 GB. Default: files/ next to the pages",
    )
    p.add_argument(
        "--verify", action="store_true", help="re-hash every published file, not only those whose stat moved"
    )
    p.add_argument(
        "--replace",
        nargs="+",
        action="extend",
        default=None,
        metavar="WHEEL",
        help="supersede these published wheel filenames with the different files of the same name in --wheels "
        "(a local rebuild; never on an index others install from). Default: such files are refused",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    t0 = time.perf_counter()
    replace = {os.path.basename(n) for n in args.replace or ()}
    res = build_index(
        args.wheels, args.out, base_url=args.base_url, verify=args.verify, replace=replace, files_url=args.files_url
    )
    print(
        f"index: {res.out} -> {res.generation.name}: {res.files} wheels in {res.variants} variants, "
        f"{len(res.added)} added, {len(res.replaced)} replaced ({time.perf_counter() - t0:.2f} s)"
    )
    for fn in res.added:
        print(f"  + {fn}")
    for fn in res.replaced:
        print(f"  ~ {fn} (replaced: the old bytes left the store)")
    return 0
