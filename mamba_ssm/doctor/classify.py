"""Classify an install/import/build error message: what went wrong and the command that fixes it.

One classifier serves both the live checks (the extension's import error) and ``--explain TEXT``
(a message pasted from a machine the doctor cannot run on). ``Context`` carries what is known about
the environment; with none, fixes are phrased for "the machine that printed this".
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace

from .. import elf as _elf
from .. import variant as _variant
from ..guard import paste, paste_env
from . import served
from .lines import LINES, UNSUPPORTED
from .rules import RULES

CHECKOUT, UPSTREAM = "checkout", "upstream"
# What names the package a pasted message is about, most specific first: the compiled module or the source file
# that failed, and the names only one line's build has. Upstream's mamba-ssm and this repository's share
# `mamba_ssm/ops/selective_scan_interface.py`; only this one has `mamba_ssm._C` and `mamba_build/`; only upstream's
# has `selective_scan_cuda`, `mamba_ssm/ops/triton`, its setup.py's `bare_metal_version` and the `-std=c++17` it
# hard-codes for every file (this one compiles torch's headers in C++20 for torch >= 2.14), and PyPI's sdist is
# upstream's, so an isolated build of mamba_ssm is too. A mark is one pattern or a pair that must both match; a
# project of None is causal-conv1d where the text names it, else mamba-ssm.
LINE_MARKS = (
    (re.compile(r"causal_conv1d_cuda|causal_conv1d[/\\.](?:cpp_functions|causal_conv1d_interface|causal_conv1d_varlen)\b"), UPSTREAM, "causal-conv1d"),
    (re.compile(r"selective_scan_cuda|mamba_ssm[/\\.](?:ops[/\\.]triton|models|modules[/\\.](?:mamba2|block)|distributed|utils[/\\.]generation)\b"), UPSTREAM, "mamba-ssm"),
    (re.compile(r"mamba_ssm[/\\.]_C\b|mamba_build[/\\.]"), CHECKOUT, "mamba-ssm"),
    (re.compile(r"mamba_ssm[/\\.]ops[/\\.]"), UPSTREAM, "mamba-ssm"),
    (re.compile(r"\bbare_metal_version\b|-std=c\+\+17\b"), UPSTREAM, None),
    ((re.compile(r"(?:Collecting|Building wheel for|Using cached|Downloading) mamba[-_]ssm\b", re.IGNORECASE),
      re.compile(r"Getting requirements to build wheel|pip-build-env|Installing build dependencies|build isolation")), UPSTREAM, "mamba-ssm"),
)  # fmt: skip
_BUILDING = re.compile(r"(?:Building wheel for|Failed to build|Running setup\.py install for) (?P<p>causal[-_]conv1d|mamba[-_]ssm)\b", re.IGNORECASE)
_NAMES = {p: re.compile(p.replace("-", "[-_]"), re.IGNORECASE) for p in ("causal-conv1d", "mamba-ssm")}


def _built_project(text: str) -> str:
    """The upstream project whose build a log shows failing: the one pip says it was building, else the only one
    the text names, else mamba-ssm."""
    m = _BUILDING.search(text)
    if m:
        return m.group("p").lower().replace("_", "-")
    return "causal-conv1d" if _NAMES["causal-conv1d"].search(text) and not _NAMES["mamba-ssm"].search(text) else "mamba-ssm"
# How to tell the lines apart on the machine itself (only this repository's ships mamba_ssm/doctor/).
WHICH_LINE = "`pip show -f mamba-ssm` lists `mamba_ssm/doctor/__init__.py` only for this repository's; `mamba-doctor` there says which"
# What stops working where this repository's mamba-ssm replaces upstream's (it has selective_scan_fn and Mamba only).
REPLACES_UPSTREAM = (
    "do not install this repository's mamba-ssm over upstream's: it replaces it, and `Mamba2`, `mamba_inner_fn`, "
    "`MambaLMHeadModel` and transformers' Mamba models stop working"
)

# What makes each project's setup.py compile rather than download a guessed wheel (recipes/*.toml set the same).
FORCE_BUILD = {"causal-conv1d": "CAUSAL_CONV1D_FORCE_BUILD"}
_ERROR_LINE = re.compile(r"Error\b|undefined symbol|not found|no kernel image|invalid device function", re.IGNORECASE)

# Bounded repeats only (see rules.py): a mangled name is long, but not longer than this.
_UNDEFINED_RE = re.compile(r"undefined symbol:[ \t]{0,16}(?P<symbol>[A-Za-z_][\w.@$]{0,8191})")
_COMPILED = [
    (rule, [tuple(re.compile(p, re.IGNORECASE) for p in (pat if isinstance(pat, tuple) else (pat,))) for pat in rule["patterns"]])
    for rule in RULES
]

# What of a pasted text is searched: its start (the command and the first error) and its end (where pip and
# the loader print the failure). A log of any size costs the same; the report says when text was left out.
SCAN_HEAD, SCAN_TAIL = 64 << 10, 192 << 10


def scan_window(text: str) -> tuple[str, str | None]:
    """The part of ``text`` the classifier searches, and a note saying what was left out (None: nothing)."""
    if len(text) <= SCAN_HEAD + SCAN_TAIL:
        return text, None
    left_out = len(text) - SCAN_HEAD - SCAN_TAIL
    note = (
        f"the text has {len(text)} characters: searched the first {SCAN_HEAD >> 10} KiB and the last "
        f"{SCAN_TAIL >> 10} KiB, not the {left_out} characters between them"
    )
    return text[:SCAN_HEAD] + "\n" + text[-SCAN_TAIL:], note


@dataclass
class Context:
    """What the doctor knows about the environment the message came from (all optional)."""

    torch_version: str | None = None
    torch_cxx11abi: bool | None = None
    variant_key: str | None = None  # what this torch needs: cu12-torch2.6-cxx11abiFALSE
    variant_label: str | None = None
    mamba_version: str | None = None  # public version, "0.3.0"
    index_url: str | None = None
    wheel_available: bool | None = None  # None: not looked up
    wheel: tuple[str, str] | None = None  # (file name, variant key of its page) the index lists, when looked up
    gpus: list[dict] = field(default_factory=list)  # [{"name", "capability": "8.6"}]
    archs: dict | None = None  # _elf.Archs.as_dict() of the installed extension
    python: str = "python"
    # What a source build installs: None is this repository's line (its tagged source); upstream's line sets its
    # pinned PyPI sdist ("mamba-ssm==2.3.2.post1"). Never a bare name: on PyPI that is upstream's newest sdist.
    source: str | None = None
    # The line and project the fix is for (lines.LINES); None: not known yet (--explain reads it from the text).
    line: str | None = None
    project: str = "mamba-ssm"
    # The machine, where known (the live doctor's facts): what a "no matching distribution" is checked against.
    system: str | None = None  # platform.system(): Linux, Windows, Darwin
    python_tag: str | None = None  # cp311, cp314t
    machine: str | None = None  # x86_64, aarch64
    glibc: str | None = None  # "2.31"
    # The installed torch as pip sees it (its distribution's version, the live doctor's facts): an install line pins
    # torch==it, so pip keeps that torch (or stops) and installs what the wheels need beside it. None: not known.
    torch_pin: str | None = None


@dataclass
class Diagnosis:
    kind: str
    title: str
    why: str
    fix: str
    evidence: str

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------ fixes


def attribute(text: str) -> tuple[str, str] | None:
    """(line, project) of the package a message is about, from the module, file and setup.py names in it: those on
    its last error line first (a traceback passes through other packages), then anywhere; None when it names none."""
    errors = [ln for ln in text.splitlines() if _ERROR_LINE.search(ln)]
    for where in [*errors[-1:], text]:
        for mark, line, project in LINE_MARKS:
            if all(rx.search(where) for rx in (mark if isinstance(mark, tuple) else (mark,))):
                return line, project or _built_project(text)
    return None


def newest(ctx: Context) -> str:
    """The version the fix pins: the installed one, else the newest the release builds of that line (lines.py)."""
    return ctx.mamba_version or LINES[ctx.line or CHECKOUT]["projects"][ctx.project]


def line_root(ctx: Context) -> str:
    """The index of the fix's line: the root for this repository's, ``upstream`` under it for upstream's."""
    return f"{index_root(ctx)}/{LINES[ctx.line or CHECKOUT]['folder']}".rstrip("/")


