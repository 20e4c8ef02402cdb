"""Reproducible wheels, for real: our CPU classic and CPU stable wheels, built twice in Docker, are the same bytes.

The classic wheel (the ci profile's CPU run) is rebuilt by ``builder reproduce --rebuild`` into another dist and
must be "identical", and a copy with one byte changed must be exit 14 naming the member. The stable wheel is
the release dry run's, which its reproduce job rebuilt. The comparison itself is tested in test_verify.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from farmkit import REPO, docker_client, run_build

from builder.verifying import provenance, relabel

pytestmark = pytest.mark.docker


def _spec(profile: str):
    from builder.planning.plan import load_plan

    return next(b for b in load_plan(profile=profile).builds if b.accelerator == "cpu")


def _verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder", "reproduce", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )


def _clean_clone(dest: Path) -> Path:
    """HEAD's tree alone, in a folder of its own: the wheel records HEAD without `dirty` (a developer's
    uncommitted edits would make verify refuse it, exit 15), and the rebuild comes from another clone."""
    from builder.verifying import provenance

    head = provenance.checkout_commit(REPO)
    for cmd in (
        ["clone", "-q", "--shared", "--no-checkout", str(REPO), str(dest)],
        ["-C", str(dest), "checkout", "-q", head],
    ):
        subprocess.run(["git", *cmd], check=True, capture_output=True, timeout=600)
    return dest


def _one_byte_changed(wheel: Path, dest: Path) -> str:
    """WHEEL with one byte of its extension module flipped, RECORD made to agree: only the bytes tell."""
    infos, members, info_dir = relabel.read_members(wheel)
    so = next(n for n in members if n.endswith(".so"))
    data = bytearray(members[so])
    data[len(data) // 2] ^= 0xFF
    members[so] = bytes(data)
    relabel.write_wheel(infos, members, info_dir, dest)
    return so


def _rebuilt_identical(spec, wheel: Path, tmp_path: Path) -> None:
    """WHEEL (what built it, in the wheel and in the index's sidecar alike) rebuilt by `builder reproduce --rebuild`
    into dist B: identical; a copy with one byte of its extension changed: exit 14, that member named."""
    sidecar = json.loads(Path(f"{wheel}.spec.json").read_text())
    assert sidecar["provenance"] == provenance.read_wheel(wheel) and sidecar["provenance"]["id"] == spec.id
    assert sidecar["provenance"]["source"] == {"kind": "checkout", "commit": provenance.checkout_commit(REPO)}

    same = _verify("--rebuild", spec.id, str(wheel), "--executor", "docker", "--keep", str(tmp_path / "b"))
    assert same.returncode == 0, same.stdout + same.stderr[-4000:]
    assert f"identical: {wheel.name}" in same.stdout
    (again,) = (tmp_path / "b" / "wheels").glob("*.whl")
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(wheel.read_bytes()).digest()

    tampered = tmp_path / "t" / wheel.name
    member = _one_byte_changed(wheel, tampered)
    diff = _verify("--rebuild", spec.id, str(tampered), "--executor", "docker", "--keep", str(tmp_path / "b"))
    assert diff.returncode == 14, diff.stdout + diff.stderr[-4000:]
    assert "0 to build" in diff.stderr  # B's rebuild reused, not a third compile
    assert f"  {member}: size " in diff.stderr and "ELF section" in diff.stderr
    assert "Traceback" not in diff.stderr
    _one_time(wheel)


def _one_time(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert {i.date_time for i in zf.infolist()} == {zf.infolist()[0].date_time}  # one time: the commit's


def _built_from_a_clean_clone(profile: str, spec, tmp_path: Path) -> Path:
    first = run_build("--profile", profile, "--only", spec.id, "--executor", "docker", "--no-smoke",
                      "--dist", str(tmp_path / "a"), "--source", str(_clean_clone(tmp_path / "src")))  # fmt: skip
    assert first.rc == 0, first.out[-4000:]
    (wheel,) = (tmp_path / "a" / "wheels").glob("*.whl")
    return wheel


def test_cpu_wheel_rebuilds_to_the_same_bytes(request, tmp_path: Path) -> None:
    """Our CPU classic wheel. Dist A is the ci profile's CPU run (tests/sharedruns.py `ci_cpu_runs`, which
    tests/test_farm_docker.py checks), built from this checkout; a checkout with uncommitted edits builds A
    itself from a clean clone of HEAD (its wheel would record `dirty`, which verify refuses)."""
    docker_client()
    spec = _spec("ci")
    if provenance.checkout_dirty(REPO):
        wheel = _built_from_a_clean_clone("ci", spec, tmp_path)
    else:
        runs = request.getfixturevalue("ci_cpu_runs")
        assert runs.first.rc == 0 and runs.spec.id == spec.id, runs.first.out[-4000:]
        (name,) = runs.wheels
        wheel = runs.dist / "wheels" / name
    _rebuilt_identical(spec, wheel, tmp_path)


def test_cpu_stable_wheel_rebuilds_to_the_same_bytes(request, tmp_path: Path) -> None:
    """Our CPU stable-ABI wheel: the release dry run (tests/sharedruns.py `release_dry_run`, profile ci-stable)
    builds it in its build job and rebuilds it in its reproduce job, from the same commit, with this farm's
    `reproduce --rebuild` check; here its wheel, its sidecar and the reproduce job's verdict on those very bytes.
    (A one-byte change reported as different: the classic wheel above; for this kind, the rehearsal's tampered
    release, --run-slow.) Without act's actions here, the wheel is built and rebuilt as the classic one."""
    from sharedruns import rehearsal_actions

    docker_client()
    spec = _spec("ci-stable")
    if not rehearsal_actions().is_dir():
        _rebuilt_identical(spec, _built_from_a_clean_clone("ci-stable", spec, tmp_path), tmp_path)
        return
    dry = request.getfixturevalue("release_dry_run")
    assert dry.jobs.get("reproduce") == "succeeded", dry.jobs
    wheels = [
        w
        for zipped in sorted(dry.artifacts.glob("*/wheel-*/*.zip"))
        for w in dry.artifact(zipped.parent.name, tmp_path / zipped.parent.name).rglob("*.whl")
        if json.loads(Path(f"{w}.spec.json").read_text())["provenance"]["id"] == spec.id
    ]
    assert len(wheels) == 1, wheels
    (wheel,) = wheels
    sidecar = json.loads(Path(f"{wheel}.spec.json").read_text())
    assert sidecar["provenance"] == provenance.read_wheel(wheel)
    assert sidecar["provenance"]["source"] == {"kind": "checkout", "commit": provenance.checkout_commit(REPO)}
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"identical: {wheel.name} (sha256 {sha}) is what {spec.id} rebuilds to" in dry.log.read_text()
    _one_time(wheel)


