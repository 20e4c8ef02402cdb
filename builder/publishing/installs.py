"""Does each cell's wheel install beside its torch? Resolved before anything is built, the way a user's installer
would, by pip (``install --dry-run --report``) and uv (``pip compile``) both, against an index snapshot served on
127.0.0.1 (:mod:`builder.sourcing.snapshot`): binary wheels only, for the cell's Python and machine at its glibc
floor, the cell's torch release held. The outcomes go to ``builder/data/installs.json``
(:mod:`builder.facts.installs`), which the plan, the tiers and the coverage page read.

A cell resolves at the floor its plan states or, failing that, at the lowest of :data:`FLOORS` that resolves (its
page then states that floor); a cell that resolves nowhere is left out, with the resolver's reason and what to do
instead. Each resolution is cached under ``<farm cache>/installs/`` by its query and the listings it read: a
listing that changed is a new resolution.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pip as pip_module
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.errors import MatrixError, SourceFetchError
from builder.facts import hostenv
from builder.facts.compat import manylinux_glibc, manylinux_platforms, vtuple
from builder.facts.installs import cell_key
from builder.facts.untrusted import (
    TimedOut,
    Untrusted,
    env_seconds,
    expect,
    load_json,
    load_toml,
    locked_url,
    read_inside,
    read_regular,
    sha256_name,
    shown,
    text,
)
from builder.publishing.release_lines import parse_requires_txt
from builder.sourcing.snapshot import Snapshot, SnapshotServer

# glibc floors a cell may be raised to when its own does not resolve (RHEL 8, Debian 11, RHEL 9 and Ubuntu 22.04's
# 2.34/2.35, Ubuntu 24.04): a dependency with no wheel for an older glibc (tilelang's aarch64 ones) moves the cell
# there, and its page says so.
FLOORS = ("2.28", "2.31", "2.34", "2.35", "2.39")
STAND_IN = (
    "PyPI's metadata for each torch release stands in for PyTorch's own index (download.pytorch.org is not "
    "reachable from the farm's hosts): the torch requirements a CUDA or ROCm build of the same release declares "
    "can differ in the nvidia-*/triton pins"
)
TIMEOUT = 300  # one resolution (every floor tried, both resolvers), seconds: MAMBA_FARM_RESOLVE_SECONDS
CACHE_SCHEMA = 4  # what a cached resolution holds; another number is a new resolution
MAX_CACHE_BYTES = 16 << 20  # one cached resolution (its lock is the closure's wheel list: tens of kB)
MAX_LOCK_BYTES = 16 << 20  # one lock, as uv writes it and as the farm reads it back


def resolve_seconds() -> float:
    """One resolution's wall-time limit (MAMBA_FARM_RESOLVE_SECONDS, else :data:`TIMEOUT`)."""
    return env_seconds("MAMBA_FARM_RESOLVE_SECONDS", TIMEOUT)


def _run_resolver(cmd: list[str], seconds: float, what: str, **kw) -> subprocess.CompletedProcess:
    """One resolver run within what is left of its resolution's time, the limit named when it is spent."""
    try:
        return subprocess.run(cmd, check=False, capture_output=True, text=True, env=_clean_env(),
                              timeout=max(seconds, 1), **kw)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise TimedOut(f"{what}: ran past the resolution's limit of {resolve_seconds():g} s (stopped there); "
                       "raise it with MAMBA_FARM_RESOLVE_SECONDS") from None  # fmt: skip


@dataclass(frozen=True)
class Query:
    """One resolution: a project's requirements beside one torch release, for one Python and machine."""

    project: str
    version: str
    requirements: tuple[str, ...]  # the wheel's Requires-Dist as the recipe leaves it (the farm's torch pin included)
    torch: str  # the release held: "2.8.0"
    python: str  # "3.11"
    platform: str  # "linux_x86_64"
    floor: str  # the plan's glibc floor: "2.28"

    @property
    def key(self) -> str:
        return cell_key(self.project, self.version, self.torch, self.python, self.platform)

    @property
    def machine(self) -> str:
        return self.platform.removeprefix("linux_")

    def lines(self) -> list[str]:
        """The requirement lines a resolver reads: the wheel's own, then the cell's torch held exactly."""
        return [*self.requirements, f"torch=={self.torch}"]


@dataclass
class ResolverAnswer:
    resolved: bool
    picked: dict[str, str] = field(default_factory=dict)  # name -> version
    files: list[str] = field(default_factory=list)  # the wheels chosen (pip's report)
    why: str = ""
    lock: str = ""  # uv's PEP 751 lock of it


def wheel_floor(filename: str) -> str:
    """The glibc a wheel's best-supported manylinux tag needs: the oldest of the tags it carries."""
    floors = [manylinux_glibc(t.platform) for t in parse_wheel_filename(filename)[3]]
    return ".".join(map(str, min((f for f in floors if f != (0, 0)), default=(0, 0))))


