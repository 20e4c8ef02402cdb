"""setup.py: every known failure is reported before compiling, as one paragraph
naming cause and fix (no traceback); and a CPU build against torch 2.13.0+cpu
really builds, installs and runs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import cudakit
import pytest

from conftest import REPO

PY = sys.executable  # the dev venv: torch 2.13.0+cpu


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


toolchain = _load("_test_mamba_toolchain", REPO / "mamba_build" / "toolchain.py")
kernels = _load("_test_mamba_kernels", REPO / "mamba_build" / "kernels.py")
DATA = toolchain.load_data()


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MAMBA_", "CUDA_", "TORCH_CUDA", "HIP_", "PYTORCH_ROCM")) and k not in ("CC", "CXX")}
    env.update(extra)
    return env


def run_setup(python: str, src: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "setup.py", *(args or ("build_ext",))], cwd=src, env=env,
                          check=False, capture_output=True, text=True, timeout=600)


def assert_clean_failure(proc: subprocess.CompletedProcess, *needles: str) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "Traceback" not in text, text
    assert "mamba-ssm build error:" in text and "How to fix:" in text, text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    assert "building '" not in text and "mamba-ssm: " not in text.replace("mamba-ssm build", ""), "compiled first"
    return text


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """A copy of the source tree: a failing check must never leave a build/ in the checkout."""
    return cudakit.stage_source(tmp_path_factory.mktemp("setup-src") / "src")


@pytest.fixture(scope="module")
def cu13_python() -> str:
    if not cudakit.python311():
        pytest.skip("python3.11 not available for the torch 2.14.1 (CUDA 13.0) venv")
    return str(cudakit.torch_cuda_venv() / "bin" / "python")


# ---- pure decisions (no subprocess) ----


def test_default_arch_lists_follow_the_toolkit():
    sms = lambda v: [a.sm for a in toolchain.default_archs(v, DATA)]
    assert sms("11.8") == [75, 80, 87, 90]
    assert sms("12.4") == [75, 80, 87, 90]
    assert sms("12.8") == [75, 80, 87, 90, 100, 120]
    assert sms("13.0") == [75, 80, 87, 90, 100, 103, 110, 120, 121]


def test_arch_overrides_parse_and_win():
    env = {"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX", "MAMBA_CUDA_ARCHS": ""}
    archs, source = toolchain.cuda_archs("13.0", env, DATA)
    assert source == "TORCH_CUDA_ARCH_LIST" and [(a.sm, a.ptx) for a in archs] == [(80, False), (90, True)]
    archs, source = toolchain.cuda_archs("13.0", {**env, "MAMBA_CUDA_ARCHS": "sm_80 120"}, DATA)
    assert source == "MAMBA_CUDA_ARCHS" and [a.sm for a in archs] == [80, 120]
    assert toolchain.gencode_flags(archs[:1] + [toolchain.Arch(90, True)]) == [
        "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


@pytest.mark.parametrize("value,needle", [("7.0", "no longer compiles"), ("13.0", "does not know"), ("8.x", "not a GPU")])
def test_bad_arch_lists_are_refused(value, needle):
    with pytest.raises(SystemExit, match=needle):
        toolchain.cuda_archs("13.0", {"MAMBA_CUDA_ARCHS": value}, DATA)


def test_cxx_standard_follows_torch():
    assert toolchain.cxx_standard("2.13.0+cpu", DATA) == "c++17"
    assert toolchain.cxx_standard("2.14.1", DATA) == "c++20"


def test_rocm_6_0_warns_about_the_header_patch():
    seen = []
    assert toolchain.check_rocm("6.0.32830", DATA, seen.append) == "6.0"
    assert len(seen) == 1 and "rocm_patch/apply.sh" in seen[0] and "rocm6_0.patch" in seen[0]
    toolchain.check_rocm("6.2.41133", DATA, seen.append)
    assert len(seen) == 1


def test_wrapper_nvcc_resolves_to_the_real_toolkit(tmp_path):
    """A wrapper script (like /usr/local/bin/nvcc here) is not in the toolkit: ask nvcc for its TOP."""
    if not cudakit.NVCC.is_file():
        pytest.skip("no CUDA toolkit on this machine")
    script(tmp_path / "bin" / "nvcc", f'exec {cudakit.NVCC} "$@"\n')
    tk = toolchain.resolve_cuda("13.0", {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert tk.home == cudakit.NVCC.parent.parent.resolve()
    assert (tk.home / "include" / "cuda_runtime.h").is_file() and tk.version.startswith("13.")


# ---- each error, for real: setup.py in a subprocess ----


def test_torch_hidden_by_build_isolation(src, tmp_path):
    """Plain `pip wheel .` (build isolation) with no prebuilt wheel for this torch: setup.py still finds the
    user's torch (read from its files), but cannot compile against it there; one line says what to add."""
    index = tmp_path / "empty-index"
    index.mkdir()
    proc = subprocess.run([PY, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(src)],
                          env=clean_env(MAMBA_WHEEL_INDEX=str(index)), check=False, capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and not list(tmp_path.glob("*.whl")), text
    assert "mamba-ssm build error: no prebuilt wheel for" in text and "pip's build isolation hides" in text, text
    assert "add --no-build-isolation" in text and "building 'mamba_ssm._C'" not in text, text
    assert "Traceback" not in text, text


def test_old_compiler_in_cc_is_refused(src, tmp_path):
    cc = script(tmp_path / "old-gcc", 'case "$1" in --version) echo "gcc (GCC) 7.5.0";; *) echo 7.5.0;; esac\n')
    proc = run_setup(PY, src, clean_env(CC=str(cc)))
    assert_clean_failure(proc, "is GCC 7.5", "-std=c++17", "GCC >= 9", "CC=gcc-12")


def test_bad_abi_override_is_refused(src):
    proc = run_setup(PY, src, clean_env(MAMBA_FORCE_CXX11_ABI="maybe"))
    assert_clean_failure(proc, "MAMBA_FORCE_CXX11_ABI='maybe'", "TRUE or")


def fake_torch(tmp_path: Path, version: str, hip: str | None = None) -> dict:
    """A stand-in torch package (for versions that cannot be installed here): only what setup.py reads first."""
    pkg = tmp_path / "faketorch" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"__version__ = {version!r}\n"
        "class version:\n    cuda = None\n"
        f"    hip = {hip!r}\n"
        "class _C:\n    _GLIBCXX_USE_CXX11_ABI = False\n"
    )
    return clean_env(PYTHONPATH=str(pkg.parent))


