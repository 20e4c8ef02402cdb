"""Every parser of outside data driven with generated input (issue 28): a clear error or a result, never a
traceback, a hang or a write outside.

Each test feeds one parser what hypothesis makes: mutations of a real input (the repository's matrix and
recipes, a manifest the index wrote, a wheel the farm's wheelmaker made, a real ELF shared object) and input
made from nothing. The property: the parser returns, or raises its one documented error type
(FarmError / Untrusted / NotAnElf / MetadataError); any other exception fails the test with the input that
caused it. The CI set runs the ``ci`` profile (a few dozen examples per parser, each under a deadline);
``--run-slow`` loads the ``slow`` profile (thousands of examples, see conftest.py).
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wheelmaker import make_mamba_wheel

from builder.building import cache
from builder.errors import FarmError
from builder.publishing import resolve
from builder.sourcing.pypi import File, _file
from builder.upkeep import drift
from builder.verifying import variants, wheelmeta
from mamba_ssm import _elf, _variant
from mamba_ssm._untrusted import Untrusted, load_json, load_toml

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}

# JSON values of any shape (what a hostile listing, manifest or variant.json may hold)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)


def mutated(seed: bytes, max_edits: int = 8):
    """``seed`` with a few byte edits: flips, inserted runs, cuts (what a damaged or hostile file looks like)."""

    @st.composite
    def strategy(draw):
        data = bytearray(seed)
        for _ in range(draw(st.integers(1, max_edits))):
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            kind = draw(st.sampled_from(["flip", "insert", "cut", "byte"]))
            if kind == "flip" and data:
                data[at] ^= 1 << draw(st.integers(0, 7))
            elif kind == "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=16))
            elif kind == "cut":
                del data[at : at + draw(st.integers(1, 64))]
            elif data:
                data[at] = draw(st.integers(0, 255))
        return bytes(data)

    return strategy()


# --------------------------------------------------------------------------- the layer


@settings(**SETTINGS)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode) | st.integers(1, 3000).map(lambda n: b"[" * n))
def test_json_and_toml_give_a_document_or_untrusted(raw):
    for load in (load_json, load_toml):
        try:
            load(raw, "generated")
        except Untrusted:
            pass


# --------------------------------------------------------------------------- matrix and recipes


@settings(**SETTINGS)
@given(mutated((ROOT / "matrix.toml").read_bytes()))
def test_matrix(tmp_path_factory, raw):
    from builder.facts import compat
    from builder.planning.matrix import load_matrix

    folder = tmp_path_factory.mktemp("matrix")
    (folder / "matrix.toml").write_bytes(raw)
    try:
        load_matrix(folder / "matrix.toml", compat.load())
    except FarmError:
        pass


RECIPE = min((ROOT / "recipes").glob("*.toml"))


@settings(**SETTINGS)
@given(mutated(RECIPE.read_bytes()))
def test_recipe(tmp_path_factory, raw):
    from builder.planning.recipes import load_recipe

    path = tmp_path_factory.mktemp("recipe") / RECIPE.name
    path.write_bytes(raw)
    try:
        load_recipe(path)
    except FarmError:
        pass


# --------------------------------------------------------------------------- resolve's manifest


def _manifest() -> bytes:
    doc = {"schema": 1, "files": {}, "variants": {}, "base_url": None}
    from builder.publishing.index.model import SCHEMA

    doc["schema"] = SCHEMA
    return json.dumps(doc).encode()


@settings(**SETTINGS)
@given(st.one_of(mutated(_manifest()), JSON.map(lambda v: json.dumps(v).encode())))
def test_manifest(raw):
    try:
        resolve.check_manifest(load_json(raw, "manifest.json"), "manifest.json")
    except (FarmError, Untrusted):
        pass


# --------------------------------------------------------------------------- drift's listing and METADATA


@settings(**SETTINGS)
@given(JSON)
def test_listing_entry(entry):
    try:
        f = _file(entry, 0, "http://127.0.0.1/simple/torch/")
    except Untrusted:
        return
    assert isinstance(f, File)
    f.version, f.linux_platforms(), f.linux_platforms(pep600_only=True), f.cpython()  # each must not raise


@settings(**SETTINGS)
@given(
    st.lists(
        st.text(max_size=80) | st.from_regex(r"cuda-toolkit\s*(==|===)\s*[0-9x.]{0,12}", fullmatch=True), max_size=6
    )
)
def test_metadata_requires_dist(lines):
    for plat in ("linux_x86_64", "linux_aarch64"):
        try:
            assert drift.cuda_build(lines, plat, "3.11").startswith(("cu", "cpu"))
        except FarmError:
            pass
    wheelmeta.torch_pin(lines)
    wheelmeta.parse_headers("\n".join(f"Requires-Dist: {ln}" for ln in lines).encode("utf-8", "surrogatepass"))


# --------------------------------------------------------------------------- wheels


@pytest.fixture(scope="module")
def wheel_bytes(tmp_path_factory) -> bytes:
    return make_mamba_wheel(tmp_path_factory.mktemp("whl"), "cu12torch2.6cxx11abiFALSE", "cp311").read_bytes()


@settings(**SETTINGS)
@given(data=st.data())
def test_wheel(wheel_bytes, tmp_path_factory, data):
    from builder.errors import VerificationError
    from builder.verifying.relabel import read_members

    raw = data.draw(mutated(wheel_bytes))
    try:
        wheelmeta.read(raw, wheel_tags=True)
    except wheelmeta.MetadataError:
        pass
    path = tmp_path_factory.mktemp("wheel") / "mamba_ssm-2.3.0+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(raw)
    try:
        read_members(path)
    except VerificationError:
        pass


# --------------------------------------------------------------------------- ELF


def _so() -> bytes:
    for cand in (Path(sys.executable).resolve().parent.parent / "lib", Path("/usr/lib/x86_64-linux-gnu")):
        for so in sorted(cand.glob("libz.so*")) + sorted(cand.glob("libpython3*.so*")):
            if so.is_file() and so.stat().st_size < 8 << 20:
                return so.read_bytes()
    return b"\x7fELF\x02\x01" + bytes(58)


@settings(**SETTINGS)
@given(st.one_of(mutated(_so()[:65536], 16), st.binary(max_size=200).map(lambda b: b"\x7fELF\x02\x01" + b)))
def test_elf(raw):
    try:
        elf = _elf.Elf(raw, "generated.so")
        elf.undefined_symbols()
        _elf.archs_in(elf)
    except _elf.NotAnElf:
        pass


# --------------------------------------------------------------------------- variant.json and labels


@settings(**SETTINGS)
@given(JSON, st.text(max_size=20))
def test_variant_json(tmp_path_factory, doc, label):
    from builder.errors import VerificationError

    folder = tmp_path_factory.mktemp("vj")
    src = make_mamba_wheel(folder, "cputorchstable", "cp310")
    name = src.name.replace(".whl", "-null.whl")
    info = "mamba_ssm-2.3.0+cputorchstable.dist-info"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(folder / name, "w") as zout:
        for i in zin.infolist():
            zout.writestr(i, zin.read(i))
        zout.writestr(f"{info}/variant.json", json.dumps(doc))
    try:
        variants.read_form(folder / name)
    except VerificationError:
        pass
    for parse in (_variant.Variant.from_label, _variant.Variant.from_key):
        try:
            parse(label)
        except (_variant.VariantError, ValueError):
            pass


# --------------------------------------------------------------------------- the smoke cache


ENTRY = st.tuples(
    st.sampled_from(["dir", "file", "link-out", "link-in", "fifo", "complete", "bad-complete"]),
    st.lists(st.sampled_from(["cp311-torch2.14.1", "torch-envs", "py3.11.1-0", ".complete", "x", "..x"]), min_size=1,
             max_size=4),
)  # fmt: skip


@settings(**SETTINGS)
@given(st.lists(ENTRY, max_size=12))
def test_cache_state(tmp_path_factory, layout):
    """Whatever the smoke cache holds, `entries` lists and `evict(0)` deletes only inside the cache root:
    the sentinel outside, which links point at, survives."""
    base = tmp_path_factory.mktemp("cache")
    root, outside = base / "smoke", base / "outside"
    (outside / "torch-envs" / "py3.11.1-0").mkdir(parents=True)
    (outside / "torch-envs" / "py3.11.1-0" / ".complete").write_text("torch==2.14.1\n")
    root.mkdir()
    for kind, parts in layout:
        p = root.joinpath(*parts)
        if any(q.is_symlink() for q in [p, *p.parents] if q.is_relative_to(root)):
            continue  # (the test itself never writes through a link it made)
        if os.path.lexists(p) or os.path.lexists(p / ".complete"):
            continue  # (never write through what an earlier entry made: a FIFO would block the test itself)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                p.mkdir(exist_ok=True)
            elif kind == "file":
                p.write_bytes(b"x")
            elif kind == "link-out":
                p.symlink_to(outside)
            elif kind == "link-in":
                p.symlink_to(root)
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "complete":
                p.mkdir(parents=True, exist_ok=True)
                (p / ".complete").write_text("torch==2.14.1\n")
            else:
                p.mkdir(parents=True, exist_ok=True)
                (p / ".complete").write_bytes(b"\xff\x1b[2J" * 10)
        except OSError:
            continue  # a layout the filesystem refuses (a name under a file)
    cache.entries(root, warn=lambda m: None)
    cache.evict(0, root=root, log=lambda m: None)
    assert (outside / "torch-envs" / "py3.11.1-0" / ".complete").read_text() == "torch==2.14.1\n"


def test_the_ci_profile_bounds_every_fuzzer(request):
    """The CI set's fuzzers are bounded (conftest.py registers the profiles): few examples, each under a deadline;
    the long run is the ``slow`` profile, loaded only with --run-slow."""
    ci, slow = settings.get_profile("ci"), settings.get_profile("slow")
    assert ci.max_examples <= 50 and ci.deadline is not None and slow.max_examples >= 1000
    assert settings().max_examples == (slow if request.config.getoption("--run-slow") else ci).max_examples
