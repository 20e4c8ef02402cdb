"""Known miscompiles (``builder/data/miscompiles.toml``): GPU code a toolkit compiles wrong for one arch, and
the code that serves that GPU instead. The plan applies :func:`apply` to each build's arch list; the evidence and
the coverage page read :func:`serving` to say which code serves which GPU, and why."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import tomllib
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from builder.errors import MatrixError
from builder.facts.paths import DATA

TABLE = DATA / "miscompiles.toml"
_KEYS = ("project", "versions", "toolkit", "arch", "serve_with", "ptx", "what", "reference")


@dataclass(frozen=True)
class Miscompile:
    project: str
    versions: SpecifierSet
    toolkit: SpecifierSet
    arch: str
    serve_with: str
    ptx: str
    what: str
    reference: str

    def matches(self, project: str, version: str, toolkit: str | None) -> bool:
        if toolkit is None or project != self.project:
            return False
        return Version(version) in self.versions and Version(toolkit) in self.toolkit

    def shown_in(self, device_code) -> bool:
        """Whether a wheel's device code shows this entry applied: its arch absent, the code serving it present."""
        have = set(device_code)
        return self.arch not in have and {self.serve_with, self.ptx} <= have

    def note(self) -> str:
        return f"{self.arch} runs {self.serve_with} code (+ {self.ptx} PTX): {self.what} ({self.reference})"


@cache
def load(path: str = str(TABLE)) -> tuple[Miscompile, ...]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    out = []
    for i, e in enumerate(doc.get("miscompile", [])):
        missing = [k for k in _KEYS if not isinstance(e.get(k), str) or not e[k]]
        if missing or set(e) - set(_KEYS):
            raise MatrixError(f"{path}: miscompile[{i}]: needs exactly {', '.join(_KEYS)} as text "
                              f"(missing or wrong: {', '.join(missing or sorted(set(e) - set(_KEYS)))})")  # fmt: skip
        try:
            versions, toolkit = SpecifierSet(e["versions"]), SpecifierSet(e["toolkit"])
        except InvalidSpecifier as err:
            raise MatrixError(f"{path}: miscompile[{i}]: {err}") from None
        if not (e["arch"].startswith("sm_") and e["serve_with"].startswith("sm_") and e["ptx"].startswith("compute_")):
            raise MatrixError(f"{path}: miscompile[{i}]: arch and serve_with are sm_XY, ptx is compute_XY")
        out.append(Miscompile(e["project"], versions, toolkit, e["arch"], e["serve_with"], e["ptx"], e["what"],
                              e["reference"]))  # fmt: skip
    return tuple(out)


def serving(project: str, version: str, toolkit: str | None, archs: tuple[str, ...]) -> list[Miscompile]:
    """The entries that apply to a build of PROJECT VERSION with TOOLKIT whose default archs are ARCHS."""
    return [m for m in load() if m.matches(project, version, toolkit) and m.arch in archs]


def apply(project: str, version: str, toolkit: str | None, archs: tuple[str, ...]) -> tuple[str, ...]:
    """ARCHS with each miscompiled arch left out, the code serving it kept and its PTX added."""
    out = list(archs)
    for m in serving(project, version, toolkit, archs):
        out = [a for a in out if a != m.arch]
        for a in (m.serve_with, m.ptx):
            if a not in out:
                out.append(a)
    return tuple(out)


def served_by(project: str, version: str, toolkit: str | None, device_code: list[str]) -> dict[str, str]:
    """{arch: what serves it and why} for a wheel whose device code shows an entry applied (its arch absent, the
    code serving it present): the evidence record carries it."""
    return {m.arch: m.note() for m in load() if m.matches(project, version, toolkit) and m.shown_in(device_code)}
