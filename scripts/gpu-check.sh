#!/usr/bin/env bash
# The GPU check, run ON the device machine (python3 with a CUDA torch, nvcc,
# ninja, no network) from the repository root, with .gpu/ carried there
# (scripts/gpu-check-prepare.sh fills it here):
#   1. installs our stable-ABI CUDA 13 wheel from .gpu/ into /tmp/site (no index, no deps);
#   2. builds upstream's selective_scan_cuda from the pinned sdist in .gpu/, patched to
#      sm_90 only, in the background (/tmp/upstream; its log goes to $OUT/upstream-build.log);
#   3. runs benchmarks/gpu_check.py --device cuda --upstream: the numerics first, then the
#      timing once upstream's build is done;
#   4. saves the kernels' register and shared-memory use (cuobjdump) to $OUT/resource-usage.txt.
# Everything it prints is also in $OUT/log.txt. Exit: gpu_check.py's status, else 2 when
# upstream's build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
rm -f "$OUT/results.json" "$OUT/results.md"  # a stale report must not pass for this run's
PY=${PYTHON:-python3}
SITE=/tmp/site
UP=/tmp/upstream
ARCH=${GPU_CHECK_ARCH:-90}

run() {
  echo "gpu-check: $(date -u +%FT%TZ) on $(hostname); $($PY --version); nvcc $(nvcc --version | grep -o 'release [0-9.]*')"
  $PY -c 'import torch; print("gpu-check: torch", torch.__version__, "CUDA", torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'

  # torch guesses CUDA_HOME from nvcc's parent folder, wrong where nvcc is a wrapper: ask nvcc itself.
  if [ -z "${CUDA_HOME:-}" ]; then
    local top
    top=$(nvcc -dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
    if [ -n "$top" ] && [ -d "$top" ]; then CUDA_HOME=$(cd "$top" && pwd -P); export CUDA_HOME; fi
  fi
  echo "gpu-check: CUDA_HOME=${CUDA_HOME:-unset}"

  local wheels=(.gpu/mamba_ssm-*+cu13torchstable-cp310-abi3-*.whl)
  [ -f "${wheels[0]}" ] || { echo "gpu-check: no wheel in .gpu/: run scripts/gpu-check-prepare.sh and carry .gpu"; return 1; }
  echo "gpu-check: installing ${wheels[0]} into $SITE"
  rm -rf "$SITE" && "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${wheels[0]}" || return 1
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

  # Upstream's kernel builds on the CPUs while the numerics run on the GPU; build.rc tells
  # gpu_check.py when it is done. Its own process group (set -m), to stop it if the check cannot run.
  rm -rf "$UP" && mkdir -p "$UP/ext"
  set -m
  (
    (
      src=$("$PY" benchmarks/upstream_sdist.py unpack .gpu "$UP/src" --archs "$ARCH") || exit 1
      echo "gpu-check: building upstream's selective_scan_cuda in $src (sm_$ARCH, MAX_JOBS=${GPU_CHECK_JOBS:-16})"
      cd "$src" || exit 1
      # timeout runs in a process group of its own: its pid lets the kill below reach nvcc too
      MAMBA_FORCE_BUILD=TRUE MAX_JOBS=${GPU_CHECK_JOBS:-16} TORCH_CUDA_ARCH_LIST="${ARCH:0:1}.${ARCH:1}" \
        timeout 360 "$PY" setup.py build_ext --inplace &
      echo $! >"$UP/timeout.pid"
      wait $! || exit 1
      cp selective_scan_cuda*.so "$UP/ext/"
    ) >"$OUT/upstream-build.log" 2>&1 </dev/null
    echo $? >"$UP/build.rc"
  ) &
  local build=$!
  set +m

  PYTHONPATH=$PYTHONPATH:$UP/ext "$PY" benchmarks/gpu_check.py --device cuda --upstream \
    --upstream-wait "$UP/build.rc" --upstream-wait-s 400 --out "$OUT" "$@"
  local rc=$?
  if [ ! -f "$OUT/results.json" ]; then
    echo "gpu-check: the check did not run (exit $rc); stopping upstream's build"
    kill -TERM "$(cat "$UP/timeout.pid" 2>/dev/null)" -- "-$build" 2>/dev/null
  fi
  wait "$build"
  local build_rc
  build_rc=$(cat "$UP/build.rc" 2>/dev/null || echo "none")
  echo "gpu-check: upstream's build exit $build_rc; the end of its log:"
  tail -5 "$OUT/upstream-build.log"

  {
    for so in "$SITE"/mamba_ssm/_C*.so "$UP"/ext/selective_scan_cuda*.so; do
      [ -f "$so" ] || continue
      echo "## $so"
      cuobjdump --dump-resource-usage "$so" 2>&1 | grep -E "arch =|Function|REG" | sed 's/^[[:space:]]*//' |
        if command -v c++filt >/dev/null; then c++filt; else cat; fi
    done
  } >"$OUT/resource-usage.txt" 2>&1
  echo "gpu-check: kernel resources in resource-usage.txt ($(grep -c REG "$OUT/resource-usage.txt") kernels)"

  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  [ "$build_rc" = 0 ] || return 2
}

run "$@" 2>&1 | tee "$OUT/log.txt"
