"""A stand-in for the GitHub CLI's ``gh release`` and ``gh pr`` commands, for workflows rehearsed under act.

Releases live in ``$GH_STANDIN_HOME/<owner>/<repo>/releases/download/<tag>/``, laid out as GitHub serves
assets; pull requests in ``pulls.json``; every call is appended to ``calls.jsonl``. Standard library only.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def _home() -> Path:
    home = os.environ.get("GH_STANDIN_HOME")
    if not home:
        _fail("gh (rehearsal stand-in): GH_STANDIN_HOME is not set", 4)
    return Path(home)


def _repo_dir() -> Path:
    repo = os.environ.get("GH_REPO", "") or _origin_repo()
    if repo.count("/") != 1 or not all(repo.split("/")):
        _fail(f"gh (rehearsal stand-in): GH_REPO must be OWNER/REPO, got {repo!r}", 4)
    return _home() / repo / "releases" / "download"


def _origin_repo() -> str:
    """OWNER/REPO of the checkout's github.com origin, as gh reads it without GH_REPO (drift.yml's PR job)."""
    url = subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True, text=True, check=False).stdout
    url = url.strip().removesuffix(".git")
    return url.split("github.com/", 1)[1] if "github.com/" in url else ""


def _release(tag: str) -> Path:
    return _repo_dir() / tag


def _meta(tag: str) -> dict:
    return json.loads((_release(tag) / "release.json").read_text())


def cmd_list(args) -> None:
    base = _repo_dir()
    releases = [_meta(p.name) for p in base.iterdir() if (p / "release.json").exists()] if base.is_dir() else []
    releases = [r for r in releases if not (args.exclude_drafts and r.get("draft"))]
    releases.sort(key=lambda r: r["createdAt"], reverse=True)  # newest first, as gh lists them
    rows = [{"tagName": r["tagName"]} for r in releases[: args.limit]]
    if args.json != "tagName" or args.jq != ".[].tagName":
        _fail("gh (rehearsal stand-in): release list supports only --json tagName --jq '.[].tagName'", 2)
    for row in rows:
        print(row["tagName"])


def cmd_view(args) -> None:
    if not (_release(args.tag) / "release.json").exists():
        _fail("release not found")
    print(json.dumps(_meta(args.tag)))


def cmd_create(args) -> None:
    if (_release(args.tag) / "release.json").exists():
        _fail(f"a release with the same tag name already exists: {args.tag}")
    if args.verify_tag:
        repo = os.environ.get("GH_STANDIN_GIT", ".")
        found = subprocess.run(["git", "-C", repo, "rev-parse", "-q", "--verify", f"refs/tags/{args.tag}"],
                               capture_output=True, check=False)  # fmt: skip
        if found.returncode != 0:
            _fail(f"tag {args.tag} doesn't exist in the repo, aborting due to --verify-tag flag")
    notes = Path(args.notes_file).read_text() if args.notes_file else ""
    _release(args.tag).mkdir(parents=True)
    meta = {"tagName": args.tag, "name": args.title, "body": notes, "draft": False, "createdAt": time.time_ns()}
    (_release(args.tag) / "release.json").write_text(json.dumps(meta, indent=1))


def cmd_upload(args) -> None:
    dest = _release(args.tag)
    if not (dest / "release.json").exists():
        _fail("release not found")
    for f in map(Path, args.files):
        if not f.is_file():
            _fail(f"{f}: no such file")
        if (dest / f.name).exists() and not args.clobber:
            _fail(f"asset under the same name already exists: [{f.name}]")
        shutil.copyfile(f, dest / f.name)


def cmd_download(args) -> None:
    src = _release(args.tag)
    if not (src / "release.json").exists():
        _fail("release not found")
    names = [p.name for p in sorted(src.iterdir()) if p.name != "release.json"]
    hits = [n for n in names if any(fnmatch.fnmatch(n, pat) for pat in args.pattern or ["*"])]
    if not hits:
        _fail("no assets match the file pattern")
    out = Path(args.dir or ".")
    out.mkdir(parents=True, exist_ok=True)
    for n in hits:
        shutil.copyfile(src / n, out / n)


def _pulls_file() -> Path:
    return _repo_dir().parent.parent / "pulls.json"  # $GH_STANDIN_HOME/<owner>/<repo>/pulls.json


def _pulls() -> list[dict]:
    path = _pulls_file()
    return json.loads(path.read_text()) if path.exists() else []


def _save_pulls(pulls: list[dict]) -> None:
    _pulls_file().parent.mkdir(parents=True, exist_ok=True)
    _pulls_file().write_text(json.dumps(pulls, indent=1))


def cmd_pr_list(args) -> None:
    if args.json != "number" or args.jq != "length":
        _fail("gh (rehearsal stand-in): pr list supports only --json number --jq length", 2)
    print(len([p for p in _pulls() if p["head"] == args.head and p["state"] == args.state]))


def cmd_pr_create(args) -> None:
    pulls = _pulls()
    if any(p["head"] == args.head and p["state"] == "open" for p in pulls):
        _fail(f'a pull request for branch "{args.head}" into branch "{args.base}" already exists')
    body = Path(args.body_file).read_text()
    pulls.append({"number": len(pulls) + 1, "head": args.head, "base": args.base, "title": args.title, "body": body,
                  "state": "open", "edits": 0})  # fmt: skip
    _save_pulls(pulls)
    print(f"https://github.com/{os.environ.get('GH_REPO')}/pull/{len(pulls)}")


def cmd_pr_edit(args) -> None:
    pulls = _pulls()
    hits = [p for p in pulls if p["head"] == args.pr and p["state"] == "open"]
    if not hits:
        _fail(f'no pull requests found for branch "{args.pr}"')
    hits[0]["body"] = Path(args.body_file).read_text()
    hits[0]["edits"] += 1
    _save_pulls(pulls)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gh")
    top = p.add_subparsers(dest="group", required=True)
    release = top.add_parser("release").add_subparsers(dest="command", required=True)
    q = release.add_parser("list")
    q.add_argument("--exclude-drafts", action="store_true")
    q.add_argument("--limit", type=int, default=30)
    q.add_argument("--json", default="")
    q.add_argument("--jq", default="")
    q.set_defaults(func=cmd_list)
    q = release.add_parser("view")
    q.add_argument("tag")
    q.set_defaults(func=cmd_view)
    q = release.add_parser("create")
    q.add_argument("tag")
    q.add_argument("--verify-tag", action="store_true")
    q.add_argument("--title", default="")
    q.add_argument("--notes-file")
    q.set_defaults(func=cmd_create)
    q = release.add_parser("upload")
    q.add_argument("tag")
    q.add_argument("files", nargs="+")
    q.add_argument("--clobber", action="store_true")
    q.set_defaults(func=cmd_upload)
    q = release.add_parser("download")
    q.add_argument("tag")
    q.add_argument("--dir")
    q.add_argument("--pattern", action="append")
    q.set_defaults(func=cmd_download)
    pr = top.add_parser("pr").add_subparsers(dest="command", required=True)
    q = pr.add_parser("list")
    q.add_argument("--head", required=True)
    q.add_argument("--state", default="open")
    q.add_argument("--json", default="")
    q.add_argument("--jq", default="")
    q.set_defaults(func=cmd_pr_list)
    q = pr.add_parser("create")
    q.add_argument("--head", required=True)
    q.add_argument("--base", required=True)
    q.add_argument("--title", required=True)
    q.add_argument("--body-file", required=True)
    q.set_defaults(func=cmd_pr_create)
    q = pr.add_parser("edit")
    q.add_argument("pr", help="the PR's head branch (as drift.yml names it)")
    q.add_argument("--body-file", required=True)
    q.set_defaults(func=cmd_pr_edit)
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    with open(_home() / "calls.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "repo": os.environ.get("GH_REPO"), "time": time.time_ns(),
                              "token": bool(os.environ.get("GH_TOKEN"))}) + "\n")  # fmt: skip
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
