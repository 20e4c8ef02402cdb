"""``python -m builder evidence``: harvest records of real runs; each cell's tier (builder.publishing.tiers)."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError
from builder.publishing import tiers
from builder.publishing.tiers import cell_detail, cell_tiers, counts, harvest, harvest_hip, load_records
from builder.verifying import evidence


def add_command(subparsers) -> None:
    p = subparsers.add_parser("evidence", help=summary("evidence"))
    sub = p.add_subparsers(dest="evidence_command", required=True)
    h = sub.add_parser("harvest", help="read each <wheel>.evidence.json under --wheels into the ledger")
    h.add_argument("--wheels", type=Path, help="a dist/wheels folder of a real run (searched recursively)")
    h.add_argument("--hip", type=Path, metavar="PATH", help="a record `hip-compile --evidence PATH` wrote")
    h.add_argument("--ledger", type=Path, default=tiers.LEDGER, help="the ledger (default builder/data/evidence.json)")
    t = sub.add_parser("tiers", help="how many cells of a plan have each tier, per product line")
    t.add_argument("--profile", default="release", help="the plan's profile (default release)")
    t.add_argument("--ledger", type=Path, default=tiers.LEDGER, help="the ledger (default builder/data/evidence.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.evidence_command == "harvest":
        if args.wheels is None and args.hip is None:
            raise UsageError("evidence harvest: nothing to read", hint="give --wheels DIR, --hip PATH or both")
        if args.wheels is not None:
            read, total = harvest(args.wheels, args.ledger)
            print(f"evidence: {read} record(s) harvested from {args.wheels}; the ledger {args.ledger} holds {total}")
        if args.hip is not None:
            rec = harvest_hip(args.hip, args.ledger)
            print(f"evidence: HIP compile of {', '.join(rec['archs'])} (HIP {rec['hip_version']}, linked: false) "
                  f"harvested from {args.hip} into {args.ledger}")  # fmt: skip
        return 0
    from builder.planning.plan import load_plan

    plan = load_plan(profile=args.profile)
    records, hip = load_records(args.ledger)
    found = cell_tiers(plan, records)
    resolve = tiers.resolve_counts(plan)
    for line, c in counts(plan, records).items():
        ok, left, unresolved = resolve.get(line, (0, 0, 0))
        never = f", {unresolved} never resolved" if unresolved else ""
        print(f"{line}: {sum(c.values())} cells: " + ", ".join(f"{c[t]} {t}" for t in evidence.TIERS)
              + f"; {ok} resolve beside their torch{never}; {left} left out, they do not install")  # fmt: skip
        said = Counter(cell_detail(b, t, r, hip) for _c, b, t, r in found
                       if ("upstream" if b.from_recipe else "checkout") == line and t == "planned")  # fmt: skip
        for text, n in sorted(said.items()):
            if text != "planned":
                print(f"  {n} of the planned: {text}")
    return 0
