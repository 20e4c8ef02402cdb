"""The host executor (no container engine): the ci profile's CPU build in a cached venv."""

from __future__ import annotations

import json
import re
from pathlib import Path

from farmkit import checked_evidence, ci_spec, import_check, partial_files, run_build


def test_host_executor_builds_the_cpu_spec(tmp_path: Path) -> None:
    spec = ci_spec("cpu")
    dist = tmp_path / "dist"
    timings = tmp_path / "timings.jsonl"
    env = {"MAMBA_FARM_TIMINGS": str(timings), "MAMBA_FARM_TIMINGS_CONTEXT": "host-test"}
    # --compile-jobs 1: one compiler job where the default would take both cores (cores / --jobs)
    run = run_build(
        "--profile", "ci", "--only", spec.id, "--executor", "host", "--compile-jobs", "1", "--dist", str(dist), env=env
    )
    assert run.rc == 0, run.out[-4000:]
    assert "executor: host" in run.out and "(1 compiler job(s) each)" in run.out
    (wheel,) = sorted((dist / "wheels").glob("*.whl"))
    assert f"+{spec.label}-{spec.python_tag}-" in wheel.name
    log = (dist / "logs" / f"{spec.id}.log").read_text()
    assert log.strip().endswith("done") and "pip wheel (MAX_JOBS=1," in log
    # the CPU kernel object lives in the image's shared cache: compiled there once, reused by later builds
    from builder.building.executors.host import KERNEL_CACHES

    cache = KERNEL_CACHES / spec.image
    compiled_into = re.compile(rf"-o {re.escape(str(cache))}/(\S+)\.\w+\.tmp/\S+\.o\b")  # kernels.py's private folders
    compiled = {m.group(1) for m in compiled_into.finditer(log)}
    used = [o for o in cache.glob("selective_scan_cpu-*.o") if f"reusing {o.name}" in log or o.stem in compiled]
    assert len(used) == 1, log[-3000:]
    assert partial_files(dist) == []
    # what it cost: build.sh's process tree (os.wait4), at least what its own `times` saw of pip wheel
    from builder.publishing.cost import read_build_record

    record = read_build_record(dist / "logs" / f"{spec.id}.cost.json")
    pip_wheel = float(re.search(r"^== compile cpu: ([\d.]+) s", log, re.MULTILINE).group(1))
    assert record["measured"] == "rusage" and record["cpu_s"] >= pip_wheel > 0 and record["wall_s"] > 0, record
    # the same figures in the run's timing lines, which .ci/run prints and benchmarks/ci_time.py tabulates
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    (compiled_row,) = [r for r in rows if r["kind"] == "compile"]
    assert compiled_row["what"] == spec.id and compiled_row["context"] == "host-test", rows
    assert (
        abs(compiled_row["seconds"] - record["wall_s"]) <= 0.1 and abs(compiled_row["cpu"] - record["cpu_s"]) <= 0.1
    ), rows
    proc = import_check(wheel, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    # what was checked, recorded as it ran: built on the host, verified, imported and its numerics run on the CPU
    (rec,) = checked_evidence(dist, run.out, numerics=True, modules=("mamba_ssm", "mamba_ssm._C"))
    assert rec["verified"]["abi"] and set(rec["verified"]["abi"].values()) == {"cxx11"}
    assert rec["numerics"][0]["max_abs_error"] < rec["numerics"][0]["tolerance"]

    # its provenance says what ran: the host, no image, the platform tag the wheel really has
    from builder.verifying.provenance import read_wheel

    rec = read_wheel(wheel)
    sidecar = json.loads(Path(f"{wheel}.spec.json").read_text())["provenance"]
    assert sidecar == rec and rec["executor"] == "host" and rec["image"] is None and rec["base"] is None, rec
    assert rec["toolchain"] == {"compiler": "host", "toolkit": None}, rec
    assert wheel.name.endswith(f"-{rec['platform']}.whl") and rec["platform"].startswith("manylinux_"), rec
    assert str(dist) not in json.dumps(rec) and str(Path.home()) not in json.dumps(rec)  # no host path


def test_compile_jobs_below_one_is_refused_before_anything_runs(tmp_path: Path) -> None:
    run = run_build("--profile", "ci", "--compile-jobs", "0", "--dist", str(tmp_path / "dist"))
    assert run.rc == 2 and "--compile-jobs 0: must be at least 1" in run.out and "Traceback" not in run.out, run.out
    assert not (tmp_path / "dist").exists()
