"""Mamba selective-scan kernels. ``mamba_ssm.doctor`` explains a broken install.

``from mamba_ssm import Mamba, selective_scan_fn`` works as upstream's does; the names are imported on first
use (PEP 562), so ``import mamba_ssm`` (the doctor, setup.py's version read) needs no torch.
"""

__version__ = "0.3.0"

# name -> the module that defines it (upstream's names; Mamba2, mamba_inner_fn, MambaLMHeadModel are upstream only)
_EXPORTS = {
    "Mamba": "mamba_ssm.modules.mamba_simple",
    "selective_scan_fn": "mamba_ssm.ops.selective_scan_interface",
    "selective_scan_ref": "mamba_ssm.ops.selective_scan_interface",
}
__all__ = ["Mamba", "__version__", "selective_scan_fn", "selective_scan_ref"]  # _EXPORTS' names


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mamba_ssm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
