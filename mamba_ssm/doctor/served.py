"""What the release's wheels serve, read from lines.py (generated from the release plan): the glibc floor of each
line's wheels, the GPUs their code runs on, and, for a pinned install that finds no wheel, the axis (platform,
Python, torch, accelerator, glibc) it has none on. Standard library only, like the rest of the doctor."""

from __future__ import annotations

import re

from .. import variant as _variant
from .lines import GPUS, LEFT_OUT, LINES, MISCOMPILES, UNSUPPORTED

FAMILY = {"cpu": "CPU", "cu": "CUDA", "hip": "ROCm"}
# support.toml's rows, by what the doctor sees: the OS (platform.system()) and a free-threaded Python tag
WINDOWS, MACOS, FREE_THREADED = (
    next(k for k in UNSUPPORTED if k.startswith(w)) for w in ("Windows", "macOS", "free-threaded")
)
SYSTEMS = {"Windows": WINDOWS, "Darwin": MACOS}


def family(accelerator_or_label: str) -> str:
    """CPU, CUDA or ROCm, from an accelerator (cu12) or a label (cu12torch2.6cxx11abiFALSE)."""
    m = re.match(r"(cpu|cu|hip)", accelerator_or_label)
    return FAMILY[m.group(1)] if m else accelerator_or_label


def vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def glibc_floors(line: str, machine: str | None = None) -> dict[str, str]:
    """{CPU|CUDA|ROCm: the glibc its wheels need}: the highest floor of that family's wheels (on MACHINE: each
    machine's own, their dependencies' wheels included)."""
    out: dict[str, str] = {}
    for label, cell in LINES[line]["labels"].items():
        fam = family(label)
        if machine and machine not in cell["glibc_by_machine"]:
            continue
        floor = max([cell["glibc_by_machine"][machine]] if machine else cell["glibc"], key=vtuple)
        if fam not in out or vtuple(floor) > vtuple(out[fam]):
            out[fam] = floor
    return out


def machines(line: str) -> list[str]:
    """The machines LINE's wheels are built for."""
    return sorted({m for cell in LINES[line]["labels"].values() for m in cell["machines"]})


def rocm_archs(line: str) -> list[str]:
    """The gfx targets LINE's ROCm wheels carry code for, in the order lines.GPUS names them."""
    found = {a for label, cell in LINES[line]["labels"].items() if label.startswith("hip") for a in cell["archs"]}
    return [a for a in GPUS if a in found] + sorted(found - set(GPUS))


def gpu_names(archs: list[str]) -> str:
    """What people call the GPUs of these architectures (lines.GPUS)."""
    return "; ".join(f"{a}: {GPUS[a]}" for a in archs if a in GPUS)


def is_capability(capability: str) -> bool:
    return bool(re.fullmatch(r"\d{1,3}\.\d", capability or ""))


def sm_of(capability: str) -> str:
    return "sm_" + capability.replace(".", "")


def runs_on(arch: str, capability: str) -> bool:
    """SASS for sm_XY runs on a GPU of the same major with a minor >= Y (arch-specific sm_XYa only on XY itself)."""
    m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", arch)
    if not is_capability(capability):  # not major.minor: it runs nothing known
        return False
    major, minor = (int(x) for x in capability.split("."))
    return (
        bool(m)
        and int(m.group(1)) == major
        and int(m.group(2)) <= minor
        and (not m.group(3) or int(m.group(2)) == minor)
    )


def gpu_accelerators(line: str, capability: str) -> list[str]:
    """The accelerators (cu12, cu13) of LINE whose wheels carry code for a GPU of this compute capability."""
    found = set()
    for label, cell in LINES[line]["labels"].items():
        if any(runs_on(a, capability) for a in cell["archs"]):
            found.add(_variant.parse_label(label)["accelerator"])
    return sorted(found)