def test_unsupported_torch_is_refused(src, tmp_path):
    proc = run_setup(PY, src, fake_torch(tmp_path, "1.13.1+cu117"))
    assert_clean_failure(proc, "torch 1.13.1+cu117 is older than", "pip install 'torch>=2.1'")


def test_rocm_before_6_0_is_refused(src, tmp_path):
    proc = run_setup(PY, src, fake_torch(tmp_path, "2.2.2+rocm5.7", hip="5.7.31921"))
    assert_clean_failure(proc, "ROCm 5.7", "ROCm >= 6.0", "MAMBA_SKIP_CUDA_BUILD=TRUE")


def test_nvcc_of_another_cuda_major(src, tmp_path, cu13_python):
    fake_home = tmp_path / "cuda-12.4"
    (fake_home / "include").mkdir(parents=True)
    (fake_home / "include" / "cuda_runtime.h").write_text("")
    script(fake_home / "bin" / "nvcc",
           f'case "$*" in *-dryrun*) echo "#$ TOP={fake_home}" >&2;; '
           '*) echo "Cuda compilation tools, release 12.4, V12.4.131";; esac\n')
    env = clean_env(PATH=f"{fake_home / 'bin'}:/usr/bin:/bin")
    text = assert_clean_failure(run_setup(cu13_python, src, env), "is CUDA 12.4", "built with CUDA 13.0")
    assert "MAMBA_SKIP_CUDA_BUILD=TRUE" in text


