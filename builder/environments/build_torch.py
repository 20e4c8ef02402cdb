"""The torch a build mounts at /torch, in a host folder: this machine's linked from the store's torch venv (one
install, one copy on disk for a build and its smoke test), another machine's fetched by this host's pip for it.

Where neither applies the executor installs torch itself (the Docker executor's volume).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from builder.environments import store
from builder.environments.interpreters import python_prefix
from builder.environments.markers import marker_environment, target_requirements
from builder.errors import FarmError
from builder.facts import timings
from builder.facts.compat import machine_of, manylinux_glibc, manylinux_platforms
from builder.facts.hostenv import torch_index_args
from builder.facts.untrusted import Untrusted


def linked_from_store(spec, folder: Path, log_path: Path, *, log=print) -> str | None:
    """FOLDER (its path) holding SPEC's torch for this host's machine, from where this host's pip finds it (the
    build's requirement is the smoke test's): the host smoke test's torch venv (made now if need be) linked into the
    host FOLDER that builds mount at /torch (``store.torch_folder``), so torch is installed once, and on disk once,
    for a build and its smoke test. None (the build's own install then) where the build's pip would read torch's own
    index, where this host has no CPython of SPEC's version, or where a wheel in the venv needs a newer glibc than
    the image's; LOG_PATH says which."""
    from filelock import FileLock

    if torch_index_args(spec.torch_index_url):
        return None
    requirement, why = f"torch=={spec.torch_version}", None
    if not (folder / ".ready").is_file():
        slot = store.smoke_slot(spec.python_tag, spec.torch_version)
        try:
            python3 = str(python_prefix(spec.python, log=log) / "bin" / "python3")
            slot.mkdir(parents=True, exist_ok=True)
            with FileLock(str(slot) + ".lock"):  # the smoke test's own lock on its venvs
                venv = store.torch_venv(python3, requirement, slot / "torch-envs")
                glibc = manylinux_glibc(spec.manylinux)
                why = store.torch_folder(venv, folder, requirement, marker_environment(python3), glibc)
        except (FarmError, Untrusted, OSError, ValueError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
    with open(log_path, "ab") as f:
        linked = f"{folder}, linked from the smoke test's venv"
        said = f"not linked from the smoke test's venv ({why})" if why else linked
        f.write(f"== {requirement} for {spec.python_tag}: {said}\n".encode())
    return None if why else str(folder)


def fetched_for_target(spec, folder: Path, log_path: Path, timeout: float, *, log=print) -> str | None:
    """Another machine's torch in the host FOLDER (bind-mounted at /torch like a volume),
    installed by this host's pip, natively: wheels picked for SPEC's platform and Python
    (``--platform``, ``--python-version``, ``--only-binary :all:``). An emulated pip took most of a cold
    aarch64 run. pip judges markers by the machine it runs on, so torch goes in alone and its requirements
    follow, their markers judged for SPEC's machine (``target_requirements``). Builds mount it read-only, so
    Python cannot cache bytecode there (under emulation torch's import compiles its .py files in a minute and
    a half, three times a build and its smoke test): a host Python of SPEC's version compiles them once
    (bytecode is the same on every machine). None when it is there, else why not."""
    name = folder.name
    if (folder / ".ready").is_file():
        return None
    requirement = f"torch=={spec.torch_version}"  # what build.sh would be given, with torch's index
    tmp = folder.with_name(f".{name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "site").mkdir(parents=True)
    started = time.monotonic()
    pip = [
        sys.executable, "-m", "pip", "install", "--no-compile", "--target", str(tmp / "site"), "--only-binary", ":all:",
        *(a for tag in manylinux_platforms(spec.manylinux) for a in ("--platform", tag)),
        "--python-version", spec.python, "--implementation", "cp",
        *torch_index_args(spec.torch_index_url),
    ]  # fmt: skip
    reason = None
    with open(log_path, "ab") as f:
        f.write(f"== installing {requirement} for {spec.python_tag} {spec.platform} natively into {folder} (once)\n".encode())
        f.flush()

        def run(cmd: list[str]) -> int:
            try:
                return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode
            except subprocess.TimeoutExpired:
                return 124

        if (code := run([*pip, "--no-deps", requirement])) != 0:
            reason = f"could not install {requirement} (pip exit {code})"
        else:
            try:
                needs = target_requirements(tmp / "site", "torch", machine_of(spec.platform), spec.python)
            except FarmError as err:
                needs, reason = [], str(err).splitlines()[0]
            f.write(f"== its requirements on {machine_of(spec.platform)}: {' '.join(needs) or 'none'}\n".encode())
            f.flush()
            if reason is None and needs and (code := run([*pip, *needs])) != 0:
                reason = f"could not install {requirement}'s requirements (pip exit {code})"
        if reason is None:
            try:
                python = python_prefix(spec.python, log=log) / "bin" / "python3"
            except FarmError as err:  # no host Python of that version: imports compile it, slowly
                f.write(f"== not byte-compiled: {str(err).splitlines()[0]}\n".encode())
            else:
                run([str(python), "-m", "compileall", "-q", "-j", "0", str(tmp / "site")])
    if reason is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        return reason
    (tmp / ".ready").touch()
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    timings.record("torch", f"folder {name} (native pip)", time.monotonic() - started)
    return None
