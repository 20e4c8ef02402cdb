"""``python -m builder hip-compile``'s run: the HIP kernels compiled in the farm's hipcc image
(builder/building/hip.py), kept where asked and recorded as evidence.

The compile checks that the kernels compile for every gfx target on a CPU-only machine; its record
(``record``: the targets every TU's audited code objects hold, ``linked: false``) is what ``evidence harvest --hip``
reads. The ROCm wheel itself needs a ROCm torch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from builder.building import hip
from builder.errors import BuildFailed
from builder.facts.paths import REPO
from builder.verifying import evidence
from builder.verifying.provenance import checkout_commit, checkout_dirty


@dataclass(frozen=True)
class HipRequest:
    """One hip-compile run: the gfx targets, the Python with torch that hipifies, where to keep the tree and
    objects (None: nowhere) and where to write the evidence record (None: no record)."""

    archs: tuple[str, ...] = hip.DEFAULT_ARCHS
    python: str = ""
    out: Path | None = None
    evidence: Path | None = None


@dataclass(frozen=True)
class HipRun:
    version: str  # the hipcc's HIP version
    results: list  # [hip.Compiled], one per TU
    seconds: float


def run_hip(client, request: HipRequest, *, log=print) -> HipRun:
    """Hipify and compile every TU for REQUEST's targets in a scratch folder, keep it at ``out`` (through a staging
    folder: nothing half-written) and write the evidence record to ``evidence``, when asked."""
    archs = hip.check_archs(tuple(request.archs))
    with tempfile.TemporaryDirectory(prefix="mamba-farm-hip-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        version, results = hip.compile_kernels(client, work, archs=archs, python=request.python, log=log)
        seconds = time.monotonic() - started
        if request.out:
            publish(work, request.out)
    if request.evidence:
        evidence.write(request.evidence, record(version, results))
        log(f"hip: evidence record {request.evidence}")
    return HipRun(version, results, seconds)


def record(version: str, results: list[hip.Compiled]) -> dict:
    """The evidence record of a HIP compile (builder.verifying.evidence.check_hip): the gfx targets every TU's
    audited code objects hold (not the ones asked for), the toolchain, this checkout's commit, ``linked: false``."""
    held = [{c.arch for c in r.code_objects} for r in results]
    order = lambda a: (len(a), a)  # gfx90a, gfx942, gfx1100
    archs = sorted(set.intersection(*held) if held else set(), key=order)
    if not archs:
        raise BuildFailed("the HIP compile left no gfx target in every object: nothing to record")
    return {
        "schema": evidence.SCHEMA, "kind": evidence.HIP_KIND, "linked": False, "line": "checkout",
        "source": {"kind": "checkout", "commit": checkout_commit(REPO), "dirty": checkout_dirty(REPO)},
        "archs": archs, "hip_version": version,
        "toolchain": {"image": results[0].image, "suite": hip.SUITE, "packages": list(hip.PACKAGES),
                      "flags": list(hip.HIPCC_FLAGS)},
        "tus": [
            {"tu": r.tu, "archs": sorted((c.arch for c in r.code_objects), key=order), "bytes": sum(c.size for c in r.code_objects),
             "kernels": sorted({k for c in r.code_objects for k in c.kernels}), "bundler": list(r.bundler_targets),
             "seconds": round(r.seconds, 1), "cpu_seconds": round(r.cpu_seconds, 1)}
            for r in results
        ],
    }  # fmt: skip


def publish(work: Path, out: Path) -> None:
    """Copy the hipified tree and objects to OUT through a staging dir (nothing half-written)."""
    out = out.resolve()
    stage = out.with_name(out.name + ".partial")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(work, stage)
    if out.exists():
        shutil.rmtree(out)
    os.replace(stage, out)
