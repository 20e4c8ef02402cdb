"""mamba_ssm.prebuilt: find, download and verify the variant's wheel from a real index (builder.publishing.index)
served on 127.0.0.1; every failure is one line and a source build, never an exception."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO
from indexkit import serve
from wheelmaker import V as OURS, make_mamba_wheel

from builder.publishing.index import build_index
from mamba_ssm import prebuilt as P
from mamba_ssm import variant as V

PY, PLAT = "cp311", "linux_x86_64"
CPU = V.from_values("2.13.0+cpu", cxx11abi=True, python=PY, platform=PLAT)
CU13 = V.from_values("2.14.1", cuda="13.0", cxx11abi=True, python=PY, platform=PLAT)
NGC = V.from_values("2.5.0a0+e000cf0ad9.nv24.10", cuda="12.6", python=PY, platform=PLAT)
KW = {"machine": "x86_64", "glibc": (2, 36)}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("idx")
    wheels = root / "wheels"
    for label in ("cputorch2.13cxx11abiTRUE", "cu12torch2.5cxx11abiTRUE", "cu12torch2.5cxx11abiFALSE"):
        make_mamba_wheel(wheels, label, PY)
    make_mamba_wheel(wheels, "cu13torchstable", "cp310", platform="manylinux_2_28_x86_64")
    make_mamba_wheel(wheels, "cputorch2.13cxx11abiTRUE", "cp311", version="2.2.0")  # an older release: never picked
    build_index(wheels, root / "index")
    return root / "index"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_finds_downloads_and_verifies_the_variant_wheel_over_http(index, tmp_path):
    with serve(index) as url:
        out = P.find_prebuilt(CPU, OURS, tmp_path / "dl", index_url=url, env={}, **KW)
    assert out.status == "found", out.line
    assert out.wheel.name == f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    assert _sha(out.wheel) == _sha(index / "files" / out.wheel.name) == out.link.sha256
    assert "sha256 verified" in out.line and "\n" not in out.line
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == [out.wheel.name]  # no partial files left


def test_the_local_label_of_setup_py_does_not_matter_only_the_public_version(index, tmp_path):
    out = P.find_prebuilt(CPU, f"{OURS}+cputorch2.13cxx11abiTRUE", tmp_path, index_url=str(index), env={}, **KW)
    assert out.status == "found" and f"{OURS}+" in out.wheel.name


def test_a_stable_abi_wheel_serves_a_torch_with_no_page_of_its_own(index, tmp_path):
    out = P.find_prebuilt(CU13, OURS, tmp_path, index_url=str(index), env={}, **KW)
    assert out.status == "found", out.line
    assert out.wheel.name == f"mamba_ssm-{OURS}+cu13torchstable-cp310-abi3-manylinux_2_28_x86_64.whl"
    old_glibc = P.find_prebuilt(CU13, OURS, tmp_path / "x", index_url=str(index), env={}, machine="x86_64", glibc=(2, 17))
    assert old_glibc.status == "no-match"  # manylinux_2_28 does not run on glibc 2.17


def test_ngc_torch_maps_to_the_cxx11_wheel(index, tmp_path):
    assert NGC.key == "cu12-torch2.5-cxx11abiTRUE"
    out = P.find_prebuilt(NGC, OURS, tmp_path, index_url=str(index), env={}, **KW)
    assert out.status == "found" and "+cu12torch2.5cxx11abiTRUE-" in out.wheel.name


def test_ngc_end_to_end_through_the_setup_entry_point(index, tmp_path):
    """As setup.py runs it: _prebuilt loaded by path, variant detected from an NGC-style torch."""
    fake = tmp_path / "faketorch" / "torch"
    fake.mkdir(parents=True)
    # NGC's torch reports a 2.5 pre-release with an .nv suffix; no _C ABI flag, so naming alone must get it right.
    (fake / "__init__.py").write_text("__version__ = '2.5.0a0+e000cf0ad9.nv24.10'\nfrom . import version\n")
    (fake / "version.py").write_text("cuda = '12.6'\nhip = None\n")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("_prebuilt", {str(REPO / "mamba_ssm" / "prebuilt.py")!r})
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        path = mod.for_setup({OURS!r}, sys.argv[1])
        print("WHEEL", path.name if path else None)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(fake.parent), "MAMBA_WHEEL_INDEX": str(index), "NVIDIA_PYTORCH_VERSION": "24.10"}
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the index holds cp311 wheels")
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path / "dl")], env=env, capture_output=True, text=True, timeout=60)
    assert f"WHEEL mamba_ssm-{OURS}+cu12torch2.5cxx11abiTRUE-cp311-cp311-linux_x86_64.whl" in p.stdout, p.stderr
    assert p.stderr.count("\n") == 1 and "using prebuilt wheel" in p.stderr


def test_tampered_entry_is_refused_with_one_line(index, tmp_path):
    import shutil

    tampered = tmp_path / "index"
    shutil.copytree(index, tampered)  # symlinks followed: a static host's view of the index
    # The wheel was replaced after indexing; the page still advertises the original's sha256.
    wheel = tampered / "files" / f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    with serve(tampered) as url:
        out = P.find_prebuilt(CPU, OURS, tmp_path / "dl", index_url=url, env={}, **KW)
    assert out.status == "hash-mismatch" and out.wheel is None
    assert out.line.startswith("mamba-ssm: sha256 mismatch") and "building from source" in out.line
    assert not list((tmp_path / "dl").iterdir())  # the bad download is gone


def test_no_match_names_the_variant(index, tmp_path):
    other = V.from_values("2.7.1+cu128", cuda="12.8", python=PY, platform=PLAT)
    out = P.find_prebuilt(other, OURS, tmp_path, index_url=str(index), env={}, **KW)
    assert out.status == "no-match" and "cu12-torch2.7-cxx11abiTRUE" in out.line and "building from source" in out.line


def test_unreachable_index_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: connection refused
    out = P.find_prebuilt(CPU, OURS, tmp_path, index_url=f"http://127.0.0.1:{port}", env={}, **KW)
    assert out.status == "unreachable" and out.line.startswith("mamba-ssm: cannot reach the wheel index")


def test_plain_http_is_refused_unless_loopback_or_allowed(tmp_path):
    out = P.find_prebuilt(CPU, OURS, tmp_path, index_url="http://wheels.example.org/idx", env={}, **KW)
    assert out.status == "refused" and "MAMBA_ALLOW_HTTP=TRUE" in out.line
    allowed = P.find_prebuilt(CPU, OURS, tmp_path, index_url="http://0.0.0.0:9/idx", env={"MAMBA_ALLOW_HTTP": "TRUE"}, **KW)
    assert allowed.status == "unreachable"  # allowed to try; nothing listens there
    assert P.check_url("http://[::1]:8000/x", {}) is None and P.check_url("http://localhost/x", {}) is None
    assert P.find_prebuilt(CPU, OURS, tmp_path, index_url="ftp://x/y", env={}, **KW).status == "refused"


def test_force_build_skips_the_lookup(tmp_path):
    out = P.find_prebuilt(CPU, OURS, tmp_path, index_url="http://wheels.example.org", env={"MAMBA_FORCE_BUILD": "TRUE"})
    assert out.status == "skipped" and "MAMBA_FORCE_BUILD=TRUE" in out.line


def test_the_default_index_is_set_in_one_place():
    hits = subprocess.run(["grep", "-rn", P.DEFAULT_INDEX_URL, str(REPO / "mamba_ssm"), str(REPO / "setup.py")], capture_output=True, text=True)
    files = {line.split(":")[0] for line in hits.stdout.splitlines() if not line.split(":")[0].endswith(".pyc")}
    assert files == {str(REPO / "mamba_ssm" / "prebuilt.py")}


def _prebuilt_copy(folder: Path, stamp: str | None):
    """prebuilt.py as an unpacked sdist holds it (setup.py loads it by path), with the release's stamp or not."""
    import importlib.util

    folder.mkdir(parents=True)
    for name in ("prebuilt.py", "variant.py", "guard.py"):
        (folder / name).write_text((REPO / "mamba_ssm" / name).read_text())
    if stamp is not None:
        (folder / P.INDEX_STAMP).write_text(stamp)
    spec = importlib.util.spec_from_file_location(f"_prebuilt_{folder.name}", folder / "prebuilt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_release_sdist_looks_in_the_index_it_names(tmp_path):
    """release.yml's sdist job stamps the index that the same release deploys: the sdist's lookup goes there
    (the hard-coded default may not be the publisher's site at all); MAMBA_WHEEL_INDEX still wins."""
    stamped = _prebuilt_copy(tmp_path / "stamped", "https://octo.github.io/wheels\n")
    assert stamped.default_index_url() == "https://octo.github.io/wheels"
    out = stamped.lookup(CPU, OURS, env={}, timeout=0.01, **KW)
    assert out.tried[0].startswith("https://octo.github.io/wheels/"), out.tried
    out = stamped.lookup(CPU, OURS, env={"MAMBA_WHEEL_INDEX": str(tmp_path / "none")}, **KW)
    assert out.status == "no-match" and str(tmp_path / "none") in out.line
    for i, bad in enumerate(("", "file:///etc", "https://x y", None)):
        assert _prebuilt_copy(tmp_path / f"bad{i}", bad).default_index_url() == P.DEFAULT_INDEX_URL


def test_the_sdist_carries_the_stamp(tmp_path):
    """MANIFEST.in takes the stamp into the sdist (the release job checks it too, naming the URL)."""
    assert "include mamba_ssm/_index_url.txt" in (REPO / "MANIFEST.in").read_text().splitlines()


@pytest.mark.parametrize(
    ("filename", "ok"),
    [
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", True),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp312-cp312-linux_x86_64.whl", False),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-manylinux_2_39_x86_64.whl", False),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_aarch64.whl", False),
        (f"mamba_ssm-{OURS}+cputorch2.13cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", False),
        ("mamba_ssm-2.3.1+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", False),
        (f"mamba_ssm-{OURS}+cputorchstable-cp310-abi3-linux_x86_64.whl", True),
        (f"mamba_ssm-{OURS}+cputorchstable-cp312-abi3-linux_x86_64.whl", False),
        ("not-a-wheel.tar.gz", False),
    ],
)
def test_selection_rules(filename, ok):
    link = P.Link(url=f"https://x/{filename}", filename=filename, sha256="0" * 64)
    assert (P._pick([link], CPU, OURS, "x86_64", (2, 36)) is not None) is ok


