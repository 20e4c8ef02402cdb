"""An index with several projects: upstream's mamba-ssm and causal-conv1d beside each other; never two sources of
one distribution name (this checkout's mamba-ssm and upstream's) in one index."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from indexkit import serve
from wheelmaker import CAUSAL_CONV1D, UPSTREAM_MAMBA, make_mamba_wheel, make_recipe_wheel

from builder.commands import cli
from builder.errors import IndexIntegrityError, NameCollision, UsageError
from builder.publishing.index import Manifest, build_index

CU13 = "cu13-torch2.14-cxx11abiTRUE"
CAUSAL_311 = "causal_conv1d-1.7.0+cu13torch2.14cxx11abitrue-cp311-cp311-manylinux_2_28_x86_64.whl"
MAMBA_311 = "mamba_ssm-2.3.2.post1+cu13torch2.14cxx11abitrue-cp311-cp311-manylinux_2_28_x86_64.whl"
CAUSAL_CU12 = "causal_conv1d-1.7.0+cu12torch2.6cxx11abifalse-cp311-cp311-manylinux_2_28_x86_64.whl"


def _links(page: Path) -> list[str]:
    return re.findall(r"<a href=\"[^\"]*\"[^>]*>([^<]+)</a>", page.read_text())


@pytest.fixture
def upstream(tmp_path) -> Path:
    """The upstream product line as the recipes build it: both projects for cu13/torch 2.14, causal-conv1d
    alone for cu12/torch 2.6."""
    w = tmp_path / "wheels"
    for py in ("cp311", "cp312"):
        make_recipe_wheel(w, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue", py, source=CAUSAL_CONV1D)
        make_recipe_wheel(w, "mamba-ssm", "2.3.2.post1", "cu13torch2.14cxx11abitrue", py, source=UPSTREAM_MAMBA)
    make_recipe_wheel(w, "causal-conv1d", "1.7.0", "cu12torch2.6cxx11abifalse", "cp311", source=CAUSAL_CONV1D)
    return w


def _tree(root: Path) -> dict[str, bytes]:
    """Every file a static host serves from ``root`` (symlinks followed), by relative path."""
    out = {}
    for dirpath, _dirs, names in os.walk(root, followlinks=True):
        for n in names:
            p = Path(dirpath, n)
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_each_variant_page_lists_every_project_and_each_project_gets_its_pages(upstream, tmp_path):
    out = tmp_path / "index"
    build_index(upstream, out)
    page = out / CU13 / "index.html"
    links = _links(page)
    # find-links: every project's wheels of the variant, the file names as built; then one link per project
    # (mamba-ssm first, then the others by name)
    assert [x for x in links if x.endswith(".whl")] == [
        MAMBA_311,
        MAMBA_311.replace("cp311", "cp312"),
        CAUSAL_311,
        CAUSAL_311.replace("cp311", "cp312"),
    ]
    assert [x for x in links if not x.endswith(".whl")] == ["mamba-ssm", "causal-conv1d"]
    # PEP 503 per variant (what --extra-index-url <index>/<variant>/ reads): each project its own files
    assert _links(out / CU13 / "causal-conv1d" / "index.html") == [CAUSAL_311, CAUSAL_311.replace("cp311", "cp312")]
    assert _links(out / CU13 / "mamba-ssm" / "index.html") == [MAMBA_311, MAMBA_311.replace("cp311", "cp312")]
    # cu12 has causal-conv1d only: no mamba-ssm page there
    assert _links(out / "cu12-torch2.6-cxx11abiFALSE" / "index.html") == [CAUSAL_CU12, "causal-conv1d"]
    assert not (out / "cu12-torch2.6-cxx11abiFALSE" / "mamba-ssm").exists()
    # the root lists every project (HTML and PEP 691); each project page holds all of its wheels
    assert _links(out / "simple" / "index.html") == ["mamba-ssm", "causal-conv1d"]
    root = json.loads((out / "simple" / "index.json").read_text())
    assert [p["name"] for p in root["projects"]] == ["mamba-ssm", "causal-conv1d"]
    causal = json.loads((out / "simple" / "causal-conv1d" / "index.json").read_text())
    assert causal["name"] == "causal-conv1d"
    assert sorted(f["filename"] for f in causal["files"]) == sorted(
        [CAUSAL_311, CAUSAL_311.replace("cp311", "cp312"), CAUSAL_CU12]
    )
    assert causal["versions"] == ["1.7.0+cu12torch2.6cxx11abiFALSE", "1.7.0+cu13torch2.14cxx11abiTRUE"]
    assert len(_links(out / "simple" / "mamba-ssm" / "index.html")) == 2
    # the manifest records each wheel's project and source
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["projects"] == ["mamba-ssm", "causal-conv1d"]
    assert (doc["files"][CAUSAL_311]["project"], doc["files"][CAUSAL_311]["source"]) == ("causal-conv1d", CAUSAL_CONV1D)
    mamba = doc["files"][MAMBA_311]  # (the default project stays off the disk)
    assert ("project" in mamba, mamba["source"]) == (False, UPSTREAM_MAMBA)


def test_wheel_for_and_admits_answer_per_project(upstream, tmp_path):
    out = tmp_path / "index"
    build_index(upstream, out)
    m = Manifest.from_json(json.loads((out / "manifest.json").read_text()))
    assert m.wheel_for(CU13, "cp311", "causal-conv1d") == (CU13, CAUSAL_311)
    assert m.wheel_for(CU13, "cp311") == (CU13, MAMBA_311)  # the default project: mamba-ssm
    assert m.wheel_for("cu12-torch2.6-cxx11abiFALSE", "cp311", "causal-conv1d") == (
        "cu12-torch2.6-cxx11abiFALSE",
        CAUSAL_CU12,
    )
    assert m.wheel_for("cu12-torch2.6-cxx11abiFALSE", "cp311") is None  # no mamba-ssm for cu12 here
    e = m.files[CAUSAL_311]
    assert e.admits(CU13) and e.admits(CU13, "causal-conv1d") and not e.admits(CU13, "mamba-ssm")


def test_resolve_takes_the_project(upstream, tmp_path, capsys):
    out = tmp_path / "index"
    build_index(upstream, out)
    base = ["resolve", "--torch", "2.14.1", "--cuda", "13.0", "--python", "3.11", "--index", str(out)]
    assert cli.main([*base, "--project", "Causal_Conv1D"]) == 0  # any spelling of the name
    text = capsys.readouterr().out
    assert f"wheel:   {CAUSAL_311}" in text
    assert (
        f"pip install causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE --extra-index-url {out.absolute().as_uri()}/{CU13}/"
        in text
    )
    assert cli.main(base) == 0
    assert f"wheel:   {MAMBA_311}" in capsys.readouterr().out
    # no mamba-ssm for cu12 in this index: the nearest pages are mamba-ssm's, not causal-conv1d's
    cu12 = ["resolve", "--torch", "2.6", "--cuda", "12.4", "--abi", "FALSE", "--python", "3.11", "--index", str(out)]
    assert cli.main(cu12) == 6
    err = capsys.readouterr().err
    assert "no mamba-ssm wheel" in err and f"  {CU13}: built for cu13" in err
    assert "cu12-torch2.6-cxx11abiFALSE:" not in err
    assert cli.main([*base, "--project", "flash-attn"]) == UsageError.exit_code
    err = capsys.readouterr().err
    assert "has no flash-attn wheels (it serves mamba-ssm, causal-conv1d)" in err and "Traceback" not in err


def test_two_sources_under_one_name_are_refused_and_the_published_index_is_unchanged(tmp_path, capsys):
    out = tmp_path / "index"
    mine = tmp_path / "mine"
    make_mamba_wheel(mine, "cu13torch2.14cxx11abiTRUE", "cp311")  # this checkout's mamba-ssm (no sidecar)
    build_index(mine, out)
    before, target = _tree(out), os.readlink(out)

    theirs = tmp_path / "theirs"  # upstream's line; causal-conv1d alone would be fine
    make_recipe_wheel(theirs, "mamba-ssm", "2.3.2.post1", "cu13torch2.14cxx11abitrue", source=UPSTREAM_MAMBA)
    make_recipe_wheel(theirs, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue", source=CAUSAL_CONV1D)
    code = cli.main(["index", "--wheels", str(theirs), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == NameCollision.exit_code
    assert "mamba-ssm from two different sources" in err
    assert "this repository's checkout (source 'checkout')" in err and UPSTREAM_MAMBA in err
    assert "publish the two product lines as two indexes" in err and "Traceback" not in err
    assert os.readlink(out) == target and _tree(out) == before  # byte for byte, files/ included

    # the other way round: upstream's index refuses this checkout's mamba-ssm
    up = tmp_path / "up"
    build_index(theirs, up)
    with pytest.raises(IndexIntegrityError, match="two different sources"):
        build_index(mine, up)


def test_a_new_upstream_release_joins_its_line_but_one_release_has_one_sdist(upstream, tmp_path):
    out = tmp_path / "index"
    build_index(upstream, out)
    newer = tmp_path / "newer"
    make_recipe_wheel(newer, "causal-conv1d", "1.8.0", "cu13torch2.14cxx11abitrue",
                      source=CAUSAL_CONV1D.replace("1.7.0", "1.8.0").replace("3202", "4202"))  # fmt: skip
    assert len(build_index(newer, out).added) == 1
    other = tmp_path / "other"  # 1.7.0 again, from an sdist with another hash
    make_recipe_wheel(other, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue", "cp313",
                      source=CAUSAL_CONV1D.replace("3202", "5202"))  # fmt: skip
    before = _tree(out)
    with pytest.raises(IndexIntegrityError, match="causal-conv1d from two different sources"):
        build_index(other, out)
    assert _tree(out) == before


def test_an_older_manifest_without_sources_reads_back_as_the_checkout(tmp_path):
    out = tmp_path / "index"
    mine = tmp_path / "mine"
    make_mamba_wheel(mine, "cu13torch2.14cxx11abiTRUE", "cp311")
    build_index(mine, out)
    mf = out / "manifest.json"
    doc = json.loads(mf.read_text())
    assert all("source" not in e and "project" not in e for e in doc["files"].values())  # as before projects
    doc["project"] = doc.pop("projects")[0]
    mf.unlink()
    mf.write_text(json.dumps(doc))
    more = tmp_path / "more"
    make_mamba_wheel(more, "cu13torch2.14cxx11abiTRUE", "cp312")
    assert len(build_index(more, out).added) == 1  # the old entries still index
    entries = Manifest.from_json(json.loads(mf.read_text())).files.values()
    assert {(e.project, e.source) for e in entries} == {("mamba-ssm", "checkout")}
    theirs = tmp_path / "theirs"
    make_recipe_wheel(theirs, "mamba-ssm", "2.3.2.post1", "cu13torch2.14cxx11abitrue", source=UPSTREAM_MAMBA)
    with pytest.raises(IndexIntegrityError, match="this repository's checkout"):
        build_index(theirs, out)


@pytest.mark.parametrize(
    "sidecar,message",
    [
        ({"source": "git+https://example.org/x"}, "not a source identity"),
        ({"source": UPSTREAM_MAMBA}, "but the wheel is a causal-conv1d wheel"),
    ],
)
def test_a_sidecar_source_that_is_not_an_identity_is_a_one_line_error(tmp_path, capsys, sidecar, message):
    w = tmp_path / "wheels"
    whl = make_recipe_wheel(w, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue")
    Path(str(whl) + ".spec.json").write_text(json.dumps(sidecar))
    assert cli.main(["index", "--wheels", str(w), "--out", str(tmp_path / "index")]) == UsageError.exit_code
    err = capsys.readouterr().err
    assert f"{whl}.spec.json" in err and message in err and "Traceback" not in err


def test_prebuilt_lookup_takes_mamba_ssm_beside_causal_conv1d(tmp_path):
    """setup.py's lookup reads the variant's find-links page, where causal-conv1d's wheels now sit too."""
    from mamba_ssm import prebuilt as _prebuilt, variant as _variant

    w = tmp_path / "wheels"
    make_recipe_wheel(w, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue", source=CAUSAL_CONV1D)
    mine = make_mamba_wheel(w, "cu13torch2.14cxx11abiTRUE", "cp311", version="1.7.0")  # same version, on purpose
    build_index(w, tmp_path / "index")
    want = _variant.from_values("2.14.1", cuda="13.0", cxx11abi=True, python="cp311", platform="linux_x86_64")
    with serve(tmp_path / "index") as url:
        found = _prebuilt.find_prebuilt(want, "1.7.0", tmp_path / "dl", index_url=url, env={},
                                        machine="x86_64", glibc=(2, 36))  # fmt: skip
    assert found.status == "found" and found.wheel.read_bytes() == mine.read_bytes(), found.line
