"""``python -m builder build``: plan -> images -> builds -> verify -> dist/wheels -> dist/index.

``--dist`` holds ``wheels/`` (verified wheels, each with its ``.spec.json`` and ``.evidence.json``),
``logs/`` (``<id>.log``, ``<id>.cost.json``), ``index/``, the resume ledger ``.ledger.json`` and the
scratch ``.work/`` (never published).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from builder.building.executors import BuildOptions
from builder.building.executors.choose import select
from builder.errors import BuildFailed, FarmError, UsageError
from builder.facts import timings
from builder.facts.paths import REPO
from builder.facts.untrusted import neutral, unguarded
from builder.publishing import cost
from builder.run import schedule
from builder.sourcing import reproducible
from builder.verifying import evidence, provenance

@dataclass(frozen=True)
class BuildRequest:
    """One build run: which builds of which plan, how, and where to (``python -m builder build``'s flags, typed).
    ``wheelhouse`` None: the host's default wheelhouses; ``ca_bundle`` None: the host's pip cert; ``jobs`` and
    ``compile_jobs`` None: from cores and memory."""

    matrix: Path | None = None
    profile: str | None = None
    only: list[str] | None = None
    projects: list[str] | None = None
    executor: str = "auto"
    jobs: int | None = None
    compile_jobs: int | None = None
    wheelhouse: list[Path] | None = None
    dist: Path = Path("dist")
    ca_bundle: Path | None = None
    timeout: float = 5400
    retries: int = 1
    source: Path = REPO
    no_smoke: bool = False


def _validate(request: BuildRequest) -> None:
    if request.jobs is not None and request.jobs < 1:
        raise UsageError(f"--jobs {request.jobs}: must be at least 1")
    if request.compile_jobs is not None and request.compile_jobs < 1:
        raise UsageError(f"--compile-jobs {request.compile_jobs}: must be at least 1")
    if request.timeout <= 0:
        raise UsageError(f"--timeout {request.timeout}: must be positive")
    if request.retries < 0:
        raise UsageError(f"--retries {request.retries}: must be 0 or more")
    for wh in request.wheelhouse or []:
        if not wh.is_dir():
            raise UsageError(f"--wheelhouse {wh}: no such directory", hint="pass a folder of .whl files")
    if not (request.source / "setup.py").is_file():
        raise UsageError(f"--source {request.source}: no setup.py there", hint="point --source at the mamba-ssm checkout")


def run_build(request: BuildRequest) -> int:
    """Plan, build, verify and index REQUEST's builds into its dist folder: 0, or 130 when interrupted
    (BuildFailed, exit code by cause, when a build or the index failed)."""
    from builder.planning.plan import load_plan

    _validate(request)
    console = Console(file=unguarded(sys.stderr), width=None if sys.stderr.isatty() else 200)  # its own styles
    log = lambda msg: console.print(neutral(str(msg)), highlight=False, markup=False, soft_wrap=True)  # a line stays one line
    t0 = time.monotonic()
    plan = load_plan(matrix_file=request.matrix, profile=request.profile, only=request.only, projects=request.projects)
    specs = list(plan.builds)
    if not specs:
        raise UsageError("the plan selects no builds", hint="check --profile / --only against `python -m builder plan`")

    dist = Dist.make(request.dist)
    ledger = schedule.Ledger(dist.ledger)
    todo = [s for s in specs if ledger.done(s, dist.wheels) is None]
    previous = previous_entries(ledger, todo)  # before this run's record() overwrites them
    jobs, options = _options(request, todo or specs, dist, log)
    log(
        f"plan: {len(specs)} build(s), {len(specs) - len(todo)} up to date, {len(todo)} to build, {jobs} at once"
        f" ({options.max_jobs} compiler job(s) each)"
    )
    if not request.no_smoke and (warning := _cache_preflight(todo)):
        log(warning)

    outcomes, refused = _run_builds(request, plan, specs, todo, ledger, dist, jobs, options, console, log)
    if outcomes is None:
        return 130
    schedule.summary(outcomes, console)
    index_error = _index(dist.wheels, dist.index, log, replacements(outcomes, previous), tuple(plan.recipes))
    _evidence_lines(outcomes, log, indexed=index_error is None)
    log(f"done in {time.monotonic() - t0:.1f}s: wheels in {dist.wheels}, logs in {dist.logs}, index in {dist.index}")
    failed = [o for o in outcomes if o.state == "failed"]
    if failed:
        raise _failed(failed, len(outcomes), refused, index_error)
    if index_error:
        raise BuildFailed(f"the wheels were built, but the index failed: {index_error}", hint=index_error.hint)
    return 0


@dataclass(frozen=True)
class Dist:
    """A run's ``--dist`` folder: ``wheels/``, ``logs/``, ``index/``, the resume ledger and the scratch ``.work/``."""

    root: Path

    @classmethod
    def make(cls, root: Path) -> Dist:
        """The folders under ROOT made, and what a killed run left in them cleared."""
        dist = cls(root.absolute())
        for d in (dist.wheels, dist.logs, dist.work):
            d.mkdir(parents=True, exist_ok=True)
        _clear_stale(dist.work, dist.wheels)
        return dist

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def work(self) -> Path:
        return self.root / ".work"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def ledger(self) -> Path:
        return self.root / ".ledger.json"


def _options(request: BuildRequest, specs: list, dist: Dist, log) -> tuple[int, BuildOptions]:
    """How many builds at once (REQUEST's, or from cores and memory for SPECS), and what every build is given."""
    from builder.facts.hostenv import default_wheelhouses, find_ca_bundle

    jobs = request.jobs or schedule.auto_jobs(specs)
    options = BuildOptions(
        wheelhouses=request.wheelhouse if request.wheelhouse is not None else default_wheelhouses(),
        ca_bundle=find_ca_bundle(request.ca_bundle),
        max_jobs=request.compile_jobs or schedule.compiler_jobs(jobs),
        logs_dir=dist.logs,
        log=log,
    )
    return jobs, options


def _run_builds(request, plan, specs, todo, ledger, dist: Dist, jobs, options, console, log):
    """(outcomes in plan order, {id: (failed BuildOutcome, error)} of the sources refused), or (None, refused) when
    interrupted. Each recipe build's source is prepared first (fetch once, check the hash, unpack, patch, the
    preflight: seconds, no compiler): one that cannot be prepared or fails its preflight fails alone, before any
    toolchain is made for it. SIGINT and SIGTERM stop launching and remove the executor's containers or processes."""
    stop = threading.Event()
    executor = None
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=dist.work))
    trees, refused = _prepare_sources(todo, plan, run_dir, dist.logs, log)
    runnable = [s for s in specs if s.id not in refused]
    if any(s.id not in refused for s in todo):
        executor = select(request.executor, options)
    source, commit, dirty = _snapshot_source(request.source, run_dir, todo)

    def on_signal(signum, frame):
        # Stop launching, remove containers / kill build processes now, then unwind.
        stop.set()
        if executor is not None:
            executor.cleanup()
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if executor is not None:
            builds = _Builds(request, plan, executor, run_dir, dist, trees, source, commit, dirty, log)
            ran = builds.run(runnable, [s for s in todo if s.id not in refused], ledger, jobs, console, stop)
        else:
            ran = [schedule.BuildOutcome(s, "skipped", ledger.done(s, dist.wheels), reason="up to date") for s in runnable]
        by_id = {o.spec.id: o for o in ran} | {sid: o for sid, (o, _err) in refused.items()}
        return [by_id[s.id] for s in specs if s.id in by_id], refused
    except KeyboardInterrupt:
        stop.set()
        log("interrupted: build containers/processes removed; nothing partial was published")
        return None, refused
    finally:
        if executor is not None:
            executor.cleanup()
        shutil.rmtree(run_dir, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class _Builds:
    """What every build of one run shares: the executor, the run's scratch folder, each recipe build's prepared
    tree (else the checkout's snapshot, SOURCE, at COMMIT), where wheels and logs go."""

    request: BuildRequest
    plan: object
    executor: object
    run_dir: Path
    dist: Dist
    trees: dict
    source: Path
    commit: str | None
    dirty: bool | None
    log: Callable[[str], None]

    def run(self, runnable: list, todo: list, ledger, jobs: int, console, stop) -> list:
        """The toolchains of TODO made, then RUNNABLE scheduled (those up to date skipped): their outcomes."""
        started = time.monotonic()
        self.executor.prepare(self.plan.images, todo)
        self.log(f"toolchains ready in {time.monotonic() - started:.1f}s")
        return schedule.run(
            runnable, self.build, self.finish, ledger=ledger, wheels_dir=self.dist.wheels, jobs=jobs,
            retries=self.request.retries, console=console, stop=stop,
        )  # fmt: skip

    def build(self, spec, attempt: int):
        """One attempt at SPEC's raw wheel; what it cost goes beside its log (which every release job uploads,
        failed or not) and to the run's timings."""
        raw = self.run_dir / spec.id / f"raw{attempt}"
        log_path = self.dist.logs / f"{spec.id}.log"
        # a recipe build's log starts with its patches: kept
        if attempt == 1 and log_path.exists() and spec.id not in self.trees:
            log_path.unlink()
        started = time.monotonic()
        result = self.executor.build(spec, self.trees.get(spec.id, self.source), raw, log_path, self.request.timeout)
        wall = time.monotonic() - started
        cost.write_build_record(self.dist.logs, spec.id, wall=wall, cpu=result.cpu_seconds,
                                measured=result.measured, attempt=attempt)  # fmt: skip
        timings.record("compile", spec.id, wall, cpu=result.cpu_seconds)
        return result

    def finish(self, spec, result) -> Path:
        """SPEC's built wheel verified, smoke-tested and moved into dist/wheels (``_verify_and_publish``)."""
        return _verify_and_publish(
            spec, result.wheel, self.run_dir / spec.id, self.dist.wheels, smoke=not self.request.no_smoke,
            epoch=reproducible.tree_epoch(self.trees.get(spec.id, self.source)), ran=self.executor.ran(spec),
            commit=self.commit, dirty=self.dirty, recipe=self.plan.recipe_of(spec),
            container=self.executor if hasattr(self.executor, "run_script") else None,
            log_path=self.dist.logs / f"{spec.id}.log", log=self.log,
        )  # fmt: skip


def _snapshot_source(tree: Path, run_dir: Path, todo: list) -> tuple[Path, str | None, bool | None]:
    """(the snapshot, its commit, dirty) of the checkout TREE when TODO builds it (the snapshot is not made
    otherwise). Taken now, next to the plan's inputs hash: edits made while the run goes on must not slip into
    wheels recorded under the old hash."""
    from builder.building.executors.host import copy_source

    source = run_dir / "src"
    if any(not s.from_recipe for s in todo):
        copy_source(tree.absolute(), source)
        # The clone's mtimes are the time it was made: the snapshot carries the commit's instead.
        reproducible.stamp(source, reproducible.checkout_epoch(tree.absolute()))
    commit = provenance.checkout_commit(tree.absolute()) if any(not s.from_recipe for s in todo) else None
    dirty = provenance.checkout_dirty(tree.absolute()) if commit else None
    return source, commit, dirty


def _failed(failed: list, total: int, refused: dict, index_error) -> BuildFailed:
    """The error a run with FAILED builds (of TOTAL) ends with: each build's reason, log, first error and last
    lines, then the index's failure if any; its exit code by cause (_exit_code)."""
    parts = [f"{len(failed)} of {total} build(s) failed:"]
    for o in failed:
        parts.append(f"\n--- {o.spec.id}: {o.reason}\n    log: {o.log}")
        cause = schedule.first_error(o.log)
        if cause:
            parts.append(f"\n    first error: {cause}")
        parts.append(f"\n    last lines:\n{_indent(schedule.tail(o.log))}")
    if index_error:
        parts.append(f"\nand the index failed: {index_error}")
    err = BuildFailed("".join(parts), hint="each log above ends with the failing step; fix it and rerun (finished builds are kept)")
    err.exit_code = _exit_code(failed, refused)
    return err


def _evidence_lines(outcomes: list, log, *, indexed: bool) -> None:
    """One line per wheel this run built, printed from its evidence record (what was really checked)."""
    for o in outcomes:
        if o.state != "built" or o.wheel is None:
            continue
        try:
            rec = evidence.read(evidence.path_of(o.wheel))
        except FarmError as err:
            log(f"{o.wheel.name}: {err}")
            continue
        if rec is not None:
            log(f"{o.wheel.name}: {evidence.line(rec)}{', indexed' if indexed else ', NOT indexed'}")


def _prepare_sources(todo: list, plan, run_dir: Path, logs_dir: Path, log) -> tuple[dict, dict]:
    """({id: prepared tree}, {id: (failed BuildOutcome, error)}) for the recipe builds among TODO.

    The tree is ``<run dir>/<id>/source/src``: the pinned sdist, hash-checked, unpacked and patched
    (builder/sourcing/prepare.py); the executor builds it as it builds the checkout, with the spec's env.
    """
    from builder.errors import PreflightError
    from builder.planning.recipes import CellFacts
    from builder.sourcing.preflight import check_cell
    from builder.sourcing.prepare import prepare

    trees: dict[str, Path] = {}
    refused: dict[str, tuple[schedule.BuildOutcome, FarmError]] = {}
    checked: dict = {}  # (project, cell) -> its CellCheck or error: the Pythons of one cell are checked once
    for spec in todo:
        if not spec.from_recipe:
            continue
        log_path = logs_dir / f"{spec.id}.log"
        t0 = time.monotonic()
        recipe, facts = plan.recipe_of(spec), CellFacts.from_spec(spec)
        key = (recipe.name, facts)
        try:
            # The preflight first, on its own copy: a mistake in the recipe stops here, seconds in, not after a compile.
            if key not in checked:
                try:
                    checked[key] = check_cell(recipe, facts, run_dir / spec.id / "preflight")
                except FarmError as err:
                    checked[key] = err
            if isinstance(checked[key], FarmError):
                raise checked[key]
            prep = prepare(recipe, facts, run_dir / spec.id / "source")
        except FarmError as err:  # PatchError, SourceIntegrityError, SourceFetchError...: this build only
            kind = f"{type(err).__name__}, exit {err.exit_code}"
            what = "failed its preflight" if isinstance(err, PreflightError) else "could not be prepared"
            text = f"== {spec.id}: the source {what} ({kind})\n{err}\n"
            log_path.write_text(text + (f"hint: {err.hint}\n" if err.hint else ""))
            log(f"{spec.id}: FAILED before building: {str(err).splitlines()[0]}")
            reason = f"source: {str(err).splitlines()[0]}"
            refused[spec.id] = (schedule.BuildOutcome(spec, "failed", None, log_path, reason, time.monotonic() - t0), err)
            continue
        log_path.write_text(
            f"== {spec.id}: {spec.source}\n== patches applied: {', '.join(prep.applied) or 'none'}"
            f" (skipped: {', '.join(prep.skipped) or 'none'})\n== preflight: {checked[key].line(recipe)}\n"
        )
        log(f"{spec.id}: source ready, patches {', '.join(prep.applied) or 'none'}; preflight ok: "
            f"{checked[key].name} {checked[key].wheel_version}")  # fmt: skip
        # Patching gave the files it edited the clock's time: the whole tree gets the source's.
        reproducible.stamp(prep.tree, prep.epoch)
        trees[spec.id] = prep.tree
    return trees, refused


def _exit_code(failed: list, refused: dict) -> int:
    """A refused source outranks everything (nothing was built from it); a run whose every failure is one
    kind of source error exits with that error's code; anything else is BuildFailed's."""
    from builder.errors import SourceIntegrityError, UnsafeArchiveError

    errors = [refused[o.spec.id][1] for o in failed if o.spec.id in refused]
    if any(isinstance(e, UnsafeArchiveError) for e in errors):
        return UnsafeArchiveError.exit_code
    if any(isinstance(e, SourceIntegrityError) for e in errors):
        return SourceIntegrityError.exit_code
    if len(errors) == len(failed) and len({type(e) for e in errors}) == 1:
        return errors[0].exit_code
    return BuildFailed.exit_code


def _indent(text: str) -> str:
    return "\n".join("    | " + line for line in text.splitlines())


def _clear_stale(work: Path, wheels_dir: Path) -> None:
    """Scratch left by a killed run, and any half-moved file, never survive into a new run."""
    for p in work.glob("run-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in wheels_dir.glob("*.part"):
        p.unlink(missing_ok=True)


def _verify_and_publish(
    spec, raw_wheel: Path, workdir: Path, wheels_dir: Path, *, smoke: bool, recipe=None, container=None, log_path: Path | None = None, log=print, epoch: int | None = None,
    ran: dict | None = None, commit: str | None = None, dirty: bool | None = None,
) -> Path:
    """Verify (and repair) the raw wheel, smoke-test it, then move it into wheels_dir with one rename.

    Another machine's wheel (linux_aarch64 on x86_64) is smoke-tested in its own image under emulation, which
    CONTAINER (the Docker executor: builder.verifying.smoke.Container) runs; without one it is refused.
    """
    from builder.verifying import wheels
    from builder.verifying.smoke import smoke_wheel

    workdir.mkdir(parents=True, exist_ok=True)
    # What built it, inside the wheel and in its sidecar alike (no clock time, no host path).
    record = provenance.record(
        spec, epoch=epoch or reproducible.ZIP_FLOOR, ran=ran, commit=commit, dirty=dirty, recipe=recipe
    )
    verified = wheels.verify_wheel(
        raw_wheel, spec, workdir=workdir / "verify", epoch=epoch, provenance=record
    )
    good, ran = Path(verified.wheel), None
    if smoke:
        log_path = log_path or workdir / f"{spec.id}.log"
        ran = smoke_wheel(spec, good, log_path, recipe=recipe, container=container, log=log)
    # Same filesystem (dist/.work -> dist/wheels), so each move is one atomic rename.
    staged = workdir / (good.name + ".staged")
    shutil.copyfile(good, staged)
    sidecar = workdir / (good.name + ".spec.json")
    # the record as the wheel carries it: with the platform tag repair reached
    sidecar.write_text(
        json.dumps({**spec.to_json(), "provenance": provenance.read_wheel(good)}, indent=2, sort_keys=True)
    )
    os.replace(sidecar, wheels_dir / sidecar.name)
    # What was checked of it, from what the verifier and the smoke test returned; in before the wheel is.
    checked = workdir / (good.name + evidence.SUFFIX)
    evidence.write(checked, evidence.make(good, built=provenance.read_wheel(good), verified=verified.checks, smoke=ran))
    os.replace(checked, evidence.path_of(wheels_dir / good.name))
    dest = wheels_dir / good.name
    os.replace(staged, dest)
    return dest


def _cache_preflight(todo: list) -> str | None:
    """Whether the smoke tests' torch venvs this run adds would take the farm cache past its budget."""
    from builder.environments import store
    from builder.facts.compat import load

    compat = load()
    needs = []
    for s in todo:
        minor = ".".join(s.torch_version.split(".")[:2])
        row = compat.torch.get(minor)
        cuda = row is None or row.pypi.get(s.platform, "cpu") != "cpu"  # what `pip install torch==X` gets from PyPI
        needs.append((s.python_tag, s.torch_version, cuda))
    return store.preflight(needs)


def previous_entries(ledger: schedule.Ledger, todo: list) -> dict[str, dict]:
    """What the ledger said about each build about to run: its last inputs_hash and wheel name."""
    return {s.id: dict(ledger.entries[s.id]) for s in todo if s.id in ledger.entries}


def replacements(outcomes: list[schedule.BuildOutcome], previous: dict[str, dict]) -> dict[str, str]:
    """Wheel name -> why, for wheels this run rebuilt under the name it published before because the
    spec's inputs_hash changed (sources, torch, toolkit...): the only ones the index may let supersede
    published bytes. Anything else under a published name with other bytes stays refused."""
    out = {}
    for o in outcomes:
        before = previous.get(o.spec.id)
        if o.state != "built" or o.wheel is None or not before or before.get("wheel") != o.wheel.name:
            continue
        if before.get("inputs_hash") and before["inputs_hash"] != o.spec.inputs_hash:
            out[o.wheel.name] = f"inputs changed (inputs_hash {before['inputs_hash']} -> {o.spec.inputs_hash})"
    return out


def _index(
    wheels_dir: Path, out: Path, log, replace: dict[str, str] | None = None, projects: tuple[str, ...] = ()
) -> FarmError | None:
    from builder.publishing.index import build_index

    replace = replace or {}
    try:
        res = build_index(wheels_dir, out, replace=set(replace), projects=projects)
    except FarmError as err:
        return err
    for name in res.replaced:
        log(f"replaced {name}: {replace[name]}")
    log(f"index: {res.files} wheel(s) in {res.variants} variant(s) at {out}")
    return None
