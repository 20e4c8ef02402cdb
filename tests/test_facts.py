"""One home for each fact setup.py and the farm share: mamba_build/build.toml.

setup.py ships in the sdist without builder/, so the shared facts live in the file it reads
(mamba_build/build.toml, which MANIFEST.in ships) and builder/facts/compat.py reads them from there.
Each test reads a fact from that home and checks every consumer against it: the farm's plan
and verifier on one side, setup.py (through mamba_build/toolchain.py, the functions it calls)
on the other.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import tomllib
from test_matrix import DEFAULT, make_dir
from test_setup import _load, toolchain

from builder import errors
from builder.commands import cli
from builder.building import hip
from builder.building.executors import EXIT_INFRA, spec_env
from builder.commands import Command
from builder.facts import compat as compat_mod
from builder.facts.compat import parse_accelerator
from builder.planning.plan import load_plan, stable_floor
from builder.verifying import wheels

from conftest import REPO

BUILD_TOML = REPO / "mamba_build" / "build.toml"


DATA = toolchain.load_data()  # what setup.py reads (toolchain loaded by file path, as setup.py does)


@pytest.fixture(scope="module")
def compat():
    return compat_mod.load()


def one_toolkit_plan(tmp_path: Path, accelerator: str, compat, stable: bool):
    """The plan of matrix.toml narrowed to one accelerator and opened to every torch release
    (one toolkit per CUDA major is a matrix rule, so each toolkit gets its own plan)."""
    text = DEFAULT.split("\n# [[exclude]]")[0]  # no include / profiles: they name other accelerators
    text = re.sub(r"^accelerator = \[.*\]$", f'accelerator = ["{accelerator}"]', text, count=1, flags=re.MULTILINE)
    torches = ", ".join(f'"{m}"' for m in compat.torch_minors())
    text = re.sub(r"^torch = \[.*\]$", f"torch = [{torches}]", text, count=1, flags=re.MULTILINE)
    folder = make_dir(tmp_path / accelerator)
    (folder / "matrix.toml").write_text(text)
    return load_plan(folder / "matrix.toml", stable=stable)


def test_builder_data_holds_none_of_the_shared_facts(compat) -> None:
    toolkits = tomllib.loads((REPO / "builder" / "data" / "toolkits.toml").read_text())
    torch = tomllib.loads((REPO / "builder" / "data" / "torch.toml").read_text())
    assert "cuda_arch" not in toolkits and "rocm_policy" not in toolkits
    assert not any("hip_bf16_patch" in row for row in toolkits["rocm"].values())
    assert not any("cxx_std" in row for row in torch["torch"].values())
    # compat reads them from setup.py's file
    assert compat.rocm_minimum == DATA["rocm"]["minimum"]
    assert compat.rocm_needs_patch == tuple(DATA["rocm"]["needs_patch"])
    assert compat.rocm_default_archs == tuple(DATA["rocm"]["default_archs"]) == hip.DEFAULT_ARCHS
    assert compat.cxx20_from == DATA["torch"]["cxx20_from"]
    assert compat.stable_floor == DATA["stable"]["floor"] == stable_floor()
    assert compat.stable_python == DATA["stable"]["python"]
    assert compat.stable_kinds == tuple(DATA["stable"]["backends"])
    assert "/work/" not in BUILD_TOML.read_text()  # no path of the build machine in a shipped file
    assert "recursive-include mamba_build *.py *.toml" in (REPO / "MANIFEST.in").read_text()


def test_sm_87_needs_cuda_11_4() -> None:
    """Jetson Orin's sm_87 first compiles with CUDA 11.4 (CMake's CUDA architecture table; CUDA
    13's nvcc --list-gpu-arch has it): setup.py never asks an 11.0-11.3 nvcc for it."""
    sms = lambda v: [a.sm for a in toolchain.default_archs(v, DATA)]
    assert sms("11.3") == [75, 80]
    assert sms("11.4") == [75, 80, 87]
    assert sms("11.8") == [75, 80, 87, 90]