def cuda_archs(line: str) -> dict[str, list[str]]:
    """{cu12: [sm_75, ...]}: the GPU code of each CUDA major's wheels on LINE."""
    out: dict[str, set] = {}
    for label, cell in LINES[line]["labels"].items():
        if label.startswith("cu"):
            out.setdefault(_variant.parse_label(label)["accelerator"], set()).update(cell["archs"])
    return {k: sorted(v, key=lambda a: int(re.sub(r"\D", "", a))) for k, v in sorted(out.items())}


def gpus_served(line: str, accelerator: str | None = None) -> list[tuple[str, str, str]]:
    """(sm_86, "A10, A40, RTX 30", sm_80: the code it runs) for each named NVIDIA GPU that LINE's CUDA wheels (of
    ACCELERATOR, or any) carry code for: its own SASS, or an older one of its major (sm_86 runs sm_80's)."""
    archs = sorted({a for acc, v in cuda_archs(line).items() if accelerator in (None, acc) for a in v},
                   key=lambda a: int(re.sub(r"\D", "", a)))  # fmt: skip
    out = []
    for sm, names in GPUS.items():
        if not sm.startswith("sm_"):
            continue
        cap = f"{sm[3:-1]}.{sm[-1]}"
        runs = [a for a in archs if runs_on(a, cap)]
        if runs:
            out.append((sm, names, runs[-1]))
    return out


def oldest_sm(line: str) -> str:
    return min((a for archs in cuda_archs(line).values() for a in archs), key=lambda a: int(re.sub(r"\D", "", a)))


def line_of(project: str, version: str | None) -> str | None:
    """The line a pinned project==version belongs to (upstream's and this repository's versions differ)."""
    for line, v in LINES.items():
        if project in v["projects"] and (version is None or v["projects"][project] == version):
            return line
    return None


def _python_served(tag: str, pythons: list[str]) -> bool:
    if tag.endswith("t"):  # free-threaded: neither a classic nor an abi3 wheel loads
        return False
    n = lambda t: (int(t[2]), int(t[3:].split("-")[0].rstrip("t") or 0))
    return any(n(tag) >= n(p) if p.endswith("-abi3") else tag == p for p in pythons)


def no_wheel_axis(
    line: str,
    label: str | None,
    *,
    system: str | None = None,
    python_tag: str | None = None,
    machine: str | None = None,
    glibc: str | None = None,
    text: str = "",
) -> tuple[str, str]:
    """(axis, what the release has on it) for a pinned install of LABEL that found no wheel. The axis is one of
    platform, Python, torch, accelerator, glibc, or "unknown" where the facts cannot tell (the detail then lists
    what the cell's wheels need, to compare with the machine)."""
    if system in SYSTEMS:
        return "platform", f"no wheel of either line is built for {system}: {UNSUPPORTED[SYSTEMS[system]]}"
    if python_tag and python_tag.endswith("t"):
        return (
            "Python",
            f"no wheel of either line is built for a free-threaded Python ({python_tag}): {UNSUPPORTED[FREE_THREADED]}",
        )
    cells = LINES[line]["labels"]
    if label and label not in cells:
        try:
            parts = _variant.parse_label(label)
        except _variant.VariantError:
            return "torch", f"{label} is not a label the farm builds; the cells are on the line's page"
        stable = f"{parts['accelerator']}torchstable"
        if stable in cells and vtuple(parts["torch"]) >= vtuple(_variant.STABLE_FLOOR):
            return "torch", f"torch {parts['torch']} is served by the stable-ABI wheel {stable}, not a {label} one"
        same_torch = [k for k in cells if _variant.parse_label(k)["torch"] == parts["torch"]]
        if same_torch:
            accs = sorted({_variant.parse_label(k)["accelerator"] for k in same_torch})
            return (
                "accelerator",
                f"torch {parts['torch']} is built for {', '.join(accs)} on this line, not {parts['accelerator']}",
            )
        torches = sorted({_variant.parse_label(k)["torch"] for k in cells} - {"stable"}, key=vtuple)
        return (
            "torch",
            f"no wheel of this line for torch {parts['torch']}; it builds torch {torches[0]} to {torches[-1]}",
        )
    cell = cells.get(label or "")
    if cell is None:
        return "unknown", "the message names no label the release builds"
    for row in left_out(line, label, python_tag, machine):
        return "dependency", left_out_says(row)
    need = (f"Python {', '.join(cell['pythons'])} on Linux {', '.join(cell['machines'])}, glibc >= "
            f"{max(cell['glibc'], key=vtuple)}")  # fmt: skip
    if python_tag and not _python_served(python_tag, cell["pythons"]):
        return "Python", f"the {label} wheels are for {', '.join(cell['pythons'])}, this Python is {python_tag}"
    if re.search(r"Requires-Python|requires a different Python", text, re.IGNORECASE):
        return "Python", f"the {label} wheels are for {', '.join(cell['pythons'])}"
    if machine and machine not in cell["machines"]:
        return "platform", f"the {label} wheels are for Linux {', '.join(cell['machines'])}, this machine is {machine}"
    floor = cell["glibc_by_machine"].get(machine or "", max(cell["glibc"], key=vtuple))
    if glibc and vtuple(glibc) < vtuple(floor):
        return "glibc", f"the {label} wheels need glibc >= {floor}, this system has {glibc}"
    return "unknown", f"the {label} wheels are for {need}; one of these is not the machine's"


