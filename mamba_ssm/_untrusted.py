"""The one layer for data from outside the process: names, capped reads, deadlines, shown text, pasted commands.

Every reader of outside data (index listings, wheels, sdists, manifests, recipes, cache state, pasted text)
goes through these rules, so each rule has one home. Standard library only, importing neither torch nor
builder: the doctor, setup.py's prebuilt lookup and the farm all import it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import struct
import threading
import time
import unicodedata
import urllib.parse
import zipfile
import zlib
from pathlib import Path

SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A file name the farm reads or writes on an index's word: PEP 427/625 names use only these.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")


class Untrusted(ValueError):
    """Outside data that breaks a rule; the message names the value (shown safely) and the rule."""


class TooLarge(Untrusted):
    """A read went past its cap."""


class TimedOut(Untrusted):
    """A request or a command went past its overall deadline."""


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


# Cc and Cf (controls, bidi overrides, zero-width marks) and the line/paragraph separators: shown as
# escapes, so an index cannot draw over the terminal or reorder what a person reads.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def shown(text: object, limit: int = 2000, keep_newlines: bool = False) -> str:
    """Text safe to print: control and bidi characters escaped, cut to `limit` characters."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > limit:
        s = s[:limit] + f"... ({len(s) - limit} more characters)"
    out = []
    for ch in s:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            out.append(ch.encode("unicode_escape").decode("ascii") if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def paste(args: list[str] | tuple[str, ...]) -> str:
    """A command line for a person to paste: every word quoted for a POSIX shell, and shown safely."""
    return shown(shlex.join(str(a) for a in args), limit=10_000)


_ARMED: list[Deadline] = []  # the deadlines entered in the main thread, innermost last


def _alarm(signum, frame) -> None:
    now = time.monotonic()
    late = [d for d in _ARMED if d.end <= now + 0.001]
    if late:
        raise min(late, key=lambda d: d.end).expired()
    _arm()


def _arm() -> None:
    if _ARMED:
        left = min(d.end for d in _ARMED) - time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
    else:
        signal.setitimer(signal.ITIMER_REAL, 0)


class Deadline:
    """An overall time limit for one request or one command.

    Checked between reads (:meth:`left`), and, used as a context manager in the main thread, enforced by a
    timer: a read blocked on a server that sends a byte every few seconds (a socket timeout never trips) is
    interrupted with :class:`TimedOut` when the deadline passes. Deadlines nest: the nearest one fires.
    """

    _saved_handler = None

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.end = time.monotonic() + seconds
        self._armed = False

    def expired(self) -> TimedOut:
        """The error this deadline raises once it has passed."""
        return TimedOut(f"{self.what}: no answer within {self.seconds:g} s")

    def left(self) -> float:
        """Seconds left (for a socket timeout), or TimedOut once the deadline has passed."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left

    def __enter__(self) -> Deadline:  # noqa: PYI034 (3.10 has no typing.Self)
        self.end = time.monotonic() + self.seconds
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            if not _ARMED:
                Deadline._saved_handler = signal.signal(signal.SIGALRM, _alarm)
            _ARMED.append(self)
            self._armed = True
            _arm()
        return self

    def __exit__(self, *exc) -> None:
        if self._armed:
            self._armed = False
            _ARMED.remove(self)
            _arm()
            if not _ARMED:
                signal.signal(signal.SIGALRM, Deadline._saved_handler or signal.SIG_DFL)


def env_seconds(name: str, default: float, unit: str = "seconds") -> float:
    """A positive number of seconds (or of ``unit``) from the environment, or Untrusted naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"\d{1,6}(\.\d{1,3})?", raw) or float(raw) <= 0:
        raise Untrusted(f"{name}={shown(repr(raw), 40)}: expected a positive number of {unit}")
    return float(raw)


