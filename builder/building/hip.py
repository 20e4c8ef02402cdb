"""``python -m builder hip-compile``: the HIP kernels compiled for real without a ROCm torch.

hipify (torch's, run by ``hipify_tus.py`` under a Python with torch, ``--python``), hipcc per TU for every
gfx target in the farm's HIP image, then an audit of each object's clang offload bundle. It checks that
the kernels compile for every target on a CPU-only machine; the ROCm wheel itself needs a ROCm torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from builder.building.images.base_image import ensure
from builder.building.images.engine import build_image, image_exists
from builder.building.images.images import NEWER_SUITE, OWNER_LABEL, image_repo, owner
from builder.building.images.render import hip_toolchain
from builder.errors import BuildFailed, UsageError
from builder.facts import compat as compat_mod
from builder.facts.hostenv import find_ca_bundle
from builder.facts.paths import REPO
from builder.facts.spec import stable_hash
from mamba_ssm import elf as _elf

HIPIFY_SCRIPT = Path(__file__).resolve().parent / "hipify_tus.py"
SUITE = NEWER_SUITE  # the Debian release with hipcc (5.7.1)
IMAGE_REPO = image_repo("hip-toolchain")
LLVM_BIN = "/usr/lib/llvm-17/bin"  # trixie's hipcc drives clang 17; the bundler tools live here
# What trixie's clang 17 compiles (gfx950 and gfx12xx need ROCm 7's clang).
TOOLCHAIN_ARCHS = (
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx940",
    "gfx941",
    "gfx942",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
)
DEFAULT_ARCHS = compat_mod.load().rocm_default_archs  # setup.py's default too: mamba_build/build.toml [rocm]
# The flags a ROCm build of the extension passes to hipcc: torch's cpp_extension
# (COMMON_HIP_FLAGS + COMMON_HIPCC_FLAGS) plus setup.py's own.
HIPCC_FLAGS = (
    "-O3", "-std=c++17", "-fPIC", "-fno-gpu-rdc", "-DWITH_CUDA",
    "-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DHIPBLAS_V2",
    "-DCUDA_HAS_FP16=1", "-D__HIP_NO_HALF_OPERATORS__=1", "-D__HIP_NO_HALF_CONVERSIONS__=1",
    "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1",
)  # fmt: skip


@dataclass(frozen=True)
class CodeObject:
    target: str  # "hipv4-amdgcn-amd-amdhsa--gfx90a"
    arch: str  # "gfx90a"
    size: int  # bytes of the AMDGPU ELF
    kernels: tuple[str, ...]  # kernel symbols (demangled enough to read: the .kd names)


@dataclass(frozen=True)
class Compiled:
    tu: str  # "hip/selective_scan_fwd.hip"
    obj: Path
    seconds: float  # wall
    cpu_seconds: float
    archs: tuple[str, ...]
    code_objects: tuple[CodeObject, ...] = ()
    bundler_targets: tuple[str, ...] = ()  # what clang-offload-bundler --list says
    image: str = ""  # the hipcc image that compiled it


@dataclass
class Toolchain:
    """A running container of the hipcc image with WORK bind-mounted at /w."""

    client: object
    image: str
    work: Path
    container: object = None
    hip_version: str = ""
    log: object = print
    _owner: str = field(default_factory=owner)

    def __enter__(self) -> Self:
        # The owner label keeps a concurrent farm run's leftover sweep off this container.
        self.container = self.client.containers.run(
            self.image,
            ["sleep", "infinity"],
            detach=True,
            remove=True,
            labels={OWNER_LABEL: self._owner},
            volumes={str(self.work): {"bind": "/w", "mode": "rw"}},
            working_dir="/w",
        )
        self.hip_version = self.sh("hipconfig --version").strip()
        return self

    def __exit__(self, *exc) -> None:
        import docker.errors

        if self.container is not None:
            try:
                self.container.kill()  # remove=True deletes it once it stops
            except docker.errors.NotFound:
                self.log("hip: the toolchain container was already gone")

    def sh(self, script: str, *, check: bool = True) -> str:
        rc, out = self.container.exec_run(["bash", "-c", script], workdir="/w")
        text = out.decode(errors="replace")
        if check and rc != 0:
            raise BuildFailed(f"in the hipcc container: `{script}` failed (exit {rc}):\n{_tail(text)}")
        return text

    def compile(self, tu: str, archs: tuple[str, ...], out: str) -> tuple[float, float]:
        """hipcc one TU for every arch in one call; (wall seconds, CPU seconds of hipcc and its children)."""
        hipcc = ["hipcc", *HIPCC_FLAGS, *(f"--offload-arch={a}" for a in archs), "-c", tu, "-o", out]
        # bash's `time` reports the children's CPU time: a figure that holds on a busy machine
        cmd = ["bash", "-c", 'TIMEFORMAT="@@time %R %U %S"; time nice -n 10 "$@"', "timed", *hipcc]
        rc, raw = self.container.exec_run(cmd, workdir="/w/csrc")
        text = raw.decode(errors="replace")
        if rc != 0:
            raise BuildFailed(
                f"hipcc failed on {tu} for {','.join(archs)} (exit {rc}):\n{_tail(text)}",
                hint="a CUDA-only intrinsic needs a MAMBA_HIP branch in csrc/cuda/scan_common.cuh",
            )
        real, user, sys_ = (float(x) for x in text.rsplit("@@time ", 1)[1].split()[:3])
        return real, user + sys_

    def bundler_targets(self, obj: str) -> tuple[str, ...]:
        fatbin = obj + ".fatbin"
        text = self.sh(
            f"{LLVM_BIN}/llvm-objcopy --dump-section=.hip_fatbin={fatbin} {obj} "
            f"&& {LLVM_BIN}/clang-offload-bundler --list --type=o --input={fatbin} && rm -f {fatbin}"
        )
        return tuple(sorted(line.strip() for line in text.splitlines() if line.strip()))


# ---- image -------------------------------------------------------------------------


# Debian's HIP toolchain (the packages the farm's ROCm images take from trixie), and patch(1)
# for the ROCm 6.0 header-patch check.
PACKAGES = ("hipcc", "libamdhip64-dev", "patch")


def dockerfile(base: str) -> str:
    return hip_toolchain(base, PACKAGES)


def ensure_image(client, *, log=print) -> str:
    """The hipcc image's tag, building it (once, under a lock) when it does not exist yet."""
    from filelock import FileLock  # here, not above: `hip-compile --help` starts without it

    base = ensure(client, SUITE, ca_bundle=find_ca_bundle(), log=log)
    text = dockerfile(base)
    tag = f"{IMAGE_REPO}:{stable_hash({'dockerfile': text, 'base': client.images.get(base).id}, 16)}"
    lock = Path(tempfile.gettempdir()) / f"mamba-farm-{IMAGE_REPO.replace('/', '-')}.lock"
    with FileLock(str(lock)):
        if image_exists(client, tag):
            return tag
        log(f"hip: building {tag} (apt-get install {' '.join(PACKAGES)}; once)")
        seconds = build_image(
            client, tag, text, what="the hipcc image",
            hint="check that the Debian mirror is reachable (apt-get update in the trixie base)",
        )  # fmt: skip
        log(f"hip: built {tag} in {seconds:.0f}s")
    return tag


