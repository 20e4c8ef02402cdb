"""The selective scan on a real GPU: numerics, and speed beside upstream's kernel.

    python benchmarks/gpu_check.py --device cuda --upstream --out $OUT   # on the GPU machine (scripts/gpu-check.sh)
    python benchmarks/gpu_check.py --device cpu --quick                  # the same code on the CPU, tiny shapes (CI)

Numerics: every case runs our selective_scan_fn on --device and on the CPU, in the
case's dtype, and selective_scan_ref in float64 on the CPU, all on the same inputs
(rounded once to the dtypes the op takes); the forward output, the last state and every
gradient are compared. A tensor passes when every element is within upstream's
tolerance for its dtype (its tests/ops/test_selective_scan.py: |got - ref| <= atol +
rtol |ref|); for a gradient atol is scaled by the reference's largest magnitude (at least
1), since gradients sum over batch and length. Cases come in classes (seqlen, chunk
edges, B/C layouts, options, last state, strides, dstate) for every dtype; the table
gives each class's max abs and rel (to the reference's max) error.

Speed: Mamba-1 shapes (batch 8, dim 1536/2048, dstate 16, seqlen 512/2048/8192, fp16
and bf16; variable B/C, z, D, delta_bias, softplus, as Mamba calls it), forward and
forward+backward, median of --reps after warm-up (CUDA events on the GPU,
perf_counter on the CPU); with --upstream also upstream's selective_scan_cuda.fwd/bwd,
called as upstream's selective_scan_interface calls them, on the same inputs, with the
speed ratio (upstream's time / ours: >= 1 means ours is at least as fast) and our
output and gradients against upstream's.

Writes results.json and results.md to --out (and nvidia-smi.txt on CUDA). Exit 0 when
every case is within tolerance, 1 otherwise or when the check cannot run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from mamba_ssm.ops import selective_scan_interface as ssi

# upstream's tests/ops/test_selective_scan.py: (rtol, atol) by input dtype
TOLERANCES = {"fp32": (6e-4, 2e-3), "fp16": (3e-3, 5e-3), "bf16": (3e-2, 5e-2)}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CHUNK = 2048  # MAMBA_SCAN_CHUNK (csrc/selective_scan.h): one state checkpoint per chunk
NARROW = 512  # seqlen <= warp * items: the CUDA kernels' one-warp-per-channel mode
ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
WARMUP = 3

scan_op = ssi.selective_scan_fn  # the op under test; tests put a broken one here to see the check fail


class CheckError(Exception):
    """The check cannot run here: one line with the cause and the fix."""


# ---- numerics cases ------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    cls: str
    dtype: str
    seqlen: int
    layout_B: str = "variable"  # constant | variable | groupsG ((batch, G, dstate, seqlen))
    layout_C: str = "variable"
    z: bool = True
    D: bool = True
    bias: bool = True
    softplus: bool = True
    last_state: bool = True
    strides: str = "contiguous"  # contiguous | transposed | strided | offset
    batch: int = 2
    dim: int = 8
    dstate: int = 16

    @property
    def name(self) -> str:
        opts = "+".join(k for k in ("z", "D", "bias", "softplus") if getattr(self, k)) or "bare"
        bc = self.layout_B if self.layout_B == self.layout_C else f"B-{self.layout_B},C-{self.layout_C}"
        parts = [self.cls, self.dtype, f"L{self.seqlen}", bc, opts]
        parts += ["last"] if self.last_state else []
        parts += [self.strides] if self.strides != "contiguous" else []
        parts += [f"N{self.dstate}"] if self.dstate != 16 else []
        return "/".join(parts)


# seqlens per class (for dstate: the state sizes, at one seqlen)
SEQLENS_QUICK = {
    "seqlen": [1, 2, 17, 33, 64],
    "chunk-edge": [CHUNK + 1],
    "bc-layout": [37],
    "options": [40],
    "last-state": [1, 40],
    "strides": [37],
    "dstate": [1, 5],
}
# fmt: off
SEQLENS_FULL = {
    # 16-item tiles, the narrow/wide switch at NARROW, odd lengths
    "seqlen": [1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 127, 128, 255, 256, 257, 511, NARROW, NARROW + 1,
               1000, 1023, 1024, 1025],
    "chunk-edge": [CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 1, 2 * CHUNK, 2 * CHUNK + 1, 3 * CHUNK, 4 * CHUNK - 1,
                   4 * CHUNK],
    "bc-layout": [300, CHUNK + 52], "options": [100, 600], "last-state": [1, NARROW + 1, CHUNK + 1],
    "strides": [129, CHUNK + 2], "dstate": [1, 4, 8, 32, 64, 256],
}
# fmt: on


def numerics_cases(quick: bool) -> list[Case]:
    """Each class varies one thing around the full Mamba call (variable B/C, z, D, delta_bias, softplus)."""
    L = SEQLENS_QUICK if quick else SEQLENS_FULL
    mid = 37 if quick else 300
    layouts = [
        ("constant", "constant"),
        ("variable", "variable"),
        ("groups1", "groups1"),
        ("groups2", "groups2"),
        ("groups4", "groups4"),
        ("constant", "variable"),
        ("variable", "constant"),
        ("groups2", "constant"),
    ]
    cases: list[Case] = []
    for dt in DTYPES:
        cases += [Case("seqlen", dt, n) for n in L["seqlen"]]
        cases += [Case("chunk-edge", dt, n) for n in L["chunk-edge"]]
        cases += [Case("bc-layout", dt, n, lb, lc) for lb, lc in layouts for n in L["bc-layout"]]
        cases += [
            Case(
                "options", dt, n, z=bool(m & 1), D=bool(m & 2), bias=bool(m & 4), softplus=bool(m & 8), last_state=False
            )
            for m in range(16)
            for n in L["options"]
        ]
        cases += [Case("last-state", dt, n, last_state=last) for last in (False, True) for n in L["last-state"]]
        cases += [
            Case("strides", dt, n, lay, lay, strides=s)
            for s in ("transposed", "strided", "offset")
            for lay in ("variable", "groups2", "constant")
            for n in L["strides"]
        ]
        cases += [Case("dstate", dt, mid, dstate=n) for n in L["dstate"]]
    return cases


def op_dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    """The dtype selective_scan_fn hands the kernel for this input."""
    return dtype if name in ("u", "delta", "z") or (name in ("B", "C") and t.dim() >= 3) else torch.float32


def make_inputs(case: Case) -> dict[str, torch.Tensor | None]:
    """float64 CPU tensors, already rounded to the dtypes the op sees: every side gets the same numbers.
    Distributions as upstream's test (A in (-0.5, 0], delta in [0, 0.5), delta_bias in [0, 0.5))."""
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    b, d, L, n = case.batch, case.dim, case.seqlen, case.dstate

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    def bc(layout: str) -> torch.Tensor:
        if layout == "constant":
            return randn(d, n)
        if layout == "variable":
            return randn(b, n, L)
        return randn(b, int(layout.removeprefix("groups")), n, L)

    x = {
        "u": randn(b, d, L),
        "delta": 0.5 * rand(b, d, L),
        "A": -0.5 * rand(d, n),
        "B": bc(case.layout_B),
        "C": bc(case.layout_C),
        "D": randn(d) if case.D else None,
        "z": randn(b, d, L) if case.z else None,
        "delta_bias": 0.5 * rand(d) if case.bias else None,
    }
    dt = DTYPES[case.dtype]
    return {k: (v.to(op_dtype(k, v, dt)).double() if v is not None else None) for k, v in x.items()}


