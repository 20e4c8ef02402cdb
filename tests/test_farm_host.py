"""The host executor (no container engine): the ci profile's CPU build in a cached venv."""

from __future__ import annotations

from pathlib import Path

from farmkit import ci_spec, import_check, partial_files, run_build


def test_host_executor_builds_the_cpu_spec(tmp_path: Path) -> None:
    spec = ci_spec("cpu")
    dist = tmp_path / "dist"
    run = run_build("--profile", "ci", "--only", spec.id, "--executor", "host", "--dist", str(dist))
    assert run.rc == 0, run.out[-4000:]
    assert "executor: host" in run.out
    (wheel,) = sorted((dist / "wheels").glob("*.whl"))
    assert f"+{spec.label}-{spec.python_tag}-" in wheel.name
    assert (dist / "logs" / f"{spec.id}.log").read_text().strip().endswith("done")
    assert partial_files(dist) == []
    proc = import_check(wheel, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
