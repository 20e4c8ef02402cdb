"""How ``pip install mamba-ssm`` goes as people type it: the sdist from an index into fresh venvs (3.10 to 3.13)
with old and current pip and uv, with and without build isolation, a prebuilt wheel served on 127.0.0.1.
torch is the real 2.13.0+cpu where a wheel is local, else a stand-in with only the files setup.py reads.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import cudakit
import pytest
from indexkit import find_python, serve
from sdistkit import COMPILE_MARK, PREBUILT_MARK, base_env, checked, make_sdist, run
from sharedruns import torch_venv
from wheelmaker import make_wheel

from builder.publishing.index import build_index
from mamba_ssm import variant as V

from conftest import REPO

PUBLIC = re.search(r'__version__\s*=\s*"([^"]+)"', (REPO / "mamba_ssm" / "__init__.py").read_text()).group(1)
TORCH = "2.13.0+cpu"
LOCAL_TORCH = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# CI runs the seeded-setuptools case (3.11: 65.5) and the no-setuptools case (3.12); --run-slow every Python.
CI_PYTHONS = {"3.11", "3.12"}
PYTHON_PARAMS = [pytest.param(v, marks=() if v in CI_PYTHONS else pytest.mark.slow) for v in PYTHONS]
UV = Path(sys.executable).with_name("uv")
ONE_LINE = re.compile(r"^\s*mamba-ssm build error: .*How to fix: .*$", re.MULTILINE)


def _error_lines(out: str) -> list[str]:
    return [m.group(0).strip() for m in ONE_LINE.finditer(out)]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """The release's sdist (python -m build --sdist), in a folder of its own: a find-links 'index'."""
    return make_sdist(tmp_path_factory.mktemp("sdist"))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """What an isolated build and the floor test install, so the installs below need no index but ours
    (mamba-ssm by name must come from our folder, not a registry)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    # wheel (and its packaging): for an sdist whose build-system.requires names it
    for req in ("setuptools==70.1.0", "setuptools>=77.0.3", "wheel", "packaging"):
        checked(run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", out, req], env=base_env()))
    # tomli: build-system.requires on 3.10 (the pure-Python wheel serves it)
    checked(run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", out, "--only-binary=:all:",
                 "--python-version", "3.10", "--implementation", "py", "tomli>=1.1"], env=base_env()))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    return make_wheel(tmp_path_factory.mktemp("standin"), "torch", TORCH, files={
        "torch/__init__.py": b"raise ImportError('a stand-in torch: files only')\n",
        "torch/version.py": f"__version__ = {TORCH!r}\ncuda = None\nhip = None\ngit_version = 'standin'\n".encode(),
        "torch/lib/libc10.so": b"\0_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringE\0",
    })  # fmt: skip


def fresh_venv(path: Path, python: str, torch_wheel: Path | None) -> Path:
    """``python -m venv`` (pip 23.x and setuptools 65.5 on 3.10/3.11, no setuptools on 3.12+), plus torch:
    the real one with its dependencies (among them setuptools>=77.0.3), the stand-in alone. The real one is
    the farm's smoke-test venv of that Python and torch (such a venv, made once), hard-linked (tests/sharedruns.py)."""
    interpreter = find_python(python)
    if interpreter is None:
        pytest.skip(f"no Python {python} here")
    if torch_wheel == LOCAL_TORCH:
        return torch_venv(path, interpreter, f"torch=={TORCH.split('+')[0]}", base_env())
    checked(run([interpreter, "-m", "venv", path]))
    py = path / "bin" / "python"
    if torch_wheel is not None:
        alone = [] if torch_wheel == LOCAL_TORCH else ["--no-deps", "--no-index"]
        checked(run([py, "-m", "pip", "install", "-q", *alone, torch_wheel], env=base_env(), timeout=900))
    return py


def real_torch_or(python: str, standin: Path) -> Path:
    """torch 2.13.0+cpu where a wheel of it is local (cp311), else the stand-in."""
    return LOCAL_TORCH if python == "3.11" and LOCAL_TORCH.is_file() else standin


def prebuilt_index(root: Path, py: Path) -> Path:
    """An index (builder.publishing.index) holding the wheel this venv's torch needs; its payload is a marker."""
    info = checked(run([py, "-c", "import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], sysconfig.get_config_var('EXT_SUFFIX'))"]))
    major, minor, suffix = info.stdout.split()
    tag = f"cp{major}{minor}"
    want = V.from_values(TORCH, cxx11abi=True, python=tag, platform=V.platform_tag())
    make_wheel(root / "wheels", "mamba-ssm", f"{PUBLIC}+{want.label}", f"{tag}-{tag}-{want.platform}",
               files={f"mamba_ssm/_C{suffix}": b"prebuilt marker", "mamba_ssm/__init__.py": f"__version__ = {PUBLIC!r}\n".encode()})  # fmt: skip
    build_index(root / "wheels", root / "index")
    return root / "index"


