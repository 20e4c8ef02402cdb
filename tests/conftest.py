from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest
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
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow end-to-end build: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures: the farm's timed steps (builder/building/driver/timings.py) name the test that asked.
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # setup, call and teardown together: a module fixture's cost lands on the test that made it
    started = time.monotonic()
    try:
        return (yield)
    finally:
        _FILE_SECONDS[item.nodeid.split("::")[0]] += time.monotonic() - started


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if config.getoption("--file-times"):
        for path, seconds in _FILE_SECONDS.items():
            terminalreporter.write_line(f"ci-time: file {path} {seconds:.1f} s")
