"""``python -m builder drift``: compare the torch data and recipe pins with what the index publishes
(builder.upkeep.drift)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import summary, typed
from builder.errors import PatchError
from builder.facts.compat import DATA_DIR
from builder.facts.paths import REPO
from builder.upkeep.drift import DRIFT_EXIT, RUN_BUDGET, DriftOptions, run_drift


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "drift",
        help=summary("drift"),
        description=f"Reports new torch minors and patch releases, Python ranges, CUDA per platform, glibc floors, "
        f"and new sdists of each recipe. Exit 0: no drift; {DRIFT_EXIT}: drift (a table says what); "
        f"{PatchError.exit_code}: a recipe's new sdist breaks one of its patches (with --write: its pin stays); "
        "8/9: with --write, a new sdist did not match its listed sha256 / could not be fetched.",
    )
    p.add_argument("--index", help="the simple API to read (default: the host's pip index-url, else PyPI)")
    p.add_argument("--write", action="store_true", help="update the TOML files (comments kept)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    p.add_argument("--torch-data", type=Path, default=DATA_DIR / "torch.toml", help=argparse.SUPPRESS)
    p.add_argument("--matrix", type=Path, default=REPO / "matrix.toml", help=argparse.SUPPRESS)
    p.add_argument("--recipes", type=Path, default=REPO / "recipes", help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, default=None, help="the farm cache to use (default: the farm's)")
    p.add_argument("--no-recipes", action="store_true", help="torch only")
    p.add_argument("--since", metavar="MINOR", help="compare torch minors from this one up (default: every row); below the oldest row, "
                   "--write adds the older minors' rows and lists them in matrix.toml's [releases] torch")  # fmt: skip
    p.add_argument("--budget-seconds", type=float, metavar="S",
                   help=f"stop after S seconds (default: MAMBA_FARM_RUN_SECONDS or {RUN_BUDGET[0]})")  # fmt: skip
    p.add_argument("--budget-mb", type=float, metavar="MB",
                   help=f"stop after MB MiB read from the index (default: MAMBA_FARM_RUN_MB or {RUN_BUDGET[1]})")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_drift(typed(DriftOptions, args))
