"""The index's model, pure (no I/O): a typed manifest entry per wheel, the variant pages that list it, and the
answers every reader shares: which variants a stable wheel serves, which wheel a cell gets, the command that
installs it. An entry's ``project`` and ``source`` are left out where they are the defaults (this
checkout's mamba-ssm), so older manifests read back as the checkout.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import quote

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from builder.errors import IndexIntegrityError, NameCollision
from mamba_ssm import variant as _variant
from mamba_ssm.elf import tag_machine

PROJECT = "mamba-ssm"  # this repository's own distribution: the default project
CHECKOUT = (
    "checkout"  # the source identity of a wheel built from this checkout (builder.sourcing.sources.CheckoutSource)
)
SCHEMA = 1


@functools.cache
def parse_version(v: str) -> Version:
    """Version parsing dominates a large run's CPU time; versions repeat a lot."""
    return Version(v)


@functools.cache
def _torch_pin(specifier: str) -> SpecifierSet:
    return SpecifierSet(specifier)


@functools.cache
def _variant_of_key(key: str) -> _variant.Variant:
    return _variant.Variant.from_key(key)


def _py_num(tag: str) -> tuple[int, int]:
    digits = tag[2:]
    return int(digits[0]), int(digits[1:] or 0)


@dataclass(frozen=True, kw_only=True)
class Wheel:
    """What a wheel file says about itself: its name, its METADATA and (stable wheels) its sidecar."""

    filename: str
    version: str  # as commands print it: the farm's spelling of the label (cxx11abiFALSE)
    label: str
    key: str  # its own variant page
    accelerator: str
    torch: str  # "2.6" or "stable"
    cxx11abi: bool | None  # None: a stable wheel (both ABIs)
    stable: bool
    python: str  # the tag's interpreter: cp311; cp310 for a cp310-abi3 wheel
    abi: str
    platform: str
    requires_python: str  # "" if none
    requires_torch: str  # the torch pin (builder.verifying.wheelmeta); "" if none
    serves_declared: Sequence[str] | None = None  # a stable wheel's sidecar ``serves`` (None: no sidecar)
    project: str = PROJECT  # the canonical distribution name
    source: str = CHECKOUT  # what it was built from (its sidecar's ``source``): see source_line
    archs: Sequence[str] = ()  # the GPU code in it (its sidecar's ``archs``: sm_90, gfx942); () for none or unknown

    @classmethod
    def make(cls, **fields_):
        """Construct (keyword arguments, as __init__ takes them). The generated __init__ of a frozen
        dataclass costs 5-10 us here, a twentieth of a 5,000-wheel run: this adopts the keywords as the
        attributes, once their names are checked against the fields."""
        return _adopt(cls, fields_)

    def replace(self, **changes):
        """A copy with ``changes`` (dataclasses.replace, without __init__)."""
        return _adopt(type(self), {**self.__dict__, **changes})

    @property
    def release(self) -> str:
        return self.version.partition("+")[0]

    @property
    def machine(self) -> str | None:
        """The machine its platform tag names (x86_64, aarch64); one variant page lists every machine's wheels."""
        return tag_machine(self.platform)

    def installs_on(self, python_tag: str) -> bool:
        """Whether the wheel installs on CPython ``python_tag`` (cp311): its exact tag, or abi3 from its floor up."""
        if self.abi == "abi3":
            return _py_num(python_tag) >= _py_num(self.python)
        return self.python == python_tag

    def admits(self, key: str, project: str | None = None) -> bool:
        """Whether a user of variant ``key`` (who asks for ``project``; None: this wheel's own) may take this
        wheel: its own variant; a stable wheel also every variant its sidecar declares, or without one each
        variant of its accelerator whose torch minor satisfies its torch pin. The one stable-wheel admission
        rule (pages, coverage and resolve)."""
        if project is not None and project != self.project:
            return False
        if key == self.key:
            return True
        if not self.stable:
            return False
        if self.serves_declared is not None:
            return key in self.serves_declared
        v = _variant_of_key(key)
        return (
            not v.stable
            and v.accelerator == self.accelerator
            and _torch_pin(self.requires_torch).contains(parse_version(v.torch + ".0"), prereleases=True)
        )


