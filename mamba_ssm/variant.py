"""The one definition of "which build variant does this environment need" (key ``cu12-torch2.6-cxx11abiFALSE``,
label ``cu12torch2.6cxx11abiFALSE``, stable ``cu13-torchstable-abi3``).

Imported by setup.py (by file path), the doctor and builder, so it imports the standard library alone:
torch is queried lazily (:func:`detect`) or read from its files (:func:`installed_torch`).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import mmap
import os
import re
import sys
import sysconfig
from dataclasses import dataclass, replace

BACKENDS = ("cpu", "cuda", "rocm")

_LABEL_RE = re.compile(
    r"^(?P<acc>cpu|cu\d+|hip\d+)torch(?:(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE)|(?P<stable>stable))$",
    re.IGNORECASE,  # PEP 440 normalises local labels to lower case (wheel filenames, metadata)
)
_KEY_RE = re.compile(
    r"^(?P<acc>cpu|cu\d+|hip\d+)-torch(?:(?P<torch>\d+\.\d+)-cxx11abi(?P<abi>TRUE|FALSE)|(?P<stable>stable)-abi3)$"
)
_RELEASE_RE = re.compile(r"^\s*v?(\d+)\.(\d+)")


class VariantError(ValueError):
    """A version string or label that does not describe a variant."""


def torch_major_minor(version: str) -> str:
    """``"2.6.0+cu124"`` -> ``"2.6"``; NGC's ``"2.5.0a0+e000cf0ad9.nv24.10"`` -> ``"2.5"``."""
    m = _RELEASE_RE.match(version)
    if not m:
        raise VariantError(f"cannot read a torch version from {version!r}")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def accelerator_tag(backend: str, version: str | None) -> str:
    """``("cuda", "12.4")`` -> ``cu12``; ``("rocm", "6.2.41133")`` -> ``hip62``; ``("cpu", None)`` -> ``cpu``.

    CUDA keeps only the major (a wheel built with 12.x runs with any torch built for
    12.y); ROCm keeps major+minor (HIP has no such promise across minors).
    """
    if backend == "cpu":
        return "cpu"
    if not version:
        raise VariantError(f"backend {backend!r} needs a version")
    parts = re.findall(r"\d+", version)
    if backend == "cuda" and parts:
        return f"cu{int(parts[0])}"
    if backend == "rocm" and len(parts) >= 2:
        return f"hip{int(parts[0])}{int(parts[1])}"
    raise VariantError(f"cannot make an accelerator tag from backend={backend!r} version={version!r}")


def python_tag(version_info=None, free_threaded: bool | None = None) -> str:
    """The interpreter's wheel tag: ``cp311``; ``cp314t`` for a free-threaded build, whose ABI is its own (neither
    a ``cp314`` nor an ``abi3`` wheel loads in it). ``free_threaded`` None: this interpreter's (Py_GIL_DISABLED)."""
    v = version_info or sys.version_info
    if free_threaded is None:
        free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return f"cp{v[0]}{v[1]}" + ("t" if free_threaded else "")


