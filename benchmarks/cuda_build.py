"""Cost of building the CUDA extension: wall, CPU time, peak memory, wheel size.

    .venv/bin/python benchmarks/cuda_build.py            # sm_80: kernel TUs alone + the whole wheel
    .venv/bin/python benchmarks/cuda_build.py --full     # also the 9 archs of CUDA 13 (long)

Measured here, in this run: each kernel TU alone (forward, backward) and, as the
same-run baseline, a TU with the same headers and no kernel (nvcc's fixed cost per
TU); then the whole wheel through setup.py (`pip wheel --no-build-isolation`,
torch 2.14.1, nvcc 13.0, MAX_JOBS as given). Upstream mamba's figures are NOT
measured here: they are constants below, measured once on the same kind of machine (2 cores, torch 2.14.1,
nvcc 13.0, sm_80, MAX_JOBS=2, c++20), printed for the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import cudakit

# Measured once outside this script (a full upstream build), not in this run.
UPSTREAM_SM80 = {"wall_s": 339.0, "cpu_s": 633.0, "peak_rss_mb": 1600.0, "wheel_mb": 39.0}
UPSTREAM_CUDA13_CPU_S = 92 * 60.0  # extrapolated there from sm_80 to the 9 archs of CUDA 13

HEADERS_ONLY = '#include "cuda/scan_common.cuh"\n__global__ void mamba_empty() {}\n'


def tu_costs(archs: list[int], work: Path) -> dict[str, tuple[float, float, float]]:
    work.mkdir(parents=True, exist_ok=True)
    base = work / "headers_only.cu"
    base.write_text(HEADERS_ONLY)
    costs = {"headers only (baseline)": cudakit.nvcc_object_cost(base, archs, work / "obj")}
    for name in ("selective_scan_fwd", "selective_scan_bwd"):
        costs[name] = cudakit.nvcc_object_cost(cudakit.ROOT / "csrc" / "cuda" / f"{name}.cu", archs, work / "obj")
    return costs


def print_tus(label: str, costs: dict) -> None:
    base_cpu = costs["headers only (baseline)"][1]
    print(f"\n{label}: one TU at a time, nvcc --threads 1")
    print(f"  {'TU':28} {'wall s':>8} {'CPU s':>8} {'RSS MB':>8} {'CPU / baseline':>15}")
    for name, (wall, cpu, rss) in costs.items():
        print(f"  {name:28} {wall:8.1f} {cpu:8.1f} {rss:8.0f} {cpu / base_cpu:15.2f}")


def wheel_cost(archs: str, work: Path, max_jobs: int) -> cudakit.Build:
    venv = cudakit.torch_cuda_venv()
    build = cudakit.build_wheel(venv, cudakit.stage_source(work / "src"), work / "dist", archs, max_jobs)
    if build.returncode != 0 or not build.wheel:
        sys.exit(f"cuda_build: the wheel build for {archs} failed; log: {work / 'dist' / 'build.log'}")
    return build


def print_wheel(label: str, b: cudakit.Build, upstream: dict | None) -> None:
    size_mb = b.wheel.stat().st_size / 1e6
    print(f"\n{label}: whole wheel ({b.wheel.name})")
    rows = [
        ("wall s", b.wall_s, "wall_s"),
        ("CPU s", b.cpu_s, "cpu_s"),
        ("peak RSS MB", b.peak_rss_mb, "peak_rss_mb"),
        ("wheel MB", size_mb, "wheel_mb"),
    ]
    print(f"  {'':12} {'ours':>9} {'upstream*':>10} {'ours/upstream':>14}")
    for name, ours, key in rows:
        if upstream and key in upstream:
            print(f"  {name:12} {ours:9.1f} {upstream[key]:10.1f} {ours / upstream[key]:14.2f}")
        else:
            print(f"  {name:12} {ours:9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="also build for the 9 archs of CUDA 13 (long)")
    ap.add_argument("--no-wheel", action="store_true", help="only the kernel TUs (no setup.py build)")
    ap.add_argument("--max-jobs", type=int, default=1, help="MAX_JOBS for the wheel build (default 1; upstream's: 2)")
    ap.add_argument("--work", type=Path, help="keep the build here (default: a temporary folder)")
    args = ap.parse_args()
    if not cudakit.NVCC.is_file():
        sys.exit(f"cuda_build: no CUDA 13.0 toolkit at {cudakit.NVCC}; install it or run on the build host")

    with tempfile.TemporaryDirectory(prefix="mamba-cuda-build-") as tmp:
        work = args.work or Path(tmp)
        print_tus("sm_80", tu_costs([80], work / "tu80"))
        full = [int(a.replace(".", "")) for a in cudakit.CUDA13_ARCHS.split(";")]
        if args.full:
            print_tus("CUDA 13 archs", tu_costs(full, work / "tufull"))
        if not args.no_wheel:
            print_wheel("sm_80", wheel_cost("8.0", work / "sm80", args.max_jobs), UPSTREAM_SM80)
            if args.full:
                b = wheel_cost(cudakit.CUDA13_ARCHS, work / "full", args.max_jobs)
                print_wheel("CUDA 13 archs (sm_" + ",".join(map(str, full)) + ")", b, {"cpu_s": UPSTREAM_CUDA13_CPU_S})
    print(
        "\n* upstream figures are constants (measured once, not in this run); CPU s = user+sys of the"
        "\n  whole process tree, peak RSS = the largest single process. Wall time depends on machine load."
    )


if __name__ == "__main__":
    main()
