"""The release rehearsal: ``.github/workflows/release.yml``, as committed, run under act on this host
(``builder/upkeep/rehearse.py``, ``nox -s rehearse``).

Real: act and the workflow's job graph, the pinned actions, act's artifact server, the farm's Docker builds,
pip installing from the served site. Stood in for: ``sudo``, and for tag releases ``gh``, attestation, Pages
and PyPI (``builder/upkeep/standins/``). The dry run and cheap failure paths are in the CI set; the rest is
``--run-slow``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import tarfile
import urllib.parse
from pathlib import Path

import pytest
from conftest import REPO
from farmkit import docker_client
from indexkit import find_python, serve
from releasekit import git_http, github_assets, make_certs, through_assets, venv_with_torch
from wheelmaker import V

from builder.upkeep.rehearse import (
    DRY_RUN_PROFILE,
    UPLOAD_ARTIFACT_V4,
    UPLOAD_ARTIFACT_V6,
    free_port,
    rehearse,
    shared_actions,
)

ACTIONS = shared_actions(REPO)  # $REHEARSAL_ACTIONS, else ../shared/actions
OWNER_REPO = "mamba-ssm/wheels"  # builder.upkeep.rehearse.ORIGIN
TORCH_CPU = "torch==2.13.0"
SCAN = (
    "import torch, mamba_ssm\n"
    "from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref\n"
    "u=torch.randn(1,4,16); d=torch.rand(1,4,16); A=-torch.rand(4,2); B=torch.randn(1,2,16); C=torch.randn(1,2,16)\n"
    "out=selective_scan_fn(u,d,A,B,C); ref=selective_scan_ref(u,d,A,B,C)\n"
    "assert torch.allclose(out, ref, atol=1e-4), (out-ref).abs().max()\n"
    "print('scan ok', mamba_ssm.__file__)\n"
)

# the installed mamba-ssm's version, and whether it is a variant wheel (its dist-info holds variant.json)
VARIANT_INFO = (
    "import importlib.metadata as m; d = m.distribution('mamba-ssm'); "
    "print(d.version, d.read_text('variant.json') is not None)"
)

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not ACTIONS.is_dir(),
        reason=f"no GitHub actions for offline runs at {ACTIONS} (shared/ beside the repository root; "
        "or set REHEARSAL_ACTIONS): the rehearsal cannot run act without them",
    ),
]


def _python311() -> str:
    py = find_python("3.11")
    if py is None:
        pytest.skip("no Python 3.11 on this host (the workflow's PYTHON_VERSION)")
    return py


def _coverage_commands(site: Path) -> list[str]:
    return [html.unescape(c) for c in re.findall(r'data-command="([^"]+)"', (site / "index.html").read_text())]


def _run(cmd: list[str] | str, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, shell=isinstance(cmd, str), env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def dry(release_dry_run):
    """The dry run, made once per pytest run (tests/sharedruns.py): tests/test_reproducible.py reads it too."""
    return release_dry_run


def test_the_upload_artifact_v6_mapping_is_the_one_act_workaround():
    """Named here: the v6 SHA runs v4.6.2's code (act issue 6021); every other action is its own pinned SHA."""
    from builder.upkeep.rehearse import ACT_WORKAROUNDS, local_actions

    assert ACT_WORKAROUNDS == {UPLOAD_ARTIFACT_V6: UPLOAD_ARTIFACT_V4}
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    specs = dict(s.split("=", 1) for s in local_actions(workflows, ACTIONS, REPO / "builder" / "upkeep" / "standins" / "actions"))
    assert specs[UPLOAD_ARTIFACT_V6].endswith(UPLOAD_ARTIFACT_V4)
    # upload-pages-artifact is a composite that pins v4.6.2 itself: act resolves that one too (a tag release
    # failed at "Stage the site for GitHub Pages" without it).
    assert specs[UPLOAD_ARTIFACT_V4].endswith(UPLOAD_ARTIFACT_V4)
    for action, folder in specs.items():
        if action != UPLOAD_ARTIFACT_V6 and "standins" not in folder:
            assert folder.endswith(action), (action, folder)


def test_a_missing_action_is_named(tmp_path):
    from builder.upkeep.rehearse import RehearsalError, local_actions

    with pytest.raises(RehearsalError, match=r"^actions/[\w-]+@[0-9a-f]{40}: no action at "):
        local_actions([REPO / ".github" / "workflows" / "release.yml"], tmp_path, None)


def test_the_scratch_clone_follows_the_checkout(tmp_path):
    """A work folder's clone keeps a release's version bump, and is reset when the checkout has moved on
    (a rehearsal never runs a stale commit)."""
    from builder.upkeep.rehearse import _git, bump, scratch_clone

    head = _git(REPO, "rev-parse", "HEAD")
    clone = scratch_clone(REPO, tmp_path / "c")
    assert _git(clone, "remote", "get-url", "origin") == "https://github.com/mamba-ssm/wheels.git"
    bump(clone, "9.9.9")
    bumped = _git(clone, "rev-parse", "HEAD")
    assert scratch_clone(REPO, clone) == clone and _git(clone, "rev-parse", "HEAD") == bumped
    _git(clone, "reset", "-q", "--hard", "HEAD~2")  # as if the checkout had moved past the clone
    scratch_clone(REPO, clone)
    assert _git(clone, "rev-parse", "HEAD") == head


