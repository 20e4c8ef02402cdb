"""Emulated aarch64 against native x86_64: one stable-ABI build and its smoke test, cold, in the farm's images.

The arm64 images compile with Debian's x86_64-hosted cross g++ and, for CUDA, this host's nvcc (both run
natively inside the emulated container: builder/building/images/render.py ``cross_compiler``,
``compiler_overlay``), and pip and setup.py run on the build host's twin of the image's Python, natively
(``cross["python"]``, ``docker.native_python``); what stays emulated is the smoke test.

    .venv/bin/python benchmarks/emulation.py                     # the CPU spec, both machines, one after the other
    .venv/bin/python benchmarks/emulation.py --accelerator cuda  # the CUDA 13 spec
    .venv/bin/python benchmarks/emulation.py --machine aarch64

For each machine, the plan's stable-ABI spec of that accelerator (aarch64: profile ci-aarch64, CPU torch 2.10 and
cu13 torch 2.11 from PyPI, sm_90; x86_64: ci-stable's, CPU torch 2.13 and cu13 torch 2.14, sm_80: the same
sources and kernels, one GPU arch each) goes through the Docker executor with no kernel cache (cold: every object
compiled), MAX_JOBS=2, then the verifier, then the smoke test in its own image (``smoke.in_container`` through the Docker executor: the same
script both ways, the CPU scan against the float64 reference). Printed per machine: wall seconds of the build
container, of the smoke container, and the compile CPU seconds build.sh reports. Images and torch volumes are made
first (and reused), outside the timings.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.building.executors import KERNEL_CACHE_MOUNT, BuildOptions
from builder.building.executors.docker import DockerExecutor
from builder.building.executors.host import copy_source
from builder.building.images.engine import connect
from builder.facts.hostenv import default_wheelhouses, find_ca_bundle
from builder.planning.plan import load_plan
from builder.verifying import smoke, wheels

PROFILES = {"aarch64": "ci-aarch64", "x86_64": "ci-stable"}


class ColdExecutor(DockerExecutor):
    """The farm's Docker executor without the shared kernel cache: each build compiles every object."""

    def _build_config(self, spec, torch_volume):
        env, volumes = super()._build_config(spec, torch_volume)
        env.pop("MAMBA_KERNEL_CACHE", None)
        return env, {k: v for k, v in volumes.items() if v["bind"] != KERNEL_CACHE_MOUNT}


def measure(machine: str, accelerator: str, work: Path) -> dict:
    plan = load_plan(profile=PROFILES[machine])
    kind = "cu" if accelerator == "cuda" else "cpu"  # the plan's accelerator labels: cpu, cu13
    spec = next(s for s in plan.builds if s.accelerator.startswith(kind) and s.stable)
    logs = work / f"{machine}-{accelerator}"
    logs.mkdir(parents=True)
    ex = ColdExecutor(
        connect(),
        BuildOptions(
            wheelhouses=default_wheelhouses(), ca_bundle=find_ca_bundle(None), max_jobs=2, logs_dir=logs, log=print
        ),
    )
    try:
        ex.prepare(plan.images, [spec])
        log = logs / f"{spec.id}.log"
        ex._torch_volume(spec, log, 3600)  # made (or found) before the clock starts
        src = work / "src"
        if not src.exists():
            copy_source(ROOT, src)
        t0 = time.monotonic()
        res = ex.build(spec, src, logs / "raw", log, 7200)
        build_s = time.monotonic() - t0
        if not res.ok:
            raise SystemExit(f"{spec.id}: {res.reason} (log: {log})")
        good = wheels.verify_wheel(res.wheel, spec, workdir=logs / "verify").wheel
        t0 = time.monotonic()
        line = smoke.in_container(ex, spec, good, log)
        smoke_s = time.monotonic() - t0
    finally:
        ex.cleanup()
    m = re.search(r"== compile cpu: ([\d.]+) s", log.read_text())
    return {
        "machine": machine,
        "compiler": "cross" if spec.image in ex.crosses else "image",
        "spec": spec.id,
        "wheel": good.name,
        "build_wall_s": round(build_s, 1),
        "compile_cpu_s": float(m.group(1)) if m else None,
        "smoke_wall_s": round(smoke_s, 1),
        "smoke": line,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", choices=sorted(PROFILES), action="append")
    ap.add_argument("--accelerator", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="emulation-bench-") as tmp:
        for machine in args.machine or ["x86_64", "aarch64"]:
            out.append(measure(machine, args.accelerator, Path(tmp)))
            print(json.dumps(out[-1]), flush=True)
    x86 = [r for r in out if r["machine"] == "x86_64"]
    for arm in (r for r in out if r["machine"] == "aarch64") if x86 else ():
        for key in ("build_wall_s", "compile_cpu_s", "smoke_wall_s"):
            if x86[0][key] and arm[key]:
                print(f"{key}: aarch64 ({arm['compiler']} g++) / x86_64 (native) = {arm[key] / x86[0][key]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
