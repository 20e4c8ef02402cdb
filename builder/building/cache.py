"""The farm's smoke-test torch venvs on disk: shared files, a size budget, least recently used out first.

Venvs under ``<farm cache>/smoke/`` share identical files by hard links; past ``MAMBA_FARM_CACHE_BUDGET`` the
least recently used go; :func:`preflight` warns before a run; ``python -m builder cache`` shows and prunes.
What is on disk is outside data: a link is never the cache's, a ``.complete`` must be a small regular file.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from builder.building.driver import timings
from builder.errors import UsageError, VerificationError
from builder.facts import hostenv
from builder.facts.untrusted import Untrusted, read_inside, remove_tree, shown, text

DEFAULT_BUDGET = 40 * 1024**3  # about 7 CUDA torch venvs of different releases, a fraction of a 100 GB disk
CUDA_TORCH_BYTES = 5_400_000_000  # measured: torch 2.14.1 / 2.15.0 (CUDA 13) with their nvidia-* wheels
CPU_TORCH_BYTES = 1_000_000_000
_SHARE_MIN = 1 << 20  # files below 1 MB are not worth a link
_SIZE_RE = re.compile(r"(\d{1,15}(?:\.\d{1,6})?)\s*([KMGT]?)i?B?", re.IGNORECASE)  # 15 digits: past any disk
_COMPLETE_BYTES = 4096  # ".complete": a torch venv's requirement line; a dependency layer's, then its requirements
_KINDS = ("torch-envs", "deps-envs")  # a slot's torch venvs, and the dependency layers on top of them (deps_layer)


def smoke_root() -> Path:
    return hostenv.CACHE_ROOT / "smoke"


def parse_size(text: str) -> int:
    m = _SIZE_RE.fullmatch(text.strip()) if len(text) < 40 else None
    if not m:
        raise UsageError(f"{shown(repr(text), 60)} is not a size (write 40G, 500M, 1.5T or a number of bytes)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def budget() -> int:
    text = os.environ.get("MAMBA_FARM_CACHE_BUDGET")
    return parse_size(text) if text else DEFAULT_BUDGET


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    requirement: str  # what .complete says: "torch==2.14.1"; a dependency layer's: "torch==2.14.1 + einops, ..."
    last_used: float
    apparent: int  # bytes of its files, shared ones included


def _files(root: Path):
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            if not p.is_symlink():
                yield p, st


def _real_dirs(folder: Path):
    """The sub-folders of FOLDER that are folders themselves, not links to one (lstat, never followed)."""
    try:
        with os.scandir(folder) as it:
            return sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def linked(root: Path | None = None) -> list[Path]:
    """Slots, torch-envs and deps-envs folders and the venvs in them under the smoke cache that are links: not the
    cache's to prune."""
    root = root or smoke_root()
    out = []
    for slot in sorted(root.glob("*")):
        inner = [] if slot.is_symlink() else [q for kind in _KINDS for q in [slot / kind, *(slot / kind).glob("*")]]
        out += [p for p in [slot, *inner] if p.is_symlink()]
    return out


def entries(root: Path | None = None, warn=None) -> list[CacheEntry]:
    """Every complete torch venv and dependency layer under the smoke cache, least recently used first. Only
    real folders are walked (a link to a folder elsewhere is not the cache's); a ``.complete`` that is not a
    small regular file is not a complete venv (``warn`` is told)."""
    root = root or smoke_root()
    out = []
    for slot in _real_dirs(root):
        for venv in (v for kind in _KINDS if not (slot / kind).is_symlink() for v in _real_dirs(slot / kind)):
            done = venv / ".complete"
            if not os.path.lexists(done):
                continue
            try:
                # read only as the cache's own file: a link out of the cache is never followed (nor its target shown)
                lines = text(read_inside(root, done, _COMPLETE_BYTES), str(done)).split()
                requirement = " + ".join(filter(None, [" ".join(lines[:1]), ", ".join(lines[1:])]))
            except Untrusted as err:
                if warn:
                    warn(f"cache: {done}: skipped, not a complete venv ({shown(err, 200)})")
                continue
            used = venv / ".last-used"
            try:
                last = (used if used.is_file() else done).lstat().st_mtime
            except OSError:
                continue
            out.append(CacheEntry(venv, requirement, last, sum(st.st_size for _, st in _files(venv))))
    return sorted(out, key=lambda e: e.last_used)


