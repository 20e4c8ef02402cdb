#!/usr/bin/env bash
# One build, the same in a container and on the host: install the spec's torch,
# then `pip wheel --no-build-isolation` the source into $FARM_OUT.
# Exit 75 (EX_TEMPFAIL) means infrastructure (torch could not be installed): the
# scheduler may retry that; any other failure is the build's own and is not retried.
set -uo pipefail
echo "== $(date +%T) mamba-farm build ${FARM_BUILD_ID}: $("$FARM_PYTHON" -V 2>&1), torch ${FARM_TORCH_REQ:-from PYTHONPATH}"
read -r -a torch_args <<< "${FARM_TORCH_PIP_ARGS:-}"
# What a recipe unsets (space-separated), the image's ENV included: its setup.py would read it.
read -r -a unset_names <<< "${FARM_UNSET:-}"
for name in "${unset_names[@]}"; do unset "$name"; done
# The interpreter's scripts (ninja, from the image's build packages) on PATH: torch's
# cpp_extension runs `ninja`, and without it falls back to a serial, MAX_JOBS-blind build.
PATH="$(dirname "$FARM_PYTHON"):$PATH"
export PATH
# A source that includes torch's CUDA context header (or the library headers it pulls in) needs them in the
# toolkit: checked here, before anything is installed or compiled, naming the package that provides each.
if [ -n "${FARM_CUDA_HEADERS:-}" ] && grep -rqsE --include='*.cu' --include='*.cuh' --include='*.cpp' --include='*.cc' \
    --include='*.h' --include='*.hpp' '#[[:space:]]*include[[:space:]]*[<"](ATen/cuda/CUDAContext\.h|cusparse\.h|cublas_v2\.h|cublasLt\.h|cusolverDn\.h|curand\.h)' "$FARM_SRC"; then
  read -r -a header_pairs <<< "$FARM_CUDA_HEADERS"
  for pair in "${header_pairs[@]}"; do
    if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/${pair%%=*}" ]; then
      echo "error: the CUDA toolkit at ${CUDA_HOME:-/usr/local/cuda} has no ${pair%%=*}, which this source needs"\
        "(through ATen/cuda/CUDAContext.h); the PyPI package ${pair#*=} provides it: add its headers to the toolkit"
      exit 1
    fi
  done
  echo "== CUDA headers: the toolkit has ${#header_pairs[@]} that torch's CUDA headers include"
fi
# Compile once across Pythons, for code we do not own (FARM_CCACHE: recipe CUDA builds): ccache in
# front of nvcc (torch's cpp_extension runs $PYTORCH_NVCC) and of c++ (torch >= 2.13 puts ccache
# there itself), its objects in the image's kernel cache, which every build of the image mounts.
# The checkout's own build has its own kernel cache (mamba_build/kernels.py) and no wrapper.
ccache_log=""
# Code we do not own, compiled by nvcc (FARM_CCACHE marks those builds): nvcc's temp names
# (tmpxft_<pid>_*) land in every object unless it makes its temp files beside the object, named after
# it. Our own kernels pass the flag themselves (mamba_build/kernels.py). An nvcc without it is left be.
# (Its help is read whole first: `nvcc --help | grep -q` under pipefail fails when grep stops early.)
nvcc_help=""
if [ "${FARM_CCACHE:-}" = nvcc ]; then nvcc_help="$("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --help 2> /dev/null)"; fi
if [[ "$nvcc_help" == *--objdir-as-tempdir* ]]; then
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }--objdir-as-tempdir"
  echo "== nvcc: NVCC_APPEND_FLAGS=$NVCC_APPEND_FLAGS"
fi
if [ "${FARM_CCACHE:-}" = nvcc ] && [ -n "${MAMBA_KERNEL_CACHE:-}" ] && command -v ccache > /dev/null; then
  export CCACHE_DIR="$MAMBA_KERNEL_CACHE/ccache"
  # nvcc's bytes, not its mtime: each image of one toolchain installs the same nvcc at its own time.
  export CCACHE_COMPILERCHECK=content
  # Not the working directory: torch's ninja runs in build/temp.<platform>-cpython-3XY, one per Python.
  export CCACHE_NOHASHDIR=1
  ccache_log="$(mktemp)"
  export CCACHE_STATSLOG="$ccache_log"
  export PYTORCH_NVCC="ccache ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  # ccache hashes the command line, not NVCC_APPEND_FLAGS: a file holding it joins the hash (by content), so
  # an object made without --objdir-as-tempdir (a tmpxft_<pid> name inside) is never taken for one made with it.
  ccache_extra="$(mktemp)"
  echo "NVCC_APPEND_FLAGS=${NVCC_APPEND_FLAGS:-}" > "$ccache_extra"
  export CCACHE_EXTRAFILES="$ccache_extra"
  echo "== $(ccache --version | head -n 1) in front of nvcc and c++, objects in $CCACHE_DIR"