# ---- hipify ------------------------------------------------------------------------


def hipify(work: Path, *, python: str, csrc: Path = REPO / "csrc") -> list[str]:
    """Copy CSRC to WORK/csrc and hipify it there; the hipified TUs, relative to WORK/csrc."""
    dest = work / "csrc"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(csrc, dest, ignore=shutil.ignore_patterns("*.o", "*.so", "__pycache__", "hip"))
    try:
        proc = subprocess.run([python, str(HIPIFY_SCRIPT), str(dest)], check=False, capture_output=True, text=True)
    except OSError as err:
        raise UsageError(
            f"--python {python}: cannot run it ({err.strerror})", hint="pass the path of a Python that has torch"
        ) from None
    if proc.returncode == 3 or (proc.returncode != 0 and "torch" in proc.stderr):
        raise UsageError(
            f"--python {python}: cannot run torch.utils.hipify ({_tail(proc.stderr, 1)})",
            hint="pass a Python that has torch installed (any build; the CPU wheel is enough)",
        )
    if proc.returncode != 0:
        raise BuildFailed(f"hipify failed (exit {proc.returncode}):\n{_tail(proc.stderr)}")
    tus = json.loads(proc.stdout)["tus"]
    not_hip = [t for t in tus if not t.endswith(".hip")]
    if not_hip:
        raise BuildFailed(f"hipify left {', '.join(not_hip)} unconverted")
    return tus


