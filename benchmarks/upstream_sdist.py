"""Upstream mamba-ssm's pinned sdist, to build its selective_scan_cuda beside ours (benchmarks/gpu_check.py).

    python benchmarks/upstream_sdist.py check DIR                  # DIR holds the sdist: hash checked, patch tried
    python benchmarks/upstream_sdist.py unpack DIR DEST --archs 90 # hash checked, unpacked, patched; prints the tree

The patch is the one the farm's recipes make: upstream's setup.py hard-codes its
-gencode list by nvcc version (sm_75 ... sm_121 for CUDA 13); it is replaced by the
architectures asked for. The sdist is pinned by hash, so the patch matches its text
exactly, and fails loudly the day that text changes.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tarfile
import tempfile
from pathlib import Path

PIN = "mamba_ssm==2.3.2.post1"
FILENAME = "mamba_ssm-2.3.2.post1.tar.gz"
SHA256 = "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"

# upstream setup.py, from the first hard-coded -gencode to the last (CUDA 13's sm_121)
_GENCODE_BLOCK = re.compile(
    r'(?P<indent>[ \t]*)cc_flag\.append\("-gencode"\)\n\s*cc_flag\.append\("arch=compute_75,code=sm_75"\)\n'
    r'.*?cc_flag\.append\("arch=compute_121,code=sm_121"\)\n',
    re.DOTALL,
)


class SdistError(Exception):
    """A problem with the sdist or its patch, said in one line with the fix."""


def sdist_path(folder: Path) -> Path:
    path = Path(folder) / FILENAME
    if not path.is_file():
        raise SdistError(f"{path} is missing: run scripts/gpu-check-prepare.sh (pip download {PIN})")
    return path


def verify(path: Path) -> None:
    got = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if got != SHA256:
        raise SdistError(f"{path}: sha256 {got}, expected {SHA256} ({PIN}); delete it and download it again")


def unpack(path: Path, dest: Path) -> Path:
    """Extract the sdist under dest; returns its source root (dest/mamba_ssm-<version>)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tf:
        tf.extractall(dest, filter="data")
    root = dest / FILENAME.removesuffix(".tar.gz")
    if not (root / "setup.py").is_file():
        raise SdistError(f"{path}: no {root.name}/setup.py inside")
    return root


def patch_archs(setup_py: Path, archs: list[int]) -> None:
    """Replace upstream's hard-coded -gencode list by `archs` (SASS for each, as upstream builds them)."""
    text = setup_py.read_text()
    blocks = list(_GENCODE_BLOCK.finditer(text))
    if len(blocks) != 1:
        raise SdistError(
            f"{setup_py}: the patch no longer applies: expected one hard-coded -gencode block "
            f"(sm_75 ... sm_121), found {len(blocks)}; update benchmarks/upstream_sdist.py for this sdist"
        )
    indent = blocks[0].group("indent")
    lines = "".join(
        f'{indent}cc_flag.append("-gencode")\n{indent}cc_flag.append("arch=compute_{sm},code=sm_{sm}")\n'
        for sm in archs
    )
    patched = text[: blocks[0].start()] + lines + text[blocks[0].end() :]
    left = sorted(set(re.findall(r"arch=compute_(\d+)", patched)) - {str(sm) for sm in archs})
    if left:
        raise SdistError(f"{setup_py}: after the patch it still names compute_{left}; the patch is incomplete")
    setup_py.write_text(patched)


def gencode_archs(setup_py: Path) -> list[int]:
    """The architectures a setup.py's -gencode flags name, in order."""
    return [int(m) for m in re.findall(r'"arch=compute_(\d+),code=sm_\d+"', setup_py.read_text())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="check the sdist's hash and that the patch applies (on a scratch copy)")
    check.add_argument("folder", type=Path)
    up = sub.add_parser("unpack", help="check, unpack and patch the sdist; prints the source root")
    up.add_argument("folder", type=Path)
    up.add_argument("dest", type=Path)
    up.add_argument("--archs", default="90", help="space- or comma-separated SM numbers (default: 90)")
    args = ap.parse_args(argv)
    try:
        sdist = sdist_path(args.folder)
        verify(sdist)
        if args.cmd == "check":
            with tempfile.TemporaryDirectory() as tmp:
                root = unpack(sdist, Path(tmp))
                patch_archs(root / "setup.py", [90])
                print(f"upstream: {sdist} sha256 ok; the arch patch applies (-gencode sm_90 only)")
            return 0
        archs = [int(a) for a in re.split(r"[\s,;]+", args.archs.strip()) if a]
        root = unpack(sdist, args.dest)
        patch_archs(root / "setup.py", archs)
        print(root)
        return 0
    except SdistError as e:
        print(f"upstream: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
