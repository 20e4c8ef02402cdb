"""Wheel verification on real ELF files: names, C++ ABI audit, GPU archs, auditwheel repair, retag, smoke test."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from wheelmaker import V, make_wheel

from builder.errors import VerificationError
from builder.facts.spec import BuildSpec
from builder.verifying.wheels import audit_archs, audit_cxx_abi, read_facts, retag, verify_wheel
from mamba_ssm import elf as _elf

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not installed")

# A torch API call that passes a std::string, as every extension's TORCH_CHECK does.
TORCH_API_SRC = r"""
#include <string>
namespace c10 { namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, unsigned int line, const std::string& msg);
} }
extern "C" void check(int ok) { if (!ok) c10::detail::torchCheckFail("f", "x.cpp", 1, std::string("bad")); }
"""
NO_STRING_SRC = 'extern "C" int twice(int x) { return 2 * x; }\n'
NEW_GLIBC_SRC = r"""
#include <pthread.h>
static void* run(void*) { return nullptr; }
extern "C" int start() { pthread_t t; return pthread_create(&t, nullptr, run, nullptr); }
"""


def spec_for(**kw) -> BuildSpec:
    base = {
        "id": "cu12-torch2.6-cxx11abiFALSE-cp311-linux_x86_64",
        "torch": "2.6",
        "torch_version": "2.6.0",
        "python": "3.11",
        "accelerator": "cu12",
        "toolkit": "12.4",
        "cxx11abi": False,
        "platform": "linux_x86_64",
        "variant": "cu12-torch2.6-cxx11abiFALSE",
        "label": "cu12torch2.6cxx11abiFALSE",
        "archs": (),
        "image": "test",
        "torch_index_url": "",
        "cxx_std": 17,
        "manylinux": "manylinux_2_28_x86_64",
    }
    base.update(kw)
    return BuildSpec(**base)


CPU_SPEC = spec_for(
    id="cpu-torch2.6-cxx11abiFALSE-cp311-linux_x86_64",
    accelerator="cpu",
    toolkit=None,
    variant="cpu-torch2.6-cxx11abiFALSE",
    label="cputorch2.6cxx11abiFALSE",
)


def compile_so(tmp: Path, name: str, src: str, *flags: str) -> Path:
    c = tmp / f"{name}.cpp"
    c.write_text(src)
    out = tmp / f"{name}.so"
    subprocess.run([GXX, "-shared", "-fPIC", "-O1", "-o", str(out), str(c), *flags], check=True)
    return out


def wheel_with(tmp: Path, so: Path, spec: BuildSpec, *, requires=None, version=None, tag=None) -> Path:
    version = version or f"{V}+{spec.label}"
    tag = tag or f"{spec.python_tag}-{spec.python_tag}-{spec.platform}"
    files = {
        "mamba_ssm/__init__.py": b"__version__ = '0.3.0'\n",
        f"mamba_ssm/_C.cpython-{spec.python_tag[2:]}-x86_64-linux-gnu.so": so.read_bytes(),
    }
    reqs = requires if requires is not None else (f"torch=={spec.torch}.*",)
    return make_wheel(tmp / "dist", "mamba-ssm", version, tag, requires=reqs, files=files)


@pytest.fixture(scope="module")
def sos(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ not installed")
    tmp = tmp_path_factory.mktemp("so")
    stub = compile_so(tmp, "libc10", NO_STRING_SRC)  # stands in for torch's libc10.so (never bundled)
    return {
        "old": compile_so(
            tmp, "old", TORCH_API_SRC, "-D_GLIBCXX_USE_CXX11_ABI=0", "-L", str(tmp), "-Wl,--no-as-needed", "-lc10"
        ),
        "new": compile_so(tmp, "new", TORCH_API_SRC, "-D_GLIBCXX_USE_CXX11_ABI=1"),
        "plain": compile_so(tmp, "plain", NO_STRING_SRC),
        "glibc234": compile_so(tmp, "glibc234", NEW_GLIBC_SRC, "-pthread"),
        "libc10": stub,
    }


# ---------------------------------------------------------------- C++ ABI audit


@needs_gxx
def test_abi_audit_on_compiled_libraries(sos):
    assert audit_cxx_abi(sos["old"], cxx11abi=False).kind == "pre-cxx11"
    assert audit_cxx_abi(sos["new"], cxx11abi=True).kind == "cxx11"
    with pytest.raises(
        VerificationError, match=r"labelled cxx11abiTRUE but references pre-CXX11 .*_ZN3c106detail14torchCheckFail"
    ):
        audit_cxx_abi(sos["old"], cxx11abi=True)
    with pytest.raises(VerificationError, match=r"labelled cxx11abiFALSE but references std::__cxx11 .*__cxx11"):
        audit_cxx_abi(sos["new"], cxx11abi=False)
    rep = audit_cxx_abi(sos["plain"], cxx11abi=True)
    assert rep.kind is None and "either ABI label fits" in rep.note
    assert _elf.abi_report(_elf.undefined_symbols(sos["plain"])).kind is None


# ---------------------------------------------------------------- names, repair, retag


@needs_gxx
def test_verify_repairs_to_the_policy_without_bundling_torch(sos, tmp_path):
    whl = wheel_with(tmp_path, sos["old"], CPU_SPEC)
    assert b"libc10.so" in sos["old"].read_bytes()  # DT_NEEDED: auditwheel must leave it to torch
    verified = verify_wheel(whl, CPU_SPEC, workdir=tmp_path / "work")
    final = verified.wheel
    assert final.name == f"mamba_ssm-{V}+cputorch2.6cxx11abiFALSE-cp311-cp311-manylinux_2_28_x86_64.whl"
    # what was checked comes back with it (the evidence record's `verified`): the tags after repair, the ABI
    # each extension was found to have, no device code, the machine, the policy reached
    checks = verified.checks
    assert checks["tags"] == ["cp311-cp311-manylinux_2_28_x86_64"] and checks["repaired"] == "manylinux_2_28_x86_64"
    assert list(checks["abi"].values()) == ["pre-cxx11"] and checks["archs"] == [] and checks["machine"] == "x86_64"
    facts = read_facts(final)
    assert facts.wheel_tags == ("cp311-cp311-manylinux_2_28_x86_64",)
    with zipfile.ZipFile(final) as zf:
        assert not [n for n in zf.namelist() if ".libs/" in n]


OPENMP_SRC = r"""
#include <omp.h>
extern "C" int threads() { int n = 0;
#pragma omp parallel
  {
#pragma omp atomic
    n += 1;
  }
  return n; }
