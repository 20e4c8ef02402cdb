"""A project that is no part of this repository, added from docs/maintainer/add-recipe.md alone: Dao-AILab's
fast-hadamard-transform 1.1.0, whose recipe pins the v1.1.0 tag's source archive by sha256.

Always: the recipe loads and plans. With ``MAMBA_FARM_TEST_FHT_GIT`` (a clone of its repository), the tag's
archive is served on 127.0.0.1 at GitHub's path and fetched, checked and patched (no test reaches GitHub).
``--run-slow``: built with both executors, installed beside torch 2.14.1 and imported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from farmkit import REPO, docker_client, run_build
from indexkit import serve

from builder.facts.spec import ArchivePin
from builder.planning.plan import load_plan
from builder.planning.recipes import CellFacts, explain, load_recipe, supported

RECIPE = REPO / "recipes" / "fast-hadamard-transform.toml"
PROFILE = "ci-thirdparty"
TAG, COMMIT = "v1.1.0", "1cc807efbd6cc001df359822d60bf6052dd66859"  # the tag, as the project's repository has it
TAG_PATH = f"Dao-AILab/fast-hadamard-transform/archive/refs/tags/{TAG}.tar.gz"
LABEL = "cu13torch2.14cxx11abiTRUE"
SMOKE_TORCH = Path.home() / ".cache" / "mamba-farm" / "smoke" / "cp311-torch2.14.1" / "torch-envs"
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def test_the_recipe_pins_the_tag_archive_and_plans_one_cu13_build():
    recipe = load_recipe(RECIPE)
    assert isinstance(recipe.source, ArchivePin)
    assert recipe.source.url == f"https://github.com/{TAG_PATH}" and recipe.source.version == TAG[1:]
    assert recipe.source.provenance()["kind"] == "archive"
    plan = load_plan(profile=PROFILE)
    (build,) = plan.builds
    assert build.project == "fast-hadamard-transform" and (build.accelerator, build.toolkit) == ("cu13", "13.0")
    assert (build.torch_version, build.python, build.archs) == ("2.14.1", "3.11", ("sm_80",))
    assert build.source == recipe.source.identity
    # the patches this cell gets, and why; a CPU or ROCm cell is not one the recipe serves
    said = "\n".join(explain(recipe, CellFacts.from_spec(build)))
    assert "patch cxx20 (setup.py, 2 edits): applies" in said and "patch cuda-archs (setup.py, 1 edit): applies" in said
    assert "FAST_HADAMARD_TRANSFORM_LOCAL_VERSION=cu13torch2.14cxx11abiTRUE" in said
    assert not supported(recipe, CellFacts("2.14.1", "cpu", None, True))[0]
    assert not supported(recipe, CellFacts("2.14.1", "rocm", "6.4", True))[0]


@pytest.fixture(scope="module")
def github(tmp_path_factory):
    """GitHub's tag tarball of v1.1.0, made from a local copy of the project's repository and served on
    127.0.0.1 at GitHub's path; returns (server URL, a farm folder: matrix.toml + recipes/ pointing at it)."""
    repo = os.environ.get("MAMBA_FARM_TEST_FHT_GIT")
    if not repo:
        pytest.skip("MAMBA_FARM_TEST_FHT_GIT is unset: set it to a clone of Dao-AILab/fast-hadamard-transform")
    env = {**os.environ, **GIT_ENV}
    tag = subprocess.run(["git", "-C", repo, "rev-parse", f"{TAG}^{{commit}}"], capture_output=True, text=True, env=env)
    assert tag.returncode == 0 and tag.stdout.strip() == COMMIT, f"{repo}: {TAG} is not {COMMIT}: {tag.stdout}{tag.stderr}"
    root = tmp_path_factory.mktemp("fht")
    archive = root / "site" / TAG_PATH
    archive.parent.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", repo, "archive", "--format=tar", f"--prefix=fast-hadamard-transform-{TAG[1:]}/", COMMIT],
                         capture_output=True, check=True, env=env)  # fmt: skip
    archive.write_bytes(subprocess.run(["gzip", "-n"], input=tar.stdout, capture_output=True, check=True).stdout)
    with serve(root / "site") as url:
        farm = root / "farm"
        (farm / "recipes").mkdir(parents=True)
        # the recipe as it is, but for the URL's host: its sha256 is the pin the served bytes are held to
        text = RECIPE.read_text()
        assert text.count("https://github.com/") == 1
        (farm / "recipes" / RECIPE.name).write_text(text.replace("https://github.com/", f"{url}/"))
        matrix = (REPO / "matrix.toml").read_text()
        assert matrix.count("[plan]\n") == 1
        (farm / "matrix.toml").write_text(matrix.replace("[plan]\n", '[plan]\nrecipes = "recipes"\n'))
        for package_path in ("mamba_ssm", "csrc", "setup.py"):  # [package]'s paths are relative to the matrix
            (farm / package_path).symlink_to(REPO / package_path)
        yield url, farm