def _clean_env() -> dict[str, str]:
    """The resolvers see the snapshot alone: no pip or uv configuration of this host's (find-links, extra
    indexes, a torch constraint) reaches them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    # no interpreter download either: uv would try GitHub for a CPython of the cell's version, and wait on it
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        UV_NO_CONFIG="1",
        UV_PYTHON_DOWNLOADS="never",
    )
    return env


def _tail(output: str, lines: int = 6) -> str:
    """A resolver's reason: its error lines, neutralised, joined."""
    keep = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    start = next((i for i, ln in enumerate(keep) if ln.startswith(("error:", "ERROR:", "×", "cause:"))), 0)
    return shown(" ".join(keep[start : start + lines]), 600)


def resolve_uv(q: Query, index: str, glibc: str, uv: str, seconds: float = TIMEOUT) -> ResolverAnswer:
    """uv's resolution, as the PEP 751 lock it writes (its wheels' URLs are the snapshot server's)."""
    with tempfile.TemporaryDirectory(prefix="farm-installs-") as tmp:
        lock = Path(tmp) / "pylock.toml"
        cmd = [
            uv, "pip", "compile", "-", "--no-header", "--quiet", "--no-cache", "--index-url", index,
            "--only-binary", ":all:", "--python-version", q.python, "--format", "pylock.toml", "-o", str(lock),
            "--python-platform", f"{q.machine}-manylinux_{glibc.replace('.', '_')}",
        ]  # fmt: skip
        r = _run_resolver(cmd, seconds, f"{q.key}: uv", input="\n".join(q.lines()) + "\n")
        if r.returncode != 0 or not lock.is_file():
            return ResolverAnswer(False, why=_tail(r.stderr or r.stdout))
        try:
            raw = text(read_regular(lock, MAX_LOCK_BYTES, "uv's lock"), "uv's lock")
            doc = load_toml(raw, "uv's lock")
            picked = {str(canonicalize_name(p["name"])): str(p["version"]) for p in doc.get("packages", [])}
        except (Untrusted, KeyError, TypeError) as err:
            return ResolverAnswer(False, why=f"uv's lock: {shown(err, 300)}")
    return ResolverAnswer(True, picked, lock=raw)


def pip_for(q: Query) -> tuple[list[str] | None, str]:
    """The pip command that resolves Q as its user's pip would, or (None, why not). pip evaluates environment
    markers (``platform_machine == 'x86_64'``, ``python_version < '3.12'``) against the interpreter running it,
    whatever ``--platform`` and ``--python-version`` say: so this pip runs on a CPython of the cell's own version,
    and only for this host's machine (uv sets the markers from ``--python-platform``, and decides alone there)."""
    if q.machine != hostenv.host_machine():
        return None, f"not run: pip would evaluate markers for this host's {hostenv.host_machine()}, not {q.machine}"
    python = hostenv.pyenv_pythons().get(q.python)
    if python is None and sys.version_info[:2] != tuple(int(p) for p in q.python.split(".")):
        return None, f"not run: no CPython {q.python} on this host to evaluate its markers"
    interpreter = str(python / "bin" / "python3") if python is not None else sys.executable
    return [interpreter, str(Path(pip_module.__file__).parent)], ""


def resolve_pip(q: Query, index: str, glibc: str, pip: list[str], seconds: float = TIMEOUT) -> ResolverAnswer:
    py = q.python.replace(".", "")
    plats = [
        a for p in manylinux_platforms(f"manylinux_{glibc.replace('.', '_')}_{q.machine}") for a in ("--platform", p)
    ]
    with tempfile.TemporaryDirectory(prefix="farm-installs-") as tmp:
        req, report = Path(tmp) / "requirements.txt", Path(tmp) / "report.json"
        req.write_text("\n".join(q.lines()) + "\n")
        cmd = [
            *pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), "--no-cache-dir",
            "--index-url", index, "--only-binary", ":all:", *plats, "--python-version", q.python,
            "--implementation", "cp", "--abi", f"cp{py}", "--abi", "abi3", "--abi", "none", "-r", str(req),
        ]  # fmt: skip
        r = _run_resolver(cmd, seconds, f"{q.key}: pip")
        if r.returncode != 0 or not report.exists():
            return ResolverAnswer(False, why=_tail(r.stderr or r.stdout))
        try:
            doc = expect(load_json(read_regular(report, MAX_LOCK_BYTES, "pip's report"), "pip's report"), dict,
                         "pip's report")  # fmt: skip
            picked, files = {}, []
            for item in expect(doc.get("install", []), list, "pip's report: install"):
                meta = expect(expect(item, dict, "install[]").get("metadata"), dict, "install[].metadata")
                picked[str(canonicalize_name(str(meta.get("name"))))] = str(meta.get("version"))
                url = str(expect(item.get("download_info"), dict, "install[].download_info").get("url", ""))
                files.append(url.rsplit("/", 1)[-1])
        except Untrusted as err:
            return ResolverAnswer(False, why=f"pip's report: {err}")
    return ResolverAnswer(True, picked, files)


