"""Gather facts about this environment. Every probe survives failure: a missing torch, a broken
extension, no GPU, no nvcc are facts to report, never exceptions."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from .. import elf as _elf
from .. import prebuilt as _prebuilt
from .. import variant as _variant
from ..guard import Untrusted, field, load_json, shown

# Compiled modules of this package. Names we know; anything else compiled under mamba_ssm/ is found by scanning.
# Upstream's mamba-ssm puts selective_scan_cuda at the top level, upstream's causal-conv1d causal_conv1d_cuda.
EXTENSION_HINTS = ("selective_scan_cuda", "selective_scan_cpu", "causal_conv1d_cuda", "mamba_ssm._C", "mamba_ssm._ops")
# A file only this repository's mamba-ssm has: a mamba-ssm without it is upstream's line.
OWN_LINE_MARK = "mamba_ssm/doctor/__init__.py"  # this repository's line ships the doctor; upstream's has none
_EXT_SUFFIXES = tuple(s for s in (sysconfig.get_config_var("EXT_SUFFIX"), ".abi3.so", ".so") if s)


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return p.returncode, (p.stdout + p.stderr)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def python_facts() -> dict:
    return {
        "version": platform.python_version(),
        "executable": sys.executable,
        "tag": _variant.python_tag(),
        "implementation": platform.python_implementation(),
    }


def platform_facts() -> dict:
    glibc = _prebuilt.glibc_version()
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "glibc": f"{glibc[0]}.{glibc[1]}" if glibc else None,
        "wheel_platform": _variant.platform_tag(),
    }


def torch_dist() -> dict:
    """The torch distribution as pip sees it (``importlib.metadata``): the version a pin must name to keep it.
    PyPI's CUDA builds are ``2.9.1`` there while ``torch.__version__`` says ``2.9.1+cu128``; a torch without pip
    metadata (conda's, or files copied in) is ``None``: pip cannot see it at all."""
    try:
        return {"dist_version": installed_version("torch")}
    except importlib.metadata.PackageNotFoundError:
        return {"dist_version": None}
    except Untrusted as err:
        return {"dist_version": None, "dist_error": str(err)}


def torch_facts() -> dict:
    if importlib.util.find_spec("torch") is None:
        return {"installed": False}
    return {**_torch_module_facts(), **torch_dist()}


# this module by its own name (the standalone doctor ships it as mamba_doctor.doctor.facts)
_TORCH_PROBE = f"""
import json, sys
from {__name__} import _torch_module_facts
sys.stdout.write("\\n" + json.dumps(_torch_module_facts()) + "\\n")
"""
TORCH_PROBE_S = 20.0  # importing a real torch takes seconds; one that hangs must not hold the doctor
_PROBE_CAP = 1 << 20


def torch_facts_bounded(timeout: float = TORCH_PROBE_S) -> dict:
    """:func:`torch_facts` with torch imported in a child process that is stopped after ``timeout`` seconds and
    whose output is capped: a torch whose import sleeps, loops or prints without end is an Untrusted naming the
    limit, never a hang. The distribution's version is read here (it needs no import)."""
    import tempfile

    if importlib.util.find_spec("torch") is None:
        return {"installed": False}
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])  # the folder holding this package
    env["PYTHONPATH"] = os.pathsep.join([here, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    with tempfile.TemporaryFile() as out:
        try:
            p = subprocess.run([sys.executable, "-c", _TORCH_PROBE], stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=env, timeout=timeout, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise Untrusted(f"importing torch did not finish within {timeout:g} s (a torch whose import hangs); "
                            "check that `python -c 'import torch'` returns, then run this again") from None  # fmt: skip
        except OSError as err:
            raise Untrusted(f"cannot run {shown(sys.executable, 300)} to import torch ({shown(err, 200)})") from None
        out.seek(0)
        head = out.read(_PROBE_CAP + 1)
    lines = head.decode("utf-8", "replace").splitlines()
    if p.returncode != 0 or len(head) > _PROBE_CAP or not lines:
        last = next((ln for ln in reversed(lines) if ln.strip()), f"exit code {p.returncode}")
        raise Untrusted(f"importing torch in a child process failed: {shown(last, 300)}")
    got = load_json(lines[-1], "the torch probe's answer")
    if not isinstance(got, dict):
        raise Untrusted("the torch probe's answer is not an object")
    return {**got, **torch_dist()}


def _torch_module_facts() -> dict:
    """torch imported in this process: its facts, the variant they need and its GPUs."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - a broken torch is a fact
        # its own files still say which variant it needs
        files = _variant.installed_torch()
        return {"installed": True, "import_error": f"{type(e).__name__}: {e}",
                **(_described(files) | {"read_from": "files"} if files else {})}  # fmt: skip
    out = {"installed": True, **_described(_variant.imported_torch(torch)), "gpus": []}
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                gpu = {"index": i, "name": props.name, "capability": f"{props.major}.{props.minor}"}
                gcn = getattr(props, "gcnArchName", None)
                if out["hip"] and gcn:
                    gpu["gfx"] = gcn.split(":")[0]
                out["gpus"].append(gpu)
    except Exception as e:  # noqa: BLE001 - a driver problem is a fact too
        out["gpu_error"] = f"{type(e).__name__}: {e}"
    return out


def _described(t: _variant.TorchFacts) -> dict:
    """A torch's facts and the variant they need, however they were read."""
    out = {"version": t.version, "cuda": t.cuda, "hip": t.hip, "cxx11abi": t.cxx11abi,
           "ngc": _variant.is_ngc(t.version), "location": t.location}  # fmt: skip
    try:
        v = _variant.from_values(t.version, cuda=t.cuda, hip=t.hip, cxx11abi=t.cxx11abi)
        out["variant"] = {"key": v.key, "label": v.label, "stable_key": v.as_stable().key, "stable_label": v.as_stable().label,
                          "served_by_stable": v.served_by_stable}  # fmt: skip
    except _variant.VariantError as e:
        out["variant_error"] = str(e)
    return out


def _nvcc_release(nvcc: str) -> str | None:
    rc, text = _run([nvcc, "--version"])
    m = re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if rc == 0 and m else None


def real_toolkit(nvcc: str) -> str | None:
    """The CUDA toolkit folder behind an ``nvcc`` that may be a symlink or a wrapper script."""
    path = Path(os.path.realpath(nvcc))
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return None
    if head.startswith(b"#!"):  # a wrapper: find the real nvcc it execs
        m = re.search(rb"(/[^\s\"']*/bin/nvcc)\b", head)
        if not m:
            return None
        path = Path(os.path.realpath(m.group(1).decode()))
    return str(path.parent.parent) if path.parent.name == "bin" else None


def cuda_toolkit_facts() -> dict:
    out: dict = {"nvcc_on_path": None, "nvcc_release": None, "nvcc_toolkit": None, "cuda_home": None, "cuda_home_release": None}
    nvcc = shutil.which("nvcc")
    if nvcc:
        out["nvcc_on_path"] = nvcc
        out["nvcc_release"] = _nvcc_release(nvcc)
        out["nvcc_toolkit"] = real_toolkit(nvcc)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        out["cuda_home"] = home
        cand = Path(home) / "bin" / "nvcc"
        out["cuda_home_release"] = _nvcc_release(str(cand)) if cand.exists() else None
    return out


def compiler_facts(need_cxx20: bool) -> dict:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    out: dict = {"cxx": cxx, "version": None, "cxx20": None}
    if not cxx:
        return out
    rc, text = _run([cxx, "--version"])
    out["version"] = text.splitlines()[0].strip() if rc == 0 and text else None
    if need_cxx20:
        try:
            p = subprocess.run(
                [cxx, "-std=c++20", "-x", "c++", "-fsyntax-only", "-"],
                input="#if __cplusplus < 202002L\n#error no\n#endif\n", capture_output=True, text=True, timeout=30, check=False,
            )
            out["cxx20"] = p.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            out["cxx20"] = None
    return out


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("mamba_ssm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_extensions(pkg_dir: Path | None) -> list[dict]:
    """Compiled modules of mamba-ssm: under the package, plus known top-level names."""
    found: dict[str, dict] = {}
    if pkg_dir and pkg_dir.is_dir():
        for so in sorted(pkg_dir.rglob("*.so")):
            if not so.is_file():  # a FIFO or device named *.so would block the read (and the import) forever
                continue
            rel = so.relative_to(pkg_dir.parent)
            name = ".".join(rel.parts)[: -len(so.name)] + so.name.split(".")[0]
            found[str(so)] = {"module": name, "path": str(so)}
    for name in EXTENSION_HINTS:
        if "." in name:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec and spec.origin and spec.origin.endswith(_EXT_SUFFIXES):
            found.setdefault(spec.origin, {"module": name, "path": spec.origin})
    return list(found.values())


_IMPORT_PROBE = r"""
import importlib, sys
name, path = sys.argv[1], sys.argv[2]
try:
    import torch  # extensions resolve torch's symbols from the already-loaded torch libraries
except Exception:
    pass
try:
    importlib.import_module(name)
except ImportError as e:
    if "module export function" in str(e):  # a torch.library-only .so: load it the way torch does
        torch.ops.load_library(path)
    else:
        raise
print("IMPORT-OK")
"""


def import_extension(module: str, path: str, timeout: float = 120) -> dict:
    """Import in a child process: a crash or hang there cannot take the doctor down."""
    pkg_root = str(Path(path).parents[len(module.split(".")) - 1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        p = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, module, path], capture_output=True, text=True, timeout=timeout, env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"importing {module} hung for {timeout:.0f} s"}
    if p.returncode == 0 and "IMPORT-OK" in p.stdout:
        return {"ok": True, "error": None}
    err = (p.stderr or p.stdout).strip()
    last = [ln for ln in err.splitlines() if ln.strip()]
    summary = last[-1] if last else f"exit code {p.returncode}"
    if p.returncode < 0:
        summary = f"the import crashed the interpreter (signal {-p.returncode})"
    return {"ok": False, "error": summary, "traceback": err[-4000:]}


def _variant_label() -> str | None:
    """The variant label of an installed variant wheel (its ``*.dist-info/variant.json``), else None."""
    try:
        raw = importlib.metadata.distribution("mamba-ssm").read_text("variant.json")
        labels = list(field(load_json(raw, "variant.json"), "variants", dict, "variant.json", {})) if raw else []
    except (Untrusted, ValueError, OSError):  # an installed file says anything (not UTF-8: a ValueError)
        return None
    return labels[0] if len(labels) == 1 else None


def provenance_facts(dist_name: str = "mamba-ssm") -> dict | None:
    """What built the installed wheel: its ``*.dist-info/farm-provenance.json`` (builder/verifying/provenance.py), the
    record the index's sidecar carries too; None for a wheel the farm did not build."""
    try:
        raw = importlib.metadata.distribution(dist_name).read_text("farm-provenance.json")
        rec = load_json(raw, "farm-provenance.json") if raw and len(raw) < 1 << 16 else None
    except (Untrusted, ValueError, OSError, importlib.metadata.PackageNotFoundError):
        return None
    return rec if isinstance(rec, dict) else None


def _label_of_variant(variant_label: str | None) -> str:
    """The farm label a variant label stands for (builder/verifying/variants.py): ``null`` is the CPU stable-ABI build,
    ``cu13`` (``cu13_<machine>``) the CUDA 13 one; "" for any other."""
    if variant_label == "null":
        return "cputorchstable"
    m = re.fullmatch(r"(cu\d+)(?:_\w+)?", variant_label or "")
    return f"{m.group(1)}torchstable" if m else ""


def machine_facts(dist_name: str = "mamba-ssm") -> dict:
    """The installed wheel's platform tags (its WHEEL file) and the machine of every ELF file its RECORD lists."""
    out: dict = {"wheel_tags": [], "elf_files": []}
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return out
    wheel = dist.read_text("WHEEL") or ""
    out["wheel_tags"] = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    try:
        listed = dist.files or []
    except Exception:  # noqa: BLE001 - a malformed RECORD is a fact: no files to check
        listed = []
    for f in listed:
        path = Path(str(dist.locate_file(f)))
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # RECORD may name a FIFO: opening it would block
                continue
            with open(path, "rb") as fh:
                machine = _elf.machine_of(fh.read(20))
        except OSError:
            continue
        if machine is not None:
            out["elf_files"].append({"file": str(f), "machine": machine})
    return out


def _canonical_label(local: str) -> str:
    """packaging lower-cases local labels (cxx11abitrue); give them back their canonical spelling."""
    return re.sub(r"cxx11abi(true|false)$", lambda m: "cxx11abi" + m.group(1).upper(), local, flags=re.IGNORECASE)


def _line(pkg_dir: Path | None) -> str:
    """'checkout' for this repository's mamba-ssm, 'upstream' for upstream's (built here or anywhere)."""
    return "checkout" if pkg_dir and (pkg_dir.parent / OWN_LINE_MARK).is_file() else "upstream"


def installed_version(name: str) -> str:
    """``importlib.metadata.version``, its METADATA outside data: bytes that are not UTF-8 (a ValueError from
    deep in importlib) or an unreadable file are Untrusted naming the file, never a traceback."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise
    except (ValueError, OSError) as err:
        raise Untrusted(f"{name}: its installed METADATA cannot be read ({shown(err, 200)})") from None


def dist_facts(name: str) -> dict:
    """An installed distribution's version and local label (None when it is not installed)."""
    try:
        version = installed_version(name)
    except importlib.metadata.PackageNotFoundError:
        return {"installed_version": None}
    except Untrusted as err:
        return {"installed_version": None, "metadata_error": str(err)}
    public, _, local = version.partition("+")
    return {"installed_version": version, "public_version": public, "label": _canonical_label(local) if local else None}


def mamba_facts() -> dict:
    pkg_dir = _package_dir()
    out: dict = {"location": str(pkg_dir) if pkg_dir else None, "installed_version": None, "label": None}
    try:
        version = installed_version("mamba-ssm")
        out["installed_version"] = version
        out["line"] = _line(pkg_dir)
        public, _, local = version.partition("+")
        out["public_version"] = public
        if not local:  # a PEP 825 variant wheel (the farm's variants/ root): the variant label names the build
            out["variant_label"] = _variant_label()
            local = _label_of_variant(out["variant_label"])
        if local:
            local = _canonical_label(local)
            out["label"] = local
            try:
                out["label_parts"] = _variant.parse_label(local)
            except _variant.VariantError as e:
                out["label_error"] = str(e)
    except importlib.metadata.PackageNotFoundError:
        pass
    except Untrusted as err:  # the install is broken: said, and the rest of the report still made
        out["metadata_error"] = str(err)
    if not out.get("public_version") and pkg_dir:
        m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", (pkg_dir / "__init__.py").read_text(errors="replace"))
        out["public_version"] = m.group(1).split("+")[0] if m else None
    exts = []
    for ext in find_extensions(pkg_dir):
        try:
            ext["archs"] = _elf.archs_of(ext["path"]).as_dict()
            ext["abi"] = _elf.extension_abi(ext["path"])
        except Exception as e:  # noqa: BLE001 - a malformed ELF (IndexError, struct.error, ...) is a fact
            ext["inspect_error"] = f"{type(e).__name__}: {e}"
        ext["import"] = import_extension(ext["module"], ext["path"])
        exts.append(ext)
    out["extensions"] = exts
    out.update(machine_facts())
    out["provenance"] = provenance_facts()
    return out


def direct_urls() -> dict:
    from .offlabel import direct_urls as read

    return read()


def gather() -> dict:
    torch = torch_facts()
    mm = _torch_mm(torch)
    return {
        "python": python_facts(),
        "platform": platform_facts(),
        "torch": torch,
        "cuda_toolkit": cuda_toolkit_facts(),
        "compiler": compiler_facts(need_cxx20=mm is not None and mm >= _variant.vtuple_mm(_variant.CXX20_FROM)),
        "mamba_ssm": mamba_facts(),
        "causal_conv1d": {**dist_facts("causal-conv1d"), "extensions": module_archs(["causal_conv1d_cuda"])},
        "direct_urls": direct_urls(),  # offlabel.py: what was installed from a URL, not an index
    }


def module_archs(modules: list[str]) -> list[dict]:
    """The GPU code of each installed extension module of these names (found, not imported; ELF read)."""
    out = []
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".so"):
            continue
        try:
            out.append({"module": module, "path": spec.origin, "archs": _elf.archs_of(spec.origin).as_dict()})
        except Exception as e:  # noqa: BLE001 - a malformed ELF (IndexError, struct.error, ...) is a fact
            out.append({"module": module, "path": spec.origin, "inspect_error": f"{type(e).__name__}: {e}"})
    return out


def _torch_mm(torch: dict) -> tuple[int, int] | None:
    try:
        return tuple(int(x) for x in _variant.torch_major_minor(torch["version"]).split("."))  # type: ignore[return-value]
    except (KeyError, TypeError, _variant.VariantError):
        return None
