"""Executors turn one BuildSpec into one raw wheel plus a log, and nothing else.

The interface (``prepare(images)``, ``build(spec, source, out_dir, log_path, timeout)`` -> ``BuildResult``,
``cleanup()``, safe twice and from a signal handler) is small, so a new engine is one module. The builds
of one image share its kernel cache (``MAMBA_KERNEL_CACHE``); ``cache_mounts`` adds more.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from builder.errors import InfrastructureError
from builder.facts.hostenv import torch_index_args


@dataclass
class BuildResult:
    ok: bool
    wheel: Path | None
    log: Path
    reason: str = ""  # one line for the summary when not ok
    infrastructure: bool = False  # failed for reasons other than the code: retry is allowed
    timed_out: bool = False
    cpu_seconds: float | None = None  # the build's compile CPU (builder.publishing.cost), None where no counter was read
    measured: str = "none"  # how: "cgroup" (its container), "rusage" (its process tree on the host)


# build.sh exits with this when the build could not run (network, disk): the one retried failure.
EXIT_INFRA = InfrastructureError.exit_code  # 75


def collect_wheel(code: int, raw_dir: Path, out_dir: Path, log_path: Path) -> BuildResult:
    """Turn a finished build into its result: the exit code, and the wheel it left in raw_dir
    moved into out_dir under its final name only once complete (never a partial file there)."""
    if code != 0:
        return BuildResult(False, None, log_path, f"build exited with {code}", infrastructure=code == EXIT_INFRA)
    wheels = sorted(raw_dir.glob("*.whl"))
    if not wheels:
        return BuildResult(False, None, log_path, "the build produced no wheel")
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / wheels[-1].name
    part = dest.with_suffix(".whl.part")
    shutil.copyfile(wheels[-1], part)  # raw_dir may be on another filesystem
    os.replace(part, dest)
    return BuildResult(True, dest, log_path)


@dataclass
class BuildOptions:
    wheelhouses: list[Path] = field(default_factory=list)
    ca_bundle: Path | None = None
    cache_mounts: dict[Path, str] = field(default_factory=dict)
    max_jobs: int = 1  # compiler parallelism inside one build (MAX_JOBS / nvcc --threads)
    logs_dir: Path | None = None  # where image builds log (image-<id>.log)
    log: Callable[[str], None] = print


class Executor(Protocol):
    name: str

    def prepare(self, images: dict, specs: list) -> None: ...

    def build(self, spec, source: Path, out_dir: Path, log_path: Path, timeout: float) -> BuildResult: ...

    def cleanup(self) -> None: ...

    def ran(self, spec) -> dict: ...  # what built SPEC, for its provenance: toolchain_record's shape


def toolchain_record(
    executor: str, *, image: str | None, base: str | None, compiler: str, toolkit: dict | None
) -> dict:
    """What ran one build, as its wheel's provenance says it (builder/verifying/provenance.py): the executor,
    the image and its base only when Docker ran, and where the compiler (``image``, ``host``, or ``cross``: an
    emulated image's cross compiler, which the Docker executor describes under ``cross``) and the toolkit
    came from. TOOLKIT: ``{"kind": "cuda"|"rocm", "version", "origin", ...}`` with origin ``pypi`` (the
    nvidia-* wheels docker/packages.toml pins, listed under ``packages``), ``base`` (the vendor devel image
    named as ``base``), ``debian`` (Debian's packages of ``suite``) or ``host`` (this machine's own); None
    for a CPU build. No host path, no clock time: a rebuild records the same."""
    return {
        "executor": executor,
        "image": image,
        "base": base,
        "toolchain": {"compiler": compiler, "toolkit": toolkit},
    }


# What a build never needs from a source tree that is not a git checkout.
_SKIP = re.compile(r"^(\.git|\.venv|\.nox|dist|build|\.cache|\.pytest_cache|\.hypothesis|\.benchmarks)(/|$)|(^|/)__pycache__(/|$)|\.egg-info(/|$)|\.so$")


def source_files(source: Path) -> list[str]:
    """The files of the source tree a build needs: git's view when it is a checkout, else a filtered walk."""
    files: list[str] = []
    if (source / ".git").exists() and shutil.which("git"):
        proc = subprocess.run(
            ["git", "-C", str(source), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True
        )
        if proc.returncode == 0:
            files = [f for f in proc.stdout.decode().split("\0") if f]
    if not files:
        for root, dirs, names in os.walk(source):
            rel_root = os.path.relpath(root, source)
            rel_root = "" if rel_root == "." else rel_root + "/"
            dirs[:] = [d for d in dirs if not _SKIP.search(rel_root + d)]
            files += [rel_root + n for n in names]
    return sorted(f for f in files if not _SKIP.search(f) and (source / f).is_file())


BUILD_SCRIPT = Path(__file__).with_name("build.sh")
GLIBC_FLOOR = BUILD_SCRIPT.with_name("glibc_floor.c")  # build.sh links it into every extension

# Kernel objects depend only on the toolchain (mamba_build/kernels.py keys them by command line,
# compiler and sources), so every build of one image shares one cache: MAMBA_KERNEL_CACHE.
KERNEL_CACHE_MOUNT = "/root/.cache/mamba-kernels"


def kernel_cache_name(image_id: str) -> str:
    """mamba-farm-kcache-<image id>: the docker volume (and host folder suffix) of IMAGE_ID's kernel cache."""
    return "mamba-farm-kcache-" + re.sub(r"[^A-Za-z0-9_.-]", "_", image_id)


def spec_env(spec, *, max_jobs: int) -> dict[str, str]:
    """Environment for builder/building/executors/build.sh (and the package's setup.py) for SPEC."""
    env = {
        "FARM_BUILD_ID": spec.id,
        "FARM_TORCH_REQ": f"torch=={spec.torch_version}",
        "MAX_JOBS": str(max_jobs),
        "NVCC_THREADS": "1",
        "MAMBA_FORCE_BUILD": "TRUE",
    }
    env["FARM_TORCH_PIP_ARGS"] = " ".join(torch_index_args(spec.torch_index_url))
    if spec.accelerator.startswith("cu"):  # build.sh checks these before compiling a source that includes them
        from builder.facts.compat import load

        env["FARM_CUDA_HEADERS"] = " ".join(f"{h}={pkg}" for h, pkg in sorted(load().cuda_headers.items()))
    gpu = [a for a in spec.archs if a.startswith("sm_")]
    if gpu:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(f"{a[3:-1]}.{a[-1]}" for a in gpu)
    rocm = [a for a in spec.archs if a.startswith("gfx")]
    if rocm:
        env["PYTORCH_ROCM_ARCH"] = ";".join(rocm)
    if spec.stable:
        env["MAMBA_STABLE_ABI"] = "TRUE"
    if spec.accelerator == "cpu":
        env["MAMBA_SKIP_CUDA_BUILD"] = "TRUE"
    # Code we do not own compiles once per toolchain through ccache (build.sh).
    if spec.compiles_through_ccache:
        env["FARM_CCACHE"] = "nvcc"
    # A recipe's build environment (builder/sourcing/prepare.py): what it unsets goes, even from the image's
    # own ENV (build.sh unsets FARM_UNSET), and what it sets wins.
    for name in spec.unset:
        env.pop(name, None)
    env.update(dict(spec.env))
    if spec.unset:
        env["FARM_UNSET"] = " ".join(spec.unset)
    return env