def restride(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in another memory layout (what a caller's views hand the op)."""
    if how == "transposed" and t.dim() >= 2:  # the last dim no longer contiguous
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "strided":  # every other element of a twice-as-long buffer
        base = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1])
        base[..., ::2] = t
        return base[..., ::2]
    if how == "offset":  # contiguous, but one element past an aligned start (no 16-byte vector loads)
        flat = t.new_zeros(t.numel() + 1)
        flat[1:] = t.reshape(-1)
        return flat[1:].view(t.shape)
    return t


def run_side(fn, x64: dict, dout64: torch.Tensor, case: Case, device: str, ref: bool) -> dict:
    """Forward, last state and every gradient of fn on one side, as float64 CPU tensors;
    for the op also the dtype/shape promises it breaks ('problems')."""
    dt = DTYPES[case.dtype]
    names = [k for k in ARGS if x64[k] is not None]
    leaves = {}
    for k in names:
        t = x64[k].to(device=device, dtype=torch.float64 if ref else op_dtype(k, x64[k], dt))
        leaves[k] = (t if ref else restride(t, case.strides)).requires_grad_()
    res = fn(**{k: leaves.get(k) for k in ARGS}, delta_softplus=case.softplus, return_last_state=case.last_state)
    out, last = res if case.last_state else (res, None)
    dout = dout64.to(device=device, dtype=torch.float64 if ref else dt)
    grads = torch.autograd.grad(out, [leaves[k] for k in names], dout if ref else restride(dout, case.strides))
    got = {
        "out": out,
        **({"last_state": last} if last is not None else {}),
        **{f"d{k}": gr for k, gr in zip(names, grads)},
    }
    problems = []
    if not ref:
        if out.dtype != dt or out.shape != dout.shape:
            problems.append(f"out is {out.dtype} {tuple(out.shape)}, expected {dt} {tuple(dout.shape)}")
        if last is not None and (last.dtype != torch.float32 or last.shape != (case.batch, case.dim, case.dstate)):
            problems.append(f"last_state is {last.dtype} {tuple(last.shape)}")
        for k, gr in zip(names, grads):
            if gr.dtype != leaves[k].dtype or gr.shape != leaves[k].shape:
                problems.append(
                    f"d{k} is {gr.dtype} {tuple(gr.shape)}, its input {leaves[k].dtype} {tuple(leaves[k].shape)}"
                )
    result = {k: v.detach().to("cpu", torch.float64) for k, v in got.items()}
    result["problems"] = problems
    return result


