"""A run of ``builder index``: check what is published, add the new wheels to the store, write a complete new
generation of pages beside the live one, swap the OUT symlink to it (the atomic step), collect garbage.

Readers see the old index or the new one, never a mix; a killed run leaves the old one live. A run holds
``.index.d/lock`` throughout, so two runs never interleave.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import shutil
import stat
import sys
import time
import urllib.parse
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import orjson
from filelock import FileLock, Timeout
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from builder.errors import IndexIntegrityError, NameCollision, UsageError
from builder.facts.spec import sha256_of
from builder.facts.untrusted import Untrusted, inside, plain_url, read_inside, shown
from builder.publishing.index import reader, store
from builder.publishing.index.model import SCHEMA, Entry, Index, describe_source, entries_from_json
from builder.publishing.index.pages import Pages
from builder.verifying import evidence, variants

LOCK_TIMEOUT_S = 600
MAX_MANIFEST_BYTES = 256 << 20  # a 5,000-wheel manifest is a few MB


@dataclass(frozen=True)
class IndexResult:
    out: Path
    generation: Path
    added: tuple[str, ...]
    files: int
    variants: int
    replaced: tuple[str, ...] = ()  # published names whose bytes this run superseded (``replace``)


class Layout:
    """Where an index at ``out`` keeps its parts (the package doc draws it)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.root = out.parent / f".{out.name}.d"
        self.store = self.root / "store"
        self.pages = self.root / "pages"
        self.lock = self.root / "lock"

    def current(self) -> Path | None:
        if self.out.is_symlink():
            target = self.out.resolve()
            # the live generation is a folder of this index's own root: a link out of it is never read as one
            if target.parent != self.root.resolve() or not inside(self.root.resolve(), target):
                raise IndexIntegrityError(f"{shown(self.out)} links to {shown(target)}, outside {shown(self.root)}: "
                                          "not a generation of this index; nothing read or written",
                                          hint="choose another --out, or move that link away")  # fmt: skip
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
    """The live generation's manifest.json, its entries typed (an empty one where there is none)."""
    if gen is None or not os.path.lexists(gen / "manifest.json"):
        return {"files": {}}
    path = gen / "manifest.json"
    try:  # the generation's own file: a link out of it, a FIFO or a device is refused, never read
        doc = orjson.loads(read_inside(gen, path, MAX_MANIFEST_BYTES))  # 5,000 entries: 5x faster than json
    except Untrusted as err:
        raise IndexIntegrityError(f"{err}: not this index's manifest") from None
    except orjson.JSONDecodeError as err:
        raise IndexIntegrityError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(doc, dict):
        raise IndexIntegrityError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        raise IndexIntegrityError(f"{path}: schema {doc.get('schema')}, this builder reads {SCHEMA}")
    doc["files"] = entries_from_json(doc.get("files", {}))
    return doc


def build_index(
    wheels_dir: Path,
    out: Path,
    *,
    base_url: str | None = None,
    verify: bool = False,
    replace: Collection[str] | None = None,
    files_url: str | None = None,
    projects: Collection[str] = (),
) -> IndexResult:
    """Add every wheel under ``wheels_dir`` to the index at ``out`` (keeping everything already there).

    ``projects``: recipe projects the index takes beside this repository's and ``recipes/``'s (the recipes of a
    matrix whose ``[plan] recipes`` names another folder).
    ``replace``: wheel filenames whose published bytes a different file of the same name in
    ``wheels_dir`` may supersede; any other such file is refused (published wheels are immutable).
    ``files_url``: the wheels under ``wheels_dir`` are downloaded from ``files_url/<name>``."""
    wheels_dir, out = Path(wheels_dir), Path(out)
    files_url = _check_files_url(files_url)
    base_url = _check_base_url(base_url)
    if not wheels_dir.is_dir():
        raise UsageError(f"--wheels {wheels_dir}: no such directory", hint="point --wheels at a folder of .whl files")
    layout = Layout(out.absolute())
    layout.store.mkdir(parents=True, exist_ok=True)
    layout.pages.mkdir(exist_ok=True)
    try:
        with FileLock(str(layout.lock), timeout=LOCK_TIMEOUT_S), _no_cyclic_gc():
            return _build_locked(wheels_dir, layout, base_url, verify, frozenset(replace or ()), files_url,
                                 tuple(projects))  # fmt: skip
    except Timeout:
        raise IndexIntegrityError(
            f"another `builder index` has held {layout.lock} for {LOCK_TIMEOUT_S} s", hint="wait for it, then rerun"
        ) from None