"""


@needs_gxx
def test_verify_leaves_openmp_to_torchs_libgomp(sos, tmp_path):
    """A real -fopenmp library (DT_NEEDED libgomp.so.1): repair must not bundle a second libgomp,
    which would ignore torch.set_num_threads and run its own thread pool next to torch's."""
    so = compile_so(tmp_path, "omp", OPENMP_SRC, "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0")
    assert b"libgomp.so.1" in so.read_bytes()
    final = verify_wheel(wheel_with(tmp_path, so, CPU_SPEC), CPU_SPEC, workdir=tmp_path / "work").wheel
    with zipfile.ZipFile(final) as zf:
        assert not [n for n in zf.namelist() if ".libs/" in n], zf.namelist()
        ext = next(n for n in zf.namelist() if n.endswith(".so"))
        assert b"libgomp.so.1" in zf.read(ext)  # still needed, resolved to the copy torch loads
    # and one that did bundle it is refused
    from builder.verifying.wheels import _check_not_bundled

    bundled = make_wheel(tmp_path / "bad", "mamba-ssm", f"{V}+{CPU_SPEC.label}", "cp311-cp311-manylinux_2_28_x86_64",
                         files={"mamba_ssm.libs/libgomp-a34b3233.so.1.0.0": b"\x7fELF"})  # fmt: skip
    with pytest.raises(VerificationError, match="libgomp-a34b3233"):
        _check_not_bundled(bundled)


