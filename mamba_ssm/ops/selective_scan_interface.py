"""The selective scan of Mamba-1: ``selective_scan_fn`` (the compiled ops) and
``selective_scan_ref`` (pure PyTorch), with upstream mamba's signature and semantics.

Inputs are real floating-point tensors on u's device; complex weights (upstream's ``wtype=torch.complex64``)
are refused (ScanInputError, a ValueError, naming it), never cast to real.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F


def _load_extension() -> None:
    """Register torch.ops.mamba_ssm.*. A classic build is a Python module; a stable-ABI
    build (_C.abi3.so) is a plain torch library with no PyInit, loaded by path."""
    try:
        from mamba_ssm import _C  # noqa: F401
    except ImportError as e:
        if "module export function" not in str(e):
            raise
        import importlib.util

        torch.ops.load_library(importlib.util.find_spec("mamba_ssm._C").origin)


try:
    _load_extension()

    HAS_EXTENSION = True
    _IMPORT_ERROR: str | None = None
except ImportError as e:  # no compiled extension: fall back to the reference
    HAS_EXTENSION = False
    _IMPORT_ERROR = str(e)

_warned = False


def _warn_fallback() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "mamba_ssm: the compiled extension (mamba_ssm._C) is not available "
            f"({_IMPORT_ERROR}); selective_scan_fn falls back to the slow pure-PyTorch "
            "selective_scan_ref. Run `python -m mamba_ssm.doctor` to see why and how to fix it.",
            RuntimeWarning,
            stacklevel=3,
        )


class ScanInputError(ValueError, RuntimeError):
    """An input selective_scan_fn / selective_scan_ref refuse (the message names it). A ValueError,
    and a RuntimeError as the ops' own checks raise, so code that caught those still does."""


_REAL = frozenset((torch.float32, torch.float16, torch.bfloat16, torch.float64))
_NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _check_inputs(fn: str, *args) -> None:
    """Refuse, naming the argument, what neither the ops nor the reference compute correctly:
    a non-tensor, a complex or non-floating dtype (a cast would change it silently), another
    device than u's, a wrong shape. ``args``: u, delta, A, B, C, D, z, delta_bias. This runs on
    every forward: each tensor's dtype, device and shape are read once, messages built on failure."""
    u = args[0]
    if not isinstance(u, torch.Tensor):
        raise TypeError(f"{fn}: u must be a torch.Tensor, got {type(u).__name__}")
    device = u.device
    shapes = []
    for i, t in enumerate(args):
        if t is None:
            if i < 5:
                raise TypeError(f"{fn}: {_NAMES[i]} is required, got None")
            shapes.append(None)
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {_NAMES[i]} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _REAL:
            _bad_dtype(fn, _NAMES[i], t)
        if t.device != device:
            raise ScanInputError(f"{fn}: {_NAMES[i]} is on {t.device} but u is on {device}; put all inputs on one")
        shapes.append(t.shape)
    su, sdelta, sA, sB, sC, sD, sz, sbias = shapes
    if len(su) != 3:
        raise ScanInputError(f"{fn}: u must be (batch, dim, seqlen), got shape {tuple(su)}")
    batch, dim, L = su
    if L < 1:
        raise ScanInputError(f"{fn}: u has seqlen 0; the scan needs at least one step")
    if sdelta != su:
        raise ScanInputError(f"{fn}: delta must have u's shape {tuple(su)}, got {tuple(sdelta)}")
    if sz is not None and sz != su:
        raise ScanInputError(f"{fn}: z must have u's shape {tuple(su)}, got {tuple(sz)}")
    if len(sA) != 2 or sA[0] != dim or sA[1] < 1:
        raise ScanInputError(f"{fn}: A must be (dim, dstate) with dim = {dim} and dstate >= 1, got {tuple(sA)}")
    dstate = sA[1]
    groups = []
    for name, s in (("B", sB), ("C", sC)):
        n = len(s)
        if n == 2:
            if s != (dim, dstate):
                raise ScanInputError(f"{fn}: constant {name} must be (dim, dstate) = {(dim, dstate)}, got {tuple(s)}")
        elif n == 3 or n == 4:
            g = s[1] if n == 4 else 1
            if s[0] != batch or s[-2] != dstate or s[-1] != L or g < 1 or dim % g:
                want = (f"({batch}, {dstate}, {L})" if n == 3
                        else f"({batch}, groups, {dstate}, {L}) with groups dividing dim = {dim}")
                raise ScanInputError(f"{fn}: variable {name} must be {want}, got {tuple(s)}")
            groups.append(g)
        else:
            raise ScanInputError(
                f"{fn}: {name} must be (dim, dstate), (batch, dstate, seqlen) or (batch, groups, dstate, seqlen), "
                f"got {tuple(s)}"
            )
    if len(groups) == 2 and groups[0] != groups[1]:
        raise ScanInputError(f"{fn}: B and C must have the same number of groups, got {groups[0]} and {groups[1]}")
    for name, s in (("D", sD), ("delta_bias", sbias)):
        if s is not None and s != (dim,):
            raise ScanInputError(f"{fn}: {name} must be (dim,) = ({dim},), got {tuple(s)}")


def _bad_dtype(fn: str, name: str, t: torch.Tensor):
    if t.is_complex():
        raise ScanInputError(
            f"{fn}: {name} is {t.dtype}: complex {name} is not supported yet (and is not cast to real); "
            f"pass a real {name}: float32, float16, bfloat16 or float64"
        )
    raise ScanInputError(
        f"{fn}: {name} must be a real floating-point tensor (float32, float16, bfloat16 or float64), got {t.dtype}"
    )


