"""The stable-ABI build (MAMBA_STABLE_ABI=TRUE, csrc/binding_stable.cpp): one cp310-abi3 wheel per toolkit.

Checked for real: a CPU stable wheel runs under a torch other than the one it was built against (same ops,
same numerics, same refusals); it references torch only through the C shim and says so in its tags; the
canary runs it under the newest torch the index lists today; (slow) the CUDA stable wheel loads with the
asked-for SASS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import cudakit
import pytest
from conftest import REPO
from packaging.utils import parse_wheel_filename

from mamba_ssm import variant as _variant

FLOOR = re.search(r'^\[stable\]\s*\nfloor\s*=\s*"([^"]+)"', (REPO / "mamba_build" / "build.toml").read_text(), re.M)

pytestmark = pytest.mark.skipif(cudakit.python311() is None, reason="needs python3.11 for the torch 2.14.1 venv")


def _schemas(source: Path) -> list[str]:
    """The op schemas a binding registers (the string literals inside its m.def(...) calls)."""
    text = source.read_text()
    return ["".join(re.findall(r'"((?:[^"\\]|\\.)*)"', call)) for call in re.findall(r"m\.def\((.*?)\);", text, re.S)]


def test_stable_binding_registers_the_classic_schemas():
    classic, stable = _schemas(REPO / "csrc" / "binding.cpp"), _schemas(REPO / "csrc" / "binding_stable.cpp")
    assert len(classic) == 2 and stable == classic


def _build(python: str, out: Path, env_extra: dict[str, str], tmp: Path, path: tuple[Path, ...] = ()) -> cudakit.Build:
    src = cudakit.stage_source(tmp / "src")
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CUDA_ARCH_LIST", "MAMBA_KERNEL_CACHE")}
    env.update(MAMBA_STABLE_ABI="TRUE", MAMBA_FORCE_BUILD="TRUE", MAX_JOBS="1", PIP_NO_INPUT="1", **env_extra)
    env["PATH"] = os.pathsep.join([str(Path(python).parent), *map(str, path), env.get("PATH", "")])
    cmd = [python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(out), str(src)]
    rc, wall, cpu, rss = cudakit.run_measured(cmd, env, src, out / "build.log")
    log = (out / "build.log").read_text(errors="replace")
    wheels = sorted(out.glob("mamba_ssm-*.whl"))
    assert rc == 0 and len(wheels) == 1, f"stable build failed (exit {rc}):\n{log[-4000:]}"
    return cudakit.Build(wheels[0], rc, wall, cpu, rss, log)


@pytest.fixture(scope="module")
def venv214() -> Path:
    return cudakit.torch_cuda_venv()


@pytest.fixture(scope="module")
def wheel_test_torch(tmp_path_factory) -> Path:
    """CPU stable wheel built against the torch this suite runs on (2.13.0+cpu in CI)."""
    tmp = tmp_path_factory.mktemp("stable-test-torch")
    return _build(sys.executable, tmp / "dist", {"MAMBA_SKIP_CUDA_BUILD": "TRUE"}, tmp).wheel


@pytest.fixture(scope="module")
def wheel_214(tmp_path_factory, venv214) -> Path:
    """CPU stable wheel built against torch 2.14.1 (its CUDA build, kernels for the CPU only)."""
    tmp = tmp_path_factory.mktemp("stable-214")
    return _build(str(venv214 / "bin" / "python"), tmp / "dist", {"MAMBA_SKIP_CUDA_BUILD": "TRUE"}, tmp).wheel


def _undefined_and_needed(so: Path) -> tuple[set[str], set[str]]:
    from elftools.elf.elffile import ELFFile

    with open(so, "rb") as f:
        elf = ELFFile(f)
        undefined = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
                     if s.name and s["st_shndx"] == "SHN_UNDEF"}
        needed = {t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"}
    return undefined, needed


# Mangled names in torch's C++ namespaces (c10::, at::, torch::, caffe2::) and CPython's API.
_CXX_TORCH = re.compile(r"^_ZN?K?\d*(?:3c10|2at|5torch|6caffe2)")
_PYTHON = re.compile(r"^_?Py")


def _audit(wheel: Path, tmp: Path, accelerator: str) -> set[str]:
    name, version, _, tags = parse_wheel_filename(wheel.name)
    assert {str(t) for t in tags} == {"cp310-abi3-linux_x86_64"}
    assert version.local == f"{accelerator}torchstable" and _variant.parse_label(version.local)["torch"] == "stable"
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(f"mamba_ssm-{version}.dist-info/METADATA").decode()
        assert "Tag: cp310-abi3-linux_x86_64" in zf.read(f"mamba_ssm-{version}.dist-info/WHEEL").decode()
    assert f"Requires-Dist: torch>={FLOOR.group(1)}" in meta.splitlines()
    so = cudakit.extension_so(cudakit.unpack(wheel, tmp))
    assert so.name == "_C.abi3.so"
    undefined, needed = _undefined_and_needed(so)
    assert not sorted(s for s in undefined if _CXX_TORCH.match(s)), "mangled torch C++ symbols: not stable-ABI"
    assert not sorted(s for s in undefined if _PYTHON.match(s)), "Python symbols: not abi3-clean"
    assert any(s.startswith("aoti_torch_") for s in undefined) and "torch_parallel_for" in undefined
    assert "libtorch_cpu.so" in needed and "libtorch_python.so" not in needed
    return needed


def test_stable_cpu_wheel_is_abi3_and_references_only_the_c_shim(wheel_test_torch, wheel_214, tmp_path):
    for i, wheel in enumerate((wheel_test_torch, wheel_214)):
        needed = _audit(wheel, tmp_path / str(i), "cpu")
        assert not any(n.startswith("libgomp") for n in needed)  # parallelism comes from torch_parallel_for


_CHECK = r"""
import json, sys, torch
from mamba_ssm.ops import selective_scan_interface as ssi
assert ssi.HAS_EXTENSION, ssi._IMPORT_ERROR
torch.manual_seed(0)
res = {"torch": torch.__version__, "module": ssi.__file__, "cases": {}}
res["schemas"] = [str(getattr(torch.ops.mamba_ssm, op).default._schema) for op in ("selective_scan_fwd", "selective_scan_bwd")]
b, d, L, n = 2, 6, 300, 4
for name, dtype, var_bc, groups, use_z in [("f32-const", torch.float32, False, 1, True), ("f32-var", torch.float32, True, 1, True),
                                           ("f32-groups", torch.float32, True, 2, False), ("bf16-var", torch.bfloat16, True, 1, True)]:
    u = torch.randn(b, d, L, dtype=dtype, requires_grad=True)
    delta = (0.5 * torch.rand(b, d, L)).to(dtype).requires_grad_()
    A = (-torch.rand(d, n)).requires_grad_()
    shape = ((b, groups, n, L) if groups > 1 else (b, n, L)) if var_bc else (d, n)
    B = torch.randn(*shape, dtype=dtype if var_bc else torch.float32, requires_grad=True)
    C = torch.randn(*shape, dtype=dtype if var_bc else torch.float32, requires_grad=True)
    D = torch.randn(d, requires_grad=True)
    z = torch.randn(b, d, L, dtype=dtype, requires_grad=True) if use_z else None
    bias = torch.randn(d, requires_grad=True)
    inputs = [t for t in (u, delta, A, B, C, D, z, bias) if t is not None]
    out = ssi.selective_scan_fn(u, delta, A, B, C, D, z, bias, delta_softplus=True)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, g)
    # the truth is the float64 reference: torch's float32 one is itself off by up to ~1.5e-4 now and then
    # (seen on torch 2.13: 1 run in ~15, same seed), while the kernel stays within ~1e-6 of float64
    dbl = iter([t.detach().double().requires_grad_() for t in inputs])
    args = [next(dbl) if t is not None else None for t in (u, delta, A, B, C, D, z, bias)]
    ref = ssi.selective_scan_ref(*args, delta_softplus=True)
    ref_grads = torch.autograd.grad(ref, [a for a in args if a is not None], g.double())
    def rel(a, r):
        return float((a.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-6))
    res["cases"][name] = {"out": rel(out, ref), "grads": max(rel(a, r) for a, r in zip(grads, ref_grads))}
