"""Classify an install/import/build error message: what went wrong and the command that fixes it.

One classifier serves both the live checks (the extension's import error) and ``--explain TEXT``
(a message pasted from a machine the doctor cannot run on). ``Context`` carries what is known about
the environment; with none, fixes are phrased for "the machine that printed this".
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace

from .. import _elf
from .._untrusted import paste, paste_env
from .lines import LINES
from .rules import RULES

CHECKOUT, UPSTREAM = "checkout", "upstream"
# What names the package a pasted message is about: the compiled module or the source file that failed,
# most specific first. Upstream's mamba-ssm and this repository's share `mamba_ssm/ops/selective_scan_interface.py`;
# only this one has `mamba_ssm._C`, only upstream's `selective_scan_cuda` and `mamba_ssm/ops/triton`.
LINE_MARKS = (
    (re.compile(r"causal_conv1d_cuda|causal_conv1d[/\\.](?:cpp_functions|causal_conv1d_interface|causal_conv1d_varlen)\b"), UPSTREAM, "causal-conv1d"),
    (re.compile(r"selective_scan_cuda|mamba_ssm[/\\.](?:ops[/\\.]triton|models|modules[/\\.](?:mamba2|block)|distributed|utils[/\\.]generation)\b"), UPSTREAM, "mamba-ssm"),
    (re.compile(r"mamba_ssm[/\\.]_C\b"), CHECKOUT, "mamba-ssm"),
    (re.compile(r"mamba_ssm[/\\.]ops[/\\.]"), UPSTREAM, "mamba-ssm"),
)  # fmt: skip
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
    mamba_version: str | None = None  # public version, "2.3.0"
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
    """(line, project) of the package a message is about, from the module and file names in it: those on its
    last error line first (a traceback passes through other packages), then anywhere; None when it names none."""
    errors = [ln for ln in text.splitlines() if _ERROR_LINE.search(ln)]
    for where in [*errors[-1:], text]:
        for rx, line, project in LINE_MARKS:
            if rx.search(where):
                return line, project
    return None


def newest(ctx: Context) -> str:
    """The version the fix pins: the installed one, else the newest the release builds of that line (lines.py)."""
    return ctx.mamba_version or LINES[ctx.line or CHECKOUT]["projects"][ctx.project]


def line_root(ctx: Context) -> str:
    """The index of the fix's line: the root for this repository's, ``upstream`` under it for upstream's."""
    return f"{index_root(ctx)}/{LINES[ctx.line or CHECKOUT]['folder']}".rstrip("/")


def install_line(ctx: Context) -> str:
    """The exact reinstall line for this environment's variant (or, for --explain, its placeholder form)."""
    from .. import _prebuilt

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
    return paste([ctx.python, "-m", "pip", "install", "--force-reinstall", "--no-deps", spec, "--extra-index-url", f"{base}/{key}/"])


def index_root(ctx: Context) -> str:
    """The wheel index root the fix points at: --index, else MAMBA_WHEEL_INDEX, else the project's own."""
    from .. import _prebuilt

    return _prebuilt.normalize_root(ctx.index_url or os.environ.get(_prebuilt.ENV_INDEX) or _prebuilt.default_index_url()).rstrip("/")


def source_requirement(ctx: Context) -> str:
    """The one requirement a source build names: upstream's pinned sdist, or this line's release tag as a PEP 508
    direct reference (pip clones it; PyPI's `mamba-ssm` is another project's code)."""
    from .. import _prebuilt

    if ctx.source:
        return ctx.source
    if (ctx.line or CHECKOUT) == UPSTREAM:
        return f"{ctx.project}=={newest(ctx)}"
    return f"mamba-ssm @ git+{_prebuilt.SOURCE_REPOSITORY}@v{newest(ctx)}"


def source_build_line(ctx: Context, env: dict | None = None) -> str:
    """The source build, every word quoted (the interpreter's path and ``env``'s values come from outside)."""
    argv = [ctx.python, "-m", "pip", "install", "--no-build-isolation", "--no-cache-dir", "--force-reinstall", "--no-deps", source_requirement(ctx)]
    return paste_env({**(env or {}), FORCE_BUILD.get(ctx.project, "MAMBA_FORCE_BUILD"): "TRUE"}, argv)


def _variant_hint(ctx: Context) -> str:
    """What the placeholders of an --explain fix stand for, and the command that fills them in."""
    if ctx.variant_key:
        return ""
    root = index_root(ctx)
    return (
        "  (<label> and <variant> are the cell of the machine that printed this (its torch, CUDA or ROCm, C++ ABI),"
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
        return f"build against this system's glibc: {source_build_line(ctx)} (or run in a newer distro/container)"
    if kind == "newer-libstdcxx":
        return (
            "put a newer libstdc++ first: in conda `conda install -c conda-forge 'libstdcxx-ng>=12'`; "
            "elsewhere `export LD_LIBRARY_PATH=$(dirname $(g++ -print-file-name=libstdc++.so.6)):$LD_LIBRARY_PATH`; "
            f"or build here: {source_build_line(ctx)}"
            + ("" if ctx.variant_key else f"; or take the farm's wheel, which needs no libstdc++ newer than its manylinux tag allows: {install_line(ctx)}{_variant_hint(ctx)}")
        )
    if kind == "gpu-arch":
        cc = ",".join(sorted({g["capability"] for g in ctx.gpus if g.get("capability")})) or "<major.minor of your GPU>"
        build = f"build for this GPU: {source_build_line(ctx, {'TORCH_CUDA_ARCH_LIST': cc})}"
        if ctx.variant_key:
            return build
        # --explain: the wheel that failed may not be the farm's; the farm's carries its cell's GPU code
        return f"take the farm's wheel for your cell (the GPUs it runs on: the cell's row on {line_root(ctx)}/): {install_line(ctx)}{_variant_hint(ctx)}; or {build}"
    if kind == "no-build-isolation":
        return f"{paste([ctx.python, '-m', 'pip', 'install', '--no-build-isolation', source_requirement(ctx)])}  (with torch already installed)"
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
        return (
            "limit the build to archs this toolkit knows, e.g. "
            f"{source_build_line(ctx, {'TORCH_CUDA_ARCH_LIST': '8.0;9.0'})}; or use a newer CUDA toolkit"
        )
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

    Only ``scan_window(text)`` is searched, so the time is bounded whatever the text's size."""
    ctx = ctx or Context()
    text = scan_window(text)[0]
    if ctx.line is None:
        line, project = attribute(text) or (CHECKOUT, "mamba-ssm")
        if (line, project) != (CHECKOUT, ctx.project):  # what ctx knows of an installed wheel is of another package
            ctx = replace(ctx, mamba_version=None, wheel=None, wheel_available=None, source=None)
        ctx = replace(ctx, line=line, project=project)
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
            found.append(
                Diagnosis(
                    kind=rule["kind"],
                    title=rule["title"].format_map(_Missing(groups)),
                    why=rule["why"].format_map(_Missing(groups)),
                    fix=_fix(rule["fix"], ctx, groups),
                    evidence=" ... ".join(h.group(0)[:300].strip() for h in sorted(hits, key=lambda h: h.start())),
                )
            )
            break
    # "No module named torch" inside a build log is build isolation, not a missing torch.
    kinds = {d.kind for d in found}
    if "torch-not-visible" in kinds:
        found = [d for d in found if d.kind != "torch-missing"]
    return found


class _Missing(dict):
    def __missing__(self, key):
        return f"<{key}>"
