"""Mamba selective-scan kernels. ``mamba_ssm.doctor`` explains a broken install."""

__version__ = "2.3.0"
