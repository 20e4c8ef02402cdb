"""The newest torch minor in the data, built for real (slow): matrix.toml's ``ci-newest`` profile.

This checkout's classic cu13 wheel and upstream's causal-conv1d (its recipe, C++20 and arch patches)
for torch 2.15 x cp311 x sm_80, with the host executor and the machine's nvcc 13.0 (which
builder/data/toolkits.toml says builds against torch's CUDA 13.2 builds): each wheel verified,
smoke-tested under torch 2.15 and indexed. The host's pip cap on torch (a constraint file) is
lifted for the run: the point is a torch newer than the ones the farm pinned before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from farmkit import run_build

from builder.planning.plan import load_plan

pytestmark = [pytest.mark.slow, pytest.mark.cuda_build]
NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")


@pytest.mark.skipif(not NVCC.is_file(), reason="needs the CUDA 13.0 toolkit")
def test_newest_torch_classic_and_causal_conv1d_build_verify_smoke_and_index(tmp_path):
    plan = load_plan(profile="ci-newest")
    newest = max(plan.matrix.axes.torch, key=lambda t: tuple(map(int, t.split("."))))
    assert {b.torch for b in plan.builds} == {newest} and len(plan.builds) == 2
    empty = tmp_path / "no-constraints.txt"
    empty.write_text("")
    dist = tmp_path / "dist"
    run = run_build("--profile", "ci-newest", "--executor", "host", "--jobs", "1", "--dist", str(dist),
                    env={"PIP_CONSTRAINT": str(empty), "MAX_JOBS": "2"}, timeout=5400)  # fmt: skip
    assert run.rc == 0, run.out[-6000:]
    wheels = sorted(p.name for p in (dist / "wheels").glob("*.whl"))
    label = f"cu13torch{newest}cxx11abitrue"
    assert [w.split("-")[0] for w in wheels] == ["causal_conv1d", "mamba_ssm"] and all(label in w.lower() for w in wheels)
    # a wheel reaches dist/wheels only verified (tags, ABI, archs) and smoke-tested under the plan's torch
    listed = "\n".join(p.read_text() for p in (dist / "index").rglob("*.html"))
    assert all(w in listed for w in wheels), "both wheels in the index"
    print(f"ci-newest: {wheels} in {run.seconds:.0f} s")
