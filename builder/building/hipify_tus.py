"""Hipify the CUDA kernel TUs of a csrc/ copy, in place; print the hipified TU paths as JSON.

Run as a script by a Python that has torch (any build: the CPU wheel carries
torch.utils.hipify too): ``python builder/building/hipify_tus.py CSRC_COPY``. builder/building/hip.py
calls it this way because the farm itself never imports torch. The call mirrors
what torch's BuildExtension does for a ROCm build (cpp_extension.CUDAExtension),
so the compile check sees the same sources a release build compiles.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: hipify_tus.py CSRC_COPY", file=sys.stderr)
        return 2
    csrc = Path(argv[0]).resolve()
    try:
        from torch.utils.hipify import hipify_python
    except ImportError as err:
        print(f"error: cannot import torch.utils.hipify ({err})", file=sys.stderr)
        return 3
    tus = sorted(str(p) for p in (csrc / "cuda").glob("*.cu"))
    chatter = io.StringIO()  # hipify prints every file it touches; keep stdout for the JSON
    with contextlib.redirect_stdout(chatter):
        result = hipify_python.hipify(
            project_directory=str(csrc),
            output_directory=str(csrc),
            header_include_dirs=[str(csrc)],
            includes=[str(csrc / "*")],
            extra_files=tus,
            show_detailed=True,
            is_pytorch_extension=True,
            hipify_extra_files_only=True,
        )
    out = []
    for tu in tus:
        res = result.get(tu)
        path = getattr(res, "hipified_path", None) or tu
        out.append(str(Path(path).relative_to(csrc)))
    json.dump({"tus": out, "log": chatter.getvalue()[-4000:]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
