"""The farm's checks of outside data: the package's guard (``mamba_ssm.guard``: capped reads, deadlines, shown
text, JSON, shapes) and what only the farm reads: sha256 and file names, git and index URLs, TOML, zips, its
own folders, dotted releases, environment markers, one run's budget.

Every farm reader of outside data (index listings, wheels, sdists, manifests, recipes, cache state) imports
these rules from here, so each rule has one home: the guard's names are re-exported, not copied.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path

from mamba_ssm.guard import (
    MAX_DEPTH,
    NETWORK_METERS,
    Deadline,
    TimedOut,
    TooLarge,
    Untrusted,
    expect,
    field,
    guard_output,
    has_hidden,
    is_web_url,
    load_json,
    more_than,
    neutral,
    open_regular,
    parse_bounded,
    read_capped,
    read_regular,
    shown,
    spend,
    text,
    unguarded,
)

# The guard's names are re-exported here (the farm imports its rules from one module), with the farm's own.
__all__ = [
    "COMMIT_RE",
    "FILE_NAME_RE",
    "MAX_OUTPUT_BYTES",
    "PLAIN_URL_RE",
    "SHA256_RE",
    "WHEEL_FILENAME_RE",
    "BudgetSpent",
    "Deadline",
    "RunBudget",
    "TimedOut",
    "TooLarge",
    "Untrusted",
    "WebRedirects",
    "check_zip_directory",
    "env_seconds",
    "expect",
    "field",
    "file_name",
    "git_url",
    "guard_output",
    "has_hidden",
    "inside",
    "is_web_url",
    "load_json",
    "load_toml",
    "locked_url",
    "marker_holds",
    "neutral",
    "open_regular",
    "open_zip",
    "plain_url",
    "read_capped",
    "read_inside",
    "read_regular",
    "release",
    "remove_tree",
    "run_budget",
    "run_capped",
    "sha256_name",
    "shown",
    "spend",
    "text",
    "unguarded",
    "zip_read",
]

SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A file name the farm reads or writes on an index's word: PEP 427/625 names use only these.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")


def sha256_name(value: object, what: str = "sha256") -> str:
    """A sha256 as a file name: exactly 64 lowercase hex digits, or Untrusted."""
    if not isinstance(value, str) or not SHA256_RE.fullmatch(value):
        raise Untrusted(f"{what} {shown(repr(value), 80)} is not 64 lowercase hex digits")
    return value


def file_name(value: object, what: str = "file name") -> str:
    """A bare file name (no folder, no '..', one fixed alphabet), or Untrusted."""
    if not isinstance(value, str) or not FILE_NAME_RE.fullmatch(value) or value in (".", ".."):
        raise Untrusted(f"{what} {shown(repr(value), 80)} is not a plain file name (letters, digits, . _ + -)")
    return value


def env_seconds(name: str, default: float, unit: str = "seconds") -> float:
    """A positive number of seconds (or of ``unit``) from the environment, or Untrusted naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"\d{1,6}(\.\d{1,3})?", raw) or float(raw) <= 0:
        raise Untrusted(f"{name}={shown(repr(raw), 40)}: expected a positive number of {unit}")
    return float(raw)


COMMIT_RE = re.compile(r"[0-9a-f]{40}")  # a full git commit hash: a short or symbolic one names no fixed tree


def git_url(url: object, what: str = "git URL") -> str:
    """URL, when git may be given it: an http(s) URL (is_web_url) with no user or password in it and nothing git
    reads as a transport or an option: ``ext::`` runs a command, ``file://``/``ssh://`` reach past the proxy,
    a leading ``-`` is an option. Else Untrusted naming what is wrong."""
    if not isinstance(url, str):
        raise Untrusted(f"{what}: expected a string, got {type(url).__name__}")
    if url.startswith("-") or "::" in url:
        raise Untrusted(f"{what} {shown(repr(url), 200)}: git would read it as an option or a transport (ext::)")
    if not is_web_url(url):
        raise Untrusted(f"{what} {shown(repr(url), 200)}: not an http(s) URL")
    if "@" in urllib.parse.urlsplit(url).netloc:
        raise Untrusted(f"{what} {shown(repr(url), 200)}: holds a user name or password")
    return url


