"""What a build costs (builder/publishing/cost.py): measured where the CPU is spent, recorded beside the log, summed.

Real: os.wait4 on real processes; the container measurement in a real container of the farm's own base
image (skipped without Docker or without that image); the CLI as the workflow runs it. The release dry run
(tests/test_release_rehearsal.py) checks the figures in the build jobs' and publish's summaries.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from builder.commands.cli import main
from builder.errors import UsageError
from builder.facts import cputime
from builder.publishing import cost

# CPU-bound work in a child process: ~1 s of CPU here, whatever the load (it is a count, not a clock)
BURN = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass"]


def test_a_host_build_is_charged_its_own_process_tree_and_nothing_else(tmp_path):
    """build.sh's grandchildren count (a shell running the work); a busy thread of this process, as a parallel
    build's smoke test would be, does not (RUSAGE_CHILDREN and the process's own clock would count it)."""
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    other = threading.Thread(target=spin, daemon=True)
    other.start()
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", f"{shlex.join(BURN)} && sleep 0.5"])
        code, cpu = cputime.wait_with_rusage(proc, timeout=120)
        wall = time.monotonic() - t0
    finally:
        stop.set()
        other.join()
    assert code == 0 and proc.returncode == 0
    assert 0.9 <= cpu <= 1.6, cpu  # the grandchild's second of CPU, not the spinning thread's
    assert wall >= 1.4  # it waited for the end, sleep included
    proc.wait(1)  # reaped already: Popen knows, and does not hang


def test_a_host_build_past_its_timeout_raises_and_keeps_its_exit_code_unknown():
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            cputime.wait_with_rusage(proc, timeout=0.5)
        assert proc.returncode is None
    finally:
        proc.kill()
        proc.wait()


def test_an_exit_code_is_kept():
    proc = subprocess.Popen(["bash", "-c", "exit 75"])
    assert cputime.wait_with_rusage(proc, timeout=30)[0] == 75


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("usec 2500000\n", 2.5), ("nsec 1500000000\n", 1.5), ("", None), ("usec -1", None), ("usec 1e9", None)],
)
def test_the_container_counter_is_read_in_its_unit(text, seconds):
    assert cputime.parse_cgroup_cpu(text) == seconds


def _base_image(client) -> str:
    from builder.building.images.images import local_name

    name = local_name("bookworm")
    if not any(name in (i.tags or []) for i in client.images.list()):
        pytest.skip(f"no {name} image here (python -m builder base-image makes it)")
    return name


@pytest.mark.docker
def test_a_docker_build_is_charged_its_containers_cpu(tmp_path):
    """The executor's own command shape (work, then CGROUP_CPU_SH) in a container of the farm's base: the
    counter it leaves covers the container's work (at least what bash's `times` saw of its children) and no
    more than the work plus the shell around it; a sleeping container costs next to nothing."""
    from farmkit import docker_client

    from builder.building.executors.docker import _cgroup_cpu

    client = docker_client()
    image = _base_image(client)
    burn = "awk 'BEGIN { for (i = 0; i < 40000000; i++) s += i; print s }' > /dev/null"
    got = {}
    for name, work in (("burn", f"{burn}; {burn}; times > /tmp/times"), ("sleep", "sleep 2; times > /tmp/times")):
        c = client.containers.create(image, ["bash", "-c", f"{work}; {cputime.CGROUP_CPU_SH}; exit 3"],
                                     labels={"org.mamba-farm.test": "cost"})  # fmt: skip
        try:
            c.start()
            assert c.wait(timeout=300)["StatusCode"] == 3
            got[name] = _cgroup_cpu(c)
            stream, _ = c.get_archive("/tmp/times")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                line = tar.extractfile(tar.next()).read().decode().splitlines()[1]  # children: user sys
            got[name + "-times"] = sum(
                int(m) * 60 + float(s) for m, s in (f.rstrip("s").split("m") for f in line.split())
            )
        finally:
            c.remove(force=True)
    print(got)
    assert got["burn"] is not None and got["burn"] >= got["burn-times"] * 0.95 > 0.5, got
    assert got["burn"] <= got["burn-times"] + 0.5, got
    assert got["sleep"] is not None and got["sleep"] < 0.3, got


# --------------------------------------------------------------------------- records, a job, the release


def test_a_retry_adds_to_the_first_attempts_figures(tmp_path):
    cost.write_build_record(tmp_path, "cpu-a", wall=10.0, cpu=30.0, measured="cgroup", attempt=1)
    cost.write_build_record(tmp_path, "cpu-a", wall=5.0, cpu=7.5, measured="cgroup", attempt=2)
    assert cost.read_build_record(tmp_path / "cpu-a.cost.json") == {
        "id": "cpu-a", "wall_s": 15.0, "cpu_s": 37.5, "measured": "cgroup"
    }  # fmt: skip
    cost.write_build_record(tmp_path, "cpu-a", wall=4.0, cpu=1.0, measured="cgroup", attempt=1)  # a new run
    assert cost.read_build_record(tmp_path / "cpu-a.cost.json")["wall_s"] == 4.0


def _job(logs: Path, job: str, builds: dict, wall: float) -> dict:
    logs.mkdir(parents=True, exist_ok=True)
    for b, (w, c) in builds.items():
        cost.write_build_record(logs, b, wall=w, cpu=c, measured="cgroup" if c is not None else "none", attempt=1)
    rc = main(["release", "cost", "--job", job, "--logs", str(logs), "--wall", str(wall),
               "--summary", str(logs.parent / "summary.md")])  # fmt: skip
    assert rc == 0
    return json.loads((logs / cost.JOB_RECORD).read_text())


def test_a_job_summary_and_the_release_sum(tmp_path, capsys):
    """Two jobs as the workflow runs them (a compile group of two builds, and one build that had no counter),
    their records in log artifacts as publish downloads them: each job's summary, then publish's sum."""
    arts = tmp_path / "artifacts" / "logs"
    group = _job(arts / "log-cc-group" / "logs", "cc-group", {"cc-cp311": (600.0, 1100.0), "cc-cp312": (200.5, 150.25)},
                 wall=850.0)  # fmt: skip
    one = _job(arts / "log-cpu" / "logs", "cpu", {"cpu-cp311": (90.0, None)}, wall=95.0)
    assert (group["cpu_s"], group["builds"], group["unmeasured"]) == (1250.2, ["cc-cp311", "cc-cp312"], 0)
    assert (one["cpu_s"], one["unmeasured"]) == (0.0, 1)
    summary = (arts / "log-cc-group" / "summary.md").read_text()
    assert (
        "| `cc-cp311` | 600 | 1100 | cgroup |" in summary and "Wall time of the farm step: 850 s (0:14:10)" in summary
    )
    capsys.readouterr()
    out = tmp_path / "publish.md"
    assert main(["release", "cost", "--jobs", str(tmp_path / "artifacts" / "logs"), "--summary", str(out)]) == 0
    table = out.read_text()
    assert "| `cc-group` | 2 | 850 | 1250 |" in table and "| `cpu` | 1 | 95 | 0 |" in table
    assert "| **total: 2 jobs** | 3 | 945 | 1250 |" in table
    assert "0.26 runner-hours of farm steps, 0.35 CPU-hours" in table
    assert "1 build(s) ran where no CPU counter could be read" in table
    assert "| **total: 2 jobs** | 3 | 945 | 1250 |" in capsys.readouterr().out  # the log shows it too


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"job": "j", "wall_s": float("nan"), "cpu_s": 1}, "'wall_s' is nan"),
        ({"job": "j", "wall_s": -1, "cpu_s": 1}, "'wall_s' is -1"),
        ({"job": "j", "wall_s": 1, "cpu_s": "9e99"}, "'cpu_s' is '9e99'"),
        ({"job": "j", "wall_s": 1, "cpu_s": True}, "'cpu_s' is True"),
        ({"job": "a | b\n| x", "wall_s": 1, "cpu_s": 1}, "not a build or job id"),
        ({"job": "j", "wall_s": 1, "cpu_s": 1, "builds": ["`rm -rf`"]}, "not a list of build ids"),
        ([1, 2], "expected dict"),
    ],
)
def test_a_bad_job_record_is_refused_naming_it(tmp_path, doc, says):
    path = tmp_path / "log-j" / cost.JOB_RECORD
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=".") as err:
        cost.read_jobs(tmp_path)
    assert str(path) in str(err.value) and says in str(err.value), str(err.value)
