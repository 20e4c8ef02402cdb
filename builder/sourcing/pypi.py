"""What a package index publishes, read the light way: a project's PEP 691 listing and a wheel's METADATA (its
PEP 658 file, else HTTP range reads of the remote zip; a server ignoring ``Range`` is refused), cached by
sha256 under ``<farm cache>/metadata/``. Everything the index says is outside data: checked fields, capped
reads, a deadline per request, :data:`MAX_REQUESTS` per run and the run's byte budget.
"""

from __future__ import annotations

import email.parser
import http.client
import io
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder.errors import SourceFetchError
from builder.facts import hostenv
from builder.facts.compat import vtuple
from builder.facts.untrusted import (
    BudgetSpent,
    Deadline,
    Untrusted,
    expect,
    is_web_url,
    load_json,
    open_zip,
    read_capped,
    read_inside,
    sha256_name,
    shown,
    text,
    zip_read,
)
from builder.sourcing.sources import DEFAULT_INDEX, MAX_PAGE_BYTES, Fetcher, request_deadline

MAX_METADATA_BYTES = 16 << 20  # a wheel's METADATA (torch's is about 40 kB): an endless or bomb-sized one stops here
MAX_REQUESTS = (
    2000  # one drift run: ~40 today (listings, metadata files, a few ranges); a listing cannot make it endless
)
MAX_RANGE_BYTES = 64 << 20  # one ranged read of a remote wheel (its central directory is capped as much)
_GLIBC_OF = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
_MANYLINUX_RE = re.compile(r"(manylinux_(\d+)_(\d+)|manylinux1|manylinux2010|manylinux2014)_(x86_64|aarch64)")


