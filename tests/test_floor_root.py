"""The floor root (builder/building/images/floor_root.py): Debian bullseye, glibc 2.31, with a CPython built there
from Debian's pinned source tarball, made once and cached as an image. tests/test_farm_docker.py installs the ci
profile's wheel into it; this file makes it on a worker of its own and checks what it is.
"""

from __future__ import annotations

import pytest
from farmkit import docker_client

from builder.building.images import floor_root
from builder.facts.hostenv import find_ca_bundle, pyenv_pythons

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def floor_image():
    client = docker_client()
    return client, floor_root.ensure(client, ca_bundle=find_ca_bundle())


def _run(client, image: str, script: str, **kw) -> tuple[int, str]:
    box = client.containers.run(image, ["bash", "-c", script], detach=True, **kw)
    try:
        code = box.wait(timeout=300)["StatusCode"]
        return code, box.logs().decode(errors="replace")
    finally:
        box.remove(force=True)


def test_the_floor_root_is_glibc_2_31_with_a_cpython_that_runs_there(floor_image):
    client, image = floor_image
    fl = floor_root.floor()
    code, out = _run(client, image, f"ldd --version | head -n 1; {floor_root.PREFIX}/bin/python3 -c "
                     "'import ctypes, platform, ssl, sys, zlib; print(platform.libc_ver(), sys.version.split()[0])'")  # fmt: skip
    assert code == 0, out
    assert f"GLIBC {fl.glibc}" in out or f" {fl.glibc}\n" in out, out
    assert f"('glibc', '{fl.glibc}') {fl.python.version}" in out, out


def test_a_cpython_built_on_the_bookworm_base_does_not_run_there(floor_image):
    """Why the root compiles its own: the host's pyenv CPython (built on glibc 2.36) needs a newer C library."""
    client, image = floor_image
    home = pyenv_pythons().get("3.11")
    if home is None:
        pytest.skip("no pyenv Python 3.11 on this host")
    # at its own prefix (its RUNPATH finds libpython there)
    volumes = {str(home): {"bind": str(home), "mode": "ro"}}
    code, out = _run(client, image, f"{home}/bin/python3.11 -c 'print(1)'", volumes=volumes)
    assert code != 0 and "GLIBC_2.3" in out and "not found" in out, out
