"""Build mamba-ssm for the torch that is installed (pip install --no-build-isolation).

Order: check everything that can be known before compiling (torch importable and
supported, CUDA toolkit matching torch, C++ compiler new enough, ROCm version,
arch list), then compile the kernel objects with a torch-independent command
line (mamba_build/kernels.py), then the thin torch binding with torch's
BuildExtension, and link them into mamba_ssm._C. Environment variables: see the
README, "Installing from source".
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

from setuptools import setup

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        raise SystemExit(
            "mamba-ssm build error: setuptools is older than 70.1 and the wheel package is missing, so this "
            "build cannot make a wheel. How to fix: pip install -U 'setuptools>=70.1' wheel, then retry "
            "with --no-build-isolation."
        ) from None

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"


def _load(name: str, path: Path):
    """Import a module by file path: setup.py runs before the package is installed."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


_variant = _load("_mamba_variant", ROOT / "mamba_ssm" / "_variant.py")
toolchain = _load("_mamba_toolchain", ROOT / "mamba_build" / "toolchain.py")
kernels = _load("_mamba_kernels", ROOT / "mamba_build" / "kernels.py")


def _base_version() -> str:
    text = (ROOT / "mamba_ssm" / "__init__.py").read_text()
    return re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE).group(1)


def _warn(message: str) -> None:
    print(f"mamba-ssm build warning: {message}", file=sys.stderr)


def _prebuilt_wheel_or_none(version: str, dist_dir: str) -> Path | None:
    """The sha256-verified wheel for this variant, downloaded into ``dist_dir`` (None: compile).

    mamba_ssm/_prebuilt.py reads MAMBA_WHEEL_INDEX (default: the project's index) and prints one
    line saying what it found or why not. Skipped entirely when MAMBA_FORCE_BUILD=TRUE.
    """
    return _load("_mamba_prebuilt", ROOT / "mamba_ssm" / "_prebuilt.py").for_setup(version, dist_dir)


