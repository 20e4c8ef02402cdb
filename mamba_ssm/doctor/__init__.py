"""``python -m mamba_ssm.doctor``: explain a broken mamba-ssm install and print the exact fix.

Standard library only and no import of torch or of the extension at import time, so it runs in
exactly the environments it is meant to diagnose.
"""

from .classify import Context, Diagnosis, classify

__all__ = ["Context", "Diagnosis", "classify", "main"]


def main(argv=None) -> int:
    from .cli import main as _main

    return _main(argv)
