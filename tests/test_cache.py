"""builder/environments/store.py: the smoke-test torch venvs share files across Pythons, fit a budget (least recently
used out first, never one a running smoke test holds), and a run says before it starts when it would not fit.
Real files, hard links and `python -m builder cache` on a farm cache made in tmp (never the machine's own)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from filelock import FileLock

from builder.environments import store

MB = 1 << 20


def make_venv(root: Path, py: str, torch: str, files: dict[str, bytes], used: float) -> Path:
    """A complete torch venv laid out as builder/verifying/wheels.py makes them: smoke/<cpXY>-torch<v>/torch-envs/py<v>-<h>."""
    tag = "cp" + py.replace(".", "")
    venv = root / f"{tag}-torch{torch}" / "torch-envs" / f"py{py}.1-0123456789"
    for rel, data in files.items():
        p = venv / "lib" / f"python{py}" / "site-packages" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (venv / ".complete").write_text(f"torch=={torch}\n")
    (venv / ".last-used").touch()
    os.utime(venv / ".last-used", (used, used))
    return venv


def blob(seed: str, size: int = 2 * MB) -> bytes:
    import hashlib

    return hashlib.shake_256(seed.encode()).digest(size)


def test_pythons_of_one_torch_share_their_identical_files(tmp_path):
    shared = {"nvidia/cu13/lib/libcublas.so.13": blob("cublas"), "torch/lib/libtorch_cuda.so": blob("cuda")}
    a = make_venv(tmp_path, "3.11", "2.15.0", {**shared, "torch/_C.cpython-311.so": blob("c311")}, time.time())
    b = make_venv(tmp_path, "3.12", "2.15.0", {**shared, "torch/_C.cpython-312.so": blob("c312"),
                                                "torch/lib/libtorch_cpu.so": blob("other bytes")}, time.time())  # fmt: skip
    before = store.real_bytes([a, b])
    assert store.share(b, [a]) == 4 * MB  # the two identical files; the Python-specific and the differing ones stay
    after = store.real_bytes([a, b])
    assert before - after >= 4 * MB - 64 * 1024
    lib = b / "lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
    assert lib.stat().st_nlink == 2 and lib.read_bytes() == blob("cuda")
    assert (b / "lib/python3.12/site-packages/torch/lib/libtorch_cpu.so").stat().st_nlink == 1


def test_a_venv_removed_while_another_shares_its_files_is_passed_over(tmp_path, monkeypatch):
    """Builds on two workers: one venv's files are compared while another build's pip or the budget removes
    the venv they would link to. The sharing goes on with the next copy, and the new venv keeps its bytes."""
    lib = "torch/lib/libgomp.so.1"
    new = make_venv(tmp_path, "3.11", "2.14.1", {lib: blob("gomp")}, time.time())
    going = make_venv(tmp_path / "going", "3.12", "2.14.1", {lib: blob("gomp")}, time.time())
    staying = make_venv(tmp_path / "staying", "3.13", "2.14.1", {lib: blob("gomp")}, time.time())
    compare = store.filecmp.cmp

    def removed_midway(a, b, shallow=True):
        same = compare(a, b, shallow=shallow)
        if str(b).startswith(str(going)):
            Path(b).unlink()  # gone between the comparison and the link
        return same

    monkeypatch.setattr(store.filecmp, "cmp", removed_midway)
    assert store.share(new, [going, staying]) == 2 * MB
    mine = new / "lib/python3.11/site-packages" / lib
    assert mine.read_bytes() == blob("gomp")
    assert mine.stat().st_ino == (staying / "lib/python3.13/site-packages" / lib).stat().st_ino
    assert not list(mine.parent.glob(".*.link"))


def test_least_recently_used_go_first_until_the_budget_fits_and_a_held_one_stays(tmp_path):
    now = time.time()
    old = make_venv(tmp_path, "3.10", "2.12.1", {"x.so": blob("a")}, now - 300)
    held = make_venv(tmp_path, "3.11", "2.13.0", {"x.so": blob("b")}, now - 200)
    mid = make_venv(tmp_path, "3.11", "2.14.1", {"x.so": blob("c")}, now - 100)
    new = make_venv(tmp_path, "3.11", "2.15.0", {"x.so": blob("d")}, now)
    with FileLock(str(held.parent.parent) + ".lock"):  # a smoke test is using it right now
        removed = store.evict(5 * MB, keep={new}, root=tmp_path, log=lambda m: None)
    assert [e.path for e in removed] == [old, mid]
    assert [e.path for e in store.entries(tmp_path)] == [held, new]


def test_a_run_past_the_budget_says_so_before_it_starts(tmp_path, monkeypatch):
    make_venv(tmp_path, "3.11", "2.14.1", {"x.so": blob("a")}, time.time())
    monkeypatch.setenv("MAMBA_FARM_CACHE_BUDGET", "12G")
    cached = [("cp311", "2.14.1", True)]
    assert store.preflight(cached, root=tmp_path) is None
    two_pythons = [("cp311", "2.15.0", True), ("cp312", "2.15.0", True)]
    assert store.preflight(two_pythons, root=tmp_path) is None  # one torch: its Pythons share files
    three = two_pythons + [("cp311", "2.13.0", True), ("cp311", "2.12.1", True)]
    msg = store.preflight(three, root=tmp_path)
    assert msg and "4 torch venv(s) for 3 torch release(s)" in msg and "past the 12.0 GiB budget" in msg


def test_cache_command_shows_and_prunes_a_farm_cache(tmp_path, cli):
    root = tmp_path / "farm"
    make_venv(root / "smoke", "3.11", "2.14.1", {"x.so": blob("a")}, time.time() - 10)
    make_venv(root / "smoke", "3.12", "2.15.0", {"x.so": blob("b")}, time.time())

    def run(*args):
        return cli("cache", *args, env={"MAMBA_FARM_CACHE": str(root)}, timeout=60)

    shown = run()
    assert shown.returncode == 0 and "2 torch venv(s)" in shown.stdout and "(torch==2.15.0)" in shown.stdout
    pruned = run("prune", "--budget", "3M")
    assert pruned.returncode == 0 and "removed 1 torch venv(s)" in pruned.stdout, pruned.stdout + pruned.stderr
    assert "removed " in pruned.stdout and "cp311-torch2.14.1" in pruned.stdout  # the least recently used one, named
    assert [e.requirement for e in store.entries(root / "smoke")] == ["torch==2.15.0"]
    assert run("prune", "--all").returncode == 0 and store.entries(root / "smoke") == []
    bad = run("--budget", "lots")
    assert bad.returncode == 2 and "is not a size" in bad.stderr and "Traceback" not in bad.stderr


def make_layer(venv: Path, deps: list[str], files: dict[str, bytes], used: float) -> Path:
    """A dependency layer on top of VENV as layers.deps_layer makes them: <slot>/deps-envs/<venv name>-<hash>."""
    layer = venv.parent.parent / "deps-envs" / f"{venv.name}-0123456789ab"
    for rel, data in files.items():
        (layer / rel).parent.mkdir(parents=True, exist_ok=True)
        (layer / rel).write_bytes(data)
    (layer / ".complete").write_text((venv / ".complete").read_text() + "".join(d + "\n" for d in deps))
    (layer / ".last-used").touch()
    os.utime(layer / ".last-used", (used, used))
    return layer


def test_dependency_layers_count_against_the_budget_and_go_with_their_torch_venv(tmp_path, cli):
    """A recipe's declared dependencies sit in a layer on top of a torch venv (`[test] deps = true`): the cache
    shows and counts it, may drop it alone, and never leaves it behind when its torch venv goes."""
    root = tmp_path / "farm"
    now = time.time()
    old = make_venv(root / "smoke", "3.11", "2.14.1", {"x.so": blob("a")}, now - 30)
    old_layer = make_layer(old, ["einops", "transformers"], {"lib/t.so": blob("t")}, now)  # used last, its venv not
    new = make_venv(root / "smoke", "3.12", "2.15.0", {"x.so": blob("b")}, now - 20)
    new_layer = make_layer(new, ["einops"], {"lib/e.so": blob("e")}, now - 25)

    def run(*args):
        return cli("cache", *args, env={"MAMBA_FARM_CACHE": str(root)}, timeout=60)

    shown = run()
    assert shown.returncode == 0 and "4 torch venv(s), 8.0 MiB" in shown.stdout, shown.stdout
    assert "(torch==2.14.1 + einops, transformers)" in shown.stdout, shown.stdout
    # 8 MiB over a 5 MiB budget: the least recently used torch venv goes, and the layer on it with it
    pruned = run("prune", "--budget", "5M")
    assert pruned.returncode == 0 and not old.exists() and not old_layer.exists(), pruned.stdout
    assert new.exists() and new_layer.exists()
    # a layer alone may go (it is made again on demand); its torch venv stays
    assert run("prune", "--budget", "3M").returncode == 0 and new.exists() and not new_layer.exists()


@pytest.mark.parametrize(
    "text,value", [("40G", 40 << 30), ("500M", 500 << 20), ("1.5T", int(1.5 * (1 << 40))), ("123", 123)]
)
def test_sizes(text, value):
    assert store.parse_size(text) == value


def test_the_host_executors_build_venv_and_the_smoke_venv_of_one_torch_share_files(tmp_path, monkeypatch):
    from builder.facts import hostenv

    monkeypatch.setattr(hostenv, "CACHE_ROOT", tmp_path)
    lib = {"torch/lib/libtorch_cuda.so": blob("cuda"), "nvidia/cu13/lib/libcublas.so.13": blob("cublas")}
    smoke = make_venv(tmp_path / "smoke", "3.11", "2.15.0", lib, time.time())
    build = tmp_path / "venvs" / "cp311-torch2.15.0-cuda-13.0"
    for rel, data in lib.items():
        p = build / "lib" / "python3.11" / "site-packages" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    store.share_build_venv(build, log=lambda m: None)
    assert (build / ".mamba-farm-shared").exists()
    assert store.real_bytes([smoke, build]) < store.real_bytes([smoke]) + 64 * 1024
    assert store.build_venvs() == [build]


def test_prune_never_deletes_through_a_link_out_of_the_cache(tmp_path, cli):
    """People link caches to bigger disks: a slot, a torch-envs folder or a venv that is a link elsewhere is
    not the cache's: `prune --all` deletes nothing in the link's target."""
    root = tmp_path / "farm"
    elsewhere = tmp_path / "bigger-disk"
    mine = make_venv(root / "smoke", "3.11", "2.14.1", {"x.so": blob("a")}, time.time() - 30)
    slot = make_venv(elsewhere / "slot", "3.12", "2.15.0", {"x.so": blob("b")}, time.time() - 20)
    (root / "smoke" / "cp312-torch2.15.0").symlink_to(slot.parent.parent)  # the whole slot is a link
    envs = make_venv(elsewhere / "envs", "3.13", "2.15.0", {"x.so": blob("c")}, time.time() - 10)
    (root / "smoke" / "cp313-torch2.15.0").mkdir()
    (root / "smoke" / "cp313-torch2.15.0" / "torch-envs").symlink_to(envs.parent)  # its torch-envs is a link
    venv = make_venv(elsewhere / "venv", "3.10", "2.13.0", {"x.so": blob("d")}, time.time())
    (root / "smoke" / "cp310-torch2.13.0" / "torch-envs").mkdir(parents=True)
    (root / "smoke" / "cp310-torch2.13.0" / "torch-envs" / venv.name).symlink_to(venv)  # the venv is a link
    run = cli("cache", "prune", "--all", env={"MAMBA_FARM_CACHE": str(root)}, timeout=60)
    assert run.returncode == 0 and "removed 1 torch venv(s)" in run.stdout, run.stdout + run.stderr
    assert not mine.exists()
    for target in (slot, envs, venv):
        assert (target / "lib").is_dir() and (target / ".complete").is_file(), target
    assert run.stdout.count("never pruned") == 3, run.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "not-utf8"])
def test_a_complete_marker_that_is_not_a_small_file_is_refused_not_read(tmp_path, kind, cli):
    root = tmp_path / "farm"
    venv = make_venv(root / "smoke", "3.11", "2.14.1", {"x.so": blob("a")}, time.time())
    done = venv / ".complete"
    done.unlink()
    if kind == "fifo":
        os.mkfifo(done)
    elif kind == "dev-zero":
        done.symlink_to("/dev/zero")
    else:
        done.write_bytes(b"torch==\xff\xfe\x1b[2J")
    run = cli("cache", env={"MAMBA_FARM_CACHE": str(root)}, timeout=30)
    assert run.returncode == 0 and "0 torch venv(s)" in run.stdout, run.stdout + run.stderr
    assert "skipped, not a complete venv" in run.stderr and "Traceback" not in run.stderr
    assert "\x1b" not in run.stdout + run.stderr


@pytest.mark.parametrize("text", ["9" * 400, "1e400G", "inf", "nan", "-1G", "12G; rm -rf /"])
def test_a_size_that_is_not_one_is_a_usage_error(text):
    with pytest.raises(store.UsageError, match="is not a size"):
        store.parse_size(text)


def test_another_machines_dependency_layers_are_counted_and_pruned_on_their_own(tmp_path, cli):
    """An emulated smoke test's dependency layer (layers.foreign_deps_layer) sits in its own slot,
    <cpXY>-torch<v>-<machine>/deps-envs, next to no torch venv (its torch is the build's folder): the cache shows and
    counts it, prunes it alone, and a host torch venv of the same Python and torch never takes it with it."""
    root = tmp_path / "farm"
    now = time.time()
    host = make_venv(root / "smoke", "3.11", "2.11.0", {"x.so": blob("a")}, now)
    layer = root / "smoke" / "cp311-torch2.11.0-aarch64" / "deps-envs" / "mamba-farm-torch-cp311-2.11.0-cu13-aarch64-0123456789ab"
    (layer / "site").mkdir(parents=True)
    (layer / "site" / "t.so").write_bytes(blob("t"))
    (layer / ".complete").write_text("torch==2.11.0\neinops\ntriton>=3.5.0\n")
    (layer / ".last-used").touch()
    os.utime(layer / ".last-used", (now - 60, now - 60))

    def run(*args):
        return cli("cache", *args, env={"MAMBA_FARM_CACHE": str(root)}, timeout=60)

    shown = run()
    assert shown.returncode == 0 and "2 torch venv(s), 4.0 MiB" in shown.stdout, shown.stdout
    assert "cp311-torch2.11.0-aarch64/deps-envs/" in shown.stdout and "(torch==2.11.0 + einops, triton>=3.5.0)" in shown.stdout
    pruned = run("prune", "--budget", "3M")  # the least recently used goes: the layer, alone
    assert pruned.returncode == 0 and not layer.exists() and host.exists(), pruned.stdout


def _wheel(folder: Path, name: str, requires=(), tag: str = "py3-none-any", extras=(), shared=False) -> None:
    """A real wheel of NAME 1.0 holding one module (and with SHARED, a file other wheels hold too, as each CUDA 12
    library's wheel holds nvidia/__init__.py), written as a build backend would (METADATA, WHEEL, RECORD)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        **({"nvidia/__init__.py": b""} if shared else {}),
        f"{info}/METADATA": "".join(
            ["Metadata-Version: 2.1\n", f"Name: {name}\n", "Version: 1.0\n", *(f"Provides-Extra: {e}\n" for e in extras),
             *(f"Requires-Dist: {r}\n" for r in requires)]
        ).encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    digest = {k: base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b"=").decode() for k, v in files.items()}
    record = "".join(f"{k},sha256={d},{len(files[k])}\n" for k, d in digest.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-{tag}.whl", "w") as zf:
        for k, v in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(k, v)


def test_a_builds_torch_folder_is_the_smoke_venvs_torch_and_what_it_requires_linked_not_copied(tmp_path, monkeypatch):
    """What builds mount at /torch on this host's machine: torch and its requirements (through extras, markers
    judged for the venv's Python) as real pip installed them in the smoke test's venv, the same files on disk,
    the venv's own pip left out; a wheel the image's glibc cannot load leaves no folder and says which."""
    import subprocess
    import sys

    from builder.environments.markers import marker_environment

    monkeypatch.delenv("MAMBA_FARM_TIMINGS", raising=False)  # a folder of this test's, not one of the farm's runs
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "torch", ("kit[lib]", 'winonly ; sys_platform == "win32"'))
    _wheel(wheels, "kit", ('kitlib ; extra == "lib"',), extras=("lib",), shared=True)
    _wheel(wheels, "kitlib", tag="py3-none-manylinux_2_28_x86_64", shared=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), "--no-compile", "torch"]
    subprocess.run(pip, check=True)
    (site,) = venv.glob("lib/python*/site-packages")

    folder = tmp_path / "torch" / "mamba-farm-torch-cp311-1.0-cpu-x86_64"
    folder.parent.mkdir()
    env = marker_environment(python)
    assert store.torch_folder(venv, folder, "torch==1.0", env, (2, 28)) is None
    got = sorted(p.name for p in (folder / "site").iterdir())
    want = ["torch", "kit", "kitlib", "nvidia", *(f"{n}-1.0.dist-info" for n in ("torch", "kit", "kitlib"))]
    assert got == sorted(want), got
    for rel in ("torch/__init__.py", "kitlib/__init__.py", "kit-1.0.dist-info/METADATA", "nvidia/__init__.py"):
        assert (folder / "site" / rel).stat().st_ino == (site / rel).stat().st_ino, rel  # one copy on disk
    assert (folder / ".ready").read_text() == "torch==1.0\n"

    # an image older than the wheel's manylinux tag: no folder (the volume instead), and the reason names it
    older = tmp_path / "torch" / "older"
    why = store.torch_folder(venv, older, "torch==1.0", env, (2, 17))
    assert why == "kitlib-1.0.dist-info: none of its wheel's tags loads on glibc 2.17", why
    assert sorted(p.name for p in older.parent.iterdir()) == [folder.name]  # nothing half-made beside it


