"""linux_aarch64 on this x86_64 host, under emulation: the ci-aarch64 profile's builds through
``python -m builder build --executor docker``.

The CPU stable-ABI wheel (cross g++) and the CUDA 13 wheel for sm_90 (this host's nvcc and cross g++)
are built in the farm's arm64 image, verified, smoke-tested and indexed, then resolved, installed with pip and
run in an arm64 container. A host without emulation skips, printing the farm's reason.
"""

from __future__ import annotations

import json
import os
import re
import time
from types import SimpleNamespace

import pytest
from farmkit import REPO, docker_client, run_build
from indexkit import serve
from wheelmaker import V

from builder.building import emulation

pytestmark = pytest.mark.docker

PROFILE = "ci-aarch64"


def _spec(accelerator: str = "cpu"):
    from builder.planning.plan import load_plan

    (spec,) = [b for b in load_plan(profile=PROFILE).builds if b.accelerator == accelerator]
    return spec


def _image(client, run, spec):
    """SPEC's toolchain image: the one the run built or reused, as its log names it (another checkout's render
    can leave a newer image with the same label)."""
    used = re.search(rf"image {re.escape(spec.image)}: (?:reusing|building|built) (\S+)", run.out)
    assert used, run.out[-3000:]
    return client.images.get(used.group(1))


def _wheel(dist, spec):
    (wheel,) = sorted((dist / "wheels").glob(f"*+{spec.label}-*.whl"))
    return wheel


def _run(tmp_path_factory, accelerator: str) -> SimpleNamespace:
    """One ci-aarch64 build (--only its id), verified, smoke-tested and indexed into its own dist."""
    reason = emulation.unavailable("aarch64")
    if reason is not None:
        pytest.skip(f"no aarch64 emulation on this host: {reason} ({emulation.SETUP_HINT})")
    client = docker_client()
    spec = _spec(accelerator)
    dist = tmp_path_factory.mktemp(f"farm-aarch64-{accelerator}") / "dist"
    run = run_build(
        "--profile", PROFILE, "--only", spec.id, "--executor", "docker", "--dist", str(dist), "--jobs", "1", timeout=5400
    )  # fmt: skip
    print(f"\naarch64 {accelerator} build (emulated), verify, smoke, index: {run.seconds:.0f}s")
    return SimpleNamespace(client=client, spec=spec, dist=dist, run=run)


# Both wheels are in the CI set: the arm64 CUDA image shares the CPU image's emulated layers, fetches its toolkit
# natively and compiles with this host's nvcc and cross g++; PyPI's aarch64 CUDA torch is fetched by this host's pip.
@pytest.fixture(scope="module")
def aarch64_run(tmp_path_factory):
    return _run(tmp_path_factory, "cpu")


@pytest.fixture(scope="module")
def aarch64_cuda_run(tmp_path_factory):
    return _run(tmp_path_factory, "cu13")


def test_the_aarch64_wheel_is_built_verified_smoke_tested_and_indexed(aarch64_run):
    run, dist, spec = aarch64_run.run, aarch64_run.dist, aarch64_run.spec
    assert run.rc == 0, run.out[-5000:]
    wheel = _wheel(dist, spec)
    assert re.search(r"-cp310-abi3-manylinux_2_\d+_aarch64\.whl$", wheel.name), wheel.name
    # the smoke test ran in the arm64 image, against the float64 reference
    assert f"{spec.id}: smoke ok: torch 2.10.0" in run.out and "(under emulation," in run.out
    smoke_log = (dist / "logs" / f"{spec.id}.smoke.log").read_text()
    assert "max abs error" in smoke_log
    # every ELF file in it is AArch64, read the verifier's way
    import zipfile

    from mamba_ssm import elf as _elf

    with zipfile.ZipFile(wheel) as zf:
        machines = {n: _elf.machine_of(zf.read(n)[:20]) for n in zf.namelist() if n.endswith(".so")}
    assert machines and set(machines.values()) == {"aarch64"}, machines
    # compiled by the image's x86_64-hosted cross g++ (run natively), as the wheel's provenance says
    with zipfile.ZipFile(wheel) as zf:
        (prov,) = [n for n in zf.namelist() if n.endswith(".dist-info/farm-provenance.json")]
        toolchain = json.loads(zf.read(prov))["toolchain"]
    assert toolchain["compiler"] == "cross", toolchain
    assert (toolchain["cross"]["host"], toolchain["cross"]["target"]) == ("x86_64", "aarch64"), toolchain
    assert "g++-aarch64-linux-gnu" in toolchain["cross"]["packages"], toolchain
    build_log = (dist / "logs" / f"{spec.id}.log").read_text()
    assert "/opt/cross/usr/bin/aarch64-linux-gnu-g" in build_log, build_log[-3000:]
    # and pip and setup.py ran on an x86_64 CPython natively, configured as the image's: only the smoke test is emulated
    assert toolchain["cross"]["python"] == "x86_64 CPython 3.11", toolchain
    assert "(its files); pip and setup.py on x86_64 /opt/cross/python3.11/bin/python" in build_log, build_log[-3000:]
    page = (dist / "index" / spec.variant / "index.html").read_text()
    assert wheel.name in page
    assert 'data-machine="aarch64"' in (dist / "index" / "index.html").read_text()


