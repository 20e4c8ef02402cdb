from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest
import setuptools  # noqa: F401 - first, in every worker: its distutils shim settles before any test can import the stdlib's
from hypothesis import settings

# The checkout, for every test module: `from conftest import REPO`.
REPO = Path(__file__).resolve().parents[1]

# The fuzzers of tests/test_fuzz_parsers.py (and any @given test): bounded in the CI set, long behind --run-slow.
settings.register_profile("ci", max_examples=25, deadline=5000, print_blob=True)
settings.register_profile("slow", max_examples=2000, deadline=30000, print_blob=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the slow end-to-end builds")
    parser.addoption(
        "--file-times",
        action="store_true",
        help="end with each test file's wall time (benchmarks/ci_time.py reads them)",
    )


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile("slow" if config.getoption("--run-slow") else "ci")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the files that use the Docker engine first: they are the longest, and one started last is the run's tail
    items.sort(key=lambda item: "docker" not in item.keywords)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow end-to-end build: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# The files that build the ci profile's specs through the Docker engine and check its containers, or read a
# session run of tests/sharedruns.py: with pytest-xdist they run in turn on one worker.
ONE_WORKER = {
    "tests/test_farm_docker.py",
    "tests/test_farm_faults.py",
    "tests/test_reproducible.py",
    "tests/test_upstream_farm.py",
    "tests/test_release_rehearsal.py",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n`` (scripts/test-ci.sh runs ``-n auto``): each test file on one worker, so its module fixtures
    are made once, and the ONE_WORKER files together on one."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return "one-worker" if path in ONE_WORKER else path

    return ByFile(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures: the farm's timed steps (builder/facts/timings.py) name the test that asked.
    if os.environ.get("MAMBA_FARM_TIMINGS"):
        os.environ["MAMBA_FARM_TIMINGS_CONTEXT"] = item.nodeid


# Made once per pytest run, on first use, and read by every test file that needs it (tests/sharedruns.py).


@pytest.fixture(scope="session")
def ci_cpu_runs(tmp_path_factory):
    """The ci profile's CPU wheel in Docker: killed mid-build, rerun, run again (one dist)."""
    import sharedruns

    return sharedruns.ci_cpu_runs(tmp_path_factory.mktemp("farm-docker"))


@pytest.fixture(scope="session")
def release_dry_run(tmp_path_factory):
    """release.yml's dry run under act (builder.upkeep.rehearse): its jobs, log and artifacts."""
    import sharedruns

    return sharedruns.release_dry_run(tmp_path_factory.mktemp("rehearsal-dry"))


_FILE_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # setup, call and teardown together (a module fixture's cost lands on the test that made it); with
    # pytest-xdist the reports reach the controller, which prints the sums
    _FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if config.getoption("--file-times"):
        for path, seconds in _FILE_SECONDS.items():
            terminalreporter.write_line(f"ci-time: file {path} {seconds:.1f} s")


# `python -m builder ...` for every test file: the `cli` fixture.


@pytest.fixture(scope="session")
def cli():
    """``cli(*args, env=None, cwd=None, input=None, timeout=600)`` runs ``python -m builder ARGS...`` as a user
    would: a subprocess in the checkout (or ``cwd``), ``env`` set over this process's environment, text output.
    It returns the completed process (``returncode``, ``stdout``, ``stderr``), whatever the exit code.

    ``in_process=True`` calls the same entry point (``builder.commands.cli.main``) in this interpreter instead,
    its output captured alike: for the tests that run it hundreds of times, or that monkeypatch what it calls."""
    import subprocess
    import sys

    def run(*args, env=None, cwd=None, input=None, timeout=600, in_process=False) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        if in_process:
            assert env is None and cwd is None and input is None, "in_process runs here: no env, cwd or input"
            return _in_process(argv)
        return subprocess.run(
            [sys.executable, "-m", "builder", *argv], cwd=cwd or REPO, env={**os.environ, **(env or {})},
            input=input, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    return run


def _in_process(argv: list[str]):
    import contextlib
    import io
    import subprocess

    from builder.commands.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's usage errors and --help, as the process would end
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["python", "-m", "builder", *argv], rc, out.getvalue(), err.getvalue())
