"""One name and version, one thing: this checkout's mamba-ssm and upstream's never answer each other's pins.

This checkout's line carries a version upstream's mamba-ssm never published (below its first release), so a pin
of an upstream release, with or without its label, cannot select this checkout's wheel, and a pin of this
checkout's wheel cannot select an upstream release; real pip and uv resolve against indexes served on 127.0.0.1.
The index and the release's split refuse one filename for two files and a recipe wheel named as upstream's own
GitHub release wheels are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib
from conftest import REPO
from indexkit import find_python, isolated_env, make_venv, pip, serve, uv_pip
from packaging.version import Version
from wheelmaker import UPSTREAM_MAMBA, V, make_mamba_wheel, make_recipe_wheel

from builder.commands import cli
from builder.errors import NameCollision
from builder.publishing import release
from builder.publishing.index import build_index

# upstream's sdist pin with its release changed: the same line, another release (its hash is a stand-in's)
UPSTREAM_230 = UPSTREAM_MAMBA.replace("2.3.2.post1", "2.3.0").replace("104c", "204c")
LABEL = "cu12torch2.6cxx11abiFALSE"


def _upstream_versions() -> set[Version]:
    """Every mamba-ssm release of upstream's the farm's data names: the recipe's pin, the recorded PyPI listing,
    the installs record's upstream cells."""
    recipe = tomllib.loads((REPO / "recipes" / "mamba-ssm.toml").read_text())
    found = {Version(recipe["source"]["version"])}
    recording = (REPO / "tests" / "data" / "pypi-recording.json").read_text()
    found |= {Version(v) for v in re.findall(r"mamba_ssm-([0-9][^\"/]*?)\.tar\.gz", recording)}
    cells = json.loads((REPO / "builder" / "data" / "installs.json").read_text())["cells"]
    found |= {Version(k.split(" | ")[0].split()[1]) for k in cells if k.startswith("mamba-ssm ")} - {Version(V)}
    return found


def test_this_checkouts_version_is_below_every_upstream_release():
    """Below, not merely other: an unpinned `mamba-ssm` on indexes holding both lines takes upstream's."""
    ups = _upstream_versions()
    assert len(ups) >= 3, ups
    assert Version(V) not in ups and Version(V) < min(ups) and Version(V) < Version("1.0.1")  # upstream's first


