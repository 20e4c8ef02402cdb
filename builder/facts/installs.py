"""Whether each cell's wheel installs beside its torch: the record ``python -m builder installs`` writes
(``builder/data/installs.json``), read by the plan (a cell that does not install is never built), the tiers and the
coverage page.

A cell's install is one resolution: the wheel's own requirements (as the recipe leaves them, the farm's torch pin
included) with the cell's torch release held, binary wheels only, for the cell's Python and machine at the glibc
floor its plan states (raised to the lowest floor that resolves, if any). Its key names the project and its
version, the torch release, the Python and the platform: the CUDA build and the C++ ABI change nothing a resolver
reads (PyPI's metadata for a torch release stands in for PyTorch's own index).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import MatrixError
from builder.facts.compat import vtuple
from builder.facts.paths import DATA
from builder.facts.untrusted import Untrusted, expect, load_json, read_regular

RECORD = DATA / "installs.json"
MAX_RECORD_BYTES = 16 << 20


def cell_key(project: str, version: str, torch: str, python: str, platform: str) -> str:
    """``mamba-ssm 2.3.2.post1 | torch 2.8.0 | py3.11 | linux_x86_64``"""
    return f"{project} {version} | torch {torch} | py{python} | {platform}"


@dataclass(frozen=True)
class InstallRecord:
    """One cell's resolution, as recorded."""

    installs: bool | None  # None: not resolvable here (the stand-in index holds no wheel of that torch)
    floor: str | None  # the glibc the resolution needs (the target it resolved at, and its wheels' newest floor)
    why: str  # a resolver's reason, for one that does not install
    instead: str  # what to do instead, computed from the other cells' outcomes
    picked: dict[str, str]  # name -> version, as pip resolved it

    def describe(self) -> str:
        if self.installs:
            return f"installs (glibc {self.floor})"
        if self.installs is None:
            return f"not resolved: {self.why}"
        return f"does not install: {self.why}" + (f"; instead: {self.instead}" if self.instead else "")


@dataclass(frozen=True)
class Installs:
    """The record: cell key -> outcome."""

    path: Path
    cells: dict[str, InstallRecord]
    stand_in: str = ""
    recorded: str = ""
    written: dict[str, dict] = field(default_factory=dict, compare=False, repr=False)  # each cell as the file holds it
    # "<project> <version>" -> "<project> <version>": a release whose wheel's requirements are another release's
    # resolves as that one does, so its cells are recorded once, under that release (the record stays compact)
    same_as: dict[str, str] = field(default_factory=dict)

    def outcome(self, project: str, version: str, torch: str, python: str, platform: str) -> InstallRecord | None:
        found = self.cells.get(cell_key(project, version, torch, python, platform))
        if found is None and (alias := self.same_as.get(f"{project} {version}")):
            found = self.cells.get(cell_key(project, alias.split(" ", 1)[1], torch, python, platform))
        return found

    def for_minor(self, project: str, version: str, minor: str, python: str, platform: str) -> InstallRecord | None:
        """The outcome recorded for the newest torch release of MINOR ("2.8") in that cell."""
        if (
            not any(k.startswith(f"{project} {version} | ") for k in self.cells)
            and f"{project} {version}" in self.same_as
        ):
            version = self.same_as[f"{project} {version}"].split(" ", 1)[1]
        found = None
        for key, o in self.cells.items():
            p, v, t, py, plat = _parts(key)
            same = (p, v, py, plat) == (project, version, python, platform) and (
                t == minor or t.startswith(minor + ".")
            )
            if same and (found is None or vtuple(t) > vtuple(found[0])):
                found = (t, o)
        return found[1] if found else None


def _parts(key: str) -> tuple[str, str, str, str, str]:
    name_version, torch, python, platform = key.split(" | ")
    name, version = name_version.split(" ", 1)
    return name, version, torch.removeprefix("torch "), python.removeprefix("py"), platform


def load(path: Path | None = None) -> Installs:
    """The record (an empty one when the file does not exist yet); a malformed one is refused with its place.
    Parsed once per version of the file: the coverage page and the release's pins ask it cell by cell."""
    path = Path(path or RECORD)
    if not os.path.lexists(path):
        return Installs(path, {})
    st = os.lstat(path)
    return _load(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _load(path: Path, _mtime_ns: int, _size: int) -> Installs:
    try:
        raw = read_regular(path, MAX_RECORD_BYTES, str(path))
        doc = expect(load_json(raw, str(path)), dict, str(path))
        cells, written = {}, {}
        for key, c in expect(doc.get("cells", {}), dict, f"{path}: cells").items():
            written[key] = c = expect(c, dict, f"{path}: cells[{key!r}]")
            cells[key] = InstallRecord(
                installs=expect(c.get("installs"), (bool, type(None)), f"{path}: cells[{key!r}].installs"),
                floor=expect(c.get("floor"), (str, type(None)), f"{path}: cells[{key!r}].floor"),
                why=expect(c.get("why", ""), str, f"{path}: cells[{key!r}].why"),
                instead=expect(c.get("instead", ""), str, f"{path}: cells[{key!r}].instead"),
                picked=dict(expect(c.get("picked", {}), dict, f"{path}: cells[{key!r}].picked")),
            )
        same_as = {}
        for line, other in expect(doc.get("same_as", {}), dict, f"{path}: same_as").items():
            other = expect(other, str, f"{path}: same_as[{line!r}]")
            if line.split(" ", 1)[0] != other.split(" ", 1)[0] or " " not in other or other in doc.get("same_as", {}):
                raise Untrusted(f"{path}: same_as[{line!r}] = {other!r}: not another release of that project")
            same_as[line] = other
        return Installs(path, cells, str(doc.get("stand_in", "")), str(doc.get("recorded", "")), written, same_as)
    except Untrusted as err:
        raise MatrixError(f"{err}: not an installs record", hint="run `python -m builder installs` again") from None
