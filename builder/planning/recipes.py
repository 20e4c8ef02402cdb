"""recipes/<project>.toml: how the farm builds one third-party project (source pin, conditions, build env,
conditional patches, tests, extension globs), and what a recipe says for one cell (``supported``,
``decide``, ``explain``, ``inputs``) without the network or the disk. Errors are
:class:`~builder.errors.RecipeError` naming ``file:line: key:``; docs/maintainer/add-recipe.md is the guide.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import RecipeError
from builder.facts.paths import REPO
from builder.facts.spec import ArchivePin, CanaryPin, GitPin, RecipeSource, SdistPin, canary_version
from builder.facts.untrusted import COMMIT_RE, SHA256_RE, Untrusted, git_url, is_web_url
from builder.planning.matrix import ARCH_RE, DIST_RE, RELPATH_RE, SAFE_TEXT, SAFE_TEXT_RE
from builder.planning.tomlcheck import TomlChecker, broken_rule, read_toml, show, type_name
from builder.planning.tomllines import TomlLines

RECIPES_DIR = REPO / "recipes"

KINDS = ("cpu", "cuda", "rocm")
# What a recipe builds: its [source] (a release), or its [canary] (a default branch's head; matrix.toml's
# profiles say source = "canary"). A patch's or an env value's `when = { source = ... }` tells them apart.
SOURCES = ("release", "canary")
PLACEHOLDERS = {
    "label": "the variant's local version label (cu13torch2.14cxx11abiTRUE)",
    "version": "the source's version: the pinned release's (2.3.2.post1), or the canary's (2.3.2.post2.dev9)",
    "cxx11abi": "TRUE or FALSE: the cell's C++ ABI",
    "torch": "the torch release built against (2.14.1)",
    "toolkit": "the CUDA or ROCm version (13.0); empty for cpu",
    "gencode": 'CUDA: the spec\'s archs as a Python list of nvcc flags (["-gencode", "arch=compute_80,code=sm_80"])',
    "cuda_arch_list": "CUDA: the spec's archs as TORCH_CUDA_ARCH_LIST (8.0;9.0)",
    "offload_arch": 'ROCm: the spec\'s archs as a Python list of hipcc flags (["--offload-arch=gfx90a"])',
}
# Placeholders only a cell of one accelerator kind has a value for.
PLACEHOLDER_KIND = {"gencode": "cuda", "cuda_arch_list": "cuda", "offload_arch": "rocm"}
PLACEHOLDER_RE = re.compile(r"\$\{([^}]*)\}")
ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")
PATCH_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,59}")
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
API_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")  # module.Name
GLOB_RE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_*?.\[\]/-]{1,200}")
ARGV_ITEM_RE = re.compile(r"[^\x00]{0,2000}")
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of TOML; 1 MiB is generous, and loads in milliseconds

# Names a recipe may neither set nor unset: they steer the build's own machinery, not the project's setup.py.
# The shell (build.sh and the docker executor's `bash -c` read BASH_ENV/ENV at start; PATH picks the bash the
# host executor runs), the dynamic loader, the interpreters, pip and uv (the torch install into the shared
# torch volume), the farm's own settings (FARM_*: build.sh's torch requirement, its pip arguments, the unset
# list), the shared caches (the kernel cache, ccache), the toolkit the farm chose, TLS trust and proxies.
DENIED_ENV = frozenset({
    "BASH_ENV", "ENV", "PATH", "SHELL", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
    "GLOBIGNORE", "HOME", "TMPDIR", "TMP", "TEMP", "PWD", "OLDPWD", "MAX_JOBS", "CUDA_HOME", "CUDA_PATH",
    "ROCM_HOME", "ROCM_PATH", "HIP_PATH", "PYTORCH_NVCC", "TORCH_NO_COMPILER_WRAPPER", "MAMBA_KERNEL_CACHE",
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "GCONV_PATH", "LOCPATH", "HOSTALIASES",
    "RESOLV_HOST_CONF", "NODE_OPTIONS", "PERL5OPT", "PERL5LIB", "RUBYOPT", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY",
})  # fmt: skip
DENIED_ENV_PREFIXES = (
    "LD_", "PIP_", "PYTHON", "UV_", "FARM_", "MAMBA_FARM_", "BASH_FUNC_", "DYLD_", "CCACHE_", "SSL_", "XDG_",
    "GIT_", "DOCKER_", "VIRTUAL_ENV", "CONDA_",
)  # fmt: skip


def denied_env(name: str) -> bool:
    """Whether a recipe may not set or unset ``name`` (:data:`DENIED_ENV`, :data:`DENIED_ENV_PREFIXES`)."""
    return name in DENIED_ENV or name.startswith(DENIED_ENV_PREFIXES)


# ---------------------------------------------------------------------------
# The validated recipe.


@dataclass(frozen=True)
class CellFacts:
    """What a recipe may ask about the build it serves: conditions read the first four, the kernel set, the source
    and the release; placeholders all."""

    torch: str  # the release built against: "2.14.1"
    kind: str  # "cpu" | "cuda" | "rocm"
    toolkit: str | None  # "13.0" | "6.2" | None for cpu
    cxx11abi: bool
    archs: tuple[str, ...] = ()  # ("sm_80",) or ("gfx90a",); () for cpu
    label: str = ""  # the variant's local version label: "cu13torch2.14cxx11abiTRUE"
    trim: bool = False  # the profile asks for the recipe's trimmed kernel set (its patches with when.trim)
    source: str = "release"  # SOURCES: the recipe's [source], or its [canary] (the profile's source)
    # The version of the source built (2.2.5; a canary's 2.3.2.post2.dev9): what `when.release` reads. Empty: the
    # recipe's own source's, filled in by every function here that takes the recipe (:func:`for_recipe`).
    release: str = ""

    @classmethod
    def from_spec(cls, spec) -> CellFacts:
        """The facts of a :class:`builder.facts.spec.BuildSpec`."""
        kind = "cpu" if spec.accelerator == "cpu" else ("rocm" if spec.accelerator.startswith("hip") else "cuda")
        source = "canary" if spec.source.startswith("canary:") else "release"
        return cls(spec.torch_version, kind, spec.toolkit, spec.cxx11abi, tuple(spec.archs), spec.label, spec.trim,
                   source)  # fmt: skip

    def describe(self) -> str:
        acc = f"{self.kind} {self.toolkit}" if self.toolkit else self.kind
        archs = f" [{', '.join(self.archs)}]" if self.archs else ""
        trim = " (trimmed kernels)" if self.trim else ""
        canary = " (canary)" if self.source == "canary" else ""
        release = f"release {self.release} x " if self.release else ""
        return f"{release}torch {self.torch} x {acc}{archs} x cxx11abi={'TRUE' if self.cxx11abi else 'FALSE'}{trim}{canary}"


@dataclass(frozen=True)
class Condition:
    torch: SpecifierSet | None = None
    cuda: SpecifierSet | None = None
    rocm: SpecifierSet | None = None
    accelerator: tuple[str, ...] = ()
    cxx11abi: bool | None = None
    trim: bool | None = None  # patches only: a trimmed (CI) build, or a full one
    source: str | None = None  # patches and env values only: "release" or "canary" (SOURCES)
    # patches and env values only: the versions of the source they are for ("<2.1"; a canary is its .devN version)
    release: SpecifierSet | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The accelerator kinds this condition can match: the listed ones, narrowed to those a specifier names."""
        kinds = set(self.accelerator or KINDS)
        named = {k for k in ("cuda", "rocm") if getattr(self, k) is not None}
        if named:
            kinds &= named
        return tuple(k for k in KINDS if k in kinds)

    def check(self, facts: CellFacts) -> tuple[bool, list[str]]:
        """(matches, reasons): one reason per clause, saying how the cell meets or misses it."""
        reasons: list[str] = []
        ok = True

        def clause(good: bool, text: str) -> None:
            nonlocal ok
            ok = ok and good
            reasons.append(text)

        kinds = self.kinds
        if kinds != KINDS:
            good = facts.kind in kinds
            clause(good, f"accelerator {facts.kind} {'is' if good else 'is not'} {'/'.join(kinds)}")
        spec = getattr(self, facts.kind, None) if facts.kind in ("cuda", "rocm") else None
        if spec is not None and facts.kind in kinds:
            good = spec.contains(facts.toolkit or "0", prereleases=True)
            clause(good, f"{facts.kind} {facts.toolkit} {'matches' if good else 'does not match'} {spec}")
        if self.torch is not None:
            good = self.torch.contains(facts.torch, prereleases=True)
            clause(good, f"torch {facts.torch} {'matches' if good else 'does not match'} {self.torch}")
        if self.cxx11abi is not None:
            good = facts.cxx11abi == self.cxx11abi
            clause(good, f"cxx11abi {'TRUE' if facts.cxx11abi else 'FALSE'} {'is' if good else 'is not'} "
                         f"{'TRUE' if self.cxx11abi else 'FALSE'}")  # fmt: skip
        if self.trim is not None:
            good = facts.trim == self.trim
            built, wanted = ("trimmed" if t else "full" for t in (facts.trim, self.trim))
            clause(
                good,
                f"the build is {built}" + ("" if good else f", not {wanted}") + f" (trim = {str(self.trim).lower()})",
            )
        if self.source is not None:
            good = facts.source == self.source
            clause(good, f"the source is {'the ' if good else 'not the '}{self.source}"
                         + ("" if good else f" (this build's is the {facts.source})"))  # fmt: skip
        if self.release is not None:
            if not facts.release:
                clause(False, f"the release built is not known, and this is for releases {self.release}")
            else:
                good = self.release.contains(facts.release, prereleases=True)
                clause(good, f"release {facts.release} {'matches' if good else 'does not match'} {self.release}")
        if not reasons:
            reasons.append("always")
        return ok, reasons


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str
    count: int  # how many times search must occur (all are replaced)