@dataclass
class InstallCheck:
    installs: bool | None  # None: no resolution possible (the stand-in index holds no such torch)
    floor: str | None
    why: str
    picked: dict[str, str]
    tried: list[str]
    cached: bool = False
    lock: str = ""  # the resolution as a PEP 751 lock, the index's own file URLs in it (installs only)
    pip: str = ""  # what pip, the second witness, said: resolves, does not resolve, or why it was not run

    def as_record(self) -> dict:
        out = {"installs": self.installs, "floor": self.floor, "picked": dict(sorted(self.picked.items()))}
        if self.why:
            out["why"] = self.why
        out["tried"] = self.tried
        uv = "resolves" if self.installs or "uv resolves" in self.why else "does not resolve"
        out["witnesses"] = {"uv": uv if self.installs is not None else "not run", "pip": self.pip}
        return out


class Resolver:
    """Resolves queries against one snapshot served on loopback, with a cache by query and listings read."""

    def __init__(self, snapshot: Snapshot, index_url: str, cache: Path | None = None, use_cache: bool = True) -> None:
        self.snapshot, self.index_url = snapshot, index_url
        self.cache = Path(cache) if cache is not None else hostenv.CACHE_ROOT / "installs"
        self.use_cache = use_cache
        self.pages: set[str] = set()  # every listing read by a resolution this resolver ran
        self.metadata: set[str] = set()  # every METADATA read ("<sha256>/<filename>")
        self.uv = _uv()
        self.versions = {"uv": _version([self.uv, "--version"]), "pip": pip_module.__version__}

    def _cache_path(self, q: Query) -> Path:
        body = json.dumps([CACHE_SCHEMA, q.key, q.requirements, q.floor, self.versions], sort_keys=True)
        return self.cache / f"{hashlib.sha256(body.encode()).hexdigest()}.json"

    def _cached(self, q: Query) -> InstallCheck | None:
        """The cached outcome of Q, or None (not cached, or a listing it read has changed). An entry is a regular
        file under the cache read capped (a FIFO, a device or a link out of the cache is refused, never read),
        and its lock is trusted only through the sha256 it was stored with."""
        path = self._cache_path(q)
        if not os.path.lexists(path):
            return None
        hint = f"remove {shown(path)}; the next run resolves the cell again"
        try:
            doc = expect(load_json(read_inside(self.cache, path, MAX_CACHE_BYTES, str(path)), str(path)), dict,
                         str(path))  # fmt: skip
        except Untrusted as err:
            raise SourceFetchError(f"{err}: not a resolution the farm cached", hint=hint) from None
        try:
            pages = expect(doc.get("pages"), dict, f"{path}: pages")
            if any(self.snapshot.page_digest(p) != d for p, d in pages.items()):
                return None  # a listing it read has changed: resolve again
            o = expect(doc.get("outcome"), dict, f"{path}: outcome")
            lock = expect(doc.get("lock") or "", str, f"{path}: lock")
            if hashlib.sha256(lock.encode()).hexdigest() != doc.get("lock_sha256"):
                raise Untrusted(f"{path}: its lock is not the one it was stored with (its sha256 differs)")
            if o["installs"] is False and "torch" not in o.get("picked", {}) and "alone" not in doc:
                return None  # recorded before a failure was told apart from a torch the stand-in lacks
            return InstallCheck(o["installs"] if o["installs"] is None else bool(o["installs"]), o.get("floor"), str(o.get("why", "")), dict(o.get("picked", {})),
                           list(o.get("tried", [])), cached=True, lock=lock,
                           pip=str((o.get("witnesses") or {}).get("pip", "")))  # fmt: skip
        except (Untrusted, KeyError, TypeError, AttributeError) as err:
            raise SourceFetchError(f"{shown(err, 500)}: not a resolution the farm cached", hint=hint) from None

    def resolve(self, q: Query) -> InstallCheck:
        if self.use_cache and (hit := self._cached(q)) is not None:
            return hit
        self.snapshot.pages_read.clear()
        self.snapshot.missing.clear()
        self.snapshot.refused.clear()
        self.snapshot.metadata_read.clear()
        self.snapshot.over = ""
        try:
            outcome = self._resolve(q, time.monotonic() + resolve_seconds())
        except TimedOut as err:
            raise SourceFetchError(str(err), hint="a resolution of the release's cells takes seconds: see what the "
                                   "listings it read offer (a project with thousands of candidates)") from None  # fmt: skip
        self.pages.update(self.snapshot.pages_read)
        self.metadata.update(self.snapshot.metadata_read)
        self._bounded(q)
        if self.snapshot.refused:
            raise SourceFetchError(
                f"{q.key}: the snapshot holds what the farm refuses to read: {'; '.join(sorted(self.snapshot.refused)[:5])}",
                hint="remove what it names from the snapshot; `python -m builder installs --record` reads it again",
            )
        if self.snapshot.missing:
            raise SourceFetchError(
                f"{q.key}: the snapshot lacks what the resolvers read: {'; '.join(sorted(self.snapshot.missing)[:5])}",
                hint="record it: `python -m builder installs --record` (reads PyPI)",
            )
        path = self._cache_path(q)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"outcome": outcome.as_record(), "pages": dict(sorted(self.snapshot.pages_read.items())),
               "lock": outcome.lock, "lock_sha256": hashlib.sha256(outcome.lock.encode()).hexdigest(),
               "alone": True}  # fmt: skip
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        with os.fdopen(fd, "w") as out:
            json.dump(doc, out, sort_keys=True)
        os.replace(tmp, path)
        return outcome

    def _bounded(self, q: Query) -> None:
        """SourceFetchError once the resolution went past the snapshot's candidate limit (then nothing of it holds)."""
        if self.snapshot.over:
            raise SourceFetchError(f"{q.key}: {self.snapshot.over} (stopped there)",
                                   hint="raise it with MAMBA_FARM_RESOLVE_CANDIDATES, once the listings it read are "
                                   "known to be what the index serves")  # fmt: skip

    def _resolve(self, q: Query, end: float) -> InstallCheck:
        left = lambda: end - time.monotonic()
        floors = [f for f in FLOORS if vtuple(f) >= vtuple(q.floor)] or [q.floor]
        if floors[0] != q.floor:
            floors.insert(0, q.floor)
        tried, last_why = [], ""
        for glibc in floors:
            tried.append(glibc)
            uv = resolve_uv(q, self.index_url, glibc, self.uv, left())
            self._bounded(q)
            if not uv.resolved:  # the reason kept is the most permissive floor's (a lower one may fail on its own)
                last_why = f"uv: {uv.why}"
                continue
            pip_cmd, pip_not_run = pip_for(q)
            files = _lock_files(uv.lock)
            if pip_cmd is not None:
                pip = resolve_pip(q, self.index_url, glibc, pip_cmd, left())
                self._bounded(q)
                if not pip.resolved:  # the two resolvers disagree: not published, both reasons kept
                    return InstallCheck(False, None, f"uv resolves at glibc {glibc}, pip does not: {pip.why}", {}, tried,
                                   pip="does not resolve")  # fmt: skip
                files = pip.files
            floor = max([glibc if glibc == q.floor else "0.0", *(wheel_floor(f) for f in files)], key=vtuple)
            floor = max(floor, q.floor, key=vtuple)
            lock = relock(uv.lock, self.snapshot, q, floor, uv.picked)
            return InstallCheck(True, floor, "", uv.picked, tried, lock=lock, pip=pip_not_run or "resolves")
        alone = resolve_uv(Query(q.project, q.version, (), q.torch, q.python, q.platform, q.floor), self.index_url,
                           floors[-1], self.uv, left())  # fmt: skip
        self._bounded(q)
        if not alone.resolved:  # the stand-in has no such torch: nothing is known of this cell, and nothing claimed
            return InstallCheck(None, None, f"PyPI holds no torch {q.torch} wheel for CPython {q.python} on {q.machine} "
                           f"(glibc {floors[-1]} or older) to stand in for PyTorch's own index: not resolved", {},
                           tried, pip="not run: no torch to resolve beside")  # fmt: skip
        pip_cmd, pip_not_run = pip_for(q)  # the second witness of a cell left out
        if pip_cmd is None:
            return InstallCheck(False, None, last_why, {}, tried, pip=pip_not_run)
        pip = resolve_pip(q, self.index_url, q.floor, pip_cmd, left())
        self._bounded(q)
        if pip.resolved:
            return InstallCheck(False, None, f"pip resolves at glibc {q.floor}, uv does not: {last_why}", {}, tried,
                           pip="resolves")  # fmt: skip
        return InstallCheck(False, None, last_why, {}, tried, pip="does not resolve")


