"""``resolve --platform``: asked for another machine than the one it runs on (an aarch64 user, from an x86_64
host), resolve names that machine's wheel, never this host's."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelmaker import V, make_mamba_wheel

from builder.publishing.index import build_index

LABEL = "cu13torch2.14cxx11abiTRUE"


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("platform")
    for plat in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64"):
        make_mamba_wheel(root / "wheels", LABEL, "cp311", platform=plat)
    build_index(root / "wheels", root / "index")
    return root / "index"


# a resolve of the served cell; its --index and more flags are added
RESOLVE = ("resolve", "--torch", "2.14", "--cuda", "13.0", "--python", "3.11", "--index")


@pytest.mark.parametrize("platform,machine", [("aarch64", "aarch64"), ("linux_aarch64", "aarch64"),
                                              ("arm64", "aarch64"), ("x86_64", "x86_64")])  # fmt: skip
def test_resolve_names_the_wheel_of_the_platform_asked_for(index, platform, machine, cli):
    proc = cli(*RESOLVE, index, "--platform", platform, timeout=60)
    assert proc.returncode == 0, proc.stderr
    wheel = f"mamba_ssm-{V}+{LABEL.lower()}-cp311-cp311-manylinux_2_28_{machine}.whl"
    assert wheel.lower() in proc.stdout.lower(), proc.stdout
    other = {"aarch64": "x86_64", "x86_64": "aarch64"}[machine]
    assert f"manylinux_2_28_{other}" not in proc.stdout


def test_an_unknown_platform_is_a_usage_error(index, cli):
    proc = cli(*RESOLVE, index, "--platform", "win_amd64", timeout=60)
    assert proc.returncode == 2 and "expected x86_64 or aarch64" in proc.stderr and "Traceback" not in proc.stderr
