"""The release axis, recipe side: every upstream release PyPI holds, driven right by its recipe.

Each release's own setup.py (from its real sdist, fetched by its sha256 through the host's pip settings; a release
built from its tag has the same setup.py, which the sdist still holds) takes the patches of its era (when.release):
the -gencode list it hard-codes gives way to exactly the spec's archs, and beside torch >= 2.14 its C++ standard is
C++20. The preflight's record (builder/data/preflight.toml, written by ``recipe check --releases --record``) covers
every release and says which causal-conv1d each mamba-ssm release names, as its own metadata does.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from builder.errors import PreflightError, RecipeError
from builder.facts import preflight as record
from builder.facts.spec import SdistPin
from builder.planning.recipes import (
    RECIPES_DIR,
    CellFacts,
    EnvValue,
    build_env_vars,
    decide,
    explain,
    load_recipe,
    placeholder_values,
    recipe_for,
)
from builder.sourcing.preflight import check_cell
from builder.sourcing.prepare import apply_patch
from builder.sourcing.sources import Fetcher, SourceCache
from tests.recipekit import gencode_targets, setup_py_flags

PROJECTS = ("mamba-ssm", "causal-conv1d")
RELEASES = [(name, rel.version) for name in PROJECTS for rel in recipe_for(name).releases]
CUDA_2_14 = CellFacts("2.14.1", "cuda", "13.0", True, ("sm_80", "sm_90"), "cu13torch2.14cxx11abiTRUE")
CUDA_2_4 = CellFacts("2.4.1", "cuda", "12.4", False, ("sm_80", "sm_90"), "cu12torch2.4cxx11abiFALSE")


def _sdist(name: str, version: str) -> SdistPin:
    recipe = recipe_for(name)
    rel = next(r for r in recipe.releases if r.version == version)
    return SdistPin(recipe.source.name, version, rel.sha256)


@pytest.fixture(scope="module")
def sdists(tmp_path_factory) -> SourceCache:
    """Every release's sdist (48 files, about 2.3 MB), each checked against its [[release]] sha256."""
    cache = SourceCache(tmp_path_factory.mktemp("sdists"), Fetcher.from_host())
    for name, version in RELEASES:
        cache.fetch(_sdist(name, version))
    return cache


def _setup_py(cache: SourceCache, name: str, version: str, dest: Path) -> Path:
    """The release's own setup.py, alone in a new folder DEST (what its setup.py patches edit)."""
    pin = _sdist(name, version)
    dest.mkdir(parents=True)
    with tarfile.open(cache.path(pin)) as tar:
        member = tar.extractfile(f"{pin.name}-{version}/setup.py")
        (dest / "setup.py").write_bytes(member.read())
    return dest


def _setup_patches(name: str, version: str, facts: CellFacts):
    recipe = recipe_for(name).at_release(version)
    return recipe, [d.patch for d in decide(recipe, facts) if d.applies and d.patch.file == "setup.py"]


@pytest.mark.parametrize(("name", "version"), RELEASES)
def test_every_release_takes_its_eras_patches_and_builds_exactly_the_specs_archs(sdists, tmp_path, name, version):
    for facts in (CUDA_2_14, CUDA_2_4):
        recipe, patches = _setup_patches(name, version, facts)
        tree = _setup_py(sdists, name, version, tmp_path / facts.torch)
        for patch in patches:  # a patch whose search text is not its era's raises PatchError here
            apply_patch(tree, patch, placeholder_values(facts, version), recipe)
        archs = [p.name for p in patches if p.name.startswith("cuda-archs")]
        assert len(archs) == 1, (version, [p.name for p in patches])
        text = (tree / "setup.py").read_text()
        assert not re.findall(r'cc_flag\.append\("arch=compute_', text), f"{version}: a hard-coded target is left"
        if facts is CUDA_2_14:
            assert '"-std=c++17"' not in text and "-std=c++20" in text, version
        else:
            assert "-std=c++20" not in text, version  # torch < 2.14 keeps the release's own standard


ERA_FIRSTS = sorted({
    (name, next(r.version for r in recipe_for(name).releases if p.when.release.contains(r.version)))
    for name in PROJECTS for p in recipe_for(name).patches if p.name.startswith("cuda-archs")
})  # fmt: skip