@dataclass(frozen=True, kw_only=True)
class Entry(Wheel):
    """A published wheel: what it says, and what the store holds (never mutated: a change is a new Entry)."""

    sha256: str
    size: int
    stat: Sequence[int]  # [size, mtime_ns, inode] of the store file: recognised without reading it
    source_stat: Sequence[int]  # the same of the file it was indexed from
    metadata_sha256: str  # the PEP 658 <wheel>.metadata file next to it
    metadata_stat: Sequence[int]
    url: str | None = None  # where it is downloaded from when not files/ (``--files-url``)
    replaced: Sequence[dict] = ()  # the bytes it superseded (``--replace``), oldest first: sha256, size, at
    # what was checked of it: its <wheel>.evidence.json in the store (builder.verifying.evidence), and the tier that
    # record proves, computed from it (``cpu-checked (imported with torch 2.13.0)``); None: no record
    evidence_sha256: str | None = None
    evidence_stat: Sequence[int] | None = None
    tier: str | None = None

    def __getattr__(self, name: str):
        """Reached only for a field its manifest.json entry lacks (an old or hand-edited manifest)."""
        if name in _FIELD_NAMES:
            raise IndexIntegrityError(
                f"manifest.json: entry {self.__dict__.get('filename')!r} has no {name!r}: "
                "it does not match this builder's schema"
            )
        raise AttributeError(name)

    def to_json(self, serves: list[str]) -> dict[str, Any]:
        d = dict(self.__dict__)
        # unset optional fields stay off the disk, as they always have (an empty sidecar list is set)
        if d.get("serves_declared", 0) is None:
            del d["serves_declared"]
        if d.get("url", 0) is None:
            del d["url"]
        if "replaced" in d and not d["replaced"]:
            del d["replaced"]
        if d.get("project") == PROJECT:
            del d["project"]
        if d.get("source") == CHECKOUT:
            del d["source"]
        if "archs" in d and not d["archs"]:
            del d["archs"]
        for key in ("evidence_sha256", "evidence_stat", "tier"):
            if d.get(key, 0) is None:
                del d[key]
        d["serves"] = serves
        return d


_OPTIONAL = frozenset(
    {"serves_declared", "url", "replaced", "project", "source", "archs", "evidence_sha256", "evidence_stat", "tier"}
)
_FIELD_NAMES = frozenset(f.name for f in fields(Entry))
_VALID_KEYS: set[tuple] = set()  # (class, key sequence) already checked: a run repeats a few


class SchemaMismatch(ValueError):
    """Fields given that the dataclass does not have, or not all it needs."""


def _adopt(cls, d: dict):
    """An instance of the frozen dataclass ``cls`` whose attributes are ``d`` (an unset optional field
    falls back to its default), without __init__; d's keys are checked against the fields."""
    keys = (cls, *d)
    if keys not in _VALID_KEYS:
        every = {f.name for f in fields(cls)}
        missing, unknown = sorted(every - _OPTIONAL - d.keys()), sorted(d.keys() - every)
        if missing or unknown:
            raise SchemaMismatch(f"missing {', '.join(missing) or '-'}; unknown {', '.join(unknown) or '-'}")
        _VALID_KEYS.add(keys)
    obj = object.__new__(cls)
    object.__setattr__(obj, "__dict__", d)
    return obj


def entries_from_json(files: dict[str, dict]) -> dict[str, Entry]:
    """The entries of manifest.json's ``files``. Takes ownership of the dicts: each becomes its entry's
    attributes (a run reads 5,000 of them; an unset optional field falls back to its default, a missing
    required one is an IndexIntegrityError where it is first read)."""
    out = {}
    new, set_attr = object.__new__, object.__setattr__
    for fn, d in files.items():
        d.pop("serves", None)  # recomputed by Index
        entry = out[fn] = new(Entry)
        set_attr(entry, "__dict__", d)
    return out