def _finite(v: float) -> float:
    return v if math.isfinite(v) else float("inf")


def compare(got: torch.Tensor, ref: torch.Tensor, dtype: str, grad: bool) -> dict:
    """max abs error, max error relative to the reference's largest magnitude, and the share of the
    tolerance used (ratio; <= 1 passes) under upstream's rule for dtype."""
    rtol, atol = TOLERANCES[dtype]
    if got.numel() == 0:
        return {"abs": 0.0, "rel": 0.0, "ratio": 0.0}
    diff = (got - ref).abs()
    scale = ref.abs().max().item()
    a = atol * (max(1.0, scale) if grad else 1.0)
    abs_err = _finite(diff.max().item())
    ratio = _finite((diff / (a + rtol * ref.abs())).max().item())
    return {"abs": abs_err, "rel": abs_err / scale if scale > 0 else abs_err, "ratio": ratio}


def check_case(case: Case, device: str) -> dict:
    x64 = make_inputs(case)
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()) + 1)
    dout = torch.randn(case.batch, case.dim, case.seqlen, generator=g, dtype=torch.float64)
    dout64 = dout.to(DTYPES[case.dtype]).double()
    ref = run_side(ssi.selective_scan_ref, x64, dout64, case, "cpu", ref=True)
    cpu = run_side(scan_op, x64, dout64, case, "cpu", ref=False)
    dev = cpu if device == "cpu" else run_side(scan_op, x64, dout64, case, device, ref=False)
    tensors, worst = {}, ("", "", 0.0)
    for k in ref:
        if k == "problems":
            continue
        grad = k not in ("out", "last_state")
        entry = {
            "dev": compare(dev[k], ref[k], case.dtype, grad),
            "cpu": compare(cpu[k], ref[k], case.dtype, grad),
            "dev_vs_cpu_abs": _finite((dev[k] - cpu[k]).abs().max().item()) if dev[k].numel() else 0.0,
        }
        tensors[k] = entry
        for side in ("dev", "cpu"):
            if entry[side]["ratio"] > worst[2]:
                worst = (k, side, entry[side]["ratio"])
    problems = [f"{device}: {p}" for p in dev["problems"]] + (
        [f"cpu: {p}" for p in cpu["problems"]] if device != "cpu" else []
    )
    ok = worst[2] <= 1.0 and not problems
    return {
        "name": case.name,
        **asdict(case),
        "tensors": tensors,
        "pass": ok,
        "problems": problems,
        "worst": {"tensor": worst[0], "side": worst[1], "ratio": worst[2]},
    }