@pytest.mark.cuda_build
def test_the_aarch64_cuda_wheel_compiled_natively_holds_aarch64_code_and_sm_90_sass_only(aarch64_cuda_run):
    """GH200's wheel: cu13 stable ABI, SASS exactly sm_90 read from its AArch64 objects, torch's and
    CUDA's libraries left to torch, smoke-tested against PyPI's aarch64 CUDA torch (no GPU needed)."""
    import zipfile

    from mamba_ssm import elf as _elf

    run, dist, spec = aarch64_cuda_run.run, aarch64_cuda_run.dist, aarch64_cuda_run.spec
    assert run.rc == 0, run.out[-5000:]
    wheel = _wheel(dist, spec)
    assert re.fullmatch(rf"mamba_ssm-{re.escape(V)}\+cu13torchstable-cp310-abi3-manylinux_2_\d+_aarch64\.whl", wheel.name), (
        wheel.name
    )
    assert f"{spec.id}: smoke ok: torch 2.11.0" in run.out and "(under emulation," in run.out
    with zipfile.ZipFile(wheel) as zf:
        elves = {n: zf.read(n) for n in zf.namelist() if zf.read(n)[:4] == b"\x7fELF"}
    assert elves and {_elf.machine_of(b[:20]) for b in elves.values()} == {"aarch64"}, list(elves)
    archs = [_elf.archs_in(_elf.Elf(b, n)) for n, b in elves.items()]
    assert {a for r in archs for a in r.sass} == {"sm_90"}, archs
    assert {a for r in archs for a in r.ptx} <= {"compute_90"}, archs
    bundled = [n for n in elves if re.search(r"/(libtorch|libc10|libcudart|libcublas|libnvrtc)", n)]
    assert not bundled, bundled
    # the cross g++ compiled and linked it, and was nvcc's host compiler wherever a kernel was compiled (a warm
    # kernel cache reuses them), as the provenance says
    with zipfile.ZipFile(wheel) as zf:
        (prov,) = [n for n in zf.namelist() if n.endswith(".dist-info/farm-provenance.json")]
        toolchain = json.loads(zf.read(prov))["toolchain"]
    assert toolchain["compiler"] == "cross" and toolchain["toolkit"]["kind"] == "cuda", toolchain
    log = (dist / "logs" / f"{spec.id}.log").read_text()
    assert re.search(r"^\s*mamba-ssm: /opt/cross/usr/bin/aarch64-linux-gnu-g\+\+ -shared ", log, re.M), log[-3000:]
    assert toolchain["cross"]["python"] == "x86_64 CPython 3.11", toolchain
    assert set(re.findall(r"-ccbin (\S+)", log)) <= {"/opt/cross/usr/bin/aarch64-linux-gnu-gcc"}, log[-3000:]