@needs_gxx
def test_verify_names_what_disagrees(sos, tmp_path):
    cases = [
        ({"version": f"{V}+cputorch2.7cxx11abiFALSE"}, "local label is 'cputorch2.7cxx11abiFALSE'"),
        ({"tag": "cp312-cp312-linux_x86_64"}, "filename tags cp312-cp312-linux_x86_64 are not"),
        ({"requires": ("torch>=2.0",)}, "admits other torch minors"),
        ({"requires": ()}, "no Requires-Dist: torch"),
    ]
    for kw, message in cases:
        whl = wheel_with(tmp_path / message[:8].replace(" ", "_"), sos["old"], CPU_SPEC, **kw)
        with pytest.raises(VerificationError, match=message):
            verify_wheel(whl, CPU_SPEC, workdir=tmp_path / "work").wheel
    whl = wheel_with(tmp_path / "abi", sos["new"], CPU_SPEC)
    with pytest.raises(VerificationError, match="labelled cxx11abiFALSE but references std::__cxx11"):
        verify_wheel(whl, CPU_SPEC, workdir=tmp_path / "work").wheel


@needs_gxx
def test_a_wheel_below_its_floor_fails_naming_the_symbols(sos, tmp_path):
    """A wheel that references a newer glibc than its spec's manylinux floor never gets a newer tag instead."""
    whl = wheel_with(tmp_path, sos["glibc234"], CPU_SPEC)
    with pytest.raises(VerificationError) as exc:
        verify_wheel(whl, CPU_SPEC, workdir=tmp_path / "work")
    msg = str(exc.value)
    assert "does not reach manylinux_2_28_x86_64, the floor its spec promises (auditwheel: manylinux_2_3" in msg, msg
    assert "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so: pthread_create@GLIBC_2.34" in msg, msg
    assert "glibc_floor.c" in exc.value.hint and "at most 2.28" in exc.value.hint
    assert not (tmp_path / "work" / "verified").exists()


def test_a_damaged_elf_member_is_named_not_a_traceback(tmp_path):
    from builder.verifying.wheels import symbols_above

    whl = make_wheel(tmp_path, "mamba-ssm", f"{V}+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     files={"mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so": b"\x7fELF\x02\x01\x01" + b"\0" * 9})  # fmt: skip
    with pytest.raises(VerificationError, match=r"mamba_ssm/_C\.cpython-311-x86_64-linux-gnu\.so is not an ELF file"):
        symbols_above(whl, "manylinux_2_28_x86_64")


def _verneed_loop(elf_bytes: bytes) -> bytes:
    """ELF_BYTES with its .gnu.version_r claiming 4 billion entries, the first one's next pointing at itself."""
    import io
    import struct

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(elf_bytes))
    index = next(i for i, sec in enumerate(elf.iter_sections()) if sec.name == ".gnu.version_r")
    sec = elf.get_section(index)
    raw = bytearray(elf_bytes)
    header = elf["e_shoff"] + index * elf["e_shentsize"]
    struct.pack_into("<I", raw, header + 44, 0xFFFFFFFF)  # Elf64_Shdr.sh_info: the number of entries
    struct.pack_into("<I", raw, sec["sh_offset"] + 12, 0)  # Elf64_Verneed.vn_next: 0, the entry itself again
    return bytes(raw)