class Plan:
    """Everything decided before compiling, from torch and the environment."""

    def __init__(self, env=os.environ) -> None:
        self.env = env
        data = toolchain.load_data()
        torch = toolchain.import_torch()
        self.torch_version = torch.__version__
        toolchain.check_torch(self.torch_version, data)
        self.skip_gpu = bool(toolchain.env_bool(env, "MAMBA_SKIP_CUDA_BUILD"))
        self.force_build = bool(toolchain.env_bool(env, "MAMBA_FORCE_BUILD"))
        # Stable ABI (MAMBA_STABLE_ABI=TRUE): csrc/binding_stable.cpp, one cp310-abi3 wheel for torch >= floor.
        self.stable = bool(toolchain.env_bool(env, "MAMBA_STABLE_ABI"))
        self.stable_floor = data["stable"]["floor"]
        if self.stable and toolchain.version_tuple(self.torch_version)[:2] < toolchain.version_tuple(self.stable_floor)[:2]:
            raise toolchain.BuildConfigError(
                f"MAMBA_STABLE_ABI=TRUE needs torch >= {self.stable_floor} (its stable C API), but torch is {self.torch_version}",
                f"install torch>={self.stable_floor} or unset MAMBA_STABLE_ABI to build a classic wheel for this torch",
            )
        forced_abi = toolchain.env_bool(env, "MAMBA_FORCE_CXX11_ABI")
        torch_abi = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
        self.cxx11abi = torch_abi if forced_abi is None else forced_abi
        if forced_abi is not None and forced_abi != torch_abi:
            _warn(
                f"MAMBA_FORCE_CXX11_ABI={'TRUE' if forced_abi else 'FALSE'} differs from the installed torch "
                f"({'TRUE' if torch_abi else 'FALSE'}); the wheel will not load with this torch"
            )
        cuda = getattr(torch.version, "cuda", None)
        hip = getattr(torch.version, "hip", None)
        self.backend = "cpu" if self.skip_gpu or not (cuda or hip) else ("rocm" if hip else "cuda")
        self.std = toolchain.cxx_standard(self.torch_version, data)
        toolchain.check_compilers(toolchain.compilers_from_env(env), self.std, self.torch_version, data)
        self.cuda = None
        self.archs: list = []
        self.hip_archs: list[str] = []
        if self.backend == "cuda":
            self.cuda = toolchain.resolve_cuda(cuda, env, data)
            self.archs, self.arch_source = toolchain.cuda_archs(self.cuda.version, env, data)
            self.nvcc_flags = list(data["cuda"]["nvcc_flags"])
        elif self.backend == "rocm":
            toolchain.check_rocm(hip, data, _warn)
            self.hip_archs = toolchain.hip_archs(env, data)
            if self.stable:
                raise toolchain.BuildConfigError(
                    "MAMBA_STABLE_ABI=TRUE covers CPU and CUDA builds only, and this torch is a ROCm build",
                    "unset MAMBA_STABLE_ABI to build a classic wheel for this torch",
                )
        self.jobs = toolchain.jobs(env, max(1, len(self.archs)))
        self.variant = _variant.from_values(
            self.torch_version,
            cuda=self.cuda.version if self.backend == "cuda" else None,
            hip=hip if self.backend == "rocm" else None,
            cxx11abi=self.cxx11abi,
        )
        if self.stable:
            self.variant = self.variant.as_stable()
        self.torch_mm = _variant.torch_major_minor(self.torch_version)

    @property
    def version(self) -> str:
        local = self.env.get("MAMBA_LOCAL_VERSION")
        label = self.variant.label if local is None else local.strip()
        return f"{_base_version()}+{label}" if label else _base_version()

    def summary(self) -> str:
        parts = [f"torch {self.torch_version}", f"backend {self.backend}", f"-std={self.std}",
                 f"cxx11abi {'TRUE' if self.cxx11abi else 'FALSE'}", f"version {self.version}",
                 f"MAX_JOBS {self.jobs.max_jobs}"]
        if self.stable:
            parts.append(f"stable ABI (torch >= {self.stable_floor}, cp310-abi3)")
        if self.cuda:
            archs = " ".join(f"sm_{a.sm}{'+PTX' if a.ptx else ''}" for a in self.archs)
            parts += [f"CUDA_HOME {self.cuda.home} (CUDA {self.cuda.version})",
                      f"archs {archs} ({self.arch_source})", f"nvcc --threads {self.jobs.nvcc_threads}"]
        if self.hip_archs:
            parts.append(f"HIP archs {' '.join(self.hip_archs)}")
        return "mamba-ssm build: " + ", ".join(parts)


def _cxx_argv(env) -> list[str]:
    import shlex

    return shlex.split(env["CXX"]) if env.get("CXX") else ["c++"]


def _extension(plan: Plan):
    # CUDA_HOME must be right before torch.utils.cpp_extension is imported: it reads it once.
    if plan.cuda:
        os.environ["CUDA_HOME"] = str(plan.cuda.home)
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    abi_flag = f"-D_GLIBCXX_USE_CXX11_ABI={int(plan.cxx11abi)}"  # torch >= 2.13 no longer adds it
    cxx = ["-O2", f"-std={plan.std}", abi_flag, "-fopenmp", "-fvisibility=hidden"]
    depends = [str(p) for p in [*CSRC.glob("*.h"), *CSRC.glob("*.inc"), *CSRC.glob("*.cpp"), *CSRC.glob("cuda/*")]]
    # -fopenmp: at::parallel_for is OpenMP code inlined from ATen headers (torch ships libgomp.so.1);
    # --strip-debug: Python's CFLAGS carry -g, which would be most of the binding's size.
    common = {"name": "mamba_ssm._C", "sources": ["csrc/binding.cpp"], "depends": depends, "extra_link_args": ["-fopenmp", "-Wl,--strip-debug"]}
    if plan.stable:
        # Only torch's stable C API: no C++ ABI macro, no OpenMP runtime, no Python symbol.
        major, minor = toolchain.version_tuple(plan.stable_floor)[:2]
        flags = ["-O2", "-std=c++17", "-fvisibility=hidden", "-DTORCH_STABLE_ONLY",
                 f"-DTORCH_TARGET_VERSION=0x{(major << 56) | (minor << 48):016x}"]
        common.update(sources=["csrc/binding_stable.cpp"], extra_link_args=["-Wl,--strip-debug"], py_limited_api=True)
        if plan.backend == "cpu":
            return CppExtension(extra_compile_args={"cxx": flags}, **common)
        return CUDAExtension(extra_compile_args={"cxx": [*flags, "-DUSE_CUDA"], "nvcc": []}, **common)
    if plan.backend == "cpu":
        return CppExtension(extra_compile_args={"cxx": cxx}, **common)
    if plan.backend == "cuda":
        return CUDAExtension(extra_compile_args={"cxx": [*cxx, "-DWITH_CUDA"], "nvcc": []}, **common)
    # ROCm: torch hipifies the .cu sources and compiles them with hipcc (its supported HIP path).
    common["sources"] = ["csrc/binding.cpp", *sorted(f"csrc/cuda/{p.name}" for p in (CSRC / "cuda").glob("*.cu"))]
    hipcc = ["-O3", "-std=c++17", "-DWITH_CUDA", "-fPIC", *[f"--offload-arch={a}" for a in plan.hip_archs]]
    return CUDAExtension(extra_compile_args={"cxx": [*cxx, "-DWITH_CUDA"], "nvcc": hipcc}, **common)


