"""Every published cell installs: resolution per cell before anything is built (builder/publishing/installs.py),
from the index metadata recorded in tests/data/installs-snapshot (PyPI's, by `python -m builder installs --profile
ci-installs --record --export DIR`; queries.json holds the queries and what they resolved to then), replayed on
127.0.0.1 with no network: uv and pip themselves resolve, as a user's installer would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from indexkit import isolated_env, make_venv, pip, serve, uv_bin
from wheelmaker import make_wheel

from builder.errors import SourceFetchError
from builder.facts import installs as record_mod
from builder.planning.plan import cell_outcomes, load_plan
from builder.publishing import installs
from builder.sourcing.snapshot import Snapshot

FIXTURE = REPO / "tests" / "data" / "installs-snapshot"
QUERIES = {
    q["project"] + " " + q["torch"] + " " + q["platform"]: q for q in json.loads((FIXTURE / "queries.json").read_text())
}


def query(name: str) -> installs.Query:
    q = dict(QUERIES[name])
    q.pop("outcome")
    return installs.Query(**{**q, "requirements": tuple(q["requirements"])})


def resolve(snapshot_root: Path, names: list[str], cache: Path) -> dict[str, installs.InstallCheck]:
    run = installs.resolve_all([query(n) for n in names], Snapshot(snapshot_root), jobs=3, cache=cache)
    return {n: run.outcomes[query(n).key] for n in names}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    names = ["causal-conv1d 2.8.0 linux_x86_64", "mamba-ssm 2.8.0 linux_x86_64", "mamba-ssm 2.9.1 linux_aarch64"]
    cache = tmp_path_factory.mktemp("installs-cache")
    return resolve(FIXTURE, names, cache), cache


def test_the_recorded_cells_resolve_again_as_recorded(replayed):
    """Replayed offline, pip and uv reach what they reached against PyPI: the outcome is the metadata's, not luck."""
    outcomes, _cache = replayed
    for name, o in outcomes.items():
        recorded = QUERIES[name]["outcome"]
        assert (o.installs, o.floor, o.picked) == (recorded["installs"], recorded["floor"], recorded["picked"]), name


def test_what_a_user_of_each_cell_gets(replayed):
    outcomes, _cache = replayed
    # causal-conv1d beside torch 2.8.0: installs, torch kept, on the glibc the page states; pip agrees with uv
    conv = outcomes["causal-conv1d 2.8.0 linux_x86_64"]
    assert conv.installs and conv.picked["torch"] == "2.8.0" and conv.floor == "2.28" and conv.pip == "resolves"
    # upstream mamba-ssm beside torch 2.8.0: triton>=3.5.0 against torch 2.8's own triton==3.4.0, at every floor
    mamba = outcomes["mamba-ssm 2.8.0 linux_x86_64"]
    assert not mamba.installs and "triton" in mamba.why and mamba.pip == "does not resolve"
    assert mamba.tried == list(installs.FLOORS)
    # aarch64: tilelang 0.1.8's wheels are manylinux_2_34 there, so the cell's floor is raised to 2.34, and said
    arm = outcomes["mamba-ssm 2.9.1 linux_aarch64"]
    assert arm.installs and arm.floor == "2.34" and arm.picked["tilelang"] == "0.1.8"
    assert arm.tried == ["2.28", "2.31", "2.34"] and arm.pip.startswith("not run: pip would evaluate markers")


def test_a_cached_resolution_is_reused_until_a_listing_it_read_changes(replayed, tmp_path):
    _outcomes, cache = replayed
    again = resolve(FIXTURE, ["mamba-ssm 2.9.1 linux_aarch64"], cache)
    assert again["mamba-ssm 2.9.1 linux_aarch64"].cached
    copy = tmp_path / "snapshot"
    shutil.copytree(FIXTURE, copy)
    page = copy / "pages" / "tilelang.json"
    page.write_text(page.read_text() + "\n")  # the same wheels, but not the listing the cache read
    fresh = resolve(copy, ["mamba-ssm 2.9.1 linux_aarch64"], cache)
    assert not fresh["mamba-ssm 2.9.1 linux_aarch64"].cached and fresh["mamba-ssm 2.9.1 linux_aarch64"].installs


def test_a_snapshot_without_what_a_resolver_reads_names_it(tmp_path):
    copy = tmp_path / "snapshot"
    shutil.copytree(FIXTURE, copy)
    (copy / "pages" / "ninja.json").unlink()
    with pytest.raises(SourceFetchError, match=r"the snapshot lacks what the resolvers read: listing ninja") as err:
        resolve(copy, ["causal-conv1d 2.9.1 linux_aarch64"], tmp_path / "cache")
    assert "--record" in err.value.hint


