"""matrix.toml: load, validate, expand into cells (torch x Python x accelerator x C++ ABI x platform), apply
excludes, includes and profiles, and say why each impossible cell is dropped. Every invalid input is a
:class:`~builder.errors.MatrixError` naming file, line, key and value; values that reach a Dockerfile or a
shell are checked against strict patterns here.
"""

from __future__ import annotations

import difflib
import itertools
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from packaging.version import InvalidVersion, Version

from builder.errors import MatrixError
from builder.facts.compat import PLATFORMS, TOOLKIT_SOURCES, Accelerator, Compat, parse_accelerator, vtuple
from builder.planning.tomlcheck import TomlChecker, broken_rule, dotted, read_toml, show, type_name
from builder.planning.tomllines import TomlLines
from mamba_ssm import variant as _variant

AXES = ("torch", "python", "accelerator", "cxx11abi", "platform")
CHECKOUT = "checkout"  # a profile's project name for this repository's own package
IMAGE_PLACEHOLDERS = ("arch", "toolkit", "toolkit_full", "debian_suite")

# Strict shapes for everything that can end up in a Dockerfile, a shell or a URL.
TORCH_RE = re.compile(r"\d+\.\d+")
PYTHON_RE = re.compile(r"3\.\d{1,2}")
ACCELERATOR_RE = re.compile(r"cpu|cuda-\d{1,2}\.\d{1,2}|rocm-\d{1,2}\.\d{1,2}")
ARCH_RE = re.compile(r"sm_\d{2,3}[af]?|gfx[0-9a-f]{3,5}")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
DIST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
RELPATH_RE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}")
GLIBC_RE = re.compile(r"2\.\d{1,2}")
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest], lowercase path.
_COMP = r"[a-z0-9]+(?:(?:\.|_{1,2}|-+)[a-z0-9]+)*"
IMAGE_REF_RE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::\d{{1,5}})?/)?{_COMP}(?:/{_COMP})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?"
)
URL_RE = re.compile(r"(?:https?://[A-Za-z0-9.-]+(?::\d{1,5})?|file://)(?:/[A-Za-z0-9._~%+-]*)*/?")
SAFE_TEXT_RE = re.compile(r"[^\x00-\x1f\x7f]{0,300}")
SAFE_TEXT = "one line of text of at most 300 characters"  # SAFE_TEXT_RE's rule, as errors state it


def _rule(value: Any) -> str:
    """The rule of SAFE_TEXT that VALUE breaks, by its number (nothing for a value that is not a string)."""
    return broken_rule(value, SAFE_TEXT_RE) if isinstance(value, str) else ""


# Shared with recipes.py: how values, types and key paths are shown in errors.
_type_name, _show, _dotted = type_name, show, dotted


# ---------------------------------------------------------------------------
# The validated matrix.


@dataclass(frozen=True)
class Package:
    name: str  # distribution name ("mamba-ssm")
    import_name: str  # "mamba_ssm"
    version_file: str  # where __version__ lives, relative to the matrix file
    version: str  # read from version_file
    sources: tuple[str, ...]  # what the inputs hash covers (files or folders)


@dataclass(frozen=True)
class Axes:
    torch: tuple[str, ...]
    python: tuple[str, ...]
    accelerator: tuple[str, ...]
    cxx11abi: tuple[str | bool, ...]  # "auto", True, False
    platform: tuple[str, ...]

    def get(self, axis: str) -> tuple:
        return getattr(self, axis)


@dataclass(frozen=True)
class ImageSetting:
    base: str  # template: placeholders from IMAGE_PLACEHOLDERS
    glibc: str | None  # None: from the data (Debian suites)


@dataclass(frozen=True, order=True)
class Cell:
    """One combination a user can be in. Builds serve cells."""

    torch: str
    python: str
    accelerator: str
    cxx11abi: bool
    platform: str

    def describe(self) -> str:
        abi = "TRUE" if self.cxx11abi else "FALSE"
        return f"torch {self.torch} x py{self.python} x {self.accelerator} x cxx11abi={abi} x {self.platform}"

    def sort_key(self) -> tuple:
        acc = parse_accelerator(self.accelerator)
        kind = ("cpu", "cuda", "rocm").index(acc.kind)
        return (kind, vtuple(acc.toolkit or "0"), vtuple(self.torch), self.cxx11abi, vtuple(self.python), self.platform)


class Dropped(NamedTuple):
    cell: Cell
    reason: str


