"""``python -m builder cache``: show or prune the smoke-test torch venvs (builder.environments.store)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from builder.commands import summary
from builder.environments import store
from builder.environments.store import budget, entries, evict, human, linked, parse_size, real_bytes, smoke_root
from builder.facts.untrusted import shown


def add_command(subparsers) -> None:
    p = subparsers.add_parser("cache", help=summary("cache"),
                              description=store.__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("action", nargs="?", choices=("show", "prune"), default="show", help="show (default) or prune")
    p.add_argument("--budget", help="prune to this size (default: MAMBA_FARM_CACHE_BUDGET or 40G)")
    p.add_argument("--all", action="store_true", help="prune: remove every torch venv")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    limit = parse_size(args.budget) if args.budget else budget()
    if args.action == "prune":
        removed = evict(0 if args.all else limit)
        print(f"cache: removed {len(removed)} torch venv(s)")
    live = entries(warn=lambda m: print(f"warning: {m}", file=sys.stderr))
    total = real_bytes([e.path for e in live])
    print(f"{'last used':<17} {'files':>9}  torch venv")
    for e in reversed(live):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        print(
            f"{when:<17} {human(e.apparent):>9}  {shown(e.path.relative_to(smoke_root()))}  ({shown(e.requirement, 200)})"
        )
    for p in linked():
        print(
            f"{'linked':<17} {'-':>9}  {shown(p.relative_to(smoke_root()))} -> {shown(os.readlink(p))}  (not the cache's: never pruned)"
        )
    print(f"{len(live)} torch venv(s), {human(total)} on disk (shared files once), budget {human(limit)} "
          f"under {smoke_root()}")  # fmt: skip
    return 0
