"""Environment markers, as packaging names them: of an interpreter here (run to ask it), of CPython on another
machine (written out), and what an installed distribution requires there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from builder.errors import InfrastructureError, VerificationError
from builder.facts.untrusted import Untrusted

# The marker environment of an interpreter here (packaging's default_environment, stdlib only).
_MARKER_ENV = r"""
import json, os, platform, sys
impl = sys.implementation
iv = f"{impl.version.major}.{impl.version.minor}.{impl.version.micro}"
if impl.version.releaselevel != "final":
    iv += impl.version.releaselevel[0] + str(impl.version.serial)
print(json.dumps({
    "implementation_name": impl.name, "implementation_version": iv, "os_name": os.name,
    "platform_machine": platform.machine(), "platform_release": platform.release(),
    "platform_system": platform.system(), "platform_version": platform.version(),
    "python_full_version": platform.python_version(), "platform_python_implementation": platform.python_implementation(),
    "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform,
}))
"""


def marker_environment(python: str) -> dict[str, str]:
    """The environment markers of PYTHON (the smoke test's interpreter), as packaging names them."""
    proc = subprocess.run([python, "-I", "-c", _MARKER_ENV], check=False, capture_output=True, text=True)
    if proc.returncode:
        raise VerificationError(f"smoke test: cannot run {python}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def target_environment(machine: str, python: str) -> dict[str, str]:
    """The environment markers of CPython PYTHON (3.11) on Linux on MACHINE (aarch64), as packaging names them."""
    from packaging.markers import default_environment

    return {
        **default_environment(), "platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux",
        "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "python_version": python, "python_full_version": f"{python}.0", "implementation_version": f"{python}.0",
        "platform_release": "", "platform_version": "",
    }  # fmt: skip


def target_requirements(site: Path, project: str, machine: str, python: str) -> list[str]:
    """PROJECT's requirements (its installed METADATA under SITE, outside data: capped, parsed strictly) whose
    markers hold on MACHINE (aarch64) with CPython PYTHON (3.11) on Linux, extras left out."""
    from email.parser import HeaderParser

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from builder.facts.untrusted import read_regular, shown

    infos = [p for p in site.glob("*.dist-info") if canonicalize_name(p.name.split("-")[0]) == canonicalize_name(project)]
    if len(infos) != 1:
        raise InfrastructureError(f"{project}: {len(infos)} .dist-info folders under {site}, not one")
    where = infos[0] / "METADATA"
    try:
        text = read_regular(where, 4 << 20).decode("utf-8")
    except (Untrusted, OSError, UnicodeDecodeError) as err:
        raise InfrastructureError(f"{where}: cannot be read ({shown(err, 300)})") from None
    env = {**target_environment(machine, python), "extra": ""}
    out = []
    for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise InfrastructureError(f"{where}: a Requires-Dist pip cannot read: {shown(line, 200)} ({shown(err, 200)})") from None
        if req.marker is None or req.marker.evaluate(env):
            req.marker = None
            out.append(str(req))
    return out
