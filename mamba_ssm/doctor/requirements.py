"""``mamba-doctor --requirements LINE``: a pip requirements file for the torch this environment already has.

It pins that torch as installed (so pip keeps it, and stops with a resolver error rather than replace it) and
the line's wheels of its cell, from the cell's page on the site. Where the line has no wheel for this machine
(no torch, a platform, Python, accelerator, glibc or GPU no wheel serves) it prints nothing and says why, and
what to do instead: the front door's command then stops before pip runs.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .. import variant as _variant
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
    if plat.get("system") in SYSTEMS:
        raise NoCell(f"not supported: {UNSUPPORTED[SYSTEMS[plat['system']]]}")
    if (py.get("tag") or "").endswith("t"):
        raise NoCell(f"not supported: {UNSUPPORTED[FREE_THREADED]}")
    if not torch.get("installed") or not torch.get("version"):
        raise NoCell(f"no torch in this environment ({py.get('executable')}): {TORCH_FIRST}")
    if not re.fullmatch(r"[0-9][\w.+!-]{0,63}", torch["version"]):  # it becomes a line of the file: nothing else
        raise NoCell(f"torch's version {torch['version']!r} is not a version; reinstall torch")
    try:
        variant = _variant.from_values(
            torch["version"], cuda=torch.get("cuda"), hip=torch.get("hip"), cxx11abi=torch.get("cxx11abi")
        )
    except _variant.VariantError as e:
        raise NoCell(f"torch {torch['version']} names no cell ({e}); no wheel of either line serves it") from None
    label = cell_label(line, variant)
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get((plat.get("machine") or "").lower(), plat.get("machine"))
    axis, detail = no_wheel_axis(line, label, system=plat.get("system"), python_tag=py.get("tag"), machine=machine,
                                 glibc=plat.get("glibc"))  # fmt: skip
    name = "upstream's line" if line == UPSTREAM else "this repository's line"
    if axis != "unknown":
        instead = f"; or {other}" if axis == "accelerator" else ""
        raise NoCell(f"no wheel of {name} for this environment (torch {torch['version']}, {variant.key}; axis: {axis}): "
                     f"{detail}. Your torch is kept: nothing was installed{instead}")  # fmt: skip
    ctx = Context(line=line, variant_key=variant.key, variant_label=label, index_url=index_url)
    for gpu in torch.get("gpus") or []:
        fix = _gpu_fix(replace(ctx, gpus=[gpu]))
        if fix.startswith("not supported"):
            raise NoCell(f"GPU {gpu.get('name')}: {fix}")
    page = f"{index_root(ctx)}/{LINES[line]['folder']}{variant.key}/"
    pins = [f"{project}=={version}+{label}" for project, version in LINES[line]["projects"].items()]
    return "".join(
        f"{text}\n"
        for text in (
            f"# mamba-doctor: {name} for torch {torch['version']} ({variant.key}), {py.get('tag')}, Linux {machine}",
            f"--extra-index-url {page}",
            f"torch=={torch['version']}  # the torch installed here: pip keeps it, or stops",
            *pins,
        )
    )