def _http_url(url: str, flag: str, what: str, hint: str) -> str:
    """An absolute http(s) URL with no query, fragment, spaces or quotes, normalised; else UsageError naming the flag."""
    plain = plain_url(url)
    if plain is None:
        raise UsageError(f"{flag} {shown(repr(url), 300)} is not an http(s) {what}", hint=hint)
    return plain


def _check_files_url(url: str | None) -> str | None:
    if url is None:
        return None
    return _http_url(
        url,
        "--files-url",
        "folder URL",
        "give the folder the wheels are downloaded from, e.g. "
        "https://github.com/OWNER/REPO/releases/download/TAG (no query, no #fragment)",
    ).rstrip("/")


def _check_base_url(url: str | None) -> str | None:
    """--base-url: an absolute http(s) URL (it prefixes every link of every page, and every install command)."""
    if url is None:
        return None
    return _http_url(
        url,
        "--base-url",
        "URL",
        "give the absolute URL the index is served from, e.g. https://OWNER.github.io/REPO/ "
        "(no query, no #fragment, no spaces or quotes), or leave it out for relative links",
    )


def _wheel_url(files_url: str, name: str) -> str:
    return f"{files_url}/{urllib.parse.quote(name)}"  # the local label's "+" as %2B, as GitHub's own links


@contextlib.contextmanager
def _no_cyclic_gc():
    """A run allocates ~100,000 small objects (the manifest) that form no cycles; the cyclic collector
    would rescan them again and again while they are built (a tenth of an add-one run)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _wheel_sources(root: Path, warn=None) -> list[tuple[str, str]]:
    """(name, path) of every .whl under ``root`` (recursively), sorted by path: os.scandir, no pathlib.

    Only regular files are indexed: a FIFO would block the run while it holds the lock, a link to /dev/zero
    would be read until memory runs out, a link loop or a dangling link cannot be read at all. Each of those
    is skipped with a warning (``warn``, default stderr). A linked folder is followed once (a loop ends)."""
    warn = warn or (lambda text: print(f"warning: {text}", file=sys.stderr))
    found, stack, seen = [], [str(root)], set()
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
        except OSError as err:
            warn(f"{folder}: skipped, cannot be read ({err.strerror or err})")
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue  # a link back to a folder already walked
        seen.add((st.st_dev, st.st_ino))
        with os.scandir(folder) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    stack.append(entry.path)
                elif entry.name.endswith(".whl"):
                    try:
                        mode = os.stat(entry.path).st_mode
                    except OSError as err:  # a link loop, a dangling link
                        warn(f"{entry.path}: skipped, cannot be read ({err.strerror or err})")
                        continue
                    if not stat.S_ISREG(mode):
                        warn(f"{entry.path}: skipped, not a regular file (a FIFO, a device or a link to one)")
                        continue
                    found.append((entry.path, entry.name))
    found.sort()
    return [(name, path) for path, name in found]


def _one_file_per_name(sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Two files under --wheels with one name: the same bytes are one wheel; different bytes are refused."""
    first: dict[str, str] = {}
    out = []
    for name, path in sources:
        if name not in first:
            first[name] = path
            out.append((name, path))
            continue
        other = first[name]
        if os.path.getsize(other) != os.path.getsize(path) or sha256_of(other) != sha256_of(path):
            raise NameCollision(
                f"two different files named {name} under --wheels: {other}, from {_source_of(other)}, and {path}, "
                f"from {_source_of(path)}",
                hint="a filename is one set of bytes: remove one of them (nothing was changed)",
            )
    return out


def _source_of(path: str) -> str:
    """What the wheel at PATH says it was built from (its sidecar), as an error names it."""
    try:
        project = canonicalize_name(parse_wheel_filename(os.path.basename(path))[0])
        sidecar = f"{path}.spec.json"
        return describe_source(reader.read_source(sidecar, reader.read_sidecar(sidecar), project))
    except (InvalidWheelFilename, UsageError, Untrusted, OSError) as err:
        return f"a source its sidecar does not say ({shown(str(err), 200)})"


