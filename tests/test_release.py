"""builder.publishing.release: the publish job's bookkeeping, on real wheels (tests/wheelmaker.py) with the farm's sidecars.

Which planned build made a wheel is read from the sidecars (a compile group's job makes several), and each wheel
goes, with its sidecar, to its product line's folder: this checkout's mamba-ssm and upstream's packages share the
name mamba-ssm, so they are two indexes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wheelmaker import CAUSAL_CONV1D, UPSTREAM_MAMBA, make_mamba_wheel, make_recipe_wheel

from builder.errors import IndexIntegrityError
from builder.publishing.index import build_index

CU13 = "cu13-torch2.14-cxx11abiTRUE"


def with_sidecar(whl: Path, spec_id: str, source: str | None) -> Path:
    spec = {"id": spec_id, "serves": []} | ({} if source is None else {"source": source})
    Path(f"{whl}.spec.json").write_text(json.dumps(spec))
    return whl


@pytest.fixture
def made(tmp_path) -> dict[str, Path]:
    """What a release's jobs uploaded, one folder per artifact: a checkout build (and one whose sidecar predates
    recipes: no 'source'), and a compile group's job holding upstream's mamba-ssm for two Pythons beside a
    causal-conv1d job."""
    a = tmp_path / "artifacts"
    label = "cu13torch2.14cxx11abitrue"  # as upstream's setup.py spells it
    made = {
        "ours": with_sidecar(
            make_mamba_wheel(a / f"wheel-{CU13}-cp311", "cu13torch2.14cxx11abiTRUE"),
            f"{CU13}-cp311-linux_x86_64",
            "checkout",
        ),
        "ours-old": with_sidecar(
            make_mamba_wheel(a / "wheel-cpu", "cputorch2.13cxx11abiTRUE"),
            "cpu-torch2.13-cxx11abiTRUE-cp311-linux_x86_64",
            None,
        ),
        "causal": with_sidecar(
            make_recipe_wheel(a / f"wheel-causal-conv1d-{CU13}", "causal-conv1d", "1.7.0", label),
            f"causal-conv1d-{CU13}-cp311-linux_x86_64",
            CAUSAL_CONV1D,
        ),
    }
    for py in ("cp311", "cp312"):
        made[f"theirs-{py}"] = with_sidecar(
            make_recipe_wheel(a / f"wheel-mamba-ssm-{CU13}", "mamba-ssm", "2.3.2.post1", label, py),
            f"mamba-ssm-{CU13}-{py}-linux_x86_64",
            UPSTREAM_MAMBA,
        )
    return made


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_split_puts_each_wheel_and_its_sidecar_in_its_lines_folder(made, tmp_path, cli):
    proc = cli(
        "release", "split", "--wheels", str(tmp_path / "artifacts"), "--out", str(tmp_path / "lines"), in_process=True
    )
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0, err
    lines = tmp_path / "lines"
    assert names(lines) == {"checkout", "upstream"}
    ours = [made["ours"], made["ours-old"]]  # no 'source' in a sidecar: this checkout, as the index reads it
    theirs = [made["theirs-cp311"], made["theirs-cp312"], made["causal"]]
    assert names(lines / "checkout") == {n for w in ours for n in (w.name, f"{w.name}.spec.json")}
    assert names(lines / "upstream") == {n for w in theirs for n in (w.name, f"{w.name}.spec.json")}
    for w in ours + theirs:  # the same bytes, sidecar and all
        line = "checkout" if w in ours else "upstream"
        assert (lines / line / w.name).read_bytes() == w.read_bytes()
        assert (lines / line / f"{w.name}.spec.json").read_text() == Path(f"{w}.spec.json").read_text()
    assert out.splitlines() == [
        f"2 wheel(s) of this repository's mamba-ssm -> {lines / 'checkout'}",
        f"3 wheel(s) of upstream's packages (from their sdists) -> {lines / 'upstream'}",
    ]
    # each folder is an index of its own; together they are refused (one distribution name, two sources)
    build_index(lines / "checkout", tmp_path / "index")
    build_index(lines / "upstream", tmp_path / "index-upstream")
    with pytest.raises(IndexIntegrityError):
        build_index(tmp_path / "artifacts", tmp_path / "mixed")


def test_split_of_one_line_makes_only_its_folder(made, tmp_path, cli):
    proc = cli(
        "release", "split", "--wheels", str(made["ours"].parent), "--out", str(tmp_path / "lines"), in_process=True
    )
    rc, _, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0, err
    assert names(tmp_path / "lines") == {"checkout"}


def test_split_refuses_a_wheel_without_its_sidecar(made, tmp_path, cli):
    Path(f"{made['causal']}.spec.json").unlink()
    proc = cli(
        "release", "split", "--wheels", str(tmp_path / "artifacts"), "--out", str(tmp_path / "lines"), in_process=True
    )
    rc, err = proc.returncode, proc.stderr
    assert rc == 2 and "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {made['causal']}: no sidecar {made['causal'].name}.spec.json"), err
    assert "upload it with the wheel" in err


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ("{not json", "not JSON"),
        ('{"source": "checkout"}', "with an 'id'"),
        ('{"id": "x", "source": "git:x"}', "not a source identity"),
    ],
)
def test_split_refuses_a_sidecar_it_cannot_read(made, tmp_path, sidecar, message, cli):
    Path(f"{made['causal']}.spec.json").write_text(sidecar)
    proc = cli(
        "release", "split", "--wheels", str(tmp_path / "artifacts"), "--out", str(tmp_path / "lines"), in_process=True
    )
    rc, _, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and message in err and "Traceback" not in err


def _collect(cli, tmp_path):
    """``release collect`` over TMP_PATH's matrix.json and artifacts/."""
    matrix, wheels = tmp_path / "matrix.json", tmp_path / "artifacts"
    return cli("release", "collect", "--matrix", matrix, "--wheels", wheels, in_process=True)


def test_collect_names_each_planned_build_built_or_failed_with_its_job(made, tmp_path, cli):
    group = f"mamba-ssm-{CU13}-linux_x86_64"
    matrix = {
        "include": [
            {"id": f"{CU13}-cp311-linux_x86_64", "ids": f"{CU13}-cp311-linux_x86_64"},
            {"id": f"{CU13}-cp312-linux_x86_64", "ids": f"{CU13}-cp312-linux_x86_64"},  # made no wheel
            {"id": group, "ids": " ".join(f"mamba-ssm-{CU13}-{py}-linux_x86_64" for py in ("cp311", "cp312", "cp313"))},
        ]
    }
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    proc = _collect(cli, tmp_path)
    rc, out, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0, err
    assert out.splitlines() == [
        f"{CU13}-cp311-linux_x86_64 {CU13}-cp311-linux_x86_64 built",
        f"{CU13}-cp312-linux_x86_64 {CU13}-cp312-linux_x86_64 failed",
        f"mamba-ssm-{CU13}-cp311-linux_x86_64 {group} built",
        f"mamba-ssm-{CU13}-cp312-linux_x86_64 {group} built",
        f"mamba-ssm-{CU13}-cp313-linux_x86_64 {group} failed",
    ]


def test_collect_refuses_what_is_not_a_plans_matrix(made, tmp_path, cli):
    (tmp_path / "matrix.json").write_text(json.dumps({"include": [{"id": "x"}]}))  # no ids: an old plan
    proc = _collect(cli, tmp_path)
    rc, _, err = proc.returncode, proc.stdout, proc.stderr
    assert rc == 2 and f"--matrix {tmp_path / 'matrix.json'}: not a plan's GitHub matrix" in err
    assert "Traceback" not in err
