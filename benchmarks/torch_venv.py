"""A smoke-test torch venv made as builder/environments/store.py ``torch_venv`` makes it, with and without pip's
byte-compilation of every module (``--no-compile``), in one run, alternating: CPU and wall seconds of each, and
the ratios. The venvs are fresh each round and deleted; pip's own cache is warm after the first (as it is in a
farm run).

    .venv/bin/python benchmarks/torch_venv.py                         # torch==2.13.0, 3 rounds
    .venv/bin/python benchmarks/torch_venv.py --torch torch==2.14.1 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median


def make(python: str, requirement: str, folder: Path, compile_: bool) -> tuple[float, float]:
    """(wall, CPU of the children) seconds to make one venv and install REQUIREMENT into it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([python, "-m", "venv", str(folder)], check=True)
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *([] if compile_ else ["--no-compile"])]
    subprocess.run([*pip, requirement], check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch", default=os.environ.get("MAMBA_TEST_TORCH", "torch==2.13.0"))
    ap.add_argument("--python", default=shutil.which("python3.11") or sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="torch-venv-bench-") as work:
        for i in range(args.rounds):
            for compile_ in (True, False):
                folder = Path(work) / f"{i}-{compile_}"
                runs[compile_].append(make(args.python, args.torch, folder, compile_))
                shutil.rmtree(folder)
    print(f"{args.torch}, {args.rounds} round(s), median of each:")
    print("| pip install | wall s | CPU s |\n|---|---:|---:|")
    med = {c: (median(w for w, _ in r), median(u for _, u in r)) for c, r in runs.items()}
    for compile_, label in ((True, "byte-compiled (pip's default)"), (False, "--no-compile (torch_venv)")):
        print(f"| {label} | {med[compile_][0]:.1f} | {med[compile_][1]:.1f} |")
    print(f"ratio --no-compile / default: wall {med[False][0] / med[True][0]:.2f}, CPU {med[False][1] / med[True][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
