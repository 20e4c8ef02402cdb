"""Builds planned but built on request: a profile's ``on_request`` (data in matrix.toml) marks them
(``BuildSpec.on_request``), ``plan --format github`` leaves them out of a tag's release unless asked for
(``--on-request``, ``--only``; release.yml's on-request input), and the coverage page lists their cells "on
request" with the command that asks for each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.commands import cli
from builder.errors import MatrixError
from builder.facts.paths import REPO
from builder.planning.plan import load_plan, summary
from builder.publishing import coverage

ASKED = 'on_request = [{ projects = ["checkout"], torch = ["2.4", "2.5"] }]'


def _matrix(tmp_path: Path, on_request: str = ASKED) -> Path:
    """matrix.toml with its release profile building this checkout only and leaving ON_REQUEST to a request."""
    text = (REPO / "matrix.toml").read_text()
    pkg = tmp_path / "pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text((REPO / "mamba_ssm" / "__init__.py").read_text())
    old = 'projects = ["checkout", "causal-conv1d", "mamba-ssm"]'
    assert text.count(old) == 1
    text = text.replace(old, f'projects = ["checkout"]\n{on_request}')
    text = text.replace('version_file = "mamba_ssm/__init__.py"', 'version_file = "pkg/__init__.py"')
    text = text.replace('sources = ["csrc", "setup.py", "mamba_ssm"]', 'sources = ["pkg"]')
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def test_a_profiles_on_request_marks_exactly_the_builds_it_names(tmp_path):
    plan = load_plan(_matrix(tmp_path), "release")
    asked = [b for b in plan.builds if b.on_request]
    assert asked and all(b.torch in ("2.4", "2.5") and not b.stable for b in asked)
    assert all(not b.on_request for b in plan.builds if b.torch not in ("2.4", "2.5"))
    assert f"({len(plan.builds) - len(asked)} prebuilt, {len(asked)} on request)" in summary(plan)
    # marking changes no wheel: the builds' ids and inputs are the ones the plan makes without it
    plain = load_plan(_matrix(tmp_path / "plain", ""), "release")
    assert {b.id: b.inputs_hash for b in plain.builds} == {b.id: b.inputs_hash for b in plan.builds}


def test_the_github_plan_leaves_on_request_builds_out_unless_asked(tmp_path, capsys):
    path = _matrix(tmp_path)
    plan = load_plan(path, "release")
    asked = sorted(b.id for b in plan.builds if b.on_request)

    def built(*extra: str) -> list[str]:
        assert cli.main(["plan", "--matrix", str(path), "--profile", "release", "--format", "github", *extra]) == 0
        include = json.loads(capsys.readouterr().out)["include"]
        return sorted(i for e in include for i in e["ids"].split())

    prebuilt = built()
    assert not set(asked) & set(prebuilt) and len(prebuilt) == len(plan.builds) - len(asked)
    assert sorted(built("--on-request")) == sorted(b.id for b in plan.builds)
    assert built("--only", asked[0]) == [asked[0]]  # a named on-request build is built


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('on_request = [{ projects = ["causal-conv1d"] }]', "is not one of the profile's projects"),
        ("on_request = [{}]", "leaves every build to a request"),
        ('on_request = [{ torch = "9.9" }]', "9.9"),
        ('on_request = { torch = "2.4" }', "must be an array of tables"),
        ('on_request = [{ torhc = "2.4" }]', "torhc"),
    ],
)
def test_a_bad_on_request_entry_is_a_matrix_error_naming_it(tmp_path, entry, message):
    with pytest.raises(MatrixError, match=message) as err:
        load_plan(_matrix(tmp_path, entry), "release")
    assert "on_request" in str(err.value)


def test_the_coverage_page_lists_on_request_cells_with_the_command_that_asks(tmp_path):
    path = _matrix(tmp_path)
    plan = load_plan(path, "release")
    version = plan.matrix.package.version
    cells = coverage.on_request("mamba-ssm", {version}, path)
    asked = [b for b in plan.builds if b.on_request]
    assert sorted(c["id"] for c in cells) == sorted(b.id for b in asked)
    first = next(c for c in cells if c["id"] == asked[0].id)
    assert first["command"] == (
        f"gh workflow run release.yml --ref v{version} -f profile=release -f on-request={asked[0].id}"
    )
    assert asked[0].variant in first["cell"] and asked[0].platform in first["cell"]
    assert coverage.on_request("mamba-ssm", {"9.9.9"}, path) == []  # another release's page: none of these
    assert coverage.on_request("mamba-ssm", {version}, _matrix(tmp_path / "none", "")) == []  # nothing left


def test_the_rendered_page_shows_them(tmp_path, monkeypatch):
    from wheelmaker import make_mamba_wheel

    from builder.planning import plan as plan_mod
    from builder.publishing.index import build_index

    path = _matrix(tmp_path)
    monkeypatch.setattr(plan_mod, "DEFAULT_MATRIX", path)
    asked = next(b for b in load_plan(path, "release").builds if b.on_request)
    make_mamba_wheel(tmp_path / "w", "cputorch2.13cxx11abiTRUE")
    build_index(tmp_path / "w", tmp_path / "index")
    page = (tmp_path / "index" / "index.html").read_text()
    assert "on request: planned, built when asked" in page and f"-f on-request={asked.id}</code>" in page
