"""The release's GPU gate (builder/publishing/gpugate.py, release.yml's ``gpu-gate`` job), on placeholder wheels: it
indexes them, serves the index on 127.0.0.1 and installs each CUDA wheel in a fresh venv with real pip, as the
coverage page's command says, after the torch its cell names (torch 2.13 from this machine's wheelhouse).
The placeholder wheel holds no extension, so the numerics check cannot import it: the broken wheel's path (named,
exit 4, nothing else gated away). The passing path, on the farm's real wheels under act:
tests/test_release_rehearsal.py (--run-slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from wheelmaker import V, make_mamba_wheel

from builder.publishing import gpugate
from builder.publishing.release import split
from builder.verifying import evidence


def _lines(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    for label in ("cu13torch2.13cxx11abiTRUE", "cputorch2.13cxx11abiTRUE"):
        w = make_mamba_wheel(wheels, label)
        acc, torch = label.split("torch")[0], "2.13"
        Path(f"{w}.spec.json").write_text(json.dumps({"id": f"{acc}-torch{torch}-cxx11abiTRUE-cp311-linux_x86_64"}))
        record = evidence.make(w, built={"id": "x"}, verified={"tags": ["cp311-cp311-linux_x86_64"]}, smoke=None)
        evidence.write(evidence.path_of(w), record)
    split(wheels, tmp_path / "lines")
    return tmp_path / "lines"


def test_a_gate_run_is_appended_to_the_wheels_record_and_handed_to_publish(tmp_path):
    lines = _lines(tmp_path)
    wheel = lines / "checkout" / f"mamba_ssm-{V}+cu13torch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    built_copy = tmp_path / "wheels" / (wheel.name + evidence.SUFFIX)  # (split hard-links it)
    before = built_copy.read_text()
    ran = gpugate.GateResult(wheel.name, "cu13-torch2.13-cxx11abiTRUE", "gpu_check numerics", True, 12.0,
                          device={"gpu": "NVIDIA H100 80GB HBM3", "sm": "sm_90", "torch": "2.13.0+cu130"})  # fmt: skip
    gpugate._record(wheel, ran.run("cuda"), tmp_path / "results" / "evidence")
    handed = evidence.read(tmp_path / "results" / "evidence" / (wheel.name + evidence.SUFFIX))
    assert handed["gpu"] == [{"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "sm": "sm_90", "torch": "2.13.0+cu130",
                              "check": "gpu_check numerics", "passed": True, "seconds": 12.0}]  # fmt: skip
    assert evidence.tier_detail(handed) == "gpu-run (NVIDIA H100 80GB HBM3 (sm_90))"
    assert evidence.read(evidence.path_of(wheel)) == handed
    assert built_copy.read_text() == before  # the build's copy is not written through the link
    # a dry run on the CPU is recorded as one and proves no GPU
    dry = gpugate.GateResult(wheel.name, "k", "gpu_check numerics", True, 1.0).run("cpu")
    gpugate._record(wheel, dry, tmp_path / "results" / "evidence")
    assert evidence.read(evidence.path_of(wheel))["gpu"][-1]["gpu"] == "none (cpu)"


def test_the_gate_picks_the_cuda_wheels_and_the_cell_users_install_from(tmp_path):
    from builder.publishing.index import build_index

    lines = _lines(tmp_path)
    build_index(lines / "checkout", tmp_path / "index")
    picked = gpugate.cuda_wheels(tmp_path / "index", "x86_64")
    assert [(fn, key) for fn, key, _ in picked] == [
        (f"mamba_ssm-{V}+cu13torch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", "cu13-torch2.13-cxx11abiTRUE")
    ]
    assert gpugate.cuda_wheels(tmp_path / "index", "aarch64") == []  # not this runner's platform


@pytest.mark.slow  # a torch install in a fresh venv: minutes on a loaded 2-core machine
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the wheels are cp311")
def test_a_broken_cuda_wheel_fails_the_gate_and_is_named(tmp_path):
    _lines(tmp_path)
    summary = tmp_path / "summary.md"
    # relative folders, as release.yml passes them (dist/lines, dist/gate); the checks themselves run from /
    proc = subprocess.run(
        [sys.executable, "-m", "builder", "release", "gate", "--lines", "lines", "--device", "cpu",
         "--out", "gate", "--summary", str(summary)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=1800,
        check=False,
    )  # fmt: skip
    name = f"mamba_ssm-{V}+cu13torch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"error: GPU gate: 1 of 1 CUDA wheel(s) failed: {name}" in proc.stderr
    assert "Traceback" not in proc.stderr.split("gpu_check exited")[0]  # (the check's own output follows)
    assert f"| `{name}` | `cu13-torch2.13-cxx11abiTRUE/` | gpu_check numerics | **failed** |" in summary.read_text()
    (res,) = json.loads((tmp_path / "gate" / "results" / "gate.json").read_text())
    assert res["ok"] is False and res["detail"].startswith("gpu_check exited 1")
    # the failed run is in the wheel's record, for publish, and proves nothing
    rec = evidence.read(tmp_path / "gate" / "results" / "evidence" / (name + evidence.SUFFIX))
    assert [(r["device"], r["passed"]) for r in rec["gpu"]] == [("cpu", False)] and evidence.tier(rec) == "compiled"
    log = (tmp_path / "gate" / "results" / name.removesuffix(".whl") / "log.txt").read_text()
    # installed as users install it: the exact pin from its cell's page on the staged index
    assert f"-m pip install mamba-ssm=={V}+cu13torch2.13cxx11abiTRUE --extra-index-url http://127.0.0.1:" in log
    assert "/checkout/cu13-torch2.13-cxx11abiTRUE/" in log
    # the results are the job's artifact: logs and the check's output, never a venv (torch is gigabytes)
    assert not list((tmp_path / "gate" / "results").rglob("pyvenv.cfg"))