@dataclass(frozen=True)
class Patch:
    name: str
    why: str
    file: str  # relative to the sdist's top folder
    when: Condition
    edits: tuple[Edit, ...]
    line: int | None  # where [[patch]] starts in the recipe

    def placeholders(self) -> set[str]:
        return {m for e in self.edits for m in PLACEHOLDER_RE.findall(e.replace)}


@dataclass(frozen=True)
class EnvValue:
    """One value a [build.env] variable may take: its template and the cells it is for (a patch's ``when``)."""

    template: str
    when: Condition = Condition()


@dataclass(frozen=True)
class Release:
    """One [[release]] of a recipe: a version PyPI holds, its sdist's sha256 (the release's identity), the day it
    was uploaded, and the source the farm builds it from: that sdist, or the release tag's commit where the sdist
    holds no kernel sources."""

    version: str
    sha256: str
    uploaded: str  # YYYY-MM-DD, from the simple index's upload-time
    source: RecipeSource
    line: int | None = None
    prebuilt: bool = False  # every release build prebuilds it; else it is built on request (the [source] always is)


def _version_or_none(text: str) -> Version | None:
    try:
        return Version(text)
    except (InvalidVersion, TypeError):
        return None


@dataclass(frozen=True)
class Recipe:
    path: Path
    name: str  # canonical distribution name ("causal-conv1d")
    summary: str
    source: SdistPin
    requires: Condition
    requires_why: str
    env: dict  # name -> (EnvValue, ...): the first whose ``when`` the cell meets is set; none met, none set
    unset: tuple[str, ...]
    patches: tuple[Patch, ...]
    imports: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...]
    extensions: tuple[str, ...]  # globs inside the wheel
    digest: str  # sha256 of the recipe file: part of a build's inputs
    api: tuple[str, ...] = ()  # public names the smoke test imports (``causal_conv1d.causal_conv1d_fn``)
    deps: bool = False  # the smoke test installs the wheel's Requires-Dist (torch aside) before importing
    canary: CanaryPin | None = None  # [canary]: the default branch's head a canary profile builds
    # [test] numerics: commands that check numerics against a reference, run after ``commands``; each prints
    # ``numerics {"check", "max_abs_error", "tolerance"}`` lines, which make the wheel's record cpu-checked
    numerics: tuple[tuple[str, ...], ...] = ()
    release: RecipeSource | None = None  # the [source] a canary recipe (``at("canary")``) stands in for
    releases: tuple[Release, ...] = ()  # [[release]]: every release PyPI holds, oldest first

    def at_release(self, version: str) -> Recipe:
        """The recipe building release VERSION of [[release]] (its sdist, or its tag's commit where the sdist
        holds no kernel sources); RecipeError naming the releases when there is none of that version."""
        wanted = _version_or_none(version)
        for rel in self.releases:
            if wanted is not None and Version(rel.version) == wanted:
                return replace(self, source=rel.source)
        known = ", ".join(r.version for r in self.releases) or "none"
        raise RecipeError(f"{self.path}: no release {show(version)} of {self.name} (releases: {known})",
                          hint="`python -m builder drift --write` adds the releases PyPI holds")  # fmt: skip

    def where(self, line: int | None) -> str:
        return f"{self.path}:{line}" if line else str(self.path)

    def at(self, source: str) -> Recipe:
        """The recipe building SOURCE (SOURCES): itself for "release", its [canary] pin as its source for
        "canary" (RecipeError when it has none)."""
        if source == "release":
            return self
        if source != "canary":
            raise RecipeError(f"{self.path}: no source {source!r} (valid: {', '.join(SOURCES)})")
        if self.canary is None:
            raise RecipeError(f"{self.path}: no [canary] table: a canary profile builds a recipe's [canary] pin",
                              hint="add [canary] (git, branch, commit, release, distance): docs/maintainer/canary.md")  # fmt: skip
        return replace(self, source=self.canary, release=self.source)


