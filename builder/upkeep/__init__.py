"""Keeping the farm current and its pipeline rehearsed: drift against PyPI, release.yml under act."""
