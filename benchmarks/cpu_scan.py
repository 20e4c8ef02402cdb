"""CPU selective scan: the compiled op vs the pure-PyTorch reference, same run.

    .venv/bin/python benchmarks/cpu_scan.py [--batch 2 --dim 256 --seqlen 1024 --dstate 16]

Prints the speedup of the op over selective_scan_ref (forward, and forward +
backward), and two yardsticks for how close the op is to the machine:
  * exp throughput: torch.exp on a large fp32 tensor (ATen's vectorised exp, all
    threads) gives the rate at which this machine computes exponentials; the scan
    needs one exp per (t, n), so "op (t, n)/s / torch.exp elements/s" is the
    fraction of the exp-bound rate reached;
  * flops: ~20 flops per (t, n) in the forward (exp polynomial ~12, recurrence and
    output 4, conversion 4) against the FMA peak 2 units x 8 lanes x 2 flops x
    GHz x cores (AVX2), with GHz from /proc/cpuinfo.
"""

from __future__ import annotations

import argparse
import os
import re
import time

import torch

from mamba_ssm.ops.selective_scan_interface import HAS_EXTENSION, selective_scan_fn, selective_scan_ref


def best_of(fn, reps: int, min_time: float = 0.0, warmup: bool = True) -> float:
    if warmup:
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cpu_ghz() -> float | None:
    try:
        text = open("/proc/cpuinfo").read()
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
    ap.add_argument("--ref-reps", type=int, default=2)
    args = ap.parse_args()
    if not HAS_EXTENSION:
        raise SystemExit("mamba_ssm._C is not built: pip install --no-build-isolation -e . first")

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
    kw = dict(D=D, z=z, delta_bias=bias, delta_softplus=True)
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

    big = torch.randn(1 << 24)
    out = torch.empty_like(big)
    t_exp = best_of(lambda: torch.exp(big, out=out), 5)
    exp_rate = big.numel() / t_exp
    tn = b * d * L * n
    op_rate = tn / t_op

    print(f"shape batch={b} dim={d} seqlen={L} dstate={n} fp32, B/C (batch, N, L), D, z, delta_bias, softplus; "
          f"{threads} threads, max |op - ref| = {err:.2e}")
    print(f"forward            ref {t_ref * 1e3:9.2f} ms   op {t_op * 1e3:8.3f} ms   speedup {t_ref / t_op:7.1f}x")
    print(f"forward + backward ref {t_ref_fb * 1e3:9.2f} ms   op {t_op_fb * 1e3:8.3f} ms   speedup {t_ref_fb / t_op_fb:7.1f}x")
    print(f"op forward: {op_rate / 1e9:.2f} G(t,n)/s = {t_op * 1e9 * threads / tn:.2f} ns per (t,n) per thread")
    print(f"exp yardstick: torch.exp {exp_rate / 1e9:.2f} G elem/s -> op reaches {op_rate / exp_rate:.0%} of the "
          f"exp-bound rate (the scan also does the recurrence, B/C and output per (t,n))")
    ghz = cpu_ghz()
    if ghz:
        peak = 2 * 8 * 2 * ghz * 1e9 * (os.cpu_count() or 1)
        print(f"flops yardstick: ~{20 * op_rate / 1e9:.1f} GFLOP/s of a {peak / 1e9:.0f} GFLOP/s AVX2 FMA peak "
              f"({ghz:.2f} GHz x {os.cpu_count()} cores): {20 * op_rate / peak:.0%}")


if __name__ == "__main__":
    main()
