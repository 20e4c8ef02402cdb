"""Reproducible builds: the one time a build may record, and how a wheel's zip is laid out.

``SOURCE_DATE_EPOCH`` comes from the source, never the clock (a checkout's HEAD commit time, an sdist's
``PKG-INFO`` mtime). :func:`stamp` gives a source snapshot that time; :func:`zip_entries` is the one zip
layout (one time, fixed order, normalised modes) that ``relabel.write_wheel`` writes.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

# The zip format cannot say anything before 1980-01-01 (UTC): the floor, and the time of a source
# that has no time of its own (a tree outside git, an sdist without PKG-INFO).
ZIP_FLOOR = 315532800


def checkout_epoch(repo: Path) -> int:
    """The committer time of REPO's HEAD (uncommitted edits do not move it: the inputs hash covers
    them); ZIP_FLOOR outside a git checkout."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%ct", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ZIP_FLOOR
    out = proc.stdout.strip()
    return max(ZIP_FLOOR, int(out)) if proc.returncode == 0 and out.isdigit() else ZIP_FLOOR


def sdist_epoch(tree: Path) -> int:
    """An unpacked sdist's time: its PKG-INFO's mtime, as the archive recorded it (patches never
    touch PKG-INFO; the files they edit get the clock's time, which :func:`stamp` then replaces).
    A tree without PKG-INFO: its newest file's, so call it before patching."""
    info = Path(tree) / "PKG-INFO"
    if info.is_file():
        return max(ZIP_FLOOR, int(info.stat().st_mtime))
    # an archive URL's or a git commit's tree has no PKG-INFO: its files carry the commit's time (GitHub's
    # tarballs, git archive); read before any patch touches them
    newest = max(
        (int(p.lstat().st_mtime) for p in Path(tree).rglob("*") if p.is_file() and not p.is_symlink()), default=0
    )
    return max(ZIP_FLOOR, newest)


def stamp(tree: Path, epoch: int) -> None:
    """Every file and folder under TREE (TREE last) gets mtime EPOCH, so nothing a compiler or
    packager reads from the file system carries the time the tree was copied or patched."""
    tree = Path(tree)
    for root, dirs, files in os.walk(tree, topdown=False):
        for name in files + dirs:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.utime(p, (epoch, epoch))
    os.utime(tree, (epoch, epoch))


def tree_epoch(tree: Path) -> int:
    """The epoch a stamped tree carries (its own mtime; the executors pass it to the build as
    SOURCE_DATE_EPOCH), floored to what a zip can hold."""
    return max(ZIP_FLOOR, int(Path(tree).stat().st_mtime))


def zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    """EPOCH (seconds, UTC) as a zip entry's date_time."""
    import time

    return time.gmtime(max(ZIP_FLOOR, int(epoch)))[:6]


def _order(name: str, info_dir: str) -> tuple:
    # Package files first, then the dist-info, RECORD last (as the wheel spec recommends), each
    # group by name: the order auditwheel's directory walk happened to give does not survive.
    if name == f"{info_dir}/RECORD":
        return (2, name)
    return (1 if name.startswith(info_dir + "/") else 0, name)


def zip_entries(infos: list[zipfile.ZipInfo], info_dir: str, date_time: tuple | None) -> list[zipfile.ZipInfo]:
    """Fresh entries for INFOS in a fixed order, with DATE_TIME (None: each keeps its own, for a
    rewrite of a wheel that is already reproducible) and a mode that says only file or executable
    (0644 / 0755: a builder's umask must not show)."""
    out = []
    for info in sorted(infos, key=lambda i: _order(i.filename, info_dir)):
        zi = zipfile.ZipInfo(info.filename, date_time=date_time or info.date_time)
        if info.filename.endswith("/"):
            zi.external_attr = (0o40755 << 16) | 0x10  # a folder (MS-DOS directory bit too)
        else:
            executable = (info.external_attr >> 16) & 0o111
            zi.external_attr = (0o100755 if executable else 0o100644) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zi.create_system = 3  # Unix, whatever host wrote it
        out.append(zi)
    return out