# ---------------------------------------------------------------------------
# Loading and validation.


class _RecipeChecker(TomlChecker):
    error = RecipeError

    def __init__(self, path: Path, lines: TomlLines, data: dict) -> None:
        super().__init__(path, lines)
        self.data = data

    def line(self, path: tuple) -> int | None:
        # TomlLines numbers [[patch.edit]] tables across the whole file: ("patch", "edit", k).
        if len(path) >= 4 and path[0] == "patch" and path[2] == "edit" and isinstance(path[3], int):
            patches = self.data.get("patch", [])
            before = sum(len(p.get("edit", [])) for p in patches[: path[1]] if isinstance(p, dict))
            found = self.lines.line(("patch", "edit", before + path[3], *path[4:]))
            if found is not None:
                return found
        return self.lines.line(path)

    def array(self, value: Any, path: tuple, *, empty_ok: bool = True) -> list:
        if not isinstance(value, list):
            self.fail(path, f"must be an array, got {type_name(value)} {show(value)}")
        if not value and not empty_ok:
            self.fail(path, "is empty; give at least one value")
        return value

    def boolean(self, value: Any, path: tuple) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {type_name(value)} {show(value)}")
        return value

    def specifier(self, value: Any, path: tuple) -> SpecifierSet:
        text = self.string(
            value, path, re.compile(r"[0-9A-Za-z.*,<>=!~ ]{1,100}"), 'a version specifier such as ">=2.14"'
        )
        try:
            return SpecifierSet(text)
        except InvalidSpecifier:
            self.fail(path, f'{show(text)} is not a version specifier (write ">=2.14", "<13", ">=12.8,<13")')

    def placeholders(self, text: str, path: tuple, kinds: tuple[str, ...], restrict=None) -> None:
        """Every ``${name}`` in TEXT is known and has a value in every cell of KINDS. RESTRICT(kind): the hint
        that narrows the place TEXT is in to that kind (a patch's ``when`` by default, an env value's)."""
        for name in PLACEHOLDER_RE.findall(text):
            if name not in PLACEHOLDERS:
                close = difflib.get_close_matches(name, list(PLACEHOLDERS), n=1)
                mean = f'; did you mean "${{{close[0]}}}"?' if close else ""
                self.fail(path, f"unknown placeholder ${{{name}}}{mean} (valid: "
                                + ", ".join(f"${{{p}}}" for p in PLACEHOLDERS) + ")")  # fmt: skip
            need = PLACEHOLDER_KIND.get(name)
            if need and kinds != (need,):
                self.fail(
                    path,
                    f"${{{name}}} only has a value for {need} cells, but this can apply to {'/'.join(kinds)} cells",
                    hint=(restrict or patch_restrict)(need),
                )


# How a place holding a kind-specific placeholder is narrowed to that kind: one `when` syntax for both.
def patch_restrict(kind: str) -> str:
    return f'restrict the patch: when = {{ accelerator = ["{kind}"] }}'


