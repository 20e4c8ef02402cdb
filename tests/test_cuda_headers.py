"""The PyPI-assembled CUDA 13 toolkit compiles what extensions include, and a toolkit without those headers
fails before any compile, naming the package that provides the missing one.

The compile (nvcc on a .cu that includes ATen/cuda/CUDAContext.h against torch 2.14.1's headers) needs no GPU;
it is @slow. A cold farm cache assembles the toolkit first (the nvcc wheels, then the header wheels, whose
include/ alone is kept).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import cudakit
import pytest

from builder.building.executors import BUILD_SCRIPT, BuildOptions
from builder.facts.compat import load

CONTEXT_CU = """\
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

void scale_(torch::Tensor x, float a) {
  auto stream = at::cuda::getCurrentCUDAStream();
  cusparseHandle_t sparse = at::cuda::getCurrentCUDASparseHandle();  // cusparse.h, through CUDAContext.h
  (void)sparse;
  scale<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), a, x.numel());
}
"""


@pytest.fixture(scope="module")
def pypi_toolkit(tmp_path_factory) -> Path:
    """CUDA 13.0 as the host executor assembles it from PyPI (the machine's own nvcc kept off PATH)."""
    from builder.building.executors.host import HostExecutor

    mp = pytest.MonkeyPatch()
    nvcc = shutil.which("nvcc")
    if nvcc:
        mp.setenv(
            "PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(Path(nvcc).parent))
        )
    try:
        executor = HostExecutor(BuildOptions(log=print))
        home = Path(executor._cuda_home("13.0"))
        assert executor.ran(_Spec())["toolchain"]["toolkit"]["origin"] == "pypi"
    finally:
        mp.undo()
    return home


class _Spec:
    toolkit, accelerator = "13.0", "cu130"


@pytest.mark.cuda_build
def test_the_pypi_toolkit_has_every_header_torchs_cuda_headers_include(pypi_toolkit):
    headers = load().cuda_headers
    assert {"cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h", "curand.h"} <= set(headers)
    missing = [h for h in headers if not (pypi_toolkit / "include" / h).is_file()]
    assert not missing, missing
    # headers only: the libraries' shared objects (hundreds of MB) are not taken
    assert not list((pypi_toolkit / "lib").glob("libcusparse*")) and not list((pypi_toolkit / "lib").glob("libcublas*"))


@pytest.mark.slow
@pytest.mark.cuda_build
@pytest.mark.skipif(cudakit.python311() is None, reason="needs python3.11 (the torch 2.14.1 wheel is cp311)")
def test_a_cu_including_the_cuda_context_compiles_with_the_pypi_toolkit(pypi_toolkit, tmp_path):
    venv = cudakit.torch_cuda_venv()
    py = venv / "bin" / "python"
    info = subprocess.run(
        [str(py), "-c", "import sysconfig, torch.utils.cpp_extension as c; print(*c.include_paths(), sysconfig.get_paths()['include'])"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    src = tmp_path / "context.cu"
    src.write_text(CONTEXT_CU)
    cmd = [str(pypi_toolkit / "bin" / "nvcc"), "-std=c++20", "-arch=sm_80", "-c", str(src), "-o", str(tmp_path / "o.o"),
           *[f"-I{p}" for p in info], "-DTORCH_EXTENSION_NAME=context", "-D_GLIBCXX_USE_CXX11_ABI=1"]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(["flock", "/tmp/farm-heavy.lock", *cmd], capture_output=True, text=True, check=False)
    print(f"nvcc on CUDAContext.h: {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "o.o").stat().st_size > 0


def test_a_toolkit_without_the_headers_fails_before_any_compile_naming_the_package(tmp_path):
    from builder.building.executors import spec_env
    from builder.planning.plan import load_plan

    spec = next(b for b in load_plan(profile="ci").builds if b.accelerator.startswith("cu"))
    bare = tmp_path / "cuda"
    (bare / "include").mkdir(parents=True)
    for header in load().cuda_headers:  # every one but cuSPARSE's (what a bare nvcc 13.0 lacked first)
        if header != "cusparse.h":
            (bare / "include" / header).write_text("")
    src = tmp_path / "src"
    (src / "csrc").mkdir(parents=True)
    (src / "csrc" / "op.cu").write_text(CONTEXT_CU)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": str(bare), "FARM_PYTHON": "/bin/false", "FARM_SRC": str(src),
           "FARM_OUT": str(tmp_path / "out"), "FARM_BUILD_ID": spec.id,
           "FARM_CUDA_HEADERS": spec_env(spec, max_jobs=1)["FARM_CUDA_HEADERS"]}  # fmt: skip
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1
    assert "has no cusparse.h" in proc.stdout and "the PyPI package nvidia-cusparse provides it" in proc.stdout, (
        proc.stdout
    )
    assert "pip wheel" not in proc.stdout and "torch" not in proc.stdout.split("error:")[1]  # nothing ran after it
    # a source that includes none of them is not held to them
    (src / "csrc" / "op.cu").write_text("__global__ void k() {}\n")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=60)
    assert "has no" not in proc.stdout
