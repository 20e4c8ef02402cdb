"""The build plan: what the farm builds from the default matrix.toml, and how the plan changes with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_matrix import DEFAULT, REPO, make_dir, mutate, run_cli

from builder.compat import vtuple
from builder.errors import MatrixError
from builder.plan import load_plan
from mamba_ssm._variant import Variant

CI_IDS = [
    "cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64",
    "cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64",
    "cu13-torch2.14-cxx11abiTRUE-cp312-linux_x86_64",
]
JSON_KEYS = {
    "id",
    "torch",
    "torch_version",
    "python",
    "accelerator",
    "toolkit",
    "cxx11abi",
    "platform",
    "variant",
    "label",
    "archs",
    "image",
    "inputs_hash",
}


@pytest.fixture(scope="module")
def full():
    return load_plan()


@pytest.fixture(scope="module")
def ci():
    return load_plan(profile="ci")


def test_ci_profile_is_cpu_213_and_cuda13_214(ci) -> None:
    assert [b.id for b in ci.builds] == CI_IDS
    cpu, cu311, cu312 = ci.builds
    assert (cpu.torch_version, cpu.toolkit, cpu.archs) == ("2.13.0", None, ())
    # the CPU torch lives only on PyTorch's cpu index; PyPI's 2.14.1 is the CUDA 13.0 build itself
    assert cpu.torch_index_url == "https://download.pytorch.org/whl/cpu"
    assert (cu311.torch_version, cu311.toolkit, cu311.torch_index_url) == ("2.14.1", "13.0", "")
    assert cu311.archs == ("sm_80",)  # the profile's arch override
    assert cu311.cxx_std == 20 and cpu.cxx_std == 17  # torch 2.14's headers need C++20
    assert cu311.image == cu312.image != cpu.image
    image = ci.images[cu311.image]
    assert (image.kind, image.toolkit, image.toolkit_source, image.pythons) == (
        "cuda",
        "13.0",
        "pypi",
        ("3.11", "3.12"),
    )
    assert image.base == "quay.io/pypa/manylinux_2_28_x86_64"
    assert image.template == "docker/cuda.Dockerfile.j2"
    assert ci.images[cpu.image].pythons == ("3.11",)


def test_variant_and_label_come_from_mamba_ssm_variant(full) -> None:
    for b in full.builds:
        backend = {"cp": "cpu", "cu": "cuda", "hi": "rocm"}[b.accelerator[:2]]
        v = Variant(b.torch, backend, b.toolkit, b.cxx11abi, python=b.python_tag, platform=b.platform)
        assert (b.variant, b.label, b.accelerator) == (v.key, v.label, v.accelerator)
        assert b.id == f"{v.key}-{b.python_tag}-{b.platform}"


def test_full_plan_covers_upstream_release(full) -> None:
    """Every combination upstream mamba releases that a torch build exists for is in the plan."""
    ids = {b.id for b in full.builds}
    for torch in ("2.6", "2.7", "2.8", "2.9", "2.10"):
        for python in ("3.10", "3.11", "3.12", "3.13"):
            for cuda in ("11.8", "12.9", "13.0"):
                major = cuda.split(".")[0]
                has = {"2.6": "1112", "2.7": "1112", "2.8": "12", "2.9": "1213", "2.10": "1213"}[torch]
                if major not in (has[i : i + 2] for i in range(0, len(has), 2)):
                    continue
                abis = (
                    ["FALSE", "TRUE"] if torch == "2.6" and major == "12" else ["FALSE" if torch == "2.6" else "TRUE"]
                )
                for abi in abis:
                    want = f"cu{major}-torch{torch}-cxx11abi{abi}-cp{python.replace('.', '')}-linux_x86_64"
                    assert want in ids, want
    # aarch64 where PyTorch publishes aarch64 CUDA wheels
    assert "cu12-torch2.6-cxx11abiFALSE-cp312-linux_aarch64" in ids
    assert "cu13-torch2.10-cxx11abiTRUE-cp313-linux_aarch64" in ids
    # and the rest of the default release: CPU, ROCm, newer torch
    assert "cpu-torch2.4-cxx11abiFALSE-cp310-linux_x86_64" in ids
    assert "hip62-torch2.6-cxx11abiFALSE-cp311-linux_x86_64" in ids
    assert "hip72-torch2.14-cxx11abiTRUE-cp312-linux_x86_64" in ids
    assert "cu13-torch2.14-cxx11abiTRUE-cp313-linux_aarch64" in ids


def test_impossible_cells_are_dropped_with_a_reason(full) -> None:
    reasons = {c.describe(): r for c, r in full.dropped}
    assert "Python 3.8-3.12 only" in reasons["torch 2.4 x py3.13 x cpu x cxx11abi=FALSE x linux_x86_64"]
    assert "no CUDA 11.x build" in reasons["torch 2.8 x py3.11 x cuda-11.8 x cxx11abi=TRUE x linux_x86_64"]
    assert "linux_x86_64 only" in reasons["torch 2.9 x py3.11 x rocm-6.4 x cxx11abi=TRUE x linux_aarch64"]
    assert "no ROCm 6.2 build" in reasons["torch 2.9 x py3.11 x rocm-6.2 x cxx11abi=TRUE x linux_x86_64"]
    assert not set(full.cells) & {c for c, _ in full.dropped}
    assert len(full.cells) == len(full.builds)  # one build per cell until stable-ABI builds


def test_images_one_per_toolchain_with_every_python_needed(full) -> None:
    keys = [(i.kind, i.base, i.toolkit, i.toolkit_source, i.platform) for i in full.images.values()]
    assert len(keys) == len(set(keys))
    for b in full.builds:
        image = full.images[b.image]
        assert b.python in image.pythons
        assert image.toolkit == b.toolkit
        assert image.platform == b.platform
    cu12 = full.images[full.build("cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86_64").image]
    assert cu12.base == "nvidia/cuda:12.9.1-devel-rockylinux8" and cu12.toolkit_source == "base"
    assert cu12.pythons == ("3.10", "3.11", "3.12", "3.13")
    rocm = full.images[full.build("hip62-torch2.6-cxx11abiFALSE-cp310-linux_x86_64").image]
    assert rocm.base == "rocm/dev-ubuntu-22.04:6.2.4-complete"
    assert sorted(full.images) == list(full.images)


def test_torch_comes_from_a_matching_build(full) -> None:
    b = full.build("cu12-torch2.8-cxx11abiTRUE-cp311-linux_x86_64")
    assert b.torch_version == "2.8.0" and b.torch_index_url == ""  # PyPI's 2.8.0 is a CUDA 12.8 build
    b = full.build("cu11-torch2.6-cxx11abiFALSE-cp311-linux_x86_64")
    assert b.torch_index_url == "https://download.pytorch.org/whl/cu118"
    b = full.build("cu13-torch2.9-cxx11abiTRUE-cp311-linux_x86_64")
    assert b.torch_index_url == "https://download.pytorch.org/whl/cu130"  # PyPI's 2.9.1 is CUDA 12
    b = full.build("hip62-torch2.6-cxx11abiFALSE-cp311-linux_x86_64")
    assert b.torch_index_url == "https://download.pytorch.org/whl/rocm6.2.4"
    b = full.build("cu12-torch2.6-cxx11abiTRUE-cp311-linux_x86_64")  # the NGC-style include
    assert b.abi_native is False and b.manylinux == "manylinux_2_28_x86_64"
    assert full.build("cu12-torch2.6-cxx11abiFALSE-cp311-linux_x86_64").abi_native is True


def test_json_and_github_formats(ci) -> None:
    rc, out, err = run_cli(["plan", "--profile", "ci", "--format", "json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["id"] for r in rows] == CI_IDS
    for r in rows:
        assert JSON_KEYS <= set(r)
    assert rows == [b.to_json() for b in ci.builds]
    rc, out, _ = run_cli(["plan", "--profile", "ci", "--format", "github", "--explain"])
    gh = json.loads(out)  # --explain goes to stderr for machine formats
    assert [j["id"] for j in gh["include"]] == CI_IDS
    assert gh["include"][0]["runs_on"] == "ubuntu-24.04"


def test_table_and_explain() -> None:
    rc, out, _ = run_cli(["plan", "--profile", "upstream", "--explain"])
    assert rc == 0
    assert "cu11-torch2.7-cxx11abiTRUE-cp313-linux_x86_64" in out
    assert "builds," in out and "images, dropped" in out and "(profile upstream)" in out
    assert "torch 2.8 x py3.10 x cuda-11.8 x cxx11abi=TRUE x linux_x86_64: torch 2.8 has no CUDA 11.x build" in out


def test_ids_and_hashes_are_stable_across_runs_and_profiles(full, ci) -> None:
    again = load_plan()
    assert [(b.id, b.inputs_hash) for b in again.builds] == [(b.id, b.inputs_hash) for b in full.builds]
    # the CPU build is the same wheel in both plans: same image, same hash
    cpu_ci, cpu_full = ci.builds[0], full.build(ci.builds[0].id)
    assert (cpu_ci.image, cpu_ci.inputs_hash) == (cpu_full.image, cpu_full.inputs_hash)
    # narrowing the archs makes a different wheel
    assert ci.builds[1].inputs_hash != full.build(ci.builds[1].id).inputs_hash
    assert len({b.inputs_hash for b in full.builds}) == len(full.builds)
    # another process computes the same ids and hashes
    code = "import json; from builder.plan import load_plan; print(json.dumps([(b.id, b.inputs_hash) for b in load_plan().builds]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert [tuple(x) for x in json.loads(out)] == [(b.id, b.inputs_hash) for b in full.builds]


def _own_package(tmp_path: Path, text: str) -> Path:
    """A matrix whose [package] is a small copy we can edit."""
    pkg = tmp_path / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "1.0.0"\n')
    (pkg / "kernel.cu").write_text("// v1\n")
    (pkg / "__pycache__").mkdir()
    text = mutate(text, 'version_file = "mamba_ssm/__init__.py"', 'version_file = "pkg/__init__.py"')
    text = mutate(text, 'sources = ["csrc", "setup.py", "mamba_ssm"]', 'sources = ["pkg"]')
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def test_inputs_hash_follows_sources_version_and_settings(tmp_path: Path) -> None:
    path = _own_package(tmp_path, DEFAULT)
    base = {b.id: b.inputs_hash for b in load_plan(path, "ci").builds}
    (tmp_path / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"junk")  # not a source
    assert {b.id: b.inputs_hash for b in load_plan(path, "ci").builds} == base
    (tmp_path / "pkg" / "kernel.cu").write_text("// v2\n")
    edited = {b.id: b.inputs_hash for b in load_plan(path, "ci").builds}
    assert edited.keys() == base.keys() and all(edited[k] != base[k] for k in base)
    (tmp_path / "pkg" / "__init__.py").write_text('__version__ = "1.0.1"\n')
    bumped = {b.id: b.inputs_hash for b in load_plan(path, "ci").builds}
    assert all(bumped[k] != edited[k] for k in base)
    path.write_text(mutate(path.read_text(), 'archs = ["sm_80"]', 'archs = ["sm_90"]'))
    plan = load_plan(path, "ci")
    assert plan.builds[1].archs == ("sm_90",)
    assert plan.builds[0].inputs_hash == bumped[plan.builds[0].id]  # CPU: no archs
    assert plan.builds[1].inputs_hash != bumped[plan.builds[1].id]


def test_settings_reach_specs(tmp_path: Path) -> None:
    text = mutate(DEFAULT, "[toolkit_source]", '[toolkit_source]\n"cuda-11.8" = "debian"')
    text = mutate(text, "prefer_pypi = true", "prefer_pypi = false")
    text = mutate(
        text, 'url = "https://download.pytorch.org/whl/{variant}"', 'url = "https://mirror.example/torch/{variant}/"'
    )
    d = make_dir(tmp_path)
    (d / "matrix.toml").write_text(text)
    plan = load_plan(d / "matrix.toml")
    b = plan.build("cu11-torch2.6-cxx11abiFALSE-cp311-linux_x86_64")
    image = plan.images[b.image]
    assert (image.base, image.toolkit_source, image.extra["debian_suite"]) == ("debian:bookworm", "debian", "bookworm")
    assert b.manylinux == "manylinux_2_36_x86_64"  # bookworm's glibc
    assert b.torch_index_url == "https://mirror.example/torch/cu118/"
    assert plan.build("cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64").torch_index_url.endswith("/cu130/")


def test_abi_both_ways_and_excludes(tmp_path: Path) -> None:
    text = mutate(DEFAULT, 'cxx11abi = ["auto"]', "cxx11abi = [true, false]")
    text = mutate(
        text,
        "[toolkit_source]",
        '[toolkit_source]\n\n[[exclude]]\naccelerator = "rocm-6.2"\nreason = "no ROCm 6.2 users"',
    )
    text = text[: text.index("[[include]]")] + text[text.index("# Named subsets") :]  # the include is now in the axes
    d = make_dir(tmp_path)
    (d / "matrix.toml").write_text(text)
    plan = load_plan(d / "matrix.toml")
    reasons = {c.describe(): r for c, r in plan.dropped}
    assert "ships only the CXX11 ABI" in reasons["torch 2.7 x py3.11 x cpu x cxx11abi=FALSE x linux_x86_64"]
    assert reasons["torch 2.6 x py3.11 x rocm-6.2 x cxx11abi=FALSE x linux_x86_64"] == "exclude #1: no ROCm 6.2 users"
    assert "cpu-torch2.6-cxx11abiTRUE-cp311-linux_x86_64" in {b.id for b in plan.builds}


def test_only_selects_builds_and_narrows_images(full) -> None:
    want = ["cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86_64", "cpu-torch2.14-cxx11abiTRUE-cp313-linux_aarch64"]
    plan = load_plan(only=want)
    assert sorted(b.id for b in plan.builds) == sorted(want)
    assert {i.pythons for i in plan.images.values()} == {("3.10",), ("3.13",)}
    assert {b.id: b.inputs_hash for b in plan.builds} == {i: full.build(i).inputs_hash for i in want}
    with pytest.raises(MatrixError, match="near matches: cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86_64"):
        load_plan(only=["cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86"])


def test_builds_are_sorted_and_unique(full) -> None:
    ids = [b.id for b in full.builds]
    assert len(ids) == len(set(ids))
    keys = [
        ({"cp": 0, "cu": 1, "hi": 2}[b.accelerator[:2]], vtuple(b.toolkit or "0"), vtuple(b.torch)) for b in full.builds
    ]
    assert keys == sorted(keys)


def test_plan_imports_no_torch() -> None:
    code = "import sys; from builder.plan import load_plan; load_plan(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_release_profiles_split_the_full_plan_under_githubs_job_cap(full) -> None:
    parts = [load_plan(profile=p) for p in ("release-x86_64", "release-aarch64")]
    assert all(len(p.builds) <= 256 for p in parts)
    assert sorted(b.id for p in parts for b in p.builds) == sorted(b.id for b in full.builds)


def test_torch_build_choice_for_a_cuda_toolkit() -> None:
    from builder.compat import load, parse_accelerator

    c = load()
    pick = c.torch_install
    # PyPI's torch 2.8.0 is a CUDA 12.8 build: fine for toolkit 12.9, too new for 12.4
    assert pick("2.8", parse_accelerator("cuda-12.9"), "linux_x86_64", prefer_pypi=True).index_variant == ""
    assert pick("2.8", parse_accelerator("cuda-12.9"), "linux_x86_64", prefer_pypi=False).index_variant == "cu129"
    assert pick("2.8", parse_accelerator("cuda-12.4"), "linux_x86_64", prefer_pypi=True).index_variant == "cu126"
    assert pick("2.6", parse_accelerator("cuda-12.9"), "linux_aarch64", prefer_pypi=True).index_variant == "cu126"
    assert pick("2.14", parse_accelerator("cpu"), "linux_aarch64", prefer_pypi=True).index_variant == "cpu"
    assert pick("2.10", parse_accelerator("cpu"), "linux_aarch64", prefer_pypi=True).index_variant == ""
