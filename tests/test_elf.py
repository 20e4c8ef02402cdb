"""mamba_ssm.elf: the one reader of extension files for the farm's verifier and the doctor.

The C++ ABI rule is checked three ways: against c++filt on every symbol of real libraries (libstdc++ exports
both string ABIs; torch's own libraries), on real libraries compiled here with each ``_GLIBCXX_USE_CXX11_ABI``
against torch's headers, and by asking the farm's verifier and the doctor for their verdict on those files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from builder.errors import VerificationError
from builder.verifying.wheels import audit_cxx_abi
from mamba_ssm import elf as _elf

GXX = shutil.which("g++")
CXXFILT = shutil.which("c++filt")


@pytest.mark.parametrize(
    "sym,kind",
    [
        ("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "pre-cxx11"),
        ("_ZN3c105ErrorC2ENS_14SourceLocationESs", "pre-cxx11"),
        ("_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", "cxx11"),
        ("_ZNK3c1010TensorImpl4nameB5cxx11Ev", "cxx11"),  # returns std::string: only the [abi:cxx11] tag says so
        ("_ZNKSbIwSt11char_traitsIwESaIwEE4sizeEv", "pre-cxx11"),  # old std::wstring (Sb), no Ss anywhere
        ("_ZNSs4_Rep20_S_empty_rep_storageE", "pre-cxx11"),
        ("_ZNKSt10filesystem7__cxx114path5_List5beginEv", "cxx11"),
        ("_ZN5Ssafe3runEv", None),  # "Ss" inside a source name is not a string
        ("_ZN3c103fooES_5Ssafe", None),  # ... nor after a substitution S_
        ("_ZN3c1013MessageLogger6streamES12_3cxx11", None),  # a name "cxx11" is no ABI tag
        # __gnu_cxx::__enable_if: "cxx11" as a substring of 9__gnu_cxx + 11__enable_if
        (
            "_ZSt14__copy_move_a1ILb0EPffEN9__gnu_cxx11__enable_ifIXsrSt23__is_random_access_iterIT0_E7__valueEvE6__typeE",
            None,
        ),
        ("_ZTSs", None),  # typeinfo name for short
        ("_ZN2at6TensorD1Ev", None),
        ("memcpy", None),
    ],
)
def test_string_abi_of_one_symbol(sym, kind):
    assert _elf.string_abi(sym) == kind


def _torch_lib() -> Path | None:
    try:
        import torch
    except ImportError:
        return None
    return Path(torch.__file__).parent / "lib"


def _libraries() -> list[Path]:
    libs = [Path(p) for p in ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/aarch64-linux-gnu/libstdc++.so.6")]
    lib = _torch_lib()
    if lib:
        libs += [lib / "libc10.so", lib / "libtorch_python.so"]
    return [p for p in libs if p.is_file()]


@pytest.mark.skipif(CXXFILT is None, reason="c++filt (binutils) not installed")
@pytest.mark.parametrize("lib", _libraries(), ids=lambda p: p.name)
def test_string_abi_agrees_with_cxxfilt_on_every_symbol(lib):
    """What the demangled name says: std::__cxx11 / [abi:cxx11], or the old ::std::basic_string."""
    syms = sorted({name for name, _ in _elf.Elf.read(lib).symbols() if name.startswith("_Z")})
    demangled = subprocess.run([CXXFILT], input="\n".join(syms), capture_output=True, text=True, check=True).stdout
    old = re.compile(r"(?<!__cxx11::)\bbasic_string\b|std::w?string\b")
    wrong = []
    for sym, text in zip(syms, demangled.splitlines(), strict=True):
        truth = "cxx11" if "__cxx11::" in text or "[abi:cxx11]" in text else "pre-cxx11" if old.search(text) else None
        if _elf.string_abi(sym) != truth:
            wrong.append((sym, text, truth))
    assert len(syms) > 1000 and not wrong, wrong[:5]


# ---------------------------------------------------------------- real builds against torch's headers

# c10::Error(SourceLocation, std::string) takes a string; c10::Device::str() returns one (in the old ABI its
# mangled name says nothing about it). Both are exported by torch's libc10.
STRING_SRC = r"""
#include <string>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
extern "C" const char* fail(int ok) {
  try {
    if (!ok) throw c10::Error(c10::SourceLocation{__func__, __FILE__, 1u}, std::string("bad"));
  } catch (const c10::Error& e) { return e.what_without_backtrace(); }
  return "ok";
}
extern "C" unsigned long device_name_length(int index) { return c10::Device(c10::DeviceType::CPU, index).str().size(); }
"""
# torch's CPU allocator: a torch call with no std::string in or out
PLAIN_SRC = r"""
#include <c10/core/CPUAllocator.h>
extern "C" void* alloc(unsigned long n) { return c10::GetCPUAllocator()->raw_allocate(n); }
"""
TRUTH = {"cxx11": "cxx11", "pre-cxx11": "pre-cxx11", "plain": None}


@pytest.fixture(scope="module")
def torch_built(tmp_path_factory) -> dict[str, Path]:
    """Three libraries compiled for real against this venv's torch headers and linked to its libc10."""
    if GXX is None:
        pytest.skip("g++ not installed")
    pytest.importorskip("torch")
    from torch.utils.cpp_extension import include_paths

    tmp = tmp_path_factory.mktemp("torch-abi")
    out = {}
    for name, src, abi in (("cxx11", STRING_SRC, 1), ("pre-cxx11", STRING_SRC, 0), ("plain", PLAIN_SRC, 1)):
        (tmp / f"{name}.cpp").write_text(src)
        so = tmp / f"lib{name}.so"
        cmd = [GXX, "-std=c++20", "-O1", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        cmd += [f"-I{p}" for p in include_paths()] + [str(tmp / f"{name}.cpp"), f"-L{_torch_lib()}", "-lc10"]
        subprocess.run(["nice", *cmd, "-o", str(so)], check=True, capture_output=True, timeout=300)
        out[name] = so
    return out


def _farm_verdict(so: Path) -> str | None:
    """What builder.verifying.wheels' verifier says, from the labels it accepts."""
    accepts = set()
    for cxx11abi in (True, False):
        try:
            audit_cxx_abi(so, cxx11abi)
            accepts.add(cxx11abi)
        except VerificationError:
            pass
    return {frozenset({True}): "cxx11", frozenset({False}): "pre-cxx11", frozenset({True, False}): None}.get(
        frozenset(accepts), "mixed"
    )


def test_farm_and_doctor_give_the_same_abi_verdict_on_real_builds(torch_built, tmp_path):
    from test_doctor import EXT_SUFFIX, _doctor, _install

    site = _install(tmp_path / "site", None, None)
    for name, so in torch_built.items():
        shutil.copyfile(so, site / "mamba_ssm" / f"_probe_{name.replace('-', '_')}{EXT_SUFFIX}")
    doc = json.loads(_doctor(site, "--offline", "--json").stdout)  # the doctor as users run it
    by_doctor = {
        Path(e["path"]).name.split(".")[0].removeprefix("_probe_"): e["abi"]
        for e in doc["facts"]["mamba_ssm"]["extensions"]
    }
    for name, so in torch_built.items():
        assert by_doctor[name.replace("-", "_")] == _farm_verdict(so) == TRUTH[name], name


def test_the_pre_cxx11_build_really_fails_in_a_cxx11_torch(torch_built):
    """The verdict matters: loaded next to this (CXX11) torch, only the pre-CXX11 build misses symbols."""
    import torch

    assert torch._C._GLIBCXX_USE_CXX11_ABI
    code = (
        "import ctypes, json, sys, torch\n"
        "def load(p):\n"
        "    try:\n"
        "        ctypes.CDLL(p)\n"
        "    except OSError as e:\n"
        "        return str(e)\n"
        "print(json.dumps({p: load(p) for p in sys.argv[1:]}))\n"
    )
    paths = [str(so) for so in torch_built.values()]
    p = subprocess.run([sys.executable, "-c", code, *paths], check=True, capture_output=True, text=True, timeout=120)
    errors = json.loads(p.stdout)
    for name, so in torch_built.items():
        if name == "pre-cxx11":
            assert "undefined symbol: _ZN" in errors[str(so)]
        else:
            assert errors[str(so)] is None, errors[str(so)]


# ---------------------------------------------------------------- GPU code


def _offload_bundle(triples: list[str]) -> bytes:
    body = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(triples))
    for t in triples:
        body += struct.pack("<QQQ", 0, 0, len(t)) + t.encode()
    return body