def real_bytes(paths: list[Path]) -> int:
    """Disk used by these folders together, each inode once (hard links shared between venvs count once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in paths:
        for _, st in _files(root):
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def touch(venv: Path) -> None:
    (venv / ".last-used").touch()


def _key(rel: Path) -> Path:
    """lib/python3.11/site-packages/x -> site-packages/x: where a file sits whatever the venv's Python."""
    parts = rel.parts
    if len(parts) > 2 and parts[0] == "lib" and parts[1].startswith("python"):
        return Path(*parts[2:])
    return rel


def share(new: Path, others: list[Path]) -> int:
    """Hard-link NEW's large files to byte-identical files at the same place in OTHERS; the bytes saved."""
    index: dict[tuple[Path, int], list[Path]] = {}
    for other in others:
        for p, st in _files(other):
            if st.st_size >= _SHARE_MIN:
                index.setdefault((_key(p.relative_to(other)), st.st_size), []).append(p)
    saved = 0
    for p, st in list(_files(new)):
        if st.st_size < _SHARE_MIN:
            continue
        for cand in index.get((_key(p.relative_to(new)), st.st_size), []):
            cst = cand.stat()
            if (cst.st_dev, cst.st_ino) == (st.st_dev, st.st_ino) or cst.st_dev != st.st_dev:
                break
            if filecmp.cmp(p, cand, shallow=False):
                tmp = p.with_name(f".{p.name}.link")
                os.link(cand, tmp)
                os.chmod(tmp, st.st_mode)  # same bytes; the link keeps the candidate's mode otherwise
                os.replace(tmp, p)
                saved += st.st_size
                break
    return saved


def evict(limit: int, keep: set[Path] = frozenset(), root: Path | None = None, log=print) -> list[CacheEntry]:
    """Remove least recently used venvs (never those in KEEP) until the cache fits LIMIT; the removed ones."""
    root = root or smoke_root()
    live = entries(root)
    removed = []
    total = real_bytes([e.path for e in live])
    for e in list(live):
        if total <= limit:
            break
        if e.path in keep:
            continue
        # a smoke test running now holds its (Python, torch) folder's lock (builder/building/driver/build.py): skip that one
        lock = FileLock(str(e.path.parent.parent) + ".lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue
        layers = _layers_on(e.path, live)
        try:
            gone = [x for x in [*layers, e] if remove_tree(x.path, root)]  # never through a link out of the cache
        except OSError as err:
            log(f"cache: {e.path}: not removed ({err.strerror or err})")
            continue
        finally:
            lock.release()
        if e not in gone:
            continue
        for x in gone:
            live.remove(x)
        removed += gone
        total = real_bytes([x.path for x in live])
        log(f"cache: removed {shown(e.path)} ({shown(e.requirement, 200)}, last used {time.strftime('%Y-%m-%d', time.localtime(e.last_used))}): "
            f"over the {human(limit)} budget (MAMBA_FARM_CACHE_BUDGET)")  # fmt: skip
    return removed


def _layers_on(venv: Path, live: list[CacheEntry]) -> list[CacheEntry]:
    """The dependency layers of LIVE on top of the torch VENV (they see its files through a .pth, so they go with
    it): in its slot's deps-envs, named after it (``deps_layer``)."""
    if venv.parent.name != "torch-envs":
        return []
    return [x for x in live if x.path.parent == venv.parent.parent / "deps-envs" and x.path.name.startswith(venv.name + "-")]


def build_venvs() -> list[Path]:
    """The host executor's build venvs (builder/building/executors/host.py): share sources, never evicted here."""
    return sorted(p for p in (hostenv.CACHE_ROOT / "venvs").glob("*") if p.is_dir())


def share_build_venv(venv: Path, log=print) -> None:
    """Once per build venv (after its first build installed torch): link its files to the smoke venvs'."""
    marker = venv / ".mamba-farm-shared"
    if marker.exists() or not venv.is_dir():
        return
    saved = share(venv, [e.path for e in entries()])
    marker.touch()
    if saved:
        log(f"cache: build venv {venv.name} shares {human(saved)} with the smoke-test torch venvs (hard links)")


def after_create(venv: Path, root: Path | None = None, log=print) -> None:
    """What the smoke test calls when it made a torch venv: share its files, then fit the budget."""
    others = [e.path for e in entries(root) if e.path != venv]
    if root is None or Path(root) == smoke_root():  # the host executor's build venvs hold the same torch files
        others += build_venvs()
    saved = share(venv, others)
    if saved:
        log(f"cache: {venv.name} shares {human(saved)} with the other torch venvs (hard links)")
    touch(venv)
    evict(budget(), keep={venv}, root=root, log=log)


def torch_venv(python: str, torch_requirement: str, root: Path) -> Path:
    """A venv holding only ``torch_requirement`` (from wherever pip is configured to find it), made once under
    ROOT and touched on each use; a new one shares its files with the others and the budget is kept (the
    venv a smoke test installs its wheel beside: builder.verifying.wheels.smoke_test)."""
    from builder.verifying.wheels import run_step  # here: `builder cache` alone never loads the verifier

    ver = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"], check=False, capture_output=True, text=True
    )
    if ver.returncode:
        raise VerificationError(f"smoke test: cannot run --python {python}: {ver.stderr.strip()[-200:]}")
    base = root / f"py{ver.stdout.strip()}-{hashlib.sha256(torch_requirement.encode()).hexdigest()[:10]}"
    if (base / ".complete").exists():
        touch(base)
        return base
    started = time.monotonic()
    tmp = root / f".{base.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    run_step([python, "-m", "venv", str(tmp)], "create the torch venv")
    # --no-compile: byte-compiling every module of torch and its requirements was two thirds of the install's CPU;
    # a smoke test's imports compile the few hundred modules they load, once, into this writable venv.
    # --upgrade-strategy eager: what torch requires at its newest, as into an empty folder, never the setuptools a
    # Python 3.11 venv is seeded with (65.5, too old to build with, where a build mounts this venv's torch).
    run_step(
        [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "--upgrade",
         "--upgrade-strategy", "eager", torch_requirement],
        f"install {torch_requirement}",
    )  # fmt: skip
    shutil.rmtree(base, ignore_errors=True)
    os.rename(tmp, base)  # only `bin/python -m ...` is used: that survives the move (console scripts would not)
    (base / ".complete").write_text(torch_requirement + "\n")
    timings.record("torch", f"venv {base.name} ({torch_requirement})", time.monotonic() - started)
    # share its files with the other torch venvs there, then fit the cache budget (after_create)
    after_create(base, root=root.parent.parent, log=lambda msg: print(msg, file=sys.stderr))
    return base


