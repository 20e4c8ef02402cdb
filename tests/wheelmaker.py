"""Write small, real, installable wheels (for the index tests and benchmarks).

The wheels are complete (METADATA, WHEEL, RECORD with hashes, a tiny module), so
pip and uv install them for real; only their payload is a stub.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import mamba_ssm

# This checkout's version, as every test names it: a version upstream's mamba-ssm never published.
V = mamba_ssm.__version__


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    out_dir: Path,
    name: str,
    version: str,
    tag: str = "py3-none-any",
    *,
    requires: tuple[str, ...] = (),
    requires_python: str | None = ">=3.10",
    files: dict[str, bytes] | None = None,
) -> Path:
    """Write ``<dist>-<version>-<tag>.whl`` into ``out_dir`` and return its path."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        meta.append(f"Requires-Python: {requires_python}")
    meta += [f"Requires-Dist: {r}" for r in requires]
    _pyver, _abi, _plat = tag.split("-")
    wheel_txt = "Wheel-Version: 1.0\nGenerator: wheelmaker\nRoot-Is-Purelib: false\n"
    for t in _expand(tag):
        wheel_txt += f"Tag: {t}\n"
    content = dict(files or {f"{dist}/__init__.py": f"__version__ = {version!r}\n".encode()})
    content[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    content[f"{info}/WHEEL"] = wheel_txt.encode()
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in content.items()) + f"{info}/RECORD,,\n"
    content[f"{info}/RECORD"] = record.encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in content.items():
            zf.writestr(p, d)
    return path


def _expand(tag: str) -> list[str]:
    py, abi, plat = tag.split("-")
    return [f"{a}-{b}-{c}" for a in py.split(".") for b in abi.split(".") for c in plat.split(".")]


def make_mamba_wheel(
    out_dir: Path, label: str, python: str = "cp311", *, version: str = V, platform: str = "linux_x86_64"
) -> Path:
    """A mamba-ssm wheel as the farm names it: ``<version>+<label>``, torch pinned to the label's minor."""
    if label.endswith("torchstable"):
        tag, requires = f"{python}-abi3-{platform}", ("torch>=2.10",)
    else:
        torch = label.split("torch")[1].split("cxx11abi")[0]
        tag, requires = f"{python}-{python}-{platform}", (f"torch=={torch}.*",)
    return make_wheel(out_dir, "mamba-ssm", f"{version}+{label}", tag, requires=requires)


# The source identities of the two sdists the recipes pin (builder.sourcing.sources.SdistPin.identity).
UPSTREAM_MAMBA = "sdist:mamba-ssm==2.3.2.post1@sha256:104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"
CAUSAL_CONV1D = "sdist:causal-conv1d==1.7.0@sha256:3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"


RECIPE_PLATFORM = "manylinux_2_28_x86_64"  # a recipe wheel's platform tag once the farm repaired it


# What the stand-in of PyPI's torch 2.14 holds: the files the doctor reads (version.py, the C++ ABI flag).
STANDIN_TORCH = {
    "torch/__init__.py": (
        b"from . import version\n__version__ = version.__version__\n"
        b"class _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
        b"class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
    ),
    "torch/version.py": b"__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n",
}


def make_recipe_wheel(
    out_dir: Path,
    name: str,
    version: str,
    label: str,
    python: str = "cp311",
    *,
    source: str | None = None,
    platform: str = RECIPE_PLATFORM,
) -> Path:
    """A wheel built from a recipe's sdist, named as upstream's setup.py names it (the label as given: upstream
    lowercases it, ``cxx11abitrue``) and tagged as the farm's repair leaves it (a manylinux floor: upstream's own
    release wheels are ``linux_x86_64``), torch pinned to the label's minor, with the farm's sidecar
    ``<wheel>.spec.json`` carrying ``source`` (the pin's identity)."""
    torch = label.split("torch")[1].split("cxx11abi")[0]
    whl = make_wheel(
        out_dir, name, f"{version}+{label}", f"{python}-{python}-{platform}", requires=(f"torch=={torch}.*",)
    )
    if source is not None:
        Path(str(whl) + ".spec.json").write_text(json.dumps({"project": name, "source": source}))
    return whl


def make_fake_torch(out_dir: Path, version: str) -> Path:
    """A stand-in for a torch release: real CUDA torch wheels are gigabytes."""
    return make_wheel(out_dir, "torch", version, requires_python=">=3.9")


STANDIN_SDIST_MARK = "stand-in for PyPI's sdist"


def make_standin_sdist(out_dir: Path, name: str, version: str) -> Path:
    """A stand-in for an sdist PyPI holds (upstream's mamba-ssm 2.3.2.post1, causal-conv1d 1.7.0): the real file
    name, PKG-INFO and pyproject.toml, and an in-tree build backend that refuses to build, saying it is the
    stand-in, so a command that took PyPI's sdist fails loudly instead of compiling for half an hour."""
    import io
    import tarfile

    dist = name.replace("-", "_")
    root = f"{dist}-{version}"
    backend = (
        "import sys\n"
        "def _refuse(*_a, **_k):\n"
        f"    sys.exit('{STANDIN_SDIST_MARK} {name}=={version}: the installer took this sdist instead of a wheel')\n"
        "get_requires_for_build_wheel = get_requires_for_build_sdist = prepare_metadata_for_build_wheel = _refuse\n"
        "build_wheel = build_sdist = get_requires_for_build_editable = build_editable = _refuse\n"
    )
    members = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "standin_backend"\nbackend-path = ["."]\n',
        "standin_backend.py": backend,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path