# What a URL spliced into a page or a printed command may hold: RFC 3986's unreserved and path characters,
# percent escapes; nothing a shell or an HTML attribute would read as syntax. (The index's --base-url and
# --files-url, a manifest's base_url.)
PLAIN_URL_RE = re.compile(r"[A-Za-z0-9._~:/%@+=,-]+")
# PEP 427/491: a wheel's filename is ASCII letters, digits and ``_ . + -`` (``!`` of an epoch). Anything else
# (``#``, ``?``, spaces, U+202E) is a name pip does not make, and one that breaks the links pages give it.
WHEEL_FILENAME_RE = re.compile(r"[A-Za-z0-9_.+!-]{1,251}\.whl")


def plain_url(url: object) -> str | None:
    """An absolute http(s) URL with no query, fragment, spaces, quotes or shell syntax, normalised; else None."""
    if not isinstance(url, str) or len(url) > 2048 or not PLAIN_URL_RE.fullmatch(url.strip()):
        return None
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        return None
    return urllib.parse.urlunsplit(parts)


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def locked_url(url: object, what: str) -> str:
    """A wheel URL a lock file may name: an https URL (or http on the loopback, an index served by a test) of
    RFC 3986's plain characters, parsed, with no user, password, query or fragment; else Untrusted naming it.
    Nothing in it can close a TOML string, start a new line or name a local file."""
    if not isinstance(url, str) or len(url) > 2048 or not PLAIN_URL_RE.fullmatch(url):
        raise Untrusted(
            f"{shown(what, 300)}: {shown(repr(url), 200)} is not a plain URL (letters, digits, ._~:/%@+=,-)"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as err:
        raise Untrusted(f"{shown(what, 300)}: {shown(repr(url), 200)} is not a URL ({shown(err, 100)})") from None
    web = parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS)
    if not web or not host or "@" in parts.netloc or parts.query or parts.fragment:
        raise Untrusted(f"{shown(what, 300)}: {shown(repr(url), 200)} is not an https URL of a file (no user, "
                        "query or fragment; plain http only on the loopback)")  # fmt: skip
    return url


class WebRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, kept on http(s): urllib itself follows one to ``ftp://`` (and reads it) before its
    caller sees where it went; here a redirect anywhere else is refused before it is followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not is_web_url(newurl):
            raise urllib.error.URLError(f"redirected to {shown(repr(newurl), 300)}, not an http(s) URL: not followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def load_toml(raw: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> dict:
    """A TOML document, refused (Untrusted) when it is not UTF-8, not TOML, or nested deeper than ``max_depth``."""
    import tomllib

    say = lambda e: f"not valid TOML: {shown(e, 300)}"
    return parse_bounded(tomllib.loads, tomllib.TOMLDecodeError, say, raw, what, max_depth, False)


# --------------------------------------------------------------------------- zip files

MAX_ZIP_DIRECTORY = 64 << 20  # torch's wheel (15,000 members) has a 2 MB central directory
MAX_ZIP_MEMBERS = 200_000
_EOCD, _EOCD64, _EOCD64_LOC = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"


def check_zip_directory(f, what: str) -> None:
    """Refuse a zip whose end record claims a central directory larger than the file, or past the caps,
    before :mod:`zipfile` allocates it (it reads the claimed size in one call)."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    tail_len = min(size, 22 + 0xFFFF)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    i = tail.rfind(_EOCD)
    if i < 0 or len(tail) - i < 22:
        raise Untrusted(f"{shown(what, 300)}: not a readable zip file (no end of central directory record)")
    _sig, _disk, _cd_disk, _n_disk, count, cd_size, cd_offset, _clen = struct.unpack_from("<IHHHHIIH", tail, i)
    j = i - 20
    if j >= 0 and tail[j : j + 4] == _EOCD64_LOC:
        (loc_offset,) = struct.unpack_from("<Q", tail, j + 8)
        if loc_offset + 56 > size:
            raise Untrusted(f"{shown(what, 300)}: not a readable zip file (its zip64 record lies past the end)")
        f.seek(loc_offset)
        rec = f.read(56)
        if rec[:4] != _EOCD64:
            raise Untrusted(f"{shown(what, 300)}: not a readable zip file (bad zip64 record)")
        _, count, cd_size, cd_offset = struct.unpack_from("<QQQQ", rec, 24)
    if cd_size > MAX_ZIP_DIRECTORY or count > MAX_ZIP_MEMBERS:
        raise TooLarge(f"{shown(what, 300)}: its central directory claims {cd_size} bytes and {count} members, "
                       f"over the caps ({MAX_ZIP_DIRECTORY >> 20} MiB, {MAX_ZIP_MEMBERS} members)")  # fmt: skip
    if cd_offset + cd_size > size:
        raise Untrusted(f"{shown(what, 300)}: not a readable zip file (its central directory claims {cd_size} bytes at "
                        f"{cd_offset}, the file has {size})")  # fmt: skip
    f.seek(0)


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError,
               OSError, ValueError, struct.error, OverflowError, UnicodeDecodeError)  # fmt: skip


def open_zip(source, what: str) -> zipfile.ZipFile:
    """A :class:`zipfile.ZipFile` for a path or a seekable binary file, its directory checked first; every way
    it can be broken is Untrusted."""
    f = open_regular(source, what) if isinstance(source, str | os.PathLike) else source
    try:
        check_zip_directory(f, what)
        return zipfile.ZipFile(f)
    except Untrusted:
        if f is not source:
            f.close()
        raise
    except _ZIP_ERRORS as err:
        if f is not source:
            f.close()
        raise Untrusted(f"{shown(what, 300)}: not a readable zip file ({shown(err, 200)})") from None


def zip_read(zf: zipfile.ZipFile, name: str | zipfile.ZipInfo, limit: int, what: str) -> bytes:
    """One member's bytes, the cap applied to the bytes really inflated (not to what its header claims) and to
    its compressed size; a bad CRC, an encrypted or unsupported member, a truncated stream: Untrusted."""
    label = f"{what}: {name.filename if isinstance(name, zipfile.ZipInfo) else name}"
    try:
        info = name if isinstance(name, zipfile.ZipInfo) else zf.getinfo(name)
    except KeyError as err:
        raise Untrusted(f"{shown(label, 300)}: cannot be read ({shown(err, 200)})") from None
    # The input is capped too: empty deflate blocks inflate to nothing, so a member of hundreds of MB that
    # unpacks to a few bytes passes an output cap only after every byte of it was read (from a remote wheel,
    # one range request per 64 kB). Deflate never makes a member much larger than its content.
    if info.compress_size > limit + (limit >> 6) + 1024:
        raise TooLarge(f"{shown(label, 300)}: {info.compress_size} bytes compressed: it unpacks to {more_than(limit)}, "
                       "or is padded to look small; refused before it is read")  # fmt: skip
    try:
        with zf.open(info) as member:
            return read_capped(member, limit)
    except TooLarge as err:
        raise TooLarge(f"{shown(label, 300)}: unpacks to {err}") from None
    except Untrusted:
        raise
    except _ZIP_ERRORS + (KeyError,) as err:
        raise Untrusted(f"{shown(label, 300)}: cannot be read ({shown(err, 200)})") from None


# --------------------------------------------------------------------------- commands run on outside input

MAX_OUTPUT_BYTES = 16 << 20  # what one command run on outside input may print (stdout and stderr together)


def run_capped(cmd: list[str], seconds: float, what: str, max_output: int = MAX_OUTPUT_BYTES, **popen):
    """``subprocess.run(cmd, capture_output=True)`` with bounds: past ``seconds`` of wall time, or past
    ``max_output`` bytes printed, the command and everything it started (its own session) is killed and
    :class:`TimedOut` or :class:`TooLarge` names ``what`` and the bound. The output is kept in memory only up to
    the cap; returns a CompletedProcess with bytes."""
    proc = subprocess.Popen(cmd, stdin=popen.pop("stdin", subprocess.DEVNULL), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, **popen)  # fmt: skip
    out: dict = {proc.stdout: [], proc.stderr: []}
    total, end, over = 0, time.monotonic() + seconds, None
    with selectors.DefaultSelector() as sel:
        for stream in out:
            sel.register(stream, selectors.EVENT_READ)
        try:
            while sel.get_map() and over is None:
                left = end - time.monotonic()
                if left <= 0:
                    over = TimedOut(f"{shown(what, 300)}: ran over {seconds:g} s (stopped there)")
                    break
                for key, _ in sel.select(min(left, 1.0)):
                    block = os.read(key.fd, 1 << 16)
                    if not block:
                        sel.unregister(key.fileobj)
                        continue
                    total += len(block)
                    if total > max_output:
                        over = TooLarge(f"{shown(what, 300)}: printed {more_than(max_output)} (stopped there)")
                        break
                    out[key.fileobj].append(block)
        finally:
            if over is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            for stream in out:
                stream.close()
    try:
        rc = proc.wait(timeout=max(end - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
        over = over or TimedOut(f"{shown(what, 300)}: ran over {seconds:g} s (stopped there)")
    if over is not None:
        raise over
    return subprocess.CompletedProcess(cmd, rc, b"".join(out[proc.stdout]), b"".join(out[proc.stderr]))


# --------------------------------------------------------------------------- deleting


def inside(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether ``path`` lies under ``root`` without passing through a link on the way down from ``root``
    (``root`` itself may be a link: a cache moved to a bigger disk)."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    if path == root or not path.is_relative_to(root):
        return False
    cur = root
    for part in path.relative_to(root).parts:
        cur = cur / part
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                return False
        except OSError:
            return False
    return True


def remove_tree(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Delete the folder ``path`` if it lies inside ``root`` by real folders only (:func:`inside`); links in it
    are removed as links, never followed. False (nothing deleted) when it does not: a folder reached through a
    link belongs to whoever made the link."""
    if not inside(root, path):
        return False
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)  # rmtree never follows links inside the tree (and refuses a link at the top)
    return True


