"""Where a farm run's time goes: with ``MAMBA_FARM_TIMINGS=FILE`` set, one JSON line per costly step.

A step is a base image, a toolchain image, a torch volume or venv, or a build's compile
(wall and CPU seconds). ``MAMBA_FARM_TIMINGS_CONTEXT`` names what asked for it (the test suite
sets it to the running test), so that a step made twice in one CI run shows as two lines.
``benchmarks/ci_time.py`` reads the lines a CI log carries. Unset: nothing is written.
"""

from __future__ import annotations

import json
import os

KINDS = ("base", "image", "torch", "compile")


def record(kind: str, what: str, seconds: float, cpu: float | None = None) -> None:
    """Append one step's cost to $MAMBA_FARM_TIMINGS (one write, so parallel builds never interleave a line)."""
    path = os.environ.get("MAMBA_FARM_TIMINGS")
    if not path:
        return
    row = {"kind": kind, "what": what, "seconds": round(seconds, 1)}
    if cpu is not None:
        row["cpu"] = round(cpu, 1)
    context = os.environ.get("MAMBA_FARM_TIMINGS_CONTEXT")
    if context:
        row["context"] = context
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
