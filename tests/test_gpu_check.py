"""The GPU check (benchmarks/gpu_check.py, scripts/gpu-check*.sh) on this GPU-less machine: its CPU dry run
passes and reports; a slightly broken op exits 1 naming the broken cases; the patch of upstream's pinned
sdist applies, and fails loudly when its text is gone.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mamba_ssm.ops import selective_scan_interface as ssi

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import upstream_sdist

CLASSES = {"seqlen", "chunk-edge", "bc-layout", "options", "last-state", "strides", "dstate"}
DTYPES = {"fp32", "fp16", "bf16"}
needs_ext = pytest.mark.skipif(not ssi.HAS_EXTENSION, reason="mamba_ssm._C not built (pip install -e .)")


def _gpu_check():
    return importlib.import_module("gpu_check")  # benchmarks/ is on sys.path


@needs_ext
def test_cpu_dry_run_passes_every_case_class_and_writes_the_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's mamba_ssm, as pytest sees it
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--upstream", "--out", str(tmp_path)],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "upstream: skipped: upstream's selective_scan_cuda is not importable" in proc.stdout
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["pass"] and res["device"] == "cpu" and not res["numerics"]["failed"]
    classes = res["numerics"]["classes"]
    assert set(classes) == {f"{c}/{d}" for c in CLASSES for d in DTYPES}
    for key, s in classes.items():
        assert s["cases"] > 0 and s["failed"] == 0 and s["pass"], key
        assert 0 < s["ratio"] <= 1.0 and s["cpu_ratio"] <= 1.0, key  # measured, and inside upstream's tolerance
        assert s["fwd_abs"] > 0 or s["dtype"] == "fp32", key
    # every gradient of the full call is compared, on both sides
    full = next(c for c in res["numerics"]["cases"] if c["cls"] == "chunk-edge" and c["dtype"] == "bf16")
    assert full["seqlen"] > 2048
    assert set(full["tensors"]) == {"out", "last_state", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"}
    assert {c["strides"] for c in res["numerics"]["cases"]} == {"contiguous", "transposed", "strided", "offset"}
    assert {c["layout_B"] for c in res["numerics"]["cases"]} >= {
        "constant",
        "variable",
        "groups1",
        "groups2",
        "groups4",
    }
    rows = res["speed"]["rows"]
    assert {r["dtype"] for r in rows} == {"fp16", "bf16"} and all(r["ours"]["fwd_bwd_ms"] > 0 for r in rows)
    assert res["speed"]["reps"] == 3 and all(len(r["ours"]["fwd_all"]) == 3 for r in rows)
    md = (tmp_path / "results.md").read_text()
    assert "**PASS**" in md and "| class | dtype | cases | failed |" in md
    for c in CLASSES:
        assert f"| {c} | bf16 |" in md
    assert "| dtype | batch | dim | dstate | seqlen | ours fwd ms |" in md and "Median of 3 runs" in md


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient comes back 5% too large."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g * 1.05


@needs_ext
def test_a_broken_output_fails_naming_exactly_the_broken_cases(tmp_path, monkeypatch, capsys):
    gc = _gpu_check()

    def broken(u, *args, **kw):  # fp16 output 1% off; fp32 untouched
        res = ssi.selective_scan_fn(u, *args, **kw)
        if u.dtype != torch.float16:
            return res
        return (res[0] * 1.01, res[1]) if isinstance(res, tuple) else res * 1.01

    monkeypatch.setattr(gc, "scan_op", broken)
    rc = gc.main(["--device", "cpu", "--quick", "--no-speed", "--only", "options/fp(16|32)/", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    res = json.loads((tmp_path / "results.json").read_text())
    names = [c["name"] for c in res["numerics"]["cases"]]
    assert set(res["numerics"]["failed"]) == {n for n in names if n.startswith("options/fp16/")} != set()
    assert res["numerics"]["classes"]["options/fp32"]["pass"] and not res["numerics"]["classes"]["options/fp16"]["pass"]
    assert "FAIL numerics options/fp16/L40/variable/bare: out on dev" in out
    assert "gpu_check: FAIL: 16 failed: options/fp16/" in out
    assert "Failed cases:" in (tmp_path / "results.md").read_text()


@needs_ext
def test_a_broken_gradient_fails_naming_the_gradient(tmp_path, monkeypatch, capsys):
    gc = _gpu_check()

    def broken(u, delta, A, B, *args, **kw):  # dB 5% off, the forward exact
        return ssi.selective_scan_fn(u, delta, A, _ScaleGrad.apply(B), *args, **kw)

    monkeypatch.setattr(gc, "scan_op", broken)
    rc = gc.main(
        ["--device", "cpu", "--quick", "--no-speed", "--only", "bc-layout/fp32/L37/variable/", "--out", str(tmp_path)]
    )
    assert rc == 1
    (case,) = json.loads((tmp_path / "results.json").read_text())["numerics"]["cases"]
    assert not case["pass"] and case["worst"]["tensor"] == "dB" and case["worst"]["ratio"] > 1
    assert case["tensors"]["out"]["dev"]["ratio"] <= 1 and case["tensors"]["du"]["dev"]["ratio"] <= 1
    assert "FAIL numerics bc-layout/fp32/L37/variable/z+D+bias+softplus/last: dB" in capsys.readouterr().out


@needs_ext
def test_an_op_that_raises_fails_its_case_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    gc = _gpu_check()

    def raising(u, *args, **kw):
        if u.shape[-1] == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return ssi.selective_scan_fn(u, *args, **kw)

    monkeypatch.setattr(gc, "scan_op", raising)
    assert gc.main(["--device", "cpu", "--quick", "--no-speed", "--only", "seqlen/fp32/", "--out", str(tmp_path)]) == 1
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["numerics"]["failed"] == ["seqlen/fp32/L1/variable/z+D+bias+softplus/last"]
    (bad,) = [c for c in res["numerics"]["cases"] if not c["pass"]]
    assert bad["problems"] == ["RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert len(res["numerics"]["cases"]) == 5 and "illegal memory access" in capsys.readouterr().out


class FakeUpstream:
    """selective_scan_cuda's convention (fwd/bwd as upstream's selective_scan_interface calls them), over our
    CPU ops: drives gpu_check's upstream path (its autograd wrapper, timing, agreement) on this machine."""

    __file__ = "fake selective_scan_cuda"

    @staticmethod
    def fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
        assert B.dim() == 4 and C.dim() == 4  # upstream takes (batch, groups, dstate, seqlen) only
        out, x, out_z = torch.ops.mamba_ssm.selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
        return [out, x] + ([out_z] if z is not None else [])

    @staticmethod
    def bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, dz, delta_softplus, recompute_out_z):
        assert dz is None and recompute_out_z is False and (out is not None) == (z is not None)
        du, ddelta, dA, dB, dC, dD, ddb, dz = torch.ops.mamba_ssm.selective_scan_bwd(
            u, delta, A, B, C, D, z, delta_bias, dout, x, out, delta_softplus
        )
        return [du, ddelta, dA, dB.to(B.dtype), dC.to(C.dtype), dD, ddb] + ([dz] if z is not None else [])


