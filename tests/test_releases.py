"""The release axis: every release of each recipe beside the torch minors of its era (matrix.toml [releases]), each
left-out (release, cell) with the reason an attempt gave, and the plan's cost before and after."""

from __future__ import annotations

import pytest
from packaging.version import Version
from test_matrix import DEFAULT, make_dir

from builder.facts.compat import load as load_compat
from builder.facts.compat import vtuple
from builder.facts.spec import GitPin, SdistPin
from builder.planning.plan import github_jobs, load_plan
from builder.planning.recipes import recipe_for
from builder.planning.releases import era, grid
from builder.publishing.cost import before_after_lines


@pytest.fixture(scope="module")
def release():
    return load_plan(profile="release")


@pytest.fixture(scope="module")
def pinned():
    return load_plan(profile="release", releases="pinned")


def _torches(plan, project: str, version: str) -> set[str]:
    return {b.torch for b in plan.builds if b.from_recipe and b.project == project
            and plan.recipe_of(b).source.version == version}  # fmt: skip


def test_every_release_of_both_recipes_is_planned_from_its_era_up_to_the_newest_torch(release, pinned) -> None:
    compat = load_compat()
    newest = max(release.matrix.axes.torch, key=vtuple)
    for project in ("mamba-ssm", "causal-conv1d"):
        recipe = recipe_for(project)
        assert len(recipe.releases) > 20
        for rel in recipe.releases:
            torches = _torches(release, project, rel.version)
            assert torches, (project, rel.version)
            assert max(torches, key=vtuple) == newest, (project, rel.version)
            if rel.version == recipe.source.version:  # the pinned release keeps every cell it had
                assert torches == _torches(pinned, project, rel.version)
                continue
            # its era's oldest torch was out on its upload day, or is the oldest the axis has
            oldest = min(torches, key=vtuple)
            day = compat.torch[oldest].released
            assert day <= rel.uploaded or oldest == min(release.matrix.releases.torch, key=vtuple), (rel, oldest)
            # and no torch older than the era: `era` minors before the newest out by that day
            dated = [m for m in compat.torch if compat.torch[m].released <= rel.uploaded]
            newest_then = max(dated, key=vtuple)
            minors = sorted(compat.torch, key=vtuple)
            assert minors.index(newest_then) - minors.index(oldest) <= release.matrix.releases.era, (rel, oldest)
    # the oldest releases (Dec 2023, torch 2.1's days) are planned beside torch 1.13, the newest not beside 2.4
    assert "1.13" in _torches(release, "mamba-ssm", "1.0.1") and "1.13" in _torches(release, "causal-conv1d", "1.0.0")
    assert "2.4" not in _torches(release, "mamba-ssm", recipe_for("mamba-ssm").releases[-1].version)


def test_the_checkout_line_keeps_its_axis_and_the_ci_profiles_build_the_pinned_release_alone(release, pinned) -> None:
    axis = set(release.matrix.axes.torch)
    assert {b.torch for b in release.builds if not b.from_recipe} - {"stable"} <= axis
    assert {b.torch for b in release.builds if b.from_recipe} > axis  # 1.13 .. 2.3 too
    assert {b.id for b in pinned.builds} < {b.id for b in release.builds}  # the pinned ids are unchanged
    for name in ("ci-upstream", "ci-installs", "release-upstream-cuda"):
        plan = load_plan(profile=name)
        versions = {plan.recipe_of(b).source.version for b in plan.builds if b.from_recipe}
        assert versions == {recipe_for(p).source.version for p in {b.project for b in plan.builds if b.from_recipe}}


def test_a_build_names_its_release_and_is_built_from_that_release_source(release) -> None:
    by_version = {}
    for b in release.builds:
        if b.project == "mamba-ssm" and b.from_recipe:
            by_version.setdefault(release.recipe_of(b).source.version, b)
    old = by_version["2.2.2"]
    assert "-2.2.2-" in old.id and isinstance(release.recipe_of(old).source, GitPin)  # no kernels in its sdist
    assert isinstance(release.recipe_of(by_version["2.2.5"]).source, SdistPin)
    assert release.recipe_of(old).source.identity == old.source
    assert len({b.id for b in release.builds}) == len(release.builds)