def install_command(entry: Wheel, key: str, base: str) -> str:
    """The one-line install that holds up in the real world: exact local version, this variant's index."""
    return f"pip install {entry.project}=={entry.version} --extra-index-url {base.rstrip('/')}/{key}/"


@functools.cache
def source_line(identity: str) -> str:
    """The product line a source identity belongs to: ``checkout`` (this repository, whatever its version), or
    ``sdist:<project>`` (one upstream project's published sdists, every release). One index serves one line
    per project: a new upstream release joins its line; this checkout's mamba-ssm and upstream's do not mix.
    A recipe's archive (``archive:``) or git commit (``git:``) pin is upstream's code pinned another way: the
    same line as the project's sdists. A canary (``canary:``, a default branch's head) is a line of its own,
    ``canary:<project>``: never served beside a release."""
    if identity.startswith("canary:"):
        return "canary:" + identity.partition(":")[2].partition("==")[0]
    if identity.startswith(("sdist:", "archive:", "git:")):
        return "sdist:" + identity.partition(":")[2].partition("==")[0]
    return identity


def describe_source(identity: str) -> str:
    if identity == CHECKOUT:
        return "this repository's checkout (source 'checkout')"
    if identity.startswith("sdist:"):
        return f"upstream's published sdist (source {identity!r})"
    if identity.startswith(("archive:", "git:")):
        return f"upstream's {'source archive' if identity.startswith('archive:') else 'git commit'} (source {identity!r})"
    if identity.startswith("canary:"):
        return f"upstream's default branch, a canary (source {identity!r})"
    return f"source {identity!r}"


def project_order(projects) -> list[str]:
    """``projects`` as every page lists them: this repository's first, then the others by name."""
    return sorted(set(projects) or {PROJECT}, key=lambda p: (p != PROJECT, p))


@functools.cache
def stable_key(key: str) -> str:
    """The stable variant of ``key``'s accelerator (``cu13-torch2.12-cxx11abiTRUE`` -> ``cu13-torchstable-abi3``)."""
    return _variant_of_key(key).as_stable().key


