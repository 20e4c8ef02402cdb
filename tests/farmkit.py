"""Helpers for the farm's end-to-end tests: run `python -m builder build` for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO

OWNER_LABEL = "org.mamba-farm.owner"


@dataclass
class Run:
    rc: int
    out: str
    seconds: float


def build_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "builder", "build", *args]


def run_build(*args: str, env: dict | None = None, timeout: float = 3600) -> Run:
    t0 = time.monotonic()
    proc = subprocess.run(
        build_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)


def docker_client():
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:  # no engine here: the docker tests cannot run
        pytest.skip(f"no Docker engine: {err}")
    return client


def farm_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True)


def ci_spec(accelerator: str = "cpu", python: str = "3.11"):
    from builder.planning.plan import load_plan

    return next(b for b in load_plan(profile="ci").builds if b.accelerator == accelerator and b.python == python)


def partial_files(dist: Path) -> list[Path]:
    wheels = dist / "wheels"
    done = (".whl", ".spec.json", ".evidence.json")
    return [p for p in wheels.iterdir() if not p.name.endswith(done)] if wheels.exists() else []


def checked_evidence(dist: Path, out: str, *, numerics: bool, modules: tuple[str, ...] = ()) -> list[dict]:
    """Each wheel's evidence record as the run left it, held against what the run did: the record is of the wheel's
    bytes and tags, says the smoke test imported MODULES (and ran numerics on the CPU exactly when NUMERICS), the
    build printed its line from it, the index serves it beside the wheel, and the evidence ledger
    (builder/data/evidence.json) claims no stronger tier for this kind of wheel than this run proves."""
    import hashlib
    import json

    from builder.publishing import tiers
    from builder.verifying import evidence

    records = []
    for wheel in sorted((dist / "wheels").glob("*.whl")):
        rec = evidence.read(evidence.path_of(wheel), wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
        assert rec is not None, f"{wheel.name}: no evidence record"
        assert rec["verified"]["tags"] == ["-".join(wheel.name[:-4].split("-")[-3:])], rec["verified"]
        assert rec["built"]["id"] and rec["imported"] and rec["imported"]["torch"], rec
        assert set(modules) <= set(rec["imported"]["modules"]), rec["imported"]
        assert bool(rec["numerics"]) == numerics, rec["numerics"]
        assert evidence.tier(rec) == ("cpu-checked" if numerics else "compiled")
        line = f"{wheel.name}: {evidence.line(rec)}, indexed"
        assert line in out or "0 to build" in out, f"the build did not print {line!r}"
        served = dist / "index" / "files" / (wheel.name + evidence.SUFFIX)
        assert json.loads(served.read_text()) == rec
        records.append(rec)
    assert tiers.overclaims(tiers.load_ledger(), records) == []
    return records


def import_check(wheel: Path, target: Path) -> subprocess.CompletedProcess:
    """Install the wheel alone into an empty target dir and import its extension with the test torch."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True
    )
    code = (
        "import torch, mamba_ssm; from mamba_ssm.ops import selective_scan_interface as s; "
        "assert s.HAS_EXTENSION, s._IMPORT_ERROR; assert mamba_ssm.__file__.startswith(%r); "
        "print('import ok', mamba_ssm.__version__)" % str(target)
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=target.parent, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
