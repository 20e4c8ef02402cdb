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
# An empty FARM_TORCH_REQ: torch is provided already (a mounted torch volume on PYTHONPATH).
if [ -n "${FARM_TORCH_REQ:-}" ] && ! "$FARM_PYTHON" -m pip install "${torch_args[@]}" "$FARM_TORCH_REQ"; then
  echo "== could not install ${FARM_TORCH_REQ} (infrastructure)"
  exit 75
fi
"$FARM_PYTHON" -c "import time, torch; print(time.strftime('== %T'), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip, 'cxx11abi', torch.compiled_with_cxx11_abi())" || exit 1
mkdir -p "$FARM_OUT"
echo "== $(date +%T) pip wheel (MAX_JOBS=${MAX_JOBS:-}, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-})"
"$FARM_PYTHON" -m pip wheel --no-build-isolation --no-deps -v -w "$FARM_OUT" "$FARM_SRC" || { echo "== pip wheel failed"; exit 1; }
ls -l "$FARM_OUT"
echo "== $(date +%T) done"
