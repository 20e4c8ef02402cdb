"""What the build host offers to builds: its CA bundle, its pip settings, its Pythons, its machine.

Builds inherit these so they behave like a ``pip install`` typed on the host would,
behind the same corporate proxy and with the same local wheelhouses.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from builder.errors import UsageError

CACHE_ROOT = Path(os.environ.get("MAMBA_FARM_CACHE", Path.home() / ".cache" / "mamba-farm"))
DEFAULT_WHEELHOUSE = CACHE_ROOT / "wheelhouse"


def _pip_config() -> dict[str, str]:
    """``pip config list`` of the running interpreter, as {key: value} (later scopes win)."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    conf: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    return conf


@functools.lru_cache(maxsize=1)
def pip_config() -> dict[str, str]:
    return _pip_config()


def find_ca_bundle(override: Path | None = None) -> Path | None:
    """The CA bundle builds must trust: --ca-bundle, else pip's cert, SSL_CERT_FILE, REQUESTS_CA_BUNDLE."""
    if override is not None:
        if not Path(override).is_file():
            raise UsageError(f"--ca-bundle {override}: no such file", hint="pass a PEM file with your CA certificates")
        return Path(override)
    for candidate in (
        os.environ.get("PIP_CERT"),
        pip_config().get("cert"),
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@dataclass(frozen=True)
class PipSettings:
    """Host pip settings a build reuses; local dirs are mounted read-only at the same path."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraint: Path | None = None
    timeout: str | None = None
    local_dirs: tuple[Path, ...] = field(default=())

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
        if self.index_url:
            env["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.find_links:
            env["PIP_FIND_LINKS"] = " ".join(self.find_links)
        if self.constraint:
            env["PIP_CONSTRAINT"] = str(self.constraint)
        if self.timeout:
            env["PIP_DEFAULT_TIMEOUT"] = self.timeout
        return env


def _local_root(location: str) -> Path | None:
    """The host directory a find-links/index location needs mounted (None for remote URLs)."""
    if location.startswith("file://"):
        path = Path(urlparse(location).path)
    elif "://" in location:
        return None
    else:
        path = Path(location)
    if not path.exists():
        return None
    # A PEP 503 tree at .../simple usually links to files beside it (../files).
    return path.parent if path.name == "simple" else path


def host_pip_settings(wheelhouses: list[Path]) -> PipSettings:
    conf = pip_config()
    env = os.environ
    extra = tuple((env.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url", "")).split())
    links = [str(Path(w).resolve()) for w in wheelhouses]
    for link in (env.get("PIP_FIND_LINKS") or conf.get("find-links", "")).split():
        if link not in links:
            links.append(link)
    constraint = env.get("PIP_CONSTRAINT") or conf.get("constraint")
    local: list[Path] = []
    for loc in [*links, *extra]:
        root = _local_root(loc)
        if root is not None and root not in local:
            local.append(root)
    cpath = Path(constraint) if constraint and Path(constraint).is_file() else None
    if cpath is not None:
        local.append(cpath)
    return PipSettings(
        index_url=env.get("PIP_INDEX_URL") or conf.get("index-url"),
        extra_index_urls=extra,
        find_links=tuple(links),
        constraint=cpath,
        timeout=env.get("PIP_DEFAULT_TIMEOUT") or conf.get("timeout") or conf.get("default-timeout"),
        local_dirs=tuple(local),
    )


def default_wheelhouses() -> list[Path]:
    return [DEFAULT_WHEELHOUSE] if DEFAULT_WHEELHOUSE.is_dir() else []


def pyenv_pythons() -> dict[str, Path]:
    """{"3.11": prefix} for each CPython the host's pyenv has (newest patch per minor)."""
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    root = root or str(Path.home() / ".pyenv")
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    versions = Path(root) / "versions"
    if not versions.is_dir():
        return {}
    for d in versions.iterdir():
        parts = d.name.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or not (d / "bin" / "python3").exists():
            continue
        key = f"{parts[0]}.{parts[1]}"
        ver = tuple(int(p) for p in parts)
        if key not in found or ver > found[key][0]:
            found[key] = (ver, d)
    return {k: v[1] for k, v in sorted(found.items())}


@functools.cache
def url_reachable(url: str, timeout: float = 8.0) -> bool:
    """Whether an index URL answers at all (an unreachable extra index costs pip minutes of retries)."""
    import ssl
    import urllib.request

    if url.startswith("file://") or "://" not in url:
        return _local_root(url) is not None
    ca = find_ca_bundle()
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout, context=ctx):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except Exception:
        return False


def torch_index_args(index_url: str | None) -> list[str]:
    """pip's arguments for torch's own index INDEX_URL when it answers; none otherwise: torch then comes from the
    host's indexes and wheelhouses (an unreachable index would cost minutes of pip retries per install)."""
    return ["--extra-index-url", index_url] if index_url and url_reachable(index_url) else []


def host_machine() -> str:
    """This host's machine as wheel platform tags spell it (x86_64, aarch64)."""
    import platform

    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)