def test_a_recorded_preflight_reason_leaves_its_cells_out_with_that_reason_and_none_leaves_nothing_out() -> None:
    seen = []

    def reasons(project, version, torch, accelerator):
        seen.append((project, version, torch, accelerator))
        if (project, version) == ("causal-conv1d", "1.4.0") and torch.startswith("2.15."):
            return "csrc/causal_conv1d.cpp:12: error: 'at::DeprecatedTypeProperties' was removed"
        return None

    plan = load_plan(profile="release", reasons=reasons, projects=["causal-conv1d"])
    assert {p for p, *_ in seen} == {"causal-conv1d"} and any(t.startswith("2.15.") for _p, _v, t, _a in seen)
    assert "2.15" not in _torches(plan, "causal-conv1d", "1.4.0") and "2.14" in _torches(plan, "causal-conv1d", "1.4.0")
    left = grid(plan)["causal-conv1d"]["1.4.0"]["2.15"]
    assert left.planned == 0 and left.left_out > 0
    assert left.reasons == (("causal-conv1d 1.4.0 cannot be built beside torch 2.15.0: csrc/causal_conv1d.cpp:12: "
                            "error: 'at::DeprecatedTypeProperties' was removed"),)  # fmt: skip
    nothing = load_plan(profile="release", projects=["causal-conv1d"], reasons=lambda *_: None)
    assert "2.15" in _torches(nothing, "causal-conv1d", "1.4.0") and not nothing.release_dropped
    # by default the plan reads the recorded preflight: each cell it leaves out is one the record refused
    from builder.facts.preflight import preflight_reason

    recorded = load_plan(profile="release", projects=["causal-conv1d"])
    assert recorded.release_dropped, "the record refuses the ROCm cells of releases with no HIP path"
    for d in recorded.release_dropped:
        assert preflight_reason(d.project, d.version, d.cell.torch, d.cell.accelerator) is not None, d


def test_era_counts_back_from_the_newest_torch_out_on_the_upload_day() -> None:
    compat = load_compat()
    rel = recipe_for("mamba-ssm").releases[0]
    minors = sorted(compat.torch, key=vtuple)
    then = max((m for m in minors if compat.torch[m].released <= rel.uploaded), key=vtuple)
    for back in (0, 1, 3):
        got = era(rel, compat, minors, back)
        assert got[0] == minors[max(0, minors.index(then) - back)] and got[-1] == minors[-1]


def test_the_plan_states_builds_and_jobs_before_and_after(release, pinned, cli) -> None:
    before, after = github_jobs(pinned.builds), github_jobs(release.builds)
    lines = before_after_lines(before, after, len(pinned.builds), len(release.builds))
    assert lines[0].startswith(f"cost: before (each recipe's pinned release) {len(pinned.builds)} builds in "
                               f"{len(before)} jobs; after (every release) {len(release.builds)} builds")  # fmt: skip
    records = [{"job": j["id"], "wall_s": 1800.0} for j in before]  # every pinned job measured at half an hour
    lines = before_after_lines(before, after, len(pinned.builds), len(release.builds), records)
    assert lines[1].startswith(f"cost: {len(before) / 2:.1f} runner-hours before, {len(after) / 2:.1f} after")


@pytest.mark.parametrize("value", ['"some"', "true"])
def test_a_profile_releases_value_other_than_pinned_or_all_is_refused_naming_its_line(tmp_path, value) -> None:
    from builder.errors import MatrixError
    from builder.planning.matrix import load_matrix

    marker = 'releases = "all"  # each recipe'
    text = DEFAULT.replace(marker, f"releases = {value}  # each recipe", 1)
    assert text != DEFAULT
    folder = make_dir(tmp_path / "m")
    (folder / "matrix.toml").write_text(text)
    line = text[: text.index(f"releases = {value}  #")].count("\n") + 1
    with pytest.raises(MatrixError, match=rf"matrix.toml:{line}: profiles.release.releases: .* not a choice"):
        load_matrix(folder / "matrix.toml", load_compat())


def test_releases_are_listed_oldest_first_in_the_grid(release) -> None:
    for project, versions in grid(release).items():
        assert list(versions) == sorted(versions, key=Version), project


