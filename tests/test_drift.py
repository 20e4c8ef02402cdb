"""``python -m builder drift`` against a recorded copy of PyPI's answers, served on 127.0.0.1.

``tests/data/pypi-recording.json`` holds the listings, METADATA and sdists the command reads
(``python tests/test_drift.py --record`` makes it again). The server offers PEP 658 files for most wheels
and real small zips for others, so the ranged-read path runs too; whole-wheel downloads must stay 0. The
last test runs once against the real index, informative only.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import tomlkit
import tomllib
from conftest import REPO
from hostilekit import drip
from indexkit import running
from packaging.specifiers import SpecifierSet

from builder.facts.spec import ArchivePin, GitPin
from builder.planning.recipes import load_recipe

RECORDING = REPO / "tests" / "data" / "pypi-recording.json"
DRIFT_EXIT, PATCH_EXIT = 13, 10
RANGED = "2.15.0"  # the release whose wheels are served as zips without a .metadata file


def _wheel(filename: str, metadata: str) -> bytes:
    """A real zip laid out like a wheel: METADATA first, then 1 MB of incompressible payload."""
    name, version = filename.split("-")[:2]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
        zf.writestr(f"{name}/_payload.bin", hashlib.shake_256(filename.encode()).digest(1 << 20))
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "")
    return buf.getvalue()


def _sdist(name: str, version: str, files: dict[str, str]) -> bytes:
    """An sdist holding FILES (path inside the sdist -> text) and a PKG-INFO."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        members = {**files, "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        for rel, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _recipe_files(recipe_path: Path, drop: str | None = None) -> dict[str, str]:
    """Each file the recipe's patches edit, holding every text they search for (as many times as each expects),
    less the edit whose search starts with ``drop``: the shape an upstream release that changed one line has."""
    doc = tomlkit.parse(recipe_path.read_text()).unwrap()
    files: dict[str, list[str]] = {"setup.py": ["from setuptools import setup\n"]}
    for patch in doc["patch"]:
        era = patch.get("when", {}).get("release")
        if era and not SpecifierSet(era).contains(doc["source"]["version"]):
            continue  # an older release's patch: its era's text is not the newest release's
        for edit in patch["edit"]:
            if drop and edit["search"].strip().startswith(drop):
                continue
            files.setdefault(patch["file"], []).extend([edit["search"]] * edit.get("count", 1))
    return {rel: "\n".join(parts) for rel, parts in files.items()}


