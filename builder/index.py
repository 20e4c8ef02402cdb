"""The resolver index: per-variant find-links pages, PEP 503/691 simple pages, the coverage page.

``python -m builder index --wheels DIR --out OUT [--base-url URL]``

On disk (OUT = ``dist/index``)::

    dist/index -> .index.d/gen-<id>          a symlink, swapped atomically (os.replace)
    dist/.index.d/store/                     every wheel once, plus <wheel>.metadata (PEP 658)
    dist/.index.d/gen-<id>/files -> ../store
    dist/.index.d/gen-<id>/<variant> -> ../pages/<variant>.<hash>   (immutable, shared by generations)
    dist/.index.d/pages/<variant>.<hash>/index.html              find-links page
    dist/.index.d/pages/<variant>.<hash>/mamba-ssm/index.html    PEP 503 project page
    dist/.index.d/gen-<id>/simple/...                        everything (HTML + PEP 691 JSON)
    dist/.index.d/gen-<id>/index.html, manifest.json         coverage page, machine-readable view
    dist/.index.d/lock                                       serialises concurrent runs

Wheels are immutable once published: a run adds new files to the store, checks
the recorded ones (size and mtime, and their sha256 whenever either moved, or
always with ``verify=True``), writes a complete new generation of pages in a
staging folder, then swaps the OUT symlink. Readers see the old index or the new
one, never a mix. Publish the tree with symlinks followed (``rsync -aL``, ``cp -rL``).

Which variants a stable-ABI wheel (``+cu13torchstable``, ``cp310-abi3``) serves:
a sidecar ``<wheel>.spec.json`` (the farm's ``BuildSpec.to_json()``) names them
in ``serves``; without one, every indexed variant of the same accelerator whose
torch minor satisfies the wheel's ``Requires-Dist: torch`` specifier, plus the
wheel's own ``<acc>-torchstable-abi3`` page.
"""

from __future__ import annotations

import email.parser
import functools
import hashlib
import html
import json
import os
import re
import shutil
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_wheel(path: Path) -> tuple[dict, bytes]:
    """The manifest entry for one wheel (without hashes) and its METADATA bytes."""
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
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
    raw_version = path.name.split("-")[1]
    try:
        variant = variant_of_label(raw_version.partition("+")[2])
    except _variant.VariantError as err:
        raise UsageError(f"{path}: {err}") from None
    label = variant.label
    raw_version = f"{raw_version.partition('+')[0]}+{label}"  # the spelling commands print
    try:
        with zipfile.ZipFile(path) as zf:
            meta_names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(meta_names) != 1:
                raise UsageError(f"{path}: expected one *.dist-info/METADATA, found {len(meta_names)}")
            metadata = zf.read(meta_names[0])
    except zipfile.BadZipFile as err:
        raise UsageError(f"{path}: not a readable zip file ({err})") from None
    msg = email.parser.BytesParser().parsebytes(metadata, headersonly=True)
    if Version(msg.get("Version", "0")) != version:
        raise UsageError(f"{path}: METADATA says version {msg.get('Version')}, the filename says {version}")
    requires_torch = ""
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == "torch":
            requires_torch = str(req.specifier)
    entry = {
        "filename": path.name,
        "version": raw_version,
        "label": label,
        "key": variant.key,
        "accelerator": variant.accelerator,
        "torch": variant.torch,
        "cxx11abi": variant.cxx11abi,
        "stable": variant.stable,
        "python": tag.interpreter,
        "abi": tag.abi,
        "platform": tag.platform,
        "requires_python": msg.get("Requires-Python") or "",
        "requires_torch": requires_torch,
    }
    sidecar = path.with_name(path.name + ".spec.json")
    if variant.stable and sidecar.is_file():
        entry["serves_declared"] = _read_serves(sidecar, variant)
    return entry, metadata


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
        self.variants = {k: sorted(v, key=self._order) for k, v in sorted(groups.items())}
        self._check_one_file_per_cell()

    def _order(self, fn: str) -> tuple:
        e = self.files[fn]
        return (parse_version(e["version"]), e["python"], fn)

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
        if self.base_url:
            return f"{self.base_url.rstrip('/')}/files/{fn}"
        return "../" * depth + "files/" + fn


# --------------------------------------------------------------------------- pages


def _anchor(index: Index, fn: str, depth: int) -> str:
    e = index.files[fn]
    tail = index.anchor_tails.get(fn)
    if tail is None:  # the part every page shares; a 5,000-wheel run links each file two or three times
        tail = f'#sha256={e["sha256"]}"'
        if e["requires_python"]:
            tail += f' data-requires-python="{html.escape(e["requires_python"])}"'
        md = f"sha256={e['metadata_sha256']}"
        tail += f' data-dist-info-metadata="{md}" data-core-metadata="{md}">{html.escape(fn)}</a><br>\n'
        index.anchor_tails[fn] = tail
    return f'    <a href="{html.escape(index.href(fn, depth))}{tail}'


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        f"{body}  </body>\n</html>\n"
    )