def check_case_safely(case: Case, device: str) -> dict:
    """check_case; an exception (a CUDA error, say) fails the case instead of ending the run."""
    try:
        return check_case(case, device)
    except Exception as e:  # noqa: BLE001 - reported as the case's failure
        return {
            "name": case.name,
            **asdict(case),
            "tensors": {},
            "pass": False,
            "problems": [f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"],
            "worst": {"tensor": "-", "side": device, "ratio": float("inf")},
        }


def summarise(results: list[dict]) -> dict[str, dict]:
    """Per class and dtype: cases, failures, max abs/rel of forward (out, last state) and gradients on the
    device side, and the largest share of the tolerance used on either side."""
    classes: dict[str, dict] = {}
    for r in results:
        s = classes.setdefault(
            f"{r['cls']}/{r['dtype']}",
            {
                "class": r["cls"],
                "dtype": r["dtype"],
                "cases": 0,
                "failed": 0,
                "fwd_abs": 0.0,
                "fwd_rel": 0.0,
                "grad_abs": 0.0,
                "grad_rel": 0.0,
                "grad_worst": "",
                "cpu_ratio": 0.0,
                "ratio": 0.0,
                "worst_case": "",
            },
        )
        s["cases"] += 1
        s["failed"] += not r["pass"]
        for k, e in r["tensors"].items():
            kind = "fwd" if k in ("out", "last_state") else "grad"
            s[f"{kind}_abs"] = max(s[f"{kind}_abs"], e["dev"]["abs"])
            if e["dev"]["rel"] > s[f"{kind}_rel"]:
                s[f"{kind}_rel"] = e["dev"]["rel"]
                if kind == "grad":
                    s["grad_worst"] = k
            s["cpu_ratio"] = max(s["cpu_ratio"], e["cpu"]["ratio"])
        if r["worst"]["ratio"] >= s["ratio"]:
            s["ratio"], s["worst_case"] = r["worst"]["ratio"], f"{r['name']}: {r['worst']['tensor']}"
    for s in classes.values():
        s["pass"] = s["failed"] == 0
    return classes


# ---- speed ---------------------------------------------------------------------------


class UpstreamScanFn(torch.autograd.Function):
    """Upstream's SelectiveScanFn (mamba_ssm 2.3.2.post1, ops/selective_scan_interface.py) over its
    selective_scan_cuda, which takes grouped B/C only, keeps x as (batch, dim, chunks, 2 dstate)
    and returns dB/dC in B's/C's dtype."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, delta_softplus, ext):
        u, delta, B, C = (t if t.stride(-1) == 1 else t.contiguous() for t in (u, delta, B, C))
        z = z if z is None or z.stride(-1) == 1 else z.contiguous()
        D = D.contiguous() if D is not None else None
        ctx.squeeze_B, ctx.squeeze_C = B.dim() == 3, C.dim() == 3
        B = B.unsqueeze(1) if B.dim() == 3 else B
        C = C.unsqueeze(1) if C.dim() == 3 else C
        out, x, *rest = ext.fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
        ctx.delta_softplus, ctx.has_z, ctx.ext = delta_softplus, z is not None, ext
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out if z is not None else None)
        return rest[0] if z is not None else out

    @staticmethod
    def backward(ctx, dout):
        u, delta, A, B, C, D, z, delta_bias, x, out = ctx.saved_tensors
        dout = dout if dout.stride(-1) == 1 else dout.contiguous()
        du, ddelta, dA, dB, dC, dD, ddelta_bias, *rest = ctx.ext.bwd(
            u, delta, A, B, C, D, z, delta_bias, dout, x, out, None, ctx.delta_softplus, False
        )
        dB = dB.squeeze(1) if ctx.squeeze_B else dB
        dC = dC.squeeze(1) if ctx.squeeze_C else dC
        return (
            du,
            ddelta,
            dA,
            dB,
            dC,
            dD if D is not None else None,
            rest[0] if ctx.has_z else None,
            ddelta_bias if delta_bias is not None else None,
            None,
            None,
        )


def speed_shapes(quick: bool) -> list[dict]:
    batch, dims, seqlens = (1, (32, 64), (64, 256)) if quick else (8, (1536, 2048), (512, 2048, 8192))
    return [
        {"batch": batch, "dim": d, "dstate": 16, "seqlen": L, "dtype": dt}
        for dt in ("fp16", "bf16")
        for d in dims
        for L in seqlens
    ]


def speed_inputs(shape: dict, device: str) -> tuple[list, torch.Tensor]:
    """Mamba-1's call: A = -(1..N) per channel (S4D-real init), dt bias from dt in [1e-3, 0.1], softplus."""
    b, d, L, n, dt = shape["batch"], shape["dim"], shape["seqlen"], shape["dstate"], DTYPES[shape["dtype"]]
    g = torch.Generator(device=device).manual_seed(L * 7 + d)

    def randn(*s, dtype=dt):
        return torch.randn(*s, generator=g, device=device, dtype=dtype)

    lo, hi = math.log(1e-3), math.log(0.1)
    dt0 = torch.exp(torch.rand(d, generator=g, device=device) * (hi - lo) + lo)
    inputs = [
        randn(b, d, L),
        randn(b, d, L) * 0.5,
        -torch.arange(1, n + 1, device=device, dtype=torch.float32).repeat(d, 1),
        randn(b, n, L),
        randn(b, n, L),
        torch.ones(d, device=device),
        randn(b, d, L),
        dt0 + torch.log(-torch.expm1(-dt0)),
    ]
    return [t.requires_grad_() for t in inputs], randn(b, d, L)


def timed(fn, reps: int, device: str) -> list[float]:
    """Milliseconds of fn, reps times after WARMUP runs: CUDA events on the GPU, perf_counter on the CPU."""
    for _ in range(WARMUP):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def measure(impl, inputs: list, dout: torch.Tensor, reps: int, device: str) -> dict:
    def fwd():
        with torch.no_grad():
            impl(*inputs)

    def fwd_bwd():
        torch.autograd.grad(impl(*inputs), inputs, dout)

    f, fb = timed(fwd, reps, device), timed(fwd_bwd, reps, device)
    return {"fwd_ms": statistics.median(f), "fwd_bwd_ms": statistics.median(fb), "fwd_all": f, "fwd_bwd_all": fb}


def speed(args, device: str, upstream) -> list[dict]:
    def ours(u, delta, A, B, C, D, z, bias):
        return ssi.selective_scan_fn(u, delta, A, B, C, D, z, bias, delta_softplus=True)

    def theirs(u, delta, A, B, C, D, z, bias):
        return UpstreamScanFn.apply(u, delta, A, B, C, D, z, bias, True, upstream)

    if device == "cuda":  # clocks up before the first timing: a second of bf16 matrix products
        a, t = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16), time.monotonic()
        while time.monotonic() - t < 1.0:
            a @ a
            torch.cuda.synchronize()
        del a
    rows = []
    for shape in speed_shapes(args.quick):
        row = dict(shape)
        try:
            inputs, dout = speed_inputs(shape, device)
            row["ours"] = measure(ours, inputs, dout, args.reps, device)
            if upstream is not None:
                row["upstream"] = measure(theirs, inputs, dout, args.reps, device)
                row["ratio_fwd"] = row["upstream"]["fwd_ms"] / row["ours"]["fwd_ms"]
                row["ratio_fwd_bwd"] = row["upstream"]["fwd_bwd_ms"] / row["ours"]["fwd_bwd_ms"]
                row["vs_upstream"] = agreement(ours, theirs, inputs, dout, shape["dtype"])
        except Exception as e:  # noqa: BLE001 - the row says so and the check fails
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"speed {shape}: error: {row['error']}", flush=True)
            rows.append(row)
            continue
        rows.append(row)
        line = (
            f"speed {shape['dtype']} B{shape['batch']} D{shape['dim']} L{shape['seqlen']}: ours fwd "
            f"{row['ours']['fwd_ms']:.3f} ms, fwd+bwd {row['ours']['fwd_bwd_ms']:.3f} ms"
        )
        if upstream is not None:
            line += (
                f"; upstream {row['upstream']['fwd_ms']:.3f} / {row['upstream']['fwd_bwd_ms']:.3f} ms; ratio "
                f"{row['ratio_fwd']:.2f} / {row['ratio_fwd_bwd']:.2f}; agree: {row['vs_upstream']['pass']}"
            )
        print(line, flush=True)
        del inputs, dout
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def agreement(ours, theirs, inputs: list, dout: torch.Tensor, dtype: str) -> dict:
    """Our output and gradients against upstream's on the timing inputs (upstream's as the reference)."""
    names = ["out"] + [f"d{k}" for k in ARGS]
    a = ours(*inputs)
    b = theirs(*inputs)
    got = [a, *torch.autograd.grad(a, inputs, dout)]
    want = [b, *torch.autograd.grad(b, inputs, dout)]
    tensors = {n: compare(x.double(), y.double(), dtype, grad=n != "out") for n, x, y in zip(names, got, want)}
    return {"tensors": tensors, "pass": all(t["ratio"] <= 1.0 for t in tensors.values())}