@dataclass(frozen=True)
class Rule:
    """An [[exclude]] or [[include]] entry: a value set per named axis."""

    kind: str  # "exclude" | "include"
    index: int
    values: dict = field(hash=False)  # axis -> tuple of values
    reason: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} #{self.index + 1}"

    def matches(self, cell: Cell, native_abi: bool) -> bool:
        return all(_axis_match(axis, vals, cell, native_abi) for axis, vals in self.values.items())


class RuleIndex:
    """The first of ``rules`` that matches a cell, by one bit mask per axis value: a cell costs one dict
    lookup and one AND per axis, whatever the number of rules (10,000 [[exclude]] entries checked one by one
    against every cell took a minute). Same answer as ``next(r for r in rules if r.matches(cell, native))``."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.all = (1 << len(rules)) - 1
        self.wild: dict[str, int] = {}  # axis -> rules that do not name it
        self.by_value: dict[str, dict] = {}  # axis -> value -> rules that name it
        self.auto = 0  # rules whose cxx11abi holds "auto": they match a cell whose ABI is torch's own
        for axis in AXES:
            wild, by = 0, {}
            for i, rule in enumerate(rules):
                vals = rule.values.get(axis)
                if vals is None:
                    wild |= 1 << i
                    continue
                for v in vals:
                    if axis == "cxx11abi" and v == "auto":
                        self.auto |= 1 << i
                    else:
                        by[v] = by.get(v, 0) | 1 << i
            self.wild[axis], self.by_value[axis] = wild, by

    def first(self, cell: Cell, native_abi: bool) -> Rule | None:
        mask = self.all
        for axis in AXES:
            hit = self.wild[axis] | self.by_value[axis].get(getattr(cell, axis), 0)
            if axis == "cxx11abi" and native_abi:
                hit |= self.auto
            mask &= hit
            if not mask:
                return None
        return self.rules[(mask & -mask).bit_length() - 1]


def _axis_match(axis: str, values: tuple, cell: Cell, native_abi: bool) -> bool:
    v = getattr(cell, axis)
    if axis == "cxx11abi":
        return v in values or ("auto" in values and native_abi)
    return v in values


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    narrow: dict = field(hash=False)  # axis -> values, applies to every cell
    selects: tuple = field(default=(), hash=False)  # dicts axis -> values; a cell must match one (if any)
    archs: tuple[str, ...] = ()  # arch override: sm_* for CUDA builds, gfx* for ROCm builds
    stable_abi: bool | None = None  # None: the matrix's [plan] stable_abi
    # What it builds: CHECKOUT (this repository's package) and/or recipes' projects (recipes/<name>.toml).
    projects: tuple[str, ...] = ("checkout",)
    # Recipes compile their trimmed kernel set (their patches with when.trim): the CI set's cheaper build of a cell.
    trim: bool = False
    # Which of its recipes' sources it builds: "release" ([source]) or "canary" ([canary], a default branch's head).
    source: str = "release"
    # on_request: the builds planned but not prebuilt (a workflow_dispatch builds one when asked), each entry
    # (projects, axes) a build matches when its project is among the projects (none: any) and its cell the axes
    on_request: tuple = field(default=(), hash=False)

    def built_on_request(self, project: str, cell: Cell, native_abi: bool) -> bool:
        """Whether the profile leaves the build of PROJECT ("checkout" or a recipe) for CELL to a request."""
        return any((not projects or project in projects)
                   and all(_axis_match(a, v, cell, native_abi) for a, v in sel.items())
                   for projects, sel in self.on_request)  # fmt: skip
    # Which of its recipes' releases it builds: "pinned" ([source] alone) or "all" (every [[release]], each beside
    # the torch minors of its era: builder/planning/releases.py)
    releases: str = "pinned"

    def matches(self, cell: Cell, native_abi: bool) -> bool:
        if not all(_axis_match(a, v, cell, native_abi) for a, v in self.narrow.items()):
            return False
        return not self.selects or any(
            all(_axis_match(a, v, cell, native_abi) for a, v in sel.items()) for sel in self.selects
        )


@dataclass(frozen=True)
class ReleaseAxis:
    """[releases]: how a profile with ``releases = "all"`` plans its recipes' releases. ``torch``: torch minors
    (older than the axis's) that only the upstream lines are planned beside; ``era``: a release is planned beside
    the torch minors from this many before the newest one released by its upload day, up to the axis's newest."""

    torch: tuple[str, ...] = ()
    era: int = 6


@dataclass(frozen=True)
class Matrix:
    path: Path
    package: Package
    axes: Axes
    torch_index_url: str  # template with {variant}
    prefer_pypi: bool  # install torch from the default index when PyPI's build is the one needed
    images: dict = field(hash=False)  # [images.*] name -> ImageSetting (data defaults, overridden)
    toolkit_source: dict = field(hash=False)  # accelerator -> base | pypi | debian
    excludes: tuple[Rule, ...] = ()
    includes: tuple[Rule, ...] = ()
    profiles: dict = field(default_factory=dict, hash=False)  # name -> Profile
    stable_abi: bool = True  # [plan] stable_abi: stable-ABI builds serve every cell they can
    recipes_dir: Path | None = None  # [plan] recipes: the third-party recipes folder
    releases: ReleaseAxis = field(default_factory=ReleaseAxis)  # [releases]: the upstream lines' axis
    lines: TomlLines | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def root(self) -> Path:
        """Paths in [package] are relative to the matrix file's folder."""
        return self.path.parent

    def error(self, path: tuple, message: str, hint: str | None = None) -> MatrixError:
        line = self.lines.line(path) if self.lines and path else None
        where = f"{self.path}:{line}" if line else f"{self.path}"
        key = f" {_dotted(path)}:" if path else ""
        return MatrixError(f"{where}:{key} {message}", hint=hint)

    def profile(self, name: str | None) -> Profile | None:
        if name is None:
            return None
        if name not in self.profiles:
            names = sorted(self.profiles)
            close = difflib.get_close_matches(name, names, n=1)
            mean = f'; did you mean "{close[0]}"?' if close else ""
            raise self.error(
                (), f"--profile {_show(name)}: no such profile{mean} (profiles: {', '.join(names) or 'none'})"
            )
        return self.profiles[name]


# ---------------------------------------------------------------------------
# Loading and validation.


class _MatrixChecker(TomlChecker):
    error = MatrixError

    def __init__(self, path: Path, lines: TomlLines, compat: Compat) -> None:
        super().__init__(path, lines)
        self.compat = compat

    def boolean(self, value: Any, path: tuple) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {_type_name(value)} {_show(value)}")
        return value

    def values(self, value: Any, path: tuple, *, scalar_ok: bool) -> list:
        """An axis value list (or, where allowed, one scalar), without duplicates."""
        if not isinstance(value, list):
            if scalar_ok and isinstance(value, (str, bool)):
                return [value]
            want = "an array (or a single value)" if scalar_ok else "an array"
            self.fail(path, f"must be {want}, got {_type_name(value)} {_show(value)}")
        if not value:
            self.fail(path, "is empty; give at least one value")
        seen: set = set()
        for i, item in enumerate(value):
            key = (type(item), item) if isinstance(item, (str, bool, int, float)) else None
            if key is not None and key in seen:
                self.fail(path + (i,), f"{_show(item)} is listed twice")
            if key is not None:
                seen.add(key)
        return value

    # -- axis values -----------------------------------------------------------

    def axis_value(self, axis: str, value: Any, path: tuple, *, auto_ok: bool = True) -> str | bool:
        c = self.compat
        if axis == "cxx11abi":
            if isinstance(value, bool) or (auto_ok and value == "auto"):
                return value
            valid = '"auto", true or false' if auto_ok else "true or false"
            hint = (
                "write true/false without quotes"
                if isinstance(value, str) and value.lower() in ("true", "false")
                else None
            )
            self.fail(path, f"{_show(value)} is not a C++ ABI choice (valid: {valid})", hint=hint)
        if not isinstance(value, str):
            extra = ""
            if axis in ("torch", "python") and isinstance(value, float):
                extra = f' (quote it: "{value}"; a bare number reads 2.10 as 2.1)'
            self.fail(path, f"{axis} values must be strings, got {_type_name(value)} {_show(value)}{extra}")
        if axis == "torch":
            if not TORCH_RE.fullmatch(value):
                m = re.fullmatch(r"(\d+\.\d+)\.\d+.*", value)
                hint = f'give major.minor ("{m.group(1)}"); the farm picks the patch release' if m else None
                self.fail(path, f'{_show(value)} is not a torch major.minor version such as "2.6"', hint=hint)
            if value not in c.torch:
                self.fail(
                    path,
                    f"torch {value} is not in the compatibility data (known: {', '.join(c.torch_minors())})",
                    hint="add a row to builder/data/torch.toml once the release exists",
                )
        elif axis == "python":
            if not PYTHON_RE.fullmatch(value):
                self.fail(path, f'{_show(value)} is not a Python version such as "3.11"')
            if value not in c.pythons:
                self.fail(path, f"Python {value} has no torch wheels (known: {', '.join(c.pythons)})")
        elif axis == "accelerator":
            if not ACCELERATOR_RE.fullmatch(value):
                self.fail(path, f'{_show(value)} is not an accelerator (valid: "cpu", "cuda-X.Y", "rocm-X.Y")')
            acc = parse_accelerator(value)
            if acc.kind == "rocm" and vtuple(acc.toolkit) < vtuple(c.rocm_minimum):
                self.fail(
                    path,
                    f"{_show(value)}: ROCm < {c.rocm_minimum} is not supported (the HIP kernels need ROCm >= "
                    f"{c.rocm_minimum}); use rocm-{c.rocm_minimum} or newer",
                )
            if not c.known_accelerator(acc):
                close = difflib.get_close_matches(value, c.accelerators(), n=1)
                mean = f'; did you mean "{close[0]}"?' if close else ""
                self.fail(path, f"unknown accelerator {_show(value)}{mean} (known: {', '.join(c.accelerators())})")
        elif axis == "platform" and value not in PLATFORMS:
            close = difflib.get_close_matches(value, PLATFORMS, n=1)
            mean = f'; did you mean "{close[0]}"?' if close else ""
            self.fail(path, f"unknown platform {_show(value)}{mean} (valid: {', '.join(PLATFORMS)})")
        return value

    def image_template(self, value: Any, path: tuple) -> str:
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {_type_name(value)} {_show(value)}")
        try:
            parsed = list(string.Formatter().parse(value))
        except ValueError:
            self.fail(path, f"{_show(value)} has an unbalanced {{ or }}")
        for _, name, spec, conv in parsed:
            if name is None:
                continue
            if name not in IMAGE_PLACEHOLDERS or spec or conv:
                self.fail(
                    path,
                    f"{_show(value)}: unknown placeholder {{{name}}} (valid: "
                    + ", ".join("{" + p + "}" for p in IMAGE_PLACEHOLDERS)
                    + ")",
                )
        sample = value.format(arch="x86_64", toolkit="12.9", toolkit_full="12.9.1", debian_suite="bookworm")
        if not IMAGE_REF_RE.fullmatch(sample):
            self.fail(
                path,
                f"{_show(value)} is not a container image reference (lowercase [registry/]name[:tag], "
                "no spaces or quotes)",
            )
        return value


def _read_version(root: Path, rel: str) -> str | None:
    try:
        text = (root / rel).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.MULTILINE)
    return m.group(1) if m else None