@needs_ext
def test_the_upstream_path_times_both_and_compares_outputs(tmp_path, monkeypatch):
    gc = _gpu_check()
    monkeypatch.setattr(gc, "load_upstream", lambda args, device: (FakeUpstream, "fake upstream"))
    assert (
        gc.main(["--device", "cpu", "--quick", "--reps", "2", "--only", "dstate/fp32/.*/N1$", "--out", str(tmp_path)])
        == 0
    )
    res = json.loads((tmp_path / "results.json").read_text())
    rows = res["speed"]["rows"]
    assert len(rows) == 8 and res["upstream"] == "fake upstream"
    for r in rows:
        assert r["upstream"]["fwd_ms"] > 0 and r["ratio_fwd"] > 0 and r["ratio_fwd_bwd"] > 0
        assert r["vs_upstream"]["pass"] and len(r["vs_upstream"]["tensors"]) == 9  # out and 8 gradients
        assert max(t["abs"] for t in r["vs_upstream"]["tensors"].values()) == 0  # the same kernels underneath
    assert "| ok (0.000) |" in (tmp_path / "results.md").read_text()


def test_no_extension_is_a_clear_error(tmp_path, monkeypatch, capsys):
    gc = _gpu_check()
    monkeypatch.setattr(gc.ssi, "HAS_EXTENSION", False)
    assert gc.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "gpu_check: error: mamba_ssm._C does not load" in err and "Traceback" not in err


