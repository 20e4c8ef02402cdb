"""docs/user/usage.md: its example runs as printed (each `print(...)  # out` line prints `out`), and the package's
top-level names are upstream's (``from mamba_ssm import Mamba``) without ``import mamba_ssm`` needing torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

PAGE = REPO / "docs" / "user" / "usage.md"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's mamba_ssm, built or not


def test_the_usage_example_runs_and_prints_what_the_page_says():
    pytest.importorskip("torch")
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert blocks, "no python example on the usage page"
    for code in blocks:
        want = [m.group(1) for ln in code.splitlines() if (m := re.match(r"print\(.*\)\s+#\s+(.+)$", ln))]
        assert want, "the example says nothing it prints"
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=600, check=False
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.splitlines() == want, proc.stdout


def test_upstreams_top_level_names_import_lazily():
    code = (
        "import sys, mamba_ssm; assert 'torch' not in sys.modules, 'import mamba_ssm imported torch'; "
        "print(sorted(set(mamba_ssm.__all__) - {'__version__'}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['Mamba', 'selective_scan_fn', 'selective_scan_ref']"
    pytest.importorskip("torch")
    code = "from mamba_ssm import Mamba, selective_scan_fn; import mamba_ssm.modules.mamba_simple as m; print(Mamba is m.Mamba)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300, check=False
    )
    assert proc.stdout.strip() == "True", proc.stderr
    bad = subprocess.run(
        [sys.executable, "-c", "from mamba_ssm import Mamba2"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1 and "cannot import name 'Mamba2'" in bad.stderr  # upstream only, and said so plainly