def _groups_to_channels(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(batch, groups, N, L) -> (batch, dim, N, L): channel d uses group d // (dim // groups)."""
    return t.repeat_interleave(dim // t.shape[1], dim=1)


def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False):
    """The definition, step by step in float32 (or float64 when u is float64)."""
    _check_inputs("selective_scan_ref", u, delta, A, B, C, D, z, delta_bias)
    dtype_in = u.dtype
    work = torch.float64 if dtype_in == torch.float64 else torch.float32
    u = u.to(work)
    delta = delta.to(work)
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].to(work)
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, L = u.shape
    A = A.to(work)
    B = B.to(work)
    C = C.to(work)
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if B.dim() == 2:
        deltaB_u = torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    elif B.dim() == 3:
        deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    else:
        deltaB_u = torch.einsum("bdl,bdnl,bdl->bdln", delta, _groups_to_channels(B, dim), u)
    if C.dim() == 4:
        C = _groups_to_channels(C, dim)
    x = u.new_zeros((batch, dim, A.shape[1]))
    ys = []
    # unbind, not indexing: the backward of L index ops would write L full-size gradients (O(L^2))
    steps = zip(deltaA.unbind(2), deltaB_u.unbind(2), C.unbind(-1) if C.dim() >= 3 else [C] * L)
    for dA_i, dBu_i, C_i in steps:
        x = dA_i * x + dBu_i
        if C.dim() == 2:
            y = torch.einsum("bdn,dn->bd", x, C_i)
        elif C.dim() == 3:
            y = torch.einsum("bdn,bn->bd", x, C_i)
        else:
            y = torch.einsum("bdn,bdn->bd", x, C_i)
        ys.append(y)
    y = torch.stack(ys, dim=2)
    out = y if D is None else y + u * D.to(work)[:, None]
    if z is not None:
        out = out * F.silu(z.to(work))
    out = out.to(dtype_in)
    return (out, x) if return_last_state else out


class SelectiveScanFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                return_last_state=False):
        out, x, out_z = torch.ops.mamba_ssm.selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias,
                                                              bool(delta_softplus))
        ctx.delta_softplus = bool(delta_softplus)
        ctx.has_z = z is not None
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out if z is not None else None)
        result = out_z if z is not None else out
        last_state = x[:, :, -1]
        ctx.mark_non_differentiable(last_state)
        return (result, last_state) if return_last_state else result

    @staticmethod
    def backward(ctx, dout, *unused):
        u, delta, A, B, C, D, z, delta_bias, x, out = ctx.saved_tensors
        du, ddelta, dA, dB, dC, dD, ddelta_bias, dz = torch.ops.mamba_ssm.selective_scan_bwd(
            u, delta, A, B, C, D, z, delta_bias, dout, x, out, ctx.delta_softplus
        )
        return (du, ddelta, dA, dB, dC, dD if D is not None else None, dz if z is not None else None,
                ddelta_bias if delta_bias is not None else None, None, None)


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False):
    """Differentiable selective scan on the compiled ops (CPU, CUDA or ROCm).

    Shapes (upstream's): u, delta, z: (batch, dim, L); A: (dim, dstate), real;
    B, C: (dim, dstate), (batch, dstate, L) or (batch, groups, dstate, L);
    D, delta_bias: (dim,). Returns out (batch, dim, L) in u's dtype, and with
    ``return_last_state=True`` also the last state (batch, dim, dstate), float32.

    Real floating-point inputs are brought to the dtypes the ops take (differentiably, so
    gradients come back in the caller's dtypes): delta, z and variable B/C to u's dtype; A,
    constant B/C, D and delta_bias to float32 (and D, delta_bias contiguous). float64 u runs
    selective_scan_ref. Anything else (a complex or integer input, another device than u's, a
    wrong shape) is refused with a ScanInputError (a ValueError) naming the argument; nothing is cast to real.
    """
    _check_inputs("selective_scan_fn", u, delta, A, B, C, D, z, delta_bias)
    if not HAS_EXTENSION or u.dtype == torch.float64:
        if not HAS_EXTENSION:
            _warn_fallback()
        return selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    dt = u.dtype
    delta = delta.to(dt)
    A = A.float()
    B = B.to(dt) if B.dim() >= 3 else B.float()
    C = C.to(dt) if C.dim() >= 3 else C.float()
    # the kernels read D and delta_bias as plain (dim,) arrays: a strided view is copied
    D = D.float().contiguous() if D is not None else None
    z = z.to(dt) if z is not None else None
    delta_bias = delta_bias.float().contiguous() if delta_bias is not None else None
    return SelectiveScanFn.apply(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)


def _register_fake() -> None:
    """Shape functions so torch.compile can trace through the ops."""
    register = getattr(torch.library, "register_fake", None)
    if register is None or not HAS_EXTENSION:
        return

    @register("mamba_ssm::selective_scan_fwd")
    def _fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
        n_chunks = (u.shape[2] + 2047) // 2048  # MAMBA_SCAN_CHUNK
        x = u.new_empty((u.shape[0], u.shape[1], n_chunks, A.shape[1]), dtype=torch.float32)
        return torch.empty_like(u), x, (torch.empty_like(u) if z is not None else u.new_empty((0,)))

    @register("mamba_ssm::selective_scan_bwd")
    def _bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, delta_softplus):
        f32 = {"dtype": torch.float32}
        return (torch.empty_like(u), torch.empty_like(u), A.new_empty(A.shape, **f32), torch.empty_like(B),
                torch.empty_like(C), u.new_empty((u.shape[1],) if D is not None else (0,), **f32),
                u.new_empty((u.shape[1],) if delta_bias is not None else (0,), **f32),
                torch.empty_like(u) if z is not None else u.new_empty((0,)))


_register_fake()
