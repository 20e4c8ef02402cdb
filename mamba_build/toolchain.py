"""Check the build toolchain before anything compiles, and say what to fix.

Loaded by ``setup.py`` by file path (no package import, no torch at import
time). Every known way a source build goes wrong ends here in a
:class:`BuildConfigError`: one paragraph naming the cause and the fix, raised
as ``SystemExit`` so pip shows the message, not a traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, or the copy setuptools carries (a --no-build-isolation build
    try:  # in a venv that has setuptools but not tomli); setuptools >= 71 puts its _vendor on sys.path
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        try:
            from setuptools.extern import tomli as tomllib  # type: ignore[no-redef]  # setuptools 70.x
        except ImportError:
            tomllib = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent
DATA_FILE = HERE / "build.toml"


class BuildConfigError(SystemExit):
    """A build that cannot work, found before compiling. The message is for a human."""

    def __init__(self, cause: str, fix: str) -> None:
        self.cause, self.fix = cause, fix
        super().__init__(f"mamba-ssm build error: {cause.rstrip('.')}. How to fix: {fix.rstrip('.')}.")


def load_data(path: Path = DATA_FILE) -> dict:
    if tomllib is None:
        raise BuildConfigError(
            f"Python {sys.version_info[0]}.{sys.version_info[1]} has no tomllib and the tomli package is missing",
            "pip install tomli (or use Python >= 3.11)",
        )
    with open(path, "rb") as f:
        return tomllib.load(f)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def env_bool(env, name: str) -> bool | None:
    """TRUE/FALSE (any case, also 1/0, yes/no) -> bool; unset or empty -> None; else an error."""
    raw = env.get(name, "")
    if raw.strip() == "":
        return None
    value = raw.strip().upper()
    if value in ("TRUE", "1", "YES", "ON"):
        return True
    if value in ("FALSE", "0", "NO", "OFF"):
        return False
    raise BuildConfigError(f"{name}={raw!r} is neither TRUE nor FALSE", f"set {name}=TRUE or {name}=FALSE, or unset it")


# ---- torch ----


def import_torch():
    """torch, or an error that explains build isolation (the usual reason it is missing)."""
    try:
        import torch
    except ImportError as e:
        raise BuildConfigError(
            f"torch is not importable from the Python running this build ({sys.executable}): {e}. "
            "mamba-ssm compiles against the torch you already have, and pip's default build isolation "
            "hides it in a fresh temporary environment",
            "install torch first, then build without isolation: "
            "pip install --no-build-isolation mamba-ssm (or pip install --no-build-isolation -e . from a checkout)",
        ) from None
    return torch


def check_torch(torch_version: str, data: dict) -> None:
    minimum = data["torch"]["minimum"]
    if version_tuple(torch_version)[:2] < version_tuple(minimum)[:2]:
        raise BuildConfigError(
            f"torch {torch_version} is older than the oldest torch mamba-ssm supports ({minimum})",
            f"upgrade torch: pip install 'torch>={minimum}'",
        )


def torch_libgomp(torch_dir: str) -> Path | None:
    """The OpenMP runtime torch's wheel ships: ``torch/lib/libgomp.so.1`` (recent wheels), a renamed
    ``libgomp-<hash>.so.1`` (older ones), or one in ``torch.libs/`` (aarch64). None: it ships none."""
    root = Path(torch_dir)
    for folder in (root / "lib", root.parent / "torch.libs"):
        found = sorted(folder.glob("libgomp*.so*"))
        if found:
            return found[0]
    return None


def cxx_standard(torch_version: str, data: dict) -> str:
    return "c++20" if version_tuple(torch_version)[:2] >= version_tuple(data["torch"]["cxx20_from"])[:2] else "c++17"


# ---- C++ compiler ----


@dataclass(frozen=True)
class Compiler:
    argv: tuple[str, ...]
    kind: str  # "gcc" | "clang" | "unknown"
    version: tuple[int, ...]
    origin: str  # where the choice came from: "CXX", "CC" or "default"


def probe_compiler(argv: list[str], origin: str) -> Compiler:
    exe = shutil.which(argv[0]) if argv else None
    if not exe:
        raise BuildConfigError(
            f"the C++ compiler {' '.join(argv) or '(empty)'} ({origin}) was not found",
            "install one (apt-get install g++) or point CXX and CC at an existing compiler",
        )
    try:
        banner = subprocess.run([*argv, "--version"], check=False, capture_output=True, text=True, timeout=60).stdout
    except OSError as e:
        raise BuildConfigError(f"cannot run the C++ compiler {argv[0]} ({origin}): {e}", "point CXX/CC at a working compiler") from None
    first = banner.strip().splitlines()[0] if banner.strip() else ""
    if "clang" in first.lower():
        m = re.search(r"version\s+(\d+(?:\.\d+)*)", first)
        return Compiler(tuple(argv), "clang", version_tuple(m.group(1)) if m else (), origin)
    if re.search(r"\b(gcc|g\+\+|GCC)\b", banner) or "Free Software Foundation" in banner:
        full = subprocess.run([*argv, "-dumpfullversion", "-dumpversion"], check=False, capture_output=True, text=True, timeout=60)
        text = full.stdout.strip() or first
        return Compiler(tuple(argv), "gcc", version_tuple(text), origin)
    return Compiler(tuple(argv), "unknown", (), origin)


def compilers_from_env(env) -> list[Compiler]:
    """The compilers the build will use: CXX (C++ sources and linking) and CC (nvcc's -ccbin)."""
    found = []
    cxx = env.get("CXX")
    found.append(probe_compiler(shlex.split(cxx), "CXX") if cxx else probe_compiler(["c++"], "default"))
    if env.get("CC"):
        found.append(probe_compiler(shlex.split(env["CC"]), "CC"))
    return found


def check_compilers(compilers: list[Compiler], std: str, torch_version: str, data: dict) -> None:
    minimums = data["compiler"]["c20" if std == "c++20" else "c17"]
    for c in compilers:
        need = minimums.get(c.kind)
        if need and c.version and c.version < version_tuple(need):
            have = ".".join(map(str, c.version))
            raise BuildConfigError(
                f"the C++ compiler {' '.join(c.argv)} (from {c.origin}) is {c.kind.upper()} {have}, but building "
                f"against torch {torch_version} needs -std={std}, which takes {c.kind.upper()} >= {need}",
                "install a newer compiler (e.g. apt-get install g++-12) and set CC/CXX to it "
                "(CC=gcc-12 CXX=g++-12 pip install --no-build-isolation ...)",
            )


# ---- CUDA toolkit ----


@dataclass(frozen=True)
class CudaToolkit:
    home: Path
    nvcc: Path
    version: str  # "13.0"


def _nvcc_release(nvcc: str | Path) -> str | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], check=False, capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _nvcc_top(nvcc: str) -> Path | None:
    """The toolkit root nvcc itself uses: `nvcc -dryrun` prints `TOP=<root>` (works through wrapper scripts)."""
    try:
        out = subprocess.run(
            [nvcc, "-dryrun", "-E", "-x", "cu", os.devnull], check=False, capture_output=True, text=True, timeout=60
        )
    except OSError:
        return None
    m = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    return Path(m.group(1).strip()).resolve() if m else None