def load_upstream(args, device: str) -> tuple[object | None, str]:
    """(selective_scan_cuda or None, a line saying what happened)."""
    if not args.upstream:
        return None, "not asked for (--upstream)"
    if args.upstream_wait:
        flag, deadline = Path(args.upstream_wait), time.monotonic() + args.upstream_wait_s
        if not flag.exists():
            print(f"upstream: waiting for its build to finish ({flag})", flush=True)
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(2)
        if not flag.exists():
            return None, f"skipped: upstream's build did not finish within {args.upstream_wait_s} s"
        rc = flag.read_text().strip()
        if rc != "0":
            return None, f"skipped: upstream's build failed (exit {rc}; see upstream-build.log)"
    try:
        ext = importlib.import_module("selective_scan_cuda")
    except ImportError as e:
        return None, f"skipped: upstream's selective_scan_cuda is not importable ({type(e).__name__}: {e})"
    if device != "cuda":
        return None, f"skipped: upstream's selective_scan_cuda ({ext.__file__}) runs on CUDA only"
    return ext, f"selective_scan_cuda from {ext.__file__}"


# ---- environment and report ------------------------------------------------------------


def environment(device: str, out: Path) -> dict:
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "mamba_ssm": ssi.__file__,
        "mamba_ssm_version": None,
        "extension": None,
        "kernels": {},
    }
    try:
        env["mamba_ssm_version"] = importlib.metadata.version("mamba_ssm")
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("mamba_ssm._C")
    env["extension"] = spec.origin if spec else None
    if ssi.HAS_EXTENSION:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        env["kernels"] = {
            op: {k: has(f"mamba_ssm::{op}", k) for k in ("CPU", "CUDA")}
            for op in ("selective_scan_fwd", "selective_scan_bwd")
        }
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": p.name,
            "capability": f"{p.major}.{p.minor}",
            "sms": p.multi_processor_count,
            "memory_gib": round(p.total_memory / 2**30, 1),
        }
        env["nvidia_smi"] = nvidia_smi(out / "nvidia-smi.txt")
    nvcc = shutil.which("nvcc")
    if nvcc:
        v = subprocess.run([nvcc, "--version"], check=False, capture_output=True, text=True).stdout
        env["nvcc"] = (re.findall(r"release ([\d.]+)", v) or [v.strip()])[0]
    return env


