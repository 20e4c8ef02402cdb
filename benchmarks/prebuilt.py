"""`pip install --no-build-isolation <sdist>`: prebuilt wheel from an index on 127.0.0.1 vs a source build.

    .venv/bin/python benchmarks/prebuilt.py [--repeat 1] [--json /tmp/mamba-ssm-prebuilt-bench.json]

Both installs run in the same fresh venv (torch as in the dev venv), from the same sdist, for the
same variant, in this run: the source build (MAMBA_FORCE_BUILD=TRUE) is the baseline, and the
figure is the ratio source / prebuilt. The wheel in the index is the real one setup.py builds
from that sdist, indexed by builder.publishing.index.

Also timed, in the same venv: telling the variant from torch's files (what setup.py does, three
times per install) against importing torch to ask it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from indexkit import serve
from sdistkit import COMPILE_MARK, PREBUILT_MARK, build_wheel, install_sdist, make_sdist, torch_venv

from builder.publishing.index import build_index
from mamba_ssm import variant as _variant


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="install pairs to time (each source build compiles)")
    ap.add_argument("--json", type=Path, default=Path("/tmp/mamba-ssm-prebuilt-bench.json"))
    args = ap.parse_args()
    if args.repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mamba-prebuilt-bench-") as tmp:
        tmp = Path(tmp)
        sdist = make_sdist(tmp / "sdist")
        wheel, _ = build_wheel(sdist, tmp / "wheels")
        build_index(tmp / "wheels", tmp / "index")
        py = torch_venv(tmp / "venv")
        prebuilt, source = [], []
        with serve(tmp / "index") as url:
            for _ in range(args.repeat):
                proc, s = install_sdist(py, sdist, MAMBA_WHEEL_INDEX=url)
                assert PREBUILT_MARK in proc.stdout + proc.stderr, "the prebuilt wheel was not used"
                prebuilt.append(s)
                proc, s = install_sdist(py, sdist, MAMBA_WHEEL_INDEX=url, MAMBA_FORCE_BUILD="TRUE")
                assert COMPILE_MARK in proc.stdout + proc.stderr, "the baseline did not compile"
                source.append(s)
            files_s, import_s = _variant_probe_times(py, args.repeat * 3)
    p, s = statistics.median(prebuilt), statistics.median(source)
    doc = {
        "variant": _variant.detect().key,
        "wheel": wheel.name,
        "prebuilt_install_s": round(p, 2),
        "source_install_s": round(s, 2),
        "source_over_prebuilt": round(s / p, 1),
        "variant_from_files_s": round(files_s, 3),
        "variant_by_import_s": round(import_s, 3),
        "import_over_files": round(import_s / files_s, 1),
        "repeat": args.repeat,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"variant {doc['variant']}: prebuilt install {p:.1f} s, source build install {s:.1f} s "
          f"-> prebuilt is {s / p:.1f}x faster (median of {args.repeat}; {args.json})")  # fmt: skip
    print(f"variant from torch's files {files_s * 1000:.0f} ms vs importing torch {import_s * 1000:.0f} ms "
          f"-> {import_s / files_s:.0f}x (each a fresh interpreter, median of {args.repeat * 3})")  # fmt: skip
    return 0


def _variant_probe_times(py: Path, n: int) -> tuple[float, float]:
    """Median wall time of a fresh interpreter that tells the variant from files, and one that imports torch."""
    probes = {
        "files": "from mamba_ssm import variant as V; V.detect_installed()",
        "import": "from mamba_ssm import variant as V; V.detect()",
    }
    times = {k: [] for k in probes}
    for _ in range(n):
        for name, code in probes.items():  # interleaved, so load changes hit both alike
            t0 = time.perf_counter()
            subprocess.run([str(py), "-c", code], cwd=ROOT, check=True, capture_output=True)
            times[name].append(time.perf_counter() - t0)
    return statistics.median(times["files"]), statistics.median(times["import"])


if __name__ == "__main__":
    sys.exit(main())
