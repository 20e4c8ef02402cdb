"""``python -m builder hip-compile``: hipify the kernels and compile them for AMD GPU targets (builder.run.hip)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from builder.building.hip import DEFAULT_ARCHS, check_archs
from builder.building.images.engine import connect
from builder.commands import summary
from builder.run.hip import HipRequest, run_hip


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "hip-compile",
        help=summary("hip-compile"),
        description="Hipify csrc/cuda/*.cu and compile them with Debian trixie's hipcc in a container; "
        "list each object's code objects per gfx target.",
    )
    p.add_argument(
        "--archs", default=",".join(DEFAULT_ARCHS), help="comma-separated gfx targets (default: %(default)s)"
    )
    p.add_argument(
        "--python", default=sys.executable, help="a Python with torch, for torch.utils.hipify (default: this one)"
    )
    p.add_argument("--out", type=Path, default=None, help="keep the hipified sources and objects here")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--evidence", type=Path, default=None, metavar="PATH",
        help="write what was compiled (gfx targets, toolchain image, linked: false) as a record for "
        "`evidence harvest --hip`",
    )  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    archs = check_archs(tuple(a.strip() for a in args.archs.split(",") if a.strip()))
    request = HipRequest(archs=archs, python=args.python, out=args.out, evidence=args.evidence)
    done = run_hip(connect(), request, log=lambda m: print(m, file=sys.stderr))
    version, results, total = done.version, done.results, done.seconds
    if args.json:
        json.dump(
            {
                "hip_version": version,
                "seconds": round(total, 1),
                "tus": [
                    {
                        "tu": r.tu,
                        "seconds": round(r.seconds, 1),
                        "cpu_seconds": round(r.cpu_seconds, 1),
                        "bundler": list(r.bundler_targets),
                        "code_objects": [
                            {"arch": c.arch, "size": c.size, "kernels": list(c.kernels)} for c in r.code_objects
                        ],
                    }
                    for r in results
                ],
            },
            sys.stdout,
            indent=1,
        )
        print()
        return 0
    print(f"HIP {version}: {len(results)} TUs for {', '.join(archs)} in {total:.1f}s")
    for r in results:
        print(f"  {r.tu}: {r.seconds:.1f}s wall, {r.cpu_seconds:.1f}s CPU")
        for c in r.code_objects:
            print(f"    {c.arch:8} {c.size:>8} bytes  {', '.join(c.kernels)}")
    return 0