def read_capped(
    stream, limit: int, deadline: Deadline | None = None, chunk: int = 1 << 16, network: bool = False
) -> bytes:
    """At most `limit` bytes of a file-like object, read in chunks so that `deadline` is checked as it goes;
    ``network``: each block is charged to the run's budget (:func:`spend`) as it arrives."""
    parts, total = [], 0
    while True:
        if deadline is not None:
            deadline.left()
        block = stream.read(min(chunk, limit + 1 - total))
        if not block:
            return b"".join(parts)
        if network:
            spend(len(block))
        total += len(block)
        if total > limit:
            raise TooLarge(_more_than(limit))
        parts.append(block)


# --------------------------------------------------------------------------- pasted commands
# Environment assignments in a pasted command line, and outside text a command cannot carry exactly.

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def has_hidden(text: object) -> bool:
    """Whether `text` holds a character that `shown` would escape (a control, bidi or separator character)."""
    s = text if isinstance(text, str) else str(text)
    return any(unicodedata.category(ch) in _HIDDEN_CATEGORIES for ch in s)


def paste_env(env: dict[str, str], args: list[str] | tuple[str, ...]) -> str:
    """`NAME=value ... command args` for a person to paste: each value and word quoted, each name checked
    (a quoted `'NAME=value'` would be run as a command, not read as an assignment)."""
    for name in env:
        if not _ENV_NAME_RE.fullmatch(name):
            raise Untrusted(f"environment name {shown(repr(name), 80)} is not a shell variable name")
    assigns = " ".join(f"{name}={shlex.quote(str(value))}" for name, value in env.items())
    return shown(f"{assigns} {shlex.join(str(a) for a in args)}" if assigns else shlex.join(str(a) for a in args), limit=10_000)


def _more_than(limit: int) -> str:
    return f"more than {limit >> 20} MiB" if limit >= 1 << 20 else f"more than {limit} bytes"


# --------------------------------------------------------------------------- URLs

_URL_RE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")  # RFC 3986's characters: no space, CR, LF, quote


