"""Build mamba-ssm for the torch that is installed: `pip install mamba-ssm` takes the prebuilt wheel
for it (under pip's build isolation too: torch is read from the target environment's files), and
`pip install --no-build-isolation mamba-ssm` also compiles when no wheel fits.

Order: the Target (torch's version, CUDA/ROCm and C++ ABI read from its files, no
import, plus the MAMBA_* settings) gives the version and the metadata; bdist_wheel
then ships the published wheel for that variant when one exists. Only when
something will be compiled does the CompilePlan check everything else (C++ compiler
new enough, CUDA toolkit matching torch, ROCm version, arch list); then the kernel
objects are compiled with a torch-independent command line
(mamba_build/kernels.py), then the binding against torch's headers, and they are
linked against torch's libraries into mamba_ssm._C: torch is never imported, so an
interpreter of another machine can build (the farm's cross builds). ROCm builds go
through torch's BuildExtension (it hipifies the sources). Environment variables: see the README,
"Installing from source". (Not the farm's builder.planning.plan.Plan, which plans many wheels.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

import setuptools
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"


def _load(name: str, path: Path):
    """Import a module by file path: setup.py runs before the package is installed."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


# setuptools >= 70.1 (its bdist_wheel), or one line naming the fix: the backend's check, here for `python setup.py`.
_load("_mamba_backend", ROOT / "mamba_build" / "mamba_backend.py")
from setuptools.command.bdist_wheel import bdist_wheel

_variant = _load("_mamba_variant", ROOT / "mamba_ssm" / "variant.py")
toolchain = _load("_mamba_toolchain", ROOT / "mamba_build" / "toolchain.py")
kernels = _load("_mamba_kernels", ROOT / "mamba_build" / "kernels.py")


def _base_version() -> str:
    text = (ROOT / "mamba_ssm" / "__init__.py").read_text()
    return re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE).group(1)


def _warn(message: str) -> None:
    print(f"mamba-ssm build warning: {message}", file=sys.stderr)


def _license() -> dict:
    """Apache-2.0 in the form this setuptools reads: a PEP 639 expression from 77 on (the License
    field before; pyproject.toml's string form fails before 77, its table form is deprecated from 77)."""
    old = toolchain.version_tuple(setuptools.__version__)[:2] < (77, 0)
    return {"license": "Apache-2.0"} if old else {"license_expression": "Apache-2.0"}


def _prebuilt_wheel_or_none(target: Target, dist_dir: str) -> Path | None:
    """The sha256-verified wheel for this variant, downloaded into ``dist_dir`` (None: compile).

    mamba_ssm/prebuilt.py reads MAMBA_WHEEL_INDEX (default: the project's index) and prints one
    line saying what it found or why not. Under build isolation nothing can be compiled, so a miss
    is kept for the one-line error instead (_no_compiling_in_isolation).
    """
    import io

    prebuilt = _load("_mamba_prebuilt", ROOT / "mamba_ssm" / "prebuilt.py")
    said = io.StringIO() if target.isolation else sys.stderr
    wheel = prebuilt.for_setup(target.labelled_version, dist_dir, variant=target.needed, stream=said)
    if target.isolation:
        line = said.getvalue().strip()
        if wheel is not None:
            print(line, file=sys.stderr, flush=True)
        target.miss = re.sub(r"(;|:|,)?( refusing it and| and)? building (it )?from source$", "", line.removeprefix("mamba-ssm: "))
    return wheel


