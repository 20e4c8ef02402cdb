"""``python -m builder reproduce --rebuild ID WHEEL``: rebuild one spec and compare it, byte for byte, with a wheel.

Exit codes: 0 identical, 14 (NotReproducible) different, 15 (RebuildFailed) when nothing could be compared
(unknown id, failed build, unreadable wheel or wrong sha256, a dirty-tree wheel without --source).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from builder.errors import FarmError, NotReproducible, RebuildFailed, UsageError
from builder.facts.untrusted import Deadline, Untrusted, read_capped, sha256_name, shown
from builder.verifying.compare import MAX_UNPACKED_BYTES, compare

# A published wheel read from a URL: capped (CUDA wheels are hundreds of MB) and deadline-bound.
MAX_WHEEL_BYTES = 2 << 30
FETCH_SECONDS = 900.0


@dataclass(frozen=True)
class ReproduceRequest:
    """What ``python -m builder reproduce`` checks, typed: ``rebuild`` (a spec id) with ``wheel`` (a path or URL, with
    ``sha256`` for a URL), or ``one_per_kind`` (a folder); the rest as for a build (``source`` None: the wheel's
    recorded commit, else this checkout). ``keep``: a folder to keep the rebuild's dist folder in."""

    rebuild: str | None = None
    one_per_kind: Path | None = None
    wheel: str | None = None
    projects: list[str] | None = None
    sha256: str | None = None
    profile: str | None = None
    matrix: Path | None = None
    executor: str = "auto"
    wheelhouse: list[Path] | None = None
    source: Path | None = None
    keep: Path | None = None


# --------------------------------------------------------------------------- comparing two wheels