@dataclass
class Run:
    outcomes: dict[str, InstallCheck]
    pages: set[str]  # the listings the resolutions read (those not answered from the cache)
    metadata: set[str]  # the METADATA they read


_LOOPBACK_FILE = re.compile(r"http://127\.0\.0\.1:\d+/files/([0-9a-f]{64})/([A-Za-z0-9._+%-]+)")


def _lock_files(raw: str) -> list[str]:
    """The wheel file names a uv lock picked."""
    return [urllib.parse.unquote(m.group(2)) for m in _LOOPBACK_FILE.finditer(raw)]


_LOCK_KEYS = ("lock-version", "created-by", "requires-python")  # what a lock keeps of uv's, beside its packages
_PACKAGE_KEYS = ("name", "version", "marker", "requires-python")


def relock(raw: str, snapshot: Snapshot, q: Query, floor: str, picked: dict[str, str]) -> str:
    """uv's lock made anew from checked data: each package's name, version and marker as uv resolved them, each
    wheel's URL and sha256 those of the listing the snapshot served it from (a URL :func:`locked_url` takes, a
    hash the listing and uv's lock agree on), and a header that says what it is: the cell's resolved closure,
    which ``uv pip install -r`` installs as it is. Whatever else uv's lock holds is left out; the TOML is written
    by tomlkit, so no field can close a string or add a table."""
    try:
        doc = load_toml(raw, "uv's lock")
        packages = []
        for i, pkg in enumerate(expect(doc.get("packages", []), list, "uv's lock: packages")):
            where = f"uv's lock: packages[{i}]"
            pkg = expect(pkg, dict, where)
            out = {k: expect(pkg[k], str, f"{where}.{k}") for k in _PACKAGE_KEYS if k in pkg}
            wheels = []
            for j, w in enumerate(expect(pkg.get("wheels", []), list, f"{where}.wheels")):
                w = expect(w, dict, f"{where}.wheels[{j}]")
                m = _LOOPBACK_FILE.fullmatch(expect(w.get("url"), str, f"{where}.wheels[{j}].url"))
                if m is None:
                    raise Untrusted(
                        f"{where}.wheels[{j}].url {shown(repr(w.get('url')), 200)}: not a file the snapshot served"
                    )
                sha = sha256_name((expect(w.get("hashes"), dict, f"{where}.wheels[{j}].hashes")).get("sha256"),
                                  f"{where}.wheels[{j}].hashes.sha256")  # fmt: skip
                f = snapshot.file(m.group(1), urllib.parse.unquote(m.group(2)))
                if f is None or sha != f.sha256 or sha != m.group(1):
                    raise Untrusted(f"{where}: uv's lock names {shown(m.group(2), 200)} (sha256 {sha}), which no "
                                    "listing served with that hash")  # fmt: skip
                wheel = {"url": locked_url(f.url, f"the listing's URL of {f.filename}"), "hashes": {"sha256": sha}}
                if f.size is not None:
                    wheel["size"] = f.size
                wheels.append(wheel)
            if not wheels:
                raise Untrusted(
                    f"{where}: {shown(out.get('name'), 100)} has no wheel (the farm locks binary wheels only)"
                )
            packages.append({**out, "wheels": wheels})
        body = {**{k: expect(doc[k], str, f"uv's lock: {k}") for k in _LOCK_KEYS if k in doc}, "packages": packages}
    except Untrusted as err:
        raise SourceFetchError(f"{q.key}: {err}: not locked") from None
    header = (f"# {q.key}: what `pip install` of this wheel resolves to beside torch {q.torch} (binary wheels only,\n"
              f"# glibc {floor} and later), written by the mamba-ssm wheel farm (python -m builder installs).\n"
              f"# Install it as it is: uv pip install -r <this file>\n")  # fmt: skip
    lock = header + _toml(body)
    check_lock(lock, snapshot, q, picked)
    return lock


