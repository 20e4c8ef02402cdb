"""`pip install --no-build-isolation <sdist>`: prebuilt wheel from an index on 127.0.0.1 vs a source build.

    .venv/bin/python benchmarks/prebuilt.py [--repeat 1] [--json /tmp/mamba-ssm-prebuilt-bench.json]

Both installs run in the same fresh venv (torch as in the dev venv), from the same sdist, for the
same variant, in this run: the source build (MAMBA_FORCE_BUILD=TRUE) is the baseline, and the
figure is the ratio source / prebuilt. The wheel in the index is the real one setup.py builds
from that sdist, indexed by builder.index.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from indexkit import serve
from sdistkit import COMPILE_MARK, PREBUILT_MARK, build_wheel, install_sdist, make_sdist, torch_venv

from builder.index import build_index
from mamba_ssm import _variant


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
    p, s = statistics.median(prebuilt), statistics.median(source)
    doc = {
        "variant": _variant.detect().key,
        "wheel": wheel.name,
        "prebuilt_install_s": round(p, 2),
        "source_install_s": round(s, 2),
        "source_over_prebuilt": round(s / p, 1),
        "repeat": args.repeat,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"variant {doc['variant']}: prebuilt install {p:.1f} s, source build install {s:.1f} s "
          f"-> prebuilt is {s / p:.1f}x faster (median of {args.repeat}; {args.json})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
