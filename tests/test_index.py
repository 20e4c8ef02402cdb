"""The index on disk: layout, hashes, metadata, stable wheels, incremental runs, integrity, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from wheelmaker import V, make_mamba_wheel, make_wheel

from builder.errors import IndexIntegrityError, NameCollision, UsageError
from builder.publishing.index import build_index


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _anchors(page: Path) -> list[dict]:
    out = []
    for m in re.finditer(r"<a ([^>]*)>([^<]*)</a>", page.read_text()):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))
        out.append({"text": m.group(2), **attrs})
    return [a for a in out if a["text"].endswith(".whl")]


@pytest.fixture
def wheels(tmp_path) -> Path:
    w = tmp_path / "wheels"
    for py in ("cp311", "cp312"):
        make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", py)
        make_mamba_wheel(w, "cu13torch2.14cxx11abiTRUE", py)
    make_mamba_wheel(w, "cu13torch2.12cxx11abiTRUE", "cp311", version="2.2.0")  # an older release only
    make_mamba_wheel(w, "cu13torchstable", "cp310")
    return w


def test_variant_pages_carry_hashes_requires_python_and_metadata(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    page = out / "cu12-torch2.6-cxx11abiFALSE" / "index.html"
    anchors = _anchors(page)
    assert [a["text"] for a in anchors] == [
        f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
        f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp312-cp312-linux_x86_64.whl",
    ]
    for a in anchors:
        target = Path(os.path.normpath(page.parent / a["href"].split("#")[0]))  # as a URL resolves it
        assert a["href"].split("#sha256=")[1] == _sha(target)
        assert a["data-requires-python"] == "&gt;=3.10"
        meta = Path(str(target) + ".metadata")
        assert a["data-core-metadata"] == a["data-dist-info-metadata"] == f"sha256={_sha(meta)}"
        assert b"Requires-Dist: torch==2.6.*" in meta.read_bytes()
    # the same anchors on the PEP 503 project page under the variant root
    project = _anchors(out / "cu12-torch2.6-cxx11abiFALSE" / "mamba-ssm" / "index.html")
    assert [a["text"] for a in project] == [a["text"] for a in anchors]
    assert all(
        os.path.isfile(os.path.normpath(out / "cu12-torch2.6-cxx11abiFALSE" / "mamba-ssm" / a["href"].split("#")[0]))
        for a in project
    )


def test_simple_and_pep691_json_list_everything_once(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    doc = json.loads((out / "simple" / "mamba-ssm" / "index.json").read_text())
    assert doc["meta"]["api-version"] == "1.1" and doc["name"] == "mamba-ssm"
    names = sorted(f["filename"] for f in doc["files"])
    assert names == sorted(p.name for p in wheels.glob("*.whl"))
    for f in doc["files"]:
        target = Path(os.path.normpath(out / "simple" / "mamba-ssm" / f["url"]))
        assert f["hashes"]["sha256"] == _sha(target)
        assert f["core-metadata"]["sha256"] == _sha(Path(f"{target}.metadata"))
    assert len(_anchors(out / "simple" / "mamba-ssm" / "index.html")) == len(names)
    # each wheel stored once, however many pages link it
    stored = sorted(p.name for p in (out / "files").iterdir() if p.suffix == ".whl")
    assert stored == names


def test_stable_wheel_is_linked_from_every_variant_it_serves(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    stable = f"mamba_ssm-{V}+cu13torchstable-cp310-abi3-linux_x86_64.whl"
    manifest = json.loads((out / "manifest.json").read_text())
    # Requires-Dist torch>=2.10: serves cu13 2.12 and 2.14 (both present), not cu12 2.6
    assert manifest["files"][stable]["serves"] == [
        "cu13-torch2.12-cxx11abiTRUE",
        "cu13-torch2.14-cxx11abiTRUE",
        "cu13-torchstable-abi3",
    ]
    assert stable in [a["text"] for a in _anchors(out / "cu13-torch2.12-cxx11abiTRUE" / "index.html")]
    assert stable in [a["text"] for a in _anchors(out / "cu13-torchstable-abi3" / "index.html")]
    assert stable not in [a["text"] for a in _anchors(out / "cu12-torch2.6-cxx11abiFALSE" / "index.html")]
    # 2.14 has its own 2.3.0 wheels: the stable one would win an unpinned install there (labels sort as text)
    assert stable not in [a["text"] for a in _anchors(out / "cu13-torch2.14-cxx11abiTRUE" / "index.html")]


def test_sidecar_names_what_a_stable_wheel_serves(tmp_path):
    w = tmp_path / "wheels"
    whl = make_mamba_wheel(w, "cu13torchstable", "cp310")
    Path(str(whl) + ".spec.json").write_text(json.dumps({"serves": ["cu13-torch2.15-cxx11abiTRUE"]}))
    build_index(w, tmp_path / "index")
    assert (tmp_path / "index" / "cu13-torch2.15-cxx11abiTRUE" / "index.html").is_file()


def test_indexing_again_keeps_published_wheels_and_swaps_atomically(wheels, tmp_path):
    out = tmp_path / "index"
    first = build_index(wheels, out)
    assert out.is_symlink() and out.resolve() == first.generation
    new = tmp_path / "new"
    make_mamba_wheel(new, "cputorch2.13cxx11abiTRUE", "cp311")
    second = build_index(new, out)  # a folder with only the new wheel
    assert second.added == (f"mamba_ssm-{V}+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl",)
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {p.name for p in wheels.glob("*.whl")} | set(second.added)
    assert (out / "cu12-torch2.6-cxx11abiFALSE" / "index.html").is_file()
    assert out.resolve() == second.generation != first.generation
    assert not list(out.parent.glob(".index.d/.gen-*.staging"))
    # nothing new: no new generation
    assert build_index(new, out).generation == second.generation


def test_altered_published_wheel_is_reported_not_rehashed(wheels, tmp_path, cli):
    out = tmp_path / "index"
    build_index(wheels, out)
    victim = out / "files" / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    data = bytearray(victim.read_bytes())
    data[-30] ^= 0xFF
    victim.write_bytes(bytes(data))
    before = (out / "manifest.json").read_text()
    proc = cli("index", "--wheels", wheels, "--out", out, in_process=True)
    assert proc.returncode == IndexIntegrityError.exit_code == 5
    err = proc.stderr
    assert victim.name in err and "recorded" in err and "Traceback" not in err
    assert (out / "manifest.json").read_text() == before  # nothing published


def test_same_name_different_bytes_is_refused(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    other = tmp_path / "other"
    make_mamba_wheel(other, "cu12torch2.6cxx11abiFALSE", "cp311")
    with (other / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(NameCollision, match="differs from the published") as err:
        build_index(other, out)
    assert str(err.value).count("this repository's checkout") == 2  # the new file's source and the published one's
    assert "immutable" in err.value.hint


def test_two_platform_tags_for_one_cell_are_refused(tmp_path):
    w = tmp_path / "wheels"
    make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", "cp311")
    make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", "cp311", platform="manylinux_2_28_x86_64")
    with pytest.raises(IndexIntegrityError, match="pip and uv would pick differently"):
        build_index(w, tmp_path / "index")
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(
    "name,version,tag,message",
    [
        ("mamba-ssm", V, "cp311-cp311-linux_x86_64", "no local label"),
        ("mamba-ssm", f"{V}+cu12torch2.6", "cp311-cp311-linux_x86_64", "not a mamba-ssm local label"),
        ("mamba-ssm", f"{V}+cputorch2.13cxx11abiTRUE", "cp311-cp311-linux_x86_64.manylinux_2_28_x86_64", "tags"),
        ("torch", "2.6.0", "py3-none-any", "not mamba-ssm"),
    ],
)
def test_bad_wheels_get_one_line_errors(tmp_path, name, version, tag, message, cli):
    w = tmp_path / "wheels"
    make_wheel(w, name, version, tag)
    proc = cli("index", "--wheels", w, "--out", tmp_path / "index", in_process=True)
    assert proc.returncode == UsageError.exit_code
    err = proc.stderr
    assert message in err and "Traceback" not in err and err.startswith("error: ")


def test_missing_wheels_dir_and_foreign_out(tmp_path, cli):
    proc = cli("index", "--wheels", tmp_path / "nope", "--out", tmp_path / "i", in_process=True)
    assert proc.returncode == 2 and "no such directory" in proc.stderr
    (tmp_path / "w").mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert cli("index", "--wheels", tmp_path / "w", "--out", tmp_path / "taken", in_process=True).returncode == 2
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"


def test_concurrent_runs_are_serialised(tmp_path):
    out = tmp_path / "index"
    dirs = []
    for i, label in enumerate(
        [
            "cputorch2.13cxx11abiTRUE",
            "cu12torch2.6cxx11abiTRUE",
            "cu13torch2.14cxx11abiTRUE",
            "hip62torch2.5cxx11abiFALSE",
        ]
    ):
        d = tmp_path / f"w{i}"
        make_mamba_wheel(d, label, "cp311")
        dirs.append(d)
    errors = []

    def work(d):
        try:
            build_index(d, out)
        except Exception as err:  # noqa: BLE001 - surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(d,)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(json.loads((out / "manifest.json").read_text())["files"]) == 4


def test_base_url_makes_absolute_links_and_commands(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out, base_url="https://example.org/mamba/")
    a = _anchors(out / "cu12-torch2.6-cxx11abiFALSE" / "index.html")[0]
    assert a["href"].startswith(f"https://example.org/mamba/files/mamba_ssm-{V}+cu12")
    page = (out / "index.html").read_text()
    assert "--extra-index-url https://example.org/mamba/cu12-torch2.6-cxx11abiFALSE/" in page.replace(
        '<span class="base">https://example.org/mamba/</span>', "https://example.org/mamba/"
    )


def test_resolve_cli(wheels, tmp_path, cli):
    out = tmp_path / "index"
    build_index(wheels, out)
    argv = [
        "resolve",
        "--torch",
        "2.6.0+cu124",
        "--cuda",
        "12.4",
        "--abi",
        "FALSE",
        "--python",
        "3.11",
        "--index",
        str(out),
    ]
    proc = cli(*argv, in_process=True)
    assert proc.returncode == 0
    text = proc.stdout
    assert "variant: cu12-torch2.6-cxx11abiFALSE" in text
    assert (
        f"pip install mamba-ssm=={V}+cu12torch2.6cxx11abiFALSE --extra-index-url {out.absolute().as_uri()}/cu12-torch2.6-cxx11abiFALSE/"
        in text
    )
    # torch 2.13 with CUDA 13: only the stable wheel fits
    proc = cli("resolve", "--torch", "2.13", "--cuda", "13.0", "--python", "3.12", "--index", out, in_process=True)
    assert proc.returncode == 0 and f"{V}+cu13torchstable --extra-index-url" in proc.stdout
    # no fit: nearest variants and why
    proc = cli(
        "resolve", "--torch", "2.6", "--cuda", "12.4", "--abi", "TRUE", "--python", "3.11", "--index", out,
        in_process=True,
    )  # fmt: skip
    assert proc.returncode == 6
    assert "cu12-torch2.6-cxx11abiFALSE: cxx11abiFALSE; your torch uses cxx11abiTRUE" in proc.stderr
    proc = cli("resolve", "--torch", "two", "--index", out, in_process=True)
    assert proc.returncode == 2 and "cannot read a torch version" in proc.stderr


def test_no_half_written_generation_on_failure(wheels, tmp_path, monkeypatch):
    out = tmp_path / "index"
    build_index(wheels, out)
    live = out.resolve()
    import builder.publishing.index.generation as index_mod

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(index_mod, "_write_generation", boom)
    new = tmp_path / "new"
    make_mamba_wheel(new, "cputorch2.13cxx11abiTRUE", "cp311")
    with pytest.raises(OSError):
        build_index(new, out)
    assert out.resolve() == live
    assert sorted(p.name for p in out.parent.joinpath(".index.d").iterdir() if p.name.startswith(".gen")) == []
    assert os.path.isfile(out / "manifest.json")


def test_setuptools_lowercased_label_is_indexed_under_the_farm_spelling(tmp_path, cli):
    """setuptools writes +cputorch2.13cxx11abitrue; pages and commands use cxx11abiTRUE (same version to pip)."""
    w = tmp_path / "wheels"
    make_wheel(
        w, "mamba-ssm", f"{V}+cputorch2.13cxx11abitrue", "cp311-cp311-linux_x86_64", requires=("torch==2.13.*",)
    )
    out = tmp_path / "index"
    build_index(w, out)
    assert (out / "cpu-torch2.13-cxx11abiTRUE" / "index.html").is_file()
    proc = cli("resolve", "--torch", "2.13", "--python", "3.11", "--index", out, in_process=True)
    assert proc.returncode == 0
    assert f"pip install mamba-ssm=={V}+cputorch2.13cxx11abiTRUE " in proc.stdout


# --------------------------------------------------------------------------- superseding a wheel (--replace)

CU12_311 = f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"


def _rebuild(wheels: Path, tmp_path: Path, label: str = "cu12torch2.6cxx11abiFALSE", py: str = "cp311") -> Path:
    """A new build under the same name, moved in with one rename (as the farm does): other bytes."""
    torch = label.split("torch")[1].split("cxx11abi")[0]
    fresh = make_wheel(
        tmp_path / "fresh",
        "mamba-ssm",
        f"{V}+{label}",
        f"{py}-{py}-linux_x86_64",
        requires=(f"torch=={torch}.*",),
        files={"mamba_ssm/__init__.py": b"REBUILT = True\n"},
    )
    dest = wheels / fresh.name
    os.replace(fresh, dest)
    return dest


def test_replace_supersedes_only_the_named_wheel(wheels, tmp_path, cli):
    out = tmp_path / "index"
    build_index(wheels, out)
    old_sha = _sha(out / "files" / CU12_311)
    new = _rebuild(wheels, tmp_path)
    with pytest.raises(IndexIntegrityError, match="differs from the published") as refused:  # strict by default
        build_index(wheels, out)
    assert "--replace" in refused.value.hint
    assert _sha(out / "files" / CU12_311) == old_sha

    proc = cli("index", "--wheels", wheels, "--out", out, "--replace", CU12_311, in_process=True)
    assert proc.returncode == 0
    said = proc.stdout
    assert "1 replaced" in said and f"~ {CU12_311}" in said
    assert _sha(out / "files" / CU12_311) == _sha(new) != old_sha  # the old bytes left the store
    store = out.parent / ".index.d" / "store"
    assert not [p for p in store.iterdir() if p.name.startswith(".")]  # no staged leftovers
    anchors = {a["text"]: a for a in _anchors(out / "cu12-torch2.6-cxx11abiFALSE" / "index.html")}
    assert anchors[CU12_311]["href"].endswith(f"#sha256={_sha(new)}")  # the variant page was re-rendered
    entry = json.loads((out / "manifest.json").read_text())["files"][CU12_311]
    assert entry["sha256"] == _sha(new) and entry["replaced"][0]["sha256"] == old_sha
    meta = (store / (CU12_311 + ".metadata")).read_bytes()
    assert entry["metadata_sha256"] == hashlib.sha256(meta).hexdigest()

    # unchanged afterwards: a no-op run, and --replace with the same bytes replaces nothing
    live = out.resolve()
    res = build_index(wheels, out, replace={CU12_311})
    assert res.replaced == () and res.generation == live


def test_replace_does_not_excuse_an_altered_published_file(wheels, tmp_path):
    """Naming a wheel for replacement while giving the published bytes again: the altered store copy is
    still reported, never re-hashed."""
    out = tmp_path / "index"
    build_index(wheels, out)
    src = wheels / CU12_311
    saved = src.read_bytes()
    src.unlink()  # break the hard link, then alter the store copy only
    src.write_bytes(saved)
    victim = out / "files" / CU12_311
    data = bytearray(victim.read_bytes())
    data[-30] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(IndexIntegrityError, match="recorded"):
        build_index(wheels, out, replace={CU12_311})


def test_replace_names_must_be_in_wheels(wheels, tmp_path, cli):
    out = tmp_path / "index"
    build_index(wheels, out)
    proc = cli("index", "--wheels", wheels, "--out", out, "--replace", "nope.whl", in_process=True)
    assert proc.returncode == UsageError.exit_code
    err = proc.stderr
    assert "--replace nope.whl: no such wheel" in err and "Traceback" not in err


def test_failed_replacement_leaves_the_old_bytes_published(wheels, tmp_path, monkeypatch):
    out = tmp_path / "index"
    build_index(wheels, out)
    old_sha, live = _sha(out / "files" / CU12_311), out.resolve()
    _rebuild(wheels, tmp_path)
    import builder.publishing.index.generation as index_mod

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(index_mod, "_write_generation", boom)
    with pytest.raises(OSError):
        build_index(wheels, out, replace={CU12_311})
    assert out.resolve() == live and _sha(out / "files" / CU12_311) == old_sha
    assert not [p for p in (out.parent / ".index.d" / "store").iterdir() if p.name.startswith(".")]
    monkeypatch.undo()
    assert build_index(wheels, out, replace={CU12_311}).replaced == (CU12_311,)  # the rerun completes


# ---- wheels hosted elsewhere (--files-url: GitHub release assets, since Pages sites stop at 1 GB) ----

RELEASE = "https://github.com/mamba-ssm/wheels/releases/download"


def _link_targets(out: Path) -> dict[str, str]:
    """filename -> href (without the hash fragment), from every variant page and the PEP 691 JSON."""
    links = {}
    for page in out.glob("*/index.html"):
        for a in _anchors(page):
            links.setdefault(a["text"], set()).add(a["href"].split("#")[0])
    doc = json.loads((out / "simple" / "mamba-ssm" / "index.json").read_text())
    for f in doc["files"]:
        links.setdefault(f["filename"], set()).add(f["url"])
    return links


def test_files_url_links_the_runs_wheels_to_their_release(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out, files_url=f"{RELEASE}/v{V}/")
    later = tmp_path / "later"
    make_mamba_wheel(later, "cu12torch2.6cxx11abiFALSE", "cp313", version="2.4.0")
    build_index(later, out)  # no --files-url: served from files/ as before

    links = _link_targets(out)
    new = "mamba_ssm-2.4.0+cu12torch2.6cxx11abiFALSE-cp313-cp313-linux_x86_64.whl"
    assert links.pop(new) == {f"../files/{new}", f"../../files/{new}"}
    for fn, hrefs in links.items():
        assert hrefs == {f"{RELEASE}/v{V}/{fn.replace('+', '%2B')}"}, fn
    # the hash still pins the bytes; no PEP 658 attribute where the .metadata file is not hosted
    page = out / "cu12-torch2.6-cxx11abiFALSE" / "index.html"
    for a in _anchors(page):
        assert a["href"].split("#sha256=")[1] == _sha(out / "files" / a["text"])
        assert ("data-core-metadata" in a) == (a["text"] == new)
    doc = json.loads((out / "simple" / "mamba-ssm" / "index.json").read_text())
    assert {f["filename"]: f["core-metadata"] is False for f in doc["files"]}[new] is False
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"][new].get("url") is None
    assert all(e["url"].startswith(f"{RELEASE}/v{V}/") for fn, e in manifest["files"].items() if fn != new)
    # the coverage page's download links follow
    assert f'{RELEASE}/v{V}/mamba_ssm-{V}%2Bcu13torchstable' in (out / "index.html").read_text()


def test_a_wheel_given_again_with_another_files_url_moves_its_links(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out, files_url=f"{RELEASE}/v{V}")
    before = _link_targets(out)
    res = build_index(wheels, out, files_url=f"{RELEASE}/v{V}-respin")
    assert res.added == ()
    after = _link_targets(out)
    assert after.keys() == before.keys()
    assert all(h == {f"{RELEASE}/v{V}-respin/{fn.replace('+', '%2B')}"} for fn, h in after.items())
    # unchanged input and URL: nothing to publish, the live generation stays
    assert build_index(wheels, out, files_url=f"{RELEASE}/v{V}-respin").generation == res.generation


@pytest.mark.parametrize("url", ["ftp://example.org/w", "releases/download/v1", "https://example.org/w?x=1", "https://"])
def test_a_files_url_that_is_not_an_http_folder_is_refused(wheels, tmp_path, url, cli):
    proc = cli("index", "--wheels", wheels, "--out", tmp_path / "index", "--files-url", url, in_process=True)
    rc, err = proc.returncode, proc.stderr
    assert rc == 2 and "--files-url" in err and "Traceback" not in err, err
    assert not (tmp_path / "index").exists()


def test_coverage_and_resolve_give_the_same_wheel_for_every_cell(tmp_path):
    """One answer to "which wheel does a user of this cell get": the coverage page and `resolve` agree on
    every cell of one manifest, empty cells included."""
    from builder.publishing import coverage
    from builder.publishing.index.model import Index, Manifest
    from builder.publishing.resolve import resolve
    from mamba_ssm import variant as _variant

    w = tmp_path / "wheels"
    for py in ("cp311", "cp312"):
        make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", py, version="2.9.0")
    make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", "cp311", version="2.10.0")  # newer: a version, not text
    make_mamba_wheel(w, "cu12torch2.6cxx11abiTRUE", "cp311")
    make_mamba_wheel(w, "cu13torch2.14cxx11abiTRUE", "cp311")
    make_mamba_wheel(w, "cu13torch2.12cxx11abiTRUE", "cp311", version="2.2.0")
    make_mamba_wheel(w, "cu13torchstable", "cp310")  # torch>=2.10
    make_wheel(w, "mamba-ssm", "2.4.0+cu13torchstable", "cp310-abi3-linux_x86_64", requires=("torch>=2.14",))
    make_mamba_wheel(w, "cputorch2.13cxx11abiTRUE", "cp312")
    make_mamba_wheel(w, "hip62torch2.5cxx11abiFALSE", "cp311")
    out = tmp_path / "index"
    build_index(w, out)
    doc = json.loads((out / "manifest.json").read_text())
    manifest = Manifest.from_json(doc)
    page = coverage.model(Index(manifest.files, None))

    seen = {}
    for row in page["rows"]:
        for col, cell in zip(page["columns"], row["cells"], strict=True):
            py = "cp" + col["python"].replace(".", "")
            stable = _variant.Variant.from_key(f"{row['accelerator']}-torchstable-abi3", python=py)
            want = stable if row["torch"] == "stable" else replace(stable, torch=row["torch"], cxx11abi=col["abi"])
            res = resolve(doc, want)
            seen[(want.key, py)] = cell and cell.filename
            assert (cell and (cell.key, cell.filename)) == (res.filename and (res.key, res.filename)), (want.key, py)
    assert seen[("cu12-torch2.6-cxx11abiFALSE", "cp311")].startswith("mamba_ssm-2.10.0+")
    # torch 2.12 on cp312: no exact wheel; the stable 2.3.0 admits it, the newer stable 2.4.0 (torch>=2.14) does not
    stable = "mamba_ssm-{}+cu13torchstable-cp310-abi3-linux_x86_64.whl"
    assert seen[("cu13-torch2.12-cxx11abiTRUE", "cp312")] == stable.format(V)
    assert seen[("cu13-torch2.14-cxx11abiTRUE", "cp312")] == stable.format("2.4.0")
    assert seen[("hip62-torch2.5-cxx11abiFALSE", "cp312")] is None


def test_coverage_and_resolve_import_the_model_only_and_the_verifier_no_index():
    """The index <-> coverage cycle is cut: coverage and resolve load builder.publishing.index.model, nothing else of the
    index; builder.verifying.wheels reads metadata through builder.verifying.wheelmeta without the index."""
    import subprocess
    import sys

    code = (
        "import sys; import builder.verifying.wheels; a = sorted(m for m in sys.modules if m.startswith('builder.publishing.index')); "
        "import builder.publishing.coverage, builder.publishing.resolve; "
        "print(a, sorted(m for m in sys.modules if m.startswith('builder.publishing.index')))"
    )
    root = Path(__file__).parents[1]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert p.stdout.split() == ["[]", "['builder.publishing.index',", "'builder.publishing.index.model']"]


def test_a_manifest_entry_off_the_schema_is_an_integrity_error_naming_it(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    mf = out / "manifest.json"
    doc = json.loads(mf.read_text())
    del doc["files"][CU12_311]["sha256"]
    mf.unlink()  # (the generation's own file: a hand edit of the live index)
    mf.write_text(json.dumps(doc))
    with pytest.raises(IndexIntegrityError, match=rf"entry '{re.escape(CU12_311)}' has no 'sha256'"):
        build_index(wheels, out)


# --- hostile wheels folders and names --------------------------------------------------------------


def _rewrite(wheel: Path, changes: dict[str, bytes | None], new_name: str | None = None) -> Path:
    """A copy of ``wheel`` (named ``new_name``) with members replaced, added or (None) removed."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    for n, data in changes.items():
        if data is None:
            members.pop(n, None)
        else:
            members[n] = data
    out = wheel.with_name(new_name or wheel.name)
    wheel.unlink()
    with zipfile.ZipFile(out, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    return out


def test_non_regular_wheel_files_are_skipped_with_a_warning_never_hang(tmp_path, cli):
    w = tmp_path / "wheels"
    good = make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", "cp311")
    os.mkfifo(w / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp312-cp312-linux_x86_64.whl")
    (w / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp313-cp313-linux_x86_64.whl").symlink_to("/dev/zero")
    loop = w / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    loop.symlink_to(loop.name)  # a link to itself
    (w / "sub").mkdir()
    (w / "sub" / "up").symlink_to("..")  # a folder loop
    proc = cli("index", "--wheels", w, "--out", tmp_path / "index", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("skipped") == 3, proc.stderr
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert list(manifest["files"]) == [good.name]


@pytest.mark.parametrize(
    "case",
    ["metadata-name", "dist-info-name", "dist-info-version", "tag-hash", "tag-question", "tag-space", "tag-rlo"],
)
def test_the_index_takes_only_wheels_pip_would_install(tmp_path, case, cli):
    w = tmp_path / "wheels"
    whl = make_mamba_wheel(w, "cu12torch2.6cxx11abiFALSE", "cp311")
    info = f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE.dist-info"
    import zipfile

    meta = zipfile.ZipFile(whl).read(f"{info}/METADATA")
    if case == "metadata-name":
        _rewrite(whl, {f"{info}/METADATA": meta.replace(b"Name: mamba-ssm", b"Name: causal-conv1d")})
    elif case.startswith("dist-info"):
        other = f"other-{V}" if case == "dist-info-name" else "mamba_ssm-9.9"
        with zipfile.ZipFile(whl) as zf:
            moved = {n.replace(info, f"{other}.dist-info"): zf.read(n) for n in zf.namelist() if n.startswith(info)}
        _rewrite(whl, {**{n: None for n in zipfile.ZipFile(whl).namelist() if n.startswith(info)}, **moved})
    else:
        bad = {"tag-hash": "linux#x86_64", "tag-question": "linux?x86_64", "tag-space": "linux x86_64",
               "tag-rlo": "linux_x86_64\u202e"}[case]  # fmt: skip
        whl.rename(whl.with_name(whl.name.replace("linux_x86_64", bad)))
    out = tmp_path / "index"
    assert cli("index", "--wheels", w, "--out", out, in_process=True).returncode == 2
    assert not out.exists()


def test_links_are_percent_encoded_and_base_urls_are_http(wheels, tmp_path, cli):
    from builder.publishing.index.pages import _quote

    assert _quote("a#b?c d\u202e+x!.whl") == "a%23b%3Fc%20d%E2%80%AE+x!.whl"
    for bad in ("javascript:alert(1)", "file:///etc", "https://x/'onmouseover='a", "https://x/a b", "ftp://x/"):
        proc = cli("index", "--wheels", wheels, "--out", tmp_path / "i", "--base-url", bad, in_process=True)
        assert proc.returncode == 2
    assert not (tmp_path / "i").exists()
    build_index(wheels, tmp_path / "ok", base_url="https://example.org/mamba/")
    page = (tmp_path / "ok" / "cu12-torch2.6-cxx11abiFALSE" / "index.html").read_text()
    assert f'href="https://example.org/mamba/files/mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311' in page


def test_files_a_killed_run_left_in_the_store_are_removed_by_the_next(wheels, tmp_path):
    out = tmp_path / "index"
    build_index(wheels, out)
    store = tmp_path / ".index.d" / "store"
    listed = sorted(p.name for p in store.iterdir())
    # what a run killed after ingesting (or staging) and before its swap leaves
    (store / "mamba_ssm-9.9.9+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl").write_bytes(b"orphan")
    (store / "mamba_ssm-9.9.9+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl.metadata").write_bytes(b"o")
    (store / f".mamba_ssm-{V}.whl.1234abcd.replacement").write_bytes(b"staged")
    build_index(wheels, out)  # nothing new to add
    assert sorted(p.name for p in store.iterdir()) == listed
    make_mamba_wheel(wheels, "cu13torch2.14cxx11abiTRUE", "cp313")
    (store / "stray.whl").write_bytes(b"orphan")
    build_index(wheels, out)  # a run that adds one
    assert "stray.whl" not in {p.name for p in store.iterdir()}


def test_two_same_named_wheels_in_one_run_are_one_or_refused(tmp_path):
    w = tmp_path / "wheels"
    a = make_mamba_wheel(w / "a", "cu12torch2.6cxx11abiFALSE", "cp311")
    (w / "b").mkdir()
    (w / "b" / a.name).write_bytes(a.read_bytes())  # the same bytes twice: one wheel
    assert build_index(w, tmp_path / "index").files == 1
    w2 = tmp_path / "w2"
    make_mamba_wheel(w2 / "a", "cu12torch2.6cxx11abiFALSE", "cp311")
    _rewrite(make_mamba_wheel(w2 / "b", "cu12torch2.6cxx11abiFALSE", "cp311"), {"mamba_ssm/extra.py": b"x = 1\n"})
    with pytest.raises(NameCollision, match="two different files named") as err:
        build_index(w2, tmp_path / "index2")
    assert str(err.value).count("this repository's checkout (source 'checkout')") == 2  # both files' sources named
    assert not (tmp_path / "index2").exists()


# a resolve that the index of the `wheels` fixture answers; its --index is added
RESOLVE = ("resolve", "--torch", "2.6", "--cuda", "12.4", "--abi", "FALSE", "--python", "3.11", "--index")


@pytest.mark.parametrize(
    "case", ["list", "schema-99", "no-schema", "files-list", "entry-not-object", "missing-field", "bad-version",
             "bad-key", "variant-lists-missing", "bad-python", "base-url-js", "base-url-shell"],
)  # fmt: skip
def test_resolve_checks_the_manifest_and_its_urls(wheels, tmp_path, case, cli):
    build_index(wheels, tmp_path / "index")
    doc = json.loads((tmp_path / "index" / "manifest.json").read_text())
    fn = next(iter(f for f in doc["files"] if "cu12torch2.6" in f and "cp311" in f))
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    if case == "list":
        doc = [doc]
    elif case == "schema-99":
        doc["schema"] = 99
    elif case == "no-schema":
        del doc["schema"]
    elif case == "files-list":
        doc["files"] = list(doc["files"])
    elif case == "entry-not-object":
        doc["files"][fn] = "x"
    elif case == "missing-field":
        del doc["files"][fn]["sha256"]
    elif case == "bad-version":
        doc["files"][fn]["version"] = "not.a.version!"
    elif case == "bad-key":
        doc["files"][fn]["key"] = "cu12-torchX-whatever"
    elif case == "variant-lists-missing":
        doc["variants"]["cu12-torch2.6-cxx11abiFALSE"].append("ghost.whl")
    elif case == "bad-python":
        doc["files"][fn]["python"] = "cpX"
    elif case == "base-url-js":
        doc["base_url"] = "javascript:alert(1)//"
    elif case == "base-url-shell":
        doc["base_url"] = "https://x.example/$(touch marker)"
    (hostile / "manifest.json").write_text(json.dumps(doc))
    proc = cli(*RESOLVE, hostile, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr
    assert "pip install" not in proc.stdout
    assert cli(*RESOLVE, tmp_path / "index", timeout=60).returncode == 0  # the real one still resolves
