"""What selective_scan_fn and selective_scan_ref refuse, and what they still take.

The kernels compute real float32/float16/bfloat16 scans (binding_common.h), and the
wrapper converts real floating-point inputs to the dtypes they take. Anything a
conversion would silently change (complex weights cast to real, integers), inputs on
another device, and wrong shapes are refused with an error naming the argument, on the
ops' path, the float64 path (the reference) and the fallback without the extension alike.
"""

from __future__ import annotations

import re

import pytest
import torch

from mamba_ssm.ops import selective_scan_interface as ssi
from mamba_ssm.ops.selective_scan_interface import ScanInputError, selective_scan_fn, selective_scan_ref

BATCH, DIM, L, N, GROUPS = 2, 6, 10, 4, 3
NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
needs_ops = pytest.mark.skipif(not ssi.HAS_EXTENSION, reason="mamba_ssm._C not built (pip install -e .)")


def inputs(dtype=torch.float32, layout="variable", seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    bc = {"constant": (DIM, N), "variable": (BATCH, N, L), "grouped": (BATCH, GROUPS, N, L)}[layout]
    weight = torch.float32 if dtype != torch.float64 else dtype
    return {
        "u": torch.randn(BATCH, DIM, L, generator=g).to(dtype),
        "delta": (torch.rand(BATCH, DIM, L, generator=g) * 0.5).to(dtype),
        "A": (-torch.rand(DIM, N, generator=g) - 0.1).to(weight),
        "B": torch.randn(*bc, generator=g).to(dtype if layout != "constant" else weight),
        "C": torch.randn(*bc, generator=g).to(dtype if layout != "constant" else weight),
        "D": torch.randn(DIM, generator=g).to(weight),
        "z": torch.randn(BATCH, DIM, L, generator=g).to(dtype),
        "delta_bias": (torch.rand(DIM, generator=g) * 0.3).to(weight),
    }


# The three ways in: the compiled ops (float32 u), the reference (float64 u), and the fallback
# when the extension is missing; plus selective_scan_ref called directly.
PATHS = ["ops", "float64", "fallback", "ref"]


def call(path: str, a: dict, monkeypatch):
    if path == "ops" and not ssi.HAS_EXTENSION:
        pytest.skip("mamba_ssm._C not built")
    if path == "fallback":
        monkeypatch.setattr(ssi, "HAS_EXTENSION", False)
        monkeypatch.setattr(ssi, "_warned", True)
    fn = selective_scan_ref if path == "ref" else selective_scan_fn
    return fn(**a)


def base(path: str) -> dict:
    return inputs(torch.float64 if path in ("float64", "ref") else torch.float32)


def names(match: str, fn: str, name: str) -> None:
    """The message says which function and which argument."""
    assert re.match(rf"{fn}: (constant |variable )?{re.escape(name)}\b", match), match


def fn_name(path: str) -> str:
    return "selective_scan_ref" if path == "ref" else "selective_scan_fn"


# --------------------------------------------------------------------------- complex and other dtypes


@pytest.mark.parametrize("path", PATHS)
def test_complex_A_is_refused_not_cast_to_real(path, monkeypatch, recwarn):
    """Upstream's complex weights (wtype=torch.complex64) with a real-layout B: a cast to real
    would drop the imaginary part with only torch's warning, and the result would be wrong."""
    a = base(path)
    a["A"] = torch.complex(a["A"], torch.randn(DIM, N, dtype=a["A"].dtype))
    with pytest.raises(ValueError) as err:
        call(path, a, monkeypatch)
    msg = str(err.value)
    names(msg, fn_name(path), "A")
    assert "complex" in msg and "not supported" in msg and "float32" in msg  # what is supported
    assert not [w for w in recwarn if "imaginary" in str(w.message)], "nothing was cast"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("path", PATHS)
def test_every_complex_input_is_refused(path, name, monkeypatch):
    a = base(path)
    a[name] = a[name].to(torch.complex128 if a[name].dtype == torch.float64 else torch.complex64)
    with pytest.raises(ScanInputError) as err:
        call(path, a, monkeypatch)
    names(str(err.value), fn_name(path), name)
    assert "complex" in str(err.value)


@pytest.mark.parametrize(
    "name,dtype", [("u", torch.int32), ("delta", torch.int64), ("A", torch.bool), ("B", torch.int64),
                   ("C", torch.uint8), ("D", torch.int64), ("z", torch.int16), ("delta_bias", torch.bool)]
)
@pytest.mark.parametrize("path", PATHS)
def test_integer_and_bool_inputs_are_refused(path, name, dtype, monkeypatch):
    a = base(path)
    a[name] = a[name].to(dtype)
    with pytest.raises(ValueError) as err:
        call(path, a, monkeypatch)
    names(str(err.value), fn_name(path), name)
    assert "real floating-point" in str(err.value) and str(dtype) in str(err.value)


@pytest.mark.parametrize("path", PATHS)
def test_a_non_tensor_or_a_missing_input_is_refused(path, monkeypatch):
    a = base(path)
    a["A"] = a["A"].tolist()
    with pytest.raises(TypeError, match=rf"^{fn_name(path)}: A must be a torch.Tensor, got list"):
        call(path, a, monkeypatch)
    a = base(path)
    a["C"] = None
    with pytest.raises(TypeError, match=rf"^{fn_name(path)}: C is required"):
        call(path, a, monkeypatch)


# --------------------------------------------------------------------------- device


@pytest.mark.parametrize("name", NAMES[1:])
@pytest.mark.parametrize("path", PATHS)
def test_an_input_on_another_device_than_u_is_refused(path, name, monkeypatch):
    a = base(path)
    a[name] = a[name].to("meta")  # a second device on any machine
    with pytest.raises(ValueError) as err:
        call(path, a, monkeypatch)
    names(str(err.value), fn_name(path), name)
    assert "is on meta but u is on cpu" in str(err.value)


# --------------------------------------------------------------------------- shape

SHAPES = [
    ("u", lambda a: a.update(u=a["u"][0]), "u must be (batch, dim, seqlen)"),
    ("u", lambda a: a.update(**{k: a[k][..., :0] for k in ("u", "delta", "z", "B", "C")}), "u has seqlen 0"),
    ("delta", lambda a: a.update(delta=a["delta"][..., :-1]), "delta must have u's shape"),
    ("z", lambda a: a.update(z=a["z"][:1]), "z must have u's shape"),
    ("A", lambda a: a.update(A=a["A"][:-1]), "A must be (dim, dstate) with dim = 6"),
    ("A", lambda a: a.update(A=a["A"][:, :0]), "dstate >= 1"),
    ("A", lambda a: a.update(A=a["A"][0]), "A must be (dim, dstate)"),
    ("B", lambda a: a.update(B=a["B"][..., :-1]), "variable B must be (2, 4, 10)"),
    ("C", lambda a: a.update(C=a["C"][:, :-1]), "variable C must be (2, 4, 10)"),
    ("B", lambda a: a.update(B=torch.zeros(DIM, N + 1, dtype=a["A"].dtype)), "constant B must be (dim, dstate) ="),
    ("B", lambda a: a.update(B=torch.zeros(BATCH, 4, N, L, dtype=a["u"].dtype)), "with groups dividing dim = 6"),
    ("C", lambda a: a.update(C=a["C"][None, None]), "C must be (dim, dstate), (batch, dstate, seqlen) or"),
    ("B", lambda a: a.update(B=torch.zeros(BATCH, 2, N, L, dtype=a["u"].dtype),
                             C=torch.zeros(BATCH, 3, N, L, dtype=a["u"].dtype)), "B and C must have the same number"),
    ("D", lambda a: a.update(D=torch.zeros(DIM + 1, dtype=a["A"].dtype)), "D must be (dim,) = (6,)"),
    ("delta_bias", lambda a: a.update(delta_bias=a["delta_bias"][None]), "delta_bias must be (dim,) = (6,)"),
]


@pytest.mark.parametrize("name,mutate,message", SHAPES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SHAPES)])
@pytest.mark.parametrize("path", PATHS)
def test_wrong_shapes_are_refused_naming_the_argument(path, name, mutate, message, monkeypatch):
    a = base(path)
    mutate(a)
    with pytest.raises(ValueError) as err:
        call(path, a, monkeypatch)
    names(str(err.value), fn_name(path), name)
    assert message in str(err.value)


