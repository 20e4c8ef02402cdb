"""``python -m builder base-image``: make a local Debian base image (builder.building.images.base_image)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.building.images.base_image import DEBIAN_ARCH, SUITES, ensure
from builder.building.images.engine import connect
from builder.building.images.images import DEFAULT_SUITE
from builder.commands import summary
from builder.facts.compat import machine_of
from builder.facts.hostenv import find_ca_bundle


def add_command(subparsers) -> None:
    p = subparsers.add_parser("base-image", help=summary("base-image"))
    p.add_argument("--suite", default=DEFAULT_SUITE, choices=SUITES, help=f"Debian suite (default {DEFAULT_SUITE})")
    p.add_argument(
        "--platform",
        default=None,
        choices=[f"linux_{m}" for m in DEBIAN_ARCH],
        help="the wheel platform the base is for (default: this host's); another one is made under emulation",
    )
    p.add_argument("--ca-bundle", type=Path, default=None, help="CA bundle to bake in (default: the host's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = connect()
    ca = find_ca_bundle(args.ca_bundle)
    machine = machine_of(args.platform) if args.platform else None
    name = ensure(client, args.suite, ca_bundle=ca, log=lambda m: print(m, file=sys.stderr), machine=machine)
    print(name)
    return 0