# --- each cell's newest release that installs ---------------------------------------------------------------------


def test_an_old_sdist_s_requirements_come_from_its_egg_info_when_its_pkg_info_records_none(tmp_path) -> None:

    from builder.publishing.installs import recipe_requires, wheel_requirements
    from builder.publishing.release_lines import parse_requires_txt
    from builder.sourcing.sources import SourceCache

    raw = b'torch\npackaging\n\n[causal-conv1d]\ncausal-conv1d>=1.2.0\n\n[dev:python_version < "3.10"]\npytest\n'
    assert parse_requires_txt(raw.decode(), "requires.txt") == [
        "torch", "packaging", 'causal-conv1d>=1.2.0; extra == "causal-conv1d"',
        'pytest; python_version < "3.10" and extra == "dev"',
    ]  # fmt: skip
    # a release built from its tag's commit: its sdist's egg-info says what its wheel requires (as published); the
    # sdist made here in its cache (the release's sha256 is the recipe's, so the recipe is given this one's)
    import dataclasses
    import hashlib
    import io
    import tarfile

    from builder.facts.spec import SdistPin

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (
            ("PKG-INFO", b"Metadata-Version: 2.1\nName: mamba_ssm\nVersion: 1.1.4\n"),
            ("mamba_ssm.egg-info/requires.txt", b"torch\neinops\ncausal_conv1d<1.2.0,>=1.1.0\n"),
        ):
            info = tarfile.TarInfo(f"mamba_ssm-1.1.4/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    recipe = recipe_for("mamba-ssm").at_release("1.1.4")
    assert isinstance(recipe.source, GitPin)  # its sdist holds no kernels: built from git
    rel = dataclasses.replace(recipe.releases[[r.version for r in recipe.releases].index("1.1.4")], sha256=sha)
    recipe = dataclasses.replace(recipe, releases=(rel,))
    cache = SourceCache(tmp_path / "sdists")
    target = cache.path(SdistPin("mamba_ssm", "1.1.4", sha))
    target.parent.mkdir(parents=True)
    target.write_bytes(buf.getvalue())
    got = recipe_requires(recipe, cache)
    assert wheel_requirements(got, "torch==2.6.*") == ("torch==2.6.*", "causal_conv1d<1.2.0,>=1.1.0", "einops")


def _query(version: str, reqs: tuple[str, ...], torch: str = "2.8.0"):
    from builder.publishing.installs import Query

    return Query("mamba-ssm", version, ("torch==2.8.*", *reqs), torch, "3.11", "linux_x86_64", "2.28")


def test_releases_of_the_same_requirements_resolve_once_under_the_newest_and_the_record_follows(tmp_path) -> None:
    from builder.facts import installs as record
    from builder.publishing.installs import same_requirements, write_record

    qs = {q.key: (q, [q.version]) for q in [_query("2.2.5", ("triton",)), _query("2.3.1", ("triton",)),
                                            _query("2.3.2.post1", ("triton>=3.5.0",))]}  # fmt: skip
    out, same_as = same_requirements(qs)
    assert same_as == {"mamba-ssm 2.2.5": "mamba-ssm 2.3.1"}
    assert sorted(q.version for q, _ids in out.values()) == ["2.3.1", "2.3.2.post1"]
    assert sorted(out[_query("2.3.1", ("triton",)).key][1]) == ["2.2.5", "2.3.1"]  # both releases' builds
    path = tmp_path / "installs.json"
    write_record(path, {_query("2.3.1", ()).key: {"installs": True, "floor": "2.28", "picked": {}}}, "2026-12-07",
                 same_as)  # fmt: skip
    loaded = record.load(path)
    assert loaded.outcome("mamba-ssm", "2.2.5", "2.8.0", "3.11", "linux_x86_64").installs is True
    assert loaded.outcome("mamba-ssm", "2.2.4", "2.8.0", "3.11", "linux_x86_64") is None


def test_newest_first_resolves_an_older_release_only_where_every_newer_one_does_not_install() -> None:
    from builder.publishing.installs import InstallCheck, Run, instead, newest_first

    newest, older, oldest = ("2.3.2.post1", ("triton>=3.5.0",)), ("2.3.1", ("triton",)), ("2.2.4", ())
    qs = {}
    for torch in ("2.8.0", "2.9.0"):
        for v, reqs in (newest, older, oldest):
            q = _query(v, reqs, torch)
            qs[q.key] = (q, [q.key])
    asked = []

    def resolve(batch):  # the resolver's answers: the newest does not install beside torch 2.8 (triton 3.4)
        asked.extend(q.key for q in batch)
        ok = lambda q: not (q.version == "2.3.2.post1" and q.torch == "2.8.0")
        return Run({q.key: InstallCheck(ok(q), "2.28" if ok(q) else None, "" if ok(q) else "triton", {}, []) for q in batch},
                   set(), set())  # fmt: skip

    releases_of = {("mamba-ssm", v) for v, _r in (newest, older, oldest)}
    run = newest_first(qs, resolve, releases_of)
    assert sorted(asked) == sorted(
        [_query(*newest, "2.8.0").key, _query(*newest, "2.9.0").key, _query(*older, "2.8.0").key]
    )
    ok = {(q.project, q.version, q.torch, q.python, q.platform): run.outcomes[k].installs
          for k, (q, _i) in qs.items() if k in run.outcomes}  # fmt: skip
    said = instead(("mamba-ssm", "2.3.2.post1", "2.8.0", "3.11", "linux_x86_64"), ok, releases_of)
    assert said == "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
    # another line's version of the same name (this checkout's) is never offered: the advice falls back to torch
    assert (
        instead(("mamba-ssm", "2.3.2.post1", "2.8.0", "3.11", "linux_x86_64"), ok, set())
        == "torch >= 2.9 (its cells install)"
    )


def test_the_coverage_page_shows_a_release_by_torch_grid_with_tiers_and_left_out_reasons(tmp_path, monkeypatch) -> None:
    from types import SimpleNamespace

    from builder.facts import installs as record
    from builder.publishing import coverage
    from builder.publishing.installs import write_record

    path = tmp_path / "installs.json"
    why = "uv: torch==2.8.0 depends on triton==3.4.0 and you require triton>=3.5.0"
    write_record(path, {_query("2.3.2.post1", ()).key: {"installs": False, "floor": None, "picked": {}, "why": why}},
                 "2026-12-07")  # fmt: skip
    monkeypatch.setattr(record, "RECORD", path)
    wheel = lambda v, t, tier: SimpleNamespace(version=f"{v}+cu12torch{t}cxx11abiTRUE", torch=t, tier=tier)
    entries = [wheel("2.3.2.post1", "2.9", "compiled (audited)"), wheel("2.3.1", "2.8", "compiled"),
               wheel("2.3.1", "2.9", None), wheel("2.3.1", "2.8", "cpu-checked x")]  # fmt: skip
    monkeypatch.setattr(record, "load", lambda p=None: record._load(path, 0, 0))
    grid = coverage.release_grid("mamba-ssm", entries)
    assert grid["torches"] == ["2.8", "2.9"] and [r["version"] for r in grid["rows"]] == ["2.3.2.post1", "2.3.1"]
    newest, older = grid["rows"]
    assert newest["cells"] == [{"tier": None, "why": why}, {"tier": "compiled", "why": ""}]
    assert older["cells"] == [{"tier": "cpu-checked", "why": ""}, {"tier": "unrecorded", "why": ""}]


@pytest.mark.parametrize("same_as", [{"mamba-ssm 2.2.5": "causal-conv1d 1.7.0"}, {"mamba-ssm 2.2.5": 7},
                                     {"mamba-ssm 2.2.5": "mamba-ssm 2.3.1", "mamba-ssm 2.3.1": "mamba-ssm 2.2.4"}])  # fmt: skip
def test_a_record_whose_same_as_is_not_another_release_of_that_project_is_refused(tmp_path, same_as) -> None:
    import json

    from builder.errors import MatrixError
    from builder.facts import installs as record

    path = tmp_path / "installs.json"
    path.write_text(json.dumps({"same_as": same_as, "cells": {}}))
    with pytest.raises(MatrixError, match="not an installs record"):
        record.load(path)