# --------------------------------------------------------------------------- the farm's own folders


def read_inside(root: str | os.PathLike, path: str | os.PathLike, limit: int, what: str | None = None) -> bytes:
    """The bytes of a marker or record the farm keeps under ``root`` (a cache, an index), read only when
    ``path`` is reached from ``root`` by real folders and is itself no link (:func:`inside`); a link out of
    the folder is refused, never followed, so its target is never read or shown."""
    if not inside(root, path):
        raise Untrusted(f"{shown(what or str(path), 300)}: a link, or reached through one: the farm reads its "
                        f"own files under {shown(str(root), 300)} only, never what a link points at")  # fmt: skip
    return read_regular(path, limit, what)


_RELEASE_RE = re.compile(r"\d{1,9}(\.\d{1,9}){0,7}")


def release(raw: object, what: str, parts: tuple[int, int] = (1, 8)) -> tuple[int, ...]:
    """A dotted release such as ``2.6`` or ``12.8.90`` as a tuple of ints, with ``parts[0]..parts[1]``
    components, each present (``2.``, ``.6``, ``2..6``, ``''`` are refused, never ``int('')``)."""
    if not isinstance(raw, str) or not _RELEASE_RE.fullmatch(raw):
        raise Untrusted(f"{shown(what, 300)}: {shown(repr(raw), 80)} is not a dotted version (digits and dots)")
    out = tuple(int(x) for x in raw.split("."))
    if not parts[0] <= len(out) <= parts[1]:
        raise Untrusted(f"{shown(what, 300)}: {shown(repr(raw), 80)} has {len(out)} parts, "
                        f"not {parts[0]}..{parts[1]}")  # fmt: skip
    return out


