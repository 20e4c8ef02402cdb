"""linux_aarch64 on this x86_64 host, under emulation (qemu-user-static registered with the F flag).

The ci-aarch64 profile's one build, the aarch64 CPU stable-ABI wheel (torch 2.10, PyPI's CPU-only
aarch64 build), through `python -m builder build --executor docker`: built in the farm's arm64
image, verified (its ELF files are AArch64, as its tag says), smoke-tested in that image (the CPU
scan against the float64 reference, so the kernel's aarch64 vector code runs), indexed. Then, in
an arm64 container: `resolve` against the index served on 127.0.0.1, real pip installs the wheel
it names next to torch 2.10, the op runs, and the doctor finds every compiled file AArch64.

A host without emulation skips, printing the reason the farm gives.
"""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest
from farmkit import REPO, docker_client, run_build
from indexkit import serve

from builder import emulation

pytestmark = pytest.mark.docker

PROFILE = "ci-aarch64"


def _spec():
    from builder.plan import load_plan

    (spec,) = load_plan(profile=PROFILE).builds
    return spec


@pytest.fixture(scope="module")
def aarch64_run(tmp_path_factory):
    reason = emulation.unavailable("aarch64")
    if reason is not None:
        pytest.skip(f"no aarch64 emulation on this host: {reason} ({emulation.SETUP_HINT})")
    client = docker_client()
    spec = _spec()
    dist = tmp_path_factory.mktemp("farm-aarch64") / "dist"
    run = run_build("--profile", PROFILE, "--executor", "docker", "--dist", str(dist), "--jobs", "1", timeout=5400)
    print(f"\naarch64 build (emulated), verify, smoke, index: {run.seconds:.0f}s")
    return SimpleNamespace(client=client, spec=spec, dist=dist, run=run)


def test_the_aarch64_wheel_is_built_verified_smoke_tested_and_indexed(aarch64_run):
    run, dist, spec = aarch64_run.run, aarch64_run.dist, aarch64_run.spec
    assert run.rc == 0, run.out[-5000:]
    (wheel,) = sorted((dist / "wheels").glob("*.whl"))
    assert re.search(r"-cp310-abi3-manylinux_2_\d+_aarch64\.whl$", wheel.name), wheel.name
    # the smoke test ran in the arm64 image, against the float64 reference
    assert f"{spec.id}: smoke ok: torch 2.10.0" in run.out and "(under emulation," in run.out
    smoke_log = (dist / "logs" / f"{spec.id}.smoke.log").read_text()
    assert "max abs error" in smoke_log
    # every ELF file in it is AArch64, read the verifier's way
    import zipfile

    from mamba_ssm import _elf

    with zipfile.ZipFile(wheel) as zf:
        machines = {n: _elf.machine_of(zf.read(n)[:20]) for n in zf.namelist() if n.endswith(".so")}
    assert machines and set(machines.values()) == {"aarch64"}, machines
    page = (dist / "index" / spec.variant / "index.html").read_text()
    assert wheel.name in page
    assert 'data-machine="aarch64"' in (dist / "index" / "index.html").read_text()


# In the arm64 container: resolve names the wheel, pip installs it next to torch, the op runs, the doctor agrees.
_INSTALL = r"""
set -euo pipefail
py=/opt/python/cp311-cp311/bin/python
[ "$(uname -m)" = aarch64 ]
PYTHONPATH=/repo "$py" -m builder resolve --index "$INDEX" --torch 2.10 --python 3.11 --format json > /tmp/resolve.json
echo "== resolve"; cat /tmp/resolve.json; echo "== end resolve"
read -r -a cmd < <("$py" -c 'import json; print(json.load(open("/tmp/resolve.json"))["command"])')
"$py" -m venv /v
/v/bin/python -m pip install -q torch==2.10.0 "${cmd[@]:2}"
cd /
/v/bin/python - <<'EOF'
import platform, torch, mamba_ssm
from mamba_ssm.ops import selective_scan_interface as ssi
assert ssi.HAS_EXTENSION, ssi._IMPORT_ERROR
torch.manual_seed(0)
u = torch.randn(1, 2, 17); delta = torch.rand(1, 2, 17); A = -torch.rand(2, 4); B = torch.randn(1, 4, 17); C = torch.randn(1, 4, 17)
out = ssi.selective_scan_fn(u, delta, A, B, C)
ref = ssi.selective_scan_ref(*(t.double() for t in (u, delta, A, B, C)))
err = (out.double() - ref).abs().max().item()
assert err < 1e-4, err
print(f"op ok on {platform.machine()}: mamba_ssm {mamba_ssm.__version__}, torch {torch.__version__}, max abs error {err:.2e}")
EOF
/v/bin/python -m mamba_ssm.doctor --offline --json > /tmp/doctor.json || true
/v/bin/python -c 'import json; d = json.load(open("/tmp/doctor.json")); print("doctor:", [(f["verdict"], f["title"]) for f in d["findings"] if f["check"] == "machine"])'
"""


def test_resolve_and_pip_install_from_the_index_in_an_arm64_container(aarch64_run):
    assert aarch64_run.run.rc == 0, "the build failed: see the test above"
    from builder.hostenv import host_pip_settings
    from builder.images import image_repo

    client, spec, dist = aarch64_run.client, aarch64_run.spec, aarch64_run.dist
    (image,) = [i for i in client.images.list(filters={"label": f"org.mamba-farm.image={spec.image}"})
                if any(t.startswith(image_repo("cpu") + ":") for t in i.tags)]  # fmt: skip
    pip = host_pip_settings([])
    volumes = {str(REPO): {"bind": "/repo", "mode": "ro"}, "mamba-farm-pip-cache": {"bind": "/root/.cache/pip", "mode": "rw"}}
    volumes |= {str(d): {"bind": str(d), "mode": "ro"} for d in pip.local_dirs}
    t0 = time.monotonic()
    with serve(dist) as url:
        out = client.containers.run(
            image.id, ["bash", "-c", _INSTALL], platform="linux/arm64", network_mode="host", remove=True,
            environment={**pip.env(), "INDEX": f"{url}/index", "PIP_CACHE_DIR": "/root/.cache/pip", "PIP_NO_CACHE_DIR": "0"},
            volumes=volumes, stdout=True, stderr=True,
        ).decode()  # fmt: skip
    print(f"\nresolve + pip install + op in the arm64 container: {time.monotonic() - t0:.0f}s\n{out[-1500:]}")
    resolved = json.loads(out.split("== resolve\n", 1)[1].split("== end resolve", 1)[0])
    (wheel,) = sorted((dist / "wheels").glob("*.whl"))
    # the stable wheel, listed on the torch 2.10 page it serves
    assert resolved["wheel"] == wheel.name and resolved["variant"] == "cpu-torch2.10-cxx11abiTRUE", resolved
    assert "op ok on aarch64: mamba_ssm 2.3.0, torch 2.10.0" in out, out[-3000:]
    assert "doctor: [('ok', " in out and "all built for aarch64" in out, out[-2000:]
