"""From facts to findings: each check gives a verdict and, for a problem, the exact fix."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .. import elf as _elf
from .. import prebuilt as _prebuilt
from .. import variant as _variant
from ..guard import paste
from . import served
from .classify import (
    CHECKOUT,
    Context,
    _gpu_fix,
    _variant_hint,
    classify,
    install_line,
    keeping_torch,
    served_gpus_text,
    source_build_line,
    source_requirement,
)
from .lines import LINES, UNSUPPORTED

OK, INFO, WARN, PROBLEM = "ok", "info", "warn", "problem"
# Upstream's line as the release builds it (lines.py, from recipes/*.toml): what a fix pins when nothing says otherwise.
UPSTREAM = LINES["upstream"]["projects"]
LOOKUP_TIMEOUT_S = 5.0  # the doctor asks the index whether a wheel exists; it must not hang on a dead network


@dataclass
class Finding:
    check: str
    verdict: str  # ok | info | warn | problem
    title: str
    detail: str = ""
    fix: str = ""
    kind: str = ""  # classifier kind, for problems found in an error message

    def as_dict(self) -> dict:
        return asdict(self)


def _major(version: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", version or "")
    return int(m.group(1)) if m else None


def context_for(facts: dict, index_url: str | None, wheel_available: bool | None, wheel: tuple[str, str] | None = None) -> Context:
    torch, mm = facts["torch"], facts["mamba_ssm"]
    variant = torch.get("variant") or {}
    exts = mm.get("extensions") or []
    key, label = variant.get("key"), variant.get("label")
    if wheel is None and wheel_available is None and variant.get("served_by_stable") and not is_upstream(facts):
        # Not looked up (offline, the index unreachable): name what the default release builds for this torch,
        # the stable-ABI wheel (a classic label of this torch is built by no default release).
        key, label = variant.get("stable_key"), variant.get("stable_label")
    return Context(
        torch_version=torch.get("version"),
        torch_cxx11abi=torch.get("cxx11abi"),
        variant_key=key,
        variant_label=label,
        mamba_version=mm.get("public_version"),
        index_url=index_url,
        wheel_available=wheel_available,
        wheel=wheel,
        gpus=torch.get("gpus") or [],
        archs=exts[0].get("archs") if exts else None,
        python=sys.executable,
        source=f"mamba-ssm=={mm.get('public_version') or UPSTREAM['mamba-ssm']}" if is_upstream(facts) else _built_commit(mm),
        line="upstream" if is_upstream(facts) else CHECKOUT,
        system=(facts.get("platform") or {}).get("system"),
        python_tag=(facts.get("python") or {}).get("tag"),
        machine=_machine((facts.get("platform") or {}).get("machine")),
        glibc=(facts.get("platform") or {}).get("glibc"),
        torch_pin=torch.get("dist_version"),
    )


def _built_commit(mm: dict) -> str | None:
    """This line's source at the commit the installed wheel was built from (its provenance record), a ref the
    repository has; None: not known (the fix then names the release's tag)."""
    src = (mm.get("provenance") or {}).get("source") if isinstance(mm.get("provenance"), dict) else None
    commit = src.get("commit") if isinstance(src, dict) and src.get("kind") == "checkout" else None
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit):
        return f"mamba-ssm @ git+{_prebuilt.SOURCE_REPOSITORY}@{commit}"
    return None


def _machine(machine: str | None) -> str | None:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get((machine or "").lower(), (machine or "").lower()) or None


def no_cell_fix(facts: dict, ctx: Context) -> str | None:
    """The fix where this environment has no cell to pin a wheel of (no torch, or a torch no wheel is built
    for); None where it has one. The live doctor never prints the --explain placeholders."""
    torch = facts["torch"]
    if (torch.get("variant") or {}).get("key"):
        return None
    if not torch.get("installed") or not torch.get("version"):
        return (f"install torch first ({paste([ctx.python, '-m', 'pip', 'install', 'torch'])}, the build you want), "
                "then run the doctor again: it prints the exact wheel for that torch")  # fmt: skip
    why = torch.get("variant_error") or f"torch {torch['version']} names no variant"
    return f"no wheel is built for this torch ({why}); build one: {source_build_line(ctx)}"


def is_upstream(facts: dict) -> bool:
    """Whether the install is upstream's line: its mamba-ssm, or its causal-conv1d without any mamba-ssm."""
    mm, cc = facts["mamba_ssm"], facts.get("causal_conv1d") or {}
    return mm.get("line") == "upstream" or (not mm.get("installed_version") and bool(cc.get("installed_version")))