def _has_headers(home: Path) -> bool:
    return (home / "include" / "cuda_runtime.h").is_file() or any(
        home.glob("targets/*/include/cuda_runtime.h")
    )


def resolve_cuda(torch_cuda: str, env, data: dict | None = None) -> CudaToolkit:
    """The CUDA toolkit to build with, checked against torch's CUDA version.

    torch guesses CUDA_HOME as the folder above the first `nvcc` on PATH; where that
    nvcc is a wrapper script or a symlink farm the guess has no headers and the
    build fails after minutes. Ask nvcc where its toolkit is instead.
    """
    skip_hint = "or build the CPU kernels only with MAMBA_SKIP_CUDA_BUILD=TRUE"
    explicit = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if explicit:
        var = "CUDA_HOME" if env.get("CUDA_HOME") else "CUDA_PATH"
        home = Path(explicit)
        nvcc = home / "bin" / "nvcc"
        if not _has_headers(home):
            raise BuildConfigError(
                f"{var}={explicit} has no include/cuda_runtime.h, so it is not a CUDA toolkit root",
                f"point {var} at the toolkit folder that holds bin/nvcc and include/ (for example /usr/local/cuda-"
                f"{torch_cuda}), or unset it to use the nvcc on PATH, {skip_hint}",
            )
        if not nvcc.is_file():
            raise BuildConfigError(
                f"{var}={explicit} has no bin/nvcc", f"point {var} at a full CUDA toolkit (with nvcc), {skip_hint}"
            )
    else:
        found = shutil.which("nvcc", path=env.get("PATH"))
        fallbacks = (data or {}).get("cuda", {}).get("fallback_homes", ["/usr/local/cuda"])
        for home in fallbacks if not found else ():
            if (Path(home) / "bin" / "nvcc").is_file():
                found = str(Path(home) / "bin" / "nvcc")
                break
        if not found:
            raise BuildConfigError(
                f"nvcc was not found on PATH and CUDA_HOME is not set, but torch was built with CUDA {torch_cuda}",
                f"install the CUDA {torch_cuda.split('.')[0]}.x toolkit and put its bin/ on PATH or set CUDA_HOME "
                f"to it, {skip_hint}",
            )
        top = _nvcc_top(found)
        home = top if top and _has_headers(top) else Path(os.path.realpath(found)).parent.parent
        if not _has_headers(home):
            raise BuildConfigError(
                f"the nvcc on PATH ({found}) belongs to no toolkit with include/cuda_runtime.h (looked in {home})",
                f"set CUDA_HOME to the real toolkit root (the folder with bin/nvcc and include/), {skip_hint}",
            )
        nvcc = home / "bin" / "nvcc" if (home / "bin" / "nvcc").is_file() else Path(found)
    release = _nvcc_release(nvcc)
    if release is None:
        raise BuildConfigError(f"{nvcc} --version did not report a CUDA release", "check the CUDA toolkit install")
    if release.split(".")[0] != torch_cuda.split(".")[0]:
        raise BuildConfigError(
            f"nvcc ({nvcc}) is CUDA {release} but the installed torch was built with CUDA {torch_cuda}; "
            "a kernel built by one CUDA major does not load next to the other's runtime",
            f"use a CUDA {torch_cuda.split('.')[0]}.x toolkit (put its bin/ first on PATH or set CUDA_HOME), or "
            f"install a torch built for CUDA {release.split('.')[0]}, {skip_hint}",
        )
    return CudaToolkit(home=home, nvcc=nvcc, version=release)


