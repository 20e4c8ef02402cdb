"""What is compiled into an extension .so: GPU archs (CUDA fatbin, HIP offload bundle) and the C++ ABI
of the torch symbols it needs.

Standard library only, on purpose: the doctor must run in the broken environment it diagnoses, where
pyelftools or cuobjdump are usually absent. Only 64-bit little-endian ELF is read (x86_64, aarch64).
The builder may import this module (mamba_ssm never imports builder).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

_FATBIN_MAGIC = 0xBA55ED50
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_COMPRESSED_BUNDLE_MAGIC = b"CCOB"
_SHT_DYNSYM = 11
_SHN_UNDEF = 0


class NotAnElf(ValueError):
    pass


@dataclass
class Archs:
    sass: list[str] = field(default_factory=list)  # ["sm_80", "sm_90"]
    ptx: list[str] = field(default_factory=list)  # ["compute_90"]
    hip: list[str] = field(default_factory=list)  # ["gfx90a", "gfx942"]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"sass": self.sass, "ptx": self.ptx, "hip": self.hip, "notes": self.notes}


def _sections(data: bytes) -> dict[str, tuple[int, int, int, int]]:
    """name -> (type, offset, size, link)."""
    if data[:4] != b"\x7fELF":
        raise NotAnElf("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise NotAnElf("only 64-bit little-endian ELF is supported")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link = struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize)
        headers.append((name, typ, off, size, link))
    _, _, stroff, strsize, _ = headers[shstrndx]
    names = data[stroff : stroff + strsize]
    out = {}
    for name, typ, off, size, link in headers:
        end = names.find(b"\0", name)
        out[names[name:end].decode("ascii", "replace")] = (typ, off, size, link)
    out["__order__"] = headers  # type: ignore[assignment]
    return out


def _cuda_archs(blob: bytes, archs: Archs) -> None:
    i = 0
    magic = struct.pack("<I", _FATBIN_MAGIC)
    while (i := blob.find(magic, i)) >= 0:
        _, _, header_size, fat_size = struct.unpack_from("<IHHQ", blob, i)
        p, end = i + header_size, min(i + header_size + fat_size, len(blob))
        while p + 32 <= end:
            kind, _ver, entry_header = struct.unpack_from("<HHI", blob, p)
            payload, = struct.unpack_from("<Q", blob, p + 8)
            sm, = struct.unpack_from("<I", blob, p + 28)
            if kind == 2:
                archs.sass.append(f"sm_{sm}")
            elif kind == 1:
                archs.ptx.append(f"compute_{sm}")
            if entry_header == 0:
                break
            p += entry_header + payload
        i = end


def _hip_archs(blob: bytes, archs: Archs) -> None:
    i = 0
    while (i := blob.find(_BUNDLE_MAGIC, i)) >= 0:
        base = i
        count, = struct.unpack_from("<Q", blob, i + len(_BUNDLE_MAGIC))
        p = i + len(_BUNDLE_MAGIC) + 8
        for _ in range(min(count, 1024)):
            _off, _size, tlen = struct.unpack_from("<QQQ", blob, p)
            triple = blob[p + 24 : p + 24 + tlen].decode("ascii", "replace")
            p += 24 + tlen
            m = re.search(r"(gfx[0-9a-f]+)", triple)
            if m and triple.startswith("hip"):
                archs.hip.append(m.group(1))
        i = max(p, base + 1)
    if _COMPRESSED_BUNDLE_MAGIC in blob and not archs.hip:
        archs.notes.append("HIP offload bundle is compressed; its targets are not listed")


def archs_of(path: str | Path) -> Archs:
    """GPU code compiled into an ELF shared object (empty lists for a CPU-only build)."""
    data = Path(path).read_bytes()
    secs = _sections(data)
    archs = Archs()
    for name in (".nv_fatbin", "__nv_relfatbin"):
        if name in secs:
            _, off, size, _ = secs[name]
            _cuda_archs(data[off : off + size], archs)
    for name in (".hip_fatbin", "__CLANG_OFFLOAD_BUNDLE__"):
        if name in secs:
            _, off, size, _ = secs[name]
            _hip_archs(data[off : off + size], archs)
    archs.sass = sorted(set(archs.sass), key=_arch_key)
    archs.ptx = sorted(set(archs.ptx), key=_arch_key)
    archs.hip = sorted(set(archs.hip))
    return archs


def _arch_key(a: str) -> int:
    m = re.search(r"(\d+)", a)
    return int(m.group(1)) if m else 0


def undefined_symbols(path: str | Path) -> list[str]:
    """Undefined dynamic symbols (what the .so expects torch, libstdc++, libcudart... to provide)."""
    data = Path(path).read_bytes()
    secs = _sections(data)
    headers = secs["__order__"]
    out = []
    for _name, typ, off, size, link in headers:  # type: ignore[misc]
        if typ != _SHT_DYNSYM:
            continue
        _, stroff, strsize, _ = headers[link][1:]
        strtab = data[stroff : stroff + strsize]
        for j in range(size // 24):
            st_name, _info, _other, shndx = struct.unpack_from("<IBBH", data, off + j * 24)
            if shndx == _SHN_UNDEF and st_name:
                end = strtab.find(b"\0", st_name)
                out.append(strtab[st_name:end].decode("ascii", "replace"))
    return out


TORCH_NAMESPACES = ("3c10", "2at", "5torch", "6caffe2")


def is_torch_symbol(sym: str) -> bool:
    """``_ZN3c10...``, ``_ZNK2at...``: a symbol torch's libraries are expected to provide."""
    m = re.match(r"_ZN[KVrO]*(?:St)?(\d+[A-Za-z_]\w*)", sym)
    if not m:
        return False
    return any(m.group(1).startswith(ns) for ns in TORCH_NAMESPACES)


def string_abi(sym: str) -> str | None:
    """Which std::string a mangled name uses: ``"cxx11"`` (``NSt7__cxx1112basic_string``), ``"pre-cxx11"`` (``Ss``) or None.

    ``Ss`` is searched only at token boundaries: identifiers are length-prefixed, so they are skipped whole.
    """
    if "St7__cxx11" in sym or "__cxx11" in sym:
        return "cxx11"
    i, n = 2 if sym.startswith("_Z") else 0, len(sym)
    while i < n:
        c = sym[i]
        if c.isdigit():
            j = i
            while j < n and sym[j].isdigit():
                j += 1
            i = j + int(sym[i:j])
            continue
        if sym.startswith("Ss", i):
            return "pre-cxx11"
        i += 1
    return None


def extension_abi(path: str | Path) -> str | None:
    """The C++ ABI the extension was built with, read from the torch symbols it needs (None: can't tell)."""
    seen = {string_abi(s) for s in undefined_symbols(path) if is_torch_symbol(s)}
    seen.discard(None)
    if len(seen) == 1:
        return seen.pop()
    return "mixed" if seen else None
