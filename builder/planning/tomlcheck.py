"""Checking a TOML document's shape with errors that name file:line: key (matrix.toml, recipes).

The validators of `builder/planning/matrix.py` and `builder/planning/recipes.py` share this vocabulary: how a value,
its type and a key path are shown, and the checks every table needs (a table, its keys with a
did-you-mean, a string matching a pattern). Each subclass names its error class and adds its own checks.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, NoReturn

import tomllib

from builder.errors import FarmError
from builder.planning.tomllines import TomlLines

_TYPE_NAMES = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a float",
    list: "an array",
    dict: "a table",
}


MAX_TOML_BYTES = 64 << 20  # matrix.toml with 10,000 excludes is about 1 MB


def read_toml(path: Path, error: type[FarmError], missing: str, missing_hint: str) -> tuple[str, dict]:
    """PATH's text and data; ``error`` as ``FILE[:LINE]: ...`` when it is absent, unreadable, not UTF-8
    or not TOML (``missing``/``missing_hint`` say what an absent file means)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero would never end
            raise error(f"{path}: not a regular file", hint=missing_hint)
        if st.st_size > MAX_TOML_BYTES:
            raise error(
                f"{path}: {st.st_size >> 20} MiB, more than the {MAX_TOML_BYTES >> 20} MiB a TOML file here may be"
            )
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: {missing}", hint=missing_hint) from None
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte {err.start})") from None
    try:
        return text, tomllib.loads(text)
    except RecursionError:  # tomllib recurses on nested arrays and inline tables
        raise error(f"{path}: nested too deeply to be a farm TOML file") from None
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err)) or "invalid TOML"
        where, col = (f"{path}:{m.group(1)}", f" (column {m.group(2)})") if m else (f"{path}", "")
        raise error(f"{where}: TOML syntax error: {msg}{col}", hint="see https://toml.io for the syntax") from None


def type_name(value: Any) -> str:
    for t, name in _TYPE_NAMES.items():
        if type(value) is t:
            return name
    return type(value).__name__


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 70 else text[:67] + '..."'


def dotted(path: tuple) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"#{part + 1}"
        else:
            p = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += ("." if out else "") + p
    return out


_BOUND_RE = re.compile(r"\{(\d+),(\d+)\}\)?\$?$")  # a pattern's trailing {min,max}: its length rule


def broken_rule(value: str, pattern: re.Pattern) -> str:
    """Which of a text pattern's rules ``value`` breaks, by its number: " (444 characters; at most 300)", or the
    control character it holds; "" when neither says why (the pattern's own description does)."""
    bound = _BOUND_RE.search(pattern.pattern)
    if bound and len(value) > int(bound.group(2)):
        return f" ({len(value)} characters; at most {bound.group(2)})"
    if bound and len(value) < int(bound.group(1)):
        return f" ({len(value)} characters; at least {bound.group(1)})"
    control = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        return f" (it holds the control character {control!r}: one line, no tabs)"
    return ""


class TomlChecker:
    """Raises ``error`` (a FarmError subclass) as ``FILE:LINE: key.path: message``."""

    error: type[FarmError] = FarmError

    def __init__(self, path: Path, lines: TomlLines) -> None:
        self.path = path
        self.lines = lines

    def line(self, path: tuple) -> int | None:
        return self.lines.line(path)

    def fail(self, path: tuple, message: str, hint: str | None = None) -> NoReturn:
        line = self.line(path) if path else None
        where = f"{self.path}:{line}" if line else f"{self.path}"
        key = f" {dotted(path)}:" if path else ""
        raise self.error(f"{where}:{key} {message}", hint=hint)

    def table(self, value: Any, path: tuple) -> dict:
        if not isinstance(value, dict):
            self.fail(path, f"must be a table, got {type_name(value)} {show(value)}")
        return value

    def keys(self, table: dict, path: tuple, allowed: tuple, required: tuple = ()) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
                mean = f'; did you mean "{close[0]}"?' if close else ""
                self.fail(path + (key,), f"unknown key {show(key)}{mean} (valid keys: {', '.join(allowed)})")
        for key in required:
            if key not in table:
                self.fail(path, f'missing key "{key}" (required keys: {", ".join(required)})')

    def string(self, value: Any, path: tuple, pattern: re.Pattern, what: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"{what} must be a string, got {type_name(value)} {show(value)}")
        if not pattern.fullmatch(value):
            self.fail(path, f"{show(value)} is not {what}{broken_rule(value, pattern)}")
        return value
