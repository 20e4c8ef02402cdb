"""The store (``.index.d/store/``): every published wheel once, plus its PEP 658 ``<wheel>.metadata`` and, where the
farm recorded one, ``<wheel>.evidence.json`` (what was checked of it: builder.verifying.evidence).

Everything here works relative to an open descriptor of the store folder (``store_fd``): no path walk per
file at 5,000 wheels. A store file is written only under a name the live manifest does not list, so no
reader sees it before a manifest names it; a replacement waits under a staging name until the swap.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
from pathlib import Path

from builder.errors import IndexIntegrityError, UsageError
from builder.facts.spec import sha256_of
from builder.publishing.index import reader
from builder.publishing.index.model import Entry
from builder.verifying import evidence

_WHOLE = 64 << 20  # wheels up to this size are read in one go (hash and zip from one buffer)
_CHUNK = 1 << 20


def stat_key(st: os.stat_result) -> list[int]:
    """What a recorded file is recognised by without reading it."""
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def ingest(src: str, name: str, store_fd: int, store_name: str | None = None, projects: tuple[str, ...] = ()) -> Entry:
    """Read a new wheel once (hash, METADATA), publish it into the store, return its entry.

    The store gets a hard link (no copy; a copy where linking is refused, e.g. across filesystems), so
    the published bytes are the ones hashed here as long as the file's stat did not move meanwhile;
    later runs re-hash it whenever its stat moves, and report it if its bytes changed.
    ``store_name`` (default ``name``) is where it goes: a replacement is staged under another name."""
    named = reader.check_name(src, projects)
    name = store_name or name
    fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the locked run
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"{src}: not a regular file", hint="index wheel files only (nothing was changed)")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size <= _WHOLE:
            data = f.read()
            sha = hashlib.sha256(data).hexdigest()
            wheel, metadata = reader.describe(src, io.BytesIO(data), named)
        else:  # a real CUDA wheel can be hundreds of MB: hash in chunks, seek to the zip directory
            data = None
            sha = hashlib.file_digest(f, "sha256").hexdigest()
            wheel, metadata = reader.describe(src, f, named)
    record = read_evidence(src, sha)  # refused before anything reaches the store
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
    metadata_sha = _write_file(store_fd, name + ".metadata", metadata)
    entry = Entry.make(
        **wheel.__dict__,
        sha256=sha,
        size=dst.st_size,
        stat=stat_key(dst),
        source_stat=stat_key(st),
        metadata_sha256=metadata_sha,
        metadata_stat=stat_key(os.stat(name + ".metadata", dir_fd=store_fd)),
    )
    if record is None:
        return entry
    data, tier = record
    evidence_sha = _write_file(store_fd, name + evidence.SUFFIX, data)
    return entry.replace(
        evidence_sha256=evidence_sha,
        evidence_stat=stat_key(os.stat(name + evidence.SUFFIX, dir_fd=store_fd)),
        tier=tier,
    )


def read_evidence(src: str, wheel_sha256: str) -> tuple[bytes, str] | None:
    """The evidence record beside the wheel at SRC, read as outside data and checked to be of its bytes
    (UsageError otherwise): (its bytes as the store keeps them, its tier); None when there is none."""
    rec = evidence.read(evidence.path_of(src), wheel_sha256=wheel_sha256)
    if rec is None:
        return None
    if rec["wheel"] != os.path.basename(src):
        raise UsageError(f"{evidence.path_of(src)}: the record is of {rec['wheel']!r}, not {os.path.basename(src)}",
                         hint="a record sits beside the wheel it is of: rebuild the wheel, or remove the stray record")  # fmt: skip
    return evidence.dumps(rec).encode(), evidence.tier_detail(rec)


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


def _copy_hashing(src: str, dir_fd: int, name: str) -> str:
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


def check_published(
    store_fd: int, store: Path, files: dict[str, Entry], *, verify: bool, waive: frozenset = frozenset()
) -> tuple[bool, dict[str, list[str]]]:
    """Every recorded file is there with its recorded bytes. Stat first; hash when stat moved (or always).

    Returns whether a recorded stat was refreshed in ``files`` (a file touched, bytes unchanged), and the
    problems of the wheels in ``waive`` (named for replacement): the caller lets them pass only if they
    do get replaced."""
    problems, refreshed, waived = [], False, {}
    stat = os.stat
    for fn, e in files.items():
        recorded_files = [
            (fn, e.sha256, e.stat, "stat"),
            (fn + ".metadata", e.metadata_sha256, e.metadata_stat, "metadata_stat"),
        ]
        if e.evidence_sha256:
            recorded_files.append((fn + evidence.SUFFIX, e.evidence_sha256, e.evidence_stat, "evidence_stat"))
        for name, sha, recorded, stat_field in recorded_files:
            try:
                st = stat(name, dir_fd=store_fd)  # relative to the open store: no path walk per file
            except FileNotFoundError:
                (waived.setdefault(fn, []) if fn in waive else problems).append(
                    f"{store / name}: missing (recorded sha256 {sha})"
                )
                continue
            now = [st.st_size, st.st_mtime_ns, st.st_ino]
            if verify or now != recorded:
                actual = sha256_of(store / name)
                if actual != sha:
                    (waived.setdefault(fn, []) if fn in waive else problems).append(
                        f"{store / name}: sha256 is {actual}, recorded {sha}"
                    )
                elif recorded != now:
                    # touched (or an older manifest's stat form), same bytes
                    e = files[fn] = e.replace(**{stat_field: now})
                    refreshed = True
    if problems:
        integrity_failure(problems)
    return refreshed, waived


def integrity_failure(problems: list[str]):
    raise IndexIntegrityError(
        "published files no longer match the index: " + "; ".join(problems),
        hint="restore the original files (they are never re-hashed into the index); nothing was changed. "
        "To supersede a wheel on purpose, rerun with --replace NAME and its new build in --wheels",
    )


def unstage(store_fd: int, staged: dict[str, str]) -> None:
    """Remove the staged replacements (the run did not publish them)."""
    for tmp in staged.values():
        for n in (tmp, tmp + ".metadata", tmp + evidence.SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(n, dir_fd=store_fd)