def _toml(body: dict) -> str:
    """A lock's TOML as uv lays it out (a table per package, its wheels inline), every value escaped by tomlkit."""
    import tomlkit

    doc = tomlkit.document()
    for k in _LOCK_KEYS:
        if k in body:
            doc[k] = body[k]
    packages = tomlkit.aot()
    for pkg in body["packages"]:
        table = tomlkit.table()
        for k, v in pkg.items():
            if k != "wheels":
                table[k] = v
        wheels = tomlkit.array()
        for w in pkg["wheels"]:
            wheel = tomlkit.inline_table()
            wheel.update({k: v for k, v in w.items() if k != "hashes"})
            hashes = tomlkit.inline_table()
            hashes.update(w["hashes"])
            wheel["hashes"] = hashes
            wheels.append(wheel)
        table["wheels"] = wheels
        packages.append(table)
    doc["packages"] = packages
    return tomlkit.dumps(doc)


def check_lock(lock: str, snapshot: Snapshot, q: Query, picked: dict[str, str]) -> dict:
    """The lock parsed, when it names exactly the resolution (PICKED: name -> version) and each wheel by a URL
    and sha256 that a listing of SNAPSHOT gives it (the listings are read here, so a cached lock is checked
    against the snapshot as it is now); else SourceFetchError naming what differs."""
    try:
        doc = load_toml(lock, f"{q.key}: its lock")
        got, files = {}, {}
        for pkg in expect(doc.get("packages"), list, "packages"):
            name = str(canonicalize_name(expect(expect(pkg, dict, "packages[]").get("name"), str, "packages[].name")))
            got[name] = expect(pkg.get("version"), str, f"{name}: version")
            for w in expect(pkg.get("wheels"), list, f"{name}: wheels"):
                url = locked_url(expect(w, dict, f"{name}: wheels[]").get("url"), f"{name}: a wheel's url")
                sha = sha256_name(expect(w.get("hashes"), dict, f"{name}: hashes").get("sha256"), f"{name}: sha256")
                files.setdefault(name, []).append((url, sha))
        if got != {str(canonicalize_name(k)): v for k, v in picked.items()}:
            raise Untrusted(f"it names {shown(sorted(got.items()), 500)}, the resolution picked "
                            f"{shown(sorted(picked.items()), 500)}")  # fmt: skip
        stored = Snapshot(snapshot.root)  # the listings as the folder holds them now
        for name, wheels in files.items():
            listed = {(f.url, f.sha256) for f in stored.page(name) or []}
            for url, sha in wheels:
                if (url, sha) not in listed:
                    raise Untrusted(f"{name}: {shown(url, 300)} with sha256 {sha} is not in its listing")
    except Untrusted as err:
        raise SourceFetchError(f"{q.key}: its lock: {shown(err, 1000)}: not written",
                               hint="remove the farm's installs cache (<farm cache>/installs) and run again")  # fmt: skip
    return doc


