"""The release's torch releases before the stable floor, one classic CPU wheel each, for real: the
ci-older-torch profile's wheel for torch 2.4 ... 2.9 (Python 3.11) through ``python -m builder build --executor
docker``, verified, smoke-tested on the CPU with that torch (the scan against the float64 reference), and its
evidence record the one the release's cell of that torch takes its tier from. torch 2.4-2.6 ship the pre-C++11
ABI only: their wheels are the release's cxx11abiFALSE samples.

PyTorch's CPU index does not answer from every host; where it does not, the farm takes the release pip's own
configuration gives (PyPI's default build of it, whose CPU library is the one the CPU build ships) for the build and
the smoke test alike, and the record names the torch that ran. Each case keeps its own farm cache and deletes it:
that torch with its CUDA wheels is about 5 GB.
"""

from __future__ import annotations

import shutil

import pytest
from farmkit import checked_evidence, docker_client, run_build

PROFILE = "ci-older-torch"
OLD_ABI = ("2.4", "2.5", "2.6")  # the torch releases that ship the pre-C++11 ABI only


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("torch", ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9"])
def test_an_older_torchs_cpu_wheel_is_built_cpu_checked_and_the_release_cells_evidence(torch, tmp_path):
    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    import docker.errors

    from builder.building.executors.docker import torch_store

    client = docker_client()
    (spec,) = [s for s in load_plan(profile=PROFILE).builds if s.torch == torch]
    cache, dist = tmp_path / "farm-cache", tmp_path / "dist"
    volume = torch_store(spec)  # where the smoke venv cannot be linked (a wheel tagged only linux_x86_64 inside)
    kept = any(v.name == volume for v in client.volumes.list())
    env = {"MAMBA_FARM_CACHE": str(cache), "PIP_NO_CACHE_DIR": "1"}  # GBs that no other test reads
    try:
        run = run_build("--profile", PROFILE, "--only", spec.id, "--executor", "docker", "--dist", str(dist),
                        env=env, timeout=3600)  # fmt: skip
        assert run.rc == 0, run.out[-5000:]
        (wheel,) = (dist / "wheels").glob("*.whl")
        abi = "FALSE" if torch in OLD_ABI else "TRUE"
        assert wheel.name.startswith("mamba_ssm-") and f"+cputorch{torch}cxx11abi{abi}-cp311-cp311-manylinux_" in wheel.name
        # verified (the extension's libstdc++ ABI is the label's) and CPU-checked with that torch release
        (rec,) = checked_evidence(dist, run.out, numerics=True, modules=("mamba_ssm._C",))
        assert set(rec["verified"]["abi"].values()) <= {"cxx11" if abi == "TRUE" else "pre-cxx11"}, rec["verified"]
        assert rec["imported"]["torch"].split("+")[0] == spec.torch_version, rec["imported"]
        assert rec["built"]["torch"].split("+")[0] == spec.torch_version, rec["built"]
        # the release builds this kind of wheel for exactly this torch's Python 3.11 cell, which now reads cpu-checked
        release = load_plan(profile="release")
        cells = [(c, t) for c, _b, t, r in tiers.cell_tiers(release, [rec]) if r is not None]
        assert [(c.torch, c.python, t) for c, t in cells] == [(torch, "3.11", "cpu-checked")], cells
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if not kept:
            try:
                client.volumes.get(volume).remove()
            except docker.errors.NotFound:
                pass
