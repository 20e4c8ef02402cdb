"""The farm's wall times: one build at a time vs the automatic parallelism, a rerun, image reuse.

    .venv/bin/python benchmarks/farm.py [--profile ci] [--only ID ...] [--executor docker]

Every figure is measured in this run, and reported as a ratio against its baseline:
- `--jobs 1` (baseline) vs automatic `--jobs` on the same plan, each into a fresh dist;
- an unchanged rerun (ledger hit) vs the first run;
- the toolchain step (images + torch volumes) of the first run vs the second (a
  content-hash tag hit); ``--cold-images`` removes the farm's images first so the
  first run really builds them.

Torch volumes (mamba-farm-torch-*) and the smoke-test envs are kept warm across the
runs on purpose: the comparison is about compiling, not about downloading torch.
The default plan is the ci profile; `--only` narrows it (e.g. the CPU spec alone).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(dist: Path, args: argparse.Namespace, *extra: str) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "builder", "build", "--dist", str(dist), "--executor", args.executor]
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.only:
        cmd += ["--only", *args.only]
    if args.source:  # a frozen copy keeps the inputs hash still while others edit the checkout
        cmd += ["--source", str(args.source), "--matrix", str(args.source / "matrix.toml")]
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, *extra], cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"benchmark: {' '.join(cmd + list(extra))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def toolchain_seconds(out: str) -> float | None:
    m = re.search(r"toolchains ready in ([\d.]+)s", out)
    return float(m.group(1)) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="ci")
    ap.add_argument("--only", nargs="+", default=None)
    ap.add_argument("--executor", default="docker", choices=["docker", "host", "auto"])
    ap.add_argument("--source", type=Path, default=None, help="build this source tree (and its matrix.toml)")
    ap.add_argument("--cold-images", action="store_true", help="remove the plan's farm images first (measures image reuse)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        tmp = Path(tmp)
        if args.cold_images:
            subprocess.run(
                "docker images -q --filter label=org.mamba-farm.image | xargs -r docker rmi -f",
                shell=True, capture_output=True, check=False,
            )
        one, out1 = build(tmp / "jobs1", args, "--jobs", "1")
        auto, out_auto = build(tmp / "auto", args)
        rerun, _ = build(tmp / "auto", args)
        jobs = re.search(r"(\d+) at once", out_auto)
        print(f"plan: profile={args.profile} only={args.only or '-'} executor={args.executor}")
        print(f"  --jobs 1 (baseline)      {one:8.1f} s")
        print(f"  --jobs auto ({jobs.group(1) if jobs else '?'})          {auto:8.1f} s   {one / auto:5.2f}x faster than --jobs 1")
        print(f"  unchanged rerun          {rerun:8.1f} s   {rerun / auto:6.3f} of the first run (aim < 0.1)")
        first_img, second_img = toolchain_seconds(out1), toolchain_seconds(out_auto)
        built = "building mamba-farm/" in out1
        if first_img is not None and second_img is not None:
            print(f"  toolchain step, run 1    {first_img:8.1f} s   ({'images built' if built else 'images already there'})")
            if built:
                print(f"  toolchain step, run 2    {second_img:8.1f} s   {second_img / max(first_img, 1e-3):6.3f} of run 1 (tag hit)")
            else:
                print(f"  toolchain step, run 2    {second_img:8.1f} s   (pass --cold-images to measure a first image build)")
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
