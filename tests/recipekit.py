"""Shared by tests/test_sources.py and tests/test_recipes.py: the real upstream sdists, and what a setup.py computes.

``setup_py_flags`` runs a (patched) upstream setup.py up to its ``setup()`` call and returns the extension's
name, flags, version and arch list, with a real torch and nvcc where this machine has them, else a stand-in
``torch`` and compiler that answer only the version questions setup.py asks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from builder.facts.spec import SdistPin
from builder.sourcing.sources import Fetcher, SourceCache

MAMBA = SdistPin("mamba_ssm", "2.3.2.post1", "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028")
CAUSAL = SdistPin("causal_conv1d", "1.7.0", "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b")


def fetched_cache(root: Path) -> SourceCache:
    """A fresh cache at ROOT holding both real sdists, fetched through the host's pip settings."""
    cache = SourceCache(root, Fetcher.from_host())
    for pin in (MAMBA, CAUSAL):
        cache.fetch(pin)
    return cache


# Every -gencode target upstream's setup.py hard-codes (with CUDA 13 it lists all of them).
UPSTREAM_SMS = ("75", "80", "87", "90", "100", "120", "103", "110", "121")

_STUB_TORCH = """
import os
__version__ = os.environ["STUB_TORCH_VERSION"]
class version:
    cuda = os.environ.get("STUB_TORCH_CUDA") or None
    hip = os.environ.get("STUB_TORCH_HIP") or None
class _C:
    _GLIBCXX_USE_CXX11_ABI = True
"""
_STUB_CPP_EXTENSION = """
import os
CUDA_HOME = os.environ.get("STUB_CUDA_HOME") or None
HIP_HOME = os.environ.get("STUB_HIP_HOME") or None
class BuildExtension:
    pass
def CUDAExtension(name, sources, **kw):
    return {"name": name, "sources": sources, **kw}
CppExtension = CUDAExtension
"""
_DRIVER = r"""
import json, os, runpy, sys
import setuptools
captured = {}
setuptools.setup = lambda **kw: captured.update(kw)
sys.argv = ["setup.py", "--version"]
runpy.run_path("setup.py", run_name="__main__")
exts = []
for e in captured.get("ext_modules", []):
    get = e.get if isinstance(e, dict) else lambda k, d=None: getattr(e, k, d)
    exts.append({"name": get("name"), "sources": [str(x) for x in get("sources") or []],
                 "extra_compile_args": get("extra_compile_args")})
print("RESULT " + json.dumps({"version": captured.get("version"), "ext_modules": exts,
                              "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST")}))
"""


def _fake_tool(folder: Path, name: str, output: str) -> Path:
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    tool = folder / "bin" / name
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    tool.chmod(0o755)
    return folder


def setup_py_flags(
    tree: Path,
    env: dict,
    work: Path,
    *,
    torch: str = "2.11.0",
    cuda: str | None = None,
    rocm: str | None = None,
    torch_python: Path | None = None,
    cuda_home: Path | None = None,
) -> dict:
    """What ``tree/setup.py`` would build under ``env``: {"version", "ext_modules": [{name, extra_compile_args}], ...}."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("MAMBA_", "CAUSAL_CONV1D_", "STUB_"))}
    run_env.pop("TORCH_CUDA_ARCH_LIST", None)
    run_env.update(env)
    if torch_python is None:
        stubs = work / "stubs"
        (stubs / "torch" / "utils").mkdir(parents=True, exist_ok=True)
        (stubs / "torch" / "__init__.py").write_text(_STUB_TORCH)
        (stubs / "torch" / "utils" / "__init__.py").write_text("")
        (stubs / "torch" / "utils" / "cpp_extension.py").write_text(_STUB_CPP_EXTENSION)
        (stubs / "wheel").mkdir(exist_ok=True)
        (stubs / "wheel" / "__init__.py").write_text("")
        (stubs / "wheel" / "bdist_wheel.py").write_text("class bdist_wheel:\n    pass\n")
        run_env["PYTHONPATH"] = str(stubs)
        run_env["STUB_TORCH_VERSION"] = torch
        if cuda:
            run_env["STUB_TORCH_CUDA"] = cuda
            home = _fake_tool(
                work / "cuda",
                "nvcc",
                f"nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release {cuda}, V{cuda}.1",
            )
            run_env["STUB_CUDA_HOME"] = str(home)
        if rocm:
            run_env["STUB_TORCH_HIP"] = f"{rocm}.43482-0f2d60242"
            home = _fake_tool(work / "rocm", "hipcc", f"HIP version: {rocm}.43482-0f2d60242\nAMD clang version 19.0.0")
            run_env["STUB_HIP_HOME"] = str(home)
            run_env["ROCM_PATH"] = str(home)
        python = sys.executable
    else:
        python = str(torch_python)
        run_env.pop("PYTHONPATH", None)
        if cuda_home:
            run_env["CUDA_HOME"] = str(cuda_home)
            run_env["PATH"] = f"{cuda_home / 'bin'}:{run_env.get('PATH', '')}"
    proc = subprocess.run(
        [python, "-c", _DRIVER], check=False, cwd=tree, env=run_env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise AssertionError(
            f"setup.py in {tree} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return json.loads(line[len("RESULT ") :])


def gencode_targets(flags: list[str]) -> list[str]:
    """["-gencode", "arch=compute_80,code=sm_80", ...] -> ["sm_80", ...] (in order, duplicates kept)."""
    out = []
    for i, flag in enumerate(flags):
        if flag == "-gencode":
            arch = flags[i + 1]
            compute, _, code = arch.partition(",code=")
            assert compute == "arch=compute_" + code.removeprefix("sm_"), arch
            out.append(code)
    return out
