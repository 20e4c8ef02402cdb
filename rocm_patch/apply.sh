#!/usr/bin/env bash
# Make a ROCm installation fit for the HIP kernels; the ROCm images run it while they are built.
#   apply.sh ROCM_HOME [VERSION]     VERSION defaults to what hipconfig (or ROCM_HOME/.info/version) reports
# ROCm < 6.0: refused (exit 3). ROCm 6.0: rocm6_0.patch applied to amd_hip_bf16.h (once).
# Anything newer: nothing to do.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${1:?usage: apply.sh ROCM_HOME [VERSION]}
version=${2:-}
if [[ -z $version ]]; then  # hipconfig on PATH, else the installation's own, else its version file
  version=$(hipconfig --version 2>/dev/null || "$root/bin/hipconfig" --version 2>/dev/null || cat "$root/.info/version" 2>/dev/null || true)
fi
if [[ ! $version =~ ^([0-9]+)\.([0-9]+) ]]; then
  echo "error: cannot tell the ROCm version of ${root} (no hipconfig, no .info/version; got '${version}'); pass it: apply.sh ${root} 6.2" >&2
  exit 2
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

if (( major < 6 )); then
  echo "error: ROCm ${major}.${minor} is too old: mamba-ssm's HIP kernels need ROCm >= 6.0; build FROM a ROCm 6.0+ image (AMD's rocm/dev-ubuntu-22.04:6.x)" >&2
  exit 3
fi

if (( major == 6 && minor == 0 )); then
  patch_file=$here/rocm6_0.patch
  # Already fixed (a later 6.0.x, or a re-run): the reverse applies cleanly; leave it be.
  if patch -p1 -R --dry-run --silent --force -d "$root" < "$patch_file" > /dev/null 2>&1; then
    echo "ROCm ${major}.${minor}: amd_hip_bf16.h already has the fix"
  else
    patch -p1 --forward -d "$root" < "$patch_file"
    echo "ROCm ${major}.${minor}: applied $(basename "$patch_file")"
  fi
else
  echo "ROCm ${major}.${minor}: no header patch needed"
fi