def env_restrict(name: str, value: str):
    return lambda kind: (
        f'restrict the value: {name} = [{{ when = {{ accelerator = ["{kind}"] }}, value = {json.dumps(value)} }}]'
    )


def _condition(ck: _RecipeChecker, value: Any, path: tuple, extra: tuple = (), trim_ok: bool = False,
               source_ok: bool = False) -> Condition:
    """A [requires] table or a patch's ``when``; only a patch may ask for ``trim`` (a build's kernel set, which
    the profile picks, is no reason to refuse a cell), and only a patch or an env value for ``source`` and
    ``release`` (which release a cell builds is the plan's choice, never a reason to refuse the cell)."""
    table = ck.table(value, path)
    ck.keys(table, path, ("torch", "cuda", "rocm", "accelerator", "cxx11abi", *(("trim",) if trim_ok else ()),
                          *(("source", "release") if source_ok else ()), *extra))  # fmt: skip
    if "source" in table and table["source"] not in SOURCES:
        valid = ", ".join(f'"{k}"' for k in SOURCES)
        ck.fail(path + ("source",), f"{show(table['source'])} is not a source (valid: {valid})")
    accelerator: tuple[str, ...] = ()
    if "accelerator" in table:
        items = ck.array(table["accelerator"], path + ("accelerator",), empty_ok=False)
        for i, item in enumerate(items):
            if item not in KINDS:
                ck.fail(
                    path + ("accelerator", i), f"{show(item)} is not an accelerator kind (valid: {', '.join(KINDS)})"
                )
        accelerator = tuple(k for k in KINDS if k in items)
    cxx11abi = table.get("cxx11abi")
    if cxx11abi is not None and not isinstance(cxx11abi, bool):
        ck.fail(path + ("cxx11abi",), f"must be true or false, got {type_name(cxx11abi)} {show(cxx11abi)}")
    cond = Condition(
        torch=ck.specifier(table["torch"], path + ("torch",)) if "torch" in table else None,
        cuda=ck.specifier(table["cuda"], path + ("cuda",)) if "cuda" in table else None,
        rocm=ck.specifier(table["rocm"], path + ("rocm",)) if "rocm" in table else None,
        accelerator=accelerator,
        cxx11abi=cxx11abi,
        trim=ck.boolean(table["trim"], path + ("trim",)) if "trim" in table else None,
        source=table.get("source"),
        release=ck.specifier(table["release"], path + ("release",)) if "release" in table else None,
    )
    if not cond.kinds:
        ck.fail(path, "matches no cell: its accelerator kinds and its cuda/rocm specifiers exclude each other")
    for kind in ("cuda", "rocm"):
        if getattr(cond, kind) is not None and accelerator and kind not in accelerator:
            ck.fail(path + (kind,), f"names {kind}, but accelerator = {list(accelerator)} leaves {kind} out")
    return cond


def _source(ck: _RecipeChecker, value: Any) -> RecipeSource:
    """[source]: a PyPI sdist (name, version, sha256), an archive URL (name, version, url, sha256) or a git
    repository at a full commit (name, version, git, commit); which one is said by the keys given."""
    path = ("source",)
    table = ck.table(value, path)
    ck.keys(table, path, ("name", "version", "sha256", "url", "git", "commit"), required=("name", "version"))
    name = ck.string(table["name"], path + ("name",), DIST_RE, "a distribution name")
    version = ck.string(table["version"], path + ("version",), re.compile(r"[0-9A-Za-z.!+_-]{1,60}"), "a version")
    try:
        Version(version)
    except InvalidVersion:
        ck.fail(path + ("version",), f"{show(version)} is not a PEP 440 version")
    if "git" in table:
        for other in ("url", "sha256"):
            if other in table:
                ck.fail(path + (other,), f"a git source takes a commit, not {other}",
                        hint="give either git + commit, or url + sha256 (an archive), or sha256 alone (a PyPI sdist)")  # fmt: skip
        if "commit" not in table:
            ck.fail(path + ("git",), "a git source needs its commit too",
                    hint="add commit = the full 40-digit hash (`git ls-remote <url> refs/tags/<tag>` prints it)")  # fmt: skip
        url, commit = _git_commit(ck, table, path, "a branch, tag or short hash can move or collide; "
                                  "`git rev-parse <tag>^{commit}` prints the full one")  # fmt: skip
        return GitPin(name, version, url, commit)
    if "commit" in table:
        ck.fail(path + ("commit",), "a commit belongs to a git source", hint="add git = the repository's https URL")
    sha = table.get("sha256")
    if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
        ck.fail(path + ("sha256",), f"{show(sha)} is not a sha256 (64 lowercase hex digits)",
                hint="take it from the index's simple API or `sha256sum` of the reviewed file")  # fmt: skip
    if "url" in table:
        url = table["url"]
        if not is_web_url(url) or "@" in url.split("/")[2]:
            ck.fail(path + ("url",), f"{show(url)} is not an http(s) URL without a user name",
                    hint="the archive's https URL, e.g. https://github.com/<owner>/<repo>/archive/refs/tags/<tag>.tar.gz")  # fmt: skip
        return ArchivePin(name, version, sha, url)
    return SdistPin(name, version, sha)


def _git_commit(ck: _RecipeChecker, table: dict, path: tuple, commit_hint: str) -> tuple[str, str]:
    """A git pin's repository URL and full commit, checked ([source] and [canary] alike)."""
    try:
        url = git_url(table["git"])
    except Untrusted as err:
        ck.fail(path + ("git",), str(err), hint="write the repository's https URL (https://github.com/<owner>/<repo>.git)")
    commit = table["commit"]
    if not isinstance(commit, str) or not COMMIT_RE.fullmatch(commit):
        ck.fail(path + ("commit",), f"{show(commit)} is not a full commit hash (40 lowercase hex digits)",
                hint=commit_hint)  # fmt: skip
    return url, commit


