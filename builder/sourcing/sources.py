"""Where a build's source comes from: this checkout, or a recipe's pin (a published sdist, an archive URL
or a git repository at a full commit), fetched once, cached under ``<farm cache>/sdists/``, re-hashed on
every use (a mismatch is quarantined and refused) and unpacked into a fresh folder after the whole member
list is checked. Sdists are taken from the index's simple API, not ``pip download``, which would run
their setup.py (and import torch).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import re
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import SourceFetchError, SourceIntegrityError, UnsafeArchiveError, UsageError
from builder.facts import hostenv
from builder.facts.spec import ArchivePin, FilePin, GitPin, SdistPin
from builder.facts.untrusted import (
    COMMIT_RE,
    SHA256_RE,
    Deadline,
    TimedOut,
    TooLarge,
    Untrusted,
    WebRedirects,
    env_seconds,
    field,
    git_url,
    is_web_url,
    load_json,
    open_regular,
    read_capped,
    run_capped,
    shown,
    spend,
)
from mamba_ssm.prebuilt import parse_links

DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20
REQUEST_DEADLINE_S = 30.0  # a listing, a METADATA or a manifest: seconds on a good link; a trickling server ends here
DOWNLOAD_DEADLINE_FACTOR = 10  # an sdist download may take ten requests' time


def request_deadline() -> float:
    """The overall limit of one request (``MAMBA_FARM_REQUEST_DEADLINE`` seconds, default 30): connect,
    headers and body together. A socket timeout alone never trips on a server sending a byte every 2 s."""
    try:
        return env_seconds("MAMBA_FARM_REQUEST_DEADLINE", REQUEST_DEADLINE_S)
    except Untrusted as err:
        raise UsageError(str(err)) from None


# ---------------------------------------------------------------------------
# Finding the file on the host's indexes.


@dataclass(frozen=True)
class Candidate:
    url: str  # https://..., file://...
    filename: str
    sha256: str | None  # what the index says (None: it does not say)
    size: int | None = None


def _from_html(text: str, base: str) -> list[Candidate]:
    """A PEP 503 page's files: the anchor's text names the file where it has one, else the URL does."""
    return [Candidate(link.url, link.text or link.filename, link.sha256) for link in parse_links(text, base)]


def _from_json(data: dict, base: str) -> list[Candidate]:
    """A PEP 691 answer's files that name a URL and a file name; a field of another shape (``files`` not a
    list, ``hashes`` not an object, a size that is no integer) is Untrusted naming it."""
    out = []
    for i, f in enumerate(field(data, "files", list, base, [])):
        if not (isinstance(f, dict) and isinstance(f.get("url"), str) and isinstance(f.get("filename"), str)):
            continue  # not a file entry this check can use (another index's extension): skipped
        where = f"{base}: files[{i}]"
        hashes = field(f, "hashes", (dict, type(None)), where, None) or {}
        sha = field(hashes, "sha256", (str, type(None)), f"{where}.hashes", None)
        size = field(f, "size", (int, type(None)), where, None)
        out.append(Candidate(urllib.parse.urljoin(base, f["url"]), f["filename"], sha, size))
    return out


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
        handlers: list = [urllib.request.HTTPSHandler(context=ctx), WebRedirects()]  # never to ftp:// or file://
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
        if isinstance(pin, (FilePin, ArchivePin)):  # one known URL, no index to ask
            return [(pin.url, Candidate(pin.url, pin.filename, None))], []
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
                    if not page.exists():
                        continue
                    with open_regular(page) as f:  # a FIFO or a device is refused, never waited on
                        body = read_capped(f, MAX_PAGE_BYTES)
                    listed = _from_html(body.decode("utf-8", errors="replace"), page.as_uri())
                else:
                    with Deadline(request_deadline(), base) as deadline, self.open(base) as resp:
                        body = read_capped(resp, MAX_PAGE_BYTES, deadline, network=True)
                        ctype = resp.headers.get("Content-Type", "")
                    if "json" in ctype:
                        doc = load_json(body, base)
                        if not isinstance(doc, dict):
                            raise Untrusted(f"{base}: a PEP 691 answer that is not an object")
                        listed = _from_json(doc, base)
                    else:
                        listed = _from_html(body.decode("utf-8", errors="replace"), base)
                    # a remote page links remote files only: never file://, never another scheme
                    off = [c for c in listed if not is_web_url(c.url) and pin.matches_filename(c.filename)]
                    errors += [f"{base}: links {shown(repr(c.url), 300)}, not an http(s) URL: ignored" for c in off]
                    listed = [c for c in listed if is_web_url(c.url)]
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    errors.append(f"{base}: HTTP {err.code} {err.reason}")
                continue
            except (urllib.error.URLError, OSError, ValueError, TooLarge) as err:  # Untrusted is a ValueError
                errors.append(
                    f"{base}: {shown(getattr(err, 'reason', err), 300)}"
                )  # one dead mirror does not hide the others
                continue
            found += [(index, c) for c in listed if pin.matches_filename(c.filename)]
        return found, errors


# ---------------------------------------------------------------------------
# The cache.


def max_sdist_bytes() -> int:
    """The largest sdist the farm fetches (``MAMBA_FARM_MAX_SDIST_MB``, default 512 MiB; the two pinned today are
    well under 1 MB, so this leaves room for any sane sdist): ``/dev/zero`` or an endless body stops there."""
    return _env_mib("MAMBA_FARM_MAX_SDIST_MB", 512)


MAX_PAGE_BYTES = 64 << 20  # an index page (PyPI's largest project pages are a few MB)


def _sha256_copy(src, dst, limit: int | None = None, deadline: Deadline | None = None) -> str:
    h = hashlib.sha256()
    total = 0
    while chunk := src.read(_CHUNK):
        if deadline is not None:
            deadline.left()
        spend(len(chunk))  # the run's budget of network bytes, when one is in force (drift --write)
        total += len(chunk)
        if limit is not None and total > limit:
            raise TooLarge(f"more than {limit >> 20} MiB")
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
        if final.is_file() and not any(final.parent.glob(".partial-*")):
            self.check(pin)
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(final.parent / ".lock")):
            for stale in final.parent.glob(".partial-*"):  # a killed download's: under the lock, none is live
                stale.unlink(missing_ok=True)
            if final.is_file():  # another process fetched it meanwhile
                self.check(pin)
                return final
            self._download(pin, final)
        return final

    def _download(self, pin: SdistPin, final: Path) -> None:
        mismatches: list[str] = []
        listed, unreachable = self.fetcher.candidates(pin)
        cap = max_sdist_bytes()
        # a candidate whose listed hash is the pin's first; ones listing another hash are not downloaded
        for _where, cand in sorted(listed, key=lambda wc: wc[1].sha256 != pin.sha256):
            if cand.sha256 is not None and cand.sha256 != pin.sha256:
                mismatches.append(f"{cand.url} (the index lists sha256 {cand.sha256})")
                continue
            if isinstance(cand.size, int) and cand.size > cap:
                mismatches.append(
                    f"{cand.url} (the index lists {cand.size >> 20} MiB, over the cap of {cap >> 20} MiB)"
                )
                continue
            fd, tmp_name = tempfile.mkstemp(prefix=".partial-", dir=final.parent)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out:
                    try:
                        seconds = request_deadline() * DOWNLOAD_DEADLINE_FACTOR
                        with Deadline(seconds, f"{cand.url}: the download") as deadline, self._open(cand.url) as src:
                            digest = _sha256_copy(src, out, cap, deadline)
                    except TooLarge as err:
                        mismatches.append(
                            f"{cand.url} ({err}, over the cap: MAMBA_FARM_MAX_SDIST_MB raises it); nothing was kept"
                        )
                        continue
                    except (urllib.error.URLError, OSError, ValueError) as err:
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
        if mismatches and isinstance(pin, ArchivePin):
            raise SourceIntegrityError(
                f"{pin.describe()}: the file at its URL is not the pinned one: " + "; ".join(mismatches),
                hint="nothing was cached or built; if the archive changed upstream, review it, then pin the sha256 "
                f"`curl -sL {pin.url} | sha256sum` prints",
            )
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
            return open_regular(urllib.parse.unquote(urllib.parse.urlparse(url).path))  # /dev/zero, a FIFO: never read
        if not is_web_url(url):
            raise ValueError(f"{url!r} is neither http(s) nor file://")
        resp = self.fetcher.open(url)
        if not is_web_url(resp.geturl()):  # a redirect to another scheme
            resp.close()
            raise ValueError(f"{url} redirects to {resp.geturl()!r}, not http(s)")
        return resp

    # -- using -----------------------------------------------------------------

    def _refuse(self, pin: SdistPin, path: Path, digest: str) -> SourceIntegrityError:
        moved = self._move_out(path, digest)
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
        dest = Path(dest)
        if dest.absolute().resolve().is_relative_to(self.root.absolute().resolve()):
            raise UsageError(f"{dest}: inside the sdist cache {self.root}; an unpack never writes into the cache")
        if isinstance(pin, GitPin):
            return self._unpack_git(pin, dest)
        self.fetch(pin)
        dest.mkdir(parents=True, exist_ok=False)
        path = self.path(pin)
        copy = dest / f".{pin.filename}"
        with open(path, "rb") as src, open(copy, "wb") as out:
            digest = _sha256_copy(src, out)
        try:
            if digest != pin.sha256:  # hashed as copied: what is unpacked below is what was checked
                shutil.rmtree(dest, ignore_errors=True)
                raise self._refuse(pin, path, digest)
            try:
                return _safe_extract(copy, dest, pin)
            except SourceIntegrityError as err:  # the pin's own bytes are unsafe or corrupt: out of the cache
                moved = self._move_out(path, digest)
                raise type(err)(
                    str(err), hint=f"{err.hint + '; ' if err.hint else ''}the archive was moved to {moved}"
                ) from None
        finally:
            copy.unlink(missing_ok=True)

    # -- git -------------------------------------------------------------------

    def git_repo(self, pin: GitPin) -> Path:
        """The bare repository the cache keeps for PIN's URL (one per URL; git checks each object's hash)."""
        return self.root / "git" / hashlib.sha256(pin.url.encode()).hexdigest()[:32]

    def fetch_git(self, pin: GitPin) -> Path:
        """The cached bare repository, holding PIN's commit (fetched first when it does not)."""
        repo = self.git_repo(pin)
        repo.parent.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(repo) + ".lock"):
            if not (repo / "HEAD").is_file():
                shutil.rmtree(repo, ignore_errors=True)
                _git(repo.parent, "init", "-q", "--bare", str(repo), ca_bundle=None)
            if _has_commit(repo, pin.commit):
                return repo
            # the commit alone (servers that allow fetching a commit by its hash: GitHub does), else every
            # branch and tag; either way only over http(s), never through a helper or another transport
            ca = self.fetcher.ca_bundle
            one = _git(repo, "fetch", "-q", "--no-tags", "--depth=1", "--end-of-options", pin.url, pin.commit,
                       ca_bundle=ca, check=False)  # fmt: skip
            if one.returncode != 0 or not _has_commit(repo, pin.commit):
                every = _git(repo, "fetch", "-q", "--no-tags", "--end-of-options", pin.url,
                             "+refs/heads/*:refs/farm/heads/*", "+refs/tags/*:refs/farm/tags/*", ca_bundle=ca, check=False)  # fmt: skip
                if every.returncode != 0:
                    raise SourceFetchError(
                        f"{pin.describe()}: git could not fetch {pin.url}: {shown(every.stderr.strip()[-400:], 400)}",
                        hint=_stalled(every.stderr) or "check the URL and the host's proxy and CA bundle; nothing was built",
                    )
            if not _has_commit(repo, pin.commit):
                raise SourceIntegrityError(
                    f"{pin.describe()}: the repository at {pin.url} has no commit {pin.commit} on any branch or tag; "
                    "nothing is built",
                    hint=f"`git ls-remote {pin.url}` lists the commits its branches and tags are at; pin one of them",
                )
        return repo

    def _unpack_git(self, pin: GitPin, dest: Path) -> Path:
        """PIN's tree as ``git archive`` writes it (under ``<name>-<version>/``), unpacked through the same member
        checks as an sdist: a link in the repository that leaves the tree is refused."""
        repo = self.fetch_git(pin)
        dest.mkdir(parents=True, exist_ok=False)
        copy = dest / f".{pin.filename}"
        prefix = f"{pin.project.replace('-', '_')}-{pin.version}/"
        try:
            made = _git(repo, "archive", "--format=tar.gz", f"--prefix={prefix}", "-o", str(copy), pin.commit,
                        ca_bundle=None, check=False)  # fmt: skip
            if made.returncode != 0:
                shutil.rmtree(dest, ignore_errors=True)
                raise SourceIntegrityError(
                    f"{pin.describe()}: git archive failed: {shown(made.stderr.strip()[-400:], 400)}"
                )
            return _safe_extract(copy, dest, pin)
        finally:
            copy.unlink(missing_ok=True)

    def _move_out(self, path: Path, digest: str) -> Path:
        self.quarantine.mkdir(parents=True, exist_ok=True)
        moved = self.quarantine / f"{time.strftime('%Y%m%dT%H%M%S')}-{digest[:12]}-{path.name}"
        with contextlib.suppress(OSError):
            os.replace(path, moved)
        return moved