def same_requirements(queries: dict[str, tuple[Query, list[str]]]) -> tuple[dict, dict[str, str]]:
    """QUERIES with each release's queries answered by the newest release of its project whose wheel's requirements
    (the torch pin aside) are the same: (the queries to resolve, key -> (query, build ids); release -> the release
    it is the same as). One resolution serves every release it would give the same answer for."""
    def reqs(q: Query) -> tuple[str, ...]:
        return tuple(r for r in q.requirements if canonicalize_name(Requirement(r).name) != "torch")

    newest: dict[tuple[str, tuple[str, ...]], str] = {}
    for q, _ids in queries.values():
        k = (q.project, reqs(q))
        if k not in newest or Version(q.version) > Version(newest[k]):
            newest[k] = q.version
    out: dict[str, tuple[Query, list[str]]] = {}
    same_as: dict[str, str] = {}
    for q, ids in queries.values():
        version = newest[(q.project, reqs(q))]
        if version != q.version:
            same_as[f"{q.project} {q.version}"] = f"{q.project} {version}"
            q = Query(q.project, version, q.requirements, q.torch, q.python, q.platform, q.floor)
        if q.key in out:
            old, old_ids = out[q.key]
            out[q.key] = (min(old, q, key=lambda x: vtuple(x.floor)), [*old_ids, *ids])
        else:
            out[q.key] = (q, list(ids))
    return out, same_as


def newest_first(queries: dict[str, tuple[Query, list[str]]], resolve, releases_of: set[tuple[str, str]]) -> Run:
    """Each cell's newest release that installs, and no more: per cell (project, torch, Python, machine), its
    releases' queries newest first, one round at a time (RESOLVE: a list of queries -> a Run), an older release
    resolved only where every newer one does not install. A query of no line's release (RELEASES_OF: this
    checkout's) is resolved in the first round. The queries left unresolved are planned, never left out."""
    ladders: dict[tuple, list[str]] = {}
    for key, (q, _ids) in queries.items():
        cell = (q.project, q.torch, q.python, q.platform) if (q.project, q.version) in releases_of else key
        ladders.setdefault(cell, []).append(key)
    for keys in ladders.values():
        keys.sort(key=lambda k: Version(queries[k][0].version), reverse=True)
    done: dict[str, InstallCheck] = {}
    pages, metadata = set(), set()
    rank = 0
    while batch := [keys[rank] for keys in ladders.values()
                    if rank < len(keys) and not any(done[k].installs for k in keys[:rank])]:  # fmt: skip
        run = resolve([queries[k][0] for k in batch])
        done.update(run.outcomes)
        pages |= run.pages
        metadata |= run.metadata
        rank += 1
    return Run(done, pages, metadata)


def lock_name(q: Query) -> str:
    """``pylock.causal-conv1d-1.7.0-torch2.8.0-cp311-linux_x86_64.toml`` (PEP 751: no dots in the name)."""
    name = f"{q.project}-{q.version}-torch{q.torch}-cp{q.python.replace('.', '')}-{q.platform}"
    return f"pylock.{name.replace('.', '_')}.toml"