def _canary(ck: _RecipeChecker, value: Any, source: RecipeSource) -> CanaryPin:
    """[canary]: the default branch's head, as a git source pinned by its commit, with the release tag it descends
    from and its distance from it (``git describe``), which make its version (:func:`canary_version`)."""
    path = ("canary",)
    table = ck.table(value, path)
    ck.keys(table, path, ("git", "branch", "commit", "release", "distance"),
            required=("git", "branch", "commit", "release", "distance"))  # fmt: skip
    url, commit = _git_commit(ck, table, path,
                              "`python -m builder drift --write` moves it to the branch's head with its release and distance")  # fmt: skip
    branch = ck.string(table["branch"], path + ("branch",), re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}"),
                       "a branch name (main)")  # fmt: skip
    if ".." in branch or branch.endswith((".lock", "/", ".")):
        ck.fail(path + ("branch",), f"{show(branch)} is not a branch name git accepts")
    release = ck.string(table["release"], path + ("release",), re.compile(r"[0-9A-Za-z.!_-]{1,60}"), "a version")
    distance = table["distance"]
    if type(distance) is not int or not 1 <= distance <= 1_000_000:
        ck.fail(path + ("distance",), f"must be the number of commits since the release (1 or more), got {show(distance)}",
                hint="a commit at the release tag itself is the release: build its [source]")  # fmt: skip
    try:
        version = canary_version(release, distance)
    except (InvalidVersion, ValueError):
        ck.fail(path + ("release",), f"{show(release)} is not a release's PEP 440 version (no .dev, no +label)")
    return CanaryPin(source.name, version, url, commit, branch, release, distance)


def _releases(ck: _RecipeChecker, value: Any, source: RecipeSource) -> tuple[Release, ...]:
    """[[release]]: every release, oldest first, each once; [source] (the default build) must be one of them."""
    out: list[Release] = []
    for i, table in enumerate(ck.array(value, ("release",))):
        path = ("release", i)
        table = ck.table(table, path)
        allowed = ("version", "sha256", "uploaded", "git", "commit", "prebuilt")
        ck.keys(table, path, allowed, required=("version", "sha256", "uploaded"))
        version = ck.string(table["version"], path + ("version",), re.compile(r"[0-9A-Za-z.!_-]{1,60}"), "a version")
        parsed = _version_or_none(version)
        if parsed is None or parsed.local is not None or parsed.is_devrelease:
            ck.fail(path + ("version",), f"{show(version)} is not a release's PEP 440 version (no .dev, no +label)")
        if out and parsed <= Version(out[-1].version):
            ck.fail(path + ("version",), f"{version} comes after {out[-1].version}: list releases once each, oldest first")
        sha = table["sha256"]
        if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            ck.fail(path + ("sha256",), f"{show(sha)} is not a sha256 (64 lowercase hex digits)",
                    hint="take it from the index's simple API (`python -m builder drift --write` does)")  # fmt: skip
        uploaded = ck.string(table["uploaded"], path + ("uploaded",), re.compile(r"\d{4}-\d{2}-\d{2}"), "a day (YYYY-MM-DD)")
        if "git" in table or "commit" in table:
            if "git" not in table or "commit" not in table:
                ck.fail(path + ("git" if "git" not in table else "commit",), "a release built from git takes both git and commit")
            url, commit = _git_commit(ck, table, path, "`git rev-parse v<version>^{commit}` prints the tag's full commit")
            built: RecipeSource = GitPin(source.name, version, url, commit)
        else:
            built = SdistPin(source.name, version, sha)
        prebuilt = ck.boolean(table.get("prebuilt", False), path + ("prebuilt",))
        out.append(Release(version, sha, uploaded, built, ck.line(path), prebuilt))
    if out and isinstance(source, SdistPin):
        same = [r for r in out if Version(r.version) == Version(source.version)]
        if not same or same[0].sha256 != source.sha256:
            ck.fail(("source",), f"[source] {source.version} (sha256 {source.sha256[:12]}…) is not one of the [[release]] tables",
                    hint="[source] is the release built by default: copy its version and sha256 from its [[release]]")  # fmt: skip
    return tuple(out)


def _patches(ck: _RecipeChecker, value: Any, requires: Condition) -> tuple[Patch, ...]:
    out: list[Patch] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(ck.array(value, ("patch",))):
        path = ("patch", i)
        table = ck.table(raw, path)
        ck.keys(table, path, ("name", "why", "when", "file", "edit"), required=("name", "why", "file", "edit"))
        name = ck.string(table["name"], path + ("name",), PATCH_NAME_RE, "a patch name (lowercase, digits, - _ .)")
        if name in seen:
            ck.fail(path + ("name",), f"patch {show(name)} is named twice (first: patch #{seen[name] + 1})")
        seen[name] = i
        why = ck.string(table["why"], path + ("why",), SAFE_TEXT_RE, SAFE_TEXT)
        file = ck.string(table["file"], path + ("file",), RELPATH_RE, "a relative path inside the sdist")
        when = _condition(ck, table.get("when", {}), path + ("when",), trim_ok=True, source_ok=True)
        kinds = tuple(k for k in when.kinds if k in requires.kinds)
        if not kinds:
            ck.fail(path + ("when",), f"can never apply: [requires] allows only {'/'.join(requires.kinds)} cells")
        edits: list[Edit] = []
        for j, e in enumerate(ck.array(table["edit"], path + ("edit",), empty_ok=False)):
            epath = path + ("edit", j)
            et = ck.table(e, epath)
            ck.keys(et, epath, ("search", "replace", "count"), required=("search", "replace"))
            for key in ("search", "replace"):
                if not isinstance(et[key], str):
                    ck.fail(epath + (key,), f"must be a string, got {type_name(et[key])} {show(et[key])}")
            if not et["search"]:
                ck.fail(epath + ("search",), "is empty: say exactly which text to replace")
            if PLACEHOLDER_RE.search(et["search"]):
                ck.fail(epath + ("search",), "placeholders are for replace only: search is matched literally")
            ck.placeholders(et["replace"], epath + ("replace",), kinds)
            count = et.get("count", 1)
            if type(count) is not int or count < 1:
                ck.fail(epath + ("count",), f"must be a positive integer, got {show(count)}")
            edits.append(Edit(et["search"], et["replace"], count))
        out.append(Patch(name, why, file, when, tuple(edits), ck.line(path)))
    return tuple(out)


