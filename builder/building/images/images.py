"""The farm's image names and labels, and the rules about them, in one place (imports only errors and spec):
the ``org.mamba-farm`` labels, ``mamba-farm/<name>:<content hash>`` toolchain images, the local Debian
bases ``mamba-farm/debian:<suite>[-<arch>]``, and which suite and toolkit stand in for an unpullable base.
"""

from __future__ import annotations

import os
import socket

from builder.errors import EngineUnavailable
from builder.facts.hostenv import host_machine
from builder.facts.spec import ImageSpec

REPO = "mamba-farm"
LABEL = "org.mamba-farm"
OWNER_LABEL = f"{LABEL}.owner"  # <host>:<pid> of the run a build container belongs to
IMAGE_LABEL = f"{LABEL}.image"  # the ImageSpec id an image was built for
BUILD_LABEL = f"{LABEL}.build"  # the BuildSpec id a build container runs

# Where the farm's own bases live; the rendered Dockerfiles name these.
LOCAL_PREFIX = f"{REPO}/debian"
SUITES = ("bookworm", "trixie", "bullseye")  # bullseye: the floor root only (builder/building/images/floor_root.py)
DEFAULT_SUITE = "bookworm"
# The Debian release with hipcc (5.7.1) and CUDA 12.4.
NEWER_SUITE = "trixie"
# The toolkits Debian ships, so the farm's base can stand in for a vendor image that has them.
DEBIAN_TOOLKITS = {"rocm": ("5.7",), "cuda": ("11.8", "12.4", "13.0")}


def image_repo(name: str) -> str:
    """mamba-farm/NAME, where the farm's NAME images live."""
    return f"{REPO}/{name}"


def image_tag(name: str, digest: str) -> str:
    """mamba-farm/NAME:DIGEST, the tag of a farm image."""
    return f"{image_repo(name)}:{digest}"


def owner() -> str:
    """The value of OWNER_LABEL for this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


# Wheel platform machine -> Debian (and docker) architecture name.
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
MACHINE_OF = {v: k for k, v in DEBIAN_ARCH.items()}


def docker_platform(machine: str) -> str:
    """aarch64 -> linux/arm64, what docker's --platform takes."""
    return f"linux/{DEBIAN_ARCH.get(machine, machine)}"


def local_name(suite: str, machine: str | None = None) -> str:
    """mamba-farm/debian:SUITE on the host's machine, mamba-farm/debian:SUITE-arm64 for aarch64 elsewhere."""
    machine = machine or host_machine()
    if machine == host_machine():
        return f"{LOCAL_PREFIX}:{suite}"
    return f"{LOCAL_PREFIX}:{suite}-{DEBIAN_ARCH.get(machine, machine)}"


def is_local_base(base: str) -> bool:
    """BASE is one of the farm's own Debian bases (mamba-farm/debian:<suite>)."""
    return base.startswith(LOCAL_PREFIX + ":")


def local_suite(base: str) -> str:
    """The suite of a local base name (mamba-farm/debian:trixie -> trixie, ...:bookworm-arm64 -> bookworm)."""
    return base.split(":", 1)[1].split("-", 1)[0]


def local_machine(base: str) -> str:
    """The machine of a local base name (mamba-farm/debian:bookworm-arm64 -> aarch64; no suffix: this host's)."""
    _, _, arch = base.split(":", 1)[1].partition("-")
    return MACHINE_OF.get(arch, arch) if arch else host_machine()


def suite_for(base: str) -> str:
    """The Debian suite a configured base reference stands for (debian:trixie, ...:bookworm...)."""
    low = base.lower()
    for suite in SUITES:
        if suite in low:
            return suite
    return DEFAULT_SUITE


def fallback_suite(image: ImageSpec) -> str:
    """The Debian release the farm's own base uses for IMAGE (trixie has hipcc and CUDA 12.4)."""
    if image.kind == "rocm" or (image.kind == "cuda" and (image.toolkit or "").startswith("12")):
        return NEWER_SUITE
    return suite_for(image.base)


def effective_toolkit_source(image: ImageSpec, base: str) -> str:
    """A vendor image's toolkit is gone when the farm substitutes its own base: provision one."""
    source = image.toolkit_source
    if source == "base" and is_local_base(base) and image.kind == "cuda":
        return "pypi" if int((image.toolkit or "13").split(".")[0]) >= 13 else "debian"
    if source == "base" and is_local_base(base) and image.kind == "rocm":
        return "debian"
    return source


def check_substitute(image: ImageSpec, base: str) -> None:
    """The farm's Debian base can stand in for a vendor image only where Debian has that toolkit."""
    if not is_local_base(base) or image.toolkit_source != "base":
        return
    have = DEBIAN_TOOLKITS.get(image.kind, ())
    ok = (
        image.kind == "cuda"
        and effective_toolkit_source(image, base) == "pypi"
        or any((image.toolkit or "").startswith(v.split(".")[0] if image.kind == "cuda" else v) for v in have)
    )
    if not ok:
        raise EngineUnavailable(
            f"image {image.id} needs {image.kind} {image.toolkit} from {image.base}, which cannot be pulled, "
            f"and Debian does not ship that toolkit",
            hint=f"make {image.base} available locally (docker load), or leave {image.kind} {image.toolkit} out of this run",
        )