def _isolation(env=os.environ) -> str | None:
    """Whose build isolation this setup.py runs under: None (it sees the environment it installs into),
    "pip" or "uv".

    pip (23.0 to 26.3, measured) runs the target environment's own interpreter and only takes that
    environment's site-packages off sys.path: sys.prefix and sysconfig's purelib still name it, so
    its torch can be read from its files (never imported: that needs its whole site-packages). uv
    (0.13) builds in a venv of its own (sys.prefix and VIRTUAL_ENV <cache>/builds-v0/.tmpXXXX) and
    names the target environment nowhere (UV_INTERNAL__BUILD_DIR is the source tree, with or without
    isolation).
    """
    import sysconfig

    paths = sysconfig.get_paths()
    norm = lambda p: os.path.normcase(os.path.realpath(p))
    if not {norm(paths["purelib"]), norm(paths["platlib"])} & {norm(p) for p in sys.path if p}:
        return "pip"
    if Path(sys.prefix).parent.name.startswith("builds-v"):  # uv's build venv (--no-build-isolation: the target)
        return "uv"
    return None


# Added to every command the isolation errors name: what it takes to compile against the user's torch.
NO_ISOLATION = "add --no-build-isolation to the install command (that environment then needs setuptools>=70.1 too)"


def _torch_facts(isolation: str | None = None):
    """torch's version, CUDA/HIP release and C++ ABI, read from its files (importing torch costs seconds).

    Under build isolation only the target environment's torch counts: one the front-end put into the
    build environment is never looked at, so nothing is labelled for, or compiled against, it.
    """
    if isolation == "uv":
        raise toolchain.BuildConfigError(
            "uv builds mamba-ssm in an environment of its own that neither holds your torch nor says where "
            "it is installing, so this build cannot tell which torch the wheel is for",
            "install torch first, then uv pip install --no-build-isolation mamba-ssm (with setuptools>=70.1 "
            "installed in that environment)",
        )
    if isolation == "pip":
        import site
        import sysconfig

        paths = sysconfig.get_paths()
        # Where that interpreter imports from: its user site first (outside a venv), then site-packages.
        user = [site.getusersitepackages()] if sys.prefix == sys.base_prefix else []
        facts = _variant.installed_torch(list(dict.fromkeys([*user, paths["purelib"], paths["platlib"]])))
        if facts is None:
            raise toolchain.BuildConfigError(
                f"no torch is installed in {sys.prefix}, the environment this install goes into "
                "(mamba-ssm is built for the torch you already have, read from its files)",
                "install torch first (pip install torch), then pip install mamba-ssm",
            )
        return facts
    facts = _variant.installed_torch()
    if facts is not None and facts.cxx11abi is not None:
        return facts
    # not found (the build-isolation error), or files it could not read
    return _variant.imported_torch(toolchain.import_torch())


