"""The release rehearsal: ``.github/workflows/release.yml``, as committed, run under act on this host.

``builder/rehearse.py`` (``nox -s rehearse``) runs it. Real here: act and the workflow's own job graph,
expressions and shell; GitHub's actions at the SHAs the workflow pins (``../shared/actions``); act's artifact
server (127.0.0.1); the farm's Docker builds; pip installing from the site, served on 127.0.0.1.
Mapped or stood in for, each because act or this host cannot do it:
- upload-artifact v6 runs v4.6.2's code: act's artifact server refuses v6's blob upload (nektos/act issue 6021);
- ``sudo`` runs its arguments (GitHub's runners have passwordless sudo; this host has no sudo);
- tag releases only: ``gh`` (GitHub's releases API), attest-build-provenance (Sigstore, OIDC), deploy-pages
  (Pages), gh-action-pypi-publish (PyPI, OIDC): ``builder/standins/``, which record what they were given;
  github.com's asset downloads: ``tests/releasekit.py``.

The dry run is in the CI set; the tag releases and the failing build are ``--run-slow``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from farmkit import docker_client
from indexkit import find_python
from releasekit import github_assets, make_certs, serve_at, through_assets, venv_with_torch

from builder.rehearse import DRY_RUN_PROFILE, UPLOAD_ARTIFACT_V4, UPLOAD_ARTIFACT_V6, free_port, rehearse, shared_actions

REPO = Path(__file__).resolve().parents[1]
ACTIONS = Path(os.environ["REHEARSAL_ACTIONS"]) if os.environ.get("REHEARSAL_ACTIONS") else shared_actions(REPO)
OWNER_REPO = "mamba-ssm/wheels"  # builder.rehearse.ORIGIN
TORCH_CPU = "torch==2.13.0"
SCAN = (
    "import torch, mamba_ssm\n"
    "from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref\n"
    "u=torch.randn(1,4,16); d=torch.rand(1,4,16); A=-torch.rand(4,2); B=torch.randn(1,2,16); C=torch.randn(1,2,16)\n"
    "out=selective_scan_fn(u,d,A,B,C); ref=selective_scan_ref(u,d,A,B,C)\n"
    "assert torch.allclose(out, ref, atol=1e-4), (out-ref).abs().max()\n"
    "print('scan ok', mamba_ssm.__file__)\n"
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
def dry(tmp_path_factory):
    docker_client()  # skips without an engine: the build jobs run the farm's Docker executor, as on GitHub
    work = tmp_path_factory.mktemp("rehearsal-dry")
    result = rehearse(work / "r", actions=ACTIONS, profile=DRY_RUN_PROFILE, index_port=free_port(), python=_python311())
    print(f"dry run: {len(result.jobs)} jobs in {result.seconds:.0f} s, act exit {result.rc}: {result.jobs}")
    return result


def test_the_upload_artifact_v6_mapping_is_the_one_act_workaround():
    """Named here: the v6 SHA runs v4.6.2's code (act issue 6021); every other action is its own pinned SHA."""
    from builder.rehearse import ACT_WORKAROUNDS, local_actions

    assert ACT_WORKAROUNDS == {UPLOAD_ARTIFACT_V6: UPLOAD_ARTIFACT_V4}
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    specs = dict(s.split("=", 1) for s in local_actions(workflows, ACTIONS, REPO / "builder" / "standins" / "actions"))
    assert specs[UPLOAD_ARTIFACT_V6].endswith(UPLOAD_ARTIFACT_V4)
    for action, folder in specs.items():
        if action != UPLOAD_ARTIFACT_V6 and "standins" not in folder:
            assert folder.endswith(action), (action, folder)


def test_a_missing_action_is_named(tmp_path):
    from builder.rehearse import RehearsalError, local_actions

    with pytest.raises(RehearsalError, match=r"actions/checkout@[0-9a-f]{40}: no action at"):
        local_actions([REPO / ".github" / "workflows" / "release.yml"], tmp_path, None)


def test_the_dry_run_runs_the_whole_job_graph(dry):
    assert dry.rc == 0, dry.log.read_text()[-6000:]
    builds = sorted(j for j in dry.jobs if j.startswith("build "))
    assert len(builds) == 2 and all(dry.jobs[j] == "succeeded" for j in builds), dry.jobs
    assert dry.jobs["plan"] == dry.jobs["publish"] == "succeeded"
    # A dry run publishes nothing: no release, no Pages, no sdist for PyPI.
    assert not {"pages", "sdist", "pypi"} & set(dry.jobs), dry.jobs
    assert sorted(p.parent.name for p in dry.artifacts.glob("*/*/*.zip")) == sorted(
        ["index"] + [f"wheel-{j.split()[1].rsplit('-', 1)[0]}" for j in builds]
        + [f"log-{j.split()[1].rsplit('-', 1)[0]}" for j in builds]
    )  # fmt: skip


def test_pip_installs_from_the_dry_run_site(dry, tmp_path):
    """The index artifact, served where INDEX_URL said: the coverage page's command installs a working wheel."""
    assert dry.rc == 0
    site = dry.artifact("index", tmp_path / "site")
    commands = _coverage_commands(site)
    assert commands and all(dry.index_url in c for c in commands), commands
    (cmd,) = [c for c in commands if "+cputorchstable" in c and "/cpu-torch2.13-cxx11abiTRUE/" in c]
    assert "mamba-ssm==2.3.0+cputorchstable" in cmd  # the exact pin
    env = dict(os.environ)
    py = venv_with_torch(tmp_path / "venv", _python311(), TORCH_CPU, env)
    port = int(dry.index_url.rsplit(":", 1)[1])
    with serve_at(site, port):
        _run([str(py), "-m", *shlex.split(cmd)], env)
    out = _run([str(py), "-I", "-c", SCAN], env).stdout
    assert "scan ok" in out and str(tmp_path / "venv") in out
