"""The doctor's source-build fixes build the line that is installed, never PyPI's bare ``mamba-ssm`` (upstream's
sdist): this line's fix names its release tag as a PEP 508 direct reference, upstream's its pinned sdist. The
end-to-end case runs the printed line against a bare clone of this checkout served on 127.0.0.1.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from indexkit import make_venv
from releasekit import git_http

from mamba_ssm import prebuilt as _prebuilt
from mamba_ssm.doctor.checks import UPSTREAM, run_checks
from mamba_ssm.doctor.rules import RULES

cl = importlib.import_module("mamba_ssm.doctor.classify")  # the package re-exports a function of that name

from conftest import REPO
from wheelmaker import V

OURS = f"mamba-ssm @ git+{_prebuilt.SOURCE_REPOSITORY}@v{V}"
GLIBC = "ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by _C.so)"


def _pip_requirements(fix: str) -> list[list[str]]:
    """The requirements of every `pip install` command in a printed fix."""
    out = []
    for m in re.finditer(r"(?:[A-Z_]+=\S+ )*\S*python\S* -m pip install .*?(?=$|;| \()", fix):
        words = shlex.split(m.group(0))
        args = words[words.index("install") + 1 :]
        skip = {"--extra-index-url", "--index-url", "--find-links"}
        reqs = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1] not in skip]
        out.append(reqs)
    return out


def _every_fix(ctx: cl.Context) -> dict[str, str]:
    """Each classifier rule's fix for this context (the same function the doctor prints through)."""
    return {rule["kind"]: cl._fix(rule["fix"], ctx, {}) for rule in RULES}


@pytest.mark.parametrize(
    ("ctx", "want"),
    [
        (cl.Context(mamba_version=V), OURS),
        (cl.Context(), OURS),  # --explain on a machine it cannot see: this doctor's own release
        (cl.Context(mamba_version="2.3.2.post1", source="mamba-ssm==2.3.2.post1"), "mamba-ssm==2.3.2.post1"),
    ],
    ids=["this-line", "explain", "upstream-line"],
)
def test_no_printed_fix_installs_a_bare_mamba_ssm(ctx, want):
    builds = []
    for kind, fix in _every_fix(ctx).items():
        for reqs in _pip_requirements(fix):
            assert "mamba-ssm" not in reqs, (kind, fix)  # bare: PyPI's newest sdist, upstream's code
            builds += [r for r in reqs if not re.match(r"mamba-ssm==\S+\+|torch\b", r)]  # prebuilt pins aside
    assert builds and set(builds) == {want}, builds


def _facts(line: str) -> dict:
    ext = {"module": "mamba_ssm._C", "path": "/x/_C.so", "import": {"ok": False, "error": GLIBC}, "archs": {}}
    public = V if line == "checkout" else UPSTREAM["mamba-ssm"]
    return {
        "torch": {"installed": True, "version": "2.14.1+cu130", "cuda": "13.0", "cxx11abi": True, "gpus": [],
                  "variant": {"key": "cu13-torch2.14-cxx11abiTRUE", "label": "cu13torch2.14cxx11abiTRUE"}},
        "mamba_ssm": {"public_version": public, "installed_version": public, "label": None, "location": "/x",
                      "extensions": [ext], "line": line},
        "cuda_toolkit": {"nvcc_on_path": None, "nvcc_release": None, "nvcc_toolkit": None, "cuda_home": None,
                         "cuda_home_release": None},
        "compiler": {"cxx": "/usr/bin/c++", "version": "c++ 14", "cxx20": True},
    }  # fmt: skip


@pytest.mark.parametrize(("line", "want"), [("checkout", OURS), ("upstream", "mamba-ssm==2.3.2.post1")])
def test_the_live_checks_build_the_installed_line(line, want):
    findings, extra = run_checks(_facts(line), offline=True)
    assert extra["line"] == line
    built = {
        r for f in findings if f.fix for reqs in _pip_requirements(f.fix) for r in reqs if not r.startswith("torch")
    }
    assert want in built and "mamba-ssm" not in built, [(f.check, f.fix) for f in findings if f.fix]


def test_the_source_repository_is_the_one_the_install_guide_clones():
    guide = (REPO / "docs" / "user" / "install-source.md").read_text()
    assert f"git clone {_prebuilt.SOURCE_REPOSITORY} " in guide


def _tagged_bare_clone(root: Path) -> None:
    """ROOT/mamba-ssm/wheels: this checkout's HEAD as the release tag v<version> (a bare repository)."""
    bare = root / "mamba-ssm" / "wheels"
    subprocess.run(["git", "clone", "-q", "--bare", str(REPO), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "tag", "-f", f"v{V}", "HEAD"], check=True, capture_output=True)


