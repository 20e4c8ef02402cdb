"""Cost of compiling the HIP kernels per AMD GPU target, and the size of each code object.

    .venv/bin/python benchmarks/rocm_compile.py                 # gfx90a, gfx942, gfx1100
    .venv/bin/python benchmarks/rocm_compile.py --repeat 2      # best of 2 per cell

Hipifies csrc/ with torch.utils.hipify (this Python's torch) and compiles each kernel
TU with Debian trixie's hipcc 5.7.1 (clang 17) in the farm's hipcc image
(builder/building/hip.py), one target per hipcc call, then all targets in one call (what a
build does). Baseline, measured in this run: the same TU compiled for gfx90a alone.
CPU seconds (hipcc and its children, from bash's `time`) are the figure to compare:
wall time depends on what else the machine runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builder.building import hip
from builder.building.images.engine import connect

BASELINE = "gfx90a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default=",".join(hip.DEFAULT_ARCHS))
    ap.add_argument("--repeat", type=int, default=1, help="compile each cell N times, keep the fastest (CPU)")
    ap.add_argument("--python", default=sys.executable, help="a Python with torch (for hipify)")
    args = ap.parse_args()
    archs = hip.check_archs(tuple(a for a in args.archs.split(",") if a))
    if BASELINE not in archs:
        archs = (BASELINE, *archs)
    client = connect()
    image = hip.ensure_image(client, log=lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="rocm-bench-") as tmp:
        work = Path(tmp)
        tus = hip.hipify(work, python=args.python)
        rows = []  # (tu, cell, wall, cpu, {arch: size})
        with hip.Toolchain(client, image, work) as tc:
            print(f"HIP {tc.hip_version} (Debian trixie hipcc), image {image}", file=sys.stderr)
            for tu in tus:
                cells = [(a,) for a in archs] + [archs]
                for cell in cells:
                    obj = f"/w/{Path(tu).stem}-{'-'.join(cell)}.o"
                    best = min((tc.compile(tu, cell, obj) for _ in range(max(1, args.repeat))), key=lambda t: t[1])
                    sizes = {c.arch: c.size for c in hip.code_objects(work / Path(obj).name)}
                    rows.append((Path(tu).stem, cell, best[0], best[1], sizes))
                    print(f"  {Path(tu).stem} {','.join(cell)}: {best[1]:.1f}s CPU", file=sys.stderr)
    report(rows, archs)
    return 0


def report(rows: list, archs: tuple[str, ...]) -> None:
    print(f"\nHIP kernel compile, per target (baseline: the same TU for {BASELINE} alone, this run)")
    print(f"  {'TU':20} {'targets':26} {'wall s':>7} {'CPU s':>7} {'CPU / ' + BASELINE:>12}  code objects (bytes)")
    for tu in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == tu]
        base_cpu = next(r[3] for r in mine if r[1] == (BASELINE,))
        for _, cell, wall, cpu, sizes in mine:
            objs = ", ".join(f"{a} {s}" for a, s in sorted(sizes.items()))
            print(f"  {tu:20} {','.join(cell):26} {wall:7.1f} {cpu:7.1f} {cpu / base_cpu:12.2f}  {objs}")
    # One call for every target against the sum of single-target calls: the shared host pass.
    print("\n  all targets in one hipcc call vs one call per target (CPU):")
    for tu in dict.fromkeys(r[0] for r in rows):
        mine = {r[1]: r for r in rows if r[0] == tu}
        singles = sum(mine[(a,)][3] for a in archs)
        print(f"  {tu:20} {mine[archs][3]:7.1f}s vs {singles:7.1f}s ({mine[archs][3] / singles:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
