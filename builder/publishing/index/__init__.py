"""The resolver index: per-variant find-links pages, PEP 503/691 simple pages, the coverage page.

``python -m builder index --wheels DIR --out OUT [--base-url URL] [--files-url URL]``

On disk (OUT = ``dist/index``)::

    dist/index -> .index.d/gen-<id>          a symlink, swapped atomically (os.replace)
    dist/.index.d/store/                     every wheel once (a hard link to it), plus <wheel>.metadata (PEP 658)
    dist/.index.d/gen-<id>/files -> ../store
    dist/.index.d/gen-<id>/<variant> -> ../pages/<variant>.<hash>   (immutable, shared by generations)
    dist/.index.d/pages/<variant>.<hash>/index.html              find-links page (every project's wheels)
    dist/.index.d/pages/<variant>.<hash>/<project>/index.html    PEP 503 project page, one per project
    dist/.index.d/gen-<id>/simple/...                        every project (HTML + PEP 691 JSON)
    dist/.index.d/gen-<id>/index.html, manifest.json         coverage page, machine-readable view
    dist/.index.d/lock                                       serialises concurrent runs

Wheels are immutable once published: a run adds new files to the store (a hard
link to the wheel it was given, a copy where linking is refused), checks the
recorded ones (size, mtime and inode, and their sha256 whenever any moved, or
always with ``verify=True``), writes a complete new generation of pages in a
staging folder, then swaps the OUT symlink. Readers see the old index or the new
one, never a mix; a killed run leaves the old one live. (No fsync: the swap is
atomic for readers and for killed runs, not across a power cut.) Because of the
hard link, rewriting a wheel in place in ``--wheels`` alters the published file:
the next run reports it. Publish the tree with symlinks followed (``rsync -aL``).

A wheel given under a published name with other bytes is refused, unless the run
names it in ``replace`` (``--replace NAME``): then the new bytes supersede the old
ones in the store (renamed over them just before the swap), the manifest entry
records what it replaced, and the result lists it. ``builder build`` passes only
the wheels it just rebuilt because their inputs changed; never use it on an index
that others have installed from (pip caches by filename, hash pins break).

Several projects share an index (this repository's mamba-ssm, or upstream's mamba-ssm and causal-conv1d built
from their recipes), each wheel under its canonical name, its source (the sidecar's ``source``: ``checkout``
when absent) recorded in the manifest. One distribution name comes from one source line: this checkout's
mamba-ssm and upstream's sdist mamba-ssm in one index are refused (IndexIntegrityError), before anything is
published. The two product lines are two indexes.

Which variants a stable-ABI wheel (``+cu13torchstable``, ``cp310-abi3``) serves:
a sidecar ``<wheel>.spec.json`` (the farm's ``BuildSpec.to_json()``) names them
in ``serves``; without one, every indexed variant of the same accelerator whose
torch minor satisfies the wheel's ``Requires-Dist: torch`` specifier, plus the
wheel's own ``<acc>-torchstable-abi3`` page.

Where a wheel is downloaded from: ``files/<name>`` next to the pages, unless the run
that added it was given ``--files-url URL`` (a GitHub release's download URL: GitHub
Pages sites stop at 1 GB, release assets do not). Such a wheel is linked as
``URL/<name>`` (sha256 fragment kept, no PEP 658 attribute: its ``.metadata`` is not
hosted there), the manifest records that URL, and a later run that gives the same
file with another ``--files-url`` moves the link. ``files/`` still holds every wheel
(integrity checks, the release upload); a site whose wheels are all hosted elsewhere
is published without it.

The package, one module per concern (importing it imports none of them: each loads on first use, so
``builder.publishing.coverage`` and ``builder.publishing.resolve`` read the model without the rest)::

    model        the typed manifest entry, the Index (variant pages), stable-wheel admission, which wheel a
                 cell gets, the install command
    reader       what a wheel's filename, METADATA (builder.verifying.wheelmeta) and sidecar say
    pages        the find-links, PEP 503/691 and coverage pages of a generation
    store        the fd-based store: ingest, integrity checks
    generation   a run: lock, check, ingest, write a generation, swap, collect garbage
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
