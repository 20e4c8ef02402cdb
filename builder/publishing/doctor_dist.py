"""``python -m builder doctor-dist``: the doctor as a standalone pure-Python wheel, ``mamba-doctor``.

The same files as ``mamba_ssm.doctor`` plus the ``mamba_ssm`` modules they import (found by walking the
imports; anything but the standard library and the probed torch stops the build), renamed ``mamba_doctor``,
so users of upstream's packages get the doctor without installing this mamba-ssm over theirs.
"""

from __future__ import annotations

import ast
import hashlib
import html
import re
import sys
import time
import zipfile
from pathlib import Path

from builder.errors import UsageError
from builder.facts.paths import REPO
from builder.verifying.relabel import write_wheel

SOURCE = REPO / "mamba_ssm"
NAME, PACKAGE = "mamba-doctor", "mamba_doctor"
# Imported at run time from the user's environment, never a requirement of the wheel (packaging, else pip's
# vendored copy, parses a user's requirements file).
PROBED = {"torch", "packaging", "pip"}


def _version() -> str:
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", (SOURCE / "__init__.py").read_text(), re.MULTILINE)
    if not m:
        raise UsageError(f"no __version__ in {SOURCE / '__init__.py'}")
    return m.group(1)


def _relative_targets(tree: ast.Module, module: str) -> tuple[set[str], set[str]]:
    """(mamba_ssm modules this module imports relatively, top-level names it imports absolutely)."""
    pkg = module.split(".")[:-1]  # the package a relative import starts from (an __init__'s is its own)
    rel, absolute = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            absolute |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                absolute.add((node.module or "").split(".")[0])
                continue
            base = pkg[: len(pkg) - (node.level - 1)]
            if node.module:
                rel.add(".".join([*base, *node.module.split(".")]))
            else:  # from .. import a, b: each may be a module or a name of the package
                rel |= {".".join([*base, a.name]) for a in node.names}
                rel.add(".".join([*base, "__init__"]))
    return rel, absolute