_COMPILER_PROBE = r"""
set -euo pipefail
echo "machine $(uname -m)"
for f in "$CUDA_HOME/bin/nvcc" "$CUDA_HOME/bin/ptxas" "$CUDA_HOME/nvvm/bin/cicc" "$CUDA_HOME/lib/libcudart.so.13" "$CXX"; do
  echo "$(basename "$f") $(head -c 20 "$(readlink -f "$f")" | od -An -tx1 | tr -d ' \n')"
done
"""


@pytest.mark.cuda_build
def test_the_arm64_cuda_image_runs_x86_64_device_compilers_and_aarch64_everything_else(aarch64_cuda_run):
    """Why the build is fast: the device compiler programs and the host compiler (the cross g++) are this
    host's, run natively in the emulated container; the runtime stays the target's, and the suite's own
    emulated compilers are not installed."""
    from mamba_ssm import elf as _elf

    client, spec = aarch64_cuda_run.client, aarch64_cuda_run.spec
    image = _image(client, aarch64_cuda_run.run, spec)
    out = client.containers.run(image.id, ["bash", "-c", _COMPILER_PROBE], platform="linux/arm64", remove=True).decode()
    found = dict(line.split(" ", 1) for line in out.splitlines() if line.strip())
    assert found.pop("machine") == "aarch64"
    machines = {name: _elf.machine_of(bytes.fromhex(head)) for name, head in found.items()}
    assert machines == {
        "nvcc": "x86_64",
        "ptxas": "x86_64",
        "cicc": "x86_64",
        "libcudart.so.13": "aarch64",
        "aarch64-linux-gnu-g++": "x86_64",
    }
    assert (
        client.containers.run(
            image.id, ["bash", "-c", "command -v g++ gcc || true"], platform="linux/arm64", remove=True
        )
        == b""
    )


# In the arm64 container: resolve names the wheel, pip installs it next to torch, the op runs, the doctor agrees.
# torch: the build's torch folder (/torch/site), through a .pth file.
_INSTALL = r"""
set -euo pipefail
py=/opt/python/cp311-cp311/bin/python
[ "$(uname -m)" = aarch64 ]
PYTHONPATH=/repo "$py" -m builder resolve --index "$INDEX" $RESOLVE --python 3.11 --format json > /tmp/resolve.json
echo "== resolve"; cat /tmp/resolve.json; echo "== end resolve"
read -r -a cmd < <("$py" -c 'import json; print(json.load(open("/tmp/resolve.json"))["command"])')
"$py" -m venv /v
echo /torch/site > "$(/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_torch.pth"
/v/bin/python -m pip install -q "${cmd[@]:2}"
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
print(f"op ok on {platform.machine()}: mamba_ssm {mamba_ssm.__version__}, torch {torch.__version__}, cuda {torch.version.cuda}, max abs error {err:.2e}")
EOF
/v/bin/python -m mamba_ssm.doctor --offline --json > /tmp/doctor.json || true
/v/bin/python -c 'import json; d = json.load(open("/tmp/doctor.json")); print("doctor:", [(f["verdict"], f["title"]) for f in d["findings"] if f["check"] == "machine"])'
"""

# torch comes from the build's torch folder (PyPI's aarch64 torch, installed by this host's pip and byte-compiled
# once): a second install of it in the container, under emulation, took as long as the build. pip installs the wheel.
_CASES = {
    # PyPI's CPU-only aarch64 torch 2.10
    "cpu": ("--torch 2.10", "cpu-torch2.10-cxx11abiTRUE", "torch 2.10.0, cuda None"),
    # PyPI's aarch64 CUDA 13 torch 2.11 (GBs with its nvidia-* wheels)
    "cu13": ("--torch 2.11 --cuda 13.0", "cu13-torch2.11-cxx11abiTRUE", "torch 2.11.0, cuda 13.0"),
}


