"""The CI set's test files on one core against every core (pytest-xdist ``-n auto``, as scripts/test-ci.sh runs).

    .venv/bin/python benchmarks/ci_workers.py                        # the default light files, 1 round
    .venv/bin/python benchmarks/ci_workers.py --rounds 2 tests/test_doctor.py tests/test_drift.py

Each round runs the same files serially (``-p no:xdist``) and then with ``-n auto`` (tests/conftest.py keeps each
file on one worker), with the test suite's own venv (.nox/tests), and prints both walls and their ratio: the
baseline is measured in the same run, next to the figure. The default files use no Docker engine, so the figure
is the CPU-bound part of the set; the Docker files' share comes from a whole run's log (benchmarks/ci_time.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".nox" / "tests" / "bin" / "python"
DEFAULT = [
    "tests/test_doctor.py",
    "tests/test_drift.py",
    "tests/test_doctor_hostile.py",
    "tests/test_elf.py",
    "tests/test_wheels.py",
    "tests/test_doctor_dist.py",
]


def _wall(files: list[str], *flags: str) -> float:
    cmd = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags, *files]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"ci_workers: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=DEFAULT, help="test files (default: light files of the CI set)")
    parser.add_argument("--rounds", type=int, default=1, help="serial and parallel runs, in turn (default 1)")
    args = parser.parse_args(argv)
    if not PYTHON.exists():
        sys.exit(f"ci_workers: no test venv at {PYTHON}: run `nox -s tests -- --co -q` once first")
    print(f"{len(args.files)} files, {os.cpu_count()} cores")
    for n in range(1, args.rounds + 1):
        serial = _wall(args.files, "-p", "no:xdist")
        parallel = _wall(args.files, "-n", "auto")
        print(f"round {n}: serial {serial:.1f} s, -n auto {parallel:.1f} s, ratio {parallel / serial:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
