"""Builds on the host: the embedded default where no container engine answers.

A venv per (Python, torch) under ~/.cache/mamba-farm/venvs, made from the host's
pyenv interpreter; the CUDA toolkit is the machine's when its version matches the
spec, else the PyPI one (CUDA 13.x) installed into a cached toolkit dir. Each
build copies the source into its spec's fixed build root (the checkout stays clean) and
runs ``pip wheel --no-build-isolation`` through the same build.sh as containers.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from builder.building.executors import (
    BUILD_SCRIPT,
    BuildOptions,
    BuildResult,
    collect_wheel,
    source_files,
    spec_env,
    toolchain_record,
)
from builder.building.images.render import load_packages
from builder.environments import interpreters
from builder.errors import EngineUnavailable
from builder.facts.cputime import wait_with_rusage
from builder.facts.hostenv import CACHE_ROOT, host_pip_settings, pyenv_pythons
from builder.facts.untrusted import Untrusted, file_name, open_zip, remove_tree, zip_read
from builder.sourcing.reproducible import tree_epoch

VENVS = CACHE_ROOT / "venvs"
TOOLKITS = CACHE_ROOT / "toolkits"
KERNEL_CACHES = CACHE_ROOT / "kcache"  # one folder per image id, shared by that image's builds
# One fixed folder per spec, where its source is copied and built: nvcc writes the folder it compiled in
# into the objects (mamba_build/kernels.py), so a random scratch folder would make every build's bytes new.
BUILD_ROOTS = CACHE_ROOT / "build"


@contextmanager
def build_root(spec_id: str) -> Iterator[Path]:
    """SPEC_ID's build folder, the same path every time, emptied before and after the build. A lock beside
    it makes a second build of the same spec on this machine (another farm run) wait for the first."""
    BUILD_ROOTS.mkdir(parents=True, exist_ok=True)
    root = BUILD_ROOTS / file_name(spec_id, "build id")
    with FileLock(str(root) + ".lock"):
        remove_tree(root, BUILD_ROOTS)  # what a killed build left
        root.mkdir()
        try:
            yield root
        finally:
            remove_tree(root, BUILD_ROOTS)


def copy_source(source: Path, dest: Path) -> None:
    for rel in source_files(source):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, target)


def add_headers(python: Path, requirements: list[str], include: Path, scratch: Path) -> None:
    """The include/ folders alone of REQUIREMENTS' wheels (the CUDA libraries whose headers torch's CUDA headers
    include) into INCLUDE: their libraries are hundreds of MB that no extension links (it links torch's)."""
    if not requirements:
        return
    run = subprocess.run(
        [str(python), "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(scratch), *requirements],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    if run.returncode != 0:
        raise EngineUnavailable(f"could not fetch the CUDA library headers {requirements} from PyPI: {run.stderr.strip()[-300:]}")
    member = re.compile(r"nvidia/cu\d+/include/([A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*)")
    try:
        for wheel in sorted(scratch.glob("*.whl")):
            with open_zip(wheel, wheel.name) as zf:
                for info in zf.infolist():
                    m = member.fullmatch(info.filename)
                    if m and ".." not in m.group(1).split("/") and not info.is_dir():
                        dest = include / m.group(1)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(zip_read(zf, info, 64 << 20, wheel.name))
    except Untrusted as err:
        raise EngineUnavailable(f"a CUDA header wheel could not be read: {err}") from None
    shutil.rmtree(scratch, ignore_errors=True)


class HostExecutor:
    name = "host"

    def __init__(self, options: BuildOptions) -> None:
        self.options = options
        self.log = options.log
        self.pip = host_pip_settings(options.wheelhouses)
        self.pythons = pyenv_pythons()
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.cuda_homes: dict[str, str] = {}
        self.cuda_origins: dict[str, dict] = {}  # toolkit -> where it came from (provenance)

    def ran(self, spec) -> dict:
        toolkit = None
        if spec.toolkit and spec.toolkit in self.cuda_origins:
            toolkit = {"kind": "cuda", "version": spec.toolkit, **self.cuda_origins[spec.toolkit]}
        return toolchain_record("host", image=None, base=None, compiler="host", toolkit=toolkit)

    def prepare(self, images: dict, specs: list) -> None:
        from builder.facts.compat import machine_of
        from builder.facts.hostenv import host_machine

        for spec in specs:
            if machine_of(spec.platform) != host_machine():
                raise EngineUnavailable(
                    f"{spec.id}: the host executor builds with this {host_machine()} host's toolchain, not for {spec.platform}",
                    hint="use --executor docker (another machine's image runs under emulation), or build on a native host",
                )
            if spec.python not in self.pythons:  # the farm provides it (or says why it cannot: exit 14)
                self.pythons[spec.python] = interpreters.python_prefix(spec.python, log=self.log)
            if spec.accelerator.startswith("hip"):
                raise EngineUnavailable(
                    f"{spec.id}: the host executor does not build ROCm wheels", hint="use --executor docker"
                )
            if spec.toolkit and spec.accelerator.startswith("cu") and spec.toolkit not in self.cuda_homes:
                self.cuda_homes[spec.toolkit] = self._cuda_home(spec.toolkit)

    def _cuda_home(self, toolkit: str) -> str:
        """The machine's toolkit when its version matches, else CUDA from PyPI in a cached dir."""
        nvcc = shutil.which("nvcc")
        if nvcc:
            real = _real_nvcc(Path(nvcc))
            out = subprocess.run([str(real), "--version"], check=False, capture_output=True, text=True).stdout
            m = re.search(r"release (\d+\.\d+)", out)
            if m and m.group(1) == toolkit:
                self.log(f"host: CUDA {toolkit} from this machine ({real.parent.parent})")
                self.cuda_origins[toolkit] = {"origin": "host"}
                return str(real.parent.parent)
        pins = load_packages()["cuda"]["pypi"].get(toolkit)
        if pins is None:
            raise EngineUnavailable(
                f"CUDA {toolkit} is neither on this machine nor installable from PyPI",
                hint="install that toolkit and put its nvcc on PATH, or use --executor docker",
            )
        self.cuda_origins[toolkit] = {"origin": "pypi", "packages": list(pins["packages"])}
        major = toolkit.split(".")[0]
        target = TOOLKITS / f"cuda-{toolkit}"
        home = target / "nvidia" / f"cu{major}"
        if (home / "bin" / "nvcc").exists() and not (home / "include" / "cusparse.h").exists():
            # a toolkit cached before it took the library headers: they are added in place
            self.log(f"host: adding the CUDA library headers to {target}")
            with FileLock(str(target) + ".lock"):
                py = next(iter(self.pythons.values()))
                add_headers(py / "bin" / "python3", pins.get("headers", []), home / "include",
                            Path(tempfile.mkdtemp(prefix="cuda-headers-", dir=TOOLKITS)))  # fmt: skip
        if not (home / "bin" / "nvcc").exists():
            self.log(f"host: installing CUDA {toolkit} from PyPI into {target}")
            tmp = Path(tempfile.mkdtemp(prefix=f"cuda-{toolkit}-", dir=TOOLKITS.parent if TOOLKITS.parent.exists() else None))
            py = next(iter(self.pythons.values()))
            run = subprocess.run(
                [str(py / "bin" / "python3"), "-m", "pip", "install", "--no-compile", "--target", str(tmp), *pins["packages"]],
                check=False, capture_output=True, text=True,
            )
            if run.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise EngineUnavailable(f"could not install CUDA {toolkit} from PyPI: {run.stderr.strip()[-300:]}")
            h = tmp / "nvidia" / f"cu{major}"
            try:
                add_headers(py / "bin" / "python3", pins.get("headers", []), h / "include", tmp / ".headers")
            except EngineUnavailable:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            (h / "lib64").symlink_to("lib")
            (h / "lib" / "libcudart.so").symlink_to(f"libcudart.so.{major}")
            TOOLKITS.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        return str(home)

    def _venv(self, spec) -> Path:
        """A venv per (Python, torch release), made once and reused by every build that matches."""
        venv = VENVS / f"cp{spec.python.replace('.', '')}-torch{spec.torch_version}-{spec.accelerator}"
        py = venv / "bin" / "python"
        ready = venv / ".mamba-farm-ready"
        VENVS.mkdir(parents=True, exist_ok=True)
        # venvs embed their own path, so they are made in place; the marker says "complete".
        with FileLock(str(venv) + ".lock"):
            if ready.exists():
                return py
            shutil.rmtree(venv, ignore_errors=True)
            base = self.pythons[spec.python] / "bin" / "python3"
            subprocess.run([str(base), "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run(
                [str(py), "-m", "pip", "install", "-q", "setuptools>=70", "wheel", "ninja", "packaging"],
                check=True, capture_output=True, env={**os.environ, **self.pip.env()},
            )
            ready.touch()
        return py

    def build(self, spec, source: Path, out_dir: Path, log_path: Path, timeout: float) -> BuildResult:
        if self._closed:
            return BuildResult(False, None, log_path, "interrupted", infrastructure=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            py = self._venv(spec)
        except subprocess.CalledProcessError as err:
            log_path.write_text(f"== could not make the build venv: {err}\n{(err.stderr or b'').decode(errors='replace')}")
            return BuildResult(False, None, log_path, "venv creation failed", infrastructure=True)
        with build_root(spec.id) as root:
            src = root / "src"
            copy_source(source, src)
            raw = root / "out"
            env = self.build_env(spec, py, src, raw)
            env["SOURCE_DATE_EPOCH"] = str(tree_epoch(source))  # the source's time, never the clock's
            Path(env["MAMBA_KERNEL_CACHE"]).mkdir(parents=True, exist_ok=True)
            with open(log_path, "wb") as log:
                with self._lock:
                    if self._closed:
                        return BuildResult(False, None, log_path, "interrupted", infrastructure=True)
                    proc = subprocess.Popen(
                        ["bash", str(BUILD_SCRIPT)], stdout=log, stderr=subprocess.STDOUT, env=env,
                        cwd=src, start_new_session=True,
                    )
                    self._procs.add(proc)
                try:
                    code, cpu = wait_with_rusage(proc, timeout)  # this build's CPU, not the run's other builds'
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    return BuildResult(False, None, log_path, f"timed out after {timeout:.0f}s", timed_out=True)
                finally:
                    with self._lock:
                        self._procs.discard(proc)
            if self._closed:
                return BuildResult(False, None, log_path, "interrupted", infrastructure=True)
            if code == 0:
                from builder.environments import store

                store.share_build_venv(py.parent.parent, log=self.options.log)
            result = collect_wheel(code, raw, out_dir, log_path)
            result.cpu_seconds, result.measured = cpu, "rusage"
            return result

    def build_env(self, spec, py: Path, src: Path, out: Path) -> dict[str, str]:
        """The environment build.sh runs SPEC's build with."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(self.pip.env())
        if self.options.ca_bundle:
            env.update(PIP_CERT=str(self.options.ca_bundle), SSL_CERT_FILE=str(self.options.ca_bundle))
        env.update(spec_env(spec, max_jobs=self.options.max_jobs))
        env.update(FARM_PYTHON=str(py), FARM_SRC=str(src), FARM_OUT=str(out))
        # shared by every build of this toolchain: kernels compile once, only the binding per variant
        env["MAMBA_KERNEL_CACHE"] = str(KERNEL_CACHES / spec.image)
        if spec.toolkit and spec.toolkit in self.cuda_homes:
            home = self.cuda_homes[spec.toolkit]
            env.update(CUDA_HOME=home, PATH=f"{home}/bin:{env.get('PATH', '')}")
        return env

    def cleanup(self) -> None:
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _real_nvcc(nvcc: Path) -> Path:
    """nvcc on PATH may be a wrapper script (exec /usr/local/cuda-X/bin/nvcc): follow it."""
    nvcc = nvcc.resolve()
    try:
        head = nvcc.read_bytes()[:512]
    except OSError:
        return nvcc
    if head.startswith(b"#!"):
        m = re.search(rb"exec\s+(\S+/nvcc)\b", head)
        if m and Path(m.group(1).decode()).exists():
            return Path(m.group(1).decode()).resolve()
    return nvcc