def _build_ext_class(plan: Plan):
    from torch.utils.cpp_extension import BuildExtension

    class build_ext(BuildExtension):
        """Compile the kernel objects first (torch-independent command lines), then the binding."""

        def build_extensions(self) -> None:
            os.environ.setdefault("MAX_JOBS", str(plan.jobs.max_jobs))
            jobs = [kernels.cpu_job(CSRC, _cxx_argv(plan.env))]
            if plan.backend == "cuda":  # (ROCm: torch hipifies and compiles the .cu sources itself)
                jobs += kernels.cuda_jobs(
                    CSRC, plan.cuda.nvcc, plan.nvcc_flags, toolchain.gencode_flags(plan.archs),
                    plan.jobs.nvcc_threads, plan.env.get("CC"),
                )
            # MAMBA_KERNEL_CACHE=DIR: a folder shared by every build of one toolchain (objects are keyed by
            # command line, compiler and sources, so a hit is exact); default: this build's own folder.
            cache = plan.env.get("MAMBA_KERNEL_CACHE", "").strip()
            objects = kernels.build(jobs, Path(cache) if cache else Path(self.build_temp) / "kernels", plan.jobs.max_jobs)
            for ext in self.extensions:
                ext.extra_objects = [str(o) for o in objects]
            super().build_extensions()

    return build_ext


class bdist_wheel_prebuilt(bdist_wheel):
    """Ship a prebuilt wheel for this environment when one exists (unless MAMBA_FORCE_BUILD=TRUE)."""

    plan: Plan | None = None

    def run(self) -> None:
        plan = type(self).plan
        if plan is not None and not plan.force_build:
            wheel = _prebuilt_wheel_or_none(plan.version, self.dist_dir)
            if wheel is not None:
                print(f"mamba-ssm: using prebuilt {wheel}")
                return
        super().run()


def main() -> None:
    # Metadata-only commands (egg_info for an sdist, --version) must work without torch.
    metadata_only = len(sys.argv) > 1 and all(a in ("egg_info", "sdist", "--version", "--name") for a in sys.argv[1:2])
    if metadata_only and importlib.util.find_spec("torch") is None:
        setup(version=_base_version(), install_requires=["torch"])
        return
    plan = Plan()
    print(plan.summary(), file=sys.stderr)
    bdist_wheel_prebuilt.plan = plan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)  # torch's "no CUDA runtime found" notice
        ext = _extension(plan)
    stable = {"options": {"bdist_wheel": {"py_limited_api": "cp310"}}} if plan.stable else {}
    setup(
        version=plan.version,
        install_requires=[f"torch>={plan.stable_floor}" if plan.stable else f"torch=={plan.torch_mm}.*"],
        ext_modules=[ext],
        cmdclass={"build_ext": _build_ext_class(plan), "bdist_wheel": bdist_wheel_prebuilt},
        **stable,
    )


if __name__ == "__main__":
    main()
