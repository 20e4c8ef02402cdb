"""The standalone doctor, ``mamba-doctor`` (builder/publishing/doctor_dist.py): the same files as ``mamba_ssm.doctor``, found
from its imports; installs with no dependency and without touching torch; in a venv that holds upstream's
mamba-ssm and causal-conv1d and not this repository's, its fix pins upstream's wheels, and that fix installs them.

Stand-ins, said so: torch is a small wheel with torch's version.py and _C flag (real CUDA torches are gigabytes);
the upstream wheels are tests/wheelmaker.py's farm-named ones (``2.3.2.post1+<label>`` with the farm's sidecar, no
compiled payload), not the ci-upstream build's outputs, which take a Docker CUDA build to make.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from indexkit import find_python, isolated_env, make_venv, pip, serve
from wheelmaker import (
    CAUSAL_CONV1D,
    UPSTREAM_MAMBA,
    V,
    make_recipe_wheel,
    make_standin_sdist,
    make_wheel,
)

from builder.errors import UsageError
from builder.publishing import doctor_dist

NEEDS = "cu13torch2.14cxx11abiTRUE"  # what the stand-in torch 2.14.1+cu130 needs
WRONG = "cu12torch2.6cxx11abiFALSE"


def _standin_torch(out: Path, version: str = "2.14.1+cu130", cuda: str = "13.0") -> Path:
    files = {
        "torch/__init__.py": (
            b"from . import version\n__version__ = version.__version__\n"
            b"class _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
            b"class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
        ),
        "torch/version.py": f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n".encode(),
    }
    return make_wheel(out, "torch", version, files=files, requires_python=">=3.9")


def test_the_wheel_holds_the_package_doctors_own_files_found_from_its_imports(tmp_path):
    import zipfile

    wheel = doctor_dist.build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"mamba_doctor-{V}.dist-info/METADATA").decode()
        for rel, src in doctor_dist.collect().items():
            if rel != "__init__.py":
                assert zf.read(f"mamba_doctor/{rel}") == src.read_bytes(), rel  # the same bytes: one source
        init = zf.read("mamba_doctor/__init__.py").decode()
    assert {f"mamba_doctor/doctor/{p.name}" for p in (REPO / "mamba_ssm" / "doctor").glob("*.py")} <= names
    assert {"mamba_doctor/elf.py", "mamba_doctor/prebuilt.py", "mamba_doctor/variant.py"} <= names
    assert not any(n.startswith(("mamba_doctor/ops", "mamba_doctor/modules")) for n in names)  # not imported: not there
    assert "Requires-Dist" not in meta and f"__version__ = '{V}'" in init and "import" not in init
    assert doctor_dist.build_wheel(tmp_path / "again").read_bytes() == wheel.read_bytes()  # reproducible


def test_a_module_the_doctor_starts_importing_is_taken_and_a_foreign_import_refused(tmp_path, monkeypatch):
    src = tmp_path / "mamba_ssm"
    shutil.copytree(REPO / "mamba_ssm", src, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (src / "extra.py").write_text("import re\n\nSAFE = re.compile('x')\n")
    cli = src / "doctor" / "cli.py"
    cli.write_text(cli.read_text().replace("import argparse\n", "import argparse\n\nfrom .. import extra\n", 1))
    monkeypatch.setattr(doctor_dist, "SOURCE", src)
    assert doctor_dist.collect()["extra.py"] == src / "extra.py"
    (src / "extra.py").write_text("import numpy\n")
    with pytest.raises(UsageError, match="extra.py imports numpy"):
        doctor_dist.collect()


def _versions(vpy: Path) -> dict:
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    return json.loads(subprocess.run([str(vpy), "-I", "-c", code], capture_output=True, text=True, check=True).stdout)


@pytest.fixture
def site(tmp_path):
    """The farm's site on 127.0.0.1: the doctor's index, upstream's index (the cell PyPI's torch 2.14 needs), and a
    stand-in PyPI holding upstream's sdists."""
    from builder.publishing.index import build_index

    www = tmp_path / "www"
    doctor_dist.publish(www / "doctor")
    up = tmp_path / "upstream-wheels"
    make_recipe_wheel(up, "causal-conv1d", "1.7.0", NEEDS, source=CAUSAL_CONV1D)
    make_recipe_wheel(up, "mamba-ssm", "2.3.2.post1", NEEDS, source=UPSTREAM_MAMBA)
    build_index(up, www / "upstream")
    files = www / "pypi-files"
    for name, version in {"mamba-ssm": "2.3.2.post1", "causal-conv1d": "1.7.0"}.items():
        sdist = make_standin_sdist(files, name, version)
        (www / "pypi" / name).mkdir(parents=True)
        (www / "pypi" / name / "index.html").write_text(f'<a href="../../pypi-files/{sdist.name}">{sdist.name}</a>\n')
    with serve(www) as url:
        yield url