else
  if [ -n "${FARM_CCACHE:-}" ]; then echo "== no ccache on PATH here: this build compiles every object itself"; fi
  export TORCH_NO_COMPILER_WRAPPER=1
fi
# The glibc floor: every extension this build links gets glibc_floor.o (beside this script), through LDFLAGS,
# which setuptools' link (torch's BuildExtension included) and the checkout's setup.py append. Compiled from
# its own folder under a relative name, so the object is the same wherever this runs.
floor_dir="$(mktemp -d)"
trap 'rm -rf "$floor_dir"' EXIT
(cd "$(dirname "${BASH_SOURCE[0]}")" && ${CC:-cc} -c -O2 -fPIC -o "$floor_dir/glibc_floor.o" glibc_floor.c) \
  || { echo "== could not compile $(dirname "${BASH_SOURCE[0]}")/glibc_floor.c with ${CC:-cc}"; exit 1; }
export LDFLAGS="${LDFLAGS:+$LDFLAGS }$floor_dir/glibc_floor.o"
echo "== glibc floor: LDFLAGS=$LDFLAGS"
# children_cpu sets $cpu: CPU seconds (user + sys) of this shell's finished children, from bash's
# `times`, called in this shell (in a $(...) subshell it would see no children).
children_cpu() {
  local out
  out="$(mktemp)"
  times > "$out"
  cpu="$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] } printf "%.1f", n }' "$out")"
  rm -f "$out"
}
# An empty FARM_TORCH_REQ: torch is provided already (a mounted torch volume on PYTHONPATH).
if [ -n "${FARM_TORCH_REQ:-}" ] && ! "$FARM_PYTHON" -m pip install "${torch_args[@]}" "$FARM_TORCH_REQ"; then
  echo "== could not install ${FARM_TORCH_REQ} (infrastructure)"
  exit 75
fi
# A cross build (FARM_TARGET_PYTHON: the emulated image's own Python) runs pip and setup.py on the build host's
# twin of that Python, natively, configured as the image's (_PYTHON_SYSCONFIGDATA_NAME, _PYTHON_HOST_PLATFORM);
# torch is read from its files here (importing it under emulation costs more than the compile), and the smoke
# test imports it.
if [ -n "${FARM_TARGET_PYTHON:-}" ]; then
  "$FARM_PYTHON" -c "import importlib.metadata as m, platform, sys, time; print(time.strftime('== %T'), 'torch', m.version('torch'), '(its files); pip and setup.py on', platform.machine(), sys.executable, 'for $FARM_TARGET_PYTHON')" || exit 1
else
  "$FARM_PYTHON" -c "import time, torch; print(time.strftime('== %T'), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip, 'cxx11abi', torch.compiled_with_cxx11_abi())" || exit 1
fi
mkdir -p "$FARM_OUT"
echo "== $(date +%T) pip wheel (MAX_JOBS=${MAX_JOBS:-}, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-})"
children_cpu
cpu_before="$cpu"
"$FARM_PYTHON" -m pip wheel --no-build-isolation --no-deps -v -w "$FARM_OUT" "$FARM_SRC" || { echo "== pip wheel failed"; exit 1; }
children_cpu
echo "== compile cpu: $(awk -v a="$cpu_before" -v b="$cpu" 'BEGIN { printf "%.1f", b - a }') s (pip wheel and its processes, user + sys)"
if [ -n "$ccache_log" ]; then
  echo "== ccache: $(grep -c -E '^(direct|preprocessed)_cache_hit$' "$ccache_log") hits, $(grep -c -x cache_miss "$ccache_log") misses"
  rm -f "$ccache_log" "$ccache_extra"
fi
ls -l "$FARM_OUT"
echo "== $(date +%T) done"