def install_line(ctx: Context) -> str:
    """The exact reinstall line for this environment's variant (or, for --explain, its placeholder form)."""
    from .. import prebuilt as _prebuilt

    base = line_root(ctx)
    listed = _prebuilt.parse_wheel_name(ctx.wheel[0]) if ctx.wheel else None
    if listed and listed.local:
        # What the index serves this variant (for torch >= the stable floor: the stable-ABI wheel), on the page
        # that lists it: the variant's own, or the stable wheel's key when the variant has no page.
        spec, key = f"{ctx.project}=={listed.public}+{listed.local}", ctx.wheel[1]
    elif ctx.variant_key and ctx.variant_label:
        spec, key = f"{ctx.project}=={newest(ctx)}+{ctx.variant_label}", ctx.variant_key
    else:
        # Still the exact pin: without it pip may take another mamba-ssm (upstream's newer sdist) from the
        # other indexes it knows. <label> and <variant> are that machine's cell (_variant_hint says so).
        spec, key = f"{ctx.project}=={newest(ctx)}+<label>", "<variant>"
    if ctx.torch_pin and "<" not in spec:
        return keeping_torch(ctx.python, ctx.torch_pin, [ctx.project], [spec], f"{base}/{key}/")
    if key == "<variant>":  # --explain: that machine's torch, as its pip lists it, is a placeholder too
        return keeping_torch(ctx.python, "<torch>", [ctx.project], [spec], f"{base}/{key}/")
    return paste([ctx.python, "-m", "pip", "install", "--force-reinstall", "--no-deps", spec, "--extra-index-url", f"{base}/{key}/"])


