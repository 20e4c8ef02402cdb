"""Where a build's source comes from: this checkout, or a published sdist pinned by name, version and sha256.

A pinned sdist is fetched once through the host's pip settings (its indexes, find-links
folders, CA bundle and proxy: the way a ``pip install`` typed on the host reaches the
network), then kept under ``<farm cache>/sdists/<sha256>/<filename>``:

- the download goes to a temporary file beside its final place, is hashed while it is
  written, and is renamed into place only when its sha256 is the pin's;
- every use checks the hash again, on a private copy that is then unpacked, so the bytes
  unpacked are the bytes checked;
- a cached file whose bytes no longer match is moved out to ``sdists/quarantine/`` (kept for
  inspection, never found again as if good) and the use is refused with
  :class:`~builder.errors.SourceIntegrityError` (its own exit code): nothing is built from it;
  the next run fetches it afresh.

Why not ``pip download --no-deps --no-binary :all:``: pip prepares metadata for every sdist
it downloads, which runs setup.py in an isolated build env; mamba-ssm's and causal-conv1d's
setup.py import torch there and fail (measured here). So the file itself is taken from the
index's simple API (PEP 691 JSON, PEP 503 HTML for file:// mirrors), with pip's settings.

Unpacking uses tarfile's ``filter="data"`` (no absolute paths, no ``..``, no links out of the
tree, no devices) into a fresh folder; the cache only ever holds the archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import json
import os
import re
import shutil
import ssl
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from builder import hostenv
from builder.errors import SourceFetchError, SourceIntegrityError

DEFAULT_INDEX = "https://pypi.org/simple"
SHA256_RE = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


# ---------------------------------------------------------------------------
# What a build is made from.


@dataclass(frozen=True)
class CheckoutSource:
    """This repository's own tree (today's default source)."""

    root: Path

    @property
    def identity(self) -> str:
        """What the index compares to refuse two different sources under one distribution name."""
        return "checkout"

    def describe(self) -> str:
        return f"this checkout ({self.root})"


@dataclass(frozen=True)
class SdistPin:
    """A published sdist: ``name==version`` whose archive must have ``sha256``."""

    name: str  # distribution name as the index knows it ("mamba-ssm" or "mamba_ssm")
    version: str
    sha256: str

    @property
    def project(self) -> str:
        return canonicalize_name(self.name)

    @property
    def filename(self) -> str:
        """The PEP 625 name of the archive (what the cache stores it as)."""
        return f"{self.project.replace('-', '_')}-{self.version}.tar.gz"

    @property
    def identity(self) -> str:
        return f"sdist:{self.project}=={self.version}@sha256:{self.sha256}"

    def describe(self) -> str:
        return f"{self.project} {self.version} (sdist sha256 {self.sha256[:12]}…)"

    def matches_filename(self, filename: str) -> bool:
        try:
            name, version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion):
            return False
        return filename.endswith(".tar.gz") and name == self.project and version == Version(self.version)


Source = CheckoutSource | SdistPin


# ---------------------------------------------------------------------------
# Finding the file on the host's indexes.


@dataclass(frozen=True)
class Candidate:
    url: str  # https://..., file://...
    filename: str
    sha256: str | None  # what the index says (None: it does not say)
    size: int | None = None


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links.append((self._href, self._text.strip()))
            self._href = None


def _from_html(text: str, base: str) -> list[Candidate]:
    parser = _Anchors()
    parser.feed(text)
    out = []
    for href, label in parser.links:
        url = urllib.parse.urljoin(base, href)
        path, _, frag = url.partition("#")
        filename = label or urllib.parse.unquote(path.rsplit("/", 1)[-1])
        m = re.fullmatch(r"sha256=([0-9a-fA-F]{64})", frag)
        out.append(Candidate(path, filename, m.group(1).lower() if m else None))
    return out


def _from_json(data: dict, base: str) -> list[Candidate]:
    return [
        Candidate(
            urllib.parse.urljoin(base, f["url"]), f["filename"], (f.get("hashes") or {}).get("sha256"), f.get("size")
        )
        for f in data.get("files", [])
        if isinstance(f, dict) and "url" in f and "filename" in f
    ]


@dataclass(frozen=True)
class Fetcher:
    """The host's way to the network: index URLs, find-links, CA bundle, proxy, timeout."""

    indexes: tuple[str, ...]
    find_links: tuple[str, ...] = ()
    ca_bundle: Path | None = None
    proxy: str | None = None
    timeout: float = 60.0

    @classmethod
    def from_host(cls, settings: hostenv.PipSettings | None = None, ca_bundle: Path | None = None) -> Fetcher:
        settings = settings or hostenv.host_pip_settings(hostenv.default_wheelhouses())
        proxy = os.environ.get("PIP_PROXY") or hostenv.pip_config().get("proxy") or None
        try:
            timeout = float(settings.timeout) if settings.timeout else 60.0
        except ValueError:
            timeout = 60.0
        return cls(
            indexes=(settings.index_url or DEFAULT_INDEX, *settings.extra_index_urls),
            find_links=settings.find_links,
            ca_bundle=hostenv.find_ca_bundle(ca_bundle),
            proxy=proxy,
            timeout=timeout,
        )

    def _opener(self) -> urllib.request.OpenerDirector:
        ctx = ssl.create_default_context(cafile=str(self.ca_bundle) if self.ca_bundle else None)
        handlers: list = [urllib.request.HTTPSHandler(context=ctx)]
        if self.proxy:  # pip's own `proxy` setting wins over the environment's, as in pip
            handlers.append(urllib.request.ProxyHandler({"http": self.proxy, "https": self.proxy}))
        return urllib.request.build_opener(*handlers)

    def open(self, url: str):
        req = urllib.request.Request(
            url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1", "User-Agent": "mamba-farm"}
        )
        return self._opener().open(req, timeout=self.timeout)

    def candidates(self, pin: SdistPin) -> tuple[list[tuple[str, Candidate]], list[str]]:
        """([(where, candidate)] for every file named like the pin's sdist, find-links first; [unreachable indexes])."""
        found: list[tuple[str, Candidate]] = []
        errors: list[str] = []
        for link in self.find_links:
            if "://" in link and not link.startswith("file://"):
                continue  # remote find-links pages: not used for sdists
            folder = Path(urllib.parse.urlparse(link).path if link.startswith("file://") else link)
            if folder.is_dir():
                found += [
                    (str(folder), Candidate(f.resolve().as_uri(), f.name, None))
                    for f in sorted(folder.iterdir())
                    if f.is_file() and pin.matches_filename(f.name)
                ]
        for index in self.indexes:
            base = index.rstrip("/") + f"/{pin.project}/"
            try:
                if base.startswith("file://"):
                    page = Path(urllib.parse.unquote(urllib.parse.urlparse(base).path)) / "index.html"
                    if not page.is_file():
                        continue
                    listed = _from_html(page.read_text(encoding="utf-8", errors="replace"), page.as_uri())
                else:
                    with self.open(base) as resp:
                        body = resp.read()
                        ctype = resp.headers.get("Content-Type", "")
                    if "json" in ctype:
                        listed = _from_json(json.loads(body), base)
                    else:
                        listed = _from_html(body.decode("utf-8", errors="replace"), base)
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    errors.append(f"{base}: HTTP {err.code} {err.reason}")
                continue
            except (urllib.error.URLError, OSError, ValueError) as err:  # one dead mirror does not hide the others
                errors.append(f"{base}: {getattr(err, 'reason', err)}")
                continue
            found += [(index, c) for c in listed if pin.matches_filename(c.filename)]
        return found, errors