class Target:
    """What this build is for, from torch's files and the environment: no torch import, no toolchain.

    That is all the metadata and the prebuilt-wheel lookup need, so a user whose variant is
    published needs neither nvcc nor a C++ compiler; the toolchain is checked (CompilePlan) only when
    something is about to be compiled.
    """

    def __init__(self, env=os.environ) -> None:
        self.env = env
        self.data = data = toolchain.load_data()
        self.isolation = _isolation(env)  # pip: the target environment's torch, read from its files
        self.miss = ""  # under isolation: why no prebuilt wheel was taken
        facts = _torch_facts(self.isolation)
        self.torch_version, self.torch_cuda, self.torch_hip = facts.version, facts.cuda, facts.hip
        self.torch_location, self.torch_git = facts.location, facts.git_version
        toolchain.check_torch(self.torch_version, data)
        self.skip_gpu = bool(toolchain.env_bool(env, "MAMBA_SKIP_CUDA_BUILD"))
        self.force_build = bool(toolchain.env_bool(env, "MAMBA_FORCE_BUILD"))
        # Stable ABI (MAMBA_STABLE_ABI=TRUE): csrc/binding_stable.cpp, one cp310-abi3 wheel for torch >= floor.
        self.stable = bool(toolchain.env_bool(env, "MAMBA_STABLE_ABI"))
        self.stable_floor = data["stable"]["floor"]
        self.stable_tag = "cp" + data["stable"]["python"].replace(".", "")  # its Python tag: cp310(-abi3)
        if self.stable and toolchain.version_tuple(self.torch_version)[:2] < toolchain.version_tuple(self.stable_floor)[:2]:
            raise toolchain.BuildConfigError(
                f"MAMBA_STABLE_ABI=TRUE needs torch >= {self.stable_floor} (its stable C API), but torch is {self.torch_version}",
                f"install torch>={self.stable_floor} or unset MAMBA_STABLE_ABI to build a classic wheel for this torch",
            )
        # What this torch needs, before the environment asks for anything else.
        self.needed = _variant.from_values(self.torch_version, cuda=facts.cuda, hip=facts.hip, cxx11abi=facts.cxx11abi)
        forced_abi = toolchain.env_bool(env, "MAMBA_FORCE_CXX11_ABI")
        torch_abi = self.needed.cxx11abi
        self.cxx11abi = torch_abi if forced_abi is None else forced_abi
        if forced_abi is not None and forced_abi != torch_abi:
            _warn(
                f"MAMBA_FORCE_CXX11_ABI={'TRUE' if forced_abi else 'FALSE'} differs from the installed torch "
                f"({'TRUE' if torch_abi else 'FALSE'}); the wheel will not load with this torch"
            )
        self.backend = "cpu" if self.skip_gpu or not (facts.cuda or facts.hip) else ("rocm" if facts.hip else "cuda")
        if self.stable and self.backend not in data["stable"]["backends"]:
            names = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm"}
            covered = " and ".join(names[b] for b in data["stable"]["backends"])
            raise toolchain.BuildConfigError(
                f"MAMBA_STABLE_ABI=TRUE covers {covered} builds only, and this torch is a {names[self.backend]} build",
                "unset MAMBA_STABLE_ABI to build a classic wheel for this torch",
            )
        self.variant = _variant.from_values(
            self.torch_version,
            cuda=facts.cuda if self.backend == "cuda" else None,  # the label carries the CUDA major only
            hip=facts.hip if self.backend == "rocm" else None,
            cxx11abi=self.cxx11abi,
        )
        if self.stable:
            self.variant = self.variant.as_stable()
        self.torch_mm = _variant.torch_major_minor(self.torch_version)

    @property
    def version(self) -> str:
        """What the metadata says. Built from an sdist (a user's install), the sdist's own version: pip
        discards a candidate whose metadata disagrees with the version its index named ("inconsistent
        version: expected '0.3.0', but metadata has '0.3.0+cputorch2.13cxx11abitrue'"). The prebuilt
        wheel it then installs keeps its label; MAMBA_FORCE_BUILD=TRUE (the farm) and
        MAMBA_LOCAL_VERSION label a wheel compiled from an sdist too."""
        if (ROOT / "PKG-INFO").is_file() and not self.force_build and "MAMBA_LOCAL_VERSION" not in self.env:
            return _base_version()
        return self.labelled_version

    @property
    def labelled_version(self) -> str:
        """The version with this build's label: the name of what it compiles, the prebuilt wheel it may take."""
        local = self.env.get("MAMBA_LOCAL_VERSION")
        label = self.variant.label if local is None else local.strip()
        return f"{_base_version()}+{label}" if label else _base_version()

    @property
    def install_requires(self) -> list[str]:
        return [f"torch>={self.stable_floor}" if self.stable else f"torch=={self.torch_mm}.*"]

    def summary(self) -> str:
        parts = [f"torch {self.torch_version}", f"backend {self.backend}",
                 f"cxx11abi {'TRUE' if self.cxx11abi else 'FALSE'}", f"version {self.version}"]  # fmt: skip
        if self.stable:
            parts.append(f"stable ABI (torch >= {self.stable_floor}, {self.stable_tag}-abi3)")
        return "mamba-ssm build: " + ", ".join(parts)


