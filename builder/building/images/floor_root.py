"""The floor root: an image of the oldest glibc the farm proves its wheels run on (``builder/data/floor.toml``:
Debian bullseye, glibc 2.31), with a CPython built there.

bullseye's own Python (3.9) is older than the wheels' ``cp310-abi3`` and ``cp311`` tags, and the CPythons the
farm has otherwise (pyenv's, built on bookworm; forky's packages) reference newer glibc symbols than 2.31
(``__libc_start_main@GLIBC_2.34``), so a CPython is compiled in the root itself from a source tarball pinned
by sha256, fetched and checked as an sdist is. Made once per pin and cached as an image, like the bases.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import tomllib

from builder.building.images import base_image
from builder.building.images.engine import build_image, made_once
from builder.facts import hostenv, paths, timings
from builder.facts.spec import FilePin, stable_hash

DATA = paths.DATA / "floor.toml"
PREFIX = "/opt/python"  # the interpreter in the image: PREFIX/bin/python3


@dataclass(frozen=True)
class Floor:
    suite: str
    glibc: str
    python: FilePin
    top: str
    packages: tuple[str, ...]
    opt: str = ""  # configure's OPT; empty: CPython's default (-O3 with debug info)
    disabled: tuple[str, ...] = ()  # extension modules configure leaves out


def floor() -> Floor:
    with open(DATA, "rb") as f:
        data = tomllib.load(f)
    py = data["python"]
    return Floor(
        data["suite"], data["glibc"], FilePin("cpython", py["version"], py["sha256"], py["url"]), py["top"],
        tuple(py["packages"]), py.get("opt", ""), tuple(py.get("disabled", ())),
    )  # fmt: skip


def compile_command(fl: Floor) -> str:
    """The shell command that builds and installs CPython from /tmp/cpython.tar.gz at PREFIX, as FL says."""
    flags = [f"OPT='{fl.opt}'"] if fl.opt else []
    flags += [f"py_cv_module_{name}=n/a" for name in fl.disabled]
    return (
        f"cd /tmp && tar xzf cpython.tar.gz && cd {fl.top} "
        f"&& ./configure --prefix={PREFIX} --disable-test-modules --with-ensurepip=install {' '.join(flags)} > /dev/null "
        f'&& make -j"$(nproc)" > /dev/null && make install > /dev/null '
        f"&& cd / && rm -rf /tmp/{fl.top} /tmp/cpython.tar.gz "
        f'&& {PREFIX}/bin/python3 -c "import ctypes, ssl, zlib, platform; print(platform.libc_ver())"'
    )


def dockerfile(base: str, fl: Floor) -> str:
    # Tests and the C-API test modules are left out; pip comes from ensurepip, offline.
    return f"""FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends {" ".join(fl.packages)} \\
    && rm -rf /var/lib/apt/lists/*
COPY cpython.tar.gz /tmp/cpython.tar.gz
RUN {compile_command(fl)}
ENV LANG=C.UTF-8
"""


def image_name(fl: Floor) -> str:
    return f"mamba-farm/floor:{fl.suite}-py{fl.python.version}-{stable_hash([dockerfile('', fl)])}"


def ensure(client, *, ca_bundle: Path | None, log=print) -> str:
    """The floor root's image (made now if missing): bullseye with CPython at PREFIX."""
    from builder.sourcing.sources import SourceCache

    fl = floor()
    name = image_name(fl)

    def make() -> None:
        started = time.monotonic()
        base = base_image.ensure(client, fl.suite, ca_bundle=ca_bundle, log=log)
        tarball = SourceCache(hostenv.CACHE_ROOT / "interpreters" / "sources").fetch(fl.python)
        log(f"floor root: compiling CPython {fl.python.version} in {base} (glibc {fl.glibc}) for {name}")
        build_image(
            client, name, dockerfile(base, fl), what=f"the floor root {name}", files={"cpython.tar.gz": tarball}
        )
        timings.record("image", name, time.monotonic() - started)
        log(f"floor root: {name} is ready")

    made_once(client, name, make)
    return name