def test_outcome_lines_are_single_lines_for_json_logs():
    o = P.Outcome("no-match", "mamba-ssm: x")
    assert json.dumps(o.line).count("\\n") == 0


# ---------------------------------------------------------------- through pip, from the sdist

from sdistkit import (
    COMPILE_MARK,
    PREBUILT_MARK,
    base_env,
    build_wheel,
    checked,
    install_sdist,
    installed_extension,
    make_sdist,
    run,
    torch_venv,
    wheel_member,
)


def _public_version() -> str:
    import re

    return re.search(r'__version__\s*=\s*"([^"]+)"', (REPO / "mamba_ssm" / "__init__.py").read_text()).group(1)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    return make_sdist(tmp_path_factory.mktemp("sdist"))


def test_pip_install_of_the_sdist_ships_the_indexed_wheel_without_compiling(sdist, tmp_path):
    """Real pip, real setup.py, real index on 127.0.0.1; the wheel's payload is a marker so the test stays fast."""
    import sysconfig

    from wheelmaker import make_wheel

    pytest.importorskip("torch")
    want = V.detect()
    ext = f"mamba_ssm/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    payload = os.urandom(1 << 16)
    make_wheel(tmp_path / "wheels", "mamba-ssm", f"{_public_version()}+{want.label}", f"{want.python}-{want.python}-{want.platform}",
               files={ext: payload, "mamba_ssm/__init__.py": b"__version__ = '0.3.0'\n"})  # fmt: skip
    build_index(tmp_path / "wheels", tmp_path / "index")
    with serve(tmp_path / "index") as url:
        proc = checked(run([sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps", "--no-cache-dir",
                            "--target", tmp_path / "site", sdist], env=base_env(MAMBA_WHEEL_INDEX=url)))  # fmt: skip
    out = proc.stdout + proc.stderr
    assert PREBUILT_MARK in out and COMPILE_MARK not in out
    assert (tmp_path / "site" / ext).read_bytes() == payload


