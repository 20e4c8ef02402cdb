"""The CUDA kernels' own source, run on the CPU (tests/cuda_emu: one thread per CUDA thread,
real barriers and shuffles), matches the CPU kernels on the same parameter structs.

This checks the kernels' indexing, scans, chunk carries, masking and gradient formulas
without a GPU; it cannot check what only hardware shows (memory model, exact
transcendental functions, speed). Warp size 32 (NVIDIA) and 64 (AMD's wave64, as
hipified). Cases: narrow and wide mode, 1-3 chunks, all B/C layouts and options, 3 dtypes.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO

EMU = REPO / "tests" / "cuda_emu"
CXX = shutil.which("g++")


@pytest.mark.skipif(CXX is None, reason="needs g++ (C++20: std::barrier, _Float16)")
# wave64 doubles the cost (one OS thread per lane); it matters for ROCm builds (run with --run-slow)
@pytest.mark.parametrize("warp", [32, pytest.param(64, marks=pytest.mark.slow)], ids=["warp32-nvidia", "wave64-amd"])
def test_cuda_kernels_match_cpu_kernels_under_emulation(tmp_path, warp):
    exe = tmp_path / "emu_harness"
    cuda = REPO / "csrc" / "cuda"
    cmd = [
        CXX,
        "-std=c++20",
        "-O1",
        f"-DMAMBA_WARP_SIZE={warp}",
        "-pthread",
        "-fopenmp-simd",
        "-I",
        str(EMU / "include"),
        "-I",
        str(REPO / "csrc"),
        "-x",
        "c++",
        str(cuda / "selective_scan_fwd.cu"),
        str(cuda / "selective_scan_bwd.cu"),
        "-x",
        "none",
        str(REPO / "csrc" / "selective_scan_cpu.cpp"),
        str(EMU / "harness.cpp"),
        "-o",
        str(exe),
    ]
    build = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], check=False, capture_output=True, text=True, timeout=600)
    lines = run.stdout.splitlines()
    assert len(lines) == 9, run.stdout + run.stderr
    assert run.returncode == 0 and all(line.startswith("OK") for line in lines), run.stdout
