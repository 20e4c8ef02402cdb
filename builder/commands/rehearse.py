"""``python -m builder rehearse``: run a workflow under act on this host (builder.upkeep.rehearse)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from builder.commands import summary
from builder.errors import UsageError
from builder.facts.paths import REPO
from builder.facts.untrusted import shown
from builder.upkeep.rehearse import DRY_RUN_PROFILE, WORKFLOWS, act_binary, rehearse


def add_command(subparsers) -> None:
    p = subparsers.add_parser("rehearse", help=summary("rehearse"))
    p.add_argument(
        "--work", type=Path, default=Path("build/rehearsal"), help="scratch folder (default build/rehearsal)"
    )
    p.add_argument(
        "--profile",
        default="",
        help=f"the profile input (default for a dry run: {DRY_RUN_PROFILE}; a tag release without one is a tag push: the release profile)",
    )
    p.add_argument("--only-ids", default="", help="a dry run's only-ids input")
    p.add_argument("--projects", default="", help="a dry run's projects input")
    p.add_argument("--release", action="store_true", help="push a v* tag instead (GitHub and PyPI stand-ins)")
    p.add_argument("--version", help="with --release: commit this __version__ in the scratch clone first")
    p.add_argument("--tag", help="with --release: the tag to push (default v<__version__>)")
    p.add_argument("--push", action="store_true", help="with --release and no --profile: the tag push itself")
    p.add_argument("--actions", type=Path, default=None, help="GitHub's actions at the pinned SHAs (default: $REHEARSAL_ACTIONS, else shared/actions beside the checkout)")
    p.add_argument("--port", type=int, default=None, help="the port INDEX_URL names (default: a free one)")
    p.add_argument("--workflow", default="release.yml", help="another workflow of .github/workflows (ci.yml)")
    p.add_argument("--job", help="run only this job of the workflow (for example: --workflow ci.yml --job lint)")
    p.set_defaults(func=run)


_REF_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,127}")  # a tag or version git and PEP 440 take: never an option
_WORKFLOW_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.ya?ml")


def check_args(args: argparse.Namespace) -> None:
    """What reaches git, act and the work folder, checked before anything is cloned, made or run."""
    for flag, value in (("--tag", args.tag), ("--version", args.version)):
        if value is not None and (not _REF_RE.fullmatch(value) or ".." in value):
            raise UsageError(f"{flag} {shown(repr(value), 100)}: not a tag or version (letters, digits, . _ + - /, "
                             "not starting with '-')")  # fmt: skip
    if args.port is not None and not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a TCP port (1-65535)")
    if not _WORKFLOW_RE.fullmatch(args.workflow) or not (REPO / WORKFLOWS / args.workflow).is_file():
        known = ", ".join(sorted(p.name for p in (REPO / WORKFLOWS).glob("*.y*ml")))
        raise UsageError(f"--workflow {shown(repr(args.workflow), 200)}: not a workflow of {WORKFLOWS} ({known})")
    if args.work.exists() and not args.work.is_dir():
        raise UsageError(f"--work {shown(args.work)}: exists and is not a folder")
    act_binary()


def run(args: argparse.Namespace) -> int:
    check_args(args)
    if (args.version or args.tag) and not args.release:
        raise UsageError("--version and --tag go with --release", hint="add --release, or drop them for a dry run")
    if args.release and not (args.profile or args.only_ids or args.projects or args.push):
        raise UsageError(
            "--release without --profile pushes the tag, which builds matrix.toml's whole release profile",
            hint="rehearse with a small profile (--release --profile ci-stable: a manual run on the tag, which "
            "publishes too), or add --push to mean the tag push",
        )
    result = rehearse(
        args.work, actions=args.actions, release=args.release, version=args.version, tag=args.tag,
        profile=args.profile, only_ids=args.only_ids, projects=args.projects,
        index_port=args.port, workflow=args.workflow, job=args.job, stream=sys.stdout,
    )  # fmt: skip
    print(f"\nrehearsal: {len(result.jobs)} job(s) in {result.seconds:.0f} s, act exit code {result.rc}")
    for job, end in result.jobs.items():
        print(f"  {end:9}  {job}")
    print(f"log: {result.log}")
    if args.workflow == "release.yml" and not args.release and result.rc == 0:
        site = result.artifact("index", args.work / "site")
        print(f"the dry run's site: {site} (its links name {result.index_url}/: serve it there)")
    elif args.release:
        print(f"what the stand-ins got: {result.records / 'calls.jsonl'}; releases: {args.work / 'github'}")
    return 0 if result.rc == 0 else 1
