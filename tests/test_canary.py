"""The canary: upstream's default branches at a pinned head, built through the same recipes as the releases.

A recipe's ``[canary]`` pins a branch's head (its commit, the release tag it descends from and its distance from
it); a profile with ``source = "canary"`` builds it in place of ``[source]``, with the recipe's
``when = { source = "canary" }`` patches and env. Its version is the next post-release's ``.devN``, its identity a
line of its own (``canary:``), and ``drift --write`` moves the pin to the branch's head.

No test reaches GitHub: git's smart HTTP on 127.0.0.1 serves a small repository made here. ``--run-slow`` builds
the ``ci-canary`` profile's one cell of each package from local mirrors of upstream's repositories, which
``MAMBA_FARM_CANARY_MIRRORS`` names (bare repositories, separated by ``:``; never committed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from farmkit import REPO, docker_client, run_build
from packaging.version import Version
from releasekit import GIT_ENV, git, git_http

from builder.errors import MatrixError, RecipeError
from builder.facts.spec import CanaryPin, canary_version
from builder.planning.plan import load_plan
from builder.planning.recipes import CellFacts, decide, load_recipe, recipe_for
from builder.publishing.index.model import source_line
from builder.upkeep import drift

CELL = CellFacts("2.14.1", "cuda", "13.0", True, ("sm_80",), "cu13torch2.14cxx11abiTRUE")


# --------------------------------------------------------------------------- the version


@pytest.mark.parametrize(
    ("release", "distance", "canary", "next_releases"),
    [
        ("2.3.2.post1", 9, "2.3.2.post2.dev9", ["2.3.2.post2", "2.3.3", "2.4.0", "3.0.0rc1"]),
        ("1.6.1.post4", 2, "1.6.1.post5.dev2", ["1.6.1.post5", "1.6.2", "1.7.0"]),
        ("1.7.0", 1, "1.7.0.post1.dev1", ["1.7.0.post1", "1.7.1", "1.8.0a1"]),
        ("2.0.0rc1", 3, "2.0.0rc1.post1.dev3", ["2.0.0rc1.post1", "2.0.0rc2", "2.0.0"]),
    ],
)
def test_a_canary_sorts_above_its_release_and_below_every_next_one(release, distance, canary, next_releases):
    assert canary_version(release, distance) == canary
    with_label = Version(f"{canary}+cu13torch2.14cxx11abiTRUE")  # the wheel's version, as packaging parses it
    assert with_label.public == canary and with_label.is_devrelease and with_label.is_prerelease
    assert Version(release) < with_label
    for later in next_releases:
        assert with_label < Version(later), later
    # PEP 440: RELEASE.devN sorts below RELEASE itself, which is why the next post-release is the one developed
    assert Version(f"{release}.dev{distance}") < Version(release)


@pytest.mark.parametrize(("release", "distance"), [("2.3.2.post1", 0), ("2.3.2.dev1", 4), ("1.0+local", 1)])
def test_a_canary_follows_a_release_by_one_commit_or_more(release, distance):
    with pytest.raises(ValueError, match="a canary follows a release"):
        canary_version(release, distance)


# --------------------------------------------------------------------------- the recipes and the profile


def test_the_recipes_pin_their_default_branches_and_the_canary_profile_builds_them():
    for name, repo, release, distance in (("mamba-ssm", "state-spaces/mamba", "2.3.2.post1", 9),
                                          ("causal-conv1d", "Dao-AILab/causal-conv1d", "1.6.1.post4", 2)):  # fmt: skip
        recipe = recipe_for(name)
        pin = recipe.canary
        assert isinstance(pin, CanaryPin) and pin.url == f"https://github.com/{repo}.git" and pin.branch == "main"
        assert (pin.release, pin.distance, pin.version) == (release, distance, canary_version(release, distance))
        assert recipe.at("release") is recipe and recipe.at("canary").source == pin
        # the version patch is the canary's alone; every other patch is the release's as well
        canary = {d.patch.name for d in decide(recipe.at("canary"), CellFacts(**{**CELL.__dict__, "source": "canary"})) if d.applies}
        released = {d.patch.name for d in decide(recipe, CELL) if d.applies}
        only = {"canary-version"} | ({"canary-tvm-ffi-pyproject", "canary-tvm-ffi-setup"} if name == "mamba-ssm" else set())
        assert canary - released == only and released <= canary
    plan = load_plan(profile="ci-canary")
    assert sorted(b.project for b in plan.builds) == ["causal-conv1d", "mamba-ssm"]
    for b in plan.builds:
        pin = recipe_for(b.project).canary
        assert b.source == pin.identity == f"canary:{b.project}=={pin.version}@{pin.commit}"
        assert (b.torch_version, b.python, b.archs, b.trim) == ("2.14.1", "3.11", ("sm_80",), True)
        assert CellFacts.from_spec(b).source == "canary"
        assert plan.recipe_of(b).source == pin and plan.recipe_of(b).release == recipe_for(b.project).source
    # the release profile's builds of the same cell are the [source]'s, and their ids are the canary's: the two
    # never share a dist folder's index (below), so a build id names its cell whatever the source
    upstream = {b.id: b for b in load_plan(profile="ci-upstream").builds}
    assert set(upstream) == {b.id for b in plan.builds}
    assert all(b.source.startswith("sdist:") for b in upstream.values())


def test_a_canary_is_a_product_line_of_its_own():
    from builder.publishing.release import line_of

    pin = recipe_for("mamba-ssm").canary
    assert source_line(pin.identity) == "canary:mamba-ssm" != source_line(recipe_for("mamba-ssm").source.identity)
    wheel = Path(f"mamba_ssm-{pin.version}+cu13torch2.14cxx11abitrue-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert line_of(wheel, {"id": "x", "source": pin.identity}) == "canary"
    assert line_of(wheel, {"id": "x", "source": recipe_for("mamba-ssm").source.identity}) == "upstream"


def _recipe(folder: Path, canary: str, patch: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.toml"
    path.write_text(f'[project]\nname = "demo"\n\n[source]\nname = "demo"\nversion = "1.0"\nsha256 = "{"a" * 64}"\n\n'
                    f'{canary}\n\n[build]\n\n{patch}\n[test]\nimports = ["demo"]\n\n[verify]\nextensions = ["demo*.so"]\n')  # fmt: skip
    return path


GOOD = '[canary]\ngit = "https://example.org/demo.git"\nbranch = "main"\ncommit = "{c}"\nrelease = "1.0"\ndistance = 3'


@pytest.mark.parametrize(
    ("canary", "key", "says"),
    [
        (GOOD.replace('commit = "{c}"', 'commit = "main"'), "canary.commit", "not a full commit hash"),
        (GOOD.replace("distance = 3", "distance = 0"), "canary.distance", "1 or more"),
        (GOOD.replace("distance = 3", 'distance = "3"'), "canary.distance", "1 or more"),
        (GOOD.replace('release = "1.0"', 'release = "1.0.dev2"'), "canary.release", "not a release's PEP 440 version"),
        (GOOD.replace('branch = "main"', 'branch = "--upload-pack=x"'), "canary.branch", "a branch name"),
        (GOOD.replace('branch = "main"', 'branch = "a/../b"'), "canary.branch", "not a branch name"),
        (GOOD.replace("https://example.org/demo.git", "ext::sh -c x"), "canary.git", "transport"),
        (GOOD.replace("distance = 3\n", "").replace("distance = 3", ""), "canary", "distance"),
    ],
)
def test_a_bad_canary_table_names_file_line_key_and_fix(tmp_path, canary, key, says):
    with pytest.raises(RecipeError, match=re.escape(key)) as err:
        load_recipe(_recipe(tmp_path, canary.format(c="c" * 40)))
    assert says in str(err.value), str(err.value)


def test_a_when_names_a_source_the_recipes_have(tmp_path):
    patch = '[[patch]]\nname = "v"\nwhy = "w"\nfile = "x.py"\nwhen = {{ source = "{s}" }}\n[[patch.edit]]\nsearch = "a"\nreplace = "${{version}}"\n'
    recipe = load_recipe(_recipe(tmp_path, GOOD.format(c="c" * 40), patch.format(s="canary")))
    assert recipe.patches[0].when.source == "canary"
    with pytest.raises(RecipeError, match=r'patch#1\.when\.source: "nightly" is not a source \(valid: "release", "canary"\)'):
        load_recipe(_recipe(tmp_path / "bad", GOOD.format(c="c" * 40), patch.format(s="nightly")))


def test_a_canary_profile_of_a_recipe_without_a_canary_or_of_the_checkout_is_refused(tmp_path):
    matrix = (REPO / "matrix.toml").read_text()
    bad = tmp_path / "matrix.toml"
    bad.write_text(matrix.replace('projects = ["causal-conv1d", "mamba-ssm"]\nsource = "canary"',
                                  'projects = ["checkout", "mamba-ssm"]\nsource = "canary"', 1))  # fmt: skip
    for package_path in ("mamba_ssm", "csrc", "setup.py"):  # [package]'s paths are relative to the matrix
        (tmp_path / package_path).symlink_to(REPO / package_path)
    with pytest.raises(MatrixError, match=r'profiles\.canary\.source: a canary builds recipes\' \[canary\] pins; "checkout" has none'):
        load_plan(bad, profile="canary")
    with pytest.raises(RecipeError, match=r"fast-hadamard-transform\.toml: no \[canary\] table"):
        load_plan(profile="ci-canary", projects=["fast-hadamard-transform"])


# --------------------------------------------------------------------------- drift moves the pin



@pytest.fixture
def upstream(tmp_path):
    """A repository served on 127.0.0.1 (git's smart HTTP): v1.0 tagged, then three commits on main."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "demo").mkdir()
    (work / "demo" / "__init__.py").write_text('__version__ = "1.0"\n')
    (work / "setup.py").write_text("# demo\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(work, "tag", "-a", "-m", "release", "v1.0")
    for i in range(3):
        (work / "setup.py").write_text(f"# demo {i}\n")
        git(work, "commit", "-qam", f"after {i}")
    served = tmp_path / "served"
    served.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(served / "demo.git"))
    with git_http(served) as (url, _pushes):
        yield f"{url}/demo.git", work, served / "demo.git"


VERSION_PATCH = ('[[patch]]\nname = "canary-version"\nwhy = "w"\nfile = "demo/__init__.py"\nwhen = { source = "canary" }\n'
                 '[[patch.edit]]\nsearch = \'__version__ = "1.0"\'\nreplace = \'__version__ = "${version}"\'\n')  # fmt: skip


def test_drift_moves_the_canary_to_the_branch_head_with_its_release_and_distance(tmp_path, upstream):
    url, work, bare = upstream
    first = git(work, "rev-parse", "HEAD~2")
    canary = GOOD.replace("https://example.org/demo.git", url).replace("distance = 3", "distance = 1")
    recipe = load_recipe(_recipe(tmp_path / "recipes", canary.format(c=first), VERSION_PATCH))
    assert recipe.canary.version == "1.0.post1.dev1"
    d = drift.compare_canary(recipe)
    head = git(work, "rev-parse", "HEAD")
    assert (d.subject, d.what, d.detail["commit"], d.detail["release"], d.detail["distance"]) == (
        "demo canary", "canary", head, "1.0", 3)
    assert d.index.startswith("1.0.post1.dev3 (main at ") and "3 after v1.0" in d.index
    out = tmp_path / "staged" / "demo.toml"
    out.parent.mkdir()
    out.write_text(recipe.path.read_text())
    drift.write_canary(recipe, d, tmp_path / "cache", out=out)
    assert d.status.startswith("written"), d.status
    moved = load_recipe(out)
    assert (moved.canary.commit, moved.canary.release, moved.canary.distance) == (head, "1.0", 3)
    assert moved.canary.version == "1.0.post1.dev3" and moved.source == recipe.source  # the release pin stays
    assert drift.compare_canary(moved) is None  # at the head: nothing to propose

    # upstream moves its version on: the canary's patch no longer applies, and the pin stays (exit 10)
    (work / "demo" / "__init__.py").write_text('__version__ = "1.1.dev0"\n')
    git(work, "commit", "-qam", "bump")
    git(work, "push", "-q", str(bare), "main")
    d = drift.compare_canary(moved)
    before = out.read_text()
    drift.write_canary(moved, d, tmp_path / "cache", out=out)
    assert d.status.startswith("not written") and "canary-version" in d.status and d.detail["exit"] == 10, d.status
    assert out.read_text() == before


def test_a_branch_with_no_release_tag_is_refused_naming_it(tmp_path, upstream):
    from builder.errors import SourceFetchError
    from builder.sourcing.sources import branch_head

    url, _work, bare = upstream
    git(bare, "tag", "-d", "v1.0")
    git(bare, "tag", "v1.0+evil", "HEAD~1")  # a local version is no release
    with pytest.raises(SourceFetchError, match=r"nearest tag 'v1\.0\+evil' is not a release's version"):
        branch_head(url, "main")
    with pytest.raises(SourceFetchError, match="not a branch name"):
        branch_head(url, "--upload-pack=x")


# --------------------------------------------------------------------------- the build, from local mirrors


def _mirrors() -> list[Path]:
    named = os.environ.get("MAMBA_FARM_CANARY_MIRRORS", "")
    if not named:
        pytest.skip("MAMBA_FARM_CANARY_MIRRORS is unset: name bare mirrors of state-spaces/mamba and "
                    "Dao-AILab/causal-conv1d (separated by ':') that hold the recipes' [canary] commits")  # fmt: skip
    return [Path(p) for p in named.split(os.pathsep) if p]


def _holds(repo: Path, commit: str) -> bool:
    proc = subprocess.run(["git", "--git-dir", str(repo), "cat-file", "-t", commit], env=GIT_ENV,
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.returncode == 0 and proc.stdout.strip() == "commit"


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """The farm's matrix and recipes as they are, but for each [canary]'s URL: the mirror holding its commit,
    served on 127.0.0.1 by git's smart HTTP (a folder of links to the mirrors)."""
    mirrors = _mirrors()
    root = tmp_path_factory.mktemp("canary")
    served = root / "served"
    served.mkdir()
    farm = root / "farm"
    (farm / "recipes").mkdir(parents=True)
    with git_http(served) as (url, _pushes):
        for name in ("causal-conv1d", "mamba-ssm"):
            pin = recipe_for(name).canary
            repo = next((m for m in mirrors if _holds(m, pin.commit)), None)
            if repo is None:
                pytest.skip(f"no mirror in MAMBA_FARM_CANARY_MIRRORS holds {name}'s canary commit {pin.commit}")
            (served / f"{name}.git").symlink_to(repo.resolve())
            text = (REPO / "recipes" / f"{name}.toml").read_text()
            assert text.count(pin.url) == 1
            (farm / "recipes" / f"{name}.toml").write_text(text.replace(pin.url, f"{url}/{name}.git"))
        matrix = (REPO / "matrix.toml").read_text()
        (farm / "matrix.toml").write_text(matrix.replace("[plan]\n", '[plan]\nrecipes = "recipes"\n', 1))
        for package_path in ("mamba_ssm", "csrc", "setup.py"):  # [package]'s paths are relative to the matrix
            (farm / package_path).symlink_to(REPO / package_path)
        yield url, farm


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cuda_build
def test_the_canary_builds_one_cell_of_each_from_the_default_branches(mirrored, tmp_path):
    _url, farm = mirrored
    docker_client()
    dist = tmp_path / "dist"
    run = run_build("--matrix", str(farm / "matrix.toml"), "--profile", "ci-canary", "--executor", "docker",
                    "--jobs", "1", "--dist", str(dist), timeout=5400)  # fmt: skip
    assert run.rc == 0, run.out[-6000:]
    wheels = sorted((dist / "wheels").glob("*.whl"))
    label = "cu13torch2.14cxx11abitrue"
    for name, wheel in zip(("causal-conv1d", "mamba-ssm"), wheels, strict=True):
        pin = recipe_for(name).canary
        assert wheel.name.lower().startswith(f"{name.replace('-', '_')}-{pin.version}+{label}-cp311-cp311-"), wheel.name
        spec = json.loads(wheel.with_name(wheel.name + ".spec.json").read_text())
        assert spec["source"] == pin.identity
        with zipfile.ZipFile(wheel) as zf:
            (prov,) = [n for n in zf.namelist() if n.endswith(".dist-info/farm-provenance.json")]
            rec = json.loads(zf.read(prov))
            meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        assert rec["source"]["kind"] == "canary" and rec["source"]["commit"] == pin.commit, rec["source"]
        assert "canary-version" in rec["recipe"]["patches"], rec["recipe"]
        assert f"Version: {pin.version}+" in meta
        if name == "mamba-ssm":  # the cap tilelang 0.1.8 imports with, which the smoke test's import proved
            assert "Requires-Dist: apache-tvm-ffi<=0.1.11" in meta
    for cost in sorted((dist / "logs").glob("*.cost.json")):  # each build's wall and compile CPU, for the docs
        rec = json.loads(cost.read_text())
        print(f"{rec['id']}: {rec['wall_s']} s wall, {rec['cpu_s']} CPU-s")
    print(f"ci-canary: both wheels in {run.seconds:.0f} s")


def test_recipe_explain_says_what_the_canary_build_of_a_cell_gets(cli):
    cell = ("--torch", "2.14.1", "--accelerator", "cuda-13.0", "--archs", "sm_80")
    out = cli("recipe", "explain", "mamba-ssm", "--canary", *cell)
    assert out.returncode == 0, out.stderr
    pin = recipe_for("mamba-ssm").canary
    assert f"mamba-ssm {pin.version} (the main branch of {pin.url} at {pin.commit[:12]}" in out.stdout
    assert "patch canary-version (mamba_ssm/__init__.py, 1 edit): applies: the source is the canary" in out.stdout
    released = cli("recipe", "explain", "mamba-ssm", *cell)
    assert "patch canary-version (mamba_ssm/__init__.py, 1 edit): skipped: the source is not the canary" in released.stdout
    none = cli("recipe", "explain", "fast-hadamard-transform", "--canary", *cell)
    assert none.returncode == 2 and "no [canary] table" in none.stderr and "Traceback" not in none.stderr


def test_a_canary_wheel_says_what_built_it_and_proves_no_release_cell():
    from builder.publishing.tiers import line_of_record
    from builder.verifying import provenance
    from mamba_ssm.doctor import report

    pin = recipe_for("mamba-ssm").canary
    rec = {"source": pin.provenance(), "id": "i", "inputs_hash": "h", "executor": "host", "platform": "p"}
    says = f"canary {pin.url} main at {pin.commit[:12]}"
    assert report._built_from(rec).startswith(says) and provenance.summary(rec).startswith(says)
    assert (pin.provenance()["release"], pin.provenance()["distance"]) == ("2.3.2.post1", 9)
    # an evidence record of a canary wheel is its own line: it never gives a release's cell a tier
    assert line_of_record({"built": rec}) == "canary"
    assert line_of_record({"built": {"source": recipe_for("mamba-ssm").source.provenance()}}) == "upstream"


def test_an_index_of_the_release_refuses_a_canary_wheel_and_the_canary_index_takes_it(tmp_path):
    from wheelmaker import make_recipe_wheel

    from builder.errors import IndexIntegrityError
    from builder.publishing.index import build_index

    release, canary = recipe_for("causal-conv1d").source, recipe_for("causal-conv1d").canary
    label = "cu13torch2.14cxx11abitrue"
    make_recipe_wheel(tmp_path / "released", "causal-conv1d", release.version, label, source=release.identity)
    make_recipe_wheel(tmp_path / "canary", "causal-conv1d", canary.version, label, source=canary.identity)
    build_index(tmp_path / "released", tmp_path / "upstream")
    with pytest.raises(IndexIntegrityError, match="causal-conv1d from two different sources"):
        build_index(tmp_path / "canary", tmp_path / "upstream")
    assert len(build_index(tmp_path / "canary", tmp_path / "canary-index").added) == 1
