"""Build an upstream project from its recipe, once, the way phase 2's executors will: a real check of the recipe.

    .venv/bin/python benchmarks/upstream_recipe.py causal-conv1d            # sm_80, torch 2.14.1, nvcc 13.0
    .venv/bin/python benchmarks/upstream_recipe.py mamba-ssm --archs sm_80 --max-jobs 2

builder.prepare makes the patched tree and the env from recipes/<project>.toml (the sdist is
fetched through the host's pip settings and hash-checked); then `pip wheel --no-build-isolation
--no-deps` runs in the cached torch 2.14.1 venv of tests/cudakit.py with /usr/local/cuda-13.0's nvcc.
Printed: wall, CPU (the whole process tree), peak RSS, the wheel's name and size, the extension
modules the recipe's [verify] globs find in it, their SASS/PTX archs, and the [test] imports run in
the same venv (a CUDA torch imports without a GPU).

Measured here on 2026-12-01 (2 cores shared with other builds, load about 10; MAX_JOBS=1, ninja):
causal-conv1d 1.7.0, sm_80, patches cxx20 + cuda-archs: 406 s CPU (23 min wall under that load),
2.3 GB peak RSS, a 24.7 MB wheel whose causal_conv1d_cuda*.so holds SASS for sm_80 only and no PTX;
its [test] imports pass. mamba-ssm 2.3.2.post1, sm_80, same patches: 702 s CPU (13.4 min wall, less
load), 1.55 GB peak RSS, a 39.2 MB wheel, selective_scan_cuda*.so with SASS sm_80 only, imports pass. The wheel's version comes out as setuptools normalizes it
(``1.7.0+cu13torch2.14cxx11abitrue``) and its ``Requires-Dist: torch`` is unpinned: relabelling
(builder/wheels.py) respells and pins it.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cudakit

from builder.prepare import prepare
from builder.recipes import CellFacts, recipe_for


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project")
    ap.add_argument("--archs", default="sm_80")
    ap.add_argument("--max-jobs", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None, help="keep the tree, wheel and log here (default: a temp dir)")
    args = ap.parse_args()

    venv = cudakit.torch_cuda_venv()
    recipe = recipe_for(args.project)
    facts = CellFacts(cudakit.TORCH, "cuda", "13.0", True, tuple(args.archs.split(",")), "cu13torch2.14cxx11abiTRUE")
    work = args.work or Path(tempfile.mkdtemp(prefix=f"recipe-{recipe.name}-"))
    prep = prepare(recipe, facts, work / "prep")
    out = work / "dist"
    out.mkdir(parents=True)
    env = prep.build_env()
    env.update(
        MAX_JOBS=str(args.max_jobs),
        CUDA_HOME=str(cudakit.NVCC.parent.parent),
        PATH=f"{venv / 'bin'}:{cudakit.NVCC.parent}:{env.get('PATH', '')}",
        PIP_NO_INPUT="1",
    )
    cmd = [
        str(venv / "bin" / "pip"),
        "wheel",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        str(out),
        str(prep.tree),
    ]
    rc, wall, cpu, rss = cudakit.run_measured(cmd, env, prep.tree, work / "build.log")
    wheels = sorted(out.glob("*.whl"))
    report: dict = {"project": recipe.name, "patches": list(prep.applied), "rc": rc, "wall_s": round(wall, 1),
                    "cpu_s": round(cpu, 1), "peak_rss_mb": round(rss), "log": str(work / "build.log")}  # fmt: skip
    if rc == 0 and wheels:
        wheel = wheels[0]
        report |= {"wheel": wheel.name, "wheel_mb": round(wheel.stat().st_size / 1e6, 2)}
        tree = cudakit.unpack(wheel, work / "unpacked")
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        exts = [n for n in names if any(fnmatch.fnmatch(n, g) for g in recipe.extensions)]
        report["extensions"] = {e: [sorted(s) for s in cudakit.embedded_archs(venv, tree / e)] for e in exts}
        site = work / "site"
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       check=True, env=env)  # fmt: skip
        probe = "; ".join(f"import {m}" for m in recipe.imports)
        smoke = subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=False, cwd="/", capture_output=True, text=True,
                               env={**env, "PYTHONPATH": str(site)})  # fmt: skip
        report["imports"] = "ok" if smoke.returncode == 0 else smoke.stderr[-1500:]
    else:
        report["log_tail"] = (work / "build.log").read_text(errors="replace")[-3000:]
    print(json.dumps(report, indent=2))
    return 0 if rc == 0 and report.get("imports") == "ok" else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