def keeping_torch(python: str, torch_pin: str, projects: list[str], specs: list[str], page: str) -> str:
    """Reinstall SPECS from PAGE beside the installed torch: the projects uninstalled first (so the same version is put
    back too), then installed with torch pinned as pip sees it, so pip keeps that torch or stops, and installs every
    dependency the wheels name (none skipped)."""
    return (paste([python, "-m", "pip", "uninstall", "-y", *projects]) + " && "
            + paste([python, "-m", "pip", "install", f"torch=={torch_pin}", *specs, "--extra-index-url", page]))  # fmt: skip


def index_root(ctx: Context) -> str:
    """The wheel index root the fix points at: --index, else MAMBA_WHEEL_INDEX, else the project's own."""
    from .. import prebuilt as _prebuilt

    return _prebuilt.normalize_root(ctx.index_url or os.environ.get(_prebuilt.ENV_INDEX) or _prebuilt.default_index_url()).rstrip("/")


def source_requirement(ctx: Context) -> str:
    """The one requirement a source build names: upstream's pinned sdist, or this line's release tag as a PEP 508
    direct reference (pip clones it; PyPI's `mamba-ssm` is another project's code)."""
    from .. import prebuilt as _prebuilt

    if ctx.source:
        return ctx.source
    if (ctx.line or CHECKOUT) == UPSTREAM:
        return f"{ctx.project}=={newest(ctx)}"
    return f"mamba-ssm @ git+{_prebuilt.SOURCE_REPOSITORY}@v{newest(ctx)}"


def source_build_line(ctx: Context, env: dict | None = None) -> str:
    """The source build, every word quoted (the interpreter's path and ``env``'s values come from outside)."""
    torch = ctx.torch_version
    if torch is None and ctx.variant_key:
        try:
            torch = _variant.parse_key(ctx.variant_key)["torch"]
        except _variant.VariantError:  # facts from outside: a key that names no cell says no torch
            torch = None
    floor = f"  ({_variant.gcc_floor_text(None if torch == 'stable' else torch)})"
    env = {**(env or {}), FORCE_BUILD.get(ctx.project, "MAMBA_FORCE_BUILD"): "TRUE"}
    # torch pinned as pip sees it: kept (or pip stops), and what the build's package imports installed. Where the
    # doctor does not know that torch (--explain), the pin is that machine's placeholder, `<torch>` (`pip show torch`)
    pin = ctx.torch_pin or "<torch>"
    uninstall = paste([ctx.python, "-m", "pip", "uninstall", "-y", ctx.project])
    argv = [ctx.python, "-m", "pip", "install", "--no-build-isolation", "--no-cache-dir", f"torch=={pin}", source_requirement(ctx)]
    return f"{uninstall} && {paste_env(env, argv)}{floor}"


def _variant_hint(ctx: Context) -> str:
    """What the placeholders of an --explain fix stand for, and the command that fills them in."""
    if ctx.variant_key:
        return ""
    root = index_root(ctx)
    return (
        "  (<torch> is the torch of the machine that printed this as `pip list` shows it (pip keeps it, or stops), "
        "<label> and <variant> its cell (its torch, CUDA or ROCm, C++ ABI),"
        f" which the message does not say: there, `{paste(['pip', 'install', 'mamba-doctor', '--index-url', root + '/doctor/'])}`, then"
        f" `mamba-doctor` prints this line filled in; or find the cell on {line_root(ctx)}/)"
    )


