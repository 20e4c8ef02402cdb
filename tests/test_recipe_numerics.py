"""A recipe wheel earns cpu-checked when its [test] numerics checks ran and passed, as this checkout's smoke test does.

``[test] numerics`` names the commands that compare against a reference; each prints ``numerics {...}`` lines
(what it compared, the measured error, the tolerance). The smoke test refuses the wheel when such a command printed
none, or an error above its tolerance, whatever its exit status; the evidence record lists what ran and passed,
and the tier is read from that record. Run for real: a recipe-style wheel smoke-tested in a clean venv beside a
stand-in torch (a real torch changes nothing the numerics path reads, and costs a gigabyte).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wheelmaker import CAUSAL_CONV1D, make_fake_torch, make_wheel

from builder.errors import RecipeError, VerificationError
from builder.facts.spec import BuildSpec
from builder.planning import recipes
from builder.verifying import evidence
from builder.verifying.smoke import recipe_ran, smoke_test

# A package whose "kernel" is checked against a float64 reference, the way a recipe's numerics check would be.
KERNEL = b"""
def fast_mean(xs):
    return sum(xs) / len(xs)
"""
CHECK = (
    "import json, math, toyconv; xs = [math.sin(i) for i in range(1000)]; "
    "ref = math.fsum(xs) / len(xs); err = abs(toyconv.fast_mean(xs) - ref); "
    "print('numerics ' + json.dumps({'check': 'fast_mean vs fsum reference', 'max_abs_error': err, "
    "'tolerance': TOL}))"
)


def _spec() -> BuildSpec:
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return BuildSpec(
        id=f"causal-conv1d-cpu-torch2.13-cxx11abiTRUE-cp{py.replace('.', '')}-linux_x86_64", torch="2.13",
        torch_version="2.13.0", python=py, accelerator="cpu", toolkit=None, cxx11abi=True, platform="linux_x86_64",
        variant="cpu-torch2.13-cxx11abiTRUE", label="cputorch2.13cxx11abiTRUE", archs=(), image="test",
        torch_index_url="", cxx_std=17, manylinux="manylinux_2_28_x86_64", project="causal-conv1d",
        source=CAUSAL_CONV1D,
    )  # fmt: skip


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """(wheel, torch venv, workdir): a stand-in torch in a venv with pip, and the recipe-style wheel."""
    root = tmp_path_factory.mktemp("numerics")
    base = root / "torch-venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(base)], check=True)
    torch = make_fake_torch(root / "torch", "2.13.0")
    subprocess.run([base / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", str(torch)], check=True)
    wheel = make_wheel(root / "w", "toyconv", "1.0+cputorch2.13cxx11abitrue", files={"toyconv/__init__.py": KERNEL})
    return wheel, base, root / "work"


def _run(smoke_env, commands=(), numerics=()):
    wheel, base, work = smoke_env
    return smoke_test(wheel, _spec(), python=sys._base_executable, torch_venv=base, torch_requirement="torch==2.13.0",
                      workdir=work, imports=("torch", "toyconv"), commands=(*commands, *numerics),
                      numerics=numerics)  # fmt: skip


def _record(tmp_path: Path, smoke: dict) -> dict:
    wheel = make_wheel(tmp_path, "toyconv", "1.0+cputorch2.13cxx11abitrue")
    return evidence.make(wheel, built=None, verified={"tags": []}, smoke=smoke)


def test_a_numerics_check_that_passed_makes_the_recipe_wheel_cpu_checked(smoke_env, tmp_path):
    check = ("python", "-c", CHECK.replace("TOL", "1e-9"))
    ran = _run(smoke_env, numerics=(check,))
    (n,) = ran["numerics"]
    assert n["check"] == "fast_mean vs fsum reference" and n["device"] == "cpu" and n["tolerance"] == 1e-9
    assert 0 <= n["max_abs_error"] <= 1e-9 and "toyconv" in n["command"]
    assert "1 numerics check(s) within tolerance" in ran["line"]
    rec = _record(tmp_path, ran)
    assert evidence.tier(rec) == "cpu-checked" and evidence.tier(rec, "2.13") == "cpu-checked"
    assert evidence.tier(rec, "2.14") == "compiled"  # another torch's user: what ran proves only that it compiled
    # read back as the index and the ledger read it: the tier comes from the record itself
    path = evidence.path_of(tmp_path / rec["wheel"])
    evidence.write(path, rec)
    assert evidence.tier(evidence.read(path)) == "cpu-checked"


def test_the_same_check_run_as_a_plain_command_proves_only_that_it_compiled(smoke_env, tmp_path):
    """Printing a numerics line is not enough: only a command the recipe declares a numerics check counts."""
    ran = _run(smoke_env, commands=(("python", "-c", CHECK.replace("TOL", "1e-9")),))
    assert ran["numerics"] == [] and "numerics" not in ran["line"]
    assert evidence.tier(_record(tmp_path, ran)) == "compiled"


def test_a_numerics_check_above_its_tolerance_fails_though_it_exited_0(smoke_env):
    worse = CHECK.replace("ref = math.fsum(xs) / len(xs)", "ref = math.fsum(xs) / len(xs) + 1e-3")
    with pytest.raises(VerificationError, match=r"max abs error 0\.001 above the tolerance 1e-06, though the command"):
        _run(smoke_env, numerics=(("python", "-c", worse.replace("TOL", "1e-6")),))


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("print('all good')", "printed no numerics line"),
        ("print('numerics {not json')", "a numerics line the farm cannot read"),
        ('print(\'numerics \' + \'{"check": "x", "max_abs_error": "small", "tolerance": 1}\')', "cannot read"),
        ('print(\'numerics \' + \'{"check": "x", "max_abs_error": NaN, "tolerance": 1}\')', "cannot read"),
    ],
)
def test_a_numerics_check_that_shows_no_readable_result_is_refused(script, message):
    with pytest.raises(VerificationError, match=message):
        recipe_ran({"torch": "2.13.0", "python": "3.11"}, "torch==2.13.0", ("torch",), (("python", "-c", script),),
                   (), [(eval(script.removeprefix("print(").removesuffix(")")) + "\n", "")], (("python", "-c", script),))  # fmt: skip


def test_a_record_whose_numerics_did_not_pass_is_not_cpu_checked(tmp_path):
    rec = _record(tmp_path, {"imported": {"torch": "2.13.0"}, "numerics": [{"max_abs_error": 2.0, "tolerance": 1.0}]})
    assert evidence.tier(rec) == "compiled"
    rec["numerics"] = [{"max_abs_error": 1e-7, "tolerance": 1e-4}, {"check": "no figures"}]
    assert evidence.tier(rec) == "compiled"  # every check must show its passing figures
    rec["numerics"] = [{"max_abs_error": 1e-7, "tolerance": 1e-4}]
    assert evidence.tier(rec) == "cpu-checked"


def test_the_recipe_key_is_read_and_checked(tmp_path):
    src = (recipes.RECIPES_DIR / "causal-conv1d.toml").read_text()
    path = tmp_path / "causal-conv1d.toml"
    path.write_text(src.replace("[test]\n", '[test]\nnumerics = [["python", "-c", "print(1)"]]\n', 1))
    assert recipes.load_recipe(path).numerics == (("python", "-c", "print(1)"),)
    assert recipes.load_recipe(recipes.RECIPES_DIR / "causal-conv1d.toml").numerics == ()  # none declared: none run
    path.write_text(src.replace("[test]\n", '[test]\nnumerics = ["python -c 1"]\n', 1))
    with pytest.raises(RecipeError, match=r"causal-conv1d\.toml:\d+: test\.numerics#?\[?1?\]?"):
        recipes.load_recipe(path)