@pytest.fixture
def two_lines(tmp_path):
    """This checkout's index and upstream's, as the release publishes them, served on 127.0.0.1: ours at V,
    upstream's 2.3.0 (the release this checkout's line once shared its number with) for the same variant."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_mamba_wheel(ours, LABEL, "cp311")
    make_recipe_wheel(theirs, "mamba-ssm", "2.3.0", LABEL.lower(), "cp311", source=UPSTREAM_230)
    build_index(ours, tmp_path / "site")
    build_index(theirs, tmp_path / "site" / "upstream")
    with serve(tmp_path / "site") as url:
        yield url


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_pins_of_either_line_never_select_the_other_lines_wheel(two_lines, tmp_path, tool):
    py = find_python("3.11")
    if py is None:
        pytest.skip("no CPython 3.11 here")
    env = isolated_env(tmp_path)
    vpy = make_venv(tmp_path / "venv", py, env)
    key = "cu12-torch2.6-cxx11abiFALSE"
    # a user who adds both lines' pages, as a mixed requirements file would; uv merged as pip merges (its default
    # takes the first index that has the name, which never mixes lines at all)
    indexes = ["--index-url", f"{two_lines}/upstream/{key}/", "--extra-index-url", f"{two_lines}/{key}/"]

    def picked(requirement: str) -> tuple[str, str] | None:
        """(line, version) of what the installer takes: the line is the index its file came from."""
        if tool == "pip":
            proc = pip(vpy, ["install", "--dry-run", "--no-deps", "--quiet", "--report", "-", *indexes, requirement],
                       env, check=False)  # fmt: skip
            if proc.returncode:
                return None
            (item,) = json.loads(proc.stdout)["install"]
            url, version = item["download_info"]["url"], item["metadata"]["version"]
        else:
            (tmp_path / "req.in").write_text(requirement + "\n")
            proc = uv_pip(vpy, ["compile", "--no-deps", "--emit-index-annotation", "--index-strategy",
                                "unsafe-best-match", *indexes, str(tmp_path / "req.in")], env, check=False)  # fmt: skip
            if proc.returncode:
                return None
            version = re.search(r"^mamba-ssm==(\S+)", proc.stdout, re.MULTILINE)[1]
            url = re.search(r"# from (\S+)", proc.stdout)[1]
        return ("upstream" if "/upstream/" in url else "checkout"), version.lower()

    theirs, ours = ("upstream", "2.3.0+cu12torch2.6cxx11abifalse"), ("checkout", f"{V}+cu12torch2.6cxx11abifalse")
    assert picked("mamba-ssm==2.3.0") == theirs  # a paper's pin of upstream's release
    assert picked("mamba-ssm==2.3.0+cu12torch2.6cxx11abiFALSE") == theirs  # ...with upstream's label
    assert picked("mamba-ssm") == theirs  # unpinned: upstream's, never ours
    assert picked("mamba-ssm>=2,<3") == theirs
    assert picked(f"mamba-ssm=={V}") == ours  # ours only where ours is pinned
    assert picked(f"mamba-ssm=={V}+{LABEL}") == ours
    assert picked("mamba-ssm==2.3.0+cputorch2.13cxx11abiTRUE") is None  # no such file: neither line answers


def test_the_index_refuses_a_recipe_wheel_named_as_upstreams_own_release_wheels(tmp_path, capsys):
    out = tmp_path / "index"
    good = tmp_path / "good"
    make_recipe_wheel(good, "mamba-ssm", "2.3.0", LABEL.lower(), source=UPSTREAM_230)
    build_index(good, out)
    before = (out / "manifest.json").read_bytes()
    bad = tmp_path / "bad"  # not repaired: upstream's GitHub release could hold other bytes under this name
    make_recipe_wheel(bad, "mamba-ssm", "2.3.0", LABEL.lower(), "cp312", source=UPSTREAM_230, platform="linux_x86_64")
    code = cli.main(["index", "--wheels", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == NameCollision.exit_code == 19
    assert "mamba_ssm-2.3.0+cu12torch2.6cxx11abifalse-cp312-cp312-linux_x86_64.whl" in err
    assert "upstream's own release wheels" in err and UPSTREAM_230 in err and "Traceback" not in err
    assert (out / "manifest.json").read_bytes() == before
    # this checkout's wheels are not upstream's line: their linux_* tags name no file of upstream's
    make_mamba_wheel(tmp_path / "ours", LABEL, "cp311")
    assert build_index(tmp_path / "ours", tmp_path / "ours-index").files == 1


def _sidecar(whl: Path, source: str) -> Path:
    Path(f"{whl}.spec.json").write_text(json.dumps({"id": whl.name, "serves": [], "source": source}))
    return whl


def test_split_refuses_one_filename_in_two_lines(tmp_path):
    """A checkout build made at upstream's version would share a release's asset name with upstream's build."""
    a = tmp_path / "artifacts"
    _sidecar(make_recipe_wheel(a / "up", "mamba-ssm", "2.3.0", LABEL.lower(), source=UPSTREAM_230), UPSTREAM_230)
    _sidecar(make_recipe_wheel(a / "mine", "mamba-ssm", "2.3.0", LABEL.lower()), "checkout")  # the same name
    with pytest.raises(NameCollision, match="in two product lines") as err:
        release.split(a, tmp_path / "lines")
    assert "this repository's checkout" in str(err.value) and UPSTREAM_230 in str(err.value)
