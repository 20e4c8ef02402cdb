"""The farm builds upstream's packages (causal-conv1d, mamba-ssm) from their pinned sdists, for real.

In Docker (the CI set): ``build --profile ci-upstream`` compiles, verifies, smoke-tests and indexes both; pip
installs them from the served index beside torch 2.14.1; a second run builds nothing. Cheap failures: a
cached sdist that is not its pin, and a patch that no longer applies, each fail only their build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest
from farmkit import REPO, checked_evidence, docker_client, run_build
from indexkit import find_python, serve
from sharedruns import torch_venv

from builder.errors import PatchError, SourceIntegrityError
from builder.planning.plan import load_plan
from builder.planning.recipes import load_recipes

LABEL = "cu13torch2.14cxx11abiTRUE"
VERSIONS = {"causal-conv1d": "1.7.0", "mamba-ssm": "2.3.2.post1"}
EXTENSIONS = {"causal-conv1d": "causal_conv1d_cuda", "mamba-ssm": "selective_scan_cuda"}


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name).decode()


# The patches of the CI set's trimmed builds (ci-upstream's trim), after the cell's own.
TRIM = {
    "causal-conv1d": ("trim-dispatch", "trim-fwd", "trim-bwd", "trim-update"),
    "mamba-ssm": ("trim-sources", "trim-dispatch"),
}


def rec_trim(spec: dict) -> bool:
    return spec["provenance"]["recipe"].get("trim", False)


def _kernel_dtypes(wheel: Path, extension: str) -> set[str]:
    """The input dtypes of the kernel launchers the wheel's extension defines (``selective_scan_fwd_cuda<float,
    float>``, ``causal_conv1d_fwd_cuda<c10::Half, float>``), read from its symbol table."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if re.fullmatch(rf"{extension}\.cpython-[^/]*\.so", n)]
        data = zf.read(name)
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(data)
        f.flush()
        # the static symbol table, and the dynamic one (which a stripped library keeps)
        out = "".join(
            subprocess.run(
                ["nm", "-C", "--defined-only", *flag, f.name], capture_output=True, text=True, check=False
            ).stdout
            for flag in ((), ("-D",))
        )
    found = re.findall(r"\b(?:selective_scan|causal_conv1d)\w*_cuda<([\w:]+),", out)
    assert found, out[-2000:]
    return {t.removeprefix("c10::") for t in found}


def _upstream_build(tmp_path_factory, profile: str, python: str):
    docker_client()
    dist = tmp_path_factory.mktemp(f"upstream-{python}") / "dist"
    args = ("--profile", profile, "--executor", "docker", "--jobs", "1", "--dist", str(dist))
    first = run_build(*args, timeout=3600)  # one build at a time, MAX_JOBS = the cores
    second = run_build(*args, timeout=600)
    return dist, first, second


@pytest.fixture(scope="module")
def cp311(tmp_path_factory):
    return _upstream_build(tmp_path_factory, "ci-upstream", "3.11")


