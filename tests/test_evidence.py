"""builder.verifying.evidence: a wheel's record of what was checked, carried by the index and a release.

Real wheels (tests/wheelmaker.py) and the real index; the records are what the farm writes (evidence.make over
the verifier's and smoke test's returns, here given as those functions return them), and hostile ones are refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from wheelmaker import V, make_mamba_wheel

from builder.errors import UsageError
from builder.publishing.index import build_index
from builder.publishing.index.generation import load_manifest
from builder.verifying import evidence

LABEL = "cputorch2.13cxx11abiTRUE"

# as builder.verifying.wheels.verify_wheel and smoke_test return them for a CPU wheel
VERIFIED = {
    "tags": ["cp311-cp311-linux_x86_64"], "abi": {"_C.cpython-311-x86_64-linux-gnu.so": "cxx11"}, "archs": [],
    "machine": "x86_64", "extensions": ["mamba_ssm/_C.cpython-311-x86_64-linux-gnu.so"],
    "repaired": "manylinux_2_34_x86_64",
}  # fmt: skip
SMOKE = {
    "line": "smoke ok",
    "imported": {"torch": "2.13.0+cpu", "python": "3.11.7", "modules": ["mamba_ssm"], "api": ["selective_scan_fn"]},
    "numerics": [{"check": "selective_scan_fn vs float64 reference", "device": "cpu", "max_abs_error": 1e-7,
                  "tolerance": 1e-4}],
}  # fmt: skip


def recorded(wheel: Path, smoke: dict | None = SMOKE, verified: dict = VERIFIED) -> dict:
    rec = evidence.make(wheel, built={"id": "x", "executor": "docker"}, verified=verified, smoke=smoke)
    evidence.write(evidence.path_of(wheel), rec)
    return rec


def test_a_record_says_what_was_checked_and_its_tier(tmp_path):
    wheel = make_mamba_wheel(tmp_path, LABEL)
    rec = recorded(wheel)
    assert rec["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest() and rec["wheel"] == wheel.name
    assert evidence.read(evidence.path_of(wheel)) == rec
    assert evidence.tier(rec) == "cpu-checked"
    line = evidence.line(rec)
    assert line.startswith("verified (tags cp311-cp311-linux_x86_64, ABI cxx11, no device code, ELF x86_64, "
                           "repaired manylinux_2_34_x86_64), smoke-tested (imports mamba_ssm; API selective_scan_fn; "
                           "numerics selective_scan_fn vs float64 reference on cpu) with torch 2.13.0+cpu"), line  # fmt: skip
    # imported without numerics (upstream's packages: no CPU path), or not smoke-tested: compiled only
    assert evidence.tier({**rec, "numerics": []}) == "compiled"
    assert evidence.tier(evidence.make(wheel, built=None, verified=VERIFIED, smoke=None)) == "compiled"
    assert "not smoke-tested" in evidence.line(evidence.make(wheel, built=None, verified=VERIFIED, smoke=None))
    assert evidence.tier(None) == "planned"


def test_a_recipe_test_commands_output_is_kept_neutralised_and_a_figure_shown_on_the_line(tmp_path):
    from builder.verifying.smoke import MAX_COMMAND_OUTPUT, recipe_ran

    commands = (("python", "-c", "print(err)"), ("python", "-c", "print(log)"), ("python", "-c", "print(evil)"))
    outputs = [("max_abs_error 3.1e-07 (tolerance 1e-04)\n", "UserWarning: no numpy\n"), ("line\n" * 2000, ""),
               ("\x1b]0;owned\x07 \u202e 42\n", "")]
    smoke = recipe_ran({"torch": "2.14.1", "python": "3.11.7"}, "torch==2.14.1", ("torch", "up"), commands, (), outputs)
    rec = recorded(make_mamba_wheel(tmp_path, LABEL), smoke=smoke)
    kept = [c["output"] for c in evidence.read(evidence.path_of(tmp_path / rec["wheel"]))["imported"]["commands"]]
    assert kept[0] == "max_abs_error 3.1e-07 (tolerance 1e-04)"  # stdout; a library's warning kept apart
    assert rec["imported"]["commands"][0]["stderr"] == "UserWarning: no numpy"
    assert "stderr" not in rec["imported"]["commands"][1]
    assert kept[1].startswith("...") and len(kept[1]) <= MAX_COMMAND_OUTPUT + 3  # capped: its end kept
    assert "\x1b" not in kept[2] and "\u202e" not in kept[2] and "\\x1b" in kept[2]  # escaped, not live
    line = evidence.line(rec)
    # a figure (one short line with a number) is on the wheel's line; a long log is not
    assert "test command 1 printed max_abs_error 3.1e-07 (tolerance 1e-04)" in line and "test command 2" not in line
    assert "test command 3 printed \\x1b]0;owned\\x07 \\u202e 42" in line and "\x1b" not in line
    # a record whose outputs are not what the farm writes is refused
    bad = {**rec, "imported": {**rec["imported"], "commands": [{"argv": "x", "output": "y" * 5000}]}}
    evidence.path_of(tmp_path / rec["wheel"]).write_text(json.dumps(bad))
    with pytest.raises(UsageError, match="'imported.commands' is not a list of at most 64 commands"):
        evidence.read(evidence.path_of(tmp_path / rec["wheel"]))


def test_the_docker_smoke_splits_each_commands_stdout_and_stderr_by_its_markers():
    from builder.verifying.smoke import COMMAND_MARK as _COMMAND_MARK
    from builder.verifying.smoke import command_outputs as _command_outputs

    lines = ["evidence {}", f"{_COMMAND_MARK}0", "0.75 cuda", f"{_COMMAND_MARK}err", "UserWarning: no numpy",
             f"{_COMMAND_MARK}end", f"{_COMMAND_MARK}1", "ok", f"{_COMMAND_MARK}err", f"{_COMMAND_MARK}end"]  # fmt: skip
    assert _command_outputs(lines, 2) == [("0.75 cuda", "UserWarning: no numpy"), ("ok", "")]


def test_a_gpu_run_raises_the_tier_and_a_cpu_dry_run_does_not(tmp_path):
    wheel = make_mamba_wheel(tmp_path, "cu13torch2.14cxx11abiTRUE")
    recorded(wheel)
    path = evidence.path_of(wheel)
    dry = {"device": "cpu", "gpu": "none (cpu)", "sm": None, "check": "gpu_check numerics", "passed": True}
    assert evidence.tier(evidence.append_gpu(path, dry)) == "cpu-checked"
    failed = {"device": "cuda", "gpu": "NVIDIA H100", "sm": "sm_90", "check": "gpu_check numerics", "passed": False}
    assert evidence.tier(evidence.append_gpu(path, failed)) == "cpu-checked"
    rec = evidence.append_gpu(path, {**failed, "passed": True})
    assert evidence.tier(rec) == "gpu-run" and len(rec["gpu"]) == 3
    assert evidence.tier_detail(rec) == "gpu-run (NVIDIA H100 (sm_90))"
    assert evidence.read(path) == rec  # (written back with one rename)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "not JSON"),
        (b"[]", "expected dict"),
        (b'{"schema": 9}', "schema 9"),
        (b"[" * 100 + b"]" * 100, "nested deeper"),
        (json.dumps({"schema": 1, "wheel": "w", "sha256": "zz"}).encode(), "64 hex"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_hostile_records_are_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "w.whl.evidence.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as exc:
        evidence.read(path)
    assert str(path) in str(exc.value)


def test_a_record_of_other_bytes_or_too_large_or_not_a_file_is_refused(tmp_path):
    wheel = make_mamba_wheel(tmp_path, LABEL)
    rec = recorded(wheel)
    with pytest.raises(UsageError, match="the record is of sha256"):
        evidence.read(evidence.path_of(wheel), wheel_sha256="0" * 64)
    big = tmp_path / "big.whl.evidence.json"
    big.write_text(json.dumps({**rec, "pad": "x" * evidence.MAX_BYTES}))
    with pytest.raises(UsageError, match="big.whl.evidence.json"):
        evidence.read(big)
    fifo = tmp_path / "fifo.whl.evidence.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file|regular"):
        evidence.read(fifo)


# ---------------------------------------------------------------- the index carries it


def _store(out: Path) -> Path:
    return out.parent / f".{out.name}.d" / "store"


def test_the_index_serves_the_record_beside_the_wheel_with_its_tier(tmp_path):
    wheels, out = tmp_path / "wheels", tmp_path / "index"
    wheel = make_mamba_wheel(wheels, LABEL)
    rec = recorded(wheel)
    build_index(wheels, out)
    served = out / "files" / (wheel.name + evidence.SUFFIX)
    assert json.loads(served.read_text()) == rec
    entry = load_manifest(out.resolve())["files"][wheel.name]
    assert entry.tier == "cpu-checked (imported with torch 2.13.0+cpu)"
    assert entry.evidence_sha256 == hashlib.sha256(served.read_bytes()).hexdigest()
    assert 'data-tier="cpu-checked"' in (out / "index.html").read_text()

    # the GPU gate appended a run: the next run serves the new record, the manifest its tier
    evidence.append_gpu(
        evidence.path_of(wheel), {"device": "cuda", "gpu": "NVIDIA A100", "sm": "sm_80", "passed": True}
    )
    build_index(wheels, out)
    assert len(json.loads((out / "files" / served.name).read_text())["gpu"]) == 1
    assert load_manifest(out.resolve())["files"][wheel.name].tier == "gpu-run (NVIDIA A100 (sm_80))"

    # a run given the wheel without its record keeps the published one (what was proven is never dropped)
    evidence.path_of(wheel).unlink()
    build_index(wheels, out)
    assert load_manifest(out.resolve())["files"][wheel.name].tier.startswith("gpu-run")
    assert (out / "files" / served.name).is_file()

    # the served record is checked like the wheel: altered, the next run refuses to publish
    (_store(out) / served.name).write_text("{}")
    from builder.errors import IndexIntegrityError

    with pytest.raises(IndexIntegrityError, match=r"evidence\.json: sha256 is"):
        build_index(wheels, out)


def test_the_index_refuses_a_record_of_other_bytes_and_publishes_nothing(tmp_path):
    wheels, out = tmp_path / "wheels", tmp_path / "index"
    wheel = make_mamba_wheel(wheels, LABEL)
    other = make_mamba_wheel(tmp_path / "other", LABEL, python="cp312")
    rec = recorded(other)
    evidence.write(evidence.path_of(wheel), {**rec})  # a record of another wheel, under this one's name
    with pytest.raises(UsageError, match="the record is of sha256"):
        build_index(wheels, out)
    assert not out.exists() and not [p for p in _store(out).iterdir()]
    evidence.write(evidence.path_of(wheel), {**rec, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()})
    with pytest.raises(UsageError, match="not " + wheel.name.replace("+", r"\+")):
        build_index(wheels, out)


def test_a_wheel_without_a_record_is_indexed_with_no_tier(tmp_path):
    wheels, out = tmp_path / "wheels", tmp_path / "index"
    wheel = make_mamba_wheel(wheels, LABEL)
    build_index(wheels, out)
    assert load_manifest(out.resolve())["files"][wheel.name].tier is None
    assert not (out / "files" / (wheel.name + evidence.SUFFIX)).exists()
    # its first record joins it later
    recorded(wheel)
    build_index(wheels, out)
    assert load_manifest(out.resolve())["files"][wheel.name].tier.startswith("cpu-checked")


def test_release_split_carries_the_record_to_its_line(tmp_path):
    from builder.publishing.release import split

    wheel = make_mamba_wheel(tmp_path / "a", LABEL)
    Path(f"{wheel}.spec.json").write_text(json.dumps({"id": "x", "serves": [], "source": "checkout"}))
    rec = recorded(wheel)
    bare = make_mamba_wheel(tmp_path / "a", LABEL, python="cp312")  # built before records: still split
    Path(f"{bare}.spec.json").write_text(json.dumps({"id": "y", "serves": [], "source": "checkout"}))
    split(tmp_path / "a", tmp_path / "lines")
    assert json.loads((tmp_path / "lines" / "checkout" / (wheel.name + evidence.SUFFIX)).read_text()) == rec
    assert (tmp_path / "lines" / "checkout" / bare.name).is_file()
    assert not (tmp_path / "lines" / "checkout" / (bare.name + evidence.SUFFIX)).exists()


# ---------------------------------------------------------------- tiers from the ledger and the plan


def _record_of(spec, tmp_path: Path, smoke: dict | None = SMOKE, gpu: list | None = None) -> dict:
    """The record a real build of SPEC would write (its wheel made here under the name the farm gives it)."""
    from wheelmaker import make_wheel

    from builder.publishing.tiers import build_kind

    _line, project, _label, python, machine = build_kind(spec)
    tag = f"{python}-manylinux_2_34_{machine}"
    version = spec.source.partition("==")[2].partition("@")[0] if spec.from_recipe else V  # its release
    wheel = make_wheel(tmp_path / spec.id, project, f"{version}+{spec.label}", tag, requires=("torch",))
    source = {"kind": "sdist", "name": project} if spec.from_recipe else {"kind": "checkout", "commit": "0" * 40}
    rec = evidence.make(
        wheel, built={"id": spec.id, "source": source}, verified={**VERIFIED, "tags": [tag]}, smoke=smoke
    )
    rec["gpu"] = gpu or []
    return rec


def test_cell_tiers_come_from_records_of_the_same_wheel_kind(tmp_path):
    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    plan = load_plan(profile="release")
    stable_cpu = next(b for b in plan.builds if b.stable and b.accelerator == "cpu" and b.platform == "linux_x86_64")
    upstream = next(b for b in plan.builds if b.project == "causal-conv1d" and b.accelerator == "cu13")
    ours_cu13 = next(b for b in plan.builds if not b.from_recipe and b.accelerator == "cu13" and not b.stable)
    gpu = [{"device": "cuda", "gpu": "NVIDIA H100", "sm": "sm_90", "passed": True}]
    records = [
        _record_of(stable_cpu, tmp_path),  # imported and numerics: cpu-checked, for every cell the stable wheel serves
        _record_of(upstream, tmp_path, smoke={**SMOKE, "numerics": []}),  # imported only: compiled
        _record_of(ours_cu13, tmp_path, gpu=gpu),
    ]
    found = tiers.cell_tiers(plan, records)
    by_build = {}
    for _cell, b, t, _rec in found:
        by_build.setdefault(b.id, set()).add(t)
    assert by_build[upstream.id] == {"compiled"} and by_build[ours_cu13.id] == {"gpu-run"}
    # the stable wheel was imported with torch 2.13: its 2.13 cells are cpu-checked, the other torches it serves
    # only compiled (nothing imported it with them)
    stable_cells = {(c.torch, t) for c, b, t, _r in found if b.id == stable_cpu.id}
    assert {t for torch, t in stable_cells if torch == "2.13"} == {"cpu-checked"}
    assert {t for torch, t in stable_cells if torch != "2.13"} == {"compiled"} and len(stable_cells) > 2
    from builder.planning.plan import served_cells

    c = tiers.counts(plan, records)
    assert c["checkout"]["cpu-checked"] == sum(1 for x in served_cells(plan, stable_cpu) if x.torch == "2.13") > 1
    assert c["upstream"]["compiled"] == len(served_cells(plan, upstream)) == 1
    assert sum(c["checkout"].values()) + sum(c["upstream"].values()) == len(found)
    # a record of upstream's mamba-ssm never counts for this repository's mamba-ssm of the same label
    twin = next(b for b in plan.builds if b.project == "mamba-ssm" and b.from_recipe and b.label == ours_cu13.label
                and b.python == ours_cu13.python and b.platform == ours_cu13.platform)  # fmt: skip
    assert tiers.build_kind(twin) != tiers.build_kind(ours_cu13)
    assert by_build.get(twin.id) == {"planned"}


def test_the_ledger_refuses_a_planted_claim_and_a_build_that_no_longer_proves_it(tmp_path):
    import dataclasses

    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    plan = load_plan(profile="ci")
    spec = plan.builds[0]
    fresh = _record_of(spec, tmp_path)
    # a ledger that claims a GPU ran it, when the build now proves only the CPU checks: an overclaim
    planted = {**fresh, "gpu": [{"device": "cuda", "gpu": "NVIDIA H100", "sm": "sm_90", "passed": True}]}
    (problem,) = tiers.overclaims([planted], [fresh])
    assert "the ledger says gpu-run (NVIDIA H100 (sm_90))" in problem and "this build proves cpu-checked" in problem
    assert tiers.overclaims([fresh], [fresh]) == [] and tiers.overclaims([fresh], [planted]) == []
    # a record of a wheel kind no plan builds (a label typed in by hand), or whose tags are not its wheel's
    ghost = _record_of(dataclasses.replace(spec, label="cputorch9.9cxx11abiTRUE"), tmp_path / "ghost")
    assert any("no build of the plan makes" in p for p in tiers.check_ledger([ghost], [plan]))
    lying = {**fresh, "verified": {**fresh["verified"], "tags": ["cp311-cp311-manylinux_2_17_x86_64"]}}
    assert any("verified tags" in p for p in tiers.check_ledger([lying], [plan]))
    assert tiers.check_ledger([fresh], [plan]) == []


def test_the_docs_build_fails_on_a_ledger_claim_that_no_longer_stands(tmp_path, monkeypatch):
    import dataclasses
    import sys

    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
    import refgen

    spec = load_plan(profile="ci").builds[0]
    ledger = tmp_path / "evidence.json"
    ghost = _record_of(dataclasses.replace(spec, label="cputorch9.9cxx11abiTRUE"), tmp_path)
    ledger.write_text(json.dumps({"schema": 1, "records": [ghost]}))
    monkeypatch.setattr(tiers, "LEDGER", ledger)
    monkeypatch.setattr(tiers.load_ledger, "__defaults__", (ledger,))
    refgen._ledger_tiers.cache_clear()
    try:
        with pytest.raises(ValueError, match="no build of the plan makes this kind of wheel"):
            refgen.support_markdown()
    finally:
        refgen._ledger_tiers.cache_clear()


def test_harvest_reads_real_records_beside_their_wheels_into_the_ledger(tmp_path):
    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    spec = load_plan(profile="ci").builds[0]
    rec = _record_of(spec, tmp_path / "dist")
    wheel = tmp_path / "dist" / spec.id / rec["wheel"]
    evidence.write(evidence.path_of(wheel), rec)
    ledger = tmp_path / "ledger.json"
    assert tiers.harvest(tmp_path / "dist", ledger) == (1, 1)
    (kept,) = tiers.load_ledger(ledger)
    assert kept["sha256"] == rec["sha256"] and evidence.tier(kept) == "cpu-checked"
    # a record beside other bytes is refused, and the ledger is left as it was
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(UsageError, match="the record is of sha256"):
        tiers.harvest(tmp_path / "dist", ledger)
    assert tiers.load_ledger(ledger) == [kept]


def _hip_record(archs, image="mamba-farm/hip-toolchain:0123456789abcdef"):
    """What hip-compile --evidence writes, made by its own function from the audit's results for ARCHS."""
    from builder.building import hip
    from builder.run.hip import record

    objs = tuple(hip.CodeObject(f"hipv4-amdgcn-amd-amdhsa--{a}", a, 40960, ("scan_fwd_kernel",)) for a in archs)
    done = [hip.Compiled(f"hip/{tu}.hip", Path(f"/w/{tu}.o"), 1.0, 1.0, tuple(archs), objs, (), image)
            for tu in ("selective_scan_fwd", "selective_scan_bwd")]  # fmt: skip
    return record("5.7.1", done)