def install_by_name(front: str, py: Path, sdist: Path, wheelhouse: Path, *extra: str, index_url: str) -> subprocess.CompletedProcess:
    """`<front-end> install mamba-ssm`, the name resolved from a folder holding only the sdist."""
    links = ["--no-index", "--find-links", sdist.parent, "--find-links", wheelhouse]
    if front == "uv":
        cmd = [UV, "pip", "install", "-p", py, "--no-cache", *links, *extra, "mamba-ssm"]
    elif front == "pip-current":  # the dev venv's pip, run for the target venv
        cmd = [sys.executable, "-m", "pip", "--python", py, "install", "--no-cache-dir", *links, *extra, "mamba-ssm"]
    else:  # the pip the venv was seeded with
        cmd = [py, "-m", "pip", "install", "--no-cache-dir", *links, *extra, "mamba-ssm"]
    return run(cmd, env=base_env(MAMBA_WHEEL_INDEX=index_url), timeout=900)


def installed(py: Path) -> str | None:
    proc = run([py, "-c", "import importlib.metadata as m\ntry: print(m.version('mamba-ssm'))\nexcept m.PackageNotFoundError: print('-')"])
    got = proc.stdout.strip()
    return None if got in ("", "-") else got


def uninstall(py: Path) -> None:
    run([py, "-m", "pip", "uninstall", "-y", "-q", "mamba-ssm"])


# ---------------------------------------------------------------- 4. an sdist is never labelled


def test_an_sdist_made_where_torch_is_installed_is_not_labelled(tmp_path):
    """python -m build --sdist --no-isolation in the dev venv (torch 2.13.0+cpu): the sdist of every variant."""
    src = cudakit.stage_source(tmp_path / "src")
    # --skip-dependency-check: the dev venv need not hold every build requirement for an sdist
    cmd = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check", "-o", tmp_path / "dist", src]
    checked(run(cmd, env=base_env()))
    (sdist,) = (tmp_path / "dist").iterdir()
    assert sdist.name == f"mamba_ssm-{PUBLIC}.tar.gz"
    with tarfile.open(sdist) as tf:
        pkg_info = tf.extractfile(f"mamba_ssm-{PUBLIC}/PKG-INFO").read().decode()
    assert f"\nVersion: {PUBLIC}\n" in pkg_info and "License-Expression: Apache-2.0" in pkg_info
    assert "Requires-Dist: torch\n" in pkg_info  # no pin to the torch that happened to be installed


# ---------------------------------------------------------------- 1. one extension module per wheel


