"""What the release's builds cost: wall time and compile CPU seconds (measured by ``builder/facts/cputime.py``),
per build in ``dist/logs/<id>.cost.json`` (failed builds too), per job (``release cost --job``) and for the
whole release (``release cost --jobs``). Records read back are outside data.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from builder.errors import UsageError
from builder.facts.untrusted import Untrusted, expect, load_json, read_regular, shown

RECORD_SUFFIX = ".cost.json"
JOB_RECORD = "job-cost.json"
MAX_RECORD_BYTES = 64 << 10
MAX_SECONDS = 30 * 24 * 3600.0  # a month: more than any job GitHub runs (6 h), less than nonsense
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")  # the farm's build and job ids


def write_build_record(logs_dir: Path, build_id: str, *, wall: float, cpu: float | None, measured: str,
                       attempt: int) -> Path:  # fmt: skip
    """``<logs_dir>/<build_id>.cost.json``: one build's wall and compile CPU seconds; a retry adds to the first
    attempt's figures (both ran on the job's runner)."""
    path = logs_dir / f"{build_id}{RECORD_SUFFIX}"
    record = {"id": build_id, "attempts": attempt, "wall_s": round(wall, 1), "measured": measured,
              "cpu_s": None if cpu is None else round(cpu, 1)}  # fmt: skip
    if attempt > 1 and path.exists():
        try:
            before = read_build_record(path)
            record["wall_s"] = round(before["wall_s"] + record["wall_s"], 1)
            if before["cpu_s"] is not None and record["cpu_s"] is not None:
                record["cpu_s"] = round(before["cpu_s"] + record["cpu_s"], 1)
        except UsageError:
            pass  # our own file, damaged: this attempt's figures stand
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- records read back (outside data)


def _load(path: Path) -> dict:
    try:
        doc = load_json(read_regular(path, MAX_RECORD_BYTES), str(path))
        return expect(doc, dict, f"{path}: the record")
    except Untrusted as err:
        raise UsageError(f"{err}: not a cost record", hint="records are what the farm and `release cost` write; "
                         "remove the file, or rerun the job that made it") from None  # fmt: skip


def _seconds(doc: dict, key: str, path: Path, *, optional: bool = False) -> float | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not (0 <= value <= MAX_SECONDS)
    ):
        raise UsageError(
            f"{shown(path, 300)}: {key!r} is {shown(repr(value), 80)}, not a number of seconds (0 to {MAX_SECONDS:.0f})",
            hint="remove the file, or rerun the job that made it",
        )
    return float(value)


def _id(doc: dict, key: str, path: Path) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise UsageError(f"{shown(path, 300)}: {key!r} is {shown(repr(value), 120)}, not a build or job id",
                         hint="ids are letters, digits and . _ + -; remove the file, or rerun the job")  # fmt: skip
    return value


def read_build_record(path: Path) -> dict:
    doc = _load(path)
    measured = doc.get("measured")
    return {
        "id": _id(doc, "id", path),
        "wall_s": _seconds(doc, "wall_s", path),
        "cpu_s": _seconds(doc, "cpu_s", path, optional=True),
        "measured": measured if measured in ("cgroup", "rusage") else "none",
    }


def read_job_record(path: Path) -> dict:
    doc = _load(path)
    builds = expect(doc.get("builds"), list, f"{path}: 'builds'") if "builds" in doc else []
    if len(builds) > 256 or not all(isinstance(b, str) and _ID_RE.fullmatch(b) for b in builds):
        raise UsageError(f"{shown(path, 300)}: 'builds' is not a list of build ids", hint="rerun the job")
    return {
        "job": _id(doc, "job", path),
        "wall_s": _seconds(doc, "wall_s", path),
        "cpu_s": _seconds(doc, "cpu_s", path),
        "unmeasured": int(_seconds(doc, "unmeasured", path, optional=True) or 0),
        "builds": builds,
    }


# --------------------------------------------------------------------------- a job, and the release


def job_record(job: str, wall: float, logs: Path) -> dict:
    """One job's cost from the farm's build records under LOGS: its wall time (the farm step's, given), the
    CPU seconds of its builds, and how many ran without a figure (an engine that exposes no counter)."""
    if not _ID_RE.fullmatch(job):
        raise UsageError(f"--job {shown(repr(job), 120)}: not a job id", hint="pass the matrix's id")
    records = [read_build_record(p) for p in sorted(logs.glob(f"*{RECORD_SUFFIX}"))]
    return {
        "job": job,
        "wall_s": round(wall, 1),
        "cpu_s": round(sum(r["cpu_s"] or 0.0 for r in records), 1),
        "unmeasured": sum(r["cpu_s"] is None for r in records),
        "builds": [r["id"] for r in records],
        "per_build": records,
    }


def _hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def job_markdown(record: dict) -> str:
    lines = [
        f"### Cost of `{record['job']}`",
        "",
        (
            f"Wall time of the farm step: {record['wall_s']:.0f} s ({_hms(record['wall_s'])}); compile CPU: "
            f"{record['cpu_s']:.0f} CPU-seconds over {len(record['builds'])} build(s)."
        ),
        "",
        "| build | wall (s) | CPU (s) | measured by |",
        "| --- | ---: | ---: | --- |",
    ]
    for r in record.get("per_build", []):
        cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.0f}"
        lines.append(f"| `{r['id']}` | {r['wall_s']:.0f} | {cpu} | {r['measured']} |")
    return "\n".join(lines) + "\n"


def release_markdown(jobs: list[dict]) -> str:
    """Publish's table: each build job's wall and CPU seconds, and the release's total (runner- and CPU-hours:
    the figures the paper estimate gave, 89 runner-hours and 219 CPU-hours for a full release)."""
    wall = sum(j["wall_s"] for j in jobs)
    cpu = sum(j["cpu_s"] for j in jobs)
    unmeasured = sum(j["unmeasured"] for j in jobs)
    lines = [
        "### What the builds cost",
        "",
        "| job | builds | wall (s) | CPU (s) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for j in sorted(jobs, key=lambda j: j["job"]):
        lines.append(f"| `{j['job']}` | {len(j['builds'])} | {j['wall_s']:.0f} | {j['cpu_s']:.0f} |")
    lines.append(f"| **total: {len(jobs)} jobs** | {sum(len(j['builds']) for j in jobs)} | {wall:.0f} | {cpu:.0f} |")
    lines += [
        "",
        (
            f"{len(jobs)} build jobs: {wall / 3600:.2f} runner-hours of farm steps, {cpu / 3600:.2f} CPU-hours "
            "of compiling (the farm's build containers and processes)."
        ),
    ]
    if unmeasured:
        lines.append(f"{unmeasured} build(s) ran where no CPU counter could be read: not counted.")
    return "\n".join(lines) + "\n"


def read_jobs(folder: Path) -> list[dict]:
    """Every job record under FOLDER (the downloaded log artifacts: log-<job>/job-cost.json); one per job."""
    jobs: dict[str, dict] = {}
    for path in sorted(folder.rglob(JOB_RECORD)):
        record = read_job_record(path)
        if record["job"] in jobs:
            raise UsageError(f"{shown(path, 300)}: a second record of job {record['job']!r}",
                             hint="each build job uploads one log artifact; remove the copy")  # fmt: skip
        jobs[record["job"]] = record
    return list(jobs.values())


# --------------------------------------------------------------------------- a plan's cost, before and after


def _job_kind(job: dict) -> tuple[str, str]:
    """What a job's runner time is taken to depend on: its project and its accelerator (cpu, cu12, hip62...)."""
    return (job["project"], job["accelerator"])