class CompilePlan:
    """How to compile the Target: every toolchain check, before anything is compiled."""

    def __init__(self, target: Target) -> None:
        vars(self).update(vars(target))  # the Target's facts, then what compiling adds to them
        self.target = target
        env, data = self.env, self.data
        self.std = toolchain.cxx_standard(self.torch_version, data)
        toolchain.check_compilers(toolchain.compilers_from_env(env), self.std, self.torch_version, data)
        self.cuda = None
        self.archs: list = []
        self.hip_archs: list[str] = []
        if self.backend == "cuda":
            self.cuda = toolchain.resolve_cuda(self.torch_cuda, env, data)
            self.archs, self.arch_source = toolchain.cuda_archs(self.cuda.version, env, data)
            self.nvcc_flags = list(data["cuda"]["nvcc_flags"])
        elif self.backend == "rocm":
            toolchain.check_rocm(self.torch_hip, data, _warn)
            self.hip_archs = toolchain.hip_archs(env, data)
        self.jobs = toolchain.jobs(env, max(1, len(self.archs)))
        # at::parallel_for is OpenMP code inlined into the binding: link the libgomp torch ships, so the
        # process keeps one OpenMP runtime (one thread pool, torch.set_num_threads applies to both).
        self.libgomp = None if self.stable else toolchain.torch_libgomp(self.torch_location)
        # A classic CPU or CUDA module compiles module.cpp (PyInit) against Python.h: checked before anything compiles.
        self.python_include = _python_include() if not self.stable and self.backend != "rocm" else None

    def summary(self) -> str:
        parts = [self.target.summary(), f"-std={self.std}", f"MAX_JOBS {self.jobs.max_jobs}"]
        if not self.stable:
            parts.append(f"OpenMP {self.libgomp.name + ' (torch)' if self.libgomp else 'libgomp (compiler)'}")
        if self.cuda:
            archs = " ".join(f"sm_{a.sm}{'+PTX' if a.ptx else ''}" for a in self.archs)
            parts += [f"CUDA_HOME {self.cuda.home} (CUDA {self.cuda.version})",
                      f"archs {archs} ({self.arch_source})", f"nvcc --threads {self.jobs.nvcc_threads}"]  # fmt: skip
        if self.hip_archs:
            parts.append(f"HIP archs {' '.join(self.hip_archs)}")
        return ", ".join(parts)


def _cxx_argv(env) -> list[str]:
    import shlex

    return shlex.split(env["CXX"]) if env.get("CXX") else ["c++"]


def _classic_cxx_flags(plan: CompilePlan) -> list[str]:
    """The C++ flags of the classic binding (and module.cpp): torch's ABI, passed by us since torch
    >= 2.13 does not add it; -fopenmp for the at::parallel_for that ATen inlines."""
    return ["-O2", f"-std={plan.std}", f"-D_GLIBCXX_USE_CXX11_ABI={int(plan.cxx11abi)}", "-fopenmp", "-fvisibility=hidden"]


def _stable_cxx_flags(plan: CompilePlan) -> list[str]:
    """binding_stable.cpp's flags: only torch's stable C API, no C++ ABI macro, no OpenMP runtime, no Python."""
    major, minor = toolchain.version_tuple(plan.stable_floor)[:2]
    flags = ["-O2", "-std=c++17", "-fvisibility=hidden", "-DTORCH_STABLE_ONLY",
             f"-DTORCH_TARGET_VERSION=0x{(major << 56) | (minor << 48):016x}"]  # fmt: skip
    return [*flags, "-DUSE_CUDA"] if plan.backend == "cuda" else flags