def test_the_pin_is_the_tags_archive_and_every_patch_applies(github, tmp_path, cli):
    url, farm = github
    recipes = str(farm / "recipes")
    # docs/maintainer/add-recipe.md step 1: the archive holds the sources the PyPI sdists lack
    fetched = cli("recipe", "fetch", "fast-hadamard-transform", "--recipes", recipes)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    with __import__("tarfile").open(fetched.stdout.strip().splitlines()[-1]) as tf:
        kernels = [n for n in tf.getnames() if re.search(r"\.(cu|cuh|cpp|h)$", n)]
    assert "fast-hadamard-transform-1.1.0/csrc/fast_hadamard_transform_cuda.cu" in kernels
    # "Try it on one cell": every patch applies to the tag's setup.py
    out = tmp_path / "prep"
    prep = cli("recipe", "prepare", "fast-hadamard-transform", "--recipes", recipes,
               "--torch", "2.14.1", "--accelerator", "cuda-13.0", "--archs", "sm_80", "--out", str(out))  # fmt: skip
    assert prep.returncode == 0, prep.stdout + prep.stderr
    assert "patches: cxx20, cuda-archs (skipped: none)" in prep.stdout
    setup_py = (out / "src" / "fast-hadamard-transform-1.1.0" / "setup.py").read_text()
    assert setup_py.count("-std=c++20") == 2 and "compute_75" not in setup_py
    assert 'cc_flag += ["-gencode", "arch=compute_80,code=sm_80"]' in setup_py


def _provenance(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/farm-provenance.json")]
        return json.loads(zf.read(name))


@pytest.mark.slow
@pytest.mark.cuda_build
@pytest.mark.parametrize("executor", ["host", "docker"])
def test_built_installed_imported_and_its_provenance_says_what_ran(github, executor, tmp_path):
    url, farm = github
    if executor == "docker":
        docker_client()
    dist = tmp_path / "dist"
    env = {}
    nvcc = shutil.which("nvcc")
    if executor == "host" and nvcc:  # the machine's toolkit may lack the library headers: take PyPI's CUDA
        env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(Path(nvcc).parent))
    run = run_build("--matrix", str(farm / "matrix.toml"), "--profile", PROFILE, "--executor", executor,
                    "--jobs", "1", "--dist", str(dist), env=env, timeout=3600)  # fmt: skip
    assert run.rc == 0, run.out[-6000:]
    (wheel,) = (dist / "wheels").glob("*.whl")
    assert re.fullmatch(rf"fast_hadamard_transform-1\.1\.0\+{LABEL}-cp311-cp311-(manylinux_2_\d+|linux)_x86_64\.whl",
                        wheel.name), wheel.name  # fmt: skip
    rec = _provenance(wheel)
    assert rec["executor"] == executor and rec["source"]["kind"] == "archive", rec
    assert rec["source"]["url"] == f"{url}/{TAG_PATH}" and rec["source"]["sha256"] == load_recipe(RECIPE).source.sha256
    # the image and its base only when Docker ran; the toolkit's origin either way (PyPI's nvidia-* wheels here)
    spec = json.loads(wheel.with_name(wheel.name + ".spec.json").read_text())
    if executor == "docker":
        assert rec["image"] == spec["image"] and rec["base"] and rec["toolchain"]["compiler"] == "image", rec
    else:
        assert rec["image"] is None and rec["base"] is None and rec["toolchain"]["compiler"] == "host", rec
    assert rec["toolchain"]["toolkit"]["kind"] == "cuda" and rec["toolchain"]["toolkit"]["version"] == "13.0", rec
    assert wheel.name.endswith(f"-{rec['platform']}.whl"), rec
    assert sorted(rec["recipe"]["patches"]) == ["cuda-archs", "cxx20"], rec["recipe"]
    assert rec["toolchain"]["toolkit"]["origin"] in ("pypi", "base", "host"), rec
    assert f"{wheel.name}: verified (" in run.out and "smoke-tested (imports fast_hadamard_transform_cuda" in run.out
    assert "index:" in run.out and (dist / "index" / "files" / wheel.name).is_file()
    # installed alone next to torch 2.14.1 (the farm's smoke-test torch) and imported from /; no CPU path:
    # the binding is called with a CPU tensor and refuses it with its own check
    torch_site = next(iter(sorted(SMOKE_TORCH.glob("*/lib/python3.11/site-packages/torch"))), None)
    if torch_site is None:
        pytest.skip(f"no torch 2.14.1 for cp311 under {SMOKE_TORCH} (the build's smoke test makes it)")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True)  # fmt: skip
    python = torch_site.parents[3] / "bin" / "python"
    check = subprocess.run(
        [str(python), "-c", "import torch, fast_hadamard_transform as f, fast_hadamard_transform_cuda, json\n"
                            "from importlib.metadata import version\n"
                            "try:\n    f.hadamard_transform(torch.ones(2, 8))\nexcept RuntimeError as e:\n    said = str(e)\n"
                            "print(json.dumps([torch.__version__, version('fast-hadamard-transform'), f.__file__, said]))"],
        capture_output=True, text=True, cwd="/", env={**os.environ, "PYTHONPATH": str(target)},
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    torch_version, version, where, said = json.loads(check.stdout.strip().splitlines()[-1])
    assert torch_version.startswith("2.14.1") and version == f"1.1.0+{LABEL.lower()}" and where.startswith(str(target))
    assert "is_cuda" in said, said
