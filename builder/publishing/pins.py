"""Printed install commands against the release: each ``pip install`` / ``uv pip install`` a page or a fix
shows must name wheels the release plan builds, from a page of the published site that lists them
(``release_wheels()``, ``check(command, wheels)``; the site's layout is docs/reference/index-layout.md's).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from builder.facts.compat import vtuple
from builder.planning.plan import load_plan
from mamba_ssm import prebuilt as _prebuilt

SITE = _prebuilt.DEFAULT_INDEX_URL.rstrip("/") + "/"
# Where each line's index is published, under SITE; and the folders that serve one distribution, unpinned.
LINE_FOLDERS = {"checkout": "", "upstream": "upstream/"}
PROJECT_FOLDERS = {"doctor/": "mamba-doctor", "variants/": "mamba-ssm"}
# Options whose next word is a value, not a requirement (pip's and uv's).
_VALUED = {
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--index", "--default-index", "-r",
    "--requirement", "-c", "--constraint", "--python", "-p", "--python-version", "--platform", "--abi",
    "--implementation", "--only-binary", "--no-binary", "--preview-features", "-t", "--target", "--prefix",
    "--root", "--upgrade-strategy", "--progress-bar", "--config-settings", "-C", "--dependency-group", "--group",
    "--index-strategy", "--torch-backend", "-e", "--editable",
}  # fmt: skip
_URL_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--index", "--default-index"}
# A placeholder a fix leaves for what it cannot know (`<label>`, `<variant>`): checked for where it stands.
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 _-]{0,40}>")
_REQ = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?(?:==(?P<version>[^+;\s]+)(?:\+(?P<label>\S+))?)?"
)
_START = re.compile(r"(?:\buv\s+pip|(?:^|[\s`'\"(])(?:\S*python\S*'?\s+-m\s+)?pip3?)\s+install\b")


@dataclass(frozen=True)
class ReleaseWheel:
    """One wheel the release builds, as a printed command meets it."""

    project: str
    version: str  # public: 0.3.0 (this checkout), 2.3.2.post1 (upstream)
    label: str  # cu12torch2.6cxx11abiFALSE, cputorchstable
    python: str  # cp311 (a stable wheel: its floor, cp310)
    abi3: bool
    platform: str  # linux_x86_64
    line: str  # checkout | upstream
    pages: frozenset[str]  # the variant pages that list it (its own key, and what a stable wheel serves)
    accelerator: str = ""  # cpu, cu12, hip62
    archs: tuple[str, ...] = ()  # the GPU code it carries (sm_80, gfx942)
    glibc: str = ""  # the glibc it needs, its dependencies' wheels included (builder/data/installs.json): "2.28"

    def installs_on(self, python: str) -> bool:
        n = lambda tag: (int(tag[2]), int(tag[3:].rstrip("t") or 0))
        return n(python) >= n(self.python) if self.abi3 else python == self.python


@functools.cache
def release_wheels(profile: str = "release") -> tuple[ReleaseWheel, ...]:
    """Every wheel the release plan prebuilds, this checkout's and the recipes' (a build left to a request is not
    on the index, so no fix or pin names it)."""
    from builder.facts import installs
    from builder.planning.plan import cell_outcomes

    plan = load_plan(profile=profile)
    record = installs.load()
    out = []
    for b in plan.builds:
        if b.on_request:  # not prebuilt: no wheel of it is on the index until someone asks for its build
            continue
        recipe = plan.recipe_of(b)
        version = recipe.source.version if recipe else plan.matrix.package.version
        # the floor proven: the plan's manylinux target, raised to what its cells' installs resolved at
        floors = [".".join(b.manylinux.split("_")[1:3]), *(o.floor for o in cell_outcomes(plan, b, record)
                                                          if o is not None and o.installs and o.floor)]  # fmt: skip
        out.append(ReleaseWheel(
            project=b.project, version=str(version).partition("+")[0], label=b.label, python=b.python_tag,
            abi3=b.stable, platform=b.platform, line="upstream" if b.from_recipe else "checkout",
            pages=frozenset({b.variant, *b.serves}), accelerator=b.accelerator, archs=tuple(b.archs),
            glibc=max(floors, key=vtuple),
        ))  # fmt: skip
    return tuple(out)


def newest(project: str, line: str, wheels: Iterable[ReleaseWheel] | None = None) -> str:
    """The newest version of PROJECT the release builds on LINE (what a fix pins when nothing says which)."""
    from packaging.version import Version

    found = {
        w.version for w in (release_wheels() if wheels is None else wheels) if (w.project, w.line) == (project, line)
    }
    if not found:
        raise LookupError(f"the release builds no {project} on the {line} line")
    return max(found, key=Version)


# --------------------------------------------------------------------------- reading commands


def commands_in(text: str) -> list[str]:
    """The install commands in TEXT (markdown, a fix, a page's attribute): each from `pip install` /
    `uv pip install` (or `<python> -m pip install`) to the end of its line, a closing backtick, `;`, `|`,
    `&&`, or an aside in parentheses; backslash-continued lines joined."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for m in _START.finditer(text):
        start = m.start() if text[m.start()].isalnum() else m.start() + 1
        rest = text[start:].split("\n", 1)[0]
        rest = re.split(r"`|;\s|\s\|\s|\s&&\s|\s{2,}\(|\s\((?:with|then|if|the|e\.g\.|or)\b|\s#\s", rest, maxsplit=1)[0]
        out.append(rest.strip().rstrip(".,:"))
    return out


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def parse(command: str) -> tuple[list[tuple[str, str | None, str | None]], list[str]]:
    """(requirements as (name, version, label), index URLs) of one install command."""
    words = _words(command)
    i = words.index("install") + 1 if "install" in words else len(words)
    reqs, urls = [], []
    while i < len(words):
        w = words[i]
        opt = w.split("=", 1)[0]
        if w.startswith("-"):
            if opt in _URL_OPTIONS:
                urls.append(w.split("=", 1)[1] if "=" in w else words[i + 1] if i + 1 < len(words) else "")
            if opt in _VALUED and "=" not in w:
                i += 1
            i += 1
            continue
        m = _REQ.match(w)
        if m and not w.startswith((".", "/")) and "://" not in w and "@" not in w:
            reqs.append((m.group("name").lower().replace("_", "-"), m.group("version"), m.group("label")))
        i += 1
    return reqs, urls


# --------------------------------------------------------------------------- checking them


def _page(url: str) -> tuple[str, str | None] | None:
    """A site URL as (folder, variant key): ("", key) / ("upstream/", key) for a variant page, (folder, None)
    for a folder's root; None for a URL outside the site."""
    if not url.startswith(SITE):
        return None
    rest = url[len(SITE) :]
    if not rest.endswith("/") and rest:
        return ("?", rest)
    rest = rest.rstrip("/")
    if rest + "/" in PROJECT_FOLDERS or rest + "/" in LINE_FOLDERS.values():
        return (rest + "/" if rest else "", None)
    head, _, key = rest.rpartition("/")
    return (head + "/" if head else "", key)


def check(command: str, wheels: Iterable[ReleaseWheel] | None = None, *, python: str | None = None,
          platform: str | None = None) -> list[str]:  # fmt: skip
    """What in COMMAND disagrees with the release (empty: nothing). PYTHON (cp311) and PLATFORM
    (linux_x86_64), where the command is printed for one environment, must have a wheel of each pin."""
    wheels = release_wheels() if wheels is None else tuple(wheels)
    served = {w.project for w in wheels}
    reqs, urls = parse(command)
    problems = []
    pages = []
    for url in urls:
        page = _page(url)
        if page is None:
            continue
        folder, key = page
        lines = [line for line, f in LINE_FOLDERS.items() if f == folder]
        if folder == "?" or not (lines or folder in PROJECT_FOLDERS):
            problems.append(f"{url}: not a page of the published site ({', '.join(_layout())})")
        elif key is not None and folder in PROJECT_FOLDERS:
            problems.append(f"{url}: {folder} is one index; it has no variant pages")
        elif (
            key is not None
            and not PLACEHOLDER.fullmatch(key)
            and not any(w.line == lines[0] and key in w.pages for w in wheels)
        ):
            problems.append(f"{url}: the {lines[0]} line's release has no variant page {key!r}")
        pages.append((folder, key))
    for name, version, label in reqs:
        if folder_only := [PROJECT_FOLDERS[f] for f, _k in pages if f in PROJECT_FOLDERS]:
            if name not in folder_only and name in served:
                problems.append(f"{name}: not served by {', '.join(f for f, _ in pages if f in PROJECT_FOLDERS)}")
            continue
        if name not in served or version is None:
            continue
        req = f"{name}=={version}" + (f"+{label}" if label else "")
        # the line(s) the command's pages are of, where they hold the name: another line's release of the same name
        # (upstream's mamba-ssm releases beside this checkout's) is not what the command installs
        on = {line for line, f in LINE_FOLDERS.items() for f2, _k in pages if f == f2}
        pool = [w for w in wheels if w.project == name and w.line in on] or [w for w in wheels if w.project == name]
        cands = [w for w in pool if w.version == version]
        if not cands:
            known = sorted({w.version for w in pool})
            problems.append(f"{req}: the release builds {name} {', '.join(known)}, not {version}")
            continue
        if label is None:
            continue  # a PyPI sdist's version (a source build): the release's own version is all it can match
        if not PLACEHOLDER.fullmatch(label):
            cands = [w for w in cands if w.label.lower() == label.lower()]
            if not cands:
                problems.append(f"{req}: no wheel of the release has the label {label!r}")
                continue
        if python and not any(w.installs_on(python) for w in cands):
            problems.append(f"{req}: no wheel of it for {python}")
        if platform and not any(w.platform == platform for w in cands):
            problems.append(f"{req}: no wheel of it for {platform}")
        site_pages = [(f, k) for f, k in pages if f in LINE_FOLDERS.values()]
        if not site_pages:
            if not urls:
                problems.append(f"{req}: pinned to a farm label with no index to find it on (PyPI has no such wheel)")
            continue
        lines = {line for line, f in LINE_FOLDERS.items() for f2, _k in site_pages if f == f2}
        if not any(w.line in lines for w in cands):
            want = LINE_FOLDERS[cands[0].line] or "the site's root"
            problems.append(f"{req}: is the {cands[0].line} line's, served from {want}, not from {', '.join(urls)}")
            continue
        keys = [k for _f, k in site_pages if k is not None]
        if keys and not any(PLACEHOLDER.fullmatch(k) or k in w.pages for w in cands for k in keys):
            problems.append(f"{req}: not listed on {', '.join(keys)} (its pages: {', '.join(sorted(cands[0].pages))})")
    return problems


def _layout() -> list[str]:
    return [f"{SITE}{f}<variant>/" for f in LINE_FOLDERS.values()] + [SITE + f for f in PROJECT_FOLDERS]


__all__ = ["SITE", "ReleaseWheel", "check", "commands_in", "newest", "parse", "release_wheels"]


# --------------------------------------------------------------------------- the doctor's copy

LINES_MODULE = "mamba_ssm/doctor/lines.py"


def _machine(platform: str) -> str:
    return platform.removeprefix("linux_")


def doctor_lines(wheels: Iterable[ReleaseWheel] | None = None) -> dict[str, dict]:
    """Per line: the site folder its index is under, the newest version of each project the release builds (what
    the doctor pins when nothing says which version is installed), and per label what its wheels serve: the
    Python tags, machines, glibc floor and GPU code. The doctor names the axis a pinned install has no wheel on,
    the floors and the GPUs from these."""
    wheels = release_wheels() if wheels is None else tuple(wheels)
    out = {}
    for line, folder in LINE_FOLDERS.items():
        projects = sorted({w.project for w in wheels if w.line == line})
        # the labels of the newest releases (what a line's pin names); older releases' cells are RELEASES' (the
        # doctor's answer to a user's own requirements file, doctor/pins.py)
        newest_of = {p: newest(p, line, wheels) for p in projects}
        mine = [w for w in wheels if w.line == line and w.version == newest_of[w.project]]
        labels: dict[str, dict] = {}
        for w in sorted(mine, key=lambda w: w.label):
            cell = labels.setdefault(w.label, {"pythons": set(), "machines": set(), "glibc": set(), "archs": set(),
                                               "glibc_by_machine": {}})  # fmt: skip
            cell["pythons"].add(f"{w.python}-abi3" if w.abi3 else w.python)
            cell["machines"].add(_machine(w.platform))
            cell["glibc"].add(w.glibc)
            cell["archs"].update(w.archs)
            by = cell["glibc_by_machine"]  # the machine's own floor: upstream's aarch64 wheels need 2.34, not x86_64's
            by[_machine(w.platform)] = max(by.get(_machine(w.platform), w.glibc), w.glibc, key=vtuple)
        for cell in labels.values():
            for key in ("pythons", "machines", "glibc"):
                cell[key] = sorted(cell[key])
            cell["glibc_by_machine"] = dict(sorted(cell["glibc_by_machine"].items()))
            cell["archs"] = sorted(cell["archs"], key=lambda a: (a[:2], int(re.sub(r"\D", "", a) or 0)))
        out[line] = {"folder": folder, "projects": newest_of, "labels": labels}
    return out


def doctor_lines_source(wheels: Iterable[ReleaseWheel] | None = None) -> str:
    """The text of LINES_MODULE (the doctor runs on the standard library of Python 3.10: no TOML, no plan)."""
    from builder.publishing import release_lines

    wheels = release_wheels() if wheels is None else tuple(wheels)
    lines = doctor_lines(wheels)
    body = ""
    for line, v in lines.items():
        body += f"    {json.dumps(line)}: {{\n"
        body += f'        "folder": {json.dumps(v["folder"])},\n        "projects": {json.dumps(v["projects"])},\n'
        body += '        "labels": {\n'
        body += "".join(f"            {json.dumps(k)}: {json.dumps(c)},\n" for k, c in v["labels"].items())
        body += "        },\n    },\n"
    return (
        '"""The product lines the doctor\'s fixes name: where each line\'s index is on the site, the newest version\n'
        "of each project the release builds (pinned when the installed version is unknown), and per label what its\n"
        "wheels serve (Python tags, machines, glibc floor, GPU code).\n\n"
        "Generated from the release plan (matrix.toml, recipes/*.toml) by `python -m builder doctor-dist\n"
        "--write-lines`; tests/test_printed_commands.py fails when it differs. Do not edit by hand.\n"
        '"""\n\n'
        f"LINES = {{\n{body}}}\n\n"
        "# What people call the GPUs of each architecture (builder/data/toolkits.toml [gpus]).\n"
        f"GPUS = {json.dumps(gpu_names())}\n\n"
        "# Where no wheel of either line is built, and what to do instead (builder/data/support.toml).\n"
        f"UNSUPPORTED = {{\n{''.join(f'    {json.dumps(k)}: {json.dumps(v)},{chr(10)}' for k, v in unsupported().items())}}}\n\n"
        "# Cells of the release's projects that are not built because their requirements do not install beside\n"
        "# their torch (builder/data/installs.json): the resolver's reason, and what to do instead.\n"
        f"LEFT_OUT = {json.dumps(left_out_rows(), indent=1)}\n\n"
        "# GPU code a toolkit is known to compile wrong (builder/data/miscompiles.toml): an installed extension\n"
        "# carrying it is a problem on that GPU; the farm's wheels serve it with other code.\n"
        f"MISCOMPILES = {json.dumps(miscompile_rows(), indent=4)}\n\n"
        + release_lines.releases_source(wheels, left_out_rows(wheels))
    )


def left_out_rows(wheels: Iterable[ReleaseWheel] | None = None) -> list[dict]:
    """The installs record's cells that do not install, for the versions the release builds."""
    from builder.facts import installs

    built = {(w.project, w.version) for w in (release_wheels() if wheels is None else wheels)}
    rows = []
    for key, o in sorted(installs.load().cells.items()):
        if o.installs is not False:
            continue
        name_version, torch, python, platform = key.split(" | ")
        project, version = name_version.split(" ", 1)
        if (project, version) in built:
            rows.append({"project": project, "version": version, "torch": ".".join(torch.split()[1].split(".")[:2]),
                         "python": "cp" + python.removeprefix("py").replace(".", ""),
                         "machine": _machine(platform), "why": o.why, "instead": o.instead})  # fmt: skip
    return rows


def miscompile_rows() -> list[dict]:
    """The known miscompiles, with the extension module each project's recipe builds (the doctor reads its ELF)."""
    from builder.facts import miscompiles
    from builder.planning.recipes import recipe_for

    rows = []
    for m in miscompiles.load():
        modules = [g.rsplit("/", 1)[-1].split("*", 1)[0] for g in recipe_for(m.project).extensions]
        rows.append({"project": m.project, "versions": str(m.versions), "toolkit": str(m.toolkit), "arch": m.arch,
                     "serve_with": m.serve_with, "modules": modules, "note": m.note()})  # fmt: skip
    return rows


def gpu_names() -> dict[str, str]:
    from builder.facts import compat

    return dict(compat.load().gpu_names)


def unsupported() -> dict[str, str]:
    """support.toml's platforms with no wheel: platform -> what to do instead."""
    import tomllib

    from builder.facts import paths

    data = tomllib.loads((paths.DATA / "support.toml").read_text(encoding="utf-8"))
    return {row["platform"]: row["instead"] for row in data.get("unsupported", [])}
