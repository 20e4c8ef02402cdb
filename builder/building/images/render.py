"""Dockerfiles from docker/*.Dockerfile.j2, one per toolchain image.

All decisions (packages, paths, which toolkit recipe) are made here in Python;
the templates only lay them out. ``python -m builder render --out build/docker``
writes them so people can read them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import tomllib

from builder.building import interpreters
from builder.building.images.images import (
    DEBIAN_ARCH,
    LABEL,
    docker_platform,
    effective_toolkit_source,
    fallback_suite,
    image_tag,
    is_local_base,
    local_name,
    local_suite,
    machine_of,
)
from builder.errors import InterpreterUnavailable, UsageError
from builder.facts.compat import manylinux_platforms
from builder.facts.hostenv import host_machine, pyenv_pythons
from builder.facts.paths import REPO
from builder.facts.spec import ImageSpec, stable_hash

DOCKER_DIR = REPO / "docker"
PACKAGES = DOCKER_DIR / "packages.toml"


def image_python(version: str) -> str:
    """The interpreter of Python VERSION ("3.11") in a farm image, laid out manylinux-style."""
    tag = "cp" + version.replace(".", "")
    return f"/opt/python/{tag}-{tag}/bin/python"


@dataclass(frozen=True)
class PythonInstall:
    version: str  # "3.11"
    tag: str  # "cp311"
    prefix: str  # where the interpreter lives, host and image alike
    farm: str = ""  # a farm-provided interpreter (builder/building/interpreters.py): the digest of its pins; "" otherwise


@dataclass(frozen=True)
class Rendered:
    image: ImageSpec
    dockerfile: str
    base: str  # what FROM names
    pythons: tuple[PythonInstall, ...]
    tag: str  # mamba-farm/<kind>:<content hash>
    files: dict[str, Path] = field(default_factory=dict)  # extra build-context entries: context path -> host path
    staged: bool = True  # the pythons are the host's, copied into the build context (python "copy")
    cross: dict | None = None  # the cross compiler's facts (cross_compiler), for an emulated image that has one


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(DOCKER_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def load_packages() -> dict:
    """docker/packages.toml: what goes into the images (and the host executor's CUDA from PyPI)."""
    with open(PACKAGES, "rb") as f:
        return tomllib.load(f)


def template_name(image: ImageSpec) -> str:
    name = Path(image.template).name
    if name.endswith(".j2"):
        return name
    return f"{name}.Dockerfile.j2"


def python_installs(versions: tuple[str, ...], host: dict[str, Path], machine: str) -> tuple[PythonInstall, ...]:
    """Each Python's install: the host's (pyenv), else the farm's own where it provides one for MACHINE."""
    out = []
    for v in versions:
        tag = "cp" + v.replace(".", "")
        prefix = host.get(v)
        if prefix is None and interpreters.known(v, machine):
            it = interpreters.interpreter(v, machine)
            out.append(PythonInstall(v, tag, str(it.prefix), it.digest))
            continue
        # A Python neither has still renders (to a conventional prefix); building it fails clearly.
        out.append(PythonInstall(v, tag, str(prefix) if prefix else f"/opt/cpython/{v}"))
    return tuple(out)


def os_table(base: str, data: dict) -> tuple[str, dict]:
    """The [os.*] table of packages.toml that BASE matches."""
    low = base.lower()
    for key, table in data["os"].items():
        if any(m in low for m in table["match"]):
            return key, table
    raise UsageError(
        f"base image {base!r}: the farm does not know its operating system",
        hint=f"add an [os.<name>] table whose `match` covers it to {PACKAGES}",
    )


def python_mode(image: ImageSpec, osdef: dict) -> str:
    """Where IMAGE's CPythons come from: the OS table's choice, except that another machine's image
    cannot take the host's pyenv installs ("copy") and takes the suite's own CPython ("system")."""
    mode = osdef["python"]
    if mode == "copy" and machine_of(image.platform) != host_machine():
        return "system"
    return mode


def _cuda_context(image: ImageSpec, base: str, source: str, family: str, osdef: dict, data: dict, cross) -> dict:
    """A CUDA image's part of the template context: where its toolkit comes from (PyPI's wheels, Debian's
    packages or the base image) and where it lands."""
    ctx: dict = {}
    major = (image.toolkit or "13").split(".")[0]
    ctx["cuda_major"] = major
    ctx["toolkit_include"] = f"_cuda_{source}.Dockerfile.j2"
    if source == "pypi":
        pins = data["cuda"]["pypi"].get(image.toolkit or "")
        if pins is None:
            raise UsageError(
                f"image {image.id}: no PyPI recipe for CUDA {image.toolkit}",
                hint=f"add [cuda.pypi.\"{image.toolkit}\"] to {PACKAGES}, or use a base with the toolkit",
            )
        ctx["cuda_packages"] = [f'"{p}"' for p in pins["packages"]]
        ctx["cuda_headers"] = [f'"{p}"' for p in pins.get("headers", [])]
        ctx["cuda_home"] = f"/opt/cuda-pypi/nvidia/cu{major}"
        ctx["cuda_compiler"] = compiler_overlay(image, osdef, pins)
        if cross and ctx["cuda_compiler"]:  # the cross stage's pip fetches it all, natively
            glibc = image.extra.get("glibc", "2.17").replace(".", "_")
            platforms = manylinux_platforms(f"manylinux_{glibc}_{machine_of(image.platform)}")
            ctx["cuda_fetch"] = " ".join(f"--platform {t}" for t in platforms)  # its pip's flags for the target
    elif source == "debian":
        if family != "debian":
            raise UsageError(f"image {image.id}: toolkit_source debian needs a Debian base, not {base}")
        ctx["apt_sources"] = "main contrib non-free non-free-firmware"
        ctx["cuda_home"] = "/usr"
    else:
        ctx["cuda_home"] = image.extra.get("cuda_home", "/usr/local/cuda")
    return ctx


def context(image: ImageSpec, base: str, pythons: tuple[PythonInstall, ...]) -> dict:
    if not pythons:
        raise UsageError(f"image {image.id} lists no Python", hint="every image needs at least one Python")
    data = load_packages()
    os_key, osdef = os_table(base, data)
    family = osdef["family"]
    source = effective_toolkit_source(image, base)
    first = pythons[0].tag
    packages = list(osdef["packages"])
    mode = python_mode(image, osdef)
    if mode == "system":
        have = osdef.get("system_python")
        other = [p.version for p in pythons if p.version != have and not p.farm]
        if other:
            raise InterpreterUnavailable(
                f"image {image.id} ({image.platform}) needs Python {', '.join(other)}: the host's pyenv "
                f"installs are {host_machine()}, Debian {os_key} has only Python {have or 'none'}, and the farm "
                f"provides {', '.join(interpreters.provided()) or 'none'}",
                hint=f"build {image.platform} for Python {have} here (--only), on a native {machine_of(image.platform)} "
                f"host, or add the Python's packages to {interpreters.DATA}",
            )
        packages += list(osdef["system_python_packages"])
    # Debian's hipcc/libamdhip64-dev are the toolkit only where Debian provides it, never on AMD's image.
    kind_packages = []
    if image.kind != "rocm" or source == "debian":
        kind_packages = list(data["kind"].get(family, {}).get(image.kind, []))
    cross = cross_compiler(image, base, osdef, {p.version for p in pythons if not p.farm})
    if cross:
        packages = [p for p in packages if p not in cross["replaces"]]
    ctx: dict = {
        "base": base,
        "label": LABEL,
        "image_id": image.id,
        "kind": image.kind,
        "toolkit": image.toolkit or "none",
        "os_include": f"_os_{family}.Dockerfile.j2",
        "family": family,
        "os_packages": sorted(set(packages)),
        "kind_packages": sorted(set(kind_packages) - set(packages)),
        "apt_sources": "",
        "python_include": f"_python_{mode}.Dockerfile.j2",
        "bootstrap_python": osdef.get("bootstrap_python", "python3"),
        "pythons": [{"tag": p.tag, "prefix": p.prefix, "version": p.version, "farm": bool(p.farm)} for p in pythons],
        "helper_python": f"/opt/python/{first}-{first}",
        "python_packages": [f'"{p}"' for p in data["python"]["packages"]],
        "tool_packages": [f'"{p}"' for p in data["python"]["tools"]],
        "tool_python": f"/opt/python/{first}-{first}/bin/python3",
        "cross": cross,
        "cuda_fetch": None,
    }
    if image.kind == "cuda":
        ctx.update(_cuda_context(image, base, source, family, osdef, data, cross))
    if image.kind == "rocm":
        ctx["rocm_home"] = "/usr" if source in ("debian", "none") else image.extra.get("rocm_home", "/opt/rocm")
        if source == "base":  # AMD's toolkit: rocm_patch/apply.sh refuses < 6.0 and fixes 6.0's header
            ctx["rocm_patch"] = True
    return ctx


CROSS_PREFIX = "/opt/cross"
CROSS_TARGET_ROOT = "/opt/target"
_X86_64_LOADER = "/lib64/ld-linux-x86-64.so.2"


def cross_compiler(image: ImageSpec, base: str, osdef: dict, system_pythons: set[str]) -> dict | None:
    """For another machine's CPU or CUDA image: the build host's cross compiler that compiles and links its code.

    Under emulation the host-side g++ ran 3.6x slower than natively (benchmarks/emulation.py); Debian's
    cross g++ is a program of the build host's machine, which the kernel runs natively inside the emulated
    container given its own loader and libraries (unpacked with it under CROSS_PREFIX). It compiles for the
    target with the same GCC release and the same glibc as the suite's native g++. In a CUDA image it is
    also nvcc's host compiler (torch's cpp_extension passes ``-ccbin $CC``): the build host's nvcc (the
    compiler overlay) with the cross g++ makes target objects, as NVIDIA's own cross builds do. Where the table
    names the suite's Python (``python``) and the image holds it (SYSTEM_PYTHONS: the image's own, not the
    farm's), that CPython for the build host's machine comes too: the checkout's own builds run pip and
    setup.py on it natively (setup.py never imports torch), so only the smoke test stays emulated. None for a
    native image, a base without a [os.*.cross.<machine>] table (packages.toml), or a ROCm image."""
    machine, host = machine_of(image.platform), host_machine()
    table = osdef.get("cross", {}).get(machine)
    if (
        machine == host
        or image.kind not in ("cpu", "cuda")
        or not table
        or table.get("host") != host
        or host != "x86_64"
    ):
        return None
    cross_base = local_name(local_suite(base), host) if is_local_base(base) else base
    version = table.get("python") if table.get("python") in system_pythons else None
    # The suite's CPython for the build host's machine, the twin of the image's: pip and setup.py of the
    # checkout's own builds run on it natively (a venv that reads the image Python's build configuration).
    python = version and {
        "version": version,
        "venv": f"{CROSS_PREFIX}/python{version}",
        "target": image_python(version),
        "sysconfigdata": f"_sysconfigdata__{machine}-linux-gnu",  # Debian's name for it
        "platform": f"linux-{machine}",
    }
    return {
        "host": host,
        "target": machine,
        "triplet": f"{machine}-linux-gnu",
        "host_platform": docker_platform(host),
        "target_platform": docker_platform(machine),
        "base": cross_base,
        "debian_arch": DEBIAN_ARCH[machine],
        "root": CROSS_TARGET_ROOT,  # the native stage's copy of the image's root, which its apt and dpkg install into
        "packages": [*table["packages"], *(table.get("python_packages", []) if python else [])],
        "python": python or None,
        "prefix": CROSS_PREFIX,
        "loader": _X86_64_LOADER,
        "loader_file": f"/lib/{host}-linux-gnu/ld-linux-x86-64.so.2",
        "rpath": f"{CROSS_PREFIX}/lib/{host}-linux-gnu:{CROSS_PREFIX}/usr/lib/{host}-linux-gnu",
        "cc": table["cc"],
        "cxx": table["cxx"],
        "replaces": list(table.get("replaces", [])),
    }


def compiler_overlay(image: ImageSpec, osdef: dict, pins: dict) -> dict | None:
    """For another machine's CUDA image: the build host's compiler programs to lay over the toolkit.

    Under emulation nvcc takes minutes per kernel (115 s against 4.3 s natively, measured); the kernel
    runs this host's own binaries natively inside the emulated container, given their loader and libc.
    Only the programs are the host's; headers, libraries, setup.py, pip and torch stay the target's,
    so an sdist builds with no change to its code. None for a native image (nothing to lay over), and
    where the base has no multiarch loader to offer (a manylinux base: nvcc then runs emulated, slowly)."""
    machine, host = machine_of(image.platform), host_machine()
    arch = DEBIAN_ARCH.get(host)
    if machine == host or osdef["family"] != "debian" or arch is None or not pins.get("compiler"):
        return None
    return {
        "machine": host,
        "target": machine,
        "debian_arch": arch,
        "packages": [f'"{p}"' for p in pins["compiler"]],
        # pip's --platform takes exact tags: those NVIDIA's compiler wheels may carry (manylinux2014 and older).
        "platform_args": " ".join(f"--platform {t}" for t in manylinux_platforms(f"manylinux_2_17_{host}")),
    }


def context_files(ctx: dict) -> dict[str, Path]:
    """Files the rendered Dockerfile COPYs from the build context besides the farm's own."""
    return {"rocm_patch": REPO / "rocm_patch"} if ctx.get("rocm_patch") else {}


def files_digest(files: dict[str, Path]) -> str:
    """sha256 over the names and bytes of FILES (directories walked in sorted order)."""
    h = hashlib.sha256()
    for name, host in sorted(files.items()):
        paths = sorted(p for p in host.rglob("*") if p.is_file()) if host.is_dir() else [host]
        for p in paths:
            rel = name if p == host else f"{name}/{p.relative_to(host).as_posix()}"
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def render_template(name: str, **ctx) -> str:
    """docker/NAME rendered with CTX (strictly: a name the template uses and CTX lacks is an error)."""
    return environment().get_template(name).render(**ctx)


def hip_toolchain(base: str, packages: tuple[str, ...]) -> str:
    """The Dockerfile of builder/building/hip.py's hipcc image: BASE plus Debian's PACKAGES."""
    return render_template("hip-toolchain.Dockerfile.j2", base=base, packages=list(packages))


def render(image: ImageSpec, *, base: str | None = None, host_pythons: dict[str, Path] | None = None) -> Rendered:
    base = base or image.base
    foreign = machine_of(image.platform) != host_machine()
    host = {} if foreign else pyenv_pythons() if host_pythons is None else host_pythons
    pythons = python_installs(image.pythons, host, machine_of(image.platform))
    ctx = context(image, base, pythons)
    try:
        text = render_template(template_name(image), **ctx)
    except jinja2.TemplateNotFound as err:
        raise UsageError(
            f"image {image.id}: template {err.name} not found in {DOCKER_DIR}",
            hint="ImageSpec.template must be one of cpu, cuda, rocm",
        ) from None
    files = context_files(ctx)
    material = {"dockerfile": text, "pythons": [p.prefix for p in pythons]}
    if files:  # only then: the tags of images without extra files stay as they were
        material["files"] = files_digest(files)
    if any(p.farm for p in pythons):  # likewise: a new pin of a farm-provided interpreter is a new image
        material["farm_pythons"] = {p.tag: p.farm for p in pythons if p.farm}
    tag = image_tag(image.kind, stable_hash(material, 16))
    staged = ctx["python_include"] == "_python_copy.Dockerfile.j2"
    return Rendered(image, text, base, pythons, tag, files, staged, ctx["cross"])


def write_all(images: dict[str, ImageSpec], out: Path, *, local_base: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for image_id, image in sorted(images.items()):
        base = local_name(fallback_suite(image), machine_of(image.platform)) if local_base else None
        r = render(image, base=base)
        path = out / f"{image_id}.Dockerfile"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(r.dockerfile)
        os.replace(tmp, path)
        written.append(path)
    return written