class Manifest:
    """A published index as its readers see it: the entries by filename and the files each variant page
    lists (in page order: oldest release first)."""

    def __init__(
        self, files: dict[str, Entry], variants: dict[str, list[str]], base_url: str | None, projects=None
    ) -> None:
        self.files = files
        self.variants = variants
        self.base_url = base_url
        self.pythons = sorted({e.python for e in files.values()}, key=_py_num)
        self.projects = projects or project_order(e.project for e in files.values())
        self._picks: dict[tuple, dict[str, str]] = {}
        self._ranks: dict[str, tuple[int, bool]] | None = None

    @classmethod
    def from_json(cls, doc: dict) -> Manifest:
        files = entries_from_json({fn: dict(d) for fn, d in doc.get("files", {}).items()})  # (the caller's stays)
        return cls(files, doc.get("variants", {}), doc.get("base_url"))

    def wheel_for(
        self, key: str, python: str, project: str = PROJECT, machine: str | None = None
    ) -> tuple[str, str] | None:
        """(page, filename) of the ``project`` wheel a user of variant ``key`` on CPython ``python`` (on
        ``machine``: x86_64, aarch64; None: any) gets, None if none:
        from ``key``'s page the newest release (within one, an exact build before a stable one; on a tie
        the first listed); failing that, from the accelerator's stable page, the newest wheel that admits
        ``key``. The one answer: the coverage page's cells and ``builder resolve`` both ask here."""
        fn = self._pick(key, None, python, project, machine)
        if fn is not None:
            return key, fn
        stable = stable_key(key)
        if stable != key and stable in self.variants:
            fn = self._pick(stable, key, python, project, machine)
            if fn is not None:
                return stable, fn
        return None

    def _pick(self, page: str, serving: str | None, python: str, project: str, machine: str | None) -> str | None:
        if page not in self.variants:
            return None
        if python not in self.pythons:  # an abi3 wheel may serve a Python no wheel is tagged with
            return self._best_by_python(page, serving, (python,), project, machine).get(python)
        by_python = self._picks.get((page, serving, project, machine))
        if by_python is None:  # one pass over the page for every Python, not one per cell
            by_python = self._best_by_python(page, serving, self.pythons, project, machine)
            self._picks[(page, serving, project, machine)] = by_python
        return by_python.get(python)

    def _best_by_python(
        self, page: str, serving: str | None, pythons, project: str, machine: str | None = None
    ) -> dict[str, str]:
        files, ranks = self.files, self._ranks
        if ranks is None:  # (release, exact before stable) of every file, the releases ranked as ints once
            release = {fn: e.release for fn, e in files.items()}
            order = {r: i for i, r in enumerate(sorted(set(release.values()), key=parse_version))}
            ranks = self._ranks = {fn: (order[release[fn]], not files[fn].stable) for fn in files}
        best: dict[str, tuple] = {}
        for fn in self.variants[page]:
            e = files[fn]
            if e.project != project or (serving is not None and not e.admits(serving)):
                continue
            if machine is not None and e.machine != machine:
                continue
            rank = ranks[fn]
            for py in pythons if e.abi == "abi3" else (e.python,):
                if e.installs_on(py) and (py not in best or rank > best[py][0]):
                    best[py] = (rank, fn)
        return {py: fn for py, (_rank, fn) in best.items()}


