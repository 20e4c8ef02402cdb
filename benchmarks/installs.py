"""How long resolving every cell of a plan takes, cold (no cached resolution) against warm (each cached by the
listings it read), both against the same index snapshot, measured in one run.

    .venv/bin/python benchmarks/installs.py [--profile release] [--snapshot DIR] [--jobs N] [--newest]

Each figure is one `python -m builder installs --dry-run` as a whole process: cold with an empty resolution cache
(every cell resolved by uv, and by pip where pip can judge it), warm right after (the same run's cache). The
snapshot is the one `installs --record` kept (default: the farm cache's); nothing is read from the network.
Recording the snapshot itself (reading PyPI) is not timed here: its cost is the index's, not the farm's.
``--newest``: each cell's newest release that installs (``installs --newest``: an older release resolved only where
every newer one does not install), the release profile's way to serve every cell.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("MAMBA_FARM_CACHE", Path.home() / ".cache" / "mamba-farm"))


def run(args: list[str], cache: Path) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "builder", "installs", "--dry-run", "--cache", str(cache), *args],
                       cwd=ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    if r.returncode != 0:
        sys.exit(f"installs failed ({r.returncode}): {r.stderr[-2000:]}")
    return time.perf_counter() - t, [ln for ln in r.stdout.splitlines() if ln.startswith("installs:")][-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="release")
    p.add_argument("--snapshot", type=Path, default=CACHE / "index-snapshot")
    p.add_argument("--jobs", type=int, default=6)
    p.add_argument("--newest", action="store_true", help="installs --newest: each cell's newest release that installs")
    a = p.parse_args()
    if not (a.snapshot / "pages").is_dir():
        sys.exit(f"{a.snapshot}: no snapshot; record one first: python -m builder installs --record")
    args = ["--profile", a.profile, "--snapshot", str(a.snapshot), "--jobs", str(a.jobs), *(["--newest"] * a.newest)]
    with tempfile.TemporaryDirectory(prefix="bench-installs-") as tmp:
        cache = Path(tmp) / "installs"
        cold, cold_line = run(args, cache)
        warm, warm_line = run(args, cache)
    print(f"profile {a.profile}{' --newest' * a.newest}, {a.jobs} jobs, snapshot {a.snapshot}")
    print(f"cold (no cached resolution): {cold:8.1f} s   {cold_line}")
    print(f"warm (every one cached):     {warm:8.1f} s   {warm_line}")
    print(f"warm / cold: {warm / cold:.3f}")


if __name__ == "__main__":
    main()
