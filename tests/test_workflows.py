"""The GitHub Actions workflows, checked here without GitHub: actionlint (with shellcheck), their structure
against the release's rules (pinning, permissions, triggers, concurrency), and the plan and publish jobs'
shell steps run with bash on artifacts laid out as ``actions/download-artifact`` lays them out.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from wheelmaker import V

from builder.verifying import evidence
from tests.wheelmaker import CAUSAL_CONV1D, UPSTREAM_MAMBA, make_mamba_wheel, make_recipe_wheel, make_standin_sdist

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CI = WORKFLOWS / "ci.yml"
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# Artifact names may not hold these (actions/upload-artifact rejects them).
BAD_ARTIFACT_CHARS = set('":<>|*?\\/\r\n')

# job -> (platform, its outputs' suffix): each runner kind's builds in matrices of at most 256 jobs, in this order
BUILD_JOBS = {
    "build-x86_64": ("linux_x86_64", ""), "build-x86_64-2": ("linux_x86_64", "_2"),
    "build-x86_64-3": ("linux_x86_64", "_3"), "build-x86_64-4": ("linux_x86_64", "_4"),
    "build-aarch64": ("linux_aarch64", ""), "build-aarch64-2": ("linux_aarch64", "_2"),
}  # fmt: skip
X86_BUILD_JOBS = {"plan", *(j for j, (p, _s) in BUILD_JOBS.items() if p == "linux_x86_64")}
HAS_PLAN = importlib.util.find_spec("builder.planning.plan") is not None
NOXFILE = (REPO / "noxfile.py").read_text()
HAS_INDEX_SESSION = re.search(r"^def index\(", NOXFILE, re.MULTILINE) is not None
needs_plan = pytest.mark.skipif(
    not HAS_PLAN, reason="needs `python -m builder plan --format github` (builder/planning/plan.py), not in the tree yet"
)
needs_index = pytest.mark.skipif(
    not HAS_INDEX_SESSION, reason="needs the `nox -s index` session (python -m builder index), not in noxfile.py yet"
)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def triggers(wf: dict) -> dict:
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    return {on: None} if isinstance(on, str) else dict(on)


def all_workflows() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.y*ml"))


def tool(name: str) -> str:
    """A binary of the test group (installed beside this interpreter), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install --group test (pyproject.toml) provides it")
    return found


def actionlint(cwd: Path, *files: Path) -> subprocess.CompletedProcess:
    cmd = [tool("actionlint"), "-no-color", "-shellcheck", tool("shellcheck"), *map(str, files)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# --------------------------------------------------------------------------- actionlint


def test_the_release_and_ci_workflows_exist():
    assert {p.name for p in all_workflows()} >= {"release.yml", "ci.yml"}


def test_actionlint_passes_on_every_workflow():
    proc = actionlint(REPO, *all_workflows())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_really_lints(tmp_path):
    """The linter is real: a broken copy of the release workflow fails, naming each mistake."""
    broken = RELEASE.read_text()
    broken = broken.replace("fromJSON(needs.plan.outputs.matrix_x86_64)", "fromJSON(needs.plann.outputs.matrix_x86_64)")
    broken = broken.replace(
        'read -ra ids <<< "${ONLY_IDS//,/ }"',
        'read -ra ids <<< "${ONLY_IDS//,/ }"\n          if [ $count = ]; then echo; fi',
    )  # shellcheck: SC2086 + a bad test
    broken = broken.replace("runs-on: ubuntu-24.04\n", "runs-on: ubuntu-24.04\n    timeout-minutes: soon\n", 1)
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "release.yml").write_text(broken)
    proc = actionlint(tmp_path, wf / "release.yml")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert 'property "plann" is not defined' in out
    assert "shellcheck reported issue" in out
    assert "timeout-minutes" in out


def zizmor(*paths: Path) -> list[dict]:
    """zizmor's findings (JSON) at its default persona, offline (no GitHub API calls)."""
    cmd = [tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, paths)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    # Exit codes: 0 clean, 10-14 findings by highest severity; anything else is zizmor failing.
    assert proc.returncode in (0, 10, 11, 12, 13, 14), proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def describe(findings: list[dict]) -> str:
    """One line per finding: the audit, its severity, and where (file:line and the YAML there)."""

    def where(loc: dict) -> str:
        path = loc["symbolic"]["key"]["Local"]["verbatim_path"]
        line = loc["concrete"]["location"]["start_point"]["row"] + 1
        return f"{path}:{line} ({loc['concrete']['feature']})"

    return "\n".join(
        f"{f['ident']} ({f['determinations']['severity']}): {f['desc']} at "
        + ", ".join(where(loc) for loc in f["locations"] if loc["symbolic"]["kind"] == "Primary")
        for f in findings
    )


def test_zizmor_finds_nothing_in_the_workflows():
    """No security finding at zizmor's default persona: above all no cache that another workflow
    can write is restored into the wheels the release publishes (cache-poisoning)."""
    findings = zizmor(*all_workflows())
    assert findings == [], describe(findings)


def test_no_release_job_restores_a_cache():
    """A GitHub Actions cache is shared by every workflow of the repository: nothing restored
    from one may reach what the release publishes."""
    for name, job in load(RELEASE)["jobs"].items():
        for step in job.get("steps", []):
            uses = step.get("uses", "").split("@")[0]
            assert uses not in ("actions/cache", "actions/cache/restore", "mozilla-actions/sccache-action"), name
            assert "cache" not in step.get("with", {}), f"{name}: {uses} restores a cache"
        assert not any("CACHE" in k for k in job.get("env", {})), name


SCCACHE_STEP = "      - uses: mozilla-actions/sccache-action@7d986dd989559c6ecdb630a3fd2557667be217ad # v0.0.9\n"


def test_zizmor_flags_a_cache_restored_into_the_release(tmp_path):
    """The check is real: the release with its old sccache step put back is a high cache-poisoning finding."""
    text = RELEASE.read_text()
    # right after the build jobs' setup-python step, where it was
    at = text.index("uses: actions/setup-python@", text.index("  build-x86_64:"))
    at = text.index("\n", text.index("python-version:", at)) + 1
    poisoned = text[:at] + SCCACHE_STEP + text[at:]
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "release.yml").write_text(poisoned)
    assert actionlint(tmp_path, wf / "release.yml").returncode == 0, "the copy must be a valid workflow"
    high = [f for f in zizmor(wf / "release.yml") if f["determinations"]["severity"] == "High"]
    assert {f["ident"] for f in high} == {"cache-poisoning"}, describe(high)
    assert all("mozilla-actions/sccache-action@" in describe([f]) for f in high), describe(high)


# --------------------------------------------------------------------------- rules


