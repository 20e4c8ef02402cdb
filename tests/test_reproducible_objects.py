"""Reproducible objects: what a compiler writes into an object must not depend on a random name or folder.

The Docker twice-builds (test_reproducible.py) compare whole wheels; these checks pin each fix where it is
made, cheaply: the object's name nvcc sees (mamba_build/kernels.py), nvcc's own temp names and the folder it
records (a real nvcc on a tiny kernel, not the project's: minutes less), and the host executor's fixed
build root.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cudakit
import pytest

from builder.sourcing.reproducible import stamp
from mamba_build import kernels  # stdlib only; setup.py's helper folder, importable from the checkout

from conftest import REPO

def test_an_object_is_compiled_under_its_final_name_not_a_random_one(tmp_path: Path) -> None:
    """nvcc names its intermediate files after the object (--objdir-as-tempdir) and those names land in
    the object: a "compiler" that writes the name it was given must give the same bytes in two caches."""
    job = kernels.KernelJob(tmp_path / "k.cu", ("sh", "-c", 'basename "$0" > "$0"', "{obj}"), "k3y")
    a = kernels.build([job], tmp_path / "cache-a", 1, log=lambda _: None)[0]
    b = kernels.build([job], tmp_path / "cache-b", 1, log=lambda _: None)[0]
    assert a.read_bytes() == b.read_bytes() == f"{a.name}\n".encode()
    assert sorted(p.name for p in (tmp_path / "cache-a").iterdir()) == [a.name]  # no temp folder left behind


def test_a_compiler_that_writes_no_object_is_a_failed_compile(tmp_path: Path) -> None:
    job = kernels.KernelJob(tmp_path / "k.cpp", ("true", "-o", "{obj}"), "k3y")
    with pytest.raises(SystemExit, match="compiling k.cpp failed \\(it wrote no object\\)"):
        kernels.build([job], tmp_path / "cache", 1, log=lambda _: None)
    assert list((tmp_path / "cache").iterdir()) == []


def _csrc(where: Path) -> Path:
    shutil.copytree(REPO / "csrc", where / "csrc")
    return where / "csrc"


def _fake_nvcc(path: Path, help_text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'#!/bin/sh\n[ "$1" = --help ] && echo "{help_text}"\necho "Cuda compilation tools, release 13.0"\n'
    )
    path.chmod(0o755)
    return path


def test_nvcc_objects_are_keyed_by_their_folder_and_cpu_objects_are_not(tmp_path: Path) -> None:
    """nvcc records the folder it compiled in (the -lineinfo directory, anonymous-namespace hashes): an
    object compiled in another folder must not be reused. GCC's are path-free (-ffile-prefix-map), so
    the CPU kernel and the binding stay shared across build folders."""
    one, two = _csrc(tmp_path / "one"), _csrc(tmp_path / "two")
    nvcc = _fake_nvcc(tmp_path / "new" / "nvcc", "--objdir-as-tempdir (-objtemp)")

    def cuda(csrc):
        return kernels.cuda_jobs(csrc, nvcc, ["-O3", "-lineinfo"], ["-gencode", "arch=compute_80,code=sm_80"], 1, None)

    assert [j.key for j in cuda(one)] != [j.key for j in cuda(two)]
    assert [j.key for j in cuda(one)] == [j.key for j in cuda(one)]
    assert kernels.cpu_job(one, ["c++"]).key == kernels.cpu_job(two, ["c++"]).key
    include = {str(tmp_path / "torch" / "include"): "torch 2.14.1"}
    assert (
        kernels.binding_job(one, ["c++"], ["-O2"], include).key
        == kernels.binding_job(two, ["c++"], ["-O2"], include).key
    )
    for job in [*cuda(one), kernels.cpu_job(one, ["c++"])]:
        assert f"-ffile-prefix-map={one.parent}=." in job.argv
    assert all("--objdir-as-tempdir" in j.argv for j in cuda(one))
    # an nvcc that does not know the flag is not given it (it would refuse to compile)
    old = _fake_nvcc(tmp_path / "old" / "nvcc", "--output-directory")
    assert not any("--objdir-as-tempdir" in j.argv for j in kernels.cuda_jobs(one, old, [], [], 1, None))


TINY_KERNEL = """\
namespace { struct Local { int v; }; __device__ int helper(int x) { return 3 * x; } }
__global__ void other(Local* l) { l->v = helper(1); }
template <int N> __global__ void kern(int* p) { p[threadIdx.x] = helper(N + threadIdx.x); }
void launch(int* p) { kern<4><<<1, 32>>>(p); other<<<1, 1>>>(nullptr); }
"""


@pytest.mark.cuda_build
@pytest.mark.skipif(not cudakit.NVCC.is_file(), reason=f"needs the CUDA 13.0 toolkit at {cudakit.NVCC}")
def test_real_nvcc_gives_the_same_object_twice_in_one_folder(tmp_path: Path) -> None:
    """A real nvcc (13.0), the project's flags (-lineinfo), a tiny kernel with an anonymous namespace: compiled
    twice into two cold caches from one source folder, the same bytes (without --objdir-as-tempdir nvcc's
    tmpxft_<pid> names differ); from another folder, other bytes (so kernels.py keys objects by folder)."""
    srcs = []
    for where in ("a", "b"):
        csrc = tmp_path / where / "csrc"
        (csrc / "cuda").mkdir(parents=True)
        (csrc / "selective_scan.h").write_text("")
        (csrc / "cuda" / "tiny.cu").write_text(TINY_KERNEL)
        stamp(csrc, 1_700_000_000)  # -lineinfo records the source's mtime: the farm sets it (one time)
        srcs.append(csrc)

    def compiled(csrc: Path, cache: Path) -> bytes:
        (job,) = kernels.cuda_jobs(csrc, cudakit.NVCC, ["-O3", "-std=c++17", "-lineinfo"],
                                   ["-gencode", "arch=compute_80,code=sm_80"], 1, None)  # fmt: skip
        return kernels.build([job], cache, 1, log=lambda _: None)[0].read_bytes()

    first = compiled(srcs[0], tmp_path / "cache1")
    assert compiled(srcs[0], tmp_path / "cache2") == first
    assert compiled(srcs[1], tmp_path / "cache3") != first  # the folder is in the bytes: hence the key


def test_host_builds_of_one_spec_use_one_fixed_folder_emptied_before_and_after(tmp_path: Path, monkeypatch) -> None:
    """The host executor builds where nvcc records the same folder every time (not a random temp folder),
    and a killed build's leftovers never reach the next build."""
    from builder.building.executors import host

    monkeypatch.setattr(host, "BUILD_ROOTS", tmp_path / "build")
    seen = []
    for _ in range(2):
        with host.build_root("cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64") as root:
            assert list(root.iterdir()) == []
            (root / "src").mkdir()
            (root / "src" / "left-by-a-killed-build").write_text("x")
            seen.append(root)
        assert not root.exists()
    assert seen[0] == seen[1] and seen[0].parent == tmp_path / "build"
    (seen[0] / "stale").mkdir(parents=True)  # a build killed before its cleanup ran
    with host.build_root("cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64") as root:
        assert list(root.iterdir()) == []
    with pytest.raises(ValueError, match="not a plain file name"), host.build_root("../escape"):  # no path from an id
        pass


@pytest.mark.parametrize("knows", [True, False], ids=["nvcc-with-the-flag", "older-nvcc"])
def test_build_sh_gives_a_recipes_nvcc_objdir_as_tempdir_when_it_knows_it(tmp_path: Path, knows: bool) -> None:
    """build.sh's probe, with an nvcc whose help is longer than a pipe holds and names the flag early: grep stopping
    at the first match must not make the probe fail (pipefail and SIGPIPE did, in a real causal-conv1d build)."""
    from builder.building.executors import BUILD_SCRIPT

    flag = "--objdir-as-tempdir" if knows else "--output-directory"
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f'#!/bin/sh\necho "{flag}"\nyes "a line of help" | head -n 20000\n')
    nvcc.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "FARM_BUILD_ID": "x", "FARM_PYTHON": "/bin/false", "FARM_TORCH_REQ": "",
           "FARM_CCACHE": "nvcc", "CUDA_HOME": str(tmp_path / "cuda"), "FARM_OUT": str(tmp_path / "out")}  # fmt: skip
    for _ in range(5):  # the race went either way from one run to the next
        run = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        out = run.stdout
        assert ("== nvcc: NVCC_APPEND_FLAGS=--objdir-as-tempdir" in out) is knows, out[-2000:]