def pip_install_line(python: str, requirements: list[str], page: str | None = None, *options: str) -> str:
    """A printed pip command: every word shell-quoted and shown safely (the layer's paste)."""
    more = ["--extra-index-url", page] if page else []
    return paste([python, "-m", "pip", "install", *options, *requirements, *more])


def _index_root(index_url: str | None) -> str:
    return _prebuilt.normalize_root(index_url or os.environ.get(_prebuilt.ENV_INDEX) or _prebuilt.default_index_url()).rstrip("/")


def upstream_pins(facts: dict, ctx: Context, listed: tuple[str, str] | None) -> list[str]:
    """project==version+label for each of upstream's projects installed (both when neither is): the version the
    index lists, else the installed one; the label this torch needs (upstream builds no stable-ABI wheel)."""
    have = {name: (facts["mamba_ssm"] if name == "mamba-ssm" else facts.get("causal_conv1d") or {}) for name in UPSTREAM}
    names = [n for n in UPSTREAM if have[n].get("installed_version")] or list(UPSTREAM)
    label = facts["torch"]["variant"]["label"]  # only asked where the torch has a cell (no_cell_fix)
    listed_mamba = _prebuilt.parse_wheel_name(listed[0]) if listed else None
    pins = []
    for name in names:
        version = listed_mamba.public if listed_mamba and name == "mamba-ssm" else have[name].get("public_version") or UPSTREAM[name]
        pins.append(f"{name}=={version}+{label}")
    return pins


def upstream_fix(facts: dict, ctx: Context, listed: tuple[str, str] | None, available: bool | None) -> str:
    key = facts["torch"]["variant"]["key"]
    pins = upstream_pins(facts, ctx, listed)
    root = f"{_index_root(ctx.index_url)}/upstream"
    if available is False:
        plain = [p.split("+", 1)[0] for p in pins]
        return (f"no prebuilt wheel of upstream's line is indexed for {key} (every cell: {root}/); its sdist compiles "
                f"(15 to 35 minutes): {pip_install_line(ctx.python, plain, None, '--no-build-isolation')}")  # fmt: skip
    if ctx.torch_pin:
        return keeping_torch(ctx.python, ctx.torch_pin, [p.split("==")[0] for p in pins], pins, f"{root}/{key}/")
    return pip_install_line(ctx.python, pins, f"{root}/{key}/", "--force-reinstall", "--no-deps")


def wheel_lookup(facts: dict, index_url: str | None, offline: bool) -> tuple[bool | None, str]:
    """Is a wheel indexed for this environment's variant? (None when not looked up / unreachable)."""
    available, note, _ = _lookup(facts, index_url, offline)
    return available, note


def _lookup(facts: dict, index_url: str | None, offline: bool) -> tuple[bool | None, str, tuple[str, str] | None]:
    """wheel_lookup, plus (the listed wheel's file name, the variant key of the page listing it) when found."""
    torch, mm = facts["torch"], facts["mamba_ssm"]
    if offline or not torch.get("version"):
        return None, "not looked up", None
    line = "upstream" if is_upstream(facts) else CHECKOUT
    # not installed: the newest the release builds (lines.py), the version the fix pins
    version = mm.get("public_version") or LINES[line]["projects"]["mamba-ssm"]
    if line == "upstream":  # upstream's line has an index of its own
        index_url = f"{_index_root(index_url)}/{LINES[line]['folder'].rstrip('/')}"
    try:
        variant = _variant.from_values(
            torch["version"], cuda=torch.get("cuda"), hip=torch.get("hip"), cxx11abi=torch.get("cxx11abi")
        )
    except _variant.VariantError as e:
        return None, str(e), None
    outcome = _prebuilt.lookup(variant, version, index_url=index_url, timeout=LOOKUP_TIMEOUT_S)
    if outcome.status == "listed":
        page_key = outcome.tried[-1].rstrip("/").split("/")[-2]  # <root>/<key>/index.html: where it was found
        return True, outcome.link.filename, (outcome.link.filename, page_key)
    note = outcome.line.removesuffix("; building from source")
    if outcome.status == "no-match":
        return False, note, None
    return None, note, None


def _gpu_runs(cap: str, archs: dict) -> bool:
    """SASS runs on the same major with minor >= its own; PTX JITs forward to any newer GPU."""
    major, minor = (int(x) for x in cap.split("."))
    for a in archs.get("sass", []):
        m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", a)
        if m and int(m.group(1)) == major and int(m.group(2)) <= minor and (not m.group(3) or int(m.group(2)) == minor):
            return True
    for a in archs.get("ptx", []):
        m = re.fullmatch(r"compute_(\d+?)(\d)([af]?)", a)
        if m and not m.group(3) and (int(m.group(1)), int(m.group(2))) <= (major, minor):
            return True
    return False


