"""The floor root's CPython: CPython's default build against the one ``builder/data/floor.toml`` asks for.

The floor root (builder/building/images/floor_root.py) is Debian bullseye with a CPython compiled there, made
once per machine: on a cold CI run it sits on the critical path of the glibc-floor test. The baseline is
CPython's own defaults (-O3 with debug info, every module bullseye's libraries allow); the farm's way is
``floor.toml``'s ``opt`` and ``disabled``. (Skipping the install's bytecode as well was measured at 0.03 of the
baseline's CPU more: not worth a patched Makefile.) Both run the same command text the farm's Dockerfile runs
(``floor_root.compile_command``), one after the other in each round, in containers of one image holding
bullseye, the build's packages and the pinned source; each container's own cgroup counter gives its CPU
seconds. Each interpreter then imports what the root needs (ctypes for torch, ssl and zlib for pip) and
makes a venv with pip, as the glibc-floor test does.

    .venv/bin/python benchmarks/floor_root.py              # one round
    .venv/bin/python benchmarks/floor_root.py --rounds 2   # alternating, the baseline first
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.building.images import base_image, floor_root
from builder.building.images.engine import build_image, connect
from builder.facts import hostenv
from builder.facts.cputime import CGROUP_CPU_SH, parse_cgroup_cpu
from builder.facts.hostenv import find_ca_bundle
from builder.sourcing.sources import SourceCache

TAG = "mamba-farm-bench/floor-root-packages"
CHECK = (
    f"{floor_root.PREFIX}/bin/python3 -c 'import ctypes, ssl, zlib, platform; print(platform.libc_ver())' "
    f"&& {floor_root.PREFIX}/bin/python3 -m venv /v && /v/bin/python -m pip --version"
)


def run(client, command: str) -> tuple[float, float, str]:
    """(wall, CPU seconds, last line printed) of COMMAND in a container of TAG, from the container's cgroup."""
    started = time.monotonic()
    script = f"set -e -o pipefail; {command}; {CHECK}; {CGROUP_CPU_SH.rsplit(' > ', 1)[0]}"
    out = client.containers.run(TAG, ["bash", "-c", script], remove=True, network_disabled=True).decode()
    lines = out.strip().splitlines()
    cpu = parse_cgroup_cpu(lines[-1])
    if cpu is None:
        raise SystemExit(f"no cgroup CPU counter in the container: {out[-500:]}")
    # a && chain that stops early ends the container well under set -e: what it printed says it ran to the end
    if lines[:-1] != ["('glibc', '2.31')", "('glibc', '2.31')"] + lines[2:3] or not lines[2].startswith("pip "):
        raise SystemExit(f"the interpreter did not build or does not run there: {out[-800:]}")
    return time.monotonic() - started, cpu, lines[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    client = connect()
    fl = floor_root.floor()
    base = base_image.ensure(client, fl.suite, ca_bundle=find_ca_bundle())
    tarball = SourceCache(hostenv.CACHE_ROOT / "interpreters" / "sources").fetch(fl.python)
    packages = floor_root.dockerfile(base, fl).split("\nRUN ", 2)
    build_image(client, TAG, f"{packages[0]}\nRUN {packages[1]}", what=TAG, files={"cpython.tar.gz": tarball})
    ways = {"CPython's defaults": dataclasses.replace(fl, opt="", disabled=()), "floor.toml": fl}
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for r in range(args.rounds):
        for name, way in ways.items():
            wall, cpu, said = run(client, floor_root.compile_command(way))
            got[name].append((wall, cpu))
            print(f"round {r + 1}: {name}: {wall:.0f} s wall, {cpu:.0f} CPU-s ({said})", flush=True)
    best = {name: min(v, key=lambda t: t[1]) for name, v in got.items()}
    base_wall, base_cpu = best["CPython's defaults"]
    print(f"\nthe floor root's CPython, cold, best of {args.rounds}, against CPython's defaults:")
    for name, (wall, cpu) in best.items():
        print(f"  {name}: {cpu:.0f} CPU-s ({wall:.0f} s): CPU ratio {cpu / base_cpu:.2f}, wall {wall / base_wall:.2f}")
    client.images.remove(TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
