"""The farm under faults: no engine, a build that does not compile, flaky infrastructure.

(Killing the orchestrator mid-build is part of tests/test_farm_docker.py, whose rerun
then completes in the same dist.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from farmkit import REPO, ci_spec, docker_client, farm_containers, partial_files, run_build

from builder.building.executors import BuildResult
from builder.building.executors.host import copy_source
from builder.errors import BuildFailed
from builder.run import schedule


def test_engine_unreachable_is_a_clear_error_with_a_hint(tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    run = run_build(
        "--profile", "ci", "--only", ci_spec("cpu").id, "--executor", "docker", "--dist", str(tmp_path / "dist"),
        env={"DOCKER_HOST": f"unix://{dead}"},
    )
    assert run.rc == 3, run.out
    assert f"no container engine answers at unix://{dead}" in run.out
    assert "hint:" in run.out and "--executor host" in run.out
    assert "Traceback" not in run.out
    assert not list((tmp_path / "dist" / "wheels").glob("*"))


def test_auto_picks_host_when_no_engine_answers(tmp_path: Path, monkeypatch) -> None:
    from builder.building.executors import BuildOptions
    from builder.building.executors.choose import select

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    said: list[str] = []
    ex = select("auto", BuildOptions(log=said.append))
    assert ex.name == "host"
    assert said and said[0].startswith("executor: host (no container engine answers")


@pytest.mark.docker
def test_a_leftover_container_another_run_removes_meanwhile_is_no_error() -> None:
    """Every Docker run first removes the containers of dead runs; a container another run removes between the
    listing and its inspection (seen with two farm runs side by side) is skipped, never a traceback."""
    import socket

    from builder.building.executors.docker import remove_leftovers
    from builder.building.images.images import OWNER_LABEL, local_name

    client = docker_client()
    base = local_name("bookworm")
    if not any(base in (i.tags or []) for i in client.images.list()):
        pytest.skip(f"no {base} image here (python -m builder base-image makes it)")
    dead = f"{socket.gethostname()}:{2**22 + 7}"  # above Linux's largest pid: no such process
    gone = client.containers.create(base, ["true"], labels={OWNER_LABEL: dead})
    left = client.containers.create(base, ["true"], labels={OWNER_LABEL: dead})
    inspect = client.api.inspect_container

    def removed_first(container_id, *a, **kw):  # the other run wins the race for this one, in the real engine
        if container_id == gone.id:
            client.api.remove_container(gone.id, force=True)
        return inspect(container_id, *a, **kw)

    client.api.inspect_container = removed_first
    try:
        logged: list[str] = []
        assert remove_leftovers(client, logged.append) == 1
    finally:
        client.api.inspect_container = inspect
        for c in (gone, left):
            try:
                c.remove(force=True)
            except Exception:
                pass
    ids = {c.id for c in farm_containers(client)}
    assert gone.id not in ids and left.id not in ids
    assert logged == ["docker: removed 1 container(s) left by an earlier run"]


@pytest.mark.docker
def test_a_build_that_does_not_compile_fails_with_its_log(tmp_path: Path) -> None:
    docker_client()
    src = tmp_path / "src"
    copy_source(REPO, src)
    first = src / "csrc" / "selective_scan_cpu.cpp"  # the first file compiled: fails within seconds
    first.write_text('#error "deliberately broken for the farm fault test"\n' + first.read_text())
    spec = ci_spec("cpu")
    dist = tmp_path / "dist"
    run = run_build("--profile", "ci", "--only", spec.id, "--executor", "docker", "--dist", str(dist), "--source", str(src))
    assert run.rc == BuildFailed.exit_code, run.out[-3000:]  # its own exit code (7), not the generic 1
    log = dist / "logs" / f"{spec.id}.log"
    assert f"log: {log}" in run.out
    assert "deliberately broken" in log.read_text()
    assert "deliberately broken" in run.out  # the log's last lines are shown
    assert "retry" not in run.out  # a compile error is never retried
    assert not list((dist / "wheels").glob("*.whl")) and partial_files(dist) == []
    assert [c for c in farm_containers(docker_client()) if c.labels.get("org.mamba-farm.build") == spec.id] == []


# --- the scheduler's rules, with stand-in builds (fast) --------------------------------------------


class _Spec:
    def __init__(self, i: int) -> None:
        self.id = f"spec{i}"
        self.inputs_hash = f"h{i}"
        self.accelerator = "cpu"
        self.compile_group = self.id  # each its own toolchain, unless a test groups them


def _finish(tmp: Path):
    def finish(spec, result: BuildResult) -> Path:
        wheel = tmp / "wheels" / f"{spec.id}.whl"
        wheel.parent.mkdir(exist_ok=True)
        wheel.write_bytes(spec.id.encode())
        (wheel.parent / f"{wheel.name}.evidence.json").write_text("{}")  # (_verify_and_publish writes its record)
        return wheel

    return finish


def test_one_failure_never_stops_the_others(tmp_path: Path) -> None:
    specs = [_Spec(i) for i in range(4)]
    calls: list[str] = []
    lock = threading.Lock()

    def build_one(spec, attempt):
        with lock:
            calls.append(spec.id)
        if spec.id == "spec1":
            return BuildResult(False, None, tmp_path / "spec1.log", "build exited with 1")
        return BuildResult(True, tmp_path / "raw.whl", tmp_path / f"{spec.id}.log")

    ledger = schedule.Ledger(tmp_path / "ledger.json")
    out = schedule.run(specs, build_one, _finish(tmp_path), ledger=ledger, wheels_dir=tmp_path / "wheels", jobs=2, retries=2)
    assert [o.state for o in out] == ["built", "failed", "built", "built"]
    assert calls.count("spec1") == 1  # a compile failure is not retried
    # the ledger makes the next run skip what is done, and only what is done
    again = schedule.run(specs, build_one, _finish(tmp_path), ledger=schedule.Ledger(tmp_path / "ledger.json"),
                         wheels_dir=tmp_path / "wheels", jobs=2)
    assert [o.state for o in again] == ["skipped", "failed", "skipped", "skipped"]


def test_the_first_build_of_a_compile_group_runs_before_the_rest_of_its_group(tmp_path: Path) -> None:
    # a0 compiles the kernels a1 and a2 then take from the kernel cache; b0 is another toolchain
    specs = [_Spec(i) for i in range(4)]
    for spec, group in zip(specs, ("a", "a", "b", "a")):
        spec.compile_group = group
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    b_started = threading.Event()

    def build_one(spec, attempt):
        with lock:
            events.append(("start", spec.id))
        if spec.id == "spec0":
            assert b_started.wait(5)  # another group's first build runs alongside it
        if spec.id == "spec2":
            b_started.set()
        time.sleep(0.05)
        with lock:
            events.append(("end", spec.id))
        if spec.id == "spec0":  # a failed first build still lets the others build
            return BuildResult(False, None, tmp_path / "spec0.log", "build exited with 1")
        return BuildResult(True, tmp_path / "raw.whl", tmp_path / f"{spec.id}.log")

    out = schedule.run(specs, build_one, _finish(tmp_path), ledger=schedule.Ledger(tmp_path / "l.json"),
                       wheels_dir=tmp_path / "wheels", jobs=3)
    assert [o.state for o in out] == ["failed", "built", "built", "built"]
    a0_end = events.index(("end", "spec0"))
    assert events.index(("start", "spec1")) > a0_end and events.index(("start", "spec3")) > a0_end
    assert events.index(("start", "spec2")) < a0_end


def test_infrastructure_failures_are_retried(tmp_path: Path) -> None:
    attempts: list[int] = []

    def build_one(spec, attempt):
        attempts.append(attempt)
        if attempt < 2:
            return BuildResult(False, None, tmp_path / "x.log", "engine error", infrastructure=True)
        return BuildResult(True, tmp_path / "raw.whl", tmp_path / "x.log")

    out = schedule.run([_Spec(0)], build_one, _finish(tmp_path), ledger=schedule.Ledger(tmp_path / "l.json"),
                       wheels_dir=tmp_path / "wheels", jobs=1, retries=1)
    assert out[0].state == "built" and attempts == [1, 2]


def test_a_changed_or_damaged_wheel_is_rebuilt(tmp_path: Path) -> None:
    spec = _Spec(0)
    ledger = schedule.Ledger(tmp_path / "l.json")
    wheel = _finish(tmp_path)(spec, None)
    ledger.record(spec, wheel, 1.0)
    assert ledger.done(spec, tmp_path / "wheels") == wheel
    # a wheel whose record of what was checked is gone is built again (and checked again)
    evidence = tmp_path / "wheels" / f"{wheel.name}.evidence.json"
    evidence.rename(evidence.with_suffix(".moved"))
    assert ledger.done(spec, tmp_path / "wheels") is None
    evidence.with_suffix(".moved").rename(evidence)
    wheel.write_bytes(b"tampered")
    assert ledger.done(spec, tmp_path / "wheels") is None
    spec.inputs_hash = "other"
    assert schedule.Ledger(tmp_path / "l.json").done(spec, tmp_path / "wheels") is None


def test_parallelism_respects_cores_and_memory() -> None:
    cuda = type("S", (), {"accelerator": "cu13"})()
    cpu = type("S", (), {"accelerator": "cpu"})()
    assert schedule.auto_jobs([cuda] * 8, cores=16, mem_gib=10) == 2  # memory-bound for nvcc
    assert schedule.auto_jobs([cpu] * 8, cores=2, mem_gib=64) == 2  # core-bound
    assert schedule.auto_jobs([cpu], cores=16, mem_gib=64) == 1  # never more than there is to do
    assert schedule.compiler_jobs(2, cores=2) == 1 and schedule.compiler_jobs(1, cores=2) == 2