def is_web_url(url: object) -> bool:
    """An http(s) URL with a host and no whitespace or control character (what a listing may link)."""
    if not isinstance(url, str) or len(url) > 8192 or not _URL_RE.fullmatch(url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


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


# --------------------------------------------------------------------------- files opened by path


def open_regular(path: str | os.PathLike, what: str | None = None):
    """A binary file object for ``path``, refused (Untrusted) unless it is a regular file.

    Opened with O_NONBLOCK, then checked with fstat on the open descriptor: a FIFO is never waited on and a
    device (/dev/zero, a link to it) never read; the check is on what was opened, not on a name looked up
    again later."""
    name = what or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise Untrusted(f"{shown(name, 300)}: {err.strerror or err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a device"
            raise Untrusted(f"{shown(name, 300)}: not a regular file ({kind})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, limit: int, what: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (:func:`open_regular`), else Untrusted."""
    with open_regular(path, what) as f:
        try:
            return read_capped(f, limit)
        except TooLarge as err:
            raise TooLarge(f"{shown(what or str(path), 300)}: {err}") from None


def text(raw: bytes, what: str) -> str:
    """UTF-8 text, or Untrusted naming where the bad bytes are."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Untrusted(f"{shown(what, 300)}: not UTF-8 text (byte {err.start})") from None


# --------------------------------------------------------------------------- JSON and TOML

MAX_DEPTH = 32  # the farm's documents nest 4 or 5 levels; json and tomllib recurse, so depth is bounded here


def _depth_ok(value: object, limit: int) -> bool:
    todo = [(value, 1)]
    while todo:
        v, d = todo.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            todo += [(x, d + 1) for x in v.values()]
        elif isinstance(v, list):
            todo += [(x, d + 1) for x in v]
    return True


def _nesting(raw: str, limit: int) -> bool:
    """Whether brackets nest deeper than ``limit`` anywhere (a fast over-estimate: strings are not skipped,
    so only a document that passes is trusted without the exact walk)."""
    depth = best = 0
    for m in re.finditer(r"[\[{]|[\]}]", raw):
        depth = depth + 1 if m.group() in "[{" else depth - 1
        best = max(best, depth)
        if best > limit:
            return True
    return False


def _load(parse, error_type, say, raw: bytes | str, what: str, max_depth: int, precheck: bool) -> object:
    """``parse(raw)``, refused (Untrusted) when it is not UTF-8, raises ``error_type`` (told as ``say(err)``),
    or nests deeper than ``max_depth``. ``precheck`` scans the text's brackets first so that a flat document
    skips the walk (JSON only: TOML nests by dotted keys, which no bracket shows)."""
    s = text(raw, what) if isinstance(raw, bytes | bytearray) else raw
    try:
        doc = parse(s)
    except RecursionError:
        raise Untrusted(f"{shown(what, 300)}: nested deeper than {max_depth} levels") from None
    except error_type as err:
        raise Untrusted(f"{shown(what, 300)}: {say(err)}") from None
    if (not precheck or _nesting(s, max_depth)) and not _depth_ok(doc, max_depth):
        raise Untrusted(f"{shown(what, 300)}: nested deeper than {max_depth} levels")
    return doc


def load_json(raw: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> object:
    """A JSON document, refused (Untrusted) when it is not UTF-8, not JSON, or nested deeper than ``max_depth``."""
    return _load(json.loads, ValueError, lambda e: f"not JSON ({shown(e, 200)})", raw, what, max_depth, True)


def load_toml(raw: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> dict:
    """A TOML document, refused (Untrusted) when it is not UTF-8, not TOML, or nested deeper than ``max_depth``."""
    import tomllib

    say = lambda e: f"not valid TOML: {shown(e, 300)}"
    return _load(tomllib.loads, tomllib.TOMLDecodeError, say, raw, what, max_depth, False)


def expect(value: object, types: type | tuple[type, ...], what: str) -> object:
    """``value`` when it has one of ``types`` (a bool is not an int here), else Untrusted naming it."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise Untrusted(f"{shown(what, 300)}: expected {names}, got {type(value).__name__}")
    return value


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
        raise TooLarge(f"{shown(label, 300)}: {info.compress_size} bytes compressed: it unpacks to {_more_than(limit)}, "
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


# --------------------------------------------------------------------------- shapes, numbers, markers


def field(doc: object, key: str, types: type | tuple[type, ...], what: str, default: object = ...) -> object:
    """``doc[key]`` checked for type (:func:`expect`), ``doc`` itself checked to be an object first: a list or a
    string where an object is meant is Untrusted naming ``what``, never an AttributeError. ``default``: the
    value when the key is absent (else absent is refused)."""
    expect(doc, dict, what)
    if key not in doc:
        if default is ...:
            raise Untrusted(f"{shown(what, 300)}: no {shown(repr(key), 80)}")
        return default
    return expect(doc[key], types, f"{what}.{key}")


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


# --------------------------------------------------------------------------- what is printed


def neutral(text: str) -> str:
    """``text`` with every character :func:`shown` escapes escaped, newlines and tabs kept, nothing cut."""
    if text.isprintable():
        return text
    return "".join(c if c in "\n\t" or c.isprintable() else shown(c, 1) for c in text)


class _Guarded:
    """A text stream that writes :func:`neutral` text to the stream it wraps (everything else passes)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(neutral(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def unguarded(stream):
    """The stream under :func:`guard_output`'s filter, for the farm's own terminal drawing only (rich's tables and
    progress style with escapes of their own); outside text drawn there is passed through :func:`neutral` first."""
    return stream._stream if isinstance(stream, _Guarded) else stream


def guard_output() -> None:
    """Make every later print of this process go through one filter: ESC/OSC/CR controls, bidi overrides and
    lone surrogates from outside data are written as escapes (``\\x1b``, ``\\u202e``, ``\\udcff``), never
    obeyed by the terminal nor a UnicodeEncodeError; a character the stream cannot encode is escaped too.
    Idempotent; called by each command line's entry point (the farm's CLI, the doctor)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Guarded):
            continue
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")
        setattr(sys, name, _Guarded(stream))


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
        _BUDGETS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _BUDGETS.remove(self)
        super().__exit__(*exc)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


_BUDGETS: list[RunBudget] = []


def spend(n: int) -> None:
    """Charge ``n`` bytes read from the network to every run budget in force (none: nothing to charge)."""
    for b in _BUDGETS:
        b.charge(n)


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
