"""Shared by the index tests: serve a folder on 127.0.0.1, make venvs, run real pip and uv in them."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list | None = None  # (serve's ``log``) every GET's path, for tests of what an installer fetched

    def log_message(self, *args) -> None:  # keep pytest output readable
        pass

    def do_GET(self) -> None:
        if self.requests is not None:
            self.requests.append(self.path)
        super().do_GET()


@contextmanager
def running(server: http.server.HTTPServer):
    """SERVER answering on a daemon thread until the block ends; yields its http://127.0.0.1:<port> base."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve(directory: Path, port: int = 0, log: list | None = None):
    """http://127.0.0.1:<port>/ over ``directory`` (symlinks followed, as a static host would after rsync -L);
    PORT 0 takes a free one; ``log``: a list that gets each GET's path."""
    handler = functools.partial(type("_Handler", (_QuietHandler,), {"requests": log}), directory=str(directory))
    with running(http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)) as url:
        yield url


def find_python(version: str) -> str | None:
    """An interpreter for ``version`` (3.11): pyenv's installs, then PATH."""
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        for cand in sorted(Path(root, "versions").glob(f"{version}.*")):
            exe = cand / "bin" / "python3"
            if exe.exists():
                return str(exe)
    except (OSError, subprocess.CalledProcessError):
        pass
    return shutil.which(f"python{version}")


def isolated_env(tmp: Path) -> dict:
    """No pip/uv configuration of this machine (its find-links and extra indexes) leaks into a test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_CACHE_DIR="1",
        UV_NO_CONFIG="1",
        UV_CACHE_DIR=str(tmp / "uv-cache"),
        UV_PYTHON_DOWNLOADS="never",
    )
    return env


def uv_bin() -> str:
    from uv import find_uv_bin  # the `uv` package of the dev group

    return find_uv_bin()


def make_venv(path: Path, python: str, env: dict) -> Path:
    """A bare venv (no pip inside: pip runs from the test's venv with --python)."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True, env=env)
    return path / "bin" / "python"


def pip(venv_python: Path, args: list[str], env: dict, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--python", str(venv_python), *args]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def uv_pip(venv_python: Path, args: list[str], env: dict, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [uv_bin(), "pip", *args[:1], "--python", str(venv_python), *args[1:]]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def installed(venv_python: Path) -> dict:
    """Installed mamba-ssm version + wheel tag, and torch's version, as the venv itself reports them."""
    code = (
        "import importlib.metadata as m, json;"
        "d = m.distribution('mamba-ssm');"
        "tags = [l.split(': ')[1] for l in d.read_text('WHEEL').splitlines() if l.startswith('Tag: ')];"
        "print(json.dumps({'mamba': d.version, 'tags': tags, 'torch': m.version('torch')}))"
    )
    # -I: not the current directory (a checkout holds mamba_ssm.egg-info) nor PYTHON* variables
    out = subprocess.run([str(venv_python), "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    return json.loads(out)