def _build_locked(
    wheels_dir: Path, layout: Layout, base_url: str | None, verify: bool, replace_: frozenset, files_url: str | None,
    projects: tuple[str, ...] = (),
) -> IndexResult:
    current = layout.current()
    doc = load_manifest(current)
    files: dict[str, Entry] = doc["files"]
    if base_url is None:
        base_url = doc.get("base_url")
    store_fd = os.open(layout.store, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dirty, waived = store.check_published(store_fd, layout.store, files, verify=verify, waive=replace_)
        added, staged = [], {}  # staged: published name -> the store name its new bytes wait under
        evidence_staged: dict[str, str] = {}  # a published wheel's newer evidence record: its store name -> staged name
        try:
            sources = _one_file_per_name(_wheel_sources(wheels_dir))
            if replace_:
                missing = replace_ - {name for name, _ in sources}
                if missing:
                    raise UsageError(
                        f"--replace {' '.join(sorted(missing))}: no such wheel under {wheels_dir}",
                        hint="name the new build's filename exactly, with the file in --wheels",
                    )
            moved = set()  # published files whose download URL this run changes
            for name, src in sources:
                known = files.get(name)
                url = _wheel_url(files_url, name) if files_url else None
                if known is None:
                    new = store.ingest(src, name, store_fd, projects=projects)
                    files[name] = new.replace(url=url) if url else new
                    added.append(name)
                    continue
                if url and known.url != url:
                    known = files[name] = known.replace(url=url)  # the same bytes, hosted elsewhere now
                    moved.add(name)
                    dirty = True
                st = os.stat(src)
                now = [st.st_size, st.st_mtime_ns, st.st_ino]
                if now == known.source_stat:
                    if _evidence_update(src, name, known, files, store_fd, evidence_staged):
                        dirty = True
                    continue
                if st.st_size != known.size or sha256_of(src) != known.sha256:
                    if name in replace_:
                        staged[name] = f".{name}.{uuid.uuid4().hex[:8]}.replacement"
                        new = store.ingest(src, name, store_fd, staged[name], projects=projects)
                        files[name] = _replacement(known, new)  # (its URL already moved to this run's --files-url)
                        continue
                    raise NameCollision(
                        f"{src}, from {_source_of(src)}, differs from the published {name} (sha256 {known.sha256}), "
                        f"from {describe_source(known.source)}",
                        hint="published wheels are immutable: give the new build a new version, remove it from "
                        "--wheels, or supersede the published file on purpose with --replace NAME",
                    )
                files[name] = known.replace(source_stat=now)
                _evidence_update(src, name, files[name], files, store_fd, evidence_staged)
                dirty = True
            unresolved = [p for fn, ps in waived.items() if fn not in staged for p in ps]
            if unresolved:  # named for replacement, but the same bytes were given: still an altered file
                store.unstage(store_fd, staged)
                store.integrity_failure(unresolved)
            try:
                return _publish(
                    layout, current, doc, files, base_url, added, staged, dirty, store_fd, moved, evidence_staged
                )
            except BaseException:
                store.unstage(store_fd, staged)
                raise
        except BaseException:  # files/ is the store: a run that fails or is refused leaves no new file there
            if layout.current() == current:  # (not swapped: no manifest lists them)
                store.unstage(store_fd, {n: n for n in added})
                for tmp in evidence_staged.values():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp, dir_fd=store_fd)
            raise
    finally:
        os.close(store_fd)


def _evidence_update(src: str, name: str, known: Entry, files: dict, store_fd: int, staged: dict[str, str]) -> bool:
    """A published wheel given again with an evidence record other than the one the store holds (the GPU gate
    added its runs; a first record for a wheel indexed without one): the new record is staged in the store, renamed
    over the old just before the swap, and the entry records it and its tier. A wheel given without its record keeps
    the published one: what was proven is never dropped by a later run."""
    found = store.read_evidence(src, known.sha256)
    if found is None:
        return False
    data, tier = found
    if hashlib.sha256(data).hexdigest() == known.evidence_sha256:
        return False
    tmp = f".{name}.{uuid.uuid4().hex[:8]}.evidence"
    sha = store._write_file(store_fd, tmp, data)
    staged[name + evidence.SUFFIX] = tmp
    files[name] = known.replace(
        evidence_sha256=sha, evidence_stat=store.stat_key(os.stat(tmp, dir_fd=store_fd)), tier=tier
    )
    return True