def iter_uses(path: Path):
    """(line number, the `uses:` value, the line's comment) for every action a workflow calls."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^\s*(?:-\s+)?uses:\s*([^\s#]+)\s*(?:#\s*(.*))?$", line)
        if m:
            yield n, m.group(1), (m.group(2) or "").strip()


@pytest.mark.parametrize("path", all_workflows(), ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_full_commit_sha_with_its_version(path):
    uses = list(iter_uses(path))
    assert uses, f"{path.name} calls no action?"
    for n, ref, comment in uses:
        if ref.startswith("./"):
            continue  # local action: same commit as the workflow
        assert SHA_PIN.match(ref), f"{path.name}:{n}: {ref} is not pinned to a full 40-hex commit SHA"
        assert re.match(r"^v\d+(\.\d+)*$", comment), f"{path.name}:{n}: {ref} needs its version as `# vX.Y.Z`"
    # The same action at two different commits is a half-done upgrade.
    by_action: dict[str, set[str]] = {}
    for _, ref, _ in uses:
        name, _, sha = ref.partition("@")
        by_action.setdefault(name, set()).add(sha)
    assert {a: s for a, s in by_action.items() if len(s) > 1} == {}


@pytest.mark.parametrize("path", all_workflows(), ids=lambda p: p.name)
def test_least_privilege_and_no_untrusted_triggers(path):
    wf = load(path)
    text = path.read_text()
    on = triggers(wf)
    assert "pull_request_target" not in on and "workflow_run" not in on
    assert wf.get("permissions") == {}, "the workflow default must be no permissions; jobs ask for their own"
    used = [e for e in EXPR.findall(text) if "secrets." in e]
    assert used == [], "no secrets: PyPI uses trusted publishing, GitHub the job's own token"
    for name, job in wf["jobs"].items():
        assert "permissions" in job, f"job {name} must declare its permissions"
        for step in job.get("steps", []):
            if "actions/checkout@" in step.get("uses", ""):
                assert step.get("with", {}).get("persist-credentials") is False, f"{name}: checkout keeps the token"


def test_release_triggers_and_inputs():
    on = triggers(load(RELEASE))
    assert set(on) == {"push", "workflow_dispatch"}
    assert on["push"] == {"tags": ["v*"]}
    assert set(on["workflow_dispatch"]["inputs"]) == {"profile", "only-ids", "projects", "on-request"}


def test_ci_runs_on_pull_requests_lint_tests_and_the_ci_profile():
    wf = load(CI)
    assert "pull_request" in triggers(wf)
    runs = "\n".join(s.get("run", "") for job in wf["jobs"].values() for s in job["steps"])
    assert "actionlint" in runs and "ruff check" in runs
    assert "nox -s tests" in runs
    assert "nox -s build_matrix -- --profile ci" in runs
    assert all(job["permissions"] == {"contents": "read"} for job in wf["jobs"].values())


DRIFT = WORKFLOWS / "drift.yml"


def test_drift_runs_weekly_and_on_demand_and_only_its_pr_job_may_write():
    wf = load(DRIFT)
    on = triggers(wf)
    assert set(on) == {"schedule", "workflow_dispatch"} and len(on["schedule"]) == 1
    assert re.fullmatch(r"\d+ \d+ \* \* \d", on["schedule"][0]["cron"])  # once a week
    jobs = wf["jobs"]
    assert jobs["check"]["permissions"] == {"contents": "read"}
    assert jobs["pull-request"]["permissions"] == {"contents": "write", "pull-requests": "write"}
    check = "\n".join(s.get("run", "") for s in jobs["check"]["steps"])
    assert "python -m builder drift --write" in check
    # the job that may write runs no farm code and no Python: it copies the data files the check wrote
    pr = "\n".join(s.get("run", "") for s in jobs["pull-request"]["steps"])
    assert not re.search(r"^\s*(python|pip|nox)\b", pr, re.M) and "uses" not in str(
        jobs["pull-request"].get("container", "")
    )
    assert "gh pr create" in pr
    assert "builder/data/torch.toml|matrix.toml|recipes/*.toml)" in pr


def test_drift_pr_step_copies_only_the_data_files(tmp_path):
    """The pull-request job's script, run with bash as a runner would, on an artifact that also holds a
    file outside the data: it refuses it before committing anything."""
    step = next(
        s for s in load(DRIFT)["jobs"]["pull-request"]["steps"] if s.get("name") == "Open or refresh the pull request"
    )
    art = tmp_path / "drift"
    (art / "files" / "builder" / "data").mkdir(parents=True)
    (art / "files" / "builder" / "data" / "torch.toml").write_text("# new\n")
    (art / "files" / "setup.py").write_text("evil\n")
    (art / "drift-table.txt").write_text("table\n")
    (art / "changed.txt").write_text("builder/data/torch.toml\nsetup.py\n")
    work = tmp_path / "repo"
    (work / "builder" / "data").mkdir(parents=True)
    (work / "builder" / "data" / "torch.toml").write_text("# old\n")
    env = {
        "PATH": os.environ["PATH"],
        "DRIFT": str(art),
        "RC": "11",
        "RUNNER_TEMP": str(tmp_path),
        "BRANCH": "farm/drift",
    }
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1 and "unexpected file in the drift artifact: setup.py" in proc.stdout
    assert not (work / "setup.py").exists()


def test_release_jobs_get_only_what_they_need():
    jobs = load(RELEASE)["jobs"]
    perms = {name: job["permissions"] for name, job in jobs.items()}
    for name in ("plan", *BUILD_JOBS, "sdist"):
        assert perms[name] == {"contents": "read"}, name
    assert perms["publish"] == {"contents": "write", "id-token": "write", "attestations": "write"}
    assert perms["pages"] == {"pages": "write", "id-token": "write"}
    assert perms["pypi"] == {"id-token": "write"}  # trusted publishing, and nothing else
    assert jobs["pages"]["environment"]["name"] == "github-pages"
    assert jobs["pypi"]["environment"]["name"] == "pypi"
    publish_step = next(s for s in jobs["pypi"]["steps"] if "gh-action-pypi-publish@" in s.get("uses", ""))
    assert not {"password", "user"} & set(publish_step.get("with", {}))


def test_the_sdist_goes_only_to_the_pypi_project_a_variable_names(tmp_path):
    """PyPI's mamba-ssm is upstream's: the pypi job runs only with vars.PYPI_PROJECT set, and its check (run here
    with bash on real sdist files) refuses an sdist of another name before the upload step."""
    job = load(RELEASE)["jobs"]["pypi"]
    assert "vars.PYPI_PROJECT != ''" in job["if"] and job["environment"]["url"].endswith("${{ vars.PYPI_PROJECT }}")
    steps = job["steps"]
    check = next(s for s in steps if s.get("name") == "The sdist is the project PYPI_PROJECT names")
    assert steps.index(check) < next(i for i, s in enumerate(steps) if "gh-action-pypi-publish@" in s.get("uses", ""))
    (tmp_path / "dist").mkdir()
    make_standin_sdist(tmp_path / "dist", "mamba-ssm", V)  # PKG-INFO's Name: as the release's sdist has
    run = lambda project: subprocess.run(["bash", "-e", "-c", check["run"]], cwd=tmp_path, capture_output=True, text=True,
                                         env={"PATH": os.environ["PATH"], "PYPI_PROJECT": project}, timeout=30)  # fmt: skip
    assert run("mamba-ssm").returncode == 0 and run("Mamba_SSM").returncode == 0
    other = run("mamba-ssm-wheels")
    assert other.returncode == 1 and "PYPI_PROJECT names 'mamba-ssm-wheels': not uploaded" in other.stdout
    publish = next(s for s in load(RELEASE)["jobs"]["publish"]["steps"] if s.get("name") == "Index the wheels")
    assert publish["env"]["PYPI_PROJECT"] == "${{ vars.PYPI_PROJECT }}" and "pypi job is skipped" in publish["run"]


def test_two_releases_never_publish_at_once():
    wf = load(RELEASE)
    assert wf["concurrency"]["cancel-in-progress"] is False
    for name in ("publish", "pages"):
        c = wf["jobs"][name]["concurrency"]
        assert not EXPR.search(c["group"]), f"{name}: one group for every ref, so releases queue"
        assert c["cancel-in-progress"] is False


def test_build_jobs_are_the_plan_matrix():
    jobs = load(RELEASE)["jobs"]
    for name, (platform, suffix) in BUILD_JOBS.items():
        build = jobs[name]
        arch = platform.split("_", 1)[1] + suffix
        assert build["needs"] == "plan"
        assert build["if"] == f"needs.plan.outputs.count_{arch} != '0'"
        assert build["strategy"]["fail-fast"] is False
        assert build["strategy"]["matrix"] == f"${{{{ fromJSON(needs.plan.outputs.matrix_{arch}) }}}}"
        assert build["runs-on"] == "${{ matrix.runs_on }}"  # the plan names the runner for each spec
        assert not any(k.startswith("SCCACHE") for k in build.get("env", {})), "no shared compiler cache"
        step = next(s for s in build["steps"] if "nox -s build_matrix" in s.get("run", ""))
        assert 'nox -s build_matrix -- --only "${ids[@]}"' in step["run"]
        assert step["env"]["SPEC_IDS"] == "${{ matrix.ids }}"  # every build of the job, in one farm run
        assert step["env"]["PROFILE"] == "${{ needs.plan.outputs.profile }}"  # the plan's, a tag push's too
        uploads = [s for s in build["steps"] if "upload-artifact@" in s.get("uses", "")]
        assert {u["with"]["name"] for u in uploads} == {"wheel-${{ matrix.id }}", "log-${{ matrix.id }}"}
        # a group's Pythons that were built are uploaded when another failed (verified wheels only)
        assert all(u.get("if") in ("${{ !cancelled() }}", "always()") for u in uploads)
    assert all(jobs[name]["steps"] == jobs["build-x86_64"]["steps"] for name in BUILD_JOBS)  # one list of steps
    publish = jobs["publish"]
    assert publish["needs"][: 1 + len(BUILD_JOBS)] == ["plan", *BUILD_JOBS]
    assert "!cancelled()" in publish["if"], "a failed build must not stop the others from being published"
    # The GPU gate: optional (a repository variable), between the builds and publish; a failure stops publish,
    # a skip does not.
    gate = jobs["gpu-gate"]
    assert "gpu-gate" in publish["needs"] and "needs.gpu-gate.result != 'failure'" in publish["if"]
    assert "vars.GPU_RUNNER != ''" in gate["if"] and gate["runs-on"] == ["self-hosted", "${{ vars.GPU_RUNNER }}"]
    assert set(gate["needs"]) == X86_BUILD_JOBS
    used = {s.get("uses", "").split("@")[0] for job in jobs.values() for s in job["steps"]}
    assert {"actions/attest-build-provenance", "actions/deploy-pages", "pypa/gh-action-pypi-publish"} <= used


# --------------------------------------------------------------------------- running the steps here


def render(value: str, ctx: dict) -> str:
    """Replace ``${{ expr }}`` from ``ctx`` (a dotted context path, or the whole expression)."""

    def one(m: re.Match) -> str:
        expr = m.group(1)
        if expr not in ctx:
            raise AssertionError(f"the local run has no value for ${{{{ {expr} }}}}: add it to the test's context")
        return str(ctx[expr])

    return EXPR.sub(one, str(value))


def run_step(step: dict, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """A ``run:`` step as a runner runs it: bash --noprofile --norc -eo pipefail FILE."""
    script = cwd.parent / "step.sh"
    script.write_text(step["run"])
    return run_bash([str(script)], cwd, env)


def run_bash(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """bash with the shell options a GitHub runner uses for ``run:`` steps."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def base_env(tmp: Path, extra: dict) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(tmp / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    for name in ("output", "summary"):
        (tmp / name).write_text("")
    env.update(GITHUB_OUTPUT=str(tmp / "output"), GITHUB_STEP_SUMMARY=str(tmp / "summary"), RUNNER_TEMP=str(tmp))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def outputs(tmp: Path) -> dict:
    return dict(line.split("=", 1) for line in (tmp / "output").read_text().splitlines() if "=" in line)


