"""What a compiled extension is: its file name's meaning (module, abi3 or version-specific) and what is compiled
into it (machine, the C++ ABI of the symbols it needs, CUDA fatbin and HIP offload-bundle targets).

Standard library only, importing neither torch nor builder: the farm's verifier and the doctor (which runs
in the broken environment it diagnoses) both read extensions here. 64-bit little-endian ELF only.
"""

from __future__ import annotations

import functools
import inspect
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .guard import Untrusted, read_regular, shown

_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
SYMBOL_TABLES = (_SHT_SYMTAB, _SHT_DYNSYM)
_SHN_UNDEF = 0
EM_AMDGPU = 224


MAX_ELF_BYTES = 1 << 30  # the largest extension read whole (a CUDA build with many archs is a few hundred MB)


class NotAnElf(Untrusted):
    """The one error of this reader: the file is not an ELF image it can read (whatever is broken in it)."""


# What a malformed image makes the parsing below raise: offsets past the end, tables too short, counts that
# do not fit. Each public reader turns them into NotAnElf, so a caller catches one type.
_MALFORMED = (IndexError, struct.error, OverflowError, ValueError, UnicodeDecodeError, MemoryError, KeyError)


def _refusing(fn):
    """Map whatever a malformed image makes ``fn`` raise to NotAnElf (generators included)."""

    def refuse(err: BaseException):
        return NotAnElf(f"not a readable ELF image ({type(err).__name__}: {shown(err, 200)})")

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except NotAnElf:
                raise
            except _MALFORMED as err:
                raise refuse(err) from None

        return gen

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NotAnElf:
            raise
        except _MALFORMED as err:
            raise refuse(err) from None

    return wrapper


# --------------------------------------------------------------------------- ELF


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int