def _fix(kind: str, ctx: Context, groups: dict) -> str:
    reinstall = install_line(ctx) + _variant_hint(ctx)
    if ctx.wheel_available is False:
        reinstall = f"no prebuilt wheel is indexed for {ctx.variant_key}; build one: " + source_build_line(ctx)
    if kind in {"reinstall-variant", "abi", "other-torch"}:
        return reinstall
    if kind == "older-glibc":
        floors = {**served.glibc_floors(ctx.line or CHECKOUT), **served.glibc_floors(ctx.line or CHECKOUT, ctx.machine)}
        fam = served.family(ctx.variant_label or "")
        need = (f"glibc {floors[fam]} or newer (the {fam} wheels' floor)" if fam in floors
                else f"a newer glibc ({_floors_text(floors, ctx.line or CHECKOUT, ctx.machine)})")  # fmt: skip
        return f"run where there is {need}: a newer distribution, or a container of one; or build against this system's glibc: {source_build_line(ctx)}"
    if kind == "newer-libstdcxx":
        return (
            "put a newer libstdc++ first: in conda `conda install -c conda-forge 'libstdcxx-ng>=12'`; "
            "elsewhere `export LD_LIBRARY_PATH=$(dirname $(g++ -print-file-name=libstdc++.so.6)):$LD_LIBRARY_PATH`; "
            f"or build here: {source_build_line(ctx)}"
            + ("" if ctx.variant_key else f"; or take the farm's wheel, which needs no libstdc++ newer than its manylinux tag allows: {install_line(ctx)}{_variant_hint(ctx)}")
        )
    if kind == "off-label":
        from .offlabel import explain_fix

        return explain_fix(groups)
    if kind == "gpu-arch":
        return _gpu_fix(ctx)
    if kind == "no-wheel":
        return _no_wheel_fix(ctx, groups)
    if kind == "conflict":
        return (
            "keep your torch and take a cell whose requirements resolve beside it: the cells and their commands are "
            f"on {line_root(ctx)}/ (a torch the pinned wheel's dependencies accept, or the stable-ABI wheel's); "
            f"do not let pip replace torch to make them fit{groups.get('left_out', '')}"
        )
    if kind == "no-build-isolation":
        return (f"do not compile: the farm's wheel for your torch fits, and the front door pins that torch so pip keeps "
                f"it: {front_door(ctx)}")  # fmt: skip
    if kind == "torch-pin":
        public = groups.get("public") or "<version>"
        return (f"pin torch as pip lists it (`pip show torch`), not as torch.__version__ says: torch=={public}; the "
                f"doctor's requirements file does: {front_door(ctx)}")  # fmt: skip
    if kind == "rocm-arch":
        return _rocm_fix(ctx)
    if kind == "install-torch":
        return f"{paste([ctx.python, '-m', 'pip', 'install', 'torch'])}  (the build you want, e.g. from https://download.pytorch.org/whl/cu126), then mamba-ssm"
    if kind == "matching-nvcc":
        torch_major = (groups.get("torch") or "").split(".")[0] or "<torch's CUDA major>"
        return (
            f"point the build at a CUDA {torch_major}.x toolkit: "
            f"{source_build_line(ctx, {'CUDA_HOME': '/usr/local/cuda-' + (groups.get('torch') or 'X.Y')})}; "
            f"or skip compiling: {install_line(ctx)}{_variant_hint(ctx)}"
        )
    if kind == "install-nvcc":
        return (
            "take the prebuilt wheel instead of compiling: "
            f"{install_line(ctx)}{_variant_hint(ctx)}; or install the CUDA toolkit matching torch.version.cuda "
            "and set CUDA_HOME to it"
        )
    if kind == "arch-list":
        if (ctx.line or CHECKOUT) == UPSTREAM:  # its setup.py picks the -gencode list by nvcc's version alone
            return (f"upstream's setup.py compiles a fixed list for this nvcc, whatever the environment says: take the "
                    f"farm's wheel: {install_line(ctx)}{_variant_hint(ctx)}; or build with the CUDA toolkit of torch's CUDA release")  # fmt: skip
        return (
            "limit the build to archs this toolkit knows, e.g. "
            f"{source_build_line(ctx, {'MAMBA_CUDA_ARCHS': '8.0;9.0'})}; or use a newer CUDA toolkit"
        )
    if kind == "cxx20" and (ctx.line or CHECKOUT) == UPSTREAM:
        return (f"upstream's setup.py hard-codes -std=c++17, which torch >= 2.14 refuses whatever the compiler: take the "
                f"farm's wheel, built with C++20: {install_line(ctx)}{_variant_hint(ctx)}")  # fmt: skip
    if kind == "cxx20":
        return (
            "use GCC >= 10 (or clang >= 10) and a mamba-ssm whose setup.py passes -std=c++20 for torch >= 2.14: "
            f"{source_build_line(ctx, {'CC': 'gcc-12', 'CXX': 'g++-12'})}; or take the prebuilt wheel: {install_line(ctx)}{_variant_hint(ctx)}"
        )
    if kind == "older-gcc":
        mx = groups.get("max") or "N"
        compilers = {"NVCC_CCBIN": f"g++-{mx}", "CC": f"gcc-{mx}", "CXX": f"g++-{mx}"}
        return f"use a host compiler nvcc supports: {source_build_line(ctx, compilers)}"
    return reinstall