def load_matrix(path: Path, compat: Compat) -> Matrix:
    """Read and validate PATH. Raises MatrixError on any problem."""
    path = Path(path)
    text, data = read_toml(path, MatrixError, "no such file", "pass --matrix FILE, or run from the repository root")
    ck = _MatrixChecker(path, TomlLines(text), compat)
    top = ("package", "axes", "plan", "releases", "torch_index", "images", "toolkit_source", "exclude", "include",
           "profiles")  # fmt: skip
    ck.keys(data, (), top, required=("package", "axes"))

    package = _package(ck, data["package"], path.parent)
    axes = _axes(ck, data["axes"])
    stable_abi, recipes_dir = _plan_settings(ck, data.get("plan", {}), path.parent)
    releases = _release_axis(ck, data.get("releases", {}))
    url, prefer_pypi = _torch_index(ck, data.get("torch_index", {}))
    images = _images(ck, data.get("images", {}))
    excludes = _rules(ck, data.get("exclude", []), "exclude", axes)
    includes = _rules(ck, data.get("include", []), "include", axes)
    used_acc = set(axes.accelerator) | {a for r in includes for a in r.values.get("accelerator", ())}
    sources = _toolkit_sources(ck, data.get("toolkit_source", {}), used_acc)
    _no_label_clash(ck, axes, includes)
    profiles = _profiles(ck, data.get("profiles", {}), axes, includes)
    matrix = Matrix(
        path=path,
        package=package,
        axes=axes,
        torch_index_url=url,
        prefer_pypi=prefer_pypi,
        images=images,
        toolkit_source=sources,
        excludes=excludes,
        includes=includes,
        profiles=profiles,
        stable_abi=stable_abi,
        recipes_dir=recipes_dir,
        releases=releases,
        lines=ck.lines,
    )
    _no_duplicate_includes(ck, matrix, compat)
    return matrix