@dataclass(frozen=True)
class File:
    """One file of a project's listing."""

    filename: str
    url: str
    sha256: str | None
    size: int | None
    requires_python: str | None
    upload_time: str | None  # ISO 8601 as the index gives it
    yanked: bool
    core_metadata: bool  # PEP 658/714: a .metadata file sits beside it

    @property
    def version(self) -> Version | None:
        try:
            if self.filename.endswith(".whl"):
                return parse_wheel_filename(self.filename)[1]
            if self.filename.endswith(".tar.gz"):
                return parse_sdist_filename(self.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            return None
        return None

    def linux_platforms(self, *, pep600_only: bool = False) -> dict[str, str]:
        """{"linux_x86_64": "2.28"}: the Linux platforms of a wheel and the glibc floor its tag promises.

        ``pep600_only``: only ``manylinux_X_Y`` tags. torch's wheels up to 2.6 carry the legacy
        ``manylinux1`` alias (glibc 2.5) on x86_64 while built on manylinux2014 (glibc 2.17).
        """
        out: dict[str, str] = {}
        for m in _MANYLINUX_RE.finditer(self.filename.rsplit("-", 1)[-1]):
            if pep600_only and not m.group(2):
                continue
            glibc = f"{m.group(2)}.{m.group(3)}" if m.group(2) else _GLIBC_OF[m.group(1)]
            plat = f"linux_{m.group(4)}"
            if plat not in out or vtuple(glibc) < vtuple(out[plat]):
                out[plat] = glibc
        return out

    def cpython(self) -> str | None:
        """ "3.11" for a cp311-cp311 (or abi3) wheel; None for free-threaded (cp314t) and other interpreters."""
        try:
            tags = parse_wheel_filename(self.filename)[3]
        except (InvalidWheelFilename, InvalidVersion):
            return None
        for t in tags:
            if t.interpreter.startswith("cp") and not t.abi.endswith("t") and t.interpreter[2:].isdigit():
                digits = t.interpreter[2:]
                return f"{digits[0]}.{digits[1:]}"
        return None


class _RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, seekable enough for :mod:`zipfile`."""

    def __init__(self, client: SimpleIndex, url: str, size: int) -> None:
        self.client, self.url, self.size, self.pos = client, url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buf) -> int:
        n = min(len(buf), self.size - self.pos)
        if n <= 0:
            return 0
        data = self.client.read_range(self.url, self.pos, n)
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


class SimpleIndex:
    """One index's simple API (``https://pypi.org/simple`` by default), through the host's pip settings."""

    def __init__(self, url: str | None = None, fetcher: Fetcher | None = None, cache: Path | None = None) -> None:
        self.fetcher = fetcher or Fetcher.from_host()
        self.url = (url or (self.fetcher.indexes[0] if self.fetcher.indexes else DEFAULT_INDEX)).rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise SourceFetchError(f"{self.url}: the drift check reads an HTTP(S) index (PEP 691), not a local folder",
                                   hint="pass --index https://pypi.org/simple")  # fmt: skip
        self.cache = Path(cache) if cache is not None else hostenv.CACHE_ROOT / "metadata"
        self.max_requests = MAX_REQUESTS
        self.requests = 0  # HTTP requests made (listings, metadata, ranges): what the report says it cost
        self.bytes = 0

    def _request(self, url: str, headers: dict | None, limit: int, ranged: bool = False) -> tuple[int, str, bytes]:
        """(status, content type, body) of one GET, the body capped at ``limit`` bytes and the whole request
        (connect, headers, body) under one deadline: a server that trickles a byte at a time is cut off."""
        # A listing names its files' URLs: only http(s) ones are read (a file:// link would read this host's files).
        if not is_web_url(url):
            raise SourceFetchError(f"{shown(repr(url), 300)}: not an http(s) URL; the drift check reads only the "
                                   "index's web files")  # fmt: skip
        if self.requests >= self.max_requests:
            raise SourceFetchError(f"{self.url}: more than {self.max_requests} requests in one run; "
                                   "no listing of PyPI's needs that many")  # fmt: skip
        req = urllib.request.Request(url, headers={"User-Agent": "mamba-farm", **(headers or {})})
        self.requests += 1
        seconds = request_deadline()
        try:
            with Deadline(seconds, f"{shown(url, 300)}") as deadline:
                resp = self.fetcher._opener().open(req, timeout=min(self.fetcher.timeout, seconds))
                with resp:
                    if not is_web_url(resp.geturl()):  # a redirect to another scheme
                        raise SourceFetchError(f"{shown(url, 300)}: redirected to {shown(repr(resp.geturl()), 300)}, "
                                               "not an http(s) URL")  # fmt: skip
                    if ranged and resp.status != 206:  # refused before a byte of the body is read
                        raise SourceFetchError(f"{shown(url, 300)}: the server ignores range requests (HTTP "
                                               f"{resp.status}); the drift check does not download whole wheels")  # fmt: skip
                    body = read_capped(resp, limit, deadline, network=True)
                    return resp.status, resp.headers.get("Content-Type", ""), body
        except urllib.error.HTTPError as err:
            raise SourceFetchError(f"{shown(url, 300)}: HTTP {err.code} {shown(err.reason, 200)}") from None
        except BudgetSpent:
            raise
        except Untrusted as err:
            raise SourceFetchError(f"{shown(url, 300)}: {err}: not a listing or METADATA this check reads") from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as err:
            raise SourceFetchError(f"{shown(url, 300)}: {shown(getattr(err, 'reason', err), 300)}",
                                   hint="check the host's pip settings (index-url, cert, proxy: `pip config list`)") from None  # fmt: skip

    def files(self, project: str) -> list[File]:
        """Every file the index lists for ``project`` (PEP 691 JSON), each field type-checked."""
        url = f"{self.url}/{project}/"
        _status, ctype, body = self._request(url, {"Accept": "application/vnd.pypi.simple.v1+json"}, MAX_PAGE_BYTES)
        self.bytes += len(body)
        if "json" not in ctype:
            raise SourceFetchError(f"{url}: answered {shown(ctype, 100) or 'no content type'}, not PEP 691 JSON")
        try:
            data = expect(load_json(body, url), dict, f"{url}: the listing")
            return [_file(f, i, url) for i, f in enumerate(expect(data.get("files", []), list, f"{url}: files"))]
        except Untrusted as err:
            raise SourceFetchError(f"{err}; not a PEP 691 listing this check reads") from None

    def read_range(self, url: str, start: int, length: int) -> bytes:
        if length > MAX_RANGE_BYTES:
            raise SourceFetchError(f"{shown(url, 300)}: a read of {length} bytes asked of a remote wheel; "
                                   f"the check reads at most {MAX_RANGE_BYTES >> 20} MiB at once")  # fmt: skip
        _status, _ctype, data = self._request(url, {"Range": f"bytes={start}-{start + length - 1}"}, length, True)
        self.bytes += len(data)
        return data[:length]

    def metadata(self, f: File) -> email.message.Message:
        """The wheel's METADATA, parsed (:meth:`metadata_bytes`)."""
        raw = self.metadata_bytes(f)
        try:
            return _parse(raw, f"{f.filename}: METADATA")
        except Untrusted as err:
            raise SourceFetchError(f"{err}; the check reads no data from it") from None

    def metadata_bytes(self, f: File) -> bytes:
        """The wheel's METADATA as the index gives it: PEP 658 file, else ranged reads of the wheel's zip; checked
        as UTF-8 core metadata and cached by sha256.

        The listing's sha256 names the cache file only as 64 hex digits (an absolute path, ``..`` or any
        other name is refused before anything is read or written)."""
        cached = None
        if f.sha256 is not None:
            try:
                cached = self.cache / f"{sha256_name(f.sha256, f'{f.filename}: the listed sha256')}.METADATA"
            except Untrusted as err:
                raise SourceFetchError(f"{err}; nothing of it is read or cached") from None
        if cached is not None and os.path.lexists(cached):
            try:
                # the cache's own file: a link out of the cache is refused, never read (nor its content shown)
                raw = read_inside(self.cache, cached, MAX_METADATA_BYTES)
                _parse(raw, str(cached))
                return raw
            except Untrusted as err:
                raise SourceFetchError(f"{err}: not a METADATA the check reads from its cache",
                                       hint=f"remove {shown(cached)}; the next run reads it again") from None  # fmt: skip
        if f.core_metadata:
            _status, _ctype, raw = self._request(f.url + ".metadata", None, MAX_METADATA_BYTES)
            self.bytes += len(raw)
        else:
            if not f.size:
                raise SourceFetchError(f"{shown(f.filename)}: the listing gives no size, so its metadata cannot be "
                                       "read without downloading the whole wheel")  # fmt: skip
            try:
                with open_zip(
                    io.BufferedReader(_RangeFile(self, f.url, f.size), buffer_size=1 << 16), f.filename
                ) as zf:
                    names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
                    if len(names) != 1:
                        raise SourceFetchError(
                            f"{shown(f.filename)}: {len(names)} .dist-info/METADATA files in the wheel"
                        )
                    if zf.getinfo(names[0]).file_size > MAX_METADATA_BYTES:
                        raise SourceFetchError(f"{shown(f.filename)}: its METADATA unpacks to more than "
                                               f"{MAX_METADATA_BYTES >> 20} MiB")  # fmt: skip
                    raw = zip_read(
                        zf, names[0], MAX_METADATA_BYTES, f.filename
                    )  # capped as inflated, whatever the header says
            except BudgetSpent:
                raise
            except Untrusted as err:
                raise SourceFetchError(f"{err}: not a wheel the check reads") from None
        try:
            _parse(raw, f"{f.filename}: METADATA")  # checked before it is cached
        except Untrusted as err:
            raise SourceFetchError(f"{err}; the check reads no data from it") from None
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cached.parent, prefix=".partial-")
            with os.fdopen(fd, "wb") as out:
                out.write(raw)
            os.replace(tmp, cached)
        return raw


