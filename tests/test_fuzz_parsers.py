"""Every parser of outside data driven with generated input (hypothesis: mutations of real inputs and input
made from nothing): it returns or raises its one documented error type, never another exception, a hang or
a write outside. The CI set runs the ``ci`` profile; ``--run-slow`` the ``slow`` one (conftest.py).
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wheelmaker import V, make_mamba_wheel

from builder.environments import store
from builder.errors import FarmError
from builder.facts.untrusted import Untrusted, load_json, load_toml
from builder.publishing import resolve
from builder.sourcing.pypi import File, _file
from builder.upkeep import drift
from builder.verifying import variants, wheelmeta
from mamba_ssm import elf as _elf
from mamba_ssm import variant as _variant

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
@given(mutated((REPO / "matrix.toml").read_bytes()))
def test_matrix(tmp_path_factory, raw):
    from builder.facts import compat
    from builder.planning.matrix import load_matrix

    folder = tmp_path_factory.mktemp("matrix")
    (folder / "matrix.toml").write_bytes(raw)
    try:
        load_matrix(folder / "matrix.toml", compat.load())
    except FarmError:
        pass


RECIPE = min((REPO / "recipes").glob("*.toml"))


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
        except (FarmError, Untrusted):
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
    path = tmp_path_factory.mktemp("wheel") / f"mamba_ssm-{V}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
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
    info = f"mamba_ssm-{V}+cputorchstable.dist-info"
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
    store.entries(root, warn=lambda m: None)
    store.evict(0, root=root, log=lambda m: None)
    assert (outside / "torch-envs" / "py3.11.1-0" / ".complete").read_text() == "torch==2.14.1\n"


# --------------------------------------------------------------------------- the classes of hostile input
# Strategies for what the classes are made of: values of the wrong shape, fields that parse to nothing, bytes that
# are not UTF-8, lone surrogates and terminal controls. Each parser of outside data gets them where it reads
# text or fields; the property is the same: a result or the parser's one error, and nothing printed raw.

# text a hostile index, manifest or record may hold: controls (ESC, OSC's BEL, CR), bidi overrides, separators,
# lone surrogates (what a JSON "\ud800" escape or a non-UTF-8 argv byte becomes), empty and dotted fragments
HOSTILE_TEXT = st.one_of(
    st.sampled_from(["", ".", "..", "2.", ".6", "2..6", "3.", "cp3", "\x1b[2J", "\x1b]0;x\x07", "\r", "\u202e",
                     "\ud800", "\udcff", "\u2028", "\x00", "9" * 40]),
    st.text(st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp", "Nd", "Ll"], include_characters=".-_+"),
            max_size=24),
)  # fmt: skip
# a value where an object is meant: every other JSON shape
NOT_AN_OBJECT = st.one_of(st.none(), st.booleans(), st.integers(), HOSTILE_TEXT, st.lists(HOSTILE_TEXT, max_size=3))
SHAPES = st.one_of(NOT_AN_OBJECT, st.dictionaries(HOSTILE_TEXT, NOT_AN_OBJECT | HOSTILE_TEXT, max_size=3))
# bytes that are not UTF-8 (an invalid byte somewhere in otherwise plain text), or any bytes
NOT_UTF8 = st.one_of(
    st.tuples(st.text(max_size=40), st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]),
              st.text(max_size=40)).map(lambda t: t[0].encode() + t[1] + t[2].encode()),
    st.binary(max_size=120),
)  # fmt: skip


def _printable_result(text: str) -> None:
    """What the one printing path makes of ``text``: strict UTF-8, and nothing a terminal would obey."""
    from mamba_ssm.guard import has_hidden, neutral

    out = neutral(text)
    out.encode("utf-8")  # a lone surrogate never reaches the stream
    assert not has_hidden(out.replace("\n", "").replace("\t", "")), repr(out)


@settings(**SETTINGS)
@given(HOSTILE_TEXT | st.text(max_size=60) | NOT_UTF8.map(lambda b: b.decode("utf-8", "surrogateescape")))
def test_every_printed_text_is_neutral(text):
    import io

    from mamba_ssm.guard import _Guarded

    _printable_result(text)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="backslashreplace")  # an ascii terminal, reconfigured
    print(text, file=_Guarded(stream))
    stream.flush()
    assert b"\x1b" not in raw.getvalue() and b"\r" not in raw.getvalue()


@settings(**SETTINGS)
@given(HOSTILE_TEXT | st.integers(-5, 10**20) | NOT_AN_OBJECT)
def test_releases_refuse_empty_parts(raw):
    from builder.facts.compat import vtuple
    from builder.facts.untrusted import release

    for parse in (lambda v: release(v, "v"), vtuple):
        if parse is vtuple and not isinstance(raw, str):
            continue  # (typed str; cached, so it takes only hashable text)
        try:
            out = parse(raw)
        except Untrusted:
            continue
        assert isinstance(raw, str | int) and out is not None
        if isinstance(out, tuple):  # every part was there and was digits
            assert ".".join(map(str, out)) == ".".join(str(int(p)) for p in raw.split("."))


MARKER_VAR = st.sampled_from(["python_version", "python_full_version", "platform_machine", "os_name", "extra",
                              "implementation_version", "sys_platform", "platform_release"])  # fmt: skip
MARKER_OP = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "~=", "===", "in", "not in"])


@settings(**SETTINGS)
@given(st.one_of(
    st.tuples(MARKER_VAR, MARKER_OP, HOSTILE_TEXT).map(lambda t: f'{t[0]} {t[1]} "{t[2]}"'),
    st.tuples(HOSTILE_TEXT, MARKER_OP, MARKER_VAR).map(lambda t: f'"{t[0]}" {t[1]} {t[2]}'),
    HOSTILE_TEXT,
))  # fmt: skip
def test_markers_hold_or_are_refused(marker):
    from packaging.markers import InvalidMarker, Marker

    from builder.facts.untrusted import marker_holds

    env = drift._environment("linux_x86_64", "3.11")
    try:
        parsed = Marker(marker)
    except InvalidMarker:
        parsed = None
    try:
        assert parsed is None or marker_holds(parsed, env, "Requires-Dist") in (True, False)
    except Untrusted as err:
        _printable_result(str(err))
    # and through drift's reading of a METADATA's lines
    try:
        drift.cuda_build([f"cuda-toolkit==13.0.2; {marker}"], "linux_x86_64", "3.11")
    except (FarmError, Untrusted):
        pass


@settings(**SETTINGS)
@given(NOT_UTF8 | st.text(max_size=80).map(lambda t: f"Name: torch\nRequires-Dist: {t}\n".encode("utf-8", "surrogatepass")))  # fmt: skip
def test_metadata_bytes(raw):
    from builder.sourcing.pypi import _parse

    try:
        meta = _parse(raw, "METADATA")
    except Untrusted as err:
        assert "not UTF-8" in str(err)
        return
    try:
        drift.cuda_build(meta.get_all("Requires-Dist") or [], "linux_x86_64", "3.11")
    except (FarmError, Untrusted):
        pass


@settings(**SETTINGS)
@given(st.one_of(HOSTILE_TEXT, st.tuples(HOSTILE_TEXT, HOSTILE_TEXT).map(lambda t: f"torch-2.15.0-cp{t[0]}-cp{t[1]}-manylinux_2_28_x86_64.whl")))  # fmt: skip
def test_listing_file_names(name):
    from builder.facts.compat import vtuple

    f = _file({"filename": name, "url": "torch.whl", "hashes": {}}, 0, "http://127.0.0.1/simple/torch/")
    py = f.cpython()
    f.version, f.linux_platforms()  # each must not raise
    if py is not None:
        try:
            vtuple(py)
        except Untrusted:
            pass


def _record(files, releases) -> dict:
    return {"files": files, "releases": releases, "skipped": {}}


RECORD_FILE = st.one_of(NOT_AN_OBJECT, st.fixed_dictionaries({"label": NOT_AN_OBJECT, "properties": NOT_AN_OBJECT}))


@settings(**SETTINGS)
@given(st.one_of(
    SHAPES,
    st.builds(_record, st.dictionaries(HOSTILE_TEXT, RECORD_FILE, max_size=3) | NOT_AN_OBJECT,
              st.dictionaries(st.just("mamba-ssm"), st.lists(HOSTILE_TEXT, max_size=2) | NOT_AN_OBJECT) | NOT_AN_OBJECT),
))  # fmt: skip
def test_wheel_variants_record(record):
    """resolve's reading of the manifest's wheel_variants record: refused, or every line it prints is neutral."""
    try:
        variants.check_record(record, "manifest.json")
    except Untrusted as err:
        _printable_result(str(err))
        return
    for line in variants.describe(record, "mamba-ssm", "https://x.example/"):
        _printable_result(line)
    variants.summary(record, "mamba-ssm")


@settings(**SETTINGS)
@given(SHAPES | st.fixed_dictionaries({"source": SHAPES}) | NOT_UTF8)
def test_provenance_record(tmp_path_factory, rec):
    from wheelmaker import make_wheel

    from builder.verifying import provenance

    raw = rec if isinstance(rec, bytes) else json.dumps(rec).encode()
    files = {"demo/__init__.py": b"", "demo-1.0.dist-info/farm-provenance.json": raw}
    whl = make_wheel(tmp_path_factory.mktemp("prov"), "demo", "1.0", "cp311-cp311-linux_x86_64", files=files)
    try:
        got = provenance.read_wheel(whl)
    except Untrusted as err:
        _printable_result(str(err))
        return
    assert isinstance(got, dict)
    provenance.summary(got)


@settings(**SETTINGS)
@given(SHAPES.map(lambda v: json.dumps(v).encode()) | NOT_UTF8)
def test_live_manifest(tmp_path_factory, raw):
    """The index's reading of its own live manifest: a document, or IndexIntegrityError."""
    from builder.errors import IndexIntegrityError
    from builder.publishing.index.generation import load_manifest

    gen = tmp_path_factory.mktemp("gen")
    (gen / "manifest.json").write_bytes(raw)
    try:
        assert isinstance(load_manifest(gen), dict)
    except IndexIntegrityError:
        pass


