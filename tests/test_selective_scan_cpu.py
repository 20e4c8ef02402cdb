"""The CPU ops against selective_scan_ref in float64: forward, last state and gradients."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from mamba_ssm.ops import selective_scan_interface as ssi
from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

pytestmark = pytest.mark.skipif(not ssi.HAS_EXTENSION, reason="mamba_ssm._C not built (pip install -e .)")

BATCH, DIM, GROUPS = 2, 6, 3

# (rtol, atol) per dtype for outputs and for gradients (relative to each gradient's scale)
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2), torch.bfloat16: (8e-2, 8e-2)}
GRAD_TOL = {torch.float32: 2e-4, torch.float16: 3e-2, torch.bfloat16: 1e-1}


def make_inputs(layout: str, dtype, seqlen: int, dstate: int, *, has_D, has_z, has_bias, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.float64)

    def bc():
        if layout == "constant":
            return rnd(DIM, dstate)
        if layout == "variable":
            return rnd(BATCH, dstate, seqlen)
        return rnd(BATCH, GROUPS, dstate, seqlen)

    inputs = {
        "u": rnd(BATCH, DIM, seqlen),
        "delta": torch.rand(BATCH, DIM, seqlen, generator=g, dtype=torch.float64) * 0.5,
        "A": -torch.rand(DIM, dstate, generator=g, dtype=torch.float64) * 2 - 0.1,
        "B": bc(),
        "C": bc(),
        "D": rnd(DIM) if has_D else None,
        "z": rnd(BATCH, DIM, seqlen) if has_z else None,
        # positive, so delta stays positive without softplus (a growing state would overflow fp16)
        "delta_bias": torch.rand(DIM, generator=g, dtype=torch.float64) * 0.3 if has_bias else None,
    }
    # Round the inputs that the op sees in the low-precision dtype, so both sides get the same numbers.
    for k in ("u", "delta", "z") + (("B", "C") if layout != "constant" else ()):
        if inputs[k] is not None:
            inputs[k] = inputs[k].to(dtype).to(torch.float64)
    return inputs


def run_both(inputs, dtype, layout, softplus, last_state):
    names = [k for k, v in inputs.items() if v is not None]
    ref_leaves = {k: inputs[k].clone().requires_grad_() for k in names}
    op_leaves = {}
    for k in names:
        keep_f32 = k in ("A", "D", "delta_bias") or (k in ("B", "C") and layout == "constant")
        op_leaves[k] = inputs[k].to(torch.float32 if keep_f32 else dtype).requires_grad_()
    args = {"delta_softplus": softplus, "return_last_state": last_state}
    ref = selective_scan_ref(**{k: ref_leaves.get(k) for k in inputs}, **args)
    op = selective_scan_fn(**{k: op_leaves.get(k) for k in inputs}, **args)
    return names, ref_leaves, op_leaves, ref, op


def assert_close(actual, expected, rtol, atol, what):
    actual = actual.detach().to(torch.float64)
    expected = expected.detach()
    scale = expected.abs().max().clamp_min(1e-6)
    err = (actual - expected).abs().max()
    assert err <= atol * scale + rtol * expected.abs().max(), f"{what}: max error {err:.3e} (scale {scale:.3e})"


CASES = [
    # layout, has_D, has_z, has_bias, softplus, last_state
    *[(layout, True, True, True, True, True) for layout in ("constant", "variable", "grouped")],
    *[(layout, False, False, False, False, False) for layout in ("constant", "variable", "grouped")],
    ("variable", True, False, True, False, True),
    ("grouped", False, True, False, True, False),
    ("constant", False, True, True, False, True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("layout,has_D,has_z,has_bias,softplus,last_state", CASES)
def test_forward_and_backward_match_reference(dtype, layout, has_D, has_z, has_bias, softplus, last_state):
    inputs = make_inputs(layout, dtype, seqlen=33, dstate=5, has_D=has_D, has_z=has_z, has_bias=has_bias)
    names, ref_leaves, op_leaves, ref, op = run_both(inputs, dtype, layout, softplus, last_state)
    rtol, atol = TOL[dtype]
    if last_state:
        (ref, ref_last), (op, op_last) = ref, op
        assert op_last.shape == ref_last.shape == (BATCH, DIM, 5)
        assert op_last.dtype == torch.float32
        assert_close(op_last, ref_last, rtol, atol, "last state")
    assert op.dtype == dtype and op.shape == ref.shape
    assert_close(op, ref, rtol, atol, "output")

    dout = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    ref_grads = torch.autograd.grad(ref, [ref_leaves[k] for k in names], dout.to(torch.float64))
    op_grads = torch.autograd.grad(op, [op_leaves[k] for k in names], dout)
    for k, got, want in zip(names, op_grads, ref_grads):
        assert got.dtype == op_leaves[k].dtype and got.shape == op_leaves[k].shape, k
        assert_close(got, want, GRAD_TOL[dtype], GRAD_TOL[dtype], f"d{k}")


@pytest.mark.parametrize("dstate", [1, 4, 8, 16, 20, 40])
def test_state_sizes_around_tile_widths(dstate):
    """dstate that fills, underfills and spans the 4/8/16-lane tiles."""
    inputs = make_inputs("grouped", torch.float32, seqlen=19, dstate=dstate, has_D=True, has_z=True, has_bias=True)
    names, ref_leaves, op_leaves, ref, op = run_both(inputs, torch.float32, "grouped", True, True)
    assert_close(op[0], ref[0], 1e-4, 1e-4, "output")
    assert_close(op[1], ref[1], 1e-4, 1e-4, "last state")
    grads = torch.autograd.grad(op[0].sum(), [op_leaves[k] for k in names])
    ref_grads = torch.autograd.grad(ref[0].sum(), [ref_leaves[k] for k in names])
    for k, got, want in zip(names, grads, ref_grads):
        assert_close(got, want, 2e-4, 2e-4, f"d{k}")


def test_sequence_longer_than_one_chunk():
    """seqlen > MAMBA_SCAN_CHUNK (2048): the state crosses chunks forward and the adjoint backward."""
    g = torch.Generator().manual_seed(3)
    b, d, L, n = 1, 2, 2048 + 77, 4
    u = torch.randn(b, d, L, generator=g, dtype=torch.float64)
    delta = torch.rand(b, d, L, generator=g, dtype=torch.float64) * 0.05
    A = -torch.rand(d, n, generator=g, dtype=torch.float64) * 0.2
    B = torch.randn(b, n, L, generator=g, dtype=torch.float64)
    C = torch.randn(b, n, L, generator=g, dtype=torch.float64)
    leaves64 = [t.clone().requires_grad_() for t in (u, delta, A, B, C)]
    leaves32 = [t.float().requires_grad_() for t in (u, delta, A, B, C)]
    ref, ref_last = selective_scan_ref(*leaves64, return_last_state=True)
    op, op_last = selective_scan_fn(*leaves32, return_last_state=True)
    assert_close(op, ref, 1e-4, 1e-4, "output")
    assert_close(op_last, ref_last, 1e-4, 1e-4, "last state")
    w = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    for k, got, want in zip(["u", "delta", "A", "B", "C"], torch.autograd.grad((op * w.float()).sum(), leaves32),
                            torch.autograd.grad((ref * w).sum(), leaves64)):
        assert_close(got, want, 3e-4, 3e-4, f"d{k}")


def test_non_contiguous_inputs_and_many_threads():
    """Channels split across threads (grouped dB/dC reduced under a lock) and strided inputs."""
    g = torch.Generator().manual_seed(4)
    b, d, L, n, G = 2, 64, 300, 16, 4
    u = torch.randn(b, L, d, generator=g).transpose(1, 2)  # seqlen not contiguous
    delta = torch.rand(b, d, L, generator=g) * 0.3
    A = -torch.rand(d, n, generator=g)
    B = torch.randn(b, G, n, L, generator=g)
    C = torch.randn(b, G, n, L, generator=g)
    leaves = [t.clone().requires_grad_() for t in (u, delta, A, B, C)]
    ref_leaves = [t.double().requires_grad_() for t in (u, delta, A, B, C)]
    out = selective_scan_fn(*leaves, delta_softplus=True)
    ref = selective_scan_ref(*ref_leaves, delta_softplus=True)
    assert_close(out, ref, 1e-4, 1e-4, "output")
    for k, got, want in zip(["u", "delta", "A", "B", "C"], torch.autograd.grad(out.sum(), leaves),
                            torch.autograd.grad(ref.sum(), ref_leaves)):
        assert_close(got, want, 3e-4, 3e-4, f"d{k}")


def test_strided_D_and_delta_bias_are_read_by_their_strides():
    """D[::2] and delta_bias[::2] (views of a longer vector) give the same result as contiguous copies."""
    g = torch.Generator().manual_seed(5)
    b, d, L, n = 2, 6, 40, 4
    u, z = torch.randn(b, d, L, generator=g), torch.randn(b, d, L, generator=g)
    delta = torch.rand(b, d, L, generator=g) * 0.5
    A, B, C = -torch.rand(d, n, generator=g), torch.randn(b, n, L, generator=g), torch.randn(b, n, L, generator=g)
    D2, bias2 = torch.randn(2 * d, generator=g), torch.rand(2 * d, generator=g)
    strided = [D2[::2].requires_grad_(), bias2[::2].requires_grad_()]
    dense = [D2[::2].contiguous().requires_grad_(), bias2[::2].contiguous().requires_grad_()]
    outs = [selective_scan_fn(u, delta, A, B, C, D, z, bias, delta_softplus=True) for D, bias in (strided, dense)]
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    grads = [torch.autograd.grad(o.sum(), leaves) for o, leaves in zip(outs, (strided, dense))]
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_ops_are_registered_with_schemas():
    fwd = torch.ops.mamba_ssm.selective_scan_fwd.default._schema
    bwd = torch.ops.mamba_ssm.selective_scan_bwd.default._schema
    assert [a.name for a in fwd.arguments] == ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "delta_softplus"]
    assert len(fwd.returns) == 3 and len(bwd.returns) == 8


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda a: a.update(u=a["u"].double()), "u must be float32, float16 or bfloat16"),
        (lambda a: a.update(delta=a["delta"][:, :, :-1]), "delta must have u's shape"),
        (lambda a: a.update(A=a["A"][:-1]), "A must be (dim, dstate)"),
        (lambda a: a.update(B=a["B"].half()), "variable B must have u's dtype"),
        (lambda a: a.update(B=torch.randn(BATCH, 4, 5, 10)), "must be a multiple of the number of groups"),
        (lambda a: a.update(C=torch.randn(DIM, 7)), "constant C must have shape (dim, dstate)"),
        (lambda a: a.update(D=torch.randn(DIM + 1)), "D must have shape (dim,)"),
        (lambda a: a.update(z=torch.randn(BATCH, DIM, 9)), "z must match u"),
    ],
)
def test_bad_inputs_get_clear_errors(mutate, message):
    a = {
        "u": torch.randn(BATCH, DIM, 10), "delta": torch.rand(BATCH, DIM, 10), "A": -torch.rand(DIM, 5),
        "B": torch.randn(BATCH, 5, 10), "C": torch.randn(BATCH, 5, 10), "D": torch.randn(DIM), "z": None,
        "delta_bias": None,
    }
    mutate(a)
    with pytest.raises(RuntimeError, match=r"mamba_ssm\.selective_scan_fwd: .*" + __import__("re").escape(message)):
        torch.ops.mamba_ssm.selective_scan_fwd(a["u"], a["delta"], a["A"], a["B"], a["C"], a["D"], a["z"],
                                               a["delta_bias"], False)


def test_fallback_warns_once(monkeypatch):
    monkeypatch.setattr(ssi, "HAS_EXTENSION", False)
    monkeypatch.setattr(ssi, "_warned", False)
    inputs = make_inputs("variable", torch.float32, 8, 4, has_D=True, has_z=False, has_bias=False)
    args = {k: (v.float() if v is not None else None) for k, v in inputs.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = selective_scan_fn(**args)
        selective_scan_fn(**args)
    msgs = [str(w.message) for w in caught if "falls back" in str(w.message)]
    assert len(msgs) == 1 and "mamba_ssm.doctor" in msgs[0]
    torch.testing.assert_close(first, selective_scan_ref(**args))


def test_mamba_block_step_matches_full_sequence():
    from mamba_ssm.modules.mamba_simple import Mamba

    torch.manual_seed(0)
    block = Mamba(d_model=16, d_state=8, d_conv=4, expand=2).eval()
    x = torch.randn(2, 12, 16)
    with torch.no_grad():
        full = block(x)
        conv_state, ssm_state = block.allocate_inference_cache(2)
        steps = [block.step(x[:, t : t + 1], conv_state, ssm_state)[0] for t in range(x.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
    full.sum()  # shape sanity: (batch, L, d_model)
    assert full.shape == x.shape


def test_mamba_block_trains():
    from mamba_ssm.modules.mamba_simple import Mamba

    torch.manual_seed(0)
    block = Mamba(d_model=8, d_state=4)
    x = torch.randn(2, 10, 8)
    block(x).pow(2).mean().backward()
    grads = [p.grad for p in block.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert block.A_log.grad.abs().sum() > 0


del itertools
