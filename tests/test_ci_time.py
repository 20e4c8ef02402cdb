"""benchmarks/ci_time.py: the where-the-time-went table of a CI log, on small logs made here.

One log comes from the real producers (pytest with tests/conftest.py's --file-times and --durations,
the farm's timings.record lines as .ci/run prints them); one is an old-style log whose lines carry
their elapsed seconds, the form a timestamping wrapper writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import ci_time  # benchmarks/ is not a package: on sys.path above


@pytest.fixture(scope="module")
def produced_log(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("ci-log")
    (tmp / "test_slow_one.py").write_text(
        textwrap.dedent(
            """
            import time
            import pytest

            @pytest.fixture(scope="module")
            def made_once():
                time.sleep(1.2)

            def test_a(made_once):
                time.sleep(0.1)

            def test_b(made_once):
                pass
            """
        )
    )
    (tmp / "test_fast_two.py").write_text("def test_c():\n    pass\n")
    # two workers, as scripts/test-ci.sh runs the CI set: each file's time still reaches the summary
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "--rootdir", str(tmp), "-p", "no:cacheprovider", "-n", "2",
         "--durations=40", "--durations-min=1", "--file-times", "test_slow_one.py", "test_fast_two.py"],
        check=False, cwd=tmp, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the farm's lines, written by the real recorder, printed as .ci/run prints them
    from builder.facts import timings

    record = tmp / "timings.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAMBA_FARM_TIMINGS", str(record))
        mp.setenv("MAMBA_FARM_TIMINGS_CONTEXT", "tests/test_slow_one.py::test_a")
        timings.record("base", "mamba-farm/debian:bookworm", 31.0)
        timings.record("image", "mamba-farm/cpu:abc", 120.0)
        timings.record("image", "mamba-farm/cpu:abc", 118.0)  # the same image made twice: the table says so
        timings.record("torch", "volume mamba-farm-torch-cp311-2.13.0-cpu", 40.0)
        timings.record("compile", "cpu-torch2.13-py3.11", 200.0, cpu=380.0)
    farm = "".join(f"ci-time: farm {line}\n" for line in record.read_text().splitlines())
    steps = "ci-time: step bootstrap 3.5 s\nci-time: step venv 20.0 s\nnox > ci-time: step torch 26.0 s\n"
    return steps + proc.stdout + farm + "ci: CPU busy 87% of 2 cores\nci: finished in 400.0 s\n"


def test_the_table_has_each_set_up_step_and_each_test_file(produced_log) -> None:
    result = ci_time.parse(produced_log.splitlines())
    assert result["steps"] == {"bootstrap": 3.5, "venv": 20.0, "torch": 26.0}
    assert set(result["files"]) == {"test_slow_one.py", "test_fast_two.py"}
    assert result["files"]["test_slow_one.py"] >= 1.3 > result["files"]["test_fast_two.py"]
    # the module fixture's sleep is the one phase over a second
    assert [(phase, node) for _, phase, node in result["durations"]] == [("setup", "test_slow_one.py::test_a")]
    assert result["passed"][0].startswith("3 passed") and result["workers"] == 2 and result["total"] == 400.0
    table = ci_time.table(result)
    assert "CPU busy 87% of the run on 2 cores." in table  # what more workers could still use
    assert "Whole run: 400 s." in table and "| **tests, all files (summed over 2 workers" in table
    assert "| set-up: venv | 20 |" in table and "| **set-up, all** | **50** |" in table
    assert "| tests: test_slow_one.py | 1 |" in table
    assert "| 1 | setup | test_slow_one.py::test_a |" in table


def test_the_farm_steps_are_summed_by_kind_and_repeats_named(produced_log) -> None:
    table = ci_time.table(ci_time.parse(produced_log.splitlines()))
    assert "| Docker images (3; inside the tests below) | 269 |" in table
    assert "| torch volumes and venvs (1; inside the tests below) | 40 |" in table
    assert "| compiles (1, 380 CPU-s; wall includes torch filled on first use; inside the tests below) | 200 |" in table
    assert "| image | mamba-farm/cpu:abc | 120 | tests/test_slow_one.py::test_a |" in table
    assert "Made more than once in this run: image mamba-farm/cpu:abc (2x)." in table


def test_a_spec_compiled_more_than_once_is_named_with_the_test_files_that_asked() -> None:
    rows = [
        {"kind": "compile", "what": "cpu-a", "seconds": 12.0, "context": "tests/test_x.py::test_one"},
        {"kind": "compile", "what": "cpu-a", "seconds": 11.0, "context": "tests/test_y.py::test_two"},
        {"kind": "compile", "what": "cpu-a", "seconds": 11.0, "context": "tests/test_y.py::test_three"},
        {"kind": "compile", "what": "cu13-b", "seconds": 30.0, "context": "tests/test_x.py::test_one"},
    ]
    log = "".join(f"ci-time: farm {json.dumps(r)}\n" for r in rows)
    table = ci_time.table(ci_time.parse(log.splitlines()))
    assert "Compiled more than once in this run: cpu-a (3x: tests/test_x.py, tests/test_y.py)." in table
    assert "Compiled more than once in this run: nothing." in ci_time.table(ci_time.parse(log.splitlines()[3:]))


def test_a_log_with_elapsed_seconds_is_split_by_the_lines_that_open_each_step() -> None:
    log = """\
[    0.0] bootstrap: installing docker.io
[   28.0] bootstrap: docker engine 20.10.24 is up
[   33.7] WARNING: Location 'file:///x/' is ignored: it is neither a file nor a directory.
[   56.5] nox > Running session tests
[   60.7] nox > python -m pip install torch==2.13.0
[   87.0] nox > python -m pip install 'packaging>=24'
[  110.6] nox > python -m pip install --no-build-isolation -e .
[  124.8] nox > pytest
[  133.9] collected 5 items
[  135.0] tests/test_a.py ..                                  [ 40%]
[  200.0] tests/test_b.py ........................................................ [ 80%]
[  260.5] .                                                    [100%]
[  261.0] ========== 5 passed in 130.00s (0:02:10) ==========
"""
    result = ci_time.parse(log.splitlines())
    assert result["steps"] == {
        "bootstrap": 33.7, "venv": 22.8, "nox-venv": 4.2, "torch": 26.3, "test-group": 23.6, "editable-install": 14.2,
    }  # fmt: skip
    assert result["files"] == {"tests/test_a.py": 1.1, "tests/test_b.py": 125.5}
    assert result["total"] == 261.0 and result["passed"] == ("5 passed", 130.0)
    assert "| Docker images | (not in this log) |" in ci_time.table(result)


def test_an_unreadable_log_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ci_time.py"), str(tmp_path / "missing.log")],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "missing.log" in proc.stderr
    assert "Traceback" not in proc.stderr