def marker_holds(marker, env: dict[str, str], what: str) -> bool:
    """Whether an environment marker (packaging's ``Marker``, which the caller parsed: this layer imports no
    packaging, since the doctor ships without it) holds in ``env``; what packaging refuses to compare
    (UndefinedComparison, UndefinedEnvironmentName, an invalid version: all ValueErrors) is Untrusted naming
    ``what``, never a traceback."""
    try:
        return bool(marker.evaluate(env))
    except (ValueError, TypeError, KeyError, RecursionError) as err:
        raise Untrusted(f"{shown(what, 300)}: the marker {shown(repr(str(marker)), 200)} cannot be evaluated "
                        f"({type(err).__name__}: {shown(err, 200)})") from None  # fmt: skip


# --------------------------------------------------------------------------- one run's budget


class BudgetSpent(TimedOut):
    """A run went past its budget of wall time or of bytes read from the network."""


class RunBudget(Deadline):
    """One run's budget: ``seconds`` of wall time and ``max_bytes`` read from the network, beside each request's
    own deadline (a listing can otherwise make a run of thousands of requests, each within its deadline).

    Entered as a context manager in the main thread, its time is enforced by the deadlines' timer; bytes are
    charged by the readers (:func:`spend`, :func:`read_capped` with ``network=True``). Past either,
    :class:`BudgetSpent` names the budget and the flag and variable that raise it (``raise_with``: for the
    time, for the bytes)."""

    def __init__(self, seconds: float, max_bytes: int, what: str, raise_with: tuple[str, str]) -> None:
        super().__init__(seconds, what)
        self.max_bytes, self.raise_with = max_bytes, raise_with
        self.used = 0

    def expired(self) -> BudgetSpent:
        return BudgetSpent(f"{self.what}: its budget of {self.seconds:g} s of wall time is spent (stopped there); "
                           f"raise it with {self.raise_with[0]}")  # fmt: skip

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.max_bytes:
            raise BudgetSpent(f"{self.what}: its budget of {_mib(self.max_bytes)} read from the network is spent "
                              f"(stopped there); raise it with {self.raise_with[1]}")  # fmt: skip

    def __enter__(self) -> RunBudget:  # noqa: PYI034
        super().__enter__()
        NETWORK_METERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        NETWORK_METERS.remove(self)
        super().__exit__(*exc)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def run_budget(what: str, seconds: float | None, megabytes: float | None, defaults: tuple[float, int],
               flags: tuple[str, str] = ("--budget-seconds", "--budget-mb")) -> RunBudget:  # fmt: skip
    """A :class:`RunBudget` from a command's flags, else ``MAMBA_FARM_RUN_SECONDS`` / ``MAMBA_FARM_RUN_MB``, else
    ``defaults`` (seconds, MiB); a value that is not a positive number is Untrusted naming its source."""
    if seconds is None:
        seconds = env_seconds("MAMBA_FARM_RUN_SECONDS", defaults[0])
    if megabytes is None:
        megabytes = env_seconds("MAMBA_FARM_RUN_MB", defaults[1], "MiB")
    for name, value in ((flags[0], seconds), (flags[1], megabytes)):
        if not 0 < value <= 10**6:
            raise Untrusted(f"{name} {shown(repr(value), 40)}: expected a positive number")
    raise_with = (f"{flags[0]} or MAMBA_FARM_RUN_SECONDS", f"{flags[1]} or MAMBA_FARM_RUN_MB")
    return RunBudget(seconds, int(megabytes * (1 << 20)), what, raise_with)