def _rocm_extension(plan: CompilePlan):
    """ROCm: torch hipifies the .cu sources and compiles them with hipcc (its supported HIP path)."""
    from torch.utils.cpp_extension import CUDAExtension

    cxx = [*_classic_cxx_flags(plan), "-DWITH_CUDA"]
    gomp = [f"-L{plan.libgomp.parent}", f"-l:{plan.libgomp.name}"] if plan.libgomp else ["-fopenmp"]
    sources = ["csrc/module.cpp", "csrc/binding.cpp", *sorted(f"csrc/cuda/{p.name}" for p in (CSRC / "cuda").glob("*.cu"))]
    depends = [str(p) for p in [*CSRC.glob("*.h"), *CSRC.glob("*.inc"), *CSRC.glob("*.cpp"), *CSRC.glob("cuda/*")]]
    hipcc = ["-O3", "-std=c++17", "-DWITH_CUDA", "-fPIC", *[f"--offload-arch={a}" for a in plan.hip_archs]]
    return CUDAExtension(
        name="mamba_ssm._C", sources=sources, depends=depends, extra_link_args=[*gomp, "-Wl,--strip-debug"],
        extra_compile_args={"cxx": cxx, "nvcc": hipcc},
    )  # fmt: skip


def _extension(plan: CompilePlan):
    """The module setuptools names and places; for CPU and CUDA our build_ext compiles and links it itself."""
    if plan.backend == "rocm":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)  # torch's "no CUDA runtime found" notice
            return _rocm_extension(plan)
    source = "csrc/binding_stable.cpp" if plan.stable else "csrc/module.cpp"
    return Extension("mamba_ssm._C", sources=[source], py_limited_api=plan.stable)


def _torch_includes(plan: CompilePlan) -> dict[str, str]:
    """torch's (and the toolkit's) header folders, each with what identifies its headers (the object's key)."""
    torch_headers = f"torch {plan.torch_version} {plan.torch_git or ''}".strip()
    include_dirs = {str(Path(plan.torch_location) / "include"): torch_headers}
    if plan.backend == "cuda":
        cuda = kernels.compiler_id(str(plan.cuda.nvcc))  # nvcc --version: the release and its build
        for sub in ("include", "include/cccl"):
            if (plan.cuda.home / sub).is_dir():
                include_dirs[str(plan.cuda.home / sub)] = f"cuda {cuda} {sub}"
    return include_dirs


def _python_include() -> dict[str, str]:
    """The folder of Python.h for module.cpp (PyInit): the interpreter's own include folder, else the one
    its build configuration names (a cross build reads the target Python's, _PYTHON_SYSCONFIGDATA_NAME)."""
    import platform
    import sysconfig

    for folder in (sysconfig.get_paths()["include"], sysconfig.get_config_var("INCLUDEPY")):
        if folder and (Path(folder) / "Python.h").is_file():
            return {folder: f"python {platform.python_version()} {sysconfig.get_config_var('SOABI')}"}
    raise toolchain.BuildConfigError(
        f"Python {platform.python_version()}'s headers (Python.h) are not installed",
        f"install them (Debian and Ubuntu: apt-get install python{sys.version_info[0]}.{sys.version_info[1]}-dev)",
    )


def _jobs(plan: CompilePlan) -> list:
    """Every object of the module: the kernels, then the binding (and for a classic build module.cpp).
    binding.cpp and module.cpp are compiled apart: one binding object per torch build and toolkit, shared
    by every Python; module.cpp is PyInit alone."""
    cxx = _cxx_argv(plan.env)
    jobs = [kernels.cpu_job(CSRC, cxx)]
    if plan.backend == "cuda":
        jobs += kernels.cuda_jobs(
            CSRC, plan.cuda.nvcc, plan.nvcc_flags, toolchain.gencode_flags(plan.archs), plan.jobs.nvcc_threads, plan.env.get("CC")
        )
    if plan.backend == "rocm":  # torch hipifies and compiles the rest
        return jobs
    if plan.stable:
        return [*jobs, kernels.binding_job(CSRC, cxx, _stable_cxx_flags(plan), _torch_includes(plan), "binding_stable.cpp")]
    classic = _classic_cxx_flags(plan)
    binding = [*classic, "-DWITH_CUDA"] if plan.backend == "cuda" else classic
    return [*jobs, kernels.binding_job(CSRC, cxx, binding, _torch_includes(plan)),
            kernels.binding_job(CSRC, cxx, classic, plan.python_include, "module.cpp")]  # fmt: skip