def in_spec(version: str, spec: str) -> bool:
    """Whether a release (1.7.0, 13.0) is in a comma-separated specifier of plain releases (<=1.7.0, >=13.0)."""
    ops = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
           "<": lambda a, b: a < b, ">": lambda a, b: a > b}  # fmt: skip
    for part in filter(None, (p.strip() for p in spec.split(","))):
        op = next(o for o in ops if part.startswith(o))
        want = vtuple(part[len(op):])
        have = vtuple(version)
        have, want = have + (0,) * (len(want) - len(have)), want + (0,) * (len(have) - len(want))
        if not ops[op](have, want):
            return False
    return True


def miscompiled(project: str, version: str | None, cuda: str | None, sass: list[str], capability: str) -> list[dict]:
    """The known miscompiles an installed PROJECT extension carries for a GPU of CAPABILITY: its wrong code is in
    the extension (SASS of that arch), the release and the torch's CUDA in range."""
    if not version or not cuda or not is_capability(capability):
        return []
    return [m for m in MISCOMPILES if m["project"] == project and in_spec(version, m["versions"])
            and in_spec(cuda, m["toolkit"]) and m["arch"] in sass and sm_of(capability) == m["arch"]]  # fmt: skip


def left_out(line: str, label: str | None, python_tag: str | None, machine: str | None) -> list[dict]:
    """The line's projects whose wheels are not built for this cell because their requirements do not install
    beside its torch (lines.LEFT_OUT, from the farm's installs record)."""
    if not label or not python_tag or not machine:
        return []
    try:
        torch = _variant.parse_label(label)["torch"]
    except _variant.VariantError:
        return []
    projects = LINES[line]["projects"]
    return [r for r in LEFT_OUT if projects.get(r["project"]) == r["version"] and r["torch"] == torch
            and r["python"] == python_tag and r["machine"] == machine]  # fmt: skip


def left_out_says(row: dict) -> str:
    instead = f"; instead: {row['instead']}" if row.get("instead") else ""
    return (f"{row['project']} {row['version']} does not install beside torch {row['torch']} on {row['python']} "
            f"{row['machine']} (resolved before building: {row['why']}){instead}")  # fmt: skip


def left_out_any(project: str, version: str, label: str) -> list[dict]:
    """The left-out cells of PROJECT VERSION for LABEL's torch, whatever the Python and machine (a pasted error
    may not say them)."""
    try:
        torch = _variant.parse_label(label)["torch"]
    except _variant.VariantError:
        return []
    return [r for r in LEFT_OUT if (r["project"], r["version"], r["torch"]) == (project, version, torch)]
