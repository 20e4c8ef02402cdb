"""``python -m builder <command>``: argument parsing and error reporting only.

Each command lives in its own module, which exposes ``add_command(subparsers)``;
the parser it adds sets ``func`` to a callable taking the parsed args and
returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from builder.errors import FarmError

# One module per command; order is the order of ``--help``.
COMMAND_MODULES = [
    "builder.plan",
    "builder.render",
    "builder.base_image",
    "builder.build",
    "builder.index",
    "builder.resolve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m builder", description="mamba-ssm wheel farm")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FarmError as err:
        print(f"error: {err}", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