def test_refusals_are_also_runtime_errors_as_the_ops_raise():
    """Code that caught the ops' RuntimeError for a bad shape still catches the Python-side check."""
    a = inputs()
    a["delta"] = a["delta"][..., :-1]
    with pytest.raises(RuntimeError, match="delta must have u's shape"):
        selective_scan_fn(**a)


# --------------------------------------------------------------------------- stride


@needs_ops
@pytest.mark.parametrize("name", ["D", "delta_bias"])
def test_the_ops_read_a_strided_D_or_delta_bias_by_its_strides(name):
    """The kernels read D and delta_bias as plain arrays of dim floats: the ops copy a strided
    view once (read as-is it gave errors up to 4), so the result equals the contiguous one."""
    a = inputs()
    a[name] = torch.rand(2 * DIM)[::2]
    strided = torch.ops.mamba_ssm.selective_scan_fwd(*[a[k] for k in NAMES], False)
    a[name] = a[name].contiguous()
    dense = torch.ops.mamba_ssm.selective_scan_fwd(*[a[k] for k in NAMES], False)
    torch.testing.assert_close(strided[0], dense[0], rtol=0, atol=0)


@pytest.mark.parametrize("view", ["strided", "expanded"])
@pytest.mark.parametrize("layout", ["constant", "variable", "grouped"])
def test_strided_and_expanded_inputs_give_the_reference_result(layout, view):
    """selective_scan_fn passes contiguous D and delta_bias to the ops; every other input may be
    any view (the ops copy a non-contiguous seqlen axis and take the other strides as they are)."""
    a = inputs(layout=layout)
    if view == "strided":
        a["D"] = torch.randn(2 * DIM)[::2]
        a["delta_bias"] = torch.rand(DIM, 2)[:, 1]
        a["u"] = torch.randn(BATCH, L, DIM).transpose(1, 2)
        a["A"] = (-torch.rand(N, DIM) - 0.1).t()
        a["z"] = torch.randn(BATCH, DIM, 2 * L)[..., ::2]
    else:
        a["D"] = torch.tensor(0.7).expand(DIM)
        a["delta_bias"] = torch.tensor([0.2]).expand(DIM)
        a["A"] = (-torch.rand(1, N) - 0.1).expand(DIM, N)
        a["u"] = torch.randn(1, DIM, L).expand(BATCH, DIM, L)
    ref = selective_scan_ref(**{k: v.double() for k, v in a.items()}, delta_softplus=True)
    out = selective_scan_fn(**a, delta_softplus=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- still accepted


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_u_and_delta_with_float32_weights_are_accepted(dtype):
    """Upstream's usual call: u, delta, z and variable B/C in fp16/bf16, A, D and delta_bias float32."""
    a = inputs(dtype)
    out = selective_scan_fn(**a, delta_softplus=True)
    assert out.dtype == dtype and out.shape == (BATCH, DIM, L)
    ref = selective_scan_ref(**{k: v.double() for k, v in a.items()}, delta_softplus=True)
    torch.testing.assert_close(out.double(), ref, rtol=5e-2, atol=5e-2)


def test_documented_real_conversions_are_accepted():
    """Real floating-point inputs in other widths are converted (differentiably), as documented:
    float64 or float16 A, D and delta_bias; float16 constant B/C; float32 delta with float16 u."""
    a = inputs(torch.float16, layout="constant")
    leaves = {
        **a,
        "A": a["A"].double().requires_grad_(),
        "B": a["B"].half().requires_grad_(),
        "D": a["D"].half(),
        "delta_bias": a["delta_bias"].double(),
        "delta": a["delta"].float(),
        "u": torch.nn.Parameter(a["u"]),
    }
    out = selective_scan_fn(**leaves)
    assert out.dtype == torch.float16
    out.float().sum().backward()
    assert leaves["A"].grad.dtype == torch.float64 and leaves["B"].grad.dtype == torch.float16
