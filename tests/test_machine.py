"""The architecture check: every ELF file in a wheel is built for the machine its platform tag names.

Upstream's state-spaces/mamba 891: an aarch64 wheel shipped an x86_64 ``.so``. Here the x86_64 file
is a real one (compiled with the host's g++); the aarch64 one is that same file with the AArch64
e_machine in its header, or, where the cross compiler is installed, a real aarch64-linux-gnu-gcc
build. The verifier (builder.verifying.wheels) and the doctor on the installed files give the same verdict,
both through mamba_ssm.elf.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_wheels import CPU_SPEC, NO_STRING_SRC, compile_so, needs_gxx, spec_for, wheel_with
from wheelmaker import V, _record_hash, make_wheel

from builder.errors import VerificationError
from builder.verifying.wheels import check_machine, verify_wheel
from mamba_ssm import elf as _elf

AARCH64_SPEC = spec_for(
    id="cpu-torch2.6-cxx11abiFALSE-cp311-linux_aarch64",
    accelerator="cpu",
    toolkit=None,
    variant="cpu-torch2.6-cxx11abiFALSE",
    label="cputorch2.6cxx11abiFALSE",
    platform="linux_aarch64",
    manylinux="manylinux_2_28_aarch64",
)


@pytest.fixture(scope="module")
def elves(tmp_path_factory) -> dict[str, Path]:
    """A real x86_64 shared object and an aarch64 one."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    tmp = tmp_path_factory.mktemp("elves")
    x86 = compile_so(tmp, "x86", NO_STRING_SRC)
    arm = tmp / "arm.so"
    cross = shutil.which("aarch64-linux-gnu-gcc")
    if cross:
        (tmp / "arm.c").write_text("int twice(int x) { return 2 * x; }\n")
        subprocess.run([cross, "-shared", "-fPIC", "-o", str(arm), str(tmp / "arm.c")], check=True)
    else:
        data = bytearray(x86.read_bytes())
        struct.pack_into("<H", data, 0x12, 183)  # EM_AARCH64
        arm.write_bytes(bytes(data))
    return {"x86_64": x86, "aarch64": arm}


@needs_gxx
def test_the_reader_names_each_machine(elves):
    assert _elf.machine_of(elves["x86_64"].read_bytes()[:20]) == "x86_64"
    assert _elf.machine_of(elves["aarch64"].read_bytes()[:20]) == "aarch64"
    assert _elf.machine_of(b"#!/bin/sh\n" + b"\0" * 20) is None
    assert _elf.machine_of(b"\x7fELF") is None  # too short to say
    big_endian = b"\x7fELF\x02\x02\x01" + b"\0" * 11 + struct.pack(">H", 22)
    assert _elf.machine_of(big_endian) == "s390x"
    assert _elf.tag_machine("manylinux_2_28_aarch64") == "aarch64"
    assert _elf.tag_machine("linux_x86_64") == "x86_64"
    assert _elf.tag_machine("any") is None


@needs_gxx
def test_an_aarch64_wheel_holding_an_x86_64_library_is_refused(elves, tmp_path):
    """The upstream 891 case: the file, its machine and the tag are named."""
    whl = wheel_with(tmp_path, elves["x86_64"], AARCH64_SPEC)
    member = "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so"
    with pytest.raises(VerificationError) as exc:
        verify_wheel(whl, AARCH64_SPEC, workdir=tmp_path / "work").wheel
    assert f"{member} is x86_64 code, but the wheel is tagged linux_aarch64 (aarch64)" in str(exc.value)
    assert "aarch64 host" in exc.value.hint
    # the same wheel with an aarch64 build passes this check (and only this one is asked here)
    good = wheel_with(tmp_path / "good", elves["aarch64"], AARCH64_SPEC)
    check_machine(good, "linux_aarch64")


