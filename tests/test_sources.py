"""builder/sourcing/sources.py: pinned sdists fetched once through the host's pip settings, hash-checked before every use.

The fetch tests reach the real package index through the host's settings (its proxy CA):
the two sdists the recipes pin, about 250 kB.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest
from hostilekit import chain_archive, corrupt_gzip
from recipekit import CAUSAL, MAMBA, fetched_cache

from builder.errors import SourceFetchError, SourceIntegrityError, UsageError
from builder.facts.spec import SdistPin
from builder.sourcing.sources import Fetcher, SourceCache


@pytest.fixture(scope="module")
def fetched(tmp_path_factory) -> SourceCache:
    return fetched_cache(tmp_path_factory.mktemp("sdists"))


def _copy_cache(fetched: SourceCache, dst: Path, pin: SdistPin) -> SourceCache:
    """A private cache holding one real archive, and a fetcher that cannot reach anything."""
    cache = SourceCache(dst, Fetcher(indexes=(), find_links=()))
    cache.path(pin).parent.mkdir(parents=True)
    shutil.copy2(fetched.path(pin), cache.path(pin))
    return cache


def _tarball(path: Path, members: dict[str, bytes], top: str) -> SdistPin:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name if name.startswith("/") else f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    name, version = top.rsplit("-", 1)
    return SdistPin(name, version, hashlib.sha256(path.read_bytes()).hexdigest())


def test_fetch_real_sdists_through_host_pip_settings(fetched):
    for pin in (MAMBA, CAUSAL):
        path = fetched.path(pin)
        assert path == fetched.root / pin.sha256 / pin.filename
        assert hashlib.sha256(path.read_bytes()).hexdigest() == pin.sha256
    assert not list(fetched.root.rglob(".partial-*")), "a partial download was left in the cache"
    # PyPI's file names, for the record: the index lists them this way
    assert sorted(p.name for p in fetched.root.glob("*/*.tar.gz")) == [
        "causal_conv1d-1.7.0.tar.gz",
        "mamba_ssm-2.3.2.post1.tar.gz",
    ]


def test_fetched_once_then_served_from_the_cache(fetched, tmp_path):
    cache = _copy_cache(fetched, tmp_path / "c", CAUSAL)  # its fetcher has no index at all
    assert cache.fetch(CAUSAL) == cache.path(CAUSAL)
    tree = cache.unpack(CAUSAL, tmp_path / "tree")
    assert tree.name == "causal_conv1d-1.7.0" and (tree / "setup.py").is_file()
    assert not list((tmp_path / "tree").glob(".*.tar.gz")), "the private copy was left beside the tree"


def test_tampered_cached_file_is_refused_and_moved_out(fetched, tmp_path):
    cache = _copy_cache(fetched, tmp_path / "c", CAUSAL)
    cached = cache.path(CAUSAL)
    with open(cached, "ab") as f:
        f.write(b"\0")
    bad = hashlib.sha256(cached.read_bytes()).hexdigest()
    with pytest.raises(SourceIntegrityError) as err:
        cache.unpack(CAUSAL, tmp_path / "tree")
    assert err.value.exit_code == 8
    assert f"sha256 {bad} does not match the pin {CAUSAL.sha256}" in str(err.value)
    assert "nothing is built from it" in str(err.value)
    assert not cached.exists(), "the bad file stayed in the cache as if good"
    assert [p.name.endswith(CAUSAL.filename) for p in cache.quarantine.iterdir()] == [True]
    assert not (tmp_path / "tree").exists(), "something was unpacked from a refused file"
    # the next use fetches afresh: with no index reachable that is a fetch error, never the bad bytes
    with pytest.raises(SourceFetchError):
        cache.fetch(CAUSAL)


def test_tampered_cache_refused_by_the_cli_with_its_exit_code(fetched, tmp_path, cli):
    farm_cache = tmp_path / "farm"
    cache = _copy_cache(fetched, farm_cache / "sdists", CAUSAL)
    cache.path(CAUSAL).write_bytes(b"not the sdist")
    proc = cli("recipe", "fetch", "causal-conv1d", env={"MAMBA_FARM_CACHE": str(farm_cache)})
    assert proc.returncode == 8, proc.stderr
    assert "does not match the pin 3202758494eaa7b5" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "hint: the file was moved to" in proc.stderr


def test_download_with_other_bytes_is_refused_and_not_cached(tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    _tarball(links / CAUSAL.filename, {"setup.py": b"print('not upstream')\n"}, "causal_conv1d-1.7.0")
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(links),)))
    with pytest.raises(SourceIntegrityError) as err:
        cache.fetch(CAUSAL)
    assert err.value.exit_code == 8 and "no file on the host's indexes has the pinned sha256" in str(err.value)
    assert not cache.path(CAUSAL).exists()
    assert not list(cache.root.rglob(".partial-*"))


def test_a_local_find_links_copy_with_the_right_bytes_is_used(fetched, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy2(fetched.path(MAMBA), links / MAMBA.filename)
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(links),)))
    assert cache.fetch(MAMBA).read_bytes() == fetched.path(MAMBA).read_bytes()


def test_missing_everywhere_is_a_fetch_error(tmp_path):
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=((tmp_path / "empty").as_uri(),), find_links=()))
    with pytest.raises(SourceFetchError) as err:
        cache.fetch(CAUSAL)
    assert "causal_conv1d-1.7.0.tar.gz was fetched from none of the host's indexes" in str(err.value)


def test_an_unreachable_index_does_not_hide_the_others(fetched, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy2(fetched.path(CAUSAL), links / CAUSAL.filename)
    dead = Fetcher(indexes=("https://127.0.0.1:9/simple",), find_links=(str(links),), timeout=5)
    assert SourceCache(tmp_path / "c", dead).fetch(CAUSAL).is_file()
    with pytest.raises(SourceFetchError, match=r"unreachable: https://127\.0\.0\.1:9/simple/causal-conv1d/"):
        SourceCache(tmp_path / "d", Fetcher(indexes=("https://127.0.0.1:9/simple",), timeout=5)).fetch(CAUSAL)


@pytest.mark.parametrize(
    "member",
    ["../../../escaped.txt", "/tmp/absolute-escape.txt"],
)
def test_path_traversal_is_refused(tmp_path, member):
    archive = tmp_path / "evil-1.0.tar.gz"
    pin = _tarball(archive, {"setup.py": b"", member: b"owned"}, "evil-1.0")
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(tmp_path),)))
    with pytest.raises(SourceIntegrityError) as err:
        cache.unpack(pin, tmp_path / "out" / "tree")
    assert "evil-1.0.tar.gz" in str(err.value)
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "out" / "tree").exists(), "a refused archive left a partial tree"
    assert not Path("/tmp/absolute-escape.txt").exists()


def test_symlink_out_of_the_tree_is_refused(tmp_path):
    archive = tmp_path / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        link = tarfile.TarInfo("evil-1.0/etc")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tf.addfile(link)
        f = tarfile.TarInfo("evil-1.0/etc/owned")
        f.size = 2
        tf.addfile(f, io.BytesIO(b"hi"))
    pin = SdistPin("evil", "1.0", hashlib.sha256(archive.read_bytes()).hexdigest())
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(tmp_path),)))
    with pytest.raises(SourceIntegrityError, match="refused to unpack"):
        cache.unpack(pin, tmp_path / "out")
    assert not Path("/etc/owned").exists()


def test_every_unpack_is_a_fresh_tree(fetched, tmp_path):
    cache = _copy_cache(fetched, tmp_path / "c", CAUSAL)
    a = cache.unpack(CAUSAL, tmp_path / "a")
    (a / "setup.py").write_text("changed")
    b = cache.unpack(CAUSAL, tmp_path / "b")
    assert (b / "setup.py").read_text() != "changed"
    with pytest.raises(FileExistsError):
        cache.unpack(CAUSAL, tmp_path / "a")
    assert hashlib.sha256(cache.path(CAUSAL).read_bytes()).hexdigest() == CAUSAL.sha256


def test_a_hash_mismatch_has_an_exit_code_of_its_own():
    import inspect

    from builder import errors

    others = {
        cls.__name__: cls.exit_code
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.FarmError) and cls is not SourceIntegrityError
    }
    assert SourceIntegrityError.exit_code not in others.values(), others


# --- hostile archives: each is made here; a marker file proves an escape -----------------------


def _pin_of(archive: Path, name: str = "evil", version: str = "1.0") -> SdistPin:
    return SdistPin(name, version, hashlib.sha256(archive.read_bytes()).hexdigest())


def _links_cache(tmp_path: Path) -> SourceCache:
    return SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(tmp_path / "links"),)))


def test_a_symlink_chain_that_beats_the_data_filter_is_refused(tmp_path):
    (tmp_path / "links").mkdir()
    archive = tmp_path / "links" / "evil-1.0.tar.gz"
    dest = tmp_path / "out" / "tree"
    chain_archive(archive, "evil-1.0", dest, "..")  # lands in tmp_path/out
    pin = _pin_of(archive)
    cache = _links_cache(tmp_path)
    with pytest.raises(SourceIntegrityError) as err:
        cache.unpack(pin, dest)
    assert err.value.exit_code == 11 and "refused to unpack" in str(err.value), err.value
    assert not list(tmp_path.rglob("marker.txt")), "the archive wrote outside its tree"
    assert not dest.exists()
    assert not cache.path(pin).exists() and list(cache.quarantine.iterdir()), "a refused archive stayed cached"


def test_the_cve_chain_is_refused_by_its_links_not_only_its_long_names(tmp_path, monkeypatch):
    """The CVE archive's names are also too long for an sdist; without that limit its links still give it away:
    its PATH_MAX-beating link is created through the one-letter links, which the data filter allows."""
    from builder.sourcing import sources

    chain_archive(tmp_path / "x.tar.gz", "evil-1.0", tmp_path / "out", "..")
    monkeypatch.setattr(sources, "MAX_MEMBER_NAME", 10_000)
    with tarfile.open(tmp_path / "x.tar.gz") as tf:
        members = tf.getmembers()
    with pytest.raises(SourceIntegrityError, match="written through the link or file 'evil-1.0/a'"):
        sources.check_members(members, "x.tar.gz")


@pytest.mark.parametrize(
    "kind",
    [
        "absolute",
        "dotdot-link",
        "link-chain",
        "hardlink-out",
        "device",
        "fifo",
        "through-file",
        "duplicate",
        "link-to-top",
    ],
)
def test_unsafe_members_are_refused_before_anything_is_written(tmp_path, kind):
    (tmp_path / "links").mkdir()
    archive = tmp_path / "links" / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:

        def add(name, type_=tarfile.REGTYPE, linkname="", data=b""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = type_, linkname, len(data) if type_ == tarfile.REGTYPE else 0
            tf.addfile(info, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)

        add("evil-1.0/setup.py", data=b"print('first')\n")  # a member that comes before the bad one: never written either
        if kind == "absolute":
            add(str(tmp_path / "marker.txt"), data=b"x")
        elif kind == "link-chain":  # lexically inside (d/d/d/../../..), really three folders up: d is "."
            add("evil-1.0/d", tarfile.SYMTYPE, ".")
            add("evil-1.0/esc", tarfile.SYMTYPE, "d/d/d/../../../marker-dir")
        elif kind == "dotdot-link":
            add("evil-1.0/up", tarfile.SYMTYPE, "../..")
        elif kind == "hardlink-out":
            add("evil-1.0/h", tarfile.LNKTYPE, str(tmp_path / "links" / "evil-1.0.tar.gz").lstrip("/"))
        elif kind == "device":
            add("evil-1.0/zero", tarfile.CHRTYPE)
        elif kind == "fifo":
            add("evil-1.0/pipe", tarfile.FIFOTYPE)
        elif kind == "through-file":
            add("evil-1.0/setup.py/marker.txt", data=b"x")
        elif kind == "duplicate":
            add("evil-1.0/setup.py", tarfile.SYMTYPE, "../../marker.txt")
        elif kind == "link-to-top":
            add("evil-1.0/a", tarfile.SYMTYPE, "b/../..")
    pin = _pin_of(archive)
    with pytest.raises(SourceIntegrityError) as err:
        _links_cache(tmp_path).unpack(pin, tmp_path / "out")
    assert err.value.exit_code in (8, 11), err.value
    assert "evil-1.0.tar.gz" in str(err.value)
    assert not (tmp_path / "out").exists(), "something was written before the member list was checked"
    assert not list(tmp_path.rglob("marker.txt"))


def test_an_all_absolute_sdist_never_gives_the_root(tmp_path):
    (tmp_path / "links").mkdir()
    archive = tmp_path / "links" / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo(str(tmp_path / "marker.txt"))
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SourceIntegrityError) as err:
        _links_cache(tmp_path).unpack(_pin_of(archive), tmp_path / "out")
    assert "is absolute" in str(err.value)
    assert not (tmp_path / "marker.txt").exists()


@pytest.mark.parametrize("where", [0.01, 0.2, 0.5, 0.8, 0.99])
def test_a_corrupt_gzip_is_a_source_error_not_a_traceback(tmp_path, where):
    (tmp_path / "links").mkdir()
    archive = tmp_path / "links" / "evil-1.0.tar.gz"
    corrupt_gzip(archive, "evil-1.0", where)
    cache = _links_cache(tmp_path)
    pin = _pin_of(archive)
    with pytest.raises(SourceIntegrityError) as err:
        cache.unpack(pin, tmp_path / "out")
    assert err.value.exit_code == 8 and "not a readable .tar.gz" in str(err.value)
    assert not (tmp_path / "out").exists(), "a partial tree was left"
    assert not cache.path(pin).exists(), "a refused archive stayed cached"


def test_the_top_folder_must_be_the_pins_name_and_version(tmp_path):
    (tmp_path / "links").mkdir()
    archive = tmp_path / "links" / "evil-1.0.tar.gz"
    _tarball(archive, {"setup.py": b""}, "other-2.0")
    with pytest.raises(SourceIntegrityError, match="not evil-1.0"):
        _links_cache(tmp_path).unpack(_pin_of(archive), tmp_path / "out")
    _tarball(archive, {"setup.py": b""}, "Evil-1.0.0")  # another spelling of the same name and version
    cache = SourceCache(tmp_path / "c2", Fetcher(indexes=(), find_links=(str(tmp_path / "links"),)))
    assert cache.unpack(_pin_of(archive), tmp_path / "ok").name == "Evil-1.0.0"


def test_an_unpack_never_writes_into_the_cache(fetched, tmp_path):
    cache = _copy_cache(fetched, tmp_path / "c", CAUSAL)
    with pytest.raises(UsageError, match="inside the sdist cache"):
        cache.unpack(CAUSAL, cache.root / "tree")


# --- hostile indexes and downloads ----------------------------------------------------------------


def _page(folder: Path, project: str, links: list[tuple[str, str]]) -> None:
    (folder / project).mkdir(parents=True, exist_ok=True)
    body = "".join(f'<a href="{href}">{text}</a>\n' for href, text in links)
    (folder / project / "index.html").write_text(f"<html><body>{body}</body></html>")


def test_a_remote_page_linking_a_local_file_is_not_followed(tmp_path):
    from indexkit import serve

    local = tmp_path / "local"
    local.mkdir()
    _tarball(local / "evil-1.0.tar.gz", {"setup.py": b""}, "evil-1.0")
    pin = _pin_of(local / "evil-1.0.tar.gz")
    _page(tmp_path / "site" / "simple", "evil", [((local / "evil-1.0.tar.gz").as_uri(), "evil-1.0.tar.gz")])
    with serve(tmp_path / "site") as url:
        cache = SourceCache(tmp_path / "c", Fetcher(indexes=(f"{url}/simple",), timeout=10))
        with pytest.raises(SourceFetchError) as err:
            cache.fetch(pin)
    assert "not an http(s) URL: ignored" in str(err.value)
    assert not cache.path(pin).exists(), "a local file was read and cached through a remote page"


def test_a_download_stops_at_the_size_cap_and_leaves_nothing(tmp_path, monkeypatch):
    from indexkit import serve

    site = tmp_path / "site"
    (site / "files").mkdir(parents=True)
    (site / "files" / "evil-1.0.tar.gz").write_bytes(b"\0" * (3 << 20))
    pin = SdistPin("evil", "1.0", "0" * 64)
    _page(site / "simple", "evil", [("../../files/evil-1.0.tar.gz", "evil-1.0.tar.gz")])
    monkeypatch.setenv("MAMBA_FARM_MAX_SDIST_MB", "1")
    with serve(site) as url:
        cache = SourceCache(tmp_path / "c", Fetcher(indexes=(f"{url}/simple",), timeout=10))
        with pytest.raises(SourceIntegrityError, match="over the cap"):
            cache.fetch(pin)
    assert not list(cache.root.rglob(".partial-*")) and not cache.path(pin).exists()


def test_a_local_page_linking_dev_zero_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("MAMBA_FARM_MAX_SDIST_MB", "1")  # uncapped, /dev/zero would be read until the disk was full
    _page(tmp_path / "simple", "evil", [("file:///dev/zero", "evil-1.0.tar.gz")])
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=((tmp_path / "simple").as_uri(),)))
    with pytest.raises(SourceFetchError, match="not a regular file"):
        cache.fetch(SdistPin("evil", "1.0", "0" * 64))


def test_a_killed_downloads_partial_file_is_removed_by_the_next_run(fetched, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy2(fetched.path(CAUSAL), links / CAUSAL.filename)
    cache = SourceCache(tmp_path / "c", Fetcher(indexes=(), find_links=(str(links),)))
    cache.path(CAUSAL).parent.mkdir(parents=True)
    left = cache.path(CAUSAL).parent / ".partial-killed"
    left.write_bytes(b"half")
    assert cache.fetch(CAUSAL).is_file()
    assert not left.exists(), "a killed download's partial file stayed in the cache"


def test_a_corrupt_gzip_fails_its_build_alone_and_the_run_exits_8(tmp_path, monkeypatch):
    """builder/run/build.py's source step: the corrupt archive's build is refused (exit 8), the other one is prepared."""
    import types

    from builder.facts import hostenv
    from builder.planning.recipes import load_recipe
    from builder.run import build

    monkeypatch.setattr(hostenv, "CACHE_ROOT", tmp_path / "farm")
    recipes = {}
    for name, corrupt in (("evil", True), ("good", False)):
        archive = tmp_path / f"{name}-1.0.tar.gz"
        if corrupt:
            corrupt_gzip(archive, f"{name}-1.0", 0.5)
        else:
            # a package whose metadata prepares (the preflight, the build's first step, reads it)
            _tarball(archive, {"setup.py": b"from setuptools import setup\nsetup(name='good', version='1.0')\n"},
                     f"{name}-1.0")  # fmt: skip
        pin = _pin_of(archive, name)
        cached = tmp_path / "farm" / "sdists" / pin.sha256 / pin.filename
        cached.parent.mkdir(parents=True)
        shutil.copy2(archive, cached)
        (tmp_path / "recipes").mkdir(exist_ok=True)
        path = tmp_path / "recipes" / f"{name}.toml"
        path.write_text(
            f'[project]\nname = "{name}"\n[source]\nname = "{name}"\nversion = "1.0"\nsha256 = "{pin.sha256}"\n'
            f'[build]\n[build.env]\nX_FORCE = "1"\n[test]\nimports = ["{name}"]\n[verify]\nextensions = ["x*.so"]\n'
        )
        recipes[name] = load_recipe(path)
    specs = [
        types.SimpleNamespace(
            id=f"{n}-cpu",
            from_recipe=True,
            source=recipes[n].source.identity,
            accelerator="cpu",
            torch_version="2.14.1",
            toolkit=None,
            cxx11abi=True,
            archs=(),
            label="cputorch2.14",
            project=n,
            trim=False,
        )
        for n in recipes
    ]
    plan = types.SimpleNamespace(recipe_of=lambda spec: recipes[spec.project])
    (tmp_path / "logs").mkdir()
    trees, refused = build._prepare_sources(specs, plan, tmp_path / "run", tmp_path / "logs", lambda text: None)
    assert list(trees) == ["good-cpu"] and (trees["good-cpu"] / "setup.py").is_file()
    assert list(refused) == ["evil-cpu"] and refused["evil-cpu"][1].exit_code == 8
    assert "not a readable .tar.gz" in (tmp_path / "logs" / "evil-cpu.log").read_text()
    assert build._exit_code([refused["evil-cpu"][0]], refused) == 8