def _cuda_spec(profile: str, project: str):
    from builder.planning.plan import load_plan

    projects = None if project == "checkout" else [project]
    return next(
        b for b in load_plan(profile=profile, projects=projects).builds
        if b.accelerator.startswith("cu") and b.python == "3.11" and (project == "checkout" or b.project == project)
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.cuda_build
@pytest.mark.parametrize(("profile", "project"), [("ci", "checkout"), ("ci-upstream", "causal-conv1d")])
def test_cuda_wheel_built_twice(profile: str, project: str, tmp_path: Path, capsys) -> None:
    """Our CUDA wheel must rebuild to the same bytes. Upstream's (causal-conv1d) is reported as it is: identical,
    or each differing member with its bytes (what the farm cannot fix without patching their code is data)."""
    docker_client()
    spec = _cuda_spec(profile, project)
    projects = () if project == "checkout" else ("--projects", project)
    first = run_build("--profile", profile, *projects, "--only", spec.id, "--executor", "docker", "--no-smoke",
                      "--dist", str(tmp_path / "a"), "--source", str(_clean_clone(tmp_path / "src")),
                      timeout=7200)  # fmt: skip
    assert first.rc == 0, first.out[-4000:]
    (wheel,) = (tmp_path / "a" / "wheels").glob("*.whl")
    again = _verify("--rebuild", spec.id, str(wheel), "--profile", profile, *projects, "--executor", "docker",
                    "--keep", str(tmp_path / "b"))  # fmt: skip
    with capsys.disabled():
        print(
            f"\n{spec.id}: verify exit {again.returncode}\n{again.stdout}{again.stderr.split('error: ', 1)[-1][:4000]}"
        )
    if project == "checkout":
        assert again.returncode == 0, again.stderr[-4000:]
        assert f"identical: {wheel.name}" in again.stdout
    else:
        assert again.returncode in (0, 14), again.stderr[-4000:]
        assert again.returncode == 0 or "first difference at byte" in again.stderr or "zip entry" in again.stderr