class _Recorded:
    """The recording as routes (path -> (content type, bytes)), with edits a case makes."""

    def __init__(self) -> None:
        rec = json.loads(RECORDING.read_text())
        self.projects: dict[str, list[dict]] = rec["projects"]
        self.metadata: dict[str, str] = rec["metadata"]
        self.blobs: dict[str, bytes] = {}

    def add_release(self, project: str, old: str, new: str, day: str) -> None:
        """A patch release: every file of OLD again under NEW (same metadata, new upload day)."""
        for f in [f for f in self.projects[project] if f"-{old}-" in f["filename"]]:
            g = copy.deepcopy(f)
            g["filename"] = f["filename"].replace(f"-{old}-", f"-{new}-")
            g["url"] = f["url"].replace(f"-{old}-", f"-{new}-")
            g["upload-time"] = f"{day}T12:00:00Z"
            g["hashes"] = {"sha256": hashlib.sha256(g["filename"].encode()).hexdigest()}
            self.projects[project].append(g)
            if f["filename"] in self.metadata:
                self.metadata[g["filename"]] = self.metadata[f["filename"]].replace(
                    f"Version: {old}", f"Version: {new}"
                )

    def add_sdist(self, project: str, filename: str, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[filename] = data
        self.projects[project].append({
            "filename": filename, "url": f"../../files/{filename}", "hashes": {"sha256": sha}, "size": len(data),
            "requires-python": None, "upload-time": "2026-12-01T00:00:00Z", "yanked": False,
        })  # fmt: skip
        return sha

    def routes(self) -> dict[str, tuple[str, bytes]]:
        out: dict[str, tuple[str, bytes]] = {}
        for project, files in self.projects.items():
            listed = []
            for f in files:
                f = dict(f)
                meta = self.metadata.get(f["filename"])
                if meta is not None and f"-{RANGED}-" in f["filename"]:
                    blob = _wheel(f["filename"], meta)
                    f["size"] = len(blob)
                    out[f"/files/{f['filename']}"] = ("application/zip", blob)
                elif meta is not None:
                    f["core-metadata"] = {"sha256": hashlib.sha256(meta.encode()).hexdigest()}
                    out[f"/files/{f['filename']}.metadata"] = ("text/plain", meta.encode())
                if f["filename"] in self.blobs:
                    out[f"/files/{f['filename']}"] = ("application/gzip", self.blobs[f["filename"]])
                listed.append(f)
            body = {"meta": {"api-version": "1.1"}, "name": project, "files": listed}
            out[f"/simple/{project}/"] = ("application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
        return out


@contextmanager
def serve(recorded: _Recorded, *, honour_ranges: bool = True):
    routes = recorded.routes()
    seen = {"whole_wheels": 0, "wheel_bytes": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path not in routes:
                self.send_error(404)
                return
            ctype, body = routes[self.path]
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            if m and honour_ranges:
                start, end = int(m.group(1)), min(int(m.group(2)), len(body) - 1)
                part = body[start : end + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
            else:
                part = body
                self.send_response(200)
                if self.path.endswith(".whl"):
                    seen["whole_wheels"] += 1
            if self.path.endswith(".whl"):
                seen["wheel_bytes"] += len(part)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            self.wfile.write(part)

    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield f"{url}/simple", seen


def recipe_without_github_tags(path: Path) -> str:
    """A recipe's text as drift may read it here. No test reaches GitHub, and drift would list a tag archive's
    repository there: its URL loses the tag layout, so drift has no releases to list and leaves it be
    (tests/test_source_kinds.py serves a stand-in for GitHub's tags and archives to test that drift)."""
    text, source = path.read_text(), load_recipe(path).source
    if isinstance(source, ArchivePin) and "/archive/refs/tags/" in source.url:
        assert text.count(source.url) == 1, path
        text = text.replace(source.url, source.url.replace("/archive/refs/tags/", "/archive/"))
    assert not isinstance(source, GitPin), f"{path}: a git source's drift needs a stand-in for its repository here"
    if load_recipe(path).canary is not None:  # its branch's head is on GitHub: tests/test_canary.py serves a stand-in
        head, _, rest = text.partition("\n[canary]\n")
        lines = rest.splitlines(keepends=True)
        while lines and not lines[0].startswith("["):
            lines.pop(0)
        text = head + "\n" + "".join(lines)
    return text


def matrix_without_canary(text: str) -> str:
    """matrix.toml's text less its canary profiles (``source = "canary"``), whose recipes' [canary] pins
    recipe_without_github_tags leaves out: drift --write plans every profile of what it writes."""
    head, *blocks = text.split("\n[")
    kept = [b for b in blocks if not (b.startswith("profiles.") and '\nsource = "canary"\n' in b)]
    return "\n[".join([head, *kept])


@pytest.fixture
def farm(tmp_path):
    """Copies of the data, matrix and recipes the command may write, and an empty farm cache."""
    (tmp_path / "recipes").mkdir()
    for p in (REPO / "recipes").glob("*.toml"):
        text = recipe_without_github_tags(p)
        (tmp_path / "recipes" / p.name).write_text(text)
    shutil.copy(REPO / "builder" / "data" / "torch.toml", tmp_path / "torch.toml")
    (tmp_path / "matrix.toml").write_text(matrix_without_canary((REPO / "matrix.toml").read_text()))
    (tmp_path / "mamba_ssm").mkdir()  # the version file the matrix names: --write plans from what it writes
    shutil.copy(REPO / "mamba_ssm" / "__init__.py", tmp_path / "mamba_ssm" / "__init__.py")
    return tmp_path


def drift(farm: Path, index: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "builder", "drift", "--index", index, "--torch-data", str(farm / "torch.toml"),
           "--matrix", str(farm / "matrix.toml"), "--recipes", str(farm / "recipes"), "--cache", str(farm / "cache"),
           *extra]  # fmt: skip
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"))
    }
    return subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)


def changed(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    return ([ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")],
            [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")])  # fmt: skip


def _table_rows(out: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", ln.strip()) for ln in out.splitlines()[1:] if ln.strip()]


def test_new_minor_is_reported_and_written_as_a_row_and_a_torch_axis_value(farm):
    doc = tomlkit.parse((farm / "torch.toml").read_text())
    del doc["torch"]["2.15"]
    (farm / "torch.toml").write_text(tomlkit.dumps(doc))
    matrix = tomlkit.parse((farm / "matrix.toml").read_text())
    matrix["axes"]["torch"].remove("2.15")
    (farm / "matrix.toml").write_text(tomlkit.dumps(matrix))
    before, matrix_before = (farm / "torch.toml").read_text(), (farm / "matrix.toml").read_text()
    with serve(_Recorded()) as (index, seen):
        report = drift(farm, index)
        assert report.returncode == DRIFT_EXIT, report.stderr
        rows = _table_rows(report.stdout)
        assert rows == [["torch 2.15", "new-minor", "-",
                         "2.15.0 (py3.11-3.15; x86_64 cu132, aarch64 cu132; released 2026-10-28)"]], report.stdout  # fmt: skip
        assert (farm / "torch.toml").read_text() == before  # no --write: nothing written
        wrote = drift(farm, index, "--write")
        assert wrote.returncode == DRIFT_EXIT and wrote.stdout.splitlines()[1].rstrip().endswith("written"), (
            wrote.stdout
        )
        again = drift(farm, index)
        assert (seen["whole_wheels"], again.returncode) == (0, 0), again.stdout + again.stderr
        assert again.stdout.startswith(
            "no drift (torch 2.8..2.15, causal-conv1d 1.7.0, fast-hadamard-transform 1.1.0, mamba-ssm 2.3.2.post1;"
        )
        assert 0 < seen["wheel_bytes"] < 2 * 2 * (1 << 20)  # ranges of the two 2.15 wheels, not the wheels
    removed, added = changed(before, (farm / "torch.toml").read_text())
    added = [ln for ln in added if ln]
    assert removed == [] and added[0] == '[torch."2.15"]'
    assert added[1].startswith("# read from PyPI on ") and "(released 2026-10-28)" in added[1]
    assert added[3:] == [
        'latest = "2.15.0"',
        'released = "2026-10-28"',
        'python = ["3.11", "3.15"]',
        'cuda = ["13.2"]',
        'cuda_aarch64 = ["13.2"]',
        "rocm = []",
        'pypi = { linux_x86_64 = "cu132", linux_aarch64 = "cu132" }',
        "cxx11abi = [true]  # as the minor before (not in the metadata)",
        'glibc = { linux_x86_64 = "2.28", linux_aarch64 = "2.28" }',
    ]
    m_removed, m_added = changed(matrix_before, (farm / "matrix.toml").read_text())
    assert [m_removed, m_added] == [[m_removed[0]], [m_removed[0][:-1] + ', "2.15"]']]
    assert m_removed[0].startswith("torch = [") and '"2.15"' not in m_removed[0]


def test_an_older_minor_than_every_row_is_written_first_and_joins_the_release_axis_alone(tmp_path):
    """--since below the oldest row: the older minor's row goes before every row (its legacy-tagged glibc and its ABI
    as the minor after, each said so), and its minor joins matrix.toml's [releases] torch, never [axes] torch."""
    from builder.upkeep.drift import TorchRelease, compare_torch, write_release_axis, write_torch

    torch_toml, matrix_toml = tmp_path / "torch.toml", tmp_path / "matrix.toml"
    shutil.copy(REPO / "builder" / "data" / "torch.toml", torch_toml)
    doc = tomlkit.parse(torch_toml.read_text())
    oldest = min(doc["torch"], key=lambda m: tuple(map(int, m.split("."))))
    row = doc["torch"][oldest]
    del doc["torch"][oldest]
    torch_toml.write_text(tomlkit.dumps(doc))
    facts = {oldest: TorchRelease(oldest, row["latest"], tuple(row["python"]), dict(row["pypi"]), {}, "2022-12-15",
                                  row["released"], {"linux_x86_64": "2.5", "linux_aarch64": "2.17"})}  # fmt: skip
    data = tomllib.loads(torch_toml.read_text())["torch"]
    drifts = compare_torch(data, facts)
    assert [(d.subject, d.what, d.detail.get("older")) for d in drifts] == [(f"torch {oldest}", "new-minor", True)]
    write_torch(torch_toml, drifts, facts, "2026-12-07")
    text = torch_toml.read_text()
    written = tomllib.loads(text)["torch"]
    assert next(iter(written)) == oldest and written[oldest]["released"] == row["released"]
    after = written[list(written)[1]]
    assert written[oldest]["glibc"] == after["glibc"] and written[oldest]["cxx11abi"] == after["cxx11abi"]
    assert "legacy manylinux tags alone (aarch64 2.17, x86_64 2.5): as the minor after" in text
    assert f'\n\n[torch."{list(written)[1]}"]' in text  # a blank line between the rows
    matrix_toml.write_text((REPO / "matrix.toml").read_text())
    axes_before = tomllib.loads(matrix_toml.read_text())["axes"]["torch"]
    write_release_axis(matrix_toml, [oldest])
    matrix = tomllib.loads(matrix_toml.read_text())
    assert matrix["axes"]["torch"] == axes_before
    assert matrix["releases"]["torch"][0] == oldest and matrix["releases"]["torch"].count(oldest) == 1


def test_a_python_torch_ships_but_the_axis_lacks_is_drift_and_written_and_the_reverse_reported(farm):
    """torch 2.9..2.14 ship cp314 and 2.15 cp315 (the index's facts, the data's rows for the rest): an axis that
    stops at 3.13 drifts, same table and exit code; --write puts them back in order. An axis Python no torch
    ships is reported and left alone."""
    text = (farm / "matrix.toml").read_text()
    axis = re.search(r"^python = \[.*\]$", text, re.MULTILINE).group(0)
    assert axis == 'python = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]'
    (farm / "matrix.toml").write_text(text.replace(axis, 'python = ["3.10", "3.11", "3.12", "3.13", "3.16"]', 1))
    with serve(_Recorded()) as (index, _seen):
        report = drift(farm, index, "--no-recipes")
        assert report.returncode == DRIFT_EXIT, report.stderr
        assert _table_rows(report.stdout) == [
            ["python 3.14", "python-axis", "axis 3.10..3.16", "torch 2.9..2.15 ship cp314"],
            ["python 3.15", "python-axis", "axis 3.10..3.16", "torch 2.15..2.15 ship cp315"],
            ["python 3.16", "python-unshipped", "axis 3.10..3.16", "no torch 2.4..2.15 ships it"],
        ], report.stdout
        # a matrix naming a Python no torch ships does not load (matrix.py refuses it): --write, which proves the
        # data it writes with the farm's own loaders, writes nothing (exit 16) and says which file
        refused = drift(farm, index, "--no-recipes", "--write")
        assert refused.returncode == 16 and "Python 3.16 has no torch wheels" in refused.stderr, refused.stderr
        assert "3.16" in (farm / "matrix.toml").read_text()  # untouched
    (farm / "matrix.toml").write_text(text.replace(axis, 'python = ["3.10", "3.11", "3.12", "3.13"]', 1))
    with serve(_Recorded()) as (index, _seen):
        wrote = drift(farm, index, "--no-recipes", "--write")
        assert wrote.returncode == DRIFT_EXIT
        assert [r[-1] for r in _table_rows(wrote.stdout)] == ["written", "written"], wrote.stdout
        assert re.search(r"^python = \[.*\]$", (farm / "matrix.toml").read_text(), re.MULTILINE).group(0) == axis
        again = drift(farm, index, "--no-recipes")
        assert again.returncode == 0 and not _table_rows(again.stdout), again.stdout
    # the default matrix itself has no Python drift
    (farm / "matrix.toml").write_text(text)
    with serve(_Recorded()) as (index, _seen):
        assert drift(farm, index, "--no-recipes").returncode == 0


def test_new_patch_release_moves_latest_and_keeps_the_comments(farm):
    recorded = _Recorded()
    recorded.add_release("torch", "2.15.0", "2.15.1", "2026-11-25")
    before = (farm / "torch.toml").read_text()
    with serve(recorded) as (index, seen):
        report = drift(farm, index, "--no-recipes")
        assert report.returncode == DRIFT_EXIT, report.stderr
        assert _table_rows(report.stdout) == [["torch 2.15", "new-patch", "2.15.0", "2.15.1 (released 2026-11-25)"]]
        assert drift(farm, index, "--no-recipes", "--write").returncode == DRIFT_EXIT
        assert drift(farm, index, "--no-recipes").returncode == 0
        assert seen["whole_wheels"] == 0
    removed, added = changed(before, (farm / "torch.toml").read_text())
    assert (removed, added) == (['latest = "2.15.0"'], ['latest = "2.15.1"'])
    assert "# read from PyPI on 2026-12-01 by `python -m builder drift --write`" in before  # the comments stayed


def test_new_recipe_sdist_whose_patch_no_longer_applies_keeps_the_pin_and_names_the_patch(farm):
    recorded = _Recorded()
    recipe = farm / "recipes" / "causal-conv1d.toml"
    files = _recipe_files(recipe, drop='"cxx": ["-O3"],')
    sha = recorded.add_sdist("causal-conv1d", "causal_conv1d-1.7.1.tar.gz", _sdist("causal_conv1d", "1.7.1", files))
    before = recipe.read_text()
    with serve(recorded) as (index, _):
        report = drift(farm, index, "--since", "2.15")
        assert report.returncode == DRIFT_EXIT, report.stderr
        assert _table_rows(report.stdout) == [["causal-conv1d", "new-sdist", "1.7.0", f"1.7.1 sha256 {sha[:12]}…"]]
        wrote = drift(farm, index, "--since", "2.15", "--write")
    assert wrote.returncode == PATCH_EXIT, wrote.stdout + wrote.stderr
    row = _table_rows(wrote.stdout)[0]
    assert row[:4] == ["causal-conv1d", "new-sdist", "1.7.0", f"1.7.1 sha256 {sha[:12]}…"]
    assert "not written:" in row[4] and "patch 'cxx20' no longer applies to setup.py: edit #2" in row[4]
    assert recipe.read_text() == before  # the pin stays


def test_new_recipe_sdist_whose_patches_apply_moves_the_pin(farm):
    recorded = _Recorded()
    recipe = farm / "recipes" / "causal-conv1d.toml"
    sha = recorded.add_sdist("causal-conv1d", "causal_conv1d-1.7.1.tar.gz",
                             _sdist("causal_conv1d", "1.7.1", _recipe_files(recipe)))  # fmt: skip
    before = recipe.read_text()
    with serve(recorded) as (index, _):
        wrote = drift(farm, index, "--since", "2.15", "--write")
        assert wrote.returncode == DRIFT_EXIT, wrote.stdout + wrote.stderr
        patches = len(tomlkit.parse(recipe.read_text()).unwrap()["patch"])
        assert f"written (all {patches} patches apply)" in wrote.stdout
        assert drift(farm, index, "--since", "2.15").returncode == 0
    removed, added = changed(before, recipe.read_text())
    assert removed == [
        'version = "1.7.0"',
        'sha256 = "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"',
    ]
    # [source] moves, and the release it now builds is one of the [[release]] tables, as the loader demands
    assert added[:2] == ['version = "1.7.1"', f'sha256 = "{sha}"']
    assert [ln for ln in added[2:] if ln] == ["[[release]]", 'version = "1.7.1"', f'sha256 = "{sha}"',
                                              'uploaded = "2026-12-01"'], added  # fmt: skip
    assert (farm / "cache" / "sdists" / sha / "causal_conv1d-1.7.1.tar.gz").is_file()  # fetched, hash checked


def test_a_release_the_recipe_lacks_is_drift_and_written_as_a_release_table_in_its_place(farm):
    """PyPI gains a post-release of an older line: [source] stays, [[release]] gains it, oldest first; a moved pin
    (test above) adds its own [[release]] too, or the recipe would not load."""
    recorded = _Recorded()
    recipe = farm / "recipes" / "causal-conv1d.toml"
    sha = recorded.add_sdist("causal-conv1d", "causal_conv1d-1.6.1.post9.tar.gz",
                             _sdist("causal_conv1d", "1.6.1.post9", _recipe_files(recipe)))  # fmt: skip
    before = recipe.read_text()
    with serve(recorded) as (index, _):
        report = drift(farm, index, "--since", "2.15")
        assert report.returncode == DRIFT_EXIT, report.stderr
        assert _table_rows(report.stdout) == [["causal-conv1d", "new-releases", "22 releases", "+1.6.1.post9"]]
        wrote = drift(farm, index, "--since", "2.15", "--write")
        assert wrote.returncode == DRIFT_EXIT, wrote.stdout + wrote.stderr
        assert "written (1 [[release]] table(s) added)" in wrote.stdout
        assert drift(farm, index, "--since", "2.15").returncode == 0
    removed, added = changed(before, recipe.read_text())
    assert removed == [] and {'version = "1.6.1.post9"', f'sha256 = "{sha}"', 'uploaded = "2026-12-01"'} <= set(added)
    rel = next(r for r in load_recipe(recipe).releases if r.version == "1.6.1.post9")
    assert (rel.sha256, rel.uploaded) == (sha, "2026-12-01")
    versions = [r.version for r in load_recipe(recipe).releases]
    assert versions.index("1.6.1.post9") == versions.index("1.6.1") + 1  # in its place, oldest first
    assert load_recipe(recipe).source.version == "1.7.0"


def test_a_server_that_ignores_ranges_is_refused_not_downloaded(farm):
    with serve(_Recorded(), honour_ranges=False) as (index, seen):
        report = drift(farm, index, "--since", "2.15", "--no-recipes")
    assert report.returncode == 9 and "ignores range requests" in report.stderr and "Traceback" not in report.stderr
    assert seen["whole_wheels"] == 1  # the first 200 answer ends the run: no second wheel is asked for


def test_bad_input_is_one_line_and_an_exit_code(farm):
    (farm / "torch.toml").write_text("[torch\n")
    report = drift(farm, "http://127.0.0.1:9/simple")
    assert report.returncode == 2 and "not valid TOML" in report.stderr and "Traceback" not in report.stderr
    report = drift(farm, "file:///opt/pypi/simple")
    assert report.returncode == 9 and "HTTP(S) index" in report.stderr


def test_live_index_informative_only(farm, capsys):
    """Informative only: the real index (through this host's pip settings) on the day the suite runs.
    Drift there is news, not a failure: the test passes on 0 (none) and 13 (drift) alike and prints the table."""
    from builder.sourcing.sources import Fetcher

    index = Fetcher.from_host().indexes[0]
    if not index.startswith("http"):
        pytest.skip(f"the host's index is {index}, not an HTTP index")
    report = drift(farm, index, "--since", "2.14")
    if report.returncode == 9:
        pytest.skip(f"the index is unreachable from here: {report.stderr.strip()[:200]}")
    with capsys.disabled():
        print(f"\n[informative only] builder drift against {index}:\n{report.stdout}{report.stderr}")
    assert report.returncode in (0, DRIFT_EXIT), report.stdout + report.stderr


def _record() -> None:
    """Re-make the recording from the live index (what the tests above serve)."""
    import datetime

    sys.path.insert(0, str(REPO))
    from builder.facts.compat import vtuple
    from builder.sourcing.pypi import SimpleIndex

    ix = SimpleIndex()
    keep = {"2.8.0", "2.13.0", "2.14.0", "2.14.1", "2.15.0"}
    files = [f for f in ix.files("torch") if f.version is not None and str(f.version) in keep
             and (f.linux_platforms() or f.filename.endswith("macosx_14_0_arm64.whl"))]  # fmt: skip
    chosen: dict = {}
    for f in files:
        for plat in f.linux_platforms():
            key = (str(f.version), plat)
            if f.cpython() and (key not in chosen or vtuple(f.cpython()) < vtuple(chosen[key].cpython())):
                chosen[key] = f
    rec: dict = {"recorded": datetime.date.today().isoformat(), "index": ix.url, "projects": {}, "metadata": {}}
    for f in chosen.values():
        msg = ix.metadata(f)
        lines = [f"{k}: {msg[k]}" for k in ("Metadata-Version", "Name", "Version", "Requires-Python") if msg[k]]
        rec["metadata"][f.filename] = (
            "\n".join(lines + [f"Requires-Dist: {r}" for r in msg.get_all("Requires-Dist") or []]) + "\n"
        )

    def entry(f):
        return {"filename": f.filename, "url": f"../../files/{f.filename}", "hashes": {"sha256": f.sha256},
                "size": f.size, "requires-python": f.requires_python, "upload-time": f.upload_time, "yanked": False}  # fmt: skip

    rec["projects"]["torch"] = [entry(f) for f in files]
    for p in ("causal-conv1d", "mamba-ssm"):
        rec["projects"][p] = [entry(f) for f in ix.files(p) if f.filename.endswith(".tar.gz")][-3:]
    RECORDING.write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    _record()


def test_the_drift_exit_code_is_no_errors_code():
    """drift.yml reads 'drift, all written' from DRIFT_EXIT alone: if a FarmError shared it (an unsafe new
    sdist, UnsafeArchiveError, once did: 11), a hostile upstream release would read as plain drift."""
    import inspect

    from builder import errors
    from builder.upkeep import drift as drift_mod

    codes = {
        cls.__name__: cls.exit_code
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.FarmError)
    }
    assert drift_mod.DRIFT_EXIT not in codes.values(), codes
    assert drift_mod.DRIFT_EXIT == DRIFT_EXIT


# --- a hostile index (the hostile-input rules hold for the drift check too: it reads listings people can publish) ---


def test_a_listing_that_links_a_local_file_reads_nothing_of_this_host(farm, tmp_path):
    """A remote listing naming ``file://`` URLs must not make the check read this host's files."""
    secret = tmp_path / "secret.whl"
    secret.write_bytes(b"not for the index")
    (tmp_path / "secret.whl.metadata").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n")
    recorded = _Recorded()
    for f in recorded.projects["torch"]:
        if "-2.15.0-" in f["filename"]:
            f["url"] = secret.as_uri()
            f["core-metadata"] = True
    with serve(recorded) as (index, _):
        report = drift(farm, index, "--since", "2.15", "--no-recipes")
    assert report.returncode == 9, report.stdout + report.stderr
    assert "not an http(s) URL" in report.stderr and "Traceback" not in report.stderr


@pytest.mark.parametrize("where", ["metadata-file", "zip-member"])
def test_an_oversized_metadata_is_refused_before_it_is_read(farm, where):
    recorded = _Recorded()
    release = "2.14.1" if where == "metadata-file" else RANGED
    huge = "Metadata-Version: 2.1\nName: torch\nVersion: 0\n" + "X" * (17 << 20)
    for name in [n for n in recorded.metadata if f"-{release}-" in n]:
        recorded.metadata[name] = huge
    with serve(recorded) as (index, seen):
        report = drift(farm, index, "--since", release.rsplit(".", 1)[0], "--no-recipes")
    assert report.returncode == 9, report.stdout + report.stderr
    assert "MiB" in report.stderr and "Traceback" not in report.stderr
    assert seen["whole_wheels"] == 0


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "local-file", "upper-hex"])
def test_a_listed_sha256_names_a_cache_file_only_as_64_hex_digits(farm, kind):
    """The listing's sha256 became a file name in the metadata cache unchecked: an absolute path or ``..`` wrote
    a file the index chose outside --cache (and made its folders); a name hitting a local file was read as the
    wheel's METADATA. Now: refused before anything is read or written."""
    outside = farm / "outside"
    victim = farm / "victim.METADATA"
    victim.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\nRequires-Dist: cuda-toolkit==99.9\n")
    value = {"absolute": str(outside / "deep" / "x"), "dotdot": "../outside/x", "local-file": "../victim",
             "upper-hex": "A" * 64}[kind]  # fmt: skip
    recorded = _Recorded()
    for f in recorded.projects["torch"]:
        if "-2.14.1-" in f["filename"]:
            f["hashes"] = {"sha256": value}
    before = {p: p.read_bytes() for p in farm.rglob("*") if p.is_file()}
    with serve(recorded) as (index, _):
        report = drift(farm, index, "--since", "2.14", "--no-recipes")
    assert report.returncode == 9, report.stdout + report.stderr
    assert "is not 64 lowercase hex digits" in report.stderr and "Traceback" not in report.stderr
    assert not outside.exists() and "99.9" not in report.stdout
    after = {p for p in farm.rglob("*") if p.is_file() and not p.is_relative_to(farm / "cache")}
    assert after == {p for p in before if not p.is_relative_to(farm / "cache")}
    assert all(p.read_bytes() == before[p] for p in after)


def _without_2_15(farm: Path) -> None:
    doc = tomlkit.parse((farm / "torch.toml").read_text())
    del doc["torch"]["2.15"]
    (farm / "torch.toml").write_text(tomlkit.dumps(doc))
    matrix = tomlkit.parse((farm / "matrix.toml").read_text())
    matrix["axes"]["torch"].remove("2.15")
    (farm / "matrix.toml").write_text(tomlkit.dumps(matrix))


def test_write_takes_only_a_date_from_an_upload_time_and_plans_what_it_wrote(farm, cli):
    """Control characters from an upload time went into a TOML comment; now only its date is data."""
    _without_2_15(farm)
    recorded = _Recorded()
    for f in recorded.projects["torch"]:
        if "-2.15.0-" in f["filename"]:
            f["upload-time"] = "2026-10-28\x1b[2J\n[evil]\rinstall: curl x|sh\u202e"
    with serve(recorded) as (index, _):
        wrote = drift(farm, index, "--write", "--no-recipes")
    assert wrote.returncode == DRIFT_EXIT, wrote.stdout + wrote.stderr
    text = (farm / "torch.toml").read_text()
    assert "(released 2026-10-28)" in text and "\x1b" not in text and "evil" not in text and "\u202e" not in text
    assert "\x1b" not in wrote.stdout + wrote.stderr
    import tomllib

    tomllib.loads(text)  # what was written loads, and plans
    assert cli("plan", "--matrix", farm / "matrix.toml", timeout=120).returncode == 0


def test_an_arbitrary_equality_cuda_pin_is_refused_and_nothing_is_written(farm):
    """``===13.0x.y`` became the CUDA version "130.x" and `builder plan` died on it."""
    _without_2_15(farm)
    before = {p.name: p.read_bytes() for p in farm.glob("*.toml")}
    recorded = _Recorded()
    for name in [n for n in recorded.metadata if "-2.15.0-" in n]:
        recorded.metadata[name] = re.sub(r"==13\.2\.2", "===13.0x.y", recorded.metadata[name])
    with serve(recorded) as (index, _):
        wrote = drift(farm, index, "--write", "--no-recipes")
    assert wrote.returncode == 9, wrote.stdout + wrote.stderr
    assert "'13.0x.y' is not a CUDA version" in wrote.stderr and "Traceback" not in wrote.stderr
    assert {p.name: p.read_bytes() for p in farm.glob("*.toml")} == before


def test_write_proves_its_data_loads_and_plans_before_it_replaces_a_file(farm, cli):
    """The proof itself: a staged edit the farm's loaders refuse (a CUDA list the plan cannot take) is never
    written, whatever the reason it got there; a good one replaces the file atomically and plans."""
    from builder.errors import UnprovenWrite
    from builder.upkeep import drift as drift_mod

    before = (farm / "torch.toml").read_bytes()
    staged = drift_mod.Staged()
    copy = staged[farm / "torch.toml"]
    doc = tomlkit.parse(copy.read_text())
    doc["torch"]["2.15"]["cuda"] = ["130.x"]
    copy.write_text(tomlkit.dumps(doc))
    with pytest.raises(UnprovenWrite, match="nothing written"):
        drift_mod.prove(staged, farm / "torch.toml", farm / "matrix.toml", {})
    staged.discard()
    assert (farm / "torch.toml").read_bytes() == before and sorted(
        p.name for p in farm.iterdir() if p.name.startswith(".")
    ) == []
    staged = drift_mod.Staged()
    copy = staged[farm / "torch.toml"]
    copy.write_text(before.decode().replace('latest = "2.15.0"', 'latest = "2.15.1"'))
    drift_mod.prove(staged, farm / "torch.toml", farm / "matrix.toml", {})
    staged.commit()
    assert 'latest = "2.15.1"' in (farm / "torch.toml").read_text()
    assert cli("plan", "--matrix", farm / "matrix.toml", timeout=120).returncode == 0


def test_a_listing_of_100000_minors_costs_bounded_requests(farm):
    recorded = _Recorded()
    template = next(
        f for f in recorded.projects["torch"] if "-2.15.0-cp311-cp311-manylinux_2_28_x86_64" in f["filename"]
    )
    for minor in range(16, 100_016):
        g = dict(template, filename=template["filename"].replace("2.15.0", f"2.{minor}.0"),
                 url=template["url"].replace("2.15.0", f"2.{minor}.0"))  # fmt: skip
        recorded.projects["torch"].append(g)
    with serve(recorded) as (index, _):
        report = drift(farm, index, "--no-recipes", "--format", "json")
    assert report.returncode == 9, report.stdout[-2000:] + report.stderr
    assert "names 100008 torch minors" in report.stderr or "torch minors from" in report.stderr, report.stderr
    assert "Traceback" not in report.stderr


def test_a_server_that_trickles_a_byte_every_2_s_ends_at_the_request_deadline(farm):
    """The socket timeout never trips on a byte every 2 s: only an overall deadline per request ends it."""
    import time

    class Trickle(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.pypi.simple.v1+json\r\n\r\n")
            drip(self.wfile, b" ", 60, 2)

    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)) as url:
        env = {**os.environ, "MAMBA_FARM_REQUEST_DEADLINE": "5"}
        cmd = [sys.executable, "-m", "builder", "drift", "--index", f"{url}/simple", "--torch-data",
               str(farm / "torch.toml"), "--no-recipes", "--cache", str(farm / "cache")]  # fmt: skip
        start = time.monotonic()
        report = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
        took = time.monotonic() - start
    assert report.returncode == 9 and "no answer within 5 s" in report.stderr, report.stderr
    assert took < 20 and "Traceback" not in report.stderr