def test_the_lock_uv_writes_installs_as_it_is(replayed, tmp_path):
    """The cell's PEP 751 lock names PyPI's own files (sha256 and all), and uv takes it as it is: exactly the
    resolved closure, torch 2.8.0 kept (a dry run: the files are PyPI's, not fetched here)."""
    outcomes, _cache = replayed
    o = outcomes["causal-conv1d 2.8.0 linux_x86_64"]
    assert "127.0.0.1" not in o.lock and "https://files.pythonhosted.org/" in o.lock
    lock = tmp_path / installs.lock_name(query("causal-conv1d 2.8.0 linux_x86_64"))
    assert lock.name == "pylock.causal-conv1d-1_7_0-torch2_8_0-cp311-linux_x86_64.toml"
    lock.write_text(o.lock)
    env = isolated_env(tmp_path)
    venv = make_venv(tmp_path / "venv", sys.executable, env)
    r = subprocess.run([uv_bin(), "pip", "install", "--dry-run", "--offline", "-p", str(venv), "-r", str(lock)],
                       capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    would = dict(line.strip()[2:].split("==", 1) for line in r.stderr.splitlines() if line.strip().startswith("+ "))
    assert would == o.picked and would["torch"] == "2.8.0"


def test_every_cell_of_the_release_is_resolved_and_installs():
    """No published cell fails to resolve: each cell a release build serves has a recorded resolution that
    installs (the plan leaves out the others, naming why), and `builder plan` says so per line."""
    # each recipe's pinned release, every cell recorded; the release axis's other releases: a cell recorded as not
    # installing is never built, one not resolved yet is planned (never left out untried)
    axis = load_plan(profile="release")
    record = record_mod.load()
    for b in axis.builds:
        assert all(o is None or o.installs is not False for o in cell_outcomes(axis, b, record)), b.id
    plan = load_plan(profile="release", releases="pinned")
    for b in plan.builds:
        found = cell_outcomes(plan, b, record)
        assert all(o is not None for o in found), f"{b.id}: cells never resolved: run `python -m builder installs`"
        assert all(o.installs is not False for o in found), b.id
        # a cell PyPI holds no torch for (its torch comes from PyTorch's index) is kept and says it was not resolved
        assert all("PyPI holds no torch" in o.why for o in found if o.installs is None), b.id
    left = [(c, why) for c, why in plan.dropped if " does not install beside torch " in why]
    assert left, "the release leaves out the cells that cannot be installed"
    for cell, why in left:
        assert "instead:" in why or "does not install" in why, why
    every = load_plan(profile="release", installs=False, releases="pinned")
    assert len(every.builds) == len(plan.builds) + len(left)


def test_builder_plan_reports_the_installs_per_line(cli):
    r = cli("plan", "--profile", "ci-installs")
    assert r.returncode == 0, r.stderr
    record = record_mod.load()
    plan = load_plan(profile="ci-installs")
    for project in ("causal-conv1d", "mamba-ssm"):
        ok = sum(o is not None and o.installs for b in plan.builds if b.project == project
                 for o in cell_outcomes(plan, b, record))  # fmt: skip
        assert f"installs: {project} (upstream): {ok} of " in r.stdout


def test_the_page_command_for_a_torch_2_8_cell(tmp_path):
    """A torch 2.8.0 user: a stand-in torch 2.8.0 carrying its real METADATA (and stand-ins of what it requires) is
    installed, then the page's command for the cell runs with real pip against a loopback index. causal-conv1d
    installs, torch 2.8.0 kept; upstream mamba-ssm 2.3.2.post1's cell is not in the release (2.3.1, the newest release
    that installs there, is), and pip, asked for 2.3.2.post1 anyway, refuses."""
    plan = load_plan(profile="release")
    versions = {plan.recipe_of(b).source.version for b in plan.builds if b.project == "mamba-ssm" and b.from_recipe
                and b.torch == "2.8" and b.platform == "linux_x86_64"}  # fmt: skip
    assert "2.3.2.post1" not in versions and "2.3.1" in versions
    assert [b for b in plan.builds if b.project == "causal-conv1d" and b.torch == "2.8" and b.python == "3.11"
            and b.platform == "linux_x86_64"]  # fmt: skip
    pypi = tmp_path / "pypi"
    standins_from_snapshot(FIXTURE, pypi)
    label = "cu12torch2.8cxx11abiTRUE"
    farm = tmp_path / "farm"
    make_wheel(farm, "causal-conv1d", f"1.7.0+{label}", "cp311-cp311-linux_x86_64",
               requires=("torch==2.8.*", "packaging", "ninja"))  # fmt: skip
    upstream = json.loads((FIXTURE / "queries.json").read_text())
    mamba_reqs = next(q for q in upstream if q["project"] == "mamba-ssm")["requirements"]
    make_wheel(farm, "mamba-ssm", f"2.3.2.post1+{label}", "cp311-cp311-linux_x86_64", requires=tuple(mamba_reqs))
    env = isolated_env(tmp_path)
    with serve(tmp_path) as url:
        env.update(PIP_INDEX_URL=f"{url}/pypi/simple/", PIP_FIND_LINKS=f"{url}/farm/")
        venv = make_venv(tmp_path / "venv", sys.executable, env)
        pip(venv, ["install", "-q", "torch==2.8.0"], env)  # real pip (this test's), into the user's venv
        r = pip(venv, ["install", f"causal-conv1d==1.7.0+{label}"], env, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        r = pip(venv, ["install", f"mamba-ssm==2.3.2.post1+{label}"], env, check=False)
        assert r.returncode != 0 and "triton" in r.stdout + r.stderr
        show = pip(venv, ["list", "--format", "json"], env)
    have = {p["name"]: p["version"] for p in json.loads(show.stdout)}
    assert have["torch"] == "2.8.0" and have["causal-conv1d"] == f"1.7.0+{label.lower()}" and "mamba-ssm" not in have


def standins_from_snapshot(snapshot: Path, out: Path) -> None:
    """A PEP 503 index of stand-in wheels: each recorded wheel of the snapshot (x86_64 or pure), with its real name,
    version, tags and requirements, and no code (the real ones are PyPI's; what pip resolves is the metadata)."""
    import email.parser

    for page in sorted((snapshot / "pages").glob("*.json")):
        made = []
        for f in json.loads(page.read_text()):
            meta = snapshot / "metadata" / f"{f['sha256']}.METADATA"
            name = f["filename"]
            if not meta.exists() or "aarch64" in name:
                continue
            msg = email.parser.Parser().parsestr(meta.read_text())
            tag = "-".join(name.removesuffix(".whl").split("-")[-3:])
            made.append(make_wheel(out / "files", msg["Name"], msg["Version"], tag,
                                   requires=tuple(msg.get_all("Requires-Dist") or ()),
                                   requires_python=msg.get("Requires-Python")))  # fmt: skip
        index = out / "simple" / page.stem / "index.html"
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text("".join(f'<a href="../../files/{w.name}">{w.name}</a>\n' for w in made))


def test_recording_some_cells_keeps_every_other_cell_as_recorded(tmp_path):
    """A run over one profile writes its cells into the record; the others keep what they were recorded with:
    the floors tried, the witnesses, the instead."""
    path = tmp_path / "installs.json"
    other = record_mod.cell_key("mamba-ssm", "2.3.2.post1", "2.8.0", "3.11", "linux_x86_64")
    kept = {"installs": False, "floor": None, "picked": {}, "why": "triton", "instead": "torch >= 2.9",
            "tried": list(installs.FLOORS), "witnesses": {"uv": "does not resolve", "pip": "does not resolve"}}  # fmt: skip
    installs.write_record(path, {other: kept}, "2026-12-01")
    new = record_mod.cell_key("causal-conv1d", "1.7.0", "2.8.0", "3.11", "linux_x86_64")
    mine = {"installs": True, "floor": "2.28", "picked": {"torch": "2.8.0"}, "tried": ["2.28"]}
    installs.update_record(path, {new: mine}, "2026-12-05")
    doc = json.loads(path.read_text())
    assert doc["cells"] == {new: mine, other: kept} and doc["recorded"] == "2026-12-05"
    assert record_mod.load(path).outcome("mamba-ssm", "2.3.2.post1", "2.8.0", "3.11", "linux_x86_64").instead == "torch >= 2.9"


def test_a_written_lock_names_only_what_the_listings_gave_and_an_edited_one_replaces_nothing(replayed, tmp_path):
    """Every wheel of a lock `--locks` writes is a listing's file by its URL and sha256, exactly the resolution's
    packages; a lock that names anything else (a URL edited in the cache, with its stored hash made to match) is
    refused with the lock already there left as it was."""
    import tomllib

    outcomes, _cache = replayed
    q = query("causal-conv1d 2.8.0 linux_x86_64")
    o = outcomes["causal-conv1d 2.8.0 linux_x86_64"]
    folder = tmp_path / "locks"
    assert installs.write_locks(folder, [q], {q.key: o}, Snapshot(FIXTURE)) == 1
    (path,) = folder.iterdir()
    doc = tomllib.loads(path.read_text())
    listed = {(f["url"], f["sha256"]) for p in (FIXTURE / "pages").glob("*.json") for f in json.loads(p.read_text())}
    wheels = [(w["url"], w["hashes"]["sha256"]) for p in doc["packages"] for w in p["wheels"]]
    assert wheels and set(wheels) <= listed and all(u.startswith("https://files.pythonhosted.org/") for u, _ in wheels)
    assert {p["name"]: p["version"] for p in doc["packages"]} == o.picked
    before = path.read_bytes()
    for evil in (o.lock.replace("https://files.pythonhosted.org/", "http://evil.example/", 1),
                 o.lock.replace('version = "2.8.0"', 'version = "6.6.6"', 1)):  # fmt: skip
        edited = installs.InstallCheck(**{**o.__dict__, "lock": evil})
        with pytest.raises(SourceFetchError, match="its lock: .*not written"):
            installs.write_locks(folder, [q], {q.key: edited}, Snapshot(FIXTURE))
        assert path.read_bytes() == before and [p.name for p in folder.iterdir()] == [path.name]