def workspace(tmp: Path) -> Path:
    """A checkout as the job sees it: the repo's files (linked), its own dist/ and artifacts/."""
    ws = tmp / "ws"
    ws.mkdir()
    for name in ("noxfile.py", "pyproject.toml", "builder", "mamba_ssm", "matrix.toml", "README.md"):
        if (REPO / name).exists():
            (ws / name).symlink_to(REPO / name)
    (REPO / ".nox").mkdir(exist_ok=True)
    (ws / ".nox").symlink_to(REPO / ".nox")  # nox's venvs are reused between runs
    return ws


# ------------------------------------------------------------------ the plan job


def run_plan(
    tmp: Path, profile: str = "", only: str = "", projects: str = "", tag_push: bool = False, on_request: str = ""
) -> tuple[subprocess.CompletedProcess, dict]:
    """The plan step as a manual run (workflow_dispatch, these inputs) or a pushed v* tag (no inputs) runs it."""
    job = load(RELEASE)["jobs"]["plan"]
    step = next(s for s in job["steps"] if s.get("id") == "plan")
    ctx = {
        "github.event_name == 'push' && 'release' || inputs.profile": "release" if tag_push else profile,
        "inputs.only-ids": only,
        "inputs.projects": projects,
        "inputs.on-request": on_request,
        "startsWith(github.ref, 'refs/tags/v')": "true" if tag_push else "false",
        "vars.INDEX_URL || format('https://{0}.github.io/{1}', github.repository_owner, "
        "github.event.repository.name)": "https://example.github.io/mamba-farm/",
    }
    tmp.joinpath("bin").mkdir(parents=True, exist_ok=True)
    env = base_env(tmp, {k: render(v, ctx) for k, v in step["env"].items()})
    return run_bash(["-c", step["run"]], REPO, env), outputs(tmp)


def _fake_plan(tmp: Path, counts: dict[str, int]) -> Path:
    """A `nox` on PATH that records its arguments and prints a plan of COUNTS jobs per platform (a stand-in for a
    release larger than today's matrix: the step's own script is what is tested)."""
    include = [{"id": f"{p}-{i}", "ids": f"{p}-{i}", "platform": p} for p, n in counts.items() for i in range(n)]
    tmp.joinpath("bin").mkdir(parents=True, exist_ok=True)
    nox = tmp / "bin" / "nox"
    nox.write_text(f"#!/bin/sh\necho \"$@\" > {tmp / 'args'}\necho '{json.dumps({'include': include})}'\n")
    nox.chmod(0o755)
    return tmp / "args"


