"""``python -m mamba_ssm.doctor`` on real installs: healthy, built for the other C++ ABI, no extension, no torch.

The "other ABI" install is made for real: a small extension that passes a std::string across the torch
API (it constructs a c10::Error), compiled with -D_GLIBCXX_USE_CXX11_ABI=0 against torch 2.13 (a CXX11
torch). Importing it fails with the undefined pre-CXX11 symbol users see; the doctor must say so and
print the reinstall line for the cxx11abiTRUE wheel, found in a real index built by builder.publishing.index.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO
from wheelmaker import V

from mamba_ssm import elf as _elf
from mamba_ssm import variant as _variant
from mamba_ssm.doctor.lines import LINES as _LINES

LINES_PROJECTS = {line: v["projects"] for line, v in _LINES.items()}

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
WANT = _variant.detect()  # cpu-torch2.13-cxx11abiTRUE in the dev venv

PROBE_CPP = r"""
#include <Python.h>
#include <string>
#include <c10/util/Exception.h>

// c10::Error(SourceLocation, std::string): its mangled name carries the std::string type, so the
// object needs torch to export the constructor in the C++ ABI this file was compiled with.
static PyObject* probe(PyObject*, PyObject*) {
  try {
    throw c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, std::string("probe"));
  } catch (const c10::Error& e) {
    return PyUnicode_FromString(e.what_without_backtrace());
  }
}
static PyMethodDef methods[] = {{"probe", probe, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
"""


def _compile(out: Path, cxx11abi: bool) -> Path:
    torch_dir = Path(torch.__file__).parent
    src = out / "probe.cpp"
    src.write_text(PROBE_CPP)
    so = out / f"_C_abi{int(cxx11abi)}{EXT_SUFFIX}"
    cmd = [
        os.environ.get("CXX", "g++"), "-std=c++20", "-O0", "-shared", "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(cxx11abi)}",
        f"-I{torch_dir / 'include'}", f"-I{sysconfig.get_paths()['include']}",
        str(src), f"-L{torch_dir / 'lib'}", "-lc10", "-o", str(so),
    ]  # fmt: skip
    subprocess.run(["nice", *cmd], check=True, capture_output=True, timeout=300)
    return so


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[bool, Path]:
    out = tmp_path_factory.mktemp("probes")
    return {abi: _compile(out, abi) for abi in (False, True)}


def _install(site: Path, so: Path | None, label: str | None) -> Path:
    """A site dir holding mamba_ssm (this checkout's Python files), an extension and a dist-info."""
    shutil.copytree(REPO / "mamba_ssm", site / "mamba_ssm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    if so is not None:
        shutil.copyfile(so, site / "mamba_ssm" / f"_C{EXT_SUFFIX}")
    version = V + (f"+{label}" if label else "")
    info = site / f"mamba_ssm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: {version}\n")
    return site


def _doctor(site: Path, *args: str, python: str = sys.executable, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in {"MAMBA_WHEEL_INDEX", "PYTHONPATH"}}
    e.update(env or {})
    e["PYTHONPATH"] = str(site)
    return subprocess.run([python, "-m", "mamba_ssm.doctor", *args], cwd=site, env=e, capture_output=True, text=True, timeout=300)


def test_the_probe_really_reproduces_the_abi_failure(probes):
    """Not a mock: the pre-CXX11 build names std::string as Ss and torch 2.13 lacks that symbol."""
    assert torch._C._GLIBCXX_USE_CXX11_ABI
    assert _elf.extension_abi(probes[False]) == "pre-cxx11"
    assert _elf.extension_abi(probes[True]) == "cxx11"
    code = "import torch, importlib.util as u, sys; s=u.spec_from_file_location('_C', sys.argv[1]); m=u.module_from_spec(s); print(m.probe())"
    bad = subprocess.run([sys.executable, "-c", code, str(probes[False])], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "undefined symbol: _ZN3c105ErrorC1ENS_14SourceLocationESs" in bad.stderr
    good = subprocess.run([sys.executable, "-c", code, str(probes[True])], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and "probe" in good.stdout


def test_healthy_install_exits_0(tmp_path, probes):
    site = _install(tmp_path / "site", probes[True], WANT.label)
    p = _doctor(site, "--offline", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert doc["healthy"] is True
    ext = doc["facts"]["mamba_ssm"]["extensions"][0]
    assert ext["import"]["ok"] and ext["abi"] == "cxx11" and ext["archs"] == {"sass": [], "ptx": [], "hip": [], "notes": []}
    assert doc["facts"]["mamba_ssm"]["label"] == WANT.label
    assert doc["facts"]["torch"]["variant"]["key"] == WANT.key


def test_other_abi_install_is_diagnosed_with_the_exact_fix(tmp_path, probes):
    from wheelmaker import make_mamba_wheel

    from builder.publishing.index import build_index

    wheels = tmp_path / "wheels"
    make_mamba_wheel(wheels, WANT.label, WANT.python, platform=WANT.platform)
    build_index(wheels, tmp_path / "index")
    wrong = WANT.label.replace("cxx11abiTRUE", "cxx11abiFALSE")
    site = _install(tmp_path / "site", probes[False], wrong)

    p = _doctor(site, "--json", "--index", str(tmp_path / "index"))
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["wheel_available"] is True
    by_check = {f["check"]: f for f in doc["findings"] if f["verdict"] == "problem"}
    ext = by_check["extension"]
    assert ext["kind"] == "cxx11-abi-mismatch"
    assert "_ZN3c105ErrorC1ENS_14SourceLocationESs" in ext["detail"]
    index_url = (tmp_path / "index").absolute().as_uri()
    # torch pinned as pip sees it (kept, or pip stops), the wheel's dependencies installed: no --force-reinstall --no-deps
    fix = f'-m pip install torch=={importlib.metadata.version("torch")} mamba-ssm=={V}+{WANT.label} --extra-index-url {index_url}/{WANT.key}/'
    assert ext["fix"].endswith(fix)
    assert by_check["label"]["kind"] == "variant-mismatch" and by_check["label"]["fix"].endswith(fix)

    text = _doctor(site, "--index", str(tmp_path / "index")).stdout
    assert "C++ ABI mismatch" in text and "pre-CXX11" in text and fix in text


def test_the_fix_pins_the_stable_wheel_when_that_is_what_the_index_serves(tmp_path, probes):
    """The default plan serves torch >= the stable floor with the stable-ABI wheel only: an index holding just
    that wheel must get a fix that pins it (a pin of the classic label matches nothing there), and real pip
    must find what the fix names."""
    from wheelmaker import make_mamba_wheel

    from builder.publishing.index import build_index

    stable = WANT.as_stable().label
    make_mamba_wheel(tmp_path / "wheels", stable, "cp310", platform=WANT.platform)
    build_index(tmp_path / "wheels", tmp_path / "index")
    site = _install(tmp_path / "site", probes[False], WANT.label.replace("cxx11abiTRUE", "cxx11abiFALSE"))

    doc = json.loads(_doctor(site, "--json", "--index", str(tmp_path / "index")).stdout)
    assert doc["wheel_available"] is True
    (label,) = [f for f in doc["findings"] if f["check"] == "label" and f["verdict"] == "problem"]
    assert f"mamba-ssm=={V}+{stable} --extra-index-url" in label["fix"], label["fix"]
    assert label["fix"].endswith(f"/{WANT.as_stable().key}/")  # no sidecar here: only its own page lists it
    req, url = re.search(r"(mamba-ssm==\S+) --extra-index-url (\S+)", label["fix"]).groups()
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--isolated", "--index-url", url, "-d", str(tmp_path / "dl"), req],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name.split("-")[1] for p in (tmp_path / "dl").glob("*.whl")] == [f"{V}+{stable}"]


def test_a_stale_module_next_to_the_stable_one_is_a_failure(tmp_path, probes):
    """The bar's contaminated stable wheel, installed: _C.abi3.so and a stale classic _C.cpython-3XY...so."""
    from wheelmaker import make_mamba_wheel

    from builder.publishing.index import build_index

    make_mamba_wheel(tmp_path / "wheels", WANT.as_stable().label, "cp310", platform=WANT.platform)
    make_mamba_wheel(tmp_path / "wheels", WANT.label, WANT.python, platform=WANT.platform)
    build_index(tmp_path / "wheels", tmp_path / "index")
    site = _install(tmp_path / "site", probes[True], WANT.as_stable().label)  # the stale classic build
    shutil.copyfile(probes[True], site / "mamba_ssm" / "_C.abi3.so")

    p = _doctor(site, "--json", "--index", str(tmp_path / "index"))
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["healthy"] is False
    found = {f["kind"]: f for f in doc["findings"] if f["check"] == "extension-build"}
    stale = f"_C{EXT_SUFFIX}"
    assert found["stale-extension"]["title"] == f"2 builds of mamba_ssm._C are installed: {stale}, _C.abi3.so"
    assert f"CPython imports {stale}" in found["stale-extension"]["detail"]
    contra = found["extension-contradicts-label"]
    assert contra["title"] == f"{stale} contradicts the installed label {WANT.as_stable().label}"
    assert f"version-specific ({WANT.python}) build" in contra["detail"]
    fix = f'mamba-ssm=={V}+{WANT.label} --extra-index-url'  # the doctor's reinstall line, torch pinned before it
    assert fix in found["stale-extension"]["fix"] and fix in contra["fix"]
    text = _doctor(site, "--index", str(tmp_path / "index")).stdout
    assert "[FAIL] 2 builds of mamba_ssm._C are installed" in text and "Verdict: healthy" not in text


def test_a_module_whose_accelerator_contradicts_the_label_is_a_failure(tmp_path, probes):
    """A CPU build in a wheel labelled for CUDA (the doctor reads the fatbin: there is none)."""
    label = WANT.label.replace("cpu", "cu13")
    site = _install(tmp_path / "site", probes[True], label)
    doc = json.loads(_doctor(site, "--offline", "--json").stdout)
    (f,) = [f for f in doc["findings"] if f["kind"] == "extension-contradicts-label"]
    assert f["verdict"] == "problem" and f["detail"] == "it carries a CPU build, the label is CUDA code"
    # what this torch needs, offline: torch 2.13 >= the stable floor, so the stable-ABI wheel the release builds
    assert f"mamba-ssm=={V}+{WANT.as_stable().label}" in f["fix"]


def test_missing_extension_is_a_problem_not_a_traceback(tmp_path):
    site = _install(tmp_path / "site", None, None)
    p = _doctor(site, "--offline")
    assert p.returncode == 1 and "no compiled mamba-ssm extension" in p.stdout and "Traceback" not in p.stderr


def test_without_torch_the_doctor_says_so(tmp_path, probes):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    site = _install(tmp_path / "site", probes[True], WANT.label)
    p = _doctor(site, "--offline", "--json", python=str(env_dir / "bin" / "python"))
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["facts"]["torch"] == {"installed": False}
    (f,) = [f for f in doc["findings"] if f["check"] == "torch"]
    assert f["verdict"] == "problem" and f["kind"] == "torch-missing" and "pip install torch" in f["fix"]
    assert "NOT INSTALLED" in _doctor(site, "--offline", python=str(env_dir / "bin" / "python")).stdout


def test_nvcc_wrapper_script_resolves_to_the_real_toolkit(tmp_path):
    from mamba_ssm.doctor.facts import real_toolkit

    tk = tmp_path / "cuda-13.0" / "bin"
    tk.mkdir(parents=True)
    (tk / "nvcc").write_bytes(b"\x7fELF-not-a-script")
    wrapper = tmp_path / "wrap" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {tk / "nvcc"} "$@"\n')
    assert real_toolkit(str(wrapper)) == str(tmp_path / "cuda-13.0")
    link = tmp_path / "link-nvcc"
    link.symlink_to(tk / "nvcc")
    assert real_toolkit(str(link)) == str(tmp_path / "cuda-13.0")


@pytest.mark.cuda_build
def test_fatbin_archs_are_read_from_a_real_nvcc_build(tmp_path):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("no nvcc on PATH")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x){ x[threadIdx.x] *= 2.f; }\nextern \"C\" void go(float* x){ k<<<1,32>>>(x); }\n")
    so = tmp_path / "k.so"
    subprocess.run(
        ["nice", nvcc, "--threads", "1", "-shared", "-Xcompiler", "-fPIC",
         "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]", "-o", str(so), str(src)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert _elf.archs_of(so).as_dict() == {"sass": ["sm_80", "sm_90"], "ptx": ["compute_90"], "hip": [], "notes": []}


def test_gpu_coverage_rules():
    from mamba_ssm.doctor.checks import _gpu_runs

    archs = {"sass": ["sm_80", "sm_90"], "ptx": ["compute_90"]}
    assert _gpu_runs("8.6", archs)  # sm_80 SASS runs on 8.6
    assert _gpu_runs("12.0", archs)  # PTX 9.0 JITs forward
    assert not _gpu_runs("7.5", archs)  # nothing at or below 7.5
    assert not _gpu_runs("12.0", {"sass": ["sm_80", "sm_90"], "ptx": []})
    assert not _gpu_runs("9.0", {"sass": ["sm_80"], "ptx": []})  # SASS does not cross majors


def test_the_dev_install_is_healthy():
    """The checkout's own editable build (nox -s tests installs it before running the suite)."""
    import importlib.util

    spec = importlib.util.find_spec("mamba_ssm")
    if not list(Path(list(spec.submodule_search_locations)[0]).glob("_C*.so")):
        pytest.skip("mamba_ssm._C is not built in this checkout (pip install --no-build-isolation -e .)")
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--offline", "--json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(p.stdout)
    assert p.returncode == 0, [f for f in doc["findings"] if f["verdict"] == "problem"]
    assert doc["facts"]["mamba_ssm"]["extensions"][0]["abi"] in ("cxx11", None)


@pytest.mark.slow
def test_a_wheel_built_by_setup_py_for_the_other_abi_is_diagnosed(tmp_path):
    """pkg's setup.py with MAMBA_FORCE_CXX11_ABI=FALSE against torch 2.13 (CXX11): the real mislabeled wheel."""
    import zipfile

    from sdistkit import build_wheel, make_sdist

    sdist = make_sdist(tmp_path / "sdist")
    wheel, _ = build_wheel(sdist, tmp_path / "wheels", MAMBA_FORCE_CXX11_ABI="FALSE")
    assert "cxx11abifalse" in wheel.name.lower()
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    p = _doctor(site, "--offline", "--json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    ext = doc["facts"]["mamba_ssm"]["extensions"][0]
    assert ext["abi"] == "pre-cxx11" and not ext["import"]["ok"] and "Ss" in ext["import"]["error"]
    kinds = {f["kind"] for f in doc["findings"] if f["verdict"] == "problem"}
    assert kinds == {"cxx11-abi-mismatch", "variant-mismatch"}
    # offline, for torch >= the stable floor: the stable-ABI wheel (no default release builds a classic one)
    assert all(f"mamba-ssm=={V}+{WANT.as_stable().label}" in f["fix"] for f in doc["findings"] if f["verdict"] == "problem")


def _facts(**torch_over) -> dict:
    torch_facts = {
        "installed": True, "version": "2.14.1", "cuda": "13.0", "hip": None, "cxx11abi": True, "ngc": False,
        "variant": {"key": "cu13-torch2.14-cxx11abiTRUE", "label": "cu13torch2.14cxx11abiTRUE",
                    "stable_key": "cu13-torchstable-abi3", "stable_label": "cu13torchstable"},
        "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": "12.0"}],
    }  # fmt: skip
    torch_facts.update(torch_over)
    ext = {"module": "mamba_ssm._C", "path": "/x/_C.so", "abi": "cxx11", "import": {"ok": True},
           "archs": {"sass": ["sm_80", "sm_90"], "ptx": [], "hip": [], "notes": []}}  # fmt: skip
    return {
        "torch": torch_facts,
        "mamba_ssm": {"public_version": V, "installed_version": f"{V}+cu13torch2.14cxx11abiTRUE",
                      "label": "cu13torch2.14cxx11abiTRUE", "location": "/x", "extensions": [ext]},  # fmt: skip
        "cuda_toolkit": {"nvcc_on_path": "/usr/bin/nvcc", "nvcc_release": "12.4", "nvcc_toolkit": "/usr/lib/cuda",
                         "cuda_home": None, "cuda_home_release": None},  # fmt: skip
        "compiler": {"cxx": "/usr/bin/c++", "version": "c++ 9.4", "cxx20": False},
    }


def test_checks_for_a_gpu_the_wheel_does_not_cover_and_a_source_build_that_would_fail():
    from mamba_ssm.doctor.checks import run_checks

    findings, _ = run_checks(_facts(), offline=True)
    by = {f.check: f for f in findings}
    assert by["gpu-arch"].verdict == "problem" and by["gpu-arch"].kind == "no-kernel-image"
    # the line's wheels carry sm_120: the fix is the farm's wheel of the cell, not a build
    assert by["gpu-arch"].fix.startswith(f"{sys.executable} -m pip install --force-reinstall --no-deps mamba-ssm=={V}+cu13")
    # The wheel itself imports: source-build gaps are warnings, not failures.
    assert by["nvcc"].verdict == "warn" and by["nvcc"].kind == "cuda-version-mismatch"
    assert by["compiler"].verdict == "warn" and by["compiler"].kind == "cxx20-required"


def test_source_build_gaps_become_problems_when_the_extension_is_broken():
    from mamba_ssm.doctor.checks import run_checks

    facts = _facts(gpus=[])
    facts["mamba_ssm"]["extensions"][0]["import"] = {"ok": False, "error": "ImportError: libcudart.so.12: cannot open shared object file"}
    facts["cuda_toolkit"] = {"nvcc_on_path": None, "nvcc_release": None, "nvcc_toolkit": None, "cuda_home": None, "cuda_home_release": None}
    findings, _ = run_checks(facts, offline=True)
    by = {f.check: f for f in findings}
    assert by["extension"].kind == "cuda-runtime-major"
    assert by["nvcc"].verdict == "problem" and by["nvcc"].kind == "nvcc-missing"
    assert by["compiler"].verdict == "problem"


def test_hip_gpu_outside_the_wheels_targets():
    from mamba_ssm.doctor.checks import run_checks

    # ROCm 7.2 with torch 2.14: a cell the line builds (ROCm 6.2 has none for torch 2.14: that is "not supported")
    facts = _facts(cuda=None, hip="7.2.0", gpus=[{"index": 0, "name": "AMD Instinct MI300X", "capability": "9.4", "gfx": "gfx942"}],
                   variant={"key": "hip72-torch2.14-cxx11abiTRUE", "label": "hip72torch2.14cxx11abiTRUE"})  # fmt: skip
    facts["mamba_ssm"]["label"] = "hip72torch2.14cxx11abiTRUE"
    facts["mamba_ssm"]["extensions"][0]["archs"] = {"sass": [], "ptx": [], "hip": ["gfx90a"], "notes": []}
    findings, _ = run_checks(facts, offline=True)
    (f,) = [f for f in findings if f.check == "gpu-arch"]
    assert f.verdict == "problem" and "gfx942" in f.title and "HIP_ARCHITECTURES=gfx942" in f.fix


def test_a_torch_that_does_not_import_is_still_read_from_its_files(tmp_path):
    """torch 2.14.1 (CUDA 13) whose import dies on libcudart: the doctor still names the variant it
    needs, from torch/version.py and a real CXX11-ABI libc10.so, and how to repair torch."""
    site = _install(tmp_path / "site", None, "cu12torch2.6cxx11abiFALSE")
    fake = site / "torch"
    (fake / "lib").mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file: No such file or directory')\n"
    )
    (fake / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n")
    src = tmp_path / "c10.cpp"
    src.write_text('#include <string>\nnamespace c10 { std::string name(const std::string& s) { return s; } }\n')
    subprocess.run(["c++", "-shared", "-fPIC", str(src), "-o", str(fake / "lib" / "libc10.so")], check=True)

    p = _doctor(site, "--offline", "--json")
    doc = json.loads(p.stdout)
    t = doc["facts"]["torch"]
    assert "libcudart.so.13" in t["import_error"] and t["read_from"] == "files"
    assert t["variant"]["key"] == "cu13-torch2.14-cxx11abiTRUE" and t["cxx11abi"] is True
    broken = next(f for f in doc["findings"] if f["kind"] == "torch-broken")
    assert "--force-reinstall torch==2.14.1+cu130," in broken["fix"]
    text = _doctor(site, "--offline").stdout
    assert "needs variant cu13-torch2.14-cxx11abiTRUE" in text and "Traceback" not in text


def test_a_free_threaded_interpreter_is_named_and_told_what_to_use():
    """facts.python_facts() on CPython 3.14t says cp314t (mamba_ssm.variant.python_tag); the doctor names it, says
    no line builds for it (builder/data/support.toml lists it as not supported) and which interpreter to use."""
    from mamba_ssm.doctor.checks import run_checks

    facts = _facts(gpus=[])
    facts["python"] = {"version": "3.14.1", "tag": "cp314t", "executable": "/usr/bin/python3.14t"}
    findings, _ = run_checks(facts, offline=True)
    (f,) = [f for f in findings if f.check == "python"]
    assert f.verdict == "problem" and f.kind == "free-threaded", f
    assert "cp314t" in f.title and "cp314 " not in f.title and "python3.14 -m venv" in f.fix and "cp314" in f.fix
    facts["python"]["tag"] = "cp314"
    assert not [f for f in run_checks(facts, offline=True)[0] if f.check == "python"]


# --------------------------------------------------------------------------- nine kinds of user, as facts

def _user(*, python="cp311", system="Linux", machine="x86_64", glibc="2.35", torch="2.14.1", cuda=None, hip=None,
          abi=True, gpus=(), line=None, label=None, import_error=None, dist=...) -> dict:
    """One user's facts as facts.gather() gives them: Python, platform, torch (and the variant it needs), the
    installed line (upstream's mamba-ssm, this repository's, or none) and its extension's import. ``dist``: the
    version pip sees (default: ``torch``, as the PyTorch index's labelled builds have it; None: no pip metadata)."""
    v = _variant.from_values(torch, cuda=cuda, hip=hip, cxx11abi=abi)
    variant = {"key": v.key, "label": v.label, "stable_key": v.as_stable().key, "stable_label": v.as_stable().label,
               "served_by_stable": v.served_by_stable}  # fmt: skip
    ext = {"module": "selective_scan_cuda" if line == "upstream" else "mamba_ssm._C", "path": "/x/ext.so", "abi": "cxx11",
           "import": {"ok": import_error is None, "error": import_error, "traceback": import_error},
           "archs": {"sass": [], "ptx": [], "hip": [], "notes": []}}  # fmt: skip
    version = {"upstream": "2.3.2.post1", "checkout": V, None: None}[line]
    return {  # fmt: skip
        "python": {"version": f"{python[2]}.{python[3:].rstrip('t')}.1", "tag": python, "executable": "/venv/bin/python"},
        "platform": {"system": system, "machine": machine, "glibc": glibc, "platform": system},
        "torch": {"installed": True, "version": torch, "dist_version": torch if dist is ... else dist, "cuda": cuda,
                  "hip": hip, "cxx11abi": abi, "ngc": False,
                  "variant": variant, "gpus": list(gpus)},
        "mamba_ssm": {"installed_version": version and (f"{version}+{label}" if label else version), "public_version": version,
                      "label": label, "line": line, "location": "/x" if line else None, "extensions": [ext] if line else []},
        "causal_conv1d": {},
        "cuda_toolkit": {"nvcc_on_path": None, "nvcc_release": None, "nvcc_toolkit": None, "cuda_home": None, "cuda_home_release": None},
        "compiler": {"cxx": "/usr/bin/c++", "version": "c++ 12", "cxx20": True},
    }


A100, GH200, V100 = ({"index": 0, "name": n, "capability": c} for n, c in (("A100", "8.0"), ("GH200", "9.0"), ("Tesla V100", "7.0")))
RTX5090 = {"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": "12.0"}
MI300X = {"index": 0, "name": "AMD Instinct MI300X", "capability": "9.4", "gfx": "gfx942"}
OTHER_TORCH = "ImportError: /x/ext.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
# (user, facts, the line chosen, what the answer is: a pin of the release (its label) or "not supported")
USERS = [
    ("data-centre GPU, older torch", _user(torch="2.6.0", cuda="12.4", abi=False, glibc="2.31", gpus=[A100], line="upstream",
                                           import_error=OTHER_TORCH), "upstream", "not supported"),
    ("aarch64, new GPU", _user(python="cp312", machine="aarch64", cuda="13.0", gpus=[GH200], line="upstream",
                               label="cu12torch2.14cxx11abiTRUE"), "upstream", "cu13torch2.14cxx11abiTRUE"),
    ("free notebook, older GPU", _user(torch="2.6.0", cuda="12.4", abi=False, gpus=[V100], line="upstream"), "upstream", "not supported"),
    ("consumer Blackwell, newest torch and Python", _user(python="cp314", torch="2.15.0", cuda="13.2", gpus=[RTX5090],
                                                         line="checkout", label="cputorchstable"), "checkout", "cu13torchstable"),
    ("AMD Instinct", _user(python="cp312", torch="2.9.0", hip="6.4.43482", gpus=[MI300X], line="upstream",
                           import_error="ModuleNotFoundError: No module named 'selective_scan_cuda'"), "upstream", "hip64torch2.9cxx11abiTRUE"),
    ("CPU only", _user(torch="2.13.0", line="checkout", label="cputorch2.6cxx11abiFALSE"), "checkout", "cputorchstable"),
    ("CPU only, upstream's line", _user(torch="2.13.0", line="upstream"), "upstream", "not supported"),
    ("old cluster", _user(python="cp310", torch="2.4.1", cuda="12.1", abi=False, glibc="2.17", gpus=[A100], line="checkout",
                          import_error="ImportError: /lib64/libc.so.6: version `GLIBC_2.28' not found (required by /x/_C.so)"),
     "checkout", "glibc"),
    ("Windows", _user(system="Windows", machine="AMD64", glibc=None, torch="2.6.0", cuda="12.4", abi=False, gpus=[A100],
                      line="upstream"), "upstream", "not supported"),
    ("free-threaded Python", _user(python="cp314t", cuda="13.0", gpus=[RTX5090], line="checkout", label="cu13torchstable"),
     "checkout", "not supported"),
]  # fmt: skip


@pytest.mark.parametrize(("user", "facts", "line", "answer"), USERS, ids=[u[0] for u in USERS])
def test_each_kind_of_user_gets_one_line_and_one_consistent_answer(user, facts, line, answer):
    """One line chosen (the installed one); every fix a pin of that line the release builds for this machine, or
    a clear "not supported: do X" with no other finding printing a fix that contradicts it."""
    from builder.publishing import pins
    from mamba_ssm.doctor.checks import PROBLEM, run_checks

    findings, extra = run_checks(facts, offline=True)
    assert extra["line"] == line
    problems = [f for f in findings if f.verdict == PROBLEM]
    assert problems, findings
    fixes = [f.fix for f in findings if f.fix and f.verdict in (PROBLEM, "warn")]
    release = pins.release_wheels()
    platform = f"linux_{facts['platform']['machine'].lower().replace('amd64', 'x86_64')}"
    if answer == "not supported":
        first = next(f for f in problems if f.fix)
        assert first.fix.startswith("not supported: ") and len(fixes) == 1, fixes
        for cmd in pins.commands_in(first.fix):  # what it offers instead is in the release too
            assert pins.check(cmd, release) == [], cmd
        assert "cxx11abiFALSE" not in first.fix and "TORCH_CUDA_ARCH_LIST" not in first.fix
        if facts["platform"]["system"] == "Windows":
            assert "WSL2" in first.fix
        if first.kind == "does-not-install":  # the installs record: upstream's mamba-ssm beside torch 2.6
            # the newest release that installs beside that torch (the user keeps their torch), from the record
            assert "triton" in first.fix and "instead: mamba-ssm==2.3.1 (" in first.fix, first.fix
        return
    if answer == "glibc":
        assert any(f.kind == "glibc-too-old" and "2.28" in f.title for f in problems), problems
        # a source build against this glibc (and what it needs), or a newer system: never a pin of a 2.28 wheel
        assert all(re.search(r"glibc|build|toolkit", fix) for fix in fixes), fixes
        assert not [c for fix in fixes for c in pins.commands_in(fix) if any(lab for *_, lab in pins.parse(c)[0])], fixes
        return
    commands = [c for fix in fixes for c in pins.commands_in(fix) if " install " in c and "--no-build-isolation" not in c]
    assert commands, fixes
    for c in commands:  # torch kept as pip sees it; nothing the wheels import skipped
        assert f"torch=={facts['torch']['dist_version']} " in c and "--no-deps" not in c, c
    labels = {lab for c in commands for _n, _v, lab in pins.parse(c)[0] if lab}
    assert labels == {answer}, commands  # one answer: every fix pins the same cell
    for c in commands:
        assert pins.check(c, release, python=facts["python"]["tag"], platform=platform) == [], c
        assert ("/upstream/" in c) == (line == "upstream"), c


@pytest.mark.parametrize(("user", "facts", "line", "answer"), USERS, ids=[u[0] for u in USERS])
def test_the_front_doors_requirements_give_each_user_the_same_answer(user, facts, line, answer):
    """`mamba-doctor --requirements LINE` (the README's first block) agrees with the checks: the same cell's pins,
    holding the installed torch, or no file and the reason where the checks say not supported (or glibc)."""
    from builder.publishing import pins
    from mamba_ssm.doctor.requirements import NoCell, requirements

    if answer in ("not supported", "glibc"):
        with pytest.raises(NoCell) as err:
            requirements(line, facts)
        assert str(err.value).startswith(("not supported", "no wheel", "GPU")), err.value
        return
    text = requirements(line, facts)
    assert f"torch=={facts['torch']['dist_version']}  #" in text
    reqs = [ln for ln in text.splitlines() if "==" in ln and not ln.startswith(("#", "torch=="))]
    page = next(ln.split()[1] for ln in text.splitlines() if ln.startswith("--extra-index-url"))
    assert reqs and all(r.endswith(f"+{answer}") for r in reqs), text
    platform = f"linux_{facts['platform']['machine']}"
    assert pins.check(f"pip install {' '.join(reqs)} --extra-index-url {page}", python=facts["python"]["tag"], platform=platform) == []


# Each kind of torch as pip sees it (its distribution's version) and as Python does (torch.__version__, .cuda):
# PyPI's CUDA builds carry no local label in their metadata; the PyTorch index's, NGC's and source builds do.
TORCH_KINDS = [
    ("PyPI's torch 2.9.1", "2.9.1", "2.9.1+cu128", "12.8"),
    ("PyPI's torch 2.14.1", "2.14.1", "2.14.1+cu130", "13.0"),
    ("the PyTorch index's CUDA build", "2.6.0+cu126", "2.6.0+cu126", "12.6"),
    ("the PyTorch index's CPU build", "2.13.0+cpu", "2.13.0+cpu", None),
    ("an NGC container's", "2.5.0a0+e000cf0ad9.nv24.08", "2.5.0a0+e000cf0ad9.nv24.08", "12.6"),
    ("a source build", "2.10.0a0+git5c48869", "2.10.0a0+git5c48869", "12.8"),
]


@pytest.mark.parametrize(("kind", "dist", "module", "cuda"), TORCH_KINDS, ids=[k[0] for k in TORCH_KINDS])
def test_the_requirements_pin_the_torch_as_pip_sees_it(kind, dist, module, cuda):
    """The file's torch pin is one the installed distribution satisfies as pip judges it (PEP 440: a pin with a
    local label is never met by PyPI's unlabelled 2.9.1), for each kind of torch people have."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from mamba_ssm.doctor.requirements import requirements

    abi = None if module.startswith("2.6") else True
    facts = _user(torch=module, dist=dist, cuda=cuda, abi=False if abi is None else abi)
    text = requirements("checkout", facts)
    [pin] = [ln.split("#")[0].strip() for ln in text.splitlines() if ln.startswith("torch")]
    assert SpecifierSet(pin.removeprefix("torch")).contains(Version(dist), prereleases=True), (pin, dist)
    assert f"torch=={dist}  #" in text, text


def test_a_torch_pip_cannot_see_is_said_and_nothing_is_pinned():
    """conda's torch (no pip metadata): any requirements file would make pip install a second torch over it; the
    doctor writes none and says so once, with the axis. Two torches (pip's and the imported one differ): said."""
    from mamba_ssm.doctor.requirements import NoCell, requirements

    with pytest.raises(NoCell) as err:
        requirements("upstream", _user(torch="2.9.1", cuda="12.8", dist=None))
    assert "no pip metadata" in str(err.value) and "axis: torch" in str(err.value), err.value
    with pytest.raises(NoCell) as err:
        requirements("upstream", _user(torch="2.9.1+cu128", cuda="12.8", dist="2.8.0"))
    assert "pip sees torch 2.8.0 but Python imports torch 2.9.1+cu128" in str(err.value), err.value


_TOOLKIT = {"cu11": "11.8", "cu12": "12.8", "cu13": "13.0", "hip62": "6.2.41133", "hip64": "6.4.43482", "hip72": "7.2.0"}


def _cells() -> list[tuple[str, str, bool, str, str]]:
    """(accelerator, torch minor, C++ ABI, Python, machine) of every classic cell of either line: the torches, builds
    and machines the lines are about (the stable-ABI wheels serve the same torches)."""
    from mamba_ssm.doctor.lines import LINES

    out = set()
    for v in LINES.values():
        for label, cell in v["labels"].items():
            parts = _variant.parse_label(label)
            if parts["torch"] == "stable":
                continue
            for py in cell["pythons"]:
                for machine in ("x86_64", "aarch64"):
                    out.add((parts["accelerator"], parts["torch"], parts["cxx11abi"], py, machine))
    return sorted(out)


@pytest.mark.parametrize("line", ["upstream", "checkout"])
def test_one_answer_per_cell_from_the_report_the_requirements_and_the_release(line):
    """For every cell of both lines (each torch, build, Python and machine the lines name), the plain report, the
    front door's `--requirements` and the release the coverage page is made from give one answer: the same wheel
    label, or "no wheel" from all three."""
    from builder.publishing import pins
    from mamba_ssm.doctor.checks import NOT_SERVED, PROBLEM, run_checks
    from mamba_ssm.doctor.requirements import NoCell, requirements

    release = pins.release_wheels()
    missing = "ModuleNotFoundError: No module named " + ("'selective_scan_cuda'" if line == "upstream" else "'mamba_ssm._C'")
    disagree, checked = [], 0
    for acc, minor, abi, py, machine in _cells():
        tk = _TOOLKIT.get(acc)
        local = "cpu" if acc == "cpu" else (f"cu{tk.replace('.', '')}" if acc.startswith("cu") else f"rocm{'.'.join(tk.split('.')[:2])}")
        torch = f"{minor}.1+{local}"
        facts = _user(python=py, machine=machine, torch=torch, abi=abi, line=line, import_error=missing,
                      cuda=tk if acc.startswith("cu") else None, hip=tk if acc.startswith("hip") else None)  # fmt: skip
        try:
            text = requirements(line, facts)
            req = {ln.split("+", 1)[1] for ln in text.splitlines() if "==" in ln and not ln.startswith(("#", "torch=="))}
        except NoCell:
            req = set()
        findings, _extra = run_checks(facts, offline=True)
        problems = [f for f in findings if f.verdict == PROBLEM]
        if any(f.kind in NOT_SERVED for f in problems):
            report = set()
        else:
            cmds = [c for f in problems for c in pins.commands_in(f.fix) if "pip install" in c and "--no-build-isolation" not in c]
            report = {lab for c in cmds for name, _v, lab in pins.parse(c)[0] if lab and name != "torch"}
        platform = f"linux_{machine}"
        v = _variant.from_values(torch, cuda=facts["torch"]["cuda"], hip=facts["torch"]["hip"], cxx11abi=abi)
        built = [lab for lab in ([v.as_stable().label] if v.served_by_stable else []) + [v.label]
                 if all(any((w.line, w.project, w.version, w.label, w.platform) == (line, p, ver, lab, platform)
                            and w.installs_on(py) for w in release) for p, ver in LINES_PROJECTS[line].items())]  # fmt: skip
        built = set(built[:1])  # the stable-ABI wheel serves the torches it can, before a classic one
        checked += 1
        if not (req == report == built):
            disagree.append(f"{line} {torch} {py} {machine}: requirements {sorted(req)}, report {sorted(report)}, release {sorted(built)}")
    assert checked > 100 and not disagree, "\n".join(disagree[:30]) + f"\n({len(disagree)} of {checked})"


def test_causal_conv1d_code_a_toolkit_miscompiles_is_named_on_that_gpu():
    """An installed causal-conv1d 1.7.0 whose extension carries sm_103 code (a source build with nvcc 13), on a
    B300 with a CUDA 13 torch: a problem naming the miscompile and its report, the fix the farm's wheel (which
    serves sm_103 with sm_100 code); the same extension on an H100, or the farm's own archs on a B300, is fine."""
    from mamba_ssm.doctor.checks import PROBLEM, run_checks

    b300 = {"index": 0, "name": "NVIDIA B300", "capability": "10.3"}
    h100 = {"index": 0, "name": "NVIDIA H100", "capability": "9.0"}

    def facts(gpu, sass):
        f = _user(cuda="13.0", gpus=[gpu], line="upstream", label="cu13torch2.14cxx11abiTRUE")
        f["causal_conv1d"] = {"installed_version": "1.7.0", "public_version": "1.7.0", "label": None,
                              "extensions": [{"module": "causal_conv1d_cuda", "path": "/x/c.so",
                                              "archs": {"sass": sass, "ptx": [], "hip": [], "notes": []}}]}  # fmt: skip
        return [f for f in run_checks(f, offline=True)[0] if f.kind == "miscompiled"]

    [found] = facts(b300, ["sm_90", "sm_100", "sm_103"])
    assert found.verdict == PROBLEM and "sm_103" in found.title and "causal-conv1d/issues/105" in found.detail
    assert "causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE" in found.fix
    assert facts(h100, ["sm_90", "sm_100", "sm_103"]) == []
    assert facts(b300, ["sm_90", "sm_100"]) == []


def test_a_torch_pip_cannot_see_gets_one_answer_in_the_plain_report():
    """conda's torch (no pip metadata) with a wrong wheel installed: the report says once that no pip command keeps
    this torch (the axis), and prints no install that would put a second torch over it or skip imports."""
    from mamba_ssm.doctor.checks import PROBLEM, run_checks

    facts = _user(torch="2.9.1", cuda="12.8", line="upstream", label="cu12torch2.6cxx11abiFALSE", dist=None)
    findings, _ = run_checks(facts, offline=True)
    fixes = [f.fix for f in findings if f.verdict == PROBLEM and f.fix]
    assert len(fixes) == 1 and fixes[0].startswith("not supported: ") and "axis: torch, no pip metadata" in fixes[0], fixes
    with_pip = run_checks(_user(torch="2.9.1", cuda="12.8", line="upstream", label="cu12torch2.6cxx11abiFALSE", dist="2.9.1"), offline=True)[0]
    assert any("torch==2.9.1 " in f.fix for f in with_pip), [f.fix for f in with_pip]
