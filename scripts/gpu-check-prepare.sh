#!/usr/bin/env bash
# Prepare the GPU check HERE, on a build machine with no GPU: everything the
# device run needs goes into .gpu/ (ignored by git, carried to the device):
#   - our stable-ABI CUDA 13 wheel for sm_80 + sm_90 (cp310-abi3, torch>=2.10), built by
#     setup.py against torch 2.14.1 with nvcc 13.0, as tests/test_stable_abi.py builds it;
#   - upstream's pinned sdist, mamba_ssm==2.3.2.post1, its sha256 checked, and its
#     arch-list patch tried on a scratch copy (a patch that no longer applies stops here).
# Then it prints the one device command. Usage:
#   PYTHON=/path/to/dev-venv/bin/python bash scripts/gpu-check-prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
GPU=.gpu
ARCHS="8.0;9.0"                          # MAMBA_CUDA_ARCHS syntax; the H200 is sm_90
UPSTREAM=mamba_ssm==2.3.2.post1
start=$(date +%s)

mkdir -p "$GPU"
# The wheel and the sdist are replaced, never mixed with older ones (the device installs .gpu/*.whl).
rm -f "$GPU"/mamba_ssm-*.whl "$GPU"/mamba_ssm-*.tar.gz

echo "prepare: building our stable-ABI CUDA 13 wheel for $ARCHS (torch 2.14.1, nvcc 13.0)"
MAMBA_STABLE_ABI=TRUE "$PYTHON" - "$GPU" "$ARCHS" <<'EOF'
import os, re, sys, tempfile, zipfile
from pathlib import Path

sys.path.insert(0, "tests")
import cudakit

out, archs = Path(sys.argv[1]), sys.argv[2]
os.environ.setdefault("MAMBA_KERNEL_CACHE", str(cudakit.CACHE / "gpu-check-kernels"))  # reruns skip nvcc
venv = cudakit.torch_cuda_venv()
with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    build = cudakit.build_wheel(venv, cudakit.stage_source(tmp / "src"), tmp / "dist", archs,
                                max_jobs=int(os.environ.get("MAX_JOBS", "2")))
    if build.returncode != 0 or build.wheel is None:
        sys.exit(f"prepare: the wheel build failed (exit {build.returncode}):\n{build.log[-4000:]}")
    wheel = build.wheel
    # What the device relies on: abi3 for any Python >= 3.10, torch >= 2.10 (it has 2.11), sm_90 SASS.
    if not re.search(r"\+cu13torchstable-cp310-abi3-linux_x86_64\.whl$", wheel.name):
        sys.exit(f"prepare: {wheel.name} is not a cu13torchstable cp310-abi3 wheel")
    with zipfile.ZipFile(wheel) as zf:
        meta = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    if "Requires-Dist: torch>=2.10" not in meta.splitlines():
        sys.exit(f"prepare: {wheel.name} does not require torch>=2.10")
    so = cudakit.extension_so(cudakit.unpack(wheel, tmp / "x"))
    sass, ptx = cudakit.embedded_archs(venv, so)
    if sass != {"sm_80", "sm_90"}:
        sys.exit(f"prepare: {so.name} holds SASS for {sorted(sass)}, expected sm_80 and sm_90")
    kernels = cudakit.registered_kernels(venv, so)
    if not all(k["CUDA"] for k in kernels.values()):
        sys.exit(f"prepare: {so.name} registers no CUDA kernel: {kernels}")
    (out / wheel.name).write_bytes(wheel.read_bytes())
    print(f"prepare: {out / wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB, SASS {sorted(sass)}, "
          f"{build.wall_s:.0f} s)")
EOF

echo "prepare: downloading upstream's sdist $UPSTREAM"
# --no-build-isolation and MAMBA_SKIP_CUDA_BUILD: pip reads the sdist's metadata without torch or nvcc work.
MAMBA_SKIP_CUDA_BUILD=TRUE "$PYTHON" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
  "$UPSTREAM" -d "$GPU"
"$PYTHON" benchmarks/upstream_sdist.py check "$GPU"

echo "prepare: done in $(( $(date +%s) - start )) s; $GPU holds $(du -sh "$GPU" | cut -f1):"
ls -l "$GPU"
cat <<'EOF'

The device run (the `run` tool; about 6 minutes of its 10):
  command:   bash scripts/gpu-check.sh
  carry:     [".gpu"]
  timeout_s: 540
It writes results.json, results.md, nvidia-smi.txt, resource-usage.txt, upstream-build.log
and log.txt to $OUT.
EOF
