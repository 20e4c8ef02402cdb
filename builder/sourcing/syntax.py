"""The preflight's compile check: one translation unit per extension (its C++ bindings) through ``g++ -fsyntax-only``
against the cell's torch headers and the flags the package's own setup.py gives, in seconds instead of a build.

It catches what otherwise costs a whole compile: a hard-coded ``-std=c++17`` beside a torch whose headers need C++20,
a header API that torch removed, a binding the source does not hold. The torch headers are those of a torch release
installed on this machine (the farm's cache of torch environments, or ``MAMBA_FARM_TORCH_HEADERS``: folders holding
``torch/include``, separated by ``:``); with none for the cell's torch the check says so and compiles nothing. A
result is kept under the farm cache, keyed by the hash of the unit, the package's headers, the flags and the torch
headers' folder, so an unchanged release is checked once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from builder.facts import hostenv
from builder.facts.untrusted import TimedOut, TooLarge, Untrusted, load_json, read_regular, run_capped
from builder.planning.recipes import CellFacts

COMPILE_SECONDS = 300  # one unit's syntax pass: tens of seconds on a busy machine (torch/extension.h is large)
KEPT_FLAG_RE = re.compile(r"-std=[a-z+0-9]+|-[DU][A-Za-z_][A-Za-z0-9_]*(=.*)?")
ERROR_RE = re.compile(r"(?:^|: )(?:fatal )?error: ")
VERSION_RE = re.compile(r"""__version__\s*=\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class Compiled:
    """The outcome for one cell: the units compiled, the first compiler error (None: none), and what was used."""

    units: tuple[str, ...]
    error: str | None
    headers: str  # the torch release whose headers were used
    cached: bool


def _torch_version(include: Path) -> str | None:
    try:
        text = (include.parent / "version.py").read_text(errors="replace")
    except OSError:
        return None
    m = VERSION_RE.search(text)
    return m.group(1).split("+")[0] if m else None


@functools.lru_cache(maxsize=1)
def _installed_headers() -> dict[str, Path]:
    """torch release -> its ``torch/include`` folder, for every torch installed in the farm cache (or named)."""
    roots = [Path(p) for p in os.environ.get("MAMBA_FARM_TORCH_HEADERS", "").split(os.pathsep) if p]
    patterns = ("venvs/*/lib/python3*/site-packages/torch/include", "torch/*/site/torch/include")
    found: dict[str, Path] = {}
    for root in roots:
        for include in [root / "torch" / "include", *root.glob("**/site-packages/torch/include")]:
            version = _torch_version(include) if include.is_dir() else None
            if version:
                found.setdefault(version, include)
    for pattern in patterns:
        for include in sorted(hostenv.CACHE_ROOT.glob(pattern)):
            version = _torch_version(include)
            if version:
                found.setdefault(version, include)
    return found


def torch_headers(torch: str) -> Path | None:
    """The ``torch/include`` folder of torch release TORCH on this machine, or None."""
    return _installed_headers().get(torch)


def _cuda_include(facts: CellFacts) -> Path | None:
    for home in (f"/usr/local/cuda-{facts.toolkit}", "/usr/local/cuda"):
        if (Path(home) / "include" / "cuda_runtime_api.h").is_file():
            return Path(home) / "include"
    return None


def flags(ext: dict, facts: CellFacts, include: Path, tree: Path) -> list[str]:
    """The unit's flags: the standard and macros setup.py gives its cxx compile (a hard-coded -std=c++17 stays),
    its include folders, and what torch's cpp_extension adds (the ABI, the extension's name, torch's folders)."""
    own = [a for a in ext.get("cxx", []) if KEPT_FLAG_RE.fullmatch(a)]
    out = [*own, f"-D_GLIBCXX_USE_CXX11_ABI={int(facts.cxx11abi)}", "-DTORCH_API_INCLUDE_EXTENSION_H",
           f"-DTORCH_EXTENSION_NAME={ext['name'].rpartition('.')[2]}"]  # fmt: skip
    if not any(a.startswith("-std=") for a in own):
        out.insert(0, "-std=c++17")  # torch's cpp_extension's default standard when setup.py names none
    for d in ext.get("include_dirs", []):
        out.append(f"-I{(tree / d) if not Path(d).is_absolute() else d}")
    out += [f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}"]
    cuda = _cuda_include(facts)
    if cuda is not None:
        out.append(f"-I{cuda}")
    # the CUDA libraries' headers torch's own wheel depends on (cusparse.h, ...), where its environment has them
    out += [f"-isystem{d}" for d in sorted((include.parent.parent / "nvidia").glob("*/include")) if d.is_dir()]
    out.append(f"-I{sysconfig.get_paths()['include']}")
    return out


