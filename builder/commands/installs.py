"""``python -m builder installs``: does each cell's wheel install beside its torch? (builder.publishing.installs)"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError
from builder.facts import hostenv
from builder.facts.installs import RECORD
from builder.facts.untrusted import shown


def add_command(subparsers) -> None:
    p = subparsers.add_parser("installs", help=summary("installs"))
    p.add_argument("--profile", default="release", help="the plan's profile (default release)")
    p.add_argument("--matrix", type=Path, help="matrix.toml to plan from (default the checkout's)")
    p.add_argument("--snapshot", type=Path, default=hostenv.CACHE_ROOT / "index-snapshot",
                   help="the index snapshot the resolvers read (default <farm cache>/index-snapshot)")  # fmt: skip
    p.add_argument("--record", action="store_true",
                   help="read what the snapshot lacks from the package index (the host's pip settings)")  # fmt: skip
    p.add_argument("--cache", type=Path, default=hostenv.CACHE_ROOT / "installs",
                   help="where resolutions are cached (default <farm cache>/installs)")  # fmt: skip
    p.add_argument("--refresh", action="store_true", help="with --record: read every listing anew")
    p.add_argument(
        "--record-file", type=Path, default=RECORD, help="the record to update (default builder/data/installs.json)"
    )
    p.add_argument("--jobs", type=int, default=6, help="resolutions at once (default 6: they wait on the network)")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="resolve anew (no cache) and write what the resolutions read into DIR, a snapshot of its own")  # fmt: skip
    p.add_argument("--locks", type=Path, metavar="DIR",
                   help="write each installing cell's resolution as a PEP 751 lock (pylock.<cell>.toml) into DIR")  # fmt: skip
    p.add_argument("--newest", action="store_true",
                   help="each cell's newest release that installs: an older release is resolved only where every "
                   "newer one does not install (the rest stay unresolved, planned)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="resolve and report; write no record")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.facts import installs as record
    from builder.planning.plan import load_plan
    from builder.publishing import installs
    from builder.sourcing.pypi import SimpleIndex
    from builder.sourcing.snapshot import Snapshot, export, export_refusal
    from builder.sourcing.sources import SourceCache

    t0 = time.monotonic()
    # what would be written where it cannot go stops the run before anything resolves or is written: an export
    # into the snapshot it reads (each listing cut to one run's reads), a file given as a folder
    if args.export is not None and (why := export_refusal(args.snapshot, args.export)):
        raise UsageError(f"--export {why}", hint="export into a new folder of its own")
    if args.locks is not None and os.path.lexists(args.locks) and not os.path.isdir(args.locks):
        raise UsageError(
            f"--locks {shown(args.locks)} is not a folder", hint="name a folder for the pylock.*.toml files"
        )
    record.load(args.record_file)  # a record that cannot be read stops the run before anything resolves
    plan = load_plan(args.matrix, profile=args.profile, installs=False)
    queries, same_as = installs.same_requirements(installs.plan_queries(plan, SourceCache()))
    upstream = None
    if args.record:
        upstream = SimpleIndex()
        upstream.max_requests = 50_000  # a release's closure: listings and METADATA once each, cached by sha256
    snapshot = Snapshot(args.snapshot, upstream, refresh=args.refresh)
    # an upstream line's releases (this checkout's line shares mamba-ssm's name: its version is never offered)
    releases_of = {(r.name, rel.version) for r in plan.recipes.values() for rel in r.releases}
    releases_of |= {(r.name, r.source.version) for r in plan.recipes.values()}
    releases_of -= {tuple(line.split(" ", 1)) for line in same_as}  # answered as the release they are the same as

    def resolve(batch: list) -> installs.Run:
        return installs.resolve_all(batch, snapshot, jobs=args.jobs, progress=True, use_cache=args.export is None,
                                    cache=args.cache)  # fmt: skip

    if args.newest:  # each cell's newest release that installs: older releases only where the newer do not
        run_ = installs.newest_first(queries, resolve, releases_of)
        queries = {k: v for k, v in queries.items() if k in run_.outcomes}
    else:
        run_ = resolve([q for q, _ids in queries.values()])
    done = run_.outcomes
    runs = sum(1 for o in done.values() if not o.cached)
    if args.export is not None:  # what these resolutions read, as a snapshot of its own (a test's recorded metadata)
        n = export(snapshot, args.export, run_.pages, run_.metadata)
        (args.export / "queries.json").write_text(json.dumps(
            [{**dataclasses.asdict(q), "outcome": done[k].as_record()} for k, (q, _i) in sorted(queries.items())],
            indent=1) + "\n")  # fmt: skip
        print(f"installs: exported {len(run_.pages)} listings and {len(run_.metadata)} METADATA ({n >> 10} KiB) "
              f"into {args.export}")  # fmt: skip
    if args.locks is not None:
        n = installs.write_locks(args.locks, [q for q, _i in queries.values()], done, snapshot)
        print(f"installs: wrote {n} PEP 751 lock(s) into {args.locks}")
    ok = {(q.project, q.version, q.torch, q.python, q.platform): done[k].installs for k, (q, _) in queries.items()}
    cells = {}
    for key, (q, _ids) in queries.items():
        rec = done[key].as_record()
        if done[key].installs is False:
            rec["instead"] = installs.instead((q.project, q.version, q.torch, q.python, q.platform), ok, releases_of)
        cells[key] = rec
    by_line: Counter = Counter()
    for key, (q, ids) in queries.items():
        by_line[(q.project, q.version, done[key].installs)] += len(ids)
    seconds = time.monotonic() - t0
    for project, version in sorted({(p, v) for p, v, _ in by_line}):
        yes, no, unknown = (by_line[(project, version, k)] for k in (True, False, None))
        more = f"; {unknown} not resolvable here (no torch of theirs on PyPI to stand in)" if unknown else ""
        print(f"{project} {version}: {yes} of {yes + no + unknown} builds install beside their torch; "
              f"{no} left out{more}")  # fmt: skip
    print(f"installs: {len(queries)} resolutions ({runs} resolved, the rest cached) in {seconds:.1f} s")
    if not args.dry_run:
        installs.update_record(args.record_file, cells, installs.today(), same_as)
        more = f" ({len(same_as)} release(s) recorded as the same as another: same requirements)" if same_as else ""
        print(f"installs: recorded {len(cells)} cell(s) into {args.record_file}{more}")
    return 0
