"""CPU selective scan: the compiled op vs the pure-PyTorch reference, same run.

    .venv/bin/python benchmarks/cpu_scan.py [--batch 2 --dim 256 --seqlen 1024 --dstate 16]

Prints the speedup of the op over selective_scan_ref (forward, and forward +
backward), in wall time and in process CPU time (steadier on a shared machine), and two yardsticks for how close the op is to the machine:
  * exp throughput: torch.exp on a large fp32 tensor (ATen's vectorised exp) per
    CPU-second is the rate at which this machine computes exponentials; the scan
    needs one exp per (t, n), so "op (t, n) per CPU-second / torch.exp elements per
    CPU-second" is the fraction of that exp-only rate reached;
  * flops: ~20 flops per (t, n) in the forward (exp polynomial ~12, recurrence and
    output 4, conversion 4) against the FMA peak 2 units x 8 lanes x 2 flops x
    GHz of one core (AVX2), with GHz from /proc/cpuinfo.
"""

from __future__ import annotations

import argparse
import os
import re
import time

import torch

from mamba_ssm.ops.selective_scan_interface import HAS_EXTENSION, selective_scan_fn, selective_scan_ref


def best_of(fn, reps: int, min_time: float = 0.0, warmup: bool = True) -> tuple[float, float]:
    """(best wall s, best process CPU s): on a shared machine the CPU time is the steadier figure."""
    if warmup:
        fn()
    walls, cpus = [], []
    start = time.perf_counter()
    while len(walls) < reps or time.perf_counter() - start < min_time:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)


def cpu_ghz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    mhz = [float(m) for m in re.findall(r"cpu MHz\s*:\s*([\d.]+)", text)]
    return max(mhz) / 1000 if mhz else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--dstate", type=int, default=16)
    ap.add_argument("--ref-reps", type=int, default=1, help="runs of the (slow) reference")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    args = ap.parse_args()
    if not HAS_EXTENSION:
        raise SystemExit("mamba_ssm._C is not built: pip install --no-build-isolation -e . first")

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    b, d, L, n = args.batch, args.dim, args.seqlen, args.dstate
    u = torch.randn(b, d, L)
    delta = torch.randn(b, d, L) * 0.5
    A = -torch.rand(d, n) * 4
    B = torch.randn(b, n, L)
    C = torch.randn(b, n, L)
    D = torch.randn(d)
    z = torch.randn(b, d, L)
    bias = torch.randn(d) * 0.1
    kw = {"D": D, "z": z, "delta_bias": bias, "delta_softplus": True}
    threads = torch.get_num_threads()

    with torch.no_grad():
        t_ref = best_of(lambda: selective_scan_ref(u, delta, A, B, C, **kw), args.ref_reps, warmup=False)
        t_op = best_of(lambda: selective_scan_fn(u, delta, A, B, C, **kw), 5, min_time=1.0)
    err = (selective_scan_fn(u, delta, A, B, C, **kw) - selective_scan_ref(u, delta, A, B, C, **kw)).abs().max()

    leaves = [t.clone().requires_grad_() for t in (u, delta, A, B, C, D, z, bias)]
    grad = torch.randn(b, d, L)

    def fwd_bwd(fn):
        out = fn(*leaves[:5], D=leaves[5], z=leaves[6], delta_bias=leaves[7], delta_softplus=True)
        torch.autograd.grad(out, leaves, grad)

    t_ref_fb = best_of(lambda: fwd_bwd(selective_scan_ref), args.ref_reps, warmup=False)
    t_op_fb = best_of(lambda: fwd_bwd(selective_scan_fn), 5, min_time=1.0)

    # cache-resident (256 KiB in, 256 KiB out), so it measures exp, not memory bandwidth
    big = torch.randn(1 << 16)
    out = torch.empty_like(big)

    def exps():
        for _ in range(200):
            torch.exp(big, out=out)

    torch.set_num_threads(1)  # one core's exp rate (a small tensor split across threads measures the pool)
    t_exp = best_of(exps, 5)
    torch.set_num_threads(threads)
    tn = b * d * L * n

    print(f"shape batch={b} dim={d} seqlen={L} dstate={n} fp32, B/C (batch, N, L), D, z, delta_bias, softplus; "
          f"{threads} threads, load average {os.getloadavg()[0]:.1f}, max |op - ref| = {err:.2e}")
    for what, (rw, rc), (ow, oc) in (("forward", t_ref, t_op), ("forward + backward", t_ref_fb, t_op_fb)):
        print(f"{what:19s} wall: ref {rw * 1e3:10.1f} ms  op {ow * 1e3:8.2f} ms  speedup {rw / ow:7.1f}x   "
              f"CPU: ref {rc * 1e3:10.1f} ms  op {oc * 1e3:8.2f} ms  speedup {rc / oc:7.1f}x")
    op_cpu = t_op[1]
    per_tn = op_cpu * 1e9 / tn
    print(f"op forward: {per_tn:.2f} CPU-ns per (t,n) ({tn / op_cpu / 1e9:.2f} G(t,n) per CPU-second)")
    exp_cpu_rate = 200 * big.numel() / t_exp[1]
    print(f"exp yardstick: torch.exp runs {exp_cpu_rate / 1e9:.2f} G elem per CPU-second; the op does one exp per "
          f"(t,n) plus the scan, at {tn / op_cpu / exp_cpu_rate:.0%} of that exp-only rate")
    ghz = cpu_ghz()
    if ghz:
        peak_core = 2 * 8 * 2 * ghz * 1e9
        print(f"flops yardstick: ~20 flops per (t,n) -> {20 * tn / op_cpu / 1e9:.1f} GFLOP per CPU-second, "
              f"{20 * tn / op_cpu / peak_core:.0%} of one core's AVX2 FMA peak ({peak_core / 1e9:.0f} GFLOP/s at {ghz:.2f} GHz)")


if __name__ == "__main__":
    main()
