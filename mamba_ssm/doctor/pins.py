"""``mamba-doctor --requirements FILE`` (or ``-``): the user's own requirements file (or a pasted ``pip install``
line), answered with the farm's wheels beside the torch installed here.

Each mamba-ssm and causal-conv1d requirement becomes the farm's pin of this cell that satisfies it: an exact pin
that release, a range the newest release inside it the farm serves here, a bare name the newest served. The two
come out as releases that pair (mamba-ssm's own causal-conv1d requirement, recorded from its sdist). Every other
line is kept as it was; a torch line gives way to the installed torch. Where nothing satisfies a requirement it
stops, names the axis, and offers the nearest served releases below and above and what changed between them.

Option lines are kept or refused deliberately, never passed on unsaid: index options are kept (and said),
``-r``/``-c`` (another file) and options that change what a pin means are refused. Requirements are parsed by
packaging's ``Requirement`` (the environment's own, or pip's vendored copy).
"""

from __future__ import annotations

import codecs
import re
import shlex
from dataclasses import dataclass, field

from .. import variant as _variant
from ..guard import Untrusted, has_hidden, shown
from .classify import CHECKOUT, UPSTREAM, Context, index_root
from .lines import LINES, RELEASES
from .requirements import NoCell, cell_label, checked_index, environment_cell
from .served import vtuple

PROJECTS = ("mamba-ssm", "causal-conv1d")
MAX_BYTES = 1 << 20  # a requirements file is a few KiB; over 1 MiB it is something else
MAX_LINES = 10000
STDIN_S = 20.0  # a piped file arrives at once; a terminal or FIFO left open is not waited on
# Options a requirements file may hold that only say where to look: kept as they are, and said.
KEPT_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "--pre",
                "--prefer-binary"}  # fmt: skip
INCLUDES = {"-r", "--requirement", "-c", "--constraint"}
EDITABLE = {"-e", "--editable"}
_COMMENT = re.compile(r"(^|\s+)#.*$")
_PIP_INSTALL = re.compile(r"(?:^|[\s`'\"(])(?:uv\s+)?(?:\S*python\S*\s+-m\s+)?pip3?\s+install\s+(?P<rest>[^\n`]*)")
# A wheel's file name in a URL or path: mamba_ssm-2.2.4+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl
WHEEL_NAME = re.compile(r"(?P<name>mamba_ssm|causal_conv1d)-(?P<version>[0-9][0-9a-z.]*)(?:\+(?P<label>[0-9A-Za-z.]+))?"
                        r"-[^/\s]*\.whl", re.IGNORECASE)  # fmt: skip


class PinError(Exception):
    """The file cannot be answered (a pin nothing serves, a pair that never paired, a line refused)."""


class InputError(PinError):
    """The file itself cannot be read as a requirements file."""