@settings(**SETTINGS)
@given(SHAPES.map(lambda v: json.dumps(v).encode()) | NOT_UTF8)
def test_cost_record(tmp_path_factory, raw):
    from builder.publishing import cost

    path = tmp_path_factory.mktemp("cost") / "job-cost.json"
    path.write_bytes(raw)
    try:
        cost._load(path)
    except FarmError:
        pass


@settings(**SETTINGS)
@given(NOT_UTF8 | HOSTILE_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_cache_marker_bytes(tmp_path_factory, raw):
    """A smoke venv's .complete of any bytes: listed (as text) or skipped, never printed raw."""
    root = tmp_path_factory.mktemp("smoke") / "smoke"
    venv = root / "cp311-torch2.14.1" / "torch-envs" / "py3.11.1-0"
    venv.mkdir(parents=True)
    (venv / ".complete").write_bytes(raw)
    warned = []
    for e in store.entries(root, warn=warned.append):
        _printable_result(e.requirement.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert len(warned) <= 1


@settings(**SETTINGS)
@given(SHAPES | st.fixed_dictionaries({"files": st.lists(SHAPES | st.fixed_dictionaries(
    {"url": HOSTILE_TEXT, "filename": HOSTILE_TEXT, "hashes": SHAPES, "size": NOT_AN_OBJECT}), max_size=3) | NOT_AN_OBJECT}),
    HOSTILE_TEXT)  # fmt: skip
def test_sdist_index_pages(doc, text):
    """recipe fetch's reading of an index page: PEP 691 JSON of any shape, or HTML with hostile links."""
    from builder.sourcing.sources import _from_html, _from_json

    base = "http://127.0.0.1/simple/x/"
    if isinstance(doc, dict):
        try:
            for c in _from_json(doc, base):
                assert isinstance(c.filename, str) and (c.sha256 is None or isinstance(c.sha256, str))
        except Untrusted as err:
            _printable_result(str(err))
    try:
        _from_html(f'<a href="{text}">{text}</a><a href=x#sha256={text}>', base)
    except ValueError:  # urljoin's own refusal (a bracketed host), caught as one dead mirror by the caller
        pass


def test_the_ci_profile_bounds_every_fuzzer(request):
    """The CI set's fuzzers are bounded (conftest.py registers the profiles): few examples, each under a deadline;
    the long run is the ``slow`` profile, loaded only with --run-slow."""
    ci, slow = settings.get_profile("ci"), settings.get_profile("slow")
    assert ci.max_examples <= 50 and ci.deadline is not None and slow.max_examples >= 1000
    assert settings().max_examples == (slow if request.config.getoption("--run-slow") else ci).max_examples