def _floors_text(floors: dict[str, str], line: str | None = None, machine: str | None = None) -> str:
    """What each family's wheels need; where the machine is not known, each machine's own floor (x86_64's CUDA
    wheels need less than aarch64's)."""
    if line is None or machine:
        return ", ".join(f"{fam} wheels need glibc >= {floor}" for fam, floor in floors.items())
    parts = []
    for fam, floor in floors.items():
        each = {m: served.glibc_floors(line, m).get(fam) for m in served.machines(line)}
        each = {m: f for m, f in each.items() if f}
        if len(set(each.values())) <= 1:
            parts.append(f"{fam} wheels need glibc >= {floor}")
        else:
            parts.append(f"{fam} wheels need glibc >= " + ", ".join(f"{f} on {m}" for m, f in sorted(each.items())))
    return ", ".join(parts)


def front_door(ctx: Context) -> str:
    """The README's first block for the fix's line, run on the machine: it reads that torch and pins it as pip sees
    it, with its cell's wheels (and their dependencies); where the line has no wheel there, it says why."""
    line = ctx.line or CHECKOUT
    doctor = paste(["pip", "install", "mamba-doctor", "--index-url", f"{index_root(ctx)}/doctor/"])
    return f"`{doctor}`, then `mamba-doctor --requirements {line} > mamba.txt && pip install -r mamba.txt`"


def _rocm_fix(ctx: Context) -> str:
    """No code for an AMD GPU: the gfx targets the line's ROCm wheels carry, and the front door for the cell."""
    line = ctx.line or CHECKOUT
    gfx = served.rocm_archs(line)
    return (f"the ROCm wheels of {_line_name(line)} carry code for {', '.join(gfx)} ({served.gpu_names(gfx)}): on one "
            f"of these, take your cell's wheel: {front_door(ctx)}; another gfx target is not served by {_line_name(line)}")  # fmt: skip


def _gpu_fix(ctx: Context) -> str:
    """No kernel image for the GPU: the farm's wheel of the cell where one carries its code; where none of the
    line's wheels does, say so and what serves it instead. A source build is offered only where the line's
    setup.py takes an architecture list (upstream's compiles a fixed one and clears TORCH_CUDA_ARCH_LIST)."""
    line = ctx.line or CHECKOUT
    caps = sorted({g["capability"] for g in ctx.gpus if g.get("capability")})
    unserved = [c for c in caps if served.is_capability(c) and not served.gpu_accelerators(line, c)]
    oldest = served.oldest_sm(line)
    if unserved:
        sms = ", ".join(served.sm_of(c) for c in unserved)
        why = f"not supported: no wheel of {_line_name(line)} carries code for {sms} (its CUDA wheels start at {oldest})"
        if line == UPSTREAM:
            return (f"{why}, and upstream's setup.py compiles a fixed list from {oldest} whatever the environment says; "
                    f"use a GPU of {oldest} or newer, or this repository's mamba-ssm (selective_scan_fn and Mamba only; "
                    f"not Mamba2 or transformers' models) built for it: "
                    f"{source_build_line(replace(ctx, line=CHECKOUT, project='mamba-ssm', source=None, mamba_version=None), {'MAMBA_CUDA_ARCHS': ';'.join(unserved)})}")  # fmt: skip
        return f"{why}; build for this GPU with a CUDA 12 or older toolkit: {source_build_line(ctx, {'MAMBA_CUDA_ARCHS': ';'.join(unserved)})}"
    if ctx.variant_key:
        if line == UPSTREAM:  # its setup.py ignores any arch list: the farm's wheel is the fix
            return install_line(ctx)
        return f"build for this GPU: {source_build_line(ctx, {'MAMBA_CUDA_ARCHS': ';'.join(caps) or '<major.minor of your GPU>'})}"
    return (f"take the farm's wheel for your cell: {install_line(ctx)}{_variant_hint(ctx)}. {served_gpus_text(line)}; "
            f"a GPU older than {oldest} is not served by {_line_name(line)}")  # fmt: skip


