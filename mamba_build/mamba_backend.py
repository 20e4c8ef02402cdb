"""The PEP 517 backend (pyproject.toml: backend-path): setuptools.build_meta, once a setuptools that
can build mamba-ssm is known to be there.

With --no-build-isolation the front-end uses the environment's own setuptools, and a fresh venv's
is too old (Python 3.10/3.11 seed 65.5) or missing (3.12+ seed none). Without this check that is a
traceback (no setuptools) or a page of setuptools internals; here it is one line naming the fix.
setup.py checks the same floor when it is run directly.
"""

import re

FLOOR = "70.1"  # setuptools.command.bdist_wheel; pyproject.toml's build-system.requires says the same


def setuptools_problem(version: "str | None") -> "str | None":
    """The one-line error for this setuptools version (None: no setuptools), or None when it will do."""
    if version is not None:
        found = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
        if found >= tuple(int(x) for x in FLOOR.split(".")):
            return None
    have = "this environment has no setuptools" if version is None else f"this environment's setuptools is {version}"
    return (
        f"mamba-ssm build error: {have}, and building mamba-ssm needs setuptools>={FLOOR}. How to fix: "
        f"pip install 'setuptools>={FLOOR}' in this environment, then retry."
    )


try:
    import setuptools as _setuptools
except ImportError:
    _setuptools = None

_problem = setuptools_problem(getattr(_setuptools, "__version__", None))
if _problem:
    raise SystemExit(_problem)

from setuptools.build_meta import *  # noqa: F403  (this module is that backend)
