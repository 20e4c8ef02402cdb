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
    plain = load_plan(profile="release", projects=["causal-conv1d"])
    assert "2.15" in _torches(plain, "causal-conv1d", "1.4.0") and not plain.release_dropped


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