def test_the_gh_stand_in_keeps_releases_as_the_workflow_uses_them(tmp_path):
    """The calls release.yml makes, against the stand-in (no act needed): what a second release restores."""
    import sys

    gh = [sys.executable, str(REPO / "builder" / "upkeep" / "standins" / "gh.py")]
    git = tmp_path / "git"
    subprocess.run(["git", "init", "-q", str(git)], check=True)
    subprocess.run(["git", "-C", str(git), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    subprocess.run(["git", "-C", str(git), "tag", "v1.0.0"], check=True)
    env = {**os.environ, "GH_STANDIN_HOME": str(tmp_path / "home"), "GH_STANDIN_GIT": str(git), "GH_REPO": OWNER_REPO}
    (tmp_path / "home").mkdir()

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([*gh, *args], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert (p.returncode == 0) == ok, (args, p.stdout, p.stderr)
        return p

    (tmp_path / "notes.md").write_text("notes")
    (tmp_path / "a.whl").write_text("wheel")
    (tmp_path / "a.whl.spec.json").write_text("{}")
    (tmp_path / "logs.tar.gz").write_text("logs")
    assert "release not found" in run("release", "view", "v1.0.0", ok=False).stderr
    assert (
        "doesn't exist"
        in run("release", "create", "v9.0.0", "--verify-tag", "--notes-file", "notes.md", ok=False).stderr
    )
    run("release", "create", "v1.0.0", "--verify-tag", "--title", "t", "--notes-file", "notes.md")
    run("release", "view", "v1.0.0")
    run("release", "upload", "v1.0.0", "--clobber", "a.whl", "a.whl.spec.json", "logs.tar.gz")
    assert "already exists" in run("release", "upload", "v1.0.0", "a.whl", ok=False).stderr
    listed = run("release", "list", "--exclude-drafts", "--limit", "1000", "--json", "tagName", "--jq", ".[].tagName")
    assert listed.stdout.split() == ["v1.0.0"]
    run("release", "download", "v1.0.0", "--dir", "out", "--pattern", "*.whl", "--pattern", "*.whl.spec.json")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.whl", "a.whl.spec.json"]
    assert (
        "no assets match" in run("release", "download", "v1.0.0", "--dir", "o2", "--pattern", "*.zip", ok=False).stderr
    )
    assert (tmp_path / "home" / OWNER_REPO / "releases" / "download" / "v1.0.0" / "a.whl").read_text() == "wheel"


def test_the_dry_run_runs_the_whole_job_graph(dry):
    assert dry.rc == 0, dry.log.read_text()[-6000:]
    builds = sorted(j for j in dry.jobs if j.startswith("build "))
    assert len(builds) == 2 and all(dry.jobs[j] == "succeeded" for j in builds), dry.jobs
    assert dry.jobs["plan"] == dry.jobs["publish"] == "succeeded"
    # the release checked itself before publishing: a wheel rebuilt in a second job, the same bytes
    assert dry.jobs["reproduce"] == "succeeded", dry.jobs
    assert re.search(r"identical: mamba_ssm-\S+\.whl \(sha256 [0-9a-f]{64}\)", dry.log.read_text()), "no rebuild compared"
    # A dry run publishes nothing: no release, no Pages, no sdist for PyPI.
    assert not {"pages", "sdist", "pypi"} & set(dry.jobs), dry.jobs
    assert sorted(p.parent.name for p in dry.artifacts.glob("*/*/*.zip")) == sorted(
        ["index", "release-assets"] + [f"wheel-{j.split()[1].rsplit('-', 1)[0]}" for j in builds]
        + [f"log-{j.split()[1].rsplit('-', 1)[0]}" for j in builds]
    )  # fmt: skip


def test_pip_installs_from_the_dry_run_site(dry, tmp_path):
    """The index artifact, served where INDEX_URL said: the coverage page's command installs a working wheel."""
    assert dry.rc == 0
    site = dry.artifact("index", tmp_path / "site")
    commands = _coverage_commands(site)
    assert commands and all(dry.index_url in c for c in commands), commands
    assert (site / "docs" / "index.html").is_file(), "the docs site is published next to the index"
    (cmd,) = [c for c in commands if "+cputorchstable" in c and "/cpu-torch2.13-cxx11abiTRUE/" in c]
    assert f"mamba-ssm=={V}+cputorchstable" in cmd  # the exact pin
    env = dict(os.environ)
    py = venv_with_torch(tmp_path / "venv", _python311(), TORCH_CPU, env)
    port = int(dry.index_url.rsplit(":", 1)[1])
    with serve(site, port):
        _run([str(py), "-m", *shlex.split(cmd)], env)
    out = _run([str(py), "-I", "-c", SCAN], env).stdout
    assert "scan ok" in out and str(tmp_path / "venv") in out


def test_the_dry_runs_publish_lists_the_variant_files_and_skips_the_gpu_gate(dry, tmp_path):
    """What a tag release would attach: every wheel and sidecar, and the variant root's files made from them
    (the CPU null variant, its plain fallback, the cu13 variant, -variants.json), the same bytes as the site's
    variants/ pages link. No GPU_RUNNER here: the gate did not run, and publish says so."""
    import hashlib

    assert dry.rc == 0
    site = dry.artifact("index", tmp_path / "site")
    listing = dry.artifact("release-assets", tmp_path / "assets") / "release-assets.sha256"
    assets = {line.split()[1]: line.split()[0] for line in listing.read_text().splitlines()}
    variant_assets = {name.removeprefix("variant-assets/"): sha for name, sha in assets.items()
                      if name.startswith("variant-assets/")}  # fmt: skip
    page = (site / "variants" / "mamba-ssm" / "index.html").read_text()
    linked = {n: sha for sha, n in re.findall(r'<a href="[^"#]*#sha256=([0-9a-f]{64})"[^>]*>([^<]+)</a>', page)}
    assert sorted(variant_assets) == sorted(linked), (variant_assets, linked)
    assert {n.rsplit("-", 1)[-1] for n in linked if n.endswith(".whl")} >= {"null.whl", "cu13.whl"}
    for name, sha in variant_assets.items():
        assert sha == linked[name]
        if name.endswith(".whl"):
            served = site / "files" / name
            assert hashlib.sha256(served.read_bytes()).hexdigest() == sha
            assert (site / "files" / (name + ".metadata")).is_file()  # PEP 658, as the other pages
    assert sum(n.startswith("wheels/") and n.endswith(".whl") for n in assets) == 2
    assert "gpu-gate" not in dry.jobs
    assert "GPU gate: skipped (no GPU_RUNNER repository variable" in dry.log.read_text()


@pytest.mark.slow
def test_the_doctors_fix_installs_what_the_site_serves(dry, tmp_path):
    """torch 2.14.1 (CUDA 13) with the CPU wheel installed: the doctor's fix line, run as printed, installs the
    stable cu13 wheel the dry run's site serves (the default plan builds no classic wheel for torch >= 2.10)."""
    assert dry.rc == 0
    site = dry.artifact("index", tmp_path / "site")
    env = dict(os.environ)
    py = venv_with_torch(tmp_path / "venv", _python311(), "torch==2.14.1", env)
    port = int(dry.index_url.rsplit(":", 1)[1])
    with serve(site, port):
        _run([str(py), "-m", "pip", "install", "--no-deps", f"mamba-ssm=={V}+cputorchstable",
              "--extra-index-url", f"{dry.index_url}/cpu-torchstable-abi3/"], env)  # fmt: skip
        doc = subprocess.run([str(py), "-I", "-m", "mamba_ssm.doctor", "--json", "--index", dry.index_url],
                             capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
        (label,) = [f for f in json.loads(doc.stdout)["findings"] if f["check"] == "label"]
        assert label["verdict"] == "problem" and "needs cu13torch2.14cxx11abiTRUE" in label["title"], label
        fix = label["fix"]
        assert f'"mamba-ssm=={V}+cu13torchstable"' in fix, fix
        _run(fix, env)
        after = subprocess.run([str(py), "-I", "-m", "mamba_ssm.doctor", "--json", "--index", dry.index_url],
                               capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
    (label,) = [f for f in json.loads(after.stdout)["findings"] if f["check"] == "label"]
    assert label["verdict"] == "ok", label
    assert "scan ok" in _run([str(py), "-I", "-c", SCAN], env).stdout


# --------------------------------------------------------------------------- tag releases (stand-ins)


def _variant_stem(release: Path, v: str) -> str:
    """The variant files' name stem in a release's assets: its stable wheels' tags (cp310-abi3, repaired to the
    base's manylinux) without the local label, as builder.verifying.variants names them."""
    (cpu,) = release.glob(f"mamba_ssm-{v}+cputorchstable-*.whl")
    return f"mamba_ssm-{v}-" + cpu.name.split("-", 2)[2].removesuffix(".whl")


def _calls(records: Path) -> list[dict]:
    path = records / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """v<version>, then the next version (committed in the scratch clone first), in one work folder: the
    second release restores the first one's wheels from the gh stand-in and must keep them on the site."""
    docker_client()
    work = tmp_path_factory.mktemp("rehearsal-tags") / "r"
    port, py = free_port(), _python311()
    from builder.upkeep.rehearse import version_of

    first = version_of(REPO)
    major, minor, patch = (int(x) for x in first.split(".")[:3])
    second = f"{major}.{minor}.{patch + 1}"
    runs = {}
    for version in (first, second):
        runs[version] = rehearse(work, actions=ACTIONS, release=True, version=None if version == first else second,
                                 profile=DRY_RUN_PROFILE, index_port=port, python=py)  # fmt: skip
        print(
            f"release v{version}: {len(runs[version].jobs)} jobs in {runs[version].seconds:.0f} s: {runs[version].jobs}"
        )
    return work, runs, (first, second)


@pytest.mark.slow
def test_two_releases_in_a_row_publish_everything(releases, tmp_path):
    work, runs, versions = releases
    for v, r in runs.items():
        assert r.rc == 0, f"v{v}: {r.jobs}\n{r.log.read_text()[-6000:]}"
        assert {j: e for j, e in r.jobs.items() if not j.startswith("build ")} == {
            "plan": "succeeded", "reproduce": "succeeded", "publish": "succeeded", "pages": "succeeded",
            "sdist": "succeeded", "pypi": "succeeded",
        }, r.jobs  # fmt: skip
    assets = work / "github" / OWNER_REPO / "releases" / "download"
    published = {v: sorted(p.name for p in (assets / f"v{v}").glob("*+*.whl")) for v in versions}
    assert all(len(w) == 2 for w in published.values()), published  # the CPU and the CUDA stable wheel
    # beside them their variant files (PEP 825): the CPU null variant, its plain fallback, the cu13 variant
    made = {v: sorted(p.name for p in (assets / f"v{v}").iterdir() if p.suffix in (".whl", ".json") and "+" not in p.name
                      and p.name != "release.json") for v in versions}  # fmt: skip
    for v, names in made.items():
        stem = _variant_stem(assets / f"v{v}", v)
        want = [f"{stem}-cu13.whl", f"{stem}-null.whl", f"{stem}.whl", f"mamba_ssm-{v}-variants.json"]
        assert names == sorted(want), names
    calls = _calls(work / "records")

    # The site after the second release holds both releases' wheels, each linked to its own release's asset.
    site = work / "records" / "pages"
    links = {}
    for page in site.rglob("index.html"):
        for href in re.findall(r'<a href="([^"#]+)(?:#[^"]*)?"', page.read_text()):
            if href.endswith(".whl"):
                href = urllib.parse.unquote(href)  # the index percent-encodes the local label's "+"
                links.setdefault(href.rsplit("/", 1)[-1], set()).add(href)  # the doctor/ page links its own file
    for v, wheels in published.items():
        for w in [*wheels, *(n for n in made[v] if n.endswith(".whl"))]:  # the variants/ pages' links too
            assert links.get(w) == {f"https://github.com/{OWNER_REPO}/releases/download/v{v}/{w}"}, (w, links.get(w))
    assert not list(site.rglob("files/*.whl"))  # a release's site carries no wheels (Pages' 1 GB)

    # The attestation stand-in was given every published wheel of each release (same bytes).
    import hashlib

    for v, wheels in published.items():
        (att,) = [c for c in calls if c["kind"] == "attest" and c["ref"] == f"refs/tags/v{v}"]
        attested = [*wheels, *(n for n in made[v] if n.endswith(".whl"))]  # the variant wheels are attested too
        assert att["subjects"] == {w: hashlib.sha256((assets / f"v{v}" / w).read_bytes()).hexdigest() for w in attested}

    # PyPI got exactly each release's sdist, and only after its pages deployment.
    for v in versions:
        ref = f"refs/tags/v{v}"
        (pypi,) = [c for c in calls if c["kind"] == "pypi" and c["ref"] == ref]
        (pages,) = [c for c in calls if c["kind"] == "pages" and c["ref"] == ref]
        assert list(pypi["files"]) == [f"mamba_ssm-{v}.tar.gz"]
        assert pypi["time"] > pages["time"]
    assert sorted(p.name for p in (work / "records" / "pypi").iterdir()) == [f"mamba_ssm-{v}.tar.gz" for v in versions]
    # The release notes name both lines' commands pinned, never a bare name.
    notes = json.loads((assets / f"v{versions[1]}" / "release.json").read_text())["body"]
    assert "pip install mamba-ssm==<version>+<label>" in notes and "pip install mamba-ssm --" not in notes


@pytest.mark.slow
def test_pip_installs_each_release_through_its_asset_links(releases, tmp_path):
    """Real pip, the Pages stand-in's site on INDEX_URL's port, every wheel fetched from its release's asset
    URL (https://github.com/...), answered by the asset-host stand-in on 127.0.0.1 (tests/releasekit.py)."""
    work, runs, versions = releases
    port = int(runs[versions[0]].index_url.rsplit(":", 1)[1])
    certs = make_certs(tmp_path / "certs")
    py = venv_with_torch(tmp_path / "venv", _python311(), TORCH_CPU, dict(os.environ))
    with serve(work / "records" / "pages", port), github_assets(work / "github", certs) as (proxy, asked):
        env = through_assets(dict(os.environ), proxy, certs[0])
        for v in versions:
            url = f"http://127.0.0.1:{port}/cpu-torch2.13-cxx11abiTRUE/"
            _run([str(py), "-m", "pip", "install", "--force-reinstall", "--no-deps", f"mamba-ssm=={v}+cputorchstable",
                  "--extra-index-url", url], env)  # fmt: skip
            got = _run([str(py), "-I", "-c", "import importlib.metadata as m; print(m.version('mamba-ssm'))"], env)
            assert got.stdout.strip() == f"{v}+cputorchstable"
            assert any(urllib.parse.unquote(p).startswith(f"/{OWNER_REPO}/releases/download/v{v}/") for p in asked), (
                asked
            )
        assert "scan ok" in _run([str(py), "-I", "-c", SCAN], env).stdout


@pytest.mark.slow
def test_uv_and_pip_install_from_a_released_sites_variants_root(releases, tmp_path):
    """The released site's variants/ root (the second release's site, both releases on it): uv's preview picks
    the cu13 variant for a 13.0 driver on sm_80 and the null variant without a driver, pip takes the plain CPU
    wheel; every file comes from its release's assets (the asset-host stand-in), none from the site."""
    from indexkit import isolated_env, make_venv, uv_bin

    work, runs, versions = releases
    v = versions[1]
    stem = _variant_stem(work / "github" / OWNER_REPO / "releases" / "download" / f"v{v}", v)
    port = int(runs[versions[0]].index_url.rsplit(":", 1)[1])
    root = f"http://127.0.0.1:{port}/variants/"
    certs = make_certs(tmp_path / "certs")
    with serve(work / "records" / "pages", port), github_assets(work / "github", certs) as (proxy, asked):
        env = through_assets(isolated_env(tmp_path), proxy, certs[0])
        for k in ("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "NV_VARIANT_PROVIDER_FORCE_SM_ARCH"):
            env.pop(k, None)
        for driver, want in (("13.0", "cu13"), (None, "null")):
            venv_env = {**env, **({"NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver,
                                   "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "8.0"} if driver else {})}  # fmt: skip
            vpy = make_venv(tmp_path / f"uv-{want}", _python311(), venv_env)
            _run([uv_bin(), "pip", "install", "--python", str(vpy), "--preview-features", "wheel-variants", "--no-deps",
                  "--index-url", root, f"mamba-ssm=={v}"], venv_env)  # fmt: skip
            info = _run([str(vpy), "-I", "-c", VARIANT_INFO], venv_env).stdout.split()
            assert info == [v, "True"], info
            wheel = f"/{OWNER_REPO}/releases/download/v{v}/{stem}-{want}.whl"
            assert wheel in [urllib.parse.unquote(p) for p in asked], asked
        py = venv_with_torch(tmp_path / "pip", _python311(), TORCH_CPU, dict(os.environ))
        _run([str(py), "-m", "pip", "install", "--no-deps", "--index-url", root, f"mamba-ssm=={v}"], env)
        assert f"/{OWNER_REPO}/releases/download/v{v}/{stem}.whl" in [
            urllib.parse.unquote(p) for p in asked]  # fmt: skip
        assert "scan ok" in _run([str(py), "-I", "-c", SCAN], env).stdout  # the plain wheel is the CPU build


@pytest.mark.slow
def test_the_published_sdist_takes_the_prebuilt_wheel_from_the_rehearsed_site(releases, tmp_path):
    """Plain `pip install <the sdist PyPI got>` in a fresh venv with torch: setup.py looks in the index the
    same release deployed (stamped by the sdist job) and installs that release's wheel, not a source build."""
    work, runs, versions = releases
    v = versions[1]
    sdist = work / "records" / "pypi" / f"mamba_ssm-{v}.tar.gz"
    with tarfile.open(sdist) as t:
        (stamp,) = [m for m in t.getmembers() if m.name.endswith("mamba_ssm/_index_url.txt")]
        assert t.extractfile(stamp).read().decode().strip() == runs[v].index_url
    port = int(runs[v].index_url.rsplit(":", 1)[1])
    certs = make_certs(tmp_path / "certs")
    # setuptools >= 70.1: a --no-build-isolation build uses the venv's own (README: Installing from source).
    py = venv_with_torch(tmp_path / "venv", _python311(), TORCH_CPU, dict(os.environ), "setuptools>=70.1")
    with serve(work / "records" / "pages", port), github_assets(work / "github", certs) as (proxy, asked):
        env = {k: v for k, v in through_assets(dict(os.environ), proxy, certs[0]).items() if k != "MAMBA_WHEEL_INDEX"}
        out = _run([str(py), "-m", "pip", "install", "-v", "--no-build-isolation", str(sdist)], env, timeout=1800)
    assert f"using prebuilt wheel mamba_ssm-{v}+cputorchstable" in out.stdout + out.stderr, out.stdout[-3000:]
    fetched = [urllib.parse.unquote(p) for p in asked]  # the link percent-encodes the label's "+"
    assert any(p.startswith(f"/{OWNER_REPO}/releases/download/v{v}/mamba_ssm-{v}+cputorchstable-") for p in fetched), (
        asked
    )
    assert "scan ok" in _run([str(py), "-I", "-c", SCAN], env).stdout


# --------------------------------------------------------------------------- failure paths


def test_a_tag_that_does_not_match_the_version_stops_at_plan(tmp_path):
    docker_client()
    r = rehearse(tmp_path / "r", actions=ACTIONS, release=True, tag="v9.9.9", python=_python311())
    log = r.log.read_text()
    assert r.rc != 0
    assert r.jobs == {"plan": "failed"}, r.jobs  # nothing built, published or sent to PyPI
    assert "tag v9.9.9 does not match mamba_ssm/__init__.py" in log


def test_an_empty_plan_stops_with_its_message(tmp_path):
    docker_client()
    # The CPU profile for upstream's causal-conv1d: its recipe builds CUDA only, so nothing is left.
    r = rehearse(tmp_path / "r", actions=ACTIONS, profile="cpu", projects="causal-conv1d", python=_python311())
    assert r.rc != 0 and r.jobs == {"plan": "failed"}, r.jobs
    assert "nothing to build: profile 'cpu' selects no buildable combination" in r.log.read_text()


@pytest.mark.slow
def test_one_failing_build_still_publishes_the_others_and_the_summary_names_it(tmp_path):
    """A compile error in the CUDA kernels only (committed in the scratch clone, as a bad merge would be), then a
    tag release: the CUDA job fails, the CPU wheel is still published (release assets, attestation, site), and
    the summary (the release notes) names the failed build and its log artifact."""
    from builder.upkeep.rehearse import scratch_clone, version_of

    docker_client()
    repo = scratch_clone(REPO, tmp_path / "r" / "repo")
    fwd = repo / "csrc" / "cuda" / "selective_scan_fwd.cu"
    fwd.write_text(fwd.read_text() + '\n#error "rehearsal: a CUDA-only compile error"\n')
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "break the CUDA kernels"], check=True)
    r = rehearse(tmp_path / "r", actions=ACTIONS, release=True, profile=DRY_RUN_PROFILE, python=_python311())
    print(f"one failing build: {len(r.jobs)} jobs in {r.seconds:.0f} s: {r.jobs}")
    cuda = next(j for j in r.jobs if j.startswith("build cu13-"))
    cpu = next(j for j in r.jobs if j.startswith("build cpu-"))
    assert (r.jobs[cuda], r.jobs[cpu], r.jobs["publish"], r.jobs["pages"]) == (
        "failed",
        "succeeded",
        "succeeded",
        "succeeded",
    ), r.jobs
    job_id = cuda.split()[1].rsplit("-", 1)[0]
    tag = f"v{version_of(repo)}"
    release = tmp_path / "r" / "github" / OWNER_REPO / "releases" / "download" / tag
    summary = json.loads((release / "release.json").read_text())["body"]
    assert "### Failed builds (not published)" in summary
    assert f"| `{job_id}` | `log-{job_id}` |" in summary
    assert "1 wheels from 1 of 2 planned builds" in summary
    assert [p.name.split("-")[1] for p in release.glob("*.whl")] == [f"{tag[1:]}+cputorchstable"]
    assert f"{tag[1:]}+cputorchstable" in (tmp_path / "r" / "records" / "pages" / "index.html").read_text()
    logs = r.artifact(f"log-{job_id}", tmp_path / "log")
    assert "rehearsal: a CUDA-only compile error" in "".join(p.read_text(errors="replace") for p in logs.rglob("*.log"))


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["passing", "broken-wheel"])
def test_the_gpu_gate_runs_each_cuda_wheel_before_publish(tmp_path, broken):
    """vars.GPU_RUNNER set (this host, GPU_CHECK_DEVICE=cpu: gpu_check's dry run): the gate installs the cu13 wheel
    from its staged index as its cell says and runs the numerics; then publish. Broken: delta_bias shifted in the
    op's Python wrapper (committed in the scratch clone), which the farm's smoke (no delta_bias) lets through and
    the numerics catch: the gate fails naming the wheel, and publish does not run."""
    from builder.upkeep.rehearse import scratch_clone

    docker_client()
    if broken:
        repo = scratch_clone(REPO, tmp_path / "r" / "repo")
        ssi = repo / "mamba_ssm" / "ops" / "selective_scan_interface.py"
        text = ssi.read_text()
        old = "delta_bias = delta_bias.float().contiguous() if delta_bias is not None else None"
        assert old in text
        ssi.write_text(
            text.replace(
                old, "delta_bias = (delta_bias.float() + 0.05).contiguous() if delta_bias is not None else None"
            )
        )
        subprocess.run(["git", "-C", str(repo), "commit", "-qam", "break delta_bias"], check=True)
    r = rehearse(tmp_path / "r", actions=ACTIONS, profile=DRY_RUN_PROFILE, python=_python311(), gpu_runner="gpu")
    print(f"gpu gate ({'broken' if broken else 'passing'}): {len(r.jobs)} jobs in {r.seconds:.0f} s: {r.jobs}")
    log = r.log.read_text()
    builds = [j for j in r.jobs if j.startswith("build ")]
    assert len(builds) == 2 and all(r.jobs[j] == "succeeded" for j in builds), r.jobs
    (cu13,) = re.findall(rf"gate: (mamba_ssm-{re.escape(V)}\+cu13torchstable-[^ ]+\.whl): installing", log)
    if not broken:
        assert r.rc == 0 and r.jobs["gpu-gate"] == r.jobs["publish"] == "succeeded", r.jobs
        assert f"gate: {cu13}: passed" in log and "gate: 1 CUDA wheel(s) passed on cpu" in log
        assert "GPU gate: passed." in log
        assert f"gate: mamba_ssm-{V}+cputorchstable" not in log  # CUDA wheels only
    else:
        assert r.rc != 0 and r.jobs["gpu-gate"] == "failed" and "publish" not in r.jobs, r.jobs
        assert f"::error::GPU gate: {cu13} failed its gpu_check numerics" in log or (
            f"error: GPU gate: 1 of 1 CUDA wheel(s) failed: {cu13}" in log
        ), log[-4000:]
        assert not list(r.artifacts.glob("*/index/*.zip")), "nothing published, no site kept"


# --------------------------------------------------------------------------- cost, and a recipe's compile group

# a build job's row (release cost --job, in the act log, whose job names act pads): | `<build id>` | wall | CPU | by |
COST_ROW = re.compile(
    r"^\[release/(?P<job>build [^\]]+)\]\s+\|\s*\| `(?P<id>[^`]+)` \| (?P<wall>\d+) \| (?P<cpu>\d+) \| (?P<by>\w+) \|$",
    re.MULTILINE,
)
TOTAL_ROW = re.compile(
    r"^\[release/publish\s*\]\s+\|\s*\| \*\*total: (\d+) jobs\*\* \| (\d+) \| (\d+) \| (\d+) \|$", re.MULTILINE
)
# the installed causal-conv1d's version and its extension files
INSTALLED = (
    "import importlib.metadata as m; d = m.distribution('causal-conv1d'); "
    "print(d.version, [str(f) for f in d.files if str(f).endswith('.so')])"
)


def _costs(log: str) -> tuple[dict[str, tuple[str, int, int, str]], tuple[int, ...]]:
    rows = {m["id"]: (m["job"], int(m["wall"]), int(m["cpu"]), m["by"]) for m in COST_ROW.finditer(log)}
    totals = TOTAL_ROW.findall(log)
    assert len(totals) == 1, totals
    return rows, tuple(map(int, totals[0]))


def test_each_build_job_and_publish_report_what_the_builds_cost(dry):
    """Every build's wall time and compile CPU seconds in its job's summary, measured in its container (the
    cgroup), non-zero; publish's table adds the jobs up (its CPU total is the sum of the builds')."""
    assert dry.rc == 0
    log = dry.log.read_text()
    rows, (jobs, builds, wall, cpu) = _costs(log)
    planned = {re.sub(r"-\d+$", "", j.split()[1]) for j in dry.jobs if j.startswith("build ")}  # act's "-1", "-2"
    assert set(rows) == planned, (rows, planned)  # one build per job here: the job id is the build id
    for build, (_job, b_wall, b_cpu, by) in rows.items():
        assert by == "cgroup" and b_wall > 0 and b_cpu > 0, (build, rows[build])
    assert re.search(r"Wall time of the farm step: [1-9]\d* s \(", log)
    assert (jobs, builds) == (len(planned), len(planned))
    assert wall >= sum(r[1] for r in rows.values()) * 0.9 > 0
    assert abs(cpu - sum(r[2] for r in rows.values())) <= len(rows), (cpu, rows)  # each row is rounded
    print(f"dry run cost: {rows}; total {wall} s wall, {cpu} CPU-seconds")


@pytest.mark.slow
def test_a_recipes_compile_group_is_one_job_and_pip_installs_both_from_the_site(tmp_path):
    """causal-conv1d for cp311 and cp312 (the ci profile's cu13 cells, projects=causal-conv1d): one build job,
    the kernels compiled once (cp312 takes every nvcc object from the image's ccache: only the binding, which
    includes Python.h, compiles again), both wheels under the site's upstream/, and pip installs each from
    there into its own Python (cp311 next to torch 2.14.1, where the extension imports)."""
    docker_client()
    r = rehearse(tmp_path / "r", actions=ACTIONS, profile="ci", projects="causal-conv1d", python=_python311())
    print(f"compile group: {len(r.jobs)} jobs in {r.seconds:.0f} s: {r.jobs}")
    assert r.rc == 0, r.log.read_text()[-6000:]
    (build,) = [j for j in r.jobs if j.startswith("build ")]
    job = re.sub(r"-\d+$", "", build.split()[1])  # act numbers a matrix's jobs when it has several
    assert job == "causal-conv1d-cu13-torch2.14-cxx11abiTRUE-linux_x86_64" and r.jobs["publish"] == "succeeded"
    logs = r.artifact(f"log-{job}", tmp_path / "logs")
    text = {py: next(logs.rglob(f"causal-conv1d-*-{py}-linux_x86_64.log")).read_text() for py in ("cp311", "cp312")}
    cu = len(re.findall(r"^\s*\[\d+/\d+\] ccache \S*nvcc ", text["cp311"], re.MULTILINE))
    hits, misses = map(int, re.search(r"^== ccache: (\d+) hits, (\d+) misses$", text["cp312"], re.MULTILINE).groups())
    assert cu > 0 and hits >= cu and misses <= 2, (cu, hits, misses)
    rows, (jobs, builds, _wall, cpu) = _costs(r.log.read_text())
    assert (jobs, builds) == (1, 2) and cpu > 0, rows
    site = r.artifact("index", tmp_path / "site")
    variant = "cu13-torch2.14-cxx11abiTRUE"
    served = sorted(p.name for p in (site / "upstream" / "files").glob("*.whl"))
    assert [w.split("-")[2] for w in served] == ["cp311", "cp312"], served
    port = int(r.index_url.rsplit(":", 1)[1])
    pin = "causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    pythons = {"311": venv_with_torch(tmp_path / "cp311", _python311(), "torch==2.14.1", dict(os.environ))}
    if find_python("3.12"):  # no torch there: the job's smoke test imported the cp312 wheel already
        subprocess.run([find_python("3.12"), "-m", "venv", str(tmp_path / "cp312")], check=True)
        pythons["312"] = tmp_path / "cp312" / "bin" / "python"
    with serve(site, port):
        for tag, py in pythons.items():
            _run([str(py), "-m", "pip", "install", "--no-deps", "--index-url", f"{r.index_url}/upstream/{variant}/",
                  pin], env)  # fmt: skip
            got = _run([str(py), "-I", "-c", INSTALLED], env).stdout
            assert got.startswith("1.7.0+cu13torch2.14cxx11abitrue ") and f"cpython-{tag}" in got, got
    assert len(pythons) == 2, "no Python 3.12 here to install the cp312 wheel into"
    py311 = pythons["311"]
    out = _run([str(py311), "-I", "-c", "import torch, causal_conv1d_cuda; print(torch.__version__)"], env).stdout
    assert out.strip().startswith("2.14.1"), out


# --------------------------------------------------------------------------- ci.yml, the same way


@pytest.mark.slow  # 54 s here: kept out of the CI set's budget, which the release dry run takes
def test_ci_lint_job_runs_under_act(tmp_path):
    """ci.yml's lint job as GitHub runs it: the dev group installed by pip>=25.1, actionlint with shellcheck on
    every run: script, ruff. (Its `tests` job is the whole suite with apt-get through sudo: not run here.)"""
    r = rehearse(tmp_path / "r", actions=ACTIONS, workflow="ci.yml", job="lint", python=_python311())
    assert r.rc == 0 and r.jobs == {"lint": "succeeded"}, r.log.read_text()[-4000:]


@pytest.mark.slow
def test_ci_profile_job_runs_under_act(tmp_path):
    """ci.yml's ci-profile job: the `ci` profile's real Docker builds, and its dist/ kept as an artifact."""
    docker_client()
    r = rehearse(tmp_path / "r", actions=ACTIONS, workflow="ci.yml", job="ci-profile", python=_python311())
    assert r.rc == 0 and r.jobs == {"ci-profile": "succeeded"}, r.log.read_text()[-4000:]
    dist = r.artifact("ci-profile-dist", tmp_path / "dist")
    assert len(list(dist.glob("wheels/*.whl"))) == 3


# --------------------------------------------------------------------------- drift.yml, the same way

DRIFT_BRANCH = "farm/drift"  # drift.yml's env.BRANCH
DATA_FILES = {"builder/data/torch.toml", "matrix.toml"}


def _extra_indexes() -> list[str]:
    """This host's pip extra-index-url (its wheelhouses): kept beside PyPI when the drift run sets its own."""
    from builder.facts.hostenv import pip_config

    return (pip_config().get("extra-index-url") or "").split()


def _no_github_tags(repo: Path) -> None:
    """The scratch clone's recipes as tests/test_drift.py's copies are (no tag archive's repository to list on
    GitHub), committed: drift.yml runs the committed tree, and the farm's git reads no config a test could
    point elsewhere."""
    from test_drift import matrix_without_canary, recipe_without_github_tags

    for path in sorted((repo / "recipes").glob("*.toml")):
        path.write_text(recipe_without_github_tags(path))
    (repo / "matrix.toml").write_text(matrix_without_canary((repo / "matrix.toml").read_text()))
    status = ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"]
    if subprocess.run(status, capture_output=True, text=True, check=True).stdout.strip():
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-am", "stand-in: no GitHub tags here"], check=True)


def _drift_run(work: Path, recorded) -> tuple:
    """drift.yml under act (a manual run on the scratch clone's branch): `builder drift` reads RECORDED (PyPI's
    recorded answers, tests/test_drift.py's stand-in) through the runner's pip settings (PIP_INDEX_URL), the PR
    job pushes through git's own smart HTTP on 127.0.0.1 (the github.com URL rewritten there by git's
    url.<base>.insteadOf, the token in it unchanged), and calls the gh stand-in's `pr list/create/edit`.
    Returns (result, the remote's bare repository, the stand-in's pull requests, the push requests)."""
    from test_drift import serve as serve_index

    from builder.upkeep.rehearse import _git, scratch_clone

    repo = scratch_clone(REPO, work / "repo")
    _no_github_tags(repo)
    base = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    remotes = work / "remotes"
    bare = remotes / "wheels.git"
    if not bare.exists():  # the repository on "github.com": the branch drift runs on, as pushed before
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
        subprocess.run(["git", "-C", str(repo), "push", "-q", str(bare), f"HEAD:refs/heads/{base}"], check=True)
    with serve_index(recorded) as (index, _seen), git_http(remotes) as (git_url, pushes):
        env = {
            # drift reads the first index of the runner's pip settings; pip still finds the farm's packages
            # in the others (PyPI, this host's wheelhouses)
            "PIP_INDEX_URL": index, "MAMBA_FARM_CACHE": str(work / "farm-cache"),
            "PIP_EXTRA_INDEX_URL": " ".join(["https://pypi.org/simple", *_extra_indexes()]),
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
            "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{git_url}/wheels.git.insteadOf",
            "GIT_CONFIG_VALUE_0": f"https://x-access-token:rehearsal-token-stand-in@github.com/{OWNER_REPO}.git",
        }  # fmt: skip
        r = rehearse(work, actions=ACTIONS, workflow="drift.yml", python=_python311(), env=env)
    print(f"drift.yml: {len(r.jobs)} jobs in {r.seconds:.0f} s, act exit {r.rc}: {r.jobs}")
    pulls_file = work / "github" / OWNER_REPO / "pulls.json"
    pulls = json.loads(pulls_file.read_text()) if pulls_file.exists() else []
    return r, bare, base, pulls, pushes


def _pr_files(bare: Path, base: str) -> set[str]:
    out = subprocess.run(["git", "--git-dir", str(bare), "diff", "--name-only", base, DRIFT_BRANCH],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return set(out.split())


@pytest.fixture(scope="module")
def drift_work(tmp_path_factory):
    return tmp_path_factory.mktemp("rehearsal-drift") / "r"


def _patch_release():
    """PyPI (recorded) with torch 2.15.1 beyond builder/data/torch.toml's 2.15.0 latest."""
    from test_drift import _Recorded

    recorded = _Recorded()
    recorded.add_release("torch", "2.15.0", "2.15.1", "2026-11-25")
    return recorded


def test_drift_yml_opens_a_pr_holding_only_the_data_files(drift_work):
    """Run 1: a torch patch release on PyPI: the check exits 13 (drift, all written), the PR job pushes
    farm/drift with the data file only (through git's smart HTTP) and opens one PR whose body is the table."""
    r, bare, base, pulls, pushes = _drift_run(drift_work, _patch_release())
    assert r.rc == 0 and r.jobs == {"check": "succeeded", "pull-request": "succeeded"}, r.log.read_text()[-6000:]
    assert pushes, "the branch went through git's smart HTTP"
    files = _pr_files(bare, base)
    assert files == {"builder/data/torch.toml"}, files
    diff = subprocess.run(["git", "--git-dir", str(bare), "diff", base, DRIFT_BRANCH], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert '-latest = "2.15.0"' in diff and '+latest = "2.15.1"' in diff, diff
    (pr,) = pulls
    assert (pr["head"], pr["base"], pr["state"], pr["edits"]) == (DRIFT_BRANCH, base, "open", 0)
    assert "python -m builder drift --write" in pr["body"] and "2.15.1 (released 2026-11-25)" in pr["body"], pr["body"]


@pytest.mark.slow
def test_drift_yml_refreshes_its_pr_then_fails_on_a_broken_patch(drift_work):
    """Run 2: the same drift refreshes the PR (gh pr edit), no second one. Run 3: a new causal-conv1d sdist
    whose setup.py lost a line a patch edits: the check exits 10, the PR is still refreshed with the table
    naming the patch, and the run fails after it."""
    from test_drift import _recipe_files, _sdist

    if not (drift_work / "remotes").exists():
        pytest.skip("needs run 1 (test_drift_yml_opens_a_pr_holding_only_the_data_files) first, in this session")
    r, bare, base, pulls, _ = _drift_run(drift_work, _patch_release())
    assert r.rc == 0 and r.jobs == {"check": "succeeded", "pull-request": "succeeded"}, r.log.read_text()[-6000:]
    (pr,) = pulls
    assert pr["edits"] == 1 and _pr_files(bare, base) <= DATA_FILES

    recorded = _patch_release()
    recipe = REPO / "recipes" / "causal-conv1d.toml"
    data = _sdist("causal_conv1d", "1.7.1", _recipe_files(recipe, drop='"cxx": ["-O3"],'))
    recorded.add_sdist("causal-conv1d", "causal_conv1d-1.7.1.tar.gz", data)
    r, bare, base, pulls, _ = _drift_run(drift_work, recorded)
    assert r.rc != 0 and r.jobs == {"check": "succeeded", "pull-request": "failed"}, r.jobs
    (pr,) = pulls
    assert pr["edits"] == 2 and "patch 'cxx20' no longer applies" in pr["body"], pr["body"]
    assert "a recipe's new sdist breaks one of its patches" in r.log.read_text()


# --------------------------------------------------------------------------- the release checks itself


def _wheel_kinds(r, dest: Path) -> dict[str, str]:
    """{wheel name: kind} of the run's build artifacts (their sidecars, as the reproduce job reads them)."""
    from builder.run.verify import kind_of

    out = {}
    for zipped in sorted(r.artifacts.glob("*/wheel-*/*.zip")):
        got = r.artifact(zipped.parent.name, dest / zipped.parent.name)
        for wheel in got.rglob("*.whl"):
            out[wheel.name] = kind_of(json.loads(Path(f"{wheel}.spec.json").read_text()))
    return out


def test_the_dry_runs_reproduce_job_rebuilt_one_wheel_of_each_kind_identical(dry, tmp_path):
    """The reproduce job compared one wheel of every kind the run built (here the CPU and the CUDA stable-ABI
    wheels: the CUDA one is an nvcc build), each the same bytes, before publish ran."""
    log = dry.log.read_text()
    kinds = _wheel_kinds(dry, tmp_path)
    assert len(set(kinds.values())) == len(kinds) == 2, kinds  # ci-stable: one wheel of each of two kinds
    assert dry.jobs["reproduce"] == "succeeded" and dry.jobs["publish"] == "succeeded", dry.jobs
    for wheel in kinds:
        assert re.search(rf"identical: {re.escape(wheel)} \(sha256 [0-9a-f]{{64}}\)", log), wheel
    (verdict,) = re.findall(r"reproduce: (\d+) of (\d+) rebuilt identical, one per kind: (.*)", log)
    assert verdict[:2] == (str(len(kinds)), str(len(kinds)))
    assert sorted(k.split(" ")[0] for k in verdict[2].strip().split(", ")) == sorted(kinds.values()), verdict


# A compromised build step, committed in the scratch clone: after the farm's build (and its verification), one
# byte of each wheel's extension is flipped and RECORD made to agree, so only a rebuild can tell.
TAMPER = """
import sys
from pathlib import Path
from builder.verifying import relabel
for wheel in sorted(Path("dist/wheels").glob("*.whl")):
    infos, members, info_dir = relabel.read_members(wheel)
    so = next(n for n in members if n.endswith(".so"))
    data = bytearray(members[so])
    data[len(data) // 2] ^= 0xFF
    members[so] = bytes(data)
    relabel.write_wheel(infos, members, info_dir, wheel)
    print("tampered:", wheel.name, so, file=sys.stderr)
"""


@pytest.mark.slow
def test_a_tampered_wheel_fails_reproduce_and_nothing_is_published(tmp_path):
    """The build jobs' wheels are altered after the build (a compromised runner, committed here as a noxfile
    step): the reproduce job's rebuild differs, it fails naming the member and its ELF section, and publish
    does not run."""
    from builder.upkeep.rehearse import scratch_clone

    docker_client()
    repo = scratch_clone(REPO, tmp_path / "r" / "repo")
    nox_file = repo / "noxfile.py"
    text = nox_file.read_text()
    build = '    session.run("python", "-m", "builder", "build", *session.posargs)\n'
    assert text.count(build) == 1
    nox_file.write_text(text.replace(build, build + f"    session.run('python', '-c', {TAMPER!r})\n"))
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "a build step that alters the wheels"], check=True)
    r = rehearse(tmp_path / "r", actions=ACTIONS, profile=DRY_RUN_PROFILE, python=_python311())
    print(f"tampered: {len(r.jobs)} jobs in {r.seconds:.0f} s: {r.jobs}")
    log = r.log.read_text()
    builds = [j for j in r.jobs if j.startswith("build ")]
    assert len(builds) == 2 and all(r.jobs[j] == "succeeded" for j in builds), r.jobs
    assert r.rc != 0 and r.jobs["reproduce"] == "failed" and "publish" not in r.jobs, r.jobs
    kinds = _wheel_kinds(r, tmp_path / "wheels")
    for wheel in kinds:  # each compared wheel is named, with the members that differ (the .so, RECORD) and where
        assert re.search(rf"{re.escape(wheel)}: the rebuild of \S+ differs in 2 place", log), (wheel, log[-6000:])
    assert re.search(r"mamba_ssm/_C\.abi3\.so: size \d+ vs \d+, .*first difference at byte \d+ \(ELF section ", log)
    assert f"{len(kinds)} of {len(kinds)} rebuild(s) did not match" in log
    assert not list(r.artifacts.glob("*/index/*.zip")), "nothing published, no site kept"
