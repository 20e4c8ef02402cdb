"""What the rehearsal's stand-ins for GitHub's and PyPI's services were given, one JSON line per call.

The actions ``attest-build-provenance``, ``deploy-pages`` and ``gh-action-pypi-publish`` need OIDC tokens and
GitHub's or PyPI's APIs, none of which a rehearsal under act can reach. Their stand-ins (``actions/*/action.yml``
here) run this instead: it appends to ``$REHEARSAL_RECORDS/calls.jsonl`` what the step was given (with each
file's sha256) and does the part a user would see locally (``pages``: the deployed site, ``pypi``: the uploaded
files). Standard library only: the runner's Python runs it.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
import zipfile
from pathlib import Path


def _records() -> Path:
    path = os.environ.get("REHEARSAL_RECORDS")
    if not path:
        sys.exit("stand-in: REHEARSAL_RECORDS is not set (run the workflow through `python -m builder rehearse`)")
    return Path(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(patterns: str) -> list[Path]:
    found = []
    for line in patterns.splitlines():
        if line.strip():
            found += [Path(p) for p in sorted(glob.glob(line.strip())) if Path(p).is_file()]
    return found


def attest(subject_path: str) -> dict:
    subjects = _files(subject_path)
    if not subjects:
        sys.exit(f"stand-in attest-build-provenance: subject-path {subject_path!r} matches no file")
    return {"subjects": {p.name: _sha256(p) for p in subjects}}


def pages() -> dict:
    """The site GitHub Pages would serve: the run's github-pages artifact (a zip holding artifact.tar)."""
    zips = sorted(Path(os.environ["REHEARSAL_ARTIFACTS"]).glob(f"{os.environ['GITHUB_RUN_ID']}/github-pages/*.zip"))
    if not zips:
        sys.exit("stand-in deploy-pages: this run uploaded no github-pages artifact")
    with zipfile.ZipFile(zips[-1]) as z:
        tar = z.read("artifact.tar")
    site = _records() / "pages"
    shutil.rmtree(site, ignore_errors=True)  # each deployment replaces the whole site, as on Pages
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(site, filter="data")
    url = os.environ.get("REHEARSAL_PAGE_URL", "")
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        out.write(f"page_url={url}\n")
    return {"site": sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()), "page_url": url}


def pypi(packages_dir: str) -> dict:
    files = sorted(p for p in Path(packages_dir).iterdir() if p.is_file())
    if not files:
        sys.exit(f"stand-in gh-action-pypi-publish: nothing in {packages_dir}")
    dest = _records() / "pypi"
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        if (dest / f.name).exists():  # PyPI never takes a file name twice
            sys.exit(f"stand-in gh-action-pypi-publish: {f.name} was already uploaded")
        shutil.copyfile(f, dest / f.name)
    return {"files": {p.name: _sha256(p) for p in files}}


def main(argv: list[str]) -> None:
    kind, *args = argv
    result = {"attest": attest, "pages": pages, "pypi": pypi}[kind](*args)
    entry = {"kind": kind, "time": time.time_ns(), "ref": os.environ.get("GITHUB_REF"), **result}
    _records().mkdir(parents=True, exist_ok=True)
    with open(_records() / "calls.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    print(f"stand-in {kind}: recorded in {_records() / 'calls.jsonl'}")


if __name__ == "__main__":
    main(sys.argv[1:])
