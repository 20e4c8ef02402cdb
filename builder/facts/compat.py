"""Compatibility facts (``builder/data/*.toml``, ``mamba_build/build.toml``) and the rules that read them.

The data says what exists (torch releases, toolkits, GPU architectures, base images); this module answers
the plan's questions about one cell: can it be built, with which torch build and index, for which
architectures, in which toolchain. No I/O beyond reading the bundled data once.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

from builder.facts import paths
from builder.facts.untrusted import release

DATA_DIR = paths.DATA
BUILD_DATA = paths.REPO / "mamba_build" / "build.toml"  # shared with setup.py
PLATFORMS = ("linux_x86_64", "linux_aarch64")
# Ways a toolkit can reach an image; "none" is the CPU image's.
TOOLKIT_SOURCES = ("base", "pypi", "debian")


@functools.lru_cache(maxsize=1024)
def vtuple(text: str) -> tuple[int, ...]:
    """``"2.14"`` -> ``(2, 14)``; a part missing or not digits (``"3."``, a tag's ``cp3``) is Untrusted."""
    return release(text, "version")


@dataclass(frozen=True)
class TorchRow:
    minor: str  # "2.6"
    latest: str  # "2.6.0"
    python: tuple[str, str]  # oldest, newest
    cuda: tuple[str, ...]  # "12.4", ...
    cuda_aarch64: tuple[str, ...]
    rocm: tuple[str, ...]  # "6.2.4", ...
    pypi: dict  # platform -> "cu124" | "cpu"
    cxx11abi: tuple[bool, ...]
    cxx_std: int  # from build.toml's [torch] cxx20_from
    glibc: dict  # platform -> "2.28"
    released: str = ""  # the day its first release (M.m.0) was uploaded to PyPI: where a recipe release's era starts

    def supports_python(self, python: str) -> bool:
        return vtuple(self.python[0]) <= vtuple(python) <= vtuple(self.python[1])

    def cuda_variants(self, platform: str) -> tuple[str, ...]:
        return self.cuda if platform == "linux_x86_64" else self.cuda_aarch64


@dataclass(frozen=True)
class Accelerator:
    """A value of the accelerator axis: ``cpu``, ``cuda-12.9``, ``rocm-6.2``."""

    name: str
    kind: str  # "cpu" | "cuda" | "rocm"
    toolkit: str | None  # "12.9" | "6.2" | None

    @property
    def major(self) -> int | None:
        return int(self.toolkit.split(".")[0]) if self.toolkit else None


@functools.lru_cache(maxsize=256)
def parse_accelerator(name: str) -> Accelerator:
    """Split an already pattern-checked accelerator name."""
    if name == "cpu":
        return Accelerator(name, "cpu", None)
    kind, _, toolkit = name.partition("-")
    return Accelerator(name, kind, toolkit)


@dataclass(frozen=True)
class TorchInstall:
    index_variant: str  # "cu126", "rocm6.2.4", "cpu"; "" = PyPI's own build
    built_with: str | None  # the CUDA/ROCm version torch was built with ("12.6"), None for cpu


class Compat:
    """The loaded data. Build one with :func:`load`."""

    def __init__(self, torch: dict, toolkits: dict, images: dict, build: dict) -> None:
        # Shared with setup.py (mamba_build/build.toml).
        self.cxx20_from: str = build["torch"]["cxx20_from"]
        self.stable_floor: str = build["stable"]["floor"]
        self.stable_python: str = build["stable"]["python"]  # the abi3 wheel's oldest CPython
        self.stable_kinds: tuple[str, ...] = tuple(build["stable"]["backends"])
        self.rocm_minimum: str = build["rocm"]["minimum"]
        self.rocm_needs_patch: tuple[str, ...] = tuple(build["rocm"]["needs_patch"])
        self.rocm_default_archs: tuple[str, ...] = tuple(build["rocm"]["default_archs"])
        # Default CUDA archs as per-arch rules, in the shape of the farm's extra ones.
        self.cuda_arch: list[dict] = [
            {"arch": f"sm_{sm}", "since": row["from"]} for row in build["cuda"]["archs"] for sm in row["sm"]
        ]
        self.torch: dict[str, TorchRow] = {}
        for minor, row in torch["torch"].items():
            self.torch[minor] = TorchRow(
                minor=minor,
                latest=row["latest"],
                python=tuple(row["python"]),
                cuda=tuple(row["cuda"]),
                cuda_aarch64=tuple(row["cuda_aarch64"]),
                rocm=tuple(row["rocm"]),
                pypi=dict(row["pypi"]),
                cxx11abi=tuple(row["cxx11abi"]),
                cxx_std=20 if vtuple(minor) >= vtuple(self.cxx20_from) else 17,
                glibc=dict(row["glibc"]),
                released=str(row.get("released", "")),
            )
        self.cuda: dict[str, dict] = toolkits["cuda"]
        self.rocm: dict[str, dict] = toolkits["rocm"]
        self.cuda_extra_arch: dict[str, dict] = toolkits.get("cuda_extra_arch", {})
        self.cuda_headers: dict[str, str] = toolkits.get("cuda_headers", {})  # header -> the PyPI package with it
        self.gpu_names: dict[str, str] = toolkits.get("gpus", {})
        self.drivers: dict[str, str] = toolkits.get("driver", {})  # CUDA major -> the oldest Linux driver it runs on
        self.images: dict[str, dict] = {k: v for k, v in images.items() if k != "debian_glibc"}
        self.debian_glibc: dict[str, str] = images["debian_glibc"]
        lo = min((vtuple(r.python[0]) for r in self.torch.values()), default=(3, 8))
        hi = max((vtuple(r.python[1]) for r in self.torch.values()), default=(3, 14))
        self.pythons = tuple(f"3.{m}" for m in range(lo[1], hi[1] + 1))

    @property
    def stable_python_tag(self) -> str:
        """The stable-ABI wheel's Python tag: cp310 (it is cp310-abi3)."""
        return "cp" + self.stable_python.replace(".", "")

    # -- what exists ---------------------------------------------------------

    def torch_minors(self) -> list[str]:
        return sorted(self.torch, key=vtuple)

    def accelerators(self) -> list[str]:
        names = ["cpu"] + [f"cuda-{v}" for v in sorted(self.cuda, key=vtuple)]
        return names + [f"rocm-{v}" for v in sorted(self.rocm, key=vtuple)]

    def known_accelerator(self, acc: Accelerator) -> bool:
        if acc.kind == "cpu":
            return True
        table = self.cuda if acc.kind == "cuda" else self.rocm
        return acc.toolkit in table

    # -- rules for one cell ----------------------------------------------------

    def drop_reason(self, torch: str, python: str, acc: Accelerator, cxx11abi: bool, platform: str) -> str | None:
        """Why this combination cannot be built, or None when it can."""
        row = self.torch[torch]
        if not row.supports_python(python):
            return f"torch {torch} has wheels for Python {row.python[0]}-{row.python[1]} only"
        if cxx11abi is False and False not in row.cxx11abi:
            return f"torch {torch} ships only the CXX11 ABI (cxx11abi=TRUE); nothing runs a FALSE build"
        if acc.kind == "cuda":
            variants = row.cuda_variants(platform)
            same_major = [v for v in variants if vtuple(v)[0] == acc.major]
            where = "" if platform == "linux_x86_64" else f" for {platform}"
            if not same_major:
                have = ", ".join(variants) or "none"
                return f"torch {torch} has no CUDA {acc.major}.x build{where} (its CUDA builds: {have})"
            ceiling = self.torch_cuda_ceiling(acc)
            if all(vtuple(v) > vtuple(ceiling) for v in same_major) and acc.toolkit in self.cuda:
                return (
                    f"torch {torch}'s CUDA {acc.major}.x builds{where} ({', '.join(same_major)}) are newer than "
                    f"toolkit {acc.toolkit} was checked against ({ceiling}; toolkits.toml torch_cuda_max)"
                )
        elif acc.kind == "rocm":
            if vtuple(acc.toolkit) < vtuple(self.rocm_minimum):
                return f"the HIP kernels need ROCm >= {self.rocm_minimum}"
            if platform != "linux_x86_64":
                return "PyTorch publishes ROCm builds for linux_x86_64 only"
            if not self._rocm_variants(row, acc):
                have = ", ".join(row.rocm) or "none"
                return f"torch {torch} has no ROCm {acc.toolkit} build (its ROCm builds: {have})"
        return None

    def _rocm_variants(self, row: TorchRow, acc: Accelerator) -> list[str]:
        return [v for v in row.rocm if vtuple(v)[:2] == vtuple(acc.toolkit)]

    def torch_install(self, torch: str, acc: Accelerator, platform: str, *, prefer_pypi: bool) -> TorchInstall:
        """Which torch build a (buildable) cell installs.

        A CUDA X.Y toolkit builds against any torch built for CUDA X: PyPI's own build
        when it is one not newer than the toolkit or the newer build it was checked against
        (toolkits.toml ``torch_cuda_max``; and ``prefer_pypi``), else the newest
        CUDA X variant not newer than the toolkit, else the oldest CUDA X variant.
        """
        row = self.torch[torch]
        pypi = row.pypi.get(platform, "")
        if acc.kind == "cpu":
            if prefer_pypi and pypi == "cpu":
                return TorchInstall("", None)
            return TorchInstall("cpu", None)
        if acc.kind == "rocm":
            best = max(self._rocm_variants(row, acc), key=vtuple)
            return TorchInstall("rocm" + best, best)
        same = sorted((v for v in row.cuda_variants(platform) if vtuple(v)[0] == acc.major), key=vtuple)
        if prefer_pypi and pypi.startswith("cu"):
            pypi_version = f"{pypi[2:-1]}.{pypi[-1]}"
            ceiling = self.torch_cuda_ceiling(acc)
            if vtuple(pypi_version)[0] == acc.major and vtuple(pypi_version) <= vtuple(ceiling):
                return TorchInstall("", pypi_version)
        not_newer = [v for v in same if vtuple(v) <= vtuple(acc.toolkit)]
        chosen = not_newer[-1] if not_newer else same[0]
        return TorchInstall("cu" + chosen.replace(".", ""), chosen)

    def torch_cuda_ceiling(self, acc: Accelerator) -> str:
        """The newest torch CUDA build ACC's toolkit builds against: itself, or its checked torch_cuda_max."""
        row = self.cuda.get(acc.toolkit or "", {})
        return max(acc.toolkit, row.get("torch_cuda_max", acc.toolkit), key=vtuple)

    def default_archs(self, acc: Accelerator) -> tuple[str, ...]:
        if acc.kind == "cuda":
            archs = [a["arch"] for a in self.cuda_arch if self._arch_ok(a, acc.toolkit)]
            return tuple(sorted(archs, key=lambda a: int(a[3:].rstrip("af"))))
        if acc.kind == "rocm":
            return tuple(self.rocm[acc.toolkit]["archs"])
        return ()

    def known_archs(self) -> list[str]:
        cuda = [a["arch"] for a in self.cuda_arch] + list(self.cuda_extra_arch)
        rocm = sorted({a for t in self.rocm.values() for a in t["archs"]})
        return sorted(cuda, key=lambda a: int(a[3:].rstrip("af"))) + rocm

    def gpus(self, archs) -> dict[str, str]:
        """ARCHS (sm_121, gfx942 ...) with the GPUs people know them by (toolkits.toml [gpus]); unnamed ones left out."""
        return {a: self.gpu_names[a] for a in archs if a in self.gpu_names}

    def can_compile(self, acc: Accelerator, arch: str) -> bool:
        """Whether ACC's toolkit can compile for ARCH (profiles may narrow to any such arch)."""
        if acc.kind == "cuda":
            rules = [a for a in self.cuda_arch if a["arch"] == arch]
            rules += [dict(v, arch=k) for k, v in self.cuda_extra_arch.items() if k == arch]
            return any(self._arch_ok(r, acc.toolkit) for r in rules)
        if acc.kind == "rocm":
            return arch in self.rocm[acc.toolkit]["archs"]
        return False

    @staticmethod
    def _arch_ok(rule: dict, toolkit: str) -> bool:
        t = vtuple(toolkit)
        if t < vtuple(rule["since"]):
            return False
        return "until" not in rule or t <= vtuple(rule["until"])

    def toolkit_sources(self, acc: Accelerator) -> tuple[str, ...]:
        if acc.kind == "cuda":
            return tuple(self.cuda[acc.toolkit]["sources"])
        if acc.kind == "rocm":
            return ("base",)
        return ("none",)

    def toolkit_full(self, acc: Accelerator) -> str | None:
        if acc.kind == "cuda":
            return self.cuda[acc.toolkit]["full"]
        if acc.kind == "rocm":
            return self.rocm[acc.toolkit]["full"]
        return None

    def debian_suite(self, acc: Accelerator) -> str | None:
        return self.cuda.get(acc.toolkit or "", {}).get("debian_suite") if acc.kind == "cuda" else None

    def hip_bf16_patch(self, acc: Accelerator) -> bool:
        return acc.kind == "rocm" and acc.toolkit in self.rocm_needs_patch

    def manylinux(self, torch: str, platform: str, image_glibc: str) -> str:
        """The repair target: the newer of torch's own glibc floor and the build image's glibc."""
        floor = self.torch[torch].glibc[platform]
        glibc = max(floor, image_glibc, key=vtuple)
        major, minor = glibc.split(".")
        return f"manylinux_{major}_{minor}_{platform.removeprefix('linux_')}"


def machine_of(platform_tag: str) -> str:
    """linux_aarch64 -> aarch64 (the machine of a wheel platform tag)."""
    return platform_tag.split("_", 1)[-1] if platform_tag.startswith("linux_") else platform_tag.rsplit("_", 1)[-1]


# The glibc each legacy manylinux name stands for.
_LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def manylinux_glibc(policy: str) -> tuple[int, int]:
    """The glibc a manylinux platform tag needs (PEP 600's, or a legacy alias's); (0, 0) for any other tag."""
    m = re.match(r"manylinux_(\d+)_(\d+)_", policy)
    return (int(m.group(1)), int(m.group(2))) if m else _LEGACY_GLIBC.get(policy.split("_", 1)[0], (0, 0))


def newest_manylinux(wheel_name: str) -> str | None:
    """The newest PEP 600 manylinux tag a wheel's name carries (what auditwheel repaired it to), if any."""
    from packaging.utils import parse_wheel_filename

    tags = parse_wheel_filename(wheel_name)[3]
    return max((t.platform for t in tags if t.platform.startswith("manylinux_")), key=manylinux_glibc, default=None)


# PEP 600's older manylinux names, newest first; PEP 571 and 513 defined the last two for x86 only.
_LEGACY_MANYLINUX = ("manylinux2014", "manylinux2010", "manylinux1")
_X86_ONLY = {"manylinux2010", "manylinux1"}


def manylinux_platforms(tag: str) -> list[str]:
    """Every platform tag of a wheel that runs where TAG (``manylinux_2_28_aarch64``) does, newest first.

    ``pip --platform`` matches tags exactly: a pip fetching for another machine is given them all (PyPI's aarch64
    cuDNN and cuBLAS wheels say manylinux_2_27, its toolkit wheels manylinux2014). Which glibc each tag needs is
    read the installer's way (``mamba_ssm.prebuilt.platform_ok``)."""
    from mamba_ssm.prebuilt import platform_ok  # here: it loads urllib & co., which most users of compat never need

    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if m is None:
        raise ValueError(f"not a PEP 600 manylinux tag: {tag!r}")
    minor, arch = int(m.group(1)), m.group(2)
    candidates = [f"manylinux_2_{n}_{arch}" for n in range(minor, 4, -1)]
    candidates += [f"{name}_{arch}" for name in _LEGACY_MANYLINUX if name not in _X86_ONLY or arch in ("x86_64", "i686")]
    return [t for t in candidates if platform_ok(t, arch, (2, minor))]


def image_setting_key(kind: str, source: str) -> str:
    """The [images.*] table that configures a (kind, toolkit source) pair."""
    if kind == "cuda" and source in ("pypi", "debian"):
        return f"cuda-{source}"
    return kind


def _read(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


@functools.lru_cache(maxsize=1)
def load() -> Compat:
    return load_with(_read(DATA_DIR / "torch.toml"))


def load_with(torch: dict) -> Compat:
    """The data with this torch.toml document in place of the file's (drift --write proves its edit with it)."""
    return Compat(torch, _read(DATA_DIR / "toolkits.toml"), _read(DATA_DIR / "images.toml"), _read(BUILD_DATA))