@pytest.mark.docker
@pytest.mark.cuda_build
def test_ci_upstream_builds_verifies_and_indexes_both_packages(cp311):
    dist, first, _ = cp311
    assert first.rc == 0, first.out[-6000:]
    wheels = sorted((dist / "wheels").glob("*.whl"))
    names = {w.name.split("-")[0]: w for w in wheels}
    assert sorted(names) == ["causal_conv1d", "mamba_ssm"], [w.name for w in wheels]
    for project, version in VERSIONS.items():
        wheel = names[project.replace("-", "_")]
        # named like upstream's releases, one platform tag, torch pinned to the minor it was built against
        assert re.fullmatch(
            rf"{project.replace('-', '_')}-{re.escape(version)}\+{LABEL}-cp311-cp311-manylinux_2_\d+_x86_64\.whl",
            wheel.name,
        )
        meta = _metadata(wheel)
        assert "Requires-Dist: torch==2.14.*" in meta.splitlines(), meta[:2000]
        assert not [ln for ln in meta.splitlines() if re.fullmatch(r"Requires-Dist: torch\s*", ln)]
        with zipfile.ZipFile(wheel) as zf:
            assert any(
                re.fullmatch(rf"{EXTENSIONS[project]}\.cpython-311-x86_64-linux-gnu\.so", n) for n in zf.namelist()
            )
        spec = json.loads((wheel.parent / (wheel.name + ".spec.json")).read_text())
        assert spec["project"] == project and spec["source"].startswith(f"sdist:{project}=={version}@sha256:")
        # what ran, in the wheel: Docker, and the CUDA toolkit's origin (PyPI's nvidia-* wheels or the vendor image)
        rec = spec["provenance"]
        assert rec["executor"] == "docker" and rec["image"] == spec["image"] and rec["base"], rec
        toolkit = rec["toolchain"]["toolkit"]
        assert toolkit["kind"] == "cuda" and toolkit["version"] == "13.0" and toolkit["origin"] in ("pypi", "base")
        assert toolkit["origin"] != "pypi" or "nvidia-cuda-nvcc==13.0.*" in toolkit["packages"], toolkit
        assert wheel.name.endswith(f"-{rec['platform']}.whl") and rec["source"]["kind"] == "sdist", rec
        log = (dist / "logs" / f"{spec['id']}.log").read_text()
        # the CI set's build is trimmed (the profile's trim): float32's kernels alone, and the record says so
        assert f"patches applied: cxx20, cuda-archs, {', '.join(TRIM[project])}" in log
        assert spec["trim"] is True and rec_trim(spec) is True, spec["provenance"].get("recipe")
        assert _kernel_dtypes(wheel, EXTENSIONS[project]) == {"float"}
        assert "-std=c++20" in log and "-std=c++17" not in log  # the C++20 patch reached the compiler
        assert "arch=compute_80,code=sm_80" in log and "sm_90" not in log
        # nvcc ran through ccache, its objects in the image's kernel cache
        assert "in front of nvcc and c++, objects in /root/.cache/mamba-kernels/ccache" in log
        assert re.search(r"^== ccache: \d+ hits, \d+ misses$", log, re.M), log[-3000:]
    assert "index:" in first.out
    # what was checked: upstream's packages have no CPU path, so imported (the recipe's [test]) but no numerics
    records = checked_evidence(dist, first.out, numerics=False)
    for rec in records:
        assert rec["built"]["source"]["kind"] == "sdist" and rec["verified"]["archs"] == ["sm_80"], rec
        assert rec["imported"]["torch"].startswith("2.14.1"), rec["imported"]
    (conv,) = [r for r in records if r["wheel"].startswith("causal_conv1d-")]
    assert conv["imported"]["api"] == ["causal_conv1d.causal_conv1d_fn", "causal_conv1d.causal_conv1d_update"]
    assert "deps" not in conv["imported"]  # its recipe imports what needs torch alone
    # mamba-ssm's public API (Mamba, Mamba2, MambaLMHeadModel, its ops), whose modules import its declared
    # dependencies: installed beside torch 2.14.1 first (the recipe's deps = true), torch itself never among them
    (mamba,) = [r for r in records if r["wheel"].startswith("mamba_ssm-")]
    imported = mamba["imported"]
    assert imported["api"] == list(load_recipes()["mamba-ssm"].api), imported
    assert {"mamba_ssm.Mamba", "mamba_ssm.Mamba2", "mamba_ssm.models.mixer_seq_simple.MambaLMHeadModel"} <= set(
        imported["api"]
    )
    assert "mamba_ssm" in imported["modules"], imported
    names = {re.match(r"[A-Za-z0-9._-]+", d).group(0).lower() for d in imported["deps"]}
    assert {"einops", "transformers", "triton"} <= names and "torch" not in names, imported["deps"]
    assert re.search(r"mamba-ssm-\S+: dependency layer \S+: \d+ requirement\(s\) \(\d+s\)", first.out), first.out[
        -3000:
    ]


