"""The CI set's trimmed upstream builds against the full ones: nvcc's CPU seconds on a small piece of each.

A profile's ``trim`` (ci-upstream) applies the recipes' ``when.trim`` patches: float32's kernels alone. This compiles
the same kernel sources of the full and the trimmed tree (``recipe prepare`` and ``--trim``: the real sdists, the
recipes' real patches) with this host's nvcc for sm_80 and upstream's nvcc flags, each file alone, and reports the
compile CPU seconds (the children's rusage) of each tree and their ratio, in one run:

- causal-conv1d: ``causal_conv1d_update.cu`` (the trim keeps one of its nine instantiations);
- mamba-ssm: the forward kernels (``selective_scan_fwd_{fp32,fp16,bf16}.cu``; the trim compiles the fp32 file
  alone, unchanged, as it does of the backward ones).

    .venv/bin/python benchmarks/upstream_trim.py                       # both, about 5 CPU-minutes
    .venv/bin/python benchmarks/upstream_trim.py --projects causal-conv1d

The torch headers are those of a CUDA build of torch 2.14.1 (``--torch-include``; default: the farm's smoke-test
venv of it, which a CUDA build of the farm made); the kernels include no CUDA library header.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.planning.recipes import recipe_for
from builder.sourcing.prepare import cell_facts, prepare

PIECES = {
    "causal-conv1d": ["csrc/causal_conv1d_update.cu"],
    "mamba-ssm": [f"csrc/selective_scan/selective_scan_fwd_{t}.cu" for t in ("fp32", "fp16", "bf16")],
}
FLAGS = [  # upstream's nvcc flags (both setup.py files), for one arch
    "-O3", "-std=c++20", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "-gencode", "arch=compute_80,code=sm_80",
]  # fmt: skip


def compiled_sources(tree: Path, project: str) -> list[str]:
    """The piece's files that the tree's setup.py still compiles (a trimmed mamba-ssm leaves fp16's and bf16's out)."""
    setup = (tree / "setup.py").read_text()
    return [f for f in PIECES[project] if f'"{f}"' in setup]


def default_include() -> Path | None:
    from builder.facts.hostenv import CACHE_ROOT

    found = sorted(CACHE_ROOT.glob("smoke/cp311-torch2.14.1/torch-envs/*/lib/python3.11/site-packages/torch/include"))
    return next((p for p in found if (p / "c10/cuda/impl/cuda_cmake_macros.h").is_file()), None)


def compile_cpu(tree: Path, files: list[str], work: Path, inc: Path) -> float:
    args = ["nvcc", *FLAGS, "-I", str(inc), "-I", str(inc / "torch/csrc/api/include"),
            "-I", sysconfig.get_paths()["include"], "-I", str(tree / "csrc"), "-I", str(tree / "csrc/selective_scan")]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for f in files:
        proc = subprocess.run([*args, "-c", str(tree / f), "-o", str(work / (Path(f).stem + ".o"))],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if proc.returncode:
            raise SystemExit(f"nvcc failed on {tree / f}:\n{proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--projects", nargs="+", default=list(PIECES), choices=list(PIECES))
    ap.add_argument("--torch-include", type=Path, default=None, help="a CUDA torch 2.14's include/ folder")
    args = ap.parse_args()
    inc = args.torch_include or default_include()
    if inc is None or not (inc / "c10/cuda/impl/cuda_cmake_macros.h").is_file():
        raise SystemExit("no CUDA torch 2.14.1 headers: pass --torch-include (a CUDA build's torch/include folder)")
    if shutil.which("nvcc") is None:
        raise SystemExit("no nvcc on PATH: this compiles with the host's CUDA toolkit")
    with tempfile.TemporaryDirectory(prefix="upstream-trim-") as tmp:
        for project in args.projects:
            recipe = recipe_for(project)
            row = {}
            for trim in (False, True):
                facts = cell_facts("2.14.1", "cuda-13.0", "sm_80", True, None, trim)
                work = Path(tmp) / f"{project}-{'trim' if trim else 'full'}"
                prep = prepare(recipe, facts, work)
                files = compiled_sources(prep.tree, project)
                started = time.monotonic()
                cpu = compile_cpu(prep.tree, files, work, inc)
                objs = sum(p.stat().st_size for p in work.glob("*.o"))
                kernels = sum(
                    len(re.findall(r"^template void ", (prep.tree / f).read_text(), re.MULTILINE)) for f in files
                )
                row[trim] = (cpu, time.monotonic() - started, len(files), kernels, objs)
                print(f"{project} {'trimmed' if trim else 'full':7}: {len(files)} file(s), {kernels} instantiations, "
                      f"{cpu:.1f} CPU-s, {row[trim][1]:.1f} s wall, objects {objs / 1e6:.2f} MB", flush=True)  # fmt: skip
            print(f"{project}: trimmed / full compile CPU {row[True][0] / row[False][0]:.2f}\n")
    print(f"(machine load at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