def test_cuda_home_without_headers(src, tmp_path, cu13_python):
    bogus = tmp_path / "not-cuda"
    script(bogus / "bin" / "nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    proc = run_setup(cu13_python, src, clean_env(CUDA_HOME=str(bogus)))
    assert_clean_failure(proc, f"CUDA_HOME={bogus} has no include/cuda_runtime.h", "point CUDA_HOME at")


def test_nvcc_missing(src, tmp_path, cu13_python):
    # torch's last guess is /usr/local/cuda; a copy of the tree whose data file searches nowhere shows the message
    tree = tmp_path / "src"
    shutil.copytree(src, tree)
    data = tree / "mamba_build" / "build.toml"
    data.write_text(re.sub(r"^fallback_homes = .*$", "fallback_homes = []", data.read_text(), flags=re.MULTILINE))
    proc = run_setup(cu13_python, tree, clean_env(PATH="/usr/bin:/bin"))
    assert_clean_failure(proc, "nvcc was not found", "CUDA 13.x toolkit", "MAMBA_SKIP_CUDA_BUILD=TRUE")


def test_arch_the_toolkit_dropped(src, cu13_python):
    if not cudakit.NVCC.is_file():
        pytest.skip("no CUDA toolkit on this machine")
    env = clean_env(MAMBA_CUDA_ARCHS="7.0;8.0", PATH=f"{cudakit.NVCC.parent}:/usr/bin:/bin")
    assert_clean_failure(run_setup(cu13_python, src, env), "sm_70", "CUDA 13.0 no longer compiles")


def test_version_label_and_override(src):
    env = clean_env()
    out = run_setup(PY, src, env, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].lower().endswith("+cputorch2.13cxx11abitrue")
    out = run_setup(PY, src, clean_env(MAMBA_LOCAL_VERSION=""), "--version")
    assert re.fullmatch(r"\d+\.\d+\.\d+", out.stdout.strip().splitlines()[-1]), out.stdout
    out = run_setup(PY, src, clean_env(MAMBA_LOCAL_VERSION="mine1"), "--version")
    assert out.stdout.strip().splitlines()[-1].endswith("+mine1"), out.stdout


def test_metadata_needs_no_toolchain_and_compiling_checks_it(src, tmp_path):
    """--version and egg_info (what pip runs before a prebuilt lookup) read torch's files and check no
    compiler; a command that compiles does, up front, in one line."""
    env = clean_env(CXX=str(tmp_path / "no-such-g++"), CC=str(tmp_path / "no-such-gcc"))
    out = run_setup(PY, src, env, "--version")
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1].endswith("+cputorch2.13cxx11abitrue"), out.stderr
    out = run_setup(PY, src, env, "egg_info", "--egg-base", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    out = run_setup(PY, src, env, "build_ext")
    assert out.returncode != 0 and "mamba-ssm build error: the C++ compiler" in out.stderr and "How to fix:" in out.stderr
    assert "Traceback" not in out.stderr


# ---- the real CPU build ----


def test_cpu_build_against_torch_2_13_builds_installs_and_runs(src, tmp_path):
    dist, target = tmp_path / "dist", tmp_path / "site"
    env = clean_env(MAX_JOBS="2", MAMBA_FORCE_BUILD="TRUE")
    proc = subprocess.run([PY, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(dist),
                           str(src)], env=env, check=False, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    (wheel,) = dist.glob("mamba_ssm-*.whl")
    assert re.fullmatch(r"mamba_ssm-\d+\.\d+\.\d+\+cputorch2\.13cxx11abitrue-cp311-cp311-linux_x86_64\.whl",
                        wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: torch==2.13.*" in meta

    # the kernel object's command line: no torch header, no ABI macro (one object for every torch)
    kernel_cmds = [ln for ln in log_records(log) if "selective_scan_cpu.cpp" in ln and " -c " in ln]
    assert kernel_cmds, log[-3000:]
    assert all("torch" not in c and "_GLIBCXX_USE_CXX11_ABI" not in c for c in kernel_cmds), kernel_cmds
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in log  # the binding gets torch's ABI, passed by us
    # the binding: torch's headers, not Python's, so its object serves every Python of this torch
    import sysconfig

    (binding_cmd,) = [ln for ln in log_records(log) if "mamba-ssm: " in ln and "binding.cpp" in ln and " -c " in ln]
    assert "-isystem" in binding_cmd and "torch/include" in binding_cmd, binding_cmd
    assert sysconfig.get_paths()["include"] not in binding_cmd, binding_cmd
    # at::parallel_for's OpenMP is linked to the libgomp torch ships: one runtime in the process
    torch_lib = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "lib"
    assert "OpenMP libgomp.so.1 (torch)" in log and f"-L{torch_lib} -l:libgomp.so.1" in log, log[-3000:]

    subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True)
    probe = (
        "import json, torch\n"
        "from mamba_ssm.ops.selective_scan_interface import HAS_EXTENSION, selective_scan_fn, selective_scan_ref\n"
        "import mamba_ssm\n"
        "u = torch.randn(2, 4, 50); d = torch.rand(2, 4, 50); A = -torch.rand(4, 8)\n"
        "B = torch.randn(2, 8, 50); C = torch.randn(2, 8, 50)\n"
        "out = selective_scan_fn(u, d, A, B, C).double()\n"
        "ref = selective_scan_ref(u.double(), d.double(), A.double(), B.double(), C.double())\n"
        "err = (out - ref).abs().max().item()\n"
        "err32 = (selective_scan_ref(u, d, A, B, C).double() - ref).abs().max().item()\n"
        "gomp = sorted({l.split()[-1] for l in open('/proc/self/maps') if '/libgomp' in l})\n"
        "print(json.dumps({'ext': HAS_EXTENSION, 'err': err, 'err32': err32, 'threads': torch.get_num_threads(), 'file': mamba_ssm.__file__, 'gomp': gomp}))\n"
    )
    run = subprocess.run([PY, "-c", probe], env=clean_env(PYTHONPATH=str(target)), cwd=tmp_path,
                         check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["ext"] and result["err"] < 1e-4 and result["file"].startswith(str(target)), result
    assert result["gomp"] == [str(torch_lib / "libgomp.so.1")], result


def test_the_binding_object_is_keyed_by_the_torch_build_not_by_the_venv(tmp_path):
    """Each Python's venv has its own copy of torch's headers; the key names the torch build instead."""
    csrc = REPO / "csrc"
    flags = ["-O2", "-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1", "-fopenmp"]

    def key(venv: str, torch: str) -> str:
        include = tmp_path / venv / "lib" / "site-packages" / "torch" / "include"
        include.mkdir(parents=True, exist_ok=True)
        return kernels.binding_job(csrc, ["c++"], flags, {str(include): torch}).key

    same = "torch 2.14.1+cu130 f00dfeed"
    assert key("py310", same) == key("py313", same)  # one compile for every Python
    assert key("py310", same) != key("py310", "torch 2.14.0+cu130 0ddba11")  # another torch build: compiled again
    assert kernels.binding_job(csrc, ["c++"], [*flags[:2], "-D_GLIBCXX_USE_CXX11_ABI=0", flags[3]],
                               {str(tmp_path / "py310/lib/site-packages/torch/include"): same}).key != key("py310", same)  # fmt: skip


@pytest.mark.parametrize(
    ("files", "want"),
    [
        (["torch/lib/libgomp.so.1"], "torch/lib/libgomp.so.1"),  # torch >= 2.13 (seen)
        (["torch/lib/libgomp-a34b3233.so.1"], "torch/lib/libgomp-a34b3233.so.1"),  # renamed by auditwheel
        (["torch/lib/libc10.so", "torch.libs/libgomp-947d5fa1.so.1.0.0"], "torch.libs/libgomp-947d5fa1.so.1.0.0"),
        (["torch/lib/libc10.so"], None),  # a torch without its own OpenMP runtime: the compiler's
    ],
)
def test_the_openmp_runtime_torch_ships_is_found(tmp_path, files, want):
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes(b"")
    got = toolchain.torch_libgomp(str(tmp_path / "torch"))
    assert got == (tmp_path / want if want else None)


def log_records(log: str) -> list[str]:
    """The build log's records: its lines, each cut again before every ``mamba-ssm: `` it holds after its start
    (a record that another writer's line landed inside stays apart from it: the test reads our commands only)."""
    return [rec for line in log.splitlines() for rec in re.split(r"(?<=.)(?=mamba-ssm: )", line)]


def test_kernel_log_lines_are_one_write_each_under_threads():
    """Once a flaky CPU build test: kernels.build logs from a thread pool; each line must be one write.
    Cheap stand-in for the full build (which compiles the kernel): 300 jobs that write an empty object, 8 threads,
    a pipe."""
    code = (
        "import tempfile\nfrom pathlib import Path\nfrom mamba_build import kernels\n"
        "jobs = [kernels.KernelJob(Path(f'/x/k{i}.cpp'), ('sh', '-c', ': > \"$0\"', '{obj}', f'/x/k{i}.cpp' + ' -Dpad' * 100),"
        " f'key{i}') for i in range(300)]\n"
        "kernels.build(jobs, Path(tempfile.mkdtemp()), 8)\n"
    )
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
        lines = proc.stdout.splitlines()
        assert len(lines) == 300 and all(ln.startswith("mamba-ssm: sh -c") and ln.count("mamba-ssm: ") == 1
                                         for ln in lines), [ln for ln in lines if ln.count("mamba-ssm: ") != 1][:3]  # fmt: skip
    # and the test's reading of a log holds even where lines did merge
    merged = "mamba-ssm: c++ -c /s/selective_scan_cpu.cpp -o /k/x.o mamba-ssm: c++ -isystem torch/include -c binding.cpp"
    assert log_records(merged) == [
        "mamba-ssm: c++ -c /s/selective_scan_cpu.cpp -o /k/x.o ", "mamba-ssm: c++ -isystem torch/include -c binding.cpp"
    ]
