"""What a package index publishes, read the light way: file listings and wheel metadata.

- the listing is the project's PEP 691 JSON page (``Accept: application/vnd.pypi.simple.v1+json``),
  reached through the host's pip settings (:class:`builder.sources.Fetcher`: CA bundle, proxy,
  timeout);
- a wheel's METADATA is its PEP 658 ``.metadata`` file when the index offers one
  (``core-metadata`` in the listing), else read out of the remote wheel with HTTP range requests
  (the zip's central directory, then the one member: a few hundred kB of a 500 MB torch wheel);
  a server that ignores ``Range`` is refused rather than downloaded in full;
- metadata read once is kept under ``<farm cache>/metadata/<sha256>.METADATA`` (a wheel's bytes,
  hence its metadata, never change under one hash).
"""

from __future__ import annotations

import email.parser
import io
import json
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder import hostenv
from builder.errors import SourceFetchError
from builder.sources import DEFAULT_INDEX, MAX_PAGE_BYTES, Fetcher, TooLarge, is_web_url, read_capped

MAX_METADATA_BYTES = 16 << 20  # a wheel's METADATA (torch's is about 40 kB): an endless or bomb-sized one stops here
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
            if plat not in out or _v(glibc) < _v(out[plat]):
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


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


class _RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, seekable enough for :mod:`zipfile`."""

    def __init__(self, client: Index, url: str, size: int) -> None:
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


class Index:
    """One index's simple API (``https://pypi.org/simple`` by default), through the host's pip settings."""

    def __init__(self, url: str | None = None, fetcher: Fetcher | None = None, cache: Path | None = None) -> None:
        self.fetcher = fetcher or Fetcher.from_host()
        self.url = (url or (self.fetcher.indexes[0] if self.fetcher.indexes else DEFAULT_INDEX)).rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise SourceFetchError(f"{self.url}: the drift check reads an HTTP(S) index (PEP 691), not a local folder",
                                   hint="pass --index https://pypi.org/simple")  # fmt: skip
        self.cache = Path(cache) if cache is not None else hostenv.CACHE_ROOT / "metadata"
        self.requests = 0  # HTTP requests made (listings, metadata, ranges): what the report says it cost
        self.bytes = 0

    def _get(self, url: str, headers: dict | None = None):
        # A listing names its files' URLs: only http(s) ones are read (a file:// link would read this host's files).
        if not is_web_url(url):
            raise SourceFetchError(f"{url}: not an http(s) URL; the drift check reads only the index's web files")
        req = urllib.request.Request(url, headers={"User-Agent": "mamba-farm", **(headers or {})})
        self.requests += 1
        try:
            resp = self.fetcher._opener().open(req, timeout=self.fetcher.timeout)
            if not is_web_url(resp.geturl()):  # a redirect to another scheme
                resp.close()
                raise SourceFetchError(f"{url}: redirected to {resp.geturl()}, not an http(s) URL")
            return resp
        except urllib.error.HTTPError as err:
            raise SourceFetchError(f"{url}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError) as err:
            raise SourceFetchError(f"{url}: {getattr(err, 'reason', err)}",
                                   hint="check the host's pip settings (index-url, cert, proxy: `pip config list`)") from None  # fmt: skip

    def files(self, project: str) -> list[File]:
        """Every file the index lists for ``project`` (PEP 691 JSON)."""
        url = f"{self.url}/{project}/"
        with self._get(url, {"Accept": "application/vnd.pypi.simple.v1+json"}) as resp:
            body, ctype = self._read(resp, url, MAX_PAGE_BYTES), resp.headers.get("Content-Type", "")
        self.bytes += len(body)
        if "json" not in ctype:
            raise SourceFetchError(f"{url}: answered {ctype or 'no content type'}, not PEP 691 JSON")
        try:
            data = json.loads(body)
        except ValueError as err:
            raise SourceFetchError(f"{url}: not JSON: {err}") from None
        out = []
        for f in data.get("files", []):
            if not isinstance(f, dict) or "filename" not in f or "url" not in f:
                continue
            meta = f.get("core-metadata", f.get("dist-info-metadata", False))
            out.append(File(
                filename=f["filename"],
                url=urllib.parse.urljoin(url, f["url"]),
                sha256=(f.get("hashes") or {}).get("sha256"),
                size=f.get("size"),
                requires_python=f.get("requires-python"),
                upload_time=f.get("upload-time"),
                yanked=bool(f.get("yanked")),
                core_metadata=bool(meta),
            ))  # fmt: skip
        return out

    @staticmethod
    def _read(resp, url: str, limit: int) -> bytes:
        try:
            return read_capped(resp, limit)
        except TooLarge as err:
            raise SourceFetchError(f"{url}: {err}: not a listing or METADATA this check reads") from None

    def read_range(self, url: str, start: int, length: int) -> bytes:
        with self._get(url, {"Range": f"bytes={start}-{start + length - 1}"}) as resp:
            if resp.status != 206:
                raise SourceFetchError(f"{url}: the server ignores range requests (HTTP {resp.status}); "
                                       "the drift check does not download whole wheels")  # fmt: skip
            data = resp.read(length + 1)
        self.bytes += len(data)
        return data[:length]

    def metadata(self, f: File) -> email.message.Message:
        """The wheel's METADATA: PEP 658 file, else ranged reads of the wheel's zip; cached by sha256."""
        cached = self.cache / f"{f.sha256}.METADATA" if f.sha256 else None
        if cached is not None and cached.is_file():
            return email.parser.BytesParser().parsebytes(cached.read_bytes())
        if f.core_metadata:
            with self._get(f.url + ".metadata") as resp:
                raw = self._read(resp, f.url + ".metadata", MAX_METADATA_BYTES)
            self.bytes += len(raw)
        else:
            if not f.size:
                raise SourceFetchError(f"{f.filename}: the listing gives no size, so its metadata cannot be read "
                                       "without downloading the whole wheel")  # fmt: skip
            try:
                with zipfile.ZipFile(io.BufferedReader(_RangeFile(self, f.url, f.size), buffer_size=1 << 16)) as zf:
                    names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
                    if len(names) != 1:
                        raise SourceFetchError(f"{f.filename}: {len(names)} .dist-info/METADATA files in the wheel")
                    if zf.getinfo(names[0]).file_size > MAX_METADATA_BYTES:
                        raise SourceFetchError(f"{f.filename}: its METADATA unpacks to more than "
                                               f"{MAX_METADATA_BYTES >> 20} MiB")  # fmt: skip
                    raw = zf.read(names[0])
            except (zipfile.BadZipFile, EOFError) as err:
                raise SourceFetchError(f"{f.filename}: not a readable wheel: {err}") from None
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cached.parent, prefix=".partial-")
            with os.fdopen(fd, "wb") as out:
                out.write(raw)
            os.replace(tmp, cached)
        return email.parser.BytesParser().parsebytes(raw)