def test_a_rocm_cell_says_hip_compiled_only_as_its_hip_record_says(tmp_path, capsys):
    """The tier text of a ROCm cell follows the ledger's HIP compile record: without one it is plain planned; with
    one it says which of the cell's targets were compiled, with which toolchain, and that nothing was linked; the
    tier itself stays planned."""
    from builder.commands.cli import main
    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    plan = load_plan(profile="release")
    ledger = tmp_path / "evidence.json"
    ledger.write_text(json.dumps({"schema": 1, "records": tiers.load_ledger()}))
    records = tiers.load_ledger(ledger)
    found = tiers.cell_tiers(plan, records)
    rocm = [(b, t, r) for _c, b, t, r in found if b.label.startswith("hip")]
    assert rocm and all(t == "planned" and r is None for b, t, r in rocm)
    assert {tiers.cell_detail(b, t, r, tiers.load_hip(ledger)) for b, t, r in rocm} == {"planned"}
    assert main(["evidence", "tiers", "--ledger", str(ledger)]) == 0
    before = capsys.readouterr().out
    assert "HIP compiled" not in before

    path = tmp_path / "hip.evidence.json"
    evidence.write(path, _hip_record(("gfx90a", "gfx942", "gfx1100")))
    assert main(["evidence", "harvest", "--hip", str(path), "--ledger", str(ledger)]) == 0
    assert "HIP compile of gfx90a, gfx942, gfx1100 (HIP 5.7.1, linked: false)" in capsys.readouterr().out
    assert tiers.load_ledger(ledger) == records and [h["archs"] for h in tiers.load_hip(ledger)] == [
        ["gfx90a", "gfx942", "gfx1100"]
    ]
    hip = tiers.load_hip(ledger)
    said = {b.id: tiers.cell_detail(b, t, r, hip) for b, t, r in rocm}
    ours = [b for b, _t, _r in rocm if not b.from_recipe]
    tail = "; HIP 5.7.1 in mamba-farm/hip-toolchain:0123456789abcdef), never linked against a ROCm torch"
    for b in ours:
        left = [a for a in b.archs if a not in ("gfx90a", "gfx942", "gfx1100")]
        want = "planned: HIP compiled (" + ", ".join(a for a in b.archs if a not in left)
        assert said[b.id] == want + (f"; not {', '.join(left)}" if left else "") + tail, said[b.id]
    assert any("; not gfx950" in said[b.id] for b in ours) and any("; not" not in said[b.id] for b in ours)
    # the kernels compiled are this checkout's: upstream's ROCm cells stay plain planned
    assert {said[b.id] for b, _t, _r in rocm if b.from_recipe} == {"planned"}
    assert tiers.counts(plan, tiers.load_ledger(ledger)) == tiers.counts(plan, records)  # no tier moved
    assert main(["evidence", "tiers", "--ledger", str(ledger)]) == 0
    after = capsys.readouterr().out
    assert after.splitlines()[0] == before.splitlines()[0]
    n = sum(1 for c, b, t, _r in found if b.label.startswith("hip") and not b.from_recipe)
    shown = [ln for ln in after.splitlines() if "HIP compiled" in ln]
    assert sum(int(ln.split()[0]) for ln in shown) == n and all(ln.endswith("ROCm torch") for ln in shown)

    # another record, of one target: the text follows it (and replaces the line's earlier record)
    evidence.write(path, _hip_record(("gfx90a",)))
    assert main(["evidence", "harvest", "--hip", str(path), "--ledger", str(ledger)]) == 0
    (one,) = tiers.load_hip(ledger)
    b = ours[0]
    assert tiers.cell_detail(b, "planned", None, [one]).startswith("planned: HIP compiled (gfx90a; not gfx942")
    # a wheel record of the cell speaks instead
    rec = records[0]
    assert tiers.cell_detail(b, evidence.tier(rec), rec, [one]) == evidence.tier_detail(rec)
    # a record that says it linked, or lists no gfx target, is refused
    for bad in ({**one, "linked": True}, {**one, "archs": ["sm_80"]}, {**one, "archs": []}):
        path.write_text(json.dumps(bad))
        assert main(["evidence", "harvest", "--hip", str(path), "--ledger", str(ledger)]) == UsageError.exit_code
        assert "not a HIP compile record the farm wrote" in capsys.readouterr().err
    assert tiers.load_hip(ledger) == [one]
    assert main(["evidence", "harvest", "--ledger", str(ledger)]) == UsageError.exit_code
    assert "nothing to read" in capsys.readouterr().err
