"""The resolver index: per-variant find-links pages, PEP 503/691 simple pages, the coverage page.

``python -m builder index --wheels DIR --out OUT``: atomic (a symlink swapped to a new generation),
incremental, hash-carrying, wheels stored once and immutable unless named in ``--replace``. One module per
concern (``model``, ``reader``, ``pages``, ``store``, ``generation``), each loaded on first use;
docs/reference/index-layout.md and docs/architecture.md describe the layout.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from builder.publishing.index.generation import IndexResult, build_index, load_manifest
    from builder.publishing.index.model import (
        PROJECT,
        SCHEMA,
        Entry,
        Index,
        Manifest,
        Wheel,
        install_command,
        parse_version,
    )

_HOME = {
    "IndexResult": "generation",
    "build_index": "generation",
    "load_manifest": "generation",
    "PROJECT": "model",
    "SCHEMA": "model",
    "Entry": "model",
    "Index": "model",
    "Manifest": "model",
    "Wheel": "model",
    "install_command": "model",
    "parse_version": "model",
}
__all__ = [
    "PROJECT",
    "SCHEMA",
    "Entry",
    "Index",
    "IndexResult",
    "Manifest",
    "Wheel",
    "build_index",
    "install_command",
    "load_manifest",
    "parse_version",
]


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
