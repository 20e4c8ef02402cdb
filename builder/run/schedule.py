"""Runs many builds at once, within what the machine can take: parallelism from cores and memory (``--jobs``
overrides), a timeout per build, retries for infrastructure failures only, one failure never stopping the
others, a resume ledger keyed by ``inputs_hash``, rich progress and a summary table.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from builder.building.executors import BuildResult
from builder.facts.untrusted import neutral, unguarded

# Memory one build may take at peak (nvcc on the selective-scan kernels is GB-heavy).
MEM_PER_BUILD_GIB = {"cpu": 1.5, "cuda": 4.0, "rocm": 4.0}


@dataclass
class BuildOutcome:
    spec: object
    state: str  # "built" | "skipped" | "failed"
    wheel: Path | None = None
    log: Path | None = None
    reason: str = ""
    elapsed: float = 0.0
    attempts: int = 0


def _kind(spec) -> str:
    if spec.accelerator == "cpu":
        return "cpu"
    return "rocm" if spec.accelerator.startswith("hip") else "cuda"


def mem_available_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def auto_jobs(specs: list, cores: int | None = None, mem_gib: float | None = None) -> int:
    """How many builds to run at once: bounded by cores and by memory for the heaviest kind planned."""
    cores = cores or os.cpu_count() or 1
    mem_gib = mem_available_gib() if mem_gib is None else mem_gib
    per = max((MEM_PER_BUILD_GIB[_kind(s)] for s in specs), default=1.5)
    return max(1, min(cores, int(mem_gib // per), len(specs) or 1))


def compiler_jobs(jobs: int, cores: int | None = None) -> int:
    """Compiler parallelism inside one build, so that all builds together use the cores once."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, jobs))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Ledger:
    """dist/.ledger.json: spec id -> the inputs_hash, wheel name and sha256 of its verified wheel."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.entries: dict[str, dict] = {}
        if path.exists():
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged ledger only costs a rebuild

    def done(self, spec, wheels_dir: Path) -> Path | None:
        e = self.entries.get(spec.id)
        if not e or e.get("inputs_hash") != spec.inputs_hash or not spec.inputs_hash:
            return None
        wheel = wheels_dir / e.get("wheel", "")
        if not wheel.is_file() or sha256(wheel) != e.get("sha256"):
            return None
        if not Path(f"{wheel}.evidence.json").is_file():  # a wheel without its record of what was checked: again
            return None
        return wheel

    def last_duration(self, spec) -> float | None:
        return self.entries.get(spec.id, {}).get("seconds")

    def record(self, spec, wheel: Path, seconds: float) -> None:
        with self._lock, FileLock(str(self.path) + ".lock"):
            self.entries[spec.id] = {
                "inputs_hash": spec.inputs_hash,
                "wheel": wheel.name,
                "sha256": sha256(wheel),
                "seconds": round(seconds, 1),
            }
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.entries, indent=2, sort_keys=True))
            os.replace(tmp, self.path)


def run(
    specs: list,
    build_one: Callable[[object, int], BuildResult],
    finish: Callable[[object, BuildResult], Path],
    *,
    ledger: Ledger,
    wheels_dir: Path,
    jobs: int,
    retries: int = 1,
    console: Console | None = None,
    stop: threading.Event | None = None,
) -> list[BuildOutcome]:
    """Build every spec; ``build_one(spec, attempt)`` runs it, ``finish`` verifies and publishes the wheel.

    ``finish`` raises (a FarmError) when the wheel is not good; that fails only this build.
    """
    console = console or Console(file=unguarded(sys.stderr))  # its own styles; outside text passed through neutral
    stop = stop or threading.Event()
    outcomes: dict[str, BuildOutcome] = {}
    todo = []
    for spec in specs:
        wheel = ledger.done(spec, wheels_dir)
        if wheel is not None:
            outcomes[spec.id] = BuildOutcome(spec, "skipped", wheel, reason="up to date")
        else:
            todo.append(spec)

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("[cyan]{task.fields[state]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
    ]
    with Progress(*columns, console=console, transient=False, disable=not todo) as progress:
        tasks = {}
        for spec in todo:
            last = ledger.last_duration(spec)
            tasks[spec.id] = progress.add_task(
                spec.id, total=1, start=False, state="queued", eta=f"eta ~{last:.0f}s" if last else "eta ?"
            )

        def work(spec) -> BuildOutcome:
            shown = _Shown(progress, tasks[spec.id])
            return shown.end(_attempts(spec, build_one, finish, ledger=ledger, retries=retries, stop=stop, shown=shown))

        outcomes |= _in_pool(todo, work, jobs=jobs, stop=stop)
    return [outcomes[s.id] for s in specs if s.id in outcomes]


class _Shown:
    """One build's line in the progress display."""

    def __init__(self, progress: Progress, task) -> None:
        self.progress, self.task = progress, task

    def start(self) -> None:
        self.progress.start_task(self.task)

    def state(self, text: str) -> None:
        self.progress.update(self.task, state=text)

    def end(self, outcome: BuildOutcome) -> BuildOutcome:
        style = "green" if outcome.state == "built" else "red"
        self.progress.update(self.task, completed=1, state=f"[{style}]{outcome.state}", eta="")
        return outcome


