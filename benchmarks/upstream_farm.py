"""Upstream's packages through the farm, against upstream's own build of the same patched sdist.

    .venv/bin/python benchmarks/upstream_farm.py                       # both projects
    .venv/bin/python benchmarks/upstream_farm.py --projects mamba-ssm

For each project, in one run, one build at a time, all in the farm's cu13 image (torch 2.14.1,
nvcc 13.0, sm_80, the recipe's patches), both cold:
1. baseline: upstream's own ``pip wheel --no-build-isolation`` of the patched sdist (the tree
   ``builder.sourcing.prepare`` makes for the cp311 cell, the recipe's env), with no compiler cache, in a
   container of the same image and torch volume: what a user who patches the sdist by hand runs.
2. the farm, cold: ``build --profile ci-upstream --only <project cp311>``, the image's ccache emptied
   first. Its wall covers everything the farm adds: prepare, auditwheel repair, the audits, the
   smoke test in a clean venv, the index.
3. the farm, the second Python: ``build --profile ci-upstream-cp312 --only <project cp312>``, which
   takes the cp311 build's nvcc objects from ccache.

Printed as JSON: wall and compile CPU of each (``== compile cpu:`` from build.sh, the same
measure for all three: user + sys of ``pip wheel`` and everything it ran), the ratios farm/baseline
and cp312/cp311, the ccache hits and misses, and the wheel sizes (baseline raw, farm repaired).
The farm's images and torch volumes are made before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.building.images.engine import connect  # noqa: E402
from builder.building.executors import KERNEL_CACHE_MOUNT, BuildOptions, kernel_cache_name, spec_env  # noqa: E402
from builder.building.executors.docker import DockerExecutor  # noqa: E402
from builder.planning.plan import load_plan  # noqa: E402
from builder.planning.recipes import CellFacts, recipe_for  # noqa: E402
from builder.sourcing.prepare import prepare  # noqa: E402

PROFILES = {"3.11": "ci-upstream", "3.12": "ci-upstream-cp312"}
CPU_LINE = re.compile(r"^== compile cpu: ([\d.]+) s", re.M)
CCACHE_LINE = re.compile(r"^== ccache: (\d+) hits, (\d+) misses", re.M)


def plan_for(python: str):
    return load_plan(profile=PROFILES[python])


def spec_for(project: str, python: str):
    (spec,) = [b for b in plan_for(python).builds if b.project == project]
    return spec


def farm_build(spec, python: str, dist: Path, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "builder", "build", "--profile", PROFILES[python], "--only", spec.id,
           "--executor", "docker", "--jobs", "1", "--dist", str(dist), *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"farm build of {spec.id} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    log = (dist / "logs" / f"{spec.id}.log").read_text(errors="replace")
    (wheel,) = (dist / "wheels").glob("*.whl")
    hits = CCACHE_LINE.search(log)
    return {
        "wall_s": round(wall, 1),
        "compile_cpu_s": float(CPU_LINE.search(log).group(1)),
        "ccache_hits": int(hits.group(1)) if hits else None,
        "ccache_misses": int(hits.group(2)) if hits else None,
        "wheel": wheel.name,
        "wheel_mb": round(wheel.stat().st_size / 1e6, 2),
    }


def toolchain(client, spec) -> tuple[str, str]:
    """SPEC's image tag and torch volume as its farm build will use them, made (or found) before anything is timed."""
    ex = DockerExecutor(client, BuildOptions(log=lambda _: None))
    ex.prepare(plan_for(spec.python).images, [spec])
    with tempfile.TemporaryDirectory() as tmp:
        volume, failed = ex._torch_volume(spec, Path(tmp) / "torch.log", 1800)
    if failed:
        sys.exit(f"torch for {spec.id}: {failed.reason}")
    return ex.tags[spec.image], volume


def empty_ccache(client, tag: str, spec) -> None:
    client.containers.run(tag, ["rm", "-rf", f"{KERNEL_CACHE_MOUNT}/ccache"], remove=True,
                          volumes={kernel_cache_name(spec.image): {"bind": KERNEL_CACHE_MOUNT, "mode": "rw"}})  # fmt: skip


