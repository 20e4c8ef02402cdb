# shellcheck shell=bash
# The set-up both newcomer commands start with (sourced by scripts/build-ci.sh and scripts/test-ci.sh,
# from the repository root): the host (scripts/bootstrap-host.sh, as root), then .venv with the `dev`
# group. Idempotent: a second run only checks. Each step prints its wall time as a `ci-time: step`
# line (benchmarks/ci_time.py reads them); `step NAME CMD...` times any later step the same way.

seconds_since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

step() {
  local name=$1 t0
  shift
  t0=$(date +%s%N)
  "$@"
  echo "ci-time: step $name $(seconds_since "$t0") s"
}

dev_venv() {
  [ -x .venv/bin/python ] || python3.11 -m venv .venv
  .venv/bin/python -m pip install -q "pip>=25.1"
  .venv/bin/python -m pip install -q --group dev
}

step bootstrap bash scripts/bootstrap-host.sh
step venv dev_venv