def platform_tag() -> str:
    """The wheel platform tag of this interpreter before manylinux repair (``linux_x86_64``)."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


# mamba_build/build.toml's [stable] floor and backends (tests/test_doctor.py checks they agree): copied because an
# installed wheel, and the standalone doctor, ship no build.toml. torch >= the floor on these backends is served
# by the one stable-ABI wheel per accelerator, not a per-torch one.
STABLE_FLOOR = "2.10"
STABLE_BACKENDS = ("cpu", "cuda")
# mamba_build/build.toml's [torch] cxx20_from and [compiler.c17/c20] gcc (tests/test_doctor_source_build.py checks
# they agree): the oldest GCC a source build compiles torch's headers with, C++17 below cxx20_from, C++20 from it.
CXX20_FROM = "2.14"
GCC_FLOOR = {"c17": "9", "c20": "10"}


def vtuple_mm(major_minor: str) -> tuple[int, int]:
    """``"2.14"`` -> ``(2, 14)``."""
    major, minor = major_minor.split(".")
    return int(major), int(minor)


def gcc_floor_text(torch_version: str | None) -> str:
    """The compiler a source build needs, said where one is offered: for this torch where it is known."""
    try:
        mm = vtuple_mm(torch_major_minor(torch_version or ""))
    except VariantError:
        mm = None
    cxx20 = vtuple_mm(CXX20_FROM)
    if mm is None:
        need = f"GCC >= {GCC_FLOOR['c17']}, or >= {GCC_FLOOR['c20']} for torch >= {CXX20_FROM}"
    else:
        need = f"GCC >= {GCC_FLOOR['c20' if mm >= cxx20 else 'c17']}"
    return f"the build needs {need}: an older system GCC (RHEL 8 ships 8.5) cannot compile it; set CC and CXX to a newer one"


@dataclass(frozen=True)
class Variant:
    torch: str  # "2.14" (major.minor) or "stable"
    backend: str  # "cpu" | "cuda" | "rocm"
    backend_version: str | None  # "13.0", "6.2", None for cpu
    cxx11abi: bool | None  # None for a stable wheel, which serves both
    python: str = python_tag()
    platform: str = platform_tag()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise VariantError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.torch != "stable" and not re.fullmatch(r"\d+\.\d+", self.torch):
            raise VariantError(f"torch must be major.minor or 'stable', got {self.torch!r}")

    @property
    def stable(self) -> bool:
        return self.torch == "stable"

    @property
    def accelerator(self) -> str:
        return accelerator_tag(self.backend, self.backend_version)

    @property
    def key(self) -> str:
        if self.stable:
            return f"{self.accelerator}-torchstable-abi3"
        return f"{self.accelerator}-torch{self.torch}-cxx11abi{_abi(self.cxx11abi)}"

    @property
    def label(self) -> str:
        if self.stable:
            return f"{self.accelerator}torchstable"
        return f"{self.accelerator}torch{self.torch}cxx11abi{_abi(self.cxx11abi)}"

    @classmethod
    def from_label(cls, label: str, **kw) -> Variant:
        """The variant a local label names (``cu12torch2.6cxx11abiFALSE``, ``cu13torchstable``; any case, as
        setuptools lowercases it). ``kw``: python / platform (default: this interpreter's)."""
        return cls._from_parts(parse_label(label), label, **kw)

    @classmethod
    def from_key(cls, key: str, **kw) -> Variant:
        """The variant a key names (``cu12-torch2.6-cxx11abiFALSE``, ``cu13-torchstable-abi3``)."""
        return cls._from_parts(parse_key(key), key, **kw)

    @classmethod
    def _from_parts(cls, parts: dict, text: str, **kw) -> Variant:
        acc = parts["accelerator"]
        if acc == "cpu":
            backend, version = "cpu", None
        elif acc.startswith("cu"):
            backend, version = "cuda", acc[2:]
        else:  # hipMN: ROCm M.N (accelerator_tag keeps major and minor)
            backend, version = "rocm", f"{acc[3]}.{acc[4:]}"
        v = cls(torch=parts["torch"], backend=backend, backend_version=version, cxx11abi=parts["cxx11abi"], **kw)
        try:
            back = v.accelerator
        except VariantError:
            back = None
        if back != acc:
            raise VariantError(f"{text!r}: {acc} is not an accelerator tag (e.g. cpu, cu12, hip62)")
        return v

    @property
    def backend_name(self) -> str:
        """For people: ``CUDA 12.x``, ``ROCm 6.2``, ``CPU only``."""
        if self.backend == "cpu":
            return "CPU only"
        if self.backend == "cuda":
            return f"CUDA {self.backend_version.split('.')[0]}.x"
        return f"ROCm {self.backend_version}"

    @property
    def served_by_stable(self) -> bool:
        """Whether the default release serves this torch with the stable-ABI wheel (torch >= the floor, CPU or CUDA)."""
        if self.stable:
            return True
        floor = tuple(int(x) for x in STABLE_FLOOR.split("."))
        return self.backend in STABLE_BACKENDS and tuple(int(x) for x in self.torch.split(".")) >= floor

    def as_stable(self) -> Variant:
        """The stable-ABI variant that could serve this environment."""
        return replace(self, torch="stable", cxx11abi=None)

    def as_dict(self) -> dict:
        return {
            "torch": self.torch,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "accelerator": self.accelerator,
            "cxx11abi": self.cxx11abi,
            "python": self.python,
            "platform": self.platform,
            "key": self.key,
            "label": self.label,
        }


def _abi(value: bool | None) -> str:
    if value is None:
        raise VariantError("a non-stable variant needs cxx11abi True or False")
    return "TRUE" if value else "FALSE"


def parse_label(label: str) -> dict:
    """Split a local label (``cu12torch2.6cxx11abiFALSE``) into accelerator, torch, cxx11abi."""
    m = _LABEL_RE.match(label)
    if not m:
        raise VariantError(
            f"{label!r} is not a mamba-ssm local label (expected e.g. cu12torch2.6cxx11abiFALSE or cu13torchstable)"
        )
    return _parts(m)


def parse_key(key: str) -> dict:
    """Split a variant key (``cu12-torch2.6-cxx11abiFALSE``) into accelerator, torch, cxx11abi."""
    m = _KEY_RE.match(key)
    if not m:
        raise VariantError(
            f"{key!r} is not a variant key (expected e.g. cu12-torch2.6-cxx11abiFALSE or cu13-torchstable-abi3)"
        )
    return _parts(m)


def _parts(m: re.Match) -> dict:
    stable = bool(m.group("stable"))
    return {
        "accelerator": m.group("acc").lower(),
        "torch": "stable" if stable else m.group("torch"),
        "cxx11abi": None if stable else m.group("abi").upper() == "TRUE",
    }


def from_values(
    torch_version: str,
    *,
    cuda: str | None = None,
    hip: str | None = None,
    cxx11abi: bool | None = None,
    python: str | None = None,
    platform: str | None = None,
) -> Variant:
    """Build the variant from plain facts (what ``torch.__version__`` & co. say)."""
    if cuda and hip:
        raise VariantError("a torch build is either CUDA or ROCm, not both")
    backend, backend_version = ("cuda", cuda) if cuda else ("rocm", hip) if hip else ("cpu", None)
    if backend == "rocm":
        backend_version = ".".join(re.findall(r"\d+", hip)[:2])
    if cxx11abi is None:
        # torch >= 2.7 ships only the CXX11 ABI; earlier PyPI/index wheels only the old one.
        mm = tuple(int(x) for x in torch_major_minor(torch_version).split("."))
        cxx11abi = mm >= (2, 7) or is_ngc(torch_version)
    return Variant(
        torch=torch_major_minor(torch_version),
        backend=backend,
        backend_version=backend_version,
        cxx11abi=cxx11abi,
        python=python or python_tag(),
        platform=platform or platform_tag(),
    )


def is_ngc(torch_version: str) -> bool:
    """NVIDIA NGC containers ship torch as ``2.5.0a0+<sha>.nv24.10`` (always CXX11 ABI)."""
    return bool(re.search(r"\.nv\d+\.\d+", torch_version)) or bool(os.environ.get("NVIDIA_PYTORCH_VERSION"))


def detect(torch_module=None) -> Variant:
    """The variant the current interpreter's torch needs. Imports torch (lazily)."""
    if torch_module is None:
        import torch as torch_module

    abi = getattr(getattr(torch_module, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    return from_values(
        torch_module.__version__,
        cuda=getattr(torch_module.version, "cuda", None),
        hip=getattr(torch_module.version, "hip", None),
        cxx11abi=bool(abi) if abi is not None else None,
    )


@dataclass(frozen=True)
class TorchFacts:
    """What an installed torch is, as :func:`installed_torch` read it from its files."""

    version: str
    cuda: str | None
    hip: str | None
    cxx11abi: bool | None  # None: its libc10 could not be read
    location: str
    git_version: str | None = None  # the commit torch was built from: with the version, names its headers


def imported_torch(torch) -> TorchFacts:
    """The facts of a torch module already imported (where its files could not be read, or the doctor's live
    check): its version, CUDA/HIP release, the C++ ABI its extension reports and its commit."""
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    return TorchFacts(
        torch.__version__, getattr(torch.version, "cuda", None), getattr(torch.version, "hip", None),
        None if abi is None else bool(abi), os.path.dirname(torch.__file__), getattr(torch.version, "git_version", None),
    )  # fmt: skip


def installed_torch(path: list[str] | None = None) -> TorchFacts | None:
    """The facts of the torch this interpreter would import, without importing it (None: no torch).

    ``path``: look for torch in these folders instead of ``sys.path`` (setup.py under pip's build
    isolation: the target environment's site-packages, which pip takes off ``sys.path``).

    Importing torch takes seconds and pip runs setup.py three times per install; the prebuilt-wheel
    path needs only these four facts. ``torch/version.py`` holds the version and the CUDA/HIP
    release as literals; the C++ ABI is read from libc10.so: with the CXX11 ABI c10's own
    functions take ``std::__cxx11::basic_string``, with the old one no c10 name mentions it.
    """
    # Both locate the package without running its __init__.
    spec = importlib.util.find_spec("torch") if path is None else importlib.machinery.PathFinder.find_spec("torch", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = spec.submodule_search_locations[0]
    try:
        with open(os.path.join(root, "version.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) and node.value is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue  # computed values (not among the ones read here)
    version = values.get("__version__")
    if not isinstance(version, str):
        return None
    abi = _library_abi(os.path.join(root, "lib", "libc10.so"))
    return TorchFacts(version, values.get("cuda") or None, values.get("hip") or None, abi, root, values.get("git_version"))


# A symbol of c10's own (``c10::Error::Error(std::string, ...)``): only these say how torch was compiled. torch's
# pre-CXX11 builds (2.4-2.6 on PyPI) also carry libstdc++'s own new-ABI exception constructors, linked in statically.
_C10_SYMBOL = re.compile(rb"_ZNK?3c10\w{0,4096}")


def _library_abi(path: str) -> bool | None:
    """Whether libc10.so was compiled with the CXX11 ABI: some c10 symbol names ``std::__cxx11``; None: no c10
    symbol found (not torch's libc10, or unreadable)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found = False
            for m in _C10_SYMBOL.finditer(data):
                if b"__cxx11" in m.group():
                    return True
                found = True
            return False if found else None
    except (OSError, ValueError):
        return None


def detect_installed() -> Variant | None:
    """:func:`detect` from torch's files alone (None: no torch installed)."""
    facts = installed_torch()
    if facts is None:
        return None
    return from_values(facts.version, cuda=facts.cuda, hip=facts.hip, cxx11abi=facts.cxx11abi)


if __name__ == "__main__":  # pragma: no cover - a quick look for humans
    import json

    print(json.dumps(detect().as_dict(), indent=2))