def _doctor(vpy: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    exe = vpy.parent / "mamba-doctor"  # the console script the wheel installs
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, timeout=120, cwd=vpy.parent, check=False
    )


def test_in_a_venv_with_upstreams_packages_the_standalone_doctor_pins_upstreams_wheels(site, tmp_path):
    python = find_python("3.11")
    if python is None:
        pytest.skip("no Python 3.11 here")
    env = isolated_env(tmp_path)
    env["PIP_INDEX_URL"] = f"{site}/pypi/"  # what a bare name reaches: the stand-in PyPI
    vpy = make_venv(tmp_path / "venv", python, env)

    # The documented command, on a venv with no torch: it installs (no dependency) and says torch is missing.
    pip(vpy, ["install", "mamba-doctor", "--index-url", f"{site}/doctor/"], env)
    assert set(_versions(vpy)) == {"mamba-doctor"}
    bare = _doctor(vpy, env, "--offline", "--json")
    assert bare.returncode == 1 and any(f["kind"] == "torch-missing" for f in json.loads(bare.stdout)["findings"])

    # The user's environment: PyPI's torch 2.14 (CUDA 13), and upstream's packages built for another torch.
    wheels = tmp_path / "user-wheels"
    torch = _standin_torch(wheels)
    make_recipe_wheel(wheels, "causal-conv1d", "1.7.0", WRONG, source=CAUSAL_CONV1D)
    make_recipe_wheel(wheels, "mamba-ssm", "2.3.2.post1", WRONG, source=UPSTREAM_MAMBA)
    pip(vpy, ["install", "--no-index", "--no-deps", "--find-links", str(wheels), "torch==2.14.1+cu130",
              f"causal-conv1d==1.7.0+{WRONG}", f"mamba-ssm==2.3.2.post1+{WRONG}"], env)  # fmt: skip
    before = _versions(vpy)
    pip(vpy, ["install", "--force-reinstall", "mamba-doctor", "--index-url", f"{site}/doctor/"], env)
    assert _versions(vpy) == before, "installing the doctor changed the user's packages"
    assert "mamba_ssm/doctor" not in "".join(p.as_posix() for p in (vpy.parents[1] / "lib").rglob("mamba_ssm/doctor"))

    proc = _doctor(vpy, env, "--index", site)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fix = (f"{vpy} -m pip uninstall -y causal-conv1d mamba-ssm && {vpy} -m pip install torch==2.14.1+cu130 "
           f"causal-conv1d==1.7.0+{NEEDS} mamba-ssm==2.3.2.post1+{NEEDS} --extra-index-url {site}/upstream/cu13-torch2.14-cxx11abiTRUE/")  # fmt: skip
    assert fix in proc.stdout, proc.stdout
    assert V not in proc.stdout.split("Verdict")[-1], "a fix names this repository's line"
    doc = json.loads(_doctor(vpy, env, "--index", site, "--json").stdout)
    assert doc["line"] == "upstream" and doc["wheel_available"] is True
    labels = [f for f in doc["findings"] if f["check"] == "label" and f["verdict"] == "problem"]
    assert len(labels) == 2 and all(f["fix"] == fix for f in labels), labels

    # The fix, run as printed: upstream's wheels for this torch, not PyPI's sdists, and torch untouched.
    # (the venv has no pip of its own: the test's pip runs for it, with --python)
    uninstall, install = (part.split() for part in fix.split(" && "))
    assert uninstall[:4] == [str(vpy), "-m", "pip", "uninstall"] and install[:4] == [str(vpy), "-m", "pip", "install"]
    # what it installs, as pip's dry run reports it: the wheels for this torch, never torch, nothing built
    report = tmp_path / "report.json"
    pip(vpy, [*install[3:], "--dry-run", "--report", str(report)], env)
    planned = {i["metadata"]["name"]: i for i in json.loads(report.read_text())["install"]}
    assert "torch" not in planned and set(planned) == {"causal-conv1d", "mamba-ssm"}, planned
    assert all(i["download_info"]["url"].endswith(".whl") for i in planned.values()), planned
    pip(vpy, uninstall[3:], env)
    pip(vpy, install[3:], env)
    after = _versions(vpy)
    assert after["mamba-ssm"].lower() == f"2.3.2.post1+{NEEDS}".lower()
    assert after["causal-conv1d"].lower() == f"1.7.0+{NEEDS}".lower()
    assert after["torch"] == "2.14.1+cu130" and torch.exists()
    again = json.loads(_doctor(vpy, env, "--index", site, "--json").stdout)
    assert not [f for f in again["findings"] if f["check"] == "label" and f["verdict"] == "problem"]


