"""``python -m builder release``: the release's publish steps (builder.publishing.release, cost, gpugate)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError, VerificationError
from builder.publishing import cost, gpugate
from builder.publishing.release import LINES, collect, planned, split, variant_files


def add_command(subparsers) -> None:
    p = subparsers.add_parser("release", help=summary("release"))
    sub = p.add_subparsers(dest="release_command", metavar="ACTION", required=True)
    q = sub.add_parser("collect", help="print '<build id> <job id> built|failed' for every build the matrix plans")
    q.add_argument("--matrix", type=Path, required=True, help="the plan's GitHub matrix (plan --format github)")
    q.add_argument("--wheels", type=Path, required=True, help="the wheels the jobs made, with their sidecars")
    q = sub.add_parser("split", help="put each wheel and its sidecar in OUT/checkout or OUT/upstream, by its source")
    q.add_argument(
        "--wheels", type=Path, required=True, help="wheels with their .spec.json sidecars (searched recursively)"
    )
    q.add_argument("--out", type=Path, required=True, help="a new folder: OUT/<line>/ for each line with wheels")
    q = sub.add_parser(
        "variant-files", help="print the variant root's files an index made from --wheels (a release's assets)"
    )
    q.add_argument("--index", type=Path, required=True, help="the index (`builder index --out`)")
    q.add_argument("--wheels", type=Path, required=True, help="this run's wheels (indexed into --index)")
    q = sub.add_parser(
        "gate",
        help="the GPU gate: install each CUDA wheel from the staged index and run its check (builder.publishing.gpugate)",
    )
    q.add_argument("--lines", type=Path, required=True, help="`release split --out`'s folder (checkout/, upstream/)")
    q.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the checks' dry run")
    q.add_argument("--out", type=Path, required=True, help="a work folder: the staged index, venvs, results/")
    q.add_argument("--summary", type=Path, help="append the results table here ($GITHUB_STEP_SUMMARY)")
    q = sub.add_parser(
        "cost", help="what the builds cost: one build job's (--job), or the release's from every job's (--jobs)"
    )
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", help="this build job's id: its builds' records in --logs into LOGS/job-cost.json")
    which.add_argument("--jobs", type=Path, help="the downloaded log artifacts: add up every job-cost.json under it")
    q.add_argument("--logs", type=Path, default=Path("dist/logs"), help="with --job: the farm's logs (dist/logs)")
    q.add_argument("--wall", type=float, help="with --job: the farm step's wall time, in seconds")
    q.add_argument("--summary", type=Path, help="append the table here ($GITHUB_STEP_SUMMARY)")
    p.set_defaults(func=run)


def _cost(args: argparse.Namespace) -> int:
    if args.job is not None:
        if args.wall is None or not 0 <= args.wall <= cost.MAX_SECONDS:
            raise UsageError(f"--wall {args.wall}: not a number of seconds", hint="pass the farm step's wall time")
        args.logs.mkdir(parents=True, exist_ok=True)
        record = cost.job_record(args.job, args.wall, args.logs)
        (args.logs / cost.JOB_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        text = cost.job_markdown(record)
    else:
        if not args.jobs.is_dir():
            raise UsageError(f"--jobs {args.jobs}: no such folder", hint="name the folder the log artifacts went to")
        jobs = cost.read_jobs(args.jobs)
        if not jobs:
            raise UsageError(f"--jobs {args.jobs}: no {cost.JOB_RECORD} in it",
                             hint="each build job writes one into its log artifact (release cost --job)")  # fmt: skip
        text = cost.release_markdown(jobs)
    print(text, end="")
    if args.summary is not None:
        with open(args.summary, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.release_command == "gate":
        return _gate(args)
    if args.release_command == "cost":
        return _cost(args)
    if not args.wheels.is_dir():
        raise UsageError(f"--wheels {args.wheels}: no such folder", hint="name the folder the wheels were put in")
    if args.release_command == "collect":
        for build_id, job, built in collect(planned(args.matrix), args.wheels):
            print(build_id, job, "built" if built else "failed")
        return 0
    if args.release_command == "variant-files":
        for path in variant_files(args.index, args.wheels):
            print(path)
        return 0
    placed = split(args.wheels, args.out)
    for line in (line for line in LINES if line in placed):
        print(f"{len(placed[line])} wheel(s) of {LINES[line]} -> {args.out / line}")
    return 0


def _gate(args: argparse.Namespace) -> int:
    outcomes = gpugate.gate(args.lines, args.device, args.out)
    (args.out / "results").mkdir(parents=True, exist_ok=True)
    (args.out / "results" / "gate.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n")
    if args.summary:
        with open(args.summary, "a", encoding="utf-8") as f:
            f.write(gpugate.summary(outcomes, args.device))
    bad = [o for o in outcomes if not o.ok]
    for o in bad:
        print(o.detail, file=sys.stderr)
        # a GitHub annotation (elsewhere a plain line): the run's page names the wheel
        print(f"::error::GPU gate: {o.wheel} failed its {o.check} (installed from {o.variant}/)")
    if bad:
        raise VerificationError(
            f"GPU gate: {len(bad)} of {len(outcomes)} CUDA wheel(s) failed: {', '.join(o.wheel for o in bad)}",
            hint=f"their logs: {args.out / 'results'}/<wheel>/log.txt; nothing is published",
        )
    print(f"gate: {len(outcomes)} CUDA wheel(s) passed on {args.device}")
    return 0
