"""The preflight of the whole release set: every [[release]] of mamba-ssm and causal-conv1d beside every torch minor
(`python -m builder recipe check --releases`), cold and warm.

Cold: no cell's outcome kept (``<cache>/preflight-cells/`` emptied; the sources already in the cache, as on a
maintainer's machine after one fetch). Warm: the same command again, every cell's outcome kept (keyed by the recipe
file's bytes, the release's source and the cell). The syntax-only compile is left out unless ``--compile``: its
results are kept the same way under ``<cache>/preflight-syntax/``.

    .venv/bin/python benchmarks/preflight_releases.py --cache ~/.cache/mamba-farm
    .venv/bin/python benchmarks/preflight_releases.py --cache DIR --torch-minors 2.4,2.14 --rocm
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cache: Path, extra: list[str]) -> tuple[float, str]:
    env = {**os.environ, "MAMBA_FARM_CACHE": str(cache)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "builder", "recipe", "check", "--releases", *extra], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"recipe check --releases exited {proc.returncode}: {proc.stderr[-2000:]}")
    summary = next((ln for ln in proc.stdout.splitlines() if ln.startswith("preflight: ")), "?")
    return took, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True, help="the farm cache holding the releases' sources")
    ap.add_argument("--torch-minors", default="", help="only these torch minors (default: every row of torch.toml)")
    ap.add_argument("--rocm", action="store_true", help="the ROCm cells too")
    ap.add_argument("--compile", action="store_true", help="with the syntax-only compile")
    args = ap.parse_args()
    extra = ([f"--torch-minors={args.torch_minors}"] if args.torch_minors else []) + (["--rocm"] if args.rocm else [])
    extra += [] if args.compile else ["--no-compile"]
    shutil.rmtree(args.cache / "preflight-cells", ignore_errors=True)
    cold, said_cold = run(args.cache, extra)
    warm, said_warm = run(args.cache, extra)
    cells = re.search(r"of (\d+) \(release", said_cold)
    print(f"cold: {cold:.1f} s  ({said_cold})")
    print(f"warm: {warm:.1f} s  ({said_warm})")
    if cells:
        print(f"cold per cell: {cold / int(cells.group(1)):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
