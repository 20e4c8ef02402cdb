"""Real pip and real uv install from the index, served over HTTP on 127.0.0.1: which mamba-ssm wheel they
pick, and that they leave torch (a tiny stand-in wheel) alone, beside a "public" index whose newer releases
an unpinned command would take.
"""

from __future__ import annotations

import shlex
import zipfile
from pathlib import Path

import pytest
from indexkit import find_python, installed, isolated_env, make_venv, pip, serve, uv_pip
from wheelmaker import V, make_fake_torch, make_mamba_wheel, make_wheel

from builder.publishing.index import build_index, install_command
from builder.publishing.resolve import resolve
from mamba_ssm import variant as _variant

LABELS = {
    "cu12torch2.6cxx11abiFALSE": ("cp310", "cp311", "cp312", "cp313"),
    "cu12torch2.6cxx11abiTRUE": ("cp311", "cp312"),
    "cu13torch2.14cxx11abiTRUE": ("cp311", "cp313"),
    "cputorch2.13cxx11abiTRUE": ("cp311", "cp312"),
    "hip62torch2.5cxx11abiFALSE": ("cp310", "cp311"),
}

# (python, installed torch, what resolve is told, the wheel that must be installed)
ENVIRONMENTS = [
    ("3.11", "2.6.0", {"cuda": "12.4", "cxx11abi": False}, f"{V}+cu12torch2.6cxx11abiFALSE", "cp311-cp311"),
    ("3.12", "2.6.0", {"cuda": "12.6", "cxx11abi": True}, f"{V}+cu12torch2.6cxx11abiTRUE", "cp312-cp312"),
    ("3.13", "2.14.1", {"cuda": "13.0"}, f"{V}+cu13torch2.14cxx11abiTRUE", "cp313-cp313"),
    ("3.10", "2.5.1", {"hip": "6.2.41133"}, f"{V}+hip62torch2.5cxx11abiFALSE", "cp310-cp310"),
    ("3.11", "2.13.0", {}, f"{V}+cputorch2.13cxx11abiTRUE", "cp311-cp311"),
    ("3.12", "2.12.0", {"cuda": "13.0"}, f"{V}+cu13torchstable", "cp310-abi3"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """wheels -> index (+ a public index with newer decoys), served; yields (url, paths)."""
    root = tmp_path_factory.mktemp("site")
    wheels = root / "wheels"
    for label, pythons in LABELS.items():
        for py in pythons:
            make_mamba_wheel(wheels, label, py)
            make_mamba_wheel(wheels, label, py, version="0.2.0")  # an older release of this line on the same page
    make_mamba_wheel(wheels, "cu13torchstable", "cp310")
    build_index(wheels, root / "www" / "index")

    public = root / "www" / "public"
    dists = {
        "mamba-ssm": make_wheel(public / "files", "mamba-ssm", "9.9.9"),
        "torch": make_fake_torch(public / "files", "2.99.0"),
    }
    for name, whl in dists.items():
        page = public / "simple" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(f'<a href="../../files/{whl.name}">{whl.name}</a>\n')
    torches = root / "torches"
    for _py, torch, *_ in ENVIRONMENTS:
        make_fake_torch(torches, torch)
    with serve(root / "www") as url:
        yield url, root, torches


def _venv(tmp_path: Path, py: str, torch: str, torches: Path, env: dict) -> Path:
    python = find_python(py)
    if python is None:
        pytest.skip(f"no Python {py} on this machine")
    vpy = make_venv(tmp_path / f"venv{py}", python, env)
    uv_pip(vpy, ["install", "--no-index", "--find-links", str(torches), f"torch=={torch}"], env)
    return vpy


def _want(label_kw: dict, py: str, torch: str) -> _variant.Variant:
    return _variant.from_values(torch, python="cp" + py.replace(".", ""), **label_kw)


# The CI set keeps three environments (CUDA old ABI, ROCm, stable ABI); --run-slow runs all six.
_CI = {0, 3, 5}
_PARAMS = [
    pytest.param(*e, id=e[3].split("+")[1] + "-py" + e[0], marks=() if i in _CI else pytest.mark.slow)
    for i, e in enumerate(ENVIRONMENTS)
]


@pytest.mark.parametrize("py,torch,facts,version,tag", _PARAMS)
def test_pip_and_uv_install_exactly_the_variant_wheel(site, tmp_path, py, torch, facts, version, tag):
    url, root, torches = site
    env = isolated_env(tmp_path)
    manifest = __import__("json").loads((root / "www" / "index" / "manifest.json").read_text())
    res = resolve(manifest, _want(facts, py, torch))
    assert res.entry is not None and res.entry.version == version, res
    key = res.key
    command = install_command(res.entry, key, f"{url}/index")
    pin = f"mamba-ssm=={version}"
    assert shlex.split(command) == ["pip", "install", pin, "--extra-index-url", f"{url}/index/{key}/"]

    public = f"{url}/public/simple/"
    ways = {
        # the printed command, with the public index standing in for PyPI
        "pip-extra-index": (pip, ["install", "--index-url", public, *shlex.split(command)[2:]]),
        "pip-find-links": (pip, ["install", "--no-index", "--find-links", f"{url}/index/{key}/", "mamba-ssm"]),
        "uv-extra-index": (uv_pip, ["install", "--index-url", public, "--extra-index-url", f"{url}/index/{key}/", pin]),
        "uv-find-links": (uv_pip, ["install", "--no-index", "--find-links", f"{url}/index/{key}/", pin]),
    }
    for way, (tool, args) in ways.items():
        vpy = _venv(tmp_path / way, py, torch, torches, env)
        tool(vpy, args, env)
        got = installed(vpy)
        assert (way, got["mamba"], got["tags"]) == (way, version, [f"{tag}-linux_x86_64"])
        assert got["torch"] == torch, f"{way} changed torch {torch} -> {got['torch']}"


def test_unpinned_extra_index_takes_the_newer_public_release(site, tmp_path):
    """Why every printed command pins the exact local version: without it the public 9.9.9 wins."""
    url, _root, torches = site
    env = isolated_env(tmp_path)
    vpy = _venv(tmp_path, "3.11", "2.6.0", torches, env)
    pip(
        vpy,
        [
            "install",
            "--index-url",
            f"{url}/public/simple/",
            "--extra-index-url",
            f"{url}/index/cu12-torch2.6-cxx11abiFALSE/",
            "mamba-ssm",
        ],
        env,
    )
    assert installed(vpy)["mamba"] == "9.9.9"


def test_a_wheel_altered_after_indexing_is_refused_by_pip(tmp_path):
    wheels = tmp_path / "wheels"
    whl = make_mamba_wheel(wheels, "cu12torch2.6cxx11abiFALSE", "cp311")
    out = tmp_path / "www" / "index"
    build_index(wheels, out)
    torches = tmp_path / "torches"
    make_fake_torch(torches, "2.6.0")
    published = out / "files" / whl.name
    with zipfile.ZipFile(published, "a") as zf:  # still a valid wheel, other bytes
        zf.writestr("mamba_ssm/evil.py", "print('hi')\n")
    env = isolated_env(tmp_path)
    with serve(tmp_path / "www") as url:
        vpy = _venv(tmp_path, "3.11", "2.6.0", torches, env)
        proc = pip(
            vpy,
            ["install", "--no-index", "--find-links", f"{url}/index/cu12-torch2.6-cxx11abiFALSE/", "mamba-ssm"],
            env,
            check=False,
        )
    assert proc.returncode != 0
    assert "DO NOT MATCH THE HASHES" in proc.stdout + proc.stderr


def test_pages_without_files_and_wheels_on_a_release_host_install_with_pip_uv_and_setup_py(tmp_path):
    """The Pages layout: pages on one host with no files/ at all, wheels on another (GitHub release
    assets; a second server on 127.0.0.1 here). pip, uv and setup.py's lookup follow the links and
    check the hash; a tampered asset is refused."""
    import shutil

    from mamba_ssm import prebuilt as _prebuilt

    label = "cu12torch2.6cxx11abiFALSE"
    wheels = tmp_path / "wheels"
    whl = make_mamba_wheel(wheels, label, "cp311")
    assets = tmp_path / "release"  # what `gh release upload` puts online
    assets.mkdir()
    shutil.copy(whl, assets / whl.name)
    torches = tmp_path / "torches"
    make_fake_torch(torches, "2.6.0")
    env = isolated_env(tmp_path)
    key = "cu12-torch2.6-cxx11abiFALSE"
    with serve(assets) as release_url:
        out = tmp_path / "index"
        build_index(wheels, out, files_url=release_url)
        pages = tmp_path / "pages"  # the Pages copy: symlinks followed, files/ left out
        shutil.copytree(out, pages, ignore=lambda d, names: ["files"] if Path(d) == out else [])
        assert not list(pages.rglob("*.whl"))
        with serve(pages) as pages_url:
            for tool in (pip, uv_pip):
                vpy = _venv(tmp_path / tool.__name__, "3.11", "2.6.0", torches, env)
                tool(vpy, ["install", "--no-index", "--find-links", f"{pages_url}/{key}/", "mamba-ssm"], env)
                assert installed(vpy)["mamba"] == f"{V}+{label}", tool.__name__
            want = _variant.from_values("2.6.0", cuda="12.4", cxx11abi=False, python="cp311", platform="linux_x86_64")
            found = _prebuilt.find_prebuilt(want, V, tmp_path / "dl", index_url=pages_url, env={},
                                            machine="x86_64", glibc=(2, 36))  # fmt: skip
            assert found.status == "found" and found.wheel.read_bytes() == whl.read_bytes(), found.line

            with zipfile.ZipFile(assets / whl.name, "a") as zf:  # the asset swapped for other bytes
                zf.writestr("mamba_ssm/evil.py", "print('hi')\n")
            vpy = _venv(tmp_path / "tampered", "3.11", "2.6.0", torches, env)
            proc = pip(
                vpy, ["install", "--no-index", "--find-links", f"{pages_url}/{key}/", "mamba-ssm"], env, check=False
            )
            assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stdout + proc.stderr
            found = _prebuilt.find_prebuilt(want, V, tmp_path / "dl2", index_url=pages_url, env={},
                                            machine="x86_64", glibc=(2, 36))  # fmt: skip
            assert found.status == "hash-mismatch", found.line


def test_pip_and_uv_install_causal_conv1d_and_mamba_ssm_of_one_variant_from_one_index(tmp_path):
    """Upstream's line in one index: both projects' wheels for one variant, installed together by pip and uv
    through the variant's find-links page and its PEP 503 root; `resolve --project` names the same wheel."""
    import json

    from wheelmaker import CAUSAL_CONV1D, UPSTREAM_MAMBA, make_recipe_wheel

    wheels = tmp_path / "wheels"
    for label in ("cu13torch2.14cxx11abitrue", "cu12torch2.6cxx11abifalse"):  # a second variant, not taken
        make_recipe_wheel(wheels, "causal-conv1d", "1.7.0", label, source=CAUSAL_CONV1D)
        make_recipe_wheel(wheels, "mamba-ssm", "2.3.2.post1", label, source=UPSTREAM_MAMBA)
    out = tmp_path / "www" / "index"
    build_index(wheels, out)
    torches = tmp_path / "torches"
    make_fake_torch(torches, "2.14.1")
    key = "cu13-torch2.14-cxx11abiTRUE"
    res = resolve(json.loads((out / "manifest.json").read_text()), _want({"cuda": "13.0"}, "3.11", "2.14.1"),
                  "causal-conv1d")  # fmt: skip
    assert (res.key, res.filename) == (
        key,
        "causal_conv1d-1.7.0+cu13torch2.14cxx11abitrue-cp311-cp311-manylinux_2_28_x86_64.whl",
    )
    pins = ["causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE", "mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE"]
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({d: m.version(d) for d in ('causal-conv1d', 'mamba-ssm', 'torch')}))"
    )
    env = isolated_env(tmp_path)
    (tmp_path / "www" / "empty").mkdir()  # stands in for PyPI (404 for every project)
    with serve(tmp_path / "www") as url:
        page = f"{url}/index/{key}/"
        extra = ["--index-url", f"{url}/empty/", "--extra-index-url", page]
        ways = {
            "pip-find-links": (pip, ["install", "--no-index", "--find-links", page, *pins]),
            "pip-extra-index": (pip, ["install", *extra, *pins]),
            "uv-find-links": (uv_pip, ["install", "--no-index", "--find-links", page, *pins]),
            "uv-extra-index": (uv_pip, ["install", *extra, *pins]),
        }
        for way, (tool, args) in ways.items():
            vpy = _venv(tmp_path / way, "3.11", "2.14.1", torches, env)
            tool(vpy, args, env)
            import subprocess

            got = json.loads(
                subprocess.run([str(vpy), "-I", "-c", code], capture_output=True, text=True, check=True).stdout
            )
            assert got == {
                "causal-conv1d": "1.7.0+cu13torch2.14cxx11abitrue",
                "mamba-ssm": "2.3.2.post1+cu13torch2.14cxx11abitrue",
                "torch": "2.14.1",
            }, way
