"""``python -m builder render``: write the Dockerfile of every toolchain image (builder.building.images.render)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.building.images.render import write_all
from builder.commands import summary


def add_command(subparsers) -> None:
    p = subparsers.add_parser("render", help=summary("render"))
    p.add_argument(
        "--out", type=Path, default=Path("build/docker"), help="folder for the Dockerfiles (default build/docker)"
    )
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    p.add_argument("--profile", default=None, help="a profile of the matrix (e.g. ci)")
    p.add_argument("--only", nargs="*", default=None, metavar="ID", help="just the images of these build ids")
    p.add_argument(
        "--configured-base",
        action="store_true",
        help="FROM the base named in matrix.toml instead of the farm's own Debian base",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.planning.plan import load_plan  # here, not above: importing render (hip-compile does) stays cheap

    plan = load_plan(matrix_file=args.matrix, profile=args.profile, only=args.only)
    for path in write_all(plan.images, args.out, local_base=not args.configured_base):
        print(path, file=sys.stdout)
    return 0
