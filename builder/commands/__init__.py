"""The commands of ``python -m builder``: one module per command, each holding its argument parsing
(``add_command(subparsers)``) and ``run(args)``, which reads the parsed arguments, calls the domain
modules with typed values and prints.

This package's ``__init__`` imports nothing of the domain: ``python -m builder --help`` lists the
commands from :data:`COMMANDS` (name, module, one-line summary) without importing any of them.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, TypeVar

T = TypeVar("T")


class Command(NamedTuple):
    module: str  # the module under builder/commands/ with add_command(subparsers) and run(args)
    summary: str  # the one line ``python -m builder --help`` shows for it
    aliases: tuple[str, ...] = ()  # other names that run it (a renamed command's old name, for one release)


# command name -> its module and summary; order is the order of ``--help``.
COMMANDS: dict[str, Command] = {
    "plan": Command("builder.commands.plan", "show what the farm would build (from matrix.toml)"),
    "render": Command("builder.commands.render", "write the Dockerfile of every toolchain image"),
    "base-image": Command(
        "builder.commands.base_image", "make a local Debian base image (debootstrap + docker import)"
    ),
    "build": Command("builder.commands.build", "build, verify and index every wheel of the plan into --dist"),
    "reproduce": Command(
        "builder.commands.reproduce",
        "rebuild one spec from its recorded inputs and compare it byte for byte with a wheel",
        aliases=("verify",),
    ),
    "index": Command(
        "builder.commands.index",
        "index a folder of wheels: per-variant find-links pages, PEP 503/691 simple pages, coverage page",
    ),
    "installs": Command(
        "builder.commands.installs",
        "resolve each cell's install beside its torch (pip and uv, binary only, at its glibc floor); record it",
    ),
    "resolve": Command("builder.commands.resolve", "print the variant, wheel and pip command for an environment"),
    "hip-compile": Command(
        "builder.commands.hip",
        "hipify the kernels and compile them with a real hipcc for AMD GPU targets (Docker)",
    ),
    "recipe": Command(
        "builder.commands.recipe",
        "third-party recipes: check a profile's cells before any compile, explain a cell's patches, fetch, prepare",
    ),
    "release": Command(
        "builder.commands.release", "the release's publish steps: which builds made a wheel; one folder per index"
    ),
    "drift": Command("builder.commands.drift", "compare the torch data and recipe pins with what the index publishes"),
    "cache": Command("builder.commands.cache", "show or prune the smoke-test torch venvs (size budget, LRU)"),
    "rehearse": Command(
        "builder.commands.rehearse",
        "run .github/workflows/release.yml under act on this host (a dry run, or a tag release)",
    ),
    "doctor-dist": Command(
        "builder.commands.doctor_dist", "build the standalone doctor wheel (mamba-doctor) and its index page"
    ),
    "evidence": Command(
        "builder.commands.evidence", "the evidence ledger: harvest records of real runs; each cell's tier"
    ),
}


def named(name: str | None) -> str | None:
    """The command NAME runs (itself, or the command it is an alias of); None for no command."""
    return next((c for c, command in COMMANDS.items() if name == c or name in command.aliases), None)


def summary(name: str) -> str:
    """The --help line of command NAME (its module's add_parser passes it as help=)."""
    return COMMANDS[name].summary


def typed(options: type[T], args) -> T:
    """The parsed arguments as a domain's typed options (a dataclass): each field from the flag of its name."""
    return options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(options)})
