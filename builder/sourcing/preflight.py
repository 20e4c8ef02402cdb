"""A recipe checked for one cell in seconds, before anything compiles: ``builder recipe check`` and the first step
of every recipe build (builder/run/build.py).

For each cell: the recipe's patches go onto a fresh copy of the source (:func:`builder.sourcing.prepare.prepare`),
the package's build backend prepares its metadata in that tree with the cell's environment (PEP 517's
``prepare_metadata_for_build_wheel``: setup.py runs, nothing compiles), and the checks below read what it wrote:
every environment value, the arch list, the name, the version and its local label, every requirement. A mistake is
a :class:`~builder.errors.PreflightError` naming the recipe, the cell, the key and the fix.

setup.py asks torch and nvcc version questions while it runs. Here they are answered by the cell's facts: a
``torch`` package and an ``nvcc`` (or ``hipcc``) written into the work folder that say the cell's torch release,
CUDA or ROCm version and C++ ABI, ``torch.cuda.is_available()`` False as on a build machine, and that name
anything else setup.py asks of them. So the check needs neither the cell's torch nor its toolkit installed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import PreflightError
from builder.facts.untrusted import (
    TimedOut,
    TooLarge,
    Untrusted,
    env_seconds,
    expect,
    read_regular,
    run_capped,
    shown,
    text,
)
from builder.planning.recipes import CellFacts, Recipe, build_env_vars, env_template, for_recipe, placeholder_values
from builder.sourcing.prepare import prepare
from builder.sourcing.sources import SourceCache

MAX_METADATA = 1 << 20  # a METADATA with its long description: a few KB to a few hundred
METADATA_SECONDS = 120  # setup.py's metadata run; no compile, so seconds, but an import may be slow
MAX_OUTPUT = 16 << 20  # what setup.py may print in that run (stdout and stderr): a build's log is a few MB

_TORCH = '''"""The preflight's torch (builder/sourcing/preflight.py): the cell's facts, for setup.py's version questions."""
from torch import cuda, version  # noqa: F401
from torch.version import __version__

class _C:
    _GLIBCXX_USE_CXX11_ABI = {cxx11abi}

def compiled_with_cxx11_abi():
    return {cxx11abi}

def __getattr__(name):
    raise AttributeError(f"torch.{{name}}: the preflight's torch answers setup.py's version questions only "
                         "(torch.__version__, torch.version.cuda/hip, the C++ ABI, torch.utils.cpp_extension)")
'''
_TORCH_VERSION = "__version__ = {torch!r}\ncuda = {cuda!r}\nhip = {hip!r}\n"
_TORCH_CUDA = (
    "def is_available():\n    return False  # a build machine has no GPU\n\ndef device_count():\n    return 0\n"
)
_CPP_EXTENSION = '''"""The preflight's torch.utils.cpp_extension: extensions as setuptools sees them; the toolkit's folder."""
import setuptools
from setuptools.command.build_ext import build_ext

CUDA_HOME = {cuda_home!r}
ROCM_HOME = HIP_HOME = {rocm_home!r}
IS_HIP_EXTENSION = {hip!r}

class BuildExtension(build_ext):
    @classmethod
    def with_options(cls, **options):
        return cls

def _extension(name, sources, *args, **kwargs):
    _record(name, sources, kwargs)
    keep = ("include_dirs", "define_macros", "undef_macros", "library_dirs", "libraries", "extra_objects",
            "extra_link_args", "depends", "language", "optional", "py_limited_api")
    extra = kwargs.get("extra_compile_args")
    kw = {{k: v for k, v in kwargs.items() if k in keep}}
    kw["extra_compile_args"] = extra.get("cxx", []) if isinstance(extra, dict) else (extra or [])
    return setuptools.Extension(name, list(sources), **kw)

def _record(name, sources, kwargs):
    import json, os
    extra = kwargs.get("extra_compile_args")
    cxx = extra.get("cxx", []) if isinstance(extra, dict) else list(extra or [])
    with open(os.environ["PREFLIGHT_EXTENSIONS"], "a") as f:
        f.write(json.dumps({{"name": name, "sources": [str(s) for s in sources], "cxx": [str(a) for a in cxx],
                            "include_dirs": [str(d) for d in kwargs.get("include_dirs") or []]}}) + "\\n")

CppExtension = CUDAExtension = _extension

def include_paths(*args, **kwargs):
    return []

def library_paths(*args, **kwargs):
    return []

def __getattr__(name):
    raise AttributeError(f"torch.utils.cpp_extension.{{name}}: the preflight's torch answers setup.py's version "
                         "questions only")