def test_every_toolkit_compiles_what_the_plan_lists(tmp_path: Path, compat) -> None:
    """For every toolkit in builder/data/toolkits.toml: setup.py, given the environment the farm's
    executors give it, compiles exactly the plan's archs; and a CUDA plan's list is setup.py's own
    default for that toolkit (what a user building from source gets)."""
    seen = set()
    for version in compat.cuda:
        plan = one_toolkit_plan(tmp_path, f"cuda-{version}", compat, stable=False)
        assert plan.builds, version
        for b in plan.builds:
            env = spec_env(replace(b, torch_index_url=""), max_jobs=1)
            compiled, _ = toolchain.cuda_archs(b.toolkit, env, DATA)
            assert tuple(f"sm_{a.sm}" for a in compiled) == b.archs, b.id
            default, source = toolchain.cuda_archs(b.toolkit, {}, DATA)
            assert tuple(f"sm_{a.sm}" for a in default) == b.archs, (b.id, source)
            seen.add(b.accelerator + b.toolkit)
    for version in compat.rocm:
        plan = one_toolkit_plan(tmp_path, f"rocm-{version}", compat, stable=False)
        assert plan.builds, version
        for b in plan.builds:
            env = spec_env(replace(b, torch_index_url=""), max_jobs=1)
            assert tuple(toolchain.hip_archs(env, DATA)) == b.archs, b.id
            # Without the farm's list setup.py compiles build.toml's default, which every
            # release's list holds (ROCm 7 adds gfx950 and gfx12xx on the farm).
            assert set(toolchain.hip_archs({}, DATA)) <= set(b.archs), b.id
            seen.add(b.accelerator + b.toolkit)
    assert len(seen) == len(compat.cuda) + len(compat.rocm)


def test_every_arch_a_profile_may_ask_for_is_one_setup_py_compiles(compat) -> None:
    """A profile narrows to archs compat says a toolkit compiles; setup.py must accept each one."""
    for version in compat.cuda:
        acc = parse_accelerator(f"cuda-{version}")
        for arch in compat.known_archs():
            if arch.startswith("sm_") and compat.can_compile(acc, arch):
                sm = int(arch[3:])
                env = {"TORCH_CUDA_ARCH_LIST": f"{sm // 10}.{sm % 10}"}
                assert [a.sm for a in toolchain.cuda_archs(version, env, DATA)[0]] == [sm], (version, arch)


def test_the_cxx_standard_is_the_one_setup_py_compiles_with(compat) -> None:
    for minor, row in compat.torch.items():
        assert f"c++{row.cxx_std}" == toolchain.cxx_standard(row.latest, DATA), minor
    for b in load_plan(stable=True).builds + load_plan(stable=False).builds:
        assert f"c++{b.cxx_std}" == toolchain.cxx_standard(b.torch_version, DATA), b.id
    assert compat.torch["2.13"].cxx_std == 17 and compat.torch["2.14"].cxx_std == 20