@dataclass(frozen=True)
class Arch:
    sm: int
    ptx: bool = False


def parse_arch_list(text: str, source: str) -> list[Arch]:
    """'8.0;9.0+PTX', '80 90', 'sm_80,sm_90' -> [Arch]; an entry that reads as none of these is an error."""
    archs = []
    for item in re.split(r"[;,\s]+", text.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?([a-z]?)(\+PTX)?", item, re.IGNORECASE)
        if not m or m.group(3):
            raise BuildConfigError(
                f"{source} has an entry {item!r} that is not a GPU architecture",
                f"write {source} as a list like '8.0;9.0+PTX' or '80 90'",
            )
        sm = int(m.group(1)) * 10 + int(m.group(2)) if m.group(2) is not None else int(m.group(1))
        archs.append(Arch(sm, bool(m.group(4))))
    if not archs:
        raise BuildConfigError(f"{source} is empty", f"give at least one architecture, e.g. {source}='8.0', or unset it")
    return archs


def default_archs(cuda_version: str, data: dict) -> list[Arch]:
    v = version_tuple(cuda_version)[:2]
    sms = [sm for row in data["cuda"]["archs"] if version_tuple(row["from"])[:2] <= v for sm in row["sm"]]
    return [Arch(sm) for sm in sorted(set(sms))]


def cuda_archs(cuda_version: str, env, data: dict) -> tuple[list[Arch], str]:
    """The arch list and where it came from; checked against what the toolkit can compile."""
    for var in ("MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"):
        if env.get(var, "").strip():
            archs, source = parse_arch_list(env[var], var), var
            break
    else:
        archs, source = default_archs(cuda_version, data), f"the default for CUDA {cuda_version}"
    major = cuda_version.split(".")[0]
    oldest = data["cuda"]["oldest_sm"].get(major)
    newest_rows = [(version_tuple(k)[:2], sm) for k, sm in data["cuda"]["newest_sm"].items()]
    known = [sm for v, sm in sorted(newest_rows) if v <= version_tuple(cuda_version)[:2]]
    newest = known[-1] if known else None
    for a in archs:
        if oldest and a.sm < oldest:
            raise BuildConfigError(
                f"{source} asks for sm_{a.sm}, which CUDA {cuda_version} no longer compiles (oldest: sm_{oldest})",
                f"drop architectures below {oldest // 10}.{oldest % 10} from {source}, or use an older CUDA toolkit",
            )
        if newest and a.sm > newest:
            raise BuildConfigError(
                f"{source} asks for sm_{a.sm}, which CUDA {cuda_version} does not know (newest: sm_{newest})",
                f"drop it from {source} or build with a newer CUDA toolkit",
            )
    return archs, source


def gencode_flags(archs: list[Arch]) -> list[str]:
    flags = []
    for a in archs:
        codes = [f"sm_{a.sm}"] + ([f"compute_{a.sm}"] if a.ptx else [])
        code = codes[0] if len(codes) == 1 else f"[{','.join(codes)}]"
        flags += ["-gencode", f"arch=compute_{a.sm},code={code}"]
    return flags


# ---- ROCm ----


def check_rocm(hip_version: str, data: dict, warn) -> str:
    """ROCm major.minor; < minimum is refused, releases that need the header patch warn."""
    mm = ".".join(str(x) for x in version_tuple(hip_version)[:2])
    if version_tuple(mm) < version_tuple(data["rocm"]["minimum"]):
        raise BuildConfigError(
            f"torch was built for ROCm {mm}; mamba-ssm's HIP kernels need ROCm >= {data['rocm']['minimum']}",
            f"install a torch built for ROCm {data['rocm']['minimum']} or newer "
            "(pip install torch --index-url https://download.pytorch.org/whl/rocm6.2), "
            "or build the CPU kernels only with MAMBA_SKIP_CUDA_BUILD=TRUE",
        )
    if mm in data["rocm"]["needs_patch"]:
        warn(
            f"ROCm {mm}: its amd_hip_bf16.h needs the patch in rocm_patch/ before the kernels compile. Apply it once, "
            "as root: bash rocm_patch/apply.sh $ROCM_HOME (it applies "
            f"rocm_patch/rocm{mm.replace('.', '_')}.patch; ROCm >= 6.1 needs nothing)"
        )
    return mm


def hip_archs(env, data: dict) -> list[str]:
    raw = env.get("HIP_ARCHITECTURES", "").strip() or env.get("PYTORCH_ROCM_ARCH", "").strip()
    archs = [a for a in re.split(r"[;,\s]+", raw) if a] if raw else list(data["rocm"]["default_archs"])
    for a in archs:
        if not re.fullmatch(r"gfx[0-9a-f]+(:[a-z+-:]+)?", a):
            raise BuildConfigError(
                f"HIP_ARCHITECTURES has an entry {a!r} that is not an AMD GPU target",
                "write it like 'gfx90a;gfx942'",
            )
    return archs


# ---- parallelism ----


@dataclass(frozen=True)
class Jobs:
    max_jobs: int
    nvcc_threads: int = 1
    notes: list[str] = field(default_factory=list)


def jobs(env, n_archs: int) -> Jobs:
    cpus = os.cpu_count() or 1
    raw = env.get("MAX_JOBS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise BuildConfigError(f"MAX_JOBS={raw!r} is not a positive integer", "set MAX_JOBS=N with N >= 1, or unset it")
        max_jobs = int(raw)
    else:
        max_jobs = cpus
    raw_t = env.get("NVCC_THREADS", "").strip()
    if raw_t:
        if not raw_t.isdigit() or int(raw_t) < 1:
            raise BuildConfigError(
                f"NVCC_THREADS={raw_t!r} is not a positive integer", "set NVCC_THREADS=N with N >= 1, or unset it"
            )
        threads = int(raw_t)
    else:
        # nvcc --threads compiles the archs of one file in parallel; share the CPUs with the jobs
        threads = max(1, min(n_archs, cpus // max_jobs))
    return Jobs(max_jobs=max_jobs, nvcc_threads=threads)