def _link_argv(plan: CompilePlan, objects: list[Path], out: Path) -> list[str]:
    """The link torch's CppExtension/CUDAExtension would run: torch's libraries (libtorch_python for a
    classic module only), CUDA's runtime for a CUDA build; torch's own libgomp for the classic binding's
    at::parallel_for (one OpenMP runtime in the process). --strip-debug: CFLAGS' -g is most of the size."""
    lib = Path(plan.torch_location) / "lib"
    dirs, libs = [lib], ["c10", "torch", "torch_cpu"] + ([] if plan.stable else ["torch_python"])
    if plan.backend == "cuda":
        home = plan.cuda.home
        dirs.append(home / "lib64" if (home / "lib64").exists() or not (home / "lib").exists() else home / "lib")
        libs += ["cudart", "c10_cuda", "torch_cuda"]
    import shlex

    gomp = [] if plan.stable else [f"-L{plan.libgomp.parent}", f"-l:{plan.libgomp.name}"] if plan.libgomp else ["-fopenmp"]
    ldflags = shlex.split(plan.env.get("LDFLAGS", ""))  # appended as setuptools appends them (the farm's glibc floor)
    return [*_cxx_argv(plan.env), "-shared", *map(str, objects), *ldflags, *(f"-L{d}" for d in dirs),
            *(f"-l{n}" for n in libs), *gomp, "-Wl,--strip-debug", "-o", str(out)]  # fmt: skip


def _no_compiling_in_isolation(target: Target, why: str) -> None:
    """Compiling needs the user's torch imported; build isolation hides it (and a torch the front-end
    put into the build environment is not the user's): say what to add, in one line."""
    if target.isolation:
        raise toolchain.BuildConfigError(
            f"{why}, and compiling needs your torch, which {target.isolation}'s build isolation hides from this build",
            NO_ISOLATION,
        )


def _remove_stale_modules(cmd) -> None:
    """This build's mamba_ssm._C only: a module of the other kind (classic _C.cpython-311-x86_64-linux-gnu.so,
    stable _C.abi3.so) that an earlier build left in build_lib (or in place) would ride into this wheel
    next to it, and CPython prefers the version-specific one."""
    for ext in cmd.extensions:
        keep = Path(cmd.get_ext_fullpath(ext.name))
        for other in sorted(keep.parent.glob(ext.name.rpartition(".")[2] + ".*")):
            if other != keep and other.suffix in (".so", ".pyd"):
                other.unlink()
                print(f"mamba-ssm build: removed {other} (left by an earlier build of another kind)", file=sys.stderr)


def _build_ext_class(plan: CompilePlan):
    """Compile the objects (cached by key: MAMBA_KERNEL_CACHE=DIR is a folder shared by every build of one
    toolchain, objects keyed by command line, compiler and sources, so a hit is exact; default: this build's
    own folder), then link the module. CPU and CUDA never import torch: its folder gives the headers and
    libraries, so a Python of another machine can build (a cross build). ROCm goes through torch's build."""
    from setuptools.command.build_ext import build_ext as setuptools_build_ext

    def objects(cmd) -> list[Path]:
        cache = plan.env.get("MAMBA_KERNEL_CACHE", "").strip()
        return kernels.build(_jobs(plan), Path(cache) if cache else Path(cmd.build_temp) / "kernels", plan.jobs.max_jobs)

    if plan.backend == "rocm":
        from torch.utils.cpp_extension import BuildExtension

        class rocm_build_ext(BuildExtension):
            def build_extensions(self) -> None:
                os.environ.setdefault("MAX_JOBS", str(plan.jobs.max_jobs))
                for ext in self.extensions:
                    ext.extra_objects = [str(o) for o in objects(self)]
                _remove_stale_modules(self)
                super().build_extensions()

        return rocm_build_ext

    class build_ext(setuptools_build_ext):
        def build_extensions(self) -> None:
            _remove_stale_modules(self)
            super().build_extensions()

        def build_extension(self, ext) -> None:
            import subprocess
            import tempfile

            made = objects(self)
            out = Path(self.get_ext_fullpath(ext.name))
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent, prefix=".link-") as tmp:  # never a half-written module
                argv = _link_argv(plan, made, Path(tmp) / out.name)
                print("mamba-ssm: " + " ".join(argv), flush=True)
                proc = subprocess.run(argv, check=False, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"mamba-ssm build error: linking {out.name} failed (exit {proc.returncode}).\n"
                                     f"{' '.join(argv)}\n{proc.stdout}{proc.stderr}")  # fmt: skip
                os.replace(Path(tmp) / out.name, out)

    return build_ext


