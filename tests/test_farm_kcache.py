"""Compile once per toolchain: every build of one image shares one kernel-object cache (MAMBA_KERNEL_CACHE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from farmkit import ci_spec

from builder.building.executors import KERNEL_CACHE_MOUNT, BuildOptions
from builder.building.executors.docker import PIP_CACHE_VOLUME, DockerExecutor
from builder.building.executors.host import KERNEL_CACHES, HostExecutor


class _NoContainers:
    """Just enough of a docker client for DockerExecutor's constructor (no leftovers to remove)."""

    class containers:
        @staticmethod
        def list(**_):
            return []


@pytest.fixture(autouse=True)
def _offline(monkeypatch) -> None:
    # spec_env probes torch's index; these tests only look at the config the executors hand out.
    monkeypatch.setattr("builder.facts.hostenv.url_reachable", lambda url, timeout=8.0: False)


def test_docker_builds_of_one_image_share_its_kernel_cache_volume() -> None:
    ex = DockerExecutor(_NoContainers(), BuildOptions(log=lambda _: None))
    cu311, cu312, cpu = ci_spec("cu13", "3.11"), ci_spec("cu13", "3.12"), ci_spec("cpu")
    assert cu311.image == cu312.image != cpu.image
    for s in (cu311, cu312, cpu):
        ex.pythons.setdefault(s.image, {})[s.python] = f"/opt/python/{s.python_tag}/bin/python"
    configs = {s.id: ex._build_config(s, "torch-vol") for s in (cu311, cu312, cpu)}
    kcache = {}
    for sid, (env, volumes) in configs.items():
        assert env["MAMBA_KERNEL_CACHE"] == KERNEL_CACHE_MOUNT
        (name,) = [n for n, v in volumes.items() if v["bind"] == KERNEL_CACHE_MOUNT]
        assert volumes[name]["mode"] == "rw" and volumes["torch-vol"] == {"bind": "/torch", "mode": "ro"}
        kcache[sid] = name
    assert kcache[cu311.id] == kcache[cu312.id] == f"mamba-farm-kcache-{cu311.image}"
    assert kcache[cpu.id] == f"mamba-farm-kcache-{cpu.image}"
    # no clash with the mounts every container gets
    assert KERNEL_CACHE_MOUNT not in {v["bind"] for v in ex._mounts().values()}
    assert PIP_CACHE_VOLUME not in kcache.values()


def test_host_builds_of_one_image_share_its_kernel_cache_dir(tmp_path: Path) -> None:
    ex = HostExecutor(BuildOptions(log=lambda _: None))
    cu311, cu312, cpu = ci_spec("cu13", "3.11"), ci_spec("cu13", "3.12"), ci_spec("cpu")
    env = {s.id: ex.build_env(s, tmp_path / "py", tmp_path / "src", tmp_path / "out") for s in (cu311, cu312, cpu)}
    assert (
        env[cu311.id]["MAMBA_KERNEL_CACHE"] == env[cu312.id]["MAMBA_KERNEL_CACHE"] == str(KERNEL_CACHES / cu311.image)
    )
    assert env[cpu.id]["MAMBA_KERNEL_CACHE"] == str(KERNEL_CACHES / cpu.image)
    assert env[cpu.id]["FARM_SRC"] == str(tmp_path / "src")
