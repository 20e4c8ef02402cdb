"""The build plan: what the farm builds from the default matrix.toml, and how the plan changes with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_matrix import DEFAULT, PYTHON_AXIS, REPO, TORCH_AXIS, make_dir, mutate

from builder.errors import MatrixError
from builder.facts.compat import load as load_compat
from builder.facts.compat import vtuple
from builder.planning.matrix import Cell
from builder.planning.plan import load_plan, served_cells, stable_floor
from mamba_ssm.variant import Variant

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
def classic():
    return load_plan(stable=False)


@pytest.fixture(scope="module")
def ci():
    return load_plan(profile="ci")


def served_by(plan) -> dict:
    """cell -> ids of the builds that serve it."""
    out: dict = {}
    for b in plan.builds:
        for c in served_cells(plan, b):
            out.setdefault(c, []).append(b.id)
    return out


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
        torch = b.torch_version.rsplit(".", 1)[0] if b.stable else b.torch
        v = Variant(torch, backend, b.toolkit, b.cxx11abi, python=b.python_tag, platform=b.platform)
        if b.stable:
            v = v.as_stable()
        assert (b.variant, b.label, b.accelerator) == (v.key, v.label, v.accelerator)
        assert b.id == f"{v.key}-{b.python_tag}-{b.platform}"


def test_full_plan_covers_upstream_release(full, classic) -> None:
    """Every combination upstream mamba releases that a torch build exists for is in the plan,
    as a classic build without the collapse and served by some build with it."""
    ids = {b.id for b in classic.builds}
    served = served_by(full)
    acc = {"11": "cuda-11.8", "12": "cuda-12.9", "13": "cuda-13.0"}
    for torch in ("2.6", "2.7", "2.8", "2.9", "2.10"):
        for python in ("3.10", "3.11", "3.12", "3.13"):
            for cuda in ("11.8", "12.9", "13.0"):
                major = cuda.split(".")[0]
                has = {"2.6": "1112", "2.7": "1112", "2.8": "12", "2.9": "1213", "2.10": "1213"}[torch]
                if major not in (has[i : i + 2] for i in range(0, len(has), 2)):
                    continue
                abis = ["FALSE", "TRUE"] if torch == "2.6" else ["TRUE"]  # 2.6: CUDA 11 and 12, both ABIs
                for abi in abis:
                    want = f"cu{major}-torch{torch}-cxx11abi{abi}-cp{python.replace('.', '')}-linux_x86_64"
                    assert want in ids, want
                    assert Cell(torch, python, acc[major], abi == "TRUE", "linux_x86_64") in served, want
    # aarch64 where PyTorch publishes aarch64 CUDA wheels
    assert "cu12-torch2.6-cxx11abiFALSE-cp312-linux_aarch64" in ids
    assert "cu13-torch2.10-cxx11abiTRUE-cp313-linux_aarch64" in ids
    # and the rest of the default release: CPU, ROCm, newer torch
    assert full.cells == classic.cells
    assert "cpu-torch2.4-cxx11abiFALSE-cp310-linux_x86_64" in ids
    assert "hip62-torch2.6-cxx11abiFALSE-cp311-linux_x86_64" in ids
    assert "hip72-torch2.14-cxx11abiTRUE-cp312-linux_x86_64" in ids
    assert "cu13-torch2.14-cxx11abiTRUE-cp313-linux_aarch64" in ids


def test_impossible_cells_are_dropped_with_a_reason(full, classic) -> None:
    reasons = {c.describe(): r for c, r in full.dropped}
    assert "Python 3.8-3.12 only" in reasons["torch 2.4 x py3.13 x cpu x cxx11abi=FALSE x linux_x86_64"]
    assert "no CUDA 11.x build" in reasons["torch 2.8 x py3.11 x cuda-11.8 x cxx11abi=TRUE x linux_x86_64"]
    assert "linux_x86_64 only" in reasons["torch 2.9 x py3.11 x rocm-6.4 x cxx11abi=TRUE x linux_aarch64"]
    assert "no ROCm 6.2 build" in reasons["torch 2.9 x py3.11 x rocm-6.2 x cxx11abi=TRUE x linux_x86_64"]
    assert not set(full.cells) & {c for c, _ in full.dropped}
    assert len(classic.cells) == len(classic.builds)  # without the collapse: one build per cell


def test_release_serves_every_python_torch_ships() -> None:
    """The Python axis follows torch's own rows (builder/data/torch.toml): upstream's packages get cp314
    on torch 2.9..2.15 and cp315 on 2.15, both platforms; every Python cell left out says which torch
    lacks it."""
    plan = load_plan(profile="release")
    compat = load_compat()
    # a cell whose requirements do not install beside its torch is left out, saying why (tests/test_installs.py)
    left = {(c.torch, c.python, c.platform, why.split(" ", 1)[0]) for c, why in plan.dropped
            if " does not install beside torch " in why}  # fmt: skip
    for project in ("causal-conv1d", "mamba-ssm"):
        have = {(c.torch, c.python, c.platform) for b in plan.builds if b.project == project and b.from_recipe
                for c in served_cells(plan, b)}  # fmt: skip
        have |= {(t, py, pl) for t, py, pl, p in left if p == project}
        for platform in ("linux_x86_64", "linux_aarch64"):
            for torch in ("2.9", "2.10", "2.11", "2.12", "2.13", "2.14", "2.15"):
                assert (torch, "3.14", platform) in have, (project, torch, platform)
            assert ("2.15", "3.15", platform) in have, (project, platform)
            assert not {t for t, py, pl in have if py == "3.15" and pl == platform} - {"2.15"}
    for cell, reason in plan.dropped:
        if not compat.torch[cell.torch].supports_python(cell.python):
            lo, hi = compat.torch[cell.torch].python
            assert reason == f"torch {cell.torch} has wheels for Python {lo}-{hi} only", (cell, reason)
    served = {c.python for c in plan.cells}
    shipped = {py for row in compat.torch.values() for py in compat.pythons if row.supports_python(py)}
    assert served == {py for py in shipped if vtuple(py) >= (3, 10)}, "every Python torch ships from 3.10 up"


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
    assert cu12.pythons == ("3.10", "3.11", "3.12", "3.13", "3.14")  # torch 2.9 on ship cp314
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


def test_json_and_github_formats(ci, cli) -> None:
    proc = cli("plan", "--profile", "ci", "--format", "json", in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["id"] for r in rows] == CI_IDS
    for r in rows:
        assert JSON_KEYS <= set(r)
    assert rows == [b.to_json() for b in ci.builds]
    proc = cli("plan", "--profile", "ci", "--format", "github", "--explain", in_process=True)
    rc, out, _ = proc.returncode, proc.stdout, proc.stderr
    gh = json.loads(out)  # --explain goes to stderr for machine formats
    # the CUDA builds that differ only in Python share a job, named by their compile group
    assert [j["id"] for j in gh["include"]] == [CI_IDS[0], "cu13-torch2.14-cxx11abiTRUE-linux_x86_64"]
    assert gh["include"][1]["ids"].split() == CI_IDS[1:]
    assert gh["include"][0]["runs_on"] == "ubuntu-24.04"


def test_table_and_explain(cli) -> None:
    proc = cli("plan", "--profile", "upstream", "--explain", in_process=True)
    rc, out, _ = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0
    assert "cu11-torch2.7-cxx11abiTRUE-cp313-linux_x86_64" in out
    # upstream's 72 wheels are 72 cells; torch 2.10's 16 take 4 stable builds
    assert "60 builds (4 stable-ABI) serving 72 cells, " in out and "images, dropped" in out
    assert "(profile upstream)" in out
    # which build serves which cells: the serves column, and each stable build's cells
    assert "4 cells: torch 2.10 x py3.10..3.13 (1 variant)" in out and "│ 1 cell" in out
    assert "cu13-torchstable-abi3-cp310-linux_aarch64 serves 4 cell(s):" in out
    assert "  torch 2.10 x py3.13 x cuda-13.0 x cxx11abi=TRUE x linux_aarch64" in out
    assert "torch 2.8 x py3.10 x cuda-11.8 x cxx11abi=TRUE x linux_x86_64: torch 2.8 has no CUDA 11.x build" in out


def narrow_matrix(root: Path, torch: str, python: str, accelerator: str, platform: str) -> Path:
    """matrix.toml with just these axes (TOML arrays), no [[include]] and no profiles."""
    text = mutate(
        DEFAULT,
        TORCH_AXIS,
        f"torch = {torch}",
    )
    text = mutate(text, PYTHON_AXIS, f"python = {python}")
    text = mutate(
        text,
        'accelerator = ["cpu", "cuda-11.8", "cuda-12.9", "cuda-13.0", "rocm-6.2", "rocm-6.4", "rocm-7.2"]',
        f"accelerator = {accelerator}",
    )
    text = mutate(text, 'platform = ["linux_x86_64", "linux_aarch64"]', f"platform = {platform}")
    assert "\n[[include]]" in text, "test case is stale: matrix.toml has no [[include]]"
    path = make_dir(root) / "matrix.toml"
    path.write_text(text[: text.index("\n[[include]]") + 1])
    return path


def test_nothing_to_build_says_why_when_few_were_dropped(tmp_path: Path, cli) -> None:
    path = narrow_matrix(tmp_path, '["2.0"]', '["3.13"]', '["cuda-13.0"]', '["linux_x86_64"]')
    proc = cli("plan", "--matrix", str(path), in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].endswith("axes: nothing to build: the matrix leaves no buildable combination (1 dropped):")
    cell = "torch 2.0 x py3.13 x cuda-13.0 x cxx11abi=FALSE x linux_x86_64"
    assert lines[1:] == [f"  {cell}: torch 2.0 has wheels for Python 3.8-3.11 only"]
    with pytest.raises(MatrixError) as caught:
        load_plan(path)
    assert "torch 2.0 has wheels for Python 3.8-3.11 only" in str(caught.value)


def test_nothing_to_build_points_at_explain_when_many_were_dropped(tmp_path: Path, cli) -> None:
    accelerators = '["cpu", "cuda-11.8", "cuda-12.9", "cuda-13.0", "rocm-6.2", "rocm-6.4", "rocm-7.2"]'
    path = narrow_matrix(tmp_path, '["2.0"]', '["3.12", "3.13"]', accelerators, '["linux_x86_64", "linux_aarch64"]')
    proc = cli("plan", "--matrix", str(path), in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and out == ""
    first, *rest = err.splitlines()
    assert first.endswith("nothing to build: the matrix leaves no buildable combination (28 dropped)")
    assert rest == ["hint: rerun the plan with --explain to see what was dropped and why"]
    # and --explain lists them, though there is no plan to show
    proc = cli("plan", "--matrix", str(path), "--explain", in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and "(28 dropped)" in err
    listed = out.splitlines()
    assert listed[0] == "dropped 28 combination(s):" and len(listed) == 29
    assert all(": torch 2.0 " in line for line in listed[1:]), listed


def test_ids_and_hashes_are_stable_across_runs_and_profiles(full, classic, ci) -> None:
    again = load_plan()
    assert [(b.id, b.inputs_hash) for b in again.builds] == [(b.id, b.inputs_hash) for b in full.builds]
    # the CPU build is the same wheel in both classic plans: same image, same hash
    cpu_ci, cpu_full = ci.builds[0], classic.build(ci.builds[0].id)
    assert (cpu_ci.image, cpu_ci.inputs_hash) == (cpu_full.image, cpu_full.inputs_hash)
    # narrowing the archs makes a different wheel
    assert ci.builds[1].inputs_hash != classic.build(ci.builds[1].id).inputs_hash
    # a classic build the collapse keeps is the same build either way
    for b in full.builds:
        if not b.stable:
            assert classic.build(b.id) == b
    assert len({b.inputs_hash for b in full.builds}) == len(full.builds)
    # another process computes the same ids and hashes
    code = "import json; from builder.planning.plan import load_plan; print(json.dumps([(b.id, b.inputs_hash) for b in load_plan().builds]))"
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
    assert plan.build("cu13-torch2.9-cxx11abiTRUE-cp311-linux_x86_64").torch_index_url.endswith("/cu130/")


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
    want = ["cu12-torch2.6-cxx11abiFALSE-cp313-linux_x86_64", "cpu-torchstable-abi3-cp310-linux_aarch64"]
    plan = load_plan(only=want)
    assert sorted(b.id for b in plan.builds) == sorted(want)
    assert {i.pythons for i in plan.images.values()} == {("3.10",), ("3.13",)}
    # the classic cell and the stable build's: each torch >= the floor on the axes x the axes' Pythons it has
    compat = load_compat()
    stable_cells = [(t, p) for t in plan.matrix.axes.torch if vtuple(t) >= vtuple(stable_floor())
                    for p in plan.matrix.axes.python if compat.torch[t].supports_python(p)]  # fmt: skip
    assert len(stable_cells) >= 20 and len(plan.cells) == 1 + len(stable_cells)
    assert {b.id: b.inputs_hash for b in plan.builds} == {i: full.build(i).inputs_hash for i in want}
    with pytest.raises(MatrixError, match="near matches: cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86_64"):
        load_plan(only=["cu12-torch2.6-cxx11abiFALSE-cp310-linux_x86"])
    # a classic id the collapse replaced: only --no-stable plans it
    with pytest.raises(MatrixError, match="no such build"):
        load_plan(only=["cpu-torch2.14-cxx11abiTRUE-cp313-linux_aarch64"])
    assert [b.id for b in load_plan(only=["cpu-torch2.14-cxx11abiTRUE-cp313-linux_aarch64"], stable=False).builds] == [
        "cpu-torch2.14-cxx11abiTRUE-cp313-linux_aarch64"
    ]


def test_builds_are_sorted_and_unique(full) -> None:
    ids = [b.id for b in full.builds]
    assert len(ids) == len(set(ids))
    keys = [  # per accelerator: classic builds by torch, then its stable builds
        ({"cp": 0, "cu": 1, "hi": 2}[b.accelerator[:2]], vtuple(b.toolkit or "0"), b.stable, vtuple(b.torch_version))
        for b in full.builds
    ]
    assert keys == sorted(keys)


def test_plan_imports_no_torch() -> None:
    code = "import sys; from builder.planning.plan import load_plan; load_plan(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_release_profiles_split_the_full_plan_under_githubs_job_cap(full) -> None:
    parts = [load_plan(profile=p) for p in ("release-x86_64", "release-aarch64")]
    assert all(len(p.builds) <= 256 for p in parts)
    assert sorted(b.id for p in parts for b in p.builds) == sorted(b.id for b in full.builds)


def test_github_jobs_compile_each_cuda_group_once_the_rest_one_job_per_build() -> None:
    """`plan --format github` for the release: CUDA builds that differ only in Python (a recipe's and the
    checkout's) share one job (named by their compile group, listing exactly those ids); every other build
    (CPU, ROCm) has its own job."""
    from builder.planning.plan import github_jobs

    plan = load_plan(profile="release")
    by_id = {b.id: b for b in plan.builds}
    jobs = github_jobs(plan.builds)
    ids = [i for j in jobs for i in j["ids"].split()]
    assert sorted(ids) == sorted(by_id) and len(set(ids)) == len(ids), "every build in exactly one job"
    assert len({j["id"] for j in jobs}) == len(jobs), "job ids name the artifacts: unique"
    groups = 0
    for j in jobs:
        members = [by_id[i] for i in j["ids"].split()]
        first = members[0]
        if first.accelerator.startswith("cu") and not first.stable:
            groups += 1
            assert j["id"] == first.compile_group
            assert j["ids"].split() == [b.id for b in plan.builds if b.compile_group == j["id"]]
            assert j["python"] == " ".join(b.python for b in members)
            assert {(b.project, b.variant, b.platform, b.image, b.archs) for b in members} == {
                (first.project, first.variant, first.platform, first.image, first.archs)
            }
        else:  # CPU, ROCm and stable-ABI builds (hipcc shares no kernels; a stable build has no siblings)
            assert j["id"] == j["ids"] == first.id and j["python"] == first.python
    assert groups and max(len(j["ids"].split()) for j in jobs) == 5  # cp310..cp314 (torch 2.9..2.14)
    assert any(not by_id[j["ids"].split()[0]].from_recipe and len(j["ids"].split()) > 1 for j in jobs)
    assert any(j["accelerator"].startswith("hip") and j["farm_project"] != "checkout" for j in jobs)


def test_release_profile_builds_both_lines_within_githubs_job_cap_per_platform(full) -> None:
    from collections import Counter

    from builder.planning.plan import GITHUB_MATRIX_LIMIT, github_jobs

    # each recipe's pinned release: the every-release plan's jobs are release.yml's to spread past the cap
    plan = load_plan(profile="release", releases="pinned")
    assert {b.id for b in full.builds} < {b.id for b in plan.builds}, "every checkout build, and upstream's"
    assert {b.project for b in plan.builds if b.from_recipe} == {"causal-conv1d", "mamba-ssm"}
    jobs = Counter(j["platform"] for j in github_jobs(plan.builds))
    builds = Counter(b.platform for b in plan.builds)
    print(f"release profile: jobs {dict(jobs)}, builds {dict(builds)}")
    assert set(jobs) == {"linux_x86_64", "linux_aarch64"}
    assert all(n <= GITHUB_MATRIX_LIMIT for n in jobs.values()), jobs
    assert builds["linux_x86_64"] > GITHUB_MATRIX_LIMIT, "one job per build would not fit: the grouping is needed"


def test_github_format_says_how_many_matrices_past_the_job_cap(monkeypatch, cli) -> None:
    import builder.planning.plan as plan_mod

    monkeypatch.setattr(plan_mod, "GITHUB_MATRIX_LIMIT", 2)
    proc = cli("plan", "--profile", "ci", "--projects", "checkout", "mamba-ssm", "--format", "github", in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0 and len(json.loads(out)["include"]) == 3  # 2 checkout jobs (CPU, the cu13 group), mamba-ssm's
    # past the cap the release runs more matrices of at most it (release.yml's build-x86_64-2 ...)
    assert "plan: 3 linux_x86_64 jobs, 2 matrices of at most 2 (GitHub's limit per matrix)" in err


def test_torch_build_choice_for_a_cuda_toolkit() -> None:
    from builder.facts.compat import load, parse_accelerator

    c = load()
    pick = c.torch_install
    # PyPI's torch 2.8.0 is a CUDA 12.8 build: fine for toolkit 12.9, too new for 12.4
    assert pick("2.8", parse_accelerator("cuda-12.9"), "linux_x86_64", prefer_pypi=True).index_variant == ""
    assert pick("2.8", parse_accelerator("cuda-12.9"), "linux_x86_64", prefer_pypi=False).index_variant == "cu129"
    assert pick("2.8", parse_accelerator("cuda-12.4"), "linux_x86_64", prefer_pypi=True).index_variant == "cu126"
    assert pick("2.6", parse_accelerator("cuda-12.9"), "linux_aarch64", prefer_pypi=True).index_variant == "cu126"
    assert pick("2.14", parse_accelerator("cpu"), "linux_aarch64", prefer_pypi=True).index_variant == "cpu"
    assert pick("2.10", parse_accelerator("cpu"), "linux_aarch64", prefer_pypi=True).index_variant == ""


# --------------------------------------------------------------------------- the stable-ABI collapse


def test_default_matrix_serves_every_cell_exactly_once(full, classic) -> None:
    """[plan] stable_abi is on in matrix.toml: each cell has one build, stable where it can be."""
    assert full.stable and not classic.stable
    served = served_by(full)
    assert set(served) == set(full.cells) == set(classic.cells)
    twice = {c.describe(): ids for c, ids in served.items() if len(ids) != 1}
    assert not twice, twice
    floor = vtuple(stable_floor())
    for b in full.builds:
        cells = served_cells(full, b)
        if not b.stable:
            assert len(cells) == 1 and classic.build(b.id) == b
            continue
        assert b.python == "3.10" and b.id.endswith(f"-cp310-{b.platform}")  # built on the abi3 floor
        assert b.accelerator.startswith(("cpu", "cu")) and b.torch == "stable"
        for c in cells:
            assert vtuple(c.torch) >= floor and vtuple(c.python) >= (3, 10) and c.platform == b.platform
        assert set(b.serves) == {
            Variant(c.torch, "cuda" if b.toolkit else "cpu", b.toolkit, c.cxx11abi).key for c in cells
        }
    # a cell a stable wheel could serve never gets a classic build
    for b in full.builds:
        if not b.stable and b.accelerator.startswith(("cpu", "cu")):
            assert vtuple(b.torch) < floor or vtuple(b.python) < (3, 10), b.id


def test_default_matrix_compresses(full, classic) -> None:
    ratio = len(full.cells) / len(full.builds)
    stable = [b for b in full.builds if b.stable]
    print(
        f"default matrix: {len(full.cells)} cells, {len(full.builds)} builds ({len(stable)} stable-ABI), "
        f"cells/builds = {ratio:.2f} (classic: {len(classic.builds)} builds, 1.00)"
    )
    assert ratio > 1.5
    assert len(classic.builds) == len(classic.cells) > len(full.builds)
    # every CPU/CUDA accelerator gets one stable build per platform it has cells >= the floor on
    assert sorted(b.id for b in stable) == [
        f"{acc}-torchstable-abi3-cp310-linux_{arch}"
        for acc in ("cpu", "cu12", "cu13")
        for arch in ("aarch64", "x86_64")
    ]


def test_ci_profile_keeps_its_three_classic_builds(ci) -> None:
    """profiles.ci sets stable_abi = false: the farm's docker tests build exactly these ids."""
    assert not ci.stable and ci.profile.stable_abi is False
    assert [b.id for b in ci.builds] == CI_IDS and not any(b.stable for b in ci.builds)
    assert [b.id for b in load_plan(profile="ci", stable=True).builds] == [
        "cpu-torchstable-abi3-cp311-linux_x86_64",
        "cu13-torchstable-abi3-cp311-linux_x86_64",
    ]


def test_ci_stable_profile_serves_the_ci_cells_with_two_stable_builds(ci) -> None:
    plan = load_plan(profile="ci-stable")
    assert plan.stable and plan.cells == ci.cells
    cpu, cu13 = plan.builds
    assert (cpu.id, cu13.id) == ("cpu-torchstable-abi3-cp311-linux_x86_64", "cu13-torchstable-abi3-cp311-linux_x86_64")
    assert cpu.stable and cu13.stable
    assert cpu.serves == ("cpu-torch2.13-cxx11abiTRUE",) and cu13.serves == ("cu13-torch2.14-cxx11abiTRUE",)
    assert [c.python for c in served_cells(plan, cu13)] == ["3.11", "3.12"]
    assert (cu13.archs, cu13.torch_version, cpu.torch_version) == (("sm_80",), "2.14.1", "2.13.0")
    assert cu13.to_json()["serves"] == ["cu13-torch2.14-cxx11abiTRUE"]  # the sidecar the index reads
    # --no-stable takes the profile back to classic builds: the ci profile's own
    assert [b.id for b in load_plan(profile="ci-stable", stable=False).builds] == CI_IDS


def test_cli_stable_flags_and_only_agree_with_the_matrix_setting(cli) -> None:
    proc = cli("plan", "--format", "json", in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    default = [r["id"] for r in json.loads(out)]
    proc = cli("plan", "--format", "json", "--stable", in_process=True)
    rc2, out2, _ = proc.returncode, proc.stdout, proc.stderr
    assert rc == rc2 == 0 and [r["id"] for r in json.loads(out2)] == default
    proc = cli("plan", "--format", "json", "--no-stable", in_process=True)
    rc, out, _ = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0 and len(json.loads(out)) > len(default)
    # what the release's build job does with an id of the plan job's matrix (same profile)
    for profile, spec_id in (
        ([], "cu13-torchstable-abi3-cp310-linux_x86_64"),
        (["--profile", "ci"], CI_IDS[0]),
        (["--profile", "ci-stable"], "cpu-torchstable-abi3-cp311-linux_x86_64"),
    ):
        proc = cli("plan", *profile, "--only", spec_id, "--format", "github", in_process=True)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
        assert rc == 0, err
        assert [j["id"] for j in json.loads(out)["include"]] == [spec_id]
    proc = cli("plan", "--only", CI_IDS[0], "--format", "json", in_process=True)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and "no such build" in err and "Traceback" not in err


def test_build_command_loads_the_same_plan_as_plan(monkeypatch, cli) -> None:
    """`builder build --only ID` (the farm) must accept every id `plan` lists, with the same profile."""
    import builder.planning.plan as plan_mod

    seen = []
    real = plan_mod.load_plan

    def spy(*a, **kw):
        plan = real(*a, **kw)
        seen.append([b.id for b in plan.builds])
        raise SystemExit(0)  # stop before any building

    monkeypatch.setattr(plan_mod, "load_plan", spy)
    for profile, spec_id in ((None, "cpu-torchstable-abi3-cp310-linux_x86_64"), ("ci", CI_IDS[1])):
        args = ["build", "--only", spec_id, "--dist", "/nonexistent-dist"] + (["--profile", profile] if profile else [])
        proc = cli(*args, in_process=True)
        rc, _, err = proc.returncode, proc.stdout, proc.stderr
        assert rc == 0, err
        assert seen[-1] == [spec_id]


def test_a_trim_profile_plans_the_same_cells_as_the_recipes_trimmed_builds(cli) -> None:
    """ci-upstream (the CI set) trims; ci-upstream-full is the same cell in full. Same ids, other builds: the
    trimmed ones' inputs hash covers the trim patches, and their explanation says why each applies."""
    trim, full = (load_plan(profile=p).builds for p in ("ci-upstream", "ci-upstream-full"))
    assert [b.id for b in trim] == [b.id for b in full] and len(trim) == 2
    assert all(b.trim for b in trim) and not any(b.trim for b in full)
    assert not {b.inputs_hash for b in trim} & {b.inputs_hash for b in full}
    # a trimmed wheel never reaches a release: no release profile trims
    from builder.planning.matrix import load_matrix

    matrix = load_matrix(REPO / "matrix.toml", load_compat())
    assert not [n for n, p in matrix.profiles.items() if n.startswith("release") and p.trim]
    out = cli("plan", "--profile", "ci-upstream", "--explain", in_process=True).stdout
    assert "patch trim-sources (setup.py, 2 edits): applies: the build is trimmed (trim = true)" in out, out
    out = cli("plan", "--profile", "ci-upstream-full", "--explain", in_process=True).stdout
    assert "patch trim-sources (setup.py, 2 edits): skipped: the build is full, not trimmed (trim = true)" in out
