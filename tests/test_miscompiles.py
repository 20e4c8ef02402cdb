"""GPU code a toolkit is known to compile wrong is never shipped (builder/data/miscompiles.toml): the release plan
builds causal-conv1d's CUDA 13 wheels without sm_103 code, sm_100 code and compute_100 PTX serving the B300, and
the wheel nvcc makes from that plan's flags holds exactly that (read the way the arch audit reads it)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.errors import MatrixError
from builder.facts import miscompiles
from builder.planning.plan import load_plan
from builder.planning.recipes import CellFacts, placeholder_values
from builder.verifying.wheels import audit_archs
from mamba_ssm import elf as _elf

NVCC = shutil.which("nvcc") or (
    "/usr/local/cuda-13.0/bin/nvcc" if Path("/usr/local/cuda-13.0/bin/nvcc").exists() else None
)


@pytest.fixture(scope="module")
def release():
    return load_plan(profile="release")


def test_no_release_build_of_causal_conv1d_on_cuda13_has_sm_103_code(release):
    conv13 = [b for b in release.builds if b.project == "causal-conv1d" and b.toolkit == "13.0"]
    assert conv13, "the release builds causal-conv1d for CUDA 13"
    for b in conv13:
        assert "sm_103" not in b.archs and {"sm_100", "compute_100"} <= set(b.archs), b.id
        assert "sm_103" not in dict(b.env).get("TORCH_CUDA_ARCH_LIST", "")
    # the other packages of the same toolkit keep sm_103: the entry names one project
    upstream13 = [b for b in release.builds if b.project == "mamba-ssm" and b.from_recipe and b.toolkit == "13.0"]
    assert upstream13 and all("sm_103" in b.archs and "compute_100" not in b.archs for b in upstream13)
    # CUDA 12 has no sm_103 at all: nothing to replace there
    assert all("compute_100" not in b.archs for b in release.builds if b.toolkit and b.toolkit.startswith("12"))


def test_the_notes_say_which_code_serves_the_gpu(release):
    b = next(b for b in release.builds if b.project == "causal-conv1d" and b.toolkit == "13.0")
    [entry] = miscompiles.serving("causal-conv1d", "1.7.0", "13.0", ("sm_100", "sm_103"))
    assert entry.note().startswith("sm_103 runs sm_100 code (+ compute_100 PTX)")
    assert "causal-conv1d/issues/105" in entry.note()
    # a fixed release (or an older toolkit) is built as usual
    assert miscompiles.apply("causal-conv1d", "1.8.0", "13.0", ("sm_100", "sm_103")) == ("sm_100", "sm_103")
    assert miscompiles.apply("causal-conv1d", "1.7.0", "12.9", ("sm_100", "sm_120")) == ("sm_100", "sm_120")
    assert b.archs == miscompiles.apply("causal-conv1d", "1.7.0", "13.0", miscompiles_defaults(release, b))


def miscompiles_defaults(plan, b):
    from builder.facts import compat as compat_mod
    from builder.facts.compat import parse_accelerator

    return compat_mod.load().default_archs(parse_accelerator("cuda-13.0"))


def test_a_bad_table_entry_is_refused_with_its_place(tmp_path):
    bad = tmp_path / "miscompiles.toml"
    bad.write_text('[[miscompile]]\nproject = "x"\nversions = "<=1"\ntoolkit = ">=13"\narch = "sm_103"\n')
    with pytest.raises(MatrixError, match=r"miscompile\[0\]: needs exactly .*serve_with"):
        miscompiles.load(str(bad))
    bad.write_text(bad.read_text() + 'serve_with = "sm_100"\nptx = "sm_100"\nwhat = "w"\nreference = "r"\n')
    with pytest.raises(MatrixError, match="ptx is compute_XY"):
        miscompiles.load(str(bad))


@pytest.mark.cuda_build
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_nvcc_given_the_plans_flags_embeds_no_sm_103(release, tmp_path):
    """The recipe's ${gencode} for that build, handed to a real nvcc on a one-kernel file: SASS for every arch but
    sm_103, compute_100 PTX beside it, and the arch audit passes the result against the build's own arch list."""
    b = next(b for b in release.builds if b.project == "causal-conv1d" and b.toolkit == "13.0")
    b = dataclasses.replace(b, archs=("sm_100", "compute_100", "sm_120"))  # three archs: seconds, not minutes
    flags = json.loads(placeholder_values(CellFacts.from_spec(b))["gencode"])
    assert flags == ["-gencode", "arch=compute_100,code=sm_100", "-gencode", "arch=compute_120,code=sm_120",
                     "-gencode", "arch=compute_100,code=compute_100"]  # fmt: skip
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    so = tmp_path / "libk.so"
    subprocess.run([NVCC, "--threads", "1", "-shared", "-Xcompiler", "-fPIC", "-o", str(so), str(src), *flags],
                   check=True)  # fmt: skip
    archs = _elf.archs_of(so)
    assert set(archs.sass) == {"sm_100", "sm_120"} and set(archs.ptx) == {"compute_100"}
    assert audit_archs([so], b) == "SASS sm_100, sm_120; PTX compute_100"


def test_the_evidence_record_says_which_code_serves_the_gpu():
    """What verification records of such a wheel (its device code read from the ELF): sm_103 served by the sm_100
    code, and why; a wheel whose code shows no entry applied carries nothing."""
    from builder.verifying import evidence

    served = miscompiles.served_by("causal-conv1d", "1.7.0", "13.0", ["compute_100", "sm_100", "sm_120"])
    assert list(served) == ["sm_103"] and "bit-exact" in served["sm_103"]
    assert miscompiles.served_by("causal-conv1d", "1.7.0", "13.0", ["sm_100", "sm_103"]) == {}
    rec = {"verified": {"tags": ["cp311-cp311-manylinux_2_28_x86_64"], "archs": ["compute_100", "sm_100"],
                        "served_by": served}}  # fmt: skip
    assert "sm_103 served by sm_100 code (+ compute_100 PTX)" in evidence.line(rec)