@pytest.mark.slow
def test_sdist_end_to_end_prebuilt_vs_source_and_a_tampered_index(sdist, tmp_path):
    """The real CPU wheel (built by setup.py, indexed by builder.publishing.index) installs from the sdist byte for byte;
    a tampered entry builds from source and says why. Times go to /tmp/mamba-ssm-prebuilt-e2e.json."""
    import shutil

    wheel, wheel_build_s = build_wheel(sdist, tmp_path / "wheels")
    build_index(tmp_path / "wheels", tmp_path / "index")
    py = torch_venv(tmp_path / "venv")

    with serve(tmp_path / "index") as url:
        proc, prebuilt_s = install_sdist(py, sdist, MAMBA_WHEEL_INDEX=url)
    out = proc.stdout + proc.stderr
    assert PREBUILT_MARK in out and "sha256 verified" in out and COMPILE_MARK not in out
    so = installed_extension(py)
    assert so.read_bytes() == wheel_member(wheel, ".so")
    checked(run([py, "-c", "import torch, mamba_ssm._C"]))

    tampered = tmp_path / "tampered"
    shutil.copytree(tmp_path / "index", tampered)
    target = tampered / "files" / wheel.name
    target.write_bytes(target.read_bytes() + b"\0")
    with serve(tampered) as url:
        proc, source_s = install_sdist(py, sdist, MAMBA_WHEEL_INDEX=url)
    out = proc.stdout + proc.stderr
    assert f"mamba-ssm: sha256 mismatch for {wheel.name}" in out and "building from source" in out
    assert COMPILE_MARK in out
    checked(run([py, "-c", "import torch, mamba_ssm._C"]))

    record = {"variant": V.detect().key, "prebuilt_install_s": round(prebuilt_s, 2), "source_install_s": round(source_s, 2),
              "speedup": round(source_s / prebuilt_s, 1), "wheel_build_s": round(wheel_build_s, 2)}  # fmt: skip
    Path("/tmp/mamba-ssm-prebuilt-e2e.json").write_text(json.dumps(record, indent=1) + "\n")
    print("prebuilt vs source install:", record)