try:
    x = torch.randn(2, 4, 8)
    torch.ops.mamba_ssm.selective_scan_fwd(x, x, torch.randn(4, 3), torch.randn(2, 3, 5), torch.randn(4, 3), None, None, None, False)
    res["error"] = None
except RuntimeError as e:
    res["error"] = str(e)
print("RESULT " + json.dumps(res))
"""


def _run_check(python: str, wheel: Path, tmp: Path) -> dict:
    tree = cudakit.unpack(wheel, tmp / "site")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    proc = subprocess.run([python, "-c", _CHECK], capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"the stable wheel failed under {python}:\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _assert_correct(res: dict, torch_prefix: str, tree: Path) -> None:
    assert res["torch"].startswith(torch_prefix)
    assert Path(res["module"]).is_relative_to(tree)  # the wheel's package, not the checkout
    assert res["schemas"] == [s.replace("selective_scan", "mamba_ssm::selective_scan", 1) for s in
                              _schemas(REPO / "csrc" / "binding.cpp")]
    for name, err in res["cases"].items():
        tol = 3e-2 if name.startswith("bf16") else 1e-4
        assert err["out"] < tol and err["grads"] < tol, (name, err)
    assert res["error"] and res["error"].startswith("mamba_ssm.selective_scan_fwd: variable B must have batch 2, "
                                                    "dstate 3 and seqlen 8, got [2, 3, 5]")


def test_stable_wheel_built_on_test_torch_runs_on_214(wheel_test_torch, venv214, tmp_path):
    import torch

    assert not torch.__version__.startswith("2.14")  # two different torch releases, or the test proves nothing
    res = _run_check(str(venv214 / "bin" / "python"), wheel_test_torch, tmp_path)
    _assert_correct(res, "2.14.1", tmp_path / "site")


def test_stable_wheel_built_on_214_runs_on_test_torch(wheel_214, tmp_path):
    import torch

    res = _run_check(sys.executable, wheel_214, tmp_path)
    _assert_correct(res, torch.__version__, tmp_path / "site")


def test_canary_stable_wheel_runs_under_the_newest_torch_on_pypi(wheel_test_torch, tmp_path):
    """Forward compatibility, checked against whatever torch the index has today (not a pinned one).

    The CPU stable wheel built against the suite's torch (2.13 in CI; its stable calls are the
    floor's: TORCH_TARGET_VERSION = [stable] floor) runs the numerics check, forward and backward
    against the float64 reference, under the newest torch release the host's index lists."""
    import torch

    from builder.errors import SourceFetchError

    try:
        newest = cudakit.newest_torch()
    except SourceFetchError as err:  # no index reachable: nothing to compare with today
        pytest.skip(f"cannot read the index's torch releases: {err}")
    if newest.split(".")[:2] == torch.__version__.split(".")[:2]:
        pytest.skip(f"the newest torch on the index ({newest}) is the suite's own: nothing newer to run under")
    venv = cudakit.canary_venv(newest)
    try:
        res = _run_check(str(venv / "bin" / "python"), wheel_test_torch, tmp_path)
        _assert_correct(res, newest, tmp_path / "site")
    except AssertionError as err:
        raise AssertionError(f"the stable-ABI wheel built against torch {torch.__version__} (floor {FLOOR.group(1)}) "
                             f"broke under torch {newest}, the newest on the index: {err}") from None  # fmt: skip
    print(f"canary: {wheel_test_torch.name} (built on torch {torch.__version__}) ok under torch {res['torch']}: "
          + ", ".join(f"{k} {v['out']:.1e}/{v['grads']:.1e}" for k, v in res["cases"].items()))


