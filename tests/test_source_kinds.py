"""A recipe's source beyond a PyPI sdist: an archive URL pinned by sha256, a git repository at a full commit.

No test reaches GitHub: a static server on 127.0.0.1 stands in for GitHub's tag tarballs
(``/archive/refs/tags/<tag>.tar.gz``, whose top folder is ``<repo>-<tag>``), and git's own smart HTTP
(``git http-backend``) on 127.0.0.1 stands in for a GitHub repository.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from indexkit import running, serve
from releasekit import _GitHttp, git, git_http

from builder.errors import RecipeError, SourceIntegrityError
from builder.facts.spec import ArchivePin, GitPin
from builder.planning.recipes import CellFacts, load_recipe
from builder.sourcing.prepare import prepare
from builder.sourcing.sources import Fetcher, SourceCache
from builder.upkeep import drift

CPU = CellFacts("2.14.1", "cpu", None, True)


def _cache(root: Path) -> SourceCache:
    return SourceCache(root, Fetcher(indexes=(), find_links=()))  # no index: only the pin's own URL


def _tag_tarball(path: Path, top: str, files: dict[str, bytes], mtime: int = 1_700_000_000) -> str:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime = len(data), mtime
            tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recipe(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.toml"
    path.write_text(f'[project]\nname = "demo"\n\n[source]\nname = "demo"\nversion = "1.0"\n{source}\n\n[build]\n\n'
                    '[test]\nimports = ["demo"]\n\n[verify]\nextensions = ["demo*.so"]\n')  # fmt: skip
    return path


def test_an_archive_url_is_fetched_checked_cached_and_unpacked(tmp_path):
    site = tmp_path / "site" / "o" / "demo" / "archive" / "refs" / "tags"
    site.mkdir(parents=True)
    sha = _tag_tarball(site / "v1.0.tar.gz", "demo-1.0", {"setup.py": b"print('demo')\n", "csrc/k.cu": b"//\n"})
    cache = _cache(tmp_path / "cache")
    with serve(tmp_path / "site") as url:
        pin = ArchivePin("demo", "1.0", sha, f"{url}/o/demo/archive/refs/tags/v1.0.tar.gz")
        recipe = load_recipe(_recipe(tmp_path / "recipes", f'url = "{pin.url}"\nsha256 = "{sha}"'))
        assert recipe.source == pin and recipe.source.provenance()["kind"] == "archive"
        prep = prepare(recipe, CPU, tmp_path / "work", cache)
    # GitHub's top folder is <repo>-<tag>: any one folder is taken; the csrc the PyPI sdist lacked is there
    assert (prep.tree / "csrc" / "k.cu").is_file() and prep.tree.name == "demo-1.0"
    assert prep.epoch == 1_700_000_000  # the archive's time, not the clock's
    assert cache.path(pin).is_file()
    # served from the cache, hash-checked again, once the server is gone
    again = cache.unpack(pin, tmp_path / "again")
    assert (again / "setup.py").read_bytes() == b"print('demo')\n"


def test_an_archive_whose_bytes_are_not_the_pin_is_refused_and_not_cached(tmp_path):
    (tmp_path / "site").mkdir()
    _tag_tarball(tmp_path / "site" / "v1.0.tar.gz", "demo-1.0", {"setup.py": b"evil\n"})
    cache = _cache(tmp_path / "cache")
    with serve(tmp_path / "site") as url:
        pin = ArchivePin("demo", "1.0", "a" * 64, f"{url}/v1.0.tar.gz")
        with pytest.raises(SourceIntegrityError, match="not the pinned one") as err:
            cache.unpack(pin, tmp_path / "out")
    assert "sha256sum" in err.value.hint and not (tmp_path / "out").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and not p.name.startswith(".")]



@pytest.fixture
def repo(tmp_path):
    """A bare repository (what GitHub holds) with two commits on main; returns (served root, first, second)."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "setup.py").write_text("VERSION = 1\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "one", GIT_COMMITTER_DATE="@1700000000 +0000")
    first = git(work, "rev-parse", "HEAD")
    (work / "setup.py").write_text("VERSION = 2\n")
    git(work, "commit", "-qam", "two")
    second = git(work, "rev-parse", "HEAD")
    served = tmp_path / "served"
    served.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(served / "demo.git"))
    return served, first, second