def _safe_extract(archive: Path, dest: Path, pin: SdistPin) -> Path:
    try:
        return _extract(archive, dest, pin)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)  # a refused archive leaves no partial tree behind
        raise


def max_unpacked_bytes() -> int:
    """The most an sdist may unpack to (``MAMBA_FARM_MAX_UNPACKED_MB``, default 4096 MiB): a gzip bomb stops here."""
    return _env_mib("MAMBA_FARM_MAX_UNPACKED_MB", 4096)


def _env_mib(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a whole number of MiB") from None
    if value <= 0:
        raise UsageError(f"{name}={raw!r}: expected a positive number of MiB")
    return value << 20


MAX_MEMBER_NAME, MAX_MEMBER_DEPTH = 1024, 64  # no sdist needs more; CVE-2025-4517's chain needs ~4,000


def _member_parts(name: str) -> tuple[str, ...] | None:
    """The member's path components, None where it is absolute or climbs out (``..``)."""
    if not name or name.startswith(("/", "\\")) or "\0" in name or re.match(r"[A-Za-z]:", name):
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        return None
    return parts


def _followed(parts: tuple[str, ...], links: dict[tuple[str, ...], tuple[str, ...]], refuse) -> tuple[str, ...]:
    """``parts`` with every link of the archive (LINKS) among its prefixes followed, as the OS would, whatever the
    order the links are unpacked in; ``refuse(why)`` for what climbs out of the unpack folder or never ends."""
    out: list[str] = []
    todo = list(parts)
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                refuse("points outside the unpack folder")
            out.pop()
            continue
        out.append(part)
        target = links.get(tuple(out))
        if target is not None:
            hops += 1
            if hops > 40:
                refuse("is a chain of links that does not end")
            out, todo = [], [*target, *todo]
    return tuple(out)


def check_members(members: list[tarfile.TarInfo], where: str) -> str:
    """The one top-level folder of an sdist whose every member stays inside it; else UnsafeArchiveError.

    Checked on the member list alone, before anything is written, without trusting tarfile's ``data``
    filter (CVE-2025-4517 and its kin bypass it on a Python without that fix): only folders, regular files,
    and links whose target, resolved through the archive's own links, stays in the tree; no member is
    written through a link, and no name comes twice (a later member would replace an earlier link)."""
    kinds: dict[tuple[str, ...], str] = {}  # path -> "dir" | "file" | "link"
    raw_links: dict[tuple[str, ...], tuple[str, ...]] = {}  # symlink -> its target, joined to its folder

    def refuse(m: tarfile.TarInfo, why: str):
        raise UnsafeArchiveError(
            f"{where}: refused to unpack: member {m.name!r} {why}; nothing was unpacked",
            hint="an sdist holds plain files and folders under one name-version folder; "
            "review where this archive came from before pinning it",
        )

    for m in members:  # pass 1: names and kinds
        parts = _member_parts(m.name)
        if parts is None:
            refuse(m, "is absolute or climbs out with '..'")
        if len(m.name) > MAX_MEMBER_NAME or len(parts) > MAX_MEMBER_DEPTH:
            refuse(m, "has an implausibly long path")
        seen = kinds.get(parts)
        if seen is not None and not (seen == "dir" and m.isdir()):
            refuse(m, "comes twice (a second member would replace the first)")
        if m.isdir():
            kinds[parts] = "dir"
        elif m.isreg():
            kinds[parts] = "file"
        elif m.issym():
            if not m.linkname or m.linkname.startswith("/") or "\0" in m.linkname:
                refuse(m, f"is a link to {m.linkname!r}, outside the unpack folder")
            kinds[parts] = "link"
            raw_links[parts] = parts[:-1] + tuple(m.linkname.split("/"))
        elif m.islnk():
            target = _member_parts(m.linkname)
            if target is None or kinds.get(target) != "file":
                refuse(m, f"is a hard link to {m.linkname!r}, not to a file earlier in the archive")
            kinds[parts] = "file"
        else:
            kind = "a device" if m.ischr() or m.isblk() else "a FIFO" if m.isfifo() else "not a file or a folder"
            refuse(m, f"is {kind}")
    for m in members:  # pass 2: nothing written through a link or a file, every link stays in the tree
        parts = _member_parts(m.name)
        for i in range(1, len(parts)):
            if kinds.get(parts[:i], "dir") != "dir":
                refuse(m, f"would be written through the link or file {'/'.join(parts[:i])!r}")
        if parts in raw_links:
            target = _followed(raw_links[parts], raw_links, lambda why, m=m: refuse(m, why))
            if len(target) < 2 or target[0] != parts[0]:
                refuse(m, f"is a link to {m.linkname!r}, which leaves the sdist's folder")
    tops = {p[0] for p in kinds}
    if len(tops) != 1:
        raise SourceIntegrityError(f"{where}: an sdist has one top-level folder; this one has {sorted(tops)[:5]}")
    (top,) = tops
    if kinds.get((top,), "dir") != "dir":
        raise UnsafeArchiveError(f"{where}: refused to unpack: its top-level entry {top!r} is not a folder")
    return top


GIT_STALL_SECONDS = 30  # a git transfer slower than GIT_LOW_SPEED bytes a second for this long is cut off
GIT_LOW_SPEED = 1000


def _git(cwd: Path, *args: str, ca_bundle: Path | None, check: bool = True) -> subprocess.CompletedProcess:
    """git with no user or system configuration, no prompt, no helper transport (``ext::``, ``fd::``), only
    http(s) to the network, the fetch deadline, a stall limit (a server that sends a byte every few seconds is
    cut off after ``MAMBA_FARM_GIT_STALL_SECONDS``) and its printed output capped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    if ca_bundle:
        env["GIT_SSL_CAINFO"] = str(ca_bundle)
    stall = env_seconds("MAMBA_FARM_GIT_STALL_SECONDS", GIT_STALL_SECONDS)
    cmd = ["git", "-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
           "-c", "http.followRedirects=initial", "-c", f"http.lowSpeedLimit={GIT_LOW_SPEED}",
           "-c", f"http.lowSpeedTime={max(1, round(stall))}", "-C", str(cwd), *args]  # fmt: skip
    seconds = request_deadline() * DOWNLOAD_DEADLINE_FACTOR
    try:
        raw = run_capped(cmd, seconds, f"git {args[0]}", env=env)
    except TimedOut:
        raise SourceFetchError(f"git {args[0]}: no answer within {seconds:.0f}s") from None
    except TooLarge as err:
        raise SourceFetchError(str(err)) from None
    except OSError as err:
        raise SourceFetchError(f"git cannot run here: {err}", hint="install git (a git source needs it)") from None
    proc = subprocess.CompletedProcess(cmd, raw.returncode, raw.stdout.decode("utf-8", "replace"),
                                       raw.stderr.decode("utf-8", "replace"))  # fmt: skip
    if check and proc.returncode != 0:
        raise SourceFetchError(f"git {args[0]} failed: {shown(proc.stderr.strip()[-400:], 400)}",
                               hint=_stalled(proc.stderr))  # fmt: skip
    return proc


def _stalled(stderr: str) -> str | None:
    """What to tell of a git transfer the stall limit cut off (curl's "Operation too slow"), else None."""
    if "operation too slow" not in stderr.lower():
        return None
    stall = env_seconds("MAMBA_FARM_GIT_STALL_SECONDS", GIT_STALL_SECONDS)
    return (f"the server sent under {GIT_LOW_SPEED} bytes a second for {stall:g} s: the stall limit "
            "(MAMBA_FARM_GIT_STALL_SECONDS); nothing was built")  # fmt: skip


def ls_remote_tags(url: str) -> dict[str, str]:
    """{tag: commit} of the git repository at URL (annotated tags peeled to their commit), for drift."""
    url = git_url(url)
    with tempfile.TemporaryDirectory(prefix="ls-remote-") as tmp:
        proc = _git(Path(tmp), "ls-remote", "--tags", "--end-of-options", url, ca_bundle=hostenv.find_ca_bundle(None),
                    check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SourceFetchError(f"git ls-remote {url}: {shown(proc.stderr.strip()[-400:], 400)}", hint=_stalled(proc.stderr))
    tags: dict[str, str] = {}
    for line in proc.stdout.splitlines()[:100_000]:
        commit, _, ref = line.partition("\t")
        name = ref.removeprefix("refs/tags/")
        if not COMMIT_RE.fullmatch(commit) or name == ref or not re.fullmatch(r"[A-Za-z0-9._+-]{1,100}(\^\{\})?", name):
            continue
        if name.endswith("^{}"):
            tags[name[:-3]] = commit  # the peeled commit wins over the tag object
        else:
            tags.setdefault(name, commit)
    return tags


@dataclass(frozen=True)
class BranchHead:
    """A branch's head commit, the newest release tag it descends from and its distance from it (git describe)."""

    commit: str
    tag: str  # "v2.3.2.post1"
    release: str  # the tag as a version, "2.3.2.post1"
    distance: int  # commits from the tag to the head; 0: the head is the release


_DESCRIBE_RE = re.compile(r"(?P<tag>[A-Za-z0-9._+-]{1,100})-(?P<distance>[0-9]{1,7})-g(?P<commit>[0-9a-f]{40})")


def branch_head(url: str, branch: str) -> BranchHead:
    """BRANCH's head in the git repository at URL, described against its newest release tag: the branch's commits
    (no trees or files where the server filters, GitHub does) and the tags on them, into a scratch repository."""
    url = git_url(url)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}", branch) or ".." in branch:
        raise SourceFetchError(f"{shown(repr(branch), 120)}: not a branch name")
    ca = hostenv.find_ca_bundle(None)
    with tempfile.TemporaryDirectory(prefix="branch-head-") as tmp:
        repo = Path(tmp) / "repo.git"
        _git(Path(tmp), "clone", "-q", "--bare", "--filter=tree:0", "--single-branch", "--branch", branch,
             "--end-of-options", url, str(repo), ca_bundle=ca)  # fmt: skip
        said = _git(repo, "describe", "--tags", "--long", "--abbrev=40", "--match", "v[0-9]*", "--match", "[0-9]*",
                    f"refs/heads/{branch}", ca_bundle=None, check=False)  # fmt: skip
    m = _DESCRIBE_RE.fullmatch(said.stdout.strip()) if said.returncode == 0 else None
    if m is None:
        raise SourceFetchError(
            f"{url} {branch}: no release tag (v1.2.3 or 1.2.3) is an ancestor of its head: "
            f"{shown((said.stdout or said.stderr).strip()[-300:], 300)}",
            hint="a canary is numbered from the release before it; pin a branch that descends from one",
        )
    try:
        release = Version(m["tag"].removeprefix("v"))
    except InvalidVersion:
        raise SourceFetchError(f"{url} {branch}: its nearest tag {m['tag']!r} is not a PEP 440 version") from None
    if release.is_devrelease or release.local is not None:
        raise SourceFetchError(f"{url} {branch}: its nearest tag {m['tag']!r} is not a release's version")
    return BranchHead(m["commit"], m["tag"], str(release), int(m["distance"]))


def archive_sha256(url: str, fetcher: Fetcher) -> str:
    """The sha256 of the archive at URL (http(s)), read under the sdist cap and the download deadline."""
    if not is_web_url(url):
        raise SourceFetchError(f"{shown(repr(url), 300)}: not an http(s) URL")
    h, total, cap = hashlib.sha256(), 0, max_sdist_bytes()
    try:
        with Deadline(request_deadline() * DOWNLOAD_DEADLINE_FACTOR, f"{url}: the download") as deadline, fetcher.open(url) as src:
            while chunk := src.read(_CHUNK):
                deadline.left()
                total += len(chunk)
                if total > cap:
                    raise SourceFetchError(f"{url}: more than {cap >> 20} MiB (MAMBA_FARM_MAX_SDIST_MB raises the cap)")
                h.update(chunk)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise SourceFetchError(f"{url}: download failed: {shown(getattr(err, 'reason', err), 300)}") from None
    return h.hexdigest()


def _has_commit(repo: Path, commit: str) -> bool:
    proc = _git(repo, "cat-file", "-t", commit, ca_bundle=None, check=False)
    return proc.returncode == 0 and proc.stdout.strip() == "commit"


def _top_is_the_pin(top: str, pin: SdistPin) -> bool:
    """Whether the top folder is ``name-version`` (the name in any of its spellings, the version by PEP 440).
    An archive URL's top folder is whatever its host names it (GitHub: ``<repo>-<tag without v>``): any one."""
    if isinstance(pin, ArchivePin):
        return True
    name, sep, version = top.rpartition("-")
    try:
        return bool(sep) and canonicalize_name(name) == pin.project and Version(version) == Version(pin.version)
    except InvalidVersion:
        return False


def _check_gzip(archive: Path, where: str) -> None:
    """Decompress the whole stream once, checking gzip's CRC and length: tarfile reads only as far as it needs,
    and a damaged stream either escapes as zlib.error or ends the member list early, silently (a partial tree).
    Stops at the unpacked-size cap (a gzip bomb is refused before any tar header is read)."""
    cap, total = max_unpacked_bytes(), 0
    with gzip.open(archive, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            total += len(chunk)
            if total > cap:
                raise SourceIntegrityError(
                    f"{where}: unpacks to more than the cap of {cap >> 20} MiB",
                    hint="raise MAMBA_FARM_MAX_UNPACKED_MB if this sdist really is that large",
                )


def _extract(archive: Path, dest: Path, pin: SdistPin) -> Path:
    where = pin.filename
    try:
        _check_gzip(archive, where)
        with tarfile.open(archive, "r:gz") as tf:
            members = tf.getmembers()  # reads the whole archive: a corrupt one fails here, before any write
            top = check_members(members, where)
            if not _top_is_the_pin(top, pin):
                raise SourceIntegrityError(
                    f"{where}: its top-level folder is {top!r}, not {pin.project}-{pin.version}: "
                    "this is not the sdist the pin names"
                )
            total = sum(m.size for m in members if m.isreg())
            if total > max_unpacked_bytes():
                raise SourceIntegrityError(
                    f"{where}: unpacks to {total >> 20} MiB, more than the cap of {max_unpacked_bytes() >> 20} MiB",
                    hint="raise MAMBA_FARM_MAX_UNPACKED_MB if this sdist really is that large",
                )
            if hasattr(tarfile, "data_filter"):  # a second line of defence where this Python has it
                tf.extractall(dest, members=members, filter="data")
            else:
                tf.extractall(dest, members=members)
    except SourceIntegrityError:
        raise
    except getattr(tarfile, "FilterError", ()) as err:
        raise UnsafeArchiveError(f"{where}: refused to unpack: {err}") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as err:
        raise SourceIntegrityError(
            f"{where}: not a readable .tar.gz: {err}", hint="the archive is corrupt; only this build fails"
        ) from None
    tree = dest / top
    real_dest = dest.resolve()
    if tree.is_symlink() or not tree.is_dir() or tree.resolve().parent != real_dest:
        raise UnsafeArchiveError(f"{where}: its top-level entry is not a folder inside the unpack folder")
    return tree