# ---------------------------------------------------------------------------
# The cache.


def _sha256_copy(src, dst) -> str:
    h = hashlib.sha256()
    while chunk := src.read(_CHUNK):
        h.update(chunk)
        dst.write(chunk)
    return h.hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class SourceCache:
    """Pinned sdists under ``root`` (default ``<farm cache>/sdists``), one folder per sha256."""

    def __init__(self, root: Path | None = None, fetcher: Fetcher | None = None) -> None:
        self.root = Path(root) if root is not None else hostenv.CACHE_ROOT / "sdists"
        self._fetcher = fetcher

    @property
    def fetcher(self) -> Fetcher:
        if self._fetcher is None:
            self._fetcher = Fetcher.from_host()
        return self._fetcher

    def path(self, pin: SdistPin) -> Path:
        if not SHA256_RE.fullmatch(pin.sha256):
            raise SourceIntegrityError(f"{pin.describe()}: {pin.sha256!r} is not a lowercase sha256 hex digest")
        return self.root / pin.sha256 / pin.filename

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    # -- fetching --------------------------------------------------------------

    def fetch(self, pin: SdistPin) -> Path:
        """The cached archive of ``pin``, downloaded first if absent. Its hash is checked either way."""
        final = self.path(pin)
        if final.is_file():
            self.check(pin)
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(final.parent / ".lock")):
            if final.is_file():  # another process fetched it meanwhile
                self.check(pin)
                return final
            self._download(pin, final)
        return final

    def _download(self, pin: SdistPin, final: Path) -> None:
        mismatches: list[str] = []
        listed, unreachable = self.fetcher.candidates(pin)
        # a candidate whose listed hash is the pin's first; ones listing another hash are not downloaded
        for _where, cand in sorted(listed, key=lambda wc: wc[1].sha256 != pin.sha256):
            if cand.sha256 is not None and cand.sha256 != pin.sha256:
                mismatches.append(f"{cand.url} (the index lists sha256 {cand.sha256})")
                continue
            fd, tmp_name = tempfile.mkstemp(prefix=".partial-", dir=final.parent)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out:
                    try:
                        with self._open(cand.url) as src:
                            digest = _sha256_copy(src, out)
                    except (urllib.error.URLError, OSError) as err:
                        unreachable.append(f"{cand.url}: download failed: {getattr(err, 'reason', err)}")
                        continue
                    out.flush()
                    os.fsync(out.fileno())
                if digest != pin.sha256:
                    mismatches.append(f"{cand.url} (its bytes have sha256 {digest})")
                    continue
                os.replace(tmp, final)  # atomic: the cache never holds a partial or unchecked file
                return
            finally:
                tmp.unlink(missing_ok=True)
        if mismatches:
            raise SourceIntegrityError(
                f"{pin.describe()}: no file on the host's indexes has the pinned sha256 {pin.sha256}: "
                + "; ".join(mismatches),
                hint="nothing was cached or built; if upstream re-published the file, review it and update the pin",
            )
        where = ", ".join([*self.fetcher.find_links, *self.fetcher.indexes]) or "no index configured"
        failed = f"; unreachable: {'; '.join(unreachable)}" if unreachable else ""
        raise SourceFetchError(
            f"{pin.describe()}: {pin.filename} was fetched from none of the host's indexes ({where}){failed}",
            hint="check the name and version, and the host's pip settings (index-url, cert, proxy: `pip config list`)",
        )

    def _open(self, url: str):
        if url.startswith("file://"):
            return open(urllib.parse.unquote(urllib.parse.urlparse(url).path), "rb")
        return self.fetcher.open(url)

    # -- using -----------------------------------------------------------------

    def _refuse(self, pin: SdistPin, path: Path, digest: str) -> SourceIntegrityError:
        self.quarantine.mkdir(parents=True, exist_ok=True)
        moved = self.quarantine / f"{time.strftime('%Y%m%dT%H%M%S')}-{digest[:12]}-{path.name}"
        with contextlib.suppress(OSError):
            os.replace(path, moved)
        return SourceIntegrityError(
            f"{path}: sha256 {digest} does not match the pin {pin.sha256} of {pin.project} {pin.version}; "
            "nothing is built from it",
            hint=f"the file was moved to {moved}; the next run fetches it again from the index",
        )

    def check(self, pin: SdistPin) -> Path:
        """Hash the cached archive; refuse (and quarantine) it when it is not the pin's."""
        path = self.path(pin)
        digest = _sha256_file(path)
        if digest != pin.sha256:
            raise self._refuse(pin, path, digest)
        return path

    def unpack(self, pin: SdistPin, dest: Path) -> Path:
        """Fetch if needed, check the hash, unpack a private copy into the new folder ``dest``; return the tree.

        ``dest`` must not exist (every build gets a fresh tree). The returned folder is the sdist's
        single top-level directory (``name-version``).
        """
        self.fetch(pin)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=False)
        path = self.path(pin)
        copy = dest / f".{pin.filename}"
        with open(path, "rb") as src, open(copy, "wb") as out:
            digest = _sha256_copy(src, out)
        try:
            if digest != pin.sha256:  # hashed as copied: what is unpacked below is what was checked
                shutil.rmtree(dest, ignore_errors=True)
                raise self._refuse(pin, path, digest)
            return _safe_extract(copy, dest, pin)
        finally:
            copy.unlink(missing_ok=True)


