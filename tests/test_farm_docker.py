"""The farm in containers, for real: the ci profile's CPU build through ``python -m builder build``.

One run sequence, made once per pytest run (``ci_cpu_runs``, tests/sharedruns.py): the build killed mid-compile,
the rerun that completes it, a third run that rebuilds nothing; then the profile's CUDA builds into the same dist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from farmkit import REPO, Run, checked_evidence, docker_client, farm_containers, import_check, partial_files
from sharedruns import log_stamps

pytestmark = pytest.mark.docker


def test_killed_build_leaves_no_container_and_nothing_in_dist(ci_cpu_runs) -> None:
    k = ci_cpu_runs.killed
    assert k.rc != 0
    assert "interrupted" in k.out
    assert k.leftovers == [], [c.name for c in k.leftovers]
    assert k.wheels == []


def test_rerun_builds_the_cpu_wheel_in_a_container(ci_cpu_runs) -> None:
    first, dist, spec = ci_cpu_runs.first, ci_cpu_runs.dist, ci_cpu_runs.spec
    assert first.rc == 0, first.out[-4000:]
    assert "executor: docker" in first.out
    (wheel,) = ci_cpu_runs.wheels
    assert f"+{spec.label}-{spec.python_tag}-{spec.python_tag}-" in wheel
    assert (dist / "logs" / f"{spec.id}.log").read_text().strip().endswith("done")
    # its provenance says what ran: Docker, the spec's image and the base it was really built FROM
    from builder.verifying.provenance import read_wheel

    rec = read_wheel(dist / "wheels" / wheel)
    assert json.loads((dist / "wheels" / f"{wheel}.spec.json").read_text())["provenance"] == rec
    assert rec["executor"] == "docker" and rec["image"] == spec.image and rec["base"], rec
    assert rec["toolchain"] == {"compiler": "image", "toolkit": None}, rec
    assert wheel.endswith(f"-{rec['platform']}.whl"), rec
    assert partial_files(dist) == []
    assert not list((dist / ".work").glob("run-*"))
    assert farm_containers(docker_client()) == [] or all(
        c.labels.get("org.mamba-farm.build") != spec.id for c in farm_containers(docker_client())
    )


def test_wheel_installs_in_a_clean_env_and_imports(ci_cpu_runs, tmp_path: Path) -> None:
    (name,) = ci_cpu_runs.wheels
    proc = import_check(ci_cpu_runs.dist / "wheels" / name, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    assert "import ok" in proc.stdout


def test_the_wheel_carries_its_evidence_record(ci_cpu_runs) -> None:
    (rec,) = checked_evidence(ci_cpu_runs.dist, ci_cpu_runs.first.out, numerics=True, modules=("mamba_ssm._C",))
    assert rec["verified"]["repaired"].startswith("manylinux_") and rec["verified"]["machine"] == "x86_64"


def test_the_wheel_reaches_manylinux_2_28_and_runs_on_glibc_2_31(ci_cpu_runs, tmp_path: Path) -> None:
    """The floor the wheel's tag states is proven, not assumed: built on the bookworm base (glibc 2.36), the ci
    profile's CPU wheel is repaired to manylinux_2_28 (auditwheel's own tag for it is no newer), then installed
    with its torch, offline, into the floor root (Debian bullseye, glibc 2.31: builder/data/floor.toml) with a
    CPython built there, imported, and its CPU selective scan checked against the float64 reference there (the
    farm's smoke script). A symbol newer than 2.31 would stop the import; one in 2.29-2.31 would only show in
    the tag, which is checked first."""
    from builder.building.images import floor_root
    from builder.facts.compat import manylinux_glibc, manylinux_platforms
    from builder.facts.hostenv import find_ca_bundle
    from builder.verifying.smoke import SMOKE_SCRIPT

    (name,), spec, dist = ci_cpu_runs.wheels, ci_cpu_runs.spec, ci_cpu_runs.dist
    assert spec.manylinux == "manylinux_2_28_x86_64" and name.endswith(f"-{spec.manylinux}.whl"), name
    verified = json.loads((dist / "wheels" / f"{name}.evidence.json").read_text())["verified"]
    assert verified["repaired"] == spec.manylinux and manylinux_glibc(verified["reaches"]) <= (2, 28), verified
    house = tmp_path / "wheelhouse"  # the wheel's torch and torch's requirements, for a manylinux_2_28 cp311
    platforms = [a for t in manylinux_platforms(spec.manylinux) for a in ("--platform", t)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(house), "--only-binary", ":all:",
                    "--python-version", spec.python, *platforms, f"torch=={spec.torch_version}"], check=True)  # fmt: skip
    (tmp_path / "smoke.py").write_text(SMOKE_SCRIPT + "import platform; print('libc', platform.libc_ver())\n")
    client = docker_client()
    image = floor_root.ensure(client, ca_bundle=find_ca_bundle())
    py = f"{floor_root.PREFIX}/bin/python3"
    script = (f"set -e; {py} -m venv /v; /v/bin/pip install -q --no-compile --no-index --find-links /house "
              f"torch=={spec.torch_version} /dist/{name}; cd /; /v/bin/python /check/smoke.py")  # fmt: skip
    box = client.containers.run(image, ["bash", "-c", script], detach=True, network_disabled=True, volumes={
        str(house): {"bind": "/house", "mode": "ro"}, str(dist / "wheels"): {"bind": "/dist", "mode": "ro"},
        str(tmp_path): {"bind": "/check", "mode": "ro"},
    })  # fmt: skip
    try:
        code, out = box.wait(timeout=900)["StatusCode"], box.logs().decode(errors="replace")
    finally:
        box.remove(force=True)
    assert code == 0, out[-3000:]
    assert f"smoke ok: torch {spec.torch_version}" in out and "libc ('glibc', '2.31')" in out, out[-3000:]


def test_index_lists_the_wheel_with_its_hash(ci_cpu_runs) -> None:
    (name,), (sha,) = ci_cpu_runs.wheels, ci_cpu_runs.wheels.values()
    page = (ci_cpu_runs.dist / "index" / ci_cpu_runs.spec.variant / "index.html").read_text()
    assert name in page and f"sha256={sha}" in page


def test_second_run_rebuilds_nothing(ci_cpu_runs) -> None:
    second = ci_cpu_runs.second
    assert second.rc == 0, second.out[-3000:]
    assert "0 to build" in second.out
    now = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ci_cpu_runs.dist / "wheels").glob("*.whl")}
    assert now == ci_cpu_runs.wheels
    assert log_stamps(ci_cpu_runs.dist) == ci_cpu_runs.logs != {}


@pytest.mark.cuda_build
def test_ci_profile_end_to_end(ci_cpu_runs, tmp_path: Path) -> None:
    """The README's first maintainer command, as typed (with --dist): every ci spec (cpu torch 2.13 py3.11;
    cu13 torch 2.14 py3.11, py3.12) in containers, then the pip commands that install from its index.

    Into the dist the CPU runs above made: the CPU wheel is built once per CI run (its build is what they
    test), and this run adds the CUDA ones beside it, as a maintainer's second run would.
    """
    docker_client()
    from builder.planning.plan import load_plan

    dist = ci_cpu_runs.dist
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "scripts/build-ci.sh", "--dist", str(dist)],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    first = Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)
    assert first.rc == 0, first.out[-5000:]
    assert "executor: docker" in first.out and "1 up to date, 2 to build" in first.out, first.out[-3000:]
    specs = load_plan(profile="ci").builds
    wheels = sorted((dist / "wheels").glob("*.whl"))
    assert len(wheels) == len(specs) == 3
    for spec in specs:
        assert any(f"+{spec.label}-{spec.python_tag}-" in w.name for w in wheels), spec.id
    # each build's torch is its smoke test's venv, linked into the folder the build mounts: one install and one
    # copy on disk for both
    from builder.environments import store

    for spec in specs:
        log = (dist / "logs" / f"{spec.id}.log").read_text()
        req = f"torch=={spec.torch_version}"
        found = re.search(rf"== {re.escape(req)} for {spec.python_tag}: (/\S+), linked from the smoke test's venv", log)
        assert found, log[:3000]
        folder = Path(found.group(1))
        slot = store.smoke_slot(spec.python_tag, spec.torch_version) / "torch-envs"
        (venv,) = [v for v in slot.glob("py*") if (v / ".complete").read_text() == req + "\n"]
        (venv_lib,) = venv.glob("lib/python*/site-packages/torch/lib/libtorch_cpu.so")
        assert (folder / "site" / "torch/lib/libtorch_cpu.so").stat().st_ino == venv_lib.stat().st_ino, spec.id
    # it ends with one pip command per variant (pip picks its own Python's wheel), pinned to the exact version,
    # from the local index
    commands = [line.strip() for line in proc.stdout.split("Installed from the local index", 1)[1].splitlines()[1:]]
    index = dist / "index"  # the link itself, which a rerun swaps: the command stays good
    assert len(commands) == len({s.variant for s in specs}) == 2, proc.stdout[-2000:]
    for spec in specs:
        (cmd,) = [c for c in commands if f"+{spec.label} " in c + " "]
        assert cmd.startswith("pip install mamba-ssm==") and f"--extra-index-url file://{index}/{spec.variant}/" in cmd
    # the CPU one, run as printed (into a folder, torch left to the test's own), installs a wheel that imports
    (cpu_cmd,) = [c for c in commands if "+cpu" in c]
    site = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", *shlex.split(cpu_cmd), "--target", str(site), "--no-deps"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    code = "import mamba_ssm; from mamba_ssm.ops import selective_scan_interface as s; assert s.HAS_EXTENSION; print(mamba_ssm.__file__)"
    imported = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert imported.returncode == 0 and imported.stdout.startswith(str(site)), imported.stderr
    # verified wheels passed the smoke test (a clean env with the matching torch) before publication
    # the same command again: its set-up only checks, and nothing is rebuilt
    logs = log_stamps(dist)
    again = subprocess.run(
        ["bash", "scripts/build-ci.sh", "--dist", str(dist)], check=False, cwd=REPO, capture_output=True, text=True
    )
    assert again.returncode == 0 and "0 to build" in again.stdout + again.stderr, (again.stdout + again.stderr)[-3000:]
    assert [c for c in again.stdout.split("Installed from the local index", 1)[1].split() if "==" in c] == [
        c for c in " ".join(commands).split() if "==" in c
    ]
    assert log_stamps(dist) == logs and sum(not n.startswith("image-") for n in logs) == 3
