"""``python -m builder build``: plan -> images -> builds -> verify -> dist/wheels -> dist/index
(builder.run.build)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.building.executors.choose import EXECUTORS
from builder.commands import summary, typed
from builder.facts.paths import REPO
from builder.run.build import BuildRequest, run_build


def add_command(subparsers) -> None:
    p = subparsers.add_parser("build", help=summary("build"))
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    p.add_argument("--profile", default=None, help="a profile of the matrix (e.g. ci)")
    p.add_argument("--only", nargs="+", default=None, metavar="ID", help="build only these spec ids")
    p.add_argument(
        "--projects", nargs="+", default=None, metavar="NAME",
        help="build these projects instead of the profile's (checkout and/or recipe names, e.g. causal-conv1d)",
    )  # fmt: skip
    p.add_argument(
        "--executor",
        default="auto",
        choices=EXECUTORS,
        help="docker, host, or auto (default: docker when an engine answers, else host)",
    )
    p.add_argument("--jobs", type=int, default=None, help="builds at once (default: from cores and memory)")
    p.add_argument(
        "--compile-jobs", type=int, default=None, metavar="N",
        help="compiler jobs inside each build (MAX_JOBS; default: cores / --jobs); 1 for a one-core or memory-tight host",
    )  # fmt: skip
    p.add_argument(
        "--wheelhouse",
        type=Path,
        action="append",
        default=None,
        metavar="DIR",
        help="a local wheel dir builds install torch from (repeatable; default ~/.cache/mamba-farm/wheelhouse)",
    )
    p.add_argument(
        "--dist", type=Path, default=Path("dist"), help="output folder: wheels/, logs/, index/ (default dist)"
    )
    p.add_argument("--ca-bundle", type=Path, default=None, help="CA bundle for builds (default: the host's pip cert)")
    p.add_argument("--timeout", type=float, default=5400, help="seconds one build may take (default 5400)")
    p.add_argument("--retries", type=int, default=1, help="retries after an infrastructure failure (default 1)")
    p.add_argument("--source", type=Path, default=REPO, help="the package source tree (default: this checkout)")
    p.add_argument(
        "--no-smoke", action="store_true", help="skip the smoke test in a clean env (verification still runs)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_build(typed(BuildRequest, args))