def _packaging():
    """packaging's Requirement, InvalidRequirement and canonicalize_name: the environment's, else the copy the
    standalone doctor carries (``mamba_doctor._vendor``), else pip's."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        try:
            from .._vendor.packaging.requirements import InvalidRequirement, Requirement
            from .._vendor.packaging.utils import canonicalize_name
        except ImportError:
            try:
                from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
                from pip._vendor.packaging.utils import canonicalize_name
            except ImportError:
                raise InputError(
                    "reading a requirements file needs `packaging` (or pip): `pip install packaging`"
                ) from None
    return Requirement, InvalidRequirement, canonicalize_name


# --------------------------------------------------------------------------- reading the input


def decode(raw: bytes, what: str) -> str:
    """The file's text: UTF-8 (a UTF-8 BOM dropped), or UTF-16/32 where its BOM says so, as pip reads it."""
    if len(raw) > MAX_BYTES:
        raise InputError(f"{what}: more than {MAX_BYTES >> 20} MiB: not a requirements file")
    for bom, codec in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
                       (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if raw.startswith(bom):
            break
    else:
        codec = "utf-8"
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as e:
        raise InputError(f"{what}: not {codec.upper().removesuffix('-SIG')} text (byte {e.start})") from None
    if "\x00" in text:
        raise InputError(f"{what}: holds a NUL character (line {text[: text.index(chr(0))].count(chr(10)) + 1}): "
                         "not a requirements file")  # fmt: skip
    return text


@dataclass
class Line:
    number: int  # the first physical line
    text: str  # as it was (continuations joined)
    out: str | None = None  # what the printed file holds in its place (None: kept as it was)
    note: str | None = None  # what the doctor says of it on stderr


@dataclass
class Parsed:
    lines: list[Line] = field(default_factory=list)
    reqs: dict = field(default_factory=dict)  # project -> (Line, Requirement-ish)
    pasted: bool = False


def pasted_command(text: str) -> list[str] | None:
    """The words after ``pip install`` where TEXT is a pasted command line (a README's), else None."""
    stripped = text.strip()
    if "\n" in stripped.replace("\\\n", " "):
        return None
    m = _PIP_INSTALL.search(stripped.replace("\\\n", " "))
    if not m:
        return None
    try:
        return shlex.split(m.group("rest"))
    except ValueError as e:
        raise InputError(f"the pasted command is not shell words ({e})") from None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) per logical line: backslash continuations joined, as pip reads them."""
    out, start, buf = [], 0, ""
    physical = text.splitlines()
    if len(physical) > MAX_LINES:
        raise InputError(f"{len(physical)} lines: more than {MAX_LINES}, not a requirements file")
    for n, line in enumerate(physical, 1):
        if not buf:
            start = n
        if line.endswith("\\") and not _COMMENT.search(line):
            buf += line[:-1]
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def parse(text: str) -> Parsed:
    """Every line of a requirements file (or a pasted command's words, one requirement each), sorted into kept,
    refused and answered."""
    Requirement, InvalidRequirement, canon = _packaging()
    words = pasted_command(text)
    parsed = Parsed(pasted=words is not None)
    if words is not None:
        items, i = [], 0
        while i < len(words):
            w = words[i]
            opt = w.split("=", 1)[0]
            if opt in KEPT_OPTIONS | INCLUDES | EDITABLE and "=" not in w and i + 1 < len(words) and opt != "--pre":
                w, i = f"{w} {shlex.quote(words[i + 1])}", i + 1
            items.append(w)
            i += 1
        entries = [(1, w) for w in items]
    else:
        entries = logical_lines(text)
    for number, raw in entries:
        line = Line(number, raw)
        parsed.lines.append(line)
        if has_hidden(raw):
            raise InputError(f"line {number}: holds control characters ({shown(repr(raw), 120)}); pip would read "
                             "them as part of the requirement")  # fmt: skip
        body = _COMMENT.sub("", raw).strip()
        if not body:
            continue
        if body.startswith("-"):
            _option(line, body, parsed, canon)
            continue
        _requirement(line, body, parsed, Requirement, InvalidRequirement, canon)
    return parsed


def _option(line: Line, body: str, parsed: Parsed, canon) -> None:
    try:
        words = shlex.split(body)
    except ValueError:
        words = body.split()
    opt = words[0].split("=", 1)[0]
    if opt in INCLUDES:
        raise PinError(f"line {line.number}: `{shown(body, 200)}` includes another file, which the doctor does not "
                       "follow; give it one file (`cat a.txt b.txt | mamba-doctor --requirements -`)")  # fmt: skip
    if opt in EDITABLE:
        target = body.split(None, 1)[1] if " " in body else body.partition("=")[2]
        project = _names_project(target, canon)
        if project:
            _claim(parsed, project, line, None, f"`{shown(body, 200)}` (a source build of {project})")
            return
        line.note = f"kept as it was: `{shown(body, 200)}` (an editable install, not mamba-ssm or causal-conv1d)"
        return
    if opt in KEPT_OPTIONS:
        line.note = f"kept as it was: `{shown(body, 200)}` (where pip looks; the farm's page is added beside it)"
        if parsed.pasted:
            line.out = body
        return
    if parsed.pasted:  # a command's flag (--no-build-isolation, -U): the file does not need it
        line.out = ""
        line.note = f"left out: `{shown(body, 200)}` (a flag of the pasted command; the farm's wheels need none)"
        return
    raise PinError(f"line {line.number}: `{shown(body, 200)}`: an option the doctor does not carry into the "
                   "printed file (it can change what the pins install); remove it and run this again")  # fmt: skip


def _names_project(target: str, canon) -> str | None:
    """mamba-ssm or causal-conv1d where a URL, path or ``#egg=`` names it; else None."""
    m = WHEEL_NAME.search(target)
    if m:
        return canon(m.group("name"))
    egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", target)
    if egg and canon(egg.group(1)) in PROJECTS:
        return canon(egg.group(1))
    for project in PROJECTS:
        if re.search(r"(?:^|[/@:])" + project.replace("-", "[-_]") + r"(?:\.git)?(?:$|[/@#?])", target, re.IGNORECASE):
            return project
    if re.search(r"state-spaces/mamba\b|Dao-AILab/causal-conv1d\b", target, re.IGNORECASE):
        return "causal-conv1d" if "causal" in target.lower() else "mamba-ssm"
    return None


@dataclass
class Want:
    """What one line asks of a project: a specifier (None: any), extras, a marker, and where it came from."""

    specifier: object
    extras: frozenset = frozenset()
    marker: object = None
    exact: str | None = None  # the release an exact pin names
    said: str = ""  # the line as the user wrote it, for messages


def _claim(parsed: Parsed, project: str, line: Line, req, said: str, version: str | None = None) -> None:
    if project in parsed.reqs:
        first = parsed.reqs[project][0]
        raise PinError(f"line {line.number}: {project} is named again (first on line {first.number}); keep one line")
    Requirement = _packaging()[0]
    spec = req.specifier if req is not None else Requirement(project).specifier
    exact = version
    pins = [s for s in spec if s.operator in ("==", "===") and "*" not in s.version]
    if pins:
        exact = pins[0].version.partition("+")[0]
        spec = Requirement(f"{project}=={exact}").specifier  # a label names a cell: this cell's is chosen
    elif version:
        spec = Requirement(f"{project}=={version}").specifier
    parsed.reqs[project] = (line, Want(spec, frozenset(req.extras) if req else frozenset(),
                                       req.marker if req else None, exact, said))  # fmt: skip


def _requirement(line: Line, body: str, parsed: Parsed, Requirement, InvalidRequirement, canon) -> None:
    # per-requirement options (--hash, --config-settings) follow the requirement after whitespace and " --"
    head, _, options = body.partition(" --")
    try:
        req = Requirement(head.strip())
    except InvalidRequirement:
        project = _names_project(head, canon)
        if project:  # a wheel URL or a path of one: the same release, this cell's wheel
            m = WHEEL_NAME.search(head)
            _claim(parsed, project, line, None, f"`{shown(head, 200)}`", m.group("version") if m else None)
            return
        line.note = f"kept as it was: `{shown(body, 200)}` (not a requirement the doctor answers)"
        return
    name = canon(req.name)
    if name == "torch":
        line.out = ""
        line.note = f"`{shown(body, 200)}` gives way to the torch installed here (pinned at the top)"
        return
    if name not in PROJECTS:
        return
    if options:
        raise PinError(f"line {line.number}: `{shown(body, 200)}`: its options (--{shown(options, 80)}) belong to "
                       "another wheel; remove them, the farm's pin replaces the line")  # fmt: skip
    version = None
    if req.url:
        m = WHEEL_NAME.search(req.url)
        version = m.group("version") if m else None
    _claim(parsed, name, line, req, f"`{shown(body, 200)}`", version)


# --------------------------------------------------------------------------- this environment's cell


@dataclass(frozen=True)
class Cell:
    label: str  # the wheels' label (cu12torch2.6cxx11abiFALSE, or the stable-ABI one)
    key: str  # the variant page
    torch: str  # installed torch version (torch.__version__)
    torch_pin: str  # the version a pin keeps it at: its distribution's, as pip sees it
    torch_minor: str  # 2.6
    python: str  # cp311
    machine: str  # x86_64

    def says(self) -> str:
        return f"torch {self.torch} ({self.key}), {self.python}, Linux {self.machine}"


def cell_of(facts: dict) -> Cell:
    """The cell this environment's torch, Python and machine make; NoCell where none can serve it."""
    py = facts["python"]
    version, dist, variant, machine = environment_cell(facts)
    minor = ".".join(re.findall(r"\d+", version)[:2])
    label = cell_label(UPSTREAM, variant)
    if variant.backend == "cpu":  # no release of upstream's line builds for the CPU (its kernels: CUDA, ROCm)
        raise NoCell(f"no wheel of upstream's line for this environment (torch {version}, {variant.key}; "
                     "axis: accelerator): its releases build CUDA and ROCm kernels only. Your torch is kept: nothing "
                     "was installed; or this repository's line "
                     f"(`mamba-doctor --requirements {CHECKOUT}`: selective_scan_fn and the Mamba block only)")  # fmt: skip
    return Cell(label, variant.key, version, dist, minor, py.get("tag") or "", machine or "")


def _python_ok(tag: str, pythons: list[str]) -> bool:
    n = lambda t: (int(t[2]), int(t[3:].split("-")[0] or 0))
    return bool(re.fullmatch(r"cp\d{2,3}", tag)) and any(
        n(tag) >= n(p) if p.endswith("-abi3") else tag == p for p in pythons
    )


def why_not(rec: dict, cell: Cell) -> tuple[str, str] | None:
    """None where the farm serves release REC on CELL; else (axis, why)."""
    if not rec["planned"]:
        return "release", ("not prebuilt: no wheel of this release is on the farm's index (the farm builds it on "
                           "request, or has not planned it)")
    for row in rec["left_out"]:
        if (row["torch"], row["python"], row["machine"]) == (cell.torch_minor, cell.python, cell.machine):
            instead = f"; instead: {row['instead']}" if row.get("instead") else ""
            return "dependency", (f"its requirements do not install beside torch {row['torch']} on {row['python']} "
                                  f"{row['machine']} ({shown(row['why'], 240)}){instead}")  # fmt: skip
    got = rec["cells"].get(cell.label)
    if got is None:
        torches = sorted({_variant.parse_label(k)["torch"] for k in rec["cells"]} - {"stable"}, key=vtuple)
        built = f"; it is built for torch {torches[0]} to {torches[-1]}" if torches else ""
        return "torch", f"no {cell.label} wheel of it{built}"
    if not _python_ok(cell.python, got["pythons"]):
        return "Python", f"its {cell.label} wheels are for {', '.join(got['pythons'])}, this Python is {cell.python}"
    if cell.machine not in got["machines"]:
        return "platform", f"its {cell.label} wheels are for Linux {', '.join(got['machines'])}, not {cell.machine}"
    return None


def _version(version: str):
    """packaging's Version, from the packaging _packaging found."""
    import importlib

    package = _packaging()[0].__module__.rsplit(".", 1)[0]
    return importlib.import_module(f"{package}.version").Version(version)


def changed(project: str, old: dict, new: dict) -> str:
    """What changed in PROJECT's requirements from release OLD to NEW (recorded from their sdists)."""
    Requirement, _, canon = _packaging()
    a = {canon(Requirement(r).name): r for r in old["requires"]}
    b = {canon(Requirement(r).name): r for r in new["requires"]}
    parts = [f"+{b[k]}" for k in b if k not in a] + [f"-{a[k]}" for k in a if k not in b]
    parts += [f"{a[k]} -> {b[k]}" for k in a if k in b and a[k] != b[k]]
    return f"{project} {old['version']} -> {new['version']}: " + (", ".join(parts) or "the same requirements")


def _unserved(project: str, want: Want, cands: list[dict], cell: Cell, what: str) -> PinError:
    """Nothing of PROJECT inside WANT is served here: the axis, the nearest served releases, what changed."""
    rows = RELEASES[project]
    axis, why = why_not(cands[-1], cell) if cands else ("release", "no release matches")
    served = [r for r in rows if why_not(r, cell) is None]
    lo_v, hi_v = (_version(cands[0]["version"]), _version(cands[-1]["version"])) if cands else (None, None)
    below = [r for r in served if lo_v is not None and _version(r["version"]) < lo_v]
    above = [r for r in served if hi_v is not None and _version(r["version"]) > hi_v]
    msg = (f"{what}: no release of {project} the farm serves for {cell.says()} satisfies {want.said} "
           f"(axis: {axis}; {cands[-1]['version'] if cands else project}: {why})")  # fmt: skip
    offers = []
    if below:
        offers.append(f"below: {project}=={below[-1]['version']} ({changed(project, below[-1], cands[0])})")
    if above:
        offers.append(f"above: {project}=={above[0]['version']} ({changed(project, cands[-1], above[0])})")
    if not offers and served:
        offers.append(f"served here: {project}=={served[-1]['version']}")
    if offers:
        msg += ". Nearest served " + "; ".join(offers)
    else:
        planned = [r for r in rows if r["planned"]]
        newest = (
            f"; {planned[-1]['version']}: {why_not(planned[-1], cell)[1]}"
            if planned and planned[-1] not in cands
            else ""
        )
        msg += f". No release of {project} is served on this cell{newest}"
    return PinError(msg + ". Nothing was printed; your torch is kept")


def _matching(project: str, want: Want) -> list[dict]:
    return [r for r in RELEASES[project] if want.specifier.contains(r["version"], prereleases=True)]


def choose(parsed: Parsed, cell: Cell) -> dict[str, dict]:
    """{project: release record} for each project the file names (and causal-conv1d where mamba-ssm needs it),
    releases that pair and are served on CELL."""
    Requirement = _packaging()[0]
    out: dict[str, dict] = {}
    m_want = parsed.reqs.get("mamba-ssm", (None, None))[1]
    c_want = parsed.reqs.get("causal-conv1d", (None, None))[1]
    if m_want is None and c_want is None:
        return out
    if m_want is None:
        cands = _matching("causal-conv1d", c_want)
        served = [r for r in cands if why_not(r, cell) is None]
        if not served:
            raise _unserved("causal-conv1d", c_want, cands, cell, "causal-conv1d")
        return {"causal-conv1d": served[-1]}
    m_cands = _matching("mamba-ssm", m_want)
    if not m_cands:
        known = ", ".join(r["version"] for r in RELEASES["mamba-ssm"])
        raise PinError(f"no release of mamba-ssm matches {m_want.said} (axis: release; PyPI holds {known})")
    if c_want is not None and m_want.exact and c_want.exact:
        m = m_cands[-1]
        if m["pairs"] and not Requirement(f"causal-conv1d{m['pairs']}").specifier.contains(
            c_want.exact, prereleases=True
        ):
            raise PinError(f"mamba-ssm {m_want.exact} and causal-conv1d {c_want.exact} never paired: mamba-ssm "
                           f"{m_want.exact} requires causal-conv1d{m['pairs']} (its sdist's requirements)")  # fmt: skip
    m_served = [r for r in m_cands if why_not(r, cell) is None]
    if not m_served:
        raise _unserved("mamba-ssm", m_want, m_cands, cell, "mamba-ssm")
    for m in reversed(m_served):
        needs_c = c_want is not None or (m["pairs"] is not None and (not m["pair_extra"] or
                                                                     "causal-conv1d" in m_want.extras))  # fmt: skip
        if not needs_c:
            return {"mamba-ssm": m}
        spec = Requirement(f"causal-conv1d{m['pairs'] or ''}").specifier
        cs = [r for r in (_matching("causal-conv1d", c_want) if c_want else RELEASES["causal-conv1d"])
              if spec.contains(r["version"], prereleases=True)]  # fmt: skip
        c_served = [r for r in cs if why_not(r, cell) is None]
        if c_served:
            return {"mamba-ssm": m, "causal-conv1d": c_served[-1]}
    m = m_served[-1]
    spec = f"causal-conv1d{m['pairs'] or ''}"
    want = c_want or Want(Requirement(spec).specifier, said=f"`{spec}` (mamba-ssm {m['version']}'s requirement)")
    cs = [
        r
        for r in _matching("causal-conv1d", want)
        if Requirement(spec).specifier.contains(r["version"], prereleases=True)
    ]
    raise _unserved("causal-conv1d", want, cs, cell, f"causal-conv1d to pair with mamba-ssm {m['version']}")


# --------------------------------------------------------------------------- the printed file


def answer(text: str, facts: dict, index_url: str | None = None, what: str = "the file") -> tuple[str, list[str]]:
    """(the requirements file to print, what was kept, left out or replaced, for stderr); PinError, NoCell."""
    parsed = parse(text)
    cell = cell_of(facts)
    chosen = choose(parsed, cell)
    page = f"{index_root(Context(index_url=checked_index(index_url)))}/{LINES[UPSTREAM]['folder']}{cell.key}/"
    pin = lambda p: f"{p}=={chosen[p]['version']}+{cell.label}"
    notes, body = [], []
    placed = set()
    for line in parsed.lines:
        claimed = next((p for p, (ln, _w) in parsed.reqs.items() if ln is line), None)
        if claimed:
            want = parsed.reqs[claimed][1]
            marker = f"; {want.marker}" if want.marker is not None else ""
            body.append(f"{pin(claimed)}{marker}  # mamba-doctor: for {want.said.strip('`')}")
            placed.add(claimed)
            if claimed == "mamba-ssm" and "causal-conv1d" in chosen and "causal-conv1d" not in parsed.reqs:
                body.append(f"{pin('causal-conv1d')}{marker}  # mamba-doctor: the causal-conv1d mamba-ssm "
                            f"{chosen['mamba-ssm']['version']} pairs with (causal-conv1d{chosen['mamba-ssm']['pairs']})")  # fmt: skip
                placed.add("causal-conv1d")
            notes.append(f"line {line.number}: {want.said} -> {pin(claimed)}")
        elif line.out is not None:
            if line.out:
                body.append(line.out)
        else:
            body.append(line.text)
        if line.note:
            notes.append(f"line {line.number}: {line.note}")
    head = [
        f"# mamba-doctor: {shown(what, 200)} for {cell.says()}; the farm's wheels of upstream's mamba-ssm and causal-conv1d",
        f"--extra-index-url {page}",
        f"torch=={cell.torch_pin}  # the torch installed here, as pip sees it: pip keeps it, or stops",
    ]
    return "".join(f"{t}\n" for t in head + body), notes


def read_input(source: str) -> tuple[str, str]:
    """(text, what to call it) of FILE or ``-`` (stdin: within STDIN_S), capped; InputError where it cannot be
    read."""
    import sys

    from ..guard import Deadline, read_capped, read_regular

    if source == "-":
        try:
            with Deadline(STDIN_S, "stdin") as deadline:
                raw = read_capped(sys.stdin.buffer, MAX_BYTES, deadline)
        except Untrusted as e:
            raise InputError(f"stdin: {e}") from None
        except (AttributeError, OSError, ValueError) as e:
            raise InputError(f"stdin: cannot read it ({e})") from None
        return decode(raw, "stdin"), "stdin"
    try:
        raw = read_regular(source, MAX_BYTES, source)
    except Untrusted as e:
        raise InputError(f"{e}") from None
    return decode(raw, source), source
