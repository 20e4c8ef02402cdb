"""A Debian base image made locally, for hosts that cannot reach a container registry.

``python -m builder base-image [--suite bookworm|trixie]`` runs
``debootstrap --variant=minbase SUITE DIR MIRROR`` and imports the tree with
``tar -C DIR -c . | docker import - NAME``. The host CA bundle is baked in so that
apt and pip inside the image work behind a TLS-intercepting proxy. An image that
already exists is reused, never rebuilt.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from builder.engine import connect, image_exists
from builder.errors import EngineUnavailable, UsageError
from builder.hostenv import find_ca_bundle
from builder.images import DEFAULT_SUITE, LABEL, SUITES, is_local_base, local_name, local_suite, suite_for

MIRROR = "http://deb.debian.org/debian"


def ensure(client, suite: str, *, ca_bundle: Path | None, log=print, mirror: str = MIRROR) -> str:
    """Return the local base image for SUITE, building it only if it does not exist yet."""
    name = local_name(suite)
    if image_exists(client, name):
        return name
    if suite not in SUITES:
        raise UsageError(f"unknown Debian suite {suite!r}", hint=f"use one of: {', '.join(SUITES)}")
    if shutil.which("debootstrap") is None:
        raise EngineUnavailable(
            f"cannot make the base image {name}: debootstrap is not installed",
            hint="apt-get install debootstrap (scripts/bootstrap-host.sh does), or make a registry reachable",
        )
    if os.geteuid() != 0:
        raise EngineUnavailable(f"cannot make the base image {name}: debootstrap needs root", hint="run as root")
    log(f"base image: making {name} with debootstrap --variant=minbase {suite} (no registry needed)")
    with tempfile.TemporaryDirectory(prefix="mamba-farm-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", suite, str(root), mirror],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            [
                "docker", "import",
                "--change", f"LABEL {LABEL}=1",
                "--change", 'ENV LANG=C.UTF-8',
                "--change", 'CMD ["/bin/bash"]',
                "-", name,
            ],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise EngineUnavailable(f"docker import of {name} failed: {imp.stderr.strip()}")
    log(f"base image: {name} is ready")
    return name


def resolve_base(client, base: str, *, fallback: str | None = None, ca_bundle: Path | None, log=print) -> str:
    """The image to build FROM: BASE if present or pullable, else the farm's own Debian base."""
    import docker.errors

    if is_local_base(base):
        return ensure(client, local_suite(base), ca_bundle=ca_bundle, log=log)
    if image_exists(client, base):
        return base
    try:
        client.images.pull(base)
        return base
    except docker.errors.APIError as err:
        reason = (err.explanation or str(err)).splitlines()[0][:120]
    suite = fallback or suite_for(base)
    log(f"base image: cannot pull {base} ({reason}); using the farm's own Debian {suite} base instead")
    return ensure(client, suite, ca_bundle=ca_bundle, log=log)


def add_command(subparsers) -> None:
    p = subparsers.add_parser("base-image", help="make a local Debian base image (debootstrap + docker import)")
    p.add_argument("--suite", default=DEFAULT_SUITE, choices=SUITES, help=f"Debian suite (default {DEFAULT_SUITE})")
    p.add_argument("--ca-bundle", type=Path, default=None, help="CA bundle to bake in (default: the host's)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    client = connect()
    ca = find_ca_bundle(args.ca_bundle)
    name = ensure(client, args.suite, ca_bundle=ca, log=lambda m: print(m, file=sys.stderr))
    print(name)
    return 0