def _package(ck: _MatrixChecker, value: Any, root: Path) -> Package:
    p = ("package",)
    t = ck.table(value, p)
    ck.keys(t, p, ("name", "import_name", "version_file", "sources"), required=("name", "version_file"))
    name = ck.string(t["name"], p + ("name",), DIST_RE, 'a distribution name such as "mamba-ssm"')
    imp = ck.string(
        t.get("import_name", name.replace("-", "_")), p + ("import_name",), IDENT_RE, "a Python import name"
    )
    vfile = ck.string(t["version_file"], p + ("version_file",), RELPATH_RE, "a relative path inside the repository")
    version = _read_version(root, vfile)
    if version is None:
        ck.fail(p + ("version_file",), f'{_show(vfile)}: no __version__ = "..." found in {root / vfile}')
    try:
        Version(version)
    except InvalidVersion:
        ck.fail(p + ("version_file",), f"__version__ {_show(version)} in {vfile} is not a PEP 440 version")
    if "+" in version:
        ck.fail(p + ("version_file",), f"__version__ {_show(version)} already has a local label; the farm adds it")
    srcs = t.get("sources", [vfile])
    srcs = ck.values(srcs, p + ("sources",), scalar_ok=False)
    for i, s in enumerate(srcs):
        ck.string(s, p + ("sources", i), RELPATH_RE, "a relative path inside the repository")
    return Package(name, imp, vfile, version, tuple(srcs))


