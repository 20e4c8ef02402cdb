from __future__ import annotations

import pytest
from hypothesis import settings

# The fuzzers of tests/test_fuzz_parsers.py (and any @given test): bounded in the CI set, long behind --run-slow.
settings.register_profile("ci", max_examples=25, deadline=5000, print_blob=True)
settings.register_profile("slow", max_examples=2000, deadline=30000, print_blob=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the slow end-to-end builds")


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile("slow" if config.getoption("--run-slow") else "ci")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow end-to-end build: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