@pytest.mark.docker
@pytest.mark.cuda_build
def test_pip_installs_both_from_the_served_index_next_to_torch_2_14_1(cp311, tmp_path):
    dist, first, _ = cp311
    assert first.rc == 0, first.out[-3000:]
    python = find_python("3.11")
    if python is None:
        pytest.skip("no Python 3.11 on this machine")
    # torch through the host's pip settings (its local wheelhouse), as a user has it: the farm's smoke-test venv
    # of that Python and torch (made that way), hard-linked (tests/sharedruns.py)
    vpy = str(torch_venv(tmp_path / "venv", python, "torch==2.14.1", dict(os.environ)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    variant = "cu13-torch2.14-cxx11abiTRUE"
    with serve(dist / "index") as url:
        pins = [f"{p}=={v}+{LABEL}" for p, v in VERSIONS.items()]
        # --no-deps: upstream's mamba-ssm requires triton, transformers, tilelang...; torch is there already
        proc = subprocess.run(
            [vpy, "-m", "pip", "install", "--no-deps", "--index-url", f"{url}/{variant}/", *pins],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    check = subprocess.run(
        [vpy, "-I", "-c", "import torch, selective_scan_cuda, causal_conv1d_cuda; print(torch.__version__)"],
        capture_output=True, text=True, cwd="/",
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.strip().startswith("2.14.1")


@pytest.mark.docker
@pytest.mark.cuda_build
def test_a_second_run_builds_nothing(cp311):
    dist, first, second = cp311
    assert first.rc == 0, first.out[-3000:]
    assert second.rc == 0, second.out[-3000:]
    assert "2 up to date, 0 to build" in second.out
    assert second.seconds < 300


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cuda_build
def test_cp312_builds_of_the_same_torch_compile_only_what_includes_python(cp311, tmp_path_factory):
    assert cp311[1].rc == 0, cp311[1].out[-3000:]
    dist, first, second = _upstream_build(tmp_path_factory, "ci-upstream-cp312", "3.12")
    assert first.rc == 0, first.out[-6000:]
    wheels = sorted(w.name for w in (dist / "wheels").glob("*.whl"))
    assert len(wheels) == 2 and all("-cp312-cp312-manylinux_2_" in w for w in wheels), wheels
    assert second.rc == 0 and "0 to build" in second.out
    for project in VERSIONS:
        ids = {d: next((dd / "logs").glob(f"{project}-*-{tag}-*.log")) for d, dd, tag in
               (("cp311", cp311[0], "cp311"), ("cp312", dist, "cp312"))}  # fmt: skip
        logs = {k: v.read_text() for k, v in ids.items()}
        # every .cu compiles once for both Pythons: cp312 takes them all from ccache, and only the
        # binding (.cpp, which includes Python.h) compiles again
        cu = len(re.findall(r"^\s*\[\d+/\d+\] ccache \S*nvcc ", logs["cp311"], re.M))
        hits, misses = map(int, re.search(r"^== ccache: (\d+) hits, (\d+) misses$", logs["cp312"], re.M).groups())
        assert cu > 0 and hits >= cu and misses <= 2, (project, cu, hits, misses)
        cpu = {k: float(re.search(r"^== compile cpu: ([\d.]+) s", v, re.M).group(1)) for k, v in logs.items()}
        print(f"{project}: compile cpu cp311 {cpu['cp311']:.0f} s, cp312 {cpu['cp312']:.0f} s "
              f"({cpu['cp312'] / cpu['cp311']:.2f}); ccache on cp312: {hits} hits, {misses} misses")  # fmt: skip


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cuda_build
def test_the_full_build_of_the_ci_cell_compiles_every_dtype(cp311, tmp_path_factory):
    """ci-upstream-full: the CI set's cell as a release builds it, every kernel (fp32, fp16, bf16), no trim patch."""
    dist, first, _ = _upstream_build(tmp_path_factory, "ci-upstream-full", "3.11")
    assert first.rc == 0, first.out[-6000:]
    for wheel in sorted((dist / "wheels").glob("*.whl")):
        spec = json.loads((wheel.parent / (wheel.name + ".spec.json")).read_text())
        assert spec["trim"] is False and not rec_trim(spec), spec["provenance"]["recipe"]
        assert "patches applied: cxx20, cuda-archs\n" in (dist / "logs" / f"{spec['id']}.log").read_text()
        assert _kernel_dtypes(wheel, EXTENSIONS[spec["project"]]) == {"float", "Half", "BFloat16"}


# --------------------------------------------------------------------------- cheap failures

CAUSAL_ID = f"causal-conv1d-{'cu13-torch2.14-cxx11abiTRUE'}-cp311-linux_x86_64"
CPU_ID = "cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64"


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cuda_build
def test_causal_conv1d_cp314_through_its_recipe_with_the_farms_own_interpreter(tmp_path_factory):
    """Upstream's causal-conv1d for Python 3.14, which neither the host nor the base image has: the farm's own
    CPython (builder/environments/interpreters.py) builds it from the pinned sdist; verified, smoke-tested (its recipe's
    imports under torch 2.14.1, which ships cp314) and tagged for the base's glibc as the cp311 wheel is."""
    from builder.planning.plan import load_plan

    dist, first, second = _upstream_build(tmp_path_factory, "ci-upstream-cp314", "3.14")
    assert first.rc == 0, first.out[-6000:]
    (spec,) = load_plan(profile="ci-upstream-cp314").builds
    assert spec.python == "3.14", spec
    (wheel,) = (dist / "wheels").glob("*.whl")
    # the label as built, and the base's glibc's manylinux tag, as the cp311 wheel of the CI set has them
    head = f"causal_conv1d-{VERSIONS['causal-conv1d']}+{LABEL}-cp314-cp314"
    assert re.fullmatch(rf"{re.escape(head)}-manylinux_2_\d+_x86_64\.whl", wheel.name), wheel.name
    assert second.rc == 0 and "0 to build" in second.out


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cuda_build
@pytest.mark.parametrize(
    "python, torch", [("3.15", "2.15"), ("3.13", "2.12"), ("3.10", "2.13")], ids=["cp315", "cp313", "cp310"]
)
def test_causal_conv1d_sample_is_the_release_cells_evidence(tmp_path_factory, python, torch):
    """The release's samples of Python and torch that no other test builds: upstream's causal-conv1d for Python 3.15
    on torch 2.15 (the farm's own CPython; only torch 2.15 ships cp315), for Python 3.13 on torch 2.12 and for Python
    3.10 on torch 2.13, each built
    from the pinned sdist, verified, smoke-imported under that torch and Python (the extension and its public API),
    and its evidence record one that the release plan's cell takes its tier from."""
    from builder.publishing import tiers
    from builder.verifying import evidence

    profile, py = f"ci-upstream-cp{python.replace('.', '')}", python.replace(".", "")
    dist, first, second = _upstream_build(tmp_path_factory, profile, python)
    assert first.rc == 0, first.out[-6000:]
    (spec,) = load_plan(profile=profile).builds
    assert (spec.python, spec.torch, spec.platform) == (python, torch, "linux_x86_64"), spec
    (wheel,) = (dist / "wheels").glob("*.whl")
    # the base's glibc sets the manylinux tag (the host's Debian base: 2_34; the manylinux image: the plan's 2_28)
    head = f"causal_conv1d-{VERSIONS['causal-conv1d']}+cu13torch{torch}cxx11abiTRUE-cp{py}-cp{py}"
    assert re.fullmatch(rf"{re.escape(head)}-manylinux_2_\d+_x86_64\.whl", wheel.name), wheel.name
    tag = wheel.name.removesuffix(".whl").split("-", 2)[2]
    assert f"Requires-Dist: torch=={torch}.*" in _metadata(wheel).splitlines()
    with zipfile.ZipFile(wheel) as zf:
        assert f"causal_conv1d_cuda.cpython-{py}-x86_64-linux-gnu.so" in zf.namelist(), zf.namelist()
    # verify passed (the wheel is in dist/wheels) and says what it checked; the smoke test imported the extension
    # and the recipe's public API with that torch on that Python
    (rec,) = checked_evidence(dist, first.out, numerics=False, modules=("causal_conv1d_cuda", "causal_conv1d"))
    assert rec["verified"]["tags"] == [tag] and rec["verified"]["machine"] == "x86_64", rec["verified"]
    assert rec["verified"]["archs"] == ["sm_80"] and set(rec["verified"]["abi"].values()) == {"cxx11"}, rec["verified"]
    assert rec["imported"]["api"] == ["causal_conv1d.causal_conv1d_fn", "causal_conv1d.causal_conv1d_update"]
    assert rec["imported"]["python"].startswith(f"{python}.") and rec["imported"]["torch"].startswith(f"{torch}."), rec[
        "imported"
    ]
    assert rec["built"]["executor"] == "docker" and rec["built"]["torch"].startswith(f"{torch}."), rec["built"]
    # the release builds this kind of wheel for its cell of that Python and torch, which takes its tier from this record
    release = load_plan(profile="release")
    (cell,) = [(c, t, r) for c, b, t, r in tiers.cell_tiers(release, [rec]) if r is not None]
    assert (cell[0].python, cell[0].torch, cell[1]) == (python, torch, evidence.tier(rec, torch)), cell[:2]
    assert cell[1] == "compiled"  # imported, no CPU numerics: upstream's causal-conv1d has no CPU path
    assert second.rc == 0 and "0 to build" in second.out


def test_a_cached_sdist_whose_bytes_are_not_the_pin_is_refused(tmp_path):
    spec = load_plan(profile="ci-upstream", only=[CAUSAL_ID]).builds[0]
    sha = spec.source.rsplit("@sha256:", 1)[1]
    cache = tmp_path / "cache"
    planted = cache / "sdists" / sha / "causal_conv1d-1.7.0.tar.gz"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"not the sdist upstream published")
    dist = tmp_path / "dist"
    run = run_build(
        "--profile", "ci-upstream", "--only", CAUSAL_ID, "--executor", "host", "--dist", str(dist),
        env={"MAMBA_FARM_CACHE": str(cache)}, timeout=300,
    )  # fmt: skip
    assert run.rc == SourceIntegrityError.exit_code, run.out[-3000:]
    assert f"does not match the pin {sha}" in run.out
    assert not list((dist / "wheels").glob("*.whl"))
    assert not planted.exists() and list((cache / "sdists" / "quarantine").iterdir())  # never found again as good
    assert "executor:" not in run.out  # refused before any toolchain was made for it


def test_a_patch_that_no_longer_applies_fails_that_build_and_the_other_publishes(tmp_path):
    # A copy of the matrix next to the checkout's sources (same inputs), with its own recipes folder
    # holding causal-conv1d's recipe whose cxx20 search text upstream no longer has.
    root = tmp_path / "farm"
    root.mkdir()
    for name in ("csrc", "setup.py", "mamba_ssm"):
        (root / name).symlink_to(REPO / name)
    text = (REPO / "matrix.toml").read_text() + (
        '\n[profiles.pair]\nprojects = ["checkout", "causal-conv1d"]\nplatform = "linux_x86_64"\n'
        'archs = ["sm_80"]\nstable_abi = false\nselect = [\n'
        '  { accelerator = "cpu", torch = "2.13", python = "3.11" },\n'
        '  { accelerator = "cuda-13.0", torch = "2.14", python = "3.11" },\n]\n'
    )
    (root / "matrix.toml").write_text(text)
    (root / "recipes").mkdir()
    recipe = (REPO / "recipes" / "causal-conv1d.toml").read_text()
    broken = recipe.replace("search = '\"-std=c++17\"'", "search = '\"-std=c++14\"'", 1)
    assert broken != recipe
    (root / "recipes" / "causal-conv1d.toml").write_text(broken)
    dist = tmp_path / "dist"
    run = run_build(
        "--matrix", str(root / "matrix.toml"), "--profile", "pair", "--only", CPU_ID, CAUSAL_ID,
        "--executor", "host", "--dist", str(dist), timeout=3000,
    )  # fmt: skip
    assert run.rc == PatchError.exit_code, run.out[-4000:]
    assert "patch 'cxx20' no longer applies to setup.py" in run.out
    assert "1 of 2 build(s) failed" in run.out
    wheels = sorted(w.name for w in (dist / "wheels").glob("*.whl"))
    assert len(wheels) == 1 and wheels[0].startswith("mamba_ssm-") and "cputorch2.13" in wheels[0], wheels
    assert "index: 1 wheel(s)" in run.out
    log = (dist / "logs" / f"{CAUSAL_ID}.log").read_text()
    assert "PatchError" in log and "setup.py" in log
    shutil.rmtree(dist, ignore_errors=True)


# --------------------------------------------------------------------------- plan, env, relabel (no build)


def test_plan_explain_names_the_project_and_shows_each_cells_patches(capsys):
    from builder.commands.cli import main

    assert main(["plan", "--profile", "ci-upstream", "--explain"]) == 0
    out = capsys.readouterr().out
    for project in VERSIONS:
        assert f"{project}-cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64:" in out
    assert out.count("patch cxx20 (setup.py") == 2 and out.count("patch cuda-archs (setup.py") == 2
    assert out.count("patch rocm-archs (setup.py") == 2 and "skipped: accelerator cuda is not rocm" in out
    assert "MAMBA_FORCE_CXX11_ABI=TRUE" in out and f"CAUSAL_CONV1D_LOCAL_VERSION={LABEL}" in out


def test_recipe_specs_are_classic_and_carry_their_source_and_env():
    builds = load_plan(profile="ci-upstream").builds
    assert [b.project for b in builds] == ["causal-conv1d", "mamba-ssm"]
    for b in builds:
        assert not b.stable and b.from_recipe and b.archs == ("sm_80",) and b.cxx_std == 20
        assert b.source.startswith(f"sdist:{b.project}=={VERSIONS[b.project]}@sha256:")
        assert b.extensions == (f"{EXTENSIONS[b.project]}*.so",)
        assert "TORCH_CUDA_ARCH_LIST" in b.unset
    # the checkout's ids and hashes stay what they were
    ci = load_plan(profile="ci").builds
    assert [b.id for b in ci][0] == CPU_ID and all(not b.from_recipe and b.project == "mamba-ssm" for b in ci)


def test_a_profile_naming_an_unknown_project_is_refused_with_its_line(tmp_path):
    from builder.errors import MatrixError

    text = (
        (REPO / "matrix.toml")
        .read_text()
        .replace('projects = ["causal-conv1d", "mamba-ssm"]', 'projects = ["causal-conv1", "mamba-ssm"]', 1)
    )
    (tmp_path / "matrix.toml").write_text(text)
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    for name in ("csrc", "setup.py", "mamba_ssm"):
        (tmp_path / name).symlink_to(REPO / name)
    with pytest.raises(MatrixError) as err:
        load_plan(tmp_path / "matrix.toml", profile="ci-upstream")
    assert "profiles.ci-upstream.projects" in str(err.value) and 'did you mean "causal-conv1d"' in str(err.value)
    with pytest.raises(MatrixError, match='--projects "nope"'):
        load_plan(profile="ci-upstream", projects=["nope"])
    assert [b.project for b in load_plan(profile="ci-upstream", projects=["mamba-ssm"]).builds] == ["mamba-ssm"]


def test_the_build_env_is_the_recipes_set_and_unset():
    from builder.building.executors import spec_env

    spec = load_plan(profile="ci-upstream").builds[1]
    env = spec_env(spec, max_jobs=2)
    assert env["MAMBA_FORCE_CXX11_ABI"] == "TRUE" and env["MAMBA_LOCAL_VERSION"] == LABEL
    assert "TORCH_CUDA_ARCH_LIST" not in env and env["MAX_JOBS"] == "2"
    assert set(env["FARM_UNSET"].split()) == set(spec.unset)
    # build.sh removes them even where the image (or the host) sets them
    lines = (REPO / "builder" / "building" / "executors" / "build.sh").read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("read -r -a unset_names"))
    snippet = "\n".join(lines[first : first + 2])
    probe = subprocess.run(
        ["bash", "-c", f"set -u\n{snippet}\nenv"], capture_output=True, text=True, check=False,
        env={"FARM_UNSET": env["FARM_UNSET"], "TORCH_CUDA_ARCH_LIST": "9.0", "NVIDIA_PRODUCT_NAME": "PyTorch", "KEEP": "1"},
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    seen = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    assert seen["KEEP"] == "1" and "TORCH_CUDA_ARCH_LIST" not in seen and "NVIDIA_PRODUCT_NAME" not in seen


def test_only_recipe_cuda_builds_go_through_ccache():
    from builder.building.executors import spec_env

    recipe = load_plan(profile="ci-upstream").builds
    checkout = load_plan(profile="ci").builds
    rocm = [b for b in load_plan(profile="release-upstream-rocm").builds if b.python == "3.11"][:1]
    assert recipe and checkout and rocm
    assert all(spec_env(b, max_jobs=1).get("FARM_CCACHE") == "nvcc" for b in recipe)
    # our own package has its kernel cache; torch never wraps hipcc
    assert not [b.id for b in checkout + rocm if "FARM_CCACHE" in spec_env(b, max_jobs=1)]


def test_pin_torch_replaces_upstreams_unpinned_torch(tmp_path):
    from wheelmaker import make_wheel

    from builder.verifying.relabel import pin_torch
    from builder.verifying.wheels import read_facts

    raw = make_wheel(
        tmp_path / "raw", "mamba-ssm", f"2.3.2.post1+{LABEL.lower()}", "cp311-cp311-linux_x86_64",
        requires=("torch", "einops", 'torch; extra == "dev"', "triton>=3.5.0"),
    )  # fmt: skip
    assert read_facts(raw).requires_torch == ""
    out = pin_torch(raw, "2.14.1", tmp_path / "out")
    facts = read_facts(out)
    assert facts.requires_torch == "==2.14.*" and facts.label == LABEL.lower()
    meta = _metadata(out).splitlines()
    assert meta.count("Requires-Dist: torch==2.14.*") == 1 and "Requires-Dist: einops" in meta
    assert 'Requires-Dist: torch; extra == "dev"' in meta
    with zipfile.ZipFile(out) as zf:  # RECORD hashes the rewritten METADATA
        record = zf.read(next(n for n in zf.namelist() if n.endswith("RECORD"))).decode()
        assert zf.testzip() is None
    from builder.verifying.relabel import _record_hash

    with zipfile.ZipFile(out) as zf:
        name = next(n for n in zf.namelist() if n.endswith("METADATA"))
        assert f"{name},{_record_hash(zf.read(name))}," in record


def test_the_farm_writes_the_label_into_a_wheel_whose_package_set_none(tmp_path):
    from wheelmaker import make_wheel

    from builder.errors import VerificationError
    from builder.verifying.relabel import pin_torch
    from builder.verifying.wheels import read_facts

    raw = make_wheel(tmp_path / "raw", "mamba-ssm", "2.3.2.post1", "cp311-cp311-linux_x86_64", requires=("torch",))
    out = pin_torch(raw, "2.14.1", tmp_path / "out", label=LABEL)
    # the file name, METADATA and the dist-info folder all carry it; RECORD vouches for the moved files
    assert out.name == f"mamba_ssm-2.3.2.post1+{LABEL}-cp311-cp311-linux_x86_64.whl"
    facts = read_facts(out)
    assert facts.label == LABEL and facts.metadata_version == f"2.3.2.post1+{LABEL}" and facts.requires_torch == "==2.14.*"
    with zipfile.ZipFile(out) as zf:
        assert {n.split("/")[0] for n in zf.namelist() if ".dist-info/" in n} == {f"mamba_ssm-2.3.2.post1+{LABEL}.dist-info"}
    proc = subprocess.run(["python3", "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(tmp_path / "t"),
                           str(out)], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the package's own label, the same in another case, is kept; another one is refused, saying what to do
    same = make_wheel(tmp_path / "same", "mamba-ssm", f"2.3.2.post1+{LABEL.lower()}", "cp311-cp311-linux_x86_64")
    assert read_facts(pin_torch(same, "2.14.1", tmp_path / "o2", label=LABEL)).label.lower() == LABEL.lower()
    other = make_wheel(tmp_path / "other", "mamba-ssm", "2.3.2.post1+cu12torch2.6", "cp311-cp311-linux_x86_64")
    with pytest.raises(VerificationError, match="labels its own version 2.3.2.post1\\+cu12torch2.6") as err:
        pin_torch(other, "2.14.1", tmp_path / "o3", label=LABEL)
    assert "the farm labels the wheel itself" in err.value.hint


def test_the_audits_read_the_specs_extension_modules_and_refuse_a_wheel_without_them():
    from builder.errors import VerificationError
    from builder.verifying.wheels import audited_extensions

    spec = load_plan(profile="ci-upstream").builds[0]
    so = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
    assert audited_extensions((so, "other/helper.so"), spec) == [so]
    with pytest.raises(VerificationError, match=r"no extension module matching causal_conv1d_cuda\*\.so"):
        audited_extensions(("selective_scan_cuda.cpython-311-x86_64-linux-gnu.so",), spec)