def served_gpus_text(line: str) -> str:
    """The GPUs a line's CUDA wheels run on, named (sm_86: RTX 30 runs sm_80's code)."""
    names = [f"{names} ({sm}{'' if via == sm else ', through ' + via + ' code'})" for sm, names, via in served.gpus_served(line)]
    return "Its CUDA wheels run on " + "; ".join(names)


def _line_name(line: str) -> str:
    return "upstream's line" if line == UPSTREAM else "this repository's line"


def _no_wheel_fix(ctx: Context, groups: dict) -> str:
    axis, label = groups.get("axis"), groups.get("label")
    if axis == "platform" and ctx.system in served.SYSTEMS:
        return f"not supported: {UNSUPPORTED[served.SYSTEMS[ctx.system]]}"
    if axis == "platform":
        return f"not supported: {UNSUPPORTED[next(k for k in UNSUPPORTED if k.startswith('other Linux'))]}"
    if axis == "Python" and (ctx.python_tag or "").endswith("t"):
        return f"not supported: {UNSUPPORTED[served.FREE_THREADED]}"
    cell = LINES[ctx.line or CHECKOUT]["labels"].get(label or "")
    if axis == "Python" and cell:
        return (f"make a virtual environment with a Python its wheels are for ({', '.join(cell['pythons'])}), install "
                "the same torch there, then run the same command in it")  # fmt: skip
    if axis == "glibc" and cell:
        return (f"not supported: the wheels need glibc >= {max(cell['glibc'], key=served.vtuple)} (their manylinux "
                "tag); run in a newer distribution, or a container of one")  # fmt: skip
    if axis == "torch" and groups.get("stable"):
        return install_line(replace(ctx, variant_label=groups["stable"], variant_key=groups["key"], wheel=None))
    if axis in {"torch", "accelerator"}:
        return (f"take the cell your torch has: the cells and their commands are on {line_root(ctx)}/; "
                f"`mamba-doctor` on the machine prints the one for its torch. Where none is built for it, keep your "
                f"torch and build: {source_build_line(ctx)}")  # fmt: skip
    return (f"`mamba-doctor` on the machine itself names the axis and the command; or compare the machine with what "
            f"the cells on {line_root(ctx)}/ need")


