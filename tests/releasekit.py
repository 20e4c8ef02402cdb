"""For the release rehearsal's tests: GitHub's release-asset host, stood in for on 127.0.0.1.

pip and setup.py reach the real asset URLs through ``https_proxy``: a loopback proxy that answers CONNECT
github.com:443 itself (a throwaway CA the test trusts) from the gh stand-in's folder, and tunnels every other host.
"""

from __future__ import annotations

import functools
import http.server
import os
import select
import socket
import ssl
import subprocess
from contextlib import contextmanager
from pathlib import Path

from indexkit import running

GITHUB = "github.com"


# git with no user or system configuration and a fixed author, for the repositories tests make
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}  # fmt: skip


def git(cwd: Path, *args: str, **env: str) -> str:
    """git ARGS in CWD (with ENV over GIT_ENV); its stdout, stripped."""
    return subprocess.run(["git", "-C", str(cwd), *args], env={**GIT_ENV, **env}, check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def make_certs(folder: Path, system_bundle: str = "/etc/ssl/certs/ca-certificates.crt") -> tuple[Path, Path, Path]:
    """(CA bundle = the system's + a throwaway CA, github.com's certificate, its key) made with openssl."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "gh.key", "gh.csr", "gh.pem"))

    def ssl_(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ssl_("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
         "-subj", "/CN=release rehearsal CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    ssl_("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={GITHUB}")
    ext = folder / "gh.ext"
    ext.write_text(f"subjectAltName=DNS:{GITHUB}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    ssl_("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    bundle = folder / "bundle.pem"
    system = Path(system_bundle).read_text() if Path(system_bundle).exists() else ""
    bundle.write_text(system + "\n" + ca.read_text())
    return bundle, cert, key


class _AssetHost(http.server.SimpleHTTPRequestHandler):
    """CONNECT github.com:443 is answered here (TLS with the stand-in's certificate); then plain GETs of
    /<owner>/<repo>/releases/download/<tag>/<file> from the gh stand-in's folder."""

    tls: ssl.SSLContext
    requests: list[str]

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
        host, _, port = self.path.rpartition(":")
        if host != GITHUB:
            self._tunnel(host, int(port or 443))  # everything else (the machine's usual indexes) as it is
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.connection = self.tls.wrap_socket(self.connection, server_side=True)
        self.rfile = self.connection.makefile("rb", self.rbufsize)
        self.wfile = self.connection.makefile("wb", 0)
        self.close_connection = False  # the next request comes through the tunnel

    def _tunnel(self, host: str, port: int) -> None:
        try:
            upstream = socket.create_connection((host, port), timeout=30)
        except OSError as err:
            self.send_error(502, f"cannot reach {host}:{port}: {err}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        conns = [self.connection, upstream]
        try:
            while True:
                ready, _, broken = select.select(conns, [], conns, 60)
                if broken or not ready:
                    break
                for c in ready:
                    data = c.recv(65536)
                    if not data:
                        return
                    (upstream if c is self.connection else self.connection).sendall(data)
        finally:
            upstream.close()
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


@contextmanager
def github_assets(gh_home: Path, certs: tuple[Path, Path, Path]):
    """The proxy URL (for https_proxy) answering github.com's release downloads from GH_HOME; yields
    (proxy URL, the list of paths requested)."""
    bundle, cert, key = certs
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    requests: list[str] = []
    handler = type("Handler", (_AssetHost,), {"tls": ctx, "requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(gh_home)))
    with running(server) as url:
        yield url, requests


def through_assets(env: dict, proxy: str, bundle: Path) -> dict:
    """ENV with github.com reached through the stand-in (pip and urllib both read these)."""
    return {**env, "https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost", "SSL_CERT_FILE": str(bundle), "PIP_CERT": str(bundle),
            # requests (pip's) prefers REQUESTS_CA_BUNDLE over pip's own --cert when it is set, as on this host
            "REQUESTS_CA_BUNDLE": str(bundle), "CURL_CA_BUNDLE": str(bundle)}  # fmt: skip


def venv_with_torch(path: Path, python: str, torch_req: str, env: dict, *more: str) -> Path:
    """A venv of its own with pip and TORCH_REQ (``torch==X.Y.Z``: the farm's smoke-test venv of that Python and
    torch, hard-linked, tests/sharedruns.py), and MORE from this machine's usual pip settings (its wheelhouse)."""
    from sharedruns import torch_venv

    return torch_venv(path, python, torch_req, {k: v for k, v in env.items() if k != "PIP_CONFIG_FILE"}, *more)


class _GitHttp(http.server.BaseHTTPRequestHandler):
    """git's smart HTTP, by git itself: each request handed to ``git http-backend`` (CGI) over ``root``."""

    root: Path
    pushes: list[str]

    def log_message(self, *args) -> None:
        pass

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            "PATH": os.environ.get("PATH", ""), "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "rehearsal", "REMOTE_ADDR": "127.0.0.1",  # REMOTE_USER: receive-pack (push) is on
        }  # fmt: skip
        if self.headers.get("Content-Encoding") == "gzip":
            env["HTTP_CONTENT_ENCODING"] = "gzip"
        if path.endswith("/git-receive-pack"):
            self.pushes.append(path)
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = [ln.split(":", 1) for ln in head.decode("latin-1").splitlines() if ":" in ln]
        status = next((v.strip() for k, v in headers if k.lower() == "status"), "200 OK")
        self.send_response(int(status.split()[0]))
        for k, v in headers:
            if k.lower() != "status":
                self.send_header(k, v.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _cgi


@contextmanager
def git_http(root: Path):
    """http://127.0.0.1:<port>/ serving the bare repositories under ROOT for fetch and push (git's own
    http-backend); yields (base URL, the list of push requests)."""
    pushes: list[str] = []
    handler = type("Handler", (_GitHttp,), {"root": root, "pushes": pushes})
    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield url, pushes
