"""What the CI set makes once per pytest run and every test file that needs it reads, each made on first use
(tests/conftest.py's session fixtures hand them out): ``ci_cpu_runs`` (the ci profile's CPU wheel in Docker:
killed, rerun, run again), ``release_dry_run`` (release.yml under act) and ``torch_venv`` (a hard-linked copy
of the farm's smoke-test venv for one Python and torch).
"""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from farmkit import REPO, build_cmd, ci_spec, docker_client, farm_containers, run_build


def log_stamps(dist: Path) -> dict[str, int]:
    """A build that runs rewrites its log: unchanged stamps mean nothing was rebuilt."""
    return {p.name: p.stat().st_mtime_ns for p in (dist / "logs").glob("*.log")}


def _build_container(client, pid: int):
    for c in farm_containers(client):
        if c.labels.get("org.mamba-farm.owner", "").endswith(f":{pid}") and "/farm/build.sh" in " ".join(
            c.attrs["Config"]["Cmd"] or []
        ):
            return c
    return None


def ci_cpu_runs(root: Path) -> SimpleNamespace:
    """The ci profile's CPU spec through ``python -m builder build --executor docker`` into ROOT/dist:
    1. started and killed (SIGTERM) while its compile runs; 2. run again: it completes; 3. run a third
    time: nothing is rebuilt."""
    client = docker_client()
    spec = ci_spec("cpu")
    dist = root / "dist"
    args = ("--profile", "ci", "--only", spec.id, "--executor", "docker", "--dist", str(dist))

    # 1. killed mid-build
    proc = subprocess.Popen(build_cmd(*args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 1800  # a cold machine builds the base and the image first
    container = None
    while time.monotonic() < deadline and proc.poll() is None:
        container = _build_container(client, proc.pid)
        if container is not None:
            break
        time.sleep(1)
    assert container is not None, f"no build container appeared:\n{proc.communicate()[0][-3000:]}"
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    killed_out = proc.communicate(timeout=120)[0]
    killed = SimpleNamespace(
        rc=proc.returncode,
        out=killed_out,
        leftovers=[
            c for c in farm_containers(client) if c.labels.get("org.mamba-farm.owner", "").endswith(f":{proc.pid}")
        ],
        wheels=sorted((dist / "wheels").glob("*")) if (dist / "wheels").exists() else [],
    )
    # 2. the rerun, 3. the run after it
    first = run_build(*args)
    wheels_after_first = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (dist / "wheels").glob("*.whl")}
    logs_after_first = log_stamps(dist)
    second = run_build(*args)
    return SimpleNamespace(
        spec=spec, dist=dist, killed=killed, first=first, second=second, wheels=wheels_after_first,
        logs=logs_after_first,
    )  # fmt: skip


def rehearsal_actions() -> Path:
    from builder.upkeep.rehearse import shared_actions

    return shared_actions(REPO)  # $REHEARSAL_ACTIONS, else shared/actions beside the checkout


def python311() -> str:
    from indexkit import find_python

    py = find_python("3.11")
    if py is None:
        pytest.skip("no Python 3.11 on this host (the workflow's PYTHON_VERSION)")
    return py


def release_dry_run(work: Path):
    """``release.yml``'s dry run (profile ``ci-stable``) under act in WORK: ``builder.upkeep.rehearse.Result``."""
    from builder.upkeep.rehearse import DRY_RUN_PROFILE, free_port, rehearse

    actions = rehearsal_actions()
    if not actions.is_dir():
        pytest.skip(f"no GitHub actions for offline runs at {actions}: the rehearsal cannot run act without them")
    docker_client()  # skips without an engine: the build jobs run the farm's Docker executor, as on GitHub
    result = rehearse(work / "r", actions=actions, profile=DRY_RUN_PROFILE, index_port=free_port(), python=python311())
    print(f"dry run: {len(result.jobs)} jobs in {result.seconds:.0f} s, act exit {result.rc}: {result.jobs}")
    return result


def torch_venv(dest: Path, python: str, torch_req: str, env: dict, *more: str) -> Path:
    """DEST: a venv of PYTHON holding TORCH_REQ (``torch==X.Y.Z``), then MORE installed by its pip (under ENV);
    returns its python (run its tools as ``python -m``: the copied console scripts name the farm's folder). The torch comes from the farm's smoke-test venv of that Python and torch, hard-linked (nothing is
    downloaded or unpacked again); pip replaces a file it changes (a new inode), so the farm's copy is never
    written through a link."""
    from filelock import FileLock

    from builder.environments import store
    from builder.facts.hostenv import CACHE_ROOT

    m = re.fullmatch(r"torch==(\d+\.\d+\.\d+)", torch_req)
    assert m, f"{torch_req!r}: the farm keeps venvs of an exact torch release (torch==X.Y.Z)"
    tag = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    smoke_dir = CACHE_ROOT / "smoke" / f"{tag}-torch{m.group(1)}"  # store.smoke_slot's folder
    smoke_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(smoke_dir) + ".lock"):  # the farm's own lock: no smoke test or eviction meanwhile
        base = store.torch_venv(python, torch_req, smoke_dir / "torch-envs")
        subprocess.run(["cp", "-al", str(base), str(dest)], check=True)
    (dest / ".complete").unlink(missing_ok=True)  # a copy, not one of the farm's venvs
    py = dest / "bin" / "python"
    if more:
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", *more], capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip
        if proc.returncode:
            raise AssertionError(f"installing {more} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return py