def run_checks(facts: dict, *, index_url: str | None = None, offline: bool = False) -> tuple[list[Finding], dict]:
    torch, mm = facts["torch"], facts["mamba_ssm"]
    available, lookup_note, listed = _lookup(facts, index_url, offline)
    # The fix pins the wheel the index lists (for torch >= the stable floor that is the stable-ABI wheel).
    ctx = context_for(facts, index_url, available, listed)
    extra = {"wheel_available": available, "wheel_lookup": lookup_note, "line": "upstream" if is_upstream(facts) else "checkout"}
    reinstall = _reinstall_fix(facts, ctx, listed, available)
    findings = _torch_findings(torch) + _free_threaded_findings(facts)
    # an OS or machine no line builds for (builder/data/support.toml's [[unsupported]]), a glibc under the floor,
    # an accelerator the installed line builds nothing for (upstream's kernels are CUDA and ROCm only)
    findings += _platform_findings(facts)
    findings += _floor_findings(facts, ctx)
    findings += _gpu_served_findings(facts, ctx)
    findings += _label_findings(facts, reinstall)
    # the machine the installed files are built for
    findings += _machine_findings(mm, facts.get("platform", {}).get("machine"), reinstall)
    findings += _miscompile_findings(facts, lambda: upstream_fix(facts, ctx, listed, available))
    findings += _left_out_findings(facts)
    findings += _cell_findings(facts, findings)
    findings = _unpinnable_torch(facts, findings)
    findings += _extension_findings(facts, ctx, reinstall)
    findings += _source_build_findings(facts, ctx, findings, available)
    findings = _off_label(findings, facts, index_url)
    return _one_answer(findings), extra


def _off_label(findings: list[Finding], facts: dict, index_url: str | None) -> list[Finding]:
    """A wheel installed by URL for another cell (offlabel.py): said once, its fix the same release's farm wheel,
    in place of the label check's reinstall of the newest."""
    from . import offlabel

    found = offlabel.findings(facts, index_url)
    named = {f.title.split(" ", 1)[0] for f in found}
    keep = [f for f in findings if not (f.kind == "variant-mismatch" and f.title.split(" ")[1] in named)]
    return keep + found


def _reinstall_fix(facts: dict, ctx: Context, listed, available) -> str:
    """The command that puts the right wheel of the installed line in place (both lines' when neither is)."""
    mm = facts["mamba_ssm"]
    if no_cell_fix(facts, ctx):
        reinstall = no_cell_fix(facts, ctx)
    elif is_upstream(facts):
        reinstall = upstream_fix(facts, ctx, listed, available)
    else:
        reinstall = _reinstall_or_build(ctx, available)
        if not mm.get("installed_version") and not mm.get("location"):  # neither line installed: both, upstream's first
            reinstall = (f"nothing of either line is installed. Upstream's Mamba (`Mamba2`, transformers' Mamba models, "
                         f"causal-conv1d): {upstream_fix(facts, ctx, None, None)}; or this repository's "
                         f"(selective_scan_fn and the Mamba block only): {reinstall}")  # fmt: skip
    return reinstall


def _torch_findings(torch: dict) -> list[Finding]:
    findings: list[Finding] = []
    if not torch.get("installed"):
        findings.append(
            Finding("torch", PROBLEM, "torch is not installed in this interpreter",
                    "mamba-ssm is built for, and runs on top of, the torch you install first",
                    f"{paste([sys.executable, '-m', 'pip', 'install', 'torch'])}  (then reinstall mamba-ssm)", "torch-missing")
        )
    elif torch.get("import_error"):
        again = paste([sys.executable, "-m", "pip", "install", "--force-reinstall", f"torch=={torch['version']}"]) if torch.get("version") else "reinstall it"
        findings.append(Finding("torch", PROBLEM, "torch is installed but does not import", torch["import_error"],
                                f"repair torch first ({again}, from the index it came from); then rerun the doctor",
                                "torch-broken"))
    else:
        findings.append(Finding("torch", OK, f"torch {torch['version']} imports ({torch.get('variant', {}).get('key', '?')})"))

    return findings


