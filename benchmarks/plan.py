"""How long the plan of the full default matrix takes, against baselines measured in the same run.

    .venv/bin/python benchmarks/plan.py [--repeat N]

In-process figures are medians of N runs (imports warm): the plan is compared with
merely parsing matrix.toml with tomllib (the least any plan must do), and the
one-off source hash is shown as its share of the plan. The command line is timed
cold, against starting the same interpreter with nothing to do and against building
the CLI parser (which imports every command's module).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.facts import compat
from builder.planning.matrix import load_matrix
from builder.planning.plan import DEFAULT_MATRIX, load_plan, source_hash


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def wall_s(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    n = ap.parse_args().repeat
    text = DEFAULT_MATRIX.read_text()
    c = compat.load()
    matrix = load_matrix(DEFAULT_MATRIX, c)
    plan = load_plan()

    parse = median_s(lambda: tomllib.loads(text), n)
    full = median_s(load_plan, n)
    ci = median_s(lambda: load_plan(profile="ci"), n)
    src = median_s(lambda: source_hash(matrix), n)
    cold_base = wall_s([sys.executable, "-c", "pass"], max(3, n // 5))
    cold_parser = wall_s([sys.executable, "-c", "from builder.commands.cli import build_parser; build_parser()"], max(3, n // 5))
    cold_cli = wall_s([sys.executable, "-m", "builder", "plan", "--format", "json"], max(3, n // 5))

    print(f"full default matrix: {len(plan.builds)} builds, {len(plan.images)} images, {len(plan.dropped)} dropped")
    print(f"  baseline  tomllib parse of matrix.toml   {parse * 1e3:8.2f} ms")
    print(f"  load_plan() full matrix                  {full * 1e3:8.2f} ms  = {full / parse:6.1f} x parse")
    print(f"  load_plan(profile='ci')                  {ci * 1e3:8.2f} ms  = {ci / parse:6.1f} x parse")
    print(f"  source hash (once per plan)              {src * 1e3:8.2f} ms  = {src / full:6.1%} of the full plan")
    print(f"  baseline  python -c pass (cold)          {cold_base * 1e3:8.2f} ms")
    print(
        f"  baseline  import every command (cold)    {cold_parser * 1e3:8.2f} ms  = {cold_parser / cold_base:6.1f} x bare start"
    )
    print(
        f"  python -m builder plan --format json     {cold_cli * 1e3:8.2f} ms  = {cold_cli / cold_base:6.1f} x bare start"
    )


if __name__ == "__main__":
    main()