def test_offload_bundle_targets():
    blob = _offload_bundle(
        ["host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx942"]
    ) + _offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx11-generic", "hip-amdgcn-amd-amdhsa-gfx906"])
    assert [(e.arch, e.target) for e in _elf.offload_bundles(blob)] == [
        ("gfx90a", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"),
        ("gfx942", "hipv4-amdgcn-amd-amdhsa--gfx942"),
        ("gfx11-generic", "hipv4-amdgcn-amd-amdhsa--gfx11-generic"),
        ("gfx906", "hip-amdgcn-amd-amdhsa-gfx906"),
    ]


def test_a_file_that_is_no_elf_is_named():
    with pytest.raises(_elf.NotAnElf, match="x.so: not an ELF file"):
        _elf.Elf(b"#!/bin/sh\n", "x.so")


@pytest.mark.parametrize(
    "path,module,kind,python",
    [
        ("mamba_ssm/_C.abi3.so", "mamba_ssm._C", "abi3", None),
        ("mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so", "mamba_ssm._C", "classic", "cp311"),
        ("mamba_ssm/ops/_k.cpython-313-aarch64-linux-gnu.so", "mamba_ssm.ops._k", "classic", "cp313"),
        ("selective_scan_cuda.so", "selective_scan_cuda", "plain", None),
    ],
)
def test_extension_names(path, module, kind, python):
    n = _elf.extension_name(path)
    assert (n.module, n.kind, n.python) == (module, kind, python)
    assert _elf.extension_name("mamba_ssm.libs/libgomp-a34b3233.so.1.0.0") is None


def test_two_builds_of_one_module_in_cpythons_import_order():
    names = [_elf.extension_name(p) for p in ("m/_C.abi3.so", "m/_C.cpython-311-x86_64-linux-gnu.so", "m/_D.abi3.so")]
    (dup,) = _elf.duplicate_modules(names).values()
    assert [n.path for n in dup] == ["m/_C.cpython-311-x86_64-linux-gnu.so", "m/_C.abi3.so"]


def test_the_reader_is_stdlib_only(tmp_path):
    """The doctor runs in broken environments: _elf imports neither torch, builder nor pyelftools."""
    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys; import mamba_ssm.elf\n"
        "print(sorted(m for m in ('torch', 'builder', 'elftools', 'packaging') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(root)}, cwd=tmp_path,
                       capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert p.stdout.strip() == "[]"


# --------------------------------------------------------------------------- malformed images


def _header(shoff: int, shnum: int, shstrndx: int, shentsize: int = 64) -> bytearray:
    h = bytearray(64)
    h[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", h, 0x12, 62)
    struct.pack_into("<Q", h, 0x28, shoff)
    struct.pack_into("<HHH", h, 0x3A, shentsize, shnum, shstrndx)
    return h


def _section(typ: int, off: int, size: int, link: int = 0, name: int = 0) -> bytes:
    return struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, size, link, 0, 0, 24)


@pytest.mark.parametrize(
    "image",
    [
        pytest.param(bytes(_header(64, 1, 5)) + _section(3, 0, 0), id="shstrndx-past-the-table"),  # IndexError
        pytest.param(bytes(_header(64, 2, 0)) + _section(3, 0, 0) + _section(11, 0, 24, link=9), id="symtab-link-past"),
        pytest.param(bytes(_header(60, 1, 0)), id="table-past-the-end"),
        pytest.param(b"\x7fELF\x02\x01", id="six-bytes"),
    ],
)
def test_a_malformed_elf_is_one_clear_error_never_an_index_or_struct_error(image):
    """Before: IndexError and struct.error escaped from these (and the doctor and the verifier crashed)."""
    with pytest.raises(_elf.NotAnElf):
        elf = _elf.Elf(image, "bad.so")
        elf.undefined_symbols()
        _elf.archs_in(elf)


def test_a_truncated_fatbin_or_offload_bundle_is_one_clear_error():
    with pytest.raises(_elf.NotAnElf):
        _elf._cuda_archs(struct.pack("<I", 0xBA55ED50) + b"\x01", _elf.Archs())
    with pytest.raises(_elf.NotAnElf):
        _elf.offload_bundles(b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", 3) + b"\x00" * 5)


def test_an_extension_path_that_is_a_fifo_or_a_device_is_refused_not_read(tmp_path):
    fifo = tmp_path / "x.so"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(_elf.NotAnElf, match="not a regular file"):
            _elf.Elf.read(path)
