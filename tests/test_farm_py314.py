"""Python 3.14 in containers, for real: the ci-py314 profile's classic CPU wheel through
``python -m builder build --executor docker``, with the CPython the farm provides itself
(builder/environments/interpreters.py). Built, verified and smoke-tested; its manylinux tag stays the base's.
"""

from __future__ import annotations

import re
import zipfile

import pytest
from farmkit import docker_client, run_build

pytestmark = pytest.mark.docker

PROFILE = "ci-py314"


def _spec():
    from builder.planning.plan import load_plan

    (spec,) = load_plan(profile=PROFILE).builds
    return spec


@pytest.fixture(scope="module")
def py314_run(tmp_path_factory):
    client = docker_client()
    dist = tmp_path_factory.mktemp("farm-py314") / "dist"
    run = run_build("--profile", PROFILE, "--executor", "docker", "--dist", str(dist), timeout=5400)
    return client, dist, run


def test_the_image_takes_the_farms_own_cpython_314():
    from builder.building.images.images import fallback_suite
    from builder.building.images.render import render
    from builder.environments import interpreters
    from builder.planning.plan import load_plan

    plan = load_plan(profile=PROFILE)
    (image,) = plan.images.values()
    # a manylinux base has /opt/python/cp314-cp314 itself; the farm's own Debian base (what a host that reaches
    # no registry builds on) has no 3.14, so the farm provides it there
    r = render(image, base=f"mamba-farm/debian:{fallback_suite(image)}")
    (py,) = r.pythons
    if not py.farm:
        pytest.skip(f"this host has CPython 3.14 itself ({py.prefix}): the farm provides nothing")
    assert py.prefix == str(interpreters.interpreter("3.14", "x86_64").prefix)
    assert f"COPY pythons/cp314 {py.prefix}" in r.dockerfile
    assert f"{py.prefix}/bin/python3 -m venv /opt/python/cp314-cp314" in r.dockerfile


def test_cp314_wheel_is_built_verified_and_smoke_tested_with_the_bases_manylinux_tag(py314_run, tmp_path):
    client, dist, run = py314_run
    assert run.rc == 0, run.out[-5000:]
    spec = _spec()
    (wheel,) = (dist / "wheels").glob("*.whl")
    # the plan's manylinux on a manylinux base; on the farm's own bookworm base (no registry here) what its
    # glibc 2.36 symbols reach, as for every other Python there (docs/maintainer/farm-host.md): never forky's 2.43
    tag = re.fullmatch(rf"mamba_ssm-[^-]+\+{spec.label}-cp314-cp314-(manylinux_(\d+)_(\d+)_x86_64)\.whl", wheel.name)
    assert tag, wheel.name
    floor = (2, 36) if "cannot pull" in run.out else tuple(int(x) for x in re.search(r"_(\d+)_(\d+)_", spec.manylinux).groups())
    assert (int(tag.group(2)), int(tag.group(3))) <= floor, (wheel.name, floor)
    assert tag.group(1) == spec.manylinux or "cannot pull" in run.out
    # only a wheel that passed verify and the smoke test (a clean venv of the farm's 3.14 with torch, the CPU
    # scan against the reference) reaches dist/wheels; the smoke venv of that Python and torch is the proof it ran
    from builder.facts.hostenv import CACHE_ROOT

    assert (CACHE_ROOT / "smoke" / f"cp314-torch{spec.torch_version}").is_dir()
    # the extension asks for no glibc symbol newer than that
    with zipfile.ZipFile(wheel) as z:
        so = next(n for n in z.namelist() if n.startswith("mamba_ssm/_C") and n.endswith(".so"))
        (tmp_path / "ext.so").write_bytes(z.read(so))
    from elftools.elf.elffile import ELFFile

    with open(tmp_path / "ext.so", "rb") as f:
        versions = {
            tuple(int(x) for x in m.groups())
            for sec in ELFFile(f).iter_sections()
            if sec.name == ".gnu.version_r"
            for _, auxes in sec.iter_versions()
            for aux in auxes
            if (m := re.fullmatch(r"GLIBC_(\d+)\.(\d+)", aux.name))
        }
    assert versions and max(versions) <= floor, (sorted(versions)[-3:], spec.manylinux)


def test_the_images_cp314_runs_with_its_own_c_library_on_the_base(py314_run):
    """In the image: /opt/python/cp314-cp314 reports forky's glibc 2.43 while the base's C library (what
    the compiler links) stays bookworm's."""
    client, dist, run = py314_run
    assert run.rc == 0, run.out[-3000:]
    from builder.building.images.images import IMAGE_LABEL
    from builder.planning.plan import load_plan

    (image,) = load_plan(profile=PROFILE).images.values()
    used = re.search(rf"image {re.escape(image.id)}: \w+ (\S+)", run.out)  # the image the run built or reused
    assert used, run.out[-3000:]
    assert client.images.get(used.group(1)).labels.get(IMAGE_LABEL) == image.id
    out = client.containers.run(
        used.group(1), ["sh", "-c", "/opt/python/cp314-cp314/bin/python -c 'import platform; print(platform.libc_ver()[1])'; "
                          "ldd --version | head -1"], remove=True,
    ).decode()  # fmt: skip
    ours, base = out.splitlines()[:2]
    assert ours == "2.43" and not base.endswith("2.43"), out