def _details(kind: str, groups: dict, text: str, ctx: Context) -> tuple[dict, Context]:
    """What a rule's title, why and fix need beyond its pattern's groups: the axis of a pinned install that found
    no wheel (and the line its pin names), the dependencies in conflict, the glibc floors."""
    if kind == "no-matching-distribution":
        req = groups.get("req", "")
        m = re.match(r"(?P<name>[A-Za-z0-9][\w.-]*)(?:={2,3}(?P<version>[^+\s]+)(?:\+(?P<label>\S+))?)?", req)
        name = m.group("name").lower().replace("_", "-") if m else req
        line = served.line_of(name, m.group("version") if m else None)
        if line is None:
            return {**groups, "axis": "dependency", "axis_detail": f"{req} is not a wheel the farm builds: a requirement "
                    "of what was installed has no wheel for this machine (its Python, platform or glibc)"}, ctx  # fmt: skip
        ctx = replace(ctx, line=line, project=name, source=None, wheel=None, wheel_available=None,
                      mamba_version=(m.group("version") if m else None) or ctx.mamba_version)  # fmt: skip
        label = m.group("label") if m else None
        if label:
            label = re.sub(r"cxx11abi(true|false)$", lambda x: "cxx11abi" + x.group(1).upper(), label, flags=re.IGNORECASE)
        axis, detail = served.no_wheel_axis(line, label, system=ctx.system, python_tag=ctx.python_tag,
                                            machine=ctx.machine, glibc=ctx.glibc, text=text)  # fmt: skip
        out = {**groups, "axis": axis, "axis_detail": detail, "label": label or ""}
        if axis == "torch" and "stable-ABI" in detail and label:
            parts = _variant.parse_label(label)
            out["stable"] = f"{parts['accelerator']}torchstable"
            out["key"] = f"{parts['accelerator']}-torch{parts['torch']}-cxx11abi{'TRUE' if parts['cxx11abi'] else 'FALSE'}"
        return out, ctx
    if kind == "resolution-conflict":
        pairs = [f"{a} depends on {b}" for a, b in _DEPENDS.findall(text)[:4]]
        asked = _REQUESTED.findall(text)[:2]
        said = "; ".join([*(f"the user requested {r}" for r in asked), *pairs])
        known = ""
        for project, version, label in _PINNED.findall(text)[:4]:  # what the farm's own resolution said of the cell
            rows = [r for r in served.left_out(ctx.line or "upstream", label, ctx.python_tag, ctx.machine)
                    or served.left_out_any(project, version, label) if r["project"] == project]  # fmt: skip
            if rows:
                known = f"; the farm resolved it before building: {served.left_out_says(rows[0])}"
                break
        return {**groups, "conflict": f" ({said})" if said else "", "left_out": known}, ctx
    if kind == "glibc-too-old":
        if ctx.machine is None:  # the loader's paths name it (/lib/x86_64-linux-gnu/libc.so.6, *-aarch64-linux-gnu.so)
            m = re.search(r"\b(x86_64|aarch64)\b|(?:lib|-)(x86_64|aarch64)-linux-gnu", text)
            ctx = replace(ctx, machine=(m.group(1) or m.group(2)) if m else None)
        floors = {**served.glibc_floors(ctx.line or CHECKOUT), **served.glibc_floors(ctx.line or CHECKOUT, ctx.machine)}
        return {**groups, "floors": "the farm's " + _floors_text(floors, ctx.line or CHECKOUT, ctx.machine)}, ctx
    return groups, ctx


_DEPENDS = re.compile(r"([A-Za-z0-9][\w.-]{0,64} [\w.+!-]{1,64}) depends on ([A-Za-z0-9][\w.-]{0,64}[=<>!~]{1,3}[\w.*+!-]{1,64})")
_PINNED = re.compile(r"\b(mamba-ssm|causal-conv1d)[ =]=?=?([0-9][\w.]{0,31})\+([a-z0-9.]{3,40}(?:TRUE|FALSE|true|false|stable))")
_REQUESTED = re.compile(r"The user requested ([A-Za-z0-9][\w.-]{0,64}(?:[=<>!~]{1,3}[\w.*+!-]{1,64})?)")


# ------------------------------------------------------------------ undefined symbols


def _undefined_symbol(symbol: str, ctx: Context) -> Diagnosis:
    abi = _elf.string_abi(symbol)
    if _elf.is_torch_symbol(symbol) and abi:
        # The extension wants torch's std::string in one ABI; torch exports the other one.
        ext_abi, torch_abi = ("CXX11", "pre-CXX11") if abi == "cxx11" else ("pre-CXX11", "CXX11")
        contradicts = ctx.torch_cxx11abi is not None and ctx.torch_cxx11abi == (abi == "cxx11")
        if not contradicts:
            return Diagnosis(
                kind="cxx11-abi-mismatch",
                title=f"C++ ABI mismatch: the extension was built with the {ext_abi} ABI, torch uses the {torch_abi} ABI",
                why=f"the missing symbol passes a {'std::__cxx11::string' if abi == 'cxx11' else 'pre-CXX11 std::string (Ss)'}; "
                f"torch's libraries export it only with the other string type, so the wheel's cxx11abi label is wrong "
                f"for this torch (it needs cxx11abi{'FALSE' if abi == 'cxx11' else 'TRUE'})",
                fix=_fix("abi", ctx, {}),
                evidence=symbol,
            )
    if _elf.is_torch_symbol(symbol):
        return Diagnosis(
            kind="built-for-other-torch",
            title="the extension was built against a different torch version",
            why="it needs a torch (c10/at) function that this torch does not export: torch's C++ API changes "
            "between minor releases, so a wheel only works with the torch major.minor it was built for",
            fix=_fix("other-torch", ctx, {}),
            evidence=symbol,
        )
    if symbol.startswith(("_ZNSt", "_ZSt", "_ZNKSt", "_ZTVSt", "_ZTISt")) or "cxxabi" in symbol.lower():
        return Diagnosis(
            kind="libstdcxx-too-old",
            title="the libstdc++ loaded here lacks a C++ standard-library symbol the extension needs",
            why="the extension was compiled with a newer GCC than the libstdc++.so.6 that this process loaded",
            fix=_fix("newer-libstdcxx", ctx, {}),
            evidence=symbol,
        )
    return Diagnosis(
        kind="undefined-symbol",
        title="the extension needs a symbol no loaded library provides",
        why="it was linked against a different version of one of its dependencies",
        fix=_fix("reinstall-variant", ctx, {}),
        evidence=symbol,
    )