def _axes(ck: _MatrixChecker, value: Any) -> Axes:
    p = ("axes",)
    t = ck.table(value, p)
    ck.keys(t, p, AXES, required=("torch", "python", "accelerator"))
    out = {}
    for axis in AXES:
        default = {"cxx11abi": ["auto"], "platform": ["linux_x86_64"]}.get(axis)
        vals = ck.values(t.get(axis, default), p + (axis,), scalar_ok=False)
        out[axis] = tuple(ck.axis_value(axis, v, p + (axis, i)) for i, v in enumerate(vals))
    return Axes(**out)


def _plan_settings(ck: _MatrixChecker, value: Any, root: Path) -> tuple[bool, Path]:
    """[plan]: how builds cover cells. stable_abi (default true): one stable-ABI build per
    accelerator and platform serves every cell such a wheel can; false: one build per cell.
    recipes (default "recipes"): the folder of third-party recipes a profile's projects name."""
    p = ("plan",)
    t = ck.table(value, p)
    ck.keys(t, p, ("stable_abi", "recipes"))
    recipes = ck.string(t.get("recipes", "recipes"), p + ("recipes",), RELPATH_RE, "a relative folder path")
    return ck.boolean(t.get("stable_abi", True), p + ("stable_abi",)), root / recipes


def _release_axis(ck: _MatrixChecker, value: Any) -> ReleaseAxis:
    """[releases]: torch (minors in the data, oldest first; one of axes.torch too is planned once) and era (0 to 12)."""
    p = ("releases",)
    t = ck.table(value, p)
    ck.keys(t, p, ("torch", "era"))
    vals = ck.values(t.get("torch", []), p + ("torch",), scalar_ok=False)
    torch = tuple(ck.axis_value("torch", v, p + ("torch", i)) for i, v in enumerate(vals))
    for i, minor in enumerate(torch):
        if i and vtuple(minor) <= vtuple(torch[i - 1]):
            ck.fail(p + ("torch", i), f"torch {minor} comes after {torch[i - 1]}: list each minor once, oldest first")
    era = t.get("era", 6)
    if isinstance(era, bool) or not isinstance(era, int) or not 0 <= era <= 12:
        ck.fail(p + ("era",), f"must be a whole number of torch minors from 0 to 12, got {_show(era)}")
    return ReleaseAxis(torch, era)


def _torch_index(ck: _MatrixChecker, value: Any) -> tuple[str, bool]:
    p = ("torch_index",)
    t = ck.table(value, p)
    ck.keys(t, p, ("url", "prefer_pypi"))
    url = t.get("url", "https://download.pytorch.org/whl/{variant}")
    if not isinstance(url, str):
        ck.fail(p + ("url",), f"must be a string, got {_type_name(url)} {_show(url)}")
    try:
        names = {n for _, n, _, _ in string.Formatter().parse(url) if n is not None}
    except ValueError:
        ck.fail(p + ("url",), f"{_show(url)} has an unbalanced {{ or }}")
    if names != {"variant"}:
        ck.fail(p + ("url",), f"{_show(url)} must contain {{variant}} (cu126, rocm6.2.4, cpu) and no other placeholder")
    if not URL_RE.fullmatch(url.replace("{variant}", "cu126")):
        ck.fail(
            p + ("url",), f"{_show(url)} is not an http(s):// or file:// URL (no spaces, quotes or shell characters)"
        )
    prefer = ck.boolean(t.get("prefer_pypi", True), p + ("prefer_pypi",))
    return url, prefer