# The cu13 install is --run-slow: the CI set builds, verifies and smoke-tests that wheel; installing it runs the same
# resolve and pip path as the CPU case, with 2 minutes of emulated imports of PyPI's CUDA torch.
@pytest.mark.parametrize("case", ["cpu", pytest.param("cu13", marks=pytest.mark.slow)])
def test_resolve_and_pip_install_from_the_index_in_an_arm64_container(request, case):
    built = request.getfixturevalue("aarch64_run" if case == "cpu" else "aarch64_cuda_run")
    assert built.run.rc == 0, "the build failed: see the tests above"
    from builder.building.executors.docker import torch_store
    from builder.facts.hostenv import host_pip_settings

    resolve, variant, versions = _CASES[case]
    client, dist, spec = built.client, built.dist, built.spec
    image = _image(client, built.run, spec)
    pip = host_pip_settings([])
    volumes = {
        str(REPO): {"bind": "/repo", "mode": "ro"},
        "mamba-farm-pip-cache": {"bind": "/root/.cache/pip", "mode": "rw"},
    }
    volumes |= {str(d): {"bind": str(d), "mode": "ro"} for d in pip.local_dirs}
    volumes[torch_store(spec)] = {"bind": "/torch", "mode": "ro"}  # the folder this host's pip filled
    env = {**pip.env(), "PIP_CACHE_DIR": "/root/.cache/pip", "PIP_NO_CACHE_DIR": "0", "RESOLVE": resolve}
    t0 = time.monotonic()
    with serve(dist) as url:
        out = client.containers.run(
            image.id, ["bash", "-c", _INSTALL], platform="linux/arm64", network_mode="host", remove=True,
            environment={**env, "INDEX": f"{url}/index"}, volumes=volumes, stdout=True, stderr=True,
        ).decode()  # fmt: skip
    print(f"\n{case}: resolve + pip install + op in the arm64 container: {time.monotonic() - t0:.0f}s\n{out[-1500:]}")
    resolved = json.loads(out.split("== resolve\n", 1)[1].split("== end resolve", 1)[0])
    # the stable wheel, listed on the page of the torch it serves
    assert resolved["wheel"] == _wheel(dist, spec).name and resolved["variant"] == variant, resolved
    # torch's own version may carry its build's local label (2.10.0+cpu, 2.11.0+cu130): the release is what counts
    torch_version, cuda = re.fullmatch(r"torch (\S+), cuda (\S+)", versions).groups()
    ran = re.search(rf"op ok on aarch64: mamba_ssm {re.escape(V)}, torch (\S+?)(\+\w+)?, cuda (\S+), max abs error", out)
    assert ran and (ran.group(1), ran.group(3)) == (torch_version, cuda), out[-3000:]
    assert "doctor: [('ok', " in out and "all built for aarch64" in out, out[-2000:]


# Another machine's torch is installed by this host's pip, which judges markers by this host: torch goes in
# alone, then the requirements whose markers hold on the target (PyPI's aarch64 torch 2.10 names x86_64-only
# CUDA wheels, which pip on x86_64 would fetch and fail on). The METADATA is PyPI's: read capped and strictly.
_TORCH_METADATA = """Metadata-Version: 2.4
Name: torch
Version: 2.10.0
Requires-Dist: filelock
Requires-Dist: setuptools; python_version >= "3.12"
Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: nvidia-cublas==13.1.0.3; platform_system == "Linux" and platform_machine == "aarch64"
Requires-Dist: pyyaml; extra == "pyyaml"

torch's description
"""


def _site(tmp_path, metadata: str):
    info = tmp_path / "site" / "torch-2.10.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata)
    return tmp_path / "site"


def test_another_machines_torch_requirements_are_judged_for_that_machine(tmp_path):
    from builder.environments.markers import target_requirements

    site = _site(tmp_path, _TORCH_METADATA)
    assert target_requirements(site, "torch", "aarch64", "3.11") == ["filelock", "nvidia-cublas==13.1.0.3"]
    assert target_requirements(site, "torch", "aarch64", "3.12") == [
        "filelock",
        "setuptools",
        "nvidia-cublas==13.1.0.3",
    ]
    assert target_requirements(site, "torch", "x86_64", "3.11") == [
        "filelock", "nvidia-cuda-runtime-cu12==12.8.90", "triton==3.6.0",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "metadata, says",
    [
        pytest.param(_TORCH_METADATA.replace("filelock", "filelock >>> 3; $(rm -rf /)"), "a Requires-Dist pip cannot read", id="bad-requirement"),
        pytest.param(b"\xff\xfe not utf-8", "cannot be read", id="not-utf8"),
        pytest.param("Requires-Dist: x\n" * 400_000, "cannot be read", id="too-large"),
        pytest.param(None, "cannot be read", id="fifo"),  # never waited on
    ],
)  # fmt: skip
def test_a_torch_metadata_that_cannot_be_read_fails_the_install_clearly(tmp_path, metadata, says):
    from builder.environments.markers import target_requirements
    from builder.errors import InfrastructureError

    info = tmp_path / "site" / "torch-2.10.0.dist-info"
    info.mkdir(parents=True)
    if metadata is None:
        os.mkfifo(info / "METADATA")
    else:
        (info / "METADATA").write_bytes(metadata if isinstance(metadata, bytes) else metadata.encode())
    with pytest.raises(InfrastructureError, match=says) as err:
        target_requirements(tmp_path / "site", "torch", "aarch64", "3.11")
    assert "\x1b" not in str(err.value) and len(str(err.value)) < 1000