def _replacement(old: Entry, new: Entry) -> Entry:
    """The new entry, at the old one's download URL, remembering every set of bytes it superseded."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    superseded = [*old.replaced, {"sha256": old.sha256, "size": old.size, "at": when}]
    return new.replace(replaced=superseded, url=old.url)


def _publish(
    layout, current, doc, files, base_url, added, staged, dirty, store_fd, moved, evidence_staged
) -> IndexResult:
    if current is not None and not added and not staged and not dirty and base_url == doc.get("base_url"):
        _collect_store(store_fd, files, doc.get("wheel_variants"))
        return IndexResult(layout.out, current, (), len(files), len(doc.get("variants", {})))

    index = Index(dict(sorted(files.items())), base_url)
    pages = Pages(index)
    variant_pages, wheel_variants = variants.build_root(index, layout.store, doc)  # <index>/variants/ (PEP 825)
    if refused := wheel_variants.pop("refused", None):  # a wheel whose variant form cannot be read: nothing published
        raise IndexIntegrityError(
            "; ".join(f"{shown(fn, 300)}: cannot be put in the variant root: {shown(why, 600)}"
                      for fn, why in sorted(refused.items())) + "; nothing was published",
            hint="rebuild or remove these wheels from --wheels; the published index is as it was",
        )  # fmt: skip
    index.wheel_variants = wheel_variants  # (the coverage page shows the variant root)
    generation_pages = pages.generation()
    generation_pages.update(variant_pages)
    gen_name = f"gen-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    staging = layout.root / f".{gen_name}.staging"
    try:
        units = _write_units(layout, index, pages, doc, frozenset(staged) | frozenset(moved))
        _write_generation(staging, units, generation_pages, index.to_json(units=units, wheel_variants=wheel_variants))
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
        if files[name].evidence_sha256:
            with contextlib.suppress(FileNotFoundError):  # (a replacement given without a record keeps none)
                os.replace(tmp + evidence.SUFFIX, name + evidence.SUFFIX, src_dir_fd=store_fd, dst_dir_fd=store_fd)
    for name, tmp in evidence_staged.items():
        os.replace(tmp, name, src_dir_fd=store_fd, dst_dir_fd=store_fd)
    os.replace(link_tmp, layout.out)  # the atomic swap
    _collect_garbage(layout, keep={gen, current})
    _collect_store(store_fd, files, wheel_variants, doc.get("wheel_variants"))  # (doc: the kept generation's)
    return IndexResult(layout.out, gen, tuple(added), len(files), len(index.variants), tuple(sorted(staged)))


def _write_tree(root: Path, pages: dict[str, str]) -> None:
    for rel, text in pages.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _write_units(layout: Layout, index: Index, pages: Pages, previous: dict, replaced: frozenset) -> dict[str, str]:
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
        unit_pages = pages.variant(key)
        digest = hashlib.sha256("\0".join(unit_pages[k] for k in sorted(unit_pages)).encode()).hexdigest()[:16]
        unit = layout.pages / f"{key}.{digest}"
        if not unit.is_dir():
            tmp = layout.pages / f".{unit.name}.{uuid.uuid4().hex[:8]}.staging"
            _write_tree(tmp, unit_pages)
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


def _collect_store(store_fd: int, files: dict, *wheel_variants: dict | None) -> None:
    """Remove every store file the live manifest does not list (its wheels and their .metadata, and the variant
    root's files, ``wheel_variants``: the live and the kept generation's records): what killed runs ingested or
    staged and never published. The store is served as files/ (and a site copy would publish it), so it holds
    the index's files only. (The generation kept before the live one lists a subset: wheels never leave an index.)
    Safe under the run's lock: no other run writes the store meanwhile."""
    listed = {n for fn in files for n in (fn, fn + ".metadata")}
    listed.update(fn + evidence.SUFFIX for fn, e in files.items() if e.evidence_sha256)
    for record in wheel_variants:
        for name in (record or {}).get("files") or {}:
            listed.update((name, name + ".metadata"))
    with os.scandir(store_fd) as it:
        orphans = [e.name for e in it if e.name not in listed and not e.is_dir(follow_symlinks=False)]
    for name in orphans:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=store_fd)


def _collect_garbage(layout: Layout, keep: set[Path | None]) -> None:
    """Keep the new generation and the one before it (readers may still be on it), and the page units they
    link; remove every other generation, unit and what killed runs left staged."""
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