def _path_of(module: str) -> Path | None:
    """mamba_ssm.doctor.cli -> mamba_ssm/doctor/cli.py; a package -> its __init__.py; None if neither."""
    parts = module.split(".")
    if parts[0] != "mamba_ssm":
        return None
    rel = Path(*parts[1:]) if len(parts) > 1 else Path("__init__")
    if rel.name == "__init__":
        path = SOURCE / rel.with_suffix(".py")
        return path if path.is_file() else None
    for cand in (SOURCE / rel.with_suffix(".py"), SOURCE / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def collect() -> dict[str, Path]:
    """Path in the wheel under the package (``doctor/cli.py``, ``elf.py``) -> the source file."""
    todo = [f"mamba_ssm.doctor.{p.stem}" for p in sorted((SOURCE / "doctor").glob("*.py"))]
    found: dict[str, Path] = {}
    stdlib = set(sys.stdlib_module_names) | PROBED | {"__future__"}
    while todo:
        module = todo.pop()
        path = _path_of(module)
        if path is None:
            continue  # a name of a package (from .. import __version__), not a module
        rel = path.relative_to(SOURCE).as_posix()
        if rel in found:
            continue
        found[rel] = path
        if rel == "__init__.py":
            continue  # replaced by a __version__-only one (see the module's doc)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel_imports, absolute = _relative_targets(tree, "mamba_ssm." + rel.removesuffix(".py").replace("/", "."))
        foreign = sorted(absolute - stdlib - {"mamba_ssm"})
        if foreign:
            raise UsageError(
                f"{rel} imports {', '.join(foreign)}: the standalone doctor installs without dependencies",
                hint="import only the standard library in mamba_ssm/doctor and the modules it uses (torch is probed lazily)",
            )
        if "mamba_ssm" in absolute:
            raise UsageError(
                f"{rel} imports mamba_ssm by name: use a relative import, so the standalone copy uses its own"
            )
        todo += sorted(rel_imports)
    # every package on the way needs an __init__.py
    for rel in list(found):
        for parent in Path(rel).parents:
            if parent != Path(".") and f"{parent.as_posix()}/__init__.py" not in found:
                found[f"{parent.as_posix()}/__init__.py"] = SOURCE / parent / "__init__.py"
    found["__init__.py"] = SOURCE / "__init__.py"
    return dict(sorted(found.items()))


def vendored_packaging() -> dict[str, bytes]:
    """packaging (the build environment's), as ``mamba_doctor/_vendor/packaging``: the doctor parses a user's
    requirements file with it where the environment has neither packaging nor pip (a uv venv), and the wheel keeps
    no dependency. Its modules import each other relatively; its licence files go with it."""
    import importlib.metadata

    import packaging

    root = Path(packaging.__file__).parent
    out = {f"{PACKAGE}/_vendor/__init__.py": b""}
    for path in sorted(root.rglob("*.py")):
        out[f"{PACKAGE}/_vendor/packaging/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    dist = importlib.metadata.distribution("packaging")
    for f in dist.files or []:
        if "LICENSE" in f.name.upper():
            out[f"{PACKAGE}/_vendor/packaging-{dist.version}.{f.name}"] = Path(f.locate()).read_bytes()
    return out


def _metadata(version: str) -> str:
    return "".join([
        "Metadata-Version: 2.1\n", f"Name: {NAME}\n", f"Version: {version}\n",
        "Summary: Diagnose a mamba-ssm or causal-conv1d install (upstream's or this farm's) and print the fix\n",
        "Requires-Python: >=3.10\n",
    ])  # fmt: skip


def build_wheel(out_dir: Path) -> Path:
    """Write ``mamba_doctor-<version>-py3-none-any.whl`` into OUT_DIR; return it."""
    version = _version()
    members: dict[str, bytes] = {}
    for rel, src in collect().items():
        if rel == "__init__.py":
            members[f"{PACKAGE}/__init__.py"] = (
                '"""mamba-doctor: ``python -m mamba_doctor`` (the same code as ``python -m mamba_ssm.doctor``)."""\n\n'
                f"__version__ = {version!r}\n"
            ).encode()
        else:
            members[f"{PACKAGE}/{rel}"] = src.read_bytes()
    members[f"{PACKAGE}/__main__.py"] = b"import sys\n\nfrom .doctor.cli import main\n\nsys.exit(main())\n"
    members.update(vendored_packaging())
    stamp = SOURCE / "_index_url.txt"  # a release's index, as the package's own copy carries it
    if stamp.is_file():
        members[f"{PACKAGE}/_index_url.txt"] = stamp.read_bytes()
    info = f"{PACKAGE}-{version}.dist-info"
    members[f"{info}/METADATA"] = _metadata(version).encode()
    members[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: builder.doctor_dist\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    members[f"{info}/entry_points.txt"] = f"[console_scripts]\nmamba-doctor = {PACKAGE}.doctor.cli:main\n".encode()
    members[f"{info}/RECORD"] = b""
    when = time.localtime(315532800)[:6]  # 1980-01-01: the same bytes from the same sources
    infos = [zipfile.ZipInfo(name, date_time=when) for name in members]
    for zi in infos:
        zi.compress_type = zipfile.ZIP_DEFLATED
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_wheel(infos, members, info, out_dir / f"{PACKAGE}-{version}-py3-none-any.whl")


def publish(out_dir: Path) -> Path:
    """The wheel, its PEP 658 metadata and a PEP 503 page: OUT_DIR/mamba-doctor/ (index-url: OUT_DIR)."""
    page_dir = out_dir / NAME
    wheel = build_wheel(page_dir)
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))
    Path(f"{wheel}.metadata").write_bytes(meta)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    meta_digest = hashlib.sha256(meta).hexdigest()
    name = html.escape(wheel.name)
    (page_dir / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body>\n<a href="{name}#sha256={digest}" data-requires-python="&gt;=3.10" '
        f'data-core-metadata="sha256={meta_digest}">{name}</a>\n</body></html>\n'
    )
    (out_dir / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body>\n<a href="{NAME}/">{NAME}</a>\n</body></html>\n'
    )
    return wheel


def write_lines() -> Path:
    """mamba_ssm/doctor/lines.py from the release plan (the doctor cannot read the plan where it runs)."""
    from builder.publishing import pins

    path = REPO / pins.LINES_MODULE
    path.write_text(pins.doctor_lines_source(), encoding="utf-8")
    return path