def _free_threaded_findings(facts: dict) -> list[Finding]:
    """A free-threaded interpreter: no line builds for it (builder/data/support.toml's [[unsupported]])."""
    findings: list[Finding] = []
    tag = (facts.get("python") or {}).get("tag") or ""
    if tag.endswith("t"):
        version = (facts.get("python") or {}).get("version") or tag
        default = f"python{tag[2]}.{tag[3:-1]}"
        findings.append(Finding(
            "python", PROBLEM, f"this is a free-threaded CPython ({tag}): no wheel of either line is built for it",
            f"Python {version} without the GIL has an ABI of its own: torch ships {tag} wheels, but mamba-ssm and "
            f"causal-conv1d wheels are built for the default CPython only ({tag[:-1]}), and a stable-ABI (abi3) wheel "
            "does not load in a free-threaded interpreter",
            f"not supported: make a virtual environment with the default build of the same Python ({default} -m venv ENV; tag "
            f"{tag[:-1]}), install torch there, then run the doctor in it: it prints the wheel for that cell",
            "free-threaded"))  # fmt: skip

    return findings


def _gpu_served_findings(facts: dict, ctx: Context) -> list[Finding]:
    """Each GPU against the GPU code of the line's wheels, whatever is installed (V100: none carries sm_70)."""
    torch, findings = facts["torch"], []
    if torch.get("cuda"):
        line = "upstream" if is_upstream(facts) else CHECKOUT
        for gpu in torch.get("gpus") or []:
            if served.is_capability(gpu.get("capability")) and not served.gpu_accelerators(line, gpu["capability"]):
                findings.append(Finding(
                    "gpu", PROBLEM, f"GPU {gpu['index']} ({gpu['name']}, {served.sm_of(gpu['capability'])}) is not served by any wheel of the {line} line",
                    f"{served_gpus_text(line)}", _gpu_fix(replace(ctx, gpus=[gpu])), "gpu-not-served"))  # fmt: skip

    return findings


def _label_findings(facts: dict, reinstall: str) -> list[Finding]:
    """The installed wheels' labels against what this torch needs."""
    torch, mm, findings = facts["torch"], facts["mamba_ssm"], []
    want = (torch.get("variant") or {})
    label = mm.get("label")
    if label and want.get("label"):
        if label in (want["label"], want.get("stable_label")):
            findings.append(Finding("label", OK, f"installed wheel's variant {label} matches this torch"))
        else:
            findings.append(Finding(
                "label", PROBLEM, f"installed mamba-ssm is for {label}, this torch needs {want['label']}",
                "the wheel was built for a different torch / CUDA major / C++ ABI than the one installed",
                reinstall, "variant-mismatch"))
    elif not label and mm.get("installed_version"):
        findings.append(Finding("label", INFO, f"installed mamba-ssm {mm['installed_version']} carries no variant label",
                                "a source build (or an upstream wheel); its extension is checked below"))
    cc_label = (facts.get("causal_conv1d") or {}).get("label")
    if cc_label and want.get("label") and cc_label != want["label"]:
        findings.append(Finding(
            "label", PROBLEM, f"installed causal-conv1d is for {cc_label}, this torch needs {want['label']}",
            "the wheel was built for a different torch / CUDA major / C++ ABI than the one installed",
            reinstall, "variant-mismatch"))  # fmt: skip

    return findings


def _extension_findings(facts: dict, ctx: Context, reinstall: str) -> list[Finding]:
    """Whether the extension is there and imports (its error classified, the fix retargeted to what was found),
    and whether it carries code for each GPU."""
    mm = facts["mamba_ssm"]
    own = install_line(ctx)

    # classify's fixes name one wheel of one line (--explain's placeholders where no cell is known): the live
    # doctor puts in what it found
    def retarget(fix: str) -> str:
        return fix.replace(own + _variant_hint(ctx), reinstall).replace(own, reinstall) if fix and reinstall != own else fix

    findings: list[Finding] = []
    exts = mm.get("extensions") or []
    findings += _extension_builds(mm, reinstall)
    if not exts and not mm.get("location"):
        findings.append(Finding("extension", PROBLEM, "mamba-ssm is not installed in this interpreter",
                                f"no mamba_ssm package on {sys.executable}'s path", reinstall, "mamba-missing"))
    elif not exts:
        findings.append(Finding("extension", PROBLEM, "no compiled mamba-ssm extension is installed",
                                f"looked under {mm['location']}; the CPU/GPU kernels are missing", reinstall, "extension-missing"))
    for ext in exts:
        imp = ext.get("import", {})
        if imp.get("ok"):
            findings.append(Finding("extension", OK, f"{ext['module']} imports"))
        else:
            diags = classify(imp.get("traceback") or imp.get("error") or "", ctx)
            if diags:
                d = diags[0]
                findings.append(Finding("extension", PROBLEM, f"{ext['module']} does not import: {d.title}",
                                        f"{d.why}. Error: {imp.get('error')}", retarget(d.fix), d.kind))
            else:
                findings.append(Finding("extension", PROBLEM, f"{ext['module']} does not import",
                                        imp.get("error") or "", retarget(install_line(ctx)), "import-error"))
        findings += _arch_findings(facts, ctx, ext, reinstall)
    return findings


