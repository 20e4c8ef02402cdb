"""Compile the kernel translation units and the torch binding into objects, outside torch's build.

The kernel TUs (csrc/selective_scan_cpu.cpp, csrc/cuda/*.cu) include no torch
header and get no torch-, Python- or ABI-dependent flag, so one object serves
every torch/Python/ABI variant of a toolkit. The binding (csrc/binding.cpp,
csrc/binding_stable.cpp) includes torch's headers but not Python's, so one object
serves every Python of one torch build; csrc/module.cpp (PyInit) includes only Python's.
Each object is named by a key that hashes its command line
(paths relative to the source tree; torch's and the toolkit's include folders
as their version, since every venv has its own copy), the compiler's identity
and the bytes of the sources it can include: equal key, equal object. (The farm
shares objects across builds by that key, MAMBA_KERNEL_CACHE; setup.py alone
reuses them inside its own build folder.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CPU_FLAGS = ("-O3", "-std=c++17", "-fPIC", "-fvisibility=hidden", "-Wno-psabi")


@dataclass(frozen=True)
class KernelJob:
    source: Path  # absolute
    argv: tuple[str, ...]  # the command, with "{obj}" where the output goes
    key: str

    def command(self, obj: Path) -> list[str]:
        return [str(obj) if a == "{obj}" else a for a in self.argv]


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def compiler_id(argv0: str) -> str:
    try:
        return subprocess.run([argv0, "--version"], check=False, capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        return argv0


def _key_arg(arg: str, csrc: Path, aliases: dict[str, str]) -> str:
    for folder, name in aliases.items():
        if arg == folder or arg.startswith(folder.rstrip("/") + "/"):
            return name + arg[len(folder.rstrip("/")) :]
    return os.path.relpath(arg, csrc) if os.path.isabs(arg) and Path(arg).is_relative_to(csrc) else arg


def prefix_map(csrc: Path) -> str:
    """GCC's (and nvcc's host compiler's) flag that writes the source tree's root as "." wherever a path is
    recorded (__FILE__ in asserts, debug info): the folder a build ran in does not reach the object."""
    return f"-ffile-prefix-map={csrc.parent}=."


@lru_cache(maxsize=8)
def nvcc_has_objdir_as_tempdir(nvcc: str) -> bool:
    """Whether NVCC knows --objdir-as-tempdir (asked, not assumed from a version: older ones reject it)."""
    try:
        out = subprocess.run([nvcc, "--help"], check=False, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--objdir-as-tempdir" in out


def _make_job(
    csrc: Path, source: Path, argv: list[str], deps: list[Path], aliases: dict[str, str] | None = None, *, where: bool = False
) -> KernelJob:
    """``where``: the object's bytes depend on the folder it is compiled in (nvcc: see cuda_jobs), so the
    key names that folder and a build elsewhere never reuses it."""
    mapped = prefix_map(csrc)
    rel = ["-ffile-prefix-map=<root>=." if a == mapped else _key_arg(a, csrc, aliases or {}) for a in argv]
    material = {"argv": rel, "compiler": compiler_id(argv[0]), "sources": _digest(deps)}
    if where:
        material["folder"] = str(csrc)
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]
    return KernelJob(source=source, argv=tuple(argv), key=key)


def cpu_job(csrc: Path, cxx: list[str]) -> KernelJob:
    src = csrc / "selective_scan_cpu.cpp"
    argv = [*cxx, *CPU_FLAGS, prefix_map(csrc), "-I", str(csrc), "-c", str(src), "-o", "{obj}"]
    deps = [src, csrc / "selective_scan.h", *csrc.glob("*.inc")]
    return _make_job(csrc, src, argv, deps)


def binding_job(
    csrc: Path, cxx: list[str], flags: list[str], include_dirs: dict[str, str], source: str = "binding.cpp"
) -> KernelJob:
    """A translation unit that includes torch's (or Python's) headers: binding.cpp against one torch build,
    binding_stable.cpp, module.cpp against one Python. ``include_dirs``: folder -> what identifies its headers
    (``torch 2.14.1+cu130 <git sha>``, the nvcc release, the Python): the key names those, not the venv's path."""
    src = csrc / source
    includes = [a for d in include_dirs for a in ("-isystem", d)]
    argv = [*cxx, *flags, "-fPIC", "-DNDEBUG", prefix_map(csrc), *includes, "-I", str(csrc), "-c", str(src), "-o", "{obj}"]
    deps = [src, csrc / "binding_common.h", csrc / "selective_scan.h"]
    return _make_job(csrc, src, argv, deps, {d: f"<{name}>" for d, name in include_dirs.items()})