def test_a_redirect_to_plain_http_is_refused(tmp_path):
    import http.server
    import threading

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            self.send_response(302)
            self.send_header("Location", "http://wheels.example.org/cpu-torch2.13-cxx11abiTRUE/index.html")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = P.find_prebuilt(CPU, OURS, tmp_path, index_url=f"http://127.0.0.1:{server.server_address[1]}", env={}, **KW)
    finally:
        server.shutdown()
        server.server_close()
    assert out.status == "unreachable" and "refusing plain-http http://wheels.example.org" in out.line


def test_a_lower_case_label_from_setuptools_is_found(tmp_path):
    """setuptools writes ...cxx11abitrue...; the index keeps it, the lookup must still match it."""
    make_mamba_wheel(tmp_path / "wheels", "cputorch2.13cxx11abitrue", PY)
    build_index(tmp_path / "wheels", tmp_path / "index")
    out = P.find_prebuilt(CPU, OURS, tmp_path / "dl", index_url=str(tmp_path / "index"), env={}, **KW)
    assert out.status == "found", out.line


def test_a_cuda_torch_without_nvcc_or_a_compiler_gets_its_prebuilt_wheel(sdist, tmp_path):
    """The user the prebuilt path exists for: torch 2.14.1 (CUDA 13), no CUDA toolkit, no C++ compiler.

    Real pip, real setup.py, real index on 127.0.0.1; the wheel's payload is a marker. setup.py reads
    torch's files and never imports it (PYTHONPROFILEIMPORTTIME lists every import of pip's setup.py runs).
    """
    import sysconfig

    import cudakit
    from wheelmaker import make_wheel

    venv = cudakit.torch_cuda_venv()
    want = V.from_values("2.14.1", cuda="13.0", cxx11abi=True, python="cp311", platform=V.platform_tag())
    ext = f"mamba_ssm/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    payload = os.urandom(1 << 16)
    make_wheel(tmp_path / "wheels", "mamba-ssm", f"{_public_version()}+{want.label}", f"cp311-cp311-{want.platform}",
               files={ext: payload, "mamba_ssm/__init__.py": b"__version__ = '0.3.0'\n"})  # fmt: skip
    build_index(tmp_path / "wheels", tmp_path / "index")
    no_toolchain = {"CUDA_HOME": str(tmp_path / "no-cuda"), "CXX": str(tmp_path / "no-cxx" / "g++"), "PATH": "/usr/bin:/bin"}
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-v", "--no-build-isolation",
           "--no-deps", "--no-cache-dir", "--target", tmp_path / "site", sdist]  # fmt: skip
    with serve(tmp_path / "index") as url:
        proc = checked(run(pip, env=base_env(MAMBA_WHEEL_INDEX=url, PYTHONPROFILEIMPORTTIME="1", **no_toolchain)))
        out = proc.stdout + proc.stderr
        assert PREBUILT_MARK in out and f"+{want.label.lower()}-" in out.lower() and COMPILE_MARK not in out
        assert (tmp_path / "site" / ext).read_bytes() == payload
        imports = re.findall(r"^\s*import time:.*\|\s*(\S+)$", out, flags=re.MULTILINE)
        assert any(m.startswith("setuptools.") for m in imports)  # the backend's imports are in the log...
        assert not [m for m in imports if m.split(".")[0] == "torch"]  # ...and torch is not among them

        # the same machine asked to compile: one clear error naming the missing toolchain, nothing installed
        proc = run([*pip[:-2], tmp_path / "site2", sdist], env=base_env(MAMBA_WHEEL_INDEX=url, MAMBA_FORCE_BUILD="TRUE", **no_toolchain))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "mamba-ssm build error:" in out and "How to fix:" in out, out[-3000:]
    assert not (tmp_path / "site2" / "mamba_ssm").exists()