def smoke_slot(python_tag: str, torch_version: str, machine: str | None = None) -> Path:
    """Where the smoke tests of a (Python, torch) keep their torch venvs and dependency layers: this host's, or
    with MACHINE another machine's (its dependency layers, beside its torch folder)."""
    return smoke_root() / f"{python_tag}-torch{torch_version}{'-' + machine if machine else ''}"


def _runs_on(platform: str, glibc: tuple[int, int]) -> bool:
    """A wheel of PLATFORM loads on a C library GLIBC (any, or a manylinux tag no newer)."""
    from builder.verifying.wheels import manylinux_glibc

    return platform == "any" or (0, 0) < manylinux_glibc(platform) <= glibc


def torch_folder(venv: Path, folder: Path, requirement: str, environment: dict, glibc: tuple[int, int]) -> str | None:
    """Hard-link REQUIREMENT's distribution and everything it requires (markers judged in ENVIRONMENT), file by file
    as each one's RECORD lists them, from the torch VENV into FOLDER/site, mark it ``.ready`` and rename it into
    place whole: a build's /torch that is one install and one copy on disk with the smoke test's venv, holding what
    a ``pip install --target`` of REQUIREMENT would (the venv's own pip stays out: nothing requires it). Returns None when
    done, else why not (and leaves no folder): a distribution missing, or none of a wheel's tags loads on GLIBC
    (the image's; pip on this host may have picked a wheel for a newer one)."""
    import csv
    from email.parser import BytesParser

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.tags import parse_tag
    from packaging.utils import canonicalize_name

    (site,) = venv.glob("lib/python*/site-packages")
    infos = {}
    for info in site.glob("*.dist-info"):
        meta = BytesParser().parsebytes(read_inside(site, info / "METADATA", 1 << 20))
        infos[canonicalize_name(meta.get("Name", ""))] = (info, meta)
    # (distribution, extra) pairs: cuda-toolkit[cudart,...] brings its libraries in only through its extras
    top = Requirement(requirement)
    wanted, seen, todo = set(), set(), [(canonicalize_name(top.name), e) for e in ("", *top.extras)]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        if name not in infos:
            return f"{name} is not in {venv}"
        info, meta = infos[name]
        if name not in wanted:
            wheel = text(read_inside(site, info / "WHEEL", 1 << 16), str(info / "WHEEL"))
            tags = [t for line in wheel.splitlines() if line.startswith("Tag:")
                    for t in parse_tag(line.partition(":")[2].strip())]  # fmt: skip
            if not any(_runs_on(t.platform, glibc) for t in tags):
                return f"{info.name}: none of its wheel's tags loads on glibc {glibc[0]}.{glibc[1]}"
            wanted.add(name)
        for line in meta.get_all("Requires-Dist") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                return f"{info.name}: Requires-Dist {shown(line)}"
            if req.marker is None or req.marker.evaluate({**environment, "extra": extra}):
                dep = canonicalize_name(req.name)
                todo += [(dep, e) for e in ("", *req.extras)]
    started = time.monotonic()
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    root = site.resolve()
    try:
        for name in sorted(wanted):
            info = infos[name][0]
            record = text(read_inside(site, info / "RECORD", 16 << 20), str(info / "RECORD"))
            for row in csv.reader(record.splitlines()):
                rel = os.path.normpath(row[0]) if row else ""
                src = root / rel
                if not rel or rel.startswith("..") or os.path.isabs(rel) or not src.is_file() or src.is_symlink():
                    continue  # console scripts (../../../bin), byte code never written (--no-compile)
                dst = tmp / "site" / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):  # a file of several distributions (nvidia/__init__.py)
                    os.link(src, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / ".ready").write_text(requirement + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    timings.record("torch", f"folder {folder.name} (linked from {venv.name})", time.monotonic() - started)
    return None


def _layer_begin(layer: Path) -> Path | None:
    """None when LAYER is made already (touched: in use); else a fresh temporary folder beside it to make it in."""
    if (layer / ".complete").exists():
        touch(layer)
        return None
    layer.parent.mkdir(parents=True, exist_ok=True)
    tmp = layer.parent / f".{layer.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def _layer_commit(tmp: Path, layer: Path, lines: list[str]) -> None:
    """Mark TMP complete (LINES: what it holds) and rename it into place as LAYER, whole or not at all."""
    (tmp / ".complete").write_text("".join(ln + "\n" for ln in lines))
    if layer.is_dir() and not layer.is_symlink() and not (layer / ".complete").exists():
        shutil.rmtree(layer)  # a layer a killed run left half made
    try:
        os.rename(tmp, layer)  # another run's layer of the same name is as good
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (layer / ".complete").exists():
            raise VerificationError(f"smoke test: could not put the dependency layer in place at {layer}") from None
    touch(layer)


def deps_layer(torch_venv: Path, torch_requirement: str, requirements: list[str], root: Path) -> Path:
    """A layer holding REQUIREMENTS (a wheel's declared dependencies, judged for the smoke test's Python, torch
    left out: builder.verifying.wheels.declared_requirements) on top of TORCH_VENV, made once under ROOT and
    reused: its folder is named by the torch venv and the sorted requirement set. It is a venv that sees the
    torch venv through a .pth file, so pip resolves against the torch already there (held to
    TORCH_REQUIREMENT by a constraint: never replaced) and installs only what is missing; made in a
    temporary folder and renamed into place whole. The smoke test adds its site-packages with
    ``site.addsitedir`` (builder.verifying.wheels.smoke_test)."""
    from builder.verifying.wheels import run_step, site_packages

    key = hashlib.sha256("\n".join([torch_requirement, *sorted(requirements)]).encode()).hexdigest()[:12]
    layer = root / f"{torch_venv.name}-{key}"
    if (tmp := _layer_begin(layer)) is None:
        return layer
    started = time.monotonic()
    tpy = str(torch_venv / "bin" / "python")
    run_step([tpy, "-m", "venv", "--without-pip", str(tmp)], "create the dependency layer")
    (Path(site_packages(str(tmp / "bin" / "python"))) / "_torch_base.pth").write_text(site_packages(tpy) + "\n")
    wanted = tmp / ".requirements.txt"
    wanted.write_text("".join(r + "\n" for r in sorted(requirements)))
    held = tmp / ".constraints.txt"
    held.write_text(torch_requirement + "\n")
    pip = [tpy, "-m", "pip", "--python", str(tmp / "bin" / "python")]
    run_step(
        [*pip, "install", "-q", "--no-compile", "-r", str(wanted), "-c", str(held)],  # as in torch_venv
        f"install the wheel's dependencies ({', '.join(sorted(requirements))}) next to {torch_requirement}",
    )
    _layer_commit(tmp, layer, [torch_requirement, *sorted(requirements)])
    timings.record("deps", f"layer {layer.name} ({len(requirements)} requirement(s))", time.monotonic() - started)
    return layer


# pip judges a requirement's markers by the interpreter it runs in: fetching for another machine, it is given that
# machine's marker environment (argv[1], JSON); --platform and --python-version pick the wheels.
_TARGET_PIP = """
import json, runpy, sys
from pip._vendor.packaging import markers
env = json.loads(sys.argv.pop(1))
markers.default_environment = lambda: dict(env)
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""
_PIP_FAILED = re.compile(r"No matching distribution found for (.{1,300})|satisfies the requirement (.{1,300}?) \(from versions")


def installed_dists(site: Path) -> dict[str, str]:
    """{canonical name: version} of the distributions pip put under SITE (``--target``), read from their
    ``.dist-info`` folder names (pip writes them ``name-version``); a name that is not one is skipped."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    out = {}
    for info in _real_dirs(site):
        name, sep, version = info.name.removesuffix(".dist-info").partition("-")
        if not info.name.endswith(".dist-info") or not sep:
            continue
        try:
            out[canonicalize_name(name)] = str(Version(version))
        except InvalidVersion:
            continue
    return out


def foreign_deps_layer(
    torch_site: Path, requirements: list[str], root: Path, *, platforms: list[str], python: str,
    environment: dict[str, str], pip_args: list[str] = (), compile_with: Path | None = None,
    log_path: Path | None = None, timeout: float = 1800,
) -> Path:
    """A layer holding REQUIREMENTS (a wheel's declared dependencies, torch left out:
    builder.verifying.wheels.declared_requirements) for another machine's smoke test, next to the torch folder whose
    site-packages is TORCH_SITE (builder/building/executors/docker.py's ``_foreign_torch``). This host's pip fetches
    it natively: wheels only, for PLATFORMS (every manylinux tag the wheel under test runs on) and CPython PYTHON,
    markers judged in ENVIRONMENT (the target's). Its resolution holds every distribution in the torch folder to its
    version (torch among them); what the folder already has is left out, the rest installed with ``--target`` into
    the layer's ``site/``. Made once under ROOT and reused, named by the torch folder and the sorted requirement set
    (``.complete`` says both, as ``deps_layer``'s does); made in a temporary folder and renamed into place whole.
    COMPILE_WITH (a host Python of that version) byte-compiles it: the container mounts it read-only. A requirement
    pip cannot fetch for the target is a VerificationError naming it and the platform, and leaves nothing behind."""
    import json

    from packaging.utils import canonicalize_name

    held = installed_dists(torch_site)
    if "torch" not in held:
        raise VerificationError(f"smoke test: no torch in {torch_site}: the dependency layer has no torch to hold")
    torch_requirement = f"torch=={held['torch']}"
    wanted = sorted(requirements)
    key = hashlib.sha256("\n".join([torch_requirement, platforms[0], python, *wanted]).encode()).hexdigest()[:12]
    layer = root / f"{torch_site.parent.name}-{key}"
    if (tmp := _layer_begin(layer)) is None:
        return layer
    started = time.monotonic()
    where = f"{platforms[0]} (CPython {python})"
    pip = [
        sys.executable, "-c", _TARGET_PIP, json.dumps(environment), "install", "--no-compile", "--only-binary", ":all:",
        *(a for tag in platforms for a in ("--platform", tag)), "--python-version", python, "--implementation", "cp",
        "--disable-pip-version-check", *pip_args,
    ]  # fmt: skip

    def run(argv: list[str], what: str) -> str:
        try:
            proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise VerificationError(f"smoke test: {what} for {where} timed out after {timeout:.0f}s") from None
        if log_path is not None:
            with open(log_path, "a") as f:
                f.write(f"== {what} for {where}\n{proc.stdout}{proc.stderr}")
        if proc.returncode:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR:")]
            found = next((m for ln in errors if (m := _PIP_FAILED.search(ln))), None)
            if found:
                raise VerificationError(
                    f"smoke test: the wheel's dependency {shown(found.group(1) or found.group(2), 300)} cannot be "
                    f"fetched for {where}: {shown(errors[-1], 400)}")  # fmt: skip
            last = (errors or proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise VerificationError(f"smoke test: could not {what} for {where}: {shown(last, 400)}")
        return proc.stdout

    try:
        (tmp / "site").mkdir(parents=True)
        (tmp / ".requirements.txt").write_text("".join(r + "\n" for r in wanted))
        (tmp / ".constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(held.items())))
        report = tmp / ".report.json"
        report.write_text('{"install": []}')  # nothing declared but torch: an empty layer, no pip
        if wanted:
            run([*pip, "--dry-run", "--ignore-installed", "--report", str(report), "--target", str(tmp / "dry"),
                 "-r", str(tmp / ".requirements.txt"), "-c", str(tmp / ".constraints.txt")],
                f"resolve the wheel's dependencies ({', '.join(wanted)}) next to {torch_requirement}")  # fmt: skip
        try:
            items = json.loads(text(read_inside(tmp, report, 64 << 20), str(report))).get("install") or []
            resolved = {canonicalize_name(i["metadata"]["name"]): str(i["metadata"]["version"]) for i in items}
        except (Untrusted, ValueError, KeyError, TypeError, AttributeError) as err:
            raise VerificationError(f"smoke test: pip's report of the dependencies cannot be read ({shown(err, 200)})") from None
        fetch = sorted(f"{n}=={v}" for n, v in resolved.items() if n not in held)
        (tmp / ".resolved.txt").write_text("".join(r + "\n" for r in fetch))
        if fetch:
            run([*pip, "--no-deps", "--target", str(tmp / "site"), *fetch], f"fetch {len(fetch)} distribution(s)")
        if compile_with is not None:  # bytecode is the same on every machine; a file its Python cannot read stays .py
            try:
                subprocess.run([str(compile_with), "-m", "compileall", "-q", "-j", "0", str(tmp / "site")],
                               check=False, capture_output=True, timeout=timeout)  # fmt: skip
            except subprocess.TimeoutExpired:
                raise VerificationError(f"smoke test: byte-compiling the dependency layer timed out after {timeout:.0f}s") from None
        _layer_commit(tmp, layer, [torch_requirement, *wanted])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    timings.record("deps", f"layer {layer.name} ({len(requirements)} requirement(s), {where})", time.monotonic() - started)
    return layer


def preflight(needs: list[tuple[str, str, bool]], root: Path | None = None) -> str | None:
    """NEEDS: (python tag, torch version, CUDA build?) per smoke test of a run. A warning when the venvs
    the run would add (the ones not cached yet, one per torch: Pythons share) take the cache past the
    budget; None when it fits."""
    root = root or smoke_root()
    have = {e.path.parent.parent.name for e in entries(root)}  # "cp311-torch2.14.1"
    missing = {(py, torch, cuda) for py, torch, cuda in needs if f"{py}-torch{torch}" not in have}
    if not missing:
        return None
    by_torch: dict[str, bool] = {}
    for _, torch, cuda in missing:
        by_torch[torch] = by_torch.get(torch, False) or cuda
    add = sum(CUDA_TORCH_BYTES if cuda else CPU_TORCH_BYTES for cuda in by_torch.values())
    now = real_bytes([e.path for e in entries(root)])
    limit = budget()
    if now + add <= limit:
        return None
    return (f"cache: this run's smoke tests add {len(missing)} torch venv(s) for {len(by_torch)} torch release(s), "
            f"about {human(add)} (Pythons of one torch share files), to the {human(now)} cached: past the "
            f"{human(limit)} budget. The least recently used venvs will be removed as it goes (set "
            f"MAMBA_FARM_CACHE_BUDGET to keep more; `python -m builder cache prune` frees space now)")  # fmt: skip