def _json_project(index: Index, fns: list[str], depth: int) -> str:
    files = []
    for fn in fns:
        e = index.files[fn]
        md = {"sha256": e["metadata_sha256"]}
        files.append(
            {
                "filename": fn,
                "url": index.href(fn, depth),
                "hashes": {"sha256": e["sha256"]},
                "requires-python": e["requires_python"] or None,
                "core-metadata": md,
                "dist-info-metadata": md,
                "size": e["size"],
            }
        )
    versions = sorted({index.files[fn]["version"] for fn in fns}, key=parse_version)
    doc = {"meta": {"api-version": "1.1"}, "name": PROJECT, "versions": versions, "files": files}
    return json.dumps(doc, separators=(",", ":")) + "\n"  # compact: the C encoder, 10x faster than indent


def _root_json() -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": PROJECT}]}, indent=1) + "\n"


_PROJECT_LINK = f'    <a href="{PROJECT}/">{PROJECT}</a><br>\n'


def render_variant(index: Index, key: str) -> dict[str, str]:
    """One variant folder: <key>/ is a find-links page (wheel anchors) and a PEP 503 root at once."""
    fns = index.variants[key]
    return {
        "index.html": _page(f"{PROJECT}: {key}", "".join(_anchor(index, fn, 1) for fn in fns) + _PROJECT_LINK),
        f"{PROJECT}/index.html": _page(f"Links for {PROJECT} ({key})", "".join(_anchor(index, fn, 2) for fn in fns)),
    }


def render_pages(index: Index) -> dict[str, str]:
    """The pages of one generation outside the variant folders, by relative path (pure: no I/O)."""
    pages: dict[str, str] = {}
    project_link = _PROJECT_LINK
    every = sorted(index.files, key=index._order)
    pages["simple/index.html"] = _page("Simple index", project_link)
    pages["simple/index.json"] = _root_json()
    pages[f"simple/{PROJECT}/index.html"] = _page(
        f"Links for {PROJECT}", "".join(_anchor(index, fn, 2) for fn in every)
    )
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
        doc = json.loads((gen / "manifest.json").read_text())
    except ValueError as err:
        raise IndexIntegrityError(f"{gen / 'manifest.json'} is not valid JSON ({err})") from None
    if doc.get("schema") != SCHEMA:
        raise IndexIntegrityError(f"{gen / 'manifest.json'}: schema {doc.get('schema')}, this builder reads {SCHEMA}")
    return doc


def _check_published(store: Path, files: dict[str, dict], *, verify: bool) -> bool:
    """Every recorded file is there with its recorded bytes. Stat first; hash when stat moved (or always).

    Returns whether a recorded stat was refreshed (a file touched, bytes unchanged).
    """
    problems, refreshed = [], False
    root = str(store)
    for fn, e in files.items():
        for name, sha_key, stat_key in ((fn, "sha256", "stat"), (fn + ".metadata", "metadata_sha256", "metadata_stat")):
            path = os.path.join(root, name)  # plain strings: 10,000 stats, pathlib's overhead shows
            try:
                st = os.stat(path)
            except FileNotFoundError:
                problems.append(f"{path}: missing (recorded sha256 {e[sha_key]})")
                continue
            if verify or [st.st_size, st.st_mtime_ns] != e[stat_key]:
                actual = _sha256(Path(path))
                if actual != e[sha_key]:
                    problems.append(f"{path}: sha256 is {actual}, recorded {e[sha_key]}")
                elif e[stat_key] != [st.st_size, st.st_mtime_ns]:
                    e[stat_key] = [st.st_size, st.st_mtime_ns]  # touched, same bytes
                    refreshed = True
    if problems:
        raise IndexIntegrityError(
            "published files no longer match the index: " + "; ".join(problems),
            hint="restore the original files (they are never re-hashed into the index); nothing was changed",
        )
    return refreshed