class Index(Manifest):
    """Everything the pages are made from: the entries, grouped onto the variant pages that list them."""

    def __init__(self, files: dict[str, Entry], base_url: str | None) -> None:
        exact = {e.key for e in files.values() if not e.stable}
        own = {e.key for e in files.values()}
        groups: dict[str, list[str]] = {k: [] for k in own}
        # A stable wheel stays off an exact page for a release that page already has: with both, pip
        # and uv would take "+cu13torchstable" over "+cu13torch2.14..." (local labels sort as text).
        release = {fn: e.release for fn, e in files.items()}
        releases = {(e.project, e.key, release[fn]) for fn, e in files.items() if not e.stable}
        self.serves: dict[str, list[str]] = {}
        for fn, e in files.items():
            self.serves[fn] = serves = self._serves(e, exact)
            for key in serves:
                if key != e.key and (e.project, key, release[fn]) in releases:
                    continue
                groups.setdefault(key, []).append(fn)
        # Rank the few distinct versions once; sorting 5,000 files then compares ints, not Versions.
        rank = {v: i for i, v in enumerate(sorted({e.version for e in files.values()}, key=parse_version))}
        self.sources = {(e.project, e.source) for e in files.values()}  # (project, identity) pairs
        projects = project_order(p for p, _s in self.sources)
        project = {p: i for i, p in enumerate(projects)}
        self.order = {fn: (project[e.project], rank[e.version], e.python, fn) for fn, e in files.items()}
        variants = {k: sorted(v, key=self.order.__getitem__) for k, v in sorted(groups.items())}
        super().__init__(files, variants, base_url, projects)
        self._check_one_source_per_project()
        self._check_not_upstreams_own_names()
        self._check_one_file_per_cell()

    @staticmethod
    def _serves(entry: Entry, exact_keys: set[str]) -> list[str]:
        """The variant pages that list the wheel: its own, and for a stable wheel every page it admits (the
        declared ones even where no exact wheel made that page yet)."""
        if not entry.stable:
            return [entry.key]
        keys = {entry.key, *(entry.serves_declared or ()), *(k for k in exact_keys if entry.admits(k))}
        return sorted(keys)

    def _check_one_source_per_project(self) -> None:
        """One distribution name, one product line: pip and uv pick among a name's wheels by version alone, so
        this checkout's mamba-ssm and upstream's in one index would replace each other on users' machines.
        Within a line, one release comes from one sdist (the same version from two archives is two sources)."""
        if len(self.sources) == len(self.projects):
            return  # one source per project (the common case: one pass, no per-file work)
        first: dict[str, tuple[str, str]] = {}  # project -> (identity, file) of its first wheel
        releases: dict[tuple[str, str], tuple[str, str]] = {}  # (project, release) -> (identity, file)
        for fn, e in self.files.items():
            seen = first.setdefault(e.project, (e.source, fn))
            if seen[0] != e.source and source_line(seen[0]) != source_line(e.source):
                self._two_sources(e.project, seen, (e.source, fn))
            seen = releases.setdefault((e.project, e.release), (e.source, fn))
            if seen[0] != e.source:
                self._two_sources(e.project, seen, (e.source, fn))

    @staticmethod
    def _two_sources(project: str, a: tuple[str, str], b: tuple[str, str]):
        raise NameCollision(
            f"one index would serve {project} from two different sources: {describe_source(a[0])}, e.g. {a[1]}, "
            f"and {describe_source(b[0])}, e.g. {b[1]}; pip and uv tell them apart by version only",
            hint="publish the two product lines as two indexes (e.g. --out dist/index for this checkout's wheels "
            "and --out dist/index-upstream for the recipes' builds); nothing published was changed",
        )

    def _check_not_upstreams_own_names(self) -> None:
        """A recipe's wheel never takes a filename upstream's own GitHub release wheels could hold: those are
        tagged plain ``linux_x86_64`` (their setup.py names them so) under the same version and label, with other
        bytes. The farm's are repaired to a manylinux floor, so their platform tags differ; one still tagged
        ``linux_*`` was not, and is refused."""
        if all(source == CHECKOUT for _project, source in self.sources):
            return
        for fn, e in self.files.items():
            if e.source != CHECKOUT and any(p.startswith("linux_") for p in e.platform.split(".")):
                raise NameCollision(
                    f"{fn}, from {describe_source(e.source)}, is named as upstream's own release wheels are "
                    f"(platform tag {e.platform}): one of those could hold other bytes under this very name",
                    hint="publish the farm's repaired wheel (a manylinux_* platform tag: builder build repairs it "
                    "to its spec's floor); nothing published was changed",
                )

    def _check_one_file_per_cell(self) -> None:
        # Two files for one (variant, project, version, Python, machine) is a choice pip and uv would make
        # differently; an x86_64 and an aarch64 wheel of one cell are not (each installs on its machine only).
        for key, fns in self.variants.items():
            seen: dict[tuple, str] = {}
            for fn in fns:
                e = self.files[fn]
                cell = (e.project, e.version, e.python, e.abi, e.machine)
                if cell in seen:
                    raise IndexIntegrityError(
                        f"variant {key} has two wheels for {e.version} {e.python}-{e.abi}: "
                        f"{seen[cell]} and {fn}; pip and uv would pick differently",
                        hint="keep exactly one platform tag per variant and Python (remove one of them from --wheels)",
                    )
                seen[cell] = fn

    def href(self, fn: str, depth: int) -> str:
        if fn and self.files[fn].url:
            return self.files[fn].url
        if self.base_url:
            return f"{self.base_url.rstrip('/')}/files/{quote(fn, safe='+!')}"
        return "../" * depth + "files/" + quote(fn, safe="+!")

    def to_json(self, **extra) -> dict[str, Any]:
        """manifest.json (``extra``: more top-level keys, e.g. the generation's ``units``)."""
        return {
            "schema": SCHEMA,
            "projects": self.projects,
            "base_url": self.base_url,
            "files": {fn: e.to_json(self.serves[fn]) for fn, e in self.files.items()},
            "variants": self.variants,
            **extra,
        }
