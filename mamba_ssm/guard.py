"""The package's guard for data from outside the process: capped reads, deadlines, shown text, pasted commands.

What the doctor, the extension reader (``elf``) and setup.py's prebuilt lookup read from outside (an index
page, an extension file, pasted text, a record) goes through these rules, and whatever they print passes
:func:`guard_output`. Standard library only, importing neither torch nor builder. The farm's own checks of
outside data (archives, zips, its folders, a run's budget) build on this module in ``builder/facts/untrusted.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import stat
import threading
import time
import unicodedata
import urllib.parse


class Untrusted(ValueError):
    """Outside data that breaks a rule; the message names the value (shown safely) and the rule."""


class TooLarge(Untrusted):
    """A read went past its cap."""


class TimedOut(Untrusted):
    """A request or a command went past its overall deadline."""


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


# What a network read is charged to (:func:`spend`): the farm's run budgets register here while in force;
# the package itself registers none.
NETWORK_METERS: list = []


def spend(n: int) -> None:
    """Charge ``n`` bytes read from the network to every meter in force (none: nothing to charge)."""
    for meter in NETWORK_METERS:
        meter.charge(n)


def read_capped(
    stream, limit: int, deadline: Deadline | None = None, chunk: int = 1 << 16, network: bool = False
) -> bytes:
    """At most `limit` bytes of a file-like object, read in chunks so that `deadline` is checked as it goes;
    ``network``: each block is charged to the meters in force (:func:`spend`) as it arrives."""
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
            raise TooLarge(more_than(limit))
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
    return shown(
        f"{assigns} {shlex.join(str(a) for a in args)}" if assigns else shlex.join(str(a) for a in args), limit=10_000
    )


def more_than(limit: int) -> str:
    """``limit`` bytes as a cap is told: "more than 16 MiB", "more than 300 bytes"."""
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


def index_url(value: str, what: str) -> str:
    """``value`` when it is one http(s) URL (:func:`is_web_url`: no whitespace, quote, brace or backslash, so no word
    of it is read as an option, a comment, an environment variable or a continued line by pip's requirements
    parser), else Untrusted naming ``what``: what is printed into a requirements file carries values only."""
    if not is_web_url(value) or "'" in value:
        raise Untrusted(f"{what} {shown(repr(value), 200)} is not one http(s) URL (no spaces, no options)")
    return value


def _version_class():
    """packaging's Version: the installed packaging, else the copy pip vendors; (None, None) where neither is. An
    optional import by name: the standalone doctor requires neither (its wheel's import walk reads statements)."""
    import importlib

    for name in ("packaging.version", "pip._vendor.packaging.version"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.Version, module.InvalidVersion
    return None, None


def pep440(value: object, what: str) -> str:
    """``value`` when it is an ASCII PEP 440 version as ``packaging`` parses it (``2.8.0+cpu``), else Untrusted
    naming ``what``. ASCII first: a case-insensitive pattern matches the Kelvin sign as a ``k``, and ``\\d`` matches
    other scripts' digits. Without packaging (and pip) only the ASCII release-and-label form is taken."""
    s = value if isinstance(value, str) else str(value)
    if not s.isascii() or not s.isprintable() or " " in s or len(s) > 128:
        raise Untrusted(f"{what} {shown(repr(s), 200)} is not a version (ASCII PEP 440)")
    version, invalid = _version_class()
    if version is None:
        if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?(?:\+[a-z0-9]+(?:[.][a-z0-9]+)*)?", s, re.IGNORECASE):
            raise Untrusted(f"{what} {shown(repr(s), 200)} is not a version (ASCII PEP 440)")
        return s
    try:
        version(s)
    except invalid:
        raise Untrusted(f"{what} {shown(repr(s), 200)} is not a version (PEP 440)") from None
    return s


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

MAX_DEPTH = 32  # the records read here nest 4 or 5 levels; json and tomllib recurse, so depth is bounded here


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


def parse_bounded(parse, error_type, say, raw: bytes | str, what: str, max_depth: int, precheck: bool) -> object:
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
    return parse_bounded(json.loads, ValueError, lambda e: f"not JSON ({shown(e, 200)})", raw, what, max_depth, True)


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
