#!/usr/bin/env bash
# The CI set, on a Debian/Ubuntu host as root, from a fresh clone or again (`.ci/run` runs exactly this):
# the set-up (scripts/setup.sh), then `nox -s tests` with pytest's 40 slowest phases and each test
# file's wall, then every image, torch volume and compile the farm made (`ci-time: farm` lines):
# benchmarks/ci_time.py turns this output into the where-the-time-went table. Arguments go to pytest
# (`--run-slow`: every end-to-end build too).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s%N)
# the machine's CPU time (user, nice, system, irq, softirq) and all of it, from /proc/stat, in clock ticks
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
read -r busy0 all0 < <(cpu_ticks)
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

timings=$(mktemp /tmp/ci-timings.XXXXXX)
rc=0
# every core: a worker per core, each test file on one worker (tests/conftest.py groups them)
MAMBA_FARM_TIMINGS=$timings .venv/bin/nox -s tests -- -n auto --no-loadscope-reorder \
  --durations=40 --durations-min=1 --file-times "$@" || rc=$?
sed 's/^/ci-time: farm /' "$timings"
rm -f "$timings"
read -r busy1 all1 < <(cpu_ticks)
# how much of the machine the run kept busy: what is left idle is what more workers could use
echo "ci: CPU busy $(awk -v b=$((busy1 - busy0)) -v a=$((all1 - all0)) 'BEGIN { printf "%.0f", a ? 100 * b / a : 0 }')% of $(nproc) cores"
echo "ci: finished in $(seconds_since "$start") s"
exit "$rc"
