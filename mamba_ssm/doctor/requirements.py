"""``mamba-doctor --requirements LINE``: a pip requirements file for the torch this environment already has.

It pins that torch as installed (so pip keeps it, and stops with a resolver error rather than replace it) and
the line's wheels of its cell, from the cell's page on the site. Where the line has no wheel for this machine
(no torch, a platform, Python, accelerator, glibc or GPU no wheel serves) it prints nothing and says why, and
what to do instead: the front door's command then stops before pip runs.
"""

from __future__ import annotations

import os
from dataclasses import replace

from .. import variant as _variant
from ..guard import Untrusted, pep440
from ..guard import index_url as index_url_checked
from .classify import CHECKOUT, UPSTREAM, Context, _gpu_fix, index_root
from .lines import LINES, UNSUPPORTED
from .served import FREE_THREADED, SYSTEMS, no_wheel_axis

# What the message says where no torch is installed: the two usual builds (PyPI's default is a CUDA one).
TORCH_FIRST = (
    "install the torch you want first, then run this again: CPU only: "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`; CUDA: `pip install torch` (PyPI's build)"
)


class NoCell(Exception):
    """This environment has no wheel of the line; the message says why and what to do instead."""


def cell_label(line: str, variant: _variant.Variant) -> str:
    """The label of the wheel LINE serves this torch with: its stable-ABI one where the line builds that."""
    stable = variant.as_stable().label if variant.served_by_stable else None
    return stable if stable and stable in LINES[line]["labels"] else variant.label


def requirements(line: str, facts: dict, index_url: str | None = None) -> str:
    """The requirements file's text; NoCell where the line has no wheel here."""
    other = {UPSTREAM: f"this repository's line (`mamba-doctor --requirements {CHECKOUT}`: selective_scan_fn and the Mamba block only)",
             CHECKOUT: f"upstream's line (`mamba-doctor --requirements {UPSTREAM}`)"}[line]  # fmt: skip
    plat, py, torch = facts["platform"], facts["python"], facts["torch"]
    version, dist, variant, machine = environment_cell(facts)
    label = cell_label(line, variant)
    axis, detail = no_wheel_axis(line, label, system=plat.get("system"), python_tag=py.get("tag"), machine=machine,
                                 glibc=plat.get("glibc"))  # fmt: skip
    name = "upstream's line" if line == UPSTREAM else "this repository's line"
    if axis != "unknown":
        # the other line only where it has a wheel here: two answers that point at each other serve nobody
        other_line = CHECKOUT if line == UPSTREAM else UPSTREAM
        other_axis, _ = no_wheel_axis(other_line, cell_label(other_line, variant), system=plat.get("system"),
                                      python_tag=py.get("tag"), machine=machine, glibc=plat.get("glibc"))  # fmt: skip
        instead = ""
        if axis == "accelerator":
            instead = f"; or {other}" if other_axis == "unknown" else "; neither line has a wheel for it"
        raise NoCell(f"no wheel of {name} for this environment (torch {version}, {variant.key}; axis: {axis}): "
                     f"{detail}. Your torch is kept: nothing was installed{instead}")  # fmt: skip
    ctx = Context(line=line, variant_key=variant.key, variant_label=label, index_url=checked_index(index_url))
    for gpu in torch.get("gpus") or []:
        fix = _gpu_fix(replace(ctx, gpus=[gpu]))
        if fix.startswith("not supported"):
            raise NoCell(f"GPU {gpu.get('name')}: {fix}")
    page = f"{index_root(ctx)}/{LINES[line]['folder']}{variant.key}/"
    pins = [f"{project}=={release}+{label}" for project, release in LINES[line]["projects"].items()]
    return "".join(
        f"{text}\n"
        for text in (
            f"# mamba-doctor: {name} for torch {version} ({variant.key}), {py.get('tag')}, Linux {machine}",
            f"--extra-index-url {page}",
            f"torch=={dist}  # the torch installed here, as pip sees it{_said(version, dist)}: pip keeps it, or stops",
            *pins,
        )
    )


def environment_cell(facts: dict) -> tuple[str, str, _variant.Variant, str]:
    """(torch.__version__, the version a pin keeps torch at, the variant it needs, the machine) of this
    environment; NoCell on a platform or Python no line builds for, or a torch no pin keeps or no cell names.
    Both --requirements forms start here (this module's LINE form, pins.py's user file)."""
    plat, py, torch = facts["platform"], facts["python"], facts["torch"]
    if plat.get("system") in SYSTEMS:
        raise NoCell(f"not supported: {UNSUPPORTED[SYSTEMS[plat['system']]]}")
    if (py.get("tag") or "").endswith("t"):
        raise NoCell(f"not supported: {UNSUPPORTED[FREE_THREADED]}")
    version, dist = installed_torch(facts)
    try:
        variant = _variant.from_values(
            version, cuda=torch.get("cuda"), hip=torch.get("hip"), cxx11abi=torch.get("cxx11abi")
        )
    except _variant.VariantError as e:
        raise NoCell(f"torch {version} names no cell ({e}); no wheel of either line serves it") from None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get((plat.get("machine") or "").lower(), plat.get("machine"))
    return version, dist, variant, machine


def installed_torch(facts: dict) -> tuple[str, str]:
    """(``torch.__version__``, the distribution version a pin keeps it at), each an ASCII PEP 440 version (each
    becomes a word of a printed file, nothing else); NoCell where there is no torch or no pin keeps it. Every
    requirements file the doctor writes pins torch through this."""
    py, torch = facts["python"], facts["torch"]
    if not torch.get("installed") or not torch.get("version"):
        raise NoCell(f"no torch in this environment ({py.get('executable')}): {TORCH_FIRST}")
    try:
        version = pep440(torch["version"], "torch's version")
        dist = pep440(torch["dist_version"], "torch's distribution version") if torch.get("dist_version") else None
    except Untrusted as e:
        raise NoCell(f"{e}; reinstall torch") from None
    return version, _kept(torch, version, dist)


def _kept(torch: dict, version: str, dist: str | None) -> str:
    """The version the file pins torch at: the distribution's, which is what pip compares a pin with (PyPI's CUDA
    torch is ``2.9.1`` there, ``2.9.1+cu128`` in ``torch.__version__``). Without pip metadata (conda's torch) no
    pin keeps it: pip cannot see it, and any torch requirement installs a second torch over it."""
    where = torch.get("location") or "this environment"
    if torch.get("dist_error"):
        raise NoCell(f"{torch['dist_error']}; reinstall torch")
    if dist is None:
        raise NoCell(no_pip_metadata(version, where))
    if dist.split("+")[0] != version.split("+")[0]:
        raise NoCell(f"pip sees torch {dist} but Python imports torch {version} from {where}: two torches in one "
                     "environment; uninstall one (`pip uninstall torch`, then reinstall the build you want), then run this again")  # fmt: skip
    return dist


def no_pip_metadata(version: str, where: str) -> str:
    """What the doctor says, once, of a torch pip cannot see (the plain report and --requirements alike)."""
    return (f"torch {version} ({where}) has no pip metadata (installed by conda, or its files copied in): pip cannot "
            "see it, so nothing can pin it, and every pip install of either line would install a second torch over it. "
            "No pip command keeps this torch (axis: torch, no pip metadata): install torch with pip in a new "
            "environment (the build you want), then run the doctor again")  # fmt: skip


def _said(version: str, dist: str) -> str:
    return "" if version == dist else f" (torch.__version__ says {version})"


def checked_index(index_url: str | None) -> str | None:
    """--index, else MAMBA_WHEEL_INDEX, as one http(s) URL (guard.index_url), refused naming it: the file carries
    it as the value of one option, never as options of its own. None: neither is set (the project's index)."""
    from .. import prebuilt as _prebuilt

    where, value = ("--index", index_url) if index_url is not None else (_prebuilt.ENV_INDEX, os.environ.get(_prebuilt.ENV_INDEX))
    if value is None:
        return None
    try:
        return index_url_checked(value, where)
    except Untrusted as e:
        raise BadIndex(str(e)) from None


class BadIndex(Exception):
    """--index or MAMBA_WHEEL_INDEX is not one http(s) URL: bad usage, refused before anything is printed."""
