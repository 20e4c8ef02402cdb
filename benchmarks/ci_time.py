"""Where a CI run's time went, from its log: set-up, Docker images, torch, compiles, tests by file.

    bash .ci/run 2>&1 | tee ci.log
    .venv/bin/python benchmarks/ci_time.py ci.log              # a Markdown table on stdout
    .venv/bin/python benchmarks/ci_time.py ci.log --json       # the same rows as JSON

What it reads (each is optional; a log lacking one gets no rows of that kind):

- ``ci-time: step NAME SECONDS s``: a set-up step's wall time (``scripts/test-ci.sh``, the ``tests``
  session of ``noxfile.py``);
- ``ci-time: file PATH SECONDS s``: one test file's wall (``--file-times`` of ``tests/conftest.py``);
- ``ci-time: farm {json}``: one step the farm timed (``builder/facts/timings.py``: a base or
  toolchain image, a torch volume or venv, a compile), with the test that asked for it;
- pytest's ``--durations`` lines (``12.34s call tests/test_x.py::test_y``) and its closing
  ``N passed ... in S s`` line;
- lines prefixed with their elapsed seconds (``[  12.3] ...``), as a timestamping wrapper writes
  them: a ``.ci/run`` without ci-time lines has its set-up steps are then told apart by the lines that open them, and
  each test file's wall by when its progress line ends.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]\s?(.*)$")
STEP = re.compile(r"ci-time: step (\S+) (\d+(?:\.\d+)?) s\b")
FILE = re.compile(r"ci-time: file (\S+) (\d+(?:\.\d+)?) s\b")
FARM = re.compile(r"ci-time: farm (\{.*\})\s*$")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)")
PASSED = re.compile(r"^=+ (.*\d+ (?:passed|failed).*) in (\d+(?:\.\d+)?)s\b")
WORKERS = re.compile(r"^created: (\d+)/\d+ workers")  # pytest-xdist: the files ran side by side
FINISHED = re.compile(r"^ci: finished in (\d+(?:\.\d+)?) s")
BUSY = re.compile(r"^ci: CPU busy (\d+)% of (\d+) cores")
PROGRESS = re.compile(r"^(tests/\S+\.py) [.sFEx]*\s*(?:\[\s*\d+%\])?\s*$")
CONTINUED = re.compile(r"^[.sFEx]+\s*\[\s*\d+%\]\s*$")
# A .ci/run (bootstrap, venv, nox -s tests) without ci-time lines: the line that opens each step.
OPENERS = (
    ("bootstrap", re.compile(r"^bootstrap: ")),
    ("venv", re.compile(r"^WARNING: |^Collecting |^Requirement ")),
    ("nox-venv", re.compile(r"^nox > Running session tests")),
    ("torch", re.compile(r"^nox > python -m pip install torch")),
    ("test-group", re.compile(r"^nox > python -m pip install '")),
    ("editable-install", re.compile(r"^nox > python -m pip install --no-build-isolation -e")),
    ("pytest", re.compile(r"^nox > pytest")),
)
FARM_KINDS = {
    "base": "Docker images",
    "image": "Docker images",
    "torch": "torch volumes and venvs",
    "compile": "compiles",
}


def parse(lines: list[str]) -> dict:
    steps: dict[str, float] = {}
    files: dict[str, float] = {}
    farm: list[dict] = []
    durations: list[tuple[float, str, str]] = []
    passed = None
    workers = 1
    finished = busy = None
    stamped: list[tuple[float, str]] = []
    for raw in lines:
        line = raw.rstrip("\n")
        m = STAMP.match(line)
        if m:
            stamped.append((float(m.group(1)), m.group(2)))
            line = m.group(2)
        if m := STEP.search(line):
            steps[m.group(1)] = steps.get(m.group(1), 0.0) + float(m.group(2))
        elif m := FILE.search(line):
            files[m.group(1)] = float(m.group(2))
        elif m := FARM.search(line):
            try:
                row = json.loads(m.group(1))
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("kind") in FARM_KINDS and isinstance(row.get("seconds"), (int, float)):
                farm.append(row)
        elif m := DURATION.match(line):
            durations.append((float(m.group(1)), m.group(2), m.group(3)))
        elif m := PASSED.match(line):
            passed = (m.group(1), float(m.group(2)))
        elif m := WORKERS.match(line):
            workers = int(m.group(1))
        elif m := FINISHED.match(line):
            finished = float(m.group(1))
        elif m := BUSY.match(line):
            busy = (int(m.group(1)), int(m.group(2)))
    if stamped and not steps:
        steps = _steps_from_stamps(stamped)
    if stamped and not files:
        files = _files_from_stamps(stamped)
    if not files:  # only --durations: each file's phases that were long enough to be listed
        for seconds, _, node in durations:
            files[node.split("::")[0]] = files.get(node.split("::")[0], 0.0) + seconds
    total = stamped[-1][0] if stamped else finished
    return {"steps": steps, "files": files, "farm": farm, "durations": durations, "passed": passed, "total": total,
            "workers": workers, "busy": busy}  # fmt: skip


def _steps_from_stamps(stamped: list[tuple[float, str]]) -> dict[str, float]:
    """Each step runs from the first line that opens it to the line that opens the next (the first from 0)."""
    opened: list[tuple[str, float]] = []
    i = 0
    for name, pattern in OPENERS:
        j = next((k for k in range(i, len(stamped)) if pattern.match(stamped[k][1])), None)
        if j is None:
            continue
        opened.append((name, 0.0 if not opened else stamped[j][0]))
        i = j
    ends = [start for _, start in opened[1:]] + [stamped[-1][0]]
    return {name: round(end - start, 1) for (name, start), end in zip(opened, ends, strict=True) if name != "pytest"}


def _files_from_stamps(stamped: list[tuple[float, str]]) -> dict[str, float]:
    """A progress line is stamped when it ends: a file took from the previous file's end to its own."""
    files: dict[str, float] = {}
    current, start, end = None, None, None
    for t, text in stamped:
        if text.startswith("collected "):
            end = t
        elif m := PROGRESS.match(text):
            current, start, end = m.group(1), end if end is not None else t, t
            files[current] = round(end - start, 1)
        elif current is not None and CONTINUED.match(text):
            end = t
            files[current] = round(end - start, 1)
    return files