def _key(tree: Path, unit: Path, argv: list[str]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(argv).encode())
    h.update(unit.read_bytes())
    for header in sorted(tree.rglob("*.h")) + sorted(tree.rglob("*.cuh")):
        h.update(str(header.relative_to(tree)).encode() + b"\0" + header.read_bytes())
    return h.hexdigest()


def _first_error(stderr: str, tree: Path, include: Path) -> str:
    lines = [ln for ln in stderr.splitlines() if ERROR_RE.search(ln)] or stderr.strip().splitlines()[-1:] or ["?"]
    line = lines[0].replace(str(include) + "/", "<torch>/").replace(str(tree) + "/", "")
    return line.strip()[:300]


def _cached(path: Path) -> dict | None:
    """A cached outcome: a regular file of one small JSON object, else None (compiled again)."""
    if not path.exists():
        return None
    try:
        entry = load_json(read_regular(path, 1 << 16, "a syntax-pass cache entry"), str(path))
    except (Untrusted, OSError):
        return None
    ok = isinstance(entry, dict) and (entry.get("error") is None or isinstance(entry["error"], str))
    return entry if ok else None


def check(tree: Path, extensions: list[dict], facts: CellFacts, cache: Path | None = None) -> Compiled | None:
    """Compile the C++ bindings (the .cpp sources) of each extension with -fsyntax-only; None when this machine
    has no headers of the cell's torch or no g++ (nothing is claimed either way)."""
    include = torch_headers(facts.torch)
    compiler = shutil.which("g++")
    if include is None or compiler is None:
        return None
    cache = cache or hostenv.CACHE_ROOT / "preflight-syntax"
    units, cached = [], True
    for ext in extensions:
        cpp = [s for s in ext.get("sources", []) if s.endswith(".cpp")]
        for src in cpp[:1]:  # one unit per extension: its bindings
            unit = tree / src
            units.append(src)
            if not unit.is_file():
                return Compiled(tuple(units), f"{src}: no such file in the source (setup.py names it)", facts.torch,
                                False)  # fmt: skip
            argv = [*flags(ext, facts, include, tree), "-fsyntax-only", "-x", "c++", str(unit)]
            key = _key(tree, unit, [a.replace(str(tree), "<tree>") for a in argv])
            kept = cache / f"{key}.json"
            entry = _cached(kept)
            if entry is not None:
                error = entry.get("error")
            else:
                cached = False
                try:  # the compiler reads the recipe's sources: its time and what it prints are capped
                    proc = run_capped([compiler, *argv], COMPILE_SECONDS, f"the syntax pass over {src}", cwd=tree)
                    stderr = proc.stderr.decode("utf-8", "replace")
                    error = None if proc.returncode == 0 else _first_error(stderr, tree, include)
                except TimedOut:
                    error = f"{src}: the syntax pass ran over {COMPILE_SECONDS} s"
                except TooLarge as err:
                    error = f"{src}: {err}"
                cache.mkdir(parents=True, exist_ok=True)
                tmp = kept.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"error": error, "unit": src}))
                os.replace(tmp, kept)
            if error is not None:
                return Compiled(tuple(units), error, facts.torch, cached)
    return Compiled(tuple(units), None, facts.torch, cached)


if __name__ == "__main__":  # pragma: no cover - a maintainer's look at what headers this machine has
    print("\n".join(f"{v}: {p}" for v, p in sorted(_installed_headers().items())), file=sys.stdout)