def _images(ck: _MatrixChecker, value: Any) -> dict:
    p = ("images",)
    t = ck.table(value, p)
    names = tuple(ck.compat.images)
    ck.keys(t, p, names)
    out = {}
    for name in names:
        default = ck.compat.images[name]
        over = ck.table(t.get(name, {}), p + (name,))
        ck.keys(over, p + (name,), ("base", "glibc"))
        base = ck.image_template(over.get("base", default["base"]), p + (name, "base"))
        glibc = over.get("glibc", default.get("glibc"))
        if glibc is not None:
            glibc = ck.string(glibc, p + (name, "glibc"), GLIBC_RE, 'a glibc version such as "2.28"')
        out[name] = ImageSetting(base, glibc)
    return out


def _toolkit_sources(ck: _MatrixChecker, value: Any, used: set) -> dict:
    p = ("toolkit_source",)
    t = ck.table(value, p)
    out = {}
    for acc_name, source in t.items():
        ck.axis_value("accelerator", acc_name, p + (acc_name,))
        if acc_name not in used:
            ck.fail(p + (acc_name,), f"{acc_name} is not in axes.accelerator or any include")
        acc = parse_accelerator(acc_name)
        allowed = ck.compat.toolkit_sources(acc)
        if source not in allowed:
            if isinstance(source, str) and source in TOOLKIT_SOURCES:
                msg = f"{acc_name} cannot come from {_show(source)} (possible: {', '.join(allowed)})"
            else:
                msg = f"{_show(source)} is not a toolkit source for {acc_name} (valid: {', '.join(allowed)})"
            ck.fail(p + (acc_name,), msg)
        out[acc_name] = source
    return out


def _selection(ck: _MatrixChecker, t: dict, path: tuple, *, within: Axes | None, auto_ok: bool, extra=()) -> dict:
    """Axis keys of an exclude/include/profile entry: name -> tuple of valid values."""
    out = {}
    for axis in AXES:
        if axis not in t:
            continue
        vals = ck.values(t[axis], path + (axis,), scalar_ok=True)
        checked = []
        for i, v in enumerate(vals):
            vpath = path + (axis, i) if isinstance(t[axis], list) else path + (axis,)
            v = ck.axis_value(axis, v, vpath, auto_ok=auto_ok)
            if within is not None:
                allowed = set(within.get(axis)) | {x for r in extra for x in r.values.get(axis, ())}
                if axis == "cxx11abi":
                    allowed.add("auto")  # "the ABI torch ships" is always one of true/false
                    if "auto" in within.cxx11abi:
                        allowed |= {True, False}
                if v not in allowed:
                    shown = ", ".join(_show(x) for x in within.get(axis))
                    ck.fail(vpath, f"{_show(v)} is not in axes.{axis} ({shown})")
            checked.append(v)
        out[axis] = tuple(checked)
    return out


def _rules(ck: _MatrixChecker, value: Any, kind: str, axes: Axes) -> tuple[Rule, ...]:
    if not isinstance(value, list):
        ck.fail((kind,), f"must be an array of tables ([[{kind}]]), got {_type_name(value)}")
    rules = []
    for i, entry in enumerate(value):
        p = (kind, i)
        t = ck.table(entry, p)
        ck.keys(t, p, AXES + ("reason",), required=("reason",) if kind == "exclude" else ())
        reason = t.get("reason", "")
        if not isinstance(reason, str) or not SAFE_TEXT_RE.fullmatch(reason):
            ck.fail(p + ("reason",), f"must be {SAFE_TEXT}, got {_show(reason)}{_rule(reason)}")
        within = axes if kind == "exclude" else None
        values = _selection(ck, t, p, within=within, auto_ok=kind == "include")
        if not values:
            ck.fail(p, f"names no axis; give some of: {', '.join(AXES)}")
        rules.append(Rule(kind, i, values, reason))
    return tuple(rules)


def _projects(ck: _MatrixChecker, b: dict, pp: tuple) -> tuple[str, ...]:
    """A profile's projects: CHECKOUT and/or recipe names (default: the checkout only). That each
    recipe exists is checked when the profile is planned (builder.planning.plan), so a copied matrix loads."""
    if "projects" not in b:
        return (CHECKOUT,)
    names = ck.values(b["projects"], pp + ("projects",), scalar_ok=True)
    for i, name in enumerate(names):
        ck.string(name, pp + ("projects", i), NAME_RE, f'"{CHECKOUT}" or a recipe\'s project name')
    return tuple(names)


