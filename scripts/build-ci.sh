#!/usr/bin/env bash
# The farm's main job, on a Debian/Ubuntu host as root, from a fresh clone or again: the set-up
# (scripts/setup.sh), then `nox -s build_matrix -- --profile ci` (each wheel of the ci profile built,
# verified, smoke-tested and indexed into dist/; a rerun builds only what changed), then the pip
# commands that install from that local index, one per variant. Arguments go to the build
# (`--dist DIR`, `--executor host`, `--only ID`).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

step build_matrix .venv/bin/nox -s build_matrix -- --profile ci "$@"

dist=dist
while (($#)); do
  case $1 in
    --dist) dist=$2; shift 2 ;;
    --dist=*) dist=${1#--dist=}; shift ;;
    *) shift ;;
  esac
done
echo
echo "Installed from the local index $dist/index, next to the torch each was built for:"
# The commands the index's own pages and `builder resolve` print (exact version, variant page), for its wheels.
.venv/bin/python - "$dist/index" <<'PY'
import os
import sys
from pathlib import Path

from builder.publishing.index.model import Manifest, install_command
from builder.publishing.resolve import load

doc, base = load(Path(os.path.abspath(sys.argv[1])).as_uri())  # the index link itself: a rerun swaps what it points to
manifest = Manifest.from_json(doc)
# One command serves every Python of a variant (pip picks the wheel for its own): each printed once.
lines = {install_command(entry, entry.key, base): None for entry in sorted(manifest.files.values(), key=lambda e: e.filename)}
print("\n".join(f"  {line}" for line in lines))
PY
