"""``python -m builder reproduce``: rebuild one spec and compare it, byte for byte, with a wheel
(builder.run.verify)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import summary, typed
from builder.run.verify import ReproduceRequest, run_reproduce


def add_command(subparsers) -> None:
    p = subparsers.add_parser("reproduce", aliases=["verify"], help=summary("reproduce"))
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--rebuild", metavar="ID", help="the spec id that made WHEEL (its .spec.json's id)")
    what.add_argument(
        "--one-per-kind", type=Path, metavar="DIR",
        help="rebuild one wheel of each kind (CPU, CUDA, each stable-ABI, recipe) among DIR's wheels with .spec.json sidecars",
    )  # fmt: skip
    p.add_argument("wheel", metavar="WHEEL", nargs="?", help="with --rebuild: a path, or an http(s) URL with --sha256")
    p.add_argument("--projects", nargs="+", default=None, metavar="NAME", help="as for build (a recipe's ids)")
    p.add_argument("--sha256", default=None, help="the wheel's expected sha256 (required for a URL)")
    p.add_argument("--profile", default=None, help="the matrix profile that plans ID (default: the first that does)")
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    p.add_argument("--executor", default="auto", choices=("auto", "docker", "host"), help="as for build (default auto)")
    p.add_argument("--wheelhouse", type=Path, action="append", default=None, metavar="DIR", help="as for build")
    p.add_argument("--source", type=Path, default=None, help="the package source tree (default: this checkout)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR", help="keep the rebuild's dist folder here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_reproduce(typed(ReproduceRequest, args))