def _upstream_aarch64_build(tmp_path_factory, profile: str, head: str, modules: tuple[str, str], timeout: int):
    """PROFILE's one upstream cu13 x torch 2.11 x cp311 build for aarch64 (sm_90) through the Docker executor:
    (the run, its spec, the wheel, its evidence record), once its name, its ELF files (AArch64 code, sm_90 SASS
    alone, the extension MODULES[0] among them), its verified record and its cross compiler are checked."""
    import zipfile

    from farmkit import checked_evidence

    from builder.planning.plan import load_plan
    from mamba_ssm import elf as _elf

    reason = emulation.unavailable("aarch64")
    if reason is not None:
        pytest.skip(f"no aarch64 emulation on this host: {reason} ({emulation.SETUP_HINT})")
    docker_client()
    (spec,) = load_plan(profile=profile).builds
    dist = tmp_path_factory.mktemp(profile) / "dist"
    run = run_build("--profile", profile, "--executor", "docker", "--jobs", "1", "--dist", str(dist), timeout=timeout)
    assert run.rc == 0, run.out[-6000:]
    (wheel,) = (dist / "wheels").glob("*.whl")
    name = rf"{re.escape(head)}\+cu13torch2\.11cxx11abiTRUE-cp311-cp311-manylinux_2_\d+_aarch64\.whl"
    assert re.fullmatch(name, wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        elves = {n: zf.read(n) for n in zf.namelist() if zf.read(n)[:4] == b"\x7fELF"}
    assert f"{modules[0]}.cpython-311-aarch64-linux-gnu.so" in elves, list(elves)
    assert {_elf.machine_of(b[:20]) for b in elves.values()} == {"aarch64"}, list(elves)
    assert {a for n, b in elves.items() for a in _elf.archs_in(_elf.Elf(b, n)).sass} == {"sm_90"}
    (rec,) = checked_evidence(dist, run.out, numerics=False, modules=modules)
    assert rec["verified"]["machine"] == "aarch64" and rec["verified"]["archs"] == ["sm_90"], rec["verified"]
    assert rec["built"]["toolchain"]["compiler"] == "cross", rec["built"]
    return run, spec, wheel, rec


def _release_cells_take_its_tier(rec) -> None:
    """The release builds REC's kind of wheel for its aarch64 cu13 x torch 2.11 cells, which take their tier from it."""
    from builder.planning.plan import load_plan
    from builder.publishing import tiers
    from builder.verifying import evidence

    release = load_plan(profile="release")
    cells = [(c, t) for c, b, t, r in tiers.cell_tiers(release, [rec]) if r is not None]
    assert cells and all(c.platform == "linux_aarch64" and c.torch == "2.11" for c, _ in cells), cells
    assert {t for _, t in cells} == {evidence.tier(rec, "2.11")} == {"compiled"}


@pytest.mark.slow
@pytest.mark.cuda_build
def test_upstream_causal_conv1d_for_aarch64_is_the_release_cells_evidence(tmp_path_factory):
    """Upstream's aarch64 CUDA line, sampled: causal-conv1d from its pinned sdist for GH200 (cu13, sm_90), compiled
    in the arm64 CUDA image by this host's nvcc and cross g++, verified as aarch64 code with sm_90 SASS, its
    extension and public API imported under emulation with PyPI's aarch64 torch 2.11, and its evidence record one
    that the release plan's aarch64 cells take their tier from."""
    run, _, _, rec = _upstream_aarch64_build(
        tmp_path_factory, "ci-upstream-aarch64", "causal_conv1d-1.7.0", ("causal_conv1d_cuda", "causal_conv1d"), 5400
    )
    print(f"\nupstream causal-conv1d aarch64 build (emulated), verify, smoke, index: {run.seconds:.0f}s")
    assert rec["imported"]["api"] == ["causal_conv1d.causal_conv1d_fn", "causal_conv1d.causal_conv1d_update"]
    assert rec["imported"]["torch"].startswith("2.11."), rec["imported"]
    _release_cells_take_its_tier(rec)


@pytest.mark.slow
@pytest.mark.cuda_build
def test_upstream_mamba_ssm_for_aarch64_imports_its_public_api_with_its_dependencies_under_emulation(tmp_path_factory):
    """Upstream mamba-ssm for GH200 (cu13, sm_90) from its pinned sdist, compiled in the arm64 CUDA image by this
    host's nvcc and cross g++, verified as aarch64 code with sm_90 SASS; under emulation its extension and its whole
    public API (Mamba, Mamba2, MambaLMHeadModel, the selective-scan and triton ops) imported with PyPI's aarch64
    torch 2.11 and the wheel's declared dependencies, which this host's pip fetched for aarch64 into a layer of the
    farm cache; its evidence record says so, and the release plan's aarch64 cells take their tier from it."""
    from builder.environments import store
    from builder.environments.markers import target_environment
    from builder.planning.recipes import load_recipes
    from builder.verifying.smoke import declared_requirements
    from mamba_ssm import elf as _elf

    run, spec, wheel, rec = _upstream_aarch64_build(
        tmp_path_factory, "ci-upstream-mamba-aarch64", "mamba_ssm-2.3.2.post1", ("selective_scan_cuda", "mamba_ssm"), 7200
    )
    layer_took = re.search(rf"{re.escape(spec.id)}: dependency layer (\S+) for aarch64: (\d+) requirement\(s\) \((\d+)s\)", run.out)
    smoke_took = re.search(rf"{re.escape(spec.id)}: smoke ok: .* \(under emulation, (\d+)s\)", run.out)
    print(f"\nupstream mamba-ssm aarch64 build (emulated), verify, smoke, index: {run.seconds:.0f}s; dependency layer: "
          f"{layer_took and layer_took.group(3)}s; smoke under emulation (layer included): {smoke_took and smoke_took.group(1)}s")  # fmt: skip
    # the public API, imported under emulation with aarch64's torch 2.11 and the wheel's declared dependencies
    imported = rec["imported"]
    assert imported["api"] == list(load_recipes()["mamba-ssm"].api), imported
    assert {"mamba_ssm.Mamba", "mamba_ssm.Mamba2", "mamba_ssm.models.mixer_seq_simple.MambaLMHeadModel"} <= set(imported["api"])
    assert imported["emulated"] is True and imported["torch"].startswith("2.11."), imported
    deps = declared_requirements(wheel, target_environment("aarch64", "3.11"))
    assert imported["deps"] == deps and {"transformers", "triton>=3.5.0", "einops"} <= set(deps), imported
    assert not any(d.startswith("torch") for d in deps), deps
    # the layer: fetched for aarch64 by this host's pip, kept in the farm cache and counted there
    assert layer_took, run.out[-3000:]
    (layer,) = [e for e in store.entries() if e.path.name == layer_took.group(1)]
    assert layer.path.parent.parent.name == "cp311-torch2.11.0-aarch64", layer.path
    assert layer.requirement == f"torch==2.11.0 + {', '.join(deps)}", layer.requirement
    heads = {}
    for p in (layer.path / "site").rglob("*.so*"):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                heads[p] = f.read(20)
    machines = {p.name: _elf.machine_of(h) for p, h in heads.items() if h[:4] == b"\x7fELF"}
    assert machines and set(machines.values()) == {"aarch64"}, machines
    _release_cells_take_its_tier(rec)
