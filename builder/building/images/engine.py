"""The container engine: a client that answers, and image builds (one streaming loop for every farm image).

The docker SDK is imported on first use: commands that never touch an engine start without it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from builder.building.images.images import LABEL
from builder.errors import EngineUnavailable, FarmError


def connect():
    """A docker client that answered a ping, or EngineUnavailable naming where it looked."""
    import docker

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as err:  # the SDK raises DockerException, requests and OS errors alike
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise EngineUnavailable(
            f"no container engine answers at {where} ({reason})",
            hint="start one (scripts/bootstrap-host.sh starts dockerd), point DOCKER_HOST at it, "
            "or build on the host with --executor host",
        ) from None
    return client


def image_exists(client, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def made_once(client, tag: str, make: Callable[[], object]) -> bool:
    """Call MAKE unless the image TAG exists; whether it was called.

    A host-wide lock (the farm cache's ``locks/``) is held while TAG is checked and made, so two farm runs on
    one host (two test workers, two jobs of a rehearsed release) make an image once: the second waits, then
    finds it. MAKE may fail; the lock is released either way.
    """
    from filelock import FileLock

    from builder.facts.hostenv import CACHE_ROOT

    if image_exists(client, tag):
        return False
    locks = CACHE_ROOT / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f"image-{re.sub(r'[^A-Za-z0-9._-]', '_', tag)}.lock")):
        if image_exists(client, tag):  # made by another run while this one waited
            return False
        make()
        return True


def build_image(
    client,
    tag: str,
    dockerfile: str,
    *,
    what: str,
    labels: Mapping[str, str] | None = None,
    files: Mapping[str, Path] | None = None,
    stage: Callable[[Path], None] | None = None,
    log_path: Path | None = None,
    error: type[FarmError] = EngineUnavailable,
    hint: str | None = None,
    platform: str | None = None,
) -> float:
    """Build DOCKERFILE into TAG, labelled ``org.mamba-farm=1`` plus LABELS; the seconds it took.

    The build context holds the Dockerfile, FILES (context path -> host file or folder) and
    whatever STAGE(context dir) puts there. The engine's output goes to LOG_PATH as it comes;
    a failure raises ERROR ("WHAT failed to build: ...") with the output's last lines. PLATFORM
    (linux/arm64) builds for another machine, its RUN steps under emulation.
    """
    import docker.errors

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mamba-farm-ctx-") as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(dockerfile)
        for name, host in (files or {}).items():
            if host.is_dir():
                shutil.copytree(host, ctx / name)
            else:
                (ctx / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(host, ctx / name)
        if stage is not None:
            stage(ctx)
        lines: list[str] = []
        with open(log_path, "w") if log_path else contextlib.nullcontext() as log:
            try:
                stream = client.api.build(
                    path=str(ctx), tag=tag, labels={LABEL: "1", **(labels or {})}, rm=True, forcerm=True, decode=True,
                    **({"platform": platform} if platform else {}),
                )
                for chunk in stream:
                    if "stream" in chunk:
                        lines.append(chunk["stream"])
                        if log:
                            log.write(chunk["stream"])
                            log.flush()
                    if "error" in chunk:
                        tail = "\n".join("".join(lines).strip().splitlines()[-20:])
                        where = f"\nlog: {log_path}" if log_path else ""
                        raise error(f"{what} failed to build: {chunk['error'].strip()}\n{tail}{where}", hint=hint)
            except docker.errors.APIError as err:
                raise error(f"{what} failed to build: {err}", hint=hint) from None
    return time.monotonic() - started