def _attempts(
    spec, build_one, finish, *, ledger: Ledger, retries: int, stop: threading.Event, shown: _Shown
) -> BuildOutcome:
    """SPEC built (again after an infrastructure failure, up to RETRIES times), then its wheel verified and published
    (``finish``) and recorded in the ledger: its BuildOutcome. A bad wheel fails this build only."""
    shown.start()
    started = time.monotonic()
    result: BuildResult | None = None
    attempt = 0
    while attempt <= retries and not stop.is_set():
        attempt += 1
        shown.state("building" if attempt == 1 else f"building (retry {attempt - 1})")
        result = build_one(spec, attempt)
        if result.ok or not result.infrastructure or stop.is_set():
            break
    if stop.is_set():
        log = result.log if result else None
        return BuildOutcome(spec, "failed", None, log, "interrupted", time.monotonic() - started, attempt)
    if not result.ok:
        return BuildOutcome(spec, "failed", None, result.log, result.reason, time.monotonic() - started, attempt)
    shown.state("verifying")
    try:
        wheel = finish(spec, result)
    except Exception as err:  # a bad wheel fails this build only
        reason = f"verification: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        return BuildOutcome(spec, "failed", None, result.log, reason, time.monotonic() - started, attempt)
    elapsed = time.monotonic() - started
    ledger.record(spec, wheel, elapsed)
    return BuildOutcome(spec, "built", wheel, result.log, "", elapsed, attempt)


def _in_pool(todo: list, work: Callable[[object], BuildOutcome], *, jobs: int, stop: threading.Event) -> dict[str, BuildOutcome]:
    """WORK on every spec of TODO, JOBS at once: {id: BuildOutcome}. The first build of each compile group runs before
    the rest of its group starts: they then take its objects from the image's kernel cache instead of compiling
    the same kernels at once."""
    outcomes: dict[str, BuildOutcome] = {}
    first, later = _first_of_each_group(todo)
    pool = cf.ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="build")
    try:
        futures = {pool.submit(work, s): s for s in first}
        pending = set(futures)
        # Wait in short slices so signals reach the main thread promptly.
        while pending:
            done, pending = cf.wait(pending, timeout=0.5)
            for fut in done:
                spec = futures[fut]
                try:
                    outcomes[spec.id] = fut.result()
                except Exception as err:  # a bug in one build's path must not take down the rest
                    outcomes[spec.id] = BuildOutcome(spec, "failed", reason=f"internal error: {err!r}")
                for sibling in later.pop(spec.compile_group, []) if not stop.is_set() else ():
                    futures[nxt := pool.submit(work, sibling)] = sibling
                    pending.add(nxt)
    finally:
        pool.shutdown(wait=not stop.is_set(), cancel_futures=True)
    return outcomes


def _first_of_each_group(specs: list) -> tuple[list, dict[str, list]]:
    """The first spec of each compile group (in plan order), and the others by group."""
    first, later = [], {}
    for spec in specs:
        if spec.compile_group in later:
            later[spec.compile_group].append(spec)
        else:
            later[spec.compile_group] = []
            first.append(spec)
    return first, later


def summary(outcomes: list[BuildOutcome], console: Console) -> None:
    table = Table(title="mamba-farm build summary")
    for col in ("build", "result", "time", "wheel / reason"):
        table.add_column(col)
    colors = {"built": "green", "skipped": "blue", "failed": "red"}
    for o in outcomes:
        detail = o.wheel.name if o.wheel else neutral(o.reason or "")
        table.add_row(o.spec.id, f"[{colors[o.state]}]{o.state}", f"{o.elapsed:.0f}s" if o.elapsed else "-", detail)
    console.print(table)


def tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 16384))
        text = f.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def first_error(path: Path | None) -> str | None:
    """The first compiler/pip error line of a log: usually the cause, often far above the last lines."""
    if path is None or not path.exists():
        return None
    with open(path, errors="replace") as f:
        lines = f.readlines()
    compiler = re.compile(r":\d+(:\d+)?: (fatal )?error\b|\(\d+\): error\b")  # gcc/clang, nvcc
    for pattern in (compiler, re.compile(r"(^|\s)error:", re.IGNORECASE)):
        for line in lines:
            if pattern.search(line):
                return line.strip()[:300]
    return None
