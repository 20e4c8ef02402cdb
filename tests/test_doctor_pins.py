"""`mamba-doctor --requirements FILE`: the user's own requirements answered with the farm's pins for the torch
installed (mamba_ssm/doctor/pins.py), the pair kept, every other line kept, and the
install page's requirements-file path run as typed, with real pip and uv against a site served on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from builder.planning.recipes import recipe_for
from packaging.version import Version
from conftest import REPO
from indexkit import find_python, isolated_env, pip, serve, uv_bin
from wheelmaker import CAUSAL_CONV1D, STANDIN_TORCH, UPSTREAM_MAMBA, make_recipe_wheel, make_wheel

from builder.publishing import release_lines
from mamba_ssm.doctor.lines import LINES, RELEASES
from mamba_ssm.doctor.pins import PinError, answer, cell_of, why_not


def _facts(torch="2.14.1", cuda="13.0", abi=True, python="cp311", machine="x86_64", dist=None) -> dict:
    """An environment's facts; DIST: torch's distribution version as pip sees it (PyPI's is unlabelled), else
    torch's own version."""
    return {
        "python": {"tag": python, "executable": "/venv/bin/python"},
        "platform": {"system": "Linux", "machine": machine, "glibc": "2.35"},
        "torch": {"installed": True, "version": torch, "dist_version": dist or torch, "cuda": cuda, "hip": None,
                  "cxx11abi": abi, "gpus": []},
    }


TORCH_214, TORCH_26 = _facts(), _facts(torch="2.6.0", cuda="12.4", abi=False)


def _served(project: str, facts: dict) -> list[str]:
    cell = cell_of(facts)
    return [r["version"] for r in RELEASES[project] if why_not(r, cell) is None]


def _pins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(mamba-ssm|causal-conv1d)==(\S+)", text, re.MULTILINE))


# --------------------------------------------------------------------------- the data the doctor reads


def test_the_doctors_releases_are_the_recorded_ones():
    """lines.py's RELEASES is what the recipes' [[release]] list and builder/data/requires.toml (read from each
    sdist) say, and where the plan builds a release: a run of the generator gives the same text."""
    from builder.publishing import pins

    wheels = pins.release_wheels()
    assert (
        release_lines.releases_source(wheels, pins.left_out_rows(wheels))
        in (REPO / "mamba_ssm/doctor/lines.py").read_text()
    )
    recorded = release_lines.load_requires()
    for project in release_lines.PROJECTS:
        assert [r["version"] for r in RELEASES[project]] == list(recorded[project])
    planned = {p: [r["version"] for r in rows if r["planned"]] for p, rows in RELEASES.items()}
    prebuilt = {  # what the recipes mark prebuilt, and their [source]: the releases whose wheels the index holds
        p: [r.version for r in recipe_for(p).releases if r.prebuilt or r.version == recipe_for(p).source.version]
        for p in release_lines.PROJECTS
    }
    assert planned == prebuilt and all(LINES["upstream"]["projects"][p] in planned[p] for p in planned), planned
    # upstream's 1.x lists causal_conv1d>=1.1.0 as a requirement; 2.x as its [causal-conv1d] extra's
    one, two = (next(r for r in RELEASES["mamba-ssm"] if r["version"] == v) for v in ("1.1.1", "2.2.4"))
    assert (one["pairs"], one["pair_extra"], two["pairs"], two["pair_extra"]) == (">=1.1.0", False, ">=1.2.0", True)


def test_requires_txt_sections_become_markers():
    got = release_lines.parse_requires_txt(
        "torch\n\n[causal-conv1d]\ncausal-conv1d>=1.2.0\n[:python_version<'3.9']\nx\n", "t"
    )
    assert got == ["torch", 'causal-conv1d>=1.2.0; extra == "causal-conv1d"', 'x; python_version < "3.9"']


def test_an_sdist_whose_sha256_is_not_the_releases_is_refused(tmp_path):
    from builder.errors import SourceIntegrityError

    bad = tmp_path / "mamba_ssm-2.2.4.tar.gz"
    bad.write_bytes(b"not the sdist")
    with pytest.raises(SourceIntegrityError, match="sha256"):
        release_lines.recorded_requires(bad, "0" * 64)


# --------------------------------------------------------------------------- choosing the release


@pytest.mark.parametrize(
    "text",
    ["mamba-ssm\ncausal-conv1d>=1.2.0\n", "pip install mamba-ssm causal-conv1d>=1.2.0 --no-build-isolation\n",
     "mamba-ssm[causal-conv1d]\n"],
    ids=["model-card", "pasted-line", "extra"],
)  # fmt: skip
def test_a_bare_or_ranged_pair_gets_the_newest_served_releases_that_pair(text):
    out, _notes = answer(text, TORCH_214)
    cell = cell_of(TORCH_214)
    want = {p: f"{_served(p, TORCH_214)[-1]}+{cell.label}" for p in ("mamba-ssm", "causal-conv1d")}
    assert _pins(out) == want, out
    assert "torch==2.14.1  #" in out and "--no-build-isolation" not in out
    assert f"--extra-index-url https://mamba-ssm.github.io/wheels/upstream/{cell.key}/" in out


def test_every_other_line_is_kept_and_the_torch_line_gives_way():
    text = "# the paper's\ntorch==2.1.1\nnumpy<2  # pinned\nmamba-ssm==2.3.2.post1\n-e .\n--extra-index-url https://x.example/simple\n"
    out, notes = answer(text, TORCH_214)
    lines = out.splitlines()
    assert "torch==2.1.1" not in out and lines[2].startswith("torch==2.14.1")
    for kept in ("# the paper's", "numpy<2  # pinned", "-e .", "--extra-index-url https://x.example/simple"):
        assert kept in lines, out
    assert any("-e ." in n and "kept" in n for n in notes) and any("--extra-index-url" in n for n in notes)
    assert any("gives way" in n for n in notes)


def test_an_old_release_beside_a_new_torch_gets_its_wheel_and_an_unbuilt_one_is_told_what_serves_it():
    """torch 2.14 with mamba-ssm==1.1.1 (Vision Mamba's pin): the farm prebuilds 1.1.1 beside torch 2.14 (C++20
    patched), so the file pins it for this cell with a causal-conv1d it pairs with. causal-conv1d==1.1.3.post1 is
    built on request only: the answer says so and offers the nearest prebuilt releases below and above."""
    out, _ = answer("mamba-ssm==1.1.1\n", TORCH_214)
    got = _pins(out)
    label = cell_of(TORCH_214).label
    assert got["mamba-ssm"] == f"1.1.1+{label}", out
    assert Version(got["causal-conv1d"].partition("+")[0]) >= Version("1.1.0"), out  # 1.1.1 asks causal_conv1d>=1.1.0
    with pytest.raises(PinError) as err:
        answer("torch==2.1.1\nmamba-ssm==1.1.1\ncausal-conv1d==1.1.3.post1\n", TORCH_214)
    msg = str(err.value)
    assert "axis: release" in msg and "not prebuilt" in msg and "below: causal-conv1d==1.1.1" in msg, msg


def test_torch_26_with_a_model_cards_pins_gets_those_releases():
    """torch 2.6 with a model card's `mamba-ssm==2.2.4 causal-conv1d==1.5.0.post8`: both prebuilt beside it; a bare
    mamba-ssm gets the newest release that installs there (2.3.1: 2.3.2.post1 needs triton>=3.5.0), never
    "upgrade torch"."""
    out, _ = answer("mamba-ssm==2.2.4\ncausal-conv1d==1.5.0.post8\n", TORCH_26)
    label = cell_of(TORCH_26).label
    assert _pins(out) == {"mamba-ssm": f"2.2.4+{label}", "causal-conv1d": f"1.5.0.post8+{label}"}, out
    out, _ = answer("mamba-ssm\n", TORCH_26)
    assert _pins(out)["mamba-ssm"] == f"2.3.1+{label}", out


def test_a_pair_that_never_paired_is_told_so():
    with pytest.raises(PinError, match=r"never paired: mamba-ssm 2\.2\.4 requires causal-conv1d>=1\.2\.0"):
        answer("mamba-ssm==2.2.4\ncausal-conv1d==1.1.3.post1\n", TORCH_214)


def test_an_off_label_wheel_url_gets_this_cells_pin_of_its_release():
    url = "https://github.com/state-spaces/mamba/releases/download/v2.3.2.post1/mamba_ssm-2.3.2.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    out, _ = answer(f"{url}\n", TORCH_214)
    assert _pins(out)["mamba-ssm"] == f"2.3.2.post1+{cell_of(TORCH_214).label}" and url not in out.split("#")[0]


# --------------------------------------------------------------------------- the install page, as typed


def test_the_install_pages_requirements_file_path_runs_as_typed_with_pip_and_uv(tmp_path):
    """The install page's lead, run as typed through bash in a venv holding a torch (a stand-in of PyPI's CUDA 13
    torch 2.14: its files the doctor reads), against the site served on 127.0.0.1 with no PyPI: a paper's
    requirements file (a torch line of its own, a range, a line for another package on its own find-links)
    installs the farm's pair with pip, and the same file with uv; the torch is kept both times."""
    from sharedruns import python311
    from test_docs import OWN_PINS, versions

    from builder.publishing import doctor_dist
    from builder.publishing.index import build_index

    page = (REPO / "docs/user/install-prebuilt.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", page, re.DOTALL) if OWN_PINS in b)
    mamba, conv = (LINES["upstream"]["projects"][p] for p in ("mamba-ssm", "causal-conv1d"))
    label = cell_of(TORCH_214).label
    site, upstream, torches, others = (tmp_path / p for p in ("www/site", "up", "torches", "others"))
    make_recipe_wheel(upstream, "causal-conv1d", conv, label, source=CAUSAL_CONV1D)
    make_recipe_wheel(upstream, "mamba-ssm", mamba, label, source=UPSTREAM_MAMBA)
    build_index(upstream, site / "upstream")
    doctor_dist.publish(site / "doctor")
    make_wheel(torches, "torch", "2.14.1+cu130", files=STANDIN_TORCH, requires_python=">=3.9")
    make_wheel(others, "paper-helper", "1.0")
    env = isolated_env(tmp_path)
    (tmp_path / "www" / "pypi").mkdir()  # an empty stand-in of PyPI: nothing comes from the real one
    python = find_python("3.11") or python311()
    with serve(tmp_path / "www") as url:
        env["PIP_INDEX_URL"] = env["UV_INDEX_URL"] = f"{url}/pypi/"
        for tool in ("pip", "uv"):
            work = tmp_path / tool
            work.mkdir()
            vpy = work / "v" / "bin" / "python"
            subprocess.run([python, "-m", "venv", str(work / "v")], check=True, env=env)  # with pip: a user's venv
            pip(vpy, ["install", "--no-index", "--find-links", str(torches), "torch==2.14.1+cu130"], env)
            (work / "requirements.txt").write_text(
                f"torch==2.1.1\nmamba-ssm>=2\ncausal-conv1d>=1.2.0\n--find-links {others}\npaper-helper==1.0\n"
            )
            shims = work / "shims"
            shims.mkdir()
            run = (
                f'exec "{vpy}" -m pip "$@"'
                if tool == "pip"
                else f'exec "{uv_bin()}" pip "$1" --python "{vpy}" "${{@:2}}"'
            )
            (shims / "pip").write_text(f"#!/bin/bash\n{run}\n")
            (shims / "pip").chmod(0o755)
            script = "set -e\n" + block.replace("https://mamba-ssm.github.io/wheels/", f"{url}/site/")
            shell_env = {**env, "PATH": f"{shims}:{vpy.parent}:{env['PATH']}", "MAMBA_WHEEL_INDEX": f"{url}/site"}
            proc = subprocess.run(["bash", "-c", script], cwd=work, env=shell_env, capture_output=True, text=True,
                                  timeout=300, check=False)  # fmt: skip
            assert proc.returncode == 0, proc.stdout + proc.stderr
            got = versions(vpy, ["torch", "mamba-ssm", "causal-conv1d", "paper-helper"])
            assert got["torch"] == "2.14.1+cu130", (tool, got)
            assert got["mamba-ssm"].lower() == f"{mamba}+{label}".lower(), (tool, got)
            assert got["causal-conv1d"].lower() == f"{conv}+{label}".lower(), (tool, got)
            assert got["paper-helper"] == "1.0"
            assert "torch==2.1.1" not in (work / "fixed.txt").read_text()