def resolve_all(queries: list[Query], snapshot: Snapshot, jobs: int = 6, progress: bool = False,
                use_cache: bool = True, cache: Path | None = None) -> Run:  # fmt: skip
    """Every query's outcome, ``jobs`` at once (each worker with its own server over the one snapshot folder)."""
    import concurrent.futures
    import threading

    local = threading.local()
    servers: list[SnapshotServer] = []
    resolvers: list[Resolver] = []
    lock = threading.Lock()
    done: dict[str, InstallCheck] = {}

    def one(q: Query) -> InstallCheck:
        if not hasattr(local, "resolver"):
            fork = snapshot.fork()
            server = SnapshotServer(fork)
            local.resolver = Resolver(fork, server.__enter__(), cache=cache, use_cache=use_cache)
            with lock:
                servers.append(server)
                resolvers.append(local.resolver)
        return local.resolver.resolve(q)

    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            futures = {pool.submit(one, q): q for q in sorted(queries, key=lambda q: q.key)}
            for fut in concurrent.futures.as_completed(futures):
                q = futures[fut]
                done[q.key] = fut.result()
                if progress:
                    mark = "installs" if done[q.key].installs else "does not install"
                    print(f"[{len(done)}/{len(queries)}] {shown(q.key)}: {mark}", flush=True)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    return Run(done, {p for r in resolvers for p in r.pages}, {m for r in resolvers for m in r.metadata})


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    if here.exists():
        return str(here)
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except ImportError:
        raise MatrixError(
            "uv is not installed: `builder installs` resolves with it",
            hint="install the farm group, which holds it: pip install --group farm",
        ) from None


def _version(cmd: list[str]) -> str:
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_clean_env(), timeout=60)
    return (r.stdout.strip().split() or ["?"])[1] if r.returncode == 0 else "?"


# ---------------------------------------------------------------------------------------------------------- queries


def wheel_requirements(requires_dist: list[str], torch_pin: str) -> tuple[str, ...]:
    """A wheel's Requires-Dist as the farm publishes it: extras' requirements left out (the page installs none),
    torch's replaced by the farm's pin (what relabelling writes)."""
    out = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise MatrixError(f"Requires-Dist {shown(line, 200)!r}: {err}") from None
        if req.marker is not None and "extra" in str(req.marker):
            continue
        if canonicalize_name(req.name) == "torch":
            continue
        out.append(str(req))
    return (torch_pin, *sorted(out))


def sdist_requires(pkg_info: bytes, what: str) -> list[str]:
    """The Requires-Dist lines of an sdist's PKG-INFO (metadata 2.2+ records them)."""
    msg = email.parser.Parser().parsestr(text(pkg_info, what))
    return [str(v) for v in msg.get_all("Requires-Dist") or []]


def instead(key_parts: tuple[str, str, str, str, str], outcomes: dict[tuple, bool],
            releases_of: set[tuple[str, str]] = frozenset()) -> str:  # fmt: skip
    """What a user of a cell that does not install can do, from the other cells' outcomes: the newest other release
    of the project that installs beside this torch, Python and machine (they keep their torch), of RELEASES_OF (the
    (project, version) of a line's releases: another line's version is never offered); else the oldest newer torch
    that installs for the same Python and machine, else the Pythons that install with this torch."""
    project, version, torch, python, platform = key_parts
    releases = sorted(
        (v for (p, v, t, py, pl), ok in outcomes.items() if ok and (p, t, py, pl) == (project, torch, python, platform)
         and v != version and (p, v) in releases_of and (p, version) in releases_of),
        key=Version,
    )  # fmt: skip
    if releases:
        return f"{project}=={releases[-1]} (the newest release that installs beside this torch)"
    newer = sorted(
        (t for (p, v, t, py, pl), ok in outcomes.items() if ok and (p, v, py, pl) == (project, version, python, platform)
         and Version(t) > Version(torch)),
        key=Version,
    )  # fmt: skip
    if newer:
        return f"torch >= {'.'.join(newer[0].split('.')[:2])} (its cells install)"
    pythons = sorted(
        {
            py
            for (p, v, t, py, pl), ok in outcomes.items()
            if ok and (p, v, t, pl) == (project, version, torch, platform)
        },
        key=vtuple,
    )
    if pythons:
        return f"Python {', '.join(pythons)} with this torch"
    return ""


def update_record(path: Path, cells: dict[str, dict], today: str, same_as: dict[str, str] | None = None) -> None:
    """Write CELLS into the record at PATH, every other cell kept as the file holds it (its floors tried, its
    witnesses and lock included); SAME_AS (release -> the release its cells are recorded under) joins the record's."""
    from builder.facts import installs as record

    before = record.load(path)
    merged = {k: v for k, v in {**before.same_as, **(same_as or {})}.items() if k not in (same_as or {}).values()}
    write_record(path, {**before.written, **cells}, today, merged)


