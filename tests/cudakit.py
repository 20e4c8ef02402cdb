"""Build the CUDA extension for real and inspect what came out (tests/test_cuda_build.py, benchmarks/cuda_build.py).

The build runs `pip wheel --no-build-isolation` on a staged copy of the source tree
(never in /work/main itself: the build folder would race with other builds) inside a
cached venv holding torch 2.14.1 (CUDA 13.0), with the machine's nvcc 13.0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO
from filelock import FileLock

TORCH = "2.14.1"
CACHE = Path(os.environ.get("MAMBA_FARM_CACHE", Path.home() / ".cache" / "mamba-farm"))
VENV = CACHE / f"venv-torch{TORCH}-cp311"
NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")
# what setup.py needs to build; everything else in the checkout stays out of the copy
SOURCE_ITEMS = (
    "setup.py",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "MANIFEST.in",
    "csrc",
    "mamba_ssm",
    "mamba_build",
    "rocm_patch",
)
CUDA13_ARCHS = "7.5;8.0;8.7;9.0;10.0;10.3;11.0;12.0;12.1"


def python311() -> str | None:
    return shutil.which("python3.11")


def torch_cuda_venv() -> Path:
    """The cached venv with torch 2.14.1 and cuobjdump; created once (under a lock): the farm's torch venv, hard-linked."""
    ready = VENV / ".mamba-ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / f"{VENV.name}.lock")):
        if not ready.is_file():
            shutil.rmtree(VENV, ignore_errors=True)
            # torch: the farm's smoke-test venv of this Python and torch, hard-linked (tests/sharedruns.py)
            from sharedruns import torch_venv

            torch_venv(VENV, python311(), f"torch=={TORCH}", dict(os.environ),
                       "setuptools>=70", "wheel", "packaging", "nvidia-cuda-cuobjdump")  # fmt: skip
            ready.write_text(TORCH)
    return VENV


def stage_source(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.so", "*.egg-info")
    for name in SOURCE_ITEMS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dst / name)
    return dst


@dataclass
class Build:
    wheel: Path | None
    returncode: int
    wall_s: float
    cpu_s: float  # user + sys of the whole process tree
    peak_rss_mb: float  # the largest single process (wait4's ru_maxrss)
    log: str


def run_measured(cmd: list[str], env: dict, cwd: Path, log_path: Path) -> tuple[int, float, float, float]:
    """Run cmd; return (rc, wall s, CPU s of it and its descendants, peak RSS MB of the largest one)."""
    with open(log_path, "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def build_wheel(venv: Path, src: Path, out: Path, archs: str, max_jobs: int = 1) -> Build:
    """pip wheel the staged tree for `archs` (MAMBA_CUDA_ARCHS syntax), forcing a compile."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    env.update(
        MAMBA_CUDA_ARCHS=archs,
        MAMBA_FORCE_BUILD="TRUE",
        MAX_JOBS=str(max_jobs),
        PATH=f"{venv / 'bin'}:{NVCC.parent}:{env.get('PATH', '')}",
        PIP_NO_INPUT="1",
    )
    log_path = out / "build.log"
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(out), str(src)]
    rc, wall, cpu, rss = run_measured(cmd, env, src, log_path)
    wheels = sorted(out.glob("mamba_ssm-*.whl"))
    return Build(wheels[0] if wheels else None, rc, wall, cpu, rss, log_path.read_text(errors="replace"))


def unpack(wheel: Path, dst: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dst)
    return dst


def extension_so(tree: Path) -> Path:
    found = sorted(tree.glob("mamba_ssm/_C*.so"))
    if len(found) != 1:
        raise AssertionError(f"expected one mamba_ssm/_C*.so in the wheel, found {[p.name for p in found]}")
    return found[0]


def cuobjdump(venv: Path) -> Path:
    for cand in (venv / "lib").glob("python3*/site-packages/nvidia/cu13/bin/cuobjdump"):
        return cand
    found = shutil.which("cuobjdump")
    if found:
        return Path(found)
    raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump into the venv")


def embedded_archs(venv: Path, so: Path) -> tuple[set[str], set[str]]:
    """(SASS archs, PTX archs) embedded in so, as {'sm_80', ...}."""
    tool = str(cuobjdump(venv))

    def listing(flag: str) -> set[str]:
        proc = subprocess.run([tool, flag, str(so)], check=False, capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0 and not re.search(r"does not contain|No (PTX|ELF) file", text):
            raise RuntimeError(f"cuobjdump {flag} {so.name} failed: {text.strip()}")
        return set(re.findall(r"\.(sm_\d+[a-z]?)\.(?:cubin|ptx)", text))

    return listing("--list-elf"), listing("--list-ptx")


_PROBE = r"""
import json, sys, torch
torch.ops.load_library(sys.argv[1])
has = torch._C._dispatch_has_kernel_for_dispatch_key
print(json.dumps({op: {k: has("mamba_ssm::" + op, k) for k in ("CPU", "CUDA")}
                  for op in ("selective_scan_fwd", "selective_scan_bwd")
                  if hasattr(torch.ops.mamba_ssm, op)}))
"""


def registered_kernels(venv: Path, so: Path) -> dict:
    """{op: {'CPU': bool, 'CUDA': bool}} for the ops the library registers, loaded on this GPU-less machine."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROBE, str(so)], check=False, capture_output=True, text=True, cwd="/"
    )
    if proc.returncode != 0:
        raise AssertionError(f"loading {so.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def nvcc_object_cost(
    source: Path, archs: list[int], out_dir: Path, extra: list[str] | None = None
) -> tuple[float, float, float]:
    """Compile one kernel TU alone the way setup.py does (its nvcc flags from mamba_build/build.toml): wall, CPU, RSS."""
    import tomllib

    flags = tomllib.loads((REPO / "mamba_build" / "build.toml").read_text())["cuda"]["nvcc_flags"]
    gencode = [f for sm in archs for f in ("-gencode", f"arch=compute_{sm},code=sm_{sm}")]
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(NVCC),
        *flags,
        "--threads",
        "1",
        *gencode,
        "-Xcompiler",
        "-fPIC",
        "-I",
        str(REPO / "csrc"),
        *(extra or []),
        "-c",
        str(source),
        "-o",
        str(out_dir / (source.stem + ".o")),
    ]
    rc, wall, cpu, rss = run_measured(cmd, dict(os.environ), out_dir, out_dir / (source.stem + ".log"))
    if rc != 0:
        raise RuntimeError(f"nvcc failed on {source.name}: {(out_dir / (source.stem + '.log')).read_text()[-2000:]}")
    return wall, cpu, rss