# --------------------------------------------------------------------------- off-label wheels


def test_an_off_label_wheel_installed_by_url_is_named_with_this_cells_pin_of_its_release():
    """upstream's mamba-ssm 2.3.2.post1 built for cu12 torch 2.5 (a GitHub release wheel, installed by URL) under a
    CUDA 13 torch 2.14: one problem naming it and the URL, its fix the farm's 2.3.2.post1 for this cell (not the
    label check's generic reinstall); the same wheel from an index (no URL) is the label check's."""
    from test_doctor import _user

    from mamba_ssm.doctor.checks import PROBLEM, run_checks

    url = "https://github.com/state-spaces/mamba/releases/download/v2.3.2.post1/mamba_ssm-2.3.2.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    facts = _user(cuda="13.0", line="upstream", label="cu12torch2.5cxx11abiFALSE")
    facts["direct_urls"] = {"mamba-ssm": url}
    found = [f for f in run_checks(facts, offline=True)[0] if f.verdict == PROBLEM]
    off = [f for f in found if f.kind == "off-label-wheel"]
    assert len(off) == 1 and url in off[0].title, found
    want = facts["torch"]["variant"]["label"]
    assert f"mamba-ssm==2.3.2.post1+{want}" in off[0].fix, off[0].fix
    # torch pinned as pip sees it, the wheel's dependencies installed (never --no-deps)
    assert "torch==2.14.1 " in off[0].fix and "--no-deps" not in off[0].fix, off[0].fix
    assert not [f for f in found if f.kind == "variant-mismatch" and "mamba-ssm" in f.title], found
    facts["direct_urls"] = {}
    assert not [f for f in run_checks(facts, offline=True)[0] if f.kind == "off-label-wheel"]


