"""Reproducible wheels without Docker: the one rewriter's layout, the source's time, and ``reproduce``'s comparison.

The parts the Docker rebuilds (tests/test_reproducible.py) rest on: ``relabel.write_wheel`` gives the same bytes
whatever its input's order, times and modes; the epoch comes from the source; ``builder reproduce`` names what
differs, and exits 15, not 14, when it cannot compare.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from wheelmaker import V, make_wheel

from builder.run import verify
from builder.sourcing import reproducible
from builder.verifying import relabel
from builder.verifying.compare import compare
from mamba_ssm import elf as _elf


def _real_elf() -> bytes:
    """A real shared object of this interpreter (a C extension module of the standard library)."""
    for mod in ("_decimal", "_ctypes", "_json", "_sqlite3", "_ssl", "_hashlib"):
        path = getattr(importlib.import_module(mod), "__file__", None) or ""
        if path.endswith(".so"):
            return Path(path).read_bytes()
    pytest.skip("this Python has no C extension module on disk")


def _wheel(tmp: Path, so: bytes) -> Path:
    return make_wheel(tmp, "demo", "1.0", "cp311-cp311-linux_x86_64", files={"demo/__init__.py": b"", "demo/_C.so": so})


def _shuffled(wheel: Path, dest: Path, *, when, mode: int) -> Path:
    """WHEEL's members rewritten by a careless tool: reversed order, another time, another umask."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in reversed(src.infolist()):
            zi = zipfile.ZipInfo(info.filename, date_time=when)
            zi.external_attr = mode << 16
            out.writestr(zi, src.read(info))
    return dest