def test_offline_the_fix_for_a_stable_floor_torch_pins_the_stable_wheel(tmp_path):
    """The index unreachable, this repository's mamba-ssm built for another torch, torch 2.14: the fix pins
    +cu13torchstable (the default release builds no classic label for torch >= the stable floor)."""
    import tomllib

    from mamba_ssm import variant as _variant

    stable = tomllib.loads((REPO / "mamba_build" / "build.toml").read_text())["stable"]
    assert (_variant.STABLE_FLOOR, list(_variant.STABLE_BACKENDS)) == (stable["floor"], stable["backends"])
    python = find_python("3.11")
    if python is None:
        pytest.skip("no Python 3.11 here")
    env = isolated_env(tmp_path)
    vpy = make_venv(tmp_path / "venv", python, env)
    wheels = tmp_path / "wheels"
    _standin_torch(wheels)
    ours = {"mamba_ssm/__init__.py": b"__version__ = '0.3.0'\n", "mamba_ssm/doctor/__init__.py": b""}  # this repository's line
    make_wheel(wheels, "mamba-ssm", f"{V}+{WRONG}", "cp311-cp311-linux_x86_64", files=ours)
    doctor_dist.publish(tmp_path / "doctor")
    pip(vpy, ["install", "--no-index", "--no-deps", "--find-links", str(wheels), "--find-links", str(tmp_path / "doctor" / "mamba-doctor"),
              "torch==2.14.1+cu130", f"mamba-ssm=={V}+{WRONG}", "mamba-doctor"], env)  # fmt: skip
    dead = "http://127.0.0.1:9/"  # the discard port: nothing listens
    doc = json.loads(_doctor(vpy, env, "--index", dead, "--json").stdout)
    assert doc["line"] == "checkout" and doc["wheel_available"] is None
    (label,) = [f for f in doc["findings"] if f["check"] == "label"]
    assert f"mamba-ssm=={V}+cu13torchstable" in label["fix"] and "/cu13-torchstable-abi3/" in label["fix"], label
    assert "cxx11abi" not in label["fix"]


def test_with_torch_and_no_mamba_ssm_the_doctor_prints_no_placeholder(tmp_path):
    """A venv holding only a torch and the doctor: every fix is filled in (this torch's cell, the newest version
    the release builds: mamba_ssm/doctor/lines.py), none says None, and each installs what the release builds."""
    from builder.publishing import pins

    python = find_python("3.11")
    if python is None:
        pytest.skip("no Python 3.11 here")
    env = isolated_env(tmp_path)
    vpy = make_venv(tmp_path / "venv", python, env)
    wheels = tmp_path / "wheels"
    _standin_torch(wheels)
    doctor_dist.publish(tmp_path / "doctor")
    pip(vpy, ["install", "--no-index", "--no-deps", "--find-links", str(wheels), "--find-links",
              str(tmp_path / "doctor" / "mamba-doctor"), "torch==2.14.1+cu130", "mamba-doctor"], env)  # fmt: skip
    for args in (["--offline"], ["--index", "http://127.0.0.1:9/"]):  # not looked up; the index unreachable
        proc = _doctor(vpy, env, *args)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        for word in ("<label>", "<variant>", "None", "<"):
            assert word not in proc.stdout, f"{args}: {word!r} in\n{proc.stdout}"
        doc = json.loads(_doctor(vpy, env, *args, "--json").stdout)
        (missing,) = [f for f in doc["findings"] if f["check"] == "extension"]
        assert missing["kind"] == "mamba-missing" and "not installed" in missing["title"], missing
        assert f"mamba-ssm=={V}+cu13torchstable" in missing["fix"], missing
        commands = [c for f in doc["findings"] for c in pins.commands_in(f["fix"])]
        pinned = [c for c in commands if "+" in c]
        assert pinned, commands
        for command in pinned:  # the checker's site is the published one: put it back for the check
            problems = pins.check(command.replace("http://127.0.0.1:9", pins.SITE.rstrip("/")), platform="linux_x86_64")
            assert not problems, (command, problems)