def test_stable_wheel_runs_under_python_314_with_a_torch_that_ships_it(wheel_test_torch, tmp_path):
    """cp310-abi3 serves Python 3.14 too: the CPU stable wheel built on the suite's cp311 torch passes the
    numerics check under CPython 3.14 (the host's, else the one the farm provides itself:
    builder/environments/interpreters.py) and torch 2.14.1, which ships cp314. Its venv is the farm's smoke venv for
    (cp314, torch 2.14.1), whose large files builder/environments/store.py hard-links to the other torch venvs'."""
    from filelock import FileLock

    from builder.environments import interpreters, store
    from builder.errors import InterpreterUnavailable
    from builder.facts import hostenv

    try:
        prefix = interpreters.python_prefix("3.14")
    except InterpreterUnavailable as err:
        pytest.skip(f"no CPython 3.14 here: {err}")
    smoke = hostenv.CACHE_ROOT / "smoke" / "cp314-torch2.14.1"
    smoke.mkdir(parents=True, exist_ok=True)
    with FileLock(str(smoke) + ".lock"):  # the lock builder/verifying/smoke.py's on_host takes
        venv = store.torch_venv(str(prefix / "bin" / "python3"), "torch==2.14.1", smoke / "torch-envs")
    res = _run_check(str(venv / "bin" / "python"), wheel_test_torch, tmp_path)
    _assert_correct(res, "2.14.1", tmp_path / "site")
    assert wheel_test_torch.name.endswith("-cp310-abi3-linux_x86_64.whl")
    print(f"{wheel_test_torch.name} ok under Python 3.14 ({prefix}) with torch {res['torch']}")


