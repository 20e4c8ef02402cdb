"""``python -m builder base-image``: a Debian base image made locally (debootstrap, then a ``FROM scratch``
build), for hosts that reach no container registry. Another machine's base is made under emulation or
refused with the reason; the host CA bundle is baked in; an existing image is reused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from builder.building.images.engine import build_image, image_exists, made_once
from builder.building.images.images import (
    DEBIAN_ARCH,
    SUITES,
    docker_platform,
    is_local_base,
    local_machine,
    local_name,
    local_suite,
    suite_for,
)
from builder.errors import EngineUnavailable, UsageError
from builder.facts import timings
from builder.facts.hostenv import host_machine

MIRROR = "http://deb.debian.org/debian"


def ensure(
    client, suite: str, *, ca_bundle: Path | None, log=print, mirror: str = MIRROR, machine: str | None = None
) -> str:
    """Return the local base image for SUITE on MACHINE (default: this host's), building it only if it does not exist yet."""
    machine = machine or host_machine()
    name = local_name(suite, machine)
    made_once(client, name, lambda: _make(client, suite, name, machine, ca_bundle=ca_bundle, log=log, mirror=mirror))
    return name


def _make(client, suite: str, name: str, machine: str, *, ca_bundle: Path | None, log, mirror: str) -> None:
    """Make the base image NAME: debootstrap SUITE for MACHINE, then a build FROM scratch."""
    from builder.building import emulation

    if suite not in SUITES:
        raise UsageError(f"unknown Debian suite {suite!r}", hint=f"use one of: {', '.join(SUITES)}")
    if machine not in DEBIAN_ARCH:
        raise UsageError(f"no Debian base for machine {machine!r}", hint=f"use one of: {', '.join(DEBIAN_ARCH)}")
    emulation.require(machine, f"the base image {name}")
    if shutil.which("debootstrap") is None:
        raise EngineUnavailable(
            f"cannot make the base image {name}: debootstrap is not installed",
            hint="apt-get install debootstrap (scripts/bootstrap-host.sh does), or make a registry reachable",
        )
    if os.geteuid() != 0:
        raise EngineUnavailable(f"cannot make the base image {name}: debootstrap needs root", hint="run as root")
    arch = DEBIAN_ARCH[machine]
    how = "" if machine == host_machine() else ", under emulation"
    started = time.monotonic()
    log(f"base image: making {name} with debootstrap --variant=minbase --arch={arch} {suite} (no registry needed{how})")
    with tempfile.TemporaryDirectory(prefix="mamba-farm-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--arch={arch}", suite, str(root), mirror],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            raise EngineUnavailable(
                f"debootstrap {suite} failed (exit {proc.returncode}):\n{tail}",
                hint=f"check that {mirror} is reachable from this host",
            )
        if ca_bundle is not None:
            # Baked in so apt/pip/curl in every derived image trust the proxy's CA.
            dest = root / "etc/ssl/certs"
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ca_bundle, dest / "ca-certificates.crt")
        # Keep apt lean and non-interactive in derived images.
        (root / "etc/apt/apt.conf.d/90mamba-farm").write_text(
            'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
        )
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        # A build FROM scratch rather than `docker import`: only a build can say which machine the image
        # is for (import's --platform needs an experimental engine), and an arm64 image must say so.
        dockerfile = 'FROM scratch\nADD rootfs.tar /\nENV LANG=C.UTF-8\nCMD ["/bin/bash"]\n'

        def stage(ctx: Path) -> None:
            proc = subprocess.run(["tar", "-C", str(root), "-cf", str(ctx / "rootfs.tar"), "."], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise EngineUnavailable(f"cannot pack the {suite} tree for {name}: {proc.stderr.strip()[-300:]}")

        build_image(
            client, name, dockerfile, what=f"the base image {name}", stage=stage,
            platform=None if machine == host_machine() else docker_platform(machine),
        )  # fmt: skip
    timings.record("base", name, time.monotonic() - started)
    log(f"base image: {name} is ready")


def resolve_base(
    client, base: str, *, fallback: str | None = None, ca_bundle: Path | None, log=print, machine: str | None = None
) -> str:
    """The image to build FROM: BASE if present or pullable, else the farm's own Debian base for MACHINE."""
    import docker.errors

    if is_local_base(base):
        return ensure(client, local_suite(base), ca_bundle=ca_bundle, log=log, machine=local_machine(base))
    if image_exists(client, base):
        return base
    try:
        client.images.pull(base, platform=docker_platform(machine) if machine else None)
        return base
    except docker.errors.APIError as err:
        reason = (err.explanation or str(err)).splitlines()[0][:120]
    suite = fallback or suite_for(base)
    log(f"base image: cannot pull {base} ({reason}); using the farm's own Debian {suite} base instead")
    return ensure(client, suite, ca_bundle=ca_bundle, log=log, machine=machine)
