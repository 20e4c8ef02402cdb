"""Shared by tests/test_prebuilt.py and benchmarks/prebuilt.py: make the sdist, build the real wheel,
make a venv with torch, install the sdist with real pip, and look at what got installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from conftest import REPO

COMPILE_MARK = "building 'mamba_ssm._C' extension"  # setuptools prints it only when it compiles
PREBUILT_MARK = "mamba-ssm: using prebuilt wheel"


def run(cmd: list, env: dict | None = None, timeout: int = 1800, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the checkout has its own mamba_ssm.
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=cwd or Path(sys.executable).anchor, check=False)  # fmt: skip


def checked(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if proc.returncode:
        raise AssertionError(f"{' '.join(proc.args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def base_env(**extra: str) -> dict:
    # COLUMNS: uv wraps what it prints to that width (pytest-xdist's workers have it set); the tests read whole lines
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAMBA_") and k not in ("COLUMNS", "LINES")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", MAX_JOBS=os.environ.get("MAX_JOBS", "2"), **extra)
    return env


def make_sdist(out: Path) -> Path:
    checked(run([sys.executable, "-m", "build", "--sdist", "-o", out, REPO], env=base_env()))
    (sdist,) = out.glob("mamba_ssm-*.tar.gz")
    return sdist


def build_wheel(sdist: Path, out: Path, **env: str) -> tuple[Path, float]:
    """The real CPU wheel, compiled by setup.py from the sdist (the farm's way: MAMBA_FORCE_BUILD=TRUE)."""
    t0 = time.perf_counter()
    checked(run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-w", out, sdist],
                env=base_env(MAMBA_FORCE_BUILD="TRUE", **env)))  # fmt: skip
    seconds = time.perf_counter() - t0
    (wheel,) = out.glob("mamba_ssm-*.whl")
    return wheel, seconds


def torch_venv(path: Path) -> Path:
    """A fresh venv holding torch (the version the dev venv has) and setuptools: what a user starts from."""
    import torch

    checked(run([sys.executable, "-m", "venv", "--without-pip", path]))
    py = path / "bin" / "python"
    version = torch.__version__.split("+")[0]
    checked(run([sys.executable, "-m", "pip", "--python", py, "install", "-q", f"torch=={version}", "setuptools>=70.1"], env=base_env()))
    return py


def install_sdist(py: Path, sdist: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """``pip install --no-build-isolation <sdist>`` as the README tells users (verbose, to see the build's lines)."""
    t0 = time.perf_counter()
    proc = run([sys.executable, "-m", "pip", "--python", py, "install", "-v", "--no-build-isolation", "--no-deps",
                "--no-cache-dir", "--force-reinstall", sdist], env=base_env(**env))  # fmt: skip
    return checked(proc), time.perf_counter() - t0


def installed_extension(py: Path) -> Path:
    out = checked(run([py, "-c", "import importlib.util as u; print(u.find_spec('mamba_ssm').submodule_search_locations[0])"]))
    (so,) = Path(out.stdout.strip()).glob("_C*.so")
    return so


def wheel_member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("mamba_ssm/_C") and n.endswith(suffix)]
        return zf.read(name)
