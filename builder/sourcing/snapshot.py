"""An index snapshot: the listings and wheel METADATA that pip's and uv's resolvers read, kept in a folder and
served on 127.0.0.1 as a PEP 691 simple index of wheels only, with every file's core metadata (PEP 658/714) and
no file bodies.

Recording (an upstream :class:`~builder.sourcing.pypi.SimpleIndex` given): a listing or METADATA the folder lacks is read
from the index once (torch's METADATA by HTTP range reads: PyPI offers no PEP 658 file for it) and kept. Replaying
(no upstream): only what the folder holds is served, so a resolution reads exactly the metadata it read when it
was recorded, offline. What a resolver asked for and did not get is in :attr:`Snapshot.missing`, what the folder holds
but breaks a rule in :attr:`Snapshot.refused`.

The folder: ``pages/<project>.json`` (the index's listing, wheels only, each file's original URL and sha256: a
lock file names those) and ``metadata/<sha256>.METADATA``. Everything in it is outside data: names are checked,
reads capped and links out of the folder refused.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import tempfile
import threading
import urllib.parse
from dataclasses import asdict
from pathlib import Path

from packaging.utils import canonicalize_name

from builder.errors import SourceFetchError
from builder.facts.untrusted import (
    Untrusted,
    env_seconds,
    expect,
    file_name,
    load_json,
    locked_url,
    read_inside,
    sha256_name,
    shown,
    text,
)
from builder.sourcing.pypi import MAX_METADATA_BYTES, File, SimpleIndex

MAX_PAGE_BYTES = 64 << 20  # one stored listing (torch's, wheels only, is about 0.5 MB)
# versions of one project whose METADATA one resolution may read: a resolver weighs them one by one (uv about 30 a
# second here), and the release's resolutions read a few of each (its whole closure, every cell: about a hundred)
MAX_CANDIDATES = 200
_PAGE_FIELDS = ("filename", "url", "sha256", "size", "requires_python", "upload_time", "yanked", "core_metadata")


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a killed run leaves a ``.partial-*`` file, never half a listing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


class Snapshot:
    """The folder of recorded listings and METADATA (see the module's docstring)."""

    def __init__(self, root: Path, upstream: SimpleIndex | None = None, refresh: bool = True) -> None:
        self.root = Path(root)
        self.upstream = upstream
        self.refresh = refresh  # recording: read each listing anew once per run (else only those not stored)
        self.pages_read: dict[str, str] = {}  # project -> sha256 of its stored listing, as served since reset()
        self.missing: set[str] = set()  # what a resolver asked for that the snapshot could not give
        self.refused: set[str] = set()  # what it asked for that the snapshot holds but breaks a rule (said why)
        self.metadata_read: set[str] = set()  # "<sha256>/<filename>" of each METADATA served
        self._lock = threading.Lock()
        self._files: dict[str, File] = {}  # "<sha256>/<filename>" -> the listing's file
        self._project: dict[str, str] = {}  # "<sha256>/<filename>" -> the project whose listing gave it
        # the resolver's candidate limit (per project): past it no METADATA is served, and ``over`` says so
        self.max_candidates = int(env_seconds("MAMBA_FARM_RESOLVE_CANDIDATES", MAX_CANDIDATES, "METADATA files"))
        self.over = ""

    def fork(self) -> Snapshot:
        """The same folder and upstream, with its own record of what was read (one per concurrent resolver)."""
        return Snapshot(self.root, self.upstream, self.refresh)

    # ---------------------------------------------------------------- listings
    def _page_path(self, project: str) -> Path:
        return self.root / "pages" / f"{file_name(canonicalize_name(project), 'project name')}.json"

    def page(self, project: str) -> list[File] | None:
        """The project's wheels (recorded from upstream on first use when recording); None: not in the snapshot."""
        project = canonicalize_name(project)
        path = self._page_path(project)
        stale = self.refresh or not os.path.lexists(path)
        if project not in self.pages_read and self.upstream is not None and stale:
            try:
                files = [f for f in self.upstream.files(project) if f.filename.endswith(".whl")]
            except SourceFetchError as err:
                if "HTTP 404" not in str(err):
                    raise
                files = []
            entries = [{k: asdict(f)[k] for k in _PAGE_FIELDS} for f in files]
            try:  # checked as a stored listing is, before it is stored: what the folder holds, a replay accepts
                for i, e in enumerate(entries):
                    _stored_file(e, i, f"{self.upstream.url}/{project}/")
            except Untrusted as err:
                raise SourceFetchError(f"{err}: not recorded", hint="the index lists a file the farm cannot "
                                       "lock (https URLs and sha256 only)") from None  # fmt: skip
            _write(path, json.dumps(entries, sort_keys=True).encode())
        if not os.path.lexists(path):
            self.missing.add(f"listing {project}")
            return None
        try:
            raw = read_inside(self.root, path, MAX_PAGE_BYTES)
            entries = expect(load_json(raw, str(path)), list, f"{path}: the listing")
            files = [_stored_file(e, i, path) for i, e in enumerate(entries)]
        except Untrusted as err:
            raise SourceFetchError(f"{err}: not a listing the snapshot wrote",
                                   hint=f"remove {shown(path)}; recording reads it again") from None  # fmt: skip
        with self._lock:
            self.pages_read[project] = hashlib.sha256(raw).hexdigest()
            for f in files:
                if f.sha256:
                    self._files[f"{f.sha256}/{f.filename}"] = f
                    self._project[f"{f.sha256}/{f.filename}"] = project
        return files

    def page_digest(self, project: str) -> str | None:
        """The sha256 of the project's stored listing, read from the folder (None: not stored)."""
        path = self._page_path(project)
        if not os.path.lexists(path):
            return None
        try:
            return hashlib.sha256(read_inside(self.root, path, MAX_PAGE_BYTES)).hexdigest()
        except Untrusted:
            return None

    def file(self, sha256: str, filename: str) -> File | None:
        """A wheel of a listing served in this run, by the path the listing gave it."""
        return self._files.get(f"{sha256}/{filename}")

    # ---------------------------------------------------------------- METADATA
    def metadata(self, sha256: str, filename: str) -> bytes | None:
        key = f"{sha256}/{filename}"
        f = self._files.get(key)
        if f is None:
            self.missing.add(f"metadata {filename} (not in a listing served)")
            return None
        path = self.root / "metadata" / f"{sha256_name(sha256)}.METADATA"
        with self._lock:
            project = self._project.get(key)
            if (
                key not in self.metadata_read
                and sum(self._project.get(k) == project for k in self.metadata_read) >= self.max_candidates
            ):
                self.over = (f"the resolvers weighed more than {self.max_candidates} versions of {shown(project, 100)} "
                             f"({shown(filename, 200)} was the next), the resolution's candidate limit")  # fmt: skip
                return None
            self.metadata_read.add(key)
        if os.path.lexists(path):
            try:
                raw = read_inside(self.root, path, MAX_METADATA_BYTES)
                text(raw, f"{path}")  # core metadata is UTF-8: other bytes never reach a resolver
                return raw
            except Untrusted as err:
                raise SourceFetchError(f"{err}: not a METADATA the snapshot wrote",
                                       hint=f"remove {shown(path)}; recording reads it again") from None  # fmt: skip
        if self.upstream is None:
            self.missing.add(f"metadata {filename}")
            return None
        raw = self.upstream.metadata_bytes(f)
        _write(path, raw)
        return raw


def export_refusal(snapshot_root: Path, dest: Path) -> str:
    """Why DEST cannot take an export of the snapshot at SNAPSHOT_ROOT ("" when it can): it is a file, or the
    snapshot itself, inside it or holding it (an export cuts each listing to what one run read: written into its
    own input, it would cut the snapshot it reads)."""
    if os.path.lexists(dest) and not os.path.isdir(dest):
        return f"{shown(dest)} is not a folder"
    a, b = Path(os.path.realpath(dest)), Path(os.path.realpath(snapshot_root))
    if a == b or a.is_relative_to(b) or b.is_relative_to(a):
        return f"{shown(dest)} is the snapshot the resolvers read ({shown(snapshot_root)}), or inside it or holding it"
    return ""


def export(snapshot: Snapshot, dest: Path, pages: set[str], metadata: set[str]) -> int:
    """Write into DEST the part of SNAPSHOT that PAGES (projects) and METADATA ("<sha256>/<filename>") name: each
    listing cut to the files whose METADATA was read. A resolution replayed from DEST reads what it read before
    (a resolver reads the metadata of every candidate it weighs). Returns the bytes written. DEST must be a
    folder apart from the snapshot (:func:`export_refusal`): else SourceFetchError, before anything is written."""
    if why := export_refusal(snapshot.root, dest):
        raise SourceFetchError(f"installs --export: {why}", hint="export into a new folder of its own")
    written = 0
    names = {key.split("/", 1)[1] for key in metadata}
    for project in sorted(pages):
        files = [f for f in snapshot.fork().page(project) or [] if f.filename in names]
        raw = json.dumps([{k: asdict(f)[k] for k in _PAGE_FIELDS} for f in files], sort_keys=True, indent=0).encode()
        _write(Path(dest) / "pages" / f"{file_name(project, 'project name')}.json", raw)
        written += len(raw)
    for key in sorted(metadata):
        sha = sha256_name(key.split("/", 1)[0])
        src = snapshot.root / "metadata" / f"{sha}.METADATA"
        raw = read_inside(snapshot.root, src, MAX_METADATA_BYTES)
        _write(Path(dest) / "metadata" / f"{sha}.METADATA", raw)
        written += len(raw)
    return written


def _stored_file(e: object, i: int, path: Path | str) -> File:
    where = f"{path}: [{i}]"
    e = expect(e, dict, where)
    name = file_name(expect(e.get("filename"), str, f"{where}.filename"), f"{where}.filename")
    sha = e.get("sha256")
    return File(
        filename=name,
        url=locked_url(e.get("url"), f"{where}.url"),  # a lock names it: https (or the loopback), parsed
        sha256=sha256_name(sha, f"{where}.sha256") if sha is not None else None,
        size=expect(e.get("size"), (int, type(None)), f"{where}.size"),
        requires_python=expect(e.get("requires_python"), (str, type(None)), f"{where}.requires_python"),
        upload_time=expect(e.get("upload_time"), (str, type(None)), f"{where}.upload_time"),
        yanked=bool(expect(e.get("yanked"), (bool, type(None)), f"{where}.yanked")),
        core_metadata=bool(expect(e.get("core_metadata"), (bool, type(None)), f"{where}.core_metadata")),
    )


class _Handler(http.server.BaseHTTPRequestHandler):
    snapshot: Snapshot

    def log_message(self, *args) -> None:  # the resolvers' own output says what they read
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(self.path).path.split("/") if p]
        try:
            if len(parts) == 2 and parts[0] == "simple":
                return self._listing(parts[1])
            if len(parts) == 3 and parts[0] == "files" and parts[2].endswith(".metadata"):
                raw = self.snapshot.metadata(sha256_name(parts[1]), file_name(parts[2].removesuffix(".metadata")))
                return self._send(200, raw) if raw is not None else self._send(404, b"not in the snapshot")
        except (Untrusted, SourceFetchError) as err:
            self.snapshot.refused.add(f"{shown(self.path, 200)}: {err}")
            return self._send(404, b"refused")
        if len(parts) == 3 and parts[0] == "files":
            self.snapshot.missing.add(f"wheel body {shown(parts[2], 200)} (a snapshot holds metadata only)")
        self._send(404, b"a snapshot serves listings and metadata only")

    def _listing(self, project: str) -> None:
        files = self.snapshot.page(file_name(canonicalize_name(project), "project name"))
        if files is None:
            return self._send(404, b"not in the snapshot")
        body = {
            "meta": {"api-version": "1.1"},
            "name": canonicalize_name(project),
            "files": [
                {
                    "filename": f.filename,
                    "url": f"/files/{f.sha256}/{urllib.parse.quote(f.filename)}",
                    "hashes": {"sha256": f.sha256},
                    "requires-python": f.requires_python,
                    "yanked": f.yanked,
                    "size": f.size,
                    "core-metadata": True,
                    "dist-info-metadata": True,
                }
                for f in files
                if f.sha256  # a file without a hash can be neither checked nor locked
            ],
        }
        self._send(200, json.dumps(body).encode(), "application/vnd.pypi.simple.v1+json")


class SnapshotServer:
    """``with SnapshotServer(snapshot) as url:`` serves SNAPSHOT at ``url`` (``http://127.0.0.1:PORT/simple``)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        handler = type("Handler", (_Handler,), {"snapshot": snapshot})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/simple"

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