def _arch_findings(facts: dict, ctx: Context, ext: dict, reinstall: str) -> list[Finding]:
    """One extension's GPU code against each GPU: HIP targets, or SASS and PTX."""
    torch, findings = facts["torch"], []
    archs = ext.get("archs") or {}
    for gpu in torch.get("gpus") or []:
        if torch.get("hip"):
            gfx = gpu.get("gfx")
            if gfx and archs.get("hip") and gfx not in archs["hip"]:
                findings.append(Finding("gpu-arch", PROBLEM, f"GPU {gpu['index']} ({gpu['name']}, {gfx}) is not among the extension's targets {archs['hip']}",
                                        "HIP code objects run only on the gfx target they were built for",
                                        source_build_line(ctx, {"HIP_ARCHITECTURES": gfx}), "no-kernel-image"))
            continue
        if archs.get("sass") or archs.get("ptx"):
            if _gpu_runs(gpu["capability"], archs):
                findings.append(Finding("gpu-arch", OK, f"GPU {gpu['index']} ({gpu['name']}, sm_{gpu['capability'].replace('.', '')}) is covered"))
            else:
                findings.append(Finding(
                    "gpu-arch", PROBLEM,
                    f"GPU {gpu['index']} ({gpu['name']}, compute capability {gpu['capability']}) has no kernel image in the extension",
                    f"the extension carries SASS {archs.get('sass')} and PTX {archs.get('ptx')}: kernels would fail with "
                    "'no kernel image is available for execution on the device'",
                    _gpu_arch_fix(facts, ctx, gpu, reinstall), "no-kernel-image"))
    return findings


def _source_build_findings(facts: dict, ctx: Context, findings: list[Finding], available) -> list[Finding]:
    """Source-build readiness: problems only when a source build is the way forward."""
    torch, tk, cxx = facts["torch"], facts["cuda_toolkit"], facts["compiler"]
    out: list[Finding] = []
    need_build = any(f.verdict == PROBLEM and f.check in {"extension", "label"} for f in findings) and available is not True
    sev = PROBLEM if need_build else WARN
    tmaj = _major(torch.get("cuda"))
    if torch.get("cuda"):
        rel = tk.get("cuda_home_release") or tk.get("nvcc_release")
        if not tk.get("nvcc_on_path") and not tk.get("cuda_home_release"):
            out.append(Finding("nvcc", sev, "no nvcc on PATH or in CUDA_HOME (only matters for a source build)",
                               f"torch is built with CUDA {torch['cuda']}", f"install a CUDA {tmaj}.x toolkit and set CUDA_HOME to it", "nvcc-missing"))
        elif _major(rel) != tmaj:
            out.append(Finding("nvcc", sev, f"nvcc is CUDA {rel} but torch is built with CUDA {torch['cuda']} (only matters for a source build)",
                               f"nvcc on PATH: {tk.get('nvcc_on_path')} (toolkit {tk.get('nvcc_toolkit')}); CUDA_HOME: {tk.get('cuda_home')}",
                               f"CUDA_HOME=<a CUDA {tmaj}.x toolkit> for the build", "cuda-version-mismatch"))
        else:
            out.append(Finding("nvcc", OK, f"nvcc {rel} matches torch's CUDA major {tmaj}"))
    if cxx.get("cxx20") is False:
        out.append(Finding("compiler", sev, f"{cxx.get('cxx')} has no C++20, which torch >= 2.14 needs for a source build",
                                cxx.get("version") or "", "use GCC >= 10: CC=gcc-12 CXX=g++-12 for the build", "cxx20-required"))
    if torch.get("installed") and not torch.get("import_error"):
        out.append(Finding("build-isolation", INFO, "source builds need --no-build-isolation",
                                "torch is not a build requirement: an isolated build cannot see this torch",
                                paste([sys.executable, "-m", "pip", "install", "--no-build-isolation", source_requirement(ctx)])))
    return out


