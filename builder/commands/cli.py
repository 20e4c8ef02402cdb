"""``python -m builder <command>``: argument parsing and error reporting only.

Each command lives in its own module beside this one (the table in this package, ``COMMANDS``, names it
and its one-line summary), which exposes ``add_command(subparsers)``; the parser it adds sets ``func``
to a callable taking the parsed args and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from builder.commands import COMMANDS, named
from builder.errors import FarmError, UsageError
from mamba_ssm.guard import Untrusted, guard_output, shown  # the package's guard: --help imports no stage


def build_parser(argv: list[str] | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser; only the named command's module is imported (a cold start stays fast). Without a
    command (``--help``, a typo) each command is listed from the table's summary, no module imported;
    EVERY: each command's module adds its full parser (the CLI reference is generated from that)."""
    parser = argparse.ArgumentParser(prog="python -m builder", description="mamba-ssm wheel farm")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    first = named(next((a for a in (argv or []) if not a.startswith("-")), None))
    for name, command in COMMANDS.items():
        if every or name == first:
            importlib.import_module(command.module).add_command(sub)
        elif first is None:
            sub.add_parser(name, help=command.summary, aliases=command.aliases)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    guard_output()  # whatever a command prints of outside data: controls and surrogates escaped, never obeyed
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command != named(args.command):
        print(f"note: `{args.command}` is now `{named(args.command)}`; the old name goes after the next release",
              file=sys.stderr)  # fmt: skip
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
    except MemoryError:  # a read no cap bounded: said in one line, never a traceback
        print("error: out of memory: an input was larger than this machine can hold", file=sys.stderr)
        return FarmError.exit_code
    except OSError as err:  # a file or folder the command was given that the system refuses
        print(f"error: {shown(err, 2000)}", file=sys.stderr)
        return FarmError.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