def nvidia_smi(path: Path, append: bool = False) -> str | None:
    """nvidia-smi's full report and a one-line query of the clocks, saved to path; returns the query."""
    if not shutil.which("nvidia-smi"):
        return None
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"
    query = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"], check=False, capture_output=True, text=True
    ).stdout
    full = "" if append else subprocess.run(["nvidia-smi"], check=False, capture_output=True, text=True).stdout
    with open(path, "a" if append else "w") as f:
        f.write(full + f"\n# {time.strftime('%H:%M:%S')}\n" + query)
    return query.strip()


def fmt(v: float) -> str:
    return f"{v:.2e}" if v < float("inf") else "inf"


def speed_row(r: dict) -> str:
    def cell(v, spec=".3f"):
        return format(v, spec) if v is not None else "-"

    head = f"| {r['dtype']} | {r['batch']} | {r['dim']} | {r['dstate']} | {r['seqlen']} |"
    if "error" in r:
        return head + f" error: {r['error']} |" + " |" * 6
    ours, up, vs = r["ours"], r.get("upstream"), r.get("vs_upstream")
    agree = f"{'ok' if vs['pass'] else 'DIFFER'} ({max(t['ratio'] for t in vs['tensors'].values()):.3f})" if vs else "-"
    return (
        f"{head} {cell(ours['fwd_ms'])} | {cell(up and up['fwd_ms'])} | {cell(r.get('ratio_fwd'), '.2f')} | "
        f"{cell(ours['fwd_bwd_ms'])} | {cell(up and up['fwd_bwd_ms'])} | {cell(r.get('ratio_fwd_bwd'), '.2f')} | "
        f"{agree} |"
    )