def test_the_rocm_floor_and_patch_are_setup_pys(tmp_path: Path, compat) -> None:
    for version in ["5.6", "5.7", *compat.rocm]:
        acc = parse_accelerator(f"rocm-{version}")
        reason = compat.drop_reason("2.14", "3.11", acc, True, "linux_x86_64") or ""
        farm_refuses = "the HIP kernels need ROCm >=" in reason
        warned: list[str] = []
        try:
            toolchain.check_rocm(f"{version}.12345", DATA, warned.append)
            setup_refuses = False
        except toolchain.BuildConfigError:
            setup_refuses = True
        assert farm_refuses == setup_refuses, version
        assert compat.hip_bf16_patch(acc) == bool(warned) or setup_refuses, version
        # rocm_patch/apply.sh (run while a ROCm image is built) holds the same two rules in bash
        script = subprocess.run(
            ["bash", str(REPO / "rocm_patch" / "apply.sh"), str(tmp_path / "no-rocm"), f"{version}.1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (script.returncode == 3) == setup_refuses, (version, script.stderr)
        if not setup_refuses:
            assert ("no header patch needed" in script.stdout) != compat.hip_bf16_patch(acc), (version, script.stdout)


def fake_torch(tmp_path: Path, version: str, *, cuda: str | None = None, hip_: str | None = None) -> Path:
    """A stand-in torch (a ROCm or CUDA torch cannot be installed here): what setup.py's Target reads."""
    pkg = tmp_path / f"torch-{version}" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"__version__ = {version!r}\n"
        f"class version:\n    cuda = {cuda!r}\n    hip = {hip_!r}\n    git_version = None\n"
        "class _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
    )
    return pkg.parent


def setup_version(pythonpath: Path | None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MAMBA_", "PYTHONPATH"))}
    if pythonpath:
        base["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=REPO, env={**base, **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_stable_abi_floors_and_backends_agree(tmp_path: Path, compat) -> None:
    tag = "cp" + DATA["stable"]["python"].replace(".", "")
    assert tag == compat.stable_python_tag == "cp310"
    # setup.py: the tag it gives bdist_wheel and the backends it builds stably
    setup_py = _load("_facts_setup_py", REPO / "setup.py")
    target = setup_py.Target(env={"MAMBA_STABLE_ABI": "TRUE"})  # the dev venv's torch 2.13.0+cpu
    assert target.stable_tag == tag and f"{tag}-abi3" in target.summary()
    assert target.install_requires == [f"torch>={DATA['stable']['floor']}"]
    kinds = {
        "cpu": None,
        "cuda": fake_torch(tmp_path, "2.14.1+cu130", cuda="13.0"),
        "rocm": fake_torch(tmp_path, "2.14.0+rocm7.2", hip_="7.2.26015"),
    }
    for kind, path in kinds.items():
        proc = setup_version(path, MAMBA_STABLE_ABI="TRUE")
        if kind in DATA["stable"]["backends"]:
            assert proc.returncode == 0 and proc.stdout.strip().endswith("torchstable"), (kind, proc.stderr[-2000:])
        else:
            assert proc.returncode != 0 and "Traceback" not in proc.stderr, (kind, proc.stderr[-2000:])
            assert "MAMBA_STABLE_ABI=TRUE covers CPU and CUDA builds only" in proc.stderr, proc.stderr
    # the plan: stable builds only for those backends, on the Python floor, verified against the tag
    plan = load_plan(stable=True)
    stable = [b for b in plan.builds if b.stable]
    kind = lambda b: "cpu" if b.accelerator == "cpu" else "cuda" if b.accelerator.startswith("cu") else "rocm"
    assert stable and {kind(b) for b in stable} == set(compat.stable_kinds)
    assert any(kind(b) == "rocm" for b in plan.builds)  # ROCm builds exist, and stay classic
    for b in stable:
        assert b.python == compat.stable_python and b.id.endswith(f"-{tag}-{b.platform}"), b.id
        assert wheels.expected_tag(b, b.platform) == f"{tag}-abi3-{b.platform}"


def test_every_error_has_its_own_exit_code(monkeypatch, capsys) -> None:
    import builder.publishing.resolve  # noqa: F401  (its NoMatchingWheel, exit 6, is a FarmError too)

    def every(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    codes: dict[int, set[str]] = {}
    for cls in {errors.FarmError, *every(errors.FarmError)}:
        codes.setdefault(cls.exit_code, set()).add(cls.__name__)
    # MatrixError, UsageError and RecipeError are all "what you asked for is invalid"
    assert {c: n for c, n in codes.items() if len(n) > 1} == {2: {"MatrixError", "UsageError", "RecipeError"}}, codes
    assert errors.BuildFailed.exit_code not in (1, 2, 3, 4, 5, 6, 75, 130)
    assert EXIT_INFRA == errors.InfrastructureError.exit_code == 75
    # the CLI returns it (a command whose builds failed)
    failing = types.ModuleType("_facts_failing_command")

    def add_command(sub: argparse._SubParsersAction) -> None:
        def run(args) -> int:
            raise errors.BuildFailed("1 of 1 build(s) failed", hint="read its log")

        sub.add_parser("fail").set_defaults(func=run)

    failing.add_command = add_command
    monkeypatch.setitem(sys.modules, failing.__name__, failing)
    monkeypatch.setitem(cli.COMMANDS, "fail", Command(failing.__name__, "a command that fails"))
    assert cli.main(["fail"]) == errors.BuildFailed.exit_code
    err = capsys.readouterr().err
    assert "error: 1 of 1 build(s) failed" in err and "hint: read its log" in err


def test_every_gpu_architecture_the_farm_compiles_has_the_names_people_know_it_by() -> None:
    """The support and coverage pages say which GPUs a wheel runs on: DGX Spark's GB10 is sm_121, GH200 sm_90."""
    c = compat_mod.load()
    assert set(c.known_archs()) <= set(c.gpu_names), sorted(set(c.known_archs()) - set(c.gpu_names))
    assert c.gpus(["sm_121", "sm_90", "sm_999"]) == {"sm_121": "DGX Spark (GB10)", "sm_90": "H100, H200, GH200"}
    assert "GB200" in c.gpu_names["sm_100"] and "GB300" in c.gpu_names["sm_103"] and c.gpu_names["sm_110"] == "Jetson Thor"