def _env_text(ck: _RecipeChecker, value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not SAFE_TEXT_RE.fullmatch(value):
        rule = broken_rule(value, SAFE_TEXT_RE) if isinstance(value, str) else ""
        ck.fail(path, f"must be {SAFE_TEXT}, got {type_name(value)} {show(value)}{rule}")
    return value


def _env_values(ck: _RecipeChecker, name: str, value: Any, requires: Condition) -> tuple[EnvValue, ...]:
    """[build.env] NAME: one line of text for every cell, or an array of ``{ when = {...}, value = "..." }``
    (``when`` as a patch's), the first whose ``when`` the cell meets giving the value."""
    path = ("build", "env", name)
    ck.string(name, path, ENV_NAME_RE, "an environment variable name (A-Z, 0-9, _)")
    _allowed_name(ck, name, path)
    if not isinstance(value, list):
        text = _env_text(ck, value, path)
        ck.placeholders(text, path, requires.kinds, env_restrict(name, text))
        return (EnvValue(text),)
    out = []
    for i, entry in enumerate(ck.array(value, path, empty_ok=False)):
        epath = path + (i,)
        table = ck.table(entry, epath)
        ck.keys(table, epath, ("when", "value"), required=("value",))
        when = _condition(ck, table.get("when", {}), epath + ("when",), source_ok=True)
        kinds = tuple(k for k in when.kinds if k in requires.kinds)
        if not kinds:
            ck.fail(epath + ("when",), f"can never apply: [requires] allows only {'/'.join(requires.kinds)} cells")
        text = _env_text(ck, table["value"], epath + ("value",))
        ck.placeholders(
            text, epath + ("value",), kinds, lambda k: f'narrow this entry: when = {{ accelerator = ["{k}"] }}'
        )
        out.append(EnvValue(text, when))
    return tuple(out)


def for_recipe(recipe: Recipe, facts: CellFacts) -> CellFacts:
    """FACTS with the release the recipe builds (its source's version) where they name none."""
    return facts if facts.release else replace(facts, release=recipe.source.version)


def env_template(recipe: Recipe, name: str, facts: CellFacts) -> str | None:
    """The template NAME takes for this cell: the first of its values whose ``when`` the cell meets (None: unset)."""
    facts = for_recipe(recipe, facts)
    return next((v.template for v in recipe.env[name] if v.when.check(facts)[0]), None)


def _allowed_name(ck: _RecipeChecker, name: str, path: tuple) -> None:
    if denied_env(name):
        ck.fail(
            path,
            f"{name} steers the farm's own build machinery (the shell, loader, interpreters, pip, the farm's "
            "settings, shared caches, toolkit, TLS or proxies), not the project's setup.py: a recipe may not set "
            "or unset it",
            hint="set only the variables the project's setup.py reads (e.g. MAMBA_FORCE_BUILD)",
        )


def _refuse_odd_file(path: Path) -> None:
    """A recipe path that is not a regular file, or is larger than a recipe's cap, refused before it is read."""
    try:
        st = path.stat()
    except OSError:
        return  # read_toml says what is wrong
    if not stat.S_ISREG(st.st_mode):
        raise RecipeError(f"{path}: not a regular file", hint="a recipe is a TOML file")
    if st.st_size > MAX_RECIPE_BYTES:
        raise RecipeError(
            f"{path}: {st.st_size >> 10} KiB, more than a recipe's cap of {MAX_RECIPE_BYTES >> 10} KiB",
            hint="a recipe is a page of TOML: source, env, patches, tests",
        )


def _build_env(ck: _RecipeChecker, build: dict, requires) -> tuple[dict, tuple[str, ...]]:
    """[build]: the environment it sets (each value for every cell) and the names it unsets."""
    ck.keys(build, ("build",), ("env", "unset"))
    env = {key: _env_values(ck, key, val, requires)
           for key, val in ck.table(build.get("env", {}), ("build", "env")).items()}  # fmt: skip
    unset: list[str] = []
    for i, item in enumerate(ck.array(build.get("unset", []), ("build", "unset"))):
        ck.string(item, ("build", "unset", i), ENV_NAME_RE, "an environment variable name")
        _allowed_name(ck, item, ("build", "unset", i))
        if item in env:
            ck.fail(("build", "unset", i), f"{item} is also set in [build.env]")
        unset.append(item)
    return env, tuple(unset)


def _tests(ck: _RecipeChecker, test: dict) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, ...], ...],
                                                     tuple[tuple[str, ...], ...]]:
    """[test]: the modules to import, the public names to find, the commands to run, and the commands that check
    numerics against a reference (``numerics``: each prints ``numerics {...}`` lines, builder/verifying/smoke.py)."""
    ck.keys(test, ("test",), ("imports", "api", "commands", "numerics", "deps"), required=("imports",))
    imports = tuple(
        ck.string(m, ("test", "imports", i), MODULE_RE, "a module name")
        for i, m in enumerate(ck.array(test["imports"], ("test", "imports"), empty_ok=False))
    )
    api = tuple(
        ck.string(m, ("test", "api", i), API_RE, "a public name as module.Name (causal_conv1d.causal_conv1d_fn)")
        for i, m in enumerate(ck.array(test.get("api", []), ("test", "api")))
    )
    lists = {}
    for key in ("commands", "numerics"):
        argvs = []
        for i, argv in enumerate(ck.array(test.get(key, []), ("test", key))):
            items = ck.array(argv, ("test", key, i), empty_ok=False)
            argvs.append(tuple(ck.string(a, ("test", key, i, j), ARGV_ITEM_RE, "an argument")
                               for j, a in enumerate(items)))  # fmt: skip
        lists[key] = tuple(argvs)
    return imports, api, lists["commands"], lists["numerics"]