def _profiles(ck: _MatrixChecker, value: Any, axes: Axes, includes: tuple[Rule, ...]) -> dict:
    p = ("profiles",)
    t = ck.table(value, p)
    out = {}
    for name, body in t.items():
        pp = p + (name,)
        if not NAME_RE.fullmatch(name):
            ck.fail(pp, f"profile name {_show(name)} must be lowercase letters, digits, - or _")
        b = ck.table(body, pp)
        ck.keys(
            b,
            pp,
            AXES + ("description", "select", "archs", "stable_abi", "projects", "trim", "source", "on_request", "releases"),
        )
        stable_abi = ck.boolean(b["stable_abi"], pp + ("stable_abi",)) if "stable_abi" in b else None
        trim = ck.boolean(b.get("trim", False), pp + ("trim",))
        source = b.get("source", "release")
        if source not in ("release", "canary"):
            ck.fail(pp + ("source",), f'{_show(source)} is not a source (valid: "release", "canary")')
        releases = b.get("releases", "pinned")
        if releases not in ("pinned", "all"):
            ck.fail(pp + ("releases",), f'{_show(releases)} is not a choice of releases (valid: "pinned", "all")',
                    hint='"pinned": each recipe\'s [source] alone; "all": every [[release]] beside its era\'s torches')  # fmt: skip
        if releases == "all" and source == "canary":
            ck.fail(
                pp + ("releases",), 'a canary profile builds the [canary] pins alone: releases = "all" is a release\'s'
            )
        desc = b.get("description", "")
        if not isinstance(desc, str) or not SAFE_TEXT_RE.fullmatch(desc):
            ck.fail(pp + ("description",), f"must be {SAFE_TEXT}, got {_show(desc)}{_rule(desc)}")
        narrow = _selection(ck, b, pp, within=axes, auto_ok=True, extra=includes)
        selects = []
        raw_sel = b.get("select", [])
        if not isinstance(raw_sel, list):
            ck.fail(pp + ("select",), f"must be an array of tables, got {_type_name(raw_sel)} {_show(raw_sel)}")
        for i, s in enumerate(raw_sel):
            sp = pp + ("select", i)
            st = ck.table(s, sp)
            ck.keys(st, sp, AXES)
            sel = _selection(ck, st, sp, within=axes, auto_ok=True, extra=includes)
            if not sel:
                ck.fail(sp, f"selects every cell; name some of: {', '.join(AXES)}")
            selects.append(sel)
        archs = b.get("archs", [])
        archs = ck.values(archs, pp + ("archs",), scalar_ok=False) if "archs" in b else []
        known = ck.compat.known_archs()
        for i, a in enumerate(archs):
            ck.string(a, pp + ("archs", i), ARCH_RE, 'a GPU architecture such as "sm_80" or "gfx90a"')
            if a not in known:
                close = difflib.get_close_matches(a, known, n=1)
                mean = f'; did you mean "{close[0]}"?' if close else ""
                ck.fail(pp + ("archs", i), f"no toolkit in the data compiles for {a}{mean} (known: {', '.join(known)})")
        projects = _projects(ck, b, pp)
        if source == "canary" and "checkout" in projects:
            ck.fail(pp + ("source",), 'a canary builds recipes\' [canary] pins; "checkout" has none',
                    hint="leave checkout out of this profile's projects")  # fmt: skip
        on_request = _on_request(ck, b, pp, axes, includes, projects)
        out[name] = Profile(name, desc, narrow, tuple(selects), tuple(archs), stable_abi, projects, trim, source,
                            on_request, releases)  # fmt: skip
    return out


def _on_request(ck: _MatrixChecker, b: dict, pp: tuple, axes: Axes, includes, projects: tuple[str, ...]) -> tuple:
    """A profile's ``on_request`` tables: ``projects`` (of the profile's own) and axes, as ``select`` takes them."""
    raw = b.get("on_request", [])
    if not isinstance(raw, list):
        ck.fail(pp + ("on_request",), f"must be an array of tables, got {_type_name(raw)} {_show(raw)}")
    out = []
    for i, entry in enumerate(raw):
        ep = pp + ("on_request", i)
        t = ck.table(entry, ep)
        ck.keys(t, ep, AXES + ("projects",))
        names = _projects(ck, t, ep) if "projects" in t else ()
        for j, name in enumerate(names):
            if name not in projects:
                ck.fail(ep + ("projects", j), f"{_show(name)} is not one of the profile's projects ({', '.join(projects)})")
        sel = _selection(ck, {k: v for k, v in t.items() if k != "projects"}, ep, within=axes, auto_ok=True,
                         extra=includes)  # fmt: skip
        if not sel and not names:
            ck.fail(ep, f"leaves every build to a request; name some of: projects, {', '.join(AXES)}")
        out.append((names, sel))
    return tuple(out)