def test_the_rewriter_gives_one_layout_whatever_it_is_given(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w", b"\x7fELF not really")
    a = _shuffled(wheel, tmp_path / "a.whl", when=(2026, 12, 2, 4, 0, 0), mode=0o100664)
    b = _shuffled(wheel, tmp_path / "b.whl", when=(2027, 1, 1, 0, 0, 1), mode=0o100600)
    assert a.read_bytes() != b.read_bytes()
    epoch = 1764633600  # 2025-12-02 00:00:00 UTC
    outs = [
        relabel.write_wheel(*relabel.read_members(w), tmp_path / n / "demo.whl", epoch=epoch)
        for w, n in ((a, "x"), (b, "y"))
    ]
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with zipfile.ZipFile(outs[0]) as zf:
        infos = zf.infolist()
    assert {i.date_time for i in infos} == {(2025, 12, 2, 0, 0, 0)}
    assert {(i.external_attr >> 16) for i in infos} == {0o100644}
    names = [i.filename for i in infos]
    assert names[-1].endswith(".dist-info/RECORD") and names.index("demo/_C.so") < names.index(
        "demo-1.0.dist-info/METADATA"
    )


def test_the_epoch_comes_from_the_source_not_the_clock(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "setup.py").write_text("")
    env = {**os.environ, "GIT_COMMITTER_DATE": "2024-05-06T07:08:09Z", "GIT_AUTHOR_DATE": "2024-05-06T07:08:09Z"}
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    assert reproducible.checkout_epoch(repo) == 1714979289
    assert reproducible.checkout_epoch(tmp_path) == reproducible.ZIP_FLOOR  # not a checkout: a fixed time, not now
    sdist = tmp_path / "sdist"
    sdist.mkdir()
    (sdist / "PKG-INFO").write_text("Name: x\n")
    os.utime(sdist / "PKG-INFO", (1700000000, 1700000000))
    (sdist / "setup.py").write_text("patched just now\n")
    assert reproducible.sdist_epoch(sdist) == 1700000000
    reproducible.stamp(sdist, 1700000000)
    assert {int(p.stat().st_mtime) for p in [sdist, *sdist.iterdir()]} == {1700000000}
    assert reproducible.tree_epoch(sdist) == 1700000000


def test_compare_names_the_member_its_bytes_and_the_elf_section(tmp_path: Path) -> None:
    so = _real_elf()
    good = relabel.write_wheel(*relabel.read_members(_wheel(tmp_path / "g", so)), tmp_path / "good" / "d.whl", epoch=0)
    bad_so = bytearray(so)
    bad_so[len(so) // 2] ^= 0xFF
    bad = relabel.write_wheel(
        *relabel.read_members(_wheel(tmp_path / "b", bytes(bad_so))), tmp_path / "bad" / "d.whl", epoch=0
    )
    assert compare(good, good) == []
    diffs = {d.member: d.how for d in compare(good, bad)}
    assert set(diffs) == {"demo/_C.so", "demo-1.0.dist-info/RECORD"}
    how = diffs["demo/_C.so"]
    assert f"size {len(so)} vs {len(so)}" in how and f"first difference at byte {len(so) // 2}" in how
    assert "ELF section ." in how or "ELF section (outside" in how
    # and every section whose bytes differ, by name: a section that grew moves all offsets after it
    flipped = next(sec for sec in _elf.Elf(so, "so").sections if sec.offset <= len(so) // 2 < sec.offset + sec.size)
    assert f"; sections that differ: {flipped.name} {flipped.size} vs {flipped.size} bytes" in how, how


def test_compare_names_the_zip_field_when_only_the_container_differs(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w", b"payload")
    a = relabel.write_wheel(*relabel.read_members(wheel), tmp_path / "a" / "d.whl", epoch=1700000000)
    b = relabel.write_wheel(*relabel.read_members(wheel), tmp_path / "b" / "d.whl", epoch=1700000002)
    diffs = compare(a, b)
    assert diffs and all("zip entry: date_time" in d.how for d in diffs)


def test_verify_refuses_what_it_cannot_compare(tmp_path: Path, cli) -> None:
    wheel = _wheel(tmp_path, b"x")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    cases = [
        (("--rebuild", "no-such-id", str(wheel)), 15, "no plan has a build no-such-id"),
        (("--rebuild", "x", str(wheel), "--sha256", "0" * 64), 15, f"its sha256 is {sha}"),
        (("--rebuild", "x", str(wheel), "--sha256", "nothex"), 2, "is not 64 lowercase hex digits"),
        (("--rebuild", "x", "https://127.0.0.1:9/demo.whl"), 2, "needs --sha256"),
        (("--rebuild", "x", str(tmp_path / "missing.whl")), 2, "no such wheel file"),
        (
            ("--rebuild", "x", "http://127.0.0.1:9/d.whl", "--sha256", sha),
            15,
            "could not read http://127.0.0.1:9/d.whl",
        ),
    ]
    for args, code, text in cases:
        proc = cli("reproduce", *args)
        assert proc.returncode == code, (args, proc.stderr)
        assert text in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_provenance_is_in_the_record_and_the_doctor_reads_it(tmp_path: Path) -> None:
    from builder.planning.plan import load_plan
    from builder.verifying import provenance, wheels

    spec = next(b for b in load_plan(profile="ci").builds if b.accelerator == "cpu")
    from builder.building.executors import toolchain_record

    ran = toolchain_record("host", image=None, base=None, compiler="host", toolkit=None)
    rec = provenance.record(spec, epoch=1700000000, ran=ran, commit=provenance.checkout_commit(REPO))
    assert (
        rec["source"] == {"kind": "checkout", "commit": rec["source"]["commit"]} and len(rec["source"]["commit"]) == 40
    )
    assert rec["inputs_hash"] == spec.inputs_hash and rec["executor"] == "host" and rec["image"] is None
    assert "host executor" in provenance.summary(rec)
    assert str(tmp_path) not in json.dumps(rec) and str(REPO) not in json.dumps(rec)  # no host path
    # No mamba_ssm/__init__.py in the wheel: the doctor imported is the checkout's, its metadata the wheel's.
    raw = make_wheel(
        tmp_path / "raw", "mamba-ssm", V, "cp311-cp311-linux_x86_64", files={"mamba_ssm/py.typed": b""}
    )
    out = wheels.retag(
        raw, "linux_x86_64", tmp_path / "out", epoch=1700000000, extra={provenance.NAME: provenance.dumps(rec)}
    )
    again = wheels.retag(
        raw, "linux_x86_64", tmp_path / "again", epoch=1700000000, extra={provenance.NAME: provenance.dumps(rec)}
    )
    assert out.read_bytes() == again.read_bytes()  # the record keeps the wheel reproducible
    with zipfile.ZipFile(out) as zf:
        record_file = zf.read(f"mamba_ssm-{V}.dist-info/RECORD").decode()
    assert f"mamba_ssm-{V}.dist-info/{provenance.NAME},sha256=" in record_file
    assert provenance.read_wheel(out) == rec

    # The wheel's folder comes first, and the checkout is not the working folder (`-c` puts it first on the
    # path): an editable install leaves mamba_ssm.egg-info there, and importlib.metadata takes the first
    # mamba-ssm it meets.
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(out)], check=True
    )
    code = "from mamba_ssm.doctor import facts, report; print(report._built_from(facts.provenance_facts()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"checkout {rec['source']['commit'][:12]}, build {spec.id}, inputs {spec.inputs_hash}"


def test_the_release_check_takes_one_wheel_of_each_kind_this_machine_builds(tmp_path: Path, cli) -> None:
    from builder.facts.hostenv import host_machine
    from builder.planning.plan import load_plan

    here = f"linux_{host_machine()}"
    other = "linux_aarch64" if here == "linux_x86_64" else "linux_x86_64"
    specs = load_plan(profile="ci").builds + load_plan(profile="ci-stable").builds
    for spec in specs:
        (tmp_path / f"{spec.id}.whl").write_bytes(b"")
        (tmp_path / f"{spec.id}.whl.spec.json").write_text(json.dumps(spec.to_json()))
    foreign = {"id": "elsewhere", "platform": other, "accelerator": "cpu", "source": "checkout"}
    (tmp_path / "a-first-by-name.whl").write_bytes(b"")
    (tmp_path / "a-first-by-name.whl.spec.json").write_text(json.dumps(foreign))
    (tmp_path / "a-no-sidecar.whl").write_bytes(b"")
    recipe = {
        "id": "causal-conv1d-x",
        "project": "causal-conv1d",
        "platform": here,
        "accelerator": "cu13",
        "source": "sdist:causal-conv1d==1.7.0@sha256:0",
    }
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.whl").write_bytes(b"")
    (tmp_path / "sub" / "c.whl.spec.json").write_text(json.dumps(recipe))
    picks = verify.one_per_kind(tmp_path, host_machine())
    kinds = [verify.kind_of(json.loads(Path(f"{w}.spec.json").read_text())) for _id, w, _p in picks]
    assert kinds == ["cpu", "cuda", "cpu-stable", "cuda-stable", "recipe"]
    assert all(i != "elsewhere" for i, _w, _p in picks)
    assert ("causal-conv1d-x", tmp_path / "sub" / "c.whl", "causal-conv1d") in picks
    assert {p for _i, _w, p in picks} == {"checkout", "causal-conv1d"}
    proc = cli("reproduce", "--one-per-kind", str(tmp_path / "nothing-here"))
    assert proc.returncode == 2 and "no such folder" in proc.stderr


def test_the_old_name_verify_still_runs_reproduce_and_says_so(tmp_path: Path, cli) -> None:
    proc = cli("verify", "--one-per-kind", str(tmp_path / "nothing-here"))
    assert proc.returncode == 2 and "no such folder" in proc.stderr, proc.stderr
    assert "`verify` is now `reproduce`" in proc.stderr and "Traceback" not in proc.stderr


def test_the_rebuild_uses_the_commit_the_wheel_records(tmp_path: Path) -> None:
    from builder.errors import RebuildFailed
    from builder.verifying import provenance, wheels

    def wheel_of(commit: str, name: str) -> Path:
        raw = make_wheel(tmp_path / name, "demo", "1.0", "cp311-cp311-linux_x86_64")
        rec = {"source": {"kind": "checkout", "commit": commit}}
        return wheels.retag(
            raw, "linux_x86_64", tmp_path / f"{name}-out", extra={provenance.NAME: provenance.dumps(rec)}
        )

    head = provenance.checkout_commit(REPO)
    tree = verify.recorded_source(wheel_of(head, "h"), tmp_path / "scratch")
    assert provenance.checkout_commit(tree) == head and (tree / "setup.py").is_file()
    assert not subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True, check=True
    ).stdout
    with pytest.raises(RebuildFailed, match="which this checkout cannot give"):
        verify.recorded_source(wheel_of("0" * 40, "z"), tmp_path / "scratch")
    assert verify.recorded_source(_wheel(tmp_path / "plain", b"x"), tmp_path / "scratch") is None


def test_a_dirty_tree_is_recorded_and_the_rebuild_refuses_to_promise_identity(tmp_path: Path, cli) -> None:
    """A build from a checkout with changes its commit lacks says so (provenance `dirty`); `reproduce --rebuild`
    of such a wheel exits 15 (no commit holds its source) unless --source names the tree, and the doctor's
    "built from" line shows it."""
    from builder.verifying import provenance, wheels
    from mamba_ssm.doctor import report

    tree = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(tree)], check=True, timeout=300)
    assert provenance.checkout_dirty(tree) is False
    (tree / "dist").mkdir()
    (tree / "dist" / "ignored.whl").write_bytes(b"")  # ignored by .gitignore: never in a build's snapshot
    assert provenance.checkout_dirty(tree) is False
    (tree / "scratch.py").write_text("")  # untracked, not ignored: the snapshot takes it
    assert provenance.checkout_dirty(tree) is True
    (tree / "scratch.py").unlink()
    with (tree / "setup.py").open("a") as f:
        f.write("\n")  # a tracked file changed
    assert provenance.checkout_dirty(tree) is True
    assert provenance.checkout_dirty(tmp_path / "not-a-checkout") is None

    from builder.planning.plan import load_plan

    spec = next(b for b in load_plan(profile="ci").builds if b.accelerator == "cpu")
    head = provenance.checkout_commit(tree)
    clean = provenance.record(spec, epoch=1700000000, commit=head, dirty=False)
    assert clean["source"] == {"kind": "checkout", "commit": head}  # a clean build's record is unchanged
    rec = provenance.record(spec, epoch=1700000000, commit=head, dirty=True)
    assert rec["source"] == {"kind": "checkout", "commit": head, "dirty": True}
    assert "with uncommitted changes" in provenance.summary(rec)
    assert report._built_from(rec).startswith(f"checkout {head[:12]} with uncommitted changes, build {spec.id}")
    assert "uncommitted" not in report._built_from(clean)

    raw = make_wheel(tmp_path / "raw", "demo", "1.0", "cp311-cp311-linux_x86_64")
    wheel = wheels.retag(raw, "linux_x86_64", tmp_path / "out", extra={provenance.NAME: provenance.dumps(rec)})
    refused = cli("reproduce", "--rebuild", spec.id, str(wheel))
    assert refused.returncode == 15, refused.stderr
    assert f"built from commit {head[:12]} with uncommitted changes" in refused.stderr
    assert "--source" in refused.stderr and "Traceback" not in refused.stderr
    # with --source the caller vouches for the tree: compared (here the id is unknown, so it stops there)
    vouched = cli("reproduce", "--rebuild", "no-such-build", str(wheel), "--source", str(tree))
    assert "warning: " in vouched.stderr and "as given" in vouched.stderr
    assert vouched.returncode == 15 and "no plan has a build" in vouched.stderr