def _c_modules(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return sorted(n for n in zf.namelist() if re.fullmatch(r"mamba_ssm/_C\..*so", n))


def test_classic_and_stable_builds_in_one_tree_each_ship_only_their_own_module(tmp_path):
    """classic, then stable, then classic again, in one tree (build/lib persists between them): each wheel
    holds exactly the one _C of its kind. CPU builds against torch 2.13.0+cpu; kernels compiled once."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch 2.13.0+cpu in the dev venv")
    src = cudakit.stage_source(tmp_path / "src")
    classic = f"mamba_ssm/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    env = base_env(MAMBA_FORCE_BUILD="TRUE", MAMBA_KERNEL_CACHE=str(tmp_path / "kcache"))
    for step, stable in enumerate([False, True, False]):
        out = tmp_path / f"dist{step}"
        proc = checked(run([sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", out, src],
                           env={**env, **({"MAMBA_STABLE_ABI": "TRUE"} if stable else {})}, timeout=1200))  # fmt: skip
        (wheel,) = out.glob("*.whl")
        assert wheel.name.endswith("-cp310-abi3-linux_x86_64.whl" if stable else "-cp311-cp311-linux_x86_64.whl"), wheel.name
        assert _c_modules(wheel) == ["mamba_ssm/_C.abi3.so" if stable else classic], (step, wheel.name)
        if step:  # the previous build's module was in build/lib, and this build took it out
            assert "left by an earlier build of another kind" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- 2. --no-build-isolation with the setuptools a venv has


@pytest.mark.parametrize("python", PYTHON_PARAMS)
def test_no_build_isolation_with_the_seeded_setuptools_then_the_floor(python, sdist, wheelhouse, standin, tmp_path):
    """A fresh venv's setuptools (65.5, or none on 3.12+) is below the floor: one line naming the fix.
    setuptools 70.1.0 (the floor pyproject.toml declares) and a current one (>= 77: PEP 639) both install.
    The stand-in torch everywhere: the real one would bring setuptools>=77.0.3 along as a dependency."""
    py = fresh_venv(tmp_path / "venv", python, standin)
    index = prebuilt_index(tmp_path, py)
    with serve(index) as url:
        proc = install_by_name("pip", py, sdist, wheelhouse, "--no-build-isolation", index_url=url)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and installed(py) is None, out[-3000:]
        assert "Traceback" not in out and "configuration error" not in out, out[-3000:]
        (line,) = _error_lines(out)
        assert "setuptools>=70.1" in line and ("has no setuptools" if python >= "3.12" else "setuptools is 65.5") in line, line

        for floor in ("setuptools==70.1.0", "setuptools>=77.0.3"):
            checked(run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse, floor], env=base_env()))
            proc = checked(install_by_name("pip", py, sdist, wheelhouse, "--no-build-isolation", "-v", index_url=url))
            out = proc.stdout + proc.stderr
            assert PREBUILT_MARK in out and COMPILE_MARK not in out, out[-3000:]
            assert installed(py).lower() == f"{PUBLIC}+cputorch2.13cxx11abitrue", floor
            uninstall(py)


# ---------------------------------------------------------------- 3. plain `pip install mamba-ssm` (build isolation)


@pytest.mark.parametrize("python", [pytest.param(v, marks=() if v == "3.11" else pytest.mark.slow) for v in PYTHONS])
def test_plain_pip_install_takes_the_prebuilt_wheel_for_the_users_torch(python, sdist, wheelhouse, standin, tmp_path):
    """Default build isolation, seeded pip (23.x on 3.10-3.12, 24.2 on 3.13) and current pip: pip runs the
    target venv's interpreter, setup.py reads that venv's torch from its files, the wheel is hash-checked."""
    py = fresh_venv(tmp_path / "venv", python, real_torch_or(python, standin))
    index = prebuilt_index(tmp_path, py)
    with serve(index) as url:
        for front in ("pip", "pip-current"):
            proc = checked(install_by_name(front, py, sdist, wheelhouse, "-v", index_url=url))
            out = proc.stdout + proc.stderr
            assert "sha256 verified" in out and COMPILE_MARK not in out, out[-3000:]
            assert installed(py).lower() == f"{PUBLIC}+cputorch2.13cxx11abitrue", front
            uninstall(py)


def test_isolated_installs_that_cannot_take_a_prebuilt_wheel_stop_in_one_line(sdist, wheelhouse, standin, tmp_path):
    """No prebuilt wheel for this torch, no torch at all, uv's build environment: one line each, nothing
    compiled (a torch the front-end would put into the build environment is never the one built for)."""
    py = fresh_venv(tmp_path / "venv", "3.12", standin)
    empty = tmp_path / "empty-index"
    empty.mkdir()
    with serve(prebuilt_index(tmp_path, py)) as url, serve(empty) as nothing:
        cases = {
            "no prebuilt": (("pip",), nothing, "no prebuilt wheel for", "--no-build-isolation"),
            "uv isolated": (("uv",), url, "uv builds mamba-ssm in an environment of its own", "--no-build-isolation"),
        }
        for what, (front, index, cause, fix) in cases.items():
            proc = install_by_name(*front, py, sdist, wheelhouse, index_url=index)
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0 and installed(py) is None, (what, out[-3000:])
            assert "Traceback" not in out and COMPILE_MARK not in out, (what, out[-3000:])
            lines = _error_lines(out)
            assert len(lines) == 1, (what, out[-3000:])
            assert cause in lines[0] and fix in lines[0].split("How to fix:")[1], (what, lines[0])

        # uv without isolation builds in the target venv itself: the prebuilt wheel (setuptools from the wheelhouse)
        checked(run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse, "setuptools>=77.0.3"], env=base_env()))
        checked(install_by_name("uv", py, sdist, wheelhouse, "--no-build-isolation", index_url=url))
        assert installed(py).lower() == f"{PUBLIC}+cputorch2.13cxx11abitrue"
        uninstall(py)

        run([py, "-m", "pip", "uninstall", "-y", "-q", "torch"])
        proc = install_by_name("pip", py, sdist, wheelhouse, index_url=url)
    out = proc.stdout + proc.stderr
    (line,) = _error_lines(out)
    assert proc.returncode != 0 and "no torch is installed in" in line and "install torch first" in line, out[-3000:]


def test_under_pip_isolation_a_torch_in_the_build_environment_is_not_the_one_built_for(tmp_path):
    """What pip's isolated build looks like (measured, pip 23.0-26.3): the target environment's site-packages
    off sys.path, the build environment's on it. A torch there (2.5) is ignored; the target's (2.13) counts."""
    build_env = tmp_path / "pip-build-env" / "torch"
    build_env.mkdir(parents=True)
    (build_env / "__init__.py").write_text("")
    (build_env / "version.py").write_text("__version__ = '2.5.1+cpu'\ncuda = None\nhip = None\n")
    probe = f"""
import importlib.util, sys, sysconfig
spec = importlib.util.spec_from_file_location("mamba_setup", {str(REPO / "setup.py")!r})
setup_py = importlib.util.module_from_spec(spec); spec.loader.exec_module(setup_py)
site = {{sysconfig.get_paths()[k] for k in ("purelib", "platlib")}}
sys.path[:] = [p for p in sys.path if p not in site] + [{str(build_env.parent)!r}]
assert importlib.util.find_spec("torch").origin.startswith({str(build_env)!r})
iso = setup_py._isolation()
print(iso, setup_py._torch_facts(iso).version)
"""
    proc = checked(run([sys.executable, "-c", probe], env=base_env()))
    assert proc.stdout.split() == ["pip", TORCH]