def _no_label_clash(ck: _MatrixChecker, axes: Axes, includes: tuple[Rule, ...]) -> None:
    """Two toolkits of one CUDA major (or ROCm minor) would make wheels with the same name."""
    names = list(axes.accelerator) + [
        a for r in includes for a in r.values.get("accelerator", ()) if a not in axes.accelerator
    ]
    seen: dict[str, str] = {}
    for i, name in enumerate(names):
        acc = parse_accelerator(name)
        tag = _variant.accelerator_tag(acc.kind, acc.toolkit)
        if tag in seen and seen[tag] != name:
            path = ("axes", "accelerator", i) if i < len(axes.accelerator) else ("include",)
            ck.fail(
                path,
                f"{name} and {seen[tag]} would both make {tag} wheels (same file names); keep one",
                hint="a CUDA X.y wheel serves every torch built for CUDA X, so one toolkit per CUDA major is enough",
            )
        seen.setdefault(tag, name)


def product_cells(axes: Axes, compat: Compat, values: dict | None = None) -> list[Cell]:
    """Every cell of the axes (or of VALUES, an include's axis values over the axes)."""
    values = values or {}
    out = []
    pick = {a: values.get(a, axes.get(a)) for a in AXES}
    for torch, acc, abi_choice, python, platform in itertools.product(
        pick["torch"], pick["accelerator"], pick["cxx11abi"], pick["python"], pick["platform"]
    ):
        abis = compat.torch[torch].cxx11abi if abi_choice == "auto" else (abi_choice,)
        for abi in abis:
            out.append(Cell(torch, python, acc, abi, platform))
    return list(dict.fromkeys(out))


def native_abi(compat: Compat, cell: Cell) -> bool:
    return cell.cxx11abi in compat.torch[cell.torch].cxx11abi


def _no_duplicate_includes(ck: _MatrixChecker, matrix: Matrix, compat: Compat) -> None:
    product = set(product_cells(matrix.axes, compat))
    owner: dict[Cell, Rule] = {}
    excludes = RuleIndex(matrix.excludes)
    for rule in matrix.includes:
        cells = product_cells(matrix.axes, compat, rule.values)
        fresh = 0
        for cell in cells:
            excluded = excludes.first(cell, native_abi(compat, cell)) is not None
            if cell in owner:
                ck.fail(
                    ("include", rule.index),
                    f"{cell.describe()} is already added by {owner[cell].label}",
                )
            if cell not in product or excluded:
                fresh += 1
            owner[cell] = rule
        if not fresh:
            ck.fail(("include", rule.index), "adds nothing: every combination it names is already in the axes")


# ---------------------------------------------------------------------------
# Expansion.


def expand(matrix: Matrix, compat: Compat, profile: Profile | None = None) -> tuple[list[Cell], list[Dropped]]:
    """The buildable cells (sorted) and the dropped ones with the rule that dropped each.

    Order: the axes' product, minus [[exclude]], plus [[include]]; then the
    profile's selection; then the compatibility rules.
    """
    kept: dict[Cell, None] = {}
    dropped: list[Dropped] = []
    accs: dict[str, Accelerator] = {}

    def consider(cell: Cell, excluded_by: Rule | None) -> None:
        native = native_abi(compat, cell)
        if profile is not None and not profile.matches(cell, native):
            return
        if excluded_by is not None:
            why = f"{excluded_by.label}: {excluded_by.reason}" if excluded_by.reason else excluded_by.label
            dropped.append(Dropped(cell, why))
            return
        acc = accs.get(cell.accelerator) or accs.setdefault(cell.accelerator, parse_accelerator(cell.accelerator))
        reason = compat.drop_reason(cell.torch, cell.python, acc, cell.cxx11abi, cell.platform)
        if reason:
            dropped.append(Dropped(cell, reason))
        else:
            kept[cell] = None

    excludes = RuleIndex(matrix.excludes)
    for cell in product_cells(matrix.axes, compat):
        consider(cell, excludes.first(cell, native_abi(compat, cell)))
    for rule in matrix.includes:
        for cell in product_cells(matrix.axes, compat, rule.values):
            if cell not in kept:
                consider(cell, None)
    dropped = list({d.cell: d for d in dropped if d.cell not in kept}.values())
    return sorted(kept, key=Cell.sort_key), sorted(dropped, key=lambda d: d.cell.sort_key())


def toolkit_source_for(matrix: Matrix, compat: Compat, acc: Accelerator) -> str:
    """The toolkit source for ACC: matrix.toml's [toolkit_source], else the data's default."""
    return matrix.toolkit_source.get(acc.name) or compat.toolkit_sources(acc)[0]