def _safe_extract(archive: Path, dest: Path, pin: SdistPin) -> Path:
    try:
        return _extract(archive, dest, pin)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)  # a refused archive leaves no partial tree behind
        raise


def _extract(archive: Path, dest: Path, pin: SdistPin) -> Path:
    if not hasattr(tarfile, "data_filter"):
        raise SourceIntegrityError("this Python's tarfile has no extraction filters: use Python >= 3.11.4 for the farm")
    try:
        with tarfile.open(archive, "r:gz") as tf:
            members = tf.getmembers()
            tops = {Path(m.name).parts[0] for m in members if Path(m.name).parts}
            if len(tops) != 1:
                raise SourceIntegrityError(
                    f"{pin.filename}: an sdist has one top-level folder; this one has {sorted(tops)[:5]}"
                )
            tf.extractall(dest, filter="data")
    except tarfile.FilterError as err:
        raise SourceIntegrityError(f"{pin.filename}: refused to unpack: {err}") from None
    except (tarfile.TarError, EOFError, OSError) as err:
        raise SourceIntegrityError(f"{pin.filename}: not a readable .tar.gz: {err}") from None
    tree = dest / tops.pop()
    if not tree.is_dir():
        raise SourceIntegrityError(f"{pin.filename}: its top-level entry is not a folder")
    return tree