def _publish_file(src: Path | None, dest: Path, data: bytes | None = None) -> str:
    """Write ``dest`` atomically (tmp + rename); return the sha256 of the bytes written, hashed as they
    are copied (the copy is what gets published, so that is what the hash must describe)."""
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    h = hashlib.sha256()
    with open(tmp, "wb") as out:
        if data is None:
            with open(src, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
        else:
            h.update(data)
            out.write(data)
    os.replace(tmp, dest)
    return h.hexdigest()


def _write_tree(root: Path, pages: dict[str, str]) -> None:
    for rel, text in pages.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _write_units(layout: _Layout, index: Index, previous: dict) -> dict[str, str]:
    """Each variant folder is an immutable unit, pages/<key>.<hash>/, shared by every generation
    whose pages for that variant are the same: adding one wheel rewrites one or two folders, not all."""
    units = {}
    same_base = previous.get("base_url") == index.base_url
    for key, fns in index.variants.items():
        old = previous.get("units", {}).get(key)
        if same_base and old and previous.get("variants", {}).get(key) == fns and (layout.pages / old).is_dir():
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
    # compact and C-encoded: a 5,000-wheel manifest in milliseconds, not a second
    (gen / "manifest.json").write_text(json.dumps(manifest, separators=(",", ":")) + "\n")


def build_index(wheels_dir: Path, out: Path, *, base_url: str | None = None, verify: bool = False) -> IndexResult:
    """Add every wheel under ``wheels_dir`` to the index at ``out`` (keeping everything already there)."""
    wheels_dir, out = Path(wheels_dir), Path(out)
    if not wheels_dir.is_dir():
        raise UsageError(f"--wheels {wheels_dir}: no such directory", hint="point --wheels at a folder of .whl files")
    layout = _Layout(out.absolute())
    layout.store.mkdir(parents=True, exist_ok=True)
    layout.pages.mkdir(exist_ok=True)
    try:
        with FileLock(str(layout.lock), timeout=LOCK_TIMEOUT_S):
            return _build_locked(wheels_dir, layout, base_url, verify)
    except Timeout:
        raise IndexIntegrityError(
            f"another `builder index` has held {layout.lock} for {LOCK_TIMEOUT_S} s", hint="wait for it, then rerun"
        ) from None


def _build_locked(wheels_dir: Path, layout: _Layout, base_url: str | None, verify: bool) -> IndexResult:
    current = layout.current()
    doc = load_manifest(current)
    files: dict[str, dict] = doc["files"]
    if base_url is None:
        base_url = doc.get("base_url")
    dirty = _check_published(layout.store, files, verify=verify)

    added = []
    for src in sorted(wheels_dir.rglob("*.whl")):
        st = src.stat()
        known = files.get(src.name)
        if known is not None:
            if [st.st_size, st.st_mtime_ns] == known.get("source_stat"):
                continue
            if st.st_size != known["size"] or _sha256(src) != known["sha256"]:
                raise IndexIntegrityError(
                    f"{src} differs from the published {src.name} (sha256 {known['sha256']})",
                    hint="published wheels are immutable: give the new build a new version, or remove it from --wheels",
                )
            known["source_stat"] = [st.st_size, st.st_mtime_ns]
            dirty = True
            continue
        entry, metadata = read_wheel(src)
        dest = layout.store / src.name
        entry["sha256"] = _publish_file(src, dest)
        entry["metadata_sha256"] = _publish_file(None, layout.store / (src.name + ".metadata"), metadata)
        entry["size"] = dest.stat().st_size
        entry["stat"] = [entry["size"], dest.stat().st_mtime_ns]
        mst = (layout.store / (src.name + ".metadata")).stat()
        entry["metadata_stat"] = [mst.st_size, mst.st_mtime_ns]
        entry["source_stat"] = [st.st_size, st.st_mtime_ns]
        files[src.name] = entry
        added.append(src.name)

    if current is not None and not added and not dirty and base_url == doc.get("base_url"):
        return IndexResult(layout.out, current, (), len(files), len(doc.get("variants", {})))

    index = Index(dict(sorted(files.items())), base_url)
    pages = render_pages(index)
    gen_name = f"gen-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    staging = layout.root / f".{gen_name}.staging"
    try:
        units = _write_units(layout, index, doc)
        _write_generation(staging, units, pages, {**manifest_doc(index), "units": units})
        gen = layout.root / gen_name
        os.rename(staging, gen)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    link_tmp = layout.out.with_name(f".{layout.out.name}.{uuid.uuid4().hex}.link")
    link_tmp.symlink_to(os.path.relpath(gen, layout.out.parent))
    os.replace(link_tmp, layout.out)  # the atomic swap
    _collect_garbage(layout, keep={gen, current})
    return IndexResult(layout.out, gen, tuple(added), len(files), len(index.variants))


def _collect_garbage(layout: _Layout, keep: set[Path | None]) -> None:
    gens = sorted((p for p in layout.root.glob("gen-*") if p not in keep), key=lambda p: p.stat().st_mtime)
    for old in gens:
        shutil.rmtree(old, ignore_errors=True)
    live = {os.readlink(p) for g in keep if g is not None for p in g.iterdir() if p.is_symlink()}
    for unit in layout.pages.iterdir():
        if unit.name.startswith(".") or str(Path("..") / "pages" / unit.name) not in live:
            shutil.rmtree(unit, ignore_errors=True)  # unreferenced, or a killed run's staging
    for stale in layout.root.glob(".gen-*.staging"):  # left by a run that was killed
        shutil.rmtree(stale, ignore_errors=True)
    for tmp in layout.store.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


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
        "--verify", action="store_true", help="re-hash every published file, not only those whose stat moved"
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    t0 = time.perf_counter()
    res = build_index(args.wheels, args.out, base_url=args.base_url, verify=args.verify)
    print(
        f"index: {res.out} -> {res.generation.name}: {res.files} wheels in {res.variants} variants, "
        f"{len(res.added)} added ({time.perf_counter() - t0:.2f} s)"
    )
    for fn in res.added:
        print(f"  + {fn}")
    return 0
