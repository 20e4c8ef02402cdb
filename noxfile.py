"""Thin sessions over ``python -m builder``: no logic lives here."""

from __future__ import annotations

import os
import time

import nox

# uv makes and fills a session's venv in about a second where venv and pip take 7-10 s, and every job of the
# release workflow makes its own; venv where uv is not installed.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
PYTHON = "3.11"
# The torch the test suite runs against (CPU path). pip takes it from a local
# wheelhouse when one is configured (find-links), else from the default index.
TEST_TORCH = os.environ.get("MAMBA_TEST_TORCH", "torch==2.13.0")


def _farm(session: nox.Session) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, "farm"))


def _timed_install(session: nox.Session, step: str, *args: str, **kwargs) -> None:
    """session.install, then its wall time as a `ci-time: step` line (benchmarks/ci_time.py reads them)."""
    started = time.monotonic()
    session.install(*args, **kwargs)
    session.log(f"ci-time: step {step} {time.monotonic() - started:.1f} s")


# pip, not uv: the tests' torch comes from the wheelhouse pip's own configuration names (find-links),
# which uv does not read.
@nox.session(python=PYTHON, venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The test suite (CI set; add --run-slow for every end-to-end build)."""
    # --no-compile: byte-compiling every module was about half of each install's time; the tests compile what
    # they import, once, into the session's venv.
    _timed_install(session, "torch", "--no-compile", TEST_TORCH)
    _timed_install(session, "test-group", "--no-compile", *nox.project.dependency_groups(PYPROJECT, "test"))
    _timed_install(
        session,
        "editable-install",
        "--no-build-isolation",
        "-e",
        ".",
        env={"MAX_JOBS": os.environ.get("MAX_JOBS", "2")},
    )
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site, strict (a warning fails): nox -s docs [-- --site-dir DIR]."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "docs"))
    # NO_MKDOCS_2_WARNING: Material's end-of-life banner (9.x is maintained until May 2027), not a build warning.
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def plan(session: nox.Session) -> None:
    """Show the build plan: nox -s plan -- --profile ci --format json."""
    _farm(session)
    # stderr kept apart (nox merges it into stdout by default): `--format github > plan.json` stays pure JSON.
    session.run("python", "-m", "builder", "plan", *session.posargs, stderr=None)


@nox.session(python=PYTHON)
def index(session: nox.Session) -> None:
    """Index a folder of wheels: nox -s index -- --wheels DIR --out OUT --base-url URL."""
    _farm(session)
    session.run("python", "-m", "builder", "index", *session.posargs)


@nox.session(python=PYTHON)
def doctor_dist(session: nox.Session) -> None:
    """The standalone doctor's wheel and index page: nox -s doctor_dist -- --out DIR (the site's doctor/)."""
    _farm(session)
    session.run("python", "-m", "builder", "doctor-dist", *session.posargs)


@nox.session(python=PYTHON)
def release(session: nox.Session) -> None:
    """The publish job's steps: nox -s release -- collect --matrix M --wheels DIR | split --wheels DIR --out OUT."""
    _farm(session)
    # stdout kept pure (collect's rows are read by the workflow), as in plan.
    session.run("python", "-m", "builder", "release", *session.posargs, stderr=None)


@nox.session(python=PYTHON)
def resolve(session: nox.Session) -> None:
    """Which wheel fits: nox -s resolve -- --torch 2.6 --cuda 12.4 --abi FALSE --python 3.11 --index URL."""
    _farm(session)
    session.run("python", "-m", "builder", "resolve", *session.posargs)


@nox.session(python=PYTHON)
def render(session: nox.Session) -> None:
    """Write every toolchain Dockerfile to build/docker/: nox -s render -- --profile ci."""
    _farm(session)
    session.run("python", "-m", "builder", "render", "--out", "build/docker", *session.posargs)


@nox.session(python=PYTHON)
def build_matrix(session: nox.Session) -> None:
    """Build, verify and index the plan into dist/: nox -s build_matrix -- --profile ci --executor docker."""
    _farm(session)
    session.run("python", "-m", "builder", "build", *session.posargs)


@nox.session(python=PYTHON)
def reproduce(session: nox.Session) -> None:
    """Rebuild and compare byte for byte: nox -s reproduce -- --rebuild ID WHEEL (or --one-per-kind DIR, the release's check)."""
    _farm(session)
    session.run("python", "-m", "builder", "reproduce", *session.posargs)


@nox.session(python=PYTHON)
def rehearse(session: nox.Session) -> None:
    """Run .github/workflows/release.yml under act on this host: nox -s rehearse (a dry run), -- --release for a tag."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "farm", "rehearse"))
    session.run("python", "-m", "builder", "rehearse", *session.posargs)