@pytest.mark.cuda_build
@pytest.mark.skipif(not cudakit.NVCC.is_file(), reason="needs the CUDA 13.0 toolkit")
def test_cuda_stable_wheel_builds_against_214_and_loads_without_gpu(venv214, tmp_path):
    build = _build(str(venv214 / "bin" / "python"), tmp_path / "dist", {"MAMBA_CUDA_ARCHS": "8.0"}, tmp_path,
                   path=(cudakit.NVCC.parent,))
    needed = _audit(build.wheel, tmp_path / "x", "cu13")
    assert "libtorch_cuda.so" in needed
    so = cudakit.extension_so(tmp_path / "x")
    assert cudakit.registered_kernels(venv214, so) == {op: {"CPU": True, "CUDA": True}
                                                       for op in ("selective_scan_fwd", "selective_scan_bwd")}
    sass, ptx = cudakit.embedded_archs(venv214, so)
    assert sass == {"sm_80"} and not ptx
    print(f"CUDA stable build: {build.wall_s:.0f} s wall, {build.cpu_s:.0f} s CPU")


def _stable_plan():
    import inspect

    from builder.planning.plan import load_plan

    if "stable" not in inspect.signature(load_plan).parameters:
        pytest.skip("builder.planning.plan has no stable-ABI collapse")
    return load_plan(stable=True), load_plan(stable=False)  # matrix.toml turns the collapse on by default


def test_planner_serves_each_cell_once_and_stable_where_it_can():
    from builder.planning.plan import served_cells, stable_floor

    stable, classic = _stable_plan()
    assert stable.cells == classic.cells  # the same cells are asked for; fewer builds serve them
    served = [c for b in stable.builds for c in served_cells(stable, b)]
    assert sorted(served, key=lambda c: c.sort_key()) == sorted(stable.cells, key=lambda c: c.sort_key())
    floor = tuple(map(int, stable_floor().split(".")))
    by_id = {b.id: b for b in classic.builds}
    for b in stable.builds:
        if not b.stable:
            assert by_id[b.id] == b  # a classic build is the same build, same inputs hash
            assert not (b.accelerator.startswith(("cpu", "cu")) and tuple(map(int, b.torch.split("."))) >= floor
                        and tuple(map(int, b.python.split("."))) >= (3, 10)), f"{b.id} could be served by a stable wheel"
            continue
        assert b.variant.endswith("-torchstable-abi3") and b.label.endswith("torchstable")
        assert b.torch == "stable" and b.accelerator.startswith(("cpu", "cu"))
        for c in served_cells(stable, b):
            assert tuple(map(int, c.torch.split("."))) >= floor and c.platform == b.platform
    cu13 = stable.build("cu13-torchstable-abi3-cp310-linux_x86_64")
    assert {"cu13-torch2.10-cxx11abiTRUE", "cu13-torch2.14-cxx11abiTRUE"} <= set(cu13.serves)
    # built on the newest torch that has the abi3 tag's Python (2.14: torch 2.15 has no cp310 wheel); it serves
    # every torch >= the floor on the axes x the axes' Pythons that torch has (2.10-2.14 x 3.10-3.13, 2.15 x 3.11-3.13)
    from builder.facts.compat import load as load_compat

    compat = load_compat()
    want = [(t, p) for t in stable.matrix.axes.torch if tuple(map(int, t.split("."))) >= floor
            for p in stable.matrix.axes.python if compat.torch[t].supports_python(p)]  # fmt: skip
    assert cu13.python == compat.stable_python and cu13.torch_version.startswith("2.14")
    assert len(served_cells(stable, cu13)) == len(want) >= 23
    assert len(stable.cells) / len(stable.builds) > 1.5 and len(classic.cells) == len(classic.builds)