def test_a_torch_venv_holds_what_torch_requires_at_its_newest_never_the_seeded_setuptools(tmp_path, monkeypatch):
    """A Python 3.11 venv is seeded with setuptools 65.5, which satisfies a bare ``setuptools`` requirement (torch
    2.7's) and is too old to build with: the torch venv, and the folder a build mounts from it, hold the newest,
    as a fresh install would. Real pip, this host's pip settings (PyPI) plus a folder with the stand-in torch."""
    from packaging.version import Version

    from builder.environments.interpreters import python_prefix
    from builder.environments.markers import marker_environment
    from builder.errors import FarmError

    try:
        python = str(python_prefix("3.11", log=lambda _m: None) / "bin" / "python3")
    except FarmError as err:
        pytest.skip(f"no CPython 3.11 here: {err}")
    monkeypatch.delenv("MAMBA_FARM_TIMINGS", raising=False)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "torch", ("setuptools",))
    monkeypatch.setenv("PIP_FIND_LINKS", " ".join([str(wheels), os.environ.get("PIP_FIND_LINKS", "")]).strip())
    monkeypatch.setattr(store, "after_create", lambda *a, **k: None)  # no budget run over this test's folder
    venv = store.torch_venv(python, "torch==1.0", tmp_path / "smoke" / "cp311-torch1.0" / "torch-envs")
    (site,) = venv.glob("lib/python*/site-packages")
    (seeded,) = site.glob("setuptools-*.dist-info")
    assert Version(seeded.name.removesuffix(".dist-info").split("-")[1]) >= Version("70.1"), seeded.name
    folder = tmp_path / "torch" / "mamba-farm-torch-cp311-1.0-cpu-x86_64"
    assert store.torch_folder(venv, folder, "torch==1.0", marker_environment(python), (2, 28)) is None
    names = sorted(p.name for p in (folder / "site").iterdir())
    assert seeded.name in names and not any(n.startswith("pip") for n in names), names