@pytest.mark.slow  # a venv with torch, then a CPU build of the extension from the clone: 2 minutes on 2 cores
def test_the_printed_source_build_runs_as_typed_and_installs_this_line(tmp_path):
    explain = subprocess.run(
        [sys.executable, "-m", "mamba_ssm.doctor", "--explain", GLIBC, "--offline"],
        check=False, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    m = re.search(r"fix: build against this system's glibc: (.+?) \(or run in a newer", explain.stdout)
    assert m, explain.stdout + explain.stderr
    line = m.group(1)
    assert line.startswith("MAMBA_FORCE_BUILD=TRUE python -m pip install ") and shlex.split(line)[-1] == OURS, line

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    venv = make_venv(tmp_path / "v", sys.executable, env).parent.parent
    # the user's venv: torch first (the test's own, from this machine's pip settings), then the printed line
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "pip",
                    "torch==2.13.0", "setuptools>=70.1"], check=True, env=env)  # fmt: skip
    root = tmp_path / "git"
    _tagged_bare_clone(root)
    gitconfig = tmp_path / "gitconfig"
    with git_http(root) as (url, _pushes):
        gitconfig.write_text(f'[url "{url.rstrip("/")}/mamba-ssm/"]\n\tinsteadOf = https://github.com/mamba-ssm/\n')
        run = subprocess.run(
            ["sh", "-c", line], check=False, capture_output=True, text=True, cwd=tmp_path,
            env={**env, "PATH": f"{venv / 'bin'}:{env['PATH']}", "GIT_CONFIG_GLOBAL": str(gitconfig), "MAX_JOBS": "2",
                 "GIT_TERMINAL_PROMPT": "0"},
        )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    check = (
        "import json, importlib.metadata as m, torch; from mamba_ssm.ops import selective_scan_interface as s;"
        "assert s.HAS_EXTENSION, s._IMPORT_ERROR;"
        "d = m.distribution('mamba-ssm'); print(json.dumps([d.version, json.loads(d.read_text('direct_url.json'))]))"
    )
    out = subprocess.run(
        [venv / "bin" / "python", "-c", check], check=False, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    version, direct = json.loads(out.stdout.strip().splitlines()[-1])
    # this line's code, labelled for the torch it was built against, from the tag the fix named
    assert version.startswith(f"{V}+cpu") and direct["url"] == _prebuilt.SOURCE_REPOSITORY, (version, direct)
    assert direct["vcs_info"]["requested_revision"] == f"v{V}" and direct["vcs_info"]["vcs"] == "git", direct


def test_the_doctors_offline_upstream_versions_are_the_recipes_pins():
    """The doctor pins upstream's line to these when no index answers: they must be what the farm builds (a pin
    that drift --write moved in recipes/ without moving this would send users to wheels no index holds)."""
    import tomllib

    released = set(tomllib.loads((REPO / "matrix.toml").read_text())["profiles"]["release"]["projects"]) - {"checkout"}
    pins = {}
    for recipe in sorted((REPO / "recipes").glob("*.toml")):
        data = tomllib.loads(recipe.read_text())
        if data["project"]["name"] in released:  # a recipe no release builds (a third party's) has no line
            pins[data["project"]["name"]] = data["source"]["version"]
    assert pins == UPSTREAM


def test_the_compiler_floor_the_doctor_states_is_the_builds():
    """The GCC floor printed beside every source build is build.toml's (C++17 below cxx20_from, C++20 from it)."""
    import tomllib

    from mamba_ssm import variant as _variant

    build = tomllib.loads((REPO / "mamba_build" / "build.toml").read_text())
    assert _variant.CXX20_FROM == build["torch"]["cxx20_from"]
    assert _variant.GCC_FLOOR == {std: build["compiler"][std]["gcc"] for std in ("c17", "c20")}
    assert f"GCC >= {build['compiler']['c20']['gcc']}:" in _variant.gcc_floor_text("2.14.1")
    assert f"GCC >= {build['compiler']['c17']['gcc']}:" in _variant.gcc_floor_text("2.6.0")


def test_a_source_build_of_this_line_names_the_commit_the_installed_wheel_was_built_from():
    """The installed wheel's provenance names its commit: the source build clones that ref (one the repository has),
    not a release tag the repository may lack; without a record, the release's tag."""
    from mamba_ssm.doctor.checks import context_for
    from mamba_ssm.doctor.classify import source_build_line

    commit = "5c4886908584029761b579af026dcfb627c84070"
    facts = {"torch": {"version": "2.6.0+cu124", "dist_version": "2.6.0+cu124", "cuda": "12.4"},
             "mamba_ssm": {"public_version": "2.3.0", "installed_version": "2.3.0+cu12torch2.6cxx11abiFALSE",
                           "provenance": {"source": {"kind": "checkout", "commit": commit}}},
             "platform": {"system": "Linux", "machine": "x86_64"}, "python": {"tag": "cp311"}}  # fmt: skip
    line = source_build_line(context_for(facts, None, False))
    assert f"git+{_prebuilt.SOURCE_REPOSITORY}@{commit}" in line and "@v2.3.0" not in line, line
    assert "torch==2.6.0+cu124" in line and "--no-deps" not in line, line
    facts["mamba_ssm"]["provenance"] = {"source": {"kind": "checkout", "commit": "$(touch MARK)"}}
    assert "@v2.3.0" in source_build_line(context_for(facts, None, False))
