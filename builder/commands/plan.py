"""``python -m builder plan``: expand matrix.toml into builds and toolchain images (builder.planning.plan)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from builder.commands import summary
from builder.errors import MatrixError
from builder.planning import plan as planning  # read at run time: tests set planning.GITHUB_MATRIX_LIMIT
from builder.planning.matrix import CHECKOUT
from builder.planning.plan import (
    DEFAULT_MATRIX,
    EXPLAIN_INLINE,
    RUNNERS,
    dropped_lines,
    github_jobs,
    print_explanation,
    print_table,
)


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help=summary("plan"),
        description="Expand matrix.toml into builds and toolchain images.",
    )
    p.add_argument(
        "--matrix", type=Path, default=None, help=f"matrix file (default: {DEFAULT_MATRIX.name} in the repo)"
    )
    p.add_argument("--profile", default=None, help="a [profiles.NAME] subset, e.g. ci")
    p.add_argument("--only", nargs="+", action="extend", default=None, metavar="ID", help="just these build ids")
    p.add_argument(
        "--projects", nargs="+", action="extend", default=None, metavar="NAME",
        help=f"build these projects instead of the profile's ({CHECKOUT} and/or recipe names, e.g. causal-conv1d)",
    )  # fmt: skip
    p.add_argument(
        "--format", choices=("table", "json", "github"), default="table",
        help="table (default), json (one object per build) or github (an Actions matrix)",
    )  # fmt: skip
    p.add_argument(
        "--on-request", action="store_true",
        help="with --format github: also the builds the profile leaves to a request (on_request); "
        "the builds --only names are built either way",
    )  # fmt: skip
    p.add_argument(
        "--explain", action="store_true", help="also list every dropped combination and why, and each recipe's patches"
    )
    p.add_argument(
        "--stable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve every cell a stable-ABI (abi3) wheel can from one build per accelerator and platform "
        "(default: matrix.toml's [plan] stable_abi, or the profile's)",
    )
    p.add_argument(
        "--costs", type=Path, default=None, metavar="DIR",
        help="a release's downloaded log artifacts (job-cost.json records): the runner-hours before and after",
    )  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        plan = planning.load_plan(
            args.matrix, args.profile, args.only, stable=getattr(args, "stable", None),
            projects=getattr(args, "projects", None),
        )  # fmt: skip
    except MatrixError as err:
        dropped = getattr(err, "dropped", None)
        if args.explain and dropped and len(dropped) > EXPLAIN_INLINE:  # a few are in the error itself
            out = sys.stdout if args.format == "table" else sys.stderr
            print(f"dropped {len(dropped)} combination(s):\n{dropped_lines(dropped)}", file=out)
        raise
    if args.format == "json":
        json.dump([b.to_json() for b in plan.builds], sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.format == "github":
        # what this run builds: the prebuilt builds, or with --on-request every one; the ids --only names always
        asked = args.on_request or bool(args.only)
        builds = [b for b in plan.builds if asked or not b.on_request]
        jobs = github_jobs(builds)
        json.dump({"include": jobs}, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        left = len(plan.builds) - len(builds)
        if left:
            print(f"plan: {left} build(s) left to a request (on_request): --on-request, or --only ID, builds them",
                  file=sys.stderr)  # fmt: skip
        for platform in RUNNERS:  # the release cuts each platform's jobs into matrices of at most the limit
            n = sum(j["platform"] == platform for j in jobs)
            if n > planning.GITHUB_MATRIX_LIMIT:
                chunks = -(-n // planning.GITHUB_MATRIX_LIMIT)
                print(f"plan: {n} {platform} jobs, {chunks} matrices of at most {planning.GITHUB_MATRIX_LIMIT} "
                      "(GitHub's limit per matrix)", file=sys.stderr)  # fmt: skip
    else:
        print_table(plan)
        if plan.profile is not None and plan.profile.releases == "all":
            _release_cost(args, plan)
    if args.explain:
        # Machine-readable formats keep stdout pure JSON.
        print_explanation(plan, sys.stdout if args.format == "table" else sys.stderr)
    return 0


def _release_cost(args: argparse.Namespace, plan) -> None:
    """A release plan's lines: per recipe line, its releases and (release, torch) pairs; the cost before (each
    recipe's pinned release) and after (every release)."""
    from builder.planning.releases import summary_lines
    from builder.publishing import cost

    for line in summary_lines(plan):
        print(line)
    before = planning.load_plan(args.matrix, args.profile, args.only, stable=getattr(args, "stable", None),
                                projects=getattr(args, "projects", None), releases="pinned")  # fmt: skip
    records = cost.read_jobs(args.costs) if getattr(args, "costs", None) else None
    for line in cost.before_after_lines(github_jobs(before.builds), github_jobs(plan.builds), len(before.builds),
                                        len(plan.builds), records):  # fmt: skip
        print(line)
