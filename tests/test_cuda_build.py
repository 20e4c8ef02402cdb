"""The CUDA extension really builds (torch 2.14.1 + nvcc 13.0) and carries what was asked for.

One sm_80 build is in the CI set (a few minutes on 2 cores); the full CUDA 13 arch
list is @slow. No GPU is needed: torch's CUDA build imports without one, and the
kernels are inspected, not run (their logic runs on the CPU in test_cuda_emulation.py;
numerics on a real GPU are not checked on this machine).
"""

from __future__ import annotations

import re

import cudakit
import pytest

pytestmark = [
    pytest.mark.cuda_build,
    pytest.mark.skipif(not cudakit.NVCC.is_file(), reason=f"needs the CUDA 13.0 toolkit at {cudakit.NVCC}"),
    pytest.mark.skipif(cudakit.python311() is None, reason="needs python3.11 (the torch 2.14.1 wheel is cp311)"),
]


def _build(tmp_path_factory, name: str, archs: str):
    venv = cudakit.torch_cuda_venv()
    work = tmp_path_factory.mktemp(name)
    build = cudakit.build_wheel(venv, cudakit.stage_source(work / "src"), work / "dist", archs)
    assert build.returncode == 0 and build.wheel, f"build for {archs} failed:\n{build.log[-6000:]}"
    so = cudakit.extension_so(cudakit.unpack(build.wheel, work / "unpacked"))
    return venv, build, so


@pytest.fixture(scope="module")
def sm80(tmp_path_factory):
    return _build(tmp_path_factory, "sm80", "8.0")


def test_sm80_build_registers_both_ops_with_a_cuda_kernel(sm80):
    venv, _, so = sm80
    kernels = cudakit.registered_kernels(venv, so)
    assert kernels == {
        "selective_scan_fwd": {"CPU": True, "CUDA": True},
        "selective_scan_bwd": {"CPU": True, "CUDA": True},
    }


def test_sm80_build_embeds_exactly_sm80(sm80):
    venv, _, so = sm80
    sass, ptx = cudakit.embedded_archs(venv, so)
    assert sass == {"sm_80"}
    assert ptx == set()  # no "+PTX" was asked for


def test_sm80_wheel_is_labelled_for_cuda13_torch214(sm80):
    _, build, _ = sm80
    # pip lower-cases the local label in file names (cxx11abiTRUE -> cxx11abitrue)
    label = r"\+cu13torch2\.14cxx11abi(true|false)-cp311-cp311-linux_x86_64\.whl$"
    assert re.search(label, build.wheel.name, re.IGNORECASE), build.wheel.name


def test_kernel_tus_compile_without_torch(sm80):
    """The .cu objects are compiled with no torch include path, so one object serves every torch/ABI variant."""
    _, build, _ = sm80
    nvcc = [line for line in build.log.splitlines() if "nvcc" in line and " -c " in line and ".cu " in line]
    assert {re.search(r"(\w+)\.cu ", line).group(1) for line in nvcc} == {"selective_scan_fwd", "selective_scan_bwd"}
    assert not [line for line in nvcc if "torch" in line]


@pytest.mark.slow
def test_full_cuda13_arch_list(tmp_path_factory):
    venv, _, so = _build(tmp_path_factory, "cuda13", cudakit.CUDA13_ARCHS)
    sass, _ = cudakit.embedded_archs(venv, so)
    want = {f"sm_{a.replace('.', '')}" for a in cudakit.CUDA13_ARCHS.split(";")}
    assert sass == want