@pytest.mark.parametrize(("name", "version"), ERA_FIRSTS)
def test_the_first_release_of_each_era_gives_nvcc_the_specs_archs_and_cxx20(sdists, tmp_path, name, version):
    """setup.py itself runs (its nvcc and torch answered by stand-ins): what it hands the compiler."""
    recipe, patches = _setup_patches(name, version, CUDA_2_14)
    tree = _setup_py(sdists, name, version, tmp_path / "tree")
    for patch in patches:
        apply_patch(tree, patch, placeholder_values(CUDA_2_14, version), recipe)
    for sub in ("csrc", name.replace("-", "_")):
        (tree / sub).mkdir()
    (tree / name.replace("-", "_") / "__init__.py").write_text(f'__version__ = "{version}"\n')
    for extra in ("README.md",):
        (tree / extra).write_text("")
    got = setup_py_flags(tree, build_env_vars(recipe, CUDA_2_14), tmp_path, torch="2.14.1", cuda="13.0")
    (ext,) = got["ext_modules"]
    assert gencode_targets(ext["extra_compile_args"]["nvcc"]) == ["sm_80", "sm_90"]
    assert "-std=c++20" in ext["extra_compile_args"]["cxx"] and "-std=c++20" in ext["extra_compile_args"]["nvcc"]


def test_the_release_condition_says_why_a_patch_applies_or_not():
    old = "\n".join(explain(recipe_for("mamba-ssm").at_release("1.1.1"), CUDA_2_14))
    assert "cell: release 1.1.1 x torch 2.14.1" in old
    assert (
        "patch cuda-archs-1.0.1 (setup.py, 1 edit): applies: accelerator cuda is cuda; release 1.1.1 matches <1.2.1"
        in old
    )
    assert (
        "patch cuda-archs (setup.py, 2 edits): skipped: accelerator cuda is cuda; release 1.1.1 does not match >=2.3.2"
        in old
    )
    # the default release ([source]) is what a cell without a release builds
    new = "\n".join(explain(recipe_for("mamba-ssm"), CUDA_2_14))
    assert "release 2.3.2.post1 matches >=2.3.2" in new
    # a canary is its own .devN version: after every release it descends from
    canary = recipe_for("causal-conv1d").at("canary")
    applied = {d.patch.name for d in decide(canary, replace(CUDA_2_14, source="canary")) if d.applies}
    assert "cuda-archs" in applied and not any(n.startswith("cuda-archs-") for n in applied), applied


def test_a_release_condition_is_checked_where_it_is_written(tmp_path):
    text = (RECIPES_DIR / "mamba-ssm.toml").read_text()
    bad = tmp_path / "mamba-ssm.toml"
    bad.write_text(text.replace('release = "<1.2.1"', 'release = "<1.2.x"', 1))
    with pytest.raises(RecipeError) as err:
        load_recipe(bad)
    line = next(i for i, ln in enumerate(bad.read_text().splitlines(), 1) if '"<1.2.x"' in ln)
    assert str(err.value).startswith(f"{bad}:{line}: patch#") and ".when.release: " in str(err.value)
    assert "is not a version specifier" in str(err.value)
    # which release a cell builds is the plan's choice, never a reason to refuse it: [requires] takes no release
    bad.write_text(text.replace('cuda = ">=11.6"\n', 'cuda = ">=11.6"\nrelease = ">=2"\n', 1))
    with pytest.raises(RecipeError, match=r'requires\.release: unknown key "release"'):
        load_recipe(bad)


# --------------------------------------------------------------------------- the recorded preflight


def test_the_record_covers_every_release_beside_torch_2_14():
    recorded = record.load()
    for name, version in RELEASES:
        cell = recorded.get((name, version, "2.14", "cu13"))
        assert cell is not None, f"{name} {version}: not in {record.RECORD}: run `python -m builder recipe check " \
                                 "--releases --record`"  # fmt: skip
        assert cell.reason is None, (name, version, cell.reason)


def test_a_recorded_failure_is_the_real_error():
    # releases before upstream's HIP branch have no ROCm build: the patch that would target it does not apply
    reason = record.preflight_reason("mamba-ssm", "1.1.1", "2.8.0", "rocm-6.4")
    assert reason is not None and "patch 'rocm-archs' no longer applies to setup.py" in reason
    assert record.preflight_reason("mamba-ssm", "2.2.5", "2.14.1", "cu13") is None
    assert record.preflight_reason("mamba-ssm", "2.2.5", "2.14", "cuda-13.0") is None