def baseline(client, tag: str, torch_volume: str, spec, work: Path, max_jobs: int) -> dict:
    """Upstream's own `pip wheel` of the patched tree, through build.sh without ccache (it times the same way)."""
    tree = prepare(recipe_for(spec.project, ROOT / "recipes"), CellFacts.from_spec(spec), work / "prep").tree
    out = work / "out"
    out.mkdir()
    env = {k: v for k, v in spec_env(spec, max_jobs=max_jobs).items() if k != "FARM_CCACHE"}
    env.update(FARM_PYTHON=f"/opt/python/{spec.python_tag}-{spec.python_tag}/bin/python", FARM_SRC="/src",
               FARM_OUT="/out", FARM_TORCH_REQ="", PYTHONPATH="/torch/site")  # fmt: skip
    t0 = time.perf_counter()
    container = client.containers.run(
        tag, ["bash", "/farm/build.sh"], environment=env, detach=True, working_dir="/src",
        volumes={str(tree): {"bind": "/src", "mode": "rw"}, str(out): {"bind": "/out", "mode": "rw"},
                 str(ROOT / "builder" / "building" / "executors"): {"bind": "/farm", "mode": "ro"},
                 torch_volume: {"bind": "/torch", "mode": "ro"}},
    )  # fmt: skip
    code = container.wait()["StatusCode"]
    wall = time.perf_counter() - t0
    log = container.logs().decode(errors="replace")
    container.remove()
    (work / "baseline.log").write_text(log)
    if code != 0:
        sys.exit(f"baseline pip wheel of {spec.project} failed ({code}):\n{log[-3000:]}")
    (wheel,) = out.glob("*.whl")
    return {
        "wall_s": round(wall, 1),
        "compile_cpu_s": float(CPU_LINE.search(log).group(1)),
        "wheel": wheel.name,
        "wheel_mb": round(wheel.stat().st_size / 1e6, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--projects", nargs="+", default=["causal-conv1d", "mamba-ssm"])
    ap.add_argument("--max-jobs", type=int, default=2, help="MAX_JOBS of every build (the farm's default here: the cores)")
    args = ap.parse_args()
    client = connect()
    work = Path(tempfile.mkdtemp(prefix="upstream-farm-"))
    report: dict = {"work": str(work), "max_jobs": args.max_jobs}
    for project in args.projects:
        first, second = spec_for(project, "3.11"), spec_for(project, "3.12")
        (tag, volume), _ = toolchain(client, first), toolchain(client, second)
        res: dict = {}
        empty_ccache(client, tag, first)
        res["baseline_upstream_pip_wheel"] = baseline(client, tag, volume, first, work / f"{project}-baseline", args.max_jobs)
        empty_ccache(client, tag, first)
        res["farm_cp311_cold"] = farm_build(first, "3.11", work / f"{project}-cp311")
        res["farm_cp312_after_cp311"] = farm_build(second, "3.12", work / f"{project}-cp312")
        base, cold, warm = res["baseline_upstream_pip_wheel"], res["farm_cp311_cold"], res["farm_cp312_after_cp311"]
        res["ratios"] = {
            "farm_wall / baseline_wall": round(cold["wall_s"] / base["wall_s"], 3),
            "farm_compile_cpu / baseline_compile_cpu": round(cold["compile_cpu_s"] / base["compile_cpu_s"], 3),
            "cp312_compile_cpu / cp311_compile_cpu": round(warm["compile_cpu_s"] / cold["compile_cpu_s"], 3),
            "cp312_wall / cp311_wall": round(warm["wall_s"] / cold["wall_s"], 3),
            "farm_wheel / baseline_wheel (size)": round(cold["wheel_mb"] / base["wheel_mb"], 3),
        }
        report[project] = res
        print(json.dumps({project: res}, indent=2), flush=True)
    (work / "report.json").write_text(json.dumps(report, indent=2))
    print(f"report: {work / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
