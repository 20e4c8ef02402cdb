"""The torch-environment store: the smoke tests' torch venvs and the dependency layers on them, on disk: shared
files, a size budget, least recently used out first.

A (Python, torch) has a slot under ``<farm cache>/smoke/`` (``smoke_slot``) with its torch venvs and layers. Venvs
share identical files by hard links, with each other and with the builds' torch folders (``torch_folder``); past
``MAMBA_FARM_CACHE_BUDGET`` the least recently used go; :func:`preflight` warns before a run; ``python -m builder
cache`` shows and prunes.
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

from builder.environments.venv import run_step
from builder.errors import UsageError, VerificationError
from builder.facts import hostenv, timings
from builder.facts.compat import manylinux_glibc
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


def real_dirs(folder: Path):
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
    for slot in real_dirs(root):
        for venv in (v for kind in _KINDS if not (slot / kind).is_symlink() for v in real_dirs(slot / kind)):
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
            linked = _link_if_same(p, st, cand)
            if linked is not None:
                saved += st.st_size if linked else 0
                break
    return saved


def _link_if_same(p: Path, st: os.stat_result, cand: Path) -> bool | None:
    """Replace P by a hard link to CAND when their bytes are equal: True when linked, False when they already
    share an inode or sit on different disks (look no further), None to try the next candidate. A venv beside
    this one may be made or removed by another build right now (its pip unpacks, the budget evicts it): a
    candidate that vanishes midway is no candidate, and P stays as it was."""
    tmp = p.with_name(f".{p.name}.link")
    try:
        cst = cand.stat()
        if (cst.st_dev, cst.st_ino) == (st.st_dev, st.st_ino) or cst.st_dev != st.st_dev:
            return False
        if not filecmp.cmp(p, cand, shallow=False):
            return None
        os.link(cand, tmp)
    except FileNotFoundError:
        return None
    os.chmod(tmp, st.st_mode)  # same bytes; the link keeps the candidate's mode otherwise
    os.replace(tmp, p)
    return True


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
        # a smoke test running now holds its (Python, torch) folder's lock (builder/verifying/smoke.py): skip that one
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
    venv a smoke test installs its wheel beside: builder.verifying.smoke.smoke_test)."""
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