# -- the forward-compatibility canary (tests/test_stable_abi.py) ------------------------------------

def newest_torch(python: str = "3.11") -> str:
    """The newest final torch release with a Linux x86_64 wheel for PYTHON on the host's index, read now
    (PEP 691 listing through builder.sourcing.pypi: the host's pip settings, no wheel downloaded)."""
    from builder.sourcing.pypi import SimpleIndex

    tag = "cp" + python.replace(".", "")
    versions = [f.version for f in SimpleIndex().files("torch")
                if f.version and not f.yanked and not f.version.is_prerelease and not f.version.is_devrelease
                and f"-{tag}-{tag}-" in f.filename and "linux_x86_64" in f.linux_platforms()]  # fmt: skip
    return str(max(versions))


def canary_venv(version: str) -> Path:
    """The farm's own smoke-test torch venv for cp311 and torch==VERSION (builder/environments/store.py's, under
    <farm cache>/smoke/, so builds and the canary share it and the cache's budget covers it): made
    once, with whatever build the host's indexes give (the CPU one where the PyTorch CPU index is
    configured, as in CI; PyPI's CUDA build elsewhere, 5.4 GB for 2.15.0, most of it hard-linked to the
    other torch venvs' identical files). The host's torch cap (a pip constraint) is lifted for this one
    install: the canary exists to run torch releases newer than the ones the farm pins."""
    from builder.environments import store
    from builder.facts import hostenv

    smoke = hostenv.CACHE_ROOT / "smoke" / f"cp311-torch{version}"
    smoke.mkdir(parents=True, exist_ok=True)
    empty = smoke.parent / ".no-constraints.txt"
    empty.write_text("")
    old = os.environ.get("PIP_CONSTRAINT")
    with FileLock(str(smoke) + ".lock"):  # the lock builder/verifying/smoke.py's on_host takes
        os.environ["PIP_CONSTRAINT"] = str(empty)
        try:
            return store.torch_venv(python311(), f"torch=={version}", smoke / "torch-envs")
        finally:
            if old is None:
                os.environ.pop("PIP_CONSTRAINT", None)
            else:
                os.environ["PIP_CONSTRAINT"] = old


if __name__ == "__main__":  # debugging aid: python tests/cudakit.py OUT_DIR
    v = torch_cuda_venv()
    o = Path(sys.argv[1])
    b = build_wheel(v, stage_source(o / "src"), o / "dist", "8.0")
    print(b.returncode, b.wheel, f"{b.wall_s:.0f}s wall {b.cpu_s:.0f}s CPU {b.peak_rss_mb:.0f} MB")