# Findings that say no wheel of the line serves this machine: where one is found, it is the answer, and no other
# finding prints a fix (a pin or a build for a platform that has none would contradict it).
NOT_SERVED = {"unsupported-platform", "free-threaded", "gpu-not-served", "accelerator-not-served", "does-not-install",
              "no-cell", "no-pip-metadata"}  # fmt: skip


def _one_answer(findings: list[Finding]) -> list[Finding]:
    if not any(f.kind in NOT_SERVED and f.verdict == PROBLEM for f in findings):
        return findings
    first = next(f for f in findings if f.kind in NOT_SERVED and f.verdict == PROBLEM)
    out = []
    for f in findings:
        if f is not first and f.fix and (f.kind not in NOT_SERVED or f.kind == "does-not-install"):
            # a cell left out for its requirements is moot where the machine itself is not served
            f = replace(f, fix="", detail=f"{f.detail} (no fix of its own: {first.title})".strip())
        out.append(f)
    return out


def _platform_findings(facts: dict) -> list[Finding]:
    plat = facts.get("platform") or {}
    system, machine = plat.get("system"), _machine(plat.get("machine"))
    if system in served.SYSTEMS:
        row = served.SYSTEMS[system]
        return [Finding("platform", PROBLEM, f"{row}: no wheel of either line is built for it", f"this is {system}",
                        f"not supported: {UNSUPPORTED[row]}", "unsupported-platform")]  # fmt: skip
    machines = {m for v in LINES.values() for c in v["labels"].values() for m in c["machines"]}
    if system == "Linux" and machine and machine not in machines:
        row = next(k for k in UNSUPPORTED if k.startswith("other Linux"))
        return [Finding("platform", PROBLEM, f"Linux {machine}: no wheel of either line is built for it",
                        f"the wheels are for Linux {', '.join(sorted(machines))}", f"not supported: {UNSUPPORTED[row]}",
                        "unsupported-platform")]  # fmt: skip
    return []


def _floor_findings(facts: dict, ctx: Context) -> list[Finding]:
    torch = facts["torch"]
    label = (torch.get("variant") or {}).get("label")
    if not label or ctx.system not in (None, "Linux"):
        return []
    line = "upstream" if is_upstream(facts) else CHECKOUT
    fam = served.family(label)
    floors = served.glibc_floors(line)
    on_machine = served.glibc_floors(line, _machine(ctx.machine))  # the machine's own floor, where it has wheels
    out = []
    if fam not in floors:
        other = CHECKOUT if line == "upstream" else "upstream"
        instead = ""
        if fam in served.glibc_floors(other) and line == "upstream":
            stable = (torch.get("variant") or {}).get("stable_key")
            pin = install_line(replace(ctx, line=CHECKOUT, project="mamba-ssm", mamba_version=None, source=None, wheel=None,
                                       variant_key=stable if torch["variant"].get("served_by_stable") else torch["variant"]["key"],
                                       variant_label=(torch["variant"].get("stable_label") if torch["variant"].get("served_by_stable") else label)))  # fmt: skip
            instead = f"; or this repository's line, which has {fam} wheels (it replaces upstream's: `Mamba2` and transformers' Mamba models stop working): {pin}"
        out.append(Finding(
            "accelerator", PROBLEM, f"the {line} line builds no {fam} wheel (this torch is {fam})",
            f"its wheels are for {', '.join(floors)}",
            f"not supported: install a {' or '.join(floors)} build of torch for this line{instead}", "accelerator-not-served"))  # fmt: skip
        return out
    floor = on_machine.get(fam, floors[fam])
    if ctx.glibc and served.vtuple(ctx.glibc) < served.vtuple(floor):
        out.append(Finding(
            "glibc", PROBLEM, f"this system's glibc {ctx.glibc} is older than the {floor} the {line} line's {fam} wheels need",
            "a wheel's manylinux tag is the oldest glibc it loads on; pip skips the wheel on an older one",
            f"run in a newer distribution, or a container of one; or build here: {source_build_line(ctx)}", "glibc-too-old"))  # fmt: skip
    return out


def _left_out_findings(facts: dict) -> list[Finding]:
    """Upstream's line where its wheels are not built for this cell: their requirements do not install beside
    this torch (the farm resolved them before building). One answer: not supported, and what to do instead."""
    if not is_upstream(facts) or not (facts["torch"].get("variant") or {}).get("label"):
        return []
    machine = _machine((facts.get("platform") or {}).get("machine"))
    python = (facts.get("python") or {}).get("tag")
    rows = served.left_out("upstream", facts["torch"]["variant"]["label"], python, machine)
    return [Finding("installs", PROBLEM, f"upstream's {r['project']} {r['version']} is not built for torch {r['torch']} "
                    f"on {r['python']} {r['machine']}: it does not install beside that torch", r["why"],
                    f"not supported: {served.left_out_says(r)}", "does-not-install") for r in rows]  # fmt: skip