def test_the_shell_scripts_parse():
    for script in ("gpu-check.sh", "gpu-check-prepare.sh"):
        proc = subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=False, capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode()


# ---- upstream's sdist and its patch ------------------------------------------------------


def test_the_patch_fails_loudly_when_its_text_is_gone(tmp_path):
    setup_py = tmp_path / "setup.py"
    setup_py.write_text('cc_flag = []\ncc_flag.append("-gencode")\ncc_flag.append("arch=compute_80,code=sm_80")\n')
    with pytest.raises(upstream_sdist.SdistError, match="the patch no longer applies: expected one hard-coded"):
        upstream_sdist.patch_archs(setup_py, [90])
    bad = tmp_path / upstream_sdist.FILENAME
    bad.write_bytes(b"not the sdist")
    with pytest.raises(upstream_sdist.SdistError, match="sha256 .* expected 104cc47e"):
        upstream_sdist.verify(bad)
    assert upstream_sdist.main(["check", str(tmp_path / "nowhere")]) == 1


def _cached_sdist() -> Path | None:
    for folder in (REPO / ".gpu", upstream_sdist_cache()):
        if (folder / upstream_sdist.FILENAME).is_file():
            return folder
    return None


def upstream_sdist_cache() -> Path:
    return Path(os.environ.get("MAMBA_FARM_CACHE", Path.home() / ".cache" / "mamba-farm")) / "upstream-sdist"


# The real sdist: from scripts/gpu-check-prepare.sh's .gpu/ or the cache; downloading it needs the network (slow).
@(pytest.mark.slow if _cached_sdist() is None else (lambda f: f))
def test_the_patch_applies_to_the_pinned_sdist(tmp_path):
    folder = _cached_sdist()
    if folder is None:
        folder = upstream_sdist_cache()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--no-build-isolation",
                upstream_sdist.PIN,
                "-d",
                str(folder),
            ],
            check=True,
            env={**os.environ, "MAMBA_SKIP_CUDA_BUILD": "TRUE"},
            timeout=300,
        )
    sdist = upstream_sdist.sdist_path(folder)
    upstream_sdist.verify(sdist)
    root = upstream_sdist.unpack(sdist, tmp_path)
    before = (root / "setup.py").read_text()
    assert upstream_sdist.gencode_archs(root / "setup.py") == [75, 80, 87, 90, 100, 120, 103, 110, 121]
    upstream_sdist.patch_archs(root / "setup.py", [90])
    after = (root / "setup.py").read_text()
    assert upstream_sdist.gencode_archs(root / "setup.py") == [90]
    compile(after, "setup.py", "exec")  # still Python
    # only the arch list changed: the compile flags and the extension's sources are as upstream wrote them
    for kept in (
        '"--use_fast_math"',
        '"-std=c++17"',
        "selective_scan_bwd_bf16_complex.cu",
        'name="selective_scan_cuda"',
    ):
        assert kept in after
    assert len(before.splitlines()) - len(after.splitlines()) == 19
    with pytest.raises(upstream_sdist.SdistError, match="no longer applies"):
        upstream_sdist.patch_archs(root / "setup.py", [90])  # the patched text has no hard-coded list left
