"""Whether this host can run another architecture's programs: qemu-user registered with binfmt_misc.

``scripts/bootstrap-host.sh`` registers qemu-aarch64 (Debian's qemu-user-static) with the F
(fix-binary) flag: the kernel opens the interpreter once, at registration, so containers of the
other architecture run with no qemu inside them. Without that, a linux_aarch64 build on an x86_64
host is refused with :func:`unavailable`'s reason, never attempted.
"""

from __future__ import annotations

from pathlib import Path

from builder.errors import EngineUnavailable
from builder.facts.hostenv import host_machine

BINFMT = Path("/proc/sys/fs/binfmt_misc")
SETUP_HINT = "run scripts/bootstrap-host.sh as root (it installs qemu-user-static and registers it), or build on a native host"


def unavailable(machine: str, binfmt: Path = BINFMT) -> str | None:
    """Why programs for MACHINE cannot run here (None: they can, natively or under emulation)."""
    if machine == host_machine():
        return None
    if not (binfmt / "register").exists():
        return f"binfmt_misc is not mounted at {binfmt}"
    entry = binfmt / f"qemu-{machine}"
    if not entry.exists():
        return f"no qemu-{machine} is registered with binfmt_misc"
    text = entry.read_text()
    if not text.startswith("enabled"):
        return f"qemu-{machine} is registered with binfmt_misc but disabled"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    if "F" not in flags:
        return f"qemu-{machine} is registered without the F (fix-binary) flag, so containers cannot use it"
    return None


def require(machine: str, what: str, binfmt: Path = BINFMT) -> None:
    """Raise EngineUnavailable naming WHAT unless MACHINE's programs run here."""
    reason = unavailable(machine, binfmt)
    if reason is not None:
        raise EngineUnavailable(
            f"{what} needs {machine}, but this host is {host_machine()} and cannot emulate it: {reason}",
            hint=SETUP_HINT,
        )