# ---- audit -------------------------------------------------------------------------


def code_objects(obj: Path) -> tuple[CodeObject, ...]:
    """The device code objects in OBJ's .hip_fatbin offload bundle (host entry left out), read by
    mamba_ssm.elf: the reader the farm's verifier and the doctor use."""
    elf = _elf.Elf.read(obj)
    blob = elf.section(".hip_fatbin")
    if blob is None:
        raise BuildFailed(f"{obj.name}: no .hip_fatbin section: hipcc compiled no device code")
    entries = _elf.offload_bundles(blob)
    if not entries:
        raise BuildFailed(f"{obj.name}: .hip_fatbin is not an uncompressed clang offload bundle")
    out = [CodeObject(e.target, e.arch, len(e.data), _kernels(e.data, e.target)) for e in entries]
    return tuple(sorted(out, key=lambda c: c.arch))


def _kernels(code: bytes, target: str) -> tuple[str, ...]:
    f = _elf.Elf(code, target)
    if f.machine != _elf.EM_AMDGPU:
        raise BuildFailed(f"{target}: the code object is ELF machine {f.machine}, not an AMDGPU ELF")
    return tuple(sorted({n[: -len(".kd")] for n, _ in f.symbols(_elf.SYMBOL_TABLES) if n.endswith(".kd")}))


# ---- the whole check ----------------------------------------------------------------


def check_archs(archs: tuple[str, ...]) -> tuple[str, ...]:
    for a in archs:
        if a not in TOOLCHAIN_ARCHS:
            raise UsageError(
                f"--archs: {a!r} is not a target Debian trixie's hipcc 5.7.1 (clang 17) compiles",
                hint=f"use some of {', '.join(TOOLCHAIN_ARCHS)}; gfx950/gfx12xx need ROCm 7 (AMD's images)",
            )
    if not archs:
        raise UsageError("--archs is empty", hint=f"for example --archs {','.join(DEFAULT_ARCHS)}")
    return archs


def compile_kernels(
    client, work: Path, *, archs: tuple[str, ...] = DEFAULT_ARCHS, python: str = sys.executable, log=print
) -> tuple[str, list[Compiled]]:
    """Hipify csrc/ into WORK, compile every TU for ARCHS in the hipcc image; (HIP version, results)."""
    archs = check_archs(tuple(archs))
    tus = hipify(work, python=python)  # first: a Python without torch fails in seconds
    image = ensure_image(client, log=log)
    results = []
    with Toolchain(client, image, work, log=log) as tc:
        for tu in tus:
            obj = f"/w/{Path(tu).stem}.o"
            seconds, cpu = tc.compile(tu, archs, obj)
            host_obj = work / Path(obj).name
            results.append(
                Compiled(tu, host_obj, seconds, cpu, archs, code_objects(host_obj), tc.bundler_targets(obj), image)
            )
            log(f"hip: {tu}: {seconds:.1f}s wall, {cpu:.1f}s CPU for {','.join(archs)}")
        return tc.hip_version, results


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
