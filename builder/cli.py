"""``python -m builder <command>``: argument parsing and error reporting only.

Each command lives in its own module, which exposes ``add_command(subparsers)``;
the parser it adds sets ``func`` to a callable taking the parsed args and
returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from builder.errors import FarmError, UsageError
from mamba_ssm._untrusted import Untrusted, guard_output, shown

# command name -> the module that implements it; order is the order of ``--help``.
COMMANDS = {
    "plan": "builder.planning.plan",
    "render": "builder.building.render",
    "base-image": "builder.building.base_image",
    "build": "builder.building.build",
    "verify": "builder.building.verify",
    "index": "builder.publishing.index",
    "resolve": "builder.publishing.resolve",
    "hip-compile": "builder.building.hip",
    "recipe": "builder.sourcing.prepare",
    "release": "builder.publishing.release",
    "drift": "builder.upkeep.drift",
    "cache": "builder.building.cache",
    "rehearse": "builder.upkeep.rehearse",
    "doctor-dist": "builder.publishing.doctor_dist",
    "evidence": "builder.publishing.tiers",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the named command's module is imported (a cold start stays fast)."""
    parser = argparse.ArgumentParser(prog="python -m builder", description="mamba-ssm wheel farm")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    first = next((a for a in (argv or []) if not a.startswith("-")), None)
    modules = [COMMANDS[first]] if first in COMMANDS else list(COMMANDS.values())
    for name in modules:
        importlib.import_module(name).add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    guard_output()  # whatever a command prints of outside data: controls and surrogates escaped, never obeyed
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FarmError as err:
        # the one place messages are printed: what they quote (an index's names, a manifest's fields, a cache
        # file) is shown with control and bidi characters escaped, so it cannot draw over the terminal
        print(f"error: {shown(err, 20_000, keep_newlines=True)}", file=sys.stderr)
        if err.hint:
            print(f"hint: {shown(err.hint, 5000, keep_newlines=True)}", file=sys.stderr)
        return err.exit_code
    except Untrusted as err:  # outside data a command did not wrap in its own error: still one line and a code
        print(f"error: {shown(err, 20_000, keep_newlines=True)}", file=sys.stderr)
        return UsageError.exit_code  # outside data that breaks a rule, where the command has no more precise code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