def test_past_256_jobs_a_platforms_builds_go_on_in_the_next_matrix(tmp_path):
    _fake_plan(tmp_path, {"linux_x86_64": 600, "linux_aarch64": 300})
    proc, out = run_plan(tmp_path, profile="release")
    assert proc.returncode == 0, proc.stderr
    got = {}
    for name, (platform, suffix) in BUILD_JOBS.items():
        arch = platform.split("_", 1)[1] + suffix
        part = [e for e in json.loads(out[f"matrix_{arch}"])["include"] if e]
        assert len(part) == int(out[f"count_{arch}"]) <= 256
        got[name] = [e["id"] for e in part]
    assert [len(v) for v in got.values()] == [256, 256, 88, 0, 256, 44]
    every = [i for ids in got.values() for i in ids]
    assert sorted(every) == sorted(e["id"] for e in json.loads(out["matrix"])["include"]) and len(set(every)) == 900
    # past what the build jobs hold, the plan step stops and says what to do
    _fake_plan(tmp_path / "more", {"linux_x86_64": 4 * 256 + 1})
    proc, _out = run_plan(tmp_path / "more", profile="release")
    assert proc.returncode != 0 and "1025 linux_x86_64 jobs need 5 matrices of 256" in proc.stderr
    assert "on_request" in proc.stderr


@pytest.mark.parametrize(("asked", "args"), [("all", "--on-request"), ("a-cp311, b-cp312", "--only a-cp311 b-cp312")])
def test_the_on_request_input_asks_the_plan_for_those_builds(tmp_path, asked, args):
    called = _fake_plan(tmp_path, {"linux_x86_64": 1})
    proc, _out = run_plan(tmp_path, profile="release", on_request=asked)
    assert proc.returncode == 0, proc.stderr
    assert called.read_text().split() == ["-s", "plan", "--", "--format", "github", "--profile", "release",
                                          *args.split()]  # fmt: skip
    assert "on-request" in triggers(load(RELEASE))["workflow_dispatch"]["inputs"]


def matrix_keys_used(job: dict) -> set[str]:
    return set(re.findall(r"\bmatrix\.([A-Za-z_][\w-]*)", yaml.safe_dump(job)))