def test_direct_urls_reads_what_pip_recorded_for_a_wheel_installed_by_path(tmp_path):
    """pip records a wheel installed from a file or URL in direct_url.json (PEP 610): the doctor reads it there."""
    from indexkit import make_venv

    env = isolated_env(tmp_path)
    whl = make_wheel(tmp_path / "w", "causal-conv1d", "1.7.0+cu12torch2.5cxx11abiFALSE")
    vpy = make_venv(tmp_path / "v", find_python("3.11") or sys.executable, env)
    pip(vpy, ["install", "--no-deps", "--no-index", str(whl)], env)
    code = "import json; from mamba_ssm.doctor.offlabel import direct_urls; print(json.dumps(direct_urls()))"
    out = subprocess.run([str(vpy), "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "PYTHONPATH": str(REPO)}).stdout  # fmt: skip
    import json
    from urllib.parse import unquote

    got = json.loads(out)
    assert (
        list(got) == ["causal-conv1d"]
        and got["causal-conv1d"].startswith("file://")
        and whl.name in unquote(got["causal-conv1d"])
    )


def test_explain_names_a_pasted_wheel_url_line():
    from mamba_ssm.doctor.classify import classify

    line = "pip install https://github.com/state-spaces/mamba/releases/download/v2.2.4/mamba_ssm-2.2.4+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    [d] = [d for d in classify(line) if d.kind == "off-label-wheel"]
    assert "cu12torch2.5cxx11abiFALSE" in d.title and "mamba-doctor --requirements -" in d.fix and "2.2.4" in d.fix
    assert not [d for d in classify("pip install mamba-ssm==2.2.4") if d.kind == "off-label-wheel"]


def test_pypis_unlabelled_torch_is_pinned_as_pip_sees_it():
    """PyPI's CUDA torch: its distribution is `2.14.1` while torch.__version__ says `2.14.1+cu130`; the user's own
    file is pinned the way `--requirements upstream` pins it (requirements.installed_torch), so pip keeps it."""
    out, _notes = answer("mamba-ssm\n", _facts(torch="2.14.1+cu130", dist="2.14.1"))
    torch_line = next(line for line in out.splitlines() if line.startswith("torch=="))
    assert torch_line.split()[0] == "torch==2.14.1", out
    assert "+cu13torch2.14cxx11abiTRUE" in out, out
