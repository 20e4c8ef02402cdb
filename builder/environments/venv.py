"""Running one step in a venv: in a clean environment (no PYTHONPATH), a failure named by what it was."""

from __future__ import annotations

import os
import subprocess

from builder.errors import VerificationError


def clean_env() -> dict:
    """This process's environment without PYTHONPATH: a venv sees only what was installed into it."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def run_step(cmd: list[str], what: str) -> None:
    """One step of making or using a smoke test's environment; a failure is a VerificationError naming WHAT."""
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=clean_env())
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        raise VerificationError(f"smoke test: could not {what}: {tail}")


def site_packages(python: str) -> str:
    """The site-packages folder of the interpreter PYTHON (a venv's bin/python)."""
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