def cuda_jobs(csrc: Path, nvcc: Path, nvcc_flags: list[str], gencode: list[str], threads: int, ccbin: str | None) -> list[KernelJob]:
    """nvcc's objects record the folder they were compiled in: -lineinfo writes the absolute source folder
    into the cubin (ptxas has no prefix map) and nvcc hashes the source's absolute path into
    anonymous-namespace names. So the key names the folder (``where``): the farm builds in a fixed folder
    (Docker's /src, the host executor's per-spec build root), which makes the bytes repeatable there."""
    deps_common = [csrc / "selective_scan.h", *(csrc / "cuda").glob("*.cuh"), *(csrc / "cuda").glob("*.h")]
    jobs = []
    for src in sorted((csrc / "cuda").glob("*.cu")):
        argv = [str(nvcc), *nvcc_flags, "--threads", str(threads), *gencode,
                "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-Xcompiler", prefix_map(csrc)]
        if nvcc_has_objdir_as_tempdir(str(nvcc)):
            # nvcc's intermediate files (tmpxft_<pid>_<n>-*) are named after the object instead of the
            # process, and those names land in the object (its fatbin's module id): no pid in the bytes.
            argv.append("--objdir-as-tempdir")
        if ccbin:
            argv += ["-ccbin", ccbin]
        argv += ["-I", str(csrc), "-c", str(src), "-o", "{obj}"]
        jobs.append(_make_job(csrc, src, argv, [src, *deps_common], where=True))
    return jobs


def obj_path(job: KernelJob, out_dir: Path) -> Path:
    return out_dir / f"{job.source.stem}-{job.key}.o"


def log_line(text: str) -> None:
    """One log line, one write: ``print`` writes the text and the newline apart, so two threads' lines merge."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def build(jobs: list[KernelJob], out_dir: Path, max_jobs: int, log=log_line) -> list[Path]:
    """Compile what is not already there (by key), at most max_jobs at a time; objects in job order.

    ``log`` is called for one line at a time, never from two threads at once."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    raw_log = log

    def log(text: str) -> None:
        with lock:
            raw_log(text)

    def one(job: KernelJob) -> Path:
        obj = obj_path(job, out_dir)
        if obj.is_file():
            log(f"mamba-ssm: reusing {obj.name}")
            return obj
        # A folder of its own (builds in other containers share out_dir and may have our pid), and in it
        # the object's final name: nvcc names its intermediate files after the object's name
        # (--objdir-as-tempdir) and those names land in the object, so a random name would too.
        private = Path(tempfile.mkdtemp(prefix=obj.stem + ".", suffix=".tmp", dir=out_dir))
        tmp = private / obj.name
        cmd = job.command(tmp)
        log("mamba-ssm: " + " ".join(cmd))
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            made = proc.returncode == 0 and tmp.is_file()
            if made:
                os.replace(tmp, obj)  # never leave a half-written object under its final name
        finally:
            shutil.rmtree(private, ignore_errors=True)
        if not made:
            why = f"exit {proc.returncode}" if proc.returncode else "it wrote no object"
            raise SystemExit(
                f"mamba-ssm build error: compiling {job.source.name} failed ({why}).\n"
                f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
            )
        if proc.stderr.strip():
            log(proc.stderr.rstrip())
        return obj

    with ThreadPoolExecutor(max_workers=max(1, max_jobs)) as pool:
        return list(pool.map(one, jobs))