def _extensions(ck: _RecipeChecker, verify: object) -> tuple[str, ...]:
    """[verify]: the globs of the extension modules the audits read."""
    verify = ck.table(verify, ("verify",))
    ck.keys(verify, ("verify",), ("extensions",), required=("extensions",))
    return tuple(
        ck.string(g, ("verify", "extensions", i), GLOB_RE, "a glob inside the wheel (selective_scan_cuda*.so)")
        for i, g in enumerate(ck.array(verify["extensions"], ("verify", "extensions"), empty_ok=False))
    )


def load_recipe(path: Path) -> Recipe:
    """Read and validate recipes/<project>.toml. Raises RecipeError on any problem."""
    path = Path(path)
    _refuse_odd_file(path)
    text, data = read_toml(path, RecipeError, "no such recipe", f"recipes live in {RECIPES_DIR}/<project>.toml")
    ck = _RecipeChecker(path, TomlLines(text), data)
    ck.keys(data, (), ("project", "source", "canary", "release", "requires", "build", "patch", "test", "verify"),
            required=("project", "source", "build", "test", "verify"))  # fmt: skip

    project = ck.table(data["project"], ("project",))
    ck.keys(project, ("project",), ("name", "summary"), required=("name",))
    name = ck.string(project["name"], ("project", "name"), DIST_RE, "a distribution name")
    if canonicalize_name(name) != name:
        ck.fail(("project", "name"), f"write the canonical name {show(canonicalize_name(name))}")
    if path.stem != name:
        ck.fail(("project", "name"), f"{show(name)} must match the file name ({path.name})",
                hint=f"rename the file to {name}.toml")  # fmt: skip
    summary = ck.string(project.get("summary", ""), ("project", "summary"), SAFE_TEXT_RE, SAFE_TEXT)
    source = _source(ck, data["source"])
    if source.project != name:
        ck.fail(("source", "name"), f"the source {show(source.name)} is not the project {show(name)}")
    canary = _canary(ck, data["canary"], source) if "canary" in data else None
    releases = _releases(ck, data.get("release", []), source)

    req = ck.table(data.get("requires", {}), ("requires",))
    requires = _condition(ck, req, ("requires",), extra=("why",))
    requires_why = ck.string(req.get("why", ""), ("requires", "why"), SAFE_TEXT_RE, SAFE_TEXT)

    env, unset = _build_env(ck, ck.table(data["build"], ("build",)), requires)

    patches = _patches(ck, data.get("patch", []), requires)

    test = ck.table(data["test"], ("test",))
    imports, api, commands, numerics = _tests(ck, test)
    extensions = _extensions(ck, data["verify"])
    return Recipe(
        path=path,
        name=name,
        summary=summary,
        source=source,
        requires=requires,
        requires_why=requires_why,
        env=env,
        unset=unset,
        patches=patches,
        imports=imports,
        api=api,
        deps=ck.boolean(test.get("deps", False), ("test", "deps")),
        commands=commands,
        numerics=numerics,
        extensions=extensions,
        digest=hashlib.sha256(text.encode("utf-8")).hexdigest(),  # the file's bytes (valid UTF-8 round-trips)
        canary=canary,
        releases=releases,
    )


def load_recipes(folder: Path = RECIPES_DIR) -> dict[str, Recipe]:
    """Every recipes/*.toml, by project name."""
    return {r.name: r for r in (load_recipe(p) for p in sorted(Path(folder).glob("*.toml")))}


def recipe_for(name: str, folder: Path = RECIPES_DIR) -> Recipe:
    """The recipe of one project (any spelling of its name)."""
    canonical = canonicalize_name(name)
    path = Path(folder) / f"{canonical}.toml"
    if not path.exists():  # (a FIFO or a folder of that name: load_recipe says what it is)
        known = sorted(p.stem for p in Path(folder).glob("*.toml"))
        close = difflib.get_close_matches(canonical, known, n=1)
        mean = f'; did you mean "{close[0]}"?' if close else ""
        raise RecipeError(f"no recipe for {show(name)}{mean} (recipes: {', '.join(known) or 'none'})",
                          hint=f"add {path}")  # fmt: skip
    return load_recipe(path)


# ---------------------------------------------------------------------------
# What a recipe says for one cell, known without fetching or unpacking anything: the plan reads it (which
# cells a recipe serves, its builds' inputs hash, --explain), builder.sourcing.prepare applies it.
#
# Placeholders: the cell's facts, in the forms setup.py files want them.


