"""``python -m builder doctor-dist``: the standalone doctor wheel and its index page (builder.publishing.doctor_dist)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError
from builder.facts.paths import REPO
from builder.publishing.doctor_dist import NAME, publish, write_lines


def run(args: argparse.Namespace) -> int:
    if args.record_requires:
        from builder.publishing.release_lines import record_requires

        print(f"doctor: wrote {record_requires(Path(args.record_requires)).relative_to(REPO)} from the sdists")
        if args.out is None and not args.write_lines:
            return 0
    if args.write_lines:
        print(f"doctor: wrote {write_lines().relative_to(REPO)} from the release plan")
        if args.out is None:
            return 0
    if args.out is None:
        raise UsageError("doctor-dist: nothing to do", hint="pass --out DIR (the site's doctor/), or --write-lines")
    wheel = publish(Path(args.out))
    print(
        f"doctor: {wheel} ({wheel.stat().st_size} bytes); pip install {NAME} --index-url <where {args.out} is served>"
    )
    return 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor-dist",
        help=summary("doctor-dist"),
        description="The doctor, from mamba_ssm/doctor and the stdlib-only modules it imports, as a pure-Python "
        "wheel with no dependencies, in a PEP 503 index of its own.",
    )
    p.add_argument("--out", help="folder to write the index into (the site's doctor/)")
    p.add_argument(
        "--write-lines", action="store_true",
        help="first rewrite mamba_ssm/doctor/lines.py (each line's site folder and newest versions) from the release plan",
    )  # fmt: skip
    p.add_argument(
        "--record-requires", metavar="DIR",
        help="first record builder/data/requires.toml (each release's requirements) from the sdists in DIR",
    )  # fmt: skip
    p.set_defaults(func=run)
