"""builder/environments/layers.py's foreign_deps_layer: a recipe's declared dependencies for another machine's smoke test
(`[test] deps = true` under emulation), fetched by this host's pip for the target's platform and Python, next to the
torch folder the build used. Real pip against a local wheelhouse (`--no-index`): no Docker, no network."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from wheelmaker import make_wheel

from builder.environments import layers, store
from builder.environments.markers import target_environment
from builder.errors import VerificationError
from builder.facts.compat import manylinux_platforms
from builder.verifying.smoke import wheel_manylinux

AARCH64 = manylinux_platforms("manylinux_2_34_aarch64")


@pytest.fixture
def pip_here(monkeypatch):
    """pip sees only what a test gives it (no host config, find-links or index)."""
    import os

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)


def torch_folder(tmp_path: Path) -> Path:
    """Another machine's torch folder as build_torch.fetched_for_target leaves it: pip's --target site."""
    site = tmp_path / "torch" / "mamba-farm-torch-cp311-2.11.0-cuda-13.0-aarch64" / "site"
    for dist in ("torch-2.11.0", "filelock-3.0.0"):
        info = site / f"{dist}.dist-info"
        info.mkdir(parents=True)
        name, version = dist.split("-")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "torch").mkdir()
    return site


def wheelhouse(tmp_path: Path) -> Path:
    wh = tmp_path / "wheelhouse"
    make_wheel(wh, "torch", "2.11.0", requires=("filelock",))  # what the index says of the folder's torch
    make_wheel(wh, "torch", "2.12.0")
    make_wheel(wh, "filelock", "3.0.0")
    make_wheel(wh, "filelock", "3.1.0")
    make_wheel(wh, "einops", "0.8.0", requires=("torch", "filelock"))
    # markers judged for the target: this x86_64 host's pip would take the other branch
    make_wheel(wh, "dep", "1.0", requires=("armonly; platform_machine == 'aarch64'", "x86only; platform_machine == 'x86_64'"))
    make_wheel(wh, "armonly", "1.0")
    make_wheel(wh, "x86only", "1.0")
    make_wheel(wh, "native", "1.0", "cp311-cp311-manylinux_2_28_aarch64")
    make_wheel(wh, "native", "1.1", "cp311-cp311-manylinux_2_28_x86_64")  # newer, but not for the target
    make_wheel(wh, "hostonly", "1.0", "cp311-cp311-manylinux_2_28_x86_64")
    make_wheel(wh, "newglibc", "1.0", "cp311-cp311-manylinux_2_39_aarch64")
    return wh


def layer_of(tmp_path: Path, requirements: list[str], **kw) -> Path:
    return layers.foreign_deps_layer(
        torch_folder(tmp_path) if not (tmp_path / "torch").exists() else next((tmp_path / "torch").glob("*/site")),
        requirements, tmp_path / "smoke" / "cp311-torch2.11.0-aarch64" / "deps-envs", platforms=AARCH64,
        python="3.11", environment=target_environment("aarch64", "3.11"),
        pip_args=["--no-index", "--find-links", str(wheelhouse(tmp_path))], **kw,
    )  # fmt: skip


def dists(site: Path) -> dict[str, str]:
    return layers.installed_dists(site)


def test_the_layer_holds_what_the_target_needs_beside_the_torch_folder_and_no_more(tmp_path, pip_here):
    log = tmp_path / "smoke.log"
    layer = layer_of(tmp_path, ["native", "einops", "dep"], log_path=log)
    # the target's markers and wheels; torch and what its folder holds (filelock) held to their versions, left out
    assert dists(layer / "site") == {"armonly": "1.0", "dep": "1.0", "einops": "0.8.0", "native": "1.0"}
    assert (layer / ".complete").read_text() == "torch==2.11.0\ndep\neinops\nnative\n"
    assert layer.name.startswith("mamba-farm-torch-cp311-2.11.0-cuda-13.0-aarch64-")
    assert "manylinux_2_34_aarch64 (CPython 3.11)" in log.read_text()
    # counted by the cache like any dependency layer (`cache show`, `cache prune`)
    (entry,) = store.entries(tmp_path / "smoke")
    assert entry.path == layer and entry.requirement == "torch==2.11.0 + dep, einops, native"
    # made once: the same set in any order is the same layer, not fetched again
    stamp = (layer / ".complete").stat().st_mtime_ns
    assert layer_of(tmp_path, ["dep", "native", "einops"]) == layer
    assert (layer / ".complete").stat().st_mtime_ns == stamp
    assert [p.name for p in layer.parent.iterdir()] == [layer.name]


@pytest.mark.parametrize(
    "requirement, says",
    [
        pytest.param("nowhere==1.0", "nowhere==1.0", id="not-on-the-index"),
        pytest.param("hostonly", "hostonly", id="only-for-this-host"),
        pytest.param("newglibc", "newglibc", id="a-newer-glibc-than-the-wheel"),
    ],
)
def test_a_requirement_not_fetchable_for_the_target_is_named_with_the_platform_and_leaves_no_layer(
    tmp_path, pip_here, requirement, says
):
    with pytest.raises(VerificationError) as err:
        layer_of(tmp_path, ["einops", requirement])
    msg = str(err.value)
    assert f"dependency {says}" in msg and "manylinux_2_34_aarch64 (CPython 3.11)" in msg, msg
    assert "Traceback" not in msg and len(msg) < 1200
    root = tmp_path / "smoke" / "cp311-torch2.11.0-aarch64" / "deps-envs"
    assert list(root.iterdir()) == []  # no layer, no half-made temporary folder
    assert store.entries(tmp_path / "smoke") == []


def test_a_torch_folder_without_torch_is_refused_before_pip_runs(tmp_path, pip_here):
    site = tmp_path / "torch" / "empty-aarch64" / "site"
    site.mkdir(parents=True)
    started = time.monotonic()
    with pytest.raises(VerificationError, match="no torch in"):
        layers.foreign_deps_layer(site, ["einops"], tmp_path / "deps", platforms=AARCH64, python="3.11",
                                 environment=target_environment("aarch64", "3.11"))  # fmt: skip
    assert time.monotonic() - started < 5 and not (tmp_path / "deps").exists()


def test_a_layer_a_killed_run_left_half_made_is_replaced(tmp_path, pip_here):
    first = layer_of(tmp_path, ["einops"])
    (first / ".complete").unlink()
    (first / "site" / "leftover").mkdir()
    again = layer_of(tmp_path, ["einops"])
    assert again == first and (again / ".complete").exists() and not (again / "site" / "leftover").exists()


@pytest.mark.parametrize(
    "name, planned, found",
    [
        ("mamba_ssm-2.3.2.post1+cu13torch2.11cxx11abiTRUE-cp311-cp311-manylinux_2_34_aarch64.whl", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64"),
        ("x-1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.manylinux_2_28_aarch64.whl", "manylinux_2_28_aarch64", "manylinux_2_28_aarch64"),
        ("x-1.0-cp311-cp311-linux_aarch64.whl", "manylinux_2_28_aarch64", "manylinux_2_28_aarch64"),
    ],
)  # fmt: skip
def test_the_dependencies_are_fetched_for_the_systems_the_wheel_runs_on(name, planned, found):
    from types import SimpleNamespace

    assert wheel_manylinux(Path(name), SimpleNamespace(manylinux=planned)) == found


def test_the_emulated_smoke_mounts_the_layer_read_only_checks_it_and_records_the_dependencies(tmp_path, monkeypatch):
    """The smoke test in another machine's image (smoke.in_container through DockerExecutor.run_script) for a recipe
    with `deps = true`, its container stood in for: the layer is made for the
    wheel's target (its declared requirements judged for aarch64, torch left out) under the smoke cache, mounted at
    /deps, added to the venv with site.addsitedir and checked by pip check before the recipe's imports; the record
    says which dependencies, under emulation."""
    import json
    import shlex

    from builder.building.executors import docker
    from builder.facts import hostenv
    from builder.planning.plan import load_plan
    from builder.planning.recipes import load_recipes
    from builder.verifying import smoke

    (spec,) = load_plan(profile="ci-upstream-aarch64").builds
    recipe = load_recipes()["mamba-ssm"]
    wheel = make_wheel(tmp_path / "dist", "mamba_ssm", "2.3.2.post1", "cp311-cp311-manylinux_2_34_aarch64", requires=(
        "torch", "einops", "triton>=3.5.0; platform_machine == 'aarch64'", "x86thing; platform_machine == 'x86_64'",
        "pytest; extra == 'dev'",
    ))  # fmt: skip
    folder = torch_folder(tmp_path).parent
    made = {}

    def layer(torch_site, requirements, root, **kw):
        made.update(torch_site=torch_site, requirements=requirements, root=root, **kw)
        (root / "L").mkdir(parents=True)
        return root / "L"

    ran = {}

    def run(spec_, command, env, volumes, log_path, timeout, archive=None, **kw):
        ran.update(script=command[-1], volumes=volumes)
        with open(log_path, "a") as f:
            f.write("evidence " + json.dumps({"torch": "2.11.0+cu130", "python": "3.11.2"}) + "\n")
        return 0

    monkeypatch.setattr(docker, "CACHE_ROOT", tmp_path / "farm")
    monkeypatch.setattr(hostenv, "CACHE_ROOT", tmp_path / "farm")  # the slot's root (store.smoke_slot)
    monkeypatch.setattr(layers, "foreign_deps_layer", layer)
    monkeypatch.setattr(smoke, "torch_index_args", lambda url: [])
    ex = object.__new__(docker.DockerExecutor)
    ex._torch_volume = lambda spec, log_path, timeout: (str(folder), None)
    ex._env = lambda spec: {"FARM_PYTHON": "/opt/python/cp311-cp311/bin/python"}
    ex._run = run
    (tmp_path / "logs").mkdir()
    out = smoke.in_container(ex, spec, wheel, tmp_path / "logs" / "b.log", recipe=recipe, log=lambda m: None)

    assert made["requirements"] == ["einops", "triton>=3.5.0"] and made["torch_site"] == folder / "site"
    assert made["root"] == tmp_path / "farm" / "smoke" / "cp311-torch2.11.0-aarch64" / "deps-envs"
    assert made["platforms"][0] == "manylinux_2_34_aarch64" and made["python"] == "3.11"
    assert made["environment"]["platform_machine"] == "aarch64"
    assert ran["volumes"][str(made["root"] / "L")] == {"bind": "/deps", "mode": "ro"}
    assert ran["volumes"][str(folder)] == {"bind": "/torch", "mode": "ro"}
    steps = ran["script"].split(" && ")
    pth = next(i for i, s in enumerate(steps) if "_farm_deps.pth" in s)
    assert "site.addsitedir('/deps/site')" in steps[pth] and "-m pip --python /smoke/venv/bin/python check" in steps[pth + 1]
    assert shlex.split(steps[pth + 2])[:2] == ["/smoke/venv/bin/python", "-c"] and "from mamba_ssm import Mamba2" in steps[pth + 2]
    assert out["imported"]["deps"] == ["einops", "triton>=3.5.0"] and out["imported"]["emulated"] is True
    assert out["imported"]["api"] == list(recipe.api) and out["imported"]["torch"] == "2.11.0+cu130"


def test_a_wheel_that_declares_nothing_but_torch_gets_an_empty_layer_without_pip(tmp_path, pip_here):
    layer = layer_of(tmp_path, [])
    assert dists(layer / "site") == {} and (layer / ".complete").read_text() == "torch==2.11.0\n"