def _declared(cache: SourceCache, version: str) -> list[str]:
    """The causal-conv1d requirements a mamba-ssm sdist's setup.py and pyproject.toml spell out, commented-out
    lines left out (setup.py's install_requires names ``# "causal_conv1d>=1.4.0"`` from 2.1.0 on: no metadata)."""
    pin = _sdist("mamba-ssm", version)
    found = []
    with tarfile.open(cache.path(pin)) as tar:
        for name in ("setup.py", "pyproject.toml"):
            try:
                text = tar.extractfile(f"{pin.name}-{version}/{name}").read().decode()
            except KeyError:
                continue
            live = [ln for ln in text.splitlines() if not ln.strip().startswith("#")]
            found += [m for ln in live for m in re.findall(r'"(causal[_-]conv1d[^"]*)"', ln)]
    return sorted({m for m in found if m not in ("causal-conv1d", "causal_conv1d") or len(found) == 1})


@pytest.mark.parametrize("version", [v for n, v in RELEASES if n == "mamba-ssm"])
def test_each_mamba_release_names_the_causal_conv1d_its_own_metadata_does(sdists, version):
    """The pairing comes from the recorded metadata (Requires-Dist, an extra's included), as the release's backend
    prepared it; the release's own files, read here as text, say the same."""
    named = _declared(sdists, version)
    said = record.pairs(version)
    if not named:
        assert said is None, version
        return
    assert said is not None, version
    (spec,) = {re.sub(r"^causal[_-]conv1d", "", n) for n in named if re.search(r"[<>=]", n)} or {""}
    assert SpecifierSet(said) == SpecifierSet(spec), (version, named, said)


# --------------------------------------------------------------------------- the preflight's compile checks


def test_a_cuda_cell_whose_setup_py_builds_no_cuda_code_fails_its_preflight(tmp_path):
    recipe = recipe_for("causal-conv1d")
    skip = dict(recipe.env)
    skip["CAUSAL_CONV1D_SKIP_CUDA_BUILD"] = (EnvValue("TRUE"),)
    cache = SourceCache(tmp_path / "cache", Fetcher.from_host())
    with pytest.raises(PreflightError, match="setup.py declares no CUDA source for this CUDA cell"):
        check_cell(replace(recipe, env=skip), CUDA_2_14, tmp_path / "w", cache, compile=True)


@pytest.mark.slow
def test_the_syntax_only_compile_catches_cxx17_beside_torch_2_14(tmp_path):
    """The compile sample (behind --run-slow: tens of seconds a unit): mamba-ssm 2.2.5's bindings against torch
    2.14.1's headers, with its own -std=c++17 and with the recipe's C++20."""
    from builder.sourcing import syntax

    if syntax.torch_headers("2.14.1") is None or shutil.which("g++") is None:
        pytest.skip("no torch 2.14.1 headers (the farm's torch cache or MAMBA_FARM_TORCH_HEADERS) or no g++ here")
    recipe = recipe_for("mamba-ssm").at_release("2.2.5")
    cache = SourceCache(tmp_path / "cache", Fetcher.from_host())
    ok = check_cell(recipe, CUDA_2_14, tmp_path / "ok", cache, compile=True)
    assert "compiles against torch 2.14.1's headers" in ok.compiled
    plain = replace(recipe, patches=tuple(p for p in recipe.patches if p.name != "cxx20"))
    with pytest.raises(PreflightError, match=r"compile: .*C\+\+20 or later compatible compiler is required"):
        check_cell(plain, CUDA_2_14, tmp_path / "plain", cache, compile=True)


def test_explain_takes_one_of_the_releases(cli):
    args = ("--torch", "2.14.1", "--accelerator", "cuda-13.0", "--archs", "sm_80")
    proc = cli("recipe", "explain", "mamba-ssm", "--release", "2.0.4", *args)
    assert proc.returncode == 0, proc.stderr
    assert "mamba-ssm 2.0.4 (git https://github.com/state-spaces/mamba.git at f9dbb4fdb270)" in proc.stdout
    assert "patch cuda-archs-1.2.1 (setup.py, 1 edit): applies" in proc.stdout
    assert "patch cxx20-1.0.1 (setup.py, 1 edit): applies" in proc.stdout
    bad = cli("recipe", "explain", "mamba-ssm", "--release", "9.9", *args)
    assert bad.returncode == 2 and 'no release "9.9" of mamba-ssm' in bad.stderr and "Traceback" not in bad.stderr