def _unpinnable_torch(facts: dict, findings: list[Finding]) -> list[Finding]:
    """A torch pip cannot see (no pip metadata: conda's) where a fix would install something: no pip command keeps
    it, said once as the answer (an install would put a second torch over it, or skip what the wheels import)."""
    from .requirements import no_pip_metadata

    torch = facts["torch"]
    if ("dist_version" not in torch or torch.get("dist_version") or torch.get("dist_error") or not torch.get("version")
            or torch.get("import_error") or not any(f.verdict == PROBLEM and f.fix for f in findings)):  # fmt: skip
        return findings
    said = Finding("torch", PROBLEM, f"torch {torch['version']} has no pip metadata: no pip command keeps it",
                   "pip judges what is installed by its metadata; without it, pip installs torch again for any wheel "
                   "that requires it", f"not supported: {no_pip_metadata(torch['version'], torch.get('location') or 'this environment')}",
                   "no-pip-metadata")  # fmt: skip
    return [said, *findings]


def _cell_findings(facts: dict, findings: list[Finding]) -> list[Finding]:
    """The line has no wheel of this torch's cell for this Python or machine (the answer `--requirements` gives, from
    the same data): not supported, naming the axis, where no other finding says so already."""
    from .requirements import cell_label

    torch = facts["torch"]
    if any(f.kind in NOT_SERVED and f.verdict == PROBLEM for f in findings) or not (torch.get("variant") or {}).get("key"):
        return []
    try:
        variant = _variant.from_values(torch["version"], cuda=torch.get("cuda"), hip=torch.get("hip"), cxx11abi=torch.get("cxx11abi"))
    except _variant.VariantError:
        return []
    line = "upstream" if is_upstream(facts) else CHECKOUT
    plat, py = facts.get("platform") or {}, facts.get("python") or {}
    label = cell_label(line, variant)
    axis, detail = served.no_wheel_axis(line, label, system=plat.get("system"), python_tag=py.get("tag"),
                                        machine=_machine(plat.get("machine")), glibc=plat.get("glibc"))  # fmt: skip
    if axis in ("unknown", "dependency"):  # a cell it builds; a left-out one is _left_out_findings' answer
        return []
    return [Finding("cell", PROBLEM, f"no wheel of the {line} line for this environment (axis: {axis})",
                    f"torch {torch['version']} needs {label}: {detail}",
                    f"not supported: {detail}; your torch is kept (`mamba-doctor --requirements {line}` says the same)",
                    "no-cell")]  # fmt: skip


def _miscompile_findings(facts: dict, fix) -> list[Finding]:
    """An installed causal-conv1d whose code for this GPU a toolkit is known to compile wrong (the farm's wheels
    serve that GPU with other code: lines.MISCOMPILES)."""
    cc, torch = facts.get("causal_conv1d") or {}, facts.get("torch") or {}
    out = []
    for ext in cc.get("extensions") or []:
        sass = (ext.get("archs") or {}).get("sass") or []
        for gpu in torch.get("gpus") or []:
            for m in served.miscompiled("causal-conv1d", cc.get("public_version"), torch.get("cuda"), sass,
                                        gpu.get("capability")):  # fmt: skip
                out.append(Finding(
                    "gpu-code", PROBLEM, f"{ext['module']} carries {m['arch']} code that computes wrong results on "
                    f"{gpu.get('name') or m['arch']}", m["note"], fix(), "miscompiled"))  # fmt: skip
    return out


def _gpu_arch_fix(facts: dict, ctx: Context, gpu: dict, reinstall: str) -> str:
    """The installed extension lacks this GPU's code: the line's wheel for the cell where it carries it (the farm
    builds every default arch), else what classify says for a GPU no wheel serves."""
    line = "upstream" if is_upstream(facts) else CHECKOUT
    if served.gpu_accelerators(line, gpu["capability"]):
        return reinstall
    return _gpu_fix(replace(ctx, gpus=[gpu]))


_ACCELERATOR = {"cpu": "a CPU build", "cuda": "CUDA code", "hip": "HIP code"}