class bdist_wheel_prebuilt(bdist_wheel):
    """Ship the published wheel for this variant when one exists; otherwise check the toolchain and compile.

    setup() was given a placeholder extension (it makes the wheel platform-specific); the real one
    and torch's build_ext are put in place here, before `build` asks for them.
    """

    target: Target | None = None

    def run(self) -> None:
        target = type(self).target
        if not target.force_build:  # MAMBA_FORCE_BUILD=TRUE: the farm's own builds
            wheel = _prebuilt_wheel_or_none(target, self.dist_dir)
            if wheel is not None:
                print(f"mamba-ssm: using prebuilt {wheel}")
                return
        _no_compiling_in_isolation(target, target.miss or "MAMBA_FORCE_BUILD=TRUE asks for a source build")
        plan = CompilePlan(target)
        print(plan.summary(), file=sys.stderr)
        self.distribution.ext_modules = [_extension(plan)]
        self.distribution.cmdclass["build_ext"] = _build_ext_class(plan)
        super().run()


# Commands that need only the Target: metadata (also --version, --name: no command at all), and a
# wheel that may be the published one. pip runs exactly these (egg_info, dist_info, bdist_wheel);
# anything else compiles in place, so it is planned up front.
DEFERRED = {"egg_info", "dist_info", "sdist", "bdist_wheel"}
COMPILING = {"build", "build_ext", "install", "develop", "editable_wheel", "bdist_egg"}


def main() -> None:
    commands = [a for a in sys.argv[1:] if not a.startswith("-")]  # option values count too: only set membership matters
    metadata_only = len(sys.argv) > 1 and all(a in ("egg_info", "sdist", "--version", "--name") for a in sys.argv[1:2])
    # An sdist is never labelled: it is the source of every variant, whatever torch the machine making it has.
    if commands[:1] == ["sdist"] or (metadata_only and importlib.util.find_spec("torch") is None):
        setup(version=_base_version(), install_requires=["torch"], **_license())
        return
    target = Target()
    stable = {"options": {"bdist_wheel": {"py_limited_api": target.stable_tag}}} if target.stable else {}
    common = {"version": target.version, "install_requires": target.install_requires, **stable}
    if (not commands or commands[0] in DEFERRED) and not COMPILING.intersection(commands):
        print(target.summary(), file=sys.stderr)
        bdist_wheel_prebuilt.target = target
        source = "csrc/binding_stable.cpp" if target.stable else "csrc/binding.cpp"
        placeholder = Extension("mamba_ssm._C", sources=[source], py_limited_api=target.stable)
        setup(ext_modules=[placeholder], cmdclass={"bdist_wheel": bdist_wheel_prebuilt}, **common, **_license())
        return
    _no_compiling_in_isolation(target, f"`{' '.join(commands[:1]) or 'setup.py'}` compiles mamba-ssm")
    plan = CompilePlan(target)
    print(plan.summary(), file=sys.stderr)
    setup(ext_modules=[_extension(plan)], cmdclass={"build_ext": _build_ext_class(plan)}, **common, **_license())


if __name__ == "__main__":
    main()
