"""Which executor runs a build: ``--executor auto|docker|host``."""

from __future__ import annotations

from builder.building.images.engine import connect
from builder.building.executors import BuildOptions, Executor
from builder.building.executors.docker import DockerExecutor
from builder.building.executors.host import HostExecutor
from builder.errors import FarmError, UsageError

EXECUTORS = ("auto", "docker", "host")


def select(name: str, options: BuildOptions) -> Executor:
    """The executor NAME; ``auto`` is docker when an engine answers, else host (and says which)."""
    if name not in EXECUTORS:
        raise UsageError(f"--executor {name}: unknown executor", hint=f"use one of: {', '.join(EXECUTORS)}")
    if name in ("auto", "docker"):
        try:
            client = connect()
        except FarmError as err:
            if name == "docker":
                raise
            options.log(f"executor: host (no container engine answers: {err})")
            return HostExecutor(options)
        options.log(f"executor: docker (engine {client.version().get('Version', '?')})")
        return DockerExecutor(client, options)
    options.log("executor: host")
    return HostExecutor(options)