# ------------------------------------------------------------------ entry point


def classify(text: str, ctx: Context | None = None) -> list[Diagnosis]:
    """Every known problem found in ``text``, most specific first (empty: nothing recognised).

    The line (upstream's or this repository's) is read from the text; where it names neither, each diagnosis
    carries both lines' fixes, upstream's first (PyPI's mamba-ssm is upstream's), and how to tell them apart.
    Only ``scan_window(text)`` is searched, so the time is bounded whatever the text's size."""
    ctx = ctx or Context()
    text = scan_window(text)[0]
    if ctx.line is not None:
        return _classify(text, ctx)
    found = attribute(text)
    if found is None and ctx.mamba_version:  # what is installed says the line: its version is one line's
        known = served.line_of(ctx.project, ctx.mamba_version)
        found = (known, ctx.project) if known else None
    if found is None:
        return _both_lines(text, ctx)
    line, project = found
    if (line, project) != (CHECKOUT, ctx.project):  # what ctx knows of an installed wheel is of another package
        ctx = replace(ctx, mamba_version=None, wheel=None, wheel_available=None, source=None)
    return _classify(text, replace(ctx, line=line, project=project))


def _both_lines(text: str, ctx: Context) -> list[Diagnosis]:
    fresh = {"mamba_version": None, "wheel": None, "wheel_available": None, "source": None, "project": "mamba-ssm"}
    up = _classify(text, replace(ctx, line=UPSTREAM, **fresh))
    own = _classify(text, replace(ctx, line=CHECKOUT, **fresh))
    out = []
    for u, o in zip(up, own):
        if u.fix == o.fix or u.kind in _ONE_ANSWER:
            out.append(u)
            continue
        fix = (f"the message does not say which mamba-ssm this is ({WHICH_LINE}). Upstream's (PyPI's mamba-ssm): "
               f"{u.fix}; this repository's: {o.fix}; {REPLACES_UPSTREAM}")  # fmt: skip
        out.append(replace(u, fix=fix))
    return out


# Kinds whose answer does not depend on the line (the platform or Python has no wheel of either).
_ONE_ANSWER = {"resolution-conflict", "torch-local-pin"}


def _classify(text: str, ctx: Context) -> list[Diagnosis]:
    found: list[Diagnosis] = []
    m = _UNDEFINED_RE.search(text)
    if m:
        found.append(_undefined_symbol(m.group("symbol"), ctx))
    for rule, patterns in _COMPILED:
        for group in patterns:
            hits = [rx.search(text) for rx in group]
            if not all(hits):
                continue
            groups = {k: v for h in hits for k, v in h.groupdict().items() if v is not None}
            groups, rctx = _details(rule["kind"], groups, text, ctx)
            found.append(
                Diagnosis(
                    kind=rule["kind"],
                    title=rule["title"].format_map(_Missing(groups)),
                    why=rule["why"].format_map(_Missing(groups)),
                    fix=_fix(rule["fix"], rctx, groups),
                    evidence=" ... ".join(h.group(0)[:300].strip() for h in sorted(hits, key=lambda h: h.start())),
                )
            )
            break
    # "No module named torch" inside a build log is build isolation, not a missing torch.
    kinds = {d.kind for d in found}
    if "torch-not-visible" in kinds:
        found = [d for d in found if d.kind != "torch-missing"]
    if "torch-local-pin" in kinds:  # the pin is the cause, not a wheel missing for the machine
        found = [d for d in found if d.kind != "no-matching-distribution"]
    return found


class _Missing(dict):
    def __missing__(self, key):
        return f"<{key}>"