def write_record(path: Path, cells: dict[str, dict], today: str, same_as: dict[str, str] | None = None) -> None:
    doc = {
        "comment": "written by `python -m builder installs`; read by the plan, the tiers and the coverage page",
        "recorded": today,
        "stand_in": STAND_IN,
    }
    if same_as:  # a release whose wheel's requirements are another's: its cells are that release's
        doc["same_as"] = dict(sorted(same_as.items()))
    doc["cells"] = dict(sorted(cells.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out, indent=1, sort_keys=False)
        out.write("\n")
    os.replace(tmp, path)


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def plan_queries(plan, sources) -> dict[str, tuple[Query, list[str]]]:
    """Every cell of PLAN as a query: key -> (query, the ids of the builds serving it). ``sources`` (a
    :class:`~builder.sourcing.sources.SourceCache`) gives each recipe's pinned sdist, whose PKG-INFO names the
    requirements its wheels carry."""
    from builder.facts import compat as compat_mod
    from builder.planning.plan import served_cells

    compat = compat_mod.load()
    requires: dict[tuple[str, str], list[str]] = {}  # (project, version): each release's own requirements
    out: dict[str, tuple[Query, list[str]]] = {}
    for b in plan.builds:
        recipe = plan.recipe_of(b)
        version = recipe.source.version if recipe is not None else plan.matrix.package.version
        if recipe is not None and (recipe.name, version) not in requires:
            requires[(recipe.name, version)] = recipe_requires(recipe, sources, b)
        floor = ".".join(re.match(r"manylinux_(\d+)_(\d+)_", b.manylinux).groups())
        for cell in served_cells(plan, b):
            minor = cell.torch
            pin = f"torch>={compat.stable_floor}" if b.stable else f"torch=={minor}.*"
            reqs = wheel_requirements(requires.get((recipe.name, version), []) if recipe else [], pin)
            q = Query(b.project, version, reqs, compat.torch[minor].latest, cell.python, cell.platform, floor)
            if q.key in out:  # one resolution, at the lowest floor of the builds serving it (ROCm's image is 2.35)
                old, ids = out[q.key]
                out[q.key] = (min(old, q, key=lambda x: vtuple(x.floor)), [*ids, b.id])
            else:
                out[q.key] = (q, [b.id])
    return out


def recipe_requires(recipe, sources, spec=None) -> list[str]:
    """The Requires-Dist of a recipe's pinned sdist (its PKG-INFO, or for metadata before 2.2, which records none,
    its egg-info's requires.txt), fetched and checked by sha256. A release built from its tag's commit (its sdist
    holds no kernel sources) has them in its sdist all the same, as published. A git tree of no release (a
    canary's) has no PKG-INFO: its package's metadata, as the preflight prepares it for SPEC's cell, says them."""
    from builder.facts.spec import GitPin, SdistPin
    from builder.planning.recipes import CellFacts
    from builder.planning.releases import release_of
    from builder.sourcing.preflight import check_cell

    pin = recipe.source
    if isinstance(pin, GitPin) and (rel := release_of(recipe)) is not None:
        pin = SdistPin(pin.name, rel.version, rel.sha256)
    if isinstance(pin, GitPin) and spec is not None:
        with tempfile.TemporaryDirectory(prefix="farm-installs-") as tmp:
            return list(check_cell(recipe, CellFacts.from_spec(spec), Path(tmp), sources).requires)
    path = sources.fetch(pin)
    with tempfile.TemporaryDirectory(prefix="farm-installs-") as tmp:
        top = sources.unpack(pin, Path(tmp) / "tree")
        info = top / "PKG-INFO"
        if not info.is_file():
            raise MatrixError(f"{path.name}: no PKG-INFO at its top, so its requirements cannot be read")
        found = sdist_requires(info.read_bytes()[: 1 << 20], f"{path.name}: PKG-INFO")
        egg = sorted(top.glob("*.egg-info/requires.txt"))
        if not found and egg and not egg[0].is_symlink() and egg[0].is_file():
            where = f"{path.name}: {egg[0].relative_to(top)}"
            found = parse_requires_txt(text(egg[0].read_bytes()[: 1 << 20], where), where)
        return found


def write_locks(folder: Path, queries: list[Query], done: dict[str, InstallCheck], snapshot: Snapshot) -> int:
    """Each installing cell's lock into FOLDER (a cached outcome from before locks were kept is locked anew). Each
    is checked against the snapshot's listings and the resolution (:func:`check_lock`), written to a temporary
    file, read back and checked again, and only then put in place: a lock already there is replaced whole or
    left as it was."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    with SnapshotServer(fork := snapshot.fork()) as url:
        uv = _uv()
        for q in queries:
            o = done[q.key]
            if not o.installs:
                continue
            lock = o.lock
            if not lock:
                fresh = resolve_uv(q, url, o.floor or q.floor, uv, resolve_seconds())
                if not fresh.resolved:
                    raise SourceFetchError(
                        f"{q.key}: recorded as installing, but uv no longer resolves it: {fresh.why}"
                    )
                lock = relock(fresh.lock, fork, q, o.floor or q.floor, fresh.picked)
            want = check_lock(lock, fork, q, o.picked)
            path = folder / lock_name(q)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".partial-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(lock)
                back = text(read_regular(tmp, MAX_LOCK_BYTES, tmp), tmp)
                if back != lock or check_lock(back, fork, q, o.picked) != want:
                    raise SourceFetchError(f"{q.key}: its lock, read back from {shown(tmp)}, is not what was written")
                os.replace(tmp, path)
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
            n += 1
    return n