def test_a_version_needs_loop_ends_at_its_bound_and_is_named(tmp_path):
    """pyelftools walks .gnu.version_r by its header's count and each entry's next: 4 billion entries pointing at
    themselves is a loop it never leaves. The check reads no more entries than the section has room for."""
    import sys
    import time

    from builder.verifying.wheels import symbols_above, versioned_imports

    looped = _verneed_loop(Path(sys.executable).resolve().read_bytes())
    assert versioned_imports(Path(sys.executable).resolve().read_bytes())  # the real one reads as it did
    t0 = time.monotonic()
    whl = make_wheel(tmp_path, "mamba-ssm", f"2.3.0+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     files={"mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so": looped})  # fmt: skip
    with pytest.raises(VerificationError, match=r"\.gnu\.version_r claims 4294967295 entries; it has room for \d+"):
        symbols_above(whl, "manylinux_2_28_x86_64")
    assert time.monotonic() - t0 < 10


def test_an_elf_member_past_the_cap_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    from builder.verifying import wheels

    monkeypatch.setattr(wheels, "MAX_ELF_BYTES", 1 << 20)
    whl = make_wheel(tmp_path, "mamba-ssm", f"2.3.0+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     files={"mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so": b"\x7fELF" + b"\0" * (4 << 20)})  # fmt: skip
    with pytest.raises(VerificationError, match=r"unpacks to more than 1 MiB: not an ELF file the glibc-floor check"):
        wheels.symbols_above(whl, "manylinux_2_28_x86_64")


# libstdc++'s reference counting (shared_ptr here) reads glibc's __libc_single_threaded where the headers see it;
# dlsym(RTLD_DEFAULT, ...) as torch's stable-ABI headers call it is dlsym@GLIBC_2.34 on a glibc >= 2.34 base.
SHARED_PTR_SRC = r"""
#include <dlfcn.h>
#include <memory>
#include <string>
extern "C" long use(long n) {
  auto p = std::make_shared<std::string>(n, 'x'); auto q = p;
  return dlsym(RTLD_DEFAULT, "strlen") ? (long)q->size() * 10 + p.use_count() : -1;
}
"""


@needs_gxx
def test_the_glibc_floor_object_brings_a_cxx_extension_to_2_28(tmp_path):
    """What build.sh links into every extension: __libc_single_threaded bound inside it and dlsym bound to its first
    version, so a C++ extension built on glibc >= 2.34 reaches manylinux_2_28 and computes what it did."""
    import ctypes

    from builder.building.executors import GLIBC_FLOOR
    from builder.facts.compat import manylinux_glibc
    from builder.verifying.wheels import versioned_imports

    plain = compile_so(tmp_path, "plain", SHARED_PTR_SRC, "-D_GLIBCXX_USE_CXX11_ABI=0", "-ldl")
    needs = set(versioned_imports(plain.read_bytes()))
    if not {("__libc_single_threaded", "GLIBC_2.32"), ("dlsym", "GLIBC_2.34")} <= needs:
        pytest.skip("this host's glibc is older than 2.34 (or its libstdc++ headers older than GCC 11)")
    with pytest.raises(VerificationError) as exc:
        verify_wheel(wheel_with(tmp_path / "plain", plain, CPU_SPEC), CPU_SPEC, workdir=tmp_path / "w1")
    so = "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so"
    assert f"{so}: __libc_single_threaded@GLIBC_2.32; {so}: dlsym@GLIBC_2.34" in str(exc.value), exc.value
    obj = tmp_path / "glibc_floor.o"
    subprocess.run([shutil.which("cc") or GXX, "-c", "-O2", "-fPIC", "-o", str(obj), str(GLIBC_FLOOR)], check=True)
    fixed = compile_so(tmp_path, "fixed", SHARED_PTR_SRC, "-D_GLIBCXX_USE_CXX11_ABI=0", str(obj), "-ldl")
    verified = verify_wheel(wheel_with(tmp_path / "fixed", fixed, CPU_SPEC), CPU_SPEC, workdir=tmp_path / "w2")
    assert verified.wheel.name.endswith("-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert verified.checks["repaired"] == "manylinux_2_28_x86_64"
    assert manylinux_glibc(verified.checks["reaches"]) <= (2, 28), verified.checks
    # bound inside, not exported: the process's own flag (libc's) is untouched; both compute the same
    assert "__libc_single_threaded" not in _elf.undefined_symbols(fixed)
    assert ("dlsym", "GLIBC_2.2.5") in versioned_imports(fixed.read_bytes())
    assert ctypes.CDLL(str(plain)).use(7) == ctypes.CDLL(str(fixed)).use(7) == 72


def test_retag_leaves_exactly_one_platform_tag(tmp_path):
    whl = make_wheel(
        tmp_path,
        "mamba-ssm",
        f"{V}+cu12torch2.6cxx11abiFALSE",
        "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",
    )
    out = retag(whl, "manylinux_2_28_x86_64", tmp_path / "out")
    facts = read_facts(out)
    assert out.name == f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert facts.filename_tags == facts.wheel_tags == ("cp311-cp311-manylinux_2_28_x86_64",)
    with zipfile.ZipFile(out) as zf:
        record = zf.read(f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE.dist-info/RECORD").decode()
    assert "dist-info/WHEEL,sha256=" in record


# ---------------------------------------------------------------- GPU archs

NVCC = shutil.which("nvcc")


def _cuobjdump() -> str | None:
    """NVIDIA's own fatbin reader: the cross-check of mamba_ssm.elf (the nvidia-cuda-cuobjdump wheel or PATH)."""
    import sysconfig

    import cudakit

    purelib = Path(sysconfig.get_paths()["purelib"])
    cands = [
        *purelib.glob("nvidia/*/bin/cuobjdump"),
        *cudakit.VENV.glob("lib/python3*/site-packages/nvidia/*/bin/cuobjdump"),
    ]
    return next((str(c) for c in cands if c.is_file()), shutil.which("cuobjdump"))


def _nvcc(tmp: Path, name: str, *gencodes: str) -> Path:
    src = tmp / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    so = tmp / f"{name}.so"
    cmd = [NVCC, "--threads", "1", "-shared", "-Xcompiler", "-fPIC", "-o", str(so), str(src)]
    subprocess.run(["nice", *cmd, *(a for g in gencodes for a in ("-gencode", g))], check=True)
    return so


@pytest.mark.cuda_build
@pytest.mark.skipif(NVCC is None or _cuobjdump() is None, reason="needs nvcc and cuobjdump (nvidia-cuda-cuobjdump)")
def test_the_fatbin_reader_lists_what_cuobjdump_lists(tmp_path):
    """The farm reads the fatbin with mamba_ssm.elf (as the doctor does): the same list as cuobjdump,
    arch-specific (sm_90a) and family (sm_100f) targets included."""
    so = _nvcc(tmp_path, "many", "arch=compute_80,code=sm_80", "arch=compute_90a,code=[sm_90a,compute_90a]",
               "arch=compute_100f,code=[sm_100f,compute_100f]", "arch=compute_120,code=compute_120")  # fmt: skip
    out = subprocess.run(
        [_cuobjdump(), "--list-elf", "--list-ptx", str(so)], capture_output=True, text=True, check=True
    )
    sass = {f"sm_{m}" for m in re.findall(r"^ELF file\s+\d+:.*\.sm_(\w+)\.cubin$", out.stdout, re.MULTILINE)}
    ptx = {f"compute_{m}" for m in re.findall(r"^PTX file\s+\d+:.*\.sm_(\w+)\.ptx$", out.stdout, re.MULTILINE)}
    archs = _elf.archs_of(so)
    assert (
        (set(archs.sass), set(archs.ptx))
        == (sass, ptx)
        == (
            {"sm_80", "sm_90a", "sm_100"},
            {"compute_90a", "compute_100f", "compute_120"},
        )
    )


@pytest.mark.cuda_build
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_cuda_arch_audit_on_a_real_fatbin(tmp_path):
    so = _nvcc(tmp_path, "libk", "arch=compute_80,code=sm_80", "arch=compute_90,code=compute_90")
    assert "SASS sm_80; PTX compute_90" == audit_archs([so], spec_for(archs=("sm_80", "compute_90")))
    with pytest.raises(VerificationError, match="missing sm_90"):
        audit_archs([so], spec_for(archs=("sm_80", "sm_90")))
    with pytest.raises(VerificationError, match="PTX"):
        audit_archs([so], spec_for(archs=("sm_80",)))


def _offload_bundle(triples: list[str]) -> bytes:
    body = b"__CLANG_OFFLOAD_BUNDLE__" + len(triples).to_bytes(8, "little")
    for t in triples:
        body += (0).to_bytes(8, "little") + (0).to_bytes(8, "little") + len(t).to_bytes(8, "little") + t.encode()
    return body


@needs_gxx
@pytest.mark.skipif(shutil.which("objcopy") is None, reason="binutils not installed")
def test_hip_arch_audit_reads_the_offload_bundle(sos, tmp_path):
    bundle = tmp_path / "fatbin"
    bundle.write_bytes(
        _offload_bundle(
            ["host-x86_64-unknown-linux--", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx942"]
        )
    )
    so = tmp_path / "hip.so"
    subprocess.run(["objcopy", "--add-section", f".hip_fatbin={bundle}", str(sos["plain"]), str(so)], check=True)
    assert _elf.archs_of(so).hip == ["gfx90a", "gfx942"]
    hip = spec_for(accelerator="hip62", archs=("gfx90a", "gfx942"))
    assert audit_archs([so], hip) == "HIP archs gfx90a, gfx942"
    with pytest.raises(VerificationError, match="missing gfx1100"):
        audit_archs([so], dataclasses.replace(hip, archs=("gfx90a", "gfx942", "gfx1100")))


# ---------------------------------------------------------------- the real package, end to end


@pytest.mark.slow
def test_verify_and_smoke_test_the_real_cpu_build(tmp_path):
    """Build mamba-ssm's CPU extension for the torch of this venv, verify, repair and smoke-test it."""
    import os
    import sys

    import torch

    from builder.building.executors import GLIBC_FLOOR
    from builder.environments import store
    from builder.verifying.smoke import smoke_test
    from mamba_ssm import variant as _variant

    repo = Path(__file__).resolve().parents[1]
    floor = tmp_path / "glibc_floor.o"  # what build.sh links into every farm build, so it reaches manylinux_2_28
    subprocess.run(["cc", "-c", "-O2", "-fPIC", "-o", str(floor), str(GLIBC_FLOOR)], check=True)
    env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE", MAX_JOBS="1", LDFLAGS=str(floor))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(tmp_path / "w"),
            str(repo),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    (whl,) = (tmp_path / "w").glob("mamba_ssm-*.whl")
    v = _variant.detect(torch)
    spec = spec_for(
        id=f"{v.key}-{v.python}-linux_x86_64",
        torch=v.torch,
        torch_version=torch.__version__.split("+")[0],
        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        accelerator=v.accelerator,
        toolkit=None,
        cxx11abi=v.cxx11abi,
        variant=v.key,
        label=v.label,
    )
    final = verify_wheel(whl, spec, workdir=tmp_path / "verify").wheel
    from mamba_ssm import __version__

    assert final.name.startswith(f"mamba_ssm-{__version__}+{v.label}-{v.python}-{v.python}-manylinux_")
    torch_venv = store.torch_venv(
        sys._base_executable, f"torch=={spec.torch_version}", tmp_path / "smoke" / "torch-envs"
    )
    ran = smoke_test(
        final,
        spec,
        python=sys._base_executable,
        torch_venv=torch_venv,
        torch_requirement=f"torch=={spec.torch_version}",
        workdir=tmp_path / "smoke",
    )
    assert ran["line"].startswith("smoke ok:")
    # what it ran, for the evidence record: the torch it imported with, the API, the CPU numerics and their error
    assert ran["imported"]["torch"].startswith(spec.torch_version) and "selective_scan_fn" in ran["imported"]["api"]
    (numerics,) = ran["numerics"]
    assert numerics["device"] == "cpu" and 0 <= numerics["max_abs_error"] < numerics["tolerance"]
    # a wheel whose extension is not a torch extension fails the smoke test with the reason
    broken = wheel_with(tmp_path / "broken", compile_so(tmp_path, "plain", NO_STRING_SRC), spec)
    with pytest.raises(VerificationError, match="compiled extension did not load|smoke test failed"):
        smoke_test(
            broken,
            spec,
            python=sys._base_executable,
            torch_venv=torch_venv,
            torch_requirement=f"torch=={spec.torch_version}",
            workdir=tmp_path / "smoke",
        )


# ---------------------------------------------------------------- extension modules the label calls for

STABLE_SPEC = spec_for(
    id="cpu-torchstable-abi3-cp310-linux_x86_64",
    torch="stable",
    python="3.10",
    accelerator="cpu",
    toolkit=None,
    variant="cpu-torchstable-abi3",
    label="cputorchstable",
    torch_version="2.13.0",
    stable=True,
)


@needs_gxx
def test_verify_refuses_a_stale_extension_module(sos, tmp_path):
    """The bar's contaminated stable wheel: _C.abi3.so plus a stale classic _C.cpython-311 build, which
    CPython 3.11 imports first."""
    so = sos["plain"].read_bytes()
    stale = "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so"
    whl = make_wheel(tmp_path / "stable", "mamba-ssm", f"{V}+cputorchstable", "cp310-abi3-linux_x86_64",
                     requires=("torch>=2.10",), files={"mamba_ssm/_C.abi3.so": so, stale: so})  # fmt: skip
    with pytest.raises(VerificationError) as exc:
        verify_wheel(whl, STABLE_SPEC, workdir=tmp_path / "work").wheel
    msg = str(exc.value)
    assert f"holds 2 builds of mamba_ssm._C: {stale}, mamba_ssm/_C.abi3.so (CPython imports {stale}" in msg
    assert f"{stale} is a version-specific (cp311) build in a stable-ABI wheel" in msg
    # a classic wheel with an abi3 module
    whl = make_wheel(tmp_path / "classic", "mamba-ssm", f"{V}+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     requires=("torch==2.6.*",), files={"mamba_ssm/_C.abi3.so": so})  # fmt: skip
    with pytest.raises(
        VerificationError, match=r"mamba_ssm/_C\.abi3\.so is a stable-ABI \(abi3\) build in a cp311 wheel"
    ):
        verify_wheel(whl, CPU_SPEC, workdir=tmp_path / "work").wheel
    # the clean stable wheel passes the name checks
    whl = make_wheel(tmp_path / "ok", "mamba-ssm", f"{V}+cputorchstable", "cp310-abi3-linux_x86_64",
                     requires=("torch>=2.10",), files={"mamba_ssm/_C.abi3.so": so})  # fmt: skip
    from builder.verifying.wheels import check_names

    assert check_names(read_facts(whl), STABLE_SPEC, ("linux_x86_64",)) == []


def test_retag_keeps_the_tag_a_header_when_wheel_ends_with_a_blank_line(tmp_path):
    """setuptools 84 (what a cp314 image installs) ends WHEEL with a blank line: the retagged WHEEL must keep
    Tag among its headers, or pip check calls the wheel unsupported on every platform (seen in ci-py314)."""
    from email.parser import Parser

    from builder.verifying.wheels import read_members, write_wheel

    whl = make_wheel(tmp_path, "mamba-ssm", f"{V}+cpu", "cp314-cp314-linux_x86_64")
    infos, members, info_dir = read_members(whl)
    members[f"{info_dir}/WHEEL"] = members[f"{info_dir}/WHEEL"].rstrip(b"\n") + b"\n\n"
    (tmp_path / "st").mkdir()
    padded = write_wheel(infos, members, info_dir, tmp_path / "st" / whl.name)
    out = retag(padded, "manylinux_2_34_x86_64", tmp_path / "out")
    with zipfile.ZipFile(out) as zf:
        text = zf.read(f"{info_dir}/WHEEL").decode()
    assert Parser().parsestr(text).get_all("Tag") == ["cp314-cp314-manylinux_2_34_x86_64"], text