@needs_plan
def test_plan_step_output_is_the_matrix_the_build_jobs_read(tmp_path):
    proc, out = run_plan(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    include = json.loads(out["matrix"])["include"]
    assert int(out["count"]) == len(include) > 0
    assert out["publish"] == "false"
    # One index URL for the whole run: publish deploys there, the sdist names it (no trailing slash).
    assert out["index_url"] == "https://example.github.io/mamba-farm"
    jobs = load(RELEASE)["jobs"]
    assert jobs["publish"]["env"]["INDEX_URL"] == jobs["sdist"]["steps"][-2]["env"]["INDEX_URL"]
    assert jobs["sdist"]["steps"][-2]["env"]["INDEX_URL"] == "${{ needs.plan.outputs.index_url }}"
    ids = [e["id"] for e in include]
    assert len(set(ids)) == len(ids), "ids name the artifacts: they must be unique"
    jobs = load(RELEASE)["jobs"]
    seen = []
    for name, (platform, suffix) in BUILD_JOBS.items():
        arch = platform.split("_", 1)[1] + suffix
        raw = out[f"matrix_{arch}"]
        assert "\n" not in raw
        matrix = json.loads(raw)
        assert set(matrix) == {"include"}, "other top-level keys would multiply the jobs"
        part = [e for e in matrix["include"] if e] if out[f"count_{arch}"] != "0" else []
        assert len(part) == int(out[f"count_{arch}"]) <= 256, f"{name}: GitHub runs at most 256 jobs per matrix"
        used = matrix_keys_used(jobs[name])
        assert {"id", "runs_on", "accelerator"} <= used
        for e in part:
            assert used <= set(e), f"{e['id']}: {name} reads matrix.{sorted(used - set(e))}"
            assert e["platform"] == platform and e["runs_on"] == {"linux_x86_64": "ubuntu-24.04"}.get(
                platform, "ubuntu-24.04-arm"
            )
            assert not BAD_ARTIFACT_CHARS & set(e["id"]), f"{e['id']} cannot name an artifact"
        seen += part
    assert sorted(e["id"] for e in seen) == sorted(ids), "every planned build lands in exactly one build job"
    # Every build id is one that `--only` takes back (what each build job passes to the farm).
    from builder.commands.cli import main

    for e in include:
        # one job per build, but one per compile group for a classic CUDA build's Pythons (it compiles the kernels once)
        group = e["id"].removesuffix("-" + e["platform"])
        assert e["ids"] == e["id"] or all(i.startswith(group + "-cp") for i in e["ids"].split()), e
        assert main(["plan", "--only", *e["ids"].split(), "--format", "json"]) == 0, e["id"]


@needs_plan
def test_a_tag_push_plans_the_release_both_lines_each_matrix_within_256_jobs(tmp_path, capsys):
    """A pushed v* tag has no inputs: it builds matrix.toml's release profile, this checkout's mamba-ssm and
    upstream's packages, every prebuilt build once (the rest are left to a request), each of its runner's matrices
    within GitHub's 256 jobs."""
    from builder.planning.plan import load_plan

    proc, out = run_plan(tmp_path, tag_push=True)
    assert proc.returncode == 0, proc.stderr
    assert out["publish"] == "true" and out["profile"] == "release"
    include = json.loads(out["matrix"])["include"]
    every = load_plan(profile="release").builds
    planned = [b for b in every if not b.on_request]
    built = [i for e in include for i in e["ids"].split()]
    assert sorted(built) == sorted(b.id for b in planned) and len(set(built)) == len(built)
    assert len(planned) < len(every), "the release axis leaves releases not marked prebuilt to a request"
    assert {b.source.partition(":")[0] for b in planned} == {"checkout", "sdist", "git"}
    assert {e["farm_project"] for e in include} == {"checkout", "causal-conv1d", "mamba-ssm"}
    names = [k for k in out if k.startswith("count_")]
    counts = {k: int(out[k]) for k in names}
    print(f"release: {len(planned)} prebuilt builds of {len(every)} in {counts} jobs")
    assert all(n <= 256 for n in counts.values()) and counts["count_x86_64"] > 0, counts
    assert sum(counts.values()) == len(include) < len(planned), "a recipe's CUDA Pythons share a job"
    assert (
        f"planned {len(planned)} builds in {len(include)} jobs (profile release)" in (tmp_path / "summary").read_text()
    )


@needs_plan
def test_plan_step_groups_a_recipes_cuda_pythons_into_one_job(tmp_path):
    """ci-upstream and ci-upstream-cp312 together (the ci cells, with every project): each recipe's cu13
    Pythons are one job whose ids are exactly those builds, and so are the checkout's classic CUDA Pythons (the
    kernels compile once); its CPU build stays one job."""
    proc, out = run_plan(tmp_path, profile="ci", projects="checkout causal-conv1d mamba-ssm")
    assert proc.returncode == 0, proc.stderr
    jobs = {e["id"]: e["ids"].split() for e in json.loads(out["matrix"])["include"]}
    cu13 = "cu13-torch2.14-cxx11abiTRUE"
    ours = ("cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64", f"{cu13}-cp311-linux_x86_64", f"{cu13}-cp312-linux_x86_64")
    groups = {
        f"{p}-{cu13}-linux_x86_64": [f"{p}-{cu13}-{py}-linux_x86_64" for py in ("cp311", "cp312")]
        for p in ("causal-conv1d", "mamba-ssm")
    }
    groups[f"{cu13}-linux_x86_64"] = list(ours[1:])
    assert jobs == {ours[0]: [ours[0]], **groups}


@needs_plan
def test_plan_step_takes_the_dispatch_inputs(tmp_path, capsys):
    full, out = run_plan(tmp_path / "all")
    assert full.returncode == 0, full.stderr
    ids = [e["id"] for e in json.loads(out["matrix"])["include"]]
    pick = ids[:2]
    proc, out = run_plan(tmp_path / "some", only=", ".join(pick))
    assert proc.returncode == 0, proc.stderr
    assert [e["id"] for e in json.loads(out["matrix"])["include"]] == pick


@needs_plan
def test_plan_step_takes_the_projects_a_manual_run_picks(tmp_path):
    proc, out = run_plan(tmp_path, profile="ci-upstream", projects="mamba-ssm")
    assert proc.returncode == 0, proc.stderr
    include = json.loads(out["matrix"])["include"]
    assert [(e["ids"], e["project"], e["farm_project"]) for e in include] == [
        ("mamba-ssm-cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64", "mamba-ssm", "mamba-ssm")
    ]


@needs_plan
@pytest.mark.parametrize(
    "inputs", [{"profile": "no-such-profile"}, {"only": "no-such-id"}, {"projects": "no-such-project"}]
)
def test_plan_step_fails_early_on_a_bad_selection(tmp_path, inputs):
    proc, out = run_plan(tmp_path, **inputs)
    assert proc.returncode != 0
    assert "matrix" not in out, "a failed plan must not hand the build job a matrix"
    assert "Traceback" not in proc.stderr


@needs_plan
@pytest.mark.parametrize("profile", ["", "ci", "ci-stable", "ci-upstream", "release"])
def test_build_step_asks_the_farm_for_the_plan_jobs_ids(tmp_path, profile, capsys):
    """The build job passes the plan job's profile on: the profile decides which ids exist
    (its stable_abi) and each one's archs, so `--only IDS` must see the same plan; a compile
    group's job asks for all of its builds."""
    from builder.commands.cli import main
    from builder.planning.plan import github_jobs, load_plan

    step = next(s for s in load(RELEASE)["jobs"]["build-x86_64"]["steps"] if "nox -s build_matrix" in s.get("run", ""))
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "nox"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NOX_ARGS"\n')
    fake.chmod(0o755)
    cwd = tmp_path / "ws"
    cwd.mkdir()
    planned = {b.id: b for b in load_plan(profile=profile or None).builds}
    jobs = [j for j in github_jobs(list(planned.values())) if j["platform"] == "linux_x86_64"]
    picked = jobs[:2] + [j for j in jobs if " " in j["ids"]][:1]
    groups = profile in ("", "ci", "release")  # classic CUDA builds of several Pythons
    assert (" " in picked[-1]["ids"]) == groups, "these have compile groups; the others do not"
    for job in picked:
        ctx = {
            "matrix.ids": job["ids"],
            "needs.plan.outputs.profile": profile,
            "matrix.farm_project": job["farm_project"],
        }
        env = base_env(tmp_path, {k: render(v, ctx) for k, v in step["env"].items()})
        env["NOX_ARGS"] = str(tmp_path / "args")
        proc = run_step(step, env, cwd)
        assert proc.returncode == 0, proc.stderr
        args = (tmp_path / "args").read_text().splitlines()
        assert args[:3] == ["-s", "build_matrix", "--"]
        farm = args[3:]
        assert ("--profile" in farm) == bool(profile) and farm[farm.index("--dist") + 1] == "dist"
        del farm[farm.index("--dist") : farm.index("--dist") + 2]
        capsys.readouterr()
        assert main(["plan", *farm, "--format", "json"]) == 0, job["id"]
        assert json.loads(capsys.readouterr().out) == [planned[i].to_json() for i in job["ids"].split()]


# ------------------------------------------------------------------ the publish job

BUILT = {  # checkout build id -> local label of the wheel it made
    "cu12-torch2.6-cxx11abiFALSE-cp311-linux_x86_64": "cu12torch2.6cxx11abiFALSE",
    "cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64": "cputorch2.13cxx11abiTRUE",
}
FAILED = "cu13-torch2.14-cxx11abiTRUE-cp312-linux_x86_64"
# Upstream's packages: a recipe's CUDA Pythons share one job (plan.github_jobs), named by the compile group.
UPSTREAM_LABEL = "cu13torch2.14cxx11abitrue"
GROUP_JOB = "causal-conv1d-cu13-torch2.14-cxx11abiTRUE-linux_x86_64"
UPSTREAM_JOBS = {  # job id -> project, version, source, and whether each of its Pythons made a wheel
    GROUP_JOB: ("causal-conv1d", "1.7.0", CAUSAL_CONV1D, {"cp311": True, "cp312": False}),
    "mamba-ssm-cu13-torch2.14-cxx11abiTRUE-linux_x86_64": (
        "mamba-ssm", "2.3.2.post1", UPSTREAM_MAMBA, {"cp311": True, "cp312": True}
    ),
}  # fmt: skip
GROUP_FAILED = "causal-conv1d-cu13-torch2.14-cxx11abiTRUE-cp312-linux_x86_64"
INDEX_URL = "https://farm.example.org/mamba"
PLATFORM = "manylinux_2_28_x86_64"


def group_id(job: str, python: str) -> str:
    """A build id of a compile group's job: the group's name with the Python put back."""
    return job.replace("-linux_x86_64", f"-{python}-linux_x86_64")


def plan_matrix() -> dict:
    """The plan job's matrix for the builds above (what `plan --format github` gives: id, ids, platform...)."""
    include = [{"id": i, "ids": i, "platform": "linux_x86_64"} for i in [*BUILT, FAILED]]
    for job, (*_, pythons) in UPSTREAM_JOBS.items():
        include.append({"id": job, "ids": " ".join(group_id(job, py) for py in pythons), "platform": "linux_x86_64"})
    return {"include": include}


def spec_json(spec_id: str, source: str = "checkout") -> bytes:
    """The farm's sidecar, as much of it as the publish job reads."""
    return json.dumps({"id": spec_id, "source": source, "serves": []}).encode()


FAKE_GH = r'''#!/usr/bin/env python3
"""A stand-in for the gh CLI: records each call, serves one earlier release."""
import json, os, shutil, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_GH_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
if args[:2] == ["release", "list"]:
    if not os.environ.get("FAKE_GH_FIRST_RELEASE"):
        print("v2.2.0")
    print(os.environ["TAG"])
elif args[:2] == ["release", "download"]:
    src = Path(os.environ["FAKE_GH_RELEASES"]) / args[2]
    dest = Path(args[args.index("--dir") + 1]); dest.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir(): shutil.copy(p, dest)
elif args[:2] == ["release", "view"]:
    sys.exit(1)  # not created yet
elif args[:2] == ["release", "create"]:
    assert Path(args[args.index("--notes-file") + 1]).read_text().strip()
elif args[:2] == ["release", "upload"]:
    missing = [a for a in args[3:] if not a.startswith("-") and not Path(a).is_file()]
    if missing: sys.exit(f"gh: no such file {missing}")
else:
    sys.exit(f"gh: unexpected call {args}")
'''


def lay_out_artifacts(step: dict, artifacts: dict[str, dict[str, bytes]], ws: Path) -> None:
    """What actions/download-artifact writes for this step's ``with`` (v4+ semantics)."""
    w = step.get("with", {})
    names = (
        [n for n in artifacts if re.fullmatch(w["pattern"].replace("*", ".*"), n)] if "pattern" in w else [w["name"]]
    )
    dest = ws / w.get("path", ".")
    single = "name" in w
    for name in names:
        folder = dest if (single or w.get("merge-multiple")) else dest / name
        folder.mkdir(parents=True, exist_ok=True)
        for fn, data in artifacts[name].items():
            (folder / fn).write_bytes(data)


def build_artifacts(tmp: Path, *, sidecars: bool = True) -> dict[str, dict[str, bytes]]:
    """What the build jobs upload: wheel-<job id> (wheels + sidecars) and log-<job id>."""
    arts: dict[str, dict[str, bytes]] = {}
    for spec_id, label in BUILT.items():
        whl = make_mamba_wheel(tmp / "made", label, platform=PLATFORM)
        arts[f"wheel-{spec_id}"] = {whl.name: whl.read_bytes()}
        if sidecars:  # the farm's BuildSpec sidecar and its evidence record travel with the wheel
            arts[f"wheel-{spec_id}"][whl.name + ".spec.json"] = spec_json(spec_id)
            tag = whl.name[:-4].split("-", 2)[2]
            record = evidence.make(whl, built={"id": spec_id}, verified={"tags": [tag]}, smoke=None)
            arts[f"wheel-{spec_id}"][whl.name + evidence.SUFFIX] = evidence.dumps(record).encode()
        arts[f"log-{spec_id}"] = {f"{spec_id}.log": b"build ok\n"}
    arts[f"log-{FAILED}"] = {f"{FAILED}.log": b"error: nvcc died\n"}  # a log, no wheel
    for job, (project, version, source, pythons) in UPSTREAM_JOBS.items():
        arts[f"wheel-{job}"], arts[f"log-{job}"] = {}, {}
        for py, made in pythons.items():
            arts[f"log-{job}"][f"{group_id(job, py)}.log"] = b"build ok\n" if made else b"error: nvcc died\n"
            if made:
                whl = make_recipe_wheel(tmp / "made", project, version, UPSTREAM_LABEL, py)
                arts[f"wheel-{job}"][whl.name] = whl.read_bytes()
                arts[f"wheel-{job}"][whl.name + ".spec.json"] = spec_json(group_id(job, py), source)
    # each job's cost (`release cost --job`, failed jobs too): 100 s of wall and 150 CPU-seconds per build
    for name, files in arts.items():
        if name.startswith("log-"):
            builds = [f.removesuffix(".log") for f in files]
            record = {"job": name[4:], "wall_s": 100.0 * len(builds), "cpu_s": 150.0 * len(builds), "builds": builds}
            files["job-cost.json"] = json.dumps(record).encode()
    return arts


def checkout_only(artifacts: dict[str, dict[str, bytes]]) -> dict[str, dict[str, bytes]]:
    return {name: files for name, files in artifacts.items() if not name.endswith(tuple(UPSTREAM_JOBS))}


def run_publish(tmp: Path, *, publish: bool, artifacts: dict[str, dict[str, bytes]], first_release: bool = False):
    """Run the publish job's steps in order: shell steps for real, action steps checked or simulated.
    The earlier release v2.2.0 holds a wheel of each product line."""
    wf = load(RELEASE)
    job = wf["jobs"]["publish"]
    ws = workspace(tmp)
    (tmp / "bin").mkdir()
    gh = tmp / "bin" / "gh"
    gh.write_text(FAKE_GH)
    gh.chmod(0o755)
    old = tmp / "releases" / "v2.2.0"
    old_ours = make_mamba_wheel(old, BUILT[next(iter(BUILT))], version="2.2.0", platform=PLATFORM)
    Path(f"{old_ours}.spec.json").write_bytes(spec_json(next(iter(BUILT))))
    old_theirs = make_recipe_wheel(old, "causal-conv1d", "1.7.0", "cu12torch2.6cxx11abifalse")
    Path(f"{old_theirs}.spec.json").write_bytes(
        spec_json("causal-conv1d-cu12-torch2.6-cxx11abiFALSE-cp311-linux_x86_64", CAUSAL_CONV1D)
    )
    ctx = {
        "needs.plan.outputs.matrix": json.dumps(plan_matrix(), separators=(",", ":")),
        "github.ref_name": f"v{V}",
        "needs.plan.outputs.publish": "true" if publish else "false",
        "github.repository": "example/mamba-farm",
        "github.token": "not-a-token",
        "needs.plan.outputs.index_url": INDEX_URL,
        "vars.PYPI_PROJECT": "",  # no PyPI project named: the release notes say the sdist is not on PyPI
        "needs.gpu-gate.result": "skipped",  # no GPU_RUNNER: the gate's skip path
        "vars.GPU_RUNNER": "",
    }
    decide = {
        "needs.plan.outputs.publish == 'true'": publish,
        "needs.plan.outputs.publish != 'true'": not publish,
        "needs.gpu-gate.result == 'success'": False,  # the gate skipped: no records of its runs to lay over
    }
    env = base_env(
        tmp,
        {
            **{k: render(v, ctx) for k, v in wf["env"].items()},
            **{k: render(v, ctx) for k, v in job["env"].items()},
            "GITHUB_REF_NAME": f"v{V}",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "example/mamba-farm",
            "FAKE_GH_LOG": tmp / "gh.log",
            "FAKE_GH_RELEASES": tmp / "releases",
            "FAKE_GH_FIRST_RELEASE": "1" if first_release else "",
        },
    )
    (tmp / "gh.log").write_text("")
    done = []
    for step in job["steps"]:
        if "if" in step and not decide[step["if"]]:
            continue
        uses = step.get("uses", "").split("@")[0]
        if uses == "actions/download-artifact":
            lay_out_artifacts(step, artifacts, ws)
        elif uses == "actions/attest-build-provenance":
            subjects = sorted(p for line in step["with"]["subject-path"].split() for p in ws.glob(line))
            assert subjects, "attest-build-provenance would find no wheel"
            done.append(("attest", [p.name for p in subjects]))
        elif uses == "actions/upload-artifact" and step["with"]["name"] == "release-assets":
            listing = ws / step["with"]["path"]
            assert listing.is_file(), f"{uses}: no {listing}"
            done.append(("release-assets", listing))
        elif uses in ("actions/upload-pages-artifact", "actions/upload-artifact"):
            site = ws / step["with"]["path"]
            assert (site / "index.html").is_file(), f"{uses}: {site} holds no index"
            done.append((uses, site))
        elif uses:
            continue  # checkout, setup-python: this checkout and interpreter stand in
        elif step["run"].startswith("python -m pip install"):
            continue  # nox is already installed here (the test group)
        elif step["run"].startswith("nox -s docs"):
            continue  # the docs site: tests/test_docs.py builds it (strict) and checks this step's target
        else:
            proc = run_step(
                {"run": step["run"]}, {**env, **{k: render(v, ctx) for k, v in step.get("env", {}).items()}}, ws
            )
            done.append((step["name"], proc))
            if proc.returncode:
                break
    calls = [json.loads(line) for line in (tmp / "gh.log").read_text().splitlines()]
    return ws, done, outputs(tmp), calls, (old_ours, old_theirs)


def anchors(page: Path) -> dict[str, tuple[str, str]]:
    """file name -> (href, sha256) of every link on an index page."""
    found = re.findall(r'<a href="([^"#]+)#sha256=([0-9a-f]{64})"[^>]*>([^<]+)</a>', page.read_text())
    return {name: (href, sha) for href, sha, name in found}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


ASSETS = "https://github.com/example/mamba-farm/releases/download"


def check_index(site: Path, wheels: dict[Path, str | None], base: str = INDEX_URL) -> None:
    """The index lists exactly WHEELS (each project's simple/ page), each under its variant with its real
    sha256: at its release's asset URL (wheel -> tag), or at BASE/files/ (wheel -> None) where the site
    then serves it."""
    from packaging.utils import parse_wheel_filename

    from mamba_ssm.variant import Variant

    assert (site / "index.html").is_file()
    projects: dict[str, set[str]] = {}
    for whl in wheels:
        projects.setdefault(str(parse_wheel_filename(whl.name)[0]), set()).add(whl.name)
    for project, names in projects.items():
        assert set(anchors(site / "simple" / project / "index.html")) == names, f"{site}: {project}"
    assert {p.name for p in (site / "simple").iterdir() if p.is_dir()} == set(projects), f"{site}: other projects"
    for whl, tag in wheels.items():
        project = str(parse_wheel_filename(whl.name)[0])
        key = Variant.from_label(whl.name.split("+")[1].split("-")[0]).key
        for listing in (anchors(site / key / "index.html"), anchors(site / "simple" / project / "index.html")):
            href, digest = listing[whl.name]
            where = f"{ASSETS}/{tag}" if tag else f"{base}/files"
            assert href.replace("%2B", "+") == f"{where}/{whl.name}"
            assert digest == sha256(whl)
        if tag is None:
            served = site / "files" / whl.name
            assert served.is_file() and sha256(served) == sha256(whl)


def assert_steps_succeeded(done: list) -> None:
    for name, proc in done:
        if isinstance(proc, subprocess.CompletedProcess):
            assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"


def by_line(wheels: list[Path]) -> tuple[list[Path], list[Path]]:
    """(this checkout's, upstream's): ours are this checkout's version (V), built from this checkout."""
    ours = [w for w in wheels if f"-{V}+" in w.name]
    return ours, [w for w in wheels if w not in ours]


@needs_index
def test_publish_dry_run_indexes_each_line_apart_and_lists_each_failed_build(tmp_path):
    ws, done, out, calls, _ = run_publish(tmp_path, publish=False, artifacts=build_artifacts(tmp_path))
    assert_steps_succeeded(done)
    # every planned build id is built or failed, a group's Pythons one by one (by the sidecars' ids)
    assert out["built"] == "5" and out["failed"] == "2"
    # every job's cost, failed ones too, added up in the summary
    (cost,) = [proc.stdout for name, proc in done if name == "Add up what the builds cost"]
    jobs = len([n for n in build_artifacts(tmp_path / "again") if n.startswith("log-")])
    assert f"| **total: {jobs} jobs** | 7 | 700 | 1050 |" in cost, cost
    summary = (tmp_path / "summary").read_text()
    assert "5 wheels from 5 of 7 planned builds: 2 of this repository's mamba-ssm, 3 of upstream's packages" in summary
    assert f"| `{FAILED}` | `log-{FAILED}` |" in summary
    assert f"| `{GROUP_FAILED}` | `log-{GROUP_JOB}` |" in summary, "a group's failed Python points at its job's log"
    failed_table = summary.split("### Failed builds")[1].split("\n\n")[1]
    assert failed_table.count("\n| `") == 2, "one row per failed build"
    ours, theirs = by_line(sorted((ws / "dist" / "wheels").glob("*.whl")))
    assert len(ours) == 2 and len(theirs) == 3
    # two indexes: this checkout's at the site's root, upstream's (its own mamba-ssm too) under upstream/
    check_index(ws / "dist" / "index", dict.fromkeys(ours))
    assert not (ws / "dist" / "index" / "cu13-torch2.14-cxx11abiTRUE").exists(), "the failed build has no page"
    check_index(ws / "dist" / "index-upstream", dict.fromkeys(theirs), f"{INDEX_URL}/upstream")
    site = dict(done)["actions/upload-artifact"]
    assert site == ws / "dist" / "site"
    assert (site / "files").is_dir() and (site / "upstream" / "files").is_dir(), "a dry run's site serves its wheels"
    assert _links_in(site / "upstream" / "cu13-torch2.14-cxx11abiTRUE" / "index.html") == sorted(w.name for w in theirs)
    notes = (ws / "dist" / "summary.md").read_text()  # what a release's notes would say: both lines' installs
    assert f"--extra-index-url {INDEX_URL}/<variant>/" in notes
    assert f"--extra-index-url {INDEX_URL}/upstream/<variant>/" in notes
    # the gate's skip path: the notes say the CUDA wheels were not run on a GPU
    assert "GPU gate: skipped (no GPU_RUNNER repository variable" in notes
    # the assets a release would attach: every wheel and sidecar, and the variant files made from ours (none
    # here: these wheels are classic; the act dry run has stable ones)
    listed = {line.split()[1] for line in dict(done)["release-assets"].read_text().splitlines()}
    made = json.loads((ws / "dist" / "index" / "manifest.json").read_text())["wheel_variants"]["files"]
    assert listed == {f"wheels/{w.name}" for w in (ws / "dist" / "wheels").iterdir()} | {
        f"variant-assets/{n}" for n in [*made, *([f"mamba_ssm-{V}-variants.json"] if made else [])]
    }
    assert (ws / "dist" / "logs" / f"log-{FAILED}" / f"{FAILED}.log").is_file()
    assert (ws / "dist" / "logs" / f"log-{GROUP_JOB}" / f"{GROUP_FAILED}.log").is_file()
    assert calls == [], "a dry run touches no release"
    assert [d[0] for d in done if not isinstance(d[1], subprocess.CompletedProcess)] == ["actions/upload-artifact", "release-assets"]


def _links_in(page: Path) -> list[str]:
    return sorted(name for name in anchors(page))


@needs_index
def test_publish_of_one_line_makes_only_its_index(tmp_path):
    ws, done, out, _, _ = run_publish(tmp_path, publish=False, artifacts=checkout_only(build_artifacts(tmp_path)))
    assert_steps_succeeded(done)
    assert out["built"] == "2" and out["failed"] == "5"  # the upstream jobs made nothing
    assert not (ws / "dist" / "index-upstream").exists() and not (ws / "dist" / "site" / "upstream").exists()
    notes = (ws / "dist" / "summary.md").read_text()
    assert "2 of this repository's mamba-ssm, 0 of upstream's packages" in notes
    assert f"{INDEX_URL}/<variant>/" in notes and "/upstream/" not in notes


@needs_index
def test_publish_on_a_tag_releases_attests_and_keeps_earlier_wheels_of_both_lines(tmp_path):
    ws, done, _, calls, (old_ours, old_theirs) = run_publish(
        tmp_path, publish=True, artifacts=build_artifacts(tmp_path)
    )
    assert_steps_succeeded(done)
    new = sorted((ws / "dist" / "wheels").glob("*.whl"))
    ours, theirs = by_line(new)
    site = dict(done)["actions/upload-pages-artifact"]
    # every wheel is linked to its release's asset, v2.2.0's still there, each in its line's index;
    # the site holds no wheel
    check_index(site, {**dict.fromkeys(ours, f"v{V}"), old_ours: "v2.2.0"})
    check_index(site / "upstream", {**dict.fromkeys(theirs, f"v{V}"), old_theirs: "v2.2.0"}, f"{INDEX_URL}/upstream")
    # no wheel but the standalone doctor's (tens of kB, served from the site itself): the rest are release assets
    doctor = site / "doctor" / "mamba-doctor"
    assert not list(site.rglob("files")) and [w for w in site.rglob("*.whl") if w.parent != doctor] == []
    assert len(list(doctor.glob("mamba_doctor-*-py3-none-any.whl"))) == 1
    assert dict(done)["attest"] == [p.name for p in new]
    upload = next(c for c in calls if c[:2] == ["release", "upload"])
    assets = {Path(a).name for a in upload[3:] if not a.startswith("-")}
    assert upload[2] == f"v{V}" and assets >= {p.name for p in new} | {p.name + ".spec.json" for p in new}
    assert assets >= {p.name + ".evidence.json" for p in ours}  # what was checked of each wheel, published beside it
    assert f"build-logs-v{V}.tar.gz" in assets
    assert any(c[:2] == ["release", "create"] and "--verify-tag" in c for c in calls)
    notes = (ws / "dist" / "summary.md").read_text()  # the release's notes name both lines' indexes
    assert f"{INDEX_URL}/<variant>/" in notes and f"{INDEX_URL}/upstream/<variant>/" in notes
    downloads = [c[2] for c in calls if c[:2] == ["release", "download"]]
    assert downloads == ["v2.2.0"], "the release being made is not restored from itself"


@needs_index
def test_the_first_release_publishes_with_no_earlier_wheels(tmp_path):
    ws, done, _, calls, _ = run_publish(tmp_path, publish=True, artifacts=build_artifacts(tmp_path), first_release=True)
    assert_steps_succeeded(done)
    ours, theirs = by_line(sorted((ws / "dist" / "wheels").glob("*.whl")))
    site = dict(done)["actions/upload-pages-artifact"]
    check_index(site, dict.fromkeys(ours, f"v{V}"))
    check_index(site / "upstream", dict.fromkeys(theirs, f"v{V}"), f"{INDEX_URL}/upstream")
    assert not [c for c in calls if c[:2] == ["release", "download"]]


def test_publish_fails_when_no_build_made_a_wheel(tmp_path):
    arts = {f"log-{FAILED}": {f"{FAILED}.log": b"error\n"}}
    _, done, out, _, _ = run_publish(tmp_path, publish=False, artifacts=arts)
    name, proc = done[-1]
    assert name == "Collect what was built" and proc.returncode == 1
    assert "no build produced a wheel" in proc.stdout
    assert out["built"] == "0" and out["failed"] == "7"


def test_publish_refuses_a_wheel_without_its_sidecar(tmp_path):
    """Without its sidecar a wheel's build id and product line are unknown: the publish stops, naming it."""
    _, done, out, calls, _ = run_publish(tmp_path, publish=True, artifacts=build_artifacts(tmp_path, sidecars=False))
    name, proc = done[-1]
    assert name == "Collect what was built" and proc.returncode != 0
    assert "no sidecar" in proc.stderr and f"mamba_ssm-{V}+cpu" in proc.stderr and "Traceback" not in proc.stderr
    assert "built" not in out and calls == [], "nothing is counted, indexed or released"


def _nox_sessions() -> set[str]:
    # `nox --list --json` lists only the default-selected sessions; the text listing has all,
    # one per line as "* name -> doc" (selected) or "- name -> doc".
    proc = subprocess.run([tool("nox"), "--list"], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return set(re.findall(r"^[*-] ([\w-]+)", proc.stdout, flags=re.M))


@pytest.mark.skipif(
    "def build_matrix(" not in NOXFILE,
    reason="needs the `nox -s build_matrix` session (the farm issue), not in noxfile.py yet",
)
def test_every_nox_session_the_workflows_call_exists():
    called = {m for p in all_workflows() for m in re.findall(r"\bnox -s ([\w-]+)", p.read_text())}
    assert called >= {"plan", "build_matrix", "index", "tests"}
    assert called <= _nox_sessions()


@pytest.mark.parametrize("profile", ["", "release"])
def test_reproduce_rebuilds_one_wheel_per_kind_between_build_and_publish(tmp_path, profile):
    """The release checks itself: `reproduce` runs after the x86_64 builds, on their wheels, asks the farm for
    `reproduce --one-per-kind` under the plan's profile, and publish does not run when it failed (a difference)."""
    from builder.commands.cli import build_parser

    jobs = load(RELEASE)["jobs"]
    job = jobs["reproduce"]
    assert set(job["needs"]) == X86_BUILD_JOBS and job["permissions"] == {"contents": "read"}
    assert "reproduce" in jobs["publish"]["needs"] and "needs.reproduce.result != 'failure'" in jobs["publish"]["if"]
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"] == {"pattern": "wheel-*", "path": "artifacts/wheels"}
    step = next(s for s in job["steps"] if "nox -s reproduce" in s.get("run", ""))
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "nox"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NOX_ARGS"\n')
    fake.chmod(0o755)
    env = base_env(tmp_path, {k: render(v, {"needs.plan.outputs.profile": profile}) for k, v in step["env"].items()})
    env["NOX_ARGS"] = str(tmp_path / "args")
    proc = run_step(step, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:3] == ["-s", "reproduce", "--"]
    parsed = build_parser(["reproduce", *args[3:]]).parse_args(["reproduce", *args[3:]])
    assert parsed.one_per_kind == Path("artifacts/wheels") and parsed.executor == "docker"
    assert parsed.profile == (profile or None)
