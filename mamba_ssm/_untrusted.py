"""The one layer for data from outside the process: names, capped reads, deadlines, shown text, pasted commands.

Every reader of outside data (index listings, wheels, sdists, manifests, recipes, matrices, cache state,
pasted text, command-line paths) goes through these rules, so that one rule has one home:
- a name that becomes a path is checked against a fixed alphabet before it is used;
- a read is capped in size, and a request or command has an overall deadline (a socket timeout alone
  never trips on a server that trickles a byte at a time);
- text shown to a person has its control and bidi characters made visible, never obeyed;
- a command printed for people to paste is quoted.

Standard library only, and no import of torch or builder: the doctor, setup.py's prebuilt lookup and the
farm all import it.
"""

from __future__ import annotations

import re
import shlex
import time
import unicodedata

SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A file name the farm reads or writes on an index's word: PEP 427/625 names use only these.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")


class Untrusted(ValueError):
    """Outside data that breaks a rule; the message names the value (shown safely) and the rule."""


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


class Deadline:
    """An overall time limit for one request or one command, checked between reads."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left (for a socket timeout), or Untrusted once the deadline has passed."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise Untrusted(f"{self.what}: no answer within {self.seconds:g} s")
        return left


def read_capped(stream, limit: int, deadline: Deadline | None = None, chunk: int = 1 << 16) -> bytes:
    """At most `limit` bytes of a file-like object, read in chunks so that `deadline` is checked as it goes."""
    parts, total = [], 0
    while True:
        if deadline is not None:
            deadline.left()
        block = stream.read(min(chunk, limit + 1 - total))
        if not block:
            return b"".join(parts)
        total += len(block)
        if total > limit:
            raise Untrusted(f"more than {limit >> 20} MiB" if limit >= 1 << 20 else f"more than {limit} bytes")
        parts.append(block)
