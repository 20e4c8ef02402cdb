"""A recipe right the first time: another maintainer's CPU-and-CUDA package, from its sdist, through the docs alone.

The package (``scatterdemo``, made here as a local sdist) is the kind that cost a compile before: its setup.py reads
FORCE_CUDA, FORCE_ONLY_CPU and TORCH_CUDA_ARCH_LIST and has no variable for its version. Its recipe sets those by
accelerator (one ``when`` syntax with the patches), sets no label and patches no version: the farm labels the wheel.
``builder recipe check`` (the preflight, also the first step of every build) catches each planted mistake in
seconds, before any compile; the good recipe builds a CPU and a CUDA wheel (host executor, the machine's nvcc, a
one-function extension) that install and import beside their torch on the first try.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from farmkit import REPO, run_build
from indexkit import serve

PROFILE = "scatterdemo"
SETUP_PY = """import os
from setuptools import setup
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

cuda = os.environ.get("FORCE_CUDA", "0") == "1" and os.environ.get("FORCE_ONLY_CPU", "0") != "1"
sources = ["csrc/scatterdemo.cpp"] + (["csrc/kernel.cu"] if cuda else [])
Extension = CUDAExtension if cuda else CppExtension
setup(
    name="scatterdemo",
    version="1.0",
    packages=["scatterdemo"],
    ext_modules=[Extension("scatterdemo._C", sources, define_macros=[("WITH_CUDA", None)] if cuda else [])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
)
"""
MODULE_CPP = r"""#include <Python.h>
#ifdef WITH_CUDA
extern "C" int scatterdemo_cuda_threads(void);
static const char *BACKEND = "cuda";
#else
static const char *BACKEND = "cpu";
#endif
static PyObject *segment_sum(PyObject *self, PyObject *args) {
  PyObject *seq = PySequence_Fast(args, "numbers");
  double total = 0;
  for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++)
    total += PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
  Py_XDECREF(seq);
  return PyFloat_FromDouble(total);
}
static PyObject *backend(PyObject *self, PyObject *args) { return PyUnicode_FromString(BACKEND); }
static PyMethodDef methods[] = {{"segment_sum", segment_sum, METH_VARARGS, ""}, {"backend", backend, METH_NOARGS, ""},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""
KERNEL_CU = r"""__global__ void scatterdemo_scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" int scatterdemo_cuda_threads(void) { return 256; }
"""
INIT_PY = (
    "import torch  # noqa: F401  (the extension is built against it)\nfrom scatterdemo._C import backend, segment_sum\n"
)

RECIPE = """[project]
name = "scatterdemo"
summary = "a segment-sum package with CPU and CUDA builds whose setup.py has no version variable"

[source]
name = "scatterdemo"
version = "1.0"
url = "{url}/scatterdemo-1.0.tar.gz"
sha256 = "{sha256}"

[requires]
accelerator = ["cpu", "cuda"]
why = "{why}"

[build.env]
FORCE_CUDA = [{{ when = {{ accelerator = ["cuda"] }}, value = "1" }}]
FORCE_ONLY_CPU = [{{ when = {{ accelerator = ["cpu"] }}, value = "1" }}]
TORCH_CUDA_ARCH_LIST = {arch_list}
{more_env}
{patch}
[test]
imports = ["torch", "scatterdemo"]
api = ["scatterdemo.segment_sum"]
commands = [["python", "-c", "import scatterdemo; print(scatterdemo.segment_sum(0.5, 0.25), scatterdemo.backend())"]]

[verify]
extensions = ["scatterdemo/_C*.so"]
"""
GOOD = {
    "why": "setup.py builds a CPU or a CUDA extension, as FORCE_CUDA says",
    "arch_list": '[{ when = { accelerator = ["cuda"] }, value = "${cuda_arch_list}" }]',
    "more_env": "",
    "patch": "",
}


def _sdist(folder: Path) -> str:
    files = {"setup.py": SETUP_PY, "scatterdemo/__init__.py": INIT_PY, "csrc/scatterdemo.cpp": MODULE_CPP,
             "csrc/kernel.cu": KERNEL_CU, "PKG-INFO": "Metadata-Version: 2.1\nName: scatterdemo\nVersion: 1.0\n"}  # fmt: skip
    path = folder / "scatterdemo-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"scatterdemo-1.0/{name}")
            info.size, info.mtime = len(data.encode()), 1_700_000_000
            tf.addfile(info, io.BytesIO(data.encode()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """(write_recipe(**changes), matrix path): a farm folder whose matrix has the scatterdemo profile, the sdist
    served on 127.0.0.1."""
    root = tmp_path_factory.mktemp("scatterdemo")
    (root / "site").mkdir()
    sha = _sdist(root / "site")
    farm = root / "farm"
    (farm / "recipes").mkdir(parents=True)
    matrix = (REPO / "matrix.toml").read_text().replace("[plan]\n", '[plan]\nrecipes = "recipes"\n', 1)
    matrix += f"""
[profiles.{PROFILE}]
description = "a CPU and a CUDA cell of a third-party package"
platform = "linux_x86_64"
archs = ["sm_80"]
stable_abi = false
projects = ["scatterdemo"]
select = [
  {{ accelerator = "cpu", torch = "2.13", python = "3.11" }},
  {{ accelerator = "cuda-13.0", torch = "2.14", python = "3.11" }},
]
"""
    (farm / "matrix.toml").write_text(matrix)
    for package_path in ("mamba_ssm", "csrc", "setup.py"):  # [package]'s paths are relative to the matrix
        (farm / package_path).symlink_to(REPO / package_path)
    with serve(root / "site") as url:

        def write(**changes: str) -> Path:
            (farm / "recipes" / "scatterdemo.toml").write_text(
                RECIPE.format(url=url, sha256=sha, **{**GOOD, **changes})
            )
            return farm / "matrix.toml"

        yield write


def _check(cli, matrix: Path):
    t0 = time.monotonic()
    proc = cli(
        "recipe",
        "check",
        "--matrix",
        matrix,
        "--profile",
        PROFILE,
        env={"MAMBA_FARM_CACHE": str(matrix.parent / "cache")},
    )
    return proc, time.monotonic() - t0


def test_the_preflight_passes_both_cells_and_says_the_wheels_the_farm_will_label(farm, cli):
    proc, took = _check(cli, farm())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    cpu = "scatterdemo: release 1.0 x torch 2.13.0 x cpu x cxx11abi=TRUE: ok: scatterdemo 1.0+cputorch2.13cxx11abiTRUE"
    assert cpu in out, out
    assert (
        "scatterdemo: release 1.0 x torch 2.14.1 x cuda 13.0 [sm_80] x cxx11abi=TRUE: ok: "
        "scatterdemo 1.0+cu13torch2.14cxx11abiTRUE" in out
    )
    assert "preflight: 2 of 2 cell(s) ok" in out and took < 10, (took, out)


# Each mistake of the first try, planted: the preflight (or the recipe's loader, which it runs first) names the
# cell or key and the fix, in seconds, with no compiler run (the preflight runs none).
# fmt: off
MISTAKES = {
    # the package labels its own version, not as the cell: the wheel would be refused after the compile
    "own label": (
        {"patch": '[[patch]]\nname = "label"\nwhy = "a version patch"\nfile = "setup.py"\n\n[[patch.edit]]\n'
                  'search = \'version="1.0"\'\nreplace = \'version="1.0+cu13"\'\n'},
        18, "the package labels its own version 1.0+cu13, the cell's label is cputorch2.13cxx11abiTRUE",
        "the farm writes the cell's label into the wheel",
    ),
    # a CUDA-only placeholder in a value for every cell: the hint is the env's own `when`
    "env for every cell": (
        {"arch_list": '"${cuda_arch_list}"'}, 2,
        "build.env.TORCH_CUDA_ARCH_LIST: ${cuda_arch_list} only has a value for cuda cells",
        'restrict the value: TORCH_CUDA_ARCH_LIST = [{ when = { accelerator = ["cuda"] }',
    ),
    # an arch list typed by hand: not the cell's
    "typed arch list": (
        {"arch_list": '[{ when = { accelerator = ["cuda"] }, value = "9.0" }]'}, 18,
        "build.env.TORCH_CUDA_ARCH_LIST: '9.0' is not the cell's arch list '8.0'", "${cuda_arch_list}",
    ),
    # a value that is empty in one of the cells it applies to
    "empty value": ({"more_env": 'TOOLKIT_VERSION = "${toolkit}"'}, 18,
                    "build.env.TOOLKIT_VERSION: '${toolkit}' is empty for this cell", "narrow it"),
    # a 444-character why: refused by its length, stated
    "long why": ({"why": "x" * 444}, 2, "(444 characters; at most 300)", None),
    # a patch whose text is not in setup.py
    "stale patch": (
        {"patch": '[[patch]]\nname = "archs"\nwhy = "w"\nfile = "setup.py"\n\n[[patch.edit]]\n'
                  "search = 'cc_flag.append'\nreplace = 'x'\n"},
        10, "patch 'archs' no longer applies to setup.py", None,
    ),
    # a requirement that excludes the cell's torch
    "requirement": (
        {"patch": '[[patch]]\nname = "req"\nwhy = "w"\nfile = "setup.py"\n\n[[patch.edit]]\n'
                  'search = \'install_requires=["torch"]\'\nreplace = \'install_requires=["torch<2.10"]\'\n'},
        18, "the package requires torch<2.10, which excludes the cell's torch", "narrow [requires] torch",
    ),
}
# fmt: on


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_planted_mistake_is_caught_in_seconds_before_any_compile(farm, cli, mistake):
    changes, code, says, hint = MISTAKES[mistake]
    proc, took = _check(cli, farm(**changes))
    assert proc.returncode == code, proc.stdout + proc.stderr
    err = proc.stdout + proc.stderr
    assert says in err, err
    assert hint is None or hint in err, err
    assert "Traceback" not in err and took < 10, (took, err)


def test_a_build_stops_at_its_preflight_before_any_toolchain(farm, tmp_path):
    matrix = farm(**MISTAKES["own label"][0])
    dist = tmp_path / "dist"
    run = run_build("--matrix", str(matrix), "--profile", PROFILE, "--executor", "host", "--dist", str(dist),
                    env={"MAMBA_FARM_CACHE": str(tmp_path / "cache")}, timeout=120)  # fmt: skip
    assert run.rc == 18 and run.seconds < 30, run.out[-3000:]
    assert "FAILED before building: " in run.out and "labels its own version 1.0+cu13" in run.out
    logs = sorted((dist / "logs").glob("scatterdemo-*.log"))
    assert len(logs) == 2 and all("failed its preflight (PreflightError, exit 18)" in p.read_text() for p in logs)
    assert not any("pip wheel" in p.read_text() for p in logs)  # nothing was compiled
    assert not list((dist / "wheels").glob("*.whl"))


@pytest.mark.cuda_build
@pytest.mark.skipif(not Path("/usr/local/cuda-13.0/bin/nvcc").is_file(), reason="needs the CUDA 13.0 toolkit")
@pytest.mark.skipif(shutil.which("python3.11") is None, reason="needs python3.11 (torch 2.13/2.14 cp311 wheels)")
def test_a_cpu_and_a_cuda_cell_become_two_installed_wheels_on_the_first_try(farm, tmp_path):
    dist = tmp_path / "dist"
    run = run_build("--matrix", str(farm()), "--profile", PROFILE, "--executor", "host", "--jobs", "1",
                    "--compile-jobs", "1", "--dist", str(dist), timeout=3000)  # fmt: skip
    assert run.rc == 0, run.out[-6000:]
    wheels = {w.name.split("+")[1].split("-")[0]: w for w in (dist / "wheels").glob("*.whl")}
    assert sorted(wheels) == ["cputorch2.13cxx11abiTRUE", "cu13torch2.14cxx11abiTRUE"], run.out[-3000:]
    for label, wheel in wheels.items():
        # labelled by the farm (the package's setup.py has no version variable, the recipe no version patch)
        assert re.fullmatch(rf"scatterdemo-1\.0\+{label}-cp311-cp311-manylinux_2_\d+_x86_64\.whl", wheel.name)
        with zipfile.ZipFile(wheel) as zf:
            (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
            text = zf.read(meta).decode()
        assert meta == f"scatterdemo-1.0+{label}.dist-info/METADATA" and f"Version: 1.0+{label}" in text
        assert f"Requires-Dist: torch=={'2.13' if label.startswith('cpu') else '2.14'}.*" in text
        # each cell had its own environment: the CUDA wheel embeds exactly sm_80, the CPU one no device code
        rec = json.loads(Path(f"{wheel}.evidence.json").read_text())
        assert rec["verified"]["archs"] == ([] if label.startswith("cpu") else ["sm_80"]), rec["verified"]
        # installed beside its torch in a clean environment and imported, its test command's output kept
        assert rec["imported"]["api"] == ["scatterdemo.segment_sum"], rec["imported"]
        backend = "cpu" if label.startswith("cpu") else "cuda"
        assert rec["imported"]["commands"][0]["output"] == f"0.75 {backend}", rec["imported"]
    assert run.out.count("preflight ok: scatterdemo 1.0+") == 2, run.out[-3000:]
    # the build's line for each wheel shows the figure its test command printed; the index (its matrix's own
    # recipes folder) takes both
    assert "test command 1 printed 0.75 cpu" in run.out and "test command 1 printed 0.75 cuda" in run.out
    assert "index: 2 wheel(s)" in run.out, run.out[-3000:]