def _extension_builds(mm: dict, fix: str) -> list[Finding]:
    """The extension files against the installed wheel's label: one build of each module, of the kind
    (abi3 or classic), accelerator and C++ ABI the label names (the farm's verifier refuses such a wheel)."""
    out = []
    names = {}
    for ext in mm.get("extensions") or []:
        rel = "/".join([*ext["module"].split(".")[:-1], Path(ext["path"]).name])
        n = _elf.extension_name(rel)
        if n is not None:
            names[ext["path"]] = n
    for module, builds in _elf.duplicate_modules(names.values()).items():
        files = [Path(b.path).name for b in builds]
        out.append(Finding(
            "extension-build", PROBLEM, f"{len(builds)} builds of {module} are installed: {', '.join(files)}",
            f"CPython imports {files[0]} and never {', '.join(files[1:])}: one of them is left over from another "
            f"build (a wheel that carried a stale module, or an earlier install); the import check tries only {files[0]}",
            f"{fix}; then check that one build of {module} is left (pip removes only the files its RECORD lists)",
            "stale-extension"))  # fmt: skip
    label, parts = mm.get("label"), mm.get("label_parts")
    if not label or not parts:
        return out
    for ext in mm.get("extensions") or []:
        n = names.get(ext["path"])
        if n is None:
            continue
        why = []
        if parts["torch"] == "stable" and n.kind == "classic":
            why.append(f"it is a version-specific ({n.python}) build, the label is a stable-ABI (abi3) one")
        elif parts["torch"] != "stable" and n.kind == "abi3":
            why.append("it is a stable-ABI (abi3) build, the label is a version-specific one")
        archs = ext.get("archs")
        if archs is not None and not archs.get("notes"):
            has = _elf.accelerator_of(archs)
            want = "cpu" if parts["accelerator"] == "cpu" else "hip" if parts["accelerator"].startswith("hip") else "cuda"
            if has != want:
                shown = ", ".join(archs.get("sass", []) + archs.get("ptx", []) + archs.get("hip", []))
                why.append(f"it carries {_ACCELERATOR[has]}{f' ({shown})' if shown else ''}, the label is {_ACCELERATOR[want]}")
        abi, want_abi = ext.get("abi"), parts.get("cxx11abi")
        if want_abi is not None and (abi == _elf.MIXED or abi == (_elf.PRE_CXX11 if want_abi else _elf.CXX11)):
            why.append(f"it was compiled with the {abi} C++ ABI, the label says cxx11abi{'TRUE' if want_abi else 'FALSE'}")
        if why:
            out.append(Finding(
                "extension-build", PROBLEM, f"{Path(ext['path']).name} contradicts the installed label {label}",
                "; ".join(why), fix, "extension-contradicts-label"))  # fmt: skip
    return out


def _machine_findings(mm: dict, host: str | None, fix: str) -> list[Finding]:
    """Every ELF file of the installed wheel against its platform tag, and against this interpreter's machine
    where the tag names another one: the farm's verifier's rule (mamba_ssm.elf reads e_machine), on what pip
    installed."""
    files = [f for f in mm.get("elf_files") or [] if f["machine"] not in _elf.DEVICE_MACHINES.values()]
    if not files:
        return []
    host = {"amd64": "x86_64", "arm64": "aarch64"}.get((host or "").lower(), (host or "").lower()) or None
    tags = mm.get("wheel_tags") or []
    tagged = sorted({m for t in tags if (m := _elf.tag_machine(t))})
    against = [(m, f"the installed wheel is tagged {', '.join(tags)}") for m in tagged]
    if host and host not in tagged:
        against.append((host, f"this interpreter runs on {host}"))
    out = []
    for want, why in against:
        foreign = [(f["file"], f["machine"]) for f in files if f["machine"] != want]
        if foreign:
            shown = "; ".join(f"{name} is {machine} code" for name, machine in foreign[:5])
            more = f" (and {len(foreign) - 5} more)" if len(foreign) > 5 else ""
            out.append(Finding(
                "machine", PROBLEM, f"{shown}{more}, but {why} ({want})",
                "a shared object built for another machine cannot load here: the wheel mixes architectures, "
                "or was made for another machine than this one", fix, "wrong-machine"))  # fmt: skip
    if not out:
        out.append(Finding("machine", OK, f"{len(files)} compiled file(s), all built for {', '.join(tagged) or host}"))
    return out


def _reinstall_or_build(ctx: Context, available: bool | None) -> str:
    if available is True:
        return install_line(ctx)
    if available is False:
        return f"no prebuilt wheel is indexed for {ctx.variant_key}; build it: {source_build_line(ctx)}"
    return f"{install_line(ctx)}  (if the index has your variant; else build: {source_build_line(ctx)})"


