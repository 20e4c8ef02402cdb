"""``python -m builder index``: the command line of builder.publishing.index."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from builder.commands import summary
from builder.publishing import index
from builder.publishing.index.generation import build_index


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "index",
        help=summary("index"),
        description=index.__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--wheels",
        type=Path,
        required=True,
        help="folder of verified wheels of the farm's projects, with their .spec.json sidecars (searched recursively)",
    )
    p.add_argument(
        "--out", type=Path, required=True, help="index to create or extend (a symlink to the live generation)"
    )
    p.add_argument("--base-url", help="absolute URL the index is served from (default: relative links)")
    p.add_argument(
        "--files-url",
        metavar="URL",
        help="the wheels under --wheels are downloaded from URL/<name> (e.g. a GitHub release's "
        "https://github.com/OWNER/REPO/releases/download/TAG), not from the index's files/: "
        "GitHub Pages sites stop at 1 GB. Default: files/ next to the pages",
    )
    p.add_argument(
        "--verify", action="store_true", help="re-hash every published file, not only those whose stat moved"
    )
    p.add_argument(
        "--replace",
        nargs="+",
        action="extend",
        default=None,
        metavar="WHEEL",
        help="supersede these published wheel filenames with the different files of the same name in --wheels "
        "(a local rebuild; never on an index others install from). Default: such files are refused",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    replace = {os.path.basename(n) for n in args.replace or ()}
    res = build_index(
        args.wheels, args.out, base_url=args.base_url, verify=args.verify, replace=replace, files_url=args.files_url
    )
    print(
        f"index: {res.out} -> {res.generation.name}: {res.files} wheels in {res.variants} variants, "
        f"{len(res.added)} added, {len(res.replaced)} replaced ({time.perf_counter() - t0:.2f} s)"
    )
    for fn in res.added:
        print(f"  + {fn}")
    for fn in res.replaced:
        print(f"  ~ {fn} (replaced: the old bytes left the store)")
    return 0