class Elf:
    """The section table and symbol tables of one ELF image (a file, or a code object held in memory)."""

    @_refusing
    def __init__(self, data: bytes, name: str = "ELF image"):
        if data[:4] != b"\x7fELF":
            raise NotAnElf(f"{name}: not an ELF file")
        if len(data) < 0x40 or data[4] != 2 or data[5] != 1:
            raise NotAnElf(f"{name}: only 64-bit little-endian ELF is supported")
        try:
            (self.machine,) = struct.unpack_from("<H", data, 0x12)
            (shoff,) = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
            raw = [struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize) for i in range(shnum)]
        except struct.error:
            raise NotAnElf(f"{name}: truncated ELF section table") from None
        self.data, self.name = data, name
        names = self._slice(raw[shstrndx][4], raw[shstrndx][5]) if shnum else b""
        self.sections = [
            Section(names[n : names.find(b"\0", n)].decode("ascii", "replace"), typ, off, size, link)
            for n, typ, _flags, _addr, off, size, link in raw
        ]

    @classmethod
    def read(cls, path: str | Path) -> Elf:
        """The ELF file at ``path``: a regular file (a FIFO or a device is refused, never read) under the cap."""
        try:
            data = read_regular(path, MAX_ELF_BYTES)
        except Untrusted as err:
            raise NotAnElf(str(err)) from None
        return cls(data, Path(path).name)

    def _slice(self, off: int, size: int) -> bytes:
        if off + size > len(self.data):
            raise NotAnElf(f"{self.name}: a section runs past the end of the file")
        return self.data[off : off + size]

    @_refusing
    def section(self, name: str) -> bytes | None:
        sec = next((s for s in self.sections if s.name == name), None)
        return self._slice(sec.offset, sec.size) if sec and sec.type != 8 else None  # 8: SHT_NOBITS

    @_refusing
    def symbols(self, types: tuple[int, ...] = (_SHT_DYNSYM,)) -> Iterator[tuple[str, int]]:
        """(name, section index) of every named symbol in the symbol tables of these types."""
        for sec in self.sections:
            if sec.type not in types:
                continue
            strtab = self.sections[sec.link]
            strings = self._slice(strtab.offset, strtab.size)
            table = self._slice(sec.offset, sec.size)
            for j in range(len(table) // 24):
                st_name, _info, _other, shndx = struct.unpack_from("<IBBH", table, j * 24)
                if st_name:
                    yield strings[st_name : strings.find(b"\0", st_name)].decode("ascii", "replace"), shndx

    def undefined_symbols(self) -> set[str]:
        """Undefined dynamic symbols: what the library expects torch, libstdc++, libcudart... to provide."""
        return {name for name, shndx in self.symbols() if shndx == _SHN_UNDEF}


def undefined_symbols(path: str | Path) -> set[str]:
    return Elf.read(path).undefined_symbols()


# --------------------------------------------------------------------------- machine (e_machine)

# e_machine values, named as wheel platform tags spell the machine. EM_CUDA and EM_AMDGPU are device
# code (cubins, code objects) that the GPU runtime loads: they belong to no host machine.
MACHINES = {3: "i686", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64"}
DEVICE_MACHINES = {190: "cuda", EM_AMDGPU: "amdgpu"}
_TAG_MACHINE = re.compile(r"_(x86_64|aarch64|i686|armv7l|ppc64le|ppc64|s390x|riscv64)$")


def machine_of(head: bytes) -> str | None:
    """The machine an ELF image's header names ("x86_64", "aarch64", "cuda" ...); None if HEAD is no ELF.

    Only the first 20 bytes are read, for either class and byte order: any file in a wheel can be asked.
    """
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    (em,) = struct.unpack_from("<H" if head[5] != 2 else ">H", head, 0x12)
    name = MACHINES.get(em) or DEVICE_MACHINES.get(em) or f"e_machine {em}"
    if name in ("ppc64", "arm") and head[5] == 1:  # little-endian spellings of the tags
        name = {"ppc64": "ppc64le", "arm": "armv7l"}[name]
    return name


def tag_machine(platform_tag: str) -> str | None:
    """linux_aarch64 / manylinux_2_28_x86_64 -> the machine; None for a tag that names none ("any")."""
    m = _TAG_MACHINE.search(platform_tag)
    return m.group(1) if m else None


def foreign_files(files: Iterable[tuple[str, bytes]], machine: str) -> list[tuple[str, str]]:
    """(name, its machine) for every host-code ELF among FILES ((name, first bytes) pairs) not built for MACHINE."""
    out = []
    for name, head in files:
        found = machine_of(head)
        if found is not None and found not in DEVICE_MACHINES.values() and found != machine:
            out.append((name, found))
    return out


# --------------------------------------------------------------------------- C++ ABI

CXX11, PRE_CXX11, MIXED = "cxx11", "pre-cxx11", "mixed"
TORCH_NAMESPACES = ("3c10", "2at", "5torch", "6caffe2")

# Itanium-mangling tokens that contain digits which are not the length of a source name. Everything
# else that starts with a digit is <length><identifier>, skipped whole: "Ss" inside a name is not a string.
_OPAQUE = re.compile(
    r"S[0-9A-Z]*_"  # substitution S_, S0_, S1A_
    r"|T[0-9]*_"  # template parameter T_, T0_
    r"|T[VTIS]"  # vtable, VTT, typeinfo, typeinfo name: _ZTSs is short's, not std::string's
    r"|T[hv]n?\d+_(?:n?\d+_)?"  # thunk call offsets
    r"|C[123]|CI[12]|D[012]"  # constructors, destructors
    r"|Dv\d*_|DF\d+[_xb]|A\d*_|Ut\d*_"  # vector, _FloatN / bfloat16, array, unnamed types
    r"|f(?:p|L\d+p)[rVK]*\d*_"  # function parameters (decltype expressions)
    r"|L[a-z]n?[0-9a-f]*E"  # literals: Li5E, Lb1E
)
_LENGTH = re.compile(r"\d+")


def _tokens(sym: str) -> Iterator[tuple[str, str]]:
    """("name", identifier) for each source name, ("abbr", "Ss") for each std:: abbreviation, ("", unit) else."""
    i, n = 2, len(sym)
    prev = ""
    while i < n:
        c = sym[i]
        if c.isdigit():
            m = _LENGTH.match(sym, i)
            end = m.end() + int(m.group())
            yield ("tag" if prev == "B" else "name"), sym[m.end() : end]
            i, prev = end, ""
            continue
        if c == "S" and i + 1 < n and sym[i + 1].islower():
            yield "abbr", sym[i : i + 2]
            i, prev = i + 2, ""
            continue
        m = _OPAQUE.match(sym, i)
        if m:
            yield "", m.group()
            i, prev = m.end(), ""
            continue
        yield "", c
        i, prev = i + 1, c


def string_abi(sym: str) -> str | None:
    """The libstdc++ ABI a mangled name was compiled with: ``"cxx11"``, ``"pre-cxx11"`` or None (it does not say).

    CXX11: a name in ``std::__cxx11`` (``NSt7__cxx1112basic_string...``, ``std::__cxx11::list``) or the
    ``[abi:cxx11]`` tag (``B5cxx11``: a function that returns a std::string carries it on its name).
    Pre-CXX11: the ``Ss`` (``std::string``) or ``Sb`` (``std::basic_string``) abbreviation: libstdc++'s
    old string is ``::std::basic_string``, the new one ``std::__cxx11::basic_string``.
    """
    if not sym.startswith("_Z"):
        return None
    found = None
    for kind, tok in _tokens(sym):
        if (kind == "name" and tok == "__cxx11") or (kind == "tag" and tok == "cxx11"):
            return CXX11
        if kind == "abbr" and tok in ("Ss", "Sb"):
            found = PRE_CXX11
    return found


def is_torch_symbol(sym: str) -> bool:
    """``_ZN3c10...``, ``_ZNK2at...``: a symbol torch's libraries are expected to provide."""
    m = re.match(r"_ZN[KVrO]*(?:St)?(\d+[A-Za-z_]\w*)", sym)
    return bool(m) and any(m.group(1).startswith(ns) for ns in TORCH_NAMESPACES)


@dataclass(frozen=True)
class AbiReport:
    """The C++ ABI a library was compiled with, read from every C++ symbol it needs (torch's and libstdc++'s)."""

    kind: str | None  # "cxx11" | "pre-cxx11" | "mixed" | None (no std::string-typed symbol: either label fits)
    cxx11: tuple[str, ...] = ()  # example symbols
    pre_cxx11: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        return "no std::string symbols cross the library boundary: either ABI label fits" if self.kind is None else ""


def abi_report(symbols: Iterable[str]) -> AbiReport:
    """One rule for the farm and the doctor. Every C++ symbol counts, not only torch's: a pre-CXX11 build
    that only calls a torch function *returning* std::string (unmarked in the old ABI) still shows in the
    libstdc++ string members it needs, and the ABI of torch's inline header code must match torch's."""
    by: dict[str, list[str]] = {CXX11: [], PRE_CXX11: []}
    for s in sorted(symbols):
        abi = string_abi(s)
        if abi:
            by[abi].append(s)
    kind = MIXED if by[CXX11] and by[PRE_CXX11] else CXX11 if by[CXX11] else PRE_CXX11 if by[PRE_CXX11] else None
    return AbiReport(kind, tuple(by[CXX11][:3]), tuple(by[PRE_CXX11][:3]))


def extension_abi(path: str | Path) -> str | None:
    """The C++ ABI the extension was built with ("cxx11", "pre-cxx11", "mixed"; None: either fits)."""
    return abi_report(undefined_symbols(path)).kind


# --------------------------------------------------------------------------- GPU code

_FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_FATBIN_ARCH_SPECIFIC, _FATBIN_FAMILY = 0x100000, 0x200000  # entry flags: sm_90a, sm_100f
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_COMPRESSED_BUNDLE_MAGIC = b"CCOB"


@dataclass
class Archs:
    sass: list[str] = field(default_factory=list)  # ["sm_80", "sm_90a"]
    ptx: list[str] = field(default_factory=list)  # ["compute_90"]
    hip: list[str] = field(default_factory=list)  # ["gfx90a", "gfx942"]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"sass": self.sass, "ptx": self.ptx, "hip": self.hip, "notes": self.notes}


@_refusing
def _cuda_archs(blob: bytes, archs: Archs) -> None:
    """Each fatbin's entry headers (uncompressed even when the payload is): kind, arch, flags.

    Named as cuobjdump names them: an arch-specific entry gets "a" (sm_90a); a family one gets "f" on its
    PTX only (compute_100f; its cubin is listed as sm_100).
    """
    i = 0
    while (i := blob.find(_FATBIN_MAGIC, i)) >= 0:
        _, _, header_size, fat_size = struct.unpack_from("<IHHQ", blob, i)
        p, end = i + header_size, min(i + header_size + fat_size, len(blob))
        while p + 48 <= end:
            kind, _ver, entry_header = struct.unpack_from("<HHI", blob, p)
            (payload,) = struct.unpack_from("<Q", blob, p + 8)
            (sm,) = struct.unpack_from("<I", blob, p + 28)
            (flags,) = struct.unpack_from("<Q", blob, p + 40)
            suffix = "a" if flags & _FATBIN_ARCH_SPECIFIC else ""
            if kind == 2:
                archs.sass.append(f"sm_{sm}{suffix}")
            elif kind == 1:
                archs.ptx.append(f"compute_{sm}{suffix or ('f' if flags & _FATBIN_FAMILY else '')}")
            if entry_header == 0:
                break
            p += entry_header + payload
        i = max(end, i + 1)


@dataclass(frozen=True)
class OffloadEntry:
    """One device entry of a clang offload bundle."""

    target: str  # "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"
    arch: str  # "gfx90a" (the target id without its features)
    data: bytes = field(repr=False)  # the AMDGPU ELF


def target_arch(target: str) -> str:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> ``gfx90a``; ``...--gfx11-generic`` -> ``gfx11-generic``."""
    parts = target.split("-", 5)  # <offload kind>-<arch>-<vendor>-<os>-<env>-<target id>
    tid = parts[5] if len(parts) == 6 else parts[-1] if len(parts) == 5 else ""  # pre-v4: hip-amdgcn-amd-amdhsa-gfx906
    return tid.split(":")[0]


@_refusing
def offload_bundles(blob: bytes) -> list[OffloadEntry]:
    """The device entries of every uncompressed clang offload bundle in ``blob`` (host entries left out)."""
    out, i = [], 0
    while (i := blob.find(_BUNDLE_MAGIC, i)) >= 0:
        base = i
        p = base + len(_BUNDLE_MAGIC)
        (count,) = struct.unpack_from("<Q", blob, p)
        p += 8
        for _ in range(min(count, 4096)):
            offset, size, tlen = struct.unpack_from("<QQQ", blob, p)
            target = blob[p + 24 : p + 24 + tlen].decode("ascii", "replace")
            p += 24 + tlen
            if target.startswith("hip") and target_arch(target):
                out.append(OffloadEntry(target, target_arch(target), blob[base + offset : base + offset + size]))
        i = max(p, base + 1)
    return out


@_refusing
def hip_code_objects(elf: Elf) -> tuple[list[OffloadEntry], list[str]]:
    """(code objects, notes) of a HIP build: the bundles in ``.hip_fatbin``, or, in a ``-fgpu-rdc`` object,
    one ``__CLANG_OFFLOAD_BUNDLE__<target>`` section per target."""
    objs, notes = [], []
    blob = elf.section(".hip_fatbin")
    if blob:
        objs = offload_bundles(blob)
        if not objs and _COMPRESSED_BUNDLE_MAGIC in blob:
            notes.append("HIP offload bundle is compressed; its targets are not listed")
    for sec in elf.sections:
        target = sec.name[len(_BUNDLE_MAGIC) :]
        if sec.name.startswith(_BUNDLE_MAGIC.decode()) and target.startswith("hip") and target_arch(target):
            objs.append(OffloadEntry(target, target_arch(target), elf._slice(sec.offset, sec.size)))
    return objs, notes


def archs_of(path: str | Path) -> Archs:
    """GPU code compiled into an ELF shared object (empty lists for a CPU-only build)."""
    return archs_in(Elf.read(path))


@_refusing
def archs_in(elf: Elf) -> Archs:
    archs = Archs()
    for name in (".nv_fatbin", "__nv_relfatbin"):
        blob = elf.section(name)
        if blob:
            _cuda_archs(blob, archs)
    objs, archs.notes = hip_code_objects(elf)
    archs.hip = sorted({o.arch for o in objs})
    archs.sass = sorted(set(archs.sass), key=_arch_key)
    archs.ptx = sorted(set(archs.ptx), key=_arch_key)
    return archs


def _arch_key(a: str) -> tuple[int, str]:
    m = re.search(r"(\d+)(\w*)", a)
    return (int(m.group(1)), m.group(2)) if m else (0, a)


def accelerator_of(archs: Archs | dict) -> str:
    """Which kind of build these archs come from: "cuda", "hip" or "cpu"."""
    a = archs.as_dict() if isinstance(archs, Archs) else archs
    return "cuda" if a.get("sass") or a.get("ptx") else "hip" if a.get("hip") else "cpu"


# --------------------------------------------------------------------------- extension file names

_CPYTHON_SUFFIX = re.compile(r"\.cpython-(?P<ver>\d)(?P<minor>\d+)-(?P<machine>\w+?)-linux-gnu\.so$")


@dataclass(frozen=True)
class ExtensionName:
    """What an extension module's file name says: ``mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so``."""

    path: str  # as given: a wheel member or a file
    module: str  # "mamba_ssm._C"
    kind: str  # "abi3" | "classic" (a version-specific build) | "plain" (.so: any CPython loads it)
    python: str | None = None  # "cp311" for a classic build
    machine: str | None = None  # "x86_64" for a classic build


def extension_name(path: str, root: str = "") -> ExtensionName | None:
    """Parse an extension module's path (relative to ``root``, "/"-separated); None: not a ``*.so``."""
    rel = path[len(root) :].lstrip("/") if root and path.startswith(root) else path
    parent, _, leaf = rel.rpartition("/")
    if not leaf.endswith(".so"):
        return None
    m = _CPYTHON_SUFFIX.search(leaf)
    if m:
        kind, py, machine, stem = "classic", f"cp{m['ver']}{m['minor']}", m["machine"], leaf[: m.start()]
    elif leaf.endswith(".abi3.so"):
        kind, py, machine, stem = "abi3", None, None, leaf[: -len(".abi3.so")]
    else:
        kind, py, machine, stem = "plain", None, None, leaf[: -len(".so")]
    module = ".".join([*(parent.split("/") if parent else []), stem])
    return ExtensionName(path, module, kind, py, machine)


_IMPORT_ORDER = ("classic", "abi3", "plain")  # importlib.machinery.EXTENSION_SUFFIXES, on CPython for Linux


def duplicate_modules(names: Iterable[ExtensionName]) -> dict[str, list[ExtensionName]]:
    """Modules present as more than one build (``_C.abi3.so`` next to ``_C.cpython-311-...so``), each list in
    the order CPython tries them: the first is the one it imports."""
    by: dict[str, list[ExtensionName]] = {}
    for n in names:
        by.setdefault(n.module, []).append(n)
    order = lambda n: (_IMPORT_ORDER.index(n.kind), n.path)
    return {m: sorted(ns, key=order) for m, ns in by.items() if len(ns) > 1}