def markdown(res: dict) -> str:
    env = res["environment"]
    head = (
        f"device `{res['device']}`; torch {env['torch']} (CUDA {env['torch_cuda']}); python {env['python']}; "
        f"mamba_ssm {env['mamba_ssm_version']} from `{env['extension']}`"
    )
    lines = ["# gpu_check results", "", head]
    if "gpu" in env:
        g = env["gpu"]
        lines.append(
            f"GPU {g['name']} (sm_{g['capability'].replace('.', '')}, {g['sms']} SMs, {g['memory_gib']} GiB); "
            f"nvcc {env.get('nvcc')}; {env.get('nvidia_smi', '').splitlines()[-1] if env.get('nvidia_smi') else ''}"
        )
    lines += [
        "",
        f"**{'PASS' if res['pass'] else 'FAIL'}**: {res['verdict']}",
        "",
        "## Numerics",
        "",
        "Our op on the device and on the CPU against selective_scan_ref in float64 (same inputs). abs: max "
        "|error|; rel: max |error| / max |reference|; tol use: largest |error| / (atol + rtol |ref|) on either "
        "side, upstream's (rtol, atol): "
        + ", ".join(f"{k} {v}" for k, v in TOLERANCES.items())
        + "; for gradients atol × max(1, max |ref|).",
        "",
        "| class | dtype | cases | failed | fwd abs | fwd rel | grad abs | grad rel (worst) | CPU op tol use | tol use | worst case |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["numerics"]["classes"].values():
        lines.append(
            f"| {s['class']} | {s['dtype']} | {s['cases']} | {s['failed']} | {fmt(s['fwd_abs'])} | "
            f"{fmt(s['fwd_rel'])} | {fmt(s['grad_abs'])} | {fmt(s['grad_rel'])} ({s['grad_worst']}) | "
            f"{s['cpu_ratio']:.3f} | {s['ratio']:.3f} | `{s['worst_case']}` |"
        )
    failed = [c for c in res["numerics"]["cases"] if not c["pass"]]
    if failed:
        lines += ["", "Failed cases:", ""]
        lines += [
            f"- `{c['name']}`: {c['worst']['tensor']} on {c['worst']['side']} uses {c['worst']['ratio']:.2f}x "
            f"the tolerance" + (f"; {'; '.join(c['problems'])}" if c["problems"] else "")
            for c in failed
        ]
    sp = res.get("speed")
    if sp is not None:
        intro = (
            f"Median of {sp['reps']} runs after {sp['warmup']} warm-up runs ({sp['timer']}); upstream: "
            f"{res['upstream']}. ratio = upstream's time / ours (>= 1: ours at least as fast)."
        )
        header = (
            "| dtype | batch | dim | dstate | seqlen | ours fwd ms | upstream fwd ms | ratio fwd | "
            "ours fwd+bwd ms | upstream fwd+bwd ms | ratio fwd+bwd | vs upstream (tol use) |"
        )
        lines += ["", "## Speed", "", intro, "", header, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sp["rows"]:
            lines.append(speed_row(r))
    lines += ["", f"Wall time {res['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or "gpu-check-out"),
        help="folder for results.json and results.md (default: $OUT, else ./gpu-check-out)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny shapes (the CPU dry run)")
    ap.add_argument(
        "--upstream",
        action="store_true",
        help="also time upstream's selective_scan_cuda (skipped, with a line, where it is absent)",
    )
    ap.add_argument(
        "--upstream-wait",
        metavar="FILE",
        help="before importing upstream's module, wait until FILE exists; it holds its build's exit code",
    )
    ap.add_argument("--upstream-wait-s", type=float, default=420.0, help="how long to wait for it (default 420)")
    ap.add_argument("--reps", type=int, default=None, help="timed runs per median (default 30; 3 with --quick)")
    ap.add_argument("--only", metavar="REGEX", help="numerics cases whose name matches (e.g. 'chunk-edge/bf16')")
    ap.add_argument("--no-speed", action="store_true", help="numerics only")
    args = ap.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.quick else 30
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    return args


def preflight(device: str) -> None:
    if not ssi.HAS_EXTENSION:
        raise CheckError(
            f"mamba_ssm._C does not load ({ssi._IMPORT_ERROR}), so selective_scan_fn would be the "
            "reference itself; install the wheel (scripts/gpu-check.sh) or build it (pip install -e .)"
        )
    if device == "cuda":
        if not torch.cuda.is_available():
            raise CheckError(f"torch {torch.__version__} sees no CUDA device; run with --device cpu for the dry run")
        if not torch._C._dispatch_has_kernel_for_dispatch_key("mamba_ssm::selective_scan_fwd", "CUDA"):
            raise CheckError(
                f"{importlib.util.find_spec('mamba_ssm._C').origin} has no CUDA kernels (a CPU-only "
                "build); install the cu13 wheel"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    device = args.device
    try:
        preflight(device)
    except CheckError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 1
    env = environment(device, args.out)
    print(
        f"gpu_check: device {device}, torch {env['torch']}, mamba_ssm {env['mamba_ssm_version']} "
        f"({env['extension']}), kernels {env['kernels']}",
        flush=True,
    )
    if "gpu" in env:
        print(f"gpu_check: {env['gpu']}; {env.get('nvidia_smi')}", flush=True)

    cases = numerics_cases(args.quick)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    results = []
    for cls in dict.fromkeys(c.cls for c in cases):
        tc = time.monotonic()
        rs = [check_case_safely(c, device) for c in cases if c.cls == cls]
        results += rs
        for r in rs:
            if not r["pass"]:
                print(
                    f"FAIL numerics {r['name']}: {r['worst']['tensor']} on {r['worst']['side']} uses "
                    f"{r['worst']['ratio']:.2f}x the tolerance {' '.join(r['problems'])}",
                    flush=True,
                )
        print(
            f"numerics {cls}: {len(rs)} cases, {sum(not r['pass'] for r in rs)} failed, worst tolerance use "
            f"{max((r['worst']['ratio'] for r in rs), default=0):.3f} ({time.monotonic() - tc:.1f} s)",
            flush=True,
        )
    failures = [r["name"] for r in results if not r["pass"]]
    res = {
        "device": device,
        "args": {k: str(v) for k, v in vars(args).items()},
        "environment": env,
        "tolerances": TOLERANCES,
        "upstream": "pending",
        "numerics": {"classes": summarise(results), "cases": results, "failed": failures},
    }
    write_report(res, failures, t0, args.out, final=False)  # the numerics survive a later crash or kill

    upstream, res["upstream"] = load_upstream(args, device)
    print(f"upstream: {res['upstream']}", flush=True)
    if not args.no_speed:
        rows = speed(args, device, upstream)
        timer = "CUDA events" if device == "cuda" else "perf_counter"
        res["speed"] = {"reps": args.reps, "warmup": WARMUP, "timer": timer, "rows": rows}
        for r in rows:
            where = f"{r['dtype']}/B{r['batch']}/D{r['dim']}/L{r['seqlen']}"
            if "error" in r:
                failures.append(f"speed/{where}: {r['error']}")
            elif "vs_upstream" in r and not r["vs_upstream"]["pass"]:
                failures.append(f"vs-upstream/{where}")
        if device == "cuda":
            env["nvidia_smi_after"] = nvidia_smi(args.out / "nvidia-smi.txt", append=True)
    write_report(res, failures, t0, args.out, final=True)
    print(
        f"gpu_check: {'PASS' if res['pass'] else 'FAIL'}: {res['verdict']} ({res['wall_s']:.0f} s; "
        f"{args.out / 'results.md'})",
        flush=True,
    )
    return 0 if res["pass"] else 1


def write_report(res: dict, failures: list[str], t0: float, out: Path, final: bool) -> None:
    res["pass"] = not failures
    n = len(res["numerics"]["cases"])
    res["verdict"] = (
        f"{n} numerics cases within tolerance" + ("" if final else " (speed not measured yet)")
        if not failures
        else f"{len(failures)} failed: {', '.join(failures[:20])}" + (" ..." if len(failures) > 20 else "")
    )
    res["wall_s"] = time.monotonic() - t0
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(res))


if __name__ == "__main__":
    sys.exit(main())