def table(result: dict, top: int = 25) -> str:
    steps, files, farm = result["steps"], result["files"], result["farm"]
    out = []
    if result["total"] is not None:
        out.append(f"Whole run: {result['total']:.0f} s.")
    if result["passed"]:
        out.append(f"pytest: {result['passed'][0]} in {result['passed'][1]:.0f} s.")
    if result.get("busy"):
        out.append(f"CPU busy {result['busy'][0]}% of the run on {result['busy'][1]} cores.")
    out += ["", "| where | seconds |", "|---|---:|"]
    for name, s in steps.items():
        out.append(f"| set-up: {name} | {s:.0f} |")
    if steps:
        out.append(f"| **set-up, all** | **{sum(steps.values()):.0f}** |")
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for row in farm:
        by_kind[FARM_KINDS[row["kind"]]].append(row)
    for kind in ("Docker images", "torch volumes and venvs", "compiles"):
        rows = by_kind.get(kind, [])
        if not rows:
            out.append(f"| {kind} | (not in this log) |")
            continue
        cpu = sum(r.get("cpu") or 0 for r in rows)
        # a build's wall runs from its torch (a volume filled on first use) to its wheel: those fills are in it
        extra = f", {cpu:.0f} CPU-s; wall includes torch filled on first use" if kind == "compiles" and cpu else ""
        out.append(f"| {kind} ({len(rows)}{extra}; inside the tests below) | {sum(r['seconds'] for r in rows):.0f} |")
    ranked = sorted(files.items(), key=lambda kv: -kv[1])
    for name, s in ranked[:top]:
        out.append(f"| tests: {name} | {s:.0f} |")
    if len(ranked) > top:
        out.append(f"| tests: {len(ranked) - top} other files | {sum(s for _, s in ranked[top:]):.0f} |")
    if files:
        workers = result.get("workers", 1)
        summed = f" (summed over {workers} workers: the pytest wall above is the run's)" if workers > 1 else ""
        out.append(f"| **tests, all files{summed}** | **{sum(files.values()):.0f}** |")
    if result["durations"]:
        out += ["", "Slowest test phases (pytest's --durations):", "", "| seconds | phase | test |", "|---:|---|---|"]
        for seconds, phase, node in sorted(result["durations"], key=lambda d: -d[0])[:10]:
            out.append(f"| {seconds:.0f} | {phase} | {node} |")
    if farm:
        out += [
            "",
            "Each step the farm timed, and the test that asked for it:",
            "",
            "| kind | what | seconds | test |",
            "|---|---|---:|---|",
        ]
        for row in sorted(farm, key=lambda r: -r["seconds"]):
            out.append(f"| {row['kind']} | {row['what']} | {row['seconds']:.0f} | {row.get('context', '')} |")
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for row in farm:
            if row["kind"] in ("base", "image", "torch"):
                seen[(row["kind"], row["what"])] += 1
        again = [f"{k} {w} ({n}x)" for (k, w), n in seen.items() if n > 1]
        out += ["", f"Made more than once in this run: {', '.join(again) if again else 'nothing'}."]
        # a spec compiled again (a reproducibility check's rebuild is one on purpose), with the test files that asked
        compiled: dict[str, list[str]] = defaultdict(list)
        for row in farm:
            if row["kind"] == "compile":
                compiled[row["what"]].append(row.get("context", "").split("::")[0] or "?")
        twice = [f"{w} ({len(c)}x: {', '.join(sorted(set(c)))})" for w, c in compiled.items() if len(c) > 1]
        out += ["", f"Compiled more than once in this run: {'; '.join(twice) if twice else 'nothing'}."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path, help="a CI run's log (.ci/run's output)")
    p.add_argument("--json", action="store_true", help="print the parsed rows as JSON instead of the table")
    p.add_argument("--top", type=int, default=25, help="test files listed one by one (default 25)")
    args = p.parse_args(argv)
    try:
        lines = args.log.read_text(errors="replace").splitlines()
    except OSError as err:
        print(f"ci_time: cannot read {args.log}: {err.strerror}", file=sys.stderr)
        return 2
    result = parse(lines)
    print(json.dumps(result, indent=1) if args.json else table(result, args.top), end="" if not args.json else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