def _parse(raw: bytes, what: str) -> email.message.Message:
    """METADATA as UTF-8 text (core metadata's encoding), or Untrusted: other bytes would reach the checks as
    email Header objects and surrogates."""
    return email.parser.Parser().parsestr(text(raw, what))


def _file(f: object, i: int, url: str) -> File:
    """One listing entry, its fields checked for type (a wrong one refuses the listing, with its place)."""
    where = f"{url}: files[{i}]"
    f = expect(f, dict, where)
    hashes = expect(f.get("hashes") or {}, dict, f"{where}.hashes")
    meta = f.get("core-metadata", f.get("dist-info-metadata", False))
    yanked = f.get("yanked")
    try:
        link = urllib.parse.urljoin(url, expect(f.get("url"), str, f"{where}.url"))
    except ValueError as err:  # urljoin's own refusals (a bracketed host that is no IPv6 address)
        raise Untrusted(f"{where}.url: {err}") from None
    return File(
        filename=expect(f.get("filename"), str, f"{where}.filename"),
        url=link,
        sha256=expect(hashes.get("sha256"), (str, type(None)), f"{where}.hashes.sha256"),
        size=expect(f.get("size"), (int, type(None)), f"{where}.size"),
        requires_python=expect(f.get("requires-python"), (str, type(None)), f"{where}.requires-python"),
        upload_time=expect(f.get("upload-time"), (str, type(None)), f"{where}.upload-time"),
        yanked=bool(expect(yanked, (bool, str, type(None)), f"{where}.yanked")),
        core_metadata=bool(expect(meta, (bool, dict), f"{where}.core-metadata")),
    )
