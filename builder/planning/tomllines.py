"""Where things are in a TOML file: the line of each key path, for file:line:key errors.

tomllib keeps no positions, so a small scanner maps each key path (and each array element)
to its line. It only ever runs on text tomllib has accepted, and it is best effort: a path it
cannot place gets its parent's line.
"""

from __future__ import annotations


class TomlLines:
    """``TomlLines(text).line(("images", "cuda", "base"))``: that key's line (or its parent's), None if unplaced."""

    def __init__(self, text: str) -> None:
        self.at: dict[tuple, int] = {}
        self._text = text
        self._i = 0
        self._line = 1
        self._scanned = False

    def line(self, path: tuple) -> int | None:
        if not self._scanned:  # only an error needs positions: scan on first use
            self._scanned = True
            try:
                self._document()
            except (IndexError, ValueError):
                pass  # positions are a convenience; the parsed values are already valid TOML
        path = tuple(path)
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return None

    def _mark(self, path: tuple) -> None:
        for k in range(1, len(path) + 1):
            self.at.setdefault(path[:k], self._line)

    def _peek(self, k: int = 0) -> str:
        j = self._i + k
        return self._text[j] if j < len(self._text) else ""

    def _advance(self, k: int = 1) -> None:
        for _ in range(k):
            if self._peek() == "\n":
                self._line += 1
            self._i += 1

    def _skip(self, newlines: bool) -> None:
        while self._i < len(self._text):
            c = self._peek()
            if c in " \t\r" or (newlines and c == "\n"):
                self._advance()
            elif c == "#":
                while self._i < len(self._text) and self._peek() != "\n":
                    self._advance()
            else:
                return

    def _document(self) -> None:
        table: tuple = ()
        aot: dict[tuple, int] = {}
        while True:
            self._skip(newlines=True)
            if self._i >= len(self._text):
                return
            if self._peek() == "[":
                double = self._peek(1) == "["
                self._advance(2 if double else 1)
                path = self._key("]")
                self._advance(2 if double else 1)
                if double:
                    aot[path] = aot.get(path, -1) + 1
                    path = path + (aot[path],)
                self._mark(path)
                table = path
            else:
                key = table + self._key("=")
                self._mark(key)
                self._advance()  # "="
                self._value(key)

    def _key(self, end: str) -> tuple:
        parts, cur = [], ""
        while self._peek() != end:
            c = self._peek()
            if c in "\"'":
                cur += self._string()
                continue
            if c == ".":
                parts.append(cur.strip())
                cur = ""
            elif c == "\n" or c == "":
                raise ValueError("unterminated key")
            else:
                cur += c
            self._advance()
        parts.append(cur.strip())
        return tuple(p.strip("\"'") for p in parts)

    def _string(self) -> str:
        q = self._peek()
        if self._text.startswith(q * 3, self._i):
            self._advance(3)
            start = self._i
            while not self._text.startswith(q * 3, self._i):
                self._advance(2 if q == '"' and self._peek() == "\\" else 1)
            out = self._text[start : self._i]
            self._advance(3)
            return out
        self._advance()
        start = self._i
        while self._peek() != q:
            self._advance(2 if q == '"' and self._peek() == "\\" else 1)
        out = self._text[start : self._i]
        self._advance()
        return q + out + q

    def _value(self, path: tuple) -> None:
        self._skip(newlines=False)
        c = self._peek()
        if c == "[":
            self._advance()
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self._advance()
                    return
                self._mark(path + (index,))
                self._value(path + (index,))
                self._skip(newlines=True)
                if self._peek() == ",":
                    self._advance()
                index += 1
        elif c == "{":
            self._advance()
            while True:
                self._skip(newlines=False)
                if self._peek() == "}":
                    self._advance()
                    return
                if self._peek() == ",":
                    self._advance()
                    continue
                key = path + self._key("=")
                self._mark(key)
                self._advance()
                self._value(key)
        elif c in "\"'":
            self._string()
        else:
            while self._peek() not in ",]}\n#" and self._i < len(self._text):
                self._advance()