def _cuda_sm(arch: str) -> tuple[str, str]:
    """sm_90a -> ("90a", "9.0a"): the compute/sm suffix and the TORCH_CUDA_ARCH_LIST form."""
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not m:
        raise RecipeError(f"{arch!r} is not a CUDA arch such as sm_80")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}", f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def placeholder_values(facts: CellFacts, version: str = "") -> dict[str, str]:
    """``${name}`` -> text for this cell (VERSION: the recipe's source's). Arch-list placeholders exist only for
    cells of their kind."""
    for arch in facts.archs:
        prefixes = {"cuda": ("sm_", "compute_"), "rocm": ("gfx",)}.get(facts.kind, ())
        bare = arch.replace("compute_", "sm_", 1) if arch.startswith("compute_") else arch
        if not ARCH_RE.fullmatch(bare) or not arch.startswith(prefixes):
            raise RecipeError(f"{facts.describe()}: {arch!r} is not a {facts.kind} architecture")
    values = {
        "label": facts.label,
        "cxx11abi": "TRUE" if facts.cxx11abi else "FALSE",
        "torch": facts.torch,
        "toolkit": facts.toolkit or "",
        "version": version,
    }
    if facts.kind in ("cuda", "rocm") and not facts.archs:
        raise RecipeError(f"{facts.describe()}: a {facts.kind} build needs its architectures (none given)")
    if facts.kind == "cuda":
        # sm_XY: SASS; compute_XY: PTX of that arch as well (a miscompiled arch's stand-in: builder/facts/miscompiles.py)
        sms = [_cuda_sm(a) for a in facts.archs if a.startswith("sm_")]
        ptx = [_cuda_sm(a.replace("compute_", "sm_", 1)) for a in facts.archs if a.startswith("compute_")]
        flags = [f for sm, _ in sms for f in ("-gencode", f"arch=compute_{sm},code=sm_{sm}")]
        flags += [f for sm, _ in ptx for f in ("-gencode", f"arch=compute_{sm},code=compute_{sm}")]
        values["gencode"] = json.dumps(flags)
        with_ptx = {dotted for _, dotted in ptx}
        listed = [dotted + ("+PTX" if dotted in with_ptx else "") for _, dotted in sms]
        listed += [f"{dotted}+PTX" for _, dotted in ptx if dotted not in {d for _, d in sms}]
        values["cuda_arch_list"] = ";".join(listed)
    elif facts.kind == "rocm":
        values["offload_arch"] = json.dumps([f"--offload-arch={a}" for a in facts.archs])
    return values


def render(template: str, values: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        if m.group(1) not in values:  # the loader only lets kind-specific ones into patches of that kind
            raise RecipeError(f"${{{m.group(1)}}} has no value for this cell")
        return values[m.group(1)]

    return PLACEHOLDER_RE.sub(one, template)


# ---------------------------------------------------------------------------
# Which patches apply, and why.


@dataclass(frozen=True)
class Decision:
    patch: Patch
    applies: bool
    reasons: tuple[str, ...]


def decide(recipe: Recipe, facts: CellFacts) -> list[Decision]:
    facts = for_recipe(recipe, facts)
    out = []
    for patch in recipe.patches:
        ok, reasons = patch.when.check(facts)
        out.append(Decision(patch, ok, tuple(reasons)))
    return out


def supported(recipe: Recipe, facts: CellFacts) -> tuple[bool, str]:
    """(can the recipe build this cell at all, why not): the plan drops a cell that fails it."""
    ok, reasons = recipe.requires.check(facts)
    if ok:
        return True, ""
    why = f" ({recipe.requires_why})" if recipe.requires_why else ""
    return False, f"{recipe.name} {recipe.source.version} cannot be built for it: {'; '.join(reasons)}{why}"


def explain(recipe: Recipe, facts: CellFacts) -> list[str]:
    """Human lines: the source, the cell, each patch with applies/skipped and the reason, the env."""
    lines = [f"{recipe.name}: {recipe.source.describe()} ({recipe.path.name})",
             f"  cell: {for_recipe(recipe, facts).describe()}"]  # fmt: skip
    ok, why = supported(recipe, facts)
    if not ok:
        return [*lines, f"  refused: {why}"]
    for d in decide(recipe, facts):
        edits = f"{len(d.patch.edits)} edit{'s' if len(d.patch.edits) != 1 else ''}"
        verdict = "applies" if d.applies else "skipped"
        lines.append(f"  patch {d.patch.name} ({d.patch.file}, {edits}): {verdict}: {'; '.join(d.reasons)}")
    env = build_env_vars(recipe, facts)
    lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    if recipe.unset:
        lines.append("  unset: " + " ".join(recipe.unset))
    return lines


def build_env_vars(recipe: Recipe, facts: CellFacts) -> dict[str, str]:
    """The environment the recipe sets for this cell: each variable's value for it, rendered."""
    values = placeholder_values(facts, recipe.source.version)
    templates = {k: env_template(recipe, k, facts) for k in recipe.env}
    return {k: render(v, values) for k, v in templates.items() if v is not None}


def inputs(recipe: Recipe, facts: CellFacts) -> dict:
    """What a build's inputs hash must cover, known without fetching: the plan can hash it."""
    return {
        "source": recipe.source.identity,
        "recipe_sha256": recipe.digest,
        "patches": [d.patch.name for d in decide(recipe, facts) if d.applies],
        "env": build_env_vars(recipe, facts),
        "unset": list(recipe.unset),
    }