def _given_wheel(args: ReproduceRequest, scratch: Path) -> Path:
    """The wheel to check, as a local file whose sha256 is the one given (if given)."""
    from builder.sourcing.sources import Fetcher, is_web_url

    want = None
    if args.sha256 is not None:
        try:
            want = sha256_name(args.sha256.lower(), "--sha256")
        except Untrusted as err:
            raise UsageError(str(err)) from None
    if is_web_url(args.wheel):
        if want is None:
            raise UsageError("a wheel given by URL needs --sha256", hint="copy it from the index's #sha256= link")
        name = args.wheel.rsplit("/", 1)[-1].split("#")[0].split("?")[0]
        if not name.endswith(".whl"):
            raise UsageError(f"{shown(args.wheel, 200)}: the URL does not name a .whl file")
        dest = scratch / "given" / name
        dest.parent.mkdir(parents=True)
        try:
            deadline = Deadline(FETCH_SECONDS, shown(args.wheel, 200))
            with Fetcher.from_host().open(args.wheel) as resp:
                dest.write_bytes(read_capped(resp, MAX_WHEEL_BYTES, deadline, network=True))
        except (OSError, Untrusted, ValueError) as err:
            raise RebuildFailed(f"could not read {shown(args.wheel, 200)}: {shown(err, 300)}") from None
    else:
        dest = Path(args.wheel)
        if not dest.is_file() or not dest.name.endswith(".whl"):
            raise UsageError(f"{shown(args.wheel, 200)}: no such wheel file")
    if dest.stat().st_size > MAX_WHEEL_BYTES:
        raise UsageError(f"{shown(dest.name, 200)}: more than {MAX_WHEEL_BYTES >> 20} MiB, not a wheel the farm makes")
    got = hashlib.sha256(dest.read_bytes()).hexdigest()
    if want is not None and got != want:
        raise RebuildFailed(f"{dest.name}: its sha256 is {got}, not the {want} given; nothing compared")
    # Read before anything is rebuilt: a broken or inflating zip is refused in a second, not after a build.
    try:
        with zipfile.ZipFile(dest) as zf:
            unpacked = sum(i.file_size for i in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise UsageError(f"{shown(dest.name, 200)}: not a readable wheel (zip): {shown(err, 200)}") from None
    if unpacked > MAX_UNPACKED_BYTES:
        raise UsageError(f"{shown(dest.name, 200)}: its members unpack to more than {MAX_UNPACKED_BYTES >> 20} MiB")
    return dest


# Each is its own build path: CPU and CUDA compile different objects (nvcc's are the ones with temp names and
# recorded folders), the stable ABI another binding, a recipe someone else's setup.py.
KINDS = ("cpu", "cuda", "cpu-stable", "cuda-stable", "recipe")


def kind_of(sidecar: dict) -> str:
    """What kind of build made a wheel (its sidecar, the BuildSpec's JSON): the release checks one of each."""
    if sidecar.get("source", "checkout") != "checkout":
        return "recipe"
    base = "cuda" if str(sidecar.get("accelerator", "")).startswith("cu") else "cpu"
    return f"{base}-stable" if sidecar.get("stable") else base


def one_per_kind(folder: Path, machine: str) -> list[tuple[str, Path, str]]:
    """[(spec id, wheel, its --projects name)]: the first wheel (by name) of each kind in FOLDER (searched recursively) that this
    MACHINE builds natively; a wheel without a readable sidecar is skipped (the release refuses those)."""
    from builder.facts.compat import machine_of

    picked: dict[str, tuple[str, Path, str]] = {}
    for wheel in sorted(Path(folder).rglob("*.whl"), key=lambda p: p.name):
        try:
            side = json.loads(Path(f"{wheel}.spec.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(side, dict) or not isinstance(side.get("id"), str):
            continue
        if machine_of(str(side.get("platform", ""))) != machine:
            continue
        kind = kind_of(side)
        picked.setdefault(kind, (side["id"], wheel, str(side.get("project")) if kind == "recipe" else "checkout"))
    return [picked[k] for k in KINDS if k in picked]


def _profile_of(spec_id: str, matrix: Path | None, profile: str | None, projects=None) -> str:
    """The profile whose plan has SPEC_ID (the given one, else the default plan's, else each profile's)."""
    from builder.facts import compat
    from builder.planning.matrix import load_matrix
    from builder.planning.plan import DEFAULT_MATRIX, load_plan

    tried = [profile] if profile else [None, *load_matrix(Path(matrix or DEFAULT_MATRIX), compat.load()).profiles]
    for p in tried:
        try:
            if any(b.id == spec_id for b in load_plan(matrix_file=matrix, profile=p, projects=projects).builds):
                return p or ""
        except FarmError:
            continue
    raise RebuildFailed(
        f"no plan has a build {shown(spec_id, 200)}" + (f" (profile {profile})" if profile else ""),
        hint="the id is the wheel's .spec.json `id`; `python -m builder plan --profile P` lists them",
    )


def _rebuild(args: ReproduceRequest, spec_id: str, profile: str, dist: Path, projects=None) -> Path:
    from builder.run import build

    request = build.BuildRequest(
        only=[spec_id], dist=dist, no_smoke=True, executor=args.executor, profile=profile or None,
        projects=list(projects) if projects else None, matrix=args.matrix, source=args.source or build.REPO,
        wheelhouse=list(args.wheelhouse) if args.wheelhouse else None,
    )  # fmt: skip
    try:
        build.run_build(request)
    except FarmError as err:
        raise RebuildFailed(f"the rebuild of {spec_id} failed: {err}", hint=err.hint) from None
    made = sorted((dist / "wheels").glob("*.whl"))
    if len(made) != 1:
        raise RebuildFailed(f"the rebuild of {spec_id} made {len(made)} wheels, not one")
    return made[0]


def recorded_source(given: Path, scratch: Path) -> Path | None:
    """A clean checkout of the commit GIVEN's provenance names (a shared clone of this repository: no copy of
    its objects, nothing written into it), so the rebuild uses the wheel's recorded source, not this tree's
    HEAD or its uncommitted edits; None when the wheel records no commit (its own tree is rebuilt then)."""
    import subprocess

    from builder.facts.paths import REPO
    from builder.verifying import provenance

    rec = provenance.read_wheel(given) or {}
    commit = (rec.get("source") or {}).get("commit") if isinstance(rec.get("source"), dict) else None
    if not isinstance(commit, str) or len(commit) != 40 or not all(c in "0123456789abcdef" for c in commit):
        return None
    tree = scratch / f"src-{commit[:12]}"
    if not tree.exists():
        for cmd in (
            ["clone", "-q", "--shared", "--no-checkout", str(REPO), str(tree)],
            ["-C", str(tree), "checkout", "-q", "--detach", commit],
        ):
            proc = subprocess.run(["git", *cmd], capture_output=True, text=True, check=False, timeout=600)
            if proc.returncode:
                raise RebuildFailed(
                    f"{given.name} was built from commit {commit}, which this checkout cannot give: {shown(proc.stderr.strip(), 300)}",
                    hint="git fetch the commit (or pass --source a tree of it)",
                )
    return tree


def built_dirty(given: Path, source: Path | None) -> None:
    """A wheel built from a tree with uncommitted changes (provenance ``dirty``) has no recorded source to
    rebuild: its commit lacks the changes. Refused (exit 15) rather than compared, since a difference would
    blame the build for what the edits did; with --source (the tree it was built from, on the caller's word)
    it is compared, and the warning says what that proves."""
    from builder.verifying import provenance

    src = (provenance.read_wheel(given) or {}).get("source")
    if not (isinstance(src, dict) and src.get("dirty") is True):
        return
    commit = shown(str(src.get("commit") or "?")[:12], 20)
    if source is None:
        raise RebuildFailed(
            f"{given.name} was built from commit {commit} with uncommitted changes (its provenance says dirty): "
            "no commit holds that source, so a rebuild cannot promise the same bytes; nothing compared",
            hint="rebuild and publish from a clean checkout, or pass --source the very tree it was built from",
        )
    print(
        f"warning: {given.name} was built from commit {commit} with uncommitted changes; it is compared with a "
        f"rebuild of --source {shown(source, 200)} as given, which only you can say is that tree",
        file=sys.stderr,
        flush=True,
    )


def check(
    args: ReproduceRequest, spec_id: str, given: Path, dist: Path, projects=None, scratch: Path | None = None
) -> None:
    """Rebuild SPEC_ID into DIST and compare with GIVEN: prints ``identical`` or raises NotReproducible."""
    projects = projects or args.projects
    built_dirty(given, args.source)
    if args.source is None and scratch is not None:
        source = recorded_source(given, scratch)
        if source is not None:  # that commit's matrix too: its plan (ids, inputs hash) is the wheel's
            matrix = args.matrix or (source / "matrix.toml" if (source / "matrix.toml").is_file() else None)
            args = replace(args, source=source, matrix=matrix)
    profile = _profile_of(spec_id, args.matrix, args.profile, projects)
    rebuilt = _rebuild(args, spec_id, profile, dist, projects)
    if rebuilt.name != given.name:
        raise NotReproducible(f"the rebuild of {spec_id} is {rebuilt.name}, not {given.name}")
    diffs = compare(given, rebuilt)
    if diffs:
        raise NotReproducible(
            f"{given.name}: the rebuild of {spec_id} differs in {len(diffs)} place(s):\n"
            + "\n".join(d.line() for d in diffs),
            hint="a difference in an extension module's bytes is the build's; in zip entries, the packaging's",
        )
    sha = hashlib.sha256(given.read_bytes()).hexdigest()
    print(f"identical: {given.name} (sha256 {sha}) is what {spec_id} rebuilds to", flush=True)


def run_reproduce(args: ReproduceRequest) -> int:
    """Rebuild and compare (``rebuild`` with ``wheel``, or ``one_per_kind``): 0 when identical, else an error."""
    scratch = Path(tempfile.mkdtemp(prefix="mamba-farm-verify-"))
    try:
        if args.rebuild is not None:
            if args.wheel is None:
                raise UsageError("--rebuild ID needs the WHEEL to compare with")
            given = _given_wheel(args, scratch)
            check(args, args.rebuild, given, args.keep.absolute() if args.keep else scratch / "dist", scratch=scratch)
            return 0
        if args.wheel is not None or args.sha256 is not None:
            raise UsageError("--one-per-kind DIR takes no WHEEL or --sha256: the wheels are DIR's")
        return _one_per_kind(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _one_per_kind(args: ReproduceRequest, scratch: Path) -> int:
    """The release's check: every picked wheel rebuilt and compared, each reported, then one verdict."""
    from builder.facts.hostenv import host_machine

    if not args.one_per_kind.is_dir():
        raise UsageError(f"--one-per-kind {shown(args.one_per_kind, 200)}: no such folder")
    picks = one_per_kind(args.one_per_kind, host_machine())
    if not picks:
        raise RebuildFailed(f"{shown(args.one_per_kind, 200)}: no wheel with a sidecar for this machine to rebuild")
    failures: list[FarmError] = []
    root = args.keep.absolute() if args.keep else scratch
    kinds = {}
    for spec_id, wheel, project in picks:
        kinds[spec_id] = kind_of(json.loads(Path(f"{wheel}.spec.json").read_text()))
        try:
            check(args, spec_id, wheel, root / f"dist-{spec_id}", [project], scratch=scratch)
        except FarmError as err:
            print(f"error: {err}", file=sys.stderr, flush=True)
            failures.append(err)
    if not failures:
        named = ", ".join(f"{k} ({i})" for i, k in kinds.items())
        print(f"reproduce: {len(picks)} of {len(picks)} rebuilt identical, one per kind: {named}", flush=True)
        return 0
    # A difference outranks a rebuild that could not run: the release must say which wheel differs.
    worst = next((e for e in failures if isinstance(e, NotReproducible)), failures[0])
    raise type(worst)(f"{len(failures)} of {len(picks)} rebuild(s) did not match (each is listed above)")