def per_job_seconds(records: list[dict], jobs: list[dict]) -> dict[tuple[str, str], float]:
    """The mean wall seconds of the recorded jobs (``read_jobs``) of each kind, matched to JOBS (a plan's
    ``github_jobs``) by id: what a planned job of that kind is taken to cost."""
    by_id = {j["id"]: _job_kind(j) for j in jobs}
    sums: dict[tuple[str, str], list[float]] = {}
    for r in records:
        kind = by_id.get(r["job"])
        if kind is not None:
            sums.setdefault(kind, []).append(r["wall_s"])
    return {k: sum(v) / len(v) for k, v in sums.items()}


def runner_hours(jobs: list[dict], means: dict[tuple[str, str], float]) -> tuple[float, int]:
    """(runner-hours of JOBS at MEANS' figures, how many jobs are of a kind no record measured: not counted)."""
    seconds, unmeasured = 0.0, 0
    for j in jobs:
        mean = means.get(_job_kind(j))
        if mean is None:
            unmeasured += 1
        else:
            seconds += mean
    return seconds / 3600, unmeasured


def before_after_lines(before: list[dict], after: list[dict], n_before: int, n_after: int,
                       records: list[dict] | None = None) -> list[str]:  # fmt: skip
    """The plan's cost line: builds and jobs before (the recipes' pinned releases) and after (every release), and
    runner-hours where RECORDS (a release's job-cost.json records) measured jobs of those kinds."""
    ratio = f" (x{len(after) / len(before):.1f})" if before else ""
    lines = [(f"cost: before (each recipe's pinned release) {n_before} builds in {len(before)} jobs; after (every "
             f"release) {n_after} builds in {len(after)} jobs{ratio}")]  # fmt: skip
    if not records:
        lines.append("cost: runner-hours need a release's job records: `release cost --jobs` reads them "
                     "(pass them with `plan --costs DIR`)")  # fmt: skip
        return lines
    means = per_job_seconds(records, before)
    hb, ub = runner_hours(before, means)
    ha, ua = runner_hours(after, means)
    more = f"; {ub} and {ua} jobs of kinds no record measured, not counted" if ub or ua else ""
    lines.append(f"cost: {hb:.1f} runner-hours before, {ha:.1f} after, at the mean of {len(records)} recorded "
                 f"job(s) per project and accelerator{more}")  # fmt: skip
    return lines