'''
_DRIVER = r"""
import importlib, json, os, sys, tomllib
out = os.path.abspath(sys.argv[1])  # setuptools' backend rewrites sys.argv while it runs
backend, path = "setuptools.build_meta:__legacy__", []
if os.path.isfile("pyproject.toml"):
    with open("pyproject.toml", "rb") as f:
        system = tomllib.load(f).get("build-system", {})
    backend, path = system.get("build-backend", backend), system.get("backend-path", [])
sys.path[:0] = [os.path.abspath(p) for p in path] + [os.getcwd()]
module, _, attr = backend.partition(":")
hooks = importlib.import_module(module)
for part in filter(None, attr.split(".")):
    hooks = getattr(hooks, part)
name = hooks.prepare_metadata_for_build_wheel(out)
print("PREFLIGHT-METADATA " + json.dumps(os.path.join(out, name, "METADATA")))
"""


@dataclass(frozen=True)
class CellCheck:
    """What the preflight found for one cell: the wheel's name and version as the farm will write them."""

    facts: CellFacts
    name: str  # METADATA Name
    version: str  # the version the package's metadata says
    wheel_version: str  # with the farm's local label: what the built wheel is called
    requires: tuple[str, ...]  # Requires-Dist, as declared
    applied: tuple[str, ...]  # the patches that went on
    seconds: float
    compiled: str = ""  # what the syntax-only compile checked ("" where this machine has no headers of the torch)

    def line(self, recipe: Recipe) -> str:
        patches = ", ".join(self.applied) or "none"
        compiled = f"; {self.compiled}" if self.compiled else ""
        if not self.compiled and self.facts.kind == "cuda":
            compiled = "; not compiled (no headers of this torch here, or not asked)"
        return (
            f"{recipe.name}: {self.facts.describe()}: ok: {self.name} {self.wheel_version} "
            f"(patches {patches}; {len(self.requires)} requirement(s){compiled}; {self.seconds:.1f} s)"
        )


def _fail(recipe: Recipe, facts: CellFacts, key: str, message: str, hint: str) -> PreflightError:
    return PreflightError(f"{recipe.path}: cell {facts.describe()}: {key}: {message}", hint=hint)


def check_env(recipe: Recipe, facts: CellFacts) -> dict[str, str]:
    """The cell's environment, each value checked: none renders empty, an arch list is the cell's."""
    # an arch that is not the cell's kind's: RecipeError naming it
    values = placeholder_values(facts, recipe.source.version)
    build_env = build_env_vars(recipe, facts)  # the recipe's values (not the process environment)
    for key, value in build_env.items():
        template = env_template(recipe, key, facts) or ""
        if template and not value:
            others = [k for k in recipe.requires.kinds if k != facts.kind]
            raise _fail(recipe, facts, f"build.env.{key}", f"{template!r} is empty for this cell",
                        f"give it a value for every cell it applies to, or narrow it to the cells it has one: {key} = "
                        f"[{{ when = {{ accelerator = {json.dumps(others)} }}, value = {json.dumps(template)} }}]")  # fmt: skip
    listed = build_env.get("TORCH_CUDA_ARCH_LIST")
    if listed is not None and facts.kind == "cuda" and listed != values["cuda_arch_list"]:
        raise _fail(recipe, facts, "build.env.TORCH_CUDA_ARCH_LIST",
                    f"{listed!r} is not the cell's arch list {values['cuda_arch_list']!r}",
                    'write TORCH_CUDA_ARCH_LIST = [{ when = { accelerator = ["cuda"] }, value = "${cuda_arch_list}" }]')  # fmt: skip
    return build_env


def stand_ins(facts: CellFacts, folder: Path) -> dict[str, str]:
    """The cell's torch and toolkit as setup.py asks about them, written under FOLDER; the env that finds them."""
    torch_dir = folder / "site" / "torch"
    (torch_dir / "utils").mkdir(parents=True)
    (torch_dir / "cuda").mkdir()
    cuda = facts.toolkit if facts.kind == "cuda" else None
    hip = f"{facts.toolkit}.0" if facts.kind == "rocm" else None
    home = folder / "toolkit"
    cxx11abi = "True" if facts.cxx11abi else "False"
    (torch_dir / "__init__.py").write_text(_TORCH.format(cxx11abi=cxx11abi))
    (torch_dir / "version.py").write_text(_TORCH_VERSION.format(torch=facts.torch, cuda=cuda, hip=hip))
    (torch_dir / "cuda" / "__init__.py").write_text(_TORCH_CUDA)
    (torch_dir / "utils" / "__init__.py").write_text("")
    (torch_dir / "utils" / "cpp_extension.py").write_text(
        _CPP_EXTENSION.format(
            cuda_home=str(home) if cuda else None, rocm_home=str(home) if hip else None, hip=hip is not None
        )
    )
    env = {"PYTHONPATH": str(folder / "site"), "PYTHONDONTWRITEBYTECODE": "1",
           "PREFLIGHT_EXTENSIONS": str(folder / "extensions.jsonl")}  # fmt: skip
    if cuda or hip:
        (home / "bin").mkdir(parents=True)
        tool, says = (
            ("nvcc", f"nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release {cuda}, V{cuda}.0")
            if cuda
            else ("hipcc", f"HIP version: {hip}\nAMD clang version (the preflight's hipcc)")
        )
        (home / "bin" / tool).write_text(f"#!/bin/sh\ncat <<'EOF'\n{says}\nEOF\n")
        (home / "bin" / tool).chmod(0o755)
        env.update({"CUDA_HOME": str(home)} if cuda else {"ROCM_PATH": str(home), "ROCM_HOME": str(home)})
        env["PATH"] = f"{home / 'bin'}:{os.environ.get('PATH', '')}"
    return env


def read_metadata(tree: Path, env: dict[str, str], out: Path, recipe: Recipe, facts: CellFacts) -> dict:
    """PEP 517 metadata of TREE, prepared under ENV by its own build backend (setup.py runs; nothing compiles)."""
    out.mkdir(parents=True)
    seconds = env_seconds("MAMBA_FARM_PREFLIGHT_SECONDS", METADATA_SECONDS)
    try:
        proc = run_capped([sys.executable, "-c", _DRIVER, str(out)], seconds, "setup.py preparing its metadata",
                          MAX_OUTPUT, cwd=tree, env=env)  # fmt: skip
    except TimedOut:
        raise _fail(recipe, facts, "metadata", f"setup.py ran over {seconds:g} s preparing its metadata (stopped "
                    "there; MAMBA_FARM_PREFLIGHT_SECONDS raises the limit)",
                    "the preflight runs no compiler: see what setup.py does at import time") from None  # fmt: skip
    except TooLarge:
        raise _fail(recipe, facts, "metadata", f"setup.py printed more than {MAX_OUTPUT >> 20} MiB preparing its "
                    "metadata (stopped there)", "see what setup.py prints at import time") from None  # fmt: skip
    said = proc.stdout[-(64 << 10) :].decode("utf-8", "replace")  # setup.py prints what it likes
    line = next((ln for ln in said.splitlines() if ln.startswith("PREFLIGHT-METADATA ")), None)
    if proc.returncode != 0 or line is None:
        # the error's own lines, not the frames of setup.py's traceback (indented) or its header
        lines = proc.stderr[-8000:].decode("utf-8", "replace").strip().splitlines()
        tail = [ln for ln in lines if ln.strip() and not ln[0].isspace() and not ln.startswith("Traceback")][-6:]
        raise _fail(recipe, facts, "metadata", "setup.py could not prepare its metadata with the cell's environment:\n"
                    + "\n".join("    | " + shown(ln, 300) for ln in tail),
                    "fix the recipe's [build.env] or patches for this cell (the lines above are setup.py's own)")  # fmt: skip
    try:
        where = expect(json.loads(line.split(" ", 1)[1]), str, "the METADATA path setup.py's backend printed")
        raw = read_regular(where, MAX_METADATA)
        meta = Parser().parsestr(text(raw, "METADATA"), headersonly=True)
    except (Untrusted, ValueError) as err:
        raise _fail(recipe, facts, "metadata", f"its METADATA is not readable ({err})", "see setup.py") from None
    return {"name": meta.get("Name") or "", "version": meta.get("Version") or "",
            "requires": tuple(meta.get_all("Requires-Dist") or ())}  # fmt: skip


def _label_setters(recipe: Recipe, env: dict[str, str], local: str) -> list[str]:
    return [k for k, v in env.items() if v and v.lower() in (local.lower(), f"+{local.lower()}")]


def check_metadata(recipe: Recipe, facts: CellFacts, meta: dict, env: dict[str, str]) -> str:
    """The wheel's version as the farm will write it, once name, version, label and requirements agree."""
    name, version = meta["name"], meta["version"]
    if canonicalize_name(name) != canonicalize_name(recipe.source.name):
        raise _fail(recipe, facts, "source.name", f"setup.py names the package {shown(name, 80)!r}, the recipe's "
                    f"source is {recipe.source.name!r}", "pin the project's own sdist, or fix [source] name")  # fmt: skip
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise _fail(recipe, facts, "metadata.version", f"setup.py's version {shown(version, 80)!r} is not PEP 440",
                    "patch setup.py's version= to the release") from None  # fmt: skip
    if parsed.public != Version(recipe.source.version).public:
        raise _fail(recipe, facts, "source.version", f"setup.py says version {shown(version, 80)}, the recipe pins "
                    f"{recipe.source.version}", "pin the version the source really is")  # fmt: skip
    local = version.partition("+")[2]
    if local and local.lower() != facts.label.lower():
        setters = _label_setters(recipe, env, local)
        by = f" (set by {', '.join('build.env.' + k for k in setters)})" if setters else ""
        raise _fail(recipe, facts, f"build.env.{setters[0]}" if setters else "metadata.version",
                    f"the package labels its own version {shown(version, 80)}{by}, the cell's label is {facts.label}",
                    "drop the setting of the package's own label: the farm writes the cell's label into the wheel")  # fmt: skip
    for raw in meta["requires"]:
        try:
            req = Requirement(raw)
        except InvalidRequirement as err:
            raise _fail(recipe, facts, "metadata.requires", f"Requires-Dist {shown(raw, 120)!r} is not a "
                        f"requirement ({err})", "patch setup.py's install_requires") from None  # fmt: skip
        torch = canonicalize_name(req.name) == "torch" and not req.marker
        if torch and req.specifier and not req.specifier.contains(facts.torch, prereleases=True):
            raise _fail(recipe, facts, "requires.torch", f"the package requires {shown(raw, 120)}, which excludes "
                            f"the cell's torch {facts.torch}",
                            'narrow [requires] torch to what the package supports (torch = "<2.10")')  # fmt: skip
    return f"{parsed.public}+{facts.label}"


def check_cell(
    recipe: Recipe, facts: CellFacts, workdir: Path, cache: SourceCache | None = None, compile: bool = False
) -> CellCheck:
    """The preflight of one cell in WORKDIR (new): patches applied, metadata prepared, everything checked; with
    COMPILE (``recipe check``; a build compiles for real right after) its CUDA sources declared and its bindings
    compiled -fsyntax-only (:func:`check_compile`)."""
    t0 = time.monotonic()
    facts = for_recipe(recipe, facts)
    env = check_env(recipe, facts)
    prep = prepare(recipe, facts, workdir / "source", cache)  # a patch that no longer applies: PatchError
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME")}
    run_env = {**prep.build_env(base), **stand_ins(facts, workdir / "facts")}
    meta = read_metadata(prep.tree, run_env, workdir / "metadata", recipe, facts)
    wheel_version = check_metadata(recipe, facts, meta, env)
    compiled = check_compile(recipe, facts, prep.tree, workdir / "facts" / "extensions.jsonl") if compile else ""
    return CellCheck(facts, meta["name"], meta["version"], wheel_version, meta["requires"], prep.applied,
                     time.monotonic() - t0, compiled)  # fmt: skip


def extensions_of(listed: Path) -> list[dict]:
    """The extensions setup.py declared while it prepared its metadata (the stand-in cpp_extension wrote them)."""
    try:
        raw = read_regular(listed, MAX_METADATA)
    except (Untrusted, OSError):
        return []
    out = []
    for line in text(raw, "the extensions setup.py declared").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("sources"), list):
            out.append(item)
    return out


def check_compile(recipe: Recipe, facts: CellFacts, tree: Path, listed: Path) -> str:
    """A CUDA cell's setup.py declares CUDA code, and its bindings compile (-fsyntax-only) against the cell's torch
    headers with setup.py's own flags (builder.sourcing.syntax); what was checked, or PreflightError."""
    from builder.sourcing import syntax

    exts = extensions_of(listed)
    if facts.kind == "cuda" and not any(str(s).endswith(".cu") for e in exts for s in e["sources"]):
        raise _fail(recipe, facts, "compile", "setup.py declares no CUDA source for this CUDA cell: the wheel would "
                    "hold no kernels", "see which environment value or patch leaves its CUDA extension out")  # fmt: skip
    if facts.kind != "cuda" or not exts:
        return ""
    done = syntax.check(tree, exts, facts)
    if done is None:
        return ""
    if done.error is not None:
        raise _fail(recipe, facts, "compile", f"{', '.join(done.units)} does not compile against torch {done.headers}'s "
                    f"headers: {shown(done.error, 300)}",
                    "a patch for this release and torch: the C++ standard, or the header API torch changed")  # fmt: skip
    kept = " (kept)" if done.cached else ""
    return f"{', '.join(done.units)} compiles against torch {done.headers}'s headers{kept}"