@pytest.mark.parametrize("by_hash", [True, False], ids=["commit-alone", "branches-and-tags"])
def test_a_git_commit_is_fetched_and_its_tree_unpacked(tmp_path, repo, by_hash):
    served, first, _second = repo
    # GitHub lets a client fetch a commit by its hash; a server that does not gets every branch and tag fetched
    git(served / "demo.git", "config", "uploadpack.allowAnySHA1InWant", "true" if by_hash else "false")
    cache = _cache(tmp_path / "cache")
    with git_http(served) as (url, _pushes):
        recipe = load_recipe(_recipe(tmp_path / "recipes", f'git = "{url}/demo.git"\ncommit = "{first}"'))
        assert recipe.source == GitPin("demo", "1.0", f"{url}/demo.git", first)
        prep = prepare(recipe, CPU, tmp_path / "w", cache)
    assert (prep.tree / "setup.py").read_text() == "VERSION = 1\n"  # the pinned commit, not the branch's tip
    assert prep.tree.name == "demo-1.0" and prep.epoch == 1_700_000_000  # the commit's time
    # once fetched, the cache's repository gives it with no server
    again = cache.unpack(recipe.source, tmp_path / "again")
    assert (again / "setup.py").read_text() == "VERSION = 1\n"


def test_a_commit_the_repository_does_not_have_is_refused(tmp_path, repo):
    served, _first, _second = repo
    with git_http(served) as (url, _pushes):
        pin = GitPin("demo", "1.0", f"{url}/demo.git", "f" * 40)
        with pytest.raises(SourceIntegrityError, match="has no commit f{40}") as err:
            _cache(tmp_path / "cache").unpack(pin, tmp_path / "out")
    assert "git ls-remote" in err.value.hint and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("source", "key", "says"),
    [
        ('git = "ext::sh -c touch% /tmp/x"\ncommit = "' + "a" * 40 + '"', "source.git", "transport"),
        ('git = "--upload-pack=touch /tmp/x"\ncommit = "' + "a" * 40 + '"', "source.git", "option"),
        ('git = "file:///srv/demo.git"\ncommit = "' + "a" * 40 + '"', "source.git", "not an http(s) URL"),
        ('git = "https://example.org/demo.git"\ncommit = "abc1234"', "source.commit", "not a full commit hash"),
        ('git = "https://example.org/demo.git"\ncommit = "main"', "source.commit", "not a full commit hash"),
        ('git = "https://example.org/demo.git"', "source.git", "needs its commit"),
        ('url = "file:///dev/zero"\nsha256 = "' + "a" * 64 + '"', "source.url", "not an http(s) URL"),
        ('url = "https://u:p@example.org/a.tar.gz"\nsha256 = "' + "a" * 64 + '"', "source.url", "user name"),
        ('url = "https://example.org/a.tar.gz"', "source.sha256", "is not a sha256"),
    ],
    ids=["ext", "option", "file", "short", "branch", "no-commit", "archive-file", "archive-user", "archive-no-sha"],
)
def test_a_bad_source_names_file_line_key_and_fix(tmp_path, source, key, says):
    path = _recipe(tmp_path, source)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert f"{path}:" in str(err.value) and f" {key}:" in str(err.value) and says in str(err.value), str(err.value)


class _GitHubStandIn(_GitHttp):
    """git's smart HTTP for ``/<owner>/<repo>.git`` and static tag tarballs for
    ``/<owner>/<repo>/archive/refs/tags/<tag>.tar.gz``: the two ways GitHub serves a repository's releases."""

    archives: Path

    def do_GET(self) -> None:
        if "/archive/refs/tags/" not in self.path:
            return self._cgi()
        path = self.archives / self.path.lstrip("/")
        data = path.read_bytes() if path.is_file() else None
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")
        return None


@pytest.fixture
def github(tmp_path, repo):
    """The repository under /o/demo.git with release tags v1.0 (first commit) and v1.1 (second), a tag that is not
    a release, and each release's tag tarball; yields (base URL, first, second, {tag: sha256})."""
    served, first, second = repo
    bare = served / "o" / "demo.git"
    bare.parent.mkdir()
    (served / "demo.git").rename(bare)
    git(bare, "tag", "v1.0", first)
    git(bare, "tag", "-a", "-m", "release", "v1.1", second)  # annotated: ls-remote peels it to the commit
    git(bare, "tag", "nightly", second)
    tags = served / "o" / "demo" / "archive" / "refs" / "tags"
    tags.mkdir(parents=True)
    shas = {
        t: _tag_tarball(tags / f"{t}.tar.gz", f"demo-{t[1:]}", {"setup.py": f"# {t}\n".encode()})
        for t in ("v1.0", "v1.1")
    }
    handler = type("H", (_GitHubStandIn,), {"root": served, "pushes": [], "archives": served})
    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield url, first, second, shas