@needs_gxx
def test_a_mixed_wheel_is_refused_naming_only_the_foreign_file(elves, tmp_path):
    """An x86_64 wheel whose grafted library is aarch64: its own extension is fine, the graft is named."""
    so = elves["x86_64"].read_bytes()
    files = {
        "mamba_ssm/__init__.py": b"",
        "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so": so,
        "mamba_ssm.libs/libfoo-12345678.so.1": elves["aarch64"].read_bytes(),
        "mamba_ssm/data.bin": b"\x7fELF" + b"\0" * 40,  # claims ELF but names no machine of ours: e_machine 0
    }
    whl = make_wheel(tmp_path, "mamba-ssm", f"{V}+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     requires=("torch==2.6.*",), files=files)  # fmt: skip
    with pytest.raises(VerificationError) as exc:
        check_machine(whl, "linux_x86_64")
    msg = str(exc.value)
    assert "mamba_ssm.libs/libfoo-12345678.so.1 is aarch64 code" in msg and "tagged linux_x86_64 (x86_64)" in msg
    assert "_C.cpython-311" not in msg
    assert "mamba_ssm/data.bin is e_machine 0 code" in msg
    # device code (a cubin, EM_CUDA) belongs to no host machine and is left alone
    cubin = bytearray(so[:64])
    struct.pack_into("<H", cubin, 0x12, 190)
    whl = make_wheel(tmp_path / "cubin", "mamba-ssm", f"{V}+{CPU_SPEC.label}", "cp311-cp311-linux_x86_64",
                     requires=("torch==2.6.*",), files={"mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so": so,
                                                        "mamba_ssm/kernels.cubin": bytes(cubin)})  # fmt: skip
    check_machine(whl, "linux_x86_64")


def _site_with(site: Path, files: dict[str, bytes], tag: str) -> Path:
    """An installed mamba-ssm (this checkout's Python files plus FILES) with a WHEEL and a RECORD, as pip leaves it."""
    shutil.copytree(REPO / "mamba_ssm", site / "mamba_ssm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"mamba_ssm-{V}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: {V}\n")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
    record = [f"{p.relative_to(site).as_posix()},{_record_hash(p.read_bytes())},{p.stat().st_size}"
              for p in sorted((site / "mamba_ssm").rglob("*")) if p.is_file()]  # fmt: skip
    (info / "RECORD").write_text("\n".join([*record, f"mamba_ssm-{V}.dist-info/RECORD,,"]) + "\n")
    return site


def _machine_findings(site: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in {"MAMBA_WHEEL_INDEX", "PYTHONPATH"}}
    env["PYTHONPATH"] = str(site)
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--offline", "--json"], cwd=site, env=env, check=False,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    doc = json.loads(p.stdout)
    return [f for f in doc["findings"] if f["check"] == "machine"], p.returncode


@needs_gxx
def test_the_doctor_gives_the_same_verdict_on_the_installed_files(elves, tmp_path):
    member = "mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so"
    # an aarch64 wheel that carried an x86_64 library, installed (on this x86_64 host: the tag is the judge)
    site = _site_with(tmp_path / "mixed", {member: elves["x86_64"].read_bytes()}, "cp311-cp311-linux_aarch64")
    found, code = _machine_findings(site)
    assert code != 0
    assert [f["verdict"] for f in found] == ["problem"], found
    assert f"{member} is x86_64 code, but the installed wheel is tagged cp311-cp311-linux_aarch64 (aarch64)" in found[0]["title"]
    # an aarch64 library in a wheel tagged for this x86_64 host: named against the tag
    site = _site_with(tmp_path / "arm", {member: elves["aarch64"].read_bytes()}, "cp311-cp311-linux_x86_64")
    found, _ = _machine_findings(site)
    assert [f["verdict"] for f in found] == ["problem"]
    assert f"{member} is aarch64 code, but the installed wheel is tagged cp311-cp311-linux_x86_64 (x86_64)" in found[0]["title"]
    # files and tag agree: ok
    site = _site_with(tmp_path / "ok", {member: elves["x86_64"].read_bytes()}, "cp311-cp311-linux_x86_64")
    found, _ = _machine_findings(site)
    assert [(f["verdict"], f["title"]) for f in found] == [("ok", "1 compiled file(s), all built for x86_64")]


def test_one_index_serves_each_machine_its_own_wheel(tmp_path):
    """The release publishes x86_64 and aarch64 wheels of one cell into one index: both are listed on the
    variant's page (pip takes the one whose tag fits), resolve names the one for the asker's machine,
    and the coverage page has a row per machine."""
    import dataclasses
    import re

    from wheelmaker import make_mamba_wheel

    from builder.publishing.index.generation import build_index
    from builder.publishing.resolve import resolve
    from mamba_ssm import variant as _variant

    wheels = tmp_path / "wheels"
    x86 = make_mamba_wheel(wheels, "cputorchstable", "cp310", platform="linux_x86_64")
    arm = make_mamba_wheel(wheels, "cputorchstable", "cp310", platform="manylinux_2_28_aarch64")
    out = tmp_path / "index"
    build_index(wheels, out)
    page = (out / "cpu-torchstable-abi3" / "index.html").read_text()
    assert x86.name in page and arm.name in page
    doc = json.loads((out / "manifest.json").read_text())
    for platform, want in (("linux_aarch64", arm.name), ("linux_x86_64", x86.name)):
        v = _variant.from_values("2.10.0", cxx11abi=True, python="cp311")
        got = resolve(doc, dataclasses.replace(v, platform=platform))
        assert got.filename == want, (platform, got.filename)
    html = (out / "index.html").read_text()
    assert len(re.findall(r'<tr data-torch="stable" data-accelerator="cpu"( data-machine="aarch64")?>', html)) == 2
    assert re.search(r"CPU[^<]* · aarch64</th>", html)


def test_emulation_is_refused_with_the_reason(tmp_path):
    """What binfmt_misc says, in the words the farm refuses a linux_aarch64 build with."""
    from builder.building import emulation
    from builder.errors import EngineUnavailable
    from builder.facts.hostenv import host_machine

    if host_machine() != "x86_64":
        pytest.skip("the emulation rules are for an x86_64 host")
    b = tmp_path / "binfmt_misc"
    b.mkdir()
    assert emulation.unavailable("aarch64", b) == f"binfmt_misc is not mounted at {b}"
    (b / "register").write_text("")
    assert emulation.unavailable("aarch64", b) == "no qemu-aarch64 is registered with binfmt_misc"
    entry = b / "qemu-aarch64"
    entry.write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\n")
    assert emulation.unavailable("aarch64", b) == "qemu-aarch64 is registered with binfmt_misc but disabled"
    entry.write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: \n")
    assert "without the F (fix-binary) flag" in emulation.unavailable("aarch64", b)
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\noffset 0\n")
    assert emulation.unavailable("aarch64", b) is None
    assert emulation.unavailable("x86_64", tmp_path / "nowhere") is None  # the host's own machine
    entry.unlink()
    with pytest.raises(EngineUnavailable) as exc:
        emulation.require("aarch64", "image cpu-aarch64-x", b)
    assert str(exc.value) == (
        "image cpu-aarch64-x needs aarch64, but this host is x86_64 and cannot emulate it: "
        "no qemu-aarch64 is registered with binfmt_misc"
    )
    assert "bootstrap-host.sh" in exc.value.hint and exc.value.exit_code == 3


def test_the_host_executor_refuses_another_machine_without_a_traceback(tmp_path, cli):
    from builder.facts.hostenv import host_machine

    if host_machine() != "x86_64":
        pytest.skip("needs an x86_64 host")
    p = cli("build", "--profile", "ci-aarch64", "--executor", "host", "--dist", tmp_path, timeout=300)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "cpu-torchstable-abi3-cp311-linux_aarch64: the host executor builds with this x86_64 host's toolchain" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="no aarch64 cross compiler (gcc-aarch64-linux-gnu)")
def test_a_real_aarch64_wheel_is_repaired_and_tagged_on_this_host(elves, tmp_path):
    """auditwheel's --plat lists only this host's machine: the verifier repairs another machine's wheel with
    auto and tags it with the spec's policy."""
    whl = wheel_with(tmp_path, elves["aarch64"], AARCH64_SPEC)
    final = verify_wheel(whl, AARCH64_SPEC, workdir=tmp_path / "work").wheel
    assert final.name.endswith("-cp311-cp311-manylinux_2_28_aarch64.whl"), final.name
    check_machine(final, "manylinux_2_28_aarch64")