def test_drift_proposes_the_newest_release_tag_for_a_git_and_an_archive_source(tmp_path, github):
    url, first, second, shas = github
    index = SimpleNamespace(url="file:///nonexistent", fetcher=Fetcher(indexes=()))  # not asked: no sdist source
    git_recipe = load_recipe(_recipe(tmp_path / "git", f'git = "{url}/o/demo.git"\ncommit = "{first}"'))
    d = drift.compare_recipe(index, git_recipe)
    assert (d.what, d.data, d.detail["commit"], d.detail["tag"]) == ("new-tag", "1.0", second, "v1.1")
    out = tmp_path / "moved.toml"
    drift.write_recipe(index, git_recipe, d, tmp_path / "cache", out=out)
    assert d.status.startswith("written"), d.status
    moved = load_recipe(out.rename(tmp_path / "git" / "demo.toml"))
    assert moved.source == GitPin("demo", "1.1", f"{url}/o/demo.git", second)

    archive = f"{url}/o/demo/archive/refs/tags/v1.0.tar.gz"
    arc_recipe = load_recipe(_recipe(tmp_path / "arc", f'url = "{archive}"\nsha256 = "{shas["v1.0"]}"'))
    d = drift.compare_recipe(index, arc_recipe)
    assert (d.what, d.detail["url"]) == ("new-tag", archive.replace("v1.0", "v1.1"))
    drift.write_recipe(index, arc_recipe, d, tmp_path / "cache", out=out)
    assert d.status.startswith("written"), d.status
    moved = load_recipe(out.rename(tmp_path / "arc" / "demo.toml"))
    # the sha256 is the archive's as fetched: the one the served tarball really has
    assert moved.source == ArchivePin("demo", "1.1", shas["v1.1"], archive.replace("v1.0", "v1.1"))
    # at the newest tag: nothing to propose
    assert drift.compare_recipe(index, moved) is None


def test_an_archive_or_git_pin_is_the_same_product_line_as_the_projects_sdists():
    from builder.facts.spec import SdistPin
    from builder.publishing.index.model import source_line

    sdist = SdistPin("demo", "1.0", "a" * 64).identity
    archive = ArchivePin("demo", "1.1", "b" * 64, "https://example.org/demo/archive/refs/tags/v1.1.tar.gz").identity
    git = GitPin("demo", "1.2", "https://example.org/demo.git", "c" * 40).identity
    assert source_line(sdist) == source_line(archive) == source_line(git) == "sdist:demo"
    assert source_line(GitPin("other", "1.0", "https://example.org/o.git", "c" * 40).identity) != "sdist:demo"


def test_the_index_reads_an_archive_or_git_wheels_sidecar_and_holds_it_to_its_project():
    """The sidecar's ``source`` of a wheel built from an archive or a git pin is an identity the index takes;
    a pin of another project, a short commit or a bare kind are refused, naming the sidecar."""
    from builder.errors import UsageError
    from builder.publishing.index.reader import read_source

    archive = ArchivePin("demo", "1.1", "b" * 64, "https://example.org/demo/archive/refs/tags/v1.1.tar.gz").identity
    git = GitPin("Demo", "1.2", "https://example.org/demo.git", "c" * 40).identity
    for identity in (archive, git):
        assert read_source("w.spec.json", {"source": identity}, "demo") == identity
    for source, says in (
        (archive, "but the wheel is a other wheel"),
        (git, "but the wheel is a other wheel"),
    ):
        with pytest.raises(UsageError, match=says):
            read_source("w.spec.json", {"source": source}, "other")
    for source in (git[:-1], "git:demo==1.2@sha256:" + "c" * 64, "archive:demo==1.1@" + "c" * 40, "archive:x"):
        with pytest.raises(UsageError, match="w.spec.json: 'source' is .*, not a source identity"):
            read_source("w.spec.json", {"source": source}, "demo")


def test_the_doctor_and_the_summary_name_an_archive_or_git_source():
    from builder.verifying import provenance
    from mamba_ssm.doctor import report

    archive = ArchivePin("demo", "1.1", "b" * 64, "https://example.org/demo/archive/refs/tags/v1.1.tar.gz")
    git = GitPin("demo", "1.2", "https://example.org/demo.git", "c" * 40)
    for pin, says in ((archive, f"archive {archive.url} (sha256 bbbbbbbbbbbb)"), (git, f"git {git.url} at cccccccccccc")):
        rec = {"source": pin.provenance(), "id": "i", "inputs_hash": "h", "executor": "host", "platform": "p"}
        assert report._built_from(rec).startswith(says), report._built_from(rec)
        assert provenance.summary(rec).startswith(says)
